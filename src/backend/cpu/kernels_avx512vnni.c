/* kernels_avx512vnni.c — level "avx512vnni": kernels_avx512.c built again with
 * -mavx512vnni and KIPP_AVX512_VNNI=1, so its integer dots use vpdpbusd and the
 * quantized gemms add the int8 panel path for many tokens (see kernels_avx512.c). Exports
 * kipp_cpu_kernels_avx512vnni; only reached after cpu.c checked cpuid. */
#define KIPP_AVX512_VNNI 1
#include "kernels_avx512.c"
