/* arch.c — the architectures Kipp runs, as data (arch.h). Each entry is what a GGUF file of
 * that `general.architecture` must hold: hyper-parameters under its key prefix (llama.cpp's
 * names), per-layer tensors with their shapes, and the layer program. */
#include "model/arch.h"

#include "model/model.h"

#include "core/error.h"

#include <stdio.h>
#include <string.h>

#define HP(k, field, kind, req, dflt, from, why) \
    {k, offsetof(kipp_model_info, field), kind, req, dflt, from, 0, why}
#define LT(n, field, d0, d1, req) {n, offsetof(kipp_layer_weights, field), {d0, d1, KIPP_DIM_NONE}, req}
#define LT3(n, field, d0, d1, d2) {n, offsetof(kipp_layer_weights, field), {d0, d1, d2}, 1}

/* What the Qwen families share: the dense transformer's sizes, and the tensors around their
 * one difference (qwen3's head norms, qwen2's q/k/v biases) */
#define QWEN_SIZES                                                                                           \
    HP("block_count", n_layer, KIPP_HP_U32, 1, 0, 0, NULL),                                                  \
        HP("embedding_length", n_embd, KIPP_HP_U32, 1, 0, 0, NULL),                                          \
        HP("attention.head_count", n_head, KIPP_HP_U32, 1, 0, 0, NULL),                                      \
        HP("context_length", n_ctx_train, KIPP_HP_U32, 1, 0, 0, NULL),                                       \
        HP("attention.head_count_kv", n_head_kv, KIPP_HP_U32, 0, 0, offsetof(kipp_model_info, n_head), NULL)
#define QWEN_NORM_ROPE                                                                                       \
    HP("attention.value_length", head_dim, KIPP_HP_U32_EQUAL, 0, 0, 0, "Kipp needs value_length == key_length"), \
        HP("attention.layer_norm_rms_epsilon", rms_eps, KIPP_HP_F32, 1, 0, 0, NULL),                         \
        HP("rope.freq_base", rope_theta, KIPP_HP_F32, 0, 10000.0f, 0, NULL)
#define QWEN_QKV_WEIGHTS                                                                                     \
    LT("attn_norm.weight", attn_norm, KIPP_DIM_H, KIPP_DIM_NONE, 1),                                         \
        LT("attn_q.weight", wq, KIPP_DIM_H, KIPP_DIM_QD, 1), LT("attn_k.weight", wk, KIPP_DIM_H, KIPP_DIM_KD, 1), \
        LT("attn_v.weight", wv, KIPP_DIM_H, KIPP_DIM_KD, 1)
#define QWEN_HEAD_NORMS                                                                                      \
    LT("attn_q_norm.weight", q_norm, KIPP_DIM_D, KIPP_DIM_NONE, 1),                                          \
        LT("attn_k_norm.weight", k_norm, KIPP_DIM_D, KIPP_DIM_NONE, 1)
#define QWEN_OUT                                                                                             \
    LT("attn_output.weight", wo, KIPP_DIM_QD, KIPP_DIM_H, 1), LT("ffn_norm.weight", ffn_norm, KIPP_DIM_H, KIPP_DIM_NONE, 1)
#define QWEN_OUT_FFN                                                                                         \
    QWEN_OUT, LT("ffn_gate.weight", w_gate, KIPP_DIM_H, KIPP_DIM_F, 1), LT("ffn_up.weight", w_up, KIPP_DIM_H, KIPP_DIM_F, 1), \
        LT("ffn_down.weight", w_down, KIPP_DIM_F, KIPP_DIM_H, 1)
#define QWEN3_KEY_LENGTH                                                                                     \
    HP("attention.key_length", head_dim, KIPP_HP_U32, 1, 0, 0,                                               \
       "Kipp never guesses head_dim from embedding_length / head_count")

/* ---- qwen3 (Qwen3ForCausalLM: Qwen3 dense, and Qwen3-Embedding) ----------------------------- */

static const kipp_arch_hparam qwen3_hparams[] = {
    QWEN_SIZES,
    HP("feed_forward_length", n_ff, KIPP_HP_U32, 1, 0, 0, NULL),
    QWEN3_KEY_LENGTH,
    QWEN_NORM_ROPE,
};

static const kipp_arch_tensor qwen3_tensors[] = {QWEN_QKV_WEIGHTS, QWEN_HEAD_NORMS, QWEN_OUT_FFN};

static const kipp_op qwen3_program[] = {
    KIPP_OP_ATTN_NORM, KIPP_OP_QKV,      KIPP_OP_QK_NORM, KIPP_OP_ROPE,       KIPP_OP_KV_STORE,
    KIPP_OP_ATTENTION, KIPP_OP_ATTN_OUT, KIPP_OP_FFN_NORM, KIPP_OP_FFN_SWIGLU,
};

/* ---- qwen2 (Qwen2ForCausalLM: Qwen2.5, Qwen2.5-Coder, DeepSeek-R1-Distill-Qwen) ------------- */

/* llama.cpp's converter writes no key_length for qwen2: Qwen2Config has no head_dim, the
 * model's is hidden_size / num_attention_heads, so that is the default here */
static const kipp_arch_hparam qwen2_hparams[] = {
    QWEN_SIZES,
    HP("feed_forward_length", n_ff, KIPP_HP_U32, 1, 0, 0, NULL),
    {"attention.key_length", offsetof(kipp_model_info, head_dim), KIPP_HP_U32, 0, 0,
     offsetof(kipp_model_info, n_embd), offsetof(kipp_model_info, n_head), NULL},
    QWEN_NORM_ROPE,
};

static const kipp_arch_tensor qwen2_tensors[] = {
    QWEN_QKV_WEIGHTS,
    LT("attn_q.bias", bq, KIPP_DIM_QD, KIPP_DIM_NONE, 1),
    LT("attn_k.bias", bk, KIPP_DIM_KD, KIPP_DIM_NONE, 1),
    LT("attn_v.bias", bv, KIPP_DIM_KD, KIPP_DIM_NONE, 1),
    QWEN_OUT_FFN,
};

static const kipp_op qwen2_program[] = {
    KIPP_OP_ATTN_NORM, KIPP_OP_QKV,       KIPP_OP_QKV_BIAS, KIPP_OP_ROPE,     KIPP_OP_KV_STORE,
    KIPP_OP_ATTENTION, KIPP_OP_ATTN_OUT,  KIPP_OP_FFN_NORM, KIPP_OP_FFN_SWIGLU,
};

/* ---- qwen3moe (Qwen3MoeForCausalLM: Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B) -- */

/* qwen3's attention; the FFN a mixture of experts. feed_forward_length (the config's dense
 * intermediate_size, which no layer uses) is read when present. expert_weights_norm is
 * llama.cpp's key for the config's norm_topk_prob: llama.cpp's converter writes none and its
 * qwen3moe graph always renormalizes (every released Qwen3-MoE has norm_topk_prob true), so
 * absent means true; Kipp's converter writes it. */
static const kipp_arch_hparam qwen3moe_hparams[] = {
    QWEN_SIZES,
    HP("feed_forward_length", n_ff, KIPP_HP_U32, 0, 0, 0, NULL),
    QWEN3_KEY_LENGTH,
    QWEN_NORM_ROPE,
    HP("expert_count", n_expert, KIPP_HP_U32, 1, 0, 0, NULL),
    HP("expert_used_count", n_expert_used, KIPP_HP_U32, 1, 0, 0, NULL),
    HP("expert_feed_forward_length", n_ff_exp, KIPP_HP_U32, 1, 0, 0, NULL),
    HP("expert_weights_norm", expert_norm, KIPP_HP_BOOL, 0, 1.0f, 0, NULL),
};

static const kipp_arch_tensor qwen3moe_tensors[] = {
    QWEN_QKV_WEIGHTS,
    QWEN_HEAD_NORMS,
    QWEN_OUT,
    LT("ffn_gate_inp.weight", gate_inp, KIPP_DIM_H, KIPP_DIM_E, 1),
    LT3("ffn_gate_exps.weight", gate_exps, KIPP_DIM_H, KIPP_DIM_FE, KIPP_DIM_E),
    LT3("ffn_up_exps.weight", up_exps, KIPP_DIM_H, KIPP_DIM_FE, KIPP_DIM_E),
    LT3("ffn_down_exps.weight", down_exps, KIPP_DIM_FE, KIPP_DIM_H, KIPP_DIM_E),
};

static const kipp_op qwen3moe_program[] = {
    KIPP_OP_ATTN_NORM, KIPP_OP_QKV,      KIPP_OP_QK_NORM, KIPP_OP_ROPE,    KIPP_OP_KV_STORE,
    KIPP_OP_ATTENTION, KIPP_OP_ATTN_OUT, KIPP_OP_FFN_NORM, KIPP_OP_FFN_MOE,
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const kipp_arch archs[] = {
    {"qwen3", "Qwen3ForCausalLM", qwen3_hparams, N(qwen3_hparams), qwen3_tensors, N(qwen3_tensors), qwen3_program,
     N(qwen3_program)},
    {"qwen2", "Qwen2ForCausalLM", qwen2_hparams, N(qwen2_hparams), qwen2_tensors, N(qwen2_tensors), qwen2_program,
     N(qwen2_program)},
    {"qwen3moe", "Qwen3MoeForCausalLM", qwen3moe_hparams, N(qwen3moe_hparams), qwen3moe_tensors,
     N(qwen3moe_tensors), qwen3moe_program, N(qwen3moe_program)},
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
    static const char *const names[KIPP_OP_COUNT] = {"attn_norm", "qkv",      "qkv_bias", "qk_norm",
                                                     "rope",      "kv_store", "attention", "attn_out",
                                                     "ffn_norm",  "ffn_swiglu", "ffn_moe"};
    return (unsigned)op < KIPP_OP_COUNT ? names[op] : "?";
}

const char *const *kipp_op_tensors(kipp_op op) {
    static const char *const none[] = {NULL}, *const attn_norm[] = {"attn_norm.weight", NULL},
                             *const qkv[] = {"attn_q.weight", "attn_k.weight", "attn_v.weight", NULL},
                             *const qkv_bias[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias", NULL},
                             *const qk_norm[] = {"attn_q_norm.weight", "attn_k_norm.weight", NULL},
                             *const attn_out[] = {"attn_output.weight", NULL},
                             *const ffn_norm[] = {"ffn_norm.weight", NULL},
                             *const swiglu[] = {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", NULL},
                             *const moe[] = {"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
                                             "ffn_down_exps.weight", NULL};
    switch (op) {
    case KIPP_OP_ATTN_NORM: return attn_norm;
    case KIPP_OP_QKV: return qkv;
    case KIPP_OP_QKV_BIAS: return qkv_bias;
    case KIPP_OP_QK_NORM: return qk_norm;
    case KIPP_OP_ATTN_OUT: return attn_out;
    case KIPP_OP_FFN_NORM: return ffn_norm;
    case KIPP_OP_FFN_SWIGLU: return swiglu;
    case KIPP_OP_FFN_MOE: return moe;
    case KIPP_OP_ROPE:
    case KIPP_OP_KV_STORE:
    case KIPP_OP_ATTENTION:
    case KIPP_OP_COUNT: break;
    }
    return none;
}
