/* kernels_scalar.c — the portable kernel level: plain C dots over each stored type, used when
 * the CPU has no AVX2 or KIPP_CPU_ISA=scalar, and as the reference of the kernel unit tests.
 * Uses no intrinsics. f32 accumulation in 8 interleaved partial sums (so the compiler may
 * vectorize without -ffast-math), combined pairwise at the end. */
#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <string.h>

static float reduce8(const float acc[8]) {
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static float dot_f32(const void *row, const float *x, uint64_t n) {
    const float *w = row;
    float acc[8] = {0};
    uint64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++) acc[j] += w[k + j] * x[k + j];
    for (; k < n; k++) acc[k & 7] += w[k] * x[k];
    return reduce8(acc);
}

static float dot_f16(const void *row, const float *x, uint64_t n) {
    const uint16_t *w = row;
    float acc[8] = {0};
    for (uint64_t k = 0; k < n; k++) acc[k & 7] += kipp_f16_to_f32(w[k]) * x[k];
    return reduce8(acc);
}

static float dot_bf16(const void *row, const float *x, uint64_t n) {
    const uint16_t *w = row;
    float acc[8] = {0};
    uint64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int j = 0; j < 8; j++) acc[j] += kipp_bf16_to_f32(w[k + j]) * x[k + j];
    for (; k < n; k++) acc[k & 7] += kipp_bf16_to_f32(w[k]) * x[k];
    return reduce8(acc);
}

/* per block: d * sum(q_i * x_i), the inner sum in f32 */
static float dot_q8_0(const void *row, const float *x, uint64_t n) {
    const unsigned char *b = row;
    float total = 0.0f;
    for (uint64_t blk = 0; blk < n / KIPP_Q8_0_BLOCK; blk++, b += KIPP_Q8_0_BYTES) {
        uint16_t dh;
        memcpy(&dh, b, 2);
        const int8_t *q = (const int8_t *)(b + 2);
        const float *xb = x + blk * KIPP_Q8_0_BLOCK;
        float acc[8] = {0};
        for (int j = 0; j < KIPP_Q8_0_BLOCK; j++) acc[j & 7] += (float)q[j] * xb[j];
        total += kipp_f16_to_f32(dh) * reduce8(acc);
    }
    return total;
}

float kipp_cpu_dot_dequant(uint32_t type, const void *row, const float *x, uint64_t n) {
    const uint32_t be = kipp_type_block_elems(type), bb = kipp_type_block_bytes(type);
    float buf[256]; /* the largest block (K-quants) */
    const unsigned char *b = row;
    float acc[8] = {0};
    for (uint64_t k0 = 0; k0 < n; k0 += be, b += bb) {
        kipp_dequantize_row(type, b, buf, be);
        for (uint32_t j = 0; j < be; j++) acc[j & 7] += buf[j] * x[k0 + j];
    }
    return reduce8(acc);
}

const kipp_cpu_kernels kipp_cpu_kernels_scalar = {
    .isa = "scalar",
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q8_0 = dot_q8_0,
};
