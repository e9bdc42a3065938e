/* cuda.c — the NVIDIA backend ("cuda"): the start-up checks (gathered here, judged by
 * probe.c: no driver, old driver, no device, bad index, an architecture this binary has no
 * code for, too little device memory — each fatal, never a fallback to another backend),
 * the context's device, the KV cache in device memory (one allocation of host_kv.h's
 * layout, so block ids mean the same on both sides) and the forward pass (forward.c: the
 * operations of ops.h, through which program.c runs the architecture's layer program), which
 * calls the kernels of mm.cu and ops.cu through kernels.h. Gated against cpu-ref by the
 * model gates run with --backend cuda on a GPU (tests/cuda/run_cuda_gates.sh). */
#include "backend/backend.h"

#include "backend/host_kv.h"
#include "backend/cuda/forward.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/probe.h"
#include "backend/ops.h"

#include "core/error.h"
#include "model/arch.h"
#include "model/model.h"
#include "core/types.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KIPP_CUDA_SPARK
static const int k_spark = 1; /* sm_121 only; weights mapped, not copied (forward.c) */
#else
static const int k_spark = 0;
#endif

typedef struct {
    int device;
    kipp_cuda_fwd *fwd;
    int n_sm;
    char isa[320];
    cudaError_t copy_err; /* a failed block copy (kv_copy_block returns void), reported by the
                             next decode_batch */
} cuda_state;

/* ---- start-up checks ------------------------------------------------------------------------- */

/* Fills p stage by stage, stopping at the first stage probe.c refuses (later CUDA calls
 * would only fail less clearly); a CUDA call failing for another reason is reported as it
 * is. On KIPP_OK the device is current and p holds everything but the context's needs. */
static kipp_status gather(int device, kipp_cuda_probe *p, char *name, size_t name_len,
                          int *n_sm, char *err, size_t err_len) {
    memset(p, 0, sizeof *p);
    p->device = device;
    p->spark = k_spark;
    p->runtime_version = CUDART_VERSION;
    cudaRuntimeGetVersion(&p->runtime_version);
    /* static cudart without libcuda.so.1: version 0, or cudaErrorInsufficientDriver */
    if (cudaDriverGetVersion(&p->driver_version) != cudaSuccess) p->driver_version = 0;
    if (p->driver_version <= 0 || p->driver_version < p->runtime_version)
        return kipp_cuda_probe_check(p, err, err_len);
    cudaError_t e = cudaGetDeviceCount(&p->device_count);
    if (e == cudaErrorNoDevice) {
        p->device_count = 0;
    } else if (e != cudaSuccess) {
        char drv[16];
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "cuda: the NVIDIA driver (CUDA %s) cannot list devices: %s (%s)",
                         kipp_cuda_version_str(p->driver_version, drv, sizeof drv),
                         cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (p->device_count <= 0 || device < 0 || device >= p->device_count)
        return kipp_cuda_probe_check(p, err, err_len);
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND, "cuda: cannot query device %d: %s",
                         device, cudaGetErrorString(e));
    snprintf(name, name_len, "%s", prop.name);
    p->name = name;
    p->cc_major = prop.major;
    p->cc_minor = prop.minor;
    if (n_sm) *n_sm = prop.multiProcessorCount;
    kipp_status st = kipp_cuda_probe_check(p, err, err_len);
    if (st != KIPP_OK) return st;
    size_t free_b = 0, total_b = 0;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "cuda: cannot start a context on device %d (%s): %s", device, name,
                         cudaGetErrorString(e));
    p->free_bytes = free_b;
    p->total_bytes = total_b;
    return KIPP_OK;
}

/* ---- backend entry points ------------------------------------------------------------------- */

static void cuda_caps(kipp_backend_caps *out) {
    uint64_t types = 0;
    for (uint32_t t = 0; t < 64; t++)
        if (kipp_type_supported(t) && kipp_cuda_mm_type_supported(t)) types |= 1ull << t;
    *out = (kipp_backend_caps){
        .weight_types = types,
        .kv_types = 1u << KIPP_KV_TYPE_F32 | 1u << KIPP_KV_TYPE_F16 | 1u << KIPP_KV_TYPE_BF16,
        /* f16: half of f32's KV memory and bandwidth, well inside the gate (as cpu) */
        .kv_default = KIPP_KV_TYPE_F16,
        /* any size: forward.c runs a batch in chunks of 512 tokens */
        .max_batch = 0};
}

static kipp_status cuda_memory(const kipp_backend_options *o, kipp_backend_memory *out,
                               char *err, size_t err_len) {
    /* the kind string must outlive the call: one name slot per device index */
    static char names[16][256];
    char tmp[256];
    const int d = o->device;
    kipp_cuda_probe p;
    kipp_status st = gather(d, &p, tmp, sizeof tmp, NULL, err, err_len);
    if (st != KIPP_OK) return st;
    if (d < 16) {
        memcpy(names[d], tmp, sizeof tmp);
        out->kind = names[d];
    } else {
        out->kind = "CUDA device";
    }
    out->total = p.total_bytes;
    out->available = p.free_bytes;
    return KIPP_OK;
}

static void cuda_free(void *state) {
    cuda_state *s = state;
    if (!s) return;
    cudaSetDevice(s->device);
    kipp_cuda_fwd_free(s->fwd);
    free(s);
}

static kipp_status cuda_init(const kipp_model *m, uint32_t n_ctx, const kipp_backend_options *o,
                             void **state, char *err, size_t err_len) {
    *state = NULL;
    /* a program calling an operation forward.c's table lacks is refused before any device
     * work (kipp_program_check names the op and the operation) */
    kipp_status st = kipp_program_check(m->arch, "cuda", kipp_cuda_fwd_kernels(), err, err_len);
    if (st == KIPP_OK) st = kipp_cuda_fwd_check(m, err, err_len);
    if (st != KIPP_OK) return st;
    cuda_state *s = calloc(1, sizeof *s);
    if (!s) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cuda: out of memory");
    s->device = o->device;
    char name[256];
    kipp_cuda_probe p;
    st = gather(o->device, &p, name, sizeof name, &s->n_sm, err, err_len);
    if (st != KIPP_OK) goto fail;
    const uint32_t n_logits = o->embeddings ? 0 : o->n_logits;
    kipp_cuda_fwd_sizes(m, n_ctx, n_logits, k_spark, &p.weight_bytes, &p.scratch_bytes);
    if ((st = kipp_cuda_probe_check(&p, err, err_len)) != KIPP_OK) goto fail;
    if ((st = kipp_cuda_fwd_init(m, n_ctx, o->kv_type, n_logits, &s->fwd, err, err_len)) != KIPP_OK)
        goto fail;
    const int mapped = strcmp(kipp_cuda_fwd_weights_mode(s->fwd), "mapped") == 0;
    snprintf(s->isa, sizeof s->isa, "sm_%d%d %s (weights %s)", p.cc_major, p.cc_minor, name,
             mapped ? "mapped, unified memory" : "copied to the device");
    *state = s;
    return KIPP_OK;
fail:
    cuda_free(s);
    return st;
}

static void cuda_describe(void *state, const char **isa, int *n_threads,
                          uint64_t *weights_repacked) {
    const cuda_state *s = state;
    *isa = s->isa;
    *n_threads = s->n_sm;  /* streaming multiprocessors: the device's unit of parallelism */
    *weights_repacked = 0; /* the device holds the GGUF blocks as they are in the file */
}

static kipp_status cuda_kv_alloc(void *state, const kipp_kv_layout *lay, uint32_t n_blocks,
                                 void **store, char *err, size_t err_len) {
    cuda_state *s = state;
    *store = NULL;
    uint64_t part, total;
    const kipp_status st = kipp_kv_layout_size(lay, n_blocks, "cuda", &part, &total, err, err_len);
    if (st != KIPP_OK) return st;
    kipp_cuda_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cuda: out of memory");
    cudaSetDevice(s->device);
    cudaError_t e = cudaMalloc(&kv->data, (size_t)total);
    /* zeroed: a stale NaN in a never-written slot must not reach a masked score */
    if (e == cudaSuccess) e = cudaMemset(kv->data, 0, (size_t)total);
    if (e != cudaSuccess) {
        cudaFree(kv->data);
        free(kv);
        return kipp_errf(err, err_len,
                         e == cudaErrorMemoryAllocation ? KIPP_ERR_NOMEM : KIPP_ERR_BACKEND,
                         "cuda: device memory for the KV cache, %u blocks (%.0f MiB): %s",
                         n_blocks, total / (1024.0 * 1024.0), cudaGetErrorString(e));
    }
    kv->type = lay->type;
    kv->n_layer = lay->n_layer;
    kv->kv_dim = lay->kv_dim;
    kv->block_size = lay->block_size;
    kv->n_blocks = n_blocks;
    kv->block_bytes = 2 * (size_t)part;
#ifdef KIPP_FAULT_INJECT
    const char *mode = getenv("KIPP_FAULT"); /* read once, as host_kv.c does */
    kipp_cuda_fwd_set_fault(s->fwd, mode ? atoi(mode) : 0, n_blocks);
#endif
    *store = kv;
    return KIPP_OK;
}

static void cuda_kv_free(void *state, void *store) {
    cuda_state *s = state;
    kipp_cuda_kv *kv = store;
    if (!kv) return;
    cudaSetDevice(s->device);
    cudaFree(kv->data); /* synchronizes: no step still reads it */
    free(kv);
}

/* Copy-on-write: queued on the context's stream, so it lands before the step that writes
 * into the copy and after every step that read the source. */
static void cuda_kv_copy_block(void *state, void *store, uint32_t dst, uint32_t src) {
    cuda_state *s = state;
    kipp_cuda_kv *kv = store;
    cudaSetDevice(s->device);
    unsigned char *base = kv->data;
    const cudaError_t e = cudaMemcpyAsync(base + (size_t)dst * kv->block_bytes,
                                          base + (size_t)src * kv->block_bytes, kv->block_bytes,
                                          cudaMemcpyDeviceToDevice,
                                          (cudaStream_t)kipp_cuda_fwd_stream(s->fwd));
    if (e != cudaSuccess && s->copy_err == cudaSuccess) s->copy_err = e;
}

static kipp_status cuda_decode_batch(void *state, kipp_kv_pool *pool, const kipp_batch *b,
                                     float *logits, char *err, size_t err_len) {
    cuda_state *s = state;
    cudaSetDevice(s->device); /* the caller's thread may not be the one that ran init */
    if (s->copy_err != cudaSuccess)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND, "cuda: a KV block copy failed: %s",
                         cudaGetErrorString(s->copy_err));
    return kipp_cuda_fwd_decode_batch(s->fwd, pool, b, logits, err, err_len);
}

static kipp_status cuda_forward_nocache(void *state, const int32_t *tokens, uint32_t n,
                                        float *logits, char *err, size_t err_len) {
    cuda_state *s = state;
    cudaSetDevice(s->device);
    return kipp_cuda_fwd_nocache(s->fwd, tokens, n, logits, err, err_len);
}

const kipp_backend_ops kipp_backend_cuda = {
    .name = "cuda",
    .caps = cuda_caps,
    .memory = cuda_memory,
    .init = cuda_init,
    .free = cuda_free,
    .describe = cuda_describe,
    .kv_alloc = cuda_kv_alloc,
    .kv_free = cuda_kv_free,
    .kv_copy_block = cuda_kv_copy_block,
    .decode_batch = cuda_decode_batch,
    .forward_nocache = cuda_forward_nocache,
};
