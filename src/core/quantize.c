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

#include <float.h>
#include <math.h>
#include <string.h>

#define QK_K 256
#define GROUP_MAX_EPS 1e-15f
#define NL 8 /* sub-blocks searched side by side (one per vector lane) */

/* The scale searches are built twice on x86-64 with GCC, for AVX2 (8 lanes per operation)
 * and the baseline, and picked at load time (ifunc); both give the same bytes. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define KIPP_QUANT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KIPP_QUANT_CLONES
#endif

int kipp_quantize_supported(uint32_t type_id) {
    return type_id == KIPP_TYPE_Q8_0 || type_id == KIPP_TYPE_Q4_0 || type_id == KIPP_TYPE_Q4_K ||
           type_id == KIPP_TYPE_Q6_K;
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

/* numpy's einsum sums over n (16 or 32) values of NL sub-blocks side by side: a[i][s] is
 * value i of sub-block s, so each step below is one vector operation across sub-blocks and
 * every lane does exactly what numpy's loop does for its row. */
static inline void np_dot8(const float (*a)[NL], const float (*b)[NL], int n, float *out) {
    float acc[4][NL] = {{0}};
    for (int c = 0; c < n; c += 16)
        for (int l = 0; l < 4; l++)
            for (int k = 3; k >= 0; k--)
                for (int s = 0; s < NL; s++)
                    acc[l][s] = a[c + 4 * k + l][s] * b[c + 4 * k + l][s] + acc[l][s];
    for (int s = 0; s < NL; s++)
        out[s] = 0.0f + ((acc[0][s] + acc[1][s]) + (acc[2][s] + acc[3][s]));
}

static inline void np_sum8(const float (*a)[NL], int n, float *out) {
    float acc[4][NL] = {{0}};
    for (int c = 0; c < n; c += 16)
        for (int l = 0; l < 4; l++)
            for (int s = 0; s < NL; s++)
                acc[l][s] = ((a[c + l][s] + a[c + 4 + l][s]) + (a[c + 8 + l][s] + a[c + 12 + l][s])) +
                            acc[l][s];
    for (int s = 0; s < NL; s++)
        out[s] = ((acc[0][s] + acc[1][s]) + (acc[2][s] + acc[3][s])) + 0.0f;
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

typedef struct {
    float x[32][NL], w[32][NL], xm[32][NL], L[32][NL], wl[32][NL];
} q4_k_work;

static inline void q4_k_fit(q4_k_work *k, const float *iscale, float *sl, float *sl2,
                            float *sxl) {
    for (int i = 0; i < 32; i++)
        for (int s = 0; s < NL; s++) {
            k->L[i][s] = rint_clip(k->xm[i][s] * iscale[s], 0.0f, 15.0f);
            k->wl[i][s] = k->w[i][s] * k->L[i][s];
        }
    np_sum8((const float (*)[NL])k->wl, 32, sl);
    np_dot8((const float (*)[NL])k->wl, (const float (*)[NL])k->L, 32, sl2);
    np_dot8((const float (*)[NL])k->wl, (const float (*)[NL])k->x, 32, sxl);
}

/* kipp_quants.quantize_q4_k's weighted least-squares scale/min search for the 8 sub-blocks of
 * 32 values of one super-block x, one per lane. */
KIPP_QUANT_CLONES static void q4_k_search(const float *x, float *scale_out, float *min_out) {
    q4_k_work k;
    float av[NL], mn[NL], mx[NL], rs[NL], rng[NL], sum_w[NL], sum_x[NL], sum_x2[NL];
    float scale[NL], the_min[NL], best[NL], iscale[NL], sl[NL], sl2[NL], sxl[NL];
    float wx[32][NL];
    for (int i = 0; i < 32; i++)
        for (int s = 0; s < NL; s++) k.x[i][s] = x[32 * s + i];
    np_dot8((const float (*)[NL])k.x, (const float (*)[NL])k.x, 32, av);
    for (int s = 0; s < NL; s++) {
        av[s] = sqrtf(av[s] / 32.0f);
        mn[s] = mx[s] = k.x[0][s];
    }
    for (int i = 0; i < 32; i++)
        for (int s = 0; s < NL; s++) {
            const float v = k.x[i][s];
            k.w[i][s] = fabsf(v) + av[s];
            mn[s] = v < mn[s] ? v : mn[s];
            mx[s] = v > mx[s] ? v : mx[s];
        }
    for (int s = 0; s < NL; s++) {
        mn[s] = mn[s] < 0.0f ? mn[s] : 0.0f;
        rng[s] = mx[s] - mn[s];
        rs[s] = rng[s] > 0.0f ? rng[s] : 1.0f;
    }
    for (int i = 0; i < 32; i++)
        for (int s = 0; s < NL; s++) {
            wx[i][s] = k.w[i][s] * k.x[i][s];
            k.xm[i][s] = k.x[i][s] - mn[s];
        }
    np_sum8((const float (*)[NL])k.w, 32, sum_w);
    np_sum8((const float (*)[NL])wx, 32, sum_x);
    np_dot8((const float (*)[NL])wx, (const float (*)[NL])k.x, 32, sum_x2);
    for (int s = 0; s < NL; s++) {
        scale[s] = rng[s] / 15.0f;
        the_min[s] = mn[s];
        iscale[s] = 15.0f / rs[s];
    }
    q4_k_fit(&k, iscale, sl, sl2, sxl);
    for (int s = 0; s < NL; s++)
        best[s] = q4_k_err(scale[s], the_min[s], sl[s], sl2[s], sxl[s], sum_w[s], sum_x[s],
                           sum_x2[s]);
    for (int st = 0; st <= 20; st++) {
        for (int s = 0; s < NL; s++) iscale[s] = q4_k_step[st] / rs[s];
        q4_k_fit(&k, iscale, sl, sl2, sxl);
        for (int s = 0; s < NL; s++) {
            const float D = sum_w[s] * sl2[s] - sl[s] * sl[s];
            const float s0 = (sum_w[s] * sxl[s] - sum_x[s] * sl[s]) / D;
            const float m0 = (sl2[s] * sum_x[s] - sl[s] * sxl[s]) / D;
            const int pos = m0 > 0.0f;
            const float m1 = pos ? 0.0f : m0;
            const float s1 = pos ? sxl[s] / sl2[s] : s0;
            const float e = q4_k_err(s1, m1, sl[s], sl2[s], sxl[s], sum_w[s], sum_x[s], sum_x2[s]);
            const int better = D > 0.0f && e < best[s] && fabsf(e) <= FLT_MAX;
            scale[s] = better ? s1 : scale[s];
            the_min[s] = better ? m1 : the_min[s];
            best[s] = better ? e : best[s];
        }
    }
    for (int s = 0; s < NL; s++) {
        const int ok = rng[s] > 0.0f;
        scale_out[s] = ok && scale[s] > 0.0f ? scale[s] : 0.0f;
        min_out[s] = ok && -the_min[s] > 0.0f ? -the_min[s] : 0.0f;
    }
}

static void q4_k_block(const float *x, uint8_t *out) {
    float scale[8], mins[8];
    q4_k_search(x, scale, mins);
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

typedef struct {
    float x[16][NL], w[16][NL], L[16][NL], wl[16][NL];
} q6_k_work;

static inline void q6_k_fit(q6_k_work *k, const float *iscale, float *slx, float *sl2) {
    for (int i = 0; i < 16; i++)
        for (int s = 0; s < NL; s++) {
            k->L[i][s] = rint_clip(k->x[i][s] * iscale[s], -32.0f, 31.0f);
            k->wl[i][s] = k->w[i][s] * k->L[i][s];
        }
    np_dot8((const float (*)[NL])k->wl, (const float (*)[NL])k->x, 16, slx);
    np_dot8((const float (*)[NL])k->wl, (const float (*)[NL])k->L, 16, sl2);
}

/* kipp_quants.quantize_q6_k's scale search (ggml's make_qx_quants, rmse type 1) for NL
 * sub-blocks of 16 values of x, one per lane. */
KIPP_QUANT_CLONES static void q6_k_search(const float *x, float *scale_out) {
    q6_k_work k;
    float hi[NL], lo[NL], mxs[NL], iscale[NL], slx[NL], sl2[NL], scale[NL], best[NL];
    int ok[NL];
    for (int i = 0; i < 16; i++)
        for (int s = 0; s < NL; s++) {
            k.x[i][s] = x[16 * s + i];
            k.w[i][s] = k.x[i][s] * k.x[i][s];
        }
    for (int s = 0; s < NL; s++) hi[s] = lo[s] = k.x[0][s];
    for (int i = 0; i < 16; i++)
        for (int s = 0; s < NL; s++) {
            hi[s] = k.x[i][s] > hi[s] ? k.x[i][s] : hi[s];
            lo[s] = k.x[i][s] < lo[s] ? k.x[i][s] : lo[s];
        }
    for (int s = 0; s < NL; s++) {
        const float mxv = -lo[s] > hi[s] ? lo[s] : hi[s];
        ok[s] = fabsf(mxv) >= GROUP_MAX_EPS;
        mxs[s] = ok[s] ? mxv : 1.0f;
        iscale[s] = -32.0f / mxs[s];
    }
    q6_k_fit(&k, iscale, slx, sl2);
    for (int s = 0; s < NL; s++) {
        scale[s] = sl2[s] > 0.0f ? slx[s] / sl2[s] : 0.0f;
        best[s] = scale[s] * slx[s];
    }
    for (int st = 0; st < 18; st++) {
        for (int s = 0; s < NL; s++) iscale[s] = q6_k_step[st] / mxs[s];
        q6_k_fit(&k, iscale, slx, sl2);
        for (int s = 0; s < NL; s++) {
            const int better = sl2[s] > 0.0f && slx[s] * slx[s] > best[s] * sl2[s];
            const float sc = better ? slx[s] / sl2[s] : scale[s];
            best[s] = better ? sc * slx[s] : best[s];
            scale[s] = sc;
        }
    }
    for (int s = 0; s < NL; s++) scale_out[s] = ok[s] ? scale[s] : 0.0f;
}

static void q6_k_block(const float *x, uint8_t *out) {
    float scale[16];
    q6_k_search(x, scale);
    q6_k_search(x + 16 * NL, scale + NL);
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
