/* moe.h — how a mixture-of-experts layer (arch.h: KIPP_OP_FFN_MOE) chooses its experts for one
 * token. The definition every backend follows, written once: cpu-ref's and cpu's forward passes
 * call it on their router logits; cuda routes on the device with the same arithmetic
 * (src/backend/cuda/ops_math.h, checked against this by the unit suite). */
#ifndef KIPP_BACKEND_MOE_H
#define KIPP_BACKEND_MOE_H

#include <stdatomic.h>
#include <stdint.h>

/* p = softmax(logits) over n experts, in place, in f32 (max subtracted, exp, sum, divide, as
 * transformers' Qwen3MoeSparseMoeBlock); the k largest p into chosen[0..k) in descending order,
 * exact ties going to the lower expert index (a fixed rule: torch.topk picks either, see
 * docs/architectures.md); w[i] = p of chosen[i], divided by their sum when norm is set (the
 * config's norm_topk_prob). layer, pos (the token's position) and token (its id) only key the test
 * trace below. */
void kipp_moe_route(float *logits, uint32_t n, uint32_t k, int norm, uint32_t *chosen, float *w, uint32_t layer,
                    uint32_t pos, int32_t token);

/* A test hook for the gates that compare runs (tests/model): routing is decided by the last
 * bits of the router logits, so where the k-th and (k+1)-th choices are nearly tied two correct
 * runs (two backends, or one backend's prefill and decode paths, whose arithmetic differs in
 * the last bits) may route a token differently, and everything after differs by a whole
 * expert's output. RECORD keeps each routing decision at a (layer, position) -- the token id,
 * the router's probabilities, the choice and its margin (log p_k - log p_(k+1), the
 * router-logit gap) -- up to n_slot of them; PIN matches a decision to the record of the same
 * token whose probabilities are nearest (sum |p - q| below 0.1: the same prefix, run another
 * way; a different prefix routes far apart), and: a choice that differs where its margin is below
 * delta takes the record's experts (with this run's own probabilities) and counts as pinned;
 * one that differs where the margin is wider is kept (the logits will show it) and counts as
 * mismatched. A decision with no match is left alone. Off (NULL) costs one load per routed
 * token. Switch it only between runs; RECORD is single-threaded (cpu-ref), PIN only reads the
 * record. */
enum { KIPP_MOE_TRACE_RECORD = 1, KIPP_MOE_TRACE_PIN = 2 };
typedef struct {
    int mode;
    uint32_t n_layer, n_pos, n_slot, k, n_exp;
    float delta;             /* PIN: the margin below which a differing choice is a near-tie */
    int32_t *token;          /* [n_layer][n_pos][n_slot] the token id a slot holds (-1: empty) */
    uint32_t *chosen;        /* [n_layer][n_pos][n_slot][k], sorted ascending (a set) */
    float *margin;           /* [n_layer][n_pos][n_slot] */
    float *probs;            /* [n_layer][n_pos][n_slot][n_exp] the router's probabilities */
    atomic_uint pinned;      /* PIN: near-tie flips replaced by the record's choice */
    atomic_uint mismatched;  /* PIN: differences at a margin >= delta */
    float worst_pinned;      /* the widest margin a pin was taken at (informational) */
} kipp_moe_trace;

/* Sets the trace every kipp_moe_route consults (NULL: none). */
void kipp_moe_trace_use(kipp_moe_trace *t);
/* The trace kipp_moe_route consults now (NULL: none): a backend that routes elsewhere (cuda, on
 * the device: src/backend/cuda/ops_math.h's kipp_om_moe_trace_pin is the same matching and rule)
 * applies it itself. */
kipp_moe_trace *kipp_moe_trace_current(void);

#endif
