/* fair.h — fair steps for continuous batching (used by sched.c; pure, so unit-tested
 * alone: tests/unit/test_fair.c).
 *
 * Every sequence in a step waits for the whole step, and on a compute- or memory-bound
 * backend each row costs time — a row deep in its context most, since its attention reads
 * every KV position it has. While requests of several sequences (n > 1, "heavy": bulk work
 * by nature) share the batch with one-sequence requests ("light"), each light request keeps
 * its row and the heavy requests together get rows worth about share x the time of the
 * light rows' step, on average over steps (a row dearer than that waits a few steps), by a
 * model fitted to measured decode steps: seconds ~ a + b x sequences + c x KV positions,
 * plus each row's own draw (kipp_fair_draw_cost: the sampler and log-probabilities, which
 * differ from request to request far more than the forward's rows do). Of
 * the heavy requests' sequences the least advanced (fewest tokens generated) go first, so a
 * request's choices advance together and none starves. Where rows are nearly free (a GPU)
 * the model is flat and nothing is held out; with no light request present the heavy ones
 * fill the batch, unless light requests are expected (one arrived lately): then the step
 * is sized as if one were present, its row given to the heavy ones, so the one that
 * arrives mid-step waits for a step no longer than the steps it will share. */
#ifndef KIPP_ENGINE_FAIR_H
#define KIPP_ENGINE_FAIR_H

#include <stdint.h>

/* Decayed least-squares sums over decode-only steps (decay KIPP_FIT_DECAY per step). */
#define KIPP_FIT_DECAY 0.95
typedef struct {
    double w, n, nn, t, nt;    /* weight, sequences, sequences^2, seconds, sequences x seconds */
    double d, dd, nd, dt;      /* KV positions read (d), d^2, sequences x d, d x seconds */
} kipp_step_fit;

/* A decode-only step with n sequences, whose attention read kv KV positions in all (the
 * sum of the rows' context lengths), took dt seconds (n = 0 or dt <= 0: ignored). */
void kipp_step_fit_add(kipp_step_fit *f, uint32_t n, double kv, double dt);

/* Step seconds ~ a + b x sequences: least squares when the steps seen vary in size (a
 * variance of sequences above 1/4), else slope `fallback_b` (> 0; e.g. the seconds per
 * prompt token measured in prompt-heavy steps). The slope is clamped to [0, mean seconds /
 * mean sequences] (no negative fixed cost). 0: too little measured (weight under 2, or no
 * spread and no fallback). */
int kipp_step_fit_line(const kipp_step_fit *f, double fallback_b, double *a, double *b);

/* Step seconds ~ a + b x sequences + c x KV positions: least squares over both where the
 * KV positions vary (a variance above KIPP_FIT_MIN_KV_VAR) apart from the sequences (their
 * squared correlation under 0.9) and the sequences vary too; where only the KV positions
 * vary, b is the fallback (or 0) and c their slope; otherwise, or where a coefficient
 * would come out negative, the line above with c = 0. 0: no line either. */
#define KIPP_FIT_MIN_KV_VAR 64.0
int kipp_step_fit_plane(const kipp_step_fit *f, double fallback_b, double *a, double *b, double *c);

/* Step seconds by rows. The plane above is a line in the rows, and on a CPU a step's time
 * is not: one row runs the matrix-vector kernels, two or more the matrix-matrix ones
 * (kernel choice by token count), so on 2 cores (Qwen3-0.6B Q8_0) a lone plain request's
 * step took 33 ms, with one row beside it 45 ms, with 5 beside it 75 ms. A line through
 * the fuller batches priced a row at 3-4 ms and a lone request's step at 55 ms, so beside
 * one plain request the pool took all five of its rows (twice the plain step). The table
 * keeps each row count's decode-only step seconds (its KV term, the plane's c, taken off;
 * draws aside) as a shape g(n) times a speed s: a busy 2-core VM runs the same step
 * 1.5x slower for a minute, and under load some row counts are not seen for minutes (a
 * step of one plain request alone), so each step moves the speed (s <- s + ALPHA_S (dt /
 * g(n) - s)) and its own count's shape slowly (g(n) <- g(n) + ALPHA_G (dt / s - g(n))),
 * and a count measured long ago is priced at today's speed. The fair choice prices a step
 * of m rows at s g(m) and each pool row at the step it adds. */
#define KIPP_FAIR_ROWS_ALPHA_S 0.2
#define KIPP_FAIR_ROWS_ALPHA_G 0.1
typedef struct {
    double *g;        /* [n_max + 1] shape by rows */
    uint8_t *seen;    /* [n_max + 1] */
    uint32_t n_max;
    double speed;     /* 0 until a step is measured */
} kipp_fair_rows;
/* A decode-only step of n rows (1..n_max; others ignored) took dt seconds. */
void kipp_fair_rows_add(kipp_fair_rows *r, uint32_t n, double dt);
/* The seconds of a step of n rows at the present speed: measured, or linear between the
 * nearest measured row counts on either side, or past the last measured one on one side
 * at `slope` a row (not under 0); n = 0: 0. -1 when nothing is measured. */
double kipp_fair_rows_at(const kipp_fair_rows *r, uint32_t n, double slope);
/* A row's draw (sampling over the vocabulary, log-probabilities) as step time: its measured
 * seconds spread over the n_host threads that draw a step's rows in parallel (n_host < 1
 * counts as 1; draw_s <= 0 costs nothing). */
double kipp_fair_draw_cost(double draw_s, int n_host);

/* A running sequence as the step sees it. */
enum { KIPP_FAIR_OUT = 0, KIPP_FAIR_DECODE, KIPP_FAIR_PREFILL };

/* What the heavy requests' pool carries from step to step: time it was allowed and did not
 * use (a row that did not fit waits for it), and the steps it has gone without a row. */
#define KIPP_FAIR_MAX_WAIT 8 /* a pool never waits more steps than this for a row */
typedef struct {
    double credit;
    uint32_t waited;
} kipp_fair_state;

/* Chooses the decoding sequences of this step. n sequences; grp[i]: its request (the index
 * of the request's first sequence, so grp[i] <= i and grp[grp[i]] == grp[i]); kind[i] one
 * of KIPP_FAIR_*; progress[i] the tokens it has generated; cost[i] the seconds its row adds
 * to a step (>= 0), a the step's fixed seconds; bulk (NULL: none) bulk[g] != 0 for a
 * request that asked for several sequences (n > 1), read at its first sequence g. keep[i]
 * = 1 for each decoding sequence in the step, 0 otherwise. A cap applies only when share
 * >= 0, some request is heavy (two or more decoding sequences, or one of a bulk request:
 * the last sequences of an n > 1 request running, the others parked, queued or done, are
 * still bulk work) and another is light (a single decoding or prefilling sequence of a
 * request that is not bulk), or ghost > 0 (a light request is expected; its row would
 * cost ghost seconds) and no light one is there. Then every decoding sequence of a request
 * that is not heavy keeps its row (the fixed rows), and the heavy requests' sequences (the pool) go least
 * advanced first (the lower index among equals), each while its cost fits what the pool
 * may still spend: share x (a + the fixed rows' costs) plus the credit st carries — with a
 * ghost, (1 + share) x (a + ghost) - a, the expected request's row being the pool's until
 * it comes; the first that does not fit ends the choice. The first of the pool goes in
 * regardless with a ghost (nothing else would run) and after KIPP_FAIR_MAX_WAIT steps
 * without a row. inc (NULL: none): the k-th row the pool takes (k from 0) costs inc[k]
 * more than its cost[] (the step a row count adds, kipp_fair_rows; [n]). What the pool
 * could not spend because a row did not fit is carried to the next step (st->credit), so
 * a row dearer than one step's allowance runs every few steps
 * and the pool's rows cost about share of the others' time on average. Uncapped (and
 * when the whole pool fits) the carry is dropped. A NaN or infinite allowance: no cap.
 * Returns the sequences kept. */
uint32_t kipp_fair_select(uint32_t n, const uint32_t *grp, const uint8_t *kind, const uint8_t *bulk,
                          const uint32_t *progress, const double *cost, const double *inc, double share, double a,
                          double ghost, kipp_fair_state *st, uint8_t *keep);

#endif
