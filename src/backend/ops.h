/* ops.h — the op-level backend interface: the operations a backend implements over the rows of
 * one pass (a batch's tokens, or a chunk of them), and the driver (program.c) that runs an
 * architecture's layer program (arch.h) through them. No backend names a layer op's
 * sequence: the driver turns each program op into the calls below, in the same order on
 * every backend. A new backend implements these, its batch entry (tokens in, embedding rows
 * into X; final norm and lm_head out) and the storage callbacks of backend.h; a new
 * architecture adds program ops here and in the driver, and each backend implements the
 * operations they call (docs/backends.md, docs/architectures.md). */
#ifndef KIPP_BACKEND_OPS_H
#define KIPP_BACKEND_OPS_H

#include "model/arch.h"
#include "model/model.h"

#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

/* The activations of a pass, as names: each backend holds them where it computes (host or
 * device memory) and knows their row widths from the hyper-parameters. Row t of a token
 * activation is the pass's token t; row p of an expert activation is the pass's p-th
 * (token, slot) pair, in whatever order the backend's routing chose (moe_route). */
typedef enum {
    KIPP_BUF_X,     /* [n][H]  the residual stream (the batch entry fills it with embeddings) */
    KIPP_BUF_XN,    /* [n][H]  the normed stream, the input of the projections */
    KIPP_BUF_Q,     /* [n][Nh*D] */
    KIPP_BUF_K,     /* [n][Nkv*D] this pass's keys before the store */
    KIPP_BUF_V,     /* [n][Nkv*D] */
    KIPP_BUF_ATT,   /* [n][Nh*D] attention output, heads concatenated */
    KIPP_BUF_PROJ,  /* [n][H]  a projection about to be added to X */
    KIPP_BUF_GATE,  /* [n][F]  */
    KIPP_BUF_UP,    /* [n][F]  */
    KIPP_BUF_EGATE, /* [n*k][Fe] expert activations, one row per (token, slot) pair */
    KIPP_BUF_EUP,   /* [n*k][Fe] */
    KIPP_BUF_EDOWN, /* [n*k][H]  */
    KIPP_BUF_COUNT
} kipp_buf;

/* A layer weight, named by its kipp_layer_weights field: KIPP_W(wq). A backend reaches the
 * tensor with kipp_layer_tensor (or its own copy of it, keyed the same way). */
#define KIPP_W(field) offsetof(kipp_layer_weights, field)
static inline const kipp_gguf_tensor *kipp_layer_tensor(const kipp_model *m, uint32_t layer, size_t w) {
    return *(const kipp_gguf_tensor *const *)((const char *)&m->layers[layer] + w);
}

/* Expert e's matrix of a 3-D expert weight (KIPP_W(gate_exps), up_exps or down_exps) as the
 * model's 2-D view of it (model.h: exp_gate, exp_up, exp_down). */
static inline const kipp_gguf_tensor *kipp_expert_tensor(const kipp_model *m, uint32_t layer, size_t w,
                                                         uint32_t e) {
    const kipp_layer_weights *lw = &m->layers[layer];
    return w == KIPP_W(gate_exps) ? &lw->exp_gate[e] : w == KIPP_W(up_exps) ? &lw->exp_up[e] : &lw->exp_down[e];
}

/* The operations, over every row of the current pass. Each returns 0, or the backend's own
 * non-zero error code, which the driver hands back at once (the backend's batch entry turns it
 * into a message). `st` is the backend's per-context state; the pass (its rows, positions,
 * sequences, KV store) is what its batch entry set up before calling the driver. */
typedef struct kipp_backend_kernels {
    /* dst = RMSNorm(src) * w, over rows of `width` elements: width H normalizes a token's row,
     * width D each head of it with one D-vector w shared by the heads. dst may be src. */
    int (*rmsnorm)(void *st, uint32_t layer, size_t w, kipp_buf src, kipp_buf dst, uint32_t width);
    /* dst[i] = src times weight w[i] (ne = [in, out]), for count weights sharing the input: one
     * conversion of src serves them all (the grouped matmul) */
    int (*matmul)(void *st, uint32_t layer, uint32_t count, const size_t *w, kipp_buf src,
                  const kipp_buf *dst);
    /* dst += b (a 1-D tensor as wide as a dst row) on every row */
    int (*add_bias)(void *st, uint32_t layer, size_t b, kipp_buf dst);
    /* NEOX rotate-half RoPE on each D-wide head of every dst row (Q or K), at the row's position */
    int (*rope)(void *st, kipp_buf dst);
    /* K and V rows into the layer's KV storage at each row's position (rounded to its type) */
    int (*kv_store)(void *st, uint32_t layer);
    /* ATT = causal GQA softmax(Q K^T / sqrt(D)) V, each row over positions 0..its own of its
     * sequence, read from the KV storage only */
    int (*attention)(void *st, uint32_t layer);
    /* gate = silu(gate) * up, row by row (GATE/UP, or EGATE/EUP) */
    int (*swiglu)(void *st, kipp_buf gate, kipp_buf up);
    /* dst += src, rows of H (the residual add) */
    int (*add)(void *st, kipp_buf dst, kipp_buf src);
    /* the router: XN times gate_inp in f32, then for every row kipp_moe_route's choice (moe.h:
     * softmax, top-k best first, exact ties to the lower expert, renormalized when the model's
     * expert_norm), the pairs grouped by expert for moe_matmul */
    int (*moe_route)(void *st, uint32_t layer);
    /* dst[i] = each pair's input times its expert's slice of the 3-D weight w[i]
     * (gate_exps / up_exps / down_exps): src XN (a pair's token row) or an expert activation
     * (the pair's row); each chosen expert's matrix read once for all its pairs */
    int (*moe_matmul)(void *st, uint32_t layer, uint32_t count, const size_t *w, kipp_buf src,
                      const kipp_buf *dst);
    /* dst[t] = sum over token t's slots, best first, of its weight times src's pair row
     * (products and sums in f32, in slot order) */
    int (*moe_sum)(void *st, kipp_buf src, kipp_buf dst);
    /* Optional fast path: a backend may run a run of program ops fused. Called before each op
     * with the layer's remaining ops; returns how many it ran (0: none, the driver runs the
     * plain ops), *rc its error code. Never called with KIPP_PLAIN_OPS=1 in the environment
     * (the gates run the plain path that way). */
    size_t (*fused)(void *st, uint32_t layer, const kipp_op *ops, size_t n_ops, int *rc);
} kipp_backend_kernels;

/* KIPP_OK when k implements every operation a's program calls; else KIPP_ERR_UNSUPPORTED naming
 * the backend, the architecture, the program op and the operation it lacks (a backend refuses
 * such a model at start-up: no silent fallback). */
kipp_status kipp_program_check(const kipp_arch *a, const char *backend, const kipp_backend_kernels *k,
                               char *err, size_t err_len);

/* Runs layer `layer` of the model's program through k; 0 or the first op's error code. */
int kipp_program_layer(const kipp_model *m, const kipp_backend_kernels *k, void *st, uint32_t layer);
/* Every layer in order. */
int kipp_program_run(const kipp_model *m, const kipp_backend_kernels *k, void *st);
/* 1 when KIPP_PLAIN_OPS=1 (read once): the driver never calls a backend's fused path. */
int kipp_program_plain(void);

#endif
