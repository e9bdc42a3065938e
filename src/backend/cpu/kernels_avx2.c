/* kernels_avx2.c — the AVX2 + FMA + F16C kernel level (built with -mavx2 -mfma -mf16c; only
 * reached after cpu.c checked cpuid). Dots over F32/F16/BF16/Q8_0 rows with two 8-lane FMA
 * accumulators; tails shorter than 8 go through the scalar formula. Q8_0 stays a float path
 * here (int8 widened to f32); an integer maddubs path on a quantized x is future work. */
#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <immintrin.h>
#include <string.h>

static float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static float dot_f32(const void *row, const float *x, uint64_t n) {
    const float *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    uint64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 8), _mm256_loadu_ps(x + k + 8), a1);
    }
    for (; k + 8 <= n; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a0);
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; k < n; k++) s += w[k] * x[k];
    return s;
}

static float dot_f16(const void *row, const float *x, uint64_t n) {
    const uint16_t *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    uint64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + k)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + k + 8)));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + k), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + k + 8), a1);
    }
    for (; k + 8 <= n; k += 8)
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + k))),
                             _mm256_loadu_ps(x + k), a0);
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; k < n; k++) s += kipp_f16_to_f32(w[k]) * x[k];
    return s;
}

/* bf16 → f32 is a 16-bit left shift: widen to 32 bits, shift, reinterpret */
static __m256 load_bf16(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static float dot_bf16(const void *row, const float *x, uint64_t n) {
    const uint16_t *w = row;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    uint64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        a0 = _mm256_fmadd_ps(load_bf16(w + k), _mm256_loadu_ps(x + k), a0);
        a1 = _mm256_fmadd_ps(load_bf16(w + k + 8), _mm256_loadu_ps(x + k + 8), a1);
    }
    for (; k + 8 <= n; k += 8) a0 = _mm256_fmadd_ps(load_bf16(w + k), _mm256_loadu_ps(x + k), a0);
    float s = hsum256(_mm256_add_ps(a0, a1));
    for (; k < n; k++) s += kipp_bf16_to_f32(w[k]) * x[k];
    return s;
}

static __m256 load_q8x8(const int8_t *q) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q)));
}

/* per block: d * (q · x) with the block sum in 8 lanes; scales applied with one FMA */
static float dot_q8_0(const void *row, const float *x, uint64_t n) {
    const unsigned char *b = row;
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t blk = 0; blk < n / KIPP_Q8_0_BLOCK; blk++, b += KIPP_Q8_0_BYTES) {
        uint16_t dh;
        memcpy(&dh, b, 2);
        const int8_t *q = (const int8_t *)(b + 2);
        const float *xb = x + blk * KIPP_Q8_0_BLOCK;
        __m256 s = _mm256_mul_ps(load_q8x8(q), _mm256_loadu_ps(xb));
        s = _mm256_fmadd_ps(load_q8x8(q + 8), _mm256_loadu_ps(xb + 8), s);
        s = _mm256_fmadd_ps(load_q8x8(q + 16), _mm256_loadu_ps(xb + 16), s);
        s = _mm256_fmadd_ps(load_q8x8(q + 24), _mm256_loadu_ps(xb + 24), s);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(kipp_f16_to_f32(dh)), s, acc);
    }
    return hsum256(acc);
}

const kipp_cpu_kernels kipp_cpu_kernels_avx2 = {
    .isa = "avx2",
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q8_0 = dot_q8_0,
};
