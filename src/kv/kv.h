/* kv.h — the paged KV cache's bookkeeping: a pool of fixed-size blocks shared by all
 * sequences, one block table per sequence, refcounts, copy-on-write decisions for forked
 * prefixes, truncation and memory accounting. The K/V bytes are the backend's (its
 * kv_alloc, src/backend/backend.h): the pool holds the storage handle and asks the backend
 * to copy a block on write; the backends turn block tables into addresses (host backends:
 * kipp_host_kv_row in src/backend/host_kv.h). Design, fault hook and fault matrix:
 * docs/kv-cache.md. Does not compute attention and does not hash prefixes
 * (src/engine/prefix_cache.c does). */
#ifndef KIPP_KV_H
#define KIPP_KV_H

#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

typedef enum { KIPP_KV_K = 0, KIPP_KV_V = 1 } kipp_kv_part;
/* Writes store this step's K/V; reads are attention's. The fault build perturbs reads only. */
typedef enum { KIPP_KV_WRITE = 0, KIPP_KV_READ = 1 } kipp_kv_access;

typedef struct {
    uint32_t block_size;         /* tokens per block; 0 = KIPP_KV_DEFAULT_BLOCK_SIZE */
    uint32_t n_blocks;           /* blocks in the pool (> 0) */
    uint64_t bytes_per_token;    /* K + V of one token in the storage (accounting only) */
} kipp_kv_params;

/* The backend's storage behind a pool: an opaque handle and the one operation the pool's
 * bookkeeping needs, a block copy (copy-on-write). */
typedef struct {
    void *ctx;   /* the backend's state */
    void *store; /* the backend's storage handle */
    void (*copy_block)(void *ctx, void *store, uint32_t dst, uint32_t src);
} kipp_kv_storage;

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

/* Fields are read by the backends' addressing functions (inline, on the attention hot
 * path); change them only through the kipp_kv_* functions. */
typedef struct kipp_kv_pool {
    uint32_t block_size, n_blocks;
    uint64_t bytes_per_token;
    kipp_kv_storage storage;
    uint32_t *refs;      /* [n_blocks] sequences whose table holds the block; 0 = free */
    uint32_t *free_ids;  /* [n_blocks] stack of free blocks, top at free_ids[n_free-1] */
    uint32_t n_free;
    kipp_kv_seq *seqs;   /* [seq_cap] indexed by sequence id; dead slots are reused */
    uint32_t seq_cap;
} kipp_kv_pool;

/* A pool over storage st (which must hold p->n_blocks blocks of p->block_size tokens). */
kipp_status kipp_kv_pool_init(const kipp_kv_params *p, const kipp_kv_storage *st,
                              kipp_kv_pool **out, char *err, size_t err_len);
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

/* Bytes of one K or V element of a KV type (f32: 4, f16/bf16: 2; 0 for DEFAULT and the
 * block-quantized types, which have no per-element size: kipp_kv_row_bytes). */
size_t kipp_kv_type_size(kipp_kv_type t);
/* Values per block of the quantized KV types (ggml's QK8_0 = QK4_0 = 32); a row of kv_dim
 * values is kv_dim / 32 blocks, and head_dim must be a multiple of it (no block straddles
 * two heads). */
#define KIPP_KV_QBLOCK 32u
/* 1 for q8_0 and q4_0. */
int kipp_kv_type_quantized(kipp_kv_type t);
/* Bytes of n values of type t (n a multiple of KIPP_KV_QBLOCK for the quantized types):
 * f32 4n, f16/bf16 2n, q8_0 34n/32, q4_0 18n/32. */
uint64_t kipp_kv_row_bytes(kipp_kv_type t, uint64_t n);

/* Accounting: blocks, slots, bytes (see kipp_kv_stats in kipp.h). */
void kipp_kv_pool_stats(const kipp_kv_pool *pool, kipp_kv_stats *out);

#endif
