/* kernels_avx512bf16.c — BF16 weights on AVX512-BF16's vdpbf16ps, built with -mavx512bf16 and
 * the AVX-512 flags; only reached after cpu.c checked cpuid. The level "avx512bf16" (cpu.c) is
 * avx512vnni's table with these for BF16.
 *
 * Weights: AMX's packed layout (kernels_amx.c: per group of 16 rows, line j of 64 bytes holds
 * each row's pair W[n][2j], W[n][2j+1]), repacked once at load, the same size as the GGUF
 * rows. That is vdpbf16ps's operand with one row per f32 lane: a line times a broadcast pair
 * of one token adds two products to each of 16 rows' sums, so no horizontal sum is needed and
 * every output is one chain over k in the same order at every token count and tile shape (the
 * same bits for a prompt run at once and token by token).
 *
 * The activations come as KIPP_ACT_BF16X2 rows (hi and lo planes, x to about 2^-17, as AMX's
 * tiles take them): each line meets the token's hi pair, then its lo pair. vdpbf16ps does 32
 * multiply-adds where an f32 FMA does 16, and Zen 4 issues it at the FMA's rate, so two planes
 * run at the FMA's rate with no widening of the weights: 114-116 GFLOP/s a thread from 2 tokens
 * on against avx512's float kernels' 86-108, and 26.9 GB/s at one token against avx2's 26.3
 * (bench/results/kernels-epyc-avx512bf16.json).
 *
 * One plane alone (x rounded to bf16, as llama.cpp computes BF16 weights) measured twice
 * that, 223-231 GFLOP/s, and is not offered: its 2^-9 rounding of every activation put the
 * random tiny BF16 model at NMSE 6.3e-5 from cpu-ref (every other type and level:
 * 2-4e-7), and a prompt run at once against token by token at NMSE 2.5e-5, past the
 * same-backend gates' 1e-5 (the attention sums differ in their last bits between the two,
 * and rounding to bf16 magnifies that). */
#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* a pair of bf16 read as one word */
typedef uint32_t u32_alias __attribute__((may_alias, aligned(4)));

#define DP(acc, w, x) _mm512_dpbf16_ps((acc), (__m512bh)(w), (__m512bh)(x))

/* NG row groups (16 rows each, the packed group g at w + g * 16k) x NT tokens (x rows xrb
 * bytes apart, each row's lo plane k elements after its hi plane), over all of k;
 * y[t * ldy + 16g + lane] for the first `rows` rows. */
static inline __attribute__((always_inline)) void tile(const uint16_t *w, uint64_t k, const char *x, size_t xrb,
                                                       float *y, size_t ldy, uint64_t rows, const int NG,
                                                       const int NT) {
    __m512 acc[4][6];
    const u32_alias *xw[6];
    _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) xw[t] = (const u32_alias *)(x + (size_t)t * xrb);
    _Pragma("GCC unroll 8") for (int g = 0; g < NG; g++)
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) acc[g][t] = _mm512_setzero_ps();
    const uint64_t half = k / 2; /* pairs; the lo plane's pair j is word half + j */
    for (uint64_t j = 0; j < half; j++) {
        __m512i wv[4];
        _Pragma("GCC unroll 8") for (int g = 0; g < NG; g++) wv[g] = _mm512_loadu_si512(w + (uint64_t)g * 16 * k + j * 32);
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) {
            const __m512i xb = _mm512_set1_epi32((int)xw[t][j]);
            const __m512i xl = _mm512_set1_epi32((int)xw[t][half + j]);
            _Pragma("GCC unroll 8") for (int g = 0; g < NG; g++) acc[g][t] = DP(acc[g][t], wv[g], xb);
            _Pragma("GCC unroll 8") for (int g = 0; g < NG; g++) acc[g][t] = DP(acc[g][t], wv[g], xl);
        }
    }
    _Pragma("GCC unroll 8") for (int g = 0; g < NG; g++) {
        const uint64_t r0 = (uint64_t)g * 16;
        if (r0 >= rows) break;
        const __mmask16 m = rows - r0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (rows - r0)) - 1);
        _Pragma("GCC unroll 8") for (int t = 0; t < NT; t++) _mm512_mask_storeu_ps(y + (size_t)t * ldy + r0, m, acc[g][t]);
    }
}

/* every tile shape the gemm runs: 4 groups (64 rows) or 1, by 1-6 tokens */
#define TILE_CASES(NG_)                                                                            \
    switch (nt) {                                                                                  \
    case 1: tile(w, k, x, xrb, y, ldy, rows, NG_, 1); break;                                       \
    case 2: tile(w, k, x, xrb, y, ldy, rows, NG_, 2); break;                                       \
    case 3: tile(w, k, x, xrb, y, ldy, rows, NG_, 3); break;                                       \
    case 4: tile(w, k, x, xrb, y, ldy, rows, NG_, 4); break;                                       \
    case 5: tile(w, k, x, xrb, y, ldy, rows, NG_, 5); break;                                       \
    default: tile(w, k, x, xrb, y, ldy, rows, NG_, 6); break;                                      \
    }

static void tile4(const uint16_t *w, uint64_t k, const char *x, size_t xrb, float *y, size_t ldy, uint64_t rows,
                  int nt) {
    TILE_CASES(4)
}

static void tile1(const uint16_t *w, uint64_t k, const char *x, size_t xrb, float *y, size_t ldy, uint64_t rows,
                  int nt) {
    TILE_CASES(1)
}

/* kernels.h gemm over the packed layout: w advanced to a group (w_row_bytes = 2k), x
 * KIPP_ACT_BF16X2 rows. 64 rows at a time with every token tile against them (their 128k
 * bytes stay in L2), then the last groups one at a time. */
static void gemm_bf16x2(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x, size_t xrb,
                        uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    (void)w_row_bytes;
    const uint16_t *wp = w;
    const char *xc = x;
    uint64_t r = 0;
    for (; r + 48 < n_rows; r += 64)
        for (uint64_t t = 0; t < n_tok; t += 6)
            tile4(wp + r * k, k, xc + t * xrb, xrb, y + t * ldy + r, ldy, n_rows - r, (int)(n_tok - t < 6 ? n_tok - t : 6));
    for (; r < n_rows; r += 16)
        for (uint64_t t = 0; t < n_tok; t += 6)
            tile1(wp + r * k, k, xc + t * xrb, xrb, y + t * ldy + r, ldy, n_rows - r, (int)(n_tok - t < 6 ? n_tok - t : 6));
}

const kipp_cpu_gemm_fn kipp_cpu_gemm_dpbf16x2 = gemm_bf16x2;
