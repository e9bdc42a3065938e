/* kernels_avx2.c — the AVX2 + FMA + F16C kernel level ("avx2"; built with -mavx2 -mfma
 * -mf16c, only reached after cpu.c checked cpuid). Same semantics as kernels_scalar.c:
 *   F32/F16/BF16 weights on f32 activations: 8-lane FMA, weights widened in registers;
 *   Q8_0/Q4_0 on Q8_0 activations: per 32-block an exact int dot via the sign trick and
 *     maddubs (|w| unsigned times sign-adjusted x), then one FMA with dw * dx;
 *   Q4_K/Q5_K/Q6_K on Q8_K activations: nibbles / 5- / 6-bit values unpacked per 32 elements,
 *     maddubs then madd with the sub-block scales, exact int32 per 256-block; the Q4_K mins
 *     through bsums, Q6_K's -32 offset through maddubs(32, x);
 *   Q4_1/Q5_0/Q5_1/Q3_K/IQ4_NL/IQ4_XS on Q8_0 activations: rows decoded by the panel's
 *     decode_row, then an exact int dot per 32-block (gemm_rows_dec);
 *   many tokens: the int16 panel (KIPP_ACT_Q16) for every quantized type but Q2_K;
 *   Q8_0, Q4_K, Q5_K and Q6_K repacked at load: kernels_packed.h (vpmaddwd + vpaddd here).
 * Register tile: one weight row against up to 4 tokens, so each weight block is loaded and
 * unpacked once per 4 tokens. Converters are the scalar ones (O(k) per token, not the cost). */
#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* Q8_0, Q4_K, Q5_K and Q6_K repacked at load: vpmaddwd + vpaddd */
#define KP_DOT(acc, w, x) _mm256_add_epi32((acc), _mm256_madd_epi16((w), (x)))
#include "backend/cpu/kernels_packed.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

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

INLINE float rd_f16(const unsigned char *p) { /* F16C: one instruction, exact */
    return _cvtsh_ss((unsigned short)(p[0] | (p[1] << 8)));
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

GEMM_DRIVER(gemm_f32_tiles, tile_f32, float)
GEMM_DRIVER(gemm_f16_tiles, tile_f16, float)
GEMM_DRIVER(gemm_bf16_tiles, tile_bf16, float)

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

/* Decode (the two activation planes of one token, or two sequences): FR = 4 weight rows x
 * nt <= 2 tokens, so each activation block is loaded once for 4 rows and 8 FMA chains hide
 * the latency; the same bytes of the next 4 rows are prefetched into L1 while these compute
 * (the rows stream from memory once per step). */
enum { FR = 4 };

INLINE void prefetch_ahead(const unsigned char *p, size_t ahead, int nbytes) {
    for (int o = 0; o < nbytes; o += 64) _mm_prefetch((const char *)p + ahead + o, _MM_HINT_T0);
}

INLINE __m128 hsum4_256(__m256 a, __m256 b, __m256 c, __m256 d) {
    const __m256 ab = _mm256_hadd_ps(a, b), cd = _mm256_hadd_ps(c, d);
    const __m256 s = _mm256_hadd_ps(ab, cd); /* per 128-bit lane: a b c d partials */
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

#define BLOCK32_ROWS4(NAME, BB, W32)                                                                \
    INLINE void NAME(const unsigned char *w, size_t wrb, const kipp_act_q8_0 *const *xt, float *y,  \
                     size_t ldy, uint64_t k, const int nt) {                                        \
        __m256 acc[2][FR];                                                                          \
        UNROLL for (int t = 0; t < 2; t++) UNROLL for (int r = 0; r < FR; r++) acc[t][r] = _mm256_setzero_ps(); \
        for (uint64_t b = 0; b < k / 32; b++) {                                                     \
            __m256i xq[2];                                                                          \
            float dx[2];                                                                            \
            UNROLL for (int t = 0; t < nt; t++) {                                                   \
                xq[t] = _mm256_loadu_si256((const __m256i *)xt[t][b].qs);                           \
                dx[t] = xt[t][b].d;                                                                 \
            }                                                                                       \
            UNROLL for (int r = 0; r < FR; r++) {                                                   \
                const unsigned char *p = w + r * wrb + b * BB;                                      \
                prefetch_ahead(p, FR * wrb, BB);                                                    \
                const __m256i wq = W32(p + 2);                                                      \
                const __m256i aw = _mm256_sign_epi8(wq, wq);                                        \
                const float dw = rd_f16(p);                                                         \
                UNROLL for (int t = 0; t < nt; t++) {                                               \
                    const __m256 s = _mm256_cvtepi32_ps(dot_i8(aw, wq, xq[t]));                     \
                    acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * dx[t]), s, acc[t][r]);          \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
        UNROLL for (int t = 0; t < nt; t++)                                                         \
            _mm_storeu_ps(y + t * ldy, hsum4_256(acc[t][0], acc[t][1], acc[t][2], acc[t][3]));      \
    }

BLOCK32_ROWS4(rows4_q8_0, 34, w32_q8_0)
BLOCK32_ROWS4(rows4_q4_0, 18, w32_q4_0)

/* Few tokens (<= 2): 4-row tiles, the last rows one at a time; more: the 1-row x 4-token tiles. */
#define GEMM_DRIVER_DEC(NAME, ROWS4, TILE_FN, XT)                                                   \
    GEMM_DRIVER(NAME##_tiles, TILE_FN, XT)                                                         \
    static void NAME(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x,           \
                     size_t x_row_bytes, uint64_t n_tok, float *y, size_t ldy, uint64_t k) {       \
        if (n_tok > 2) {                                                                           \
            NAME##_tiles(w, w_row_bytes, n_rows, x, x_row_bytes, n_tok, y, ldy, k);                \
            return;                                                                                \
        }                                                                                          \
        const XT *xt[2] = {(const XT *)x, (const XT *)x};                                          \
        for (uint64_t t = 0; t < n_tok; t++) xt[t] = (const XT *)((const char *)x + t * x_row_bytes); \
        uint64_t r = 0;                                                                            \
        for (; r + FR <= n_rows; r += FR) {                                                        \
            const unsigned char *wr = (const unsigned char *)w + r * w_row_bytes;                  \
            if (n_tok == 2) ROWS4(wr, w_row_bytes, xt, y + r, ldy, k, 2);                          \
            else ROWS4(wr, w_row_bytes, xt, y + r, ldy, k, 1);                                     \
        }                                                                                          \
        if (r < n_rows)                                                                            \
            NAME##_tiles((const char *)w + r * w_row_bytes, w_row_bytes, n_rows - r, x, x_row_bytes, n_tok, y + r, ldy, k); \
    }

GEMM_DRIVER_DEC(gemm_q8_0, rows4_q8_0, tile_q8_0, kipp_act_q8_0)
GEMM_DRIVER_DEC(gemm_q4_0, rows4_q4_0, tile_q4_0, kipp_act_q8_0)

/* ---- K-quant gemms (Q8_K activations) ------------------------------------------------------------ */

/* Q4_K's 12-byte scale packing (at sc, 16 bytes readable) into 8 scales (bytes 0-7) and 8
 * mins (bytes 8-15), as k4_scales. */
INLINE __m128i k4_scales_v(const unsigned char *sc) {
    const __m128i v = _mm_loadu_si128((const __m128i *)sc);
    const __m128i a = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i b = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7));
    __m128i lo = _mm_blend_epi16(a, _mm_srli_epi16(a, 4), 0xc0);
    lo = _mm_and_si128(lo, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 2), _mm_setr_epi8(0, 0, 0, 0, 0x30, 0x30, 0x30, 0x30, 0, 0, 0,
                                                                         0, 0x30, 0x30, 0x30, 0x30));
    return _mm_or_si128(lo, hi);
}

/* the same as bytes: 6-bit scales and mins of the 8 Q4_K sub-blocks (ggml's
 * get_scale_min_k4) */
INLINE void k4_scales(const unsigned char *sc, uint8_t scale[8], uint8_t min[8]) {
    uint8_t b[16];
    _mm_storeu_si128((__m128i *)b, k4_scales_v(sc));
    memcpy(scale, b, 8);
    memcpy(min, b + 8, 8);
}

/* Q5_K: as Q4_K (the same scale packing and mins through bsums) with bit s of qh[l] as
 * bit 4 of sub-block s's values (0..31); q5_hbit gives that bit as 0x10 per byte */
INLINE __m256i q5_hbit(__m256i qh, int s) {
    return _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, s), 4), _mm256_set1_epi8(0x10));
}

/* Q4_K (q5 = 0) and Q5_K (q5 = 1, the fifth bit from qh), 1 row x nt tokens */
INLINE void tile_k45(const void *wr, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                     uint64_t k, const int nt, const int q5) {
    const size_t bb = q5 ? 176 : 144, qs = q5 ? 48 : 16;
    __m256 acc[TILE];
    float accm[TILE];
    for (int t = 0; t < nt; t++) {
        acc[t] = _mm256_setzero_ps();
        accm[t] = 0.0f;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const unsigned char *wb = wr;
    for (uint64_t b = 0; b < k / 256; b++, wb += bb) {
        uint8_t scale[8], min[8];
        k4_scales(wb + 4, scale, min);
        const float d = rd_f16(wb), dmin = rd_f16(wb + 2);
        __m256i sumi[TILE];
        for (int t = 0; t < nt; t++) sumi[t] = _mm256_setzero_si256();
        const __m256i qh = q5 ? _mm256_loadu_si256((const __m256i *)(wb + 16)) : _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(wb + qs + 32 * g));
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (q5) {
                lo = _mm256_or_si256(lo, q5_hbit(qh, 2 * g));
                hi = _mm256_or_si256(hi, q5_hbit(qh, 2 * g + 1));
            }
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

INLINE void tile_q4_k(const void *wr, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                      uint64_t k, const int nt) {
    tile_k45(wr, xt, y, ldy, k, nt, 0);
}

/* Q6_K: the 6-bit values (0..63) of elements 128h + 32j + l, l < 32, from the half's low
 * bits ql0 = ql[64h..], ql1 = ql[64h + 32..] and its high bits qh = qh[32h..] */
INLINE __m256i q6_vals(__m256i ql0, __m256i ql1, __m256i qh, int j) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    const __m256i l = j & 1 ? ql1 : ql0;
    const __m256i nib = j >= 2 ? _mm256_and_si256(_mm256_srli_epi16(l, 4), m4) : _mm256_and_si256(l, m4);
    return _mm256_or_si256(nib, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), m2), 4));
}

INLINE void tile_q6_k(const void *wr, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                      uint64_t k, const int nt) {
    __m256 acc[TILE];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const __m256i k32 = _mm256_set1_epi8(32);
    const unsigned char *wb = wr;
    for (uint64_t b = 0; b < k / 256; b++, wb += 210) {
        const int8_t *sc = (const int8_t *)(wb + 192);
        __m256i sumi[TILE];
        for (int t = 0; t < nt; t++) sumi[t] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(wb + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(wb + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(wb + 128 + 32 * h));
            for (int j = 0; j < 4; j++) {
                const __m256i q = q6_vals(ql0, ql1, qh, j);
                /* the 16 int16 pair sums: lanes 0..7 elements 0..15 (scale 2j), 8..15 the rest */
                const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[8 * h + 2 * j + 1]),
                                                     _mm_set1_epi16(sc[8 * h + 2 * j]));
                for (int t = 0; t < nt; t++) {
                    const __m256i xq = _mm256_loadu_si256((const __m256i *)(xt[t][b].qs + 128 * h + 32 * j));
                    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, xq),
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

/* Q4_K (q5 = 0) and Q5_K (q5 = 1: the fifth bit from qh or'd into the nibbles), 4 rows x
 * nt <= 2 tokens: exact int32 per 256-block (sub-block scales through madd), one FMA per
 * block; the mins as a 4-lane int dot of the 8 mins with the activation's pair-summed bsums,
 * added into the accumulator's low lanes with -dx * dmin. */
INLINE void rows4_k45(const unsigned char *w, size_t wrb, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                      uint64_t k, const int nt, const int q5) {
    const size_t bb = q5 ? 176 : 144, qs = q5 ? 48 : 16;
    __m256 acc[2][FR];
    UNROLL for (int t = 0; t < 2; t++) UNROLL for (int r = 0; r < FR; r++) acc[t][r] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (uint64_t b = 0; b < k / 256; b++) {
        __m128i bsp[2];
        UNROLL for (int t = 0; t < nt; t++) {
            const __m128i b0 = _mm_loadu_si128((const __m128i *)xt[t][b].bsums);
            const __m128i b1 = _mm_loadu_si128((const __m128i *)(xt[t][b].bsums + 8));
            bsp[t] = _mm_hadd_epi16(b0, b1); /* bsums[2j] + bsums[2j+1], j < 8 */
        }
        UNROLL for (int r = 0; r < FR; r++) {
            const unsigned char *p = w + r * wrb + b * bb;
            prefetch_ahead(p, FR * wrb, bb);
            const __m128i sm = k4_scales_v(p + 4);
            uint8_t sc8[16];
            _mm_storeu_si128((__m128i *)sc8, sm);
            const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
            const float d = rd_f16(p), dmin = rd_f16(p + 2);
            __m256i sumi[2];
            UNROLL for (int t = 0; t < nt; t++) sumi[t] = _mm256_setzero_si256();
            const __m256i qh = q5 ? _mm256_loadu_si256((const __m256i *)(p + 16)) : _mm256_setzero_si256();
            UNROLL for (int g = 0; g < 4; g++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(p + qs + 32 * g));
                __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (q5) {
                    lo = _mm256_or_si256(lo, q5_hbit(qh, 2 * g));
                    hi = _mm256_or_si256(hi, q5_hbit(qh, 2 * g + 1));
                }
                const __m256i s_lo = _mm256_set1_epi16(sc8[2 * g]), s_hi = _mm256_set1_epi16(sc8[2 * g + 1]);
                UNROLL for (int t = 0; t < nt; t++) {
                    const int8_t *xq = xt[t][b].qs + 64 * g;
                    const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xq));
                    const __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 32)));
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo),
                                                                         _mm256_madd_epi16(p_hi, s_hi)));
                }
            }
            UNROLL for (int t = 0; t < nt; t++) {
                const float dx = xt[t][b].d;
                const __m256 mi = _mm256_cvtepi32_ps(_mm256_zextsi128_si256(_mm_madd_epi16(mins, bsp[t])));
                acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * d), _mm256_cvtepi32_ps(sumi[t]), acc[t][r]);
                acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(-dx * dmin), mi, acc[t][r]);
            }
        }
    }
    UNROLL for (int t = 0; t < nt; t++) _mm_storeu_ps(y + t * ldy, hsum4_256(acc[t][0], acc[t][1], acc[t][2], acc[t][3]));
}

INLINE void rows4_q4_k(const unsigned char *w, size_t wrb, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                       uint64_t k, const int nt) {
    rows4_k45(w, wrb, xt, y, ldy, k, nt, 0);
}

/* Q6_K, 4 rows x nt <= 2 tokens, as tile_q6_k */
INLINE void rows4_q6_k(const unsigned char *w, size_t wrb, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                       uint64_t k, const int nt) {
    __m256 acc[2][FR];
    UNROLL for (int t = 0; t < 2; t++) UNROLL for (int r = 0; r < FR; r++) acc[t][r] = _mm256_setzero_ps();
    const __m256i k32 = _mm256_set1_epi8(32);
    for (uint64_t b = 0; b < k / 256; b++) {
        UNROLL for (int r = 0; r < FR; r++) {
            const unsigned char *p = w + r * wrb + b * 210;
            prefetch_ahead(p, FR * wrb, 210);
            const int8_t *sc = (const int8_t *)(p + 192);
            __m256i sumi[2];
            UNROLL for (int t = 0; t < nt; t++) sumi[t] = _mm256_setzero_si256();
            for (int h = 0; h < 2; h++) {
                const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(p + 64 * h));
                const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(p + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * h));
                UNROLL for (int j = 0; j < 4; j++) {
                    const __m256i q = q6_vals(ql0, ql1, qh, j);
                    const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[8 * h + 2 * j + 1]), _mm_set1_epi16(sc[8 * h + 2 * j]));
                    UNROLL for (int t = 0; t < nt; t++) {
                        const __m256i xq = _mm256_loadu_si256((const __m256i *)(xt[t][b].qs + 128 * h + 32 * j));
                        const __m256i pr = _mm256_sub_epi16(_mm256_maddubs_epi16(q, xq), _mm256_maddubs_epi16(k32, xq));
                        sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(pr, scv));
                    }
                }
            }
            const float d = rd_f16(p + 208);
            UNROLL for (int t = 0; t < nt; t++)
                acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(xt[t][b].d * d), _mm256_cvtepi32_ps(sumi[t]), acc[t][r]);
        }
    }
    UNROLL for (int t = 0; t < nt; t++) _mm_storeu_ps(y + t * ldy, hsum4_256(acc[t][0], acc[t][1], acc[t][2], acc[t][3]));
}

INLINE void tile_q5_k(const void *wr, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                      uint64_t k, const int nt) {
    tile_k45(wr, xt, y, ldy, k, nt, 1);
}

INLINE void rows4_q5_k(const unsigned char *w, size_t wrb, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                       uint64_t k, const int nt) {
    rows4_k45(w, wrb, xt, y, ldy, k, nt, 1);
}

/* Q2_K (84 B: scales[16] @0, low nibble scale and high nibble min per 16 elements; qs[64] @16;
 * d @80, dmin @82): element 128h + 32j + l (l < 32) is bits 2j of qs[32h + l], sub-block
 * 8h + 2j + (l >= 16). Per 256-block, sum_s scale[s] * (q . x over sub-block s) is exact in
 * int32 (maddubs of the 2-bit values with the 8-bit activations, pairs < 2^10, then madd by
 * the 4-bit scale), one FMA by d * dx; the mins, dmin * dx * sum_s min[s] * bsums[s], the
 * same way as Q4_K's. */
INLINE __m256i q2_vals(__m256i q, int j) { return _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3)); }

/* the 16 mins (high nibbles of the scale bytes) of a Q2_K block as int16 */
INLINE __m256i q2_mins(const unsigned char *sc) {
    const __m128i v = _mm_loadu_si128((const __m128i *)sc);
    return _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(0x0f)));
}

/* sum over the block of scale[s] * (q . x) for sub-blocks s, as 8 int32 lanes */
INLINE __m256i q2_block_dot(const unsigned char *p, const int8_t *xq) {
    __m256i sumi = _mm256_setzero_si256();
    const unsigned char *sc = p;
    UNROLL for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(p + 16 + 32 * h));
        UNROLL for (int j = 0; j < 4; j++) {
            const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[8 * h + 2 * j + 1] & 0x0f),
                                                 _mm_set1_epi16(sc[8 * h + 2 * j] & 0x0f));
            const __m256i x = _mm256_loadu_si256((const __m256i *)(xq + 128 * h + 32 * j));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q2_vals(q, j), x), scv));
        }
    }
    return sumi;
}

INLINE void tile_q2_k(const void *wr, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                      uint64_t k, const int nt) {
    __m256 acc[TILE];
    for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
    const unsigned char *wb = wr;
    for (uint64_t b = 0; b < k / 256; b++, wb += 84) {
        const __m256i min = q2_mins(wb);
        const float d = rd_f16(wb + 80), dmin = rd_f16(wb + 82);
        for (int t = 0; t < nt; t++) {
            const __m256i sumi = q2_block_dot(wb, xt[t][b].qs);
            const __m256i mi = _mm256_madd_epi16(min, _mm256_loadu_si256((const __m256i *)xt[t][b].bsums));
            const float dx = xt[t][b].d;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * d), _mm256_cvtepi32_ps(sumi), acc[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(-dx * dmin), _mm256_cvtepi32_ps(mi), acc[t]);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ldy] = hsum256(acc[t]);
}

/* Q2_K, 4 rows x nt <= 2 tokens, as tile_q2_k */
INLINE void rows4_q2_k(const unsigned char *w, size_t wrb, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                       uint64_t k, const int nt) {
    __m256 acc[2][FR];
    UNROLL for (int t = 0; t < 2; t++) UNROLL for (int r = 0; r < FR; r++) acc[t][r] = _mm256_setzero_ps();
    for (uint64_t b = 0; b < k / 256; b++) {
        __m256i bs[2];
        UNROLL for (int t = 0; t < nt; t++) bs[t] = _mm256_loadu_si256((const __m256i *)xt[t][b].bsums);
        UNROLL for (int r = 0; r < FR; r++) {
            const unsigned char *p = w + r * wrb + b * 84;
            prefetch_ahead(p, FR * wrb, 84);
            const __m256i min = q2_mins(p);
            const float d = rd_f16(p + 80), dmin = rd_f16(p + 82);
            UNROLL for (int t = 0; t < nt; t++) {
                const __m256i sumi = q2_block_dot(p, xt[t][b].qs);
                const float dx = xt[t][b].d;
                acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(dx * d), _mm256_cvtepi32_ps(sumi), acc[t][r]);
                acc[t][r] = _mm256_fmadd_ps(_mm256_set1_ps(-dx * dmin), _mm256_cvtepi32_ps(_mm256_madd_epi16(min, bs[t])),
                                            acc[t][r]);
            }
        }
    }
    UNROLL for (int t = 0; t < nt; t++) _mm_storeu_ps(y + t * ldy, hsum4_256(acc[t][0], acc[t][1], acc[t][2], acc[t][3]));
}

GEMM_DRIVER_DEC(gemm_q2_k, rows4_q2_k, tile_q2_k, kipp_act_q8_k)
GEMM_DRIVER_DEC(gemm_q4_k, rows4_q4_k, tile_q4_k, kipp_act_q8_k)
GEMM_DRIVER_DEC(gemm_q5_k, rows4_q5_k, tile_q5_k, kipp_act_q8_k)
GEMM_DRIVER_DEC(gemm_q6_k, rows4_q6_k, tile_q6_k, kipp_act_q8_k)

/* ---- many tokens: the int16 panel (KIPP_ACT_Q16 activations) --------------------------------
 * Per chunk of KC elements, PR = 16 weight rows are decoded once into signed values (Q8_0 as
 * stored, Q4_0 nibble - 8, Q4_K nibbles 0..15, Q6_K 6-bit value - 32), widened to int16 and
 * laid out pair-interleaved: for every two consecutive k one 32-byte vector per 8 rows holds
 * (w[r][k], w[r][k+1]); beside them each row's f32 scale per sub-block (Q4_K also d_min *
 * min). Each token's 16-bit pair (x[k], x[k+1]) is broadcast into vpmaddwd against 8 rows at
 * a time: exact int32 over a sub-block (|w| <= 128, |x| <= 32767, 32 terms: < 2^28), then
 * acc += f32(ai) * dx * scale (Q4_K also - d_min*min * dx * sum x). One plane of 15-bit
 * activations: half the integer work of the two-plane 8-bit path, and no horizontal sums.
 * The weight decode is paid once per chunk for all tokens (it needs many_min_tok of them). */
enum { PR = 16, PTK = 3, KC = 512 };
/* tokens from which the panel beats the two-plane row tiles (measured: kernel_bench) */
enum { MANY_MIN_TOK = 4 };
enum { QT_Q8_0, QT_Q4_0, QT_Q4_K, QT_Q6_K, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q3_K, QT_Q5_K, QT_IQ4_NL, QT_IQ4_XS };

typedef struct {
    int16_t q[KC * PR] __attribute__((aligned(32)));      /* [KC / 2 pairs][PR rows][2] */
    float sc[KC / 16 * PR] __attribute__((aligned(32)));  /* [sub-block][PR rows] */
    float mn[KC / 32 * PR] __attribute__((aligned(32)));  /* types with mins: [sub-block][PR rows] */
    int8_t tmp[PR][KC] __attribute__((aligned(32)));      /* the rows decoded, row-major */
} panel16;

INLINE int sub_block16(int qt) { return qt == QT_Q6_K || qt == QT_Q3_K ? 16 : 32; }
/* element = sc * q - mn per 32-element sub-block (Q4_K/Q5_K: dmin * min; Q4_1/Q5_1: -m) */
INLINE int has_min(int qt) { return qt == QT_Q4_K || qt == QT_Q5_K || qt == QT_Q4_1 || qt == QT_Q5_1; }

/* IQ4_NL's levels (ggml's kvalues_iq4nl) as a shuffle table: byte i of each lane = level i */
INLINE __m256i iq4_table(void) {
    const __m128i t = _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    return _mm256_set_m128i(t, t);
}

/* 32 nibbles of a legacy block (qs[16]: element j low nibble, j + 16 high) as bytes 0..15 */
INLINE __m256i nib32(const unsigned char *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

/* bit e of a little-endian uint32 (Q5_0/Q5_1's qh) as 0x10 in byte e */
INLINE __m256i qh_bits32(const unsigned char *qh4) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

/* Q3_K's 16 6-bit scales minus 32 (see types.c) */
INLINE void q3_scales(const unsigned char *sc, int out[16]) {
    for (int s = 0; s < 16; s++) {
        const int lo = s < 8 ? sc[s] & 0x0f : sc[s - 8] >> 4;
        const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        out[s] = (lo | hi << 4) - 32;
    }
}

/* Row r of the chunk, elements [c0, c0 + kc), into P->tmp[r] and its scales. */
static void decode_row(int qt, const uint8_t *wr, uint64_t c0, uint64_t kc, panel16 *P, int r) {
    int8_t *o = P->tmp[r];
    if (qt == QT_Q8_0 || qt == QT_Q4_0) {
        const int bb = qt == QT_Q8_0 ? 34 : 18;
        for (uint64_t jb = 0; jb < kc / 32; jb++) {
            const uint8_t *b = wr + (c0 / 32 + jb) * bb;
            P->sc[jb * PR + r] = rd_f16(b);
            const __m256i v = qt == QT_Q8_0 ? w32_q8_0(b + 2) : w32_q4_0(b + 2);
            _mm256_store_si256((__m256i *)(o + 32 * jb), v);
        }
    } else if (qt == QT_Q4_K) {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        for (uint64_t jb = 0; jb < kc / 256; jb++) {
            const uint8_t *b = wr + (c0 / 256 + jb) * 144;
            uint8_t scale[8], min[8];
            k4_scales(b + 4, scale, min);
            const float d = rd_f16(b), dmin = rd_f16(b + 2);
            for (int j = 0; j < 8; j++) {
                P->sc[(jb * 8 + j) * PR + r] = d * (float)scale[j];
                P->mn[(jb * 8 + j) * PR + r] = dmin * (float)min[j];
            }
            for (int g = 0; g < 4; g++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * g));
                _mm256_store_si256((__m256i *)(o + 256 * jb + 64 * g), _mm256_and_si256(q, m4));
                _mm256_store_si256((__m256i *)(o + 256 * jb + 64 * g + 32),
                                   _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
            }
        }
    } else if (qt == QT_Q4_1 || qt == QT_Q5_0 || qt == QT_Q5_1 || qt == QT_IQ4_NL) {
        const int bb = qt == QT_Q4_1 ? 20 : qt == QT_Q5_0 ? 22 : qt == QT_Q5_1 ? 24 : 18;
        for (uint64_t jb = 0; jb < kc / 32; jb++) {
            const uint8_t *b = wr + (c0 / 32 + jb) * bb;
            __m256i v;
            P->sc[jb * PR + r] = rd_f16(b);
            if (qt == QT_Q4_1) v = nib32(b + 4);
            else if (qt == QT_Q5_0) v = _mm256_sub_epi8(_mm256_or_si256(nib32(b + 6), qh_bits32(b + 2)), _mm256_set1_epi8(16));
            else if (qt == QT_Q5_1) v = _mm256_or_si256(nib32(b + 8), qh_bits32(b + 4));
            else v = _mm256_shuffle_epi8(iq4_table(), nib32(b + 2));
            if (has_min(qt)) P->mn[jb * PR + r] = -rd_f16(b + 2);
            _mm256_store_si256((__m256i *)(o + 32 * jb), v);
        }
    } else if (qt == QT_Q5_K) {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        for (uint64_t jb = 0; jb < kc / 256; jb++) {
            const uint8_t *b = wr + (c0 / 256 + jb) * 176;
            uint8_t scale[8], min[8];
            k4_scales(b + 4, scale, min);
            const float d = rd_f16(b), dmin = rd_f16(b + 2);
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 16));
            for (int j = 0; j < 8; j++) {
                P->sc[(jb * 8 + j) * PR + r] = d * (float)scale[j];
                P->mn[(jb * 8 + j) * PR + r] = dmin * (float)min[j];
            }
            for (int g = 0; g < 4; g++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(b + 48 + 32 * g));
                _mm256_store_si256((__m256i *)(o + 256 * jb + 64 * g),
                                   _mm256_or_si256(_mm256_and_si256(q, m4), q5_hbit(qh, 2 * g)));
                _mm256_store_si256((__m256i *)(o + 256 * jb + 64 * g + 32),
                                   _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), q5_hbit(qh, 2 * g + 1)));
            }
        }
    } else if (qt == QT_Q3_K) {
        const __m256i m2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), k4 = _mm256_set1_epi8(4);
        for (uint64_t jb = 0; jb < kc / 256; jb++) {
            const uint8_t *b = wr + (c0 / 256 + jb) * 110;
            const float d = rd_f16(b + 108);
            int sc[16];
            q3_scales(b + 96, sc);
            for (int i = 0; i < 16; i++) P->sc[(jb * 16 + i) * PR + r] = d * (float)sc[i];
            const __m256i hm = _mm256_loadu_si256((const __m256i *)b);
            for (int h = 0; h < 2; h++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(b + 32 + 32 * h));
                for (int j = 0; j < 4; j++) {
                    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m2);
                    /* minus 4 where bit 4h + j of hmask[l] is clear */
                    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), one);
                    const __m256i v = _mm256_sub_epi8(lo, _mm256_andnot_si256(_mm256_cmpeq_epi8(hb, one), k4));
                    _mm256_store_si256((__m256i *)(o + 256 * jb + 128 * h + 32 * j), v);
                }
            }
        }
    } else if (qt == QT_IQ4_XS) {
        for (uint64_t jb = 0; jb < kc / 256; jb++) {
            const uint8_t *b = wr + (c0 / 256 + jb) * 136;
            const float d = rd_f16(b);
            const unsigned sh = (unsigned)(b[2] | b[3] << 8);
            for (int s = 0; s < 8; s++) {
                const int ls = (((b[4 + s / 2] >> (4 * (s % 2))) & 0x0f) | ((sh >> (2 * s)) & 3) << 4) - 32;
                P->sc[(jb * 8 + s) * PR + r] = d * (float)ls;
                _mm256_store_si256((__m256i *)(o + 256 * jb + 32 * s), _mm256_shuffle_epi8(iq4_table(), nib32(b + 8 + 16 * s)));
            }
        }
    } else {
        const __m256i k32 = _mm256_set1_epi8(32);
        for (uint64_t jb = 0; jb < kc / 256; jb++) {
            const uint8_t *b = wr + (c0 / 256 + jb) * 210;
            const float d = rd_f16(b + 208);
            for (int i = 0; i < 16; i++) P->sc[(jb * 16 + i) * PR + r] = d * (float)(int8_t)b[192 + i];
            for (int h = 0; h < 2; h++) {
                const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b + 64 * h));
                const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
                for (int j = 0; j < 4; j++)
                    _mm256_store_si256((__m256i *)(o + 256 * jb + 128 * h + 32 * j),
                                       _mm256_sub_epi8(q6_vals(ql0, ql1, qh, j), k32));
            }
        }
    }
}

/* 8 x 8 transpose of 32-bit lanes: r[i] lane p -> r[p] lane i */
INLINE void transpose8(__m256i r[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

/* Decodes rows [0, nr) of the chunk (the rest zero) and lays them out pair-interleaved. */
/* Decodes rows [0, nr) of the chunk into P->tmp and the scales; rows nr..PR-1 zero. */
static void decode_rows(int qt, const uint8_t *w, size_t wrb, int nr, uint64_t c0, uint64_t kc, panel16 *P) {
    const int nsb = (int)(kc / (uint64_t)sub_block16(qt));
    for (int r = 0; r < PR; r++) {
        if (r < nr) {
            decode_row(qt, w + (size_t)r * wrb, c0, kc, P, r);
            continue;
        }
        memset(P->tmp[r], 0, kc);
        for (int j = 0; j < nsb; j++) P->sc[j * PR + r] = 0.0f;
        if (has_min(qt))
            for (int j = 0; j < nsb; j++) P->mn[j * PR + r] = 0.0f;
    }
}

static void pack16(int qt, const uint8_t *w, size_t wrb, int nr, uint64_t c0, uint64_t kc, panel16 *P) {
    decode_rows(qt, w, wrb, nr, c0, kc, P);
    for (uint64_t kb = 0; kb < kc / 16; kb++)
        for (int h = 0; h < 2; h++) {
            __m256i v[8];
            for (int i = 0; i < 8; i++)
                v[i] = _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)(P->tmp[8 * h + i] + 16 * kb)));
            transpose8(v);
            for (int p = 0; p < 8; p++) _mm256_store_si256((__m256i *)(P->q + ((8 * kb + p) * PR + 8 * h) * 2), v[p]);
        }
}

/* ---- float weights, many tokens: 16 rows x FPT tokens outer products -------------------------
 * FKC elements of 16 weight rows are widened once into an f32 panel [k][16 rows] (8 x 8
 * transposes); then per k two panel vectors and one broadcast x per token feed 2 x FPT FMAs:
 * no horizontal sums, and the weights are converted once for all tokens. */
enum { FP_ROWS = 16, FPT = 6, FKC = 256, FPANEL_MIN_TOK = 8 };
enum { W_F32, W_F16, W_BF16 };

/* 8 elements of row p from element i as f32 (n < 8: the rest zero) */
INLINE __m256 fload8(int wt, const char *p, uint64_t i, uint64_t n) {
    if (wt == W_F32) return n >= 8 ? ld_f32(p, i) : ld_f32_tail(p, i, n);
    if (wt == W_F16) return n >= 8 ? ld_f16(p, i) : ld_f16_tail(p, i, n);
    return n >= 8 ? ld_bf16(p, i) : ld_bf16_tail(p, i, n);
}

static void fpack16(int wt, const char *w, size_t wrb, int nr, uint64_t c0, uint64_t kc, float *pf) {
    for (uint64_t kk = 0; kk < kc; kk += 8) {
        const uint64_t n = kc - kk < 8 ? kc - kk : 8;
        for (int h = 0; h < 2; h++) {
            __m256i v[8];
            for (int i = 0; i < 8; i++) {
                const int r = 8 * h + i;
                v[i] = r < nr ? _mm256_castps_si256(fload8(wt, w + (size_t)r * wrb, c0 + kk, n)) : _mm256_setzero_si256();
            }
            transpose8(v);
            for (uint64_t e = 0; e < n; e++) _mm256_store_si256((__m256i *)(pf + (kk + e) * FP_ROWS + 8 * h), v[e]);
        }
    }
}

INLINE void fpanel_tile(int T, const float *pf, uint64_t kc, const float *x, size_t xs, float *y, size_t ldy, int nr,
                        int add) {
    __m256 acc[2][FPT];
    UNROLL for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (uint64_t kk = 0; kk < kc; kk++) {
        const __m256 w0 = _mm256_load_ps(pf + kk * FP_ROWS), w1 = _mm256_load_ps(pf + kk * FP_ROWS + 8);
        UNROLL for (int t = 0; t < T; t++) {
            const __m256 xb = _mm256_broadcast_ss(x + t * xs + kk);
            acc[0][t] = _mm256_fmadd_ps(w0, xb, acc[0][t]);
            acc[1][t] = _mm256_fmadd_ps(w1, xb, acc[1][t]);
        }
    }
    UNROLL for (int g = 0; g < 2; g++) { /* constant g: acc stays in registers */
        if (8 * g >= nr) break;
        const __m256i m = tail_mask((uint64_t)(nr - 8 * g));
        UNROLL for (int t = 0; t < T; t++) {
            float *yp = y + t * ldy + 8 * g;
            __m256 v = acc[g][t];
            if (add) v = _mm256_add_ps(v, _mm256_maskload_ps(yp, m));
            _mm256_maskstore_ps(yp, m, v);
        }
    }
}

#define FPANEL_CASE(T) \
    case T: fpanel_tile(T, pf, kc, x, xs, y, ldy, nr, add); break;

static void fpanel_any(int T, const float *pf, uint64_t kc, const float *x, size_t xs, float *y, size_t ldy, int nr,
                       int add) {
    switch (T) {
        FPANEL_CASE(1) FPANEL_CASE(2) FPANEL_CASE(3) FPANEL_CASE(4) FPANEL_CASE(5) FPANEL_CASE(6)
    default: break;
    }
}

static void gemm_fpanel(int wt, const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb,
                        uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    float pf[FKC * FP_ROWS] __attribute__((aligned(32)));
    const size_t xs = xrb / sizeof(float);
    for (uint64_t r0 = 0; r0 < n_rows; r0 += FP_ROWS) {
        const int nr = n_rows - r0 >= FP_ROWS ? FP_ROWS : (int)(n_rows - r0);
        for (uint64_t c0 = 0; c0 < k; c0 += FKC) {
            const uint64_t kc = k - c0 < FKC ? k - c0 : FKC;
            fpack16(wt, (const char *)w + r0 * wrb, wrb, nr, c0, kc, pf);
            for (uint64_t t = 0; t < n_tok; t += FPT) {
                const int T = n_tok - t >= FPT ? FPT : (int)(n_tok - t);
                fpanel_any(T, pf, kc, (const float *)((const char *)x + t * xrb) + c0, xs, y + t * ldy + r0, ldy, nr,
                           c0 > 0);
            }
        }
    }
}

/* the float gemms: many tokens through the panel, few through the row tiles */
#define GEMM_FLOAT(NAME, WT, TILES)                                                                 \
    static void NAME(const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb,         \
                     uint64_t n_tok, float *y, size_t ldy, uint64_t k) {                             \
        if (n_tok >= FPANEL_MIN_TOK && xrb % sizeof(float) == 0)                                     \
            gemm_fpanel(WT, w, wrb, n_rows, x, xrb, n_tok, y, ldy, k);                               \
        else                                                                                         \
            TILES(w, wrb, n_rows, x, xrb, n_tok, y, ldy, k);                                         \
    }
GEMM_FLOAT(gemm_f32, W_F32, gemm_f32_tiles)
GEMM_FLOAT(gemm_f16, W_F16, gemm_f16_tiles)
GEMM_FLOAT(gemm_bf16, W_BF16, gemm_bf16_tiles)

INLINE int32_t ld_pair(const int16_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The chunk against T tokens: y[t][0..nr) = (add ? y : 0) + panel . x_t */
INLINE void tile16(int qt, int T, const panel16 *P, uint64_t c0, uint64_t kc, const char *x, size_t xrb, float *y,
                   size_t ldy, int nr, int add) {
    const int SB = sub_block16(qt);
    __m256 acc[2][PTK];
    UNROLL for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (uint64_t j = 0; j < kc / (uint64_t)SB; j++) {
        const uint64_t e0 = c0 + j * (uint64_t)SB;
        const int16_t *xp[PTK];
        float dx[PTK], sx[PTK];
        __m256i ai[2][PTK];
        UNROLL for (int t = 0; t < T; t++) {
            const kipp_act_q16 *b = (const kipp_act_q16 *)(x + t * xrb) + e0 / 32;
            xp[t] = b->qs + e0 % 32;
            dx[t] = b->d;
            sx[t] = -b->d * (float)b->sum;
            ai[0][t] = ai[1][t] = _mm256_setzero_si256();
        }
        const int16_t *qv = P->q + j * (uint64_t)SB * PR;
        _Pragma("GCC unroll 2") for (int s = 0; s < SB / 2; s++) {
            const __m256i w0 = _mm256_load_si256((const __m256i *)(qv + s * 2 * PR));
            const __m256i w1 = _mm256_load_si256((const __m256i *)(qv + s * 2 * PR + 16));
            UNROLL for (int t = 0; t < T; t++) {
                const __m256i xb = _mm256_set1_epi32(ld_pair(xp[t] + 2 * s));
                ai[0][t] = _mm256_add_epi32(ai[0][t], _mm256_madd_epi16(w0, xb));
                ai[1][t] = _mm256_add_epi32(ai[1][t], _mm256_madd_epi16(w1, xb));
            }
        }
        UNROLL for (int g = 0; g < 2; g++) {
            const __m256 sc = _mm256_load_ps(P->sc + j * PR + 8 * g);
            UNROLL for (int t = 0; t < T; t++) {
                const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(ai[g][t]), _mm256_set1_ps(dx[t]));
                acc[g][t] = _mm256_fmadd_ps(f, sc, acc[g][t]);
                if (has_min(qt))
                    acc[g][t] = _mm256_fmadd_ps(_mm256_load_ps(P->mn + j * PR + 8 * g), _mm256_set1_ps(sx[t]), acc[g][t]);
            }
        }
    }
    UNROLL for (int g = 0; g < 2; g++) { /* constant g: acc stays in registers */
        if (8 * g >= nr) break;
        const __m256i m = tail_mask((uint64_t)(nr - 8 * g));
        UNROLL for (int t = 0; t < T; t++) {
            float *yp = y + t * ldy + 8 * g;
            __m256 v = acc[g][t];
            if (add) v = _mm256_add_ps(v, _mm256_maskload_ps(yp, m));
            _mm256_maskstore_ps(yp, m, v);
        }
    }
}

#define TILE16_CASE(T) \
    case T: tile16(qt, T, P, c0, kc, x, xrb, y, ldy, nr, add); break;

INLINE void tile16_any(int qt, int T, const panel16 *P, uint64_t c0, uint64_t kc, const char *x, size_t xrb, float *y,
                       size_t ldy, int nr, int add) {
    switch (T) {
        TILE16_CASE(1) TILE16_CASE(2) TILE16_CASE(3)
    default: break;
    }
}

INLINE void gemm16(int qt, const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb, uint64_t n_tok,
                   float *y, size_t ldy, uint64_t k) {
    panel16 P; /* ~60 KiB on the caller's stack: no allocation to fail */
    for (uint64_t r0 = 0; r0 < n_rows; r0 += PR) {
        const int nr = n_rows - r0 >= PR ? PR : (int)(n_rows - r0);
        for (uint64_t c0 = 0; c0 < k; c0 += KC) {
            const uint64_t kc = k - c0 < KC ? k - c0 : KC;
            pack16(qt, (const uint8_t *)w + r0 * wrb, wrb, nr, c0, kc, &P);
            for (uint64_t t = 0; t < n_tok; t += PTK) {
                const int T = n_tok - t >= PTK ? PTK : (int)(n_tok - t);
                tile16_any(qt, T, &P, c0, kc, (const char *)x + t * xrb, xrb, y + t * ldy + r0, ldy, nr, c0 > 0);
            }
        }
    }
}

#define GEMM16(name, qt)                                                                                    \
    static void name(const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb, uint64_t n_tok, \
                     float *y, size_t ldy, uint64_t k) {                                                    \
        gemm16(qt, w, wrb, n_rows, x, xrb, n_tok, y, ldy, k);                                               \
    }
GEMM16(gemm16_q8_0, QT_Q8_0)
GEMM16(gemm16_q4_0, QT_Q4_0)
GEMM16(gemm16_q4_k, QT_Q4_K)
GEMM16(gemm16_q6_k, QT_Q6_K)
GEMM16(gemm16_q4_1, QT_Q4_1)
GEMM16(gemm16_q5_0, QT_Q5_0)
GEMM16(gemm16_q5_1, QT_Q5_1)
GEMM16(gemm16_q3_k, QT_Q3_K)
GEMM16(gemm16_q5_k, QT_Q5_K)
GEMM16(gemm16_iq4_nl, QT_IQ4_NL)
GEMM16(gemm16_iq4_xs, QT_IQ4_XS)

/* ---- few tokens for the other types added for Hub files (Q4_1 Q5_0 Q5_1 Q3_K IQ4_NL IQ4_XS) --
 * Decode and small batches on Q8_0 activations (two planes, forward.c), for the K types too:
 * each weight row is decoded a chunk at a time by the panel's decode_row into signed bytes
 * and an f32 scale per sub-block (and min), then every token's 32-blocks are dotted exactly
 * in int32 (sign trick + maddubs; Q3_K's two 16-element sub-blocks per 32 in the two
 * 128-bit halves) and scaled: y += dx * sc * dot - mn * s_x (s_x = dx * sum of the block). */
static void gemm_rows_dec(int qt, const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb,
                          uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    panel16 P; /* only row 0 of tmp and the scales are used */
    const int SB = sub_block16(qt);
    for (uint64_t r = 0; r < n_rows; r++) {
        const uint8_t *wr = (const uint8_t *)w + r * wrb;
        for (uint64_t t = 0; t < n_tok; t++) y[t * ldy + r] = 0.0f;
        for (uint64_t c0 = 0; c0 < k; c0 += KC) {
            const uint64_t kc = k - c0 < KC ? k - c0 : KC;
            decode_row(qt, wr, c0, kc, &P, 0);
            for (uint64_t t = 0; t < n_tok; t++) {
                const kipp_act_q8_0 *xb = (const kipp_act_q8_0 *)((const char *)x + t * xrb) + c0 / 32;
                __m256 acc = _mm256_setzero_ps();
                float accm = 0.0f;
                for (uint64_t jb = 0; jb < kc / 32; jb++) {
                    const __m256i wq = _mm256_load_si256((const __m256i *)(P.tmp[0] + 32 * jb));
                    const __m256i xq = _mm256_loadu_si256((const __m256i *)xb[jb].qs);
                    const __m256 s = _mm256_cvtepi32_ps(dot_i8(_mm256_sign_epi8(wq, wq), wq, xq));
                    __m256 scv;
                    if (SB == 16)
                        scv = _mm256_set_m128(_mm_set1_ps(P.sc[(2 * jb + 1) * PR]), _mm_set1_ps(P.sc[2 * jb * PR]));
                    else
                        scv = _mm256_set1_ps(P.sc[jb * PR]);
                    acc = _mm256_fmadd_ps(_mm256_mul_ps(scv, _mm256_set1_ps(xb[jb].d)), s, acc);
                    if (has_min(qt)) accm += P.mn[jb * PR] * xb[jb].s;
                }
                y[t * ldy + r] += hsum256(acc) - accm;
            }
        }
    }
}

#define GEMM_DEC(name, qt)                                                                                  \
    static void name(const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb, uint64_t n_tok, \
                     float *y, size_t ldy, uint64_t k) {                                                    \
        gemm_rows_dec(qt, w, wrb, n_rows, x, xrb, n_tok, y, ldy, k);                                        \
    }
GEMM_DEC(gemm_q4_1, QT_Q4_1)
GEMM_DEC(gemm_q5_0, QT_Q5_0)
GEMM_DEC(gemm_q5_1, QT_Q5_1)
GEMM_DEC(gemm_q3_k, QT_Q3_K)
GEMM_DEC(gemm_iq4_nl, QT_IQ4_NL)
GEMM_DEC(gemm_iq4_xs, QT_IQ4_XS)

/* KIPP_ACT_Q16 rows, bit-identical to kipp_cpu_quant_q16_scalar */
static void quant_q16(const float *x, void *out, uint64_t k) {
    kipp_act_q16 *b = out;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (uint64_t blk = 0; blk < k / 32; blk++, x += 32, b++) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const __m256 id = _mm256_set1_ps(amax > 0.0f ? 32767.0f / amax : 0.0f);
        const __m256i lim = _mm256_set1_epi32(32767), nlim = _mm256_set1_epi32(-32767);
        __m256i q[4], s = _mm256_setzero_si256();
        for (int i = 0; i < 4; i++) {
            const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            q[i] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(r), lim), nlim);
            s = _mm256_add_epi32(s, q[i]);
        }
        /* packs works per 128-bit lane: permute back to element order */
        _mm256_storeu_si256((__m256i *)b->qs, _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xd8));
        _mm256_storeu_si256((__m256i *)(b->qs + 16), _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xd8));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        b->d = amax / 32767.0f;
        b->sum = _mm_cvtsi128_si32(s4);
    }
}

/* ---- elementwise: exp-based stages (as kernels_avx512.c) -----------------------------------
 * exp(x) = 2^n * p(r), n = round(x / ln 2), r = x - n ln 2 (two-part ln 2), p the degree-6
 * Taylor polynomial (relative error < 2e-7); x clamped to [-87.3, 88.3] so that 2^n, built
 * in the exponent field, stays a normal float (n in [-126, 127]). NaN stays NaN. */
INLINE __m256 exp256(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.3f), _mm256_max_ps(_mm256_set1_ps(-87.3f), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

INLINE float hmax256(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static void softmax_f32(float *s, uint64_t n, float scale) {
    const __m256 sc = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
    __m256 mx = ninf;
    for (uint64_t i = 0; i < n; i += 8) {
        const __m256i m = tail_mask(n - i);
        const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(s + i, m), sc);
        mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, v, _mm256_castsi256_ps(m)));
    }
    const __m256 vmax = _mm256_set1_ps(hmax256(mx));
    __m256 sum = _mm256_setzero_ps();
    for (uint64_t i = 0; i < n; i += 8) {
        const __m256i m = tail_mask(n - i);
        const __m256 e = _mm256_and_ps(exp256(_mm256_fmsub_ps(_mm256_maskload_ps(s + i, m), sc, vmax)),
                                       _mm256_castsi256_ps(m));
        sum = _mm256_add_ps(sum, e);
        _mm256_maskstore_ps(s + i, m, e);
    }
    const __m256 inv = _mm256_set1_ps(1.0f / hsum256(sum));
    for (uint64_t i = 0; i < n; i += 8) {
        const __m256i m = tail_mask(n - i);
        _mm256_maskstore_ps(s + i, m, _mm256_mul_ps(_mm256_maskload_ps(s + i, m), inv));
    }
}

static void swiglu_f32(float *g, const float *u, uint64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (uint64_t i = 0; i < n; i += 8) {
        const __m256i m = tail_mask(n - i);
        const __m256 gv = _mm256_maskload_ps(g + i, m);
        const __m256 den = _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), gv)));
        _mm256_maskstore_ps(g + i, m, _mm256_mul_ps(_mm256_div_ps(gv, den), _mm256_maskload_ps(u + i, m)));
    }
}

/* ---- attention p·V ------------------------------------------------------------------------
 * Two heads x up to 48 dims of output (12 registers) stay put while the V rows stream by. */
INLINE __m256 load_kv8(int ty, __m256i m, const void *v, size_t i, uint32_t left) {
    if (ty == 0) return _mm256_maskload_ps((const float *)v + i, m);
    uint16_t t[8];
    const uint16_t *h = (const uint16_t *)v + i;
    if (left < 8) { /* the tail: no 16-bit masked load in AVX2 */
        memset(t, 0, sizeof t);
        memcpy(t, h, left * 2);
        h = t;
    }
    return ty == 1 ? ld_f16(h, 0) : ld_bf16(h, 0);
}

enum { PV_V = 6 }; /* vectors of 8 dims per head and pass */

INLINE void pv_any(int ty, float *o, const float *p, size_t ps, uint32_t G, const void *v0, size_t vs,
                   uint32_t n, uint32_t d) {
    const size_t esz = ty == 0 ? 4 : 2;
    for (uint32_t g0 = 0; g0 < G; g0 += 2) {
        const int gg = G - g0 >= 2 ? 2 : 1;
        for (uint32_t d0 = 0; d0 < d; d0 += 8 * PV_V) {
            const uint32_t dd = d - d0 < 8 * PV_V ? d - d0 : 8 * PV_V;
            __m256i m[PV_V];
            uint32_t left[PV_V];
            UNROLL for (int j = 0; j < PV_V; j++) {
                left[j] = dd > 8u * (uint32_t)j ? dd - 8u * (uint32_t)j : 0;
                m[j] = tail_mask(left[j] < 8 ? left[j] : 8);
            }
            __m256 a0[PV_V], a1[PV_V];
            float *o0 = o + (size_t)g0 * d + d0, *o1 = o0 + d;
            UNROLL for (int j = 0; j < PV_V; j++) {
                a0[j] = _mm256_maskload_ps(o0 + 8 * j, m[j]);
                a1[j] = gg == 2 ? _mm256_maskload_ps(o1 + 8 * j, m[j]) : _mm256_setzero_ps();
            }
            const float *p0 = p + (size_t)g0 * ps, *p1 = p0 + ps;
            for (uint32_t t = 0; t < n; t++) {
                const void *v = (const char *)v0 + ((size_t)t * vs + d0) * esz;
                const __m256 b0 = _mm256_set1_ps(p0[t]), b1 = _mm256_set1_ps(gg == 2 ? p1[t] : 0.0f);
                UNROLL for (int j = 0; j < PV_V; j++) {
                    if (!left[j]) break;
                    const __m256 vv = load_kv8(ty, m[j], v, 8 * (size_t)j, left[j]);
                    a0[j] = _mm256_fmadd_ps(b0, vv, a0[j]);
                    a1[j] = _mm256_fmadd_ps(b1, vv, a1[j]);
                }
            }
            UNROLL for (int j = 0; j < PV_V; j++) {
                _mm256_maskstore_ps(o0 + 8 * j, m[j], a0[j]);
                if (gg == 2) _mm256_maskstore_ps(o1 + 8 * j, m[j], a1[j]);
            }
        }
    }
}

static void pv_f32(float *o, const float *p, size_t ps, uint32_t G, const float *v0, size_t vs, uint32_t n, uint32_t d) {
    pv_any(0, o, p, ps, G, v0, vs, n, d);
}
static void pv_f16(float *o, const float *p, size_t ps, uint32_t G, const void *v0, size_t vs, uint32_t n, uint32_t d) {
    pv_any(1, o, p, ps, G, v0, vs, n, d);
}
static void pv_bf16(float *o, const float *p, size_t ps, uint32_t G, const void *v0, size_t vs, uint32_t n, uint32_t d) {
    pv_any(2, o, p, ps, G, v0, vs, n, d);
}

/* p·V for many query rows over V rows by pointer (kernels.h: pv_rows_*): the float panel
 * with V^T as the weights, 16 of a row's values one panel line (no transposes). */
static void pv_rows_any(int wt, float *o, size_t ldo, const float *p, size_t ps, uint32_t nq,
                        const void *const *rows, uint32_t n, uint32_t d) {
    float pf[FKC * FP_ROWS] __attribute__((aligned(32)));
    const size_t es = wt == W_F32 ? 4 : 2;
    for (uint32_t r0 = 0; r0 < d; r0 += FP_ROWS) {
        const int nr = d - r0 >= FP_ROWS ? FP_ROWS : (int)(d - r0);
        for (uint32_t c0 = 0; c0 < n; c0 += FKC) {
            const uint32_t kc = n - c0 < FKC ? n - c0 : FKC;
            for (uint32_t kk = 0; kk < kc; kk++) {
                const char *v = (const char *)rows[c0 + kk] + (size_t)r0 * es;
                _mm256_store_ps(pf + (size_t)kk * FP_ROWS, fload8(wt, v, 0, (uint64_t)(nr < 8 ? nr : 8)));
                _mm256_store_ps(pf + (size_t)kk * FP_ROWS + 8,
                                nr > 8 ? fload8(wt, v, 8, (uint64_t)(nr - 8)) : _mm256_setzero_ps());
            }
            for (uint32_t t = 0; t < nq; t += FPT) {
                const int T = nq - t >= FPT ? FPT : (int)(nq - t);
                fpanel_any(T, pf, kc, p + (size_t)t * ps + c0, ps, o + (size_t)t * ldo + r0, ldo, nr, c0 > 0);
            }
        }
    }
}

static void pv_rows_f32(float *o, size_t ldo, const float *p, size_t ps, uint32_t nq, const void *const *rows,
                        uint32_t n, uint32_t d) {
    pv_rows_any(W_F32, o, ldo, p, ps, nq, rows, n, d);
}
static void pv_rows_f16(float *o, size_t ldo, const float *p, size_t ps, uint32_t nq, const void *const *rows,
                        uint32_t n, uint32_t d) {
    pv_rows_any(W_F16, o, ldo, p, ps, nq, rows, n, d);
}
static void pv_rows_bf16(float *o, size_t ldo, const float *p, size_t ps, uint32_t nq, const void *const *rows,
                         uint32_t n, uint32_t d) {
    pv_rows_any(W_BF16, o, ldo, p, ps, nq, rows, n, d);
}

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
    .q8_0 = {KIPP_ACT_Q8_0, gemm_q8_0, KIPP_ACT_Q16, gemm16_q8_0, MANY_MIN_TOK, &kp_packer_q8_0},
    .q4_0 = {KIPP_ACT_Q8_0, gemm_q4_0, KIPP_ACT_Q16, gemm16_q4_0, MANY_MIN_TOK},
    .q4_k = {KIPP_ACT_Q8_K, gemm_q4_k, KIPP_ACT_Q16, gemm16_q4_k, MANY_MIN_TOK, &kp_packer_q4_k},
    .q6_k = {KIPP_ACT_Q8_K, gemm_q6_k, KIPP_ACT_Q16, gemm16_q6_k, MANY_MIN_TOK, &kp_packer_q6_k},
    /* Q2_K has no kernel here (16-element mins): kipp_cpu_gemm_dequant */
    .q4_1 = {KIPP_ACT_Q8_0, gemm_q4_1, KIPP_ACT_Q16, gemm16_q4_1, MANY_MIN_TOK},
    .q5_0 = {KIPP_ACT_Q8_0, gemm_q5_0, KIPP_ACT_Q16, gemm16_q5_0, MANY_MIN_TOK},
    .q5_1 = {KIPP_ACT_Q8_0, gemm_q5_1, KIPP_ACT_Q16, gemm16_q5_1, MANY_MIN_TOK},
    .q2_k = {KIPP_ACT_Q8_K, gemm_q2_k},
    .q3_k = {KIPP_ACT_Q8_0, gemm_q3_k, KIPP_ACT_Q16, gemm16_q3_k, MANY_MIN_TOK},
    .q5_k = {KIPP_ACT_Q8_K, gemm_q5_k, KIPP_ACT_Q16, gemm16_q5_k, MANY_MIN_TOK, &kp_packer_q5_k},
    .iq4_nl = {KIPP_ACT_Q8_0, gemm_iq4_nl, KIPP_ACT_Q16, gemm16_iq4_nl, MANY_MIN_TOK},
    .iq4_xs = {KIPP_ACT_Q8_0, gemm_iq4_xs, KIPP_ACT_Q16, gemm16_iq4_xs, MANY_MIN_TOK},
    .quant = {NULL, kipp_cpu_quant_bf16_scalar, kipp_cpu_quant_q8_0_scalar,
              kipp_cpu_quant_q8_k_scalar, quant_q16},
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .softmax_f32 = softmax_f32,
    .swiglu_f32 = swiglu_f32,
    .pv_f32 = pv_f32,
    .pv_f16 = pv_f16,
    .pv_bf16 = pv_bf16,
    .f16_to_f32 = f16_to_f32,
    .bf16_to_f32 = bf16_to_f32,
    .pv_rows_f32 = pv_rows_f32,
    .pv_rows_f16 = pv_rows_f16,
    .pv_rows_bf16 = pv_rows_bf16,
};
