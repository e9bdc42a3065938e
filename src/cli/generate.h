/* generate.h — the generation loop kipp and kipp-chat share: sample a token, stop at -n,
 * an end-of-generation token, a full context or an interrupt, stream the token's text
 * through the shared detokenizer (never half a UTF-8 character), decode it, repeat.
 * Prefill, sampler and detokenizer set-up, and what is done with the text belong to the
 * caller. Prints only the messages of its own failures (prefixed with prog). */
#ifndef KIPP_CLI_GENERATE_H
#define KIPP_CLI_GENERATE_H

#include "engine/grammar.h"
#include "engine/spec.h"
#include "engine/think.h"
#include "kipp.h"

#include <signal.h>

typedef struct {
    const char *prog;          /* message prefix */
    kipp_ctx *ctx;             /* sequence 0 holds the prompt, already decoded */
    const kipp_model *model;
    kipp_sampler *sampler;     /* has accepted the prompt */
    kipp_detokenizer *detok;   /* fresh */
    float *logits;             /* in: the prompt's last logits; overwritten each step */
    long n_predict;            /* tokens to sample at most (>= 1) */
    int ignore_eos;            /* end-of-generation tokens do not stop (and are streamed) */
    volatile sig_atomic_t *interrupted; /* checked before each token; NULL = never */
    /* the text of the tokens (never part of a character), then what the detokenizer held
     * back at the end; 0 = stop now (the callback said why) */
    int (*on_text)(void *user, const char *text, size_t n);
    void (*on_sampled)(void *user, int32_t id); /* NULL, or every sampled id (eog included) */
    void (*on_decoded)(void *user, int32_t id); /* NULL, or each id added to the KV cache */
    void *user;
    /* speculative decoding (NULL: none): the drafter's slot 0 drafts, the target verifies
     * each draft run in one batch; hist[0..n_hist) = the tokens sequence 0 holds */
    kipp_drafter *drafter;
    uint32_t k_max, k_min; /* tokens drafted per step at most; fewer than k_min: none */
    int fixed_k;           /* always draft k_max (else K adapts to acceptance and timing) */
    const int32_t *hist;
    uint32_t n_hist;
    /* constrained output (NULL: none; not with a drafter): tokens are drawn from those the
     * matcher allows, from the first one or after an optional reasoning prefix (think) */
    kipp_matcher *matcher;
    kipp_think_params think;
} kipp_gen_params;

typedef struct {
    long n_gen;        /* tokens sampled */
    long n_decoded;    /* generated tokens that entered the KV cache */
    long n_steps;      /* target forward passes (without speculation: n_decoded) */
    long n_drafted, n_accepted; /* speculative: drafted tokens verified, and kept */
    double t_draft;    /* seconds spent drafting */
    double t_decode;   /* seconds from the first sample to the last decode */
    const char *stop;  /* "n_predict", "eog", "ctx_full" or "interrupted" */
} kipp_gen_result;

/* Runs the loop; 1 when it ended by a stop reason (the held-back text flushed through
 * on_text), 0 on a failure: a decode error (printed; held-back text flushed first), out
 * of memory in the detokenizer (printed), or on_text asking to stop. */
int kipp_generate(const kipp_gen_params *p, kipp_gen_result *r);

#endif
