/* test_kv.c — unit suite for the KV block pool (src/kv) over the host KV storage
 * (src/backend/host_kv.c): parameter checks, identity layout, the addressing function, fork
 * + refcounts, copy-on-write (data copied, source untouched, exact block count when several
 * holders write), truncation, out-of-blocks status with state unchanged, sequence slot reuse
 * and accounting; f16/bf16 storage (row conversions, block copies of 2-byte elements). Small
 * geometries, no model. */
#include "backend/host_kv.h"
#include "core/quantize.h"
#include "core/types.h"
#include "kv/kv.h"
#include "kt.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define KV(pool) ((kipp_host_kv *)(pool)->storage.store)
#define ROW(pool, s, l, pos, part, acc) \
    ((float *)kipp_host_kv_row(KV(pool), s, l, pos, (kipp_kv_part)(part), acc))

static kipp_kv_pool *make_typed(uint32_t n_layer, uint32_t kv_dim, uint32_t bs, uint32_t n_blocks,
                                kipp_kv_type type) {
    char err[KIPP_ERR_LEN] = "";
    const kipp_kv_layout lay = {.n_layer = n_layer, .kv_dim = kv_dim,
                                .block_size = bs ? bs : KIPP_KV_DEFAULT_BLOCK_SIZE, .type = type};
    void *store = NULL;
    if (kipp_host_kv_alloc(NULL, &lay, n_blocks, &store, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "storage: %s", err);
        return NULL;
    }
    const kipp_kv_params p = {.block_size = bs, .n_blocks = n_blocks,
                              .bytes_per_token = 2ull * n_layer * kv_dim * kipp_kv_type_size(type)};
    const kipp_kv_storage st = {.ctx = NULL, .store = store, .copy_block = kipp_host_kv_copy_block};
    kipp_kv_pool *pool = NULL;
    KT_CHECK(kipp_kv_pool_init(&p, &st, &pool, err, sizeof err) == KIPP_OK && pool, "init: %s", err);
    if (!pool) kipp_host_kv_free(NULL, store);
    return pool;
}

static kipp_kv_pool *make(uint32_t n_layer, uint32_t kv_dim, uint32_t bs, uint32_t n_blocks) {
    return make_typed(n_layer, kv_dim, bs, n_blocks, KIPP_KV_TYPE_F32);
}

static void free_pool(kipp_kv_pool *pool) {
    if (!pool) return;
    kipp_host_kv_free(NULL, KV(pool));
    kipp_kv_pool_free(pool);
}

static uint32_t new_seq(kipp_kv_pool *pool) {
    char err[KIPP_ERR_LEN] = "";
    uint32_t id = UINT32_MAX;
    KT_CHECK(kipp_kv_seq_new(pool, &id, err, sizeof err) == KIPP_OK, "seq_new: %s", err);
    return id;
}

static kipp_status grow1(kipp_kv_pool *pool, uint32_t id, uint32_t n) {
    char err[KIPP_ERR_LEN];
    return kipp_kv_grow(pool, &id, &n, 1, err, sizeof err);
}

/* A value no other (tag, layer, pos, part, i) shares. */
static float pattern(uint32_t tag, uint32_t l, uint32_t pos, int part, uint32_t i) {
    return (float)(tag * 100000 + l * 10000 + pos * 10 + (uint32_t)part * 5 + i) + 0.25f;
}

/* Writes positions from..to-1 of sequence id with pattern(tag, ...). */
static void write_rows(kipp_kv_pool *pool, uint32_t id, uint32_t tag, uint32_t from, uint32_t to) {
    const kipp_kv_seq *s = kipp_kv_seq_get(pool, id);
    for (uint32_t l = 0; l < KV(pool)->n_layer; l++)
        for (uint32_t pos = from; pos < to; pos++)
            for (int part = 0; part < 2; part++) {
                float *r = ROW(pool, s, l, pos, part, KIPP_KV_WRITE);
                for (uint32_t i = 0; i < KV(pool)->kv_dim; i++) r[i] = pattern(tag, l, pos, part, i);
            }
}

/* Do positions from..to-1 of sequence id read back pattern(tag, ...)? */
static int rows_are(const kipp_kv_pool *pool, uint32_t id, uint32_t tag, uint32_t from, uint32_t to) {
    const kipp_kv_seq *s = kipp_kv_seq_get(pool, id);
    for (uint32_t l = 0; l < KV(pool)->n_layer; l++)
        for (uint32_t pos = from; pos < to; pos++)
            for (int part = 0; part < 2; part++) {
                const float *r = ROW(pool, s, l, pos, part, KIPP_KV_READ);
                for (uint32_t i = 0; i < KV(pool)->kv_dim; i++)
                    if (r[i] != pattern(tag, l, pos, part, i)) return 0;
            }
    return 1;
}

static void test_params(void) {
    char err[KIPP_ERR_LEN] = "";
    void *store = (void *)1;
    kipp_kv_layout lay = {.n_layer = 0, .kv_dim = 4, .block_size = 4, .type = KIPP_KV_TYPE_F32};
    KT_CHECK(kipp_host_kv_alloc(NULL, &lay, 4, &store, err, sizeof err) == KIPP_ERR_INVALID_ARG &&
                 !store && strstr(err, "n_layer 0"),
             "zero layers: %s", err);
    lay = (kipp_kv_layout){.n_layer = UINT32_MAX, .kv_dim = UINT32_MAX, .block_size = 64,
                           .type = KIPP_KV_TYPE_F16};
    KT_CHECK(kipp_host_kv_alloc(NULL, &lay, UINT32_MAX, &store, err, sizeof err) == KIPP_ERR_NOMEM &&
                 !store,
             "overflowing geometry: %s", err);
    lay = (kipp_kv_layout){.n_layer = 1, .kv_dim = 4, .block_size = 4, .type = KIPP_KV_TYPE_DEFAULT};
    KT_CHECK(kipp_host_kv_alloc(NULL, &lay, 4, &store, err, sizeof err) == KIPP_ERR_UNSUPPORTED &&
                 !store,
             "unresolved KV type accepted: %s", err);
    kipp_kv_pool *pool = (kipp_kv_pool *)1;
    const kipp_kv_params p0 = {.block_size = 4, .n_blocks = 0};
    const kipp_kv_storage st = {.copy_block = kipp_host_kv_copy_block};
    KT_CHECK(kipp_kv_pool_init(&p0, &st, &pool, err, sizeof err) == KIPP_ERR_INVALID_ARG && !pool,
             "zero blocks: %s", err);
    pool = make(1, 2, 0, 2);
    if (!pool) return;
    KT_CHECK(pool->block_size == KIPP_KV_DEFAULT_BLOCK_SIZE, "default block size %u",
             pool->block_size);
    free_pool(pool);
    kipp_kv_pool_free(NULL);
    kipp_kv_type t = KIPP_KV_TYPE_F32;
    KT_CHECK(kipp_kv_type_parse("bf16", &t, err, sizeof err) == KIPP_OK && t == KIPP_KV_TYPE_BF16 &&
                 kipp_kv_type_parse("q4_0", &t, err, sizeof err) == KIPP_OK && t == KIPP_KV_TYPE_Q4_0 &&
                 kipp_kv_type_parse("q5_0", &t, err, sizeof err) == KIPP_ERR_INVALID_ARG &&
                 strstr(err, "q5_0") && strstr(err, "q8_0") && strstr(err, "f16"),
             "KV type names: %s", err);
}

/* f16 / bf16 storage: rows are stored rounded to nearest even and read back exactly as
 * rounded; copy-on-write copies 2-byte elements whole. */
static void test_half_types(void) {
    char err[KIPP_ERR_LEN];
    const kipp_kv_type types[2] = {KIPP_KV_TYPE_F16, KIPP_KV_TYPE_BF16};
    for (int ti = 0; ti < 2; ti++) {
        const kipp_kv_type ty = types[ti];
        kipp_kv_pool *pool = make_typed(2, 5, 4, 4, ty);
        if (!pool) return;
        uint32_t a = 0, f = 0;
        KT_CHECK(kipp_kv_seq_new(pool, &a, err, sizeof err) == KIPP_OK, "%s", err);
        grow1(pool, a, 6);
        const kipp_kv_seq *s = kipp_kv_seq_get(pool, a);
        float in[5] = {1.0f / 3.0f, -1000.5f, 3.14159265f, 1e-3f, 65504.0f}, out[5], want[5];
        memcpy(want, in, sizeof in);
        kipp_kv_round(ty, want, 5);
        int exact = 1, rounded = 0;
        for (uint32_t pos = 0; pos < 6; pos++) {
            kipp_host_kv_put(ty, kipp_host_kv_row(KV(pool), s, 1, pos, KIPP_KV_V, KIPP_KV_WRITE), in, 5);
        }
        for (uint32_t pos = 0; pos < 6; pos++) {
            kipp_host_kv_get(ty, out, kipp_host_kv_row(KV(pool), s, 1, pos, KIPP_KV_V, KIPP_KV_READ), 5);
            for (int i = 0; i < 5; i++) {
                exact &= out[i] == want[i];
                rounded |= out[i] != in[i];
                /* within half an ulp of the type: 2^-11 (f16) or 2^-8 (bf16) relative */
                exact &= fabsf(out[i] - in[i]) <= fabsf(in[i]) * (ty == KIPP_KV_TYPE_F16 ? 0x1p-11f : 0x1p-8f);
            }
        }
        KT_CHECK(exact && rounded, "%s rows: read back the rounded values (%d) and rounding happened (%d)",
                 kipp_kv_type_name(ty), exact, rounded);
        KT_CHECK(kipp_kv_seq_fork(pool, a, &f, err, sizeof err) == KIPP_OK && grow1(pool, f, 1) == KIPP_OK,
                 "fork + grow: %s", err);
        const kipp_kv_seq *sf = kipp_kv_seq_get(pool, f);
        s = kipp_kv_seq_get(pool, a);
        KT_CHECK(sf->blocks[1] != s->blocks[1], "%s: the shared tail was copied", kipp_kv_type_name(ty));
        kipp_host_kv_get(ty, out, kipp_host_kv_row(KV(pool), sf, 1, 5, KIPP_KV_V, KIPP_KV_READ), 5);
        KT_CHECK(memcmp(out, want, sizeof out) == 0, "%s: the copied block holds the rows",
                 kipp_kv_type_name(ty));
        kipp_kv_stats st;
        kipp_kv_pool_stats(pool, &st);
        KT_CHECK(st.n_bytes_per_token == 2ull * 2 * 5 * 2, "%s: %llu bytes per token", kipp_kv_type_name(ty),
                 (unsigned long long)st.n_bytes_per_token);
        free_pool(pool);
    }
}

static void test_identity_and_rows(void) {
    kipp_kv_pool *pool = make(2, 3, 4, 6);
    if (!pool) return;
    uint32_t a = new_seq(pool);
    KT_CHECK(a == 0, "first sequence id %u", a);
    KT_CHECK(grow1(pool, a, 10) == KIPP_OK, "grow 10");
    const kipp_kv_seq *s = kipp_kv_seq_get(pool, a);
    KT_CHECK(s->n_tokens == 10 && s->n_blocks == 3 && s->blocks[0] == 0 && s->blocks[1] == 1 &&
                 s->blocks[2] == 2,
             "a lone sequence in a fresh pool takes blocks 0, 1, 2");
    /* every (layer, pos, part) row is distinct and inside the pool */
    const float *lo = (const float *)KV(pool)->data,
                *hi = lo + (size_t)6 * KV(pool)->block_bytes / sizeof(float);
    int inside = 1, distinct = 1;
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t pos = 0; pos < 10; pos++)
            for (int part = 0; part < 2; part++) {
                const float *r = ROW(pool, s, l, pos, part, KIPP_KV_WRITE);
                inside &= r >= lo && r + 3 <= hi;
                for (uint32_t l2 = 0; l2 < 2; l2++)
                    for (uint32_t p2 = 0; p2 < 10; p2++)
                        for (int q = 0; q < 2; q++)
                            if ((l2 != l || p2 != pos || q != part) &&
                                ROW(pool, s, l2, p2, q, KIPP_KV_WRITE) == r)
                                distinct = 0;
            }
    KT_CHECK(inside && distinct, "rows inside the pool %d, distinct %d", inside, distinct);
    write_rows(pool, a, 1, 0, 10);
    KT_CHECK(rows_are(pool, a, 1, 0, 10), "rows read back what was written");
    /* rolled back and regrown, a lone sequence keeps the identity layout */
    char err[KIPP_ERR_LEN];
    KT_CHECK(kipp_kv_seq_truncate(pool, a, 0, err, sizeof err) == KIPP_OK, "%s", err);
    KT_CHECK(grow1(pool, a, 9) == KIPP_OK && s->blocks[0] == 0 && s->blocks[1] == 1 &&
                 s->blocks[2] == 2,
             "identity after truncate to 0");
    free_pool(pool);
}

static void test_fork_cow_truncate(void) {
    char err[KIPP_ERR_LEN];
    kipp_kv_pool *pool = make(2, 3, 4, 6);
    if (!pool) return;
    uint32_t a = new_seq(pool), f = UINT32_MAX;
    grow1(pool, a, 10); /* blocks 0, 1, 2 (2 of 4 slots) */
    write_rows(pool, a, 1, 0, 10);
    KT_CHECK(kipp_kv_seq_fork(pool, a, &f, err, sizeof err) == KIPP_OK && f == 1, "fork: %s", err);
    KT_CHECK(kipp_kv_seq_fork(pool, 77, &f, err, sizeof err) == KIPP_ERR_INVALID_ARG &&
                 strstr(err, "77"),
             "fork of an unknown sequence: %s", err);
    kipp_kv_stats st;
    kipp_kv_pool_stats(pool, &st);
    KT_CHECK(st.n_blocks_used == 3 && st.n_blocks_shared == 3 && pool->refs[2] == 2 &&
                 st.n_tokens == 20 && st.n_slots_filled == 10,
             "fork shares: used %u shared %u tokens %llu slots %llu", st.n_blocks_used,
             st.n_blocks_shared, (unsigned long long)st.n_tokens,
             (unsigned long long)st.n_slots_filled);
    KT_CHECK(rows_are(pool, f, 1, 0, 10), "the fork reads the shared prefix");

    /* the fork writes into the shared partial block: it gets a private copy */
    KT_CHECK(grow1(pool, f, 1) == KIPP_OK, "fork grows");
    const kipp_kv_seq *sa = kipp_kv_seq_get(pool, a), *sf = kipp_kv_seq_get(pool, f);
    KT_CHECK(sf->blocks[2] != sa->blocks[2] && sf->blocks[0] == sa->blocks[0] &&
                 pool->refs[sa->blocks[2]] == 1 && pool->refs[sf->blocks[2]] == 1 &&
                 pool->refs[0] == 2,
             "copy on write: private block 2, shared blocks 0-1");
    KT_CHECK(rows_are(pool, f, 1, 0, 10), "the copy holds the prefix");
    write_rows(pool, f, 2, 10, 11);
    KT_CHECK(rows_are(pool, a, 1, 0, 10) && rows_are(pool, f, 2, 10, 11),
             "writing the copy leaves the source untouched");
    uint32_t used = pool->n_blocks - pool->n_free;
    KT_CHECK(grow1(pool, a, 1) == KIPP_OK && pool->n_blocks - pool->n_free == used,
             "the source's block is private again: no copy");

    /* truncate: blocks past the kept ones are released, shared ones lose a reference */
    KT_CHECK(kipp_kv_seq_truncate(pool, a, 5, err, sizeof err) == KIPP_OK, "%s", err);
    KT_CHECK(sa->n_blocks == 2 && sa->n_tokens == 5 && pool->refs[sa->blocks[1]] == 2 &&
                 pool->n_blocks - pool->n_free == used - 1,
             "truncate to 5 keeps 2 blocks, frees 1");
    KT_CHECK(kipp_kv_seq_truncate(pool, a, 6, err, sizeof err) == KIPP_ERR_INVALID_ARG &&
                 strstr(err, "n_keep 6"),
             "truncate beyond the end: %s", err);
    /* truncated into a shared block, then written: copy on write again */
    uint32_t b1 = sa->blocks[1];
    KT_CHECK(grow1(pool, a, 1) == KIPP_OK && sa->blocks[1] != b1 && rows_are(pool, a, 1, 0, 5),
             "rewriting inside a shared block copies it");
    kipp_kv_pool_stats(pool, &st);
    /* a: 6 tokens (blocks 0, 1'), f: 11 tokens (blocks 0, 1, 2'') */
    KT_CHECK(st.n_tokens == 17 && st.n_slots_filled == 4 + 2 + 4 + 3 && st.n_blocks_used == 4 &&
                 st.n_blocks_shared == 1,
             "accounting after COW: tokens %llu slots %llu used %u shared %u",
             (unsigned long long)st.n_tokens, (unsigned long long)st.n_slots_filled,
             st.n_blocks_used, st.n_blocks_shared);
    free_pool(pool);
}

static void test_full_and_atomic(void) {
    char err[KIPP_ERR_LEN] = "";
    kipp_kv_pool *pool = make(1, 2, 4, 4);
    if (!pool) return;
    uint32_t a = new_seq(pool), b = new_seq(pool);
    grow1(pool, a, 6);  /* 2 blocks, block 1 half full */
    grow1(pool, b, 4);  /* 1 block */
    kipp_kv_stats before, after;
    kipp_kv_pool_stats(pool, &before);
    uint32_t ids[2] = {a, b}, n_new[2] = {2, 5}; /* a fits in its block, b needs 2 blocks */
    KT_CHECK(kipp_kv_grow(pool, ids, n_new, 2, err, sizeof err) == KIPP_ERR_KV_FULL &&
                 strstr(err, "2 more blocks") && strstr(err, "1 of 4 free"),
             "out of blocks: %s", err);
    kipp_kv_pool_stats(pool, &after);
    KT_CHECK(memcmp(&before, &after, sizeof before) == 0 &&
                 kipp_kv_seq_get(pool, a)->n_tokens == 6 && kipp_kv_seq_get(pool, b)->n_tokens == 4,
             "a refused grow changes nothing");
    n_new[1] = 4;
    KT_CHECK(kipp_kv_grow(pool, ids, n_new, 2, err, sizeof err) == KIPP_OK, "exact fit: %s", err);
    KT_CHECK(pool->n_free == 0 && grow1(pool, b, 1) == KIPP_ERR_KV_FULL, "pool exhausted");
    ids[1] = a;
    KT_CHECK(kipp_kv_grow(pool, ids, n_new, 2, err, sizeof err) == KIPP_ERR_INVALID_ARG,
             "a sequence listed twice");
    ids[1] = 9;
    KT_CHECK(kipp_kv_grow(pool, ids, n_new, 2, err, sizeof err) == KIPP_ERR_INVALID_ARG &&
                 strstr(err, "sequence 9"),
             "an unknown sequence: %s", err);
    KT_CHECK(grow1(pool, a, UINT32_MAX) == KIPP_ERR_INVALID_ARG, "length overflow");
    free_pool(pool);
}

/* k holders of a shared partial block all writing in one grow need k - 1 copies. */
static void test_cow_exact_count(void) {
    char err[KIPP_ERR_LEN] = "";
    kipp_kv_pool *pool = make(1, 2, 4, 3);
    if (!pool) return;
    uint32_t a = new_seq(pool), f1, f2;
    grow1(pool, a, 2);
    write_rows(pool, a, 3, 0, 2);
    kipp_kv_seq_fork(pool, a, &f1, err, sizeof err);
    kipp_kv_seq_fork(pool, a, &f2, err, sizeof err);
    uint32_t ids[3] = {f2, a, f1}, n_new[3] = {1, 1, 1};
    KT_CHECK(kipp_kv_grow(pool, ids, n_new, 3, err, sizeof err) == KIPP_OK && pool->n_free == 0,
             "3 holders writing need exactly 2 copies: %s", err);
    const kipp_kv_seq *s[3] = {kipp_kv_seq_get(pool, a), kipp_kv_seq_get(pool, f1),
                               kipp_kv_seq_get(pool, f2)};
    KT_CHECK(s[0]->blocks[0] != s[1]->blocks[0] && s[1]->blocks[0] != s[2]->blocks[0] &&
                 s[0]->blocks[0] != s[2]->blocks[0] && rows_are(pool, a, 3, 0, 2) &&
                 rows_are(pool, f1, 3, 0, 2) && rows_are(pool, f2, 3, 0, 2),
             "three private copies of the prefix");
    /* two of three holders writing into a full pool: 2 copies needed, 0 free */
    kipp_kv_seq_truncate(pool, f1, 0, err, sizeof err);
    kipp_kv_seq_truncate(pool, f2, 0, err, sizeof err);
    kipp_kv_seq_fork(pool, a, &f1, err, sizeof err); /* f1 is live: a new id */
    KT_CHECK(pool->n_free == 2, "%u free", pool->n_free);
    uint32_t g;
    kipp_kv_seq_fork(pool, a, &g, err, sizeof err);
    grow1(pool, f2, 4); /* takes a block: 1 free */
    uint32_t ids2[2] = {a, g}, n2[2] = {1, 1};
    KT_CHECK(pool->refs[s[0]->blocks[0]] == 3 &&
                 kipp_kv_grow(pool, ids2, n2, 2, err, sizeof err) == KIPP_ERR_KV_FULL,
             "2 of 3 holders writing need 2 copies with 1 free: %s", err);
    free_pool(pool);
}

static void test_free_and_slots(void) {
    char err[KIPP_ERR_LEN] = "";
    kipp_kv_pool *pool = make(1, 2, 4, 4);
    if (!pool) return;
    uint32_t a = new_seq(pool), b = new_seq(pool), c = new_seq(pool);
    grow1(pool, a, 4);
    grow1(pool, b, 8);
    KT_CHECK(kipp_kv_seq_free(pool, b, err, sizeof err) == KIPP_OK && pool->n_free == 3, "free");
    KT_CHECK(kipp_kv_seq_free(pool, b, err, sizeof err) == KIPP_ERR_INVALID_ARG &&
                 strstr(err, "sequence 1"),
             "double free: %s", err);
    KT_CHECK(kipp_kv_seq_get(pool, b) == NULL && new_seq(pool) == b, "a freed id is reused");
    uint32_t more[20];
    for (int i = 0; i < 20; i++) more[i] = new_seq(pool); /* the sequence table grows */
    KT_CHECK(more[19] == 22 && kipp_kv_seq_get(pool, c) != NULL, "23 live sequences");
    kipp_kv_stats st;
    kipp_kv_pool_stats(pool, &st);
    KT_CHECK(st.n_seqs == 23 && st.n_tokens == 4 && st.n_slots_filled == 4 &&
                 st.n_bytes_per_token == 2 * 1 * 2 * sizeof(float) &&
                 st.n_bytes_per_block == 4 * st.n_bytes_per_token &&
                 st.n_bytes_total == 4 * st.n_bytes_per_block &&
                 st.n_bytes_used == st.n_bytes_per_block && st.n_blocks_free == 3,
             "accounting: seqs %u tokens %llu bytes/token %llu", st.n_seqs,
             (unsigned long long)st.n_tokens, (unsigned long long)st.n_bytes_per_token);
    for (int i = 0; i < 20; i++) kipp_kv_seq_free(pool, more[i], err, sizeof err);
    kipp_kv_seq_free(pool, a, err, sizeof err);
    KT_CHECK(pool->n_free == 4, "all blocks free again");
    free_pool(pool);
}

/* A shared block filled differently by its holders counts its largest fill once. */
static void test_shared_fill_accounting(void) {
    char err[KIPP_ERR_LEN] = "";
    kipp_kv_pool *pool = make(1, 2, 4, 4);
    if (!pool) return;
    uint32_t a = new_seq(pool), f;
    grow1(pool, a, 6);
    kipp_kv_seq_fork(pool, a, &f, err, sizeof err);
    kipp_kv_seq_truncate(pool, f, 5, err, sizeof err);
    kipp_kv_stats st;
    kipp_kv_pool_stats(pool, &st);
    KT_CHECK(st.n_tokens == 11 && st.n_slots_filled == 6 && st.n_blocks_shared == 2,
             "tokens %llu, slots %llu, shared %u", (unsigned long long)st.n_tokens,
             (unsigned long long)st.n_slots_filled, st.n_blocks_shared);
    kipp_kv_seq_truncate(pool, a, 4, err, sizeof err); /* a drops block 1: f alone holds it */
    kipp_kv_pool_stats(pool, &st);
    KT_CHECK(st.n_tokens == 9 && st.n_slots_filled == 5 && st.n_blocks_shared == 1,
             "tokens %llu, slots %llu", (unsigned long long)st.n_tokens,
             (unsigned long long)st.n_slots_filled);
    free_pool(pool);
}

/* q8_0 / q4_0 storage: rows are ggml's blocks (kipp_quantize_row's bytes, the oracle's
 * quantizer), a get is within half a quantization step of the value put, the block-quantized
 * round trip is what kipp_kv_round gives, K and V may differ in type (their parts and rows
 * sized each by its own type), and a row width that is no multiple of 32 is refused. */
static void test_quant_types(void) {
    const kipp_kv_type types[2] = {KIPP_KV_TYPE_Q8_0, KIPP_KV_TYPE_Q4_0};
    const uint32_t qtype[2] = {KIPP_TYPE_Q8_0, KIPP_TYPE_Q4_0};
    const uint32_t kv_dim = 64;
    float x[64], y[64], z[64];
    unsigned char row[2][80], want[80];
    for (uint32_t i = 0; i < kv_dim; i++) x[i] = sinf(0.37f * (float)i + 0.2f) * (i < 32 ? 3.0f : 0.05f);
    for (int t = 0; t < 2; t++) {
        KT_CHECK(kipp_kv_row_bytes(types[t], kv_dim) == (t ? 36u : 68u), "%s row bytes %llu",
                 kipp_kv_type_name(types[t]), (unsigned long long)kipp_kv_row_bytes(types[t], kv_dim));
        kipp_host_kv_put(types[t], row[t], x, kv_dim);
        kipp_quantize_row(qtype[t], x, want, kv_dim);
        KT_CHECK(memcmp(row[t], want, kipp_kv_row_bytes(types[t], kv_dim)) == 0,
                 "%s: put writes ggml's blocks", kipp_kv_type_name(types[t]));
        kipp_host_kv_get(types[t], y, row[t], kv_dim);
        /* the layout read back by hand: an f16 scale, then 32 int8 (q8_0) or 16 bytes of
         * nibbles, low nibbles the block's first 16 values, offset 8 (q4_0) */
        int layout_ok = 1;
        for (uint32_t b = 0; b < kv_dim / 32; b++) {
            const unsigned char *blk = row[t] + b * (t ? 18 : 34);
            const float d = kipp_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
            for (uint32_t i = 0; i < 32; i++) {
                const int q = t ? ((blk[2 + i % 16] >> (i < 16 ? 0 : 4)) & 15) - 8 : (int8_t)blk[2 + i];
                layout_ok &= y[b * 32 + i] == d * (float)q;
            }
        }
        KT_CHECK(layout_ok, "%s: get reads ggml's layout (scale x integer)", kipp_kv_type_name(types[t]));
        memcpy(z, x, sizeof z);
        kipp_kv_round(types[t], z, kv_dim);
        double worst = 0.0;
        for (uint32_t b = 0; b < kv_dim / 32; b++) {
            float amax = 0.0f;
            for (uint32_t i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
            const float step = t ? amax / 8.0f : amax / 127.0f; /* the block's scale */
            for (uint32_t i = b * 32; i < b * 32 + 32; i++) {
                const double e = fabs((double)y[i] - x[i]) / step;
                if (e > worst) worst = e;
                KT_CHECK(y[i] == z[i], "%s: round == put + get at %u", kipp_kv_type_name(types[t]), i);
            }
        }
        /* half a step, plus the f16 rounding of the scale times the largest integer (127 or 8) */
        KT_CHECK(worst <= (t ? 1.0 + 8.0 / 2048 : 0.5 + 127.0 / 2048), "%s: error %.3f steps",
                 kipp_kv_type_name(types[t]), worst);
    }
    /* K q8_0, V q4_0: each part its own row size, rows of one block inside it */
    char err[KIPP_ERR_LEN] = "";
    const kipp_kv_layout lay = {.n_layer = 2, .kv_dim = kv_dim, .block_size = 4,
                                .type = KIPP_KV_TYPE_Q8_0, .type_v = KIPP_KV_TYPE_Q4_0};
    void *store = NULL;
    KT_CHECK(kipp_host_kv_alloc(NULL, &lay, 3, &store, err, sizeof err) == KIPP_OK, "mixed: %s", err);
    kipp_host_kv *kv = store;
    if (kv) {
        KT_CHECK(kv->row_bytes[0] == 68 && kv->row_bytes[1] == 36 && kv->part_bytes[0] == 2 * 4 * 68 &&
                     kv->part_bytes[1] == 2 * 4 * 36 && kv->block_bytes == 2 * 4 * (68 + 36),
                 "mixed sizes: rows %zu/%zu", kv->row_bytes[0], kv->row_bytes[1]);
        uint32_t table[1] = {2};
        const kipp_kv_seq seq = {.blocks = table, .n_blocks = 1, .cap = 1, .n_tokens = 4, .live = 1};
        const unsigned char *k3 = kipp_host_kv_row(kv, &seq, 1, 3, KIPP_KV_K, KIPP_KV_WRITE);
        const unsigned char *v3 = kipp_host_kv_row(kv, &seq, 1, 3, KIPP_KV_V, KIPP_KV_WRITE);
        KT_CHECK(k3 == kv->data + 2 * kv->block_bytes + 7 * 68 &&
                     v3 == kv->data + 2 * kv->block_bytes + kv->part_bytes[0] + 7 * 36,
                 "mixed row addresses");
        kipp_host_kv_free(NULL, store);
    }
    const kipp_kv_layout odd = {.n_layer = 1, .kv_dim = 48, .block_size = 4, .type = KIPP_KV_TYPE_F16,
                                .type_v = KIPP_KV_TYPE_Q4_0};
    store = NULL;
    KT_CHECK(kipp_host_kv_alloc(NULL, &odd, 1, &store, err, sizeof err) == KIPP_ERR_UNSUPPORTED &&
                 strstr(err, "q4_0") && strstr(err, "48"),
             "a 48-wide q4_0 row is refused: %s", err);
    if (store) kipp_host_kv_free(NULL, store);
}

void kt_suite_kv(void) {
    test_half_types();
    test_quant_types();
    test_params();
    test_identity_and_rows();
    test_fork_cow_truncate();
    test_full_and_atomic();
    test_cow_exact_count();
    test_free_and_slots();
    test_shared_fill_accounting();
}
