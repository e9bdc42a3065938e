/* quantize.h — float32 values to ggml block bytes: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
 * Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS.
 * Bit-identical with the project's reference encoders in tools/kipp_quants.py (numpy float32),
 * including the order in which numpy's einsum sums a sub-block, so that kipp-quantize and
 * tools/quantize.py write the same bytes (tests/cli/test_quantize.sh checks every type).
 * Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 are ggml's quantize_row_*_ref; the K and IQ4 types have
 * ggml's layouts and scale searches (see kipp_quants.py). NaN/Inf inputs give valid blocks,
 * not matching numpy.
 * Not here: importance matrices, the IQ1/IQ2/IQ3 types, dequantization (core/types.c). */
#ifndef KIPP_CORE_QUANTIZE_H
#define KIPP_CORE_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

/* 1 for the types kipp_quantize_row can write (the twelve above), 0 otherwise. */
int kipp_quantize_supported(uint32_t type_id);

/* Encodes n values (a multiple of the type's block size, checked by the caller) into dst,
 * which has room for kipp_type_row_bytes(type_id, n) bytes. Thread-safe. Returns the bytes
 * written, or 0 for a type kipp_quantize_supported refuses. */
size_t kipp_quantize_row(uint32_t type_id, const float *x, void *dst, uint64_t n);

#endif
