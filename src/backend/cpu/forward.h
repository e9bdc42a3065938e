/* forward.h — the cpu backend's batched forward pass (forward.c): the operations of ops.h,
 * run by the layer program's driver (program.c), layer-major over all
 * tokens of a batch, every weight matrix read once per batch through the kernel table's gemm,
 * attention over the paged KV cache tiled per (sequence run, KV head), work split over the
 * thread pool. Numerics differ from cpu-ref only by accumulation order and the kernels'
 * activation formats (bf16 / 8-bit blocks); the gate bounds the difference. */
#ifndef KIPP_CPU_FORWARD_H
#define KIPP_CPU_FORWARD_H

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/threadpool.h"

typedef struct kipp_cpu_fwd kipp_cpu_fwd;

/* kv_type: the type of the context's KV storage (src/backend/host_kv.h); recomputation
 * rounds K/V through it. n_logits: floats per logits row (the first rows of the lm_head);
 * 0: no lm_head, each output row is the final-norm hidden state (n_embd floats). */
kipp_status kipp_cpu_fwd_init(const kipp_model *m, uint32_t n_ctx, kipp_kv_type kv_type,
                              kipp_kv_type kv_type_v,
                              uint32_t n_logits,
                              const kipp_cpu_kernels *k, kipp_threadpool *pool,
                              kipp_cpu_fwd **out, char *err, size_t err_len);
void kipp_cpu_fwd_free(kipp_cpu_fwd *f);
/* Bytes of weights repacked at load (0: none; kernels.h kipp_cpu_packer). */
uint64_t kipp_cpu_fwd_packed_bytes(const kipp_cpu_fwd *f);
/* The decode_batch / forward_nocache contracts of backend.h. */
kipp_status kipp_cpu_fwd_decode_batch(kipp_cpu_fwd *f, kipp_kv_pool *pool, const kipp_batch *b,
                                      float *logits, char *err, size_t err_len);
kipp_status kipp_cpu_fwd_nocache(kipp_cpu_fwd *f, const int32_t *tokens, uint32_t n,
                                 float *logits, char *err, size_t err_len);

#endif
