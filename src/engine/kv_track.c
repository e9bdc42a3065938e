/* kv_track.c — held blocks by content hash (chained buckets over a growable entry array,
 * entries recycled through a free list), each sequence's chain of held blocks, and the
 * step's events in two arenas (hashes, tokens) addressed by offset until the flush.
 * See kv_track.h. */
#include "engine/kv_track.h"

#include "core/buf.h"

#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define HB KIPP_KV_HASH_BYTES

typedef struct {
    uint8_t h[HB];
    uint32_t holders; /* 0: on the free list */
    uint32_t next;    /* bucket chain, or the free list */
} kvt_block;

typedef struct {
    uint32_t *blk; /* [n] entries of its blocks 0..n-1 */
    uint32_t n;
    size_t cap;
} kvt_seq;

typedef struct {
    kipp_kv_event_type type;
    uint32_t n_blocks;
    size_t hash_off;   /* into hash arena: n_blocks hashes */
    size_t parent_off; /* SIZE_MAX: none */
    size_t tok_off;
} kvt_ev;

struct kipp_kvt {
    uint32_t bs;
    kipp_kv_event_sink sink;
    kvt_block *b;
    size_t cap_b;
    uint32_t n_b, free_head, n_live;
    uint32_t *bucket; /* [n_bucket] a power of two */
    uint32_t n_bucket;
    kvt_seq *seq;
    uint32_t n_seq;
    kvt_ev *ev;
    size_t cap_ev;
    uint32_t n_ev;
    int run_open; /* the last event is a STORED run the current fill may extend */
    int start_clear; /* the start-up AllBlocksCleared waits for the first batch with more */
    uint8_t *ha;
    size_t n_ha, cap_ha;
    int32_t *ta;
    size_t n_ta, cap_ta;
    kipp_kv_event *out; /* flush scratch */
    size_t cap_out;
};

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    return kipp_grow(p, cap, need, elem) == KIPP_OK ? 0 : -1;
}

/* ---- the block table -------------------------------------------------------------------- */

static uint32_t bucket_of(const kipp_kvt *t, const uint8_t *h) {
    uint32_t x;
    memcpy(&x, h + HB - 4, 4); /* a sha256's bytes are uniform */
    return x & (t->n_bucket - 1);
}

static uint32_t lookup(const kipp_kvt *t, const uint8_t *h) {
    for (uint32_t i = t->bucket[bucket_of(t, h)]; i != NONE; i = t->b[i].next)
        if (!memcmp(t->b[i].h, h, HB)) return i;
    return NONE;
}

static void unlink_block(kipp_kvt *t, uint32_t i) {
    uint32_t *pp = &t->bucket[bucket_of(t, t->b[i].h)];
    while (*pp != i) pp = &t->b[*pp].next;
    *pp = t->b[i].next;
}

/* Doubles the buckets when the table is fuller than one entry per bucket. */
static void maybe_rehash(kipp_kvt *t) {
    if (t->n_live < t->n_bucket) return;
    uint32_t *nb = malloc((size_t)t->n_bucket * 2 * sizeof *nb);
    if (!nb) return; /* longer chains, still correct */
    free(t->bucket);
    t->bucket = nb;
    t->n_bucket *= 2;
    for (uint32_t i = 0; i < t->n_bucket; i++) nb[i] = NONE;
    for (uint32_t i = 0; i < t->n_b; i++) {
        if (!t->b[i].holders) continue;
        const uint32_t k = bucket_of(t, t->b[i].h);
        t->b[i].next = nb[k];
        nb[k] = i;
    }
}

/* The entry of hash h, made with 0 holders when new; NONE when out of memory. */
static uint32_t find_or_add(kipp_kvt *t, const uint8_t *h) {
    uint32_t i = lookup(t, h);
    if (i != NONE) return i;
    if (t->free_head != NONE) {
        i = t->free_head;
        t->free_head = t->b[i].next;
    } else {
        if (grow((void **)&t->b, &t->cap_b, (size_t)t->n_b + 1, sizeof *t->b) != 0) return NONE;
        i = t->n_b++;
    }
    memcpy(t->b[i].h, h, HB);
    t->b[i].holders = 0;
    const uint32_t k = bucket_of(t, h);
    t->b[i].next = t->bucket[k];
    t->bucket[k] = i;
    return i;
}

/* ---- events ----------------------------------------------------------------------------- */

static kvt_ev *new_event(kipp_kvt *t, kipp_kv_event_type type) {
    if (grow((void **)&t->ev, &t->cap_ev, (size_t)t->n_ev + 1, sizeof *t->ev) != 0) return NULL;
    kvt_ev *e = &t->ev[t->n_ev++];
    *e = (kvt_ev){.type = type, .hash_off = t->n_ha, .parent_off = SIZE_MAX, .tok_off = t->n_ta};
    t->run_open = 0;
    return e;
}

static int push_hash(kipp_kvt *t, const uint8_t *h) {
    if (grow((void **)&t->ha, &t->cap_ha, t->n_ha + HB, 1) != 0) return -1;
    memcpy(t->ha + t->n_ha, h, HB);
    t->n_ha += HB;
    return 0;
}

/* The last holder of entry i is gone: a removal, appended to the last event when that is a
 * removal too (the hashes of one event need not be related). */
static void release(kipp_kvt *t, uint32_t i) {
    if (--t->b[i].holders) return;
    kvt_ev *e = t->n_ev && t->ev[t->n_ev - 1].type == KIPP_KVE_REMOVED && !t->run_open
                    ? &t->ev[t->n_ev - 1]
                    : NULL;
    /* a removal's hash must follow its event's others in the arena: a new event when a
     * stored run wrote after it */
    if (e && e->hash_off + (size_t)e->n_blocks * HB != t->n_ha) e = NULL;
    if (!e) e = new_event(t, KIPP_KVE_REMOVED);
    if (e && push_hash(t, t->b[i].h) == 0) e->n_blocks++;
    unlink_block(t, i);
    t->b[i].next = t->free_head;
    t->free_head = i;
    t->n_live--;
}

/* ---- life cycle ------------------------------------------------------------------------- */

kipp_kvt *kipp_kvt_new(uint32_t block_size, const kipp_kv_event_sink *sink) {
    if (!block_size || !sink || !sink->hash || !sink->publish) return NULL;
    kipp_kvt *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->bs = block_size;
    t->sink = *sink;
    t->free_head = NONE;
    t->start_clear = 1;
    t->n_bucket = 256;
    t->bucket = malloc(t->n_bucket * sizeof *t->bucket);
    if (!t->bucket || !new_event(t, KIPP_KVE_CLEARED)) {
        kipp_kvt_free(t);
        return NULL;
    }
    for (uint32_t i = 0; i < t->n_bucket; i++) t->bucket[i] = NONE;
    return t;
}

void kipp_kvt_free(kipp_kvt *t) {
    if (!t) return;
    for (uint32_t i = 0; i < t->n_seq; i++) free(t->seq[i].blk);
    free(t->seq);
    free(t->b);
    free(t->bucket);
    free(t->ev);
    free(t->ha);
    free(t->ta);
    free(t->out);
    free(t);
}

uint32_t kipp_kvt_n_blocks(const kipp_kvt *t) { return t ? t->n_live : 0; }

/* ---- sequences -------------------------------------------------------------------------- */

static kvt_seq *seq_at(kipp_kvt *t, uint32_t id) {
    if (id >= t->n_seq) {
        uint32_t n = t->n_seq ? t->n_seq : 16;
        while (n <= id) n *= 2;
        kvt_seq *s = realloc(t->seq, (size_t)n * sizeof *s);
        if (!s) return NULL;
        memset(s + t->n_seq, 0, (size_t)(n - t->n_seq) * sizeof *s);
        t->seq = s;
        t->n_seq = n;
    }
    return &t->seq[id];
}

void kipp_kvt_truncate(kipp_kvt *t, uint32_t seq, uint32_t n_keep) {
    if (!t || seq >= t->n_seq) return;
    kvt_seq *s = &t->seq[seq];
    const uint32_t keep = n_keep / t->bs;
    while (s->n > keep) release(t, s->blk[--s->n]);
}

void kipp_kvt_drop(kipp_kvt *t, uint32_t seq) { kipp_kvt_truncate(t, seq, 0); }

void kipp_kvt_fork(kipp_kvt *t, uint32_t src, uint32_t dst) {
    if (!t) return;
    kipp_kvt_drop(t, dst); /* a recycled id holds nothing */
    if (src >= t->n_seq || t->seq[src].n == 0) return;
    kvt_seq *d = seq_at(t, dst);
    if (!d) return;
    const kvt_seq *s = &t->seq[src]; /* after seq_at: the table may have moved */
    if (grow((void **)&d->blk, &d->cap, s->n, sizeof *d->blk) != 0) return;
    for (uint32_t b = 0; b < s->n; b++) t->b[s->blk[b]].holders++;
    memcpy(d->blk, s->blk, (size_t)s->n * sizeof *d->blk);
    d->n = s->n;
}

void kipp_kvt_fill(kipp_kvt *t, uint32_t seq, const int32_t *tokens, uint32_t n_fed) {
    if (!t) return;
    const uint32_t nb = n_fed / t->bs;
    kvt_seq *s = seq_at(t, seq);
    if (!s || s->n >= nb || grow((void **)&s->blk, &s->cap, nb, sizeof *s->blk) != 0) return;
    t->run_open = 0; /* a run continues only within one fill */
    for (uint32_t b = s->n; b < nb; b++) {
        const int32_t *tok = tokens + (size_t)b * t->bs;
        uint8_t parent[HB], h[HB];
        if (b) memcpy(parent, t->b[s->blk[b - 1]].h, HB);
        t->sink.hash(t->sink.ud, b ? parent : NULL, tok, t->bs, h);
        const uint32_t i = find_or_add(t, h);
        if (i == NONE) return;
        s->blk[s->n++] = i;
        if (t->b[i].holders++) { /* someone holds it already: nothing to announce */
            t->run_open = 0;
            continue;
        }
        t->n_live++;
        maybe_rehash(t);
        kvt_ev *e = t->run_open ? &t->ev[t->n_ev - 1] : NULL;
        if (!e) {
            if (!(e = new_event(t, KIPP_KVE_STORED))) continue;
            if (b && push_hash(t, parent) == 0) e->parent_off = t->n_ha - HB;
            e->hash_off = t->n_ha; /* the run's hashes follow its parent */
        }
        if (push_hash(t, h) != 0 ||
            grow((void **)&t->ta, &t->cap_ta, t->n_ta + t->bs, sizeof *t->ta) != 0) {
            t->run_open = 0; /* the arena holds a stray hash at most: the run ends here */
            continue;
        }
        memcpy(t->ta + t->n_ta, tok, (size_t)t->bs * sizeof *tok);
        t->n_ta += t->bs;
        e->n_blocks++;
        t->run_open = 1;
    }
    t->run_open = 0;
}

void kipp_kvt_flush(kipp_kvt *t) {
    if (!t || t->n_ev == 0) return;
    /* the start-up clear goes out with the first blocks: a subscriber that connects while the
     * server starts (a router reconnecting to a restarted replica) still sees it */
    if (t->start_clear && t->n_ev == 1) return;
    t->start_clear = 0;
    uint32_t n = 0;
    if (grow((void **)&t->out, &t->cap_out, t->n_ev, sizeof *t->out) == 0) {
        for (uint32_t k = 0; k < t->n_ev; k++) {
            const kvt_ev *e = &t->ev[k];
            if (e->type != KIPP_KVE_CLEARED && e->n_blocks == 0) continue; /* lost to memory */
            t->out[n++] = (kipp_kv_event){
                .type = e->type,
                .n_blocks = e->n_blocks,
                .hashes = t->ha + e->hash_off,
                .parent = e->parent_off == SIZE_MAX ? NULL : t->ha + e->parent_off,
                .tokens = t->ta + e->tok_off,
                .block_size = t->bs,
            };
        }
    }
    if (n) t->sink.publish(t->sink.ud, t->out, n);
    t->n_ev = 0;
    t->n_ha = t->n_ta = 0;
    t->run_open = 0;
}
