/* kernels.h — the CPU backend's kernel table: one struct of function pointers per ISA level
 * (kernels_scalar.c, kernels_avx2.c, kernels_avx512.c), chosen once at start-up by cpuid in
 * cpu.c. Only the ISA files may use intrinsics. Does not thread: callers split rows. */
#ifndef KIPP_CPU_KERNELS_H
#define KIPP_CPU_KERNELS_H

#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

/* sum_k row[k] * x[k] over n elements (a multiple of the type's block size), row in its
 * stored block format, x f32. Accumulation order differs per ISA (lanes, then a tree). */
typedef float (*kipp_cpu_dot_fn)(const void *row, const float *x, uint64_t n);

typedef struct {
    const char *isa; /* "scalar", "avx2", "avx512" */
    kipp_cpu_dot_fn dot_f32, dot_f16, dot_bf16, dot_q8_0;
} kipp_cpu_kernels;

extern const kipp_cpu_kernels kipp_cpu_kernels_scalar;
extern const kipp_cpu_kernels kipp_cpu_kernels_avx2;   /* AVX2 + FMA + F16C */
extern const kipp_cpu_kernels kipp_cpu_kernels_avx512; /* AVX-512F/BW/VL + FMA + F16C */

/* Any supported type (Q4_0, Q4_K, Q6_K, ...): dequantize one block at a time into a stack
 * buffer with kipp_dequantize_row, then dot in f32. Portable; the fallback of every level. */
float kipp_cpu_dot_dequant(uint32_t type, const void *row, const float *x, uint64_t n);

/* The table for an ISA level by name ("scalar", "avx2", "avx512"; NULL: the best this CPU
 * runs). A level this CPU lacks, or an unknown name, is an error naming what is missing.
 * Implemented in cpu.c (the only place that asks cpuid). */
kipp_status kipp_cpu_kernels_select(const char *isa, const kipp_cpu_kernels **out, char *err,
                                    size_t err_len);
/* 1 when this CPU can run the named level. */
int kipp_cpu_isa_available(const char *isa);
/* The table's dot for a weight type, or NULL when that type takes kipp_cpu_dot_dequant. */
kipp_cpu_dot_fn kipp_cpu_kernels_dot(const kipp_cpu_kernels *k, uint32_t type);

/* Q8_0 block layout as stored in GGUF: an f16 scale then 32 int8 quants (34 bytes). */
#define KIPP_Q8_0_BLOCK 32
#define KIPP_Q8_0_BYTES 34

#endif
