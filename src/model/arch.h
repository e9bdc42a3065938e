/* arch.h — model architectures as data: one description per GGUF `general.architecture`
 * (its key prefix, the hyper-parameters read from the file, the tensors each layer binds
 * with their shapes, the layer program as a list of ops). model.c reads a file through its
 * architecture's description; nothing outside arch.c names an architecture's keys.
 * docs/architectures.md says what adding one touches. */
#ifndef KIPP_ARCH_H
#define KIPP_ARCH_H

#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

/* A tensor dimension, as a symbol the hyper-parameters give a value (model.c: dim_value). */
typedef enum {
    KIPP_DIM_NONE = 0, /* no such dimension (a 1-D tensor's ne[1]) */
    KIPP_DIM_H,        /* n_embd */
    KIPP_DIM_V,        /* n_vocab */
    KIPP_DIM_F,        /* n_ff */
    KIPP_DIM_D,        /* head_dim */
    KIPP_DIM_QD,       /* n_head * head_dim */
    KIPP_DIM_KD,       /* n_head_kv * head_dim */
    KIPP_DIM_E,        /* n_expert */
    KIPP_DIM_FE,       /* n_ff_exp (one expert's FFN size) */
} kipp_dim;

/* How a hyper-parameter is read: a u32 (1 .. 2^20), an f32, a u32 that must equal the field
 * already read at `off` (value_length against key_length), or a bool stored as a u32 0/1. */
typedef enum { KIPP_HP_U32, KIPP_HP_F32, KIPP_HP_U32_EQUAL, KIPP_HP_BOOL } kipp_hp_kind;

typedef struct {
    const char *key;   /* after "<architecture>." */
    size_t off;        /* the kipp_model_info field */
    kipp_hp_kind kind;
    int required;      /* 0: absent leaves the default (def, or the field at def_off) */
    float def;
    size_t def_off;    /* non-zero: absent copies this kipp_model_info field (head_count_kv) */
    size_t def_div;    /* with def_off: absent is that field divided by this one, which must divide
                        * it (qwen2's key_length: embedding_length / head_count) */
    const char *why;   /* appended to the error when a required key is missing (may be NULL) */
} kipp_arch_hparam;

/* A per-layer tensor: `blk.L.<name>` ("attn_q.weight", "attn_q.bias"), ne[] in symbols, bound
 * into the kipp_layer_weights field at off. A 1-D tensor (ne[1] none: a norm vector or a bias)
 * is checked finite at load; a 3-D one (ne[2] set: a MoE layer's experts stacked, ne[2] = E)
 * is also cut into per-expert 2-D views (model.h: kipp_layer_weights.experts). */
typedef struct {
    const char *name;
    size_t off;
    kipp_dim ne[3];
    int required;
} kipp_arch_tensor;

/* The ops of one layer, in order (the program backends run; see docs/architectures.md). */
typedef enum {
    KIPP_OP_ATTN_NORM,  /* x -> RMSNorm(x) * attn_norm */
    KIPP_OP_QKV,        /* q, k, v = the normed x times wq, wk, wv (one grouped matmul) */
    KIPP_OP_QKV_BIAS,   /* q, k, v += bq, bk, bv (qwen2) */
    KIPP_OP_QK_NORM,    /* per-head RMSNorm of q and k (q_norm, k_norm: one D-vector each) */
    KIPP_OP_ROPE,       /* NEOX rotate-half RoPE on q and k */
    KIPP_OP_KV_STORE,   /* k, v into the paged KV cache at the token's position */
    KIPP_OP_ATTENTION,  /* causal GQA softmax(q k^T / sqrt(D)) v over the cache */
    KIPP_OP_ATTN_OUT,   /* times wo, added to the residual stream */
    KIPP_OP_FFN_NORM,   /* x -> RMSNorm(x) * ffn_norm */
    KIPP_OP_FFN_SWIGLU, /* down(silu(gate x) * up x), added to the residual stream */
    KIPP_OP_FFN_MOE,    /* mixture of experts: p = softmax(gate_inp x), the top-k experts by p
                         * (exact ties to the lower index), their p renormalized to sum 1 when
                         * expert_norm; sum over them of p_e * down_e(silu(gate_e x) * up_e x),
                         * added to the residual stream */
    KIPP_OP_COUNT
} kipp_op;

typedef struct kipp_arch {
    const char *name;      /* general.architecture, and the metadata key prefix */
    const char *hf_class;  /* the Hugging Face class it comes from (documentation, converter) */
    const kipp_arch_hparam *hparams;
    size_t n_hparams;
    const kipp_arch_tensor *tensors;
    size_t n_tensors;
    const kipp_op *program;
    size_t n_ops;
} kipp_arch;

/* The i-th supported architecture (0 ..), NULL past the last. */
const kipp_arch *kipp_arch_at(size_t i);
/* The description of architecture `name` (len bytes, not NUL-terminated), or NULL. */
const kipp_arch *kipp_arch_find(const char *name, size_t len);
/* The supported architectures' names, quoted and comma-separated ("'qwen3'"), into buf; returns
 * buf. */
const char *kipp_arch_names(char *buf, size_t cap);
/* "<arch>.<key>" into buf; returns buf. */
const char *kipp_arch_key(const kipp_arch *a, const char *key, char *buf, size_t cap);
/* An op's name ("attn_norm", "qkv", ...), for --info and messages. */
const char *kipp_op_name(kipp_op op);
/* The layer tensors op reads, by name (as in kipp_arch_tensor: "attn_q", ...), NULL-terminated:
 * an architecture whose program runs op must bind them (tests/unit/test_arch.c checks it). */
const char *const *kipp_op_tensors(kipp_op op);

#endif
