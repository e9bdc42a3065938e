/* gates_kv.c — the paged-KV model gates of build/kipp_test on a GGUF M and golden vectors V:
 *   multilogit:      one batch of N tokens (logits at every position) == N single steps,
 *                    also for mixed batches of several sequences; batch validation;
 *   paged:           adversarial block tables (shuffled, reused, garbage-filled blocks,
 *                    forks sharing prefixes, copy-on-write, rollback) == identity layout;
 *   pooled:          many interleaved sequences in one pool == each one's solo run;
 *   fault-reference: the golden gate's checks on the identity layout (the tolerance gate
 *                    of the fault matrix in docs/kv-cache.md).
 * Each runs on the backend and KV type the flags name (default cpu-ref, f32); every
 * context a gate opens uses them. All comparisons between layouts and batchings are within
 * 1e-6 with exact argmax: they run the same per-token arithmetic on one backend. Does not
 * test the pool in isolation (test_kv.c does). */
#include "gates.h"

#include "engine/engine.h"
#include "gate_common.h"
#include "kt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROMPTS KT_MAX_PROMPTS
#define PAGED_BLOCKS 64u /* blocks in the adversarial and pooled pools */

typedef struct {
    int32_t *ids;
    size_t n;
    float *ref; /* [n][n_vocab] identity-layout single-step logits */
} kv_prompt;

typedef struct {
    kt_gate g;
    kv_prompt p[MAX_PROMPTS];
    size_t n_prompts;
    uint32_t n_vocab;
    double worst;
} kv_gate;

static float *row(const float *rows, size_t i, uint32_t n_vocab) {
    return (float *)rows + i * n_vocab;
}

/* Compares one position's logits to its reference (kt_same_ok: 1e-6 on cpu-ref, NMSE 1e-5
 * elsewhere; exact argmax). */
static void compare(kv_gate *k, const float *got, const float *ref, const char *what, size_t pos) {
    double e, tol;
    const char *measure;
    KT_CHECK(kt_same_ok(&k->g, got, ref, k->n_vocab, &e, &tol, &measure),
             "%s %s position %zu: logits vs reference %s %.3g > %g", k->g.label, what, pos,
             measure, e, tol);
    KT_CHECK(kt_same_argmax(&k->g, got, ref, k->n_vocab),
             "%s %s position %zu: argmax %u, reference %u", k->g.label, what, pos,
             kt_argmax(got, k->n_vocab), kt_argmax(ref, k->n_vocab));
    if (e > k->worst) k->worst = e;
}

/* Checks that sequence `seq` of c sits in the identity layout (logical block i in block i). */
static int is_identity(kipp_ctx *c, uint32_t seq) {
    const kipp_kv_seq *s = kipp_kv_seq_get(kipp_ctx_kv_pool(c), seq);
    if (!s) return 0;
    for (uint32_t i = 0; i < s->n_blocks; i++)
        if (s->blocks[i] != i) return 0;
    return 1;
}

/* The identity-layout reference: ids decoded one token at a time into sequence 0 of c
 * (truncated to 0 first, no other sequence in c's pool holds blocks), logits of every
 * position into out[n][n_vocab]. */
static int identity_run(kipp_ctx *c, const int32_t *ids, size_t n, float *out, uint32_t n_vocab) {
    char err[KIPP_ERR_LEN];
    kipp_ctx_truncate(c, 0, err, sizeof err);
    for (size_t pos = 0; pos < n; pos++) {
        if (kipp_decode(c, &ids[pos], 1, row(out, pos, n_vocab), err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "identity run, position %zu: %s", pos, err);
            return 0;
        }
    }
    KT_CHECK(is_identity(c, 0), "the reference run is not in the identity layout");
    return 1;
}

static void kv_close(kv_gate *k) {
    for (size_t i = 0; i < k->n_prompts; i++) {
        free(k->p[i].ids);
        free(k->p[i].ref);
    }
    kt_gate_close(&k->g);
}

/* Opens the vectors and model on o's backend and KV type (cp: the context's other params,
 * NULL = default) and, with_refs, computes every prompt's identity-layout reference logits. */
static int kv_open(kv_gate *k, const char *model_path, const char *vec_dir, const kt_opts *o,
                   const kipp_ctx_params *cp, int with_refs) {
    memset(k, 0, sizeof *k);
    if (!kt_gate_open(&k->g, model_path, vec_dir, o, cp)) return 0;
    k->n_vocab = k->g.info.n_vocab;
    json_t *prompts = json_object_get(k->g.mf.root, "prompts");
    for (size_t pi = 0; pi < json_array_size(prompts) && pi < MAX_PROMPTS; pi++) {
        kv_prompt *p = &k->p[k->n_prompts];
        p->ids = kt_prompt_tokens(json_array_get(prompts, pi), &p->n);
        if (!p->ids) { KT_CHECK(0, "prompt %zu has no tokens", pi); continue; }
        k->n_prompts++;
        if (!with_refs) continue;
        p->ref = malloc(p->n * k->n_vocab * sizeof(float));
        if (!p->ref || !identity_run(k->g.c, p->ids, p->n, p->ref, k->n_vocab)) {
            fprintf(stderr, "gate: no reference for prompt %zu\n", pi);
            kv_close(k);
            return 0;
        }
    }
    return 1;
}

static int kv_finish(kv_gate *k, const char *name) {
    const int ref_backend = k->g.cp.backend && strcmp(k->g.cp.backend, KT_REF_BACKEND) == 0;
    printf("%s gate (%s): %zu prompts, worst %s vs reference = %.3g, tolerance = %g\n", name,
           k->g.label, k->n_prompts, ref_backend ? "max |a-b|" : "NMSE", k->worst,
           ref_backend ? KT_EXACT_TOL : KT_SAME_NMSE_TOL);
    int failed = kt_failed - k->g.failed0;
    kv_close(k);
    return failed;
}

static kipp_ctx *new_ctx(kv_gate *k, uint32_t n_ctx, uint32_t n_kv_blocks) {
    char err[KIPP_ERR_LEN];
    kipp_ctx_params cp = kipp_ctx_default_params(); /* the gate's backend and KV type */
    cp.backend = k->g.cp.backend;
    cp.kv_type = k->g.cp.kv_type;
    cp.kv_type_v = k->g.cp.kv_type_v;
    cp.n_ctx = n_ctx;
    cp.n_kv_blocks = n_kv_blocks;
    kipp_ctx *c = NULL;
    if (kipp_ctx_init(k->g.m, &cp, &c, err, sizeof err) != KIPP_OK) KT_CHECK(0, "%s", err);
    return c;
}

/* ---- streams: sequences advanced together, one mixed batch per round -------------------- */

typedef struct {
    const char *what;
    uint32_t seq;       /* sequence id in the context */
    const int32_t *ids; /* the sequence's tokens */
    size_t n, next;     /* length, next position to decode */
    size_t delay;       /* first round the stream takes part in */
    const float *ref;   /* [n][n_vocab] reference logits by position */
} kv_stream;

/* One round: each active stream contributes its next chunk (chunks[(round + s) % n_chunks]
 * tokens), interleaved token by token across streams, with explicit positions and logits
 * for every token, all compared to the references. Returns tokens decoded (0: all done). */
static int step_streams(kv_gate *k, kipp_ctx *c, kv_stream *st, size_t n_st, size_t round,
                        const size_t *chunks, size_t n_chunks, float *logits) {
    int32_t tok[256];
    uint32_t seq[256], pos[256], who[256];
    size_t left[64], n = 0;
    for (size_t s = 0; s < n_st; s++) {
        size_t want = round >= st[s].delay ? chunks[(round + s) % n_chunks] : 0;
        left[s] = st[s].n - st[s].next < want ? st[s].n - st[s].next : want;
    }
    for (int more = 1; more && n < 256;) {
        more = 0;
        for (size_t s = 0; s < n_st && n < 256; s++) {
            if (!left[s]) continue;
            tok[n] = st[s].ids[st[s].next];
            seq[n] = st[s].seq;
            pos[n] = (uint32_t)st[s].next;
            who[n++] = (uint32_t)s;
            st[s].next++;
            more |= --left[s] > 0;
        }
    }
    if (n == 0) return 0;
    char err[KIPP_ERR_LEN];
    const kipp_batch b = {.n = (uint32_t)n, .tokens = tok, .seq_ids = seq, .positions = pos};
    if (kipp_decode_batch(c, &b, logits, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "round %zu: %s", round, err);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        compare(k, row(logits, i, k->n_vocab), row(st[who[i]].ref, pos[i], k->n_vocab),
                st[who[i]].what, pos[i]);
    return (int)n;
}

static int run_streams(kv_gate *k, kipp_ctx *c, kv_stream *st, size_t n_st, const size_t *chunks,
                       size_t n_chunks, float *logits) {
    int r;
    for (size_t round = 0; (r = step_streams(k, c, st, n_st, round, chunks, n_chunks, logits)) != 0;
         round++)
        if (r < 0) return 0;
    return 1;
}

/* ---- multilogit --------------------------------------------------------------------------- */

/* Invalid batches are refused before anything changes. */
static void check_validation(kv_gate *k, kipp_ctx *c, uint32_t s) {
    char err[KIPP_ERR_LEN];
    kipp_kv_stats before, after;
    kipp_ctx_kv_stats(c, &before);
    const uint32_t n_past = kipp_ctx_seq_n_past(c, s);
    int32_t tok[2] = {1, 2};
    uint32_t seq[2] = {s, s}, pos[2] = {n_past, n_past + 2}, bad_seq[2] = {s, 999};
    kipp_batch b = {.n = 2, .tokens = tok, .seq_ids = seq, .positions = pos};
    KT_CHECK(kipp_decode_batch(c, &b, k->g.a, err, sizeof err) == KIPP_ERR_INVALID_ARG,
             "a skipped position is accepted");
    pos[1] = n_past + 1;
    tok[1] = (int32_t)k->n_vocab;
    KT_CHECK(kipp_decode_batch(c, &b, k->g.a, err, sizeof err) == KIPP_ERR_INVALID_ARG,
             "token id n_vocab is accepted");
    tok[1] = 2;
    b.seq_ids = bad_seq;
    KT_CHECK(kipp_decode_batch(c, &b, k->g.a, err, sizeof err) == KIPP_ERR_INVALID_ARG &&
                 strstr(err, "999"),
             "an unknown sequence is accepted or not named: %s", err);
    b.seq_ids = seq;
    KT_CHECK(kipp_decode_batch(c, &b, NULL, err, sizeof err) == KIPP_ERR_INVALID_ARG,
             "wanted logits without a buffer are accepted");
    kipp_ctx_kv_stats(c, &after);
    KT_CHECK(kipp_ctx_seq_n_past(c, s) == n_past && memcmp(&before, &after, sizeof before) == 0,
             "a refused batch changed the context");
}

/* Pool and context limits: KIPP_ERR_KV_FULL / KIPP_ERR_CONTEXT_FULL, nothing changed. */
static void check_limits(kv_gate *k) {
    char err[KIPP_ERR_LEN];
    kipp_ctx *c = new_ctx(k, 48, 3); /* 3 blocks of 16 = 48 tokens */
    if (!c) return;
    const kv_prompt *p = &k->p[2 % k->n_prompts];
    int32_t ids[48];
    for (size_t i = 0; i < 48; i++) ids[i] = p->ids[i % p->n];
    uint32_t f = 0;
    KT_CHECK(kipp_decode(c, ids, 40, NULL, err, sizeof err) == KIPP_OK, "%s", err);
    KT_CHECK(kipp_ctx_seq_fork(c, 0, &f, err, sizeof err) == KIPP_OK, "%s", err);
    kipp_kv_stats before, after;
    kipp_ctx_kv_stats(c, &before);
    KT_CHECK(before.n_blocks_free == 0 && before.n_blocks_shared == 3,
             "40 tokens + fork: %u free, %u shared blocks", before.n_blocks_free,
             before.n_blocks_shared);
    /* both write into the shared, partly filled block 2: one copy needed, none free */
    int32_t tok[2] = {ids[40], ids[40]};
    uint32_t seq[2] = {0, f};
    const uint8_t none[2] = {0, 0};
    kipp_batch b = {.n = 2, .tokens = tok, .seq_ids = seq, .want_logits = none};
    KT_CHECK(kipp_decode_batch(c, &b, NULL, err, sizeof err) == KIPP_ERR_KV_FULL,
             "a batch needing a copy-on-write block of a full pool: %s", err);
    b.n = 1; /* the fork alone still needs its copy */
    b.seq_ids = &seq[1];
    KT_CHECK(kipp_decode_batch(c, &b, NULL, err, sizeof err) == KIPP_ERR_KV_FULL, "%s", err);
    kipp_ctx_kv_stats(c, &after);
    KT_CHECK(memcmp(&before, &after, sizeof before) == 0 && kipp_ctx_n_past(c) == 40 &&
                 kipp_ctx_seq_n_past(c, f) == 40,
             "KIPP_ERR_KV_FULL changed the pool");
    KT_CHECK(strcmp(kipp_status_str(KIPP_ERR_KV_FULL), "KV cache full") == 0, "status string");
    /* a context-full position is refused before the pool is asked */
    KT_CHECK(kipp_decode(c, ids, 9, NULL, err, sizeof err) == KIPP_ERR_CONTEXT_FULL, "%s", err);
    /* once the fork is gone the block is private again: room without copying */
    KT_CHECK(kipp_ctx_seq_free(c, f, err, sizeof err) == KIPP_OK, "%s", err);
    KT_CHECK(kipp_decode(c, &ids[40], 8, NULL, err, sizeof err) == KIPP_OK, "%s", err);
    KT_CHECK(kipp_ctx_seq_free(c, 0, err, sizeof err) == KIPP_ERR_INVALID_ARG,
             "sequence 0 can be freed");
    kipp_ctx_free(c);
    /* the backend's memory query: a pool beyond the machine's memory (2^32 - 1 blocks) is
     * refused before anything is allocated, naming its size and the memory */
    kipp_ctx_params cp = kipp_ctx_default_params();
    cp.backend = k->g.cp.backend;
    cp.kv_type = k->g.cp.kv_type;
    cp.kv_type_v = k->g.cp.kv_type_v;
    cp.n_kv_blocks = UINT32_MAX;
    c = NULL;
    const kipp_status st = kipp_ctx_init(k->g.m, &cp, &c, err, sizeof err);
    KT_CHECK(st == KIPP_ERR_NOMEM && !c && strstr(err, "exceeds") && strstr(err, " memory; ask for fewer"),
             "a pool of 2^32 - 1 blocks: status %d, %s", (int)st, err);
    kipp_ctx_free(c);
    /* a KV type the backend does not list is refused, never quietly replaced */
    cp.n_kv_blocks = 0;
    cp.kv_type = (kipp_kv_type)7;
    KT_CHECK(kipp_ctx_init(k->g.m, &cp, &c, err, sizeof err) == KIPP_ERR_UNSUPPORTED && !c &&
                 strstr(err, "cannot store"),
             "an unknown KV type: %s", err);
    kipp_ctx_free(c);
}

int kt_gate_multilogit(const char *model_path, const char *vec_dir, const kt_opts *o) {
    kipp_ctx_params cp = kipp_ctx_default_params();
    cp.n_kv_blocks = PAGED_BLOCKS;
    kv_gate k;
    if (!kv_open(&k, model_path, vec_dir, o, &cp, 1)) return 1;
    kipp_ctx *c = k.g.c;
    char err[KIPP_ERR_LEN];
    size_t max_n = 0, total = 0;
    for (size_t i = 0; i < k.n_prompts; i++) {
        max_n = k.p[i].n > max_n ? k.p[i].n : max_n;
        total += k.p[i].n;
    }
    float *logits = malloc((total > 256 ? total : 256) * k.n_vocab * sizeof(float));
    if (!logits) { KT_CHECK(0, "out of memory"); return kv_finish(&k, "multilogit"); }

    /* 1. one batch with every token of a prompt == the single steps */
    for (size_t i = 0; i < k.n_prompts; i++) {
        uint32_t s;
        KT_CHECK(kipp_ctx_seq_new(c, &s, err, sizeof err) == KIPP_OK, "%s", err);
        uint32_t *seq = malloc(k.p[i].n * sizeof *seq);
        if (!seq) { KT_CHECK(0, "out of memory"); break; }
        for (size_t t = 0; t < k.p[i].n; t++) seq[t] = s;
        const kipp_batch b = {.n = (uint32_t)k.p[i].n, .tokens = k.p[i].ids, .seq_ids = seq};
        if (kipp_decode_batch(c, &b, logits, err, sizeof err) != KIPP_OK) KT_CHECK(0, "%s", err);
        else
            for (size_t t = 0; t < k.p[i].n; t++)
                compare(&k, row(logits, t, k.n_vocab), row(k.p[i].ref, t, k.n_vocab), "one batch", t);
        if (i == 0) check_validation(&k, c, s);
        free(seq);
        KT_CHECK(kipp_ctx_seq_free(c, s, err, sizeof err) == KIPP_OK, "%s", err);
    }

    /* 2. mixed batches: every prompt in its own sequence, prefixes of different lengths in
     *    one batch, then all the rest interleaved in one batch */
    kv_stream st[MAX_PROMPTS];
    const size_t prefix[4] = {0, 5, 11, 17};
    for (size_t i = 0; i < k.n_prompts; i++) {
        st[i] = (kv_stream){.what = "mixed batch", .ids = k.p[i].ids, .n = k.p[i].n, .ref = k.p[i].ref};
        KT_CHECK(kipp_ctx_seq_new(c, &st[i].seq, err, sizeof err) == KIPP_OK, "%s", err);
    }
    size_t chunks[MAX_PROMPTS];
    for (size_t i = 0; i < k.n_prompts; i++) chunks[i] = prefix[i % 4] < k.p[i].n ? prefix[i % 4] : 1;
    /* round 0 takes chunks[s % n] for stream s (the prefixes); then everything left */
    step_streams(&k, c, st, k.n_prompts, 0, chunks, k.n_prompts, logits);
    const size_t all[1] = {max_n};
    step_streams(&k, c, st, k.n_prompts, 0, all, 1, logits);

    /* 3. the same second batch with sparse want_logits: rows land in order of wanted tokens */
    int32_t tok[256];
    uint32_t seq[256], pos[256], who[256];
    uint8_t want[256];
    size_t n = 0;
    for (size_t i = 0; i < k.n_prompts; i++) {
        kipp_ctx_seq_truncate(c, st[i].seq, (uint32_t)chunks[i], err, sizeof err);
        st[i].next = chunks[i];
    }
    for (size_t t = 0; t < max_n; t++)
        for (size_t i = 0; i < k.n_prompts && n < 256; i++) {
            if (st[i].next >= st[i].n) continue;
            tok[n] = st[i].ids[st[i].next];
            seq[n] = st[i].seq;
            pos[n] = (uint32_t)st[i].next++;
            want[n] = pos[n] % 3 == 1 || st[i].next == st[i].n;
            who[n++] = (uint32_t)i;
        }
    const kipp_batch b = {.n = (uint32_t)n, .tokens = tok, .seq_ids = seq, .positions = pos,
                          .want_logits = want};
    if (kipp_decode_batch(c, &b, logits, err, sizeof err) != KIPP_OK) KT_CHECK(0, "%s", err);
    else
        for (size_t i = 0, r = 0; i < n; i++)
            if (want[i])
                compare(&k, row(logits, r++, k.n_vocab), row(st[who[i]].ref, pos[i], k.n_vocab),
                        "sparse logits", pos[i]);
    for (size_t i = 0; i < k.n_prompts; i++) kipp_ctx_seq_free(c, st[i].seq, err, sizeof err);

    check_limits(&k);
    free(logits);
    return kv_finish(&k, "multilogit");
}

/* ---- paged: adversarial block tables ------------------------------------------------------ */

static uint64_t lcg(uint64_t *state) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return *state >> 33;
}

/* Fills every block of c's pool with K/V of random tokens (one dummy sequence per block),
 * then frees the dummies in a shuffled order: later allocations come out non-monotonic and
 * land in blocks full of stale, finite data. */
static void scramble_pool(kv_gate *k, kipp_ctx *c, uint32_t n_blocks, uint64_t seed) {
    char err[KIPP_ERR_LEN];
    uint32_t dummy[PAGED_BLOCKS];
    int32_t tok[16 * 8];
    uint32_t seq[16 * 8];
    uint64_t rng = seed;
    for (uint32_t d = 0; d < n_blocks; d += 8) {
        for (uint32_t j = 0; j < 8 && d + j < n_blocks; j++)
            KT_CHECK(kipp_ctx_seq_new(c, &dummy[d + j], err, sizeof err) == KIPP_OK, "%s", err);
        uint32_t n = 0;
        for (uint32_t t = 0; t < 16; t++)
            for (uint32_t j = 0; j < 8 && d + j < n_blocks; j++) {
                tok[n] = (int32_t)(lcg(&rng) % k->n_vocab);
                seq[n++] = dummy[d + j];
            }
        const kipp_batch b = {.n = n, .tokens = tok, .seq_ids = seq,
                              .want_logits = (const uint8_t[16 * 8]){0}};
        KT_CHECK(kipp_decode_batch(c, &b, NULL, err, sizeof err) == KIPP_OK, "dummies: %s", err);
    }
    for (uint32_t i = n_blocks - 1; i > 0; i--) { /* Fisher-Yates */
        uint32_t j = (uint32_t)(lcg(&rng) % (i + 1)), t = dummy[i];
        dummy[i] = dummy[j];
        dummy[j] = t;
    }
    for (uint32_t i = 0; i < n_blocks; i++) kipp_ctx_seq_free(c, dummy[i], err, sizeof err);
    kipp_kv_stats s;
    kipp_ctx_kv_stats(c, &s);
    KT_CHECK(s.n_blocks_free == n_blocks, "after the dummies %u of %u blocks are free",
             s.n_blocks_free, n_blocks);
}

/* How adversarial the tables are: no logical block may sit in the physical block of the
 * same number (so a lookup that ignores the table reads the wrong block everywhere), and
 * some tables must go backwards. */
static void check_adversarial(kipp_ctx *c, const kv_stream *st, size_t n_st) {
    const kipp_kv_pool *pool = kipp_ctx_kv_pool(c);
    size_t same = 0, backwards = 0;
    for (size_t i = 0; i < n_st; i++) {
        const kipp_kv_seq *s = kipp_kv_seq_get(pool, st[i].seq);
        for (uint32_t b = 0; s && b < s->n_blocks; b++) {
            same += s->blocks[b] == b;
            backwards += b > 0 && s->blocks[b] < s->blocks[b - 1];
        }
    }
    KT_CHECK(same == 0 && backwards > 0,
             "block tables not adversarial: %zu blocks at their own index, %zu backward steps",
             same, backwards);
}

int kt_gate_paged(const char *model_path, const char *vec_dir, const kt_opts *o) {
    kv_gate k;
    if (!kv_open(&k, model_path, vec_dir, o, NULL, 1)) return 1;
    char err[KIPP_ERR_LEN];
    kipp_ctx *c = new_ctx(&k, 0, PAGED_BLOCKS);
    float *logits = malloc(256 * (size_t)k.n_vocab * sizeof(float));
    float *alt_ref = NULL;
    int32_t *alt = NULL;
    if (!c || !logits || k.n_prompts < 3) {
        KT_CHECK(0, "paged gate needs a context, memory and 3 prompts");
        goto done;
    }
    scramble_pool(&k, c, PAGED_BLOCKS, 0xc0ffee);

    /* A: every prompt, interleaved in uneven chunks, against its identity run */
    kv_stream st[MAX_PROMPTS + 2];
    const size_t n_p = k.n_prompts;
    for (size_t i = 0; i < n_p; i++) {
        st[i] = (kv_stream){.what = "paged", .ids = k.p[i].ids, .n = k.p[i].n, .ref = k.p[i].ref};
        KT_CHECK(kipp_ctx_seq_new(c, &st[i].seq, err, sizeof err) == KIPP_OK, "%s", err);
    }
    const size_t chunks[] = {1, 3, 5, 7, 2};
    run_streams(&k, c, st, n_p, chunks, 5, logits);
    check_adversarial(c, st, n_p);

    /* B: forks sharing prefixes. Prompt 1 rolls back into the middle of a block and forks:
     * both branches write into the shared block (copy on write); one continues the prompt,
     * the other takes another prompt's tokens as its suffix. Prompt 2 rolls back to a block
     * boundary and forks: both branches redo the prompt's tail. */
    const size_t cut1 = 20 < k.p[1].n ? 20 : k.p[1].n - 1, cut2 = 16 < k.p[2].n ? 16 : k.p[2].n - 1;
    const size_t n_alt = cut1 + (k.p[0].n < 12 ? k.p[0].n : 12);
    alt = malloc(n_alt * sizeof *alt);
    alt_ref = malloc(n_alt * k.n_vocab * sizeof(float));
    if (!alt || !alt_ref) { KT_CHECK(0, "out of memory"); goto done; }
    memcpy(alt, k.p[1].ids, cut1 * sizeof *alt);
    memcpy(alt + cut1, k.p[0].ids, (n_alt - cut1) * sizeof *alt);
    if (!identity_run(k.g.c, alt, n_alt, alt_ref, k.n_vocab)) goto done;
    kipp_ctx_seq_truncate(c, st[1].seq, (uint32_t)cut1, err, sizeof err);
    kipp_ctx_seq_truncate(c, st[2].seq, (uint32_t)cut2, err, sizeof err);
    st[1].next = cut1;
    st[2].next = cut2;
    kv_stream fk[4] = {st[1], st[2], st[1], st[2]};
    fk[2] = (kv_stream){.what = "fork, other suffix", .ids = alt, .n = n_alt, .next = cut1, .ref = alt_ref};
    fk[3].what = "fork at a block boundary";
    KT_CHECK(kipp_ctx_seq_fork(c, st[1].seq, &fk[2].seq, err, sizeof err) == KIPP_OK, "%s", err);
    KT_CHECK(kipp_ctx_seq_fork(c, st[2].seq, &fk[3].seq, err, sizeof err) == KIPP_OK, "%s", err);
    kipp_kv_stats s;
    kipp_ctx_kv_stats(c, &s);
    const uint32_t shared = kipp_kv_blocks_for(kipp_ctx_kv_pool(c), (uint32_t)cut1) +
                            kipp_kv_blocks_for(kipp_ctx_kv_pool(c), (uint32_t)cut2);
    KT_CHECK(s.n_blocks_shared == shared, "after two forks %u blocks are shared, expected %u",
             s.n_blocks_shared, shared);
    run_streams(&k, c, fk, 4, chunks + 1, 3, logits);
    const kipp_kv_pool *pool = kipp_ctx_kv_pool(c);
    const kipp_kv_seq *a = kipp_kv_seq_get(pool, fk[0].seq), *b = kipp_kv_seq_get(pool, fk[2].seq);
    KT_CHECK(a && b && a->blocks[0] == b->blocks[0] && a->blocks[1] != b->blocks[1],
             "the forks do not share the full block / copy the partial one");
    check_adversarial(c, fk, 4);
done:
    free(alt);
    free(alt_ref);
    free(logits);
    kipp_ctx_free(c);
    return kv_finish(&k, "paged");
}

/* ---- pooled: many sequences in one pool --------------------------------------------------- */

/* Every prompt twice (the copies join later, so batches mix positions) and a branch forked
 * mid-block with its own suffix, one token each per round in one batch, in a 64-block pool;
 * each equals its solo run in the identity layout. */
int kt_gate_pooled(const char *model_path, const char *vec_dir, const kt_opts *o) {
    kv_gate k;
    if (!kv_open(&k, model_path, vec_dir, o, NULL, 1)) return 1;
    char err[KIPP_ERR_LEN];
    kipp_ctx *c = new_ctx(&k, 0, PAGED_BLOCKS);
    float *logits = malloc(64 * (size_t)k.n_vocab * sizeof(float));
    /* the branch: prompt 2's first 20 tokens (forked mid-block), then prompt 0's; its solo
     * run is the identity layout of that concatenation */
    const size_t cut = 20, n_alt = k.n_prompts >= 3 && k.p[2].n > cut ? cut + k.p[0].n : 0;
    int32_t *alt = n_alt ? malloc(n_alt * sizeof *alt) : NULL;
    float *alt_ref = n_alt ? malloc(n_alt * k.n_vocab * sizeof(float)) : NULL;
    if (!c || !logits || !alt || !alt_ref) {
        KT_CHECK(0, "pooled gate needs a context, memory and 3 prompts, the third > 20 tokens");
        goto done;
    }
    memcpy(alt, k.p[2].ids, cut * sizeof *alt);
    memcpy(alt + cut, k.p[0].ids, k.p[0].n * sizeof *alt);
    if (!identity_run(k.g.c, alt, n_alt, alt_ref, k.n_vocab)) goto done;
    /* every prompt twice, the second copy joining later, so one batch mixes positions */
    kv_stream st[2 * MAX_PROMPTS + 1];
    size_t n_st = 0;
    for (size_t copy = 0; copy < 2; copy++)
        for (size_t i = 0; i < k.n_prompts; i++, n_st++) {
            st[n_st] = (kv_stream){.what = copy ? "pooled, second copy" : "pooled", .ids = k.p[i].ids,
                                   .n = k.p[i].n, .ref = k.p[i].ref, .delay = copy * 3 + i};
            KT_CHECK(kipp_ctx_seq_new(c, &st[n_st].seq, err, sizeof err) == KIPP_OK, "%s", err);
        }
    const size_t one[1] = {1};
    int forked = 0, r = 1;
    for (size_t round = 0; r > 0; round++) {
        r = step_streams(&k, c, st, n_st, round, one, 1, logits);
        if (!forked && st[2].next == cut) {
            st[n_st] = (kv_stream){.what = "pooled, forked branch", .ids = alt, .n = n_alt,
                                   .next = cut, .delay = round + 1, .ref = alt_ref};
            KT_CHECK(kipp_ctx_seq_fork(c, st[2].seq, &st[n_st].seq, err, sizeof err) == KIPP_OK,
                     "%s", err);
            n_st++;
            forked = 1;
        }
    }
    KT_CHECK(forked, "the branch was never forked");
    kipp_kv_stats s;
    kipp_ctx_kv_stats(c, &s);
    uint64_t tokens = 0;
    for (size_t i = 0; i < n_st; i++) tokens += st[i].n;
    KT_CHECK(s.n_tokens == tokens && s.n_seqs == n_st + 1,
             "accounting: %llu tokens in %u sequences, expected %llu in %zu",
             (unsigned long long)s.n_tokens, s.n_seqs, (unsigned long long)tokens, n_st + 1);
    for (size_t i = 0; i < n_st; i++) kipp_ctx_seq_free(c, st[i].seq, err, sizeof err);
    kipp_ctx_kv_stats(c, &s);
    KT_CHECK(s.n_blocks_used == 0 && s.n_tokens == 0, "%u blocks still used after freeing all",
             s.n_blocks_used);
done:
    free(alt);
    free(alt_ref);
    free(logits);
    kipp_ctx_free(c);
    return kv_finish(&k, "pooled");
}

/* ---- fault reference: the golden gate, explicitly on the identity layout -------------------- */

int kt_gate_fault_reference(const char *model_path, const char *vec_dir, const kt_opts *o) {
    kv_gate k;
    if (!kv_open(&k, model_path, vec_dir, o, NULL, 0)) return 1;
    kipp_ctx *c = k.g.c;
    char err[KIPP_ERR_LEN];
    double worst = 0.0;
    KT_CHECK(k.n_vocab == k.g.mf.n_vocab, "model n_vocab %u vs vectors %u", k.n_vocab,
             k.g.mf.n_vocab);
    for (size_t pi = 0; pi < k.n_prompts && k.n_vocab == k.g.mf.n_vocab; pi++) {
        kipp_ctx_truncate(c, 0, err, sizeof err);
        for (size_t pos = 0; pos < k.p[pi].n; pos++) {
            if (kipp_decode(c, &k.p[pi].ids[pos], 1, k.g.a, err, sizeof err) != KIPP_OK) {
                KT_CHECK(0, "prompt %zu position %zu: %s", pi, pos, err);
                break;
            }
            double e = kt_golden_position(&k.g, vec_dir, pi, k.p[pi].ids, pos, k.g.a);
            if (e > worst) worst = e;
        }
        KT_CHECK(is_identity(c, 0), "prompt %zu did not run in the identity layout", pi);
    }
    if (k.g.is_ref)
        printf("fault-reference gate (%s): identity layout, max |logit - oracle| = %.3g, "
               "bound = %.3g\n", k.g.label, worst, k.g.mf.bound);
    else
        printf("fault-reference gate (%s): identity layout, oracle argmax, worst NMSE vs "
               "cpu-ref recomputation = %.3g, tolerance %g\n", k.g.label, worst, KT_NMSE_TOL);
    int failed = kt_failed - k.g.failed0;
    kv_close(&k);
    return failed;
}
