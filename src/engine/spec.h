/* spec.h — speculative decoding: the drafters (a draft model with its own KV pool, or
 * prompt lookup over the token history), the verification of a drafted run against the
 * target's logits rows, and the choice of how many tokens to draft. The CLI's generation
 * loop (src/cli/generate.c) and the scheduler (sched.c) share it. Design and the
 * exactness argument: docs/speculative.md. */
#ifndef KIPP_ENGINE_SPEC_H
#define KIPP_ENGINE_SPEC_H

#include "kipp.h"

#include <stdint.h>

#define KIPP_SPEC_MAX_K 32 /* most tokens drafted per step */

typedef struct {
    kipp_model *model;  /* the draft model, or NULL for prompt lookup */
    uint32_t ngram;     /* prompt lookup: the longest n-gram matched (1..8); 0 with a model */
    uint32_t k_max;     /* --draft-max: most tokens drafted per step (1..KIPP_SPEC_MAX_K) */
    uint32_t k_min;     /* --draft-min: fewer drafted tokens are not verified (0..k_max) */
    float p_min;        /* --draft-p-min: a draft model stops when its token's probability
                           is below this (0 = never) */
    int fixed_k;        /* 1: always draft k_max (no adaptation; benchmarks and gates) */
    kipp_ctx_params ctx; /* the draft model's context (backend, threads, ISA, KV type; n_ctx
                            and the pool are sized here) */
    uint32_t n_ctx;     /* the target's context length */
    uint32_t n_slots;   /* sequences drafted for at once (the scheduler's running batch) */
} kipp_spec_params;

typedef struct kipp_drafter kipp_drafter;

/* Checks the draft model against the target (same vocabulary: every token's bytes, size and
 * end-of-generation id; else KIPP_ERR_INVALID_ARG naming the first difference) and starts
 * its context. */
kipp_status kipp_drafter_init(const kipp_model *target, const kipp_spec_params *p,
                              kipp_drafter **out, char *err, size_t err_len);
void kipp_drafter_free(kipp_drafter *d);
/* "draft model kipp-tiny-draft-bf16.gguf" / "prompt lookup (n-gram <= 3)": start-up lines. */
const char *kipp_drafter_describe(const kipp_drafter *d);

/* A slot holds one sequence's drafting state. open resets it for a new sequence whose
 * target samples with sp (a draft model samples with the same parameters, so its q is
 * the same kind of processed distribution); close frees its draft KV. */
kipp_status kipp_drafter_open(kipp_drafter *d, uint32_t slot, const kipp_sampler_params *sp,
                              char *err, size_t err_len);
void kipp_drafter_close(kipp_drafter *d, uint32_t slot);

/* One sequence's drafting request for a step. */
typedef struct {
    uint32_t slot;
    const int32_t *hist; /* every final token (prompt and generated); the target's KV holds */
    uint32_t n_hist;     /* all but the last, which the verification batch starts with */
    uint32_t k;          /* tokens wanted (0: none; the slot still stays in step) */
    /* out */
    uint32_t n_draft;
    int32_t draft[KIPP_SPEC_MAX_K];
    const kipp_token_prob *q[KIPP_SPEC_MAX_K]; /* the draft's distribution; NULL: point mass */
    uint32_t nq[KIPP_SPEC_MAX_K];
} kipp_draft_job;


/* Verification of one sequence's drafts against rows[0..n_draft] (n_vocab logits each, row
 * i = the target's logits after the batch's token i; modified in place). Accepts tokens
 * into s as it goes (the penalty history only ever sees final tokens) and writes the
 * emitted tokens: the accepted drafts, then the target's own token (the correction at the
 * first rejection, or the bonus after the last draft). Returns how many (1..n_draft+1);
 * *n_accepted = drafts kept. out_row[i] = the row token out[i] was chosen from. */
uint32_t kipp_spec_verify(kipp_sampler *s, float *rows, uint32_t n_vocab, const kipp_draft_job *j,
                          int32_t *out, uint32_t *n_accepted);

/* ---- choosing K ---------------------------------------------------------------------- */

/* Per-sequence acceptance, learned from verification outcomes, and how often a draft run
 * gives nothing (a draft model's --draft-p-min stop at its first token, no n-gram match). */
typedef struct {
    double acc_num, acc_den; /* decayed accepted / (accepted + rejections) */
    double dec_num, dec_den; /* decayed runs that gave nothing / draft runs */
    uint32_t idle_steps;     /* steps since the sequence last drafted */
    uint64_t drafted, accepted, steps;
    uint64_t n_obs;          /* outcomes learned (verifications and declined runs) */
} kipp_spec_seq;

void kipp_spec_seq_init(kipp_spec_seq *q);
/* After a step that verified k drafts and kept m of them. */
void kipp_spec_seq_update(kipp_spec_seq *q, uint32_t k, uint32_t m);
/* After a draft run that gave nothing (--draft-p-min stopped it at its first token, no
 * n-gram match): the decline rate learns it; acceptance and the counters do not change. */
void kipp_spec_seq_declined(kipp_spec_seq *q);

/* Step-time model, learned online: target step ~ alpha + beta * tokens, one draft round ~
 * gamma (seconds). */
typedef struct {
    double s0, s1, s11, sy, s1y; /* decayed least-squares sums of (tokens, seconds) */
    double alpha, beta, gamma;
    int n_target, n_draft;
} kipp_spec_timing;

void kipp_spec_timing_init(kipp_spec_timing *t);
void kipp_spec_timing_target(kipp_spec_timing *t, uint32_t n_tokens, double seconds);
void kipp_spec_timing_draft(kipp_spec_timing *t, double seconds_per_round);

/* Chooses k[i] for n sequences (cap[i]: most each may draft) to maximize the expected
 * tokens per second of the whole step: sum E_i(k_i) / (alpha + beta (base + sum (k_i+1)) +
 * gamma max k_i), E(k) = (1 - a^(k+1)) / (1 - a) with a the sequence's acceptance. base:
 * other tokens in the step (prefill). fixed_k: k[i] = cap[i]. A sequence idle for 16 steps
 * (16 x (1 + n/4) in a batch of n; those idle half as long join it) probes with k = 1, so
 * a draft that improves is noticed (acceptance changes along a text: prompt lookup pays
 * only where the output quotes). k_min: a k in (0, k_min) becomes k_min. */
void kipp_spec_choose_k(const kipp_spec_timing *t, kipp_spec_seq *const *seqs, const uint32_t *cap,
                        uint32_t n, uint32_t base, uint32_t k_min, int fixed_k, uint32_t *k);

/* Drafts for n sequences; a draft model decodes them as one batch per drafted position.
 * jobs[i].k is consumed. timing (or NULL) learns the time of one draft round. */
kipp_status kipp_drafter_run(kipp_drafter *d, kipp_draft_job *jobs, uint32_t n,
                             kipp_spec_timing *timing, char *err, size_t err_len);

#endif
