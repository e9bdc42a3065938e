/* kv.c — the KV block pool's bookkeeping: allocation from a free-block stack, per-sequence
 * block tables, refcounts, copy-on-write when a shared block is about to be written (the
 * copy itself is the backend's storage's), truncation, and memory accounting. Every
 * operation that can fail checks first and changes nothing on failure. Never reads or
 * writes K/V bytes. Also the KV type names. Design: docs/kv-cache.md. */
#include "kv/kv.h"

#include "core/buf.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

kipp_status kipp_kv_pool_init(const kipp_kv_params *p, const kipp_kv_storage *st,
                              kipp_kv_pool **out, char *err, size_t err_len) {
    *out = NULL;
    const uint32_t bs = p->block_size ? p->block_size : KIPP_KV_DEFAULT_BLOCK_SIZE;
    if (p->n_blocks == 0 || !st || !st->copy_block)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "KV pool: n_blocks %u must be > 0 and the storage must copy blocks",
                         p->n_blocks);
    kipp_kv_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "KV pool: out of memory");
    pool->block_size = bs;
    pool->n_blocks = p->n_blocks;
    pool->bytes_per_token = p->bytes_per_token;
    pool->storage = *st;
    pool->refs = calloc(p->n_blocks, sizeof *pool->refs);
    pool->free_ids = malloc((size_t)p->n_blocks * sizeof *pool->free_ids);
    if (!pool->refs || !pool->free_ids) {
        kipp_kv_pool_free(pool);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "KV pool: out of memory for %u blocks",
                         p->n_blocks);
    }
    /* block 0 on top: a lone sequence in a fresh pool gets blocks 0, 1, 2, ... (identity) */
    for (uint32_t i = 0; i < p->n_blocks; i++) pool->free_ids[i] = p->n_blocks - 1 - i;
    pool->n_free = p->n_blocks;
    *out = pool;
    return KIPP_OK;
}

void kipp_kv_pool_free(kipp_kv_pool *pool) {
    if (!pool) return;
    for (uint32_t i = 0; i < pool->seq_cap; i++) free(pool->seqs[i].blocks);
    free(pool->seqs);
    free(pool->refs);
    free(pool->free_ids);
    free(pool);
}

/* ---- blocks ----------------------------------------------------------------------------- */

static uint32_t take_block(kipp_kv_pool *pool) { /* caller checked n_free > 0 */
    const uint32_t b = pool->free_ids[--pool->n_free];
    pool->refs[b] = 1;
    return b;
}

static void release_block(kipp_kv_pool *pool, uint32_t b) {
    if (--pool->refs[b] == 0) pool->free_ids[pool->n_free++] = b;
}

/* ---- sequences -------------------------------------------------------------------------- */

static kipp_kv_seq *live_seq(kipp_kv_pool *pool, uint32_t id, const char *op, char *err,
                             size_t err_len) {
    if (id < pool->seq_cap && pool->seqs[id].live) return &pool->seqs[id];
    kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "KV %s: sequence %u does not exist", op, id);
    return NULL;
}

static kipp_status table_reserve(kipp_kv_seq *s, uint32_t n_blocks, char *err, size_t err_len) {
    if (n_blocks <= s->cap) return KIPP_OK;
    size_t cap = s->cap; /* kipp_grow's; the table's count is uint32_t, so cap is clamped */
    if (kipp_grow((void **)&s->blocks, &cap, n_blocks, sizeof *s->blocks) != KIPP_OK)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "KV: out of memory for a %u-block table",
                         n_blocks);
    s->cap = cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
    return KIPP_OK;
}

/* A dead slot (reused) or a new one at the end; not yet live. */
static kipp_status new_slot(kipp_kv_pool *pool, uint32_t *id, char *err, size_t err_len) {
    for (uint32_t i = 0; i < pool->seq_cap; i++)
        if (!pool->seqs[i].live) { *id = i; return KIPP_OK; }
    /* ids are uint32_t and below seq_cap: a sequence past UINT32_MAX - 1 fails like out of
     * memory */
    size_t cap = pool->seq_cap;
    if (pool->seq_cap == UINT32_MAX ||
        kipp_grow((void **)&pool->seqs, &cap, (size_t)pool->seq_cap + 1, sizeof *pool->seqs) != KIPP_OK)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "KV: out of memory for %u sequences",
                         pool->seq_cap + 1u);
    const uint32_t new_cap = cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
    memset(pool->seqs + pool->seq_cap, 0, (size_t)(new_cap - pool->seq_cap) * sizeof *pool->seqs);
    *id = pool->seq_cap;
    pool->seq_cap = new_cap;
    return KIPP_OK;
}

kipp_status kipp_kv_seq_new(kipp_kv_pool *pool, uint32_t *id, char *err, size_t err_len) {
    kipp_status st = new_slot(pool, id, err, err_len);
    if (st != KIPP_OK) return st;
    kipp_kv_seq *s = &pool->seqs[*id];
    s->n_blocks = 0;
    s->n_tokens = 0;
    s->live = 1;
    return KIPP_OK;
}

kipp_status kipp_kv_seq_fork(kipp_kv_pool *pool, uint32_t src, uint32_t *dst, char *err,
                             size_t err_len) {
    if (!live_seq(pool, src, "fork", err, err_len)) return KIPP_ERR_INVALID_ARG;
    uint32_t id;
    kipp_status st = new_slot(pool, &id, err, err_len);
    if (st != KIPP_OK) return st;
    const kipp_kv_seq *s = &pool->seqs[src]; /* after new_slot: the array may have moved */
    kipp_kv_seq *d = &pool->seqs[id];
    if ((st = table_reserve(d, s->n_blocks, err, err_len)) != KIPP_OK) return st;
    memcpy(d->blocks, s->blocks, (size_t)s->n_blocks * sizeof *d->blocks);
    for (uint32_t i = 0; i < s->n_blocks; i++) pool->refs[s->blocks[i]]++;
    d->n_blocks = s->n_blocks;
    d->n_tokens = s->n_tokens;
    d->live = 1;
    *dst = id;
    return KIPP_OK;
}

kipp_status kipp_kv_seq_truncate(kipp_kv_pool *pool, uint32_t id, uint32_t n_keep, char *err,
                                 size_t err_len) {
    kipp_kv_seq *s = live_seq(pool, id, "truncate", err, err_len);
    if (!s) return KIPP_ERR_INVALID_ARG;
    if (n_keep > s->n_tokens)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "KV truncate: n_keep %u is beyond the %u tokens of sequence %u", n_keep,
                         s->n_tokens, id);
    const uint32_t keep = kipp_kv_blocks_for(pool, n_keep);
    /* release from the end, so the lowest dropped block ends on top of the free stack and a
     * lone sequence that is rolled back and regrown keeps the identity layout */
    while (s->n_blocks > keep) release_block(pool, s->blocks[--s->n_blocks]);
    s->n_tokens = n_keep;
    return KIPP_OK;
}

kipp_status kipp_kv_seq_free(kipp_kv_pool *pool, uint32_t id, char *err, size_t err_len) {
    kipp_kv_seq *s = live_seq(pool, id, "free", err, err_len);
    if (!s) return KIPP_ERR_INVALID_ARG;
    while (s->n_blocks > 0) release_block(pool, s->blocks[--s->n_blocks]);
    s->n_tokens = 0;
    s->live = 0;
    return KIPP_OK;
}

/* The block sequence s will write into first, if it is shared (so must be copied first);
 * UINT32_MAX when the next position starts a fresh block or the block is private. */
static uint32_t shared_tail(const kipp_kv_pool *pool, const kipp_kv_seq *s, uint32_t n_new) {
    if (n_new == 0 || s->n_tokens % pool->block_size == 0) return UINT32_MAX;
    const uint32_t b = s->blocks[s->n_blocks - 1];
    return pool->refs[b] > 1 ? b : UINT32_MAX;
}

kipp_status kipp_kv_grow(kipp_kv_pool *pool, const uint32_t *ids, const uint32_t *n_new,
                         uint32_t n, char *err, size_t err_len) {
    /* 1. validate and size the tables (capacity only: nothing observable changes) */
    uint64_t need = 0;
    for (uint32_t i = 0; i < n; i++) {
        kipp_kv_seq *s = live_seq(pool, ids[i], "grow", err, err_len);
        if (!s) return KIPP_ERR_INVALID_ARG;
        for (uint32_t j = 0; j < i; j++)
            if (ids[j] == ids[i])
                return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                                 "KV grow: sequence %u is listed twice", ids[i]);
        if (n_new[i] > UINT32_MAX - s->n_tokens)
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "KV grow: sequence %u cannot grow by %u past %u tokens", ids[i],
                             n_new[i], s->n_tokens);
        const uint32_t blocks = kipp_kv_blocks_for(pool, s->n_tokens + n_new[i]);
        kipp_status st = table_reserve(s, blocks, err, err_len);
        if (st != KIPP_OK) return st;
        need += blocks - s->n_blocks;
    }
    /* 2. copies on write: k sequences writing into a block held by r copy min(k, r - 1)
     *    times (when every holder writes, the last one finds the block private) */
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t b = shared_tail(pool, &pool->seqs[ids[i]], n_new[i]);
        if (b == UINT32_MAX) continue;
        uint32_t k = 0, first = 1;
        for (uint32_t j = 0; j < n && first; j++) {
            if (shared_tail(pool, &pool->seqs[ids[j]], n_new[j]) != b) continue;
            if (j < i) first = 0; /* counted at j already */
            k++;
        }
        if (first) need += k < pool->refs[b] - 1 ? k : pool->refs[b] - 1;
    }
    if (need > pool->n_free)
        return kipp_errf(err, err_len, KIPP_ERR_KV_FULL,
                         "KV pool full: %llu more blocks of %u tokens needed for %u sequence(s), "
                         "%u of %u free (free or truncate sequences, or raise n_kv_blocks)",
                         (unsigned long long)need, pool->block_size, n, pool->n_free,
                         pool->n_blocks);
    /* 3. commit: cannot fail from here on */
    for (uint32_t i = 0; i < n; i++) {
        kipp_kv_seq *s = &pool->seqs[ids[i]];
        const uint32_t old = shared_tail(pool, s, n_new[i]);
        if (old != UINT32_MAX) {
            const uint32_t b = take_block(pool);
            pool->storage.copy_block(pool->storage.ctx, pool->storage.store, b, old);
            release_block(pool, old);
            s->blocks[s->n_blocks - 1] = b;
        }
        s->n_tokens += n_new[i];
        while (s->n_blocks < kipp_kv_blocks_for(pool, s->n_tokens))
            s->blocks[s->n_blocks++] = take_block(pool);
    }
    return KIPP_OK;
}

/* ---- KV types ---------------------------------------------------------------------------- */

const char *kipp_kv_type_name(kipp_kv_type t) {
    switch (t) {
    case KIPP_KV_TYPE_DEFAULT: return "default";
    case KIPP_KV_TYPE_F32: return "f32";
    case KIPP_KV_TYPE_F16: return "f16";
    case KIPP_KV_TYPE_BF16: return "bf16";
    case KIPP_KV_TYPE_Q8_0: return "q8_0";
    case KIPP_KV_TYPE_Q4_0: return "q4_0";
    }
    return "?";
}

size_t kipp_kv_type_size(kipp_kv_type t) {
    return t == KIPP_KV_TYPE_F32 ? 4 : t == KIPP_KV_TYPE_F16 || t == KIPP_KV_TYPE_BF16 ? 2 : 0;
}

int kipp_kv_type_quantized(kipp_kv_type t) {
    return t == KIPP_KV_TYPE_Q8_0 || t == KIPP_KV_TYPE_Q4_0;
}

uint64_t kipp_kv_row_bytes(kipp_kv_type t, uint64_t n) {
    if (t == KIPP_KV_TYPE_Q8_0) return n / KIPP_KV_QBLOCK * 34;
    if (t == KIPP_KV_TYPE_Q4_0) return n / KIPP_KV_QBLOCK * 18;
    return n * kipp_kv_type_size(t);
}

kipp_status kipp_kv_type_parse(const char *s, kipp_kv_type *out, char *err, size_t err_len) {
    static const kipp_kv_type all[] = {KIPP_KV_TYPE_DEFAULT, KIPP_KV_TYPE_F32, KIPP_KV_TYPE_F16,
                                       KIPP_KV_TYPE_BF16, KIPP_KV_TYPE_Q8_0, KIPP_KV_TYPE_Q4_0};
    for (size_t i = 0; s && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, kipp_kv_type_name(all[i])) == 0) { *out = all[i]; return KIPP_OK; }
    return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                     "unknown KV type '%s' (choose f32, f16, bf16, q8_0, q4_0 or default)", s ? s : "(null)");
}

/* ---- accounting ------------------------------------------------------------------------- */

void kipp_kv_pool_stats(const kipp_kv_pool *pool, kipp_kv_stats *out) {
    memset(out, 0, sizeof *out);
    const uint32_t bs = pool->block_size;
    out->block_size = bs;
    out->n_blocks = pool->n_blocks;
    out->n_blocks_free = pool->n_free;
    out->n_blocks_used = pool->n_blocks - pool->n_free;
    out->n_bytes_per_token = pool->bytes_per_token;
    out->n_bytes_per_block = out->n_bytes_per_token * bs;
    out->n_bytes_total = out->n_bytes_per_block * pool->n_blocks;
    out->n_bytes_used = out->n_bytes_per_block * out->n_blocks_used;
    for (uint32_t b = 0; b < pool->n_blocks; b++) out->n_blocks_shared += pool->refs[b] > 1;
    /* Filled slots: a private block counts its holder's fill. A shared block sits at the same
     * logical index in every holder's table (forks copy tables, copies on write replace in
     * place), but holders may fill it differently (one truncated inside it): it counts the
     * largest fill, taken from the lowest-numbered holder that has it. That scans the
     * other sequences once per shared table entry: fine for accounting, which is not on the
     * decode path. */
    for (uint32_t i = 0; i < pool->seq_cap; i++) {
        const kipp_kv_seq *s = &pool->seqs[i];
        if (!s->live) continue;
        out->n_seqs++;
        out->n_tokens += s->n_tokens;
        for (uint32_t lb = 0; lb < s->n_blocks; lb++) {
            const uint32_t b = s->blocks[lb];
            const uint32_t fill = lb + 1 < s->n_blocks ? bs : s->n_tokens - lb * bs;
            if (pool->refs[b] == 1) { out->n_slots_filled += fill; continue; }
            /* shared: this holder counts the block only if no other holder fills it more, and
             * among equal fills only the lowest-numbered holder counts it */
            int counts = 1;
            for (uint32_t j = 0; j < pool->seq_cap && counts; j++) {
                const kipp_kv_seq *o = &pool->seqs[j];
                if (j == i || !o->live || lb >= o->n_blocks || o->blocks[lb] != b) continue;
                const uint32_t ofill = lb + 1 < o->n_blocks ? bs : o->n_tokens - lb * bs;
                if (ofill > fill || (ofill == fill && j < i)) counts = 0;
            }
            if (counts) out->n_slots_filled += fill;
        }
    }
}
