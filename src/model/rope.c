/* RoPE scaling: the file's keys, the overrides, and the inverse frequencies every backend
 * uses (model/rope.h). */
#include "model/rope.h"

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define ROPE_PI 3.14159265358979323846
#define ROPE_MAX_FACTOR 1024.0f
#define KIPP_MAX_CTX (1u << 22) /* scaled contexts beyond 4M tokens are refused */

const char *kipp_rope_scaling_name(kipp_rope_scaling t) {
    static const char *const names[] = {"none", "linear", "yarn"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

/* transformers' find_correction_dim: the pair index whose wavelength fits `rot` rotations
 * into the original context. */
static double correction_dim(double rot, double D, double base, double orig) {
    return D * log(orig / (rot * 2.0 * ROPE_PI)) / (2.0 * log(base));
}

void kipp_rope_inv_freq(const kipp_model_info *hp, uint32_t D, double *out) {
    const double base = hp->rope_theta;
    const uint32_t half = D / 2;
    for (uint32_t i = 0; i < half; i++) out[i] = pow(base, -2.0 * i / (double)D);
    if (hp->rope_scaling == KIPP_ROPE_SCALING_LINEAR) {
        for (uint32_t i = 0; i < half; i++) out[i] /= hp->rope_factor;
    } else if (hp->rope_scaling == KIPP_ROPE_SCALING_YARN) {
        const double orig = hp->rope_orig_ctx ? hp->rope_orig_ctx : hp->n_ctx_file;
        /* find_correction_range with truncate (transformers' default): floor / ceil */
        double lo = floor(correction_dim(hp->yarn_beta_fast, D, base, orig));
        double hi = ceil(correction_dim(hp->yarn_beta_slow, D, base, orig));
        if (lo < 0) lo = 0;
        if (hi > D - 1) hi = D - 1;
        if (lo == hi) hi += 0.001; /* linear_ramp_factor's guard */
        for (uint32_t i = 0; i < half; i++) {
            double ramp = (i - lo) / (hi - lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            const double extrap = 1.0 - ramp; /* 1: the pair keeps its frequency */
            out[i] = out[i] / hp->rope_factor * (1.0 - extrap) + out[i] * extrap;
        }
    }
}

double kipp_rope_attn_factor(const kipp_model_info *hp) {
    if (hp->rope_scaling != KIPP_ROPE_SCALING_YARN) return 1.0;
    const double m = hp->rope_factor <= 1.0f ? 1.0 : 0.1 * log((double)hp->rope_factor) + 1.0;
    return (double)hp->yarn_attn_factor * m;
}

void kipp_rope_tables(const double *inv_freq, double mag, uint32_t half, const uint32_t *pos,
                      uint32_t n, float *cs, float *sn) {
    for (uint32_t t = 0; t < n; t++) {
        const double p = pos ? pos[t] : t;
        for (uint32_t i = 0; i < half; i++) {
            const double theta = p * inv_freq[i];
            cs[(size_t)t * half + i] = (float)(cos(theta) * mag);
            sn[(size_t)t * half + i] = (float)(sin(theta) * mag);
        }
    }
}

void kipp_rope_describe(const kipp_model_info *hp, char *buf, size_t len) {
    switch (hp->rope_scaling) {
    case KIPP_ROPE_SCALING_LINEAR:
        snprintf(buf, len, "linear x%g (context %u)", (double)hp->rope_factor, hp->n_ctx_train);
        break;
    case KIPP_ROPE_SCALING_YARN:
        snprintf(buf, len, "yarn x%g (original context %u, context %u, attention factor %.4f)",
                 (double)hp->rope_factor, hp->rope_orig_ctx, hp->n_ctx_train, kipp_rope_attn_factor(hp));
        break;
    default: snprintf(buf, len, "none"); break;
    }
}

static kipp_status opt_f32(const kipp_gguf *g, const kipp_arch *a, const char *k, float *out, char *err,
                           size_t err_len) {
    char key[128];
    kipp_arch_key(a, k, key, sizeof key);
    if (kipp_gguf_find_key(g, key) < 0) return KIPP_OK;
    return kipp_gguf_get_f32(g, key, out, err, err_len);
}

kipp_status kipp_rope_read(const kipp_gguf *g, const kipp_arch *a, kipp_model_info *hp, char *err,
                           size_t err_len) {
    char key[128];
    kipp_status st;
    hp->rope_scaling = KIPP_ROPE_SCALING_NONE;
    hp->rope_factor = 1.0f;
    hp->rope_orig_ctx = 0;
    hp->yarn_attn_factor = 1.0f;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    hp->n_ctx_file = hp->n_ctx_train;
    kipp_arch_key(a, "rope.scaling.type", key, sizeof key);
    if (kipp_gguf_find_key(g, key) >= 0) {
        kipp_gguf_str s;
        if ((st = kipp_gguf_get_str(g, key, &s, err, err_len))) return st;
        if (s.len == 4 && !memcmp(s.ptr, "none", 4)) hp->rope_scaling = KIPP_ROPE_SCALING_NONE;
        else if (s.len == 6 && !memcmp(s.ptr, "linear", 6)) hp->rope_scaling = KIPP_ROPE_SCALING_LINEAR;
        else if (s.len == 4 && !memcmp(s.ptr, "yarn", 4)) hp->rope_scaling = KIPP_ROPE_SCALING_YARN;
        else
            return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                             "model: %s '%.*s' is not supported; Kipp runs none, linear and yarn", key,
                             (int)(s.len > 32 ? 32 : s.len), s.ptr);
    }
    if ((st = opt_f32(g, a, "rope.scaling.factor", &hp->rope_factor, err, err_len))) return st;
    if (hp->rope_factor == 0.0f) hp->rope_factor = 1.0f; /* llama.cpp: 0 means no scaling */
    kipp_arch_key(a, "rope.scaling.original_context_length", key, sizeof key);
    if (kipp_gguf_find_key(g, key) >= 0 &&
        (st = kipp_gguf_get_u32(g, key, &hp->rope_orig_ctx, err, err_len)))
        return st;
    /* llama.cpp's two spellings of the attention-factor multiplier */
    if ((st = opt_f32(g, a, "rope.scaling.attn_factor", &hp->yarn_attn_factor, err, err_len))) return st;
    if ((st = opt_f32(g, a, "rope.scaling.yarn_attn_factor", &hp->yarn_attn_factor, err, err_len))) return st;
    if ((st = opt_f32(g, a, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast, err, err_len))) return st;
    if ((st = opt_f32(g, a, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow, err, err_len))) return st;
    return kipp_rope_finish(hp, err, err_len);
}

kipp_status kipp_rope_finish(kipp_model_info *hp, char *err, size_t err_len) {
    hp->n_ctx_train = hp->n_ctx_file;
    if (hp->rope_scaling == KIPP_ROPE_SCALING_NONE) return KIPP_OK;
    const char *name = kipp_rope_scaling_name(hp->rope_scaling);
    if (!(hp->rope_factor >= 1.0f && hp->rope_factor <= ROPE_MAX_FACTOR))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "rope scaling %s: factor %g is out of range (1 to %g)", name, (double)hp->rope_factor,
                         (double)ROPE_MAX_FACTOR);
    if (hp->rope_scaling == KIPP_ROPE_SCALING_YARN) {
        if (!hp->rope_orig_ctx) hp->rope_orig_ctx = hp->n_ctx_file;
        if (!(hp->yarn_attn_factor > 0.0f && hp->yarn_attn_factor <= 16.0f))
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "rope scaling yarn: attention factor %g is out of range (0 to 16)",
                             (double)hp->yarn_attn_factor);
        if (!(hp->yarn_beta_fast > 0.0f && hp->yarn_beta_slow > 0.0f && isfinite(hp->yarn_beta_fast) &&
              isfinite(hp->yarn_beta_slow)))
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "rope scaling yarn: beta_fast %g and beta_slow %g must be positive",
                             (double)hp->yarn_beta_fast, (double)hp->yarn_beta_slow);
    }
    const uint32_t base = hp->rope_orig_ctx ? hp->rope_orig_ctx : hp->n_ctx_file;
    const double scaled = (double)base * hp->rope_factor;
    if (scaled > (double)KIPP_MAX_CTX)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "rope scaling %s: %u x %g = %.0f tokens exceeds Kipp's limit of %u", name, base,
                         (double)hp->rope_factor, scaled, (unsigned)KIPP_MAX_CTX);
    if ((uint32_t)scaled > hp->n_ctx_train) hp->n_ctx_train = (uint32_t)scaled;
    return KIPP_OK;
}

kipp_status kipp_model_set_rope(kipp_model *m, const kipp_rope_params *p, char *err, size_t err_len) {
    kipp_model_info hp = m->hp;
    if (p->type >= 0) {
        if (p->type > KIPP_ROPE_SCALING_YARN)
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "rope scaling type %d is unknown", p->type);
        hp.rope_scaling = (kipp_rope_scaling)p->type;
    }
    if (p->factor > 0) hp.rope_factor = p->factor;
    if (p->factor > 1.0f && hp.rope_scaling == KIPP_ROPE_SCALING_NONE)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "rope scale %g given, but the rope scaling is none; add --rope-scaling yarn or linear",
                         (double)p->factor);
    if (p->orig_ctx) hp.rope_orig_ctx = p->orig_ctx;
    if (p->attn_factor > 0) hp.yarn_attn_factor = p->attn_factor;
    if (p->beta_fast > 0) hp.yarn_beta_fast = p->beta_fast;
    if (p->beta_slow > 0) hp.yarn_beta_slow = p->beta_slow;
    kipp_status st = kipp_rope_finish(&hp, err, err_len);
    if (st == KIPP_OK) m->hp = hp;
    return st;
}
