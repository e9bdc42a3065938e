/* fair.h — fair steps for continuous batching (used by sched.c; pure, so unit-tested
 * alone: tests/unit/test_fair.c).
 *
 * Every sequence in a step waits for the whole step, and on a compute-bound backend each
 * row costs time. While requests of several sequences (n > 1, "heavy": bulk work by nature)
 * share the batch with one-sequence requests ("light"), each light request keeps its row
 * and the heavy requests together get one row plus only as many more as keep the step
 * within (1 + share) x the time of that step (light rows + 1), by a line fitted to measured
 * decode steps (whole-step seconds against sequences). Of the heavy requests' sequences the
 * least advanced (fewest tokens generated) go first, so a request's choices advance
 * together and none starves. Where rows are nearly free (a GPU) the line is flat and
 * nothing is held out; with no light request present the heavy ones fill the batch. */
#ifndef KIPP_ENGINE_FAIR_H
#define KIPP_ENGINE_FAIR_H

#include <stdint.h>

/* Decayed least-squares sums over decode-only steps (decay KIPP_FIT_DECAY per step). */
#define KIPP_FIT_DECAY 0.95
typedef struct {
    double w, n, nn, t, nt; /* weight, sequences, sequences^2, seconds, sequences x seconds */
} kipp_step_fit;

/* A decode-only step with n sequences took dt seconds (n = 0 or dt <= 0: ignored). */
void kipp_step_fit_add(kipp_step_fit *f, uint32_t n, double dt);

/* Step seconds ~ a + b x sequences: least squares when the steps seen vary in size (a
 * variance of sequences above 1/4), else slope `fallback_b` (> 0; e.g. the seconds per
 * prompt token measured in prompt-heavy steps). The slope is clamped to [0, mean seconds /
 * mean sequences] (no negative fixed cost). 0: too little measured (weight under 2, or no
 * spread and no fallback). */
int kipp_step_fit_line(const kipp_step_fit *f, double fallback_b, double *a, double *b);

/* A running sequence as the step sees it. */
enum { KIPP_FAIR_OUT = 0, KIPP_FAIR_DECODE, KIPP_FAIR_PREFILL };

/* Chooses the decoding sequences of this step. n sequences; grp[i]: its request (the index
 * of the request's first sequence, so grp[i] <= i and grp[grp[i]] == grp[i]); kind[i] one
 * of KIPP_FAIR_*; progress[i] the tokens it has generated. keep[i] = 1 for each decoding
 * sequence in the step, 0 otherwise. A cap applies only when at least two requests are in
 * the step, one of them light (a single decoding or prefilling sequence) and one heavy (two
 * or more decoding sequences), share >= 0 and b > 0. Then every decoding sequence of a
 * request with fewer than two keeps its row (n_fixed of them), and the heavy requests'
 * sequences go least advanced first (the lower index among equals), at least one, up to
 * n_fixed + 1 + floor(share x (a + b x (n_fixed + 1)) / b) in all. Returns the sequences
 * kept. */
uint32_t kipp_fair_select(uint32_t n, const uint32_t *grp, const uint8_t *kind, const uint32_t *progress,
                          double share, double a, double b, uint8_t *keep);

#endif
