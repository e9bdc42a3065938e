/* model.h — a model as Kipp sees it: its architecture's description (arch.h), hyper-parameters
 * read from GGUF metadata and weight tensors bound by name (pointers into the mmapped file; nothing is copied).
 * Does not compute anything: the forward pass lives in the backends. */
#ifndef KIPP_MODEL_H
#define KIPP_MODEL_H

#include "kipp.h"
#include "gguf/gguf.h"
#include "tok/vocab.h"

typedef struct {
    const kipp_gguf_tensor *attn_norm; /* [H]                 */
    const kipp_gguf_tensor *wq;        /* [H, Nh*D]  (ne order: ne[0] = input) */
    const kipp_gguf_tensor *wk;        /* [H, Nkv*D] */
    const kipp_gguf_tensor *wv;        /* [H, Nkv*D] */
    const kipp_gguf_tensor *bq, *bk, *bv; /* [Nh*D], [Nkv*D], [Nkv*D]: qwen2's biases (NULL: none) */
    const kipp_gguf_tensor *q_norm;    /* [D] shared by all q heads (NULL: none, qwen2) */
    const kipp_gguf_tensor *k_norm;    /* [D] shared by all k heads */
    const kipp_gguf_tensor *wo;        /* [Nh*D, H] */
    const kipp_gguf_tensor *ffn_norm;  /* [H]  */
    const kipp_gguf_tensor *w_gate;    /* [H, F] */
    const kipp_gguf_tensor *w_up;      /* [H, F] */
    const kipp_gguf_tensor *w_down;    /* [F, H] */
    /* a mixture-of-experts FFN (qwen3moe; NULL for a dense one): the router and the experts'
     * matrices stacked along ne[2], in expert order */
    const kipp_gguf_tensor *gate_inp;  /* [H, E] */
    const kipp_gguf_tensor *gate_exps; /* [H, Fe, E] */
    const kipp_gguf_tensor *up_exps;   /* [H, Fe, E] */
    const kipp_gguf_tensor *down_exps; /* [Fe, H, E] */
    /* expert e's three matrices as 2-D tensors (headers owned by the model, data in the
     * mapping): exp_gate[e] [H, Fe], exp_up[e] [H, Fe], exp_down[e] [Fe, H]; NULL when dense */
    const kipp_gguf_tensor *exp_gate, *exp_up, *exp_down;
} kipp_layer_weights;

struct kipp_model {
    kipp_gguf *gguf;
    const struct kipp_arch *arch; /* its architecture's description (arch.h) */
    kipp_model_info hp;
    const kipp_gguf_tensor *tok_embd;    /* [H, V] : row t is token t's embedding */
    const kipp_gguf_tensor *output_norm; /* [H] */
    const kipp_gguf_tensor *output;      /* [H, V] : == tok_embd when tied; NULL for an
                                            embedding model without an lm_head */
    kipp_layer_weights *layers;          /* [n_layer] */
    kipp_gguf_tensor *expert_views;      /* the experts' 2-D views the layers point into (NULL: dense) */
    kipp_vocab *vocab;
};

/* The lm_head for logits rows of token ids 0..n_logits-1 (1 <= n_logits <= n_vocab): a copy
 * of m->output's header whose row count is n_logits; the data are the first n_logits rows of
 * the same mapping (rows are contiguous), nothing is copied. n_logits = 0 (an embeddings
 * context) or a model without an lm_head: an all-zero header (data NULL, no rows). */
kipp_gguf_tensor kipp_model_head(const kipp_model *m, uint32_t n_logits);

/* Loads a model from an already opened GGUF (takes ownership of g on success and failure). */
kipp_status kipp_model_from_gguf(kipp_gguf *g, const char *path, kipp_model **out, char *err,
                                 size_t err_len);

#endif
