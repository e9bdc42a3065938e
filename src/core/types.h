/* types.h — ggml tensor types as stored in GGUF: ids, block geometry, f16/bf16 scalars and
 * per-row dequantization (scalar, bit-exact with ggml's reference dequantizers).
 * Does not quantize (that lives in tools/ and the quantizer). */
#ifndef KIPP_CORE_TYPES_H
#define KIPP_CORE_TYPES_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    KIPP_TYPE_F32 = 0,
    KIPP_TYPE_F16 = 1,
    KIPP_TYPE_Q4_0 = 2,
    KIPP_TYPE_Q4_1 = 3,
    KIPP_TYPE_Q5_0 = 6,
    KIPP_TYPE_Q5_1 = 7,
    KIPP_TYPE_Q8_0 = 8,
    KIPP_TYPE_Q2_K = 10,
    KIPP_TYPE_Q3_K = 11,
    KIPP_TYPE_Q4_K = 12,
    KIPP_TYPE_Q5_K = 13,
    KIPP_TYPE_Q6_K = 14,
    KIPP_TYPE_IQ4_NL = 20,
    KIPP_TYPE_IQ4_XS = 23,
    KIPP_TYPE_BF16 = 30,
} kipp_type;

/* Returns 1 for the types Kipp computes with, 0 otherwise. */
int kipp_type_supported(uint32_t type_id);
/* Bit mask (1 << id) of every supported type (all ids are below 64): the weight types a
 * backend that dequantizes any row supports. */
uint64_t kipp_type_mask(void);
/* Name for messages ("Q4_K"); for unknown ids a generic "type N" string (static storage,
 * not thread-safe for unknown ids). */
const char *kipp_type_name(uint32_t type_id);
/* Elements per block and bytes per block of a supported type (0 for unsupported). */
uint32_t kipp_type_block_elems(uint32_t type_id);
uint32_t kipp_type_block_bytes(uint32_t type_id);
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or overflows. */
uint64_t kipp_type_row_bytes(uint32_t type_id, uint64_t n);

float kipp_f16_to_f32(uint16_t h);
uint16_t kipp_f32_to_f16(float f); /* round to nearest even */
/* round to nearest even (a carry into the exponent is correct, up to inf); a NaN stays a
 * quiet NaN with its sign and top payload */
uint16_t kipp_f32_to_bf16(float f);
static inline float kipp_bf16_to_f32(uint16_t b) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)b << 16;
    return v.f;
}

/* Dequantizes n elements (a multiple of the block size) starting at row. */
void kipp_dequantize_row(uint32_t type_id, const void *row, float *out, uint64_t n);

#endif
