/* kernels_avx512.c — the AVX-512 kernel level (built with -mavx512f -mavx512bw -mavx512vl
 * -mfma -mf16c; only reached after cpu.c checked cpuid). Dots over F32/F16/BF16/Q8_0 rows
 * with 16-lane FMA accumulators and masked tails. Not yet: AVX512-BF16 vdpbf16ps (it would
 * round x to bf16) and VNNI integer Q8_0. */
#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <immintrin.h>
#include <string.h>

static __mmask16 tail_mask(uint64_t r) { return (__mmask16)((1u << r) - 1u); }

static float dot_f32(const void *row, const float *x, uint64_t n) {
    const float *w = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    uint64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(x + k), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 16), _mm512_loadu_ps(x + k + 16), a1);
    }
    for (; k < n; k += 16) {
        __mmask16 m = n - k >= 16 ? (__mmask16)0xffff : tail_mask(n - k);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + k), _mm512_maskz_loadu_ps(m, x + k), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static float dot_f16(const void *row, const float *x, uint64_t n) {
    const uint16_t *w = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    uint64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + k)));
        __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + k + 16)));
        a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + k), a0);
        a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + k + 16), a1);
    }
    for (; k < n; k += 16) {
        __mmask16 m = n - k >= 16 ? (__mmask16)0xffff : tail_mask(n - k);
        __m512 wv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + k));
        a0 = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + k), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static __m512 load_bf16(__mmask16 m, const uint16_t *p) {
    __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

static float dot_bf16(const void *row, const float *x, uint64_t n) {
    const uint16_t *w = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    uint64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        a0 = _mm512_fmadd_ps(load_bf16(0xffff, w + k), _mm512_loadu_ps(x + k), a0);
        a1 = _mm512_fmadd_ps(load_bf16(0xffff, w + k + 16), _mm512_loadu_ps(x + k + 16), a1);
    }
    for (; k < n; k += 16) {
        __mmask16 m = n - k >= 16 ? (__mmask16)0xffff : tail_mask(n - k);
        a0 = _mm512_fmadd_ps(load_bf16(m, w + k), _mm512_maskz_loadu_ps(m, x + k), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

static __m512 load_q8x16(const int8_t *q) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q)));
}

static float dot_q8_0(const void *row, const float *x, uint64_t n) {
    const unsigned char *b = row;
    __m512 acc = _mm512_setzero_ps();
    for (uint64_t blk = 0; blk < n / KIPP_Q8_0_BLOCK; blk++, b += KIPP_Q8_0_BYTES) {
        uint16_t dh;
        memcpy(&dh, b, 2);
        const int8_t *q = (const int8_t *)(b + 2);
        const float *xb = x + blk * KIPP_Q8_0_BLOCK;
        __m512 s = _mm512_mul_ps(load_q8x16(q), _mm512_loadu_ps(xb));
        s = _mm512_fmadd_ps(load_q8x16(q + 16), _mm512_loadu_ps(xb + 16), s);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(kipp_f16_to_f32(dh)), s, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

const kipp_cpu_kernels kipp_cpu_kernels_avx512 = {
    .isa = "avx512",
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q8_0 = dot_q8_0,
};
