/* probe.h — the cuda backend's start-up decision as a pure function: given what cuda.c
 * found on this machine (driver, runtime, devices, the chosen device's compute capability
 * and memory, the bytes the context needs), say KIPP_OK or the one fatal error that names
 * what was found and what is needed. Issue 18, item 3: never a fallback to another backend.
 * No CUDA headers here, so the unit suite (tests/unit/test_cuda_probe.c) runs every message
 * with fabricated probes on a machine without a GPU. */
#ifndef KIPP_CUDA_PROBE_H
#define KIPP_CUDA_PROBE_H

#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

/* What was found, filled in the order the checks run; a check only reads the fields of the
 * stages before it passed, so the gatherer may stop at the first failing stage. */
typedef struct {
    /* CUDA versions as the runtime reports them: 1000 * major + 10 * minor (12020 = 12.2);
     * driver_version 0 = no driver (static cudart without libcuda.so.1) */
    int driver_version;
    int runtime_version;
    int device_count;        /* cudaGetDeviceCount */
    int device;              /* the index the context asks for (options->device) */
    int cc_major, cc_minor;  /* the chosen device's compute capability */
    const char *name;        /* the chosen device's name (may be NULL) */
    uint64_t free_bytes;     /* cudaMemGetInfo */
    uint64_t total_bytes;
    /* what the context needs on the device; both 0 = no memory check (backend memory()) */
    uint64_t weight_bytes;
    uint64_t scratch_bytes;
    int spark;               /* this binary is the spark build (sm_121 only) */
} kipp_cuda_probe;

/* KIPP_OK, or KIPP_ERR_BACKEND with a sentence in err, for the first of: no driver, driver
 * older than the runtime, no device, device index out of range, a compute capability this
 * binary has no code for, too little free memory for weights + scratch. */
kipp_status kipp_cuda_probe_check(const kipp_cuda_probe *p, char *err, size_t err_len);

/* "major.minor" of a CUDA version number into buf (12020 -> "12.2"); returns buf. */
const char *kipp_cuda_version_str(int version, char *buf, size_t len);

#endif
