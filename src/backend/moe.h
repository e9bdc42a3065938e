/* moe.h — how a mixture-of-experts layer (arch.h: KIPP_OP_FFN_MOE) chooses its experts for one
 * token. The definition every backend follows, written once: cpu-ref's and cpu's forward passes
 * call it on their router logits, cuda's host side too. */
#ifndef KIPP_BACKEND_MOE_H
#define KIPP_BACKEND_MOE_H

#include <stdatomic.h>
#include <stdint.h>

/* p = softmax(logits) over n experts, in place, in f32 (max subtracted, exp, sum, divide, as
 * transformers' Qwen3MoeSparseMoeBlock); the k largest p into chosen[0..k) in descending order,
 * exact ties going to the lower expert index (a fixed rule: torch.topk picks either, see
 * docs/architectures.md); w[i] = p of chosen[i], divided by their sum when norm is set (the
 * config's norm_topk_prob). layer and pos (the token's position) only key the test trace below. */
void kipp_moe_route(float *logits, uint32_t n, uint32_t k, int norm, uint32_t *chosen, float *w, uint32_t layer,
                    uint32_t pos);

/* A test hook for the gates that compare two backends (tests/model): routing is decided by the
 * last bits of the router logits, so where the k-th and (k+1)-th choices are nearly tied two
 * correct backends may route a token differently, and everything after differs by a whole
 * expert's output. RECORD keeps each (layer, position)'s choice and its margin (log p_k -
 * log p_(k+1), the router-logit gap); PIN then runs another backend against the record: a choice
 * that differs where the record's margin is below delta takes the record's experts (with this
 * backend's own probabilities) and counts as pinned; one that differs where the margin is wider
 * is kept (the logits will show it) and counts as mismatched. Off (NULL) costs one load per
 * routed token. Not thread-safe to switch while a backend runs; each (layer, position) is
 * written by one thread. */
enum { KIPP_MOE_TRACE_RECORD = 1, KIPP_MOE_TRACE_PIN = 2 };
typedef struct {
    int mode;
    uint32_t n_layer, n_pos, k;
    float delta;             /* PIN: the margin below which a differing choice is a near-tie */
    uint32_t *chosen;        /* [n_layer][n_pos][k], sorted ascending (a set) */
    float *margin;           /* [n_layer][n_pos] */
    unsigned char *seen;     /* [n_layer][n_pos] recorded */
    atomic_uint pinned;      /* PIN: near-tie flips replaced by the record's choice */
    atomic_uint mismatched;  /* PIN: differences at a margin >= delta */
    float worst_pinned;      /* the widest margin a pin was taken at (informational) */
} kipp_moe_trace;

/* Sets the trace every kipp_moe_route consults (NULL: none). */
void kipp_moe_trace_use(kipp_moe_trace *t);

#endif
