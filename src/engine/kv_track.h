/* kv_track.h — the bookkeeping behind KV-cache events: which whole blocks the sequences of
 * a context hold, named by a chained content hash, with a holder count per hash. A block is
 * announced (stored) when its first holder fills it and withdrawn (removed) when its last
 * holder drops it, so two sequences that compute or share the same block announce it once.
 * Holders are the context's sequences: running requests and the prefix cache's kept ones
 * (a fork shares its source's blocks, a truncation or a free drops them). Events are kept
 * in order and handed to a sink once per engine step (kipp_kvt_flush).
 *
 * The hash and the wire format are the sink's (src/server/kv_events.c: vLLM's sha256 over
 * CBOR, msgpack over ZeroMQ); this file links no library. Not thread-safe: the scheduler's
 * engine thread owns it, like the context. Every function is a no-op on a NULL tracker, so
 * a scheduler without events pays one test per sequence operation. Design: docs/server.md
 * ("KV-cache events"). */
#ifndef KIPP_ENGINE_KV_TRACK_H
#define KIPP_ENGINE_KV_TRACK_H

#include <stdint.h>

#define KIPP_KV_HASH_BYTES 32

typedef enum { KIPP_KVE_STORED = 0, KIPP_KVE_REMOVED, KIPP_KVE_CLEARED } kipp_kv_event_type;

/* One event, valid during the sink's publish call. */
typedef struct {
    kipp_kv_event_type type;
    uint32_t n_blocks;      /* STORED, REMOVED: hashes */
    const uint8_t *hashes;  /* [n_blocks][KIPP_KV_HASH_BYTES], in chain order for STORED */
    const uint8_t *parent;  /* STORED: the hash of the block before the first; NULL: none */
    const int32_t *tokens;  /* STORED: [n_blocks * block_size] the blocks' tokens */
    uint32_t block_size;
} kipp_kv_event;

typedef struct {
    void *ud;
    /* out = the hash of a block of n tokens whose predecessor's hash is parent (NULL: the
     * first block of a sequence) */
    void (*hash)(void *ud, const uint8_t *parent, const int32_t *tokens, uint32_t n,
                 uint8_t out[KIPP_KV_HASH_BYTES]);
    /* one engine step's events, in order (n >= 1; engine thread) */
    void (*publish)(void *ud, const kipp_kv_event *ev, uint32_t n);
} kipp_kv_event_sink;

typedef struct kipp_kvt kipp_kvt;

/* A tracker for blocks of block_size tokens. Its first batch starts with AllBlocksCleared
 * (nothing is cached at start-up), sent with the first blocks stored rather than alone at
 * once: a subscriber that connects while the server starts (a router reconnecting to a
 * restarted replica) still sees it. NULL when out of memory. The sink is copied. */
kipp_kvt *kipp_kvt_new(uint32_t block_size, const kipp_kv_event_sink *sink);
void kipp_kvt_free(kipp_kvt *t);

/* Sequence operations, called after the context's succeeded. */
void kipp_kvt_fork(kipp_kvt *t, uint32_t src, uint32_t dst);       /* dst shares src's blocks */
void kipp_kvt_truncate(kipp_kvt *t, uint32_t seq, uint32_t n_keep); /* whole blocks past n_keep go */
void kipp_kvt_drop(kipp_kvt *t, uint32_t seq);                      /* the sequence was freed */
/* The sequence's KV holds tokens[0..n_fed): blocks that filled since the last call are
 * hashed and held (announced when new). Memory failures lose announcements, never memory. */
void kipp_kvt_fill(kipp_kvt *t, uint32_t seq, const int32_t *tokens, uint32_t n_fed);
/* Hands the events gathered since the last flush to the sink as one batch (none: nothing). */
void kipp_kvt_flush(kipp_kvt *t);

/* Blocks with at least one holder (for tests). */
uint32_t kipp_kvt_n_blocks(const kipp_kvt *t);

#endif
