/* context.c — sequences on one backend sharing one KV block pool: resolves the backend and
 * its options (KV type, ISA level, threads), has the backend allocate the pool's storage,
 * validates every request (sequence ids, token ids, contiguous positions, context and pool
 * room) before any state changes, runs batches through the backend and checks that logits
 * come back finite. The single-sequence calls (kipp_decode, kipp_ctx_truncate, ...) work on
 * sequence 0. Does not schedule sequences or decide what to batch (src/engine/sched.c). */
#include "engine/engine.h"

#include "backend/backend.h"
#include "core/error.h"
#include "core/types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KIPP_DEFAULT_CTX_CAP 4096u

struct kipp_ctx {
    kipp_model *m;
    const kipp_backend_ops *ops;
    void *state;
    void *kv_store; /* the backend's KV storage behind pool */
    kipp_kv_type kv_type, kv_type_v;
    uint32_t n_logits; /* floats per output row: logits, or n_embd for embeddings */
    int embeddings;    /* rows are final-norm hidden states (kipp_ctx_params.embeddings) */
    kipp_kv_pool *pool;
    uint32_t n_ctx; /* longest sequence */
    /* a batch normalized for the backend (no NULL defaults), grown on demand */
    uint32_t *seq_ids, *positions;
    uint8_t *want;
    uint32_t cap;
    /* per-batch bookkeeping, indexed by sequence id: next position, tokens added */
    uint32_t *next_pos, *n_add;
    uint32_t *grow_ids, *grow_n; /* sequences that grow, and by how much */
    uint32_t seq_cap;
    char rope[128]; /* the model's rope scaling, described (kipp_ctx_info.rope) */
};

kipp_ctx_params kipp_ctx_default_params(void) {
    kipp_ctx_params p = {.backend = NULL, .n_ctx = 0, .n_threads = 0, .kv_block_size = 0,
                         .n_kv_blocks = 0, .kv_type = KIPP_KV_TYPE_DEFAULT, .isa = NULL,
                         .device = 0, .n_logits = 0, .embeddings = 0};
    return p;
}

/* The options a backend gets for p, with the KV type resolved and checked against its
 * capabilities. */
static kipp_status resolve_options(const kipp_backend_ops *ops, const kipp_ctx_params *p,
                                   kipp_backend_options *o, char *err, size_t err_len) {
    kipp_backend_caps caps;
    ops->caps(&caps);
    *o = (kipp_backend_options){.n_threads = p->n_threads, .isa = p->isa, .device = p->device,
                                .kv_type = p->kv_type ? p->kv_type : caps.kv_default,
                                .n_logits = p->n_logits, .embeddings = p->embeddings != 0};
    o->kv_type_v = p->kv_type_v ? p->kv_type_v : o->kv_type;
    for (int v = 0; v < 2; v++) {
        const kipp_kv_type t = v ? o->kv_type_v : o->kv_type;
        if (t < 0 || t > KIPP_KV_TYPE_LAST || !(caps.kv_types & (1u << t)))
            return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                             "backend '%s' cannot store a KV cache of type %s%s", ops->name,
                             kipp_kv_type_name(t), v ? " (V)" : "");
    }
    if (o->kv_type_v != o->kv_type && !caps.kv_split)
        return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                         "backend '%s' keeps K and V in one type: K %s and V %s differ",
                         ops->name, kipp_kv_type_name(o->kv_type),
                         kipp_kv_type_name(o->kv_type_v));
    return KIPP_OK;
}

/* Every weight of m must be of a type the backend runs (its capabilities). */
static kipp_status check_weight_types(const kipp_backend_ops *ops, const kipp_model *m, char *err,
                                      size_t err_len) {
    kipp_backend_caps caps;
    ops->caps(&caps);
    const kipp_gguf_tensor *top[2] = {m->tok_embd, m->output};
    for (uint32_t l = 0; l <= m->hp.n_layer; l++) {
        const kipp_layer_weights *w = l < m->hp.n_layer ? &m->layers[l] : NULL;
        const kipp_gguf_tensor *const ts[] = {
            w ? w->wq : top[0], w ? w->wk : top[1], w ? w->wv : NULL, w ? w->wo : NULL,
            w ? w->w_gate : NULL, w ? w->w_up : NULL, w ? w->w_down : NULL};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
            if (!ts[i] || (ts[i]->type < 64 && (caps.weight_types >> ts[i]->type & 1))) continue;
            return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                             "backend '%s' cannot run weights of type %s (tensor %s)", ops->name,
                             kipp_type_name(ts[i]->type), ts[i]->name);
        }
    }
    return KIPP_OK;
}

kipp_status kipp_ctx_kv_bytes_per_token(const kipp_model *m, const kipp_ctx_params *p,
                                        uint64_t *out, kipp_kv_type *type, char *err,
                                        size_t err_len) {
    const kipp_backend_ops *ops;
    kipp_backend_options o;
    kipp_status st = kipp_backend_find(p->backend, &ops, err, err_len);
    if (st == KIPP_OK) st = resolve_options(ops, p, &o, err, err_len);
    if (st != KIPP_OK) return st;
    if (type) *type = o.kv_type;
    const uint32_t D = m->hp.head_dim, kv_dim = m->hp.n_head_kv * D;
    for (int v = 0; v < 2; v++) {
        const kipp_kv_type t = v ? o.kv_type_v : o.kv_type;
        if (kipp_kv_type_quantized(t) && D % KIPP_KV_QBLOCK)
            return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                             "KV type %s needs a head dim that is a multiple of %u; this model's "
                             "head dim is %u",
                             kipp_kv_type_name(t), KIPP_KV_QBLOCK, D);
    }
    *out = (uint64_t)m->hp.n_layer * (kipp_kv_row_bytes(o.kv_type, kv_dim) +
                                      kipp_kv_row_bytes(o.kv_type_v, kv_dim));
    return KIPP_OK;
}

kipp_status kipp_ctx_init(kipp_model *m, const kipp_ctx_params *p, kipp_ctx **out, char *err,
                          size_t err_len) {
    *out = NULL;
    const kipp_backend_ops *ops;
    kipp_backend_options o;
    kipp_status st = kipp_backend_find(p->backend, &ops, err, err_len);
    if (st == KIPP_OK) st = resolve_options(ops, p, &o, err, err_len);
    if (st == KIPP_OK) st = check_weight_types(ops, m, err, err_len);
    if (st != KIPP_OK) return st;
    if (!o.embeddings && !m->hp.has_lm_head)
        return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                         "this is an embedding model (pooling '%s') without an lm_head: it "
                         "cannot generate text or give logits; create the context with "
                         "embeddings = 1",
                         kipp_pooling_name(m->hp.pooling));
    if (o.embeddings) o.n_logits = 0; /* the head never runs */
    else if (o.n_logits == 0) o.n_logits = m->hp.n_vocab;
    if (o.n_logits > m->hp.n_vocab)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "logits limit %u exceeds the vocabulary size %u", o.n_logits, m->hp.n_vocab);
    uint32_t n_ctx = p->n_ctx;
    if (n_ctx == 0) n_ctx = m->hp.n_ctx_train < KIPP_DEFAULT_CTX_CAP ? m->hp.n_ctx_train
                                                                      : KIPP_DEFAULT_CTX_CAP;
    if (n_ctx > m->hp.n_ctx_train && m->hp.rope_scaling == KIPP_ROPE_SCALING_NONE)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "context size %u exceeds the model's trained context length %u (no rope scaling; "
                         "YaRN extends it: --rope-scaling yarn --rope-scale N)",
                         n_ctx, m->hp.n_ctx_train);
    if (n_ctx > m->hp.n_ctx_train) {
        char rope[128];
        kipp_rope_describe(&m->hp, rope, sizeof rope);
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "context size %u exceeds the model's context length %u with rope scaling %s", n_ctx,
                         m->hp.n_ctx_train, rope);
    }
    const kipp_kv_layout lay = {.n_layer = m->hp.n_layer,
                                .kv_dim = m->hp.n_head_kv * m->hp.head_dim,
                                .block_size = p->kv_block_size ? p->kv_block_size
                                                               : KIPP_KV_DEFAULT_BLOCK_SIZE,
                                .type = o.kv_type,
                                .type_v = o.kv_type_v};
    uint32_t n_blocks = p->n_kv_blocks;
    if (n_blocks == 0) n_blocks = (n_ctx + lay.block_size - 1) / lay.block_size;
    uint64_t per_token;
    if ((st = kipp_ctx_kv_bytes_per_token(m, p, &per_token, NULL, err, err_len)) != KIPP_OK) return st;
    kipp_backend_memory mem;
    if ((st = ops->memory(&o, &mem, err, err_len)) != KIPP_OK) return st;
    const uint64_t want = per_token * lay.block_size * n_blocks;
    if (want > mem.total)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM,
                         "a KV pool of %u blocks x %u tokens x %llu bytes per token (%.2f GiB "
                         "of %s K, %s V) exceeds the %.2f GiB of %s memory; ask for fewer "
                         "blocks or a smaller KV type",
                         n_blocks, lay.block_size, (unsigned long long)per_token,
                         want / 1073741824.0, kipp_kv_type_name(o.kv_type),
                         kipp_kv_type_name(o.kv_type_v), mem.total / 1073741824.0, mem.kind);
    kipp_ctx *c = calloc(1, sizeof *c);
    if (!c) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "context: out of memory");
    c->m = m;
    kipp_rope_describe(&m->hp, c->rope, sizeof c->rope);
    c->ops = ops;
    c->n_ctx = n_ctx;
    c->kv_type = o.kv_type;
    c->kv_type_v = o.kv_type_v;
    c->n_logits = o.embeddings ? m->hp.n_embd : o.n_logits;
    c->embeddings = o.embeddings;
    uint32_t seq0;
    /* a failure here is fatal for the caller: never retried on another backend */
    if ((st = ops->init(m, n_ctx, &o, &c->state, err, err_len)) != KIPP_OK ||
        (st = ops->kv_alloc(c->state, &lay, n_blocks, &c->kv_store, err, err_len)) != KIPP_OK)
        goto fail;
    const kipp_kv_params kp = {.block_size = lay.block_size, .n_blocks = n_blocks,
                               .bytes_per_token = per_token};
    const kipp_kv_storage kst = {.ctx = c->state, .store = c->kv_store,
                                 .copy_block = ops->kv_copy_block};
    if ((st = kipp_kv_pool_init(&kp, &kst, &c->pool, err, err_len)) != KIPP_OK ||
        (st = kipp_kv_seq_new(c->pool, &seq0, err, err_len)) != KIPP_OK)
        goto fail;
    *out = c;
    return KIPP_OK;
fail:
    kipp_ctx_free(c);
    return st;
}

void kipp_ctx_free(kipp_ctx *c) {
    if (!c) return;
    kipp_kv_pool_free(c->pool);
    if (c->kv_store) c->ops->kv_free(c->state, c->kv_store);
    if (c->state) c->ops->free(c->state);
    free(c->seq_ids); free(c->positions); free(c->want);
    free(c->next_pos); free(c->n_add); free(c->grow_ids); free(c->grow_n);
    free(c);
}

kipp_kv_pool *kipp_ctx_kv_pool(kipp_ctx *c) { return c->pool; }

uint32_t kipp_ctx_n_ctx(const kipp_ctx *c) { return c->n_ctx; }

void kipp_ctx_host_for(kipp_ctx *c, uint32_t n, kipp_host_fn fn, void *arg) {
    if (c->ops->host_for && n > 1) {
        c->ops->host_for(c->state, n, fn, arg);
        return;
    }
    for (uint32_t i = 0; i < n; i++) fn(arg, i, 0);
}

int kipp_ctx_host_threads(kipp_ctx *c) {
    const int n = c->ops->host_threads ? c->ops->host_threads(c->state) : 1;
    return n > 0 ? n : 1;
}

void kipp_ctx_kv_stats(const kipp_ctx *c, kipp_kv_stats *out) { kipp_kv_pool_stats(c->pool, out); }

void kipp_ctx_get_info(const kipp_ctx *c, kipp_ctx_info *out) {
    kipp_kv_stats ks;
    kipp_kv_pool_stats(c->pool, &ks);
    memset(out, 0, sizeof *out);
    out->backend = c->ops->name;
    c->ops->describe(c->state, &out->isa, &out->n_threads, &out->weights_repacked);
    out->kernels = c->ops->kernels ? c->ops->kernels(c->state) : NULL;
    out->kv_type = c->kv_type;
    out->kv_type_v = c->kv_type_v;
    out->n_ctx = c->n_ctx;
    out->kv_block_size = ks.block_size;
    out->kv_blocks = ks.n_blocks;
    out->kv_bytes_per_token = ks.n_bytes_per_token;
    out->kv_bytes = ks.n_bytes_total;
    out->n_logits = c->n_logits;
    out->embeddings = c->embeddings;
    out->rope = c->rope;
}

/* ---- sequences -------------------------------------------------------------------------- */

uint32_t kipp_ctx_seq_n_past(const kipp_ctx *c, uint32_t seq_id) {
    const kipp_kv_seq *s = kipp_kv_seq_get(c->pool, seq_id);
    return s ? s->n_tokens : 0;
}

uint32_t kipp_ctx_n_past(const kipp_ctx *c) { return kipp_ctx_seq_n_past(c, 0); }

kipp_status kipp_ctx_seq_new(kipp_ctx *c, uint32_t *seq_id, char *err, size_t err_len) {
    return kipp_kv_seq_new(c->pool, seq_id, err, err_len);
}

kipp_status kipp_ctx_seq_fork(kipp_ctx *c, uint32_t src, uint32_t *dst, char *err,
                              size_t err_len) {
    return kipp_kv_seq_fork(c->pool, src, dst, err, err_len);
}

kipp_status kipp_ctx_seq_free(kipp_ctx *c, uint32_t seq_id, char *err, size_t err_len) {
    if (seq_id == 0)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "sequence 0 cannot be freed (truncate it to 0 to release its blocks)");
    return kipp_kv_seq_free(c->pool, seq_id, err, err_len);
}

kipp_status kipp_ctx_seq_truncate(kipp_ctx *c, uint32_t seq_id, uint32_t n_keep, char *err,
                                  size_t err_len) {
    return kipp_kv_seq_truncate(c->pool, seq_id, n_keep, err, err_len);
}

kipp_status kipp_ctx_truncate(kipp_ctx *c, uint32_t n_keep, char *err, size_t err_len) {
    return kipp_ctx_seq_truncate(c, 0, n_keep, err, err_len);
}

/* ---- validation ------------------------------------------------------------------------- */

static kipp_status check_token_ids(const kipp_ctx *c, const int32_t *tokens, uint32_t n,
                                   char *err, size_t err_len) {
    if (n > 0 && !tokens)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "decode: tokens is NULL");
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= c->m->hp.n_vocab)
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "decode: token %d at index %u is outside the vocabulary (0..%u)",
                             tokens[i], i, c->m->hp.n_vocab - 1);
    return KIPP_OK;
}

static kipp_status check_logits(const kipp_ctx *c, const float *logits, uint32_t pos, char *err,
                                size_t err_len) {
    for (uint32_t i = 0; i < c->n_logits; i++)
        if (!isfinite(logits[i]))
            return kipp_errf(err, err_len, KIPP_ERR_NUMERIC,
                             "decode: %s %u at position %u is %s; the model file may contain "
                             "NaN/Inf weights (check with `kipp --check-weights`)",
                             c->embeddings ? "embedding element" : "logit", i, pos,
                             isnan(logits[i]) ? "NaN" : "Inf");
    return KIPP_OK;
}

/* Grows the scratch arrays to n batch entries and the pool's sequence count. */
static kipp_status reserve_scratch(kipp_ctx *c, uint32_t n, char *err, size_t err_len) {
    if (n > c->cap) {
        uint32_t *s = realloc(c->seq_ids, (size_t)n * sizeof *s);
        if (s) c->seq_ids = s;
        uint32_t *p = s ? realloc(c->positions, (size_t)n * sizeof *p) : NULL;
        if (p) c->positions = p;
        uint8_t *w = p ? realloc(c->want, n) : NULL;
        if (!w)
            return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "decode: out of memory for %u tokens", n);
        c->want = w;
        c->cap = n;
    }
    const uint32_t n_seq = c->pool->seq_cap;
    if (n_seq > c->seq_cap) {
        uint32_t *a = realloc(c->next_pos, (size_t)n_seq * sizeof *a);
        if (a) c->next_pos = a;
        uint32_t *b = a ? realloc(c->n_add, (size_t)n_seq * sizeof *b) : NULL;
        if (b) c->n_add = b;
        uint32_t *g = b ? realloc(c->grow_ids, (size_t)n_seq * sizeof *g) : NULL;
        if (g) c->grow_ids = g;
        uint32_t *gn = g ? realloc(c->grow_n, (size_t)n_seq * sizeof *gn) : NULL;
        if (!gn)
            return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "decode: out of memory for %u sequences",
                             n_seq);
        c->grow_n = gn;
        c->seq_cap = n_seq;
    }
    return KIPP_OK;
}

/* Which tokens want logits: the batch's flags, only the last token, or none. */
enum { WANT_FLAGS, WANT_LAST, WANT_NONE };

/* Fills c->seq_ids/positions/want from b (applying the NULL defaults and want_mode), checks sequence ids, position order and context room, and lists
 * the sequences that grow in c->grow_ids with their token counts in c->grow_n. Returns the
 * number of wanted tokens in *n_want. */
static kipp_status normalize(kipp_ctx *c, const kipp_batch *b, int want_mode, uint32_t *n_grow,
                             uint32_t *n_want, char *err, size_t err_len) {
    kipp_status st = reserve_scratch(c, b->n, err, err_len);
    if (st != KIPP_OK) return st;
    *n_grow = 0;
    *n_want = 0;
    for (uint32_t i = 0; i < b->n; i++) {
        const uint32_t id = b->seq_ids ? b->seq_ids[i] : 0;
        const kipp_kv_seq *s = kipp_kv_seq_get(c->pool, id);
        if (!s)
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "decode: token %u names sequence %u, which does not exist", i, id);
        uint32_t k = 0;
        while (k < *n_grow && c->grow_ids[k] != id) k++;
        if (k == *n_grow) { /* first token of this sequence in the batch */
            c->grow_ids[(*n_grow)++] = id;
            c->next_pos[id] = s->n_tokens;
            c->n_add[id] = 0;
        }
        const uint32_t want_pos = c->next_pos[id];
        const uint32_t pos = b->positions ? b->positions[i] : want_pos;
        if (pos != want_pos)
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "decode: token %u is at position %u of sequence %u, which continues "
                             "at position %u",
                             i, pos, id, want_pos);
        if (pos >= c->n_ctx)
            return kipp_errf(err, err_len, KIPP_ERR_CONTEXT_FULL,
                             "decode: position %u of sequence %u is beyond the context size %u",
                             pos, id, c->n_ctx);
        c->seq_ids[i] = id;
        c->positions[i] = pos;
        c->want[i] = want_mode == WANT_LAST   ? i + 1 == b->n
                     : want_mode == WANT_NONE ? 0
                     : b->want_logits         ? b->want_logits[i] != 0
                                              : 1;
        *n_want += c->want[i];
        c->next_pos[id] = pos + 1;
        c->n_add[id]++;
    }
    for (uint32_t k = 0; k < *n_grow; k++) c->grow_n[k] = c->n_add[c->grow_ids[k]];
    return KIPP_OK;
}

/* ---- decoding --------------------------------------------------------------------------- */

static kipp_status decode(kipp_ctx *c, const kipp_batch *b, int want_mode, float *logits,
                          char *err, size_t err_len) {
    kipp_status st = check_token_ids(c, b->tokens, b->n, err, err_len);
    if (st != KIPP_OK || b->n == 0) return st;
    uint32_t n_grow, n_want;
    if ((st = normalize(c, b, want_mode, &n_grow, &n_want, err, err_len)) != KIPP_OK) return st;
    if (n_want > 0 && !logits)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "decode: %u tokens want logits but the logits buffer is NULL", n_want);
    /* the last check, and atomic itself: the pool has room for every sequence or nothing
     * changes (KIPP_ERR_KV_FULL) */
    if ((st = kipp_kv_grow(c->pool, c->grow_ids, c->grow_n, n_grow, err, err_len)) != KIPP_OK)
        return st;
    const kipp_batch nb = {.n = b->n, .tokens = b->tokens, .seq_ids = c->seq_ids,
                           .positions = c->positions, .want_logits = c->want};
    st = c->ops->decode_batch(c->state, c->pool, &nb, logits, err, err_len);
    if (st != KIPP_OK) { /* roll every sequence back to where it was */
        for (uint32_t k = 0; k < n_grow; k++) {
            const uint32_t id = c->grow_ids[k];
            kipp_kv_seq_truncate(c->pool, id, kipp_ctx_seq_n_past(c, id) - c->grow_n[k], NULL, 0);
        }
        return st;
    }
    for (uint32_t i = 0, r = 0; i < b->n; i++) {
        if (!c->want[i]) continue;
        st = check_logits(c, logits + (size_t)r++ * c->n_logits, c->positions[i], err, err_len);
        if (st != KIPP_OK) return st;
    }
    return KIPP_OK;
}

kipp_status kipp_decode_batch(kipp_ctx *c, const kipp_batch *b, float *logits, char *err,
                              size_t err_len) {
    if (!b) return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "decode: batch is NULL");
    return decode(c, b, WANT_FLAGS, logits, err, err_len);
}

kipp_status kipp_decode(kipp_ctx *c, const int32_t *tokens, uint32_t n, float *logits,
                        char *err, size_t err_len) {
    const uint32_t n_past = kipp_ctx_n_past(c);
    if ((uint64_t)n_past + n > c->n_ctx)
        return kipp_errf(err, err_len, KIPP_ERR_CONTEXT_FULL,
                         "decode: %u + %u tokens exceed the context size %u", n_past, n, c->n_ctx);
    const kipp_batch b = {.n = n, .tokens = tokens}; /* sequence 0, continuing */
    return decode(c, &b, logits ? WANT_LAST : WANT_NONE, logits, err, err_len);
}

kipp_status kipp_forward_nocache(kipp_ctx *c, const int32_t *tokens, uint32_t n, float *logits,
                                 char *err, size_t err_len) {
    kipp_status st = check_token_ids(c, tokens, n, err, err_len);
    if (st != KIPP_OK) return st;
    if (n == 0) return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "forward: no tokens");
    if (n > c->n_ctx)
        return kipp_errf(err, err_len, KIPP_ERR_CONTEXT_FULL,
                         "forward: %u tokens exceed the context size %u", n, c->n_ctx);
    st = c->ops->forward_nocache(c->state, tokens, n, logits, err, err_len);
    if (st != KIPP_OK || !logits) return st;
    return check_logits(c, logits, n - 1, err, err_len);
}
