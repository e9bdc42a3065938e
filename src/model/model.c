/* model.c — binds a GGUF through its architecture's description (arch.c): reads every
 * hyper-parameter the description lists from metadata (head_dim from attention.key_length,
 * never hidden/heads), looks up each tensor by its llama.cpp name and checks its shape and
 * type. Weights stay in the mapping. Does not run the model. */
#include "model/model.h"

#include "model/arch.h"
#include "model/rope.h"

#include "core/buf.h"
#include "core/error.h"
#include "core/types.h"
#include "tok/chat.h"
#include "tok/detok.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIPP_MAX_LAYERS 1024u
#define KIPP_MAX_DIM (1u << 20)
#define KIPP_MAX_EXPERTS 1024u

static kipp_status get_u32(const kipp_gguf *g, const char *key, uint32_t *out, char *err,
                           size_t err_len) {
    kipp_status st = kipp_gguf_get_u32(g, key, out, err, err_len);
    if (st != KIPP_OK) return st;
    if (*out == 0 || *out > KIPP_MAX_DIM)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "model: metadata %s = %u is out of range",
                         key, *out);
    return KIPP_OK;
}

/* Finds tensor `name` and checks it is 1-D [ne0], 2-D [ne0, ne1] or 3-D [ne0, ne1, ne2]
 * (ne2 == 0: at most 2-D; ne1 == 0: 1-D). */
static kipp_status bind3(const kipp_gguf *g, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                         const kipp_gguf_tensor **out, char *err, size_t err_len) {
    const kipp_gguf_tensor *t = kipp_gguf_find_tensor(g, name);
    *out = NULL;
    if (!t)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "model: tensor '%s' is missing", name);
    const uint32_t want_dims = ne2 ? 3u : ne1 ? 2u : 1u;
    const int64_t want1 = ne1 ? ne1 : 1, want2 = ne2 ? ne2 : 1;
    if (t->n_dims != want_dims || t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != want2)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "model: tensor '%s' has shape [%lld, %lld, %lld] (%u dims), expected "
                         "[%lld, %lld, %lld] from the metadata",
                         name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], t->n_dims,
                         (long long)ne0, (long long)want1, (long long)want2);
    *out = t;
    return KIPP_OK;
}

static kipp_status bind(const kipp_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                        const kipp_gguf_tensor **out, char *err, size_t err_len) {
    return bind3(g, name, ne0, ne1, 0, out, err, err_len);
}

/* Expert e of a 3-D stack t ([ne0, ne1, E]) as a 2-D tensor [ne0, ne1]: the same rows of the
 * mapping, a header of its own (named "<t>#e" in messages) */
static void expert_view(const kipp_gguf_tensor *t, uint32_t e, kipp_gguf_tensor *out) {
    *out = *t;
    const uint64_t bytes = t->n_bytes / (uint64_t)t->ne[2];
    snprintf(out->name, sizeof out->name, "%.40s#%u", t->name, e);
    out->n_dims = 2;
    out->ne[2] = 1;
    out->n_elems = t->n_elems / (uint64_t)t->ne[2];
    out->n_bytes = bytes;
    out->offset = t->offset + e * bytes;
    out->data = (const char *)t->data + e * bytes;
}

/* The value of dimension symbol d for the model's hyper-parameters (arch.h). */
static int64_t dim_value(const kipp_model_info *hp, kipp_dim d) {
    switch (d) {
    case KIPP_DIM_H: return hp->n_embd;
    case KIPP_DIM_V: return hp->n_vocab;
    case KIPP_DIM_F: return hp->n_ff;
    case KIPP_DIM_D: return hp->head_dim;
    case KIPP_DIM_QD: return (int64_t)hp->n_head * hp->head_dim;
    case KIPP_DIM_KD: return (int64_t)hp->n_head_kv * hp->head_dim;
    case KIPP_DIM_E: return hp->n_expert;
    case KIPP_DIM_FE: return hp->n_ff_exp;
    case KIPP_DIM_NONE: break;
    }
    return 0;
}

/* general.architecture, looked up among the descriptions of arch.c */
static kipp_status read_arch(const kipp_gguf *g, const kipp_arch **out, char *err, size_t err_len) {
    kipp_gguf_str arch;
    kipp_status st = kipp_gguf_get_str(g, "general.architecture", &arch, err, err_len);
    if (st != KIPP_OK) return st;
    if (!(*out = kipp_arch_find(arch.ptr, arch.len))) {
        char names[256];
        return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                         "model: general.architecture is '%.*s'; Kipp supports %s",
                         (int)(arch.len > 64 ? 64 : arch.len), arch.ptr, kipp_arch_names(names, sizeof names));
    }
    return KIPP_OK;
}

/* Every hyper-parameter of the architecture's table, then the checks all architectures share. */
static kipp_status read_hparams(const kipp_gguf *g, const kipp_arch *a, kipp_model_info *hp, char *err,
                                size_t err_len) {
    kipp_status st;
    char key[128];
    memset(hp, 0, sizeof *hp);
    hp->architecture = a->name;
    for (size_t i = 0; i < a->n_hparams; i++) {
        const kipp_arch_hparam *p = &a->hparams[i];
        char *field = (char *)hp + p->off;
        kipp_arch_key(a, p->key, key, sizeof key);
        if (kipp_gguf_find_key(g, key) < 0) {
            if (p->required)
                return p->why ? kipp_errf(err, err_len, KIPP_ERR_FORMAT, "model: %s is missing or invalid; %s", key,
                                          p->why)
                              : kipp_errf(err, err_len, KIPP_ERR_FORMAT, "model: metadata key %s is missing", key);
            if (p->kind == KIPP_HP_U32_EQUAL) continue;
            if (p->def_off && p->def_div) {
                uint32_t num, den;
                memcpy(&num, (const char *)hp + p->def_off, sizeof num);
                memcpy(&den, (const char *)hp + p->def_div, sizeof den);
                if (!den || num % den)
                    return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                                     "model: %s is missing and %u does not divide into %u parts", key, num, den);
                num /= den;
                memcpy(field, &num, sizeof num);
            } else if (p->def_off) memcpy(field, (const char *)hp + p->def_off, sizeof(uint32_t));
            else if (p->kind == KIPP_HP_F32) memcpy(field, &p->def, sizeof(float));
            else {
                const uint32_t v = (uint32_t)p->def;
                memcpy(field, &v, sizeof v);
            }
            continue;
        }
        if (p->kind == KIPP_HP_BOOL) {
            int b;
            if ((st = kipp_gguf_get_bool(g, key, &b, err, err_len))) return st;
            const uint32_t v = b != 0;
            memcpy(field, &v, sizeof v);
            continue;
        }
        if (p->kind == KIPP_HP_F32) {
            float v;
            if ((st = kipp_gguf_get_f32(g, key, &v, err, err_len))) return st;
            memcpy(field, &v, sizeof v);
            continue;
        }
        uint32_t v;
        if ((st = get_u32(g, key, &v, err, err_len)))
            return p->why ? kipp_errf(err, err_len, st, "model: %s is missing or invalid; %s", key, p->why) : st;
        if (p->kind == KIPP_HP_U32_EQUAL) {
            uint32_t want;
            memcpy(&want, field, sizeof want);
            if (v != want)
                return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED, "model: %s = %u differs from %u; %s", key, v,
                                 want, p->why ? p->why : "Kipp needs them equal");
            continue;
        }
        memcpy(field, &v, sizeof v);
    }
    if ((st = kipp_rope_read(g, a, hp, err, err_len))) return st;
    if (hp->n_layer > KIPP_MAX_LAYERS)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "model: block_count %u is too large",
                         hp->n_layer);
    if (hp->n_expert && (hp->n_expert > KIPP_MAX_EXPERTS || !hp->n_expert_used || hp->n_expert_used > hp->n_expert))
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "model: expert_used_count %u with expert_count %u: Kipp needs 1 <= used <= count <= %u",
                         hp->n_expert_used, hp->n_expert, KIPP_MAX_EXPERTS);
    if (hp->n_head % hp->n_head_kv != 0)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "model: head_count %u is not a multiple of head_count_kv %u",
                         hp->n_head, hp->n_head_kv);
    if (hp->head_dim % 2 != 0)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "model: key_length %u must be even for RoPE", hp->head_dim);
    if (!(hp->rms_eps > 0.0f && hp->rms_eps < 1.0f))
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "model: layer_norm_rms_epsilon %g is out of range", (double)hp->rms_eps);
    if (!(hp->rope_theta > 1.0f) || !isfinite(hp->rope_theta))
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "model: rope.freq_base %g is invalid",
                         (double)hp->rope_theta);
    return KIPP_OK;
}

/* <arch>.pooling_type (llama.cpp's enum); absent means a generative model. */
static kipp_status read_pooling(const kipp_gguf *g, const kipp_arch *a, kipp_pooling *out, char *err,
                                size_t err_len) {
    char key[128];
    *out = KIPP_POOLING_NONE;
    if (kipp_gguf_find_key(g, kipp_arch_key(a, "pooling_type", key, sizeof key)) < 0) return KIPP_OK;
    uint32_t v;
    kipp_status st = kipp_gguf_get_u32(g, key, &v, err, err_len);
    if (st != KIPP_OK) return st;
    if (v == KIPP_POOLING_NONE || v == KIPP_POOLING_LAST) {
        *out = (kipp_pooling)v;
        return KIPP_OK;
    }
    return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                     "model: %s = %u (%s) is not supported; Kipp pools only "
                     "'last' (3, Qwen3-Embedding)",
                     key, v, kipp_pooling_name((kipp_pooling)v));
}

const char *kipp_pooling_name(kipp_pooling p) {
    static const char *const names[] = {"none", "mean", "cls", "last", "rank"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "?";
}

/* Norm vectors are small: reject NaN/Inf in them at load time. */
static kipp_status check_finite_small(const kipp_gguf_tensor *t, char *err, size_t err_len) {
    float buf[4096];
    uint64_t n = t->n_elems;
    if (n > 4096) return KIPP_OK;
    kipp_dequantize_row(t->type, t->data, buf, n);
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(buf[i]))
            return kipp_errf(err, err_len, KIPP_ERR_NUMERIC,
                             "model: tensor '%s' element %llu is %s", t->name,
                             (unsigned long long)i, isnan(buf[i]) ? "NaN" : "Inf");
    return KIPP_OK;
}

/* Per-expert 2-D views of every layer's stacked expert matrices (a MoE architecture binds
 * gate_exps, up_exps and down_exps; a dense one none of them). */
static kipp_status bind_experts(kipp_model *m, char *err, size_t err_len) {
    const kipp_model_info *hp = &m->hp;
    const kipp_layer_weights *l0 = &m->layers[0];
    if (!hp->n_expert || !l0->gate_exps) return KIPP_OK;
    const size_t E = hp->n_expert;
    m->expert_views = calloc((size_t)hp->n_layer * 3 * E, sizeof *m->expert_views);
    if (!m->expert_views) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "model: out of memory for expert views");
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        kipp_layer_weights *w = &m->layers[l];
        kipp_gguf_tensor *v = m->expert_views + (size_t)l * 3 * E;
        const kipp_gguf_tensor *stacks[3] = {w->gate_exps, w->up_exps, w->down_exps};
        for (uint32_t s = 0; s < 3; s++) {
            const kipp_gguf_tensor *t = stacks[s];
            if (!t || t->n_bytes % E || kipp_type_row_bytes(t->type, (uint64_t)t->ne[0]) * (uint64_t)t->ne[1] * E != t->n_bytes)
                return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "model: layer %u's expert tensors are incomplete", l);
            for (uint32_t e = 0; e < E; e++) expert_view(t, e, &v[s * E + e]);
        }
        w->exp_gate = v;
        w->exp_up = v + E;
        w->exp_down = v + 2 * E;
    }
    return KIPP_OK;
}

kipp_status kipp_model_from_gguf(kipp_gguf *g, const char *path, kipp_model **out, char *err,
                                 size_t err_len) {
    *out = NULL;
    kipp_status st;
    kipp_model *m = calloc(1, sizeof *m);
    if (!m) {
        kipp_gguf_free(g);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "model: out of memory");
    }
    m->gguf = g;
    if ((st = read_arch(g, &m->arch, err, err_len))) goto fail;
    if ((st = read_hparams(g, m->arch, &m->hp, err, err_len))) goto fail;
    if ((st = kipp_vocab_load_gguf(g, &m->vocab, err, err_len))) goto fail;
    m->hp.n_vocab = kipp_vocab_n_tokens(m->vocab);
    m->hp.bos_id = kipp_vocab_bos_id(m->vocab);
    m->hp.eos_id = kipp_vocab_eos_id(m->vocab);

    const kipp_model_info *hp = &m->hp;
    const int64_t H = hp->n_embd, V = hp->n_vocab;
    if ((st = bind(g, "token_embd.weight", H, V, &m->tok_embd, err, err_len))) goto fail;
    if ((st = bind(g, "output_norm.weight", H, 0, &m->output_norm, err, err_len))) goto fail;
    if ((st = read_pooling(g, m->arch, &m->hp.pooling, err, err_len))) goto fail;
    if (kipp_gguf_find_key(g, "tokenizer.ggml.add_eos_token") >= 0 &&
        (st = kipp_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &m->hp.add_eos, err, err_len)))
        goto fail;
    m->hp.has_lm_head = 1;
    if (kipp_gguf_find_tensor(g, "output.weight")) {
        if ((st = bind(g, "output.weight", H, V, &m->output, err, err_len))) goto fail;
    } else if (m->hp.pooling == KIPP_POOLING_LAST) {
        /* Qwen3-Embedding ships no lm_head and was never trained to predict tokens: tying
         * the embeddings would make a head that generates nonsense, so there is none */
        m->output = NULL;
        m->hp.has_lm_head = 0;
    } else {
        m->output = m->tok_embd;
        m->hp.tied_embeddings = 1;
    }
    if ((st = check_finite_small(m->output_norm, err, err_len))) goto fail;
    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "model: out of memory");
        goto fail;
    }
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        for (size_t i = 0; i < m->arch->n_tensors; i++) {
            const kipp_arch_tensor *t = &m->arch->tensors[i];
            const kipp_gguf_tensor **dst = (const kipp_gguf_tensor **)(void *)((char *)&m->layers[l] + t->off);
            char name[96];
            snprintf(name, sizeof name, "blk.%u.%s", l, t->name);
            if (!t->required && !kipp_gguf_find_tensor(g, name)) continue;
            const int64_t ne1 = dim_value(hp, t->ne[1]);
            if ((st = bind3(g, name, dim_value(hp, t->ne[0]), ne1, dim_value(hp, t->ne[2]), dst, err, err_len)))
                goto fail;
            if (ne1 == 0 && (st = check_finite_small(*dst, err, err_len))) goto fail;
        }
    }
    if ((st = bind_experts(m, err, err_len))) goto fail;
    *out = m;
    return KIPP_OK;
fail:
    if (path && err && err_len) {
        /* prefix the file name so the user knows which model is at fault */
        char tmp[KIPP_ERR_LEN];
        snprintf(tmp, sizeof tmp, "%s: %s", path, err);
        snprintf(err, err_len, "%s", tmp);
    }
    kipp_model_free(m);
    return st;
}

kipp_status kipp_model_load(const char *path, kipp_model **out, char *err, size_t err_len) {
    *out = NULL;
    if (!path || !*path)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "model: no model path given");
    kipp_gguf *g = NULL;
    kipp_status st = kipp_gguf_open(path, &g, err, err_len);
    if (st != KIPP_OK) {
        char tmp[KIPP_ERR_LEN];
        snprintf(tmp, sizeof tmp, "%s: %s", path, err ? err : "");
        if (err && err_len) snprintf(err, err_len, "%s", tmp);
        return st;
    }
    return kipp_model_from_gguf(g, path, out, err, err_len);
}

void kipp_model_free(kipp_model *m) {
    if (!m) return;
    kipp_vocab_free(m->vocab);
    free(m->layers);
    free(m->expert_views);
    kipp_gguf_free(m->gguf);
    free(m);
}

void kipp_model_get_info(const kipp_model *m, kipp_model_info *out) { *out = m->hp; }

kipp_status kipp_model_check_weights(const kipp_model *m, char *err, size_t err_len) {
    for (uint64_t i = 0; i < kipp_gguf_n_tensors(m->gguf); i++) {
        const kipp_gguf_tensor *t = kipp_gguf_tensor_at(m->gguf, i);
        uint64_t row = (uint64_t)t->ne[0], n_rows = t->n_elems / row;
        uint64_t row_bytes = kipp_type_row_bytes(t->type, row);
        float *buf = malloc(row * sizeof *buf);
        if (!buf) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "model: out of memory");
        for (uint64_t r = 0; r < n_rows; r++) {
            kipp_dequantize_row(t->type, (const char *)t->data + r * row_bytes, buf, row);
            for (uint64_t j = 0; j < row; j++) {
                if (!isfinite(buf[j])) {
                    const char *what = isnan(buf[j]) ? "NaN" : "Inf";
                    free(buf);
                    return kipp_errf(err, err_len, KIPP_ERR_NUMERIC,
                                     "model: tensor '%s' row %llu element %llu is %s", t->name,
                                     (unsigned long long)r, (unsigned long long)j, what);
                }
            }
        }
        free(buf);
    }
    return KIPP_OK;
}

/* ---- tokenizer pass-throughs (the vocab lives with the model) ------------------------- */

kipp_status kipp_tokenize(const kipp_model *m, const char *text, size_t len, int parse_special,
                          int32_t *ids, size_t cap, size_t *n_out, char *err, size_t err_len) {
    int32_t *tmp = NULL;
    size_t n = 0;
    kipp_status st = kipp_vocab_encode(m->vocab, text, len, parse_special, &tmp, &n, err, err_len);
    if (st != KIPP_OK) return st;
    *n_out = n;
    if (n > cap) {
        free(tmp);
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "tokenize: %zu tokens do not fit the buffer of %zu", n, cap);
    }
    if (n) memcpy(ids, tmp, n * sizeof *ids);
    free(tmp);
    return KIPP_OK;
}

kipp_status kipp_tokenize_alloc(const kipp_model *m, const char *text, size_t len,
                                int parse_special, int32_t **ids, size_t *n_out, char *err,
                                size_t err_len) {
    *ids = NULL;
    *n_out = 0;
    return kipp_vocab_encode(m->vocab, text, len, parse_special, ids, n_out, err, err_len);
}

kipp_status kipp_tokenize_spans(const kipp_model *m, const char *text, size_t len,
                                const size_t *plain, size_t n_plain, int32_t **ids,
                                size_t *n_out, char *err, size_t err_len) {
    *ids = NULL;
    *n_out = 0;
    return kipp_vocab_encode_spans(m->vocab, text, len, plain, n_plain, ids, n_out, err,
                                   err_len);
}

const char *kipp_token_bytes(const kipp_model *m, int32_t id, size_t *len) {
    return kipp_vocab_token_bytes(m->vocab, id, len);
}

int kipp_token_is_eog(const kipp_model *m, int32_t id) { return kipp_vocab_is_eog(m->vocab, id); }

kipp_status kipp_chat_apply(const kipp_model *m, const char *request_json, size_t len,
                            char **out, size_t *out_len, char *err, size_t err_len) {
    return kipp_chat_apply_spans(m, request_json, len, out, out_len, NULL, NULL, err, err_len);
}

/* spans may be NULL (kipp_chat_apply): the renderer then records none */
kipp_status kipp_chat_apply_spans(const kipp_model *m, const char *request_json, size_t len,
                                  char **out, size_t *out_len, size_t **spans, size_t *n_spans,
                                  char *err, size_t err_len) {
    kipp_chat_template_kind kind;
    *out = NULL;
    if (spans) *spans = NULL, *n_spans = 0;
    kipp_status st = kipp_chat_template_check(m->gguf, &kind, err, err_len);
    if (st != KIPP_OK) return st;
    return kipp_chat_render_json_spans(kind, request_json, len, out, out_len, spans, n_spans,
                                       err, err_len);
}

kipp_status kipp_chat_template_info(const kipp_model *m, int enable_thinking, const char **name,
                                    kipp_chat_thinking *thinking, char *err, size_t err_len) {
    kipp_chat_template_kind kind;
    kipp_status st = kipp_chat_template_check(m->gguf, &kind, err, err_len);
    if (name) *name = kipp_chat_template_name(kind);
    *thinking = kipp_chat_template_thinking(kind, enable_thinking);
    return st;
}

/* ---- detokenizer: the public handle around the tokenizer's streaming state ------------- */

struct kipp_detokenizer {
    kipp_detok d;
    char *buf; /* output of the last call; grows to the longest token seen (x3 + 9) */
    size_t cap;
};

kipp_status kipp_detokenizer_init(const kipp_model *m, int skip_special, kipp_detokenizer **out,
                                  char *err, size_t err_len) {
    *out = calloc(1, sizeof **out);
    if (!*out) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "detokenizer: out of memory");
    kipp_detok_init(&(*out)->d, m->vocab, skip_special);
    return KIPP_OK;
}

void kipp_detokenizer_free(kipp_detokenizer *d) {
    if (!d) return;
    free(d->buf);
    free(d);
}

/* _next (end = 0) and _end (end = 1): the text into d's own buffer, grown first. */
static kipp_status detok_step(kipp_detokenizer *d, int32_t id, int end, const char **text,
                              size_t *n_text) {
    *text = "";
    *n_text = 0;
    if (kipp_grow((void **)&d->buf, &d->cap, end ? KIPP_DETOK_FLUSH_MAX : kipp_detok_bound(&d->d, id),
                  1) != KIPP_OK)
        return KIPP_ERR_NOMEM;
    size_t n = 0;
    kipp_status st = end ? kipp_detok_flush(&d->d, d->buf, d->cap, &n)
                         : kipp_detok_push(&d->d, id, d->buf, d->cap, &n);
    if (st != KIPP_OK) return st;
    *text = d->buf ? d->buf : "";
    *n_text = n;
    return KIPP_OK;
}

kipp_status kipp_detokenizer_next(kipp_detokenizer *d, int32_t id, const char **text,
                                  size_t *n_text) {
    return detok_step(d, id, 0, text, n_text);
}

kipp_status kipp_detokenizer_end(kipp_detokenizer *d, const char **text, size_t *n_text) {
    return detok_step(d, 0, 1, text, n_text);
}

kipp_status kipp_detokenize(const kipp_model *m, const int32_t *ids, size_t n, int skip_special,
                            char **out, size_t *out_len, char *err, size_t err_len) {
    return kipp_detok_decode(m->vocab, ids, n, skip_special, out, out_len, err, err_len);
}

kipp_gguf_tensor kipp_model_head(const kipp_model *m, uint32_t n_logits) {
    kipp_gguf_tensor t = {0};
    if (!m->output || n_logits == 0) return t; /* embeddings: no head runs */
    t = *m->output;
    t.ne[1] = n_logits;
    t.n_elems = (uint64_t)t.ne[0] * n_logits;
    t.n_bytes = kipp_type_row_bytes(t.type, (uint64_t)t.ne[0]) * n_logits;
    return t;
}
