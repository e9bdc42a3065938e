/* cuda_membw.cu — GPU memory bandwidth, the ceiling for memory-bound decode on the cuda backend:
 * the device counterpart of bench/membw.c. tools/bench.py --backend cuda runs it (default
 * build/kipp-cuda-membw) and records decode's effective GB/s against its best_gbps.
 *
 * Two measurements over one buffer of --size-mib MiB (default 1024, at least 1 GiB is what a
 * record should use: smaller buffers partly fit the 50+ MB L2 of recent GPUs):
 *   read  a vectorized read kernel (16-byte loads, four independent loads in flight per
 *         thread, grid = SMs x resident blocks) summing every 32-bit word. Decode reads
 *         weights and writes little, so this is the figure decode is compared against:
 *         best_gbps / gbps, 1 GB = 1e9 bytes, the same keys as kipp-membw.
 *   copy  cudaMemcpy device-to-device into a second buffer of the same size, counted as
 *         2 x bytes per copy (read + written, the convention of CUDA's bandwidthTest):
 *         copy_d2d_best_gbps / copy_d2d_gbps.
 * Each is timed with CUDA events around one operation, after one untimed warm-up; the best of
 * --runs is reported. The buffer holds word i = i, so every read pass's sum must equal
 * n(n-1)/2: a kernel that skipped part of the buffer (a wrong grid stride) fails with exit 1
 * instead of printing an inflated figure; the copy is checked the same way on its target.
 *
 * One JSON object on stdout, kipp-membw's keys (tool, bytes, threads, runs, best_gbps, gbps,
 * checksum) plus the device's name, compute capability, SM count and theoretical bandwidth
 * (2 x memory clock x bus width: DDR/HBM transfer twice per clock). Without a usable GPU it
 * prints why on stderr and exits 1. Build: nvcc (make build/kipp-cuda-membw).
 *
 *   kipp-cuda-membw [--size-mib N] [--runs R] [--device D] */
#include <cuda_runtime_api.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 256

/* Exits 1 with the failing call and CUDA's message: the probe has nothing useful to print
 * after a CUDA error, and a partial figure must not reach a record. */
#define CK(call)                                                                               \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "kipp-cuda-membw: %s failed: %s (%s)\n", #call,                    \
                    cudaGetErrorString(e_), cudaGetErrorName(e_));                             \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

__global__ void fill_kernel(uint32_t *w, size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        w[i] = (uint32_t)i;
}

__device__ __forceinline__ unsigned long long sum4(uint4 v) {
    return (unsigned long long)v.x + v.y + v.z + v.w;
}

/* Sums every 32-bit word of p[0..n) (n 16-byte vectors) into *out. Four loads are issued
 * before any is used so each thread keeps several requests in flight, which a plain
 * grid-stride loop does not on its own. */
__global__ void read_kernel(const uint4 *__restrict__ p, size_t n, unsigned long long *out) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 v0 = p[i], v1 = p[i + stride], v2 = p[i + 2 * stride], v3 = p[i + 3 * stride];
        a0 += sum4(v0);
        a1 += sum4(v1);
        a2 += sum4(v2);
        a3 += sum4(v3);
    }
    for (; i < n; i += stride) a0 += sum4(p[i]);
    unsigned long long s = a0 + a1 + a2 + a3;
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}

static long arg_long(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "kipp-cuda-membw: %s expects an integer in [%ld, %ld], got '%s'\n", flag,
                lo, hi, v ? v : "");
        exit(2);
    }
    return x;
}

/* One read pass over buf; returns its milliseconds and checks its sum. */
static float read_pass(const uint4 *buf, size_t nvec, int grid, unsigned long long *d_sum,
                       unsigned long long want, cudaEvent_t e0, cudaEvent_t e1,
                       const char *what) {
    CK(cudaMemset(d_sum, 0, sizeof *d_sum));
    CK(cudaEventRecord(e0));
    read_kernel<<<grid, BLOCK>>>(buf, nvec, d_sum);
    CK(cudaGetLastError());
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    unsigned long long got = 0;
    CK(cudaMemcpy(&got, d_sum, sizeof got, cudaMemcpyDeviceToHost));
    if (got != want) {
        fprintf(stderr, "kipp-cuda-membw: %s checksum %llu, expected %llu: the read kernel did "
                "not read every word once; no figure is printed\n", what, got, want);
        exit(1);
    }
    return ms;
}

static void print_list(const double *v, long n) {
    for (long r = 0; r < n; r++) printf(r ? ", %.3f" : "%.3f", v[r]);
}

int main(int argc, char **argv) {
    /* 16 GiB at most: word i holds (uint32_t)i, so the checksum formula needs < 2^32 words */
    long size_mib = 1024, runs = 5, device = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--size-mib")) size_mib = arg_long(a, v, 1, 16384), i++;
        else if (!strcmp(a, "--runs")) runs = arg_long(a, v, 1, 1000), i++;
        else if (!strcmp(a, "--device")) device = arg_long(a, v, 0, 255), i++;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: kipp-cuda-membw [--size-mib N (1024)] [--runs R (5)] [--device D (0)]"
                   "\nPrints the GPU's best read and device-to-device copy bandwidth as JSON.\n");
            return 0;
        } else {
            fprintf(stderr, "kipp-cuda-membw: unknown option '%s'\n", a);
            return 2;
        }
    }
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) {
        fprintf(stderr, "kipp-cuda-membw: no usable CUDA device (%s); this probe measures GPU "
                "memory, the CPU's is build/kipp-membw\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0");
        return 1;
    }
    if (device >= n_dev) {
        fprintf(stderr, "kipp-cuda-membw: --device %ld, but %d device(s) are visible\n", device,
                n_dev);
        return 1;
    }
    CK(cudaSetDevice((int)device));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, (int)device));
    int mem_khz = 0, bus_bits = 0, sms = 0, per_sm = 0;
    CK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, (int)device));
    CK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, (int)device));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, (int)device));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, read_kernel, BLOCK, 0));
    int grid = sms * (per_sm > 0 ? per_sm : 1);

    size_t bytes = (size_t)size_mib << 20, nvec = bytes / sizeof(uint4), nw = bytes / 4;
    uint4 *src = NULL, *dst = NULL;
    unsigned long long *d_sum = NULL;
    CK(cudaMalloc((void **)&src, bytes));
    CK(cudaMalloc((void **)&dst, bytes));
    CK(cudaMalloc((void **)&d_sum, sizeof *d_sum));
    fill_kernel<<<grid, BLOCK>>>((uint32_t *)src, nw);
    CK(cudaGetLastError());
    CK(cudaMemset(dst, 0, bytes));
    CK(cudaDeviceSynchronize());
    unsigned long long want = (unsigned long long)nw * (nw - 1) / 2;

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double *rd = (double *)calloc((size_t)runs, sizeof *rd);
    double *cp = (double *)calloc((size_t)runs, sizeof *cp);
    if (!rd || !cp) return 1;
    double rd_best = 0, cp_best = 0;

    read_pass(src, nvec, grid, d_sum, want, e0, e1, "warm-up read"); /* clocks, TLB */
    for (long r = 0; r < runs; r++) {
        float ms = read_pass(src, nvec, grid, d_sum, want, e0, e1, "read");
        rd[r] = (double)bytes / (ms * 1e-3) / 1e9;
        if (rd[r] > rd_best) rd_best = rd[r];
    }
    CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice)); /* warm-up copy */
    for (long r = 0; r < runs; r++) {
        CK(cudaEventRecord(e0));
        CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        cp[r] = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;
        if (cp[r] > cp_best) cp_best = cp[r];
    }
    read_pass(dst, nvec, grid, d_sum, want, e0, e1, "copy target"); /* the copy happened */

    double theory = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    printf("{\"tool\": \"kipp-cuda-membw\", \"device\": \"");
    for (const char *c = prop.name; *c; c++) /* JSON-safe: device names are plain ASCII */
        if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20) putchar(*c);
    printf("\", \"device_index\": %ld, \"compute_capability\": \"%d.%d\", \"sms\": %d, "
           "\"global_mem_bytes\": %zu, \"memory_clock_khz\": %d, \"bus_width_bits\": %d, "
           "\"theoretical_gbps\": %.3f, \"bytes\": %zu, \"threads\": %d, \"grid\": %d, "
           "\"block\": %d, \"runs\": %ld, \"best_gbps\": %.3f, \"gbps\": [",
           device, prop.major, prop.minor, sms, prop.totalGlobalMem, mem_khz, bus_bits, theory,
           bytes, grid * BLOCK, grid, BLOCK, runs, rd_best);
    print_list(rd, runs);
    printf("], \"copy_d2d_best_gbps\": %.3f, \"copy_d2d_gbps\": [", cp_best);
    print_list(cp, runs);
    printf("], \"copy_d2d_counts\": \"2 x bytes per copy (read + written)\", "
           "\"checksum\": %llu}\n", want);
    free(rd);
    free(cp);
    CK(cudaFree(src));
    CK(cudaFree(dst));
    CK(cudaFree(d_sum));
    return 0;
}
