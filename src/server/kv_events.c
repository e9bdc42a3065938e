/* kv_events.c — vLLM's KV-event wire format over ZeroMQ: the block hash (CBOR, sha256),
 * the batch encoding (msgpack), a queue from the engine thread to the publisher thread, and
 * that thread's PUB socket, replay buffer and ROUTER socket. See kv_events.h. */
#include "server/kv_events.h"

#include "core/buf.h"
#include "core/error.h"

#include <cbor.h>
#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

typedef struct qnode {
    struct qnode *next;
    char *data;
    size_t len;
} qnode;

typedef struct {
    uint64_t seq;
    char *data;
    size_t len;
} sent_batch;

struct kipp_kv_pub {
    kipp_kv_event_sink sink;
    int hash_bytes;
    uint8_t none_hash[KIPP_KV_HASH_BYTES];
    unsigned char *cbor; /* engine thread: a block's CBOR */
    size_t cbor_cap;
    /* sockets: the publisher thread's once it runs */
    void *zctx, *pub, *replay;
    char *topic;
    size_t topic_len;
    int wake[2]; /* a byte on wake[1]: the queue has work (or stop) */
    pthread_t thread;
    int thread_started;
    /* the queue (mu) */
    pthread_mutex_t mu;
    qnode *q_head, *q_tail;
    uint32_t n_queued;
    int stop, warned_full;
    /* the publisher thread's */
    uint64_t next_seq;
    sent_batch *ring; /* [KIPP_KV_EVENTS_REPLAY_BATCHES] the last batches sent, oldest at ring_head */
    uint32_t ring_head, ring_n;
    size_t ring_bytes;
};

/* ---- the block hash --------------------------------------------------------------------- */

static void sha256(const void *data, size_t len, uint8_t out[KIPP_KV_HASH_BYTES]) {
    unsigned int n = 0;
    if (!EVP_Digest(data, len, out, &n, EVP_sha256(), NULL)) memset(out, 0, KIPP_KV_HASH_BYTES);
}

/* CBOR([parent, [tokens...], null]) as cbor2.dumps(..., canonical=True) writes it: each
 * integer in its shortest form. 0: out of memory. */
static size_t block_cbor(kipp_kv_pub *p, const uint8_t *parent, const int32_t *tok, uint32_t n) {
    const size_t need = 64 + (size_t)n * 9; /* headers, the parent, 9 bytes an integer at most */
    if (kipp_grow((void **)&p->cbor, &p->cbor_cap, need, 1) != KIPP_OK) return 0;
    unsigned char *b = p->cbor;
    size_t k = 0;
    k += cbor_encode_array_start(3, b + k, need - k);
    k += cbor_encode_bytestring_start(KIPP_KV_HASH_BYTES, b + k, need - k);
    memcpy(b + k, parent, KIPP_KV_HASH_BYTES);
    k += KIPP_KV_HASH_BYTES;
    k += cbor_encode_array_start(n, b + k, need - k);
    for (uint32_t i = 0; i < n; i++)
        k += tok[i] >= 0 ? cbor_encode_uint((uint64_t)tok[i], b + k, need - k)
                         : cbor_encode_negint((uint64_t)(-(int64_t)tok[i] - 1), b + k, need - k);
    k += cbor_encode_null(b + k, need - k);
    return k;
}

void kipp_kv_pub_block_hash(kipp_kv_pub *p, const uint8_t *parent, const int32_t *tokens,
                            uint32_t n, uint8_t out[KIPP_KV_HASH_BYTES]) {
    const size_t len = block_cbor(p, parent ? parent : p->none_hash, tokens, n);
    if (len) sha256(p->cbor, len, out);
    else memset(out, 0, KIPP_KV_HASH_BYTES); /* out of memory: a hash no one else has */
}

static void sink_hash(void *ud, const uint8_t *parent, const int32_t *tokens, uint32_t n,
                      uint8_t out[KIPP_KV_HASH_BYTES]) {
    kipp_kv_pub_block_hash(ud, parent, tokens, n, out);
}

/* ---- the batch (msgpack) ---------------------------------------------------------------- */

static int pack_key(msgpack_packer *pk, const char *s) { return msgpack_pack_str_with_body(pk, s, strlen(s)); }

static int pack_hash(const kipp_kv_pub *p, msgpack_packer *pk, const uint8_t *h) {
    if (p->hash_bytes) return msgpack_pack_bin_with_body(pk, h, KIPP_KV_HASH_BYTES);
    uint64_t v = 0; /* vLLM: int.from_bytes(digest, "big") & (2**64 - 1) */
    for (int i = KIPP_KV_HASH_BYTES - 8; i < KIPP_KV_HASH_BYTES; i++) v = v << 8 | h[i];
    return msgpack_pack_uint64(pk, v);
}

static int pack_hashes(const kipp_kv_pub *p, msgpack_packer *pk, const kipp_kv_event *e) {
    int r = pack_key(pk, "block_hashes") | msgpack_pack_array(pk, e->n_blocks);
    for (uint32_t b = 0; b < e->n_blocks; b++) r |= pack_hash(p, pk, e->hashes + (size_t)b * KIPP_KV_HASH_BYTES);
    return r;
}

/* One event as msgspec writes vLLM's tagged struct (omit_defaults: the fields with a
 * default are left out when they hold it; group_idx and the spec kind are set by vLLM). */
static int pack_event(const kipp_kv_pub *p, msgpack_packer *pk, const kipp_kv_event *e) {
    int r = 0;
    switch (e->type) {
    case KIPP_KVE_STORED: {
        const size_t n_tok = (size_t)e->n_blocks * e->block_size;
        r |= msgpack_pack_map(pk, 10) | pack_key(pk, "type") | pack_key(pk, "BlockStored");
        r |= pack_hashes(p, pk, e);
        r |= pack_key(pk, "parent_block_hash") | (e->parent ? pack_hash(p, pk, e->parent) : msgpack_pack_nil(pk));
        r |= pack_key(pk, "token_ids") | msgpack_pack_array(pk, n_tok);
        for (size_t i = 0; i < n_tok; i++) r |= msgpack_pack_int32(pk, e->tokens[i]);
        r |= pack_key(pk, "block_size") | msgpack_pack_uint32(pk, e->block_size);
        r |= pack_key(pk, "lora_id") | msgpack_pack_nil(pk);
        r |= pack_key(pk, "medium") | pack_key(pk, "GPU"); /* vLLM's MEDIUM_GPU: the engine's own KV */
        r |= pack_key(pk, "lora_name") | msgpack_pack_nil(pk);
        r |= pack_key(pk, "group_idx") | msgpack_pack_uint32(pk, 0);
        r |= pack_key(pk, "kv_cache_spec_kind") | pack_key(pk, "full_attention");
        break;
    }
    case KIPP_KVE_REMOVED:
        r |= msgpack_pack_map(pk, 4) | pack_key(pk, "type") | pack_key(pk, "BlockRemoved");
        r |= pack_hashes(p, pk, e);
        r |= pack_key(pk, "medium") | pack_key(pk, "GPU");
        r |= pack_key(pk, "group_idx") | msgpack_pack_uint32(pk, 0);
        break;
    case KIPP_KVE_CLEARED:
        r |= msgpack_pack_map(pk, 1) | pack_key(pk, "type") | pack_key(pk, "AllBlocksCleared");
        break;
    }
    return r;
}

static void sink_publish(void *ud, const kipp_kv_event *ev, uint32_t n) {
    kipp_kv_pub *p = ud;
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int r = msgpack_pack_array(&pk, 3) | msgpack_pack_double(&pk, (double)ts.tv_sec + ts.tv_nsec * 1e-9);
    r |= msgpack_pack_array(&pk, n);
    for (uint32_t k = 0; k < n; k++) r |= pack_event(p, &pk, &ev[k]);
    r |= msgpack_pack_uint32(&pk, 0); /* data_parallel_rank: Kipp is one rank */
    qnode *q = r == 0 ? malloc(sizeof *q) : NULL;
    if (!q) { /* out of memory: the batch is lost (a subscriber sees stale state, not a gap) */
        msgpack_sbuffer_destroy(&sb);
        return;
    }
    q->next = NULL;
    q->len = sb.size;
    q->data = msgpack_sbuffer_release(&sb);
    pthread_mutex_lock(&p->mu);
    if (p->n_queued >= KIPP_KV_EVENTS_QUEUE) {
        if (!p->warned_full)
            fprintf(stderr, "kipp-server: KV events: the publisher is %u batches behind; dropping "
                            "batches\n", KIPP_KV_EVENTS_QUEUE);
        p->warned_full = 1;
        pthread_mutex_unlock(&p->mu);
        free(q->data);
        free(q);
        return;
    }
    if (p->q_tail) p->q_tail->next = q;
    else p->q_head = q;
    p->q_tail = q;
    p->n_queued++;
    pthread_mutex_unlock(&p->mu);
    const char c = 1;
    if (write(p->wake[1], &c, 1) < 0) {} /* full pipe: the thread is awake already */
}

/* ---- the publisher thread --------------------------------------------------------------- */

static void seq_bytes(uint64_t seq, unsigned char out[8]) {
    for (int i = 7; i >= 0; i--, seq >>= 8) out[i] = (unsigned char)seq;
}

static void ring_push(kipp_kv_pub *p, uint64_t seq, char *data, size_t len) {
    while (p->ring_n && (p->ring_n == KIPP_KV_EVENTS_REPLAY_BATCHES ||
                         p->ring_bytes + len > KIPP_KV_EVENTS_REPLAY_BYTES)) {
        sent_batch *o = &p->ring[p->ring_head];
        p->ring_bytes -= o->len;
        free(o->data);
        p->ring_head = (p->ring_head + 1) % KIPP_KV_EVENTS_REPLAY_BATCHES;
        p->ring_n--;
    }
    sent_batch *b = &p->ring[(p->ring_head + p->ring_n) % KIPP_KV_EVENTS_REPLAY_BATCHES];
    *b = (sent_batch){seq, data, len};
    p->ring_n++;
    p->ring_bytes += len;
}

static void send_batch(kipp_kv_pub *p, qnode *q) {
    unsigned char sb[8];
    const uint64_t seq = p->next_seq++;
    seq_bytes(seq, sb);
    zmq_send(p->pub, p->topic, p->topic_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(p->pub, sb, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(p->pub, q->data, q->len, ZMQ_DONTWAIT);
    if (p->replay) ring_push(p, seq, q->data, q->len); /* the ring owns it now */
    else free(q->data);
    free(q);
}

/* One replay request: [identity, empty, start sequence (big-endian, at most 8 bytes)]. As
 * vLLM does, any other shape is ignored; the answer is every buffered batch from start,
 * then the end marker. */
static void serve_replay(kipp_kv_pub *p) {
    zmq_msg_t f[4]; /* f[3]: the frames past three, dropped */
    for (int i = 0; i < 4; i++) zmq_msg_init(&f[i]);
    int n = 0;
    for (;;) {
        zmq_msg_t *m = &f[n < 3 ? n : 3];
        if (zmq_msg_recv(m, p->replay, ZMQ_DONTWAIT) < 0) break;
        n++;
        if (!zmq_msg_more(m)) break;
    }
    const int ok = n == 3 && zmq_msg_size(&f[2]) <= 8;
    if (ok) {
        uint64_t start = 0;
        const unsigned char *s = zmq_msg_data(&f[2]);
        for (size_t i = 0; i < zmq_msg_size(&f[2]); i++) start = start << 8 | s[i];
        const void *id = zmq_msg_data(&f[0]);
        const size_t id_len = zmq_msg_size(&f[0]);
        for (uint32_t k = 0; k < p->ring_n; k++) {
            const sent_batch *b = &p->ring[(p->ring_head + k) % KIPP_KV_EVENTS_REPLAY_BATCHES];
            if (b->seq < start) continue;
            unsigned char sb[8];
            seq_bytes(b->seq, sb);
            zmq_send(p->replay, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(p->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(p->replay, sb, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
            zmq_send(p->replay, b->data, b->len, ZMQ_DONTWAIT);
        }
        static const unsigned char end[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        zmq_send(p->replay, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(p->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(p->replay, end, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(p->replay, "", 0, ZMQ_DONTWAIT);
    }
    for (int i = 0; i < 4; i++) zmq_msg_close(&f[i]);
}

static void *pub_main(void *arg) {
    kipp_kv_pub *p = arg;
    for (;;) {
        zmq_pollitem_t it[2] = {{NULL, p->wake[0], ZMQ_POLLIN, 0}, {p->replay, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, p->replay ? 2 : 1, -1) < 0 && zmq_errno() != EINTR) break;
        char buf[256];
        while (read(p->wake[0], buf, sizeof buf) > 0) {}
        pthread_mutex_lock(&p->mu);
        qnode *q = p->q_head;
        p->q_head = p->q_tail = NULL;
        p->n_queued = 0;
        const int stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        while (q) {
            qnode *nx = q->next;
            send_batch(p, q);
            q = nx;
        }
        if (p->replay && (it[1].revents & ZMQ_POLLIN)) serve_replay(p);
        if (stop) break;
    }
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------------------- */

static kipp_status zfail(char *err, size_t err_len, const char *what, const char *endpoint) {
    return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "KV events: cannot %s '%s': %s", what,
                     endpoint, zmq_strerror(zmq_errno()));
}

kipp_status kipp_kv_pub_start(const kipp_kv_pub_params *pp, kipp_kv_pub **out, char *err,
                              size_t err_len) {
    *out = NULL;
    if (!pp->endpoint || !*pp->endpoint)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "KV events: no endpoint");
    kipp_kv_pub *p = calloc(1, sizeof *p);
    if (!p) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "KV events: out of memory");
    p->wake[0] = p->wake[1] = -1;
    pthread_mutex_init(&p->mu, NULL);
    kipp_status st;
    const char *topic = pp->topic ? pp->topic : "";
    const char *seed = pp->hash_seed ? pp->hash_seed : "0";
    p->hash_bytes = pp->hash_bytes;
    p->topic = strdup(topic);
    p->topic_len = strlen(topic);
    p->ring = calloc(KIPP_KV_EVENTS_REPLAY_BATCHES, sizeof *p->ring);
    if (!p->topic || !p->ring || pipe(p->wake) != 0) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "KV events: out of memory");
        goto fail;
    }
    fcntl(p->wake[0], F_SETFL, O_NONBLOCK);
    fcntl(p->wake[1], F_SETFL, O_NONBLOCK);
    { /* NONE_HASH = sha256(CBOR(seed)), as vLLM's init_none_hash with PYTHONHASHSEED set */
        const size_t len = strlen(seed);
        unsigned char *b = malloc(len + 16);
        if (!b) {
            st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "KV events: out of memory");
            goto fail;
        }
        const size_t k = cbor_encode_string_start(len, b, len + 16);
        memcpy(b + k, seed, len);
        sha256(b, k + len, p->none_hash);
        free(b);
    }
    p->zctx = zmq_ctx_new();
    if (!p->zctx || !(p->pub = zmq_socket(p->zctx, ZMQ_PUB))) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "KV events: cannot open a ZeroMQ socket: %s",
                       zmq_strerror(zmq_errno()));
        goto fail;
    }
    const int hwm = KIPP_KV_EVENTS_HWM, linger = 500; /* ms to send what is queued at exit */
    zmq_setsockopt(p->pub, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(p->pub, ZMQ_LINGER, &linger, sizeof linger);
    const char *e = pp->endpoint;
    const int bind = strchr(e, '*') || strstr(e, "::") || !strncmp(e, "ipc://", 6) || !strncmp(e, "inproc://", 9);
    if ((bind ? zmq_bind(p->pub, e) : zmq_connect(p->pub, e)) != 0) {
        st = zfail(err, err_len, bind ? "bind" : "connect to", e);
        goto fail;
    }
    if (pp->replay && *pp->replay) {
        const int zero = 0;
        if (!(p->replay = zmq_socket(p->zctx, ZMQ_ROUTER))) {
            st = zfail(err, err_len, "open a socket for", pp->replay);
            goto fail;
        }
        zmq_setsockopt(p->replay, ZMQ_LINGER, &zero, sizeof zero);
        /* a whole buffer's replay and its end marker fit in the queue to one peer (a ROUTER
         * drops what is past its high-water mark) */
        const int rhwm = KIPP_KV_EVENTS_REPLAY_BATCHES + 16;
        zmq_setsockopt(p->replay, ZMQ_SNDHWM, &rhwm, sizeof rhwm);
        if (zmq_bind(p->replay, pp->replay) != 0) {
            st = zfail(err, err_len, "bind the replay endpoint", pp->replay);
            goto fail;
        }
    }
    p->sink = (kipp_kv_event_sink){.ud = p, .hash = sink_hash, .publish = sink_publish};
    if (pthread_create(&p->thread, NULL, pub_main, p) != 0) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "KV events: cannot start the publisher thread");
        goto fail;
    }
    p->thread_started = 1;
    *out = p;
    return KIPP_OK;
fail:
    kipp_kv_pub_free(p);
    return st;
}

const kipp_kv_event_sink *kipp_kv_pub_sink(kipp_kv_pub *p) { return &p->sink; }

void kipp_kv_pub_free(kipp_kv_pub *p) {
    if (!p) return;
    if (p->thread_started) {
        pthread_mutex_lock(&p->mu);
        p->stop = 1;
        pthread_mutex_unlock(&p->mu);
        const char c = 1;
        if (write(p->wake[1], &c, 1) < 0) {}
        pthread_join(p->thread, NULL);
    }
    for (qnode *q = p->q_head, *nx; q; q = nx) {
        nx = q->next;
        free(q->data);
        free(q);
    }
    if (p->pub) zmq_close(p->pub);
    if (p->replay) zmq_close(p->replay);
    if (p->zctx) zmq_ctx_term(p->zctx);
    for (uint32_t k = 0; p->ring && k < p->ring_n; k++)
        free(p->ring[(p->ring_head + k) % KIPP_KV_EVENTS_REPLAY_BATCHES].data);
    free(p->ring);
    if (p->wake[0] >= 0) close(p->wake[0]);
    if (p->wake[1] >= 0) close(p->wake[1]);
    pthread_mutex_destroy(&p->mu);
    free(p->topic);
    free(p->cbor);
    free(p);
}
