/* forward.h — the vulkan backend's batched forward pass (forward.c): weights uploaded once in
 * their GGUF block layout through staging (split into parts no larger than one storage buffer
 * view), a batch recorded layer by layer over all its tokens into one command buffer per
 * chunk, the architecture's layer program (arch.h) run by the one driver (program.c) through
 * the operations of ops.h, each the launchers of kernels.h. No kernels here. */
#ifndef KIPP_VK_FORWARD_H
#define KIPP_VK_FORWARD_H

#include "backend/backend.h"
#include "backend/ops.h"
#include "backend/vulkan/vk.h"

#include <stdint.h>

/* Device KV storage: one buffer per layer, [n_blocks][2 (K, V)][block_size][kv_dim] of type
 * (kernels.h), so a block id means the same as in the pool's tables. */
typedef struct {
    kipp_vk_buf *layer;  /* [n_layer] */
    kipp_kv_type type;   /* F32, F16 or BF16 */
    uint32_t n_layer, kv_dim, block_size, n_blocks;
    uint64_t block_bytes; /* K + V of one block of one layer */
    int private_store;    /* recomputation's own store: never read through the fault hook */
} kipp_vk_kv;

typedef struct kipp_vk_fwd kipp_vk_fwd;

/* The device bytes a context will hold, before anything is allocated: weights (matrices as
 * in the file, the lm_head's n_logits rows, f32 norms and biases) and the activations and
 * attention scratch for a chunk over n_ctx positions. */
void kipp_vk_fwd_sizes(const kipp_model *m, uint32_t n_ctx, uint32_t n_logits, uint64_t *weight_bytes,
                       uint64_t *scratch_bytes);
/* KIPP_ERR_UNSUPPORTED naming the first matrix whose rows the kernels do not take, or a head
 * size the attention kernel does not take (before any device work). */
kipp_status kipp_vk_fwd_check(const kipp_model *m, char *err, size_t err_len);
const kipp_backend_kernels *kipp_vk_fwd_kernels(void);

kipp_status kipp_vk_fwd_init(kipp_vk *vk, const kipp_model *m, uint32_t n_ctx, kipp_kv_type kv_type,
                             uint32_t n_logits, kipp_vk_fwd **out, char *err, size_t err_len);
void kipp_vk_fwd_free(kipp_vk_fwd *f);
/* The fault-injection build's KIPP_FAULT mode for the cache's reads (never recomputation's). */
void kipp_vk_fwd_set_fault(kipp_vk_fwd *f, int mode, uint32_t n_blocks);

/* The decode_batch / forward_nocache contracts of backend.h. */
kipp_status kipp_vk_fwd_decode_batch(kipp_vk_fwd *f, kipp_kv_pool *pool, const kipp_batch *b, float *logits,
                                     char *err, size_t err_len);
kipp_status kipp_vk_fwd_nocache(kipp_vk_fwd *f, const int32_t *tokens, uint32_t n, float *logits,
                                char *err, size_t err_len);

/* KV storage (zero-filled), its release, and a block's copy (recorded: it runs before the next
 * batch's commands). */
kipp_status kipp_vk_kv_create(kipp_vk *vk, const kipp_kv_layout *lay, uint32_t n_blocks, kipp_vk_kv **out,
                              char *err, size_t err_len);
void kipp_vk_kv_destroy(kipp_vk *vk, kipp_vk_kv *kv);
void kipp_vk_kv_copy(kipp_vk *vk, kipp_vk_kv *kv, uint32_t dst, uint32_t src);

#endif
