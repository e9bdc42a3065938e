/* gates_sched.c — the scheduler and prefix-cache gates (kipp_test --sched M): a request's
 * tokens are identical alone, in a concurrent batch of 8, with the prefix cache, and under
 * KV-pool pressure that forces preemption and recomputation; cancellation returns every
 * block; a full queue says busy; logprobs are consistent, prompt log-probabilities too
 * (the same alone, under KV pressure and with their prompt cached); a reused prefix decodes to the
 * same logits as recomputation (1e-6); a window pauses an unread request (which yields its
 * slot) and admission is fair across requests; fair steps hold an n > 1 request's extra
 * sequences back beside a plain request, and after one while another is expected; KV-cache
 * events under KV pressure leave the tokens as they are and make sense (a block stored only
 * while not held, removed only while held, each run's parent held). Runs on the backend and KV type the flags name
 * (default cpu), the scheduler's context and the bare prefix-cache context alike. */
#include "core/buf.h"
#include "engine/engine.h"
#include "engine/grammar.h"
#include "engine/prefix_cache.h"
#include "engine/sched.h"
#include "gate_common.h"
#include "gates.h"
#include "kt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_REQ 8
#define MAX_GEN 24
#define CTX 160

typedef struct {
    int32_t ids[N_REQ][96];
    uint32_t n[N_REQ];
} prompts;

typedef struct {
    int32_t tok[N_REQ][MAX_GEN];
    uint32_t n[N_REQ];
} outputs;

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Prompts with shared beginnings (so the prefix cache has whole blocks to reuse) and
 * different lengths. */
static int make_prompts(const kipp_model *m, prompts *p) {
    static const char *stem[2] = {
        "You are a helpful assistant. Answer briefly and precisely, citing the facts you use. ",
        "System: the following is a conversation between a user and a very patient tutor. "};
    char text[512];
    for (int i = 0; i < N_REQ; i++) {
        snprintf(text, sizeof text, "%sQuestion %d: how many legs do %d spiders have?%s", stem[i % 2],
                 i, i + 2, i % 3 ? " Explain your reasoning step by step." : "");
        size_t n;
        if (kipp_tokenize(m, text, strlen(text), 1, p->ids[i], 96, &n, NULL, 0) != KIPP_OK) return -1;
        p->n[i] = (uint32_t)n;
    }
    return 0;
}

static kipp_req_params req_params(const prompts *p, int i, float temp) {
    kipp_req_params rp = {.prompt = p->ids[i], .n_prompt = p->n[i], .max_tokens = MAX_GEN,
                          .ignore_eos = 1};
    rp.sampling = kipp_sampler_default_params();
    rp.sampling.temperature = temp;
    rp.sampling.seed = 1234 + (uint64_t)i;
    return rp;
}

static void collect(kipp_req *r, outputs *o, int i, kipp_finish *fin) {
    uint32_t n = 0;
    *fin = KIPP_FINISH_NONE;
    while (*fin == KIPP_FINISH_NONE) n = kipp_req_wait(r, n, -1, fin);
    o->n[i] = n;
    for (uint32_t k = 0; k < n && k < MAX_GEN; k++) o->tok[i][k] = kipp_req_token(r, k)->id;
}

/* ---- KV-cache events (engine/kv_track.h): a recording sink ---------------------------------- */

static struct {
    uint64_t live[8192]; /* the held blocks' hashes (their first 8 bytes) */
    uint32_t n;
    uint64_t stored, removed, batches;
    int bad;
} kve;

static void kve_hash(void *ud, const uint8_t *parent, const int32_t *tok, uint32_t n,
                     uint8_t out[KIPP_KV_HASH_BYTES]) {
    (void)ud;
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the parent's bytes and the tokens */
    for (int i = 0; i < KIPP_KV_HASH_BYTES; i++) h = (h ^ (parent ? parent[i] : 0x5a)) * 1099511628211ull;
    for (uint32_t i = 0; i < n; i++) h = (h ^ (uint32_t)tok[i]) * 1099511628211ull;
    for (int i = 0; i < KIPP_KV_HASH_BYTES; i++, h = h * 6364136223846793005ull + 1442695040888963407ull)
        out[i] = (uint8_t)(h >> 56);
}

static int kve_find(const uint8_t *h) {
    uint64_t k;
    memcpy(&k, h, 8);
    for (uint32_t i = 0; i < kve.n; i++)
        if (kve.live[i] == k) return (int)i;
    return -1;
}

static void kve_publish(void *ud, const kipp_kv_event *ev, uint32_t n) {
    (void)ud;
    kve.batches++;
    for (uint32_t e = 0; e < n; e++) {
        if (ev[e].type == KIPP_KVE_CLEARED) {
            kve.n = 0;
            continue;
        }
        if (ev[e].type == KIPP_KVE_STORED && ev[e].parent && kve_find(ev[e].parent) < 0) kve.bad++;
        for (uint32_t b = 0; b < ev[e].n_blocks; b++) {
            const uint8_t *h = ev[e].hashes + (size_t)b * KIPP_KV_HASH_BYTES;
            const int at = kve_find(h);
            if (ev[e].type == KIPP_KVE_STORED) {
                kve.stored++;
                if (at >= 0 || kve.n == 8192) kve.bad++;
                else memcpy(&kve.live[kve.n++], h, 8);
            } else {
                kve.removed++;
                if (at < 0) kve.bad++;
                else kve.live[at] = kve.live[--kve.n];
            }
        }
    }
}

/* Runs the prompts one at a time (concurrent = 0) or all submitted at once. */
static int run(kipp_model *m, const kipp_sched_params *sp, const prompts *p, int concurrent,
               float temp, outputs *o, kipp_sched_stats *st) {
    char err[KIPP_ERR_LEN];
    kipp_sched *s;
    if (kipp_sched_start(m, sp, &s, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "scheduler: %s", err);
        return -1;
    }
    kipp_req *r[N_REQ] = {0};
    kipp_finish fin;
    int bad = 0;
    for (int i = 0; i < N_REQ; i++) {
        const kipp_req_params rp = req_params(p, i, temp);
        if (kipp_sched_submit(s, &rp, &r[i], err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "submit %d: %s", i, err);
            bad = 1;
            break;
        }
        if (!concurrent) {
            collect(r[i], o, i, &fin);
            KT_CHECK(fin == KIPP_FINISH_LENGTH, "request %d finished with %d", i, (int)fin);
        }
    }
    for (int i = 0; i < N_REQ && concurrent && !bad; i++) {
        collect(r[i], o, i, &fin);
        KT_CHECK(fin == KIPP_FINISH_LENGTH, "request %d finished with %d", i, (int)fin);
    }
    for (int i = 0; i < N_REQ; i++) kipp_req_release(r[i]);
    kipp_sched_stop(s); /* the engine's last look at the pool refreshes the statistics */
    if (st) kipp_sched_get_stats(s, st);
    kipp_sched_free(s);
    return bad ? -1 : 0;
}

static void same(const outputs *a, const outputs *b, const char *what) {
    for (int i = 0; i < N_REQ; i++) {
        int eq = a->n[i] == b->n[i] && memcmp(a->tok[i], b->tok[i], a->n[i] * sizeof(int32_t)) == 0;
        uint32_t k = 0;
        while (eq == 0 && k < a->n[i] && k < b->n[i] && a->tok[i][k] == b->tok[i][k]) k++;
        KT_CHECK(eq, "%s: request %d differs from its solo run (first at token %u of %u/%u)", what,
                 i, k, a->n[i], b->n[i]);
    }
}

/* Cancellation gives every block back; a full queue says busy. */
static void gate_cancel_and_queue(kipp_model *m, const prompts *p, const kipp_sched_params *base) {
    char err[KIPP_ERR_LEN];
    kipp_sched_params sp = *base;
    sp.max_running = 1;
    sp.max_queue = 1;
    kipp_sched *s;
    if (kipp_sched_start(m, &sp, &s, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "scheduler: %s", err);
        return;
    }
    kipp_req_params rp = req_params(p, 0, 0.0f);
    rp.max_tokens = CTX; /* runs until cancelled */
    kipp_req *r0 = NULL, *r1 = NULL, *r2 = NULL;
    KT_CHECK(kipp_sched_submit(s, &rp, &r0, err, sizeof err) == KIPP_OK, "submit: %s", err);
    kipp_finish fin = KIPP_FINISH_NONE;
    uint32_t n = 0;
    while (r0 && n < 3 && fin == KIPP_FINISH_NONE) n = kipp_req_wait(r0, n, -1, &fin);
    /* r0 runs, the queue holds one: the next is accepted, the one after is refused */
    const kipp_req_params rq = req_params(p, 1, 0.0f);
    KT_CHECK(kipp_sched_submit(s, &rq, &r1, err, sizeof err) == KIPP_OK, "queued submit: %s", err);
    const kipp_status busy = kipp_sched_submit(s, &rq, &r2, err, sizeof err);
    KT_CHECK(busy == KIPP_ERR_BUSY && r2 == NULL, "a full queue must refuse (got %s)",
             kipp_status_str(busy));
    if (r0) kipp_req_cancel(r0);
    while (r0 && fin == KIPP_FINISH_NONE) n = kipp_req_wait(r0, n, -1, &fin);
    KT_CHECK(fin == KIPP_FINISH_CANCELLED, "a cancelled request finished with %d", (int)fin);
    KT_CHECK(n < CTX - p->n[0], "the cancelled request ran to its end (%u tokens)", n);
    if (r1) collect(r1, &(outputs){0}, 0, &fin);
    KT_CHECK(fin == KIPP_FINISH_LENGTH, "the queued request finished with %d", (int)fin);
    kipp_sched_stats st = {0};
    for (int tries = 0; tries < 200; tries++) { /* the engine publishes pool stats per loop */
        kipp_sched_get_stats(s, &st);
        if (st.running == 0 && st.kv_blocks_used == st.kv_blocks_cached) break;
        sleep_ms(5);
    }
    KT_CHECK(st.cancelled == 1, "cancelled counter %llu, want 1", (unsigned long long)st.cancelled);
    KT_CHECK(st.rejected == 1, "rejected counter %llu, want 1", (unsigned long long)st.rejected);
    KT_CHECK(st.running == 0 && st.kv_blocks_used == st.kv_blocks_cached,
             "idle but %u blocks used, %u of them cached, %u running", st.kv_blocks_used,
             st.kv_blocks_cached, st.running);
    kipp_req_release(r0);
    kipp_req_release(r1);
    kipp_sched_free(s);
}

/* Logprobs: at temperature 0 the chosen token is the most likely; top list sorted, <= 0. */
static void gate_logprobs(kipp_model *m, const prompts *p, const kipp_sched_params *sp) {
    char err[KIPP_ERR_LEN];
    kipp_sched *s;
    if (kipp_sched_start(m, sp, &s, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "scheduler: %s", err);
        return;
    }
    kipp_req_params rp = req_params(p, 2, 0.0f);
    rp.logprobs = 1;
    rp.top_logprobs = 5;
    kipp_req *r;
    if (kipp_sched_submit(s, &rp, &r, err, sizeof err) == KIPP_OK) {
        kipp_finish fin = KIPP_FINISH_NONE;
        uint32_t n = 0;
        while (fin == KIPP_FINISH_NONE) n = kipp_req_wait(r, n, -1, &fin);
        for (uint32_t i = 0; i < n; i++) {
            const kipp_gen_token *t = kipp_req_token(r, i);
            double mass = 0;
            int sorted = t->n_top == 5;
            for (uint32_t k = 0; k < t->n_top; k++) {
                mass += exp(t->top_logprob[k]);
                if (k && t->top_logprob[k] > t->top_logprob[k - 1]) sorted = 0;
            }
            KT_CHECK(sorted && t->top_id[0] == t->id && t->logprob == t->top_logprob[0] &&
                         t->logprob <= 0 && mass <= 1.0 + 1e-5,
                     "token %u: id %d lp %g, top %d lp %g, %u tops, mass %g", i, t->id, t->logprob,
                     t->top_id[0], t->top_logprob[0], t->n_top, mass);
        }
        kipp_req_release(r);
    } else {
        KT_CHECK(0, "submit: %s", err);
    }
    kipp_sched_free(s);
}

/* Prompt log-probabilities (prompt_logprobs): recorded for every prompt token but the first,
 * consistent with their top lists; the same (to rounding) and the same greedy tokens when all
 * eight run at once on a pool for about two (prefilling and decoding sequences preempted
 * and recomputed, the prefix cache holding what they computed) as alone; a prompt whose
 * KV the cache holds is still computed (nothing cached); max_tokens 0 generates nothing. */
typedef struct {
    float lp[N_REQ][96], top[N_REQ][96];
} prompt_lps;

/* Equal to float rounding: a prompt read in other chunks (the step budgets move with the
 * measured step times) rounds differently, by up to about 5e-6 of the value (ASan build). */
static int lp_close(float a, float b) { return fabsf(a - b) <= 1e-4f * (1.0f + fabsf(b)); }

static int plp_run(kipp_sched *s, const prompts *p, int i, uint32_t max_tokens, prompt_lps *out,
                   outputs *o, const char *what) {
    char err[KIPP_ERR_LEN];
    kipp_req_params rp = req_params(p, i, 0.0f);
    rp.max_tokens = max_tokens;
    rp.prompt_logprobs = 1;
    rp.top_logprobs = 3;
    kipp_req *r;
    if (kipp_sched_submit(s, &rp, &r, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "%s: submit %d: %s", what, i, err);
        return -1;
    }
    kipp_finish fin;
    collect(r, o, i, &fin);
    const uint32_t n = kipp_req_n_prompt_logprobs(r);
    KT_CHECK(fin == KIPP_FINISH_LENGTH && n == p->n[i] && o->n[i] == max_tokens,
             "%s: request %d finished %d with %u of %u prompt tokens scored, %u generated", what, i,
             (int)fin, n, p->n[i], o->n[i]);
    KT_CHECK(kipp_req_prompt_token(r, 0)->n_top == 0 && kipp_req_n_cached(r) == 0,
             "%s: request %d: the first prompt token has %u alternatives, %u tokens cached", what, i,
             kipp_req_prompt_token(r, 0)->n_top, kipp_req_n_cached(r));
    for (uint32_t k = 1; k < n && k < 96; k++) {
        const kipp_gen_token *t = kipp_req_prompt_token(r, k);
        KT_CHECK(t->id == p->ids[i][k] && t->n_top == 3 && t->logprob <= t->top_logprob[0] + 1e-6f &&
                     t->top_logprob[0] <= 0,
                 "%s: request %d prompt token %u: id %d (want %d) lp %g, top %g, %u alternatives", what, i,
                 k, t->id, p->ids[i][k], t->logprob, t->top_logprob[0], t->n_top);
        out->lp[i][k] = t->logprob;
        out->top[i][k] = t->top_logprob[0];
    }
    kipp_req_release(r);
    return 0;
}

static void gate_prompt_logprobs(kipp_model *m, const prompts *p, const kipp_sched_params *base,
                                 const outputs *solo) {
    char err[KIPP_ERR_LEN];
    kipp_sched_params sp = *base;
    sp.prefix_cache_entries = 16;
    kipp_sched *s;
    static prompt_lps alone;
    outputs none, gen;
    if (kipp_sched_start(m, &sp, &s, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "scheduler: %s", err);
        return;
    }
    for (int i = 0; i < N_REQ; i++) plp_run(s, p, i, 0, &alone, &none, "alone, max_tokens 0");
    /* prompt 3's KV is in the cache now (and its stem's): scored again, not taken from it */
    prompt_lps again;
    plp_run(s, p, 3, MAX_GEN, &again, &gen, "cached prompt");
    for (uint32_t k = 1; k < p->n[3]; k++)
        KT_CHECK(lp_close(again.lp[3][k], alone.lp[3][k]), "cached prompt: token %u lp %g, alone %g", k,
                 again.lp[3][k], alone.lp[3][k]);
    kipp_sched_free(s);
    kipp_sched_params tight = sp;
    tight.n_kv_tokens = CTX + 16; /* room for about two of the eight */
    if (kipp_sched_start(m, &tight, &s, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "scheduler: %s", err);
        return;
    }
    kipp_req *r[N_REQ] = {0};
    for (int i = 0; i < N_REQ; i++) {
        kipp_req_params rp = req_params(p, i, 0.0f);
        rp.prompt_logprobs = 1;
        rp.top_logprobs = 3;
        if (kipp_sched_submit(s, &rp, &r[i], err, sizeof err) != KIPP_OK) KT_CHECK(0, "submit %d: %s", i, err);
    }
    for (int i = 0; i < N_REQ; i++) {
        if (!r[i]) continue;
        kipp_finish fin;
        collect(r[i], &gen, i, &fin);
        const uint32_t n = kipp_req_n_prompt_logprobs(r[i]);
        KT_CHECK(n == p->n[i], "KV pressure: request %d scored %u of %u prompt tokens", i, n, p->n[i]);
        /* batched with others (and recomputed after preemptions) the rows take other kernel
         * paths than alone (an MoE's expert groups change with the batch): the values agree
         * as the backend gates' logits do, within NMSE 1e-4 over the prompt; a row scored at
         * the wrong position or twice is off by nats */
        double err2 = 0, ref2 = 0;
        for (uint32_t k = 1; k < n; k++) {
            const kipp_gen_token *t = kipp_req_prompt_token(r[i], k);
            const double d0 = t->logprob - alone.lp[i][k], d1 = t->top_logprob[0] - alone.top[i][k];
            err2 += d0 * d0 + d1 * d1;
            ref2 += (double)alone.lp[i][k] * alone.lp[i][k] + (double)alone.top[i][k] * alone.top[i][k];
        }
        KT_CHECK(n < 2 || err2 <= 1e-4 * ref2, "KV pressure: request %d's prompt logprobs NMSE %g vs alone", i,
                 ref2 > 0 ? err2 / ref2 : err2);
        kipp_req_release(r[i]);
    }
    same(solo, &gen, "prompt logprobs under KV pressure");
    kipp_sched_stats st;
    kipp_sched_stop(s);
    kipp_sched_get_stats(s, &st);
    KT_CHECK(st.preempted > 0, "prompt logprobs: a pool for two never preempted");
    kipp_sched_free(s);
}

/* The prefix cache on a bare context: hits in whole blocks, capped below the prompt's end,
 * verified, evicted; and a reused prefix decodes exactly like a recomputation. */
static void gate_prefix_cache(kipp_model *m, const prompts *p, const kipp_sched_params *sp) {
    char err[KIPP_ERR_LEN];
    kipp_ctx_params cp = kipp_ctx_default_params();
    cp.backend = sp->backend;
    cp.kv_type = sp->kv_type;
    cp.kv_type_v = sp->kv_type_v;
    cp.n_threads = sp->n_threads;
    cp.n_ctx = CTX;
    cp.n_kv_blocks = 64;
    kipp_ctx *ctx = NULL;
    kipp_prefix_cache *pc = NULL;
    if (kipp_ctx_init(m, &cp, &ctx, err, sizeof err) != KIPP_OK ||
        kipp_pc_init(ctx, 2, &pc, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "context: %s", err);
        kipp_ctx_free(ctx);
        return;
    }
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    const int32_t *a = p->ids[1]; /* 1 and 3 share the stem, 1 and 2 do not */
    const uint32_t na = p->n[1];
    uint32_t seq, got;
    KT_CHECK(kipp_pc_acquire(pc, a, na, &seq) == 0, "an empty cache hit");
    KT_CHECK(kipp_ctx_seq_new(ctx, &seq, err, sizeof err) == KIPP_OK, "%s", err);
    uint32_t sids[96];
    uint8_t want[96] = {0};
    for (uint32_t i = 0; i < na; i++) sids[i] = seq;
    const kipp_batch b = {.n = na, .tokens = a, .seq_ids = sids, .want_logits = NULL};
    float *lg = malloc((size_t)na * info.n_vocab * sizeof *lg);
    float *ref = malloc((size_t)info.n_vocab * sizeof *ref);
    KT_CHECK(lg && ref && kipp_decode_batch(ctx, &b, lg, err, sizeof err) == KIPP_OK, "%s", err);
    kipp_pc_insert(pc, seq, a, na);
    kipp_pc_stats st;
    kipp_pc_get_stats(pc, &st);
    const uint32_t bs = 16, whole = na / bs * bs;
    KT_CHECK(st.n_entries == 1 && st.n_blocks_cached_only == na / bs, "entries %u blocks %u",
             st.n_entries, st.n_blocks_cached_only);
    /* the same prompt: every whole block below its last token */
    got = kipp_pc_acquire(pc, a, na, &seq);
    KT_CHECK(got == (na - 1) / bs * bs, "same prompt hit %u tokens, want %u", got, (na - 1) / bs * bs);
    /* a prompt sharing only the stem (prompt 3) */
    const int32_t *c = p->ids[3];
    uint32_t common = 0;
    while (common < p->n[3] && common < na && c[common] == a[common]) common++;
    uint32_t seq2;
    const uint32_t got2 = kipp_pc_acquire(pc, c, p->n[3], &seq2);
    uint32_t want2 = common / bs * bs;
    if (want2 > (p->n[3] - 1) / bs * bs) want2 = (p->n[3] - 1) / bs * bs;
    KT_CHECK(got2 == want2 && want2 > 0, "shared-stem hit %u tokens, want %u (%u in common)", got2,
             want2, common);
    /* reused prefix + the rest == recomputation (the cached-decode gate's bound) */
    if (got2 == want2 && got2 > 0) {
        /* a MoE model: cpu-ref's routing pinned at near-ties (gate_common.h), and the same-backend
         * NMSE bound: its unpacked experts (tiny rows no packer takes) and the router's last bits
         * follow the token count of the call, which differs between the two runs */
        kipp_ctx *ref_ctx = NULL;
        kipp_moe_trace *pin = NULL;
        if (info.n_expert) {
            kipp_ctx_params rp = kipp_ctx_default_params();
            rp.backend = "cpu-ref";
            rp.n_ctx = CTX;
            const int32_t *pin_ids[1] = {c};
            const size_t pin_n[1] = {p->n[3]};
            if (kipp_ctx_init(m, &rp, &ref_ctx, err, sizeof err) == KIPP_OK)
                pin = kt_moe_pin_on(ref_ctx, &info, pin_ids, pin_n, 1, lg);
            else
                KT_CHECK(0, "cpu-ref context: %s", err);
        }
        const uint32_t rest = p->n[3] - got2;
        for (uint32_t i = 0; i < rest; i++) sids[i] = seq2;
        want[rest - 1] = 1;
        const kipp_batch b2 = {.n = rest, .tokens = c + got2, .seq_ids = sids, .want_logits = want};
        KT_CHECK(kipp_decode_batch(ctx, &b2, lg, err, sizeof err) == KIPP_OK, "%s", err);
        KT_CHECK(kipp_forward_nocache(ctx, c, p->n[3], ref, err, sizeof err) == KIPP_OK, "%s", err);
        double worst = 0;
        for (uint32_t v = 0; v < info.n_vocab; v++) {
            const double d = fabs((double)lg[v] - ref[v]);
            worst = d > worst ? d : worst;
        }
        if (info.n_expert) {
            const double e = kt_nmse(lg, ref, info.n_vocab);
            KT_CHECK(e <= KT_SAME_NMSE_TOL, "MoE: a reused prefix decodes NMSE %.3g (max %.3g) from recomputation", e,
                     worst);
        } else
            KT_CHECK(worst <= 1e-6, "a reused prefix decodes %.3g away from recomputation", worst);
        kt_moe_unpin(pin, "prefix reuse");
        kipp_ctx_free(ref_ctx);
        kipp_ctx_seq_free(ctx, seq2, NULL, 0);
    }
    /* a prompt differing in its first token: no hit (verification, not just hashes) */
    int32_t d[96];
    memcpy(d, a, na * sizeof *d);
    d[0] = a[0] + 1;
    KT_CHECK(kipp_pc_acquire(pc, d, na, &seq2) == 0, "a different prompt hit the cache");
    /* inserting what is already cached adds no entry; eviction empties the cache */
    kipp_pc_insert(pc, seq, a, whole);
    kipp_pc_get_stats(pc, &st);
    KT_CHECK(st.n_entries == 1, "a duplicate made %u entries", st.n_entries);
    KT_CHECK(kipp_pc_evict_one(pc) == 1 && kipp_pc_evict_one(pc) == 0, "eviction");
    KT_CHECK(kipp_pc_acquire(pc, a, na, &seq2) == 0, "an evicted entry still hit");
    kipp_kv_stats ks;
    kipp_ctx_kv_stats(ctx, &ks);
    KT_CHECK(ks.n_blocks_used == 0, "%u blocks still used after eviction", ks.n_blocks_used);
    free(lg);
    free(ref);
    kipp_pc_free(pc);
    kipp_ctx_free(ctx);
}

/* A grammar whose first mask runs for seconds (after "a", 1,000 stacks that each lead to
 * 1,000: a million to merge; within the compile-time bound) does not hold the other
 * sequences: a plain request submitted behind it finishes while that mask is still being
 * computed (on the mask thread), and cancelling the constrained request ends it before its
 * time limit. The old engine computed the mask in its step: the plain request waited for
 * the time limit. The limit (60 s) is far above the plain request's time on any build: at
 * 5 s, TSan on kipp-tiny with other runs beside it took longer than that for the plain
 * request's 24 tokens, and the mask ended by its limit first. */
static void gate_slow_mask(kipp_model *m, const prompts *p, const kipp_sched_params *sp) {
    char err[KIPP_ERR_LEN];
    kipp_buf text = {0};
    int bad = kipp_buf_puts(&text, "root ::= ") != KIPP_OK;
    for (int k = 0; k < 1000 && !bad; k++)
        bad = kipp_buf_printf(&text, "%s\"a\" e \"!\"", k ? " | " : "") != KIPP_OK;
    bad = bad || kipp_buf_puts(&text, "\ne ::= ") != KIPP_OK;
    for (int k = 0; k < 1000 && !bad; k++)
        bad = kipp_buf_printf(&text, "%s\"w%d\"", k ? " | " : "", k) != KIPP_OK;
    kipp_grammar *g = NULL;
    kipp_token_trie *trie = NULL;
    kipp_matcher *mt = NULL;
    kipp_sched *s = NULL;
    if (bad || kipp_grammar_compile(text.data, text.len, &g, err, sizeof err) != KIPP_OK ||
        kipp_token_trie_build(m, &trie, err, sizeof err) != KIPP_OK ||
        kipp_matcher_new(g, trie, &mt, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "slow mask: %s", bad ? "out of memory" : err);
        if (!mt) kipp_grammar_free(g);
        goto done;
    }
    kipp_matcher_own_grammar(mt);
    kipp_matcher_set_time_limit(mt, 60.0);
    if (kipp_sched_start(m, sp, &s, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "scheduler: %s", err);
        goto done;
    }
    kipp_req_params hp = req_params(p, 0, 0.0f);
    hp.matcher = mt;
    kipp_req *hostile = NULL, *plain = NULL;
    if (kipp_sched_submit(s, &hp, &hostile, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "submit: %s", err);
        goto done;
    }
    mt = NULL; /* the request's */
    kipp_finish fin, hfin;
    for (int k = 0; k < 5000; k++) { /* its prompt is in: its first mask is under way */
        kipp_sched_stats st;
        kipp_sched_get_stats(s, &st);
        if (st.steps > 0) break;
        sleep_ms(1);
    }
    const kipp_req_params rp = req_params(p, 1, 0.0f);
    if (kipp_sched_submit(s, &rp, &plain, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "submit: %s", err);
    } else {
        outputs o;
        collect(plain, &o, 1, &fin);
        KT_CHECK(fin == KIPP_FINISH_LENGTH && o.n[1] == MAX_GEN, "the plain request: %u tokens, finish %d",
                 o.n[1], (int)fin);
        kipp_req_wait(hostile, 0, 0, &hfin);
        KT_CHECK(hfin == KIPP_FINISH_NONE, "the plain request finished only after the slow mask "
                 "(finish %d: %s)", (int)hfin, kipp_req_error(hostile));
        kipp_req_release(plain);
    }
    kipp_req_cancel(hostile);
    uint32_t n = 0;
    hfin = KIPP_FINISH_NONE;
    while (hfin == KIPP_FINISH_NONE) n = kipp_req_wait(hostile, n, -1, &hfin);
    KT_CHECK(hfin == KIPP_FINISH_CANCELLED, "the cancelled slow request ended with %d (%s)",
             (int)hfin, kipp_req_error(hostile));
    kipp_req_release(hostile);
done:
    kipp_sched_free(s);
    kipp_matcher_free(mt);
    kipp_token_trie_free(trie);
    kipp_buf_free(&text);
}

/* The model, the prompts and the scheduler parameters both scheduler gates start from;
 * NULL (a counted failure) when the model or its prompts cannot be had. */
static kipp_model *open_gate(const char *model_path, const kt_opts *o, prompts *p,
                             kipp_sched_params *sp) {
    char err[KIPP_ERR_LEN];
    kipp_model *m = NULL;
    if (kipp_model_load(model_path, &m, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "%s", err);
        return NULL;
    }
    if (make_prompts(m, p) != 0) {
        KT_CHECK(0, "tokenize");
        kipp_model_free(m);
        return NULL;
    }
    *sp = (kipp_sched_params){.backend = kt_backend(o, "cpu"), .n_threads = 2, .n_ctx = CTX,
                              .max_running = N_REQ, .max_queue = 64, .batch_tokens = 48,
                              .kv_type = o ? o->kv_type : KIPP_KV_TYPE_DEFAULT,
                              .kv_type_v = o ? o->kv_type_v : KIPP_KV_TYPE_DEFAULT};
    return m;
}

/* Waits (at most 60 s, scaled by kt_scaled) for r to finish, reading as it goes; 0: it did. */
static int collect_within(kipp_req *r, outputs *o, int i, kipp_finish *fin) {
    uint32_t n = 0;
    *fin = KIPP_FINISH_NONE;
    for (int k = 0; k < kt_scaled(600) && *fin == KIPP_FINISH_NONE; k++) n = kipp_req_wait(r, n, 100, fin);
    o->n[i] = n;
    for (uint32_t k = 0; k < n && k < MAX_GEN; k++) o->tok[i][k] = kipp_req_token(r, k)->id;
    return *fin == KIPP_FINISH_NONE ? -1 : 0;
}

/* n prompt tokens: the gate's prompts one after another. */
static void long_prompt(const prompts *p, int32_t *out, uint32_t n) {
    for (uint32_t k = 0, i = 0, j = 0; k < n; k++) {
        if (j == p->n[i]) i = (i + 1) % N_REQ, j = 0;
        out[k] = p->ids[i][j++];
    }
}

/* Prompts share a step's prompt budget shortest remaining first: on 2 slots with 4 prompt
 * tokens per step, a short prompt submitted right after a 128-token one (32 steps of
 * prefill) gets its first token before the long one does, and both then run to
 * max_tokens. In arrival order (the scheduler before) the short one waited for the long
 * one's whole prefill. */
static void gate_short_prompt_first(kipp_model *m, const prompts *p, const kipp_sched_params *base) {
    char err[KIPP_ERR_LEN];
    kipp_sched_params sp = *base;
    sp.max_running = 2;
    sp.batch_tokens = 4;
    sp.prefix_cache_entries = 0;
    int32_t longp[128];
    long_prompt(p, longp, 128);
    /* Judged in engine steps, not seconds: which first token a step published first, and
     * how far the long prompt had got when the short one arrived. The short one must
     * arrive while the long one still has more prompt left than it, counting the step in
     * flight at its submission as done; on a loaded machine the test thread can be
     * descheduled between the two submissions (CI: 4.7 ms, a dozen tiny steps, and a time
     * guard let through an attempt whose short prompt arrived too late), so an attempt
     * where it came later proves nothing and is repeated (at most 8). */
    int decided = 0, ok = 0;
    uint64_t at_long = 0, at_short = 0;
    int64_t first_short = -1, first_long = -1;
    double t_short = -1, t_long = -1;
    for (int attempt = 0; attempt < 8 && !decided; attempt++) {
        kipp_sched *s;
        if (kipp_sched_start(m, &sp, &s, err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "scheduler: %s", err);
            return;
        }
        kipp_req_params rl = req_params(p, 0, 0.0f), rs = req_params(p, 1, 0.0f);
        rl.prompt = longp;
        rl.n_prompt = 128;
        kipp_req *l = NULL, *sh = NULL;
        outputs o;
        memset(&o, 0, sizeof o);
        kipp_finish fin;
        if (kipp_sched_submit(s, &rl, &l, err, sizeof err) == KIPP_OK &&
            kipp_sched_submit(s, &rs, &sh, err, sizeof err) == KIPP_OK) {
            KT_CHECK(collect_within(sh, &o, 1, &fin) == 0 && fin == KIPP_FINISH_LENGTH, "short: finish %d", (int)fin);
            KT_CHECK(collect_within(l, &o, 0, &fin) == 0 && fin == KIPP_FINISH_LENGTH, "long: finish %d", (int)fin);
            double q;
            kipp_req_times(sh, &q, &t_short);
            kipp_req_times(l, &q, &t_long);
            at_long = kipp_req_step_submitted(l);
            at_short = kipp_req_step_submitted(sh);
            const int64_t n_short = kipp_req_steps_to_first(sh), n_long = kipp_req_steps_to_first(l);
            first_short = n_short < 0 ? -1 : (int64_t)at_short + n_short;
            first_long = n_long < 0 ? -1 : (int64_t)at_long + n_long;
            /* the long one's prompt left at the first step the short one could join */
            const int64_t left = 128 - (int64_t)sp.batch_tokens * (int64_t)(at_short - at_long + 1);
            if (first_short >= 0 && first_long >= 0 && left > (int64_t)p->n[1]) {
                decided = 1;
                ok = first_short < first_long;
            }
        } else {
            KT_CHECK(0, "submit: %s", err);
            decided = 1;
        }
        kipp_req_release(l);
        kipp_req_release(sh);
        kipp_sched_free(s);
    }
    KT_CHECK(decided && ok, "short prompt (%u tokens) behind a 128-token one: submitted after step %llu and %llu, "
             "first tokens at steps %lld (short, %.4f s after its submission) and %lld (long, %.4f s) (want the "
             "short one's first%s)", p->n[1], (unsigned long long)at_short, (unsigned long long)at_long,
             (long long)first_short, t_short, (long long)first_long, t_long,
             decided ? "" : "; no attempt had the short one early enough");
}

/* A one-sequence request's prompt goes into one step even beside a decoding sequence, whose
 * presence caps other prompts at the beside-decoders budget (prefill_share ~0: 4 tokens a
 * step): with D decoding, a 40-token prompt gets its first token within 2 steps of its
 * submission (the step in flight, then its own), where 4-token chunks took 10; the same
 * prompt as a sibling of an n > 1 request is still read in chunks (at least 10 steps).
 * Over a 16-token alone budget it goes in 16-token chunks (3 steps, 4 with the one in
 * flight) when only bulk rows decode beside it (D the last sequence of an n > 1 request),
 * and in 4-token chunks beside a one-sequence decoder (at least 7 steps). */
static void gate_whole_light_prompt(kipp_model *m, const prompts *p, const kipp_sched_params *base) {
    int32_t longp[128];
    long_prompt(p, longp, 128);
    uint64_t took[4] = {0, 0, 0, 0};
    for (int mode = 0; mode < 4; mode++) {
        const int heavy = mode == 1, bulk_dec = mode == 2;
        char err[KIPP_ERR_LEN];
        kipp_sched_params sp = *base;
        sp.batch_tokens = mode >= 2 ? 16 : 256; /* 2, 3: the alone budget under the prompt */
        sp.prefix_cache_entries = 0;
        sp.prefill_step_s = -1.0;
        sp.prefill_busy_s = -1.0; /* two arrivals within 2 s: the busy bound (0.1 s) would cut the
                                     prompt wherever 40 tokens take longer (TSan: 3 steps) */
        sp.prefill_share = 1e-9;
        kipp_sched *s;
        if (kipp_sched_start(m, &sp, &s, err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "scheduler: %s", err);
            return;
        }
        kipp_req_params rd = req_params(p, 0, 0.0f), rt = req_params(p, 1, 0.0f);
        rd.prompt = longp + 80; /* 24 tokens: a prompt-heavy step measures seconds per token */
        rd.n_prompt = 24;
        rd.max_tokens = 120;
        if (bulk_dec) rd.group = 78; /* the last sequence of an n > 1 request */
        rt.prompt = longp;
        rt.n_prompt = 40;
        rt.max_tokens = 2;
        if (heavy) rt.group = 77;
        kipp_req *d = NULL, *t = NULL;
        kipp_finish fin;
        if (kipp_sched_submit(s, &rd, &d, err, sizeof err) == KIPP_OK) {
            uint32_t nd = 0;
            for (int k = 0; k < kt_scaled(600) && nd < 4; k++) nd = kipp_req_wait(d, nd, 100, &fin); /* decode measured */
            if (kipp_sched_submit(s, &rt, &t, err, sizeof err) == KIPP_OK) {
                uint32_t nt = 0;
                for (int k = 0; k < kt_scaled(600) && nt == 0; k++) nt = kipp_req_wait(t, 0, 100, &fin);
                /* counted by the engine: a waiter that wakes late adds nothing */
                const int64_t n_steps = kipp_req_steps_to_first(t);
                took[mode] = n_steps > 0 ? (uint64_t)n_steps : 0;
                const uint32_t dn = kipp_req_wait(d, 0, 0, &fin);
                KT_CHECK(nt > 0 && fin == KIPP_FINISH_NONE && dn < rd.max_tokens,
                         "whole prompt: %u tokens, the decoder %s (it must decode throughout)", nt,
                         fin == KIPP_FINISH_NONE ? "runs" : "finished");
                kipp_req_cancel(t);
            } else {
                KT_CHECK(0, "submit: %s", err);
            }
            kipp_req_cancel(d);
        } else {
            KT_CHECK(0, "submit: %s", err);
        }
        kipp_req_release(t);
        kipp_req_release(d);
        kipp_sched_free(s);
    }
    KT_CHECK(took[0] >= 1 && took[0] <= 2, "a one-sequence 40-token prompt beside a decoder: first token %llu "
             "steps after its submission (want 1-2: read whole)", (unsigned long long)took[0]);
    KT_CHECK(took[1] >= 10, "the same prompt as a sibling of an n > 1 request: first token after %llu steps "
             "(want >= 10: 4-token chunks beside the decoder)", (unsigned long long)took[1]);
    KT_CHECK(took[2] >= 3 && took[2] <= 4, "a one-sequence 40-token prompt over a 16-token budget beside a bulk "
             "decoder: first token after %llu steps (want 3-4: 16-token chunks)", (unsigned long long)took[2]);
    KT_CHECK(took[3] >= 7, "the same beside a one-sequence decoder: first token after %llu steps (want >= 7: "
             "4-token chunks, the decoder's steps kept short)", (unsigned long long)took[3]);
}

/* Submits an n-sequence request of prompt 2 (siblings of `group`, greedy) into g[], then a
 * plain request of prompt 3. 1: a submit failed (checked here). */
/* Submits an n-sequence request of prompt 2 (siblings of `group`, greedy) into g[]; nonzero
 * (err set) when a submission failed. */
static int submit_group(kipp_sched *s, const prompts *p, uint64_t group, uint32_t n, kipp_req **g, char *err,
                        size_t err_len) {
    int bad = 0;
    for (uint32_t i = 0; i < n && !bad; i++) {
        kipp_req_params rg = req_params(p, 2, 0.0f);
        rg.group = group;
        rg.sibling = i;
        bad = kipp_sched_submit(s, &rg, &g[i], err, err_len) != KIPP_OK;
    }
    return bad;
}

/* Each of the n siblings in g[] finishes with prompt 2's solo output (what: the check's name). */
static void check_siblings_solo(kipp_req **g, int n, const outputs *solo, const char *what) {
    for (int i = 0; i < n; i++) {
        outputs og;
        kipp_finish fin;
        KT_CHECK(collect_within(g[i], &og, 2, &fin) == 0 && og.n[2] == solo->n[2] &&
                     !memcmp(og.tok[2], solo->tok[2], og.n[2] * sizeof(int32_t)),
                 "%s: sibling %d differs from the prompt's solo run", what, i);
    }
}

static int submit_group_and_plain(kipp_sched *s, const prompts *p, uint64_t group, uint32_t n, kipp_req **g,
                                  kipp_req **plain) {
    char err[KIPP_ERR_LEN];
    int bad = submit_group(s, p, group, n, g, err, sizeof err);
    const kipp_req_params rp = req_params(p, 3, 0.0f);
    bad = bad || kipp_sched_submit(s, &rp, plain, err, sizeof err) != KIPP_OK;
    KT_CHECK(!bad, "submit: %s", err);
    return bad;
}

/* Back-pressure and fairness: a request with a window of 4 that nobody reads stops at 4
 * tokens (paused, not finished) and, read later, gives its solo tokens; alone on one slot
 * its paused sequence yields the slot to another request (and resumes after). Fairness:
 * on 2 slots, a plain request sent after an n = 4 group finishes before the group's last
 * sibling (it does not queue behind the siblings), every output is its solo output, and
 * prompt_tokens counts the group's prompt once. */
static void gate_window_and_fairness(kipp_model *m, const prompts *p, const kipp_sched_params *base,
                                     const outputs *solo) {
    char err[KIPP_ERR_LEN];
    kipp_sched_params sp = *base;
    sp.max_running = 1;
    sp.prefix_cache_entries = 16;
    kipp_sched *s;
    if (kipp_sched_start(m, &sp, &s, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "scheduler: %s", err);
        return;
    }
    outputs o;
    memset(&o, 0, sizeof o);
    kipp_finish fin;
    kipp_req_params ra = req_params(p, 0, 0.0f);
    ra.window = 4;
    kipp_req *a = NULL, *b = NULL;
    if (kipp_sched_submit(s, &ra, &a, err, sizeof err) == KIPP_OK) {
        uint32_t n = 0;
        for (int k = 0; k < kt_scaled(600) && n < 4; k++) { /* up to a minute (sanitizers are slow) */
            n = kipp_req_wait(a, 0, 0, &fin);
            if (n < 4) sleep_ms(100);
        }
        sleep_ms(200); /* room to run past the window, were it not kept */
        n = kipp_req_wait(a, 0, 0, &fin);
        kipp_sched_stats st;
        kipp_sched_get_stats(s, &st);
        KT_CHECK(n == 4 && fin == KIPP_FINISH_NONE && st.paused == 1,
                 "window 4, not read: %u tokens, finish %d, %u paused", n, (int)fin, st.paused);
        const kipp_req_params rb = req_params(p, 1, 0.0f);
        if (kipp_sched_submit(s, &rb, &b, err, sizeof err) == KIPP_OK) {
            KT_CHECK(collect_within(b, &o, 1, &fin) == 0 && fin == KIPP_FINISH_LENGTH,
                     "a request behind a paused one on the only slot did not finish (%d)", (int)fin);
        } else {
            KT_CHECK(0, "submit: %s", err);
        }
        KT_CHECK(collect_within(a, &o, 0, &fin) == 0 && fin == KIPP_FINISH_LENGTH,
                 "the paused request did not finish once read (%d)", (int)fin);
        kipp_sched_get_stats(s, &st);
        KT_CHECK(st.preempted_paused >= 1, "the paused sequence never gave up its slot");
        for (int i = 0; i < 2; i++)
            KT_CHECK(o.n[i] == solo->n[i] && !memcmp(o.tok[i], solo->tok[i], o.n[i] * sizeof(int32_t)),
                     "window: request %d differs from its solo run", i);
    } else {
        KT_CHECK(0, "submit: %s", err);
    }
    kipp_req_release(a);
    kipp_req_release(b);
    kipp_sched_free(s);

    sp.max_running = 2;
    if (kipp_sched_start(m, &sp, &s, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "scheduler: %s", err);
        return;
    }
    kipp_req *g[4] = {0}, *plain = NULL;
    const int bad = submit_group_and_plain(s, p, 7, 4, g, &plain);
    if (!bad) {
        KT_CHECK(collect_within(plain, &o, 3, &fin) == 0, "the plain request did not finish");
        kipp_finish last;
        kipp_req_wait(g[3], 0, 0, &last);
        KT_CHECK(last == KIPP_FINISH_NONE, "the plain request finished only after every sibling "
                 "of the n = 4 request sent before it (it queued behind them)");
        KT_CHECK(o.n[3] == solo->n[3] && !memcmp(o.tok[3], solo->tok[3], o.n[3] * sizeof(int32_t)),
                 "fairness: the plain request differs from its solo run");
        check_siblings_solo(g, 4, solo, "fairness");
    }
    for (int i = 0; i < 4; i++) kipp_req_release(g[i]);
    kipp_req_release(plain);
    kipp_sched_stop(s);
    kipp_sched_stats st;
    kipp_sched_get_stats(s, &st);
    if (!bad) {
        KT_CHECK(st.prompt_tokens == p->n[2] + p->n[3], "prompt_tokens %llu: the group's prompt "
                 "(%u) counts once, with the plain one's (%u)", (unsigned long long)st.prompt_tokens,
                 p->n[2], p->n[3]);
        KT_CHECK(st.seq_prompt_tokens == 4ull * p->n[2] + p->n[3], "seq_prompt_tokens %llu",
                 (unsigned long long)st.seq_prompt_tokens);
    }
    kipp_sched_free(s);
}

/* Fair preemption parks: on 2 slots an n = 2 request decodes, then a plain request takes
 * one of its slots (its fair share); the sibling preempted keeps its KV (parked) and resumes
 * where it stopped: parked == preempted_fair, nothing given up for memory, every output is
 * its solo output and no block is left in use. Then the same with the siblings cancelled
 * while one is parked: its blocks are freed too (a parked request holds memory while it
 * waits, so every way out of the queue must give it back). Last, in a pool of one context
 * and a block (KV pressure while a sibling is parked): the parked KV goes first
 * (unparked >= 1), and every output is still its solo output. */
static void gate_fair_park(kipp_model *m, const prompts *p, const kipp_sched_params *base, const outputs *solo) {
    static const char *const modes[] = {"resumed", "cancelled", "pressed"};
    for (int mode = 0; mode < 3; mode++) {
        const int cancel = mode == 1, pressed = mode == 2;
        char err[KIPP_ERR_LEN];
        kipp_sched_params sp = *base;
        sp.max_running = 2;
        sp.prefix_cache_entries = 0;
        if (pressed) sp.n_kv_tokens = CTX + 16;
        kipp_sched *s;
        if (kipp_sched_start(m, &sp, &s, err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "scheduler: %s", err);
            return;
        }
        kipp_req *g[2] = {0}, *plain = NULL;
        kipp_finish fin;
        int bad = 0;
        for (uint32_t i = 0; i < 2 && !bad; i++) {
            kipp_req_params rg = req_params(p, 2, 0.0f);
            rg.group = 11;
            rg.sibling = i;
            rg.max_tokens = 8 * MAX_GEN; /* still decoding when the plain one comes */
            rg.ignore_eos = 1;
            bad = kipp_sched_submit(s, &rg, &g[i], err, sizeof err) != KIPP_OK;
        }
        for (int k = 0; k < kt_scaled(6000) && !bad; k++) { /* both siblings decoding */
            if (kipp_req_wait(g[0], 0, 0, &fin) >= 2 && kipp_req_wait(g[1], 0, 0, &fin) >= 2) break;
            sleep_ms(1);
        }
        kipp_req_params rp = req_params(p, 3, 0.0f);
        if (pressed) { /* long enough that its KV and the running sibling's outgrow the pool */
            rp.max_tokens = 6 * MAX_GEN;
            rp.ignore_eos = 1;
        }
        bad = bad || kipp_sched_submit(s, &rp, &plain, err, sizeof err) != KIPP_OK;
        KT_CHECK(!bad, "submit: %s", err);
        kipp_sched_stats st;
        if (!bad && cancel) {
            for (int k = 0; k < kt_scaled(600); k++) { /* a sibling parked, then the group cancelled */
                kipp_sched_get_stats(s, &st);
                if (st.parked >= 1) break;
                sleep_ms(10);
            }
            kipp_req_cancel(g[0]);
            kipp_req_cancel(g[1]);
        }
        outputs o;
        memset(&o, 0, sizeof o);
        if (!bad) {
            KT_CHECK(collect_within(plain, &o, 3, &fin) == 0 && fin == KIPP_FINISH_LENGTH, "park: the plain request "
                     "did not finish (%d)", (int)fin);
            KT_CHECK((pressed ? o.n[3] >= solo->n[3] : o.n[3] == solo->n[3]) &&
                         !memcmp(o.tok[3], solo->tok[3], solo->n[3] * sizeof(int32_t)),
                     "park (%s): the plain request differs from its solo run", modes[mode]);
            for (int i = 0; i < 2 && !cancel; i++) { /* its first MAX_GEN tokens are the solo run's */
                outputs og;
                KT_CHECK(collect_within(g[i], &og, 2, &fin) == 0 && fin == KIPP_FINISH_LENGTH &&
                             og.n[2] >= MAX_GEN && solo->n[2] == MAX_GEN && /* the context may end it */
                             !memcmp(og.tok[2], solo->tok[2], MAX_GEN * sizeof(int32_t)),
                         "park: sibling %d differs from the prompt's solo run (%u tokens)", i, og.n[2]);
            }
            for (int i = 0; i < 2 && cancel; i++) {
                for (int k = 0; k < kt_scaled(600) && fin != KIPP_FINISH_CANCELLED; k++) kipp_req_wait(g[i], 0, 100, &fin);
                KT_CHECK(fin == KIPP_FINISH_CANCELLED || fin == KIPP_FINISH_LENGTH, "park: cancelled sibling %d "
                         "ended %d", i, (int)fin);
            }
        }
        for (int k = 0; k < kt_scaled(600); k++) { /* idle: the engine has published its last step */
            kipp_sched_get_stats(s, &st);
            if (st.running == 0 && st.queue_depth == 0) break;
            sleep_ms(10);
        }
        kipp_sched_get_stats(s, &st);
        if (!bad) {
            KT_CHECK(st.preempted_fair >= 1 && st.parked == st.preempted_fair &&
                         (pressed ? st.unparked >= 1 : st.unparked == 0),
                     "park (%s): preempted_fair %llu, parked %llu, unparked %llu (want %s)", modes[mode],
                     (unsigned long long)st.preempted_fair, (unsigned long long)st.parked,
                     (unsigned long long)st.unparked, pressed ? "at least 1" : "0");
            KT_CHECK(st.kv_blocks_used == 0, "park (%s): %u KV blocks still in use when idle", modes[mode],
                     st.kv_blocks_used);
        }
        for (int i = 0; i < 2; i++) kipp_req_release(g[i]);
        kipp_req_release(plain);
        kipp_sched_free(s);
    }
}

/* The prefill step bound: alone, a 128-token prompt is read in one step without a bound,
 * and in 16-token chunks (PREFILL_MIN) when the bound is below one token's measured time;
 * its tokens are the same either way. A 64-token prompt first measures seconds per token
 * (and is the first of two arrivals). The busy bound (prefill_busy_s) applies only when the
 * two arrivals fall within arrival_window_s: the long prompt is chunked when it arrives
 * within a minute of the first, read whole when it arrives 0.2 s after a 0.05 s window. */
static void gate_prefill_step(kipp_model *m, const prompts *p, const kipp_sched_params *base) {
    enum { UNBOUNDED, BOUNDED, BUSY, BUSY_LATE, N_VARIANT };
    static const char *const names[N_VARIANT] = {"unbounded", "bounded", "busy", "busy, outside the window"};
    int32_t longp[128];
    long_prompt(p, longp, 128);
    int32_t toks[N_VARIANT][MAX_GEN];
    uint64_t steps[N_VARIANT] = {0};
    for (int v = 0; v < N_VARIANT; v++) {
        char err[KIPP_ERR_LEN];
        kipp_sched_params sp = *base;
        sp.batch_tokens = 256;
        sp.prefix_cache_entries = 0;
        sp.prefill_step_s = v == BOUNDED ? 1e-12 : -1.0;
        sp.prefill_busy_s = v >= BUSY ? 1e-12 : -1.0;
        sp.arrival_window_s = v == BUSY ? 60.0 : 0.05;
        kipp_sched *s;
        if (kipp_sched_start(m, &sp, &s, err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "scheduler: %s", err);
            return;
        }
        kipp_finish fin;
        outputs o;
        memset(&o, 0, sizeof o);
        kipp_req_params rw = req_params(p, 0, 0.0f), rl = req_params(p, 1, 0.0f);
        rw.prompt = longp + 64; /* 64 tokens, not a prefix of the long one */
        rw.n_prompt = 64;
        rw.max_tokens = 1;
        rl.prompt = longp;
        rl.n_prompt = 128;
        kipp_req *w = NULL, *l = NULL;
        kipp_sched_stats st0, st1;
        if (kipp_sched_submit(s, &rw, &w, err, sizeof err) == KIPP_OK) collect_within(w, &o, 0, &fin);
        else KT_CHECK(0, "submit: %s", err);
        if (v == BUSY_LATE) nanosleep(&(struct timespec){0, 200000000}, NULL);
        kipp_sched_get_stats(s, &st0);
        if (kipp_sched_submit(s, &rl, &l, err, sizeof err) == KIPP_OK) {
            KT_CHECK(collect_within(l, &o, 1, &fin) == 0 && fin == KIPP_FINISH_LENGTH, "prefill step (%s): finish %d",
                     names[v], (int)fin);
            memcpy(toks[v], o.tok[1], sizeof toks[v]);
        } else {
            KT_CHECK(0, "submit: %s", err);
        }
        kipp_sched_get_stats(s, &st1);
        steps[v] = st1.steps - st0.steps;
        kipp_req_release(w);
        kipp_req_release(l);
        kipp_sched_free(s);
    }
    /* MAX_GEN tokens: the first comes with the prompt's last step, then MAX_GEN - 1 steps */
    for (int v = 0; v < N_VARIANT; v++) {
        const uint64_t want = v == BOUNDED || v == BUSY ? 8 + MAX_GEN - 1 : MAX_GEN;
        KT_CHECK(steps[v] == want, "prefill step bound (%s): %llu steps, want %llu (%s)", names[v],
                 (unsigned long long)steps[v], (unsigned long long)want,
                 want == MAX_GEN ? "the prompt in one step" : "8 chunks of 16");
        KT_CHECK(!memcmp(toks[0], toks[v], sizeof toks[0]), "prefill step bound (%s): the prompt's tokens differ",
                 names[v]);
    }
}

/* A scheduler on 8 slots without the prefix cache, the fair-steps model fixed (fair_slope 1:
 * no timing in it), share and arrival window as given (window 0: the default); NULL (a
 * failed check) if it does not start. */
static kipp_sched *fair_sched(kipp_model *m, const kipp_sched_params *base, double share, double window) {
    char err[KIPP_ERR_LEN];
    kipp_sched_params sp = *base;
    sp.max_running = 8;
    sp.prefix_cache_entries = 0;
    sp.fair_slope = 1.0;
    sp.fair_share = share;
    sp.arrival_window_s = window;
    kipp_sched *s;
    if (kipp_sched_start(m, &sp, &s, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "scheduler: %s", err);
        return NULL;
    }
    return s;
}

/* Fair steps: on 8 slots an n = 6 request beside a plain one, with the step-time line
 * fixed (fair_slope: no timing in it) and a share of ~0, so one row per request per step:
 * sequences were held out (fair_deferred), the plain request finished while the siblings
 * had generated under half their tokens, and every output is its solo output. With the cap
 * off (fair_share < 0) nothing is held out. */
static void gate_fair_steps(kipp_model *m, const prompts *p, const kipp_sched_params *base,
                            const outputs *solo) {
    for (int off = 0; off < 2; off++) {
        kipp_sched *s = fair_sched(m, base, off ? -1.0 : 1e-9, base->arrival_window_s);
        if (!s) return;
        enum { NS = 6 };
        kipp_req *g[NS] = {0}, *plain = NULL;
        const int bad = submit_group_and_plain(s, p, 9, NS, g, &plain);
        outputs o;
        memset(&o, 0, sizeof o);
        kipp_finish fin;
        if (!bad) {
            KT_CHECK(collect_within(plain, &o, 3, &fin) == 0 && fin == KIPP_FINISH_LENGTH, "the plain request did not finish");
            uint32_t sib = 0;
            for (int i = 0; i < NS; i++) sib += kipp_req_wait(g[i], 0, 0, &fin);
            if (!off)
                KT_CHECK(sib < NS * MAX_GEN / 2, "fair steps: the plain request finished when the n = %d "
                         "request had %u of its %d tokens (one row each per step: about %d)", NS, sib,
                         NS * MAX_GEN, MAX_GEN);
            KT_CHECK(o.n[3] == solo->n[3] && !memcmp(o.tok[3], solo->tok[3], o.n[3] * sizeof(int32_t)),
                     "fair steps (%s): the plain request differs from its solo run", off ? "off" : "on");
            check_siblings_solo(g, NS, solo, off ? "fair steps (off)" : "fair steps (on)");
        }
        for (int i = 0; i < NS; i++) kipp_req_release(g[i]);
        kipp_req_release(plain);
        kipp_sched_stop(s);
        kipp_sched_stats st;
        kipp_sched_get_stats(s, &st);
        if (!bad)
            KT_CHECK(off ? st.fair_deferred == 0 : st.fair_deferred > 0, "fair steps (%s): %llu sequences held out",
                     off ? "off" : "on", (unsigned long long)st.fair_deferred);
        kipp_sched_free(s);
    }
}

/* An expected light request: a plain request runs and finishes, then an n = 6 request
 * runs alone, the step model fixed (fair_slope) and a share of ~0. With the plain request's
 * arrival inside the arrival window (600 s) another is expected, so the group's steps are
 * sized as though one were beside it (two rows: the expected one's and its own) and
 * sequences are held out; with a window of 1 us none is expected and none is held out.
 * Every output is its solo output either way. */
static void gate_fair_expected(kipp_model *m, const prompts *p, const kipp_sched_params *base,
                               const outputs *solo) {
    for (int expect = 1; expect >= 0; expect--) {
        char err[KIPP_ERR_LEN];
        kipp_sched *s = fair_sched(m, base, 1e-9, expect ? 600.0 : 1e-6);
        if (!s) return;
        enum { NS = 6 };
        kipp_req *g[NS] = {0}, *plain = NULL;
        outputs o;
        memset(&o, 0, sizeof o);
        kipp_finish fin;
        const kipp_req_params rp = req_params(p, 3, 0.0f);
        int bad = kipp_sched_submit(s, &rp, &plain, err, sizeof err) != KIPP_OK;
        if (!bad) {
            KT_CHECK(collect_within(plain, &o, 3, &fin) == 0 && fin == KIPP_FINISH_LENGTH &&
                         o.n[3] == solo->n[3] && !memcmp(o.tok[3], solo->tok[3], o.n[3] * sizeof(int32_t)),
                     "expected (%d): the plain request differs from its solo run", expect);
        }
        bad = bad || submit_group(s, p, 11, NS, g, err, sizeof err);
        KT_CHECK(!bad, "submit: %s", err);
        if (!bad) check_siblings_solo(g, NS, solo, expect ? "expected (1)" : "expected (0)");
        for (int i = 0; i < NS; i++) kipp_req_release(g[i]);
        kipp_req_release(plain);
        kipp_sched_stop(s);
        kipp_sched_stats st;
        kipp_sched_get_stats(s, &st);
        if (!bad)
            KT_CHECK(expect ? st.fair_deferred > 0 : st.fair_deferred == 0,
                     "an n = %d request alone after a plain one, a light request %s: %llu sequences held out", NS,
                     expect ? "expected" : "not expected", (unsigned long long)st.fair_deferred);
        kipp_sched_free(s);
    }
}

int kt_gate_sched(const char *model_path, const char *unused, const kt_opts *o) {
    (void)unused;
    const int failed0 = kt_failed;
    char err[KIPP_ERR_LEN];
    prompts p;
    kipp_sched_params sp;
    kipp_model *m = open_gate(model_path, o, &p, &sp);
    if (!m) return 1;
    kipp_sched *probe = NULL; /* a backend that cannot start fails once, not in every part */
    if (kipp_sched_start(m, &sp, &probe, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "scheduler on %s: %s", sp.backend, err);
        kipp_model_free(m);
        return 1;
    }
    kipp_sched_free(probe);
    /* KT_SCHED_BACKEND=1: only the part whose outcome depends on the backend most directly:
     * the same tokens solo and in a batch of 8, the scheduler's thread driving the backend;
     * the rest (KV pressure, the prefix cache, seeded sampling, logprobs, prompt logprobs,
     * fairness, queueing, ...) runs with the host backends, and on every backend in the full
     * tier. For a slow device (lavapipe). */
    const char *core = getenv("KT_SCHED_BACKEND");
    const int policy = !(core && strcmp(core, "1") == 0);
    outputs solo, batch, cached, pressed, sampled_solo, sampled_batch;
    memset(&solo, 0, sizeof solo);
    kipp_sched_stats st;
    if (run(m, &sp, &p, 0, 0.0f, &solo, NULL) == 0) {
        if (run(m, &sp, &p, 1, 0.0f, &batch, &st) == 0) same(&solo, &batch, "batch of 8");
        KT_CHECK(st.steps < N_REQ * MAX_GEN, "8 requests took %llu steps: not batched",
                 (unsigned long long)st.steps);
        kipp_sched_params pcp = sp;
        pcp.prefix_cache_entries = 16;
        if (policy) {
            if (run(m, &pcp, &p, 0, 0.0f, &cached, &st) == 0) same(&solo, &cached, "prefix cache");
            KT_CHECK(st.pc_hits > 0, "the prefix cache never hit (%llu lookups)",
                     (unsigned long long)st.pc_lookups);
        }
        kipp_sched_params tight = pcp;
        tight.n_kv_tokens = CTX + 16; /* room for about two of the eight */
        /* The test tier runs KV pressure once, with KV-cache events (every other case runs
         * without them); the full tier runs it without events as well. */
        const char *tier = getenv("TIER");
        const int both = !(tier && strcmp(tier, "test") == 0);
        if (policy && both) {
            if (run(m, &tight, &p, 1, 0.0f, &pressed, &st) == 0) same(&solo, &pressed, "KV pressure");
            KT_CHECK(st.preempted > 0, "a pool for two never preempted");
        }
        if (policy) {
            /* with KV-cache events: preemption, cache hits, live forks and evictions */
            static const kipp_kv_event_sink sink = {.ud = NULL, .hash = kve_hash, .publish = kve_publish};
            kipp_sched_params evp = tight;
            evp.kv_events = &sink;
            memset(&kve, 0, sizeof kve);
            if (run(m, &evp, &p, 1, 0.0f, &pressed, &st) == 0) same(&solo, &pressed, "KV pressure with KV-cache events");
            KT_CHECK(st.preempted > 0, "a pool for two never preempted (with KV-cache events)");
            KT_CHECK(!kve.bad && kve.stored > 0 && kve.removed > 0,
                     "KV-cache events: %d inconsistent, %llu stored, %llu removed in %llu batches", kve.bad,
                     (unsigned long long)kve.stored, (unsigned long long)kve.removed,
                     (unsigned long long)kve.batches);
        }
    }
    if (policy && run(m, &sp, &p, 0, 1.0f, &sampled_solo, NULL) == 0 &&
        run(m, &sp, &p, 1, 1.0f, &sampled_batch, NULL) == 0)
        same(&sampled_solo, &sampled_batch, "seeded sampling at temperature 1");
    if (solo.n[0] && policy) gate_window_and_fairness(m, &p, &sp, &solo);
    if (policy) gate_cancel_and_queue(m, &p, &sp);
    if (policy) gate_logprobs(m, &p, &sp);
    if (solo.n[0] && policy) gate_prompt_logprobs(m, &p, &sp, &solo);
    if (!policy) {
        kipp_model_free(m);
        printf("scheduler gate (%s, backend part): solo, batch of 8\n", sp.backend ? sp.backend : "default");
        return kt_failed - failed0;
    }
    gate_prefix_cache(m, &p, &sp);
    gate_slow_mask(m, &p, &sp);
    gate_short_prompt_first(m, &p, &sp);
    gate_fair_steps(m, &p, &sp, &solo);
    gate_fair_expected(m, &p, &sp, &solo);
    gate_fair_park(m, &p, &sp, &solo);
    gate_prefill_step(m, &p, &sp);
    gate_whole_light_prompt(m, &p, &sp);
    kipp_model_free(m);
    kipp_ctx_params lp = kipp_ctx_default_params();
    lp.backend = sp.backend;
    lp.kv_type = sp.kv_type;
    lp.kv_type_v = sp.kv_type_v;
    char label[48];
    printf("scheduler gate (%s): solo, batch of 8, prefix cache, KV pressure, seeded sampling, "
           "KV-cache events, window and fairness, cancel and queue, logprobs, prompt logprobs, prefix reuse, a slow mask, short prompt first, "
           "fair steps, an expected light request, prefill step bound, a one-sequence prompt whole beside a decoder\n",
           kt_label(&lp, label, sizeof label));
    return kt_failed - failed0;
}

/* ---- speculative decoding in the scheduler (kipp_test --draft-spec M D[,D...]) ---------- */

/* A drafter (dm, or prompt lookup of n-gram ngram) on the scheduler's backend, KV type
 * and threads, drafting at most k_max tokens (always k_max when fixed), p_min 0. */
static kipp_spec_params spec_params(const kipp_sched_params *base, kipp_model *dm,
                                    uint32_t ngram, uint32_t k_max, int fixed) {
    kipp_spec_params spp = {.model = dm, .ngram = ngram, .k_max = k_max, .k_min = 0,
                            .p_min = 0.0f, .fixed_k = fixed};
    spp.ctx = kipp_ctx_default_params();
    spp.ctx.backend = base->backend;
    spp.ctx.kv_type = base->kv_type;
    spp.ctx.kv_type_v = base->kv_type_v;
    spp.ctx.n_threads = base->n_threads;
    return spp;
}

/* Greedy output with speculation == without, alone and in a batch of 8, for each drafter:
 * the target itself (drafts always kept: acceptance must be 1), each draft model given
 * (partial or no acceptance), prompt lookup; every block back in the pool afterwards. */
static void spec_case(kipp_model *m, const prompts *p, const kipp_sched_params *base,
                      const outputs *ref, kipp_model *dm, uint32_t ngram, int fixed,
                      const char *what, int want_all_kept, uint32_t head) {
    kipp_spec_params spp = spec_params(base, dm, ngram, 4, fixed);
    spp.ctx.n_logits = head; /* a draft head of the first `head` tokens (0: all) */
    kipp_sched_params sp = *base;
    sp.spec = &spp;
    outputs solo, batch;
    kipp_sched_stats st;
    char label[160];
    snprintf(label, sizeof label, "speculative (%s), alone", what);
    if (run(m, &sp, p, 0, 0.0f, &solo, &st) != 0) return;
    same(ref, &solo, label);
    KT_CHECK(st.spec_drafted > 0, "%s: nothing was drafted", label);
    KT_CHECK(st.kv_blocks_used == 0, "%s: %u KV blocks still used after every request ended",
             label, st.kv_blocks_used);
    if (want_all_kept)
        KT_CHECK(st.spec_accepted == st.spec_drafted, "%s: %llu of %llu drafts kept, not all",
                 label, (unsigned long long)st.spec_accepted, (unsigned long long)st.spec_drafted);
    printf("  %-40s drafted %5llu, accepted %5llu (%.0f %%)\n", what,
           (unsigned long long)st.spec_drafted, (unsigned long long)st.spec_accepted,
           st.spec_drafted ? 100.0 * st.spec_accepted / st.spec_drafted : 0.0);
    snprintf(label, sizeof label, "speculative (%s), batch of 8", what);
    if (run(m, &sp, p, 1, 0.0f, &batch, &st) != 0) return;
    same(ref, &batch, label);
    KT_CHECK(st.kv_blocks_used == 0, "%s: %u KV blocks still used after every request ended",
             label, st.kv_blocks_used);
    KT_CHECK(st.steps < N_REQ * MAX_GEN, "%s: %llu steps: not batched", label,
             (unsigned long long)st.steps);
}

/* A context whose logits stop at token id n (kipp_ctx_params.n_logits, a draft's smaller
 * lm_head) gives the first n logits of a full context in every row of a 5-token batch, for
 * a round n, an odd n and 1; a limit above the vocabulary is refused. */
static void head_case(kipp_model *m, const kipp_sched_params *base, uint32_t n_round) {
    char err[KIPP_ERR_LEN];
    kipp_model_info mi;
    kipp_model_get_info(m, &mi);
    const int32_t toks[5] = {9, 100, 2000, 7, 42};
    kipp_ctx_params cp = kipp_ctx_default_params();
    cp.backend = base->backend;
    cp.kv_type = base->kv_type;
    cp.kv_type_v = base->kv_type_v;
    cp.n_threads = base->n_threads;
    cp.n_ctx = 64;
    float *full = malloc((size_t)5 * mi.n_vocab * sizeof *full);
    float *part = malloc((size_t)5 * mi.n_vocab * sizeof *part);
    const kipp_batch b = {.n = 5, .tokens = toks}; /* every row wanted */
    kipp_ctx *c = NULL;
    if (!full || !part || kipp_ctx_init(m, &cp, &c, err, sizeof err) != KIPP_OK ||
        kipp_decode_batch(c, &b, full, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "full head: %s", full && part ? err : "out of memory");
        kipp_ctx_free(c);
        free(full); free(part);
        return;
    }
    kipp_ctx_free(c);
    const uint32_t ns[3] = {n_round, n_round + 1001, 1};
    for (int i = 0; i < 3; i++) {
        cp.n_logits = ns[i];
        c = NULL;
        kipp_ctx_info ci;
        if (kipp_ctx_init(m, &cp, &c, err, sizeof err) != KIPP_OK ||
            kipp_decode_batch(c, &b, part, err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "head of %u tokens: %s", ns[i], err);
            kipp_ctx_free(c);
            continue;
        }
        kipp_ctx_get_info(c, &ci);
        kipp_ctx_free(c);
        KT_CHECK(ci.n_logits == ns[i], "head of %u tokens: the context reports %u", ns[i], ci.n_logits);
        double worst = 0.0;
        for (uint32_t r = 0; r < 5; r++)
            for (uint32_t j = 0; j < ns[i]; j++) {
                const double d = fabs((double)part[(size_t)r * ns[i] + j] - full[(size_t)r * mi.n_vocab + j]);
                worst = d > worst ? d : worst;
            }
        KT_CHECK(worst <= 1e-5, "head of %u tokens: logits differ from the full head's first %u "
                 "by up to %g", ns[i], ns[i], worst);
    }
    cp.n_logits = mi.n_vocab + 1;
    c = NULL;
    const kipp_status st = kipp_ctx_init(m, &cp, &c, err, sizeof err);
    KT_CHECK(st == KIPP_ERR_INVALID_ARG && strstr(err, "vocabulary"),
             "a head of %u tokens (vocabulary %u) was not refused (%s)", cp.n_logits, mi.n_vocab,
             st == KIPP_OK ? "accepted" : err);
    kipp_ctx_free(c);
    free(full);
    free(part);
    printf("  a head of %u, %u and 1 tokens: the full head's first logits\n", n_round, n_round + 1001);
}

/* Sampling through the model: N_SAMPLED requests (temperature 1, top-k 4, one seed each)
 * with and without speculation; their (token 1, token 2) pairs must come from the same
 * distribution (two-sample chi-square, false alarm 1e-4; cells with fewer than 20 pooled).
 * Token 1 comes from the prompt's logits; token 2 is a verification outcome: the draft's
 * K 2 run after token 1 (4 tokens are asked for, so the run has room). */
#define N_SAMPLED 1000
#define PAIR_CELLS 64

typedef struct {
    int32_t a[PAIR_CELLS], b[PAIR_CELLS];
    long n[2][PAIR_CELLS];
    int cells;
} pair_hist;

static void pair_add(pair_hist *h, int arm, int32_t x, int32_t y) {
    int i = 0;
    while (i < h->cells && !(h->a[i] == x && h->b[i] == y)) i++;
    if (i == h->cells) {
        if (h->cells == PAIR_CELLS) i = PAIR_CELLS - 1; /* overflow: the last cell pools */
        else { h->a[i] = x; h->b[i] = y; h->cells++; }
    }
    h->n[arm][i]++;
}

static int sample_arm(kipp_model *m, const kipp_sched_params *sp, const prompts *p, int arm,
                      pair_hist *h) {
    char err[KIPP_ERR_LEN];
    kipp_sched *s;
    if (kipp_sched_start(m, sp, &s, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "scheduler: %s", err);
        return -1;
    }
    int bad = 0;
    for (int w = 0; w < N_SAMPLED && !bad; w += N_REQ) {
        kipp_req *r[N_REQ] = {0};
        for (int i = 0; i < N_REQ && w + i < N_SAMPLED; i++) {
            kipp_req_params rp = req_params(p, 0, 1.0f);
            rp.max_tokens = 4;
            rp.sampling.top_k = 4;
            rp.sampling.top_p = 1.0f;
            rp.sampling.min_p = 0.0f;
            rp.sampling.seed = 77 + (uint64_t)(w + i) * 1000003ull + (uint64_t)arm * 7;
            if (kipp_sched_submit(s, &rp, &r[i], err, sizeof err) != KIPP_OK) {
                KT_CHECK(0, "submit: %s", err);
                bad = 1;
                break;
            }
        }
        for (int i = 0; i < N_REQ && r[i]; i++) {
            kipp_finish fin = KIPP_FINISH_NONE;
            uint32_t n = 0;
            while (fin == KIPP_FINISH_NONE) n = kipp_req_wait(r[i], n, -1, &fin);
            if (n == 4) pair_add(h, arm, kipp_req_token(r[i], 0)->id, kipp_req_token(r[i], 1)->id);
            else bad = 1;
            kipp_req_release(r[i]);
        }
    }
    kipp_sched_free(s);
    KT_CHECK(!bad, "sampled requests did not all give 4 tokens");
    return bad ? -1 : 0;
}

static void spec_sampling_case(kipp_model *m, const prompts *p, const kipp_sched_params *base,
                               kipp_model *dm, const char *what, uint32_t head) {
    kipp_spec_params spp = spec_params(base, dm, 0, 2, 1);
    spp.ctx.n_logits = head; /* q has no mass on tokens >= head, p may: the rule's hard case */
    kipp_sched_params with = *base;
    with.spec = &spp;
    static pair_hist h;
    memset(&h, 0, sizeof h);
    if (sample_arm(m, base, p, 0, &h) != 0 || sample_arm(m, &with, p, 1, &h) != 0) return;
    double chi2 = 0.0, pa = 0.0, pb = 0.0;
    int df = -1;
    for (int i = 0; i < h.cells; i++) {
        const double x = (double)h.n[0][i], y = (double)h.n[1][i];
        if (x + y < 20.0) { pa += x; pb += y; continue; }
        chi2 += (x - y) * (x - y) / (x + y);
        df++;
    }
    if (pa + pb >= 20.0) { chi2 += (pa - pb) * (pa - pb) / (pa + pb); df++; }
    const double crit = kt_chi2_crit(df > 0 ? df : 1, 3.719);
    KT_CHECK(df >= 2 && chi2 <= crit, "speculative sampling (%s): the first two tokens of %d "
             "seeds are not distributed as without speculation (chi-square %.1f, critical "
             "%.1f at 1e-4, %d degrees of freedom)", what, N_SAMPLED, chi2, crit, df);
    printf("  sampling through the model (%s): %d seeds per arm, %d cells, chi-square %.1f "
           "(critical %.1f)\n", what, N_SAMPLED, df + 1, chi2, crit);
}

int kt_gate_draft_spec(const char *model_path, const char *drafts, const kt_opts *o) {
    const int failed0 = kt_failed;
    char err[KIPP_ERR_LEN];
    prompts p;
    kipp_sched_params sp;
    kipp_model *m = open_gate(model_path, o, &p, &sp);
    if (!m) return 1;
    outputs ref;
    if (run(m, &sp, &p, 0, 0.0f, &ref, NULL) == 0) {
        spec_case(m, &p, &sp, &ref, m, 0, 1, "draft = the target, K 4", 1, 0);
        spec_case(m, &p, &sp, &ref, NULL, 3, 0, "prompt lookup, n-gram 3", 0, 0);
        kipp_model_info mi;
        kipp_model_get_info(m, &mi);
        const uint32_t head = mi.n_vocab > 16384 ? 8192 : mi.n_vocab / 2;
        head_case(m, &sp, head);
        char list[1024];
        snprintf(list, sizeof list, "%s", drafts);
        for (char *save = NULL, *f = strtok_r(list, ",", &save); f; f = strtok_r(NULL, ",", &save)) {
            kipp_model *dm = NULL;
            if (kipp_model_load(f, &dm, err, sizeof err) != KIPP_OK) {
                KT_CHECK(0, "draft %s: %s", f, err);
                continue;
            }
            const char *base = strrchr(f, '/') ? strrchr(f, '/') + 1 : f;
            char what[96];
            snprintf(what, sizeof what, "%.60s, K 4", base);
            spec_case(m, &p, &sp, &ref, dm, 0, 1, what, 0, 0);
            snprintf(what, sizeof what, "%.60s, adaptive", base);
            spec_case(m, &p, &sp, &ref, dm, 0, 0, what, 0, 0);
            snprintf(what, sizeof what, "%.50s, head of %u tokens, K 4", base, head);
            spec_case(m, &p, &sp, &ref, dm, 0, 1, what, 0, head);
            /* the first draft model only (2 x 1000 requests), and not on cpu-ref: time */
            if (f == list && strcmp(sp.backend, "cpu-ref") != 0) {
                snprintf(what, sizeof what, "%.50s, head of %u tokens", base, head);
                spec_sampling_case(m, &p, &sp, dm, what, head);
            }
            kipp_model_free(dm);
        }
    }
    kt_spec_rollback(m, o);
    kipp_model_free(m);
    kipp_ctx_params lp = kipp_ctx_default_params();
    lp.backend = sp.backend;
    lp.kv_type = sp.kv_type;
    lp.kv_type_v = sp.kv_type_v;
    char label[48];
    printf("speculative decoding gate (%s): greedy output identical with every drafter, alone "
           "and batched; no leaked blocks; rollback vs recomputation\n",
           kt_label(&lp, label, sizeof label));
    return kt_failed - failed0;
}
