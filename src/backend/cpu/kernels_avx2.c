/* kernels_avx2.c — the AVX2 + FMA + F16C kernel level ("avx2"; built with -mavx2 -mfma
 * -mf16c, only reached after cpu.c checked cpuid). Same semantics as kernels_scalar.c:
 *   F32/F16/BF16 weights on f32 activations: 8-lane FMA, weights widened in registers;
 *   Q8_0/Q4_0 on Q8_0 activations: per 32-block an exact int dot via the sign trick and
 *     maddubs (|w| unsigned times sign-adjusted x), then one FMA with dw * dx;
 *   Q4_K/Q6_K on Q8_K activations: nibbles / 6-bit values unpacked per 32 elements,
 *     maddubs then madd with the sub-block scales, exact int32 per 256-block; the Q4_K mins
 *     through bsums, Q6_K's -32 offset through maddubs(32, x).
 * Register tile: one weight row against up to 4 tokens, so each weight block is loaded and
 * unpacked once per 4 tokens. Converters are the scalar ones (O(k) per token, not the cost). */
#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

enum { TILE = 4 };

INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* lanes i < n set (n in 0..8) */
INLINE __m256i tail_mask(uint64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx);
}

INLINE float rd_f16(const unsigned char *p) {
    return kipp_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* ---- attention helpers ------------------------------------------------------------------ */

static float dot_f32(const float *a, const float *b, uint64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    uint64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        a1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), a1);
    }
    return hsum256(_mm256_add_ps(a0, a1));
}

static void axpy_f32(float *y, float a, const float *x, uint64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    if (i < n) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, m, _mm256_fmadd_ps(va, _mm256_maskload_ps(x + i, m),
                                                      _mm256_maskload_ps(y + i, m)));
    }
}

/* ---- float-weight gemms (f32 activations) --------------------------------------------------- */

INLINE __m256 ld_f32(const void *w, uint64_t i) { return _mm256_loadu_ps((const float *)w + i); }
INLINE __m256 ld_f16(const void *w, uint64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
}
INLINE __m256 ld_bf16(const void *w, uint64_t i) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
/* the last n < 8 elements, zero-filled */
INLINE __m256 ld_f32_tail(const void *w, uint64_t i, uint64_t n) {
    return _mm256_maskload_ps((const float *)w + i, tail_mask(n));
}
INLINE __m256 ld_f16_tail(const void *w, uint64_t i, uint64_t n) {
    uint16_t t[8] = {0};
    memcpy(t, (const uint16_t *)w + i, n * 2);
    return ld_f16(t, 0);
}
INLINE __m256 ld_bf16_tail(const void *w, uint64_t i, uint64_t n) {
    uint16_t t[8] = {0};
    memcpy(t, (const uint16_t *)w + i, n * 2);
    return ld_bf16(t, 0);
}

/* One weight row against NT (constant) tokens. */
#define FLOAT_TILE(NAME, LD, LD_TAIL)                                                              \
    INLINE void NAME(const void *wr, const float *const *xt, float *y, size_t ldy, uint64_t k,      \
                     const int nt) {                                                               \
        __m256 acc[TILE], acc2[TILE]; /* two chains per token hide the FMA latency */              \
        for (int t = 0; t < nt; t++) acc[t] = acc2[t] = _mm256_setzero_ps();                       \
        uint64_t i = 0;                                                                            \
        for (; i + 16 <= k; i += 16) {                                                             \
            const __m256 w0 = LD(wr, i), w1 = LD(wr, i + 8);                                       \
            for (int t = 0; t < nt; t++) {                                                         \
                acc[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xt[t] + i), acc[t]);                  \
                acc2[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xt[t] + i + 8), acc2[t]);            \
            }                                                                                      \
        }                                                                                          \
        for (; i + 8 <= k; i += 8) {                                                               \
            const __m256 w = LD(wr, i);                                                            \
            for (int t = 0; t < nt; t++) acc[t] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xt[t] + i), acc[t]); \
        }                                                                                          \
        if (i < k) {                                                                               \
            const __m256 w = LD_TAIL(wr, i, k - i);                                                \
            const __m256i m = tail_mask(k - i);                                                    \
            for (int t = 0; t < nt; t++)                                                           \
                acc[t] = _mm256_fmadd_ps(w, _mm256_maskload_ps(xt[t] + i, m), acc[t]);             \
        }                                                                                          \
        for (int t = 0; t < nt; t++) y[t * ldy] = hsum256(_mm256_add_ps(acc[t], acc2[t]));         \
    }

FLOAT_TILE(tile_f32, ld_f32, ld_f32_tail)
FLOAT_TILE(tile_f16, ld_f16, ld_f16_tail)
FLOAT_TILE(tile_bf16, ld_bf16, ld_bf16_tail)

/* The row x token-tile loop shared by every gemm: TILE_FN(wr, xt[], y, ldy, k, nt) computes
 * one row against nt <= TILE tokens; the switch gives it a constant nt to unroll on. */
#define GEMM_DRIVER(NAME, TILE_FN, XT)                                                             \
    static void NAME(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x,           \
                     size_t x_row_bytes, uint64_t n_tok, float *y, size_t ldy, uint64_t k) {       \
        for (uint64_t t0 = 0; t0 < n_tok; t0 += TILE) {                                            \
            const uint64_t nt = n_tok - t0 < TILE ? n_tok - t0 : TILE;                             \
            const XT *xt[TILE];                                                                    \
            for (uint64_t t = 0; t < nt; t++)                                                      \
                xt[t] = (const XT *)((const char *)x + (t0 + t) * x_row_bytes);                    \
            for (uint64_t r = 0; r < n_rows; r++) {                                                \
                const void *wr = (const char *)w + r * w_row_bytes;                                \
                float *yr = y + t0 * ldy + r;                                                      \
                switch (nt) {                                                                      \
                case 4: TILE_FN(wr, xt, yr, ldy, k, 4); break;                                     \
                case 3: TILE_FN(wr, xt, yr, ldy, k, 3); break;                                     \
                case 2: TILE_FN(wr, xt, yr, ldy, k, 2); break;                                     \
                default: TILE_FN(wr, xt, yr, ldy, k, 1); break;                                    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

GEMM_DRIVER(gemm_f32, tile_f32, float)
GEMM_DRIVER(gemm_f16, tile_f16, float)
GEMM_DRIVER(gemm_bf16, tile_bf16, float)

/* ---- 32-block gemms (Q8_0 activations) -------------------------------------------------------- */

/* sum over 32 int8 pairs as 8 int32 lanes: |w| * (x with w's sign), maddubs then madd */
INLINE __m256i dot_i8(__m256i aw, __m256i sw, __m256i xq) {
    const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq, sw));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* Q8_0 / Q4_0 tile: W32 unpacks block b of the row into 32 signed bytes. */
#define BLOCK32_TILE(NAME, BB, W32)                                                                 \
    INLINE void NAME(const void *wr, const kipp_act_q8_0 *const *xt, float *y, size_t ldy,          \
                     uint64_t k, const int nt) {                                                    \
        __m256 acc[TILE];                                                                           \
        for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();                                  \
        const unsigned char *wb = wr;                                                               \
        for (uint64_t b = 0; b < k / 32; b++, wb += BB) {                                           \
            const __m256i wq = W32(wb + 2);                                                         \
            const __m256i aw = _mm256_sign_epi8(wq, wq);                                            \
            const float dw = rd_f16(wb);                                                            \
            for (int t = 0; t < nt; t++) {                                                          \
                const __m256i xq = _mm256_loadu_si256((const __m256i *)xt[t][b].qs);                \
                const __m256 s = _mm256_cvtepi32_ps(dot_i8(aw, wq, xq));                            \
                acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xt[t][b].d), s, acc[t]);               \
            }                                                                                       \
        }                                                                                           \
        for (int t = 0; t < nt; t++) y[t * ldy] = hsum256(acc[t]);                                  \
    }

INLINE __m256i w32_q8_0(const unsigned char *qs) { return _mm256_loadu_si256((const __m256i *)qs); }
/* Q4_0: bytes 0..15 the low nibbles, 16..31 the high ones, minus 8 */
INLINE __m256i w32_q4_0(const unsigned char *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}

BLOCK32_TILE(tile_q8_0, 34, w32_q8_0)
BLOCK32_TILE(tile_q4_0, 18, w32_q4_0)
GEMM_DRIVER(gemm_q8_0, tile_q8_0, kipp_act_q8_0)
GEMM_DRIVER(gemm_q4_0, tile_q4_0, kipp_act_q8_0)

/* ---- K-quant gemms (Q8_K activations) ------------------------------------------------------------ */

/* 6-bit scales and mins of the 8 Q4_K sub-blocks (ggml's get_scale_min_k4) */
INLINE void k4_scales(const unsigned char *sc, uint8_t scale[8], uint8_t min[8]) {
    for (int s = 0; s < 4; s++) {
        scale[s] = sc[s] & 63;
        min[s] = sc[s + 4] & 63;
        scale[s + 4] = (uint8_t)((sc[s + 8] & 0x0f) | ((sc[s] >> 6) << 4));
        min[s + 4] = (uint8_t)((sc[s + 8] >> 4) | ((sc[s + 4] >> 6) << 4));
    }
}

INLINE void tile_q4_k(const void *wr, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                      uint64_t k, const int nt) {
    __m256 acc[TILE];
    float accm[TILE];
    for (int t = 0; t < nt; t++) {
        acc[t] = _mm256_setzero_ps();
        accm[t] = 0.0f;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const unsigned char *wb = wr;
    for (uint64_t b = 0; b < k / 256; b++, wb += 144) {
        uint8_t scale[8], min[8];
        k4_scales(wb + 4, scale, min);
        const float d = rd_f16(wb), dmin = rd_f16(wb + 2);
        __m256i sumi[TILE];
        for (int t = 0; t < nt; t++) sumi[t] = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(wb + 16 + 32 * g));
            const __m256i lo = _mm256_and_si256(q, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i s_lo = _mm256_set1_epi16(scale[2 * g]), s_hi = _mm256_set1_epi16(scale[2 * g + 1]);
            for (int t = 0; t < nt; t++) {
                const int8_t *xq = xt[t][b].qs + 64 * g;
                const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xq));
                const __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 32)));
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo),
                                                                     _mm256_madd_epi16(p_hi, s_hi)));
            }
        }
        for (int t = 0; t < nt; t++) {
            const int16_t *bs = xt[t][b].bsums;
            int32_t imin = 0;
            for (int s = 0; s < 8; s++) imin += min[s] * (bs[2 * s] + bs[2 * s + 1]);
            const float dx = xt[t][b].d;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
            accm[t] += dx * dmin * (float)imin;
        }
    }
    for (int t = 0; t < nt; t++) y[t * ldy] = hsum256(acc[t]) - accm[t];
}

INLINE void tile_q6_k(const void *wr, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                      uint64_t k, const int nt) {
    __m256 acc[TILE];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
    const unsigned char *wb = wr;
    for (uint64_t b = 0; b < k / 256; b++, wb += 210) {
        const int8_t *sc = (const int8_t *)(wb + 192);
        __m256i sumi[TILE];
        for (int t = 0; t < nt; t++) sumi[t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(wb + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(wb + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(wb + 128 + 32 * h));
            __m256i q[4]; /* unsigned 0..63 for elements 128h + 32j + l */
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
            for (int j = 0; j < 4; j++) {
                /* the 16 int16 pair sums: lanes 0..7 elements 0..15 (scale 2j), 8..15 the rest */
                const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[8 * h + 2 * j + 1]),
                                                     _mm_set1_epi16(sc[8 * h + 2 * j]));
                for (int t = 0; t < nt; t++) {
                    const __m256i xq = _mm256_loadu_si256((const __m256i *)(xt[t][b].qs + 128 * h + 32 * j));
                    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[j], xq),
                                                       _mm256_maddubs_epi16(k32, xq));
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, scv));
                }
            }
        }
        const float d = rd_f16(wb + 208);
        for (int t = 0; t < nt; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(xt[t][b].d * d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (int t = 0; t < nt; t++) y[t * ldy] = hsum256(acc[t]);
}

GEMM_DRIVER(gemm_q4_k, tile_q4_k, kipp_act_q8_k)
GEMM_DRIVER(gemm_q6_k, tile_q6_k, kipp_act_q8_k)

/* ---- KV rows to f32 ---------------------------------------------------------------- */

static void f16_to_f32(const void *src, float *dst, uint64_t n) {
    const uint16_t *h = src;
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(h[i]);
}

static void bf16_to_f32(const void *src, float *dst, uint64_t n) {
    const uint16_t *h = src;
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; i++) {
        const uint32_t u = (uint32_t)h[i] << 16;
        memcpy(dst + i, &u, 4);
    }
}

const kipp_cpu_kernels kipp_cpu_kernels_avx2 = {
    .isa = "avx2",
    .f32 = {KIPP_ACT_F32, gemm_f32},
    .f16 = {KIPP_ACT_F32, gemm_f16},
    .bf16 = {KIPP_ACT_F32, gemm_bf16},
    .q8_0 = {KIPP_ACT_Q8_0, gemm_q8_0},
    .q4_0 = {KIPP_ACT_Q8_0, gemm_q4_0},
    .q4_k = {KIPP_ACT_Q8_K, gemm_q4_k},
    .q6_k = {KIPP_ACT_Q8_K, gemm_q6_k},
    .quant = {NULL, kipp_cpu_quant_bf16_scalar, kipp_cpu_quant_q8_0_scalar,
              kipp_cpu_quant_q8_k_scalar},
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .f16_to_f32 = f16_to_f32,
    .bf16_to_f32 = bf16_to_f32,
};
