/* kernels_avx512.c — the AVX-512 kernel levels. Built alone it is level "avx512"
 * (-mavx512f -mavx512bw -mavx512vl -mfma -mf16c: Skylake-X and later); kernels_avx512vnni.c
 * includes this file with KIPP_AVX512_VNNI=1 (adds -mavx512vnni) to build level
 * "avx512vnni" from the same code, its int8 dots one vpdpbusd instead of maddubs + madd + add.
 * Only reached after cpu.c checked cpuid. Same semantics as kernels_scalar.c; all sums f32
 * except the exact int32 sums inside one scale block.
 *
 * F32/F16/BF16 weights on f32 activations (vdpbf16ps runs at a quarter of the FMA rate on
 * Emerald Rapids — 32 MACs per 4 cycles against 2 x 16 per cycle — so bf16 weights are
 * widened to f32 and FMA'd; the activations stay f32):
 *   - few tokens (< FPANEL_MIN_TOK): a tile of FR rows x FT tokens with 16-lane accumulators
 *     along k (masked k tails), one transposing reduction per tile;
 *   - many tokens: 32 rows x FKC elements widened once into an f32 panel [k][32 rows], then per
 *     k two panel vectors times one broadcast x per token into 2 x FPT accumulators. The tiles
 *     alone at every count are the entries' gemm_many, which only the auto table takes (on a
 *     Zen 4, where they outrun the panel: bench/results/kernels-epyc-avx512bf16.json);
 * Q8_0/Q4_0 on Q8_0 activations, Q4_K/Q6_K on Q8_K activations:
 *   - "dot" (decode): FQ weight rows at a time, 64 weights per vector, int dots per scale
 *     block (u8 x s8: Q8_0 + 128 with VNNI, else |w| with the sign moved onto x; Q4_0/Q4_K
 *     nibbles and Q6_K 6-bit values are unsigned), the offsets taken out through the
 *     activation sums, then f32 FMA with the block scales;
 *   - "panel" (n_tok >= panel_min_tok): 32 weight rows are unpacked once per KC_MAX elements
 *     into an int8 panel (4 consecutive k of 16 rows per vector, plus per-row f32 block
 *     scales), then each token's 4 activation bytes are broadcast into the int dot against
 *     16 rows at a time: no horizontal sums, the weight decode paid once for all tokens. */
#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef KIPP_AVX512_VNNI
#define KIPP_AVX512_VNNI 0
#endif

#if KIPP_AVX512_VNNI
/* Q8_0, Q4_K, Q5_K and Q6_K repacked at load, their int16 dots one vpdpwssd (AVX512-VNNI + VL);
 * Q8_0's tile at 512 bits (KP_DOT512: 16 rows x 8 tokens, kernels_packed.h) */
#define KP_DOT(acc, w, x) _mm256_dpwssd_epi32((acc), (w), (x))
#define KP_DOT512(acc, w, x) _mm512_dpwssd_epi32((acc), (w), (x))
#include "backend/cpu/kernels_packed.h"
#endif

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* acc + sum over each 4-byte group of u8(u) * s8(s) into the int32 lanes. Without VNNI it
 * is maddubs + madd: exact as long as no pair sum passes int16, which every caller ensures
 * (u <= 128 with |s| <= 127, or u <= 63). */
INLINE __m512i dpbusd(__m512i acc, __m512i u, __m512i s) {
#if KIPP_AVX512_VNNI
    return _mm512_dpbusd_epi32(acc, u, s);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
#endif
}

INLINE uint16_t rd_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
INLINE float rd_f16(const void *p) { return _cvtsh_ss(rd_u16(p)); }

INLINE __mmask16 mask16(uint64_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* Prefetches bytes [off, off + len) of nr rows into L2 (the next panel chunk's weights,
 * fetched from memory while the current chunk computes). */
static void prefetch_rows(const char *w, size_t wrb, int nr, size_t off, size_t len) {
    for (int r = 0; r < nr; r++)
        for (size_t b = 0; b < len; b += 64) _mm_prefetch(w + r * wrb + off + b, _MM_HINT_T1);
}

/* [sum a, sum b, sum c, sum d] */
INLINE __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    /* 128-bit lanes: a, b, c, d partials (4 each) */
    __m512 v = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4e));
    v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xb1));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), v));
}

/* ---- attention helpers ------------------------------------------------------------------ */

static float dot_f32(const float *a, const float *b, uint64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    uint64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static void axpy_f32(float *y, float a, const float *x, uint64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    uint64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        const __mmask16 m = mask16(n - i);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

/* ---- activation converters (bit-identical to the scalar ones) ----------------------------- */

static void quant_bf16(const float *x, void *out, uint64_t k) {
    uint16_t *o = out;
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    for (uint64_t i = 0; i < k; i += 16) {
        const __mmask16 m = mask16(k - i);
        const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, x + i));
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, absm), inf);
        __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
        r = _mm512_srli_epi32(r, 16);
        r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
        _mm256_mask_storeu_epi16(o + i, m, _mm512_cvtepi32_epi16(r));
    }
}

/* round to nearest even, as the scalar (v + 1.5*2^23) - 1.5*2^23 for |v| < 2^22 */
INLINE __m512i round_i32(__m512 v) { return _mm512_cvt_roundps_epi32(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

INLINE float amax16(__m512 v) { return _mm512_reduce_max_ps(_mm512_abs_ps(v)); }

static void quant_q8_0(const float *x, void *out, uint64_t k) {
    kipp_act_q8_0 *b = out;
    for (uint64_t blk = 0; blk < k / 32; blk++, x += 32, b++) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        const __m512 vid = _mm512_set1_ps(id);
        const __m512i q0 = round_i32(_mm512_mul_ps(v0, vid)), q1 = round_i32(_mm512_mul_ps(v1, vid));
        _mm_storeu_si128((__m128i *)b->qs, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(b->qs + 16), _mm512_cvtepi32_epi8(q1));
        const int sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
        b->d = d;
        b->s = d * (float)sum;
    }
}

static void quant_q8_k(const float *x, void *out, uint64_t k) {
    kipp_act_q8_k *b = out;
    for (uint64_t blk = 0; blk < k / 256; blk++, x += 256, b++) {
        __m512 mx = _mm512_setzero_ps();
        for (int i = 0; i < 256; i += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
        const float amax = _mm512_reduce_max_ps(mx);
        const __m512 vid = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        b->d = amax / 127.0f;
        const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
        for (int j = 0; j < 16; j++) {
            __m512i q = round_i32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * j), vid));
            q = _mm512_min_epi32(_mm512_max_epi32(q, lo), hi);
            _mm_storeu_si128((__m128i *)(b->qs + 16 * j), _mm512_cvtepi32_epi8(q));
            b->bsums[j] = (int16_t)_mm512_reduce_add_epi32(q);
        }
    }
}

/* ---- float weights: FR rows x FT tokens tile ---------------------------------------------- */

enum { FR = 4, FT = 4 };

enum { W_F32, W_F16, W_BF16 };

/* 16 weights from element i of row p, as f32 (lanes past m zero) */
INLINE __m512 fload(int wt, const char *p, uint64_t i, __mmask16 m, int full) {
    if (wt == W_F32) {
        const float *f = (const float *)p + i;
        return full ? _mm512_loadu_ps(f) : _mm512_maskz_loadu_ps(m, f);
    }
    const uint16_t *h = (const uint16_t *)p + i;
    const __m256i v = full ? _mm256_loadu_si256((const __m256i *)h) : _mm256_maskz_loadu_epi16(m, h);
    if (wt == W_F16) return _mm512_cvtph_ps(v);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

INLINE void ftile(int wt, int R, int T, const char *w, size_t wrb, const char *x, size_t xrb, float *y,
                  size_t ldy, uint64_t k) {
    __m512 acc[FR][FT];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    uint64_t i = 0;
    const size_t es = wt == W_F32 ? 4 : 2;
    for (; i + 16 <= k; i += 16) {
        __m512 xv[FT];
        UNROLL for (int t = 0; t < T; t++) xv[t] = _mm512_loadu_ps((const float *)(x + t * xrb) + i);
        /* decode streams the weights from memory: fetch the next tile's rows ahead */
        if (T <= 2) UNROLL for (int r = 0; r < R; r++) _mm_prefetch(w + (R + r) * wrb + i * es + 256, _MM_HINT_T0);
        UNROLL for (int r = 0; r < R; r++) {
            const __m512 wv = fload(wt, w + r * wrb, i, 0xffff, 1);
            UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    if (i < k) {
        const __mmask16 m = mask16(k - i);
        __m512 xv[FT];
        UNROLL for (int t = 0; t < T; t++) xv[t] = _mm512_maskz_loadu_ps(m, (const float *)(x + t * xrb) + i);
        UNROLL for (int r = 0; r < R; r++) {
            const __m512 wv = fload(wt, w + r * wrb, i, m, 0);
            UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
        }
    }
    if (R == 4) {
        UNROLL for (int t = 0; t < T; t++)
            _mm_storeu_ps(y + t * ldy, hsum4(acc[0][t], acc[1 % R][t], acc[2 % R][t], acc[3 % R][t]));
    } else {
        UNROLL for (int t = 0; t < T; t++) UNROLL for (int r = 0; r < R; r++) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
    }
}

#define FTILE_CASE(R, T) \
    case (R) * 8 + (T): ftile(wt, R, T, w, wrb, x, xrb, y, ldy, k); break;

INLINE void ftile_any(int wt, int R, int T, const char *w, size_t wrb, const char *x, size_t xrb, float *y,
                      size_t ldy, uint64_t k) {
    switch (R * 8 + T) {
        FTILE_CASE(4, 4) FTILE_CASE(4, 3) FTILE_CASE(4, 2) FTILE_CASE(4, 1)
        FTILE_CASE(3, 4) FTILE_CASE(3, 3) FTILE_CASE(3, 2) FTILE_CASE(3, 1)
        FTILE_CASE(2, 4) FTILE_CASE(2, 3) FTILE_CASE(2, 2) FTILE_CASE(2, 1)
        FTILE_CASE(1, 4) FTILE_CASE(1, 3) FTILE_CASE(1, 2) FTILE_CASE(1, 1)
    default: break;
    }
}

/* ---- float weights, panel path (many tokens): 32 rows x FPT tokens --------------------------
 * FKC elements of 32 weight rows are widened once into an f32 panel [k][32 rows]; then per k
 * two panel vectors and one broadcast x per token feed 2 * FPT FMAs (no horizontal sums). */
enum { FP_ROWS = 32, FPT = 12, FKC = 256, FPANEL_MIN_TOK = 12 };

static void fpack_group(int wt, const char *w, size_t wrb, int nr, uint64_t c0, uint64_t kc, uint64_t k, float *pf) {
    const __mmask16 m = mask16((uint64_t)nr);
    const __m512i vidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)wrb));
    const __m512i zero = _mm512_setzero_si512();
    if (wt == W_F32) {
        for (uint64_t kk = 0; kk < kc; kk++)
            _mm512_store_si512((__m512i *)(pf + kk * FP_ROWS),
                               _mm512_mask_i32gather_epi32(zero, m, vidx, w + (c0 + kk) * 4, 1));
        return;
    }
    uint64_t kk = 0;
    for (; kk + 2 <= kc; kk += 2) {
        const __m512i v = _mm512_mask_i32gather_epi32(zero, m, vidx, w + (c0 + kk) * 2, 1);
        __m512 lo, hi;
        if (wt == W_BF16) {
            lo = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            hi = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
        } else {
            lo = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v));
            hi = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
        }
        _mm512_store_ps(pf + kk * FP_ROWS, lo);
        _mm512_store_ps(pf + (kk + 1) * FP_ROWS, hi);
    }
    if (kk < kc) { /* the row's last element (k odd): scalar, never reading past the row */
        float tmp[16] = {0};
        for (int r = 0; r < nr; r++) {
            const uint16_t h = rd_u16(w + r * wrb + (c0 + kk) * 2);
            tmp[r] = wt == W_BF16 ? kipp_bf16_to_f32(h) : _cvtsh_ss(h);
        }
        _mm512_store_ps(pf + kk * FP_ROWS, _mm512_loadu_ps(tmp));
    }
    (void)k;
}

INLINE void fpanel_tile(int T, const float *pf, uint64_t kc, const float *x, size_t xrb, float *y, size_t ldy, int nr,
                        int add) {
    const int G = nr > 16 ? 2 : 1;
    __m512 acc[2][FPT];
    UNROLL for (int g = 0; g < 2; g++) UNROLL for (int t = 0; t < T; t++) acc[g][t] = _mm512_setzero_ps();
    const size_t xs = xrb / sizeof(float);
    if (G == 2) {
        for (uint64_t kk = 0; kk < kc; kk++) {
            const __m512 w0 = _mm512_load_ps(pf + kk * FP_ROWS), w1 = _mm512_load_ps(pf + kk * FP_ROWS + 16);
            UNROLL for (int t = 0; t < T; t++) {
                const __m512 xb = _mm512_set1_ps(x[t * xs + kk]);
                acc[0][t] = _mm512_fmadd_ps(w0, xb, acc[0][t]);
                acc[1][t] = _mm512_fmadd_ps(w1, xb, acc[1][t]);
            }
        }
    } else {
        for (uint64_t kk = 0; kk < kc; kk++) {
            const __m512 w0 = _mm512_load_ps(pf + kk * FP_ROWS);
            UNROLL for (int t = 0; t < T; t++) acc[0][t] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[t * xs + kk]), acc[0][t]);
        }
    }
    UNROLL for (int g = 0; g < 2; g++) {
        if (g >= G) break;
        const __mmask16 m = mask16((uint64_t)(nr - 16 * g));
        UNROLL for (int t = 0; t < T; t++) {
            float *yp = y + t * ldy + 16 * g;
            __m512 v = acc[g][t];
            if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, yp));
            _mm512_mask_storeu_ps(yp, m, v);
        }
    }
}

#define FPANEL_CASE(T) \
    case T: fpanel_tile(T, pf, kc, x, xrb, y, ldy, nr, add); break;

static void fpanel_any(int T, const float *pf, uint64_t kc, const float *x, size_t xrb, float *y, size_t ldy, int nr,
                       int add) {
    switch (T) {
        FPANEL_CASE(1) FPANEL_CASE(2) FPANEL_CASE(3) FPANEL_CASE(4) FPANEL_CASE(5) FPANEL_CASE(6)
        FPANEL_CASE(7) FPANEL_CASE(8) FPANEL_CASE(9) FPANEL_CASE(10) FPANEL_CASE(11) FPANEL_CASE(12)
    default: break;
    }
}

static void gemm_fpanel(int wt, const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb,
                        uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    static _Thread_local float pf[FKC * FP_ROWS] __attribute__((aligned(64)));
    for (uint64_t r0 = 0; r0 < n_rows; r0 += FP_ROWS) {
        const int nr = n_rows - r0 >= FP_ROWS ? FP_ROWS : (int)(n_rows - r0);
        const char *wr = (const char *)w + r0 * wrb;
        for (uint64_t c0 = 0; c0 < k; c0 += FKC) {
            const uint64_t kc = k - c0 < FKC ? k - c0 : FKC;
            fpack_group(wt, wr, wrb, nr < 16 ? nr : 16, c0, kc, k, pf);
            if (nr > 16) fpack_group(wt, wr + 16 * wrb, wrb, nr - 16, c0, kc, k, pf + 16);
            if (n_tok >= 2 * FPT) { /* the next chunk: this one's compute hides its fetch */
                const size_t es = wt == W_F32 ? 4 : 2;
                if (c0 + FKC < k)
                    prefetch_rows(wr, wrb, nr, (c0 + FKC) * es, (k - c0 - FKC < FKC ? k - c0 - FKC : FKC) * es);
                else if (r0 + FP_ROWS < n_rows) {
                    const int nn = n_rows - r0 - FP_ROWS >= FP_ROWS ? FP_ROWS : (int)(n_rows - r0 - FP_ROWS);
                    prefetch_rows(wr + FP_ROWS * wrb, wrb, nn, 0, (k < FKC ? k : FKC) * es);
                }
            }
            for (uint64_t t = 0; t < n_tok; t += FPT) {
                const int T = n_tok - t >= FPT ? FPT : (int)(n_tok - t);
                fpanel_any(T, pf, kc, (const float *)((const char *)x + t * xrb) + c0, xrb, y + t * ldy + r0, ldy, nr,
                           c0 > 0);
            }
        }
    }
}

/* Tokens in blocks whose f32 activations fit comfortably in L2, rows in FR tiles inside,
 * so each weight tile streams from memory once per token block and stays in L1 across it. */
INLINE void gemm_float_tiles(int wt, const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb,
                             uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    uint64_t tb = (512u * 1024u) / (k * 4 + 64);
    tb = tb < FT ? FT : tb - tb % FT;
    for (uint64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const uint64_t te = t0 + tb < n_tok ? t0 + tb : n_tok;
        for (uint64_t r = 0; r < n_rows; r += FR) {
            const int R = n_rows - r >= FR ? FR : (int)(n_rows - r);
            const char *wr = (const char *)w + r * wrb;
            for (uint64_t t = t0; t < te; t += FT) {
                const int T = te - t >= FT ? FT : (int)(te - t);
                ftile_any(wt, R, T, wr, wrb, (const char *)x + t * xrb, xrb, y + t * ldy + r, ldy, k);
            }
        }
    }
}

/* The level's float kernel: the tiles below FPANEL_MIN_TOK tokens, the panel from there */
INLINE void gemm_float(int wt, const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb,
                       uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    if (n_tok >= FPANEL_MIN_TOK && wrb <= INT32_MAX / 16) /* the packer gathers with int32 offsets */
        gemm_fpanel(wt, w, wrb, n_rows, x, xrb, n_tok, y, ldy, k);
    else
        gemm_float_tiles(wt, w, wrb, n_rows, x, xrb, n_tok, y, ldy, k);
}

#define FLOAT_GEMMS(NAME, WT)                                                                                    \
    static void gemm_##NAME(const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb, uint64_t n_tok, \
                            float *y, size_t ldy, uint64_t k) {                                                  \
        gemm_float(WT, w, wrb, n_rows, x, xrb, n_tok, y, ldy, k);                                                \
    }                                                                                                            \
    static void gemm_##NAME##_tiles(const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb,       \
                                    uint64_t n_tok, float *y, size_t ldy, uint64_t k) {                         \
        gemm_float_tiles(WT, w, wrb, n_rows, x, xrb, n_tok, y, ldy, k);                                          \
    }
FLOAT_GEMMS(f32, W_F32)
FLOAT_GEMMS(f16, W_F16)
FLOAT_GEMMS(bf16, W_BF16)
#undef FLOAT_GEMMS

/* ---- quantized weights, dot path: FQ rows x 1 token ----------------------------------------- */

enum { FQ = 4 };

/* Decode streams the weights from memory: while a tile's rows are computed, the same bytes
 * of the next tile's rows (R rows further) are fetched into L1 (measured: Q4_K_M decode
 * 13.4 -> 18.7 tok/s on one thread). */
INLINE void prefetch_next(const uint8_t *p, size_t ahead, int nbytes) {
    for (int o = 0; o < nbytes; o += 64) _mm_prefetch((const char *)p + ahead + o, _MM_HINT_T0);
}

/* two 32-byte pieces as one vector */
INLINE __m512i ld2x32(const void *p0, const void *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p0)),
                              _mm256_loadu_si256((const __m256i *)p1), 1);
}
/* lanes 0-7 a, 8-15 b */
INLINE __m512 split2(float a, float b) {
    return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

INLINE void store_dots(int R, __m512 *acc, const float *corr, float *y) {
    if (R == 4) {
        __m128 s = hsum4(acc[0], acc[1 % R], acc[2 % R], acc[3 % R]);
        _mm_storeu_ps(y, _mm_sub_ps(s, _mm_loadu_ps(corr)));
    } else {
        UNROLL for (int r = 0; r < R; r++) y[r] = _mm512_reduce_add_ps(acc[r]) - corr[r];
    }
}

/* [dw(p0) x 8, dw(p1) x 8] from two f16 scales */
INLINE __m512 f16_pair(const uint8_t *p0, const uint8_t *p1) {
    const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128((int)(rd_u16(p0) | ((uint32_t)rd_u16(p1) << 16))));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                 _mm512_castps128_ps512(d));
}

/* Q8_0 / Q4_0 x Q8_0, two 32-blocks per vector. VNNI: the weights made unsigned (Q8_0 + 128,
 * Q4_0 nibbles) and the offset taken out by starting each int dot at -offset * sum(xq), once
 * per token for all rows. Without VNNI Q8_0 uses the sign trick (|w| times x with w's sign,
 * no maddubs saturation); Q4_0 nibbles are small enough either way. */
INLINE __m512i q4_0_pair(const uint8_t *p0, const uint8_t *p1) {
    const __m128i a = _mm_loadu_si128((const __m128i *)(p0 + 2)), c = _mm_loadu_si128((const __m128i *)(p1 + 2));
    __m512i v = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(a), 0xff00, c); /* a a c c */
    v = _mm512_mask_srli_epi16(v, 0xff00ff00u, v, 4);                              /* lo hi lo hi */
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0f));
}

/* T (1 or 2) tokens at once: each weight pair is loaded and unpacked once for both (decode's
 * two activation planes, or two sequences), x at xb0 + t * xrb, y at y + t * ldy. */
INLINE void dot_q32(int q4, int R, int T, const uint8_t *w, size_t wrb, const char *xb0, size_t xrb, uint64_t nb,
                    float *y, size_t ldy) {
    __m512 acc[2][FQ];
    const float corr[FQ] = {0};
    UNROLL for (int t = 0; t < T; t++) UNROLL for (int r = 0; r < R; r++) acc[t][r] = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
    const int bb = q4 ? 18 : 34;
    const int vnni_off = KIPP_AVX512_VNNI && !q4;
    for (uint64_t b = 0; b < nb; b += 2) {
        const int two = b + 2 <= nb;
        __m512i xq[2], init[2];
        __m512 dx[2];
        UNROLL for (int t = 0; t < T; t++) {
            const kipp_act_q8_0 *xt = (const kipp_act_q8_0 *)(xb0 + t * xrb);
            const kipp_act_q8_0 *x1 = two ? xt + b + 1 : xt + b;
            xq[t] = two ? ld2x32(xt[b].qs, x1->qs) : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)xt[b].qs));
            dx[t] = split2(xt[b].d, two ? x1->d : 0.0f);
            init[t] = q4 || vnni_off ? _mm512_sub_epi32(zero, dpbusd(zero, _mm512_set1_epi8(q4 ? 8 : (char)0x80), xq[t]))
                                     : zero;
        }
        UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *p = w + r * wrb + b * bb, *p1 = two ? p + bb : p;
            prefetch_next(p, (size_t)R * wrb, 2 * bb);
            const __m512 wd = f16_pair(p, p1);
            if (q4) {
                const __m512i wq = q4_0_pair(p, p1);
                UNROLL for (int t = 0; t < T; t++)
                    acc[t][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dpbusd(init[t], wq, xq[t])), _mm512_mul_ps(wd, dx[t]), acc[t][r]);
            } else {
                const __m512i wq = two ? ld2x32(p + 2, p1 + 2) : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 2)));
                if (vnni_off) {
                    const __m512i wu = _mm512_xor_si512(wq, _mm512_set1_epi8((char)0x80));
                    UNROLL for (int t = 0; t < T; t++)
                        acc[t][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dpbusd(init[t], wu, xq[t])), _mm512_mul_ps(wd, dx[t]), acc[t][r]);
                } else {
                    const __mmask64 neg = _mm512_movepi8_mask(wq);
                    const __m512i wa = _mm512_abs_epi8(wq);
                    UNROLL for (int t = 0; t < T; t++) {
                        const __m512i sx = _mm512_mask_sub_epi8(xq[t], neg, zero, xq[t]);
                        acc[t][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dpbusd(zero, wa, sx)), _mm512_mul_ps(wd, dx[t]), acc[t][r]);
                    }
                }
            }
        }
    }
    UNROLL for (int t = 0; t < T; t++) store_dots(R, acc[t], corr, y + t * ldy);
}

/* Q4_K's 12-byte scale packing (at sc, 16 bytes readable) into 8 scales (bytes 0-7) and 8
 * mins (bytes 8-15): scale j<4 = b[j]&63, j>=4 = (b[j+4]&15) | (b[j-4]>>6)<<4; min j<4 =
 * b[j+4]&63, j>=4 = (b[j+4]>>4) | (b[j]>>6)<<4. */
INLINE __m128i q4_k_scales_v(const uint8_t *sc) {
    const __m128i v = _mm_loadu_si128((const __m128i *)sc);
    const __m128i a = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i b = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0, 4, 5, 6, 7));
    __m128i lo = _mm_mask_srli_epi16(a, 0xc0, a, 4);
    lo = _mm_and_si128(lo, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 2), _mm_setr_epi8(0, 0, 0, 0, 0x30, 0x30, 0x30, 0x30, 0, 0, 0,
                                                                         0, 0x30, 0x30, 0x30, 0x30));
    return _mm_or_si128(lo, hi);
}

/* ggml's scalar decode (the panel packer's) */
INLINE void q4_k_scales(const uint8_t *sc, uint32_t u[4]) {
    const uint32_t m1 = 0x3f3f3f3fu, m2 = 0x0f0f0f0fu, m3 = 0x03030303u;
    memcpy(u, sc, 12);
    u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
    const uint32_t a = u[1] & m1;
    u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
    u[2] = a;
    u[0] &= m1;
}

/* Q4_K x Q8_K: per 64 elements (one 32-byte qs group: low nibbles sub-block 2g, high 2g+1)
 * one int dot, then f32 FMA with d*dx*scale per half. Mins: the scale vector's upper half
 * holds dmin*dx*min_j, multiplied into -(bsum pair j) in the accumulator's upper lanes. */
INLINE void dot_q4_k(int R, int T, const uint8_t *w, size_t wrb, const char *xb0, size_t xrb, uint64_t nb, float *y,
                     size_t ldy) {
    __m512 acc[2][FQ];
    const float corr[FQ] = {0};
    UNROLL for (int t = 0; t < T; t++) UNROLL for (int r = 0; r < R; r++) acc[t][r] = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512(), m4 = _mm512_set1_epi8(0x0f);
    const __m512i half_idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for (uint64_t b = 0; b < nb; b++) {
        const kipp_act_q8_k *xk[2];
        __m512 nbs[2], dxv[2];
        UNROLL for (int t = 0; t < T; t++) {
            xk[t] = (const kipp_act_q8_k *)(xb0 + t * xrb) + b;
            /* lanes 8-15: -(bsums[2j] + bsums[2j+1]); lanes 0-7 zero */
            const __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xk[t]->bsums), _mm256_set1_epi16(-1));
            nbs[t] = _mm512_castsi512_ps(_mm512_inserti64x4(zero, _mm256_castps_si256(_mm256_cvtepi32_ps(bs)), 1));
            dxv[t] = _mm512_set1_ps(xk[t]->d);
        }
        UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *p = w + r * wrb + b * 144;
            prefetch_next(p, (size_t)R * wrb, 144);
            uint32_t dh;
            memcpy(&dh, p, 4);
            /* token-independent: lanes 0-7 d * scale_j, lanes 8-15 dmin * min_j */
            const __m512 sm = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q4_k_scales_v(p + 4))),
                                            _mm512_permutexvar_ps(half_idx, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)dh)))));
            __m512 bacc[2];
            UNROLL for (int t = 0; t < T; t++) bacc[t] = _mm512_mul_ps(sm, nbs[t]);
            UNROLL for (int g = 0; g < 4; g++) {
                __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p + 16 + 32 * g)));
                q = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xffff0000u, q, 4), m4);
                const __m512i idx = _mm512_setr_epi32(2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g, 2 * g + 1,
                                                      2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1, 2 * g + 1,
                                                      2 * g + 1);
                const __m512 sg = _mm512_permutexvar_ps(idx, sm);
                UNROLL for (int t = 0; t < T; t++) {
                    const __m512i dp = dpbusd(zero, q, _mm512_loadu_si512(xk[t]->qs + 64 * g));
                    bacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), sg, bacc[t]);
                }
            }
            UNROLL for (int t = 0; t < T; t++) acc[t][r] = _mm512_fmadd_ps(bacc[t], dxv[t], acc[t][r]);
        }
    }
    UNROLL for (int t = 0; t < T; t++) store_dots(R, acc[t], corr, y + t * ldy);
}

/* Q6_K's 6-bit values (0..63) of one 128-element half as two vectors: elements 0-63, 64-127 */
INLINE void q6_k_half(const uint8_t *ql, const uint8_t *qh, __m512i *lo, __m512i *hi) {
    const __m512i l = _mm512_loadu_si512(ql);
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    const __m512i hl = _mm512_and_si512(_mm512_sllv_epi64(h, _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4)), m30);
    const __m512i hh = _mm512_and_si512(_mm512_srlv_epi64(h, _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0)), m30);
    *lo = _mm512_or_si512(_mm512_and_si512(l, m4), hl);
    *hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), hh);
}

/* Q6_K x Q8_K: values unsigned 0..63, 4 sub-blocks of 16 per vector; the -32 through
 * bsums: the 16 sub-block scales times -32 * bsums, accumulated lane-wise. */
INLINE void dot_q6_k(int R, int T, const uint8_t *w, size_t wrb, const char *xb0, size_t xrb, uint64_t nb, float *y,
                     size_t ldy) {
    __m512 acc[2][FQ];
    const float corr[FQ] = {0};
    UNROLL for (int t = 0; t < T; t++) UNROLL for (int r = 0; r < R; r++) acc[t][r] = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
    for (uint64_t b = 0; b < nb; b++) {
        const kipp_act_q8_k *xk[2];
        __m512 nbs[2], dxv[2];
        UNROLL for (int t = 0; t < T; t++) {
            xk[t] = (const kipp_act_q8_k *)(xb0 + t * xrb) + b;
            nbs[t] = _mm512_cvtepi32_ps(_mm512_mullo_epi32(_mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)xk[t]->bsums)),
                                                           _mm512_set1_epi32(-32)));
            dxv[t] = _mm512_set1_ps(xk[t]->d);
        }
        UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *p = w + r * wrb + b * 210;
            prefetch_next(p, (size_t)R * wrb, 210);
            /* token-independent: d * scale_j of the 16 sub-blocks */
            const __m512 sc = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p + 192)))),
                                            _mm512_set1_ps(rd_f16(p + 208)));
            __m512 bacc[2];
            UNROLL for (int t = 0; t < T; t++) bacc[t] = _mm512_mul_ps(sc, nbs[t]);
            UNROLL for (int h = 0; h < 2; h++) {
                __m512i q[2];
                q6_k_half(p + 64 * h, p + 128 + 32 * h, &q[0], &q[1]);
                UNROLL for (int c = 0; c < 2; c++) {
                    const int s0 = 8 * h + 4 * c;
                    const __m512i idx = _mm512_set_epi32(s0 + 3, s0 + 3, s0 + 3, s0 + 3, s0 + 2, s0 + 2, s0 + 2, s0 + 2,
                                                         s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0, s0, s0, s0);
                    const __m512 sg = _mm512_permutexvar_ps(idx, sc);
                    UNROLL for (int t = 0; t < T; t++) {
                        const __m512i dp = dpbusd(zero, q[c], _mm512_loadu_si512(xk[t]->qs + 128 * h + 64 * c));
                        bacc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), sg, bacc[t]);
                    }
                }
            }
            UNROLL for (int t = 0; t < T; t++) acc[t][r] = _mm512_fmadd_ps(bacc[t], dxv[t], acc[t][r]);
        }
    }
    UNROLL for (int t = 0; t < T; t++) store_dots(R, acc[t], corr, y + t * ldy);
}

enum { Q_Q8_0, Q_Q4_0, Q_Q4_K, Q_Q6_K };

INLINE void qdot(int qt, int R, int T, const uint8_t *w, size_t wrb, const char *x, size_t xrb, uint64_t k, float *y,
                 size_t ldy) {
    switch (qt) {
    case Q_Q8_0: dot_q32(0, R, T, w, wrb, x, xrb, k / 32, y, ldy); break;
    case Q_Q4_0: dot_q32(1, R, T, w, wrb, x, xrb, k / 32, y, ldy); break;
    case Q_Q4_K: dot_q4_k(R, T, w, wrb, x, xrb, k / 256, y, ldy); break;
    default: dot_q6_k(R, T, w, wrb, x, xrb, k / 256, y, ldy); break;
    }
}

/* FQ rows at a time against the tokens two by two (each weight block is unpacked once per
 * pair: decode's two activation planes share it); the rows stay in L1 across the pairs. */
INLINE void gemm_qdot(int qt, const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb,
                      uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    for (uint64_t r = 0; r < n_rows; r += FQ) {
        const int full = r + FQ <= n_rows;
        for (uint64_t t = 0; t < n_tok; t += 2) {
            const char *xt = (const char *)x + t * xrb;
            const int T = t + 2 <= n_tok ? 2 : 1;
            if (full && T == 2) qdot(qt, FQ, 2, (const uint8_t *)w + r * wrb, wrb, xt, xrb, k, y + t * ldy + r, ldy);
            else if (full) qdot(qt, FQ, 1, (const uint8_t *)w + r * wrb, wrb, xt, xrb, k, y + t * ldy + r, ldy);
            else
                for (uint64_t rr = r; rr < n_rows; rr++) {
                    if (T == 2) qdot(qt, 1, 2, (const uint8_t *)w + rr * wrb, wrb, xt, xrb, k, y + t * ldy + rr, ldy);
                    else qdot(qt, 1, 1, (const uint8_t *)w + rr * wrb, wrb, xt, xrb, k, y + t * ldy + rr, ldy);
                }
        }
    }
}

/* ---- quantized weights, panel path: 32 rows x PT tokens -------------------------------
 * A panel holds 32 weight rows x KC elements as two groups of 16 rows: for every 4
 * consecutive k, one 64-byte vector per group with the 4 values of each of the 16 rows
 * (unsigned: Q8_0 + 128, Q4_0 / Q4_K nibbles, Q6_K 6-bit values), and per scale sub-block
 * (SB = 32, Q6_K 16) the f32 scale of each row (Q4_K also its min). Per token and sub-block
 * the x side is {int32 start of the int dot (minus the weight offset times sum xq), f32 dx,
 * f32 -dx * sum xq (Q4_K mins)}. Then per sub-block and token:
 *   ai = start + sum_4k dpbusd(panel, broadcast(4 xq)),  acc += (f32(ai) * dx) * scale
 *   (Q4_K: acc += min * (-dx * sum xq)). */
enum { PANEL_ROWS = 32, PT = 6, KC_MAX = 1024 };

/* Token count from which the panel beats the dot path (measured, k = 1024). */
#if KIPP_AVX512_VNNI
INLINE uint64_t panel_min_tok(int qt) { return qt == Q_Q6_K ? 8 : 8; }
#else
/* Without VNNI a panel dot is maddubs + madd + add (exact: panel values <= 63), so the panel
 * pays off later; Q8_0's +128 panel values could saturate maddubs: it keeps the dot path. */
INLINE uint64_t panel_min_tok(int qt) { return qt == Q_Q8_0 ? UINT64_MAX : 4; }
#endif

typedef struct {
    int32_t init;
    float mul, mneg;
} xside;

typedef struct {
    uint8_t q[KC_MAX * PANEL_ROWS] __attribute__((aligned(64)));
    float sc[KC_MAX / 16 * PANEL_ROWS] __attribute__((aligned(64)));
    float mn[KC_MAX / 32 * PANEL_ROWS] __attribute__((aligned(64)));
} panel;

INLINE int sub_block(int qt) { return qt == Q_Q6_K ? 16 : 32; }

/* Packs rows [0, nr) (nr <= 16; the rest zero) of group g, elements [c0, c0 + kc). */
static void pack_group(int qt, const uint8_t *w, size_t wrb, int nr, uint64_t c0, uint64_t kc, panel *P, int g) {
    const __mmask16 m = mask16((uint64_t)nr);
    const __m512i vidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32((int)wrb));
    const __m512i zero = _mm512_setzero_si512(), m4 = _mm512_set1_epi8(0x0f);
    uint8_t *q = P->q + 64 * g;
#define QV(kg) ((__m512i *)(q + (size_t)(kg) * 128))
#define GATHER(ptr) _mm512_mask_i32gather_epi32(zero, m, vidx, (const void *)(ptr), 1)
    if (qt == Q_Q8_0 || qt == Q_Q4_0) {
        const int bb = qt == Q_Q8_0 ? 34 : 18;
        for (uint64_t jb = 0; jb < kc / 32; jb++) {
            const uint8_t *base = w + (c0 / 32 + jb) * bb;
            const __m512i dh = GATHER(base);
            _mm512_store_ps(P->sc + jb * 32 + 16 * g, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dh)));
            if (qt == Q_Q8_0) {
                const __m512i off = _mm512_set1_epi8((char)0x80);
                for (int s = 0; s < 8; s++) _mm512_store_si512(QV(jb * 8 + s), _mm512_xor_si512(GATHER(base + 2 + 4 * s), off));
            } else {
                for (int s = 0; s < 4; s++) {
                    const __m512i v = GATHER(base + 2 + 4 * s);
                    _mm512_store_si512(QV(jb * 8 + s), _mm512_and_si512(v, m4));
                    _mm512_store_si512(QV(jb * 8 + 4 + s), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                }
            }
        }
    } else if (qt == Q_Q4_K) {
        for (uint64_t jb = 0; jb < kc / 256; jb++) {
            const uint8_t *base = w + (c0 / 256 + jb) * 144;
            for (int r = 0; r < 16; r++) {
                uint32_t u[4] = {0, 0, 0, 0};
                float d = 0.0f, dm = 0.0f;
                if (r < nr) {
                    const uint8_t *p = base + r * wrb;
                    q4_k_scales(p + 4, u);
                    d = rd_f16(p);
                    dm = rd_f16(p + 2);
                }
                const uint8_t *sc8 = (const uint8_t *)u;
                for (int j = 0; j < 8; j++) {
                    P->sc[(jb * 8 + j) * 32 + 16 * g + r] = d * (float)sc8[j];
                    P->mn[(jb * 8 + j) * 32 + 16 * g + r] = dm * (float)sc8[8 + j];
                }
            }
            for (int i = 0; i < 32; i++) {
                const __m512i v = GATHER(base + 16 + 4 * i);
                const int g4 = i / 8, qd = i % 8;
                _mm512_store_si512(QV(jb * 64 + (2 * g4) * 8 + qd), _mm512_and_si512(v, m4));
                _mm512_store_si512(QV(jb * 64 + (2 * g4 + 1) * 8 + qd), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
            }
        }
    } else {
        const __m512i m3 = _mm512_set1_epi8(0x03);
        for (uint64_t jb = 0; jb < kc / 256; jb++) {
            const uint8_t *base = w + (c0 / 256 + jb) * 210;
            for (int r = 0; r < 16; r++) {
                const uint8_t *p = base + r * wrb;
                const float d = r < nr ? rd_f16(p + 208) : 0.0f;
                for (int j = 0; j < 16; j++)
                    P->sc[(jb * 16 + j) * 32 + 16 * g + r] = r < nr ? d * (float)(int8_t)p[192 + j] : 0.0f;
            }
            for (int h = 0; h < 2; h++) {
                for (int qd = 0; qd < 8; qd++) {
                    const __m512i l0 = GATHER(base + 64 * h + 4 * qd), l1 = GATHER(base + 64 * h + 32 + 4 * qd);
                    const __m512i hb = GATHER(base + 128 + 32 * h + 4 * qd);
                    for (int seg = 0; seg < 4; seg++) {
                        const __m512i l = (seg & 1) ? l1 : l0;
                        const __m512i nib = seg >= 2 ? _mm512_and_si512(_mm512_srli_epi16(l, 4), m4) : _mm512_and_si512(l, m4);
                        const __m512i hi = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hb, 2 * seg), m3), 4);
                        _mm512_store_si512(QV(jb * 64 + h * 32 + seg * 8 + qd), _mm512_or_si512(nib, hi));
                    }
                }
            }
        }
    }
#undef QV
#undef GATHER
}

/* x side of every token and sub-block (see above) */
static void build_xside(int qt, const void *x, size_t xrb, uint64_t n_tok, uint64_t k, xside *xs) {
    const uint64_t nsb = k / (uint64_t)sub_block(qt);
    for (uint64_t t = 0; t < n_tok; t++) {
        const char *xt = (const char *)x + t * xrb;
        xside *o = xs + t * nsb;
        if (qt == Q_Q8_0 || qt == Q_Q4_0) {
            const kipp_act_q8_0 *b = (const kipp_act_q8_0 *)xt;
            const int off = qt == Q_Q8_0 ? 128 : 8;
            for (uint64_t j = 0; j < nsb; j++) {
                const __m512i v = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)b[j].qs));
                const int sum = _mm512_reduce_add_epi32(_mm512_madd_epi16(v, _mm512_set1_epi16(1)));
                o[j] = (xside){-off * sum, b[j].d, 0.0f};
            }
        } else {
            const kipp_act_q8_k *b = (const kipp_act_q8_k *)xt;
            for (uint64_t jb = 0; jb < k / 256; jb++) {
                if (qt == Q_Q4_K)
                    for (int j = 0; j < 8; j++)
                        o[jb * 8 + j] = (xside){0, b[jb].d, -b[jb].d * (float)(b[jb].bsums[2 * j] + b[jb].bsums[2 * j + 1])};
                else
                    for (int j = 0; j < 16; j++) o[jb * 16 + j] = (xside){-32 * b[jb].bsums[j], b[jb].d, 0.0f};
            }
        }
    }
}

/* address of element e's activation byte in token row xt */
INLINE const int8_t *xq_at(int qt, const char *xt, uint64_t e) {
    if (qt == Q_Q8_0 || qt == Q_Q4_0) return ((const kipp_act_q8_0 *)xt)[e / 32].qs + e % 32;
    return ((const kipp_act_q8_k *)xt)[e / 256].qs + e % 256;
}

INLINE int32_t ld_i32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* One panel chunk against T tokens: y[t][0..nr) = (add ? y : 0) + panel . x_t */
INLINE void panel_tile(int qt, int T, const panel *P, uint64_t c0, uint64_t kc, const char *x, size_t xrb,
                       const xside *xs, uint64_t nsb, float *y, size_t ldy, int nr, int add) {
    const int SB = sub_block(qt);
    const int G = nr > 16 ? 2 : 1;
    __m512 acc[2][PT];
    UNROLL for (int g = 0; g < 2; g++) UNROLL for (int t = 0; t < T; t++) acc[g][t] = _mm512_setzero_ps();
    const uint64_t sb0 = c0 / (uint64_t)SB;
    for (uint64_t j = 0; j < kc / (uint64_t)SB; j++) {
        const int8_t *xp[PT];
        __m512i ai[2][PT];
        UNROLL for (int t = 0; t < T; t++) {
            xp[t] = xq_at(qt, x + t * xrb, c0 + j * SB);
            const __m512i init = _mm512_set1_epi32(xs[t * nsb + sb0 + j].init);
            ai[0][t] = init;
            ai[1][t] = init;
        }
        const uint8_t *qv = P->q + j * SB * 32;
        if (G == 2) {
            UNROLL for (int s = 0; s < SB / 4; s++) {
                const __m512i w0 = _mm512_load_si512(qv + s * 128), w1 = _mm512_load_si512(qv + s * 128 + 64);
                UNROLL for (int t = 0; t < T; t++) {
                    const __m512i xb = _mm512_set1_epi32(ld_i32(xp[t] + 4 * s));
                    ai[0][t] = dpbusd(ai[0][t], w0, xb);
                    ai[1][t] = dpbusd(ai[1][t], w1, xb);
                }
            }
        } else {
            UNROLL for (int s = 0; s < SB / 4; s++) {
                const __m512i w0 = _mm512_load_si512(qv + s * 128);
                UNROLL for (int t = 0; t < T; t++)
                    ai[0][t] = dpbusd(ai[0][t], w0, _mm512_set1_epi32(ld_i32(xp[t] + 4 * s)));
            }
        }
        UNROLL for (int g = 0; g < 2; g++) {
            if (g >= G) break;
            const __m512 sc = _mm512_load_ps(P->sc + j * 32 + 16 * g);
            UNROLL for (int t = 0; t < T; t++) {
                const xside *xj = xs + t * nsb + sb0 + j;
                const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(ai[g][t]), _mm512_set1_ps(xj->mul));
                acc[g][t] = _mm512_fmadd_ps(f, sc, acc[g][t]);
                if (qt == Q_Q4_K)
                    acc[g][t] = _mm512_fmadd_ps(_mm512_load_ps(P->mn + j * 32 + 16 * g), _mm512_set1_ps(xj->mneg), acc[g][t]);
            }
        }
    }
    UNROLL for (int g = 0; g < 2; g++) {
        if (g >= G) break;
        const __mmask16 m = mask16((uint64_t)(nr - 16 * g));
        UNROLL for (int t = 0; t < T; t++) {
            float *yp = y + t * ldy + 16 * g;
            __m512 v = acc[g][t];
            if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, yp));
            _mm512_mask_storeu_ps(yp, m, v);
        }
    }
}

#define PANEL_CASE(T) \
    case T: panel_tile(qt, T, P, c0, kc, x, xrb, xs, nsb, y, ldy, nr, add); break;

INLINE void panel_any(int qt, int T, const panel *P, uint64_t c0, uint64_t kc, const char *x, size_t xrb,
                      const xside *xs, uint64_t nsb, float *y, size_t ldy, int nr, int add) {
    switch (T) {
        PANEL_CASE(1) PANEL_CASE(2) PANEL_CASE(3) PANEL_CASE(4) PANEL_CASE(5) PANEL_CASE(6)
    default: break;
    }
}

INLINE void gemm_panel(int qt, const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb,
                       uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    const uint64_t nsb = k / (uint64_t)sub_block(qt);
    xside *xs = malloc(n_tok * nsb * sizeof *xs);
    panel *P = xs ? aligned_alloc(64, sizeof *P) : NULL;
    if (!P) {
        free(xs);
        gemm_qdot(qt, w, wrb, n_rows, x, xrb, n_tok, y, ldy, k);
        return;
    }
    build_xside(qt, x, xrb, n_tok, k, xs);
    const uint64_t bb = qt == Q_Q8_0 ? 34 : qt == Q_Q4_0 ? 18 : qt == Q_Q4_K ? 144 : 210;
    const uint64_t be = qt == Q_Q8_0 || qt == Q_Q4_0 ? 32 : 256;
    for (uint64_t r0 = 0; r0 < n_rows; r0 += PANEL_ROWS) {
        const int nr = n_rows - r0 >= PANEL_ROWS ? PANEL_ROWS : (int)(n_rows - r0);
        const uint8_t *wr = (const uint8_t *)w + r0 * wrb;
        for (uint64_t c0 = 0; c0 < k; c0 += KC_MAX) {
            const uint64_t kc = k - c0 < KC_MAX ? k - c0 : KC_MAX;
            pack_group(qt, wr, wrb, nr < 16 ? nr : 16, c0, kc, P, 0);
            if (nr > 16) pack_group(qt, wr + 16 * wrb, wrb, nr - 16, c0, kc, P, 1);
            if (n_tok >= 2 * PT) { /* the next chunk: this one's compute hides its fetch */
                if (c0 + KC_MAX < k)
                    prefetch_rows((const char *)wr, wrb, nr, (c0 + KC_MAX) / be * bb,
                                  ((k - c0 - KC_MAX < KC_MAX ? k - c0 - KC_MAX : KC_MAX)) / be * bb);
                else if (r0 + PANEL_ROWS < n_rows) {
                    const int nn = n_rows - r0 - PANEL_ROWS >= PANEL_ROWS ? PANEL_ROWS : (int)(n_rows - r0 - PANEL_ROWS);
                    prefetch_rows((const char *)wr + PANEL_ROWS * wrb, wrb, nn, 0, (k < KC_MAX ? k : KC_MAX) / be * bb);
                }
            }
            for (uint64_t t = 0; t < n_tok; t += PT) {
                const int T = n_tok - t >= PT ? PT : (int)(n_tok - t);
                panel_any(qt, T, P, c0, kc, (const char *)x + t * xrb, xrb, xs + t * nsb, nsb, y + t * ldy + r0, ldy,
                          nr, c0 > 0);
            }
        }
    }
    free(P);
    free(xs);
}

#define GEMM_Q(name, qt)                                                                                    \
    static void name(const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb, uint64_t n_tok, \
                     float *y, size_t ldy, uint64_t k) {                                                    \
        if (n_tok >= panel_min_tok(qt) && wrb <= INT32_MAX / 16) /* int32 gather offsets */                \
            gemm_panel(qt, w, wrb, n_rows, x, xrb, n_tok, y, ldy, k);                                       \
        else                                                                                                \
            gemm_qdot(qt, w, wrb, n_rows, x, xrb, n_tok, y, ldy, k);                                        \
    }
GEMM_Q(gemm_q8_0, Q_Q8_0)
GEMM_Q(gemm_q4_0, Q_Q4_0)
GEMM_Q(gemm_q4_k, Q_Q4_K)
GEMM_Q(gemm_q6_k, Q_Q6_K)

/* ---- elementwise: exp-based stages ----------------------------------------------------------
 * exp(x) = 2^n * p(r), n = round(x / ln 2), r = x - n ln 2 (two-part ln 2), |r| <= ln2 / 2,
 * p the degree-6 Taylor polynomial (relative error < 2e-7); inputs clamped to [-87.3, 88.7]
 * so 2^n stays a normal float (smaller gives a tiny positive, not 0: harmless in a softmax). */
INLINE __m512 exp512(__m512 x) {
    /* constants first: max/min return their second operand when either is NaN, so a NaN
     * x stays NaN (and the decode's NaN check sees it) instead of becoming a bound */
    x = _mm512_min_ps(_mm512_set1_ps(88.7f), _mm512_max_ps(_mm512_set1_ps(-87.3f), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

static void softmax_f32(float *s, uint64_t n, float scale) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    const __m512 sc = _mm512_set1_ps(scale);
    for (uint64_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + i), sc);
        mx = _mm512_mask_max_ps(mx, m, mx, v);
    }
    const __m512 vmax = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (uint64_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        const __m512 e = exp512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, s + i), sc, vmax));
        sum = _mm512_mask_add_ps(sum, m, sum, e);
        _mm512_mask_storeu_ps(s + i, m, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (uint64_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        _mm512_mask_storeu_ps(s + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + i), inv));
    }
}

static void swiglu_f32(float *g, const float *u, uint64_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (uint64_t i = 0; i < n; i += 16) {
        const __mmask16 m = mask16(n - i);
        const __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 den = _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), gv)));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_div_ps(gv, den), _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* ---- attention p·V ------------------------------------------------------------------------ */

/* Two heads x up to 128 dims of output stay in 16 registers while the V rows stream by. */
/* 16 (masked) values of a KV row of element type ty (0 f32, 1 f16, 2 bf16) as f32 */
INLINE __m512 load_kv16(int ty, __mmask16 m, const void *v, size_t i) {
    if (ty == 0) return _mm512_maskz_loadu_ps(m, (const float *)v + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)v + i);
    if (ty == 1) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* p·V over rows of element type ty, vs elements apart (kernels.h: pv_f32 / pv_f16 / pv_bf16) */
INLINE void pv_any(int ty, float *o, const float *p, size_t ps, uint32_t G, const void *v0, size_t vs,
                   uint32_t n, uint32_t d) {
    const size_t esz = ty == 0 ? 4 : 2;
    for (uint32_t g0 = 0; g0 < G; g0 += 2) {
        const int gg = G - g0 >= 2 ? 2 : 1;
        for (uint32_t d0 = 0; d0 < d; d0 += 128) {
            const uint32_t dd = d - d0 < 128 ? d - d0 : 128;
            const int nv = (int)((dd + 15) / 16);
            __mmask16 m[8];
            for (int j = 0; j < 8; j++) m[j] = j < nv ? mask16(dd - 16u * (uint32_t)j) : 0;
            __m512 a0[8], a1[8];
            float *o0 = o + (size_t)g0 * d + d0, *o1 = o0 + d;
            UNROLL for (int j = 0; j < 8; j++) {
                a0[j] = _mm512_maskz_loadu_ps(m[j], o0 + 16 * j);
                a1[j] = gg == 2 ? _mm512_maskz_loadu_ps(m[j], o1 + 16 * j) : _mm512_setzero_ps();
            }
            const float *p0 = p + (size_t)g0 * ps, *p1 = p0 + ps;
            for (uint32_t t = 0; t < n; t++) {
                const void *v = (const char *)v0 + ((size_t)t * vs + d0) * esz;
                const __m512 b0 = _mm512_set1_ps(p0[t]), b1 = _mm512_set1_ps(gg == 2 ? p1[t] : 0.0f);
                UNROLL for (int j = 0; j < 8; j++) {
                    const __m512 vv = load_kv16(ty, m[j], v, 16 * (size_t)j);
                    a0[j] = _mm512_fmadd_ps(b0, vv, a0[j]);
                    a1[j] = _mm512_fmadd_ps(b1, vv, a1[j]);
                }
            }
            UNROLL for (int j = 0; j < 8; j++) {
                _mm512_mask_storeu_ps(o0 + 16 * j, m[j], a0[j]);
                if (gg == 2) _mm512_mask_storeu_ps(o1 + 16 * j, m[j], a1[j]);
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

/* p·V for many query rows over V rows by pointer (kernels.h: pv_rows_*): the panel path of
 * the float gemm with V^T as the weights, packed straight from the rows (32 of a row's
 * values are one panel line: no gathers, no transposed copy). ty as load_kv16. */
static void pv_rows_any(int ty, float *o, size_t ldo, const float *p, size_t ps, uint32_t nq,
                        const void *const *rows, uint32_t n, uint32_t d) {
    static _Thread_local float pf[FKC * FP_ROWS] __attribute__((aligned(64)));
    const size_t es = ty == 0 ? 4 : 2;
    for (uint32_t r0 = 0; r0 < d; r0 += FP_ROWS) {
        const int nr = d - r0 >= FP_ROWS ? FP_ROWS : (int)(d - r0);
        const __mmask16 m0 = mask16((uint64_t)(nr < 16 ? nr : 16)), m1 = mask16((uint64_t)(nr > 16 ? nr - 16 : 0));
        for (uint32_t c0 = 0; c0 < n; c0 += FKC) {
            const uint32_t kc = n - c0 < FKC ? n - c0 : FKC;
            for (uint32_t kk = 0; kk < kc; kk++) {
                const char *v = (const char *)rows[c0 + kk] + (size_t)r0 * es;
                _mm512_store_ps(pf + (size_t)kk * FP_ROWS, load_kv16(ty, m0, v, 0));
                _mm512_store_ps(pf + (size_t)kk * FP_ROWS + 16, load_kv16(ty, m1, v, 16));
            }
            for (uint32_t t = 0; t < nq; t += FPT) {
                const int T = nq - t >= FPT ? FPT : (int)(nq - t);
                fpanel_any(T, pf, kc, p + (size_t)t * ps + c0, ps * sizeof(float), o + (size_t)t * ldo + r0, ldo, nr,
                           c0 > 0);
            }
        }
    }
}

static void pv_rows_f32(float *o, size_t ldo, const float *p, size_t ps, uint32_t nq, const void *const *rows,
                        uint32_t n, uint32_t d) {
    pv_rows_any(0, o, ldo, p, ps, nq, rows, n, d);
}
static void pv_rows_f16(float *o, size_t ldo, const float *p, size_t ps, uint32_t nq, const void *const *rows,
                        uint32_t n, uint32_t d) {
    pv_rows_any(1, o, ldo, p, ps, nq, rows, n, d);
}
static void pv_rows_bf16(float *o, size_t ldo, const float *p, size_t ps, uint32_t nq, const void *const *rows,
                         uint32_t n, uint32_t d) {
    pv_rows_any(2, o, ldo, p, ps, nq, rows, n, d);
}

/* KIPP_ACT_Q16 rows, bit-identical to kipp_cpu_quant_q16_scalar (it cost ~6% of a prompt
 * step on the Q8_0 0.6B shape as the scalar loop) */
static void quant_q16(const float *x, void *out, uint64_t k) {
    kipp_act_q16 *b = out;
    const __m512i lim = _mm512_set1_epi32(32767), nlim = _mm512_set1_epi32(-32767);
    for (uint64_t blk = 0; blk < k / 32; blk++, x += 32, b++) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const __m512 id = _mm512_set1_ps(amax > 0.0f ? 32767.0f / amax : 0.0f);
        /* MXCSR default rounding: nearest even, as the scalar round_ne */
        const __m512i q0 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id)), lim), nlim);
        const __m512i q1 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id)), lim), nlim);
        _mm256_storeu_si256((__m256i *)b->qs, _mm512_cvtepi32_epi16(q0));
        _mm256_storeu_si256((__m256i *)(b->qs + 16), _mm512_cvtepi32_epi16(q1));
        b->d = amax / 32767.0f;
        b->sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
}

/* ---- two-plane 8-bit activations (kernels.h: kipp_cpu_quant2_fn) -------------------------- */

/* 16 values x*id rounded to nearest even, clamped, split: returns hi (floor(X/128)) and lo */
INLINE void split16(__m512 x, __m512 id, __m512i *hi, __m512i *lo) {
    __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(x, id)); /* MXCSR default: nearest even */
    v = _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(-16256)), _mm512_set1_epi32(16256));
    *hi = _mm512_srai_epi32(v, 7);
    *lo = _mm512_and_si512(v, _mm512_set1_epi32(127));
}

INLINE void plane_scales(float amax, float *dh, float *dl, __m512 *id) {
    const float d = amax / (127.0f * 128.0f);
    *dh = 128.0f * d;
    *dl = d;
    *id = _mm512_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
}

static void quant2_q8_0(const float *x, void *out_hi, void *out_lo, uint64_t k) {
    kipp_act_q8_0 *bh = out_hi, *bl = out_lo;
    for (uint64_t b = 0; b < k / 32; b++) {
        const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        __m512 id;
        plane_scales(amax, &bh[b].d, &bl[b].d, &id);
        __m512i h0, l0, h1, l1;
        split16(x0, id, &h0, &l0);
        split16(x1, id, &h1, &l1);
        _mm_storeu_si128((__m128i *)bh[b].qs, _mm512_cvtepi32_epi8(h0));
        _mm_storeu_si128((__m128i *)(bh[b].qs + 16), _mm512_cvtepi32_epi8(h1));
        _mm_storeu_si128((__m128i *)bl[b].qs, _mm512_cvtepi32_epi8(l0));
        _mm_storeu_si128((__m128i *)(bl[b].qs + 16), _mm512_cvtepi32_epi8(l1));
        bh[b].s = bh[b].d * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(h0, h1));
        bl[b].s = bl[b].d * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(l0, l1));
    }
}

static void quant2_q8_k(const float *x, void *out_hi, void *out_lo, uint64_t k) {
    kipp_act_q8_k *bh = out_hi, *bl = out_lo;
    for (uint64_t b = 0; b < k / 256; b++) {
        const float *xb = x + 256 * b;
        __m512 m = _mm512_setzero_ps();
        for (int j = 0; j < 16; j++) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * j)));
        __m512 id;
        plane_scales(_mm512_reduce_max_ps(m), &bh[b].d, &bl[b].d, &id);
        for (int j = 0; j < 16; j++) {
            __m512i h, l;
            split16(_mm512_loadu_ps(xb + 16 * j), id, &h, &l);
            _mm_storeu_si128((__m128i *)(bh[b].qs + 16 * j), _mm512_cvtepi32_epi8(h));
            _mm_storeu_si128((__m128i *)(bl[b].qs + 16 * j), _mm512_cvtepi32_epi8(l));
            bh[b].bsums[j] = (int16_t)_mm512_reduce_add_epi32(h);
            bl[b].bsums[j] = (int16_t)_mm512_reduce_add_epi32(l);
        }
    }
}

/* ---- KV rows to f32 ---------------------------------------------------------------- */

static void f16_to_f32(const void *src, float *dst, uint64_t n) {
    const uint16_t *h = src;
    uint64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + i)));
    }
}

static void bf16_to_f32(const void *src, float *dst, uint64_t n) {
    const uint16_t *h = src;
    uint64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h + i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, h + i));
        _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
}

#if KIPP_AVX512_VNNI
const kipp_cpu_kernels kipp_cpu_kernels_avx512vnni = {
    .isa = "avx512vnni",
#else
const kipp_cpu_kernels kipp_cpu_kernels_avx512 = {
    .isa = "avx512",
#endif
    /* gemm_many: the register tiles at every count, never the level's own switch (a Zen 4 runs
     * them faster than the f32 panel at 12+ tokens: choice.c names them there) */
    .f32 = {KIPP_ACT_F32, gemm_f32, KIPP_ACT_F32, gemm_f32_tiles, KIPP_CPU_MANY_NAMED},
    .f16 = {KIPP_ACT_F32, gemm_f16, KIPP_ACT_F32, gemm_f16_tiles, KIPP_CPU_MANY_NAMED},
    .bf16 = {KIPP_ACT_F32, gemm_bf16, KIPP_ACT_F32, gemm_bf16_tiles, KIPP_CPU_MANY_NAMED},
#if KIPP_AVX512_VNNI
    .q8_0 = {KIPP_ACT_Q8_0, gemm_q8_0, 0, NULL, 0, &kp_packer_q8_0},
#else
    .q8_0 = {KIPP_ACT_Q8_0, gemm_q8_0},
#endif
    .q4_0 = {KIPP_ACT_Q8_0, gemm_q4_0},
#if KIPP_AVX512_VNNI
    .q4_k = {KIPP_ACT_Q8_K, gemm_q4_k, 0, NULL, 0, &kp_packer_q4_k},
    .q6_k = {KIPP_ACT_Q8_K, gemm_q6_k, 0, NULL, 0, &kp_packer_q6_k},
    /* Q5_K only packed (no mmapped kernel at this level: choice.c takes avx2's when unpacked) */
    .q5_k = {0, NULL, 0, NULL, 0, &kp_packer_q5_k},
    .quant = {NULL, quant_bf16, quant_q8_0, quant_q8_k, quant_q16},
#else
    .q4_k = {KIPP_ACT_Q8_K, gemm_q4_k},
    .q6_k = {KIPP_ACT_Q8_K, gemm_q6_k},
    .quant = {NULL, quant_bf16, quant_q8_0, quant_q8_k, quant_q16},
#endif
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
    .softmax_f32 = softmax_f32,
    .swiglu_f32 = swiglu_f32,
    .pv_f32 = pv_f32,
    .quant2 = {NULL, NULL, quant2_q8_0, quant2_q8_k},
    .f16_to_f32 = f16_to_f32,
    .bf16_to_f32 = bf16_to_f32,
    .pv_f16 = pv_f16,
    .pv_bf16 = pv_bf16,
    .pv_rows_f32 = pv_rows_f32,
    .pv_rows_f16 = pv_rows_f16,
    .pv_rows_bf16 = pv_rows_bf16,
};
