/* quantize.c — see quantize.h. Every step mirrors one numpy float32 operation of
 * tools/kipp_quants.py, in the same order, so the bytes match:
 *   - numpy's element-wise ufuncs round each operation once: no FMA here (the Makefile
 *     builds this file with -ffp-contract=off), and expressions keep Python's left-to-right
 *     order (`2 * s * m * sl` is ((2s)m)sl);
 *   - the per-sub-block sums (kipp_quants' _rowsum/_rowdot, numpy.einsum over 16 or 32
 *     contiguous floats) follow einsum's 128-bit SIMD loops (numpy's x86-64 baseline build):
 *     four lanes, lane l adding elements l, l+4, l+8, l+12 of each 16 in a fixed nesting,
 *     then (l0 + l1) + (l2 + l3), then added to the zeroed output (np_dot, np_sum);
 *   - np.rint (round half to even) of a value clipped to a small integer range is
 *     (v + 1.5 * 2^23) - 1.5 * 2^23, and clipping before rounding equals numpy's rounding
 *     before clipping because the bounds are integers;
 *   - np.maximum(a, 0) keeps a only when a > 0 (an exact zero becomes +0), likewise minimum;
 *   - Python float constants (14 + 0.1 * st) are computed in double, then rounded to float. */
#include "core/quantize.h"

#include "core/types.h"

#include <math.h>
#include <string.h>

#define QK_K 256
#define GROUP_MAX_EPS 1e-15f

int kipp_quantize_supported(uint32_t type_id) {
    return type_id == KIPP_TYPE_Q8_0 || type_id == KIPP_TYPE_Q4_0 || type_id == KIPP_TYPE_Q4_K ||
           type_id == KIPP_TYPE_Q6_K;
}

/* einsum('ij,ij->i') over one row of n (16 or 32) floats, in numpy's order. */
static inline float np_dot(const float *a, const float *b, int n) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int c = 0; c < n; c += 16)
        for (int l = 0; l < 4; l++) {
            float t = a[c + 12 + l] * b[c + 12 + l] + acc[l];
            t = a[c + 8 + l] * b[c + 8 + l] + t;
            t = a[c + 4 + l] * b[c + 4 + l] + t;
            acc[l] = a[c + l] * b[c + l] + t;
        }
    return 0.0f + ((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

/* einsum('ij->i') over one row of n (16 or 32) floats, in numpy's order. */
static inline float np_sum(const float *a, int n) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int c = 0; c < n; c += 16)
        for (int l = 0; l < 4; l++)
            acc[l] = ((a[c + l] + a[c + 4 + l]) + (a[c + 8 + l] + a[c + 12 + l])) + acc[l];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + 0.0f;
}

/* np.clip(np.rint(v), lo, hi) for integer bounds within +-2^22; NaN becomes lo. */
static inline float rint_clip(float v, float lo, float hi) {
    v = v >= lo ? v : lo;
    v = v <= hi ? v : hi;
    return (v + 0x1.8p23f) - 0x1.8p23f;
}

static inline float f16_round(float f) { return kipp_f16_to_f32(kipp_f32_to_f16(f)); }

static inline void put_f16(uint8_t *p, float f) {
    const uint16_t h = kipp_f32_to_f16(f);
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

/* ---- Q8_0: 34 bytes per 32 values ------------------------------------------------------- */

static void q8_0_block(const float *x, uint8_t *out) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) {
        const float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    const float d = amax / 127.0f;
    const float inv = d == 0.0f ? 0.0f : 1.0f / d;
    put_f16(out, d);
    for (int i = 0; i < 32; i++) {
        const float v = x[i] * inv;
        float a = fabsf(v);
        a = a <= 127.0f ? a : 127.0f; /* also NaN -> 0 below */
        const float fl = (float)(int)a;
        const float q = fl + (a - fl >= 0.5f ? 1.0f : 0.0f); /* roundf: halves away from 0 */
        out[2 + i] = (uint8_t)(int8_t)(v < 0.0f ? -q : q);
    }
}

/* ---- Q4_0: 18 bytes per 32 values ------------------------------------------------------- */

static void q4_0_block(const float *x, uint8_t *out) {
    int imax = 0;
    float amax = fabsf(x[0]);
    for (int i = 1; i < 32; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); imax = i; } /* argmax: first of ties */
    const float d = x[imax] / -8.0f;
    const float inv = d == 0.0f ? 0.0f : 1.0f / d;
    put_f16(out, d);
    uint8_t q[32];
    for (int i = 0; i < 32; i++) {
        float v = x[i] * inv + 8.5f;
        v = v >= 0.0f ? v : 0.0f;
        v = v <= 15.0f ? v : 15.0f;
        q[i] = (uint8_t)(int)v; /* trunc, then min(15) */
    }
    for (int i = 0; i < 16; i++) out[2 + i] = (uint8_t)(q[i] | (q[i + 16] << 4));
}

/* ---- Q4_K: 144 bytes per 256 values ----------------------------------------------------- */

static float q4_k_step[21]; /* np.float32(14 + 0.1 * st), st = 0..20 */
static float q6_k_step[18]; /* np.float32(-(32 + 0.1 * st)), st = -9..9 without 0 */

static void init_steps(void) {
    static volatile int done;
    if (done) return;
    for (int st = 0; st <= 20; st++) q4_k_step[st] = (float)(14.0 + 0.1 * st);
    for (int st = -9, k = 0; st <= 9; st++)
        if (st) q6_k_step[k++] = (float)(-(32.0 + 0.1 * st));
    done = 1; /* every thread writes the same values: a race here is harmless */
}

static inline float q4_k_err(float s, float m, float sl, float sl2, float sxl, float sum_w,
                             float sum_x, float sum_x2) {
    float t = s * s * sl2;
    t = t + 2.0f * s * m * sl;
    t = t - 2.0f * s * sxl;
    t = t + m * m * sum_w;
    t = t - 2.0f * m * sum_x;
    return t + sum_x2;
}

static inline void q4_k_fit(const float *xm, const float *w, const float *x, float iscale,
                            float *sl, float *sl2, float *sxl) {
    float L[32], wl[32];
    for (int i = 0; i < 32; i++) {
        L[i] = rint_clip(xm[i] * iscale, 0.0f, 15.0f);
        wl[i] = w[i] * L[i];
    }
    *sl = np_sum(wl, 32);
    *sl2 = np_dot(wl, L, 32);
    *sxl = np_dot(wl, x, 32);
}

/* kipp_quants.quantize_q4_k's per-sub-block weighted least-squares scale/min search. */
static void q4_k_sub(const float *x, float *scale_out, float *min_out) {
    float w[32], wx[32], xm[32];
    const float av = sqrtf(np_dot(x, x, 32) / 32.0f);
    float mn = x[0], mx = x[0];
    for (int i = 0; i < 32; i++) {
        w[i] = fabsf(x[i]) + av;
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    mn = mn < 0.0f ? mn : 0.0f;
    const float rng = mx - mn;
    const int ok = rng > 0.0f;
    const float rs = ok ? rng : 1.0f;
    for (int i = 0; i < 32; i++) {
        wx[i] = w[i] * x[i];
        xm[i] = x[i] - mn;
    }
    const float sum_w = np_sum(w, 32), sum_x = np_sum(wx, 32), sum_x2 = np_dot(wx, x, 32);
    float scale = rng / 15.0f, the_min = mn, sl, sl2, sxl;
    q4_k_fit(xm, w, x, 15.0f / rs, &sl, &sl2, &sxl);
    float best = q4_k_err(scale, the_min, sl, sl2, sxl, sum_w, sum_x, sum_x2);
    for (int st = 0; st <= 20; st++) {
        q4_k_fit(xm, w, x, q4_k_step[st] / rs, &sl, &sl2, &sxl);
        const float D = sum_w * sl2 - sl * sl;
        float s = (sum_w * sxl - sum_x * sl) / D;
        float m = (sl2 * sum_x - sl * sxl) / D;
        if (m > 0.0f) {
            m = 0.0f;
            s = sxl / sl2;
        }
        const float e = q4_k_err(s, m, sl, sl2, sxl, sum_w, sum_x, sum_x2);
        if (D > 0.0f && e < best && isfinite(e)) {
            scale = s;
            the_min = m;
            best = e;
        }
    }
    *scale_out = ok && scale > 0.0f ? scale : 0.0f;
    *min_out = ok && -the_min > 0.0f ? -the_min : 0.0f;
}

static void q4_k_block(const float *x, uint8_t *out) {
    float scale[8], mins[8];
    for (int j = 0; j < 8; j++) q4_k_sub(x + 32 * j, &scale[j], &mins[j]);
    float max_scale = scale[0], max_min = mins[0];
    for (int j = 1; j < 8; j++) {
        max_scale = scale[j] > max_scale ? scale[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    const float inv_s = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_m = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)rint_clip(scale[j] * inv_s, 0.0f, 63.0f);
        lm[j] = (uint8_t)rint_clip(mins[j] * inv_m, 0.0f, 63.0f);
    }
    put_f16(out, max_scale / 63.0f);
    put_f16(out + 2, max_min / 63.0f);
    const float d = f16_round(max_scale / 63.0f), dmin = f16_round(max_min / 63.0f);
    uint8_t *sc = out + 4;
    for (int j = 0; j < 4; j++) {
        sc[j] = (uint8_t)(ls[j] | ((ls[j + 4] >> 4) << 6));
        sc[j + 4] = (uint8_t)(lm[j] | ((lm[j + 4] >> 4) << 6));
        sc[j + 8] = (uint8_t)((ls[j + 4] & 0x0f) | ((lm[j + 4] & 0x0f) << 4));
    }
    uint8_t q[QK_K];
    for (int j = 0; j < 8; j++) {
        const float d_eff = d * (float)ls[j], m_eff = dmin * (float)lm[j];
        for (int i = 0; i < 32; i++)
            q[32 * j + i] = d_eff > 0.0f
                                ? (uint8_t)rint_clip((x[32 * j + i] + m_eff) / d_eff, 0.0f, 15.0f)
                                : 0;
    }
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++)
            out[16 + 32 * g + l] = (uint8_t)(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
}

/* ---- Q6_K: 210 bytes per 256 values ----------------------------------------------------- */

static inline void q6_k_fit(const float *x, const float *w, float iscale, float *slx,
                            float *sl2) {
    float L[16], wl[16];
    for (int i = 0; i < 16; i++) {
        L[i] = rint_clip(x[i] * iscale, -32.0f, 31.0f);
        wl[i] = w[i] * L[i];
    }
    *slx = np_dot(wl, x, 16);
    *sl2 = np_dot(wl, L, 16);
}

/* kipp_quants.quantize_q6_k's per-sub-block scale search (ggml's make_qx_quants, rmse 1). */
static float q6_k_sub(const float *x) {
    float w[16], hi = x[0], lo = x[0];
    for (int i = 0; i < 16; i++) {
        w[i] = x[i] * x[i];
        hi = x[i] > hi ? x[i] : hi;
        lo = x[i] < lo ? x[i] : lo;
    }
    const float mxv = -lo > hi ? lo : hi;
    if (!(fabsf(mxv) >= GROUP_MAX_EPS)) return 0.0f;
    float slx, sl2;
    q6_k_fit(x, w, -32.0f / mxv, &slx, &sl2);
    float scale = sl2 > 0.0f ? slx / sl2 : 0.0f;
    float best = scale * slx;
    for (int k = 0; k < 18; k++) {
        q6_k_fit(x, w, q6_k_step[k] / mxv, &slx, &sl2);
        if (sl2 > 0.0f && slx * slx > best * sl2) {
            scale = slx / sl2;
            best = scale * slx;
        }
    }
    return scale;
}

static void q6_k_block(const float *x, uint8_t *out) {
    float scale[16];
    for (int j = 0; j < 16; j++) scale[j] = q6_k_sub(x + 16 * j);
    float hi = scale[0], lo = scale[0];
    for (int j = 1; j < 16; j++) {
        hi = scale[j] > hi ? scale[j] : hi;
        lo = scale[j] < lo ? scale[j] : lo;
    }
    const float max_scale = -lo > hi ? lo : hi;
    if (!(fabsf(max_scale) >= GROUP_MAX_EPS)) { /* ggml writes an all-zero block */
        memset(out, 0, 210);
        return;
    }
    const float iscale = -128.0f / max_scale;
    put_f16(out + 208, 1.0f / iscale);
    const float d = f16_round(1.0f / iscale);
    int8_t sc[16];
    for (int j = 0; j < 16; j++) {
        sc[j] = (int8_t)rint_clip(iscale * scale[j], -128.0f, 127.0f);
        out[192 + j] = (uint8_t)sc[j];
    }
    uint8_t q[QK_K];
    for (int j = 0; j < 16; j++) {
        const float d_eff = d * (float)sc[j];
        for (int i = 0; i < 16; i++)
            q[16 * j + i] = (uint8_t)(32 + (d_eff != 0.0f ? (int)rint_clip(x[16 * j + i] / d_eff,
                                                                            -32.0f, 31.0f)
                                                           : 0));
    }
    for (int h = 0; h < 2; h++) {
        const uint8_t *qq = q + 128 * h; /* quarters qq[32 * k + l], k = 0..3 */
        uint8_t *ql = out + 64 * h, *qh = out + 128 + 32 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((qq[l] & 0x0f) | ((qq[64 + l] & 0x0f) << 4));
            ql[32 + l] = (uint8_t)((qq[32 + l] & 0x0f) | ((qq[96 + l] & 0x0f) << 4));
            qh[l] = (uint8_t)((qq[l] >> 4) | ((qq[32 + l] >> 4) << 2) | ((qq[64 + l] >> 4) << 4) |
                              ((qq[96 + l] >> 4) << 6));
        }
    }
}

size_t kipp_quantize_row(uint32_t type_id, const float *x, void *dst, uint64_t n) {
    uint8_t *out = dst;
    init_steps();
    switch (type_id) {
    case KIPP_TYPE_Q8_0:
        for (uint64_t b = 0; b < n / 32; b++) q8_0_block(x + 32 * b, out + 34 * b);
        return (size_t)(n / 32 * 34);
    case KIPP_TYPE_Q4_0:
        for (uint64_t b = 0; b < n / 32; b++) q4_0_block(x + 32 * b, out + 18 * b);
        return (size_t)(n / 32 * 18);
    case KIPP_TYPE_Q4_K:
        for (uint64_t b = 0; b < n / QK_K; b++) q4_k_block(x + QK_K * b, out + 144 * b);
        return (size_t)(n / QK_K * 144);
    case KIPP_TYPE_Q6_K:
        for (uint64_t b = 0; b < n / QK_K; b++) q6_k_block(x + QK_K * b, out + 210 * b);
        return (size_t)(n / QK_K * 210);
    default:
        return 0;
    }
}
