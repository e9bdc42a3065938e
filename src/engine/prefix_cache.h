/* prefix_cache.h — automatic prefix caching over a context's paged KV pool. A finished
 * sequence is kept (truncated to whole blocks) instead of freed; its blocks are keyed by a
 * chained hash of the token prefix they hold. A new prompt that starts with cached blocks
 * forks that sequence (copy-on-write, refcounted: no K/V is copied) and prefills only the
 * rest. Entries are evicted least recently used. Hits are verified token by token, so a hash
 * collision costs a miss, never a wrong answer. Not thread-safe: the scheduler's engine
 * thread owns it, like the context. Design: docs/server.md ("Prefix cache"). */
#ifndef KIPP_ENGINE_PREFIX_CACHE_H
#define KIPP_ENGINE_PREFIX_CACHE_H

#include "kipp.h"

#include <stdint.h>

typedef struct kipp_prefix_cache kipp_prefix_cache;
typedef struct kipp_kvt kipp_kvt;

typedef struct {
    uint64_t lookups;        /* kipp_pc_note_lookup calls (admitted prompts) */
    uint64_t hits;           /* ... that reused at least one block */
    uint64_t lookup_tokens;  /* prompt tokens looked up */
    uint64_t hit_tokens;     /* ... served from the cache */
    uint64_t inserts, evictions;
    uint32_t n_entries;
    uint32_t n_blocks_cached_only; /* blocks held by cache entries and no live request */
} kipp_pc_stats;

/* max_entries > 0 sequences are kept at most. The cache borrows ctx for its lifetime. */
kipp_status kipp_pc_init(kipp_ctx *ctx, uint32_t max_entries, kipp_prefix_cache **out, char *err,
                         size_t err_len);
/* KV-cache events (engine/kv_track.h): the cache tells kvt of every sequence it forks,
 * truncates or frees (NULL: none, the default). kvt must outlive the cache. */
void kipp_pc_set_tracker(kipp_prefix_cache *pc, kipp_kvt *kvt);
/* Frees every cached sequence, then the cache. NULL is a no-op. */
void kipp_pc_free(kipp_prefix_cache *pc);

/* The longest cached prefix of tokens[0..n-1] in whole blocks, at most n - 1 tokens (the last
 * prompt token is always computed: its logits are needed). On a hit a new sequence holding
 * those tokens' K/V is created in *seq and the matched token count returned; 0 means a miss
 * and *seq is untouched. Errors (out of sequence memory) count as a miss. Statistics are
 * not touched: the caller reports the lookups it keeps with kipp_pc_note_lookup (a request
 * that has to wait for memory may look up several times). */
uint32_t kipp_pc_acquire(kipp_prefix_cache *pc, const int32_t *tokens, uint32_t n, uint32_t *seq);
void kipp_pc_note_lookup(kipp_prefix_cache *pc, uint32_t n_tokens, uint32_t n_hit);

/* Takes ownership of sequence seq, whose KV holds tokens[0..n-1]: keeps its whole blocks as
 * an entry (evicting the least recently used entry when full), or frees it when it has no
 * whole block or adds nothing to what is cached. Always consumes seq. */
void kipp_pc_insert(kipp_prefix_cache *pc, uint32_t seq, const int32_t *tokens, uint32_t n);

/* Drops the least recently used entry. Returns 0 when the cache is empty. */
int kipp_pc_evict_one(kipp_prefix_cache *pc);

void kipp_pc_get_stats(const kipp_prefix_cache *pc, kipp_pc_stats *out);

#endif
