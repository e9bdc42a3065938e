/* kv.h — the paged KV cache: a pool of fixed-size blocks shared by all sequences, one block
 * table per sequence, refcounts with copy-on-write for forked prefixes, and THE addressing
 * function kipp_kv_row() through which every K/V row is written and read. Design, the
 * fault-injection hook and the fault matrix: docs/kv-cache.md. Does not compute attention
 * (the backends do) and does not hash prefixes (the engine's prefix cache will). */
#ifndef KIPP_KV_H
#define KIPP_KV_H

#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { KIPP_KV_K = 0, KIPP_KV_V = 1 } kipp_kv_part;
/* Writes store this step's K/V; reads are attention's. The fault build perturbs reads only. */
typedef enum { KIPP_KV_WRITE = 0, KIPP_KV_READ = 1 } kipp_kv_access;

typedef struct {
    uint32_t n_layer;    /* layers whose K and V every block holds */
    uint32_t kv_dim;     /* floats per K (or V) row: n_head_kv * head_dim */
    uint32_t block_size; /* tokens per block; 0 = KIPP_KV_DEFAULT_BLOCK_SIZE */
    uint32_t n_blocks;   /* blocks in the pool (> 0) */
} kipp_kv_params;

#define KIPP_KV_DEFAULT_BLOCK_SIZE 16u

/* One sequence's block table. Logical block i (positions i*block_size ...) lives in
 * physical block blocks[i]. Invariant: n_blocks == ceil(n_tokens / block_size). */
typedef struct {
    uint32_t *blocks;  /* [cap] physical block ids */
    uint32_t n_blocks; /* entries in use */
    uint32_t cap;
    uint32_t n_tokens; /* positions 0..n_tokens-1 hold K/V */
    int live;
} kipp_kv_seq;

/* Fields are read by kipp_kv_row() (inline, on the attention hot path); change them only
 * through the kipp_kv_* functions. */
typedef struct kipp_kv_pool {
    uint32_t n_layer, kv_dim, block_size, n_blocks;
    size_t part_floats;  /* floats in one part (K or V) of a block: n_layer*block_size*kv_dim */
    float *data;         /* [n_blocks][2 (K, V)][n_layer][block_size][kv_dim] */
    uint32_t *refs;      /* [n_blocks] sequences whose table holds the block; 0 = free */
    uint32_t *free_ids;  /* [n_blocks] stack of free blocks, top at free_ids[n_free-1] */
    uint32_t n_free;
    kipp_kv_seq *seqs;   /* [seq_cap] indexed by sequence id; dead slots are reused */
    uint32_t seq_cap;
    int fault;           /* KIPP_FAULT mode in the fault-injection build; always 0 otherwise */
} kipp_kv_pool;

kipp_status kipp_kv_pool_init(const kipp_kv_params *p, kipp_kv_pool **out, char *err,
                              size_t err_len);
void kipp_kv_pool_free(kipp_kv_pool *pool);

/* Blocks a sequence of n_tokens positions occupies. */
static inline uint32_t kipp_kv_blocks_for(const kipp_kv_pool *pool, uint32_t n_tokens) {
    return (uint32_t)(((uint64_t)n_tokens + pool->block_size - 1) / pool->block_size);
}

/* ---- sequences -------------------------------------------------------------------------- */

/* A new empty sequence (no blocks yet). Fails only for memory. */
kipp_status kipp_kv_seq_new(kipp_kv_pool *pool, uint32_t *id, char *err, size_t err_len);
/* A new sequence sharing every block of src (refcounts + 1): no K/V is copied until one of
 * them writes into a shared block. */
kipp_status kipp_kv_seq_fork(kipp_kv_pool *pool, uint32_t src, uint32_t *dst, char *err,
                             size_t err_len);
/* Drops the sequence and releases its blocks. */
kipp_status kipp_kv_seq_free(kipp_kv_pool *pool, uint32_t id, char *err, size_t err_len);
/* Keeps positions 0..n_keep-1: blocks past the last kept one are released (refcount - 1). */
kipp_status kipp_kv_seq_truncate(kipp_kv_pool *pool, uint32_t id, uint32_t n_keep, char *err,
                                 size_t err_len);
/* Makes room for n_new more positions in each of the n sequences ids[] (distinct): new
 * blocks are taken from the pool and a shared block about to be written is first copied to
 * a private one. n_tokens grows by n_new[i]. All or nothing: when the pool is short of
 * blocks the status is KIPP_ERR_KV_FULL and nothing changed. */
kipp_status kipp_kv_grow(kipp_kv_pool *pool, const uint32_t *ids, const uint32_t *n_new,
                         uint32_t n, char *err, size_t err_len);

/* The live sequence `id`, or NULL. Valid until the next kipp_kv_seq_new/fork (the table of
 * sequences may move). */
static inline const kipp_kv_seq *kipp_kv_seq_get(const kipp_kv_pool *pool, uint32_t id) {
    return id < pool->seq_cap && pool->seqs[id].live ? &pool->seqs[id] : NULL;
}

/* Accounting: blocks, slots, bytes (see kipp_kv_stats in kipp.h). */
void kipp_kv_pool_stats(const kipp_kv_pool *pool, kipp_kv_stats *out);

/* ---- the addressing function ------------------------------------------------------------ */

/* The K or V row (kv_dim floats) of `layer` at logical position pos of sequence s. The
 * caller guarantees pos < s->n_tokens (kipp_kv_grow made the room) and, for writes, that the
 * block is private to s (kipp_kv_grow copied it if it was shared). The identity layout is
 * this same path with blocks[i] == i. */
static inline float *kipp_kv_row(const kipp_kv_pool *pool, const kipp_kv_seq *s, uint32_t layer,
                                 uint32_t pos, kipp_kv_part part, kipp_kv_access access) {
    const uint32_t lblock = pos / pool->block_size;
    uint32_t slot = pos % pool->block_size;
    uint32_t block = s->blocks[lblock];
    (void)access;
#ifdef KIPP_FAULT_INJECT
    /* Planted bugs for the fault matrix (docs/kv-cache.md); reads only, never writes. */
    if (access == KIPP_KV_READ) {
        switch (pool->fault) {
        case 1: block = lblock % pool->n_blocks; break;             /* read-block: table ignored */
        case 2: slot = slot ? slot - 1 : 0; break;                  /* read-slot: one slot early */
        case 3:                                                      /* rollover into phys + 1 */
            if (slot == pool->block_size - 1) { block = (block + 1) % pool->n_blocks; slot = 0; }
            break;
        case 4: part = part == KIPP_KV_K ? KIPP_KV_V : KIPP_KV_K; break; /* K/V swap */
        default: break;
        }
    }
#endif
    return pool->data + (size_t)block * 2 * pool->part_floats + (size_t)part * pool->part_floats +
           ((size_t)layer * pool->block_size + slot) * pool->kv_dim;
}

#endif
