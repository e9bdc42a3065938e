/* kv_events.h — KV-cache events on the wire, as vLLM publishes them (its ZmqEventPublisher in
 * vllm/distributed/kv_events.py), so that routers written for vLLM (vllm-router's kv_aware
 * policy, llm-d's KV-cache indexer, Dynamo) follow a Kipp replica's cache:
 *
 * - a ZeroMQ PUB socket sends each engine step's events as one multipart message
 *   [topic, sequence number (8 bytes, big-endian, from 0), payload];
 * - the payload is a msgpack KVEventBatch: the array [ts, events, data_parallel_rank (0)],
 *   each event a map tagged by "type": BlockStored {block_hashes, parent_block_hash,
 *   token_ids, block_size, lora_id: nil, medium: "GPU", lora_name: nil, group_idx: 0,
 *   kv_cache_spec_kind: "full_attention"}, BlockRemoved {block_hashes, medium, group_idx},
 *   AllBlocksCleared {};
 * - block hashes are vLLM's sha256_cbor chain: sha256(CBOR([parent, [tokens...], null]))
 *   with the first block's parent NONE_HASH = sha256(CBOR(seed string)), the seed being what
 *   vLLM reads from PYTHONHASHSEED; on the wire the digest's last 8 bytes as an unsigned
 *   integer (vLLM's default, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1) or the 32 bytes;
 * - an optional ROUTER socket answers a replay request (one frame: the first wanted
 *   sequence number, 8 bytes big-endian) with every buffered batch from there, each as
 *   [sequence number, payload], then the end marker [-1 as 8 bytes, empty].
 *
 * The engine thread encodes (CBOR with libcbor, sha256 with OpenSSL, msgpack with msgpack-c)
 * and queues; a publisher thread owns the sockets. Nothing here reads client input except
 * token ids, through the scheduler. Design: docs/server.md ("KV-cache events"). */
#ifndef KIPP_SERVER_KV_EVENTS_H
#define KIPP_SERVER_KV_EVENTS_H

#include "engine/kv_track.h"
#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

#define KIPP_KV_EVENTS_REPLAY_BATCHES 10000     /* vLLM's buffer_steps */
#define KIPP_KV_EVENTS_REPLAY_BYTES (64u << 20) /* and at most this many bytes of them */
#define KIPP_KV_EVENTS_QUEUE 100000             /* vLLM's max_queue_size (then dropped) */
#define KIPP_KV_EVENTS_HWM 100000               /* vLLM's hwm on the PUB socket */

typedef struct {
    const char *endpoint;  /* PUB: bound when it holds '*' or "::" or is ipc:// or inproc://,
                              else connected (vLLM's rule) */
    const char *replay;    /* ROUTER endpoint, bound; NULL: no replay */
    const char *topic;     /* NULL or "": vLLM's default, the empty topic */
    const char *hash_seed; /* NONE_HASH's seed (vLLM: PYTHONHASHSEED); NULL: "0" */
    int hash_bytes;        /* 1: the 32-byte digests; 0: the last 8 bytes as an integer */
} kipp_kv_pub_params;

typedef struct kipp_kv_pub kipp_kv_pub;

/* Opens and binds (or connects) the sockets and starts the publisher thread. Errors name
 * the endpoint and ZeroMQ's reason (a malformed endpoint, an address in use). */
kipp_status kipp_kv_pub_start(const kipp_kv_pub_params *p, kipp_kv_pub **out, char *err,
                              size_t err_len);
/* The sink for kipp_sched_params.kv_events (valid while the publisher lives). */
const kipp_kv_event_sink *kipp_kv_pub_sink(kipp_kv_pub *pub);
/* Sends what is queued, stops the thread, closes the sockets. NULL: no-op. Call after the
 * scheduler that feeds it has stopped. */
void kipp_kv_pub_free(kipp_kv_pub *pub);

/* The block hash (exposed for tests): out = sha256(CBOR([parent or NONE_HASH, tokens, null])). */
void kipp_kv_pub_block_hash(kipp_kv_pub *pub, const uint8_t *parent, const int32_t *tokens,
                            uint32_t n, uint8_t out[KIPP_KV_HASH_BYTES]);

#endif
