/* prefix_cache.c — kept sequences as a prefix cache: chained block hashes in an
 * open-addressing table (rebuilt when entries change: at most max_entries × blocks keys),
 * token-by-token verification of every hit, LRU eviction. See prefix_cache.h. */
#include "engine/prefix_cache.h"

#include "core/error.h"
#include "engine/engine.h"
#include "engine/kv_track.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int live;
    uint32_t seq;      /* the kept sequence in the context */
    int32_t *tokens;   /* [n_tokens] what its KV holds; n_tokens is a multiple of block_size */
    uint32_t n_tokens;
    uint64_t *hashes;  /* [n_tokens / block_size] chained hash of the prefix ending each block */
    uint64_t last_use; /* LRU clock */
} pc_entry;

typedef struct {
    uint64_t hash;
    uint32_t entry, block; /* entry UINT32_MAX = empty slot */
} pc_slot;

struct kipp_prefix_cache {
    kipp_ctx *ctx;
    uint32_t block_size, max_entries;
    pc_entry *entries; /* [max_entries] */
    pc_slot *table;    /* [table_cap], a power of two */
    uint32_t table_cap;
    uint64_t clock;
    uint32_t *ref_scratch; /* [pool blocks] for the cached-only count */
    uint32_t pool_blocks;
    uint64_t *req_hashes;  /* [req_cap] a prompt's chained hashes */
    uint32_t req_cap;
    kipp_pc_stats st;
    kipp_kvt *kvt; /* KV-cache events (NULL: none): told of every sequence change */
};

/* The context's sequence operations, with the event tracker told. */
static void seq_free(kipp_prefix_cache *pc, uint32_t seq) {
    kipp_ctx_seq_free(pc->ctx, seq, NULL, 0);
    kipp_kvt_drop(pc->kvt, seq);
}

static kipp_status seq_truncate(kipp_prefix_cache *pc, uint32_t seq, uint32_t n_keep) {
    const kipp_status st = kipp_ctx_seq_truncate(pc->ctx, seq, n_keep, NULL, 0);
    if (st == KIPP_OK) kipp_kvt_truncate(pc->kvt, seq, n_keep);
    return st;
}

/* ---- hashing ---------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* hashes[i] covers tokens[0 .. (i+1)*bs - 1]: each block's hash folds in the previous one. */
static void chain_hashes(const int32_t *tokens, uint32_t n_blocks, uint32_t bs, uint64_t *hashes) {
    uint64_t h = 0x6b697070u; /* "kipp" */
    for (uint32_t b = 0; b < n_blocks; b++) {
        for (uint32_t i = 0; i < bs; i++) h = mix64(h ^ (uint32_t)tokens[(size_t)b * bs + i]);
        hashes[b] = h = mix64(h + b);
    }
}

/* ---- the table -------------------------------------------------------------------------- */

static void table_put(kipp_prefix_cache *pc, uint64_t hash, uint32_t entry, uint32_t block) {
    for (uint32_t i = (uint32_t)hash & (pc->table_cap - 1);; i = (i + 1) & (pc->table_cap - 1)) {
        pc_slot *s = &pc->table[i];
        if (s->entry == UINT32_MAX) {
            *s = (pc_slot){hash, entry, block};
            return;
        }
        if (s->hash == hash) return; /* another entry holds the same prefix: either will do */
    }
}

static const pc_slot *table_get(const kipp_prefix_cache *pc, uint64_t hash) {
    for (uint32_t i = (uint32_t)hash & (pc->table_cap - 1);; i = (i + 1) & (pc->table_cap - 1)) {
        const pc_slot *s = &pc->table[i];
        if (s->entry == UINT32_MAX) return NULL;
        if (s->hash == hash) return s;
    }
}

/* Rebuilds the table from the live entries (cheap: called when entries change). The table
 * is at least twice the keys, so probes end. */
static int table_rebuild(kipp_prefix_cache *pc) {
    uint64_t keys = 0;
    for (uint32_t e = 0; e < pc->max_entries; e++)
        if (pc->entries[e].live) keys += pc->entries[e].n_tokens / pc->block_size;
    uint32_t cap = 64;
    while (cap < 2 * keys + 1) cap *= 2;
    if (cap != pc->table_cap) {
        pc_slot *t = malloc((size_t)cap * sizeof *t);
        if (!t) return -1;
        free(pc->table);
        pc->table = t;
        pc->table_cap = cap;
    }
    for (uint32_t i = 0; i < pc->table_cap; i++) pc->table[i].entry = UINT32_MAX;
    for (uint32_t e = 0; e < pc->max_entries; e++) {
        const pc_entry *en = &pc->entries[e];
        if (!en->live) continue;
        for (uint32_t b = 0; b < en->n_tokens / pc->block_size; b++) table_put(pc, en->hashes[b], e, b);
    }
    return 0;
}

/* ---- life cycle ------------------------------------------------------------------------- */

kipp_status kipp_pc_init(kipp_ctx *ctx, uint32_t max_entries, kipp_prefix_cache **out, char *err,
                         size_t err_len) {
    *out = NULL;
    if (max_entries == 0)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "prefix cache: max_entries is 0");
    kipp_prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "prefix cache: out of memory");
    const kipp_kv_pool *pool = kipp_ctx_kv_pool(ctx);
    pc->ctx = ctx;
    pc->block_size = pool->block_size;
    pc->max_entries = max_entries;
    pc->pool_blocks = pool->n_blocks;
    pc->entries = calloc(max_entries, sizeof *pc->entries);
    pc->ref_scratch = calloc(pool->n_blocks, sizeof *pc->ref_scratch);
    if (!pc->entries || !pc->ref_scratch || table_rebuild(pc) != 0) {
        kipp_pc_free(pc);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "prefix cache: out of memory");
    }
    *out = pc;
    return KIPP_OK;
}

void kipp_pc_set_tracker(kipp_prefix_cache *pc, kipp_kvt *kvt) { pc->kvt = kvt; }

static void entry_drop(kipp_prefix_cache *pc, pc_entry *en) {
    seq_free(pc, en->seq);
    free(en->tokens);
    free(en->hashes);
    memset(en, 0, sizeof *en);
}

void kipp_pc_free(kipp_prefix_cache *pc) {
    if (!pc) return;
    for (uint32_t e = 0; pc->entries && e < pc->max_entries; e++)
        if (pc->entries[e].live) entry_drop(pc, &pc->entries[e]);
    free(pc->entries);
    free(pc->table);
    free(pc->ref_scratch);
    free(pc->req_hashes);
    free(pc);
}

int kipp_pc_evict_one(kipp_prefix_cache *pc) {
    pc_entry *lru = NULL;
    for (uint32_t e = 0; e < pc->max_entries; e++) {
        pc_entry *en = &pc->entries[e];
        if (en->live && (!lru || en->last_use < lru->last_use)) lru = en;
    }
    if (!lru) return 0;
    entry_drop(pc, lru);
    pc->st.evictions++;
    pc->st.n_entries--;
    table_rebuild(pc); /* shrinking never needs memory */
    return 1;
}

/* ---- lookup ----------------------------------------------------------------------------- */

static int ensure_req_hashes(kipp_prefix_cache *pc, uint32_t n_blocks) {
    if (n_blocks <= pc->req_cap) return 0;
    uint64_t *h = realloc(pc->req_hashes, (size_t)n_blocks * sizeof *h);
    if (!h) return -1;
    pc->req_hashes = h;
    pc->req_cap = n_blocks;
    return 0;
}

/* The longest run of whole blocks of tokens that some entry holds (verified), as
 * (entry, blocks); blocks 0 = none. Needs pc->req_hashes filled for n_blocks. */
static uint32_t longest_match(const kipp_prefix_cache *pc, const int32_t *tokens, uint32_t n_blocks,
                              uint32_t *entry) {
    for (uint32_t b = n_blocks; b-- > 0;) { /* longest first: a hit at b implies b-1 ... 0 */
        const pc_slot *s = table_get(pc, pc->req_hashes[b]);
        if (!s || s->block != b) continue;
        const pc_entry *en = &pc->entries[s->entry];
        const size_t n_tok = (size_t)(b + 1) * pc->block_size;
        if (memcmp(en->tokens, tokens, n_tok * sizeof *tokens) != 0) continue; /* collision */
        *entry = s->entry;
        return b + 1;
    }
    return 0;
}

uint32_t kipp_pc_acquire(kipp_prefix_cache *pc, const int32_t *tokens, uint32_t n, uint32_t *seq) {
    if (n < 2) return 0;
    const uint32_t n_blocks = (n - 1) / pc->block_size; /* whole blocks within n - 1 tokens */
    if (n_blocks == 0 || ensure_req_hashes(pc, n_blocks) != 0) return 0;
    chain_hashes(tokens, n_blocks, pc->block_size, pc->req_hashes);
    uint32_t e;
    const uint32_t hit_blocks = longest_match(pc, tokens, n_blocks, &e);
    if (hit_blocks == 0) return 0;
    pc_entry *en = &pc->entries[e];
    const uint32_t n_hit = hit_blocks * pc->block_size;
    uint32_t dst;
    if (kipp_ctx_seq_fork(pc->ctx, en->seq, &dst, NULL, 0) != KIPP_OK) return 0;
    kipp_kvt_fork(pc->kvt, en->seq, dst);
    if (n_hit < en->n_tokens && seq_truncate(pc, dst, n_hit) != KIPP_OK) {
        seq_free(pc, dst);
        return 0;
    }
    en->last_use = ++pc->clock;
    *seq = dst;
    return n_hit;
}

void kipp_pc_note_lookup(kipp_prefix_cache *pc, uint32_t n_tokens, uint32_t n_hit) {
    pc->st.lookups++;
    pc->st.lookup_tokens += n_tokens;
    pc->st.hits += n_hit > 0;
    pc->st.hit_tokens += n_hit;
}

/* ---- insertion -------------------------------------------------------------------------- */

void kipp_pc_insert(kipp_prefix_cache *pc, uint32_t seq, const int32_t *tokens, uint32_t n) {
    const uint32_t n_blocks = n / pc->block_size;
    if (n_blocks == 0 || ensure_req_hashes(pc, n_blocks) != 0) goto drop;
    chain_hashes(tokens, n_blocks, pc->block_size, pc->req_hashes);
    uint32_t e;
    const uint32_t have = longest_match(pc, tokens, n_blocks, &e);
    if (have == n_blocks) { /* nothing new: keep the entry that has it warm */
        pc->entries[e].last_use = ++pc->clock;
        goto drop;
    }
    /* Entries that this one extends (every one of their blocks is a prefix of ours) are now
     * redundant; their blocks stay alive wherever we share them. */
    for (uint32_t i = 0; i < pc->max_entries; i++) {
        pc_entry *en = &pc->entries[i];
        const uint32_t nb = en->n_tokens / pc->block_size;
        if (en->live && nb <= n_blocks && en->hashes[nb - 1] == pc->req_hashes[nb - 1] &&
            memcmp(en->tokens, tokens, (size_t)en->n_tokens * sizeof *tokens) == 0) {
            entry_drop(pc, en);
            pc->st.n_entries--;
        }
    }
    if (pc->st.n_entries == pc->max_entries) kipp_pc_evict_one(pc);
    pc_entry *slot = NULL;
    for (uint32_t i = 0; i < pc->max_entries && !slot; i++)
        if (!pc->entries[i].live) slot = &pc->entries[i];
    const uint32_t n_keep = n_blocks * pc->block_size;
    if (!slot) goto drop_rebuild;
    slot->tokens = malloc((size_t)n_keep * sizeof *slot->tokens);
    slot->hashes = malloc((size_t)n_blocks * sizeof *slot->hashes);
    if (!slot->tokens || !slot->hashes ||
        seq_truncate(pc, seq, n_keep) != KIPP_OK) {
        free(slot->tokens);
        free(slot->hashes);
        slot->tokens = NULL;
        slot->hashes = NULL;
        goto drop_rebuild;
    }
    memcpy(slot->tokens, tokens, (size_t)n_keep * sizeof *tokens);
    memcpy(slot->hashes, pc->req_hashes, (size_t)n_blocks * sizeof *slot->hashes);
    slot->seq = seq;
    slot->n_tokens = n_keep;
    slot->last_use = ++pc->clock;
    slot->live = 1;
    pc->st.n_entries++;
    pc->st.inserts++;
    if (table_rebuild(pc) != 0) { /* no memory for a larger table: forget this entry */
        entry_drop(pc, slot);
        pc->st.n_entries--;
        table_rebuild(pc);
    }
    return;
drop_rebuild:
    table_rebuild(pc);
drop:
    seq_free(pc, seq);
}

/* ---- accounting ------------------------------------------------------------------------- */

void kipp_pc_get_stats(const kipp_prefix_cache *pc, kipp_pc_stats *out) {
    *out = pc->st;
    const kipp_kv_pool *pool = kipp_ctx_kv_pool(pc->ctx);
    memset(pc->ref_scratch, 0, (size_t)pc->pool_blocks * sizeof *pc->ref_scratch);
    for (uint32_t e = 0; e < pc->max_entries; e++) {
        const pc_entry *en = &pc->entries[e];
        const kipp_kv_seq *s = en->live ? kipp_kv_seq_get(pool, en->seq) : NULL;
        for (uint32_t b = 0; s && b < s->n_blocks; b++) pc->ref_scratch[s->blocks[b]]++;
    }
    out->n_blocks_cached_only = 0;
    for (uint32_t b = 0; b < pc->pool_blocks; b++)
        out->n_blocks_cached_only += pc->ref_scratch[b] && pc->ref_scratch[b] == pool->refs[b];
}
