/* arch.c — the architectures Kipp runs, as data (arch.h). Each entry is what a GGUF file of
 * that `general.architecture` must hold: hyper-parameters under its key prefix (llama.cpp's
 * names), per-layer tensors with their shapes, and the layer program. */
#include "model/arch.h"

#include "model/model.h"

#include "core/error.h"

#include <stdio.h>
#include <string.h>

#define HP(k, field, kind, req, dflt, from, why) \
    {k, offsetof(kipp_model_info, field), kind, req, dflt, from, why}
#define LT(n, field, d0, d1, req) {n, offsetof(kipp_layer_weights, field), {d0, d1}, req}

/* ---- qwen3 (Qwen3ForCausalLM: Qwen3 dense, and Qwen3-Embedding) ----------------------------- */

static const kipp_arch_hparam qwen3_hparams[] = {
    HP("block_count", n_layer, KIPP_HP_U32, 1, 0, 0, NULL),
    HP("embedding_length", n_embd, KIPP_HP_U32, 1, 0, 0, NULL),
    HP("feed_forward_length", n_ff, KIPP_HP_U32, 1, 0, 0, NULL),
    HP("attention.head_count", n_head, KIPP_HP_U32, 1, 0, 0, NULL),
    HP("context_length", n_ctx_train, KIPP_HP_U32, 1, 0, 0, NULL),
    HP("attention.head_count_kv", n_head_kv, KIPP_HP_U32, 0, 0, offsetof(kipp_model_info, n_head), NULL),
    HP("attention.key_length", head_dim, KIPP_HP_U32, 1, 0, 0,
       "Kipp never guesses head_dim from embedding_length / head_count"),
    HP("attention.value_length", head_dim, KIPP_HP_U32_EQUAL, 0, 0, 0, "Kipp needs value_length == key_length"),
    HP("attention.layer_norm_rms_epsilon", rms_eps, KIPP_HP_F32, 1, 0, 0, NULL),
    HP("rope.freq_base", rope_theta, KIPP_HP_F32, 0, 10000.0f, 0, NULL),
};

static const kipp_arch_tensor qwen3_tensors[] = {
    LT("attn_norm", attn_norm, KIPP_DIM_H, KIPP_DIM_NONE, 1),
    LT("attn_q", wq, KIPP_DIM_H, KIPP_DIM_QD, 1),
    LT("attn_k", wk, KIPP_DIM_H, KIPP_DIM_KD, 1),
    LT("attn_v", wv, KIPP_DIM_H, KIPP_DIM_KD, 1),
    LT("attn_q_norm", q_norm, KIPP_DIM_D, KIPP_DIM_NONE, 1),
    LT("attn_k_norm", k_norm, KIPP_DIM_D, KIPP_DIM_NONE, 1),
    LT("attn_output", wo, KIPP_DIM_QD, KIPP_DIM_H, 1),
    LT("ffn_norm", ffn_norm, KIPP_DIM_H, KIPP_DIM_NONE, 1),
    LT("ffn_gate", w_gate, KIPP_DIM_H, KIPP_DIM_F, 1),
    LT("ffn_up", w_up, KIPP_DIM_H, KIPP_DIM_F, 1),
    LT("ffn_down", w_down, KIPP_DIM_F, KIPP_DIM_H, 1),
};

static const kipp_op qwen3_program[] = {
    KIPP_OP_ATTN_NORM, KIPP_OP_QKV,      KIPP_OP_QK_NORM, KIPP_OP_ROPE,       KIPP_OP_KV_STORE,
    KIPP_OP_ATTENTION, KIPP_OP_ATTN_OUT, KIPP_OP_FFN_NORM, KIPP_OP_FFN_SWIGLU,
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const kipp_arch archs[] = {
    {"qwen3", "Qwen3ForCausalLM", qwen3_hparams, N(qwen3_hparams), qwen3_tensors, N(qwen3_tensors), qwen3_program,
     N(qwen3_program)},
};

const kipp_arch *kipp_arch_at(size_t i) { return i < N(archs) ? &archs[i] : NULL; }

const kipp_arch *kipp_arch_find(const char *name, size_t len) {
    for (size_t i = 0; i < N(archs); i++)
        if (strlen(archs[i].name) == len && memcmp(archs[i].name, name, len) == 0) return &archs[i];
    return NULL;
}

const char *kipp_arch_names(char *buf, size_t cap) {
    size_t n = 0;
    if (cap) buf[0] = '\0';
    for (size_t i = 0; i < N(archs) && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s'%s'", i ? ", " : "", archs[i].name);
    return buf;
}

const char *kipp_arch_key(const kipp_arch *a, const char *key, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", a->name, key);
    return buf;
}

const char *kipp_op_name(kipp_op op) {
    static const char *const names[KIPP_OP_COUNT] = {"attn_norm", "qkv",       "qk_norm",  "rope",      "kv_store",
                                                     "attention", "attn_out", "ffn_norm", "ffn_swiglu"};
    return (unsigned)op < KIPP_OP_COUNT ? names[op] : "?";
}

const char *const *kipp_op_tensors(kipp_op op) {
    static const char *const none[] = {NULL}, *const attn_norm[] = {"attn_norm", NULL},
                             *const qkv[] = {"attn_q", "attn_k", "attn_v", NULL},
                             *const qk_norm[] = {"attn_q_norm", "attn_k_norm", NULL},
                             *const attn_out[] = {"attn_output", NULL}, *const ffn_norm[] = {"ffn_norm", NULL},
                             *const swiglu[] = {"ffn_gate", "ffn_up", "ffn_down", NULL};
    switch (op) {
    case KIPP_OP_ATTN_NORM: return attn_norm;
    case KIPP_OP_QKV: return qkv;
    case KIPP_OP_QK_NORM: return qk_norm;
    case KIPP_OP_ATTN_OUT: return attn_out;
    case KIPP_OP_FFN_NORM: return ffn_norm;
    case KIPP_OP_FFN_SWIGLU: return swiglu;
    case KIPP_OP_ROPE:
    case KIPP_OP_KV_STORE:
    case KIPP_OP_ATTENTION:
    case KIPP_OP_COUNT: break;
    }
    return none;
}

kipp_status kipp_arch_check_ops(const kipp_arch *a, const char *backend, uint32_t ops, char *err, size_t err_len) {
    for (size_t i = 0; i < a->n_ops; i++) {
        const kipp_op op = a->program[i];
        if ((unsigned)op >= KIPP_OP_COUNT || !(ops >> op & 1u))
            return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                             "%s: architecture '%s' needs op %s, which this backend does not implement", backend,
                             a->name, kipp_op_name(op));
    }
    return KIPP_OK;
}
