/* host_kv.h — KV storage in host memory, shared by the host backends (cpu-ref, cpu): the
 * block array of a KV type for K and one for V (f32, f16, bf16, q8_0, q4_0), its allocation (pages are touched on first
 * use, not at allocation), the block copy the pool asks for on copy-on-write, the row
 * conversions to and from f32, and THE addressing function kipp_host_kv_row() that turns a
 * sequence's block table into the address of a K/V row. The fault-injection build plants
 * its addressing bugs here (docs/kv-cache.md), so every host backend's reads go through
 * them. The pool's bookkeeping (tables, refcounts, copy-on-write decisions) is src/kv. */
#ifndef KIPP_HOST_KV_H
#define KIPP_HOST_KV_H

#include "backend/backend.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    unsigned char *data; /* [n_blocks] x (K [n_layer][block_size] rows, V [n_layer][block_size] rows) */
    kipp_kv_type type;   /* K's type: F32, F16, BF16, Q8_0 or Q4_0 */
    kipp_kv_type type_v; /* V's type (the same set; equal to type unless asked otherwise) */
    uint32_t n_layer, kv_dim, block_size, n_blocks;
    size_t row_bytes[2];  /* one K row, one V row: kipp_kv_row_bytes(type, kv_dim) */
    size_t part_bytes[2]; /* one part (K, V) of a block: n_layer * block_size * row_bytes */
    size_t block_bytes;   /* part_bytes[0] + part_bytes[1] */
    int fault;           /* KIPP_FAULT mode in the fault-injection build; always 0 otherwise */
} kipp_host_kv;

/* The type of part (K or V) of the storage. */
static inline kipp_kv_type kipp_host_kv_type(const kipp_host_kv *kv, kipp_kv_part part) {
    return part == KIPP_KV_K ? kv->type : kv->type_v;
}

/* The backend ops' KV storage entries, identical for every host backend (backend.h). */
kipp_status kipp_host_kv_alloc(void *state, const kipp_kv_layout *lay, uint32_t n_blocks,
                               void **store, char *err, size_t err_len);
void kipp_host_kv_free(void *state, void *store);
void kipp_host_kv_copy_block(void *state, void *store, uint32_t dst, uint32_t src);
/* Checks a KV layout (types F32/F16/BF16/Q8_0/Q4_0, kv_dim a multiple of 32 for the
 * quantized ones, no zero dimension) and sizes it with overflow checks: the K part of a
 * block (the V part too where type_v == type) and the whole storage of n_blocks, in bytes.
 * Shared by every backend's kv_alloc; `who` names the storage in the unsupported-type
 * message. */
kipp_status kipp_kv_layout_size(const kipp_kv_layout *lay, uint32_t n_blocks, const char *who,
                                uint64_t *part_bytes, uint64_t *total_bytes, char *err,
                                size_t err_len);
/* Physical memory of this machine (the host backends' memory query). */
kipp_status kipp_host_memory(const kipp_backend_options *o, kipp_backend_memory *out, char *err,
                             size_t err_len);

/* Row conversions. put: n f32 values into a row of type t (f16/bf16: round to nearest
 * even; q8_0/q4_0: ggml's reference quantizer, core/quantize.c, n a multiple of 32); get: a
 * row of type t into n f32 values (exact for every type: a q8_0/q4_0 value is its f16
 * scale times a small integer); round: x through type t and back (what a put + get does),
 * in place — the recomputation paths use it so they see the cache's values. */
void kipp_host_kv_put(kipp_kv_type t, void *dst, const float *src, uint32_t n);
void kipp_host_kv_get(kipp_kv_type t, float *dst, const void *src, uint32_t n);
void kipp_kv_round(kipp_kv_type t, float *x, uint32_t n);

/* ---- the addressing function ------------------------------------------------------------ */

/* The K or V row (kv_dim elements of the part's type) of `layer` at logical position pos of
 * sequence s. The caller guarantees pos < s->n_tokens (kipp_kv_grow made the room) and, for
 * writes, that the block is private to s (kipp_kv_grow copied it if it was shared). The
 * identity layout is this same path with blocks[i] == i. */
static inline void *kipp_host_kv_row(const kipp_host_kv *kv, const kipp_kv_seq *s, uint32_t layer,
                                     uint32_t pos, kipp_kv_part part, kipp_kv_access access) {
    const uint32_t lblock = pos / kv->block_size;
    uint32_t slot = pos % kv->block_size;
    uint32_t block = s->blocks[lblock];
    (void)access;
#ifdef KIPP_FAULT_INJECT
    /* Planted bugs for the fault matrix (docs/kv-cache.md); reads only, never writes. */
    if (access == KIPP_KV_READ) {
        switch (kv->fault) {
        case 1: block = lblock % kv->n_blocks; break;               /* read-block: table ignored */
        case 2: slot = slot ? slot - 1 : 0; break;                  /* read-slot: one slot early */
        case 3:                                                      /* rollover into phys + 1 */
            if (slot == kv->block_size - 1) { block = (block + 1) % kv->n_blocks; slot = 0; }
            break;
        case 4: part = part == KIPP_KV_K ? KIPP_KV_V : KIPP_KV_K; break; /* K/V swap */
        default: break;
        }
    }
#endif
    return kv->data + (size_t)block * kv->block_bytes + (part == KIPP_KV_K ? 0 : kv->part_bytes[0]) +
           ((size_t)layer * kv->block_size + slot) * kv->row_bytes[part];
}

#endif
