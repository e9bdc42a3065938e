/* cuda_ops.c — `kipp_test_cuda --cuda-operators`: every kernel of the cuda backend
 * (src/backend/cuda/kernels.h) against a CPU reference on random inputs over many shapes,
 * odd sizes included, the way llama.cpp's test-backend-ops checks its backends. The checks
 * live beside their kernels' families: ops_mm.c (matrix products, the router's exact product,
 * the expert products, embedding rows) and ops_misc.c (norms, RoPE, SwiGLU, residuals, biases,
 * KV stores, paged attention, the experts' routing and weighted sum); each states and derives
 * its error bounds. Linked into build/kipp_test_cuda only; the ordinary kipp_test
 * answers this mode with how to get it. Needs an NVIDIA GPU: without one it fails, naming
 * what the CUDA runtime found. */
#include "kt.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

int kt_cuda_ops_mm(void);
int kt_cuda_ops_misc(void);
int kt_cuda_operators(const char *unused1, const char *unused2);

int kt_cuda_operators(const char *unused1, const char *unused2) {
    (void)unused1;
    (void)unused2;
    int n = 0, drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        fprintf(stderr,
                "kipp_test: --cuda-operators needs an NVIDIA GPU: %s (driver CUDA %d.%d, runtime "
                "CUDA %d.%d, %d devices)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "no device", drv / 1000,
                drv % 1000 / 10, rt / 1000, rt % 1000 / 10, n);
        return -1;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
        printf("cuda operators on %s (sm_%d%d, %.1f GiB), driver CUDA %d.%d, runtime %d.%d\n",
               p.name, p.major, p.minor, (double)p.totalGlobalMem / (1u << 30), drv / 1000,
               drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    const int f0 = kt_failed;
    int bad = kt_cuda_ops_mm();
    bad += kt_cuda_ops_misc();
    /* a family's failures it did not count with KT_CHECK still fail the run */
    return bad > kt_failed - f0 ? bad : kt_failed - f0;
}
