/* probe.c — the cuda backend's start-up checks (probe.h): pure decisions over a filled
 * kipp_cuda_probe, in the order a user meets the problems (driver, versions, devices,
 * architecture, memory). cuda.c gathers the facts; this file only judges them, so every
 * message is unit-tested without a GPU. */
#include "backend/cuda/probe.h"

#include "core/error.h"

#include <stdio.h>

#define MIB (1024.0 * 1024.0)

const char *kipp_cuda_version_str(int version, char *buf, size_t len) {
    snprintf(buf, len, "%d.%d", version / 1000, version % 1000 / 10);
    return buf;
}

/* The architectures a binary carries machine code or PTX for (backend.mk's gencode lists):
 * the generic build runs CC 8.0 and newer (sm_80/86/89/90 code, compute_90 PTX JIT-compiled
 * on later GPUs); the spark build has sm_121 machine code only, so it runs CC 12.1 only. */
static int cc_runs(const kipp_cuda_probe *p) {
    if (p->spark) return p->cc_major == 12 && p->cc_minor == 1;
    return p->cc_major >= 8;
}

kipp_status kipp_cuda_probe_check(const kipp_cuda_probe *p, char *err, size_t err_len) {
    char drv[16], rt[16];
    if (p->driver_version <= 0)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "cuda: no NVIDIA driver found (libcuda.so.1 is missing or cannot be "
                         "loaded); this binary needs an NVIDIA driver supporting CUDA %s or "
                         "newer, or choose another backend with --backend cpu",
                         kipp_cuda_version_str(p->runtime_version, rt, sizeof rt));
    if (p->driver_version < p->runtime_version)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "cuda: the NVIDIA driver supports CUDA %s but this binary was built "
                         "with CUDA %s; install a driver supporting CUDA %s or newer",
                         kipp_cuda_version_str(p->driver_version, drv, sizeof drv),
                         kipp_cuda_version_str(p->runtime_version, rt, sizeof rt), rt);
    if (p->device_count <= 0)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "cuda: the NVIDIA driver (CUDA %s) is present but reports no CUDA "
                         "device (check CUDA_VISIBLE_DEVICES and nvidia-smi)",
                         kipp_cuda_version_str(p->driver_version, drv, sizeof drv));
    if (p->device < 0 || p->device >= p->device_count)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "cuda: device %d asked for, but this machine has %d CUDA device%s "
                         "(valid indices 0..%d)",
                         p->device, p->device_count, p->device_count == 1 ? "" : "s",
                         p->device_count - 1);
    const char *name = p->name && *p->name ? p->name : "unnamed GPU";
    if (!cc_runs(p))
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "cuda: device %d (%s) has compute capability %d.%d, which this "
                         "binary has no code for: %s",
                         p->device, name, p->cc_major, p->cc_minor,
                         p->spark ? "the spark build (kipp-cuda-spark) runs only compute "
                                    "capability 12.1 (DGX Spark, GB10); use kipp-cuda-generic "
                                    "on other GPUs"
                                  : "the generic build runs compute capability 8.0 (Ampere) "
                                    "and newer");
    const uint64_t need = p->weight_bytes + p->scratch_bytes;
    if (need && need > p->free_bytes)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "cuda: device %d (%s) has %.0f MiB free of %.0f MiB, but the model "
                         "needs %.0f MiB (%.0f MiB of weights + %.0f MiB of scratch for this "
                         "context); use a smaller model or quantization, a smaller context, or "
                         "free the GPU",
                         p->device, name, p->free_bytes / MIB, p->total_bytes / MIB, need / MIB,
                         p->weight_bytes / MIB, p->scratch_bytes / MIB);
    return KIPP_OK;
}
