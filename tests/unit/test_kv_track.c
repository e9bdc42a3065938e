/* test_kv_track.c — unit suite for src/engine/kv_track.c (the holder counts behind KV-cache
 * events): fixed cases (a block stored once for two holders and removed with the last, a
 * fork and a truncation, the start-up clear riding with the first blocks, a run's parent and
 * tokens), then random sequence operations over a two-token alphabet (so sequences share
 * blocks often) checked after every flush against a reference written here: the blocks the
 * events say are held are exactly the whole blocks of the live sequences, each stored while
 * not held and removed while held, every stored run chained to a held parent. */
#include "engine/kv_track.h"
#include "kt.h"

#include <stdint.h>
#include <string.h>

#define HB KIPP_KV_HASH_BYTES
#define MAXB 4096 /* distinct hashes the recorder follows */

/* A hash for the tests: FNV-1a over the parent and the tokens, spread over 32 bytes. */
static void fake_hash(void *ud, const uint8_t *parent, const int32_t *tok, uint32_t n, uint8_t out[HB]) {
    (void)ud;
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < HB; i++) h = (h ^ (parent ? parent[i] : 0xa5)) * 1099511628211ull;
    for (uint32_t i = 0; i < n; i++) h = (h ^ (uint32_t)tok[i]) * 1099511628211ull;
    for (int i = 0; i < HB; i++) {
        h ^= h >> 29, h *= 0xbf58476d1ce4e5b9ull, h ^= h >> 32;
        out[i] = (uint8_t)h;
    }
}

/* What the events say is held: a set of hashes, replayed from the batches. */
static struct {
    uint8_t h[MAXB][HB];
    uint32_t n;
    int batches, clears, bad;
    uint32_t stored, removed; /* hashes in events, all batches */
} rec;

static int rec_find(const uint8_t *h) {
    for (uint32_t i = 0; i < rec.n; i++)
        if (!memcmp(rec.h[i], h, HB)) return (int)i;
    return -1;
}

static void rec_publish(void *ud, const kipp_kv_event *ev, uint32_t n) {
    (void)ud;
    rec.batches++;
    for (uint32_t k = 0; k < n; k++) {
        const kipp_kv_event *e = &ev[k];
        if (e->type == KIPP_KVE_CLEARED) {
            rec.clears++;
            rec.n = 0;
            continue;
        }
        if (e->n_blocks == 0) rec.bad++;
        if (e->type == KIPP_KVE_STORED && e->parent && rec_find(e->parent) < 0) rec.bad++; /* parent not held */
        for (uint32_t b = 0; b < e->n_blocks; b++) {
            const uint8_t *h = e->hashes + (size_t)b * HB;
            const int at = rec_find(h);
            if (e->type == KIPP_KVE_STORED) {
                uint8_t want[HB]; /* the run: block b's hash from its parent and its tokens */
                fake_hash(NULL, b ? e->hashes + (size_t)(b - 1) * HB : e->parent, e->tokens + (size_t)b * e->block_size,
                          e->block_size, want);
                if (memcmp(want, h, HB) || at >= 0 || rec.n == MAXB) rec.bad++;
                else memcpy(rec.h[rec.n++], h, HB);
                rec.stored++;
            } else {
                if (at < 0) rec.bad++;
                else memcpy(rec.h[at], rec.h[--rec.n], HB);
                rec.removed++;
            }
        }
    }
}

static const kipp_kv_event_sink sink = {.ud = NULL, .hash = fake_hash, .publish = rec_publish};

static void test_fixed(void) {
    memset(&rec, 0, sizeof rec);
    const uint32_t bs = 4;
    kipp_kvt *t = kipp_kvt_new(bs, &sink);
    KT_CHECK(t != NULL, "no tracker");
    if (!t) return;
    kipp_kvt_flush(t);
    KT_CHECK(rec.batches == 0, "the start-up clear went out alone (%d batches)", rec.batches);
    const int32_t a[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    kipp_kvt_fill(t, 1, a, 3); /* no whole block */
    kipp_kvt_fill(t, 1, a, 9); /* blocks 0 and 1 */
    kipp_kvt_fill(t, 2, a, 8); /* the same two blocks: held twice, stored once */
    kipp_kvt_flush(t);
    KT_CHECK(rec.batches == 1 && rec.clears == 1 && rec.stored == 2 && rec.n == 2 && !rec.bad,
             "batches %d clears %d stored %u held %u bad %d", rec.batches, rec.clears, rec.stored, rec.n, rec.bad);
    KT_CHECK(kipp_kvt_n_blocks(t) == 2, "%u blocks held", kipp_kvt_n_blocks(t));
    kipp_kvt_drop(t, 1);
    kipp_kvt_flush(t);
    KT_CHECK(rec.removed == 0 && rec.n == 2, "removed %u while sequence 2 holds them", rec.removed);
    kipp_kvt_fork(t, 2, 3);
    kipp_kvt_truncate(t, 3, 5); /* keeps block 0 */
    kipp_kvt_fill(t, 2, a, 12); /* block 2, parent block 1: one run of one block */
    kipp_kvt_truncate(t, 2, 4); /* blocks 1 and 2 go: removed (3 holds only block 0) */
    kipp_kvt_flush(t);
    KT_CHECK(rec.stored == 3 && rec.removed == 2 && rec.n == 1 && !rec.bad, "stored %u removed %u held %u bad %d",
             rec.stored, rec.removed, rec.n, rec.bad);
    kipp_kvt_drop(t, 2);
    kipp_kvt_drop(t, 3);
    kipp_kvt_drop(t, 99); /* never seen: nothing */
    kipp_kvt_flush(t);
    KT_CHECK(rec.n == 0 && kipp_kvt_n_blocks(t) == 0 && !rec.bad, "held %u / %u after every drop", rec.n,
             kipp_kvt_n_blocks(t));
    const int before = rec.batches;
    kipp_kvt_flush(t);
    KT_CHECK(rec.batches == before, "an empty step published a batch");
    kipp_kvt_free(t);
    kipp_kvt_free(NULL);
    kipp_kvt_fill(NULL, 0, a, 12); /* events off: no-ops */
    kipp_kvt_fork(NULL, 0, 1);
    kipp_kvt_flush(NULL);
}

/* ---- random operations against a reference ----------------------------------------------- */

#define NS 12
#define MAXT 64

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t urand(uint32_t n) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (uint32_t)(((rng * 2685821657736338717ull) >> 33) % n);
}

typedef struct {
    int live;
    int32_t tok[MAXT];
    uint32_t n_fed; /* the tracker was told of tok[0..n_fed) */
} ref_seq;

/* The reference: is h one of the live sequences' whole blocks? Counts them (distinct). */
static uint32_t ref_blocks(const ref_seq *s, uint32_t bs, uint8_t (*out)[HB]) {
    uint32_t n = 0;
    for (int i = 0; i < NS; i++) {
        if (!s[i].live) continue;
        uint8_t h[HB];
        for (uint32_t b = 0; b < s[i].n_fed / bs; b++) {
            fake_hash(NULL, b ? h : NULL, s[i].tok + b * bs, bs, h);
            uint32_t k = 0;
            while (k < n && memcmp(out[k], h, HB)) k++;
            if (k == n) memcpy(out[n++], h, HB);
        }
    }
    return n;
}

static void test_random(void) {
    static uint8_t want[NS * MAXT][HB];
    for (uint32_t bs = 1; bs <= 4; bs++) {
        memset(&rec, 0, sizeof rec);
        kipp_kvt *t = kipp_kvt_new(bs, &sink);
        if (!t) {
            KT_CHECK(0, "no tracker");
            return;
        }
        ref_seq s[NS] = {0};
        int mismatches = 0;
        for (int step = 0; step < 3000; step++) {
            const uint32_t i = urand(NS), j = urand(NS);
            switch (urand(5)) {
            case 0: /* grow (a new sequence when dead) */
            case 1: {
                if (!s[i].live) s[i] = (ref_seq){.live = 1};
                const uint32_t add = urand(MAXT - s[i].n_fed + 1);
                for (uint32_t k = 0; k < add; k++) s[i].tok[s[i].n_fed + k] = (int32_t)urand(2);
                s[i].n_fed += add;
                kipp_kvt_fill(t, i, s[i].tok, s[i].n_fed);
                break;
            }
            case 2: /* fork j from i, keeping a prefix (a cache hit or a live prefix) */
                if (!s[i].live || i == j) break;
                if (s[j].live) kipp_kvt_drop(t, j);
                s[j] = s[i];
                kipp_kvt_fork(t, i, j);
                s[j].n_fed = urand(s[i].n_fed + 1);
                kipp_kvt_truncate(t, j, s[j].n_fed);
                break;
            case 3: /* truncate (rejected drafts, a cache entry cut to whole blocks) */
                if (!s[i].live) break;
                s[i].n_fed = urand(s[i].n_fed + 1);
                kipp_kvt_truncate(t, i, s[i].n_fed);
                break;
            case 4:
                if (!s[i].live) break;
                s[i].live = 0;
                kipp_kvt_drop(t, i);
                break;
            }
            if (urand(4) == 0) {
                kipp_kvt_flush(t);
                const uint32_t n = ref_blocks(s, bs, want);
                int same = n == rec.n && n == kipp_kvt_n_blocks(t);
                for (uint32_t k = 0; same && k < n; k++) same = rec_find(want[k]) >= 0;
                mismatches += !same;
            }
        }
        KT_CHECK(mismatches == 0 && rec.bad == 0 && rec.clears == 1,
                 "block size %u: %d flushes disagreed with the reference, %d bad events, %d clears", bs, mismatches,
                 rec.bad, rec.clears);
        KT_CHECK(rec.stored > 100 && rec.removed > 100, "block size %u: too few events to mean much (%u, %u)", bs,
                 rec.stored, rec.removed);
        kipp_kvt_free(t);
    }
}

void kt_suite_kv_track(void) {
    test_fixed();
    test_random();
}
