/* forward.h — the cuda backend's batched forward pass (forward.c): weights uploaded once in
 * their GGUF block layout (the spark build maps them instead), a batch run layer by layer
 * over all its tokens, the architecture's layer program (arch.h) run by the one driver
 * (program.c) through the operations of ops.h, each the launchers of kernels.h on one
 * stream, decode steps of up to 8 tokens replayed from CUDA graphs. The KV cache's device
 * storage is kipp_cuda_kv (allocated by cuda.c's kv_alloc). No kernels here. */
#ifndef KIPP_CUDA_FORWARD_H
#define KIPP_CUDA_FORWARD_H

#include "backend/backend.h"
#include "backend/ops.h"

#include <stddef.h>
#include <stdint.h>

/* Device KV storage: exactly the host layout of backend/host_kv.h, in one allocation. */
typedef struct {
    void *data;        /* device [n_blocks][2 (K, V)][n_layer][block_size][kv_dim] of type */
    kipp_kv_type type; /* F32, F16 or BF16 */
    uint32_t n_layer, kv_dim, block_size, n_blocks;
    size_t block_bytes; /* K + V of one block, all layers */
} kipp_cuda_kv;

typedef struct kipp_cuda_fwd kipp_cuda_fwd;

/* The device bytes a context will hold, before anything is allocated (the start-up memory
 * check of probe.h): weights (GGUF matrices + f32 norms and biases; with `mapped` the
 * matrices stay in the registered host mapping and only the vectors count) and scratch for
 * batches of up to the pass's chunk of tokens over n_ctx positions (the activations the
 * program's ops use, a mixture of experts' per-pair buffers included). Asks the kernel
 * files' scratch sizes. */
void kipp_cuda_fwd_sizes(const kipp_model *m, uint32_t n_ctx, uint32_t n_logits, int mapped,
                         uint64_t *weight_bytes, uint64_t *scratch_bytes);

/* The operations of ops.h on the device (no fused path): cuda.c's start-up check
 * (kipp_program_check) refuses an architecture whose program needs one it lacks. */
const kipp_backend_kernels *kipp_cuda_fwd_kernels(void);

/* KIPP_ERR_UNSUPPORTED naming the first matrix whose row length the kernels do not take
 * (before any device work). */
kipp_status kipp_cuda_fwd_check(const kipp_model *m, char *err, size_t err_len);

/* Uploads (or maps, spark) the weights and allocates the scratch on the current device.
 * kv_type: the context's; recomputation rounds K/V through it. n_logits: floats per logits
 * row (the lm_head's first rows); 0: embeddings, rows are the final-norm hidden state. */
kipp_status kipp_cuda_fwd_init(const kipp_model *m, uint32_t n_ctx, kipp_kv_type kv_type,
                               uint32_t n_logits, kipp_cuda_fwd **out, char *err,
                               size_t err_len);
void kipp_cuda_fwd_free(kipp_cuda_fwd *f);

/* How the weights are held, for describe(): "copied" or "mapped" (spark, unified memory). */
const char *kipp_cuda_fwd_weights_mode(const kipp_cuda_fwd *f);

/* The stream everything of this context runs on (cuda.c's block copies join it). */
void *kipp_cuda_fwd_stream(const kipp_cuda_fwd *f);

/* The fault-injection build's KIPP_FAULT mode for the context's storage: forwarded to the
 * kernels (kipp_cuda_set_fault) and remembered, so recomputation can run fault-free (its
 * private store is not the cache the fault matrix tests). */
void kipp_cuda_fwd_set_fault(kipp_cuda_fwd *f, int mode, uint32_t n_blocks);

/* The decode_batch / forward_nocache contracts of backend.h. */
kipp_status kipp_cuda_fwd_decode_batch(kipp_cuda_fwd *f, kipp_kv_pool *pool,
                                       const kipp_batch *b, float *logits, char *err,
                                       size_t err_len);
kipp_status kipp_cuda_fwd_nocache(kipp_cuda_fwd *f, const int32_t *tokens, uint32_t n,
                                  float *logits, char *err, size_t err_len);

#endif
