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
 *   - Python float constants (15 + -1.0 + 0.1 * st) are computed in double, then rounded to
 *     float;
 *   - numpy's halving min/max reductions (_rowreduce) give the sequential min/max here. */
#include "core/quantize.h"

#include "core/types.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
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
    switch (type_id) {
    case KIPP_TYPE_Q8_0: case KIPP_TYPE_Q4_0: case KIPP_TYPE_Q4_1: case KIPP_TYPE_Q5_0:
    case KIPP_TYPE_Q5_1: case KIPP_TYPE_Q2_K: case KIPP_TYPE_Q3_K: case KIPP_TYPE_Q4_K:
    case KIPP_TYPE_Q5_K: case KIPP_TYPE_Q6_K: case KIPP_TYPE_IQ4_NL: case KIPP_TYPE_IQ4_XS:
        return 1;
    default:
        return 0;
    }
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

/* ---- Q4_1, Q5_0, Q5_1: 20, 22, 24 bytes per 32 values ------------------------------------ */

static void pack_nibbles32(const uint8_t *q, uint8_t *out) {
    for (int i = 0; i < 16; i++) out[i] = (uint8_t)((q[i] & 0x0f) | ((q[i + 16] & 0x0f) << 4));
}

static void put_qh32(const uint8_t *q, uint8_t *out) { /* fifth bits, a little-endian u32 */
    uint32_t h = 0;
    for (int i = 0; i < 32; i++) h |= (uint32_t)((q[i] >> 4) & 1) << i;
    for (int i = 0; i < 4; i++) out[i] = (uint8_t)(h >> (8 * i));
}

/* ggml's quantize_row_q4_1_ref / q5_1_ref: d = (max - min) / nmax, q = trunc((x - min)/d + 0.5). */
static void minmax_block(const float *x, float nmax, uint8_t *out, uint8_t *q) {
    float mn = x[0], mx = x[0];
    for (int i = 1; i < 32; i++) {
        mn = x[i] < mn ? x[i] : mn;
        mx = x[i] > mx ? x[i] : mx;
    }
    const float d = (mx - mn) / nmax;
    const float inv = d == 0.0f ? 0.0f : 1.0f / d;
    put_f16(out, d);
    put_f16(out + 2, mn);
    for (int i = 0; i < 32; i++) {
        float v = (x[i] - mn) * inv + 0.5f;
        v = v >= 0.0f ? v : 0.0f;
        v = v <= nmax ? v : nmax;
        q[i] = (uint8_t)(int)v;
    }
}

static void q4_1_block(const float *x, uint8_t *out) {
    uint8_t q[32];
    minmax_block(x, 15.0f, out, q);
    pack_nibbles32(q, out + 4);
}

static void q5_1_block(const float *x, uint8_t *out) {
    uint8_t q[32];
    minmax_block(x, 31.0f, out, q);
    put_qh32(q, out + 4);
    pack_nibbles32(q, out + 8);
}

static void q5_0_block(const float *x, uint8_t *out) {
    int imax = 0;
    float amax = fabsf(x[0]);
    for (int i = 1; i < 32; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); imax = i; }
    const float d = x[imax] / -16.0f;
    const float inv = d == 0.0f ? 0.0f : 1.0f / d;
    put_f16(out, d);
    uint8_t q[32];
    for (int i = 0; i < 32; i++) {
        float v = x[i] * inv + 16.5f;
        v = v >= 0.0f ? v : 0.0f;
        v = v <= 31.0f ? v : 31.0f;
        q[i] = (uint8_t)(int)v;
    }
    put_qh32(q, out + 2);
    pack_nibbles32(q, out + 6);
}

/* ---- the K-quants' (scale, min) search: Q4_K, Q5_K, Q2_K -------------------------------- */

#define QKX2_STEPS 21
static float q4_k_step[QKX2_STEPS]; /* np.float32(15 + -1.0 + 0.1 * st), st = 0..20 */
static float q5_k_step[QKX2_STEPS]; /* np.float32(31 + -0.5 + 0.1 * st), st = 0..15 */
static float q2_k_step[QKX2_STEPS]; /* np.float32(3 + -0.5 + 0.1 * st), st = 0..15 */
static float q6_k_step[18];         /* np.float32(-(32 + 0.1 * st)), st = -9..9 without 0 */
static uint8_t iq4_lut[514];        /* kipp_quants._IQ4_LUT: nearest level of v in [k/2, (k+1)/2) */
static const float IQ4_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

static void init_tables(void) {
    for (int st = 0; st <= 20; st++) q4_k_step[st] = (float)(15.0 + -1.0 + 0.1 * st);
    for (int st = 0; st <= 15; st++) {
        q5_k_step[st] = (float)(31.0 + -0.5 + 0.1 * st);
        q2_k_step[st] = (float)(3.0 + -0.5 + 0.1 * st);
    }
    for (int st = -9, k = 0; st <= 9; st++)
        if (st) q6_k_step[k++] = (float)(-(32.0 + 0.1 * st));
    for (int k = 0; k < 514; k++) { /* searchsorted(midpoints, k/2 - 128, side="right") */
        const float v = (float)(k - 256) / 2.0f;
        int n = 0;
        for (int j = 0; j < 15; j++) n += (IQ4_VALUES[j] + IQ4_VALUES[j + 1]) / 2.0f <= v;
        iq4_lut[k] = (uint8_t)n;
    }
}

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

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

static inline float qkx2_err(float s, float m, float sl, float sl2, float sxl, float sum_w,
                             float sum_x, float sum_x2) {
    float t = s * s * sl2;
    t = t + 2.0f * s * m * sl;
    t = t - 2.0f * s * sxl;
    t = t + m * m * sum_w;
    t = t - 2.0f * m * sum_x;
    return t + sum_x2;
}

typedef struct {
    float x[32][NL], w[32][NL], xm[32][NL], L[32][NL], wl[32][NL], d[32][NL];
} qkx2_work;

static inline void qkx2_fit(qkx2_work *k, int n, float nmax, const float *iscale, float *sl,
                            float *sl2, float *sxl) {
    for (int i = 0; i < n; i++)
        for (int s = 0; s < NL; s++) {
            k->L[i][s] = rint_clip(k->xm[i][s] * iscale[s], 0.0f, nmax);
            k->wl[i][s] = k->w[i][s] * k->L[i][s];
        }
    np_sum8((const float (*)[NL])k->wl, n, sl);
    np_dot8((const float (*)[NL])k->wl, (const float (*)[NL])k->L, n, sl2);
    np_dot8((const float (*)[NL])k->wl, (const float (*)[NL])k->x, n, sxl);
}

/* Q2_K's error: the weighted absolute error sum(w * |s*L + m - x|) with the current L. */
static inline void qkx2_mad(qkx2_work *k, int n, const float *sc, const float *m, float *out) {
    for (int i = 0; i < n; i++)
        for (int s = 0; s < NL; s++) k->d[i][s] = fabsf((sc[s] * k->L[i][s] + m[s]) - k->x[i][s]);
    np_dot8((const float (*)[NL])k->w, (const float (*)[NL])k->d, n, out);
}

/* kipp_quants._qkx2 (ggml's make_qkx2_quants): the weighted least-squares scale/min search for
 * NL sub-blocks of n values of x, one per lane; weights |x| + rms (Q4_K, Q5_K) or |x| with the
 * absolute error (mad: Q2_K). The_min of a sub-block with max == min stays its min value. */
static inline __attribute__((always_inline)) void qkx2_search(const float *x, int n, float nmax,
                                                              const float *steps, int nsteps,
                                                              int mad, float *scale_out,
                                                              float *min_out) {
    qkx2_work k;
    float av[NL], mn[NL], mx[NL], rs[NL], rng[NL], sum_w[NL], sum_x[NL], sum_x2[NL];
    float scale[NL], the_min[NL], best[NL], iscale[NL], sl[NL], sl2[NL], sxl[NL], e[NL];
    float s1[NL], m1[NL], D[NL];
    float wx[32][NL];
    for (int i = 0; i < n; i++)
        for (int s = 0; s < NL; s++) k.x[i][s] = x[n * s + i];
    if (!mad) {
        np_dot8((const float (*)[NL])k.x, (const float (*)[NL])k.x, n, av);
        for (int s = 0; s < NL; s++) av[s] = sqrtf(av[s] / (float)n);
    }
    for (int s = 0; s < NL; s++) mn[s] = mx[s] = k.x[0][s];
    for (int i = 0; i < n; i++)
        for (int s = 0; s < NL; s++) {
            const float v = k.x[i][s];
            k.w[i][s] = mad ? fabsf(v) : fabsf(v) + av[s];
            mn[s] = v < mn[s] ? v : mn[s];
            mx[s] = v > mx[s] ? v : mx[s];
        }
    for (int s = 0; s < NL; s++) {
        mn[s] = mn[s] < 0.0f ? mn[s] : 0.0f;
        rng[s] = mx[s] - mn[s];
        rs[s] = rng[s] > 0.0f ? rng[s] : 1.0f;
    }
    for (int i = 0; i < n; i++)
        for (int s = 0; s < NL; s++) {
            wx[i][s] = k.w[i][s] * k.x[i][s];
            k.xm[i][s] = k.x[i][s] - mn[s];
        }
    np_sum8((const float (*)[NL])k.w, n, sum_w);
    np_sum8((const float (*)[NL])wx, n, sum_x);
    np_dot8((const float (*)[NL])wx, (const float (*)[NL])k.x, n, sum_x2);
    for (int s = 0; s < NL; s++) {
        scale[s] = rng[s] / nmax;
        the_min[s] = mn[s];
        iscale[s] = nmax / rs[s];
    }
    qkx2_fit(&k, n, nmax, iscale, sl, sl2, sxl);
    if (mad) qkx2_mad(&k, n, scale, the_min, best);
    else
        for (int s = 0; s < NL; s++)
            best[s] = qkx2_err(scale[s], the_min[s], sl[s], sl2[s], sxl[s], sum_w[s], sum_x[s],
                               sum_x2[s]);
    for (int st = 0; st < nsteps; st++) {
        for (int s = 0; s < NL; s++) iscale[s] = steps[st] / rs[s];
        qkx2_fit(&k, n, nmax, iscale, sl, sl2, sxl);
        for (int s = 0; s < NL; s++) {
            D[s] = sum_w[s] * sl2[s] - sl[s] * sl[s];
            const float s0 = (sum_w[s] * sxl[s] - sum_x[s] * sl[s]) / D[s];
            const float m0 = (sl2[s] * sum_x[s] - sl[s] * sxl[s]) / D[s];
            const int pos = m0 > 0.0f;
            m1[s] = pos ? 0.0f : m0;
            s1[s] = pos ? sxl[s] / sl2[s] : s0;
        }
        if (mad) qkx2_mad(&k, n, s1, m1, e);
        else
            for (int s = 0; s < NL; s++)
                e[s] = qkx2_err(s1[s], m1[s], sl[s], sl2[s], sxl[s], sum_w[s], sum_x[s], sum_x2[s]);
        for (int s = 0; s < NL; s++) {
            const int better = D[s] > 0.0f && e[s] < best[s] && fabsf(e[s]) <= FLT_MAX;
            scale[s] = better ? s1[s] : scale[s];
            the_min[s] = better ? m1[s] : the_min[s];
            best[s] = better ? e[s] : best[s];
        }
    }
    for (int s = 0; s < NL; s++) {
        scale_out[s] = rng[s] > 0.0f && scale[s] > 0.0f ? scale[s] : 0.0f;
        /* kipp_quants._mins: a sub-block of one negative value keeps it as its min */
        min_out[s] = -the_min[s] > 0.0f ? -the_min[s] : 0.0f;
    }
}

KIPP_QUANT_CLONES static void q4_k_search(const float *x, float *scale, float *mins) {
    qkx2_search(x, 32, 15.0f, q4_k_step, 21, 0, scale, mins);
}
KIPP_QUANT_CLONES static void q5_k_search(const float *x, float *scale, float *mins) {
    qkx2_search(x, 32, 31.0f, q5_k_step, 16, 0, scale, mins);
}
KIPP_QUANT_CLONES static void q2_k_search(const float *x, float *scale, float *mins) {
    qkx2_search(x, 16, 3.0f, q2_k_step, 16, 1, scale, mins);
}

/* ---- Q4_K (144 B) and Q5_K (176 B) per 256 values ---------------------------------------- */

/* kipp_quants._k_scales_6bit and _asym_q: 6-bit scales and mins against the f16 maxima, the
 * 12 packed bytes at out + 4, then q in 0..nmax. */
static void k_scales_q(const float *x, const float *scale, const float *mins, float nmax,
                       uint8_t *out, uint8_t *q) {
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
    for (int j = 0; j < 8; j++) {
        const float d_eff = d * (float)ls[j], m_eff = dmin * (float)lm[j];
        for (int i = 0; i < 32; i++)
            q[32 * j + i] = d_eff > 0.0f
                                ? (uint8_t)rint_clip((x[32 * j + i] + m_eff) / d_eff, 0.0f, nmax)
                                : 0;
    }
}

static void q4_k_block(const float *x, uint8_t *out) {
    float scale[8], mins[8];
    uint8_t q[QK_K];
    q4_k_search(x, scale, mins);
    k_scales_q(x, scale, mins, 15.0f, out, q);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++)
            out[16 + 32 * g + l] = (uint8_t)(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
}

static void q5_k_block(const float *x, uint8_t *out) {
    float scale[8], mins[8];
    uint8_t q[QK_K];
    q5_k_search(x, scale, mins);
    k_scales_q(x, scale, mins, 31.0f, out, q);
    for (int l = 0; l < 32; l++) {
        uint8_t h = 0;
        for (int s = 0; s < 8; s++) h |= (uint8_t)((q[32 * s + l] >> 4) << s);
        out[16 + l] = h;
    }
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++)
            out[48 + 32 * g + l] =
                (uint8_t)((q[64 * g + l] & 0x0f) | ((q[64 * g + 32 + l] & 0x0f) << 4));
}

/* ---- Q2_K: 84 bytes per 256 values ------------------------------------------------------ */

static void pack_2bit(const uint8_t *q, uint8_t *out) { /* 4 planes of 32 per 128 values */
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *p = q + 128 * h + l;
            out[32 * h + l] = (uint8_t)(p[0] | (p[32] << 2) | (p[64] << 4) | (p[96] << 6));
        }
}

static void q2_k_block(const float *x, uint8_t *out) {
    float scale[16], mins[16];
    q2_k_search(x, scale, mins);
    q2_k_search(x + 16 * NL, scale + NL, mins + NL);
    float max_scale = scale[0], max_min = mins[0];
    for (int j = 1; j < 16; j++) {
        max_scale = scale[j] > max_scale ? scale[j] : max_scale;
        max_min = mins[j] > max_min ? mins[j] : max_min;
    }
    const float inv_s = max_scale > 0.0f ? 15.0f / max_scale : 0.0f;
    const float inv_m = max_min > 0.0f ? 15.0f / max_min : 0.0f;
    put_f16(out + 80, max_scale / 15.0f);
    put_f16(out + 82, max_min / 15.0f);
    const float d = f16_round(max_scale / 15.0f), dmin = f16_round(max_min / 15.0f);
    uint8_t q[QK_K];
    for (int j = 0; j < 16; j++) {
        const uint8_t ls = (uint8_t)rint_clip(scale[j] * inv_s, 0.0f, 15.0f);
        const uint8_t lm = (uint8_t)rint_clip(mins[j] * inv_m, 0.0f, 15.0f);
        out[j] = (uint8_t)(ls | (lm << 4));
        const float d_eff = d * (float)ls, m_eff = dmin * (float)lm;
        for (int i = 0; i < 16; i++)
            q[16 * j + i] = d_eff > 0.0f
                                ? (uint8_t)rint_clip((x[16 * j + i] + m_eff) / d_eff, 0.0f, 3.0f)
                                : 0;
    }
    pack_2bit(q, out + 16);
}

/* ---- Q3_K: 110 bytes per 256 values ----------------------------------------------------- */

/* kipp_quants._make_q3 (ggml's make_q3_quants, rmse) for NL sub-blocks of 16 values: the
 * start q = nearest(-4x/max), then up to 5 rounds of coordinate descent. numpy runs the
 * rounds on all rows until none changes; a row whose round changed nothing would change
 * nothing again, so stopping each row on its own gives the same scales. */
KIPP_QUANT_CLONES static void q3_k_search(const float *x, float *scale_out) {
    float xs[16][NL], w[16][NL], wx[16][NL], L[16][NL], wl[16][NL];
    float hi[NL], lo[NL], iscale[NL], sumlx[NL], suml2[NL];
    int ok[NL];
    for (int i = 0; i < 16; i++)
        for (int s = 0; s < NL; s++) xs[i][s] = x[16 * s + i];
    for (int s = 0; s < NL; s++) hi[s] = lo[s] = xs[0][s];
    for (int i = 0; i < 16; i++)
        for (int s = 0; s < NL; s++) {
            hi[s] = xs[i][s] > hi[s] ? xs[i][s] : hi[s];
            lo[s] = xs[i][s] < lo[s] ? xs[i][s] : lo[s];
        }
    for (int s = 0; s < NL; s++) {
        const float mx = -lo[s] > hi[s] ? lo[s] : hi[s];
        ok[s] = fabsf(mx) >= GROUP_MAX_EPS;
        iscale[s] = ok[s] ? -4.0f / mx : 0.0f;
    }
    for (int i = 0; i < 16; i++)
        for (int s = 0; s < NL; s++) {
            L[i][s] = rint_clip(xs[i][s] * iscale[s], -4.0f, 3.0f);
            w[i][s] = xs[i][s] * xs[i][s];
            wx[i][s] = w[i][s] * xs[i][s];
            wl[i][s] = w[i][s] * L[i][s];
        }
    np_dot8((const float (*)[NL])wx, (const float (*)[NL])L, 16, sumlx);
    np_dot8((const float (*)[NL])wl, (const float (*)[NL])L, 16, suml2);
    for (int s = 0; s < NL; s++) {
        float lx = sumlx[s], l2 = suml2[s];
        for (int round = 0; round < 5; round++) {
            int changed = 0;
            for (int i = 0; i < 16; i++) {
                const float li = L[i][s], wi = w[i][s], xi = xs[i][s], wxi = wx[i][s];
                const float slx = lx - wxi * li;
                const float sl2 = l2 - wi * li * li;
                if (!(slx > 0.0f)) continue;
                const float nw = rint_clip(xi * sl2 / slx, -4.0f, 3.0f);
                const float slx2 = slx + wxi * nw;
                const float sl22 = sl2 + wi * nw * nw;
                if (nw != li && sl22 > 0.0f && slx2 * slx2 * l2 > lx * lx * sl22) {
                    L[i][s] = nw;
                    lx = slx2;
                    l2 = sl22;
                    changed = 1;
                }
            }
            if (!changed) break;
        }
        scale_out[s] = ok[s] && l2 > 0.0f ? lx / l2 : 0.0f;
    }
}

static void q3_k_block(const float *x, uint8_t *out) {
    float scale[16];
    q3_k_search(x, scale);
    q3_k_search(x + 16 * NL, scale + NL);
    float hi = scale[0], lo = scale[0];
    for (int j = 1; j < 16; j++) {
        hi = scale[j] > hi ? scale[j] : hi;
        lo = scale[j] < lo ? scale[j] : lo;
    }
    const float max_scale = -lo > hi ? lo : hi;
    const int bok = max_scale != 0.0f;
    const float iscale = bok ? -32.0f / max_scale : 0.0f;
    uint8_t ls[16];
    for (int j = 0; j < 16; j++)
        ls[j] = bok ? (uint8_t)(rint_clip(iscale * scale[j], -32.0f, 31.0f) + 32.0f) : 0;
    put_f16(out + 108, bok ? 1.0f / iscale : 0.0f);
    const float d = f16_round(bok ? 1.0f / iscale : 0.0f);
    uint8_t q[QK_K];
    for (int j = 0; j < 16; j++) {
        const float d_eff = d * ((float)ls[j] - 32.0f);
        for (int i = 0; i < 16; i++)
            q[16 * j + i] = (uint8_t)(4 + (d_eff != 0.0f ? (int)rint_clip(x[16 * j + i] / d_eff,
                                                                           -4.0f, 3.0f)
                                                          : -4));
    }
    for (int m = 0; m < 32; m++) {
        uint8_t h = 0;
        for (int b = 0; b < 8; b++) h |= (uint8_t)(((q[32 * b + m] >> 2) & 1) << b);
        out[m] = h;
    }
    for (int i = 0; i < QK_K; i++) q[i] &= 3;
    pack_2bit(q, out + 32);
    uint8_t *sc = out + 96;
    for (int j = 0; j < 8; j++) sc[j] = (uint8_t)((ls[j] & 0x0f) | ((ls[j + 8] & 0x0f) << 4));
    for (int k = 0; k < 4; k++)
        sc[8 + k] = (uint8_t)((ls[k] >> 4) | ((ls[4 + k] >> 4) << 2) | ((ls[8 + k] >> 4) << 4) |
                              ((ls[12 + k] >> 4) << 6));
}

/* ---- IQ4_NL (18 B per 32) and IQ4_XS (136 B per 256) ------------------------------------ */

/* kipp_quants._iq4_index: the level nearest to v (ties to the upper one). */
static inline int iq4_index(float v) {
    float k = floorf(v * 2.0f);
    k = k >= -256.0f ? k : -256.0f; /* NaN -> -256 */
    k = k <= 257.0f ? k : 257.0f;
    return iq4_lut[(int)k + 256];
}

typedef struct {
    float xs[32][NL], w[32][NL], wx[32][NL], q[32][NL], wq[32][NL];
} iq4_work;

static inline void iq4_fit(iq4_work *k, const float *inv, float *sqx, float *sq2) {
    for (int i = 0; i < 32; i++)
        for (int s = 0; s < NL; s++) {
            k->q[i][s] = IQ4_VALUES[iq4_index(k->xs[i][s] * inv[s])];
            k->wq[i][s] = k->w[i][s] * k->q[i][s];
        }
    np_dot8((const float (*)[NL])k->wx, (const float (*)[NL])k->q, 32, sqx);
    np_dot8((const float (*)[NL])k->wq, (const float (*)[NL])k->q, 32, sq2);
}

/* kipp_quants._iq4_scales for NL rows of 32 values: d = max/127 refit by weighted least
 * squares, then the 15 candidates 1/d = (itry - 127)/max. */
KIPP_QUANT_CLONES static void iq4_search(const float *x, float *d_out) {
    iq4_work k;
    float hi[NL], lo[NL], mxs[NL], inv[NL], sqx[NL], sq2[NL], d[NL], best[NL];
    int ok[NL];
    for (int i = 0; i < 32; i++)
        for (int s = 0; s < NL; s++) {
            k.xs[i][s] = x[32 * s + i];
            k.w[i][s] = k.xs[i][s] * k.xs[i][s];
            k.wx[i][s] = k.w[i][s] * k.xs[i][s];
        }
    for (int s = 0; s < NL; s++) hi[s] = lo[s] = k.xs[0][s];
    for (int i = 0; i < 32; i++)
        for (int s = 0; s < NL; s++) {
            hi[s] = k.xs[i][s] > hi[s] ? k.xs[i][s] : hi[s];
            lo[s] = k.xs[i][s] < lo[s] ? k.xs[i][s] : lo[s];
        }
    for (int s = 0; s < NL; s++) {
        const float mx = -lo[s] > hi[s] ? lo[s] : hi[s];
        ok[s] = fabsf(mx) >= GROUP_MAX_EPS;
        mxs[s] = ok[s] ? mx : 1.0f;
        inv[s] = 127.0f / mxs[s];
    }
    iq4_fit(&k, inv, sqx, sq2);
    for (int s = 0; s < NL; s++) {
        d[s] = sq2[s] > 0.0f ? sqx[s] / sq2[s] : 0.0f;
        best[s] = d[s] * sqx[s];
    }
    for (int itry = -7; itry <= 7; itry++) {
        for (int s = 0; s < NL; s++) inv[s] = ((float)itry - 127.0f) / mxs[s];
        iq4_fit(&k, inv, sqx, sq2);
        for (int s = 0; s < NL; s++) {
            const int better = sq2[s] > 0.0f && sqx[s] * sqx[s] > best[s] * sq2[s];
            d[s] = better ? sqx[s] / sq2[s] : d[s];
            best[s] = better ? d[s] * sqx[s] : best[s];
        }
    }
    for (int s = 0; s < NL; s++) d_out[s] = ok[s] ? d[s] : 0.0f;
}

/* kipp_quants._iq4_pack: 32 values at scale dl -> 16 bytes of level indices. */
static void iq4_pack(const float *x, float dl, uint8_t *out) {
    const float inv = dl != 0.0f ? 1.0f / dl : 0.0f;
    uint8_t q[32];
    for (int i = 0; i < 32; i++) q[i] = dl == 0.0f ? 0 : (uint8_t)iq4_index(x[i] * inv);
    pack_nibbles32(q, out);
}

static void iq4_nl_row(const float *x, uint8_t *out, uint64_t nblk) {
    float pad[32 * NL], d[NL];
    for (uint64_t b = 0; b < nblk; b += NL) {
        const float *p = x + 32 * b;
        if (nblk - b < NL) { /* the last blocks of a row of 32-multiples, zero-padded */
            memset(pad, 0, sizeof pad);
            memcpy(pad, p, (size_t)(nblk - b) * 32 * sizeof(float));
            p = pad;
        }
        iq4_search(p, d);
        for (uint64_t j = 0; j < NL && b + j < nblk; j++) {
            put_f16(out + 18 * (b + j), d[j]);
            iq4_pack(x + 32 * (b + j), d[j], out + 18 * (b + j) + 2);
        }
    }
}

static void iq4_xs_block(const float *x, uint8_t *out) {
    float scale[8];
    iq4_search(x, scale);
    float hi = scale[0], lo = scale[0];
    for (int j = 1; j < 8; j++) {
        hi = scale[j] > hi ? scale[j] : hi;
        lo = scale[j] < lo ? scale[j] : lo;
    }
    const float d = -(-lo > hi ? lo : hi) / 32.0f;
    const float inv = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(out, d);
    uint16_t sh = 0;
    uint8_t ls[8];
    for (int j = 0; j < 8; j++) {
        const float l = rint_clip(inv * scale[j], -32.0f, 31.0f);
        ls[j] = (uint8_t)(l + 32.0f);
        sh |= (uint16_t)((ls[j] >> 4) << (2 * j));
        iq4_pack(x + 32 * j, d * l, out + 8 + 16 * j);
    }
    out[2] = (uint8_t)sh;
    out[3] = (uint8_t)(sh >> 8);
    for (int j = 0; j < 4; j++)
        out[4 + j] = (uint8_t)((ls[2 * j] & 0x0f) | ((ls[2 * j + 1] & 0x0f) << 4));
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
    pthread_once(&tables_once, init_tables);
    const uint64_t be = kipp_type_block_elems(type_id), nb = be ? n / be : 0;
    size_t bs = 0;
    void (*block)(const float *, uint8_t *) = NULL;
    switch (type_id) {
    case KIPP_TYPE_Q8_0: block = q8_0_block; bs = 34; break;
    case KIPP_TYPE_Q4_0: block = q4_0_block; bs = 18; break;
    case KIPP_TYPE_Q4_1: block = q4_1_block; bs = 20; break;
    case KIPP_TYPE_Q5_0: block = q5_0_block; bs = 22; break;
    case KIPP_TYPE_Q5_1: block = q5_1_block; bs = 24; break;
    case KIPP_TYPE_Q2_K: block = q2_k_block; bs = 84; break;
    case KIPP_TYPE_Q3_K: block = q3_k_block; bs = 110; break;
    case KIPP_TYPE_Q4_K: block = q4_k_block; bs = 144; break;
    case KIPP_TYPE_Q5_K: block = q5_k_block; bs = 176; break;
    case KIPP_TYPE_Q6_K: block = q6_k_block; bs = 210; break;
    case KIPP_TYPE_IQ4_XS: block = iq4_xs_block; bs = 136; break;
    case KIPP_TYPE_IQ4_NL:
        iq4_nl_row(x, out, nb);
        return (size_t)(nb * 18);
    default:
        return 0;
    }
    for (uint64_t b = 0; b < nb; b++) block(x + be * b, out + bs * b);
    return (size_t)(nb * bs);
}
