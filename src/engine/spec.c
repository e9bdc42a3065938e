/* spec.c — see spec.h. */
#include "engine/spec.h"

#include "core/buf.h"
#include "core/error.h"
#include "model/model.h"
#include "tok/vocab.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int open;
    uint32_t seq;          /* the draft context's sequence */
    int32_t *fed;          /* [n_ctx] tokens in the draft KV, in order */
    uint32_t n_fed;
    kipp_sampler *smp;     /* draft model: samples the drafts */
    uint32_t n_smp_hist;   /* hist tokens accepted into smp (drafts are marked, rolled back) */
    int greedy;
    kipp_token_prob *q[KIPP_SPEC_MAX_K]; /* the draft's distributions (sampling) */
    size_t q_cap[KIPP_SPEC_MAX_K];       /* kipp_grow's */
} slot_t;

struct kipp_drafter {
    kipp_spec_params p;
    kipp_ctx *ctx;         /* the draft model's, NULL for prompt lookup */
    uint32_t n_ctx_draft;
    uint32_t n_logits;     /* the draft's logits row: token ids 0..n_logits-1 */
    slot_t *slots;
    /* batch scratch */
    int32_t *b_tok;
    uint32_t *b_seq;
    uint8_t *b_want;
    float *logits;         /* [n_slots][n_logits] */
    char desc[160];
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- set-up ---------------------------------------------------------------------------- */

static kipp_status check_vocab(const kipp_model *t, const kipp_model *d, char *err,
                               size_t err_len) {
    kipp_model_info ti, di;
    kipp_model_get_info(t, &ti);
    kipp_model_get_info(d, &di);
    if (ti.n_vocab != di.n_vocab)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "the draft model has %u tokens in its vocabulary, the target %u: "
                         "speculative decoding needs both to use the same tokenizer",
                         di.n_vocab, ti.n_vocab);
    for (uint32_t i = 0; i < ti.n_vocab; i++) {
        size_t nt, nd; /* the literal vocabulary strings, special tokens included */
        const char *bt = kipp_vocab_token_text(t->vocab, (int32_t)i, &nt);
        const char *bd = kipp_vocab_token_text(d->vocab, (int32_t)i, &nd);
        if (nt != nd || memcmp(bt, bd, nt) != 0 ||
            kipp_token_is_eog(t, (int32_t)i) != kipp_token_is_eog(d, (int32_t)i))
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "the draft model's token %u ('%.*s') differs from the target's "
                             "('%.*s'): speculative decoding needs both to use the same "
                             "tokenizer",
                             i, (int)(nd < 40 ? nd : 40), bd, (int)(nt < 40 ? nt : 40), bt);
    }
    return KIPP_OK;
}

kipp_status kipp_drafter_init(const kipp_model *target, const kipp_spec_params *pp,
                              kipp_drafter **out, char *err, size_t err_len) {
    *out = NULL;
    kipp_spec_params p = *pp;
    if ((p.model != NULL) == (p.ngram != 0))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "speculative decoding takes a draft model or an n-gram size, one of the two");
    if (p.ngram > 8)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "the n-gram size for prompt lookup must be in 1..8 (got %u)", p.ngram);
    if (p.k_max < 1 || p.k_max > KIPP_SPEC_MAX_K)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "the most tokens drafted per step must be in 1..%d (got %u)",
                         KIPP_SPEC_MAX_K, p.k_max);
    if (p.k_min > p.k_max)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "the fewest drafted tokens verified (%u) is above the most drafted (%u)",
                         p.k_min, p.k_max);
    if (!(p.p_min >= 0.0f && p.p_min <= 1.0f))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "the draft's minimum probability must be in [0, 1] (got %g)",
                         (double)p.p_min);
    if (p.n_slots == 0) p.n_slots = 1;
    kipp_model_info ti;
    kipp_model_get_info(target, &ti);
    kipp_status st;
    if (p.model && (st = check_vocab(target, p.model, err, err_len)) != KIPP_OK) return st;
    kipp_drafter *d = calloc(1, sizeof *d);
    if (!d) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "drafter: out of memory");
    d->p = p;
    d->slots = calloc(p.n_slots, sizeof *d->slots);
    if (!d->slots) goto nomem;
    if (p.model) {
        kipp_model_info di;
        kipp_model_get_info(p.model, &di);
        kipp_ctx_params cp = p.ctx;
        if (cp.n_logits > di.n_vocab) {
            kipp_drafter_free(d);
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "the draft's vocabulary limit %u is above its vocabulary size %u",
                             cp.n_logits, di.n_vocab);
        }
        uint32_t n_ctx = p.n_ctx + p.k_max;
        if (n_ctx > di.n_ctx_train) n_ctx = di.n_ctx_train; /* drafting stops past it */
        cp.n_ctx = n_ctx;
        if (!cp.kv_block_size) cp.kv_block_size = 16;
        cp.n_kv_blocks = p.n_slots * ((n_ctx + cp.kv_block_size - 1) / cp.kv_block_size) + 1;
        if ((st = kipp_ctx_init(p.model, &cp, &d->ctx, err, err_len)) != KIPP_OK) {
            char why[KIPP_ERR_LEN];
            snprintf(why, sizeof why, "%s", err);
            kipp_drafter_free(d);
            return kipp_errf(err, err_len, st, "draft model: %s", why);
        }
        d->n_ctx_draft = kipp_ctx_n_ctx(d->ctx);
        const size_t nb = p.n_slots > 512 ? p.n_slots : 512; /* a round, a prefill chunk */
        d->b_tok = malloc(nb * sizeof *d->b_tok);
        d->b_seq = malloc(nb * sizeof *d->b_seq);
        d->b_want = malloc(nb);
        kipp_ctx_info ci;
        kipp_ctx_get_info(d->ctx, &ci);
        d->n_logits = ci.n_logits;
        d->logits = malloc((size_t)p.n_slots * d->n_logits * sizeof *d->logits);
        if (!d->b_tok || !d->b_seq || !d->b_want || !d->logits) goto nomem;
        for (uint32_t i = 0; i < p.n_slots; i++)
            if (!(d->slots[i].fed = malloc((size_t)n_ctx * sizeof *d->slots[i].fed))) goto nomem;
        char head[64] = "";
        if (d->n_logits < ti.n_vocab)
            snprintf(head, sizeof head, ", drafts from tokens 0..%u", d->n_logits - 1);
        snprintf(d->desc, sizeof d->desc, "draft model (%u layers, %u wide; %s)%s, draft-max %u",
                 di.n_layer, di.n_embd, ci.backend, head, p.k_max);
    } else {
        snprintf(d->desc, sizeof d->desc, "prompt lookup (n-gram %u..1), draft-max %u", p.ngram,
                 p.k_max);
    }
    *out = d;
    return KIPP_OK;
nomem:
    kipp_drafter_free(d);
    return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "drafter: out of memory");
}

const char *kipp_drafter_describe(const kipp_drafter *d) { return d->desc; }

void kipp_drafter_close(kipp_drafter *d, uint32_t slot) {
    if (!d || slot >= d->p.n_slots) return;
    slot_t *s = &d->slots[slot];
    if (s->open && d->ctx && s->seq != 0) kipp_ctx_seq_free(d->ctx, s->seq, NULL, 0);
    if (s->open && d->ctx && s->seq == 0) kipp_ctx_seq_truncate(d->ctx, 0, 0, NULL, 0);
    kipp_sampler_free(s->smp);
    s->smp = NULL;
    s->open = 0;
    s->n_fed = 0;
}

void kipp_drafter_free(kipp_drafter *d) {
    if (!d) return;
    for (uint32_t i = 0; d->slots && i < d->p.n_slots; i++) {
        kipp_drafter_close(d, i);
        free(d->slots[i].fed);
        for (int k = 0; k < KIPP_SPEC_MAX_K; k++) free(d->slots[i].q[k]);
    }
    kipp_ctx_free(d->ctx);
    free(d->slots);
    free(d->b_tok);
    free(d->b_seq);
    free(d->b_want);
    free(d->logits);
    free(d);
}

kipp_status kipp_drafter_open(kipp_drafter *d, uint32_t slot, const kipp_sampler_params *sp,
                              char *err, size_t err_len) {
    if (slot >= d->p.n_slots)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "drafter: slot %u of %u", slot,
                         d->p.n_slots);
    slot_t *s = &d->slots[slot];
    if (d->ctx) {
        kipp_status st;
        /* A slot that is already open keeps its draft KV: the next run keeps the prefix the
         * new sequence shares with the old one (a conversation's earlier turns, a common
         * system prompt). Sequence 0 always exists and serves slot 0. */
        if (!s->open) {
            s->n_fed = 0;
            if (slot == 0) s->seq = 0;
            else if ((st = kipp_ctx_seq_new(d->ctx, &s->seq, err, err_len)) != KIPP_OK) return st;
        }
        kipp_sampler_free(s->smp);
        s->smp = NULL;
        kipp_sampler_params q = *sp;
        q.seed = sp->seed ^ 0x5DEECE66Dull; /* its own stream, fixed by the request's seed */
        if ((st = kipp_sampler_init(&q, d->n_logits, &s->smp, err, err_len)) != KIPP_OK) {
            s->open = 1;
            kipp_drafter_close(d, slot);
            return st;
        }
        s->greedy = !(sp->temperature > 0.0f);
    }
    s->open = 1;
    s->n_smp_hist = 0;
    return KIPP_OK;
}

/* ---- prompt lookup --------------------------------------------------------------------- */

/* The most recent earlier occurrence of the history's last n tokens (n = ngram down to 1)
 * proposes the tokens that followed it. */
static void ngram_draft(const kipp_drafter *d, kipp_draft_job *j) {
    const int32_t *h = j->hist;
    const uint32_t H = j->n_hist;
    for (uint32_t n = d->p.ngram; n >= 1 && j->n_draft == 0; n--) {
        if (H < n + 1) continue;
        const int32_t *tail = h + H - n;
        for (uint32_t st = H - n; st-- > 0;) { /* candidate match at h[st .. st+n) */
            if (memcmp(h + st, tail, n * sizeof *h) != 0) continue;
            uint32_t avail = H - (st + n);
            uint32_t k = j->k < avail ? j->k : avail;
            for (uint32_t i = 0; i < k; i++) j->draft[j->n_draft++] = h[st + n + i];
            break;
        }
    }
}

/* ---- draft model ----------------------------------------------------------------------- */

/* Brings a slot's draft KV and sampler history in line with hist[0..n_hist-1) (everything
 * but the last token, which the first round feeds): keeps the common prefix, truncates the
 * rest (last step's rejected drafts), and prefills what is new. */
static kipp_status sync_slot(kipp_drafter *d, slot_t *s, const int32_t *hist, uint32_t n_hist,
                             char *err, size_t err_len) {
    kipp_sampler_rollback(s->smp); /* the previous step's drafts */
    for (; s->n_smp_hist < n_hist; s->n_smp_hist++) kipp_sampler_accept(s->smp, hist[s->n_smp_hist]);
    uint32_t keep = 0;
    const uint32_t lim = n_hist - 1 < s->n_fed ? n_hist - 1 : s->n_fed;
    while (keep < lim && s->fed[keep] == hist[keep]) keep++;
    kipp_status st;
    if (keep < s->n_fed && (st = kipp_ctx_seq_truncate(d->ctx, s->seq, keep, err, err_len)) != KIPP_OK)
        return st;
    s->n_fed = keep;
    while (s->n_fed < n_hist - 1) { /* prefill in chunks */
        uint32_t n = n_hist - 1 - s->n_fed;
        if (n > 512) n = 512;
        for (uint32_t i = 0; i < n; i++) {
            d->b_tok[i] = hist[s->n_fed + i];
            d->b_seq[i] = s->seq;
            d->b_want[i] = 0;
        }
        const kipp_batch b = {.n = n, .tokens = d->b_tok, .seq_ids = d->b_seq, .want_logits = d->b_want};
        if ((st = kipp_decode_batch(d->ctx, &b, NULL, err, err_len)) != KIPP_OK) return st;
        memcpy(s->fed + s->n_fed, hist + s->n_fed, n * sizeof *hist);
        s->n_fed += n;
    }
    kipp_sampler_mark(s->smp);
    return KIPP_OK;
}

/* Probability of id in the softmax of logits (raw, before the sampler). */
static float raw_prob(const float *l, uint32_t n, int32_t id) {
    float mx = -INFINITY;
    for (uint32_t i = 0; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++) sum += exp((double)(l[i] - mx));
    return (float)(exp((double)(l[id] - mx)) / sum);
}

/* One drafted token from a slot's logits row; 0 when drafting stops here (p_min). */
static int pick(kipp_drafter *d, slot_t *s, kipp_draft_job *j, float *row) {
    const uint32_t r = j->n_draft;
    int32_t tok;
    float pr;
    if (s->greedy) {
        if (d->p.p_min > 0.0f) {
            const kipp_token_prob *dist;
            kipp_sampler_dist(s->smp, row, &dist); /* penalties applied; argmax */
            tok = dist[0].id;
            pr = raw_prob(row, d->n_logits, tok);
        } else {
            tok = kipp_sampler_sample(s->smp, row);
            pr = 1.0f;
        }
        j->q[r] = NULL;
        j->nq[r] = 0;
    } else {
        const kipp_token_prob *dist;
        uint32_t n = kipp_sampler_dist(s->smp, row, &dist);
        if (kipp_grow((void **)&s->q[r], &s->q_cap[r], n, sizeof *s->q[r]) != KIPP_OK)
            return 0; /* no memory for q: draft fewer */
        memcpy(s->q[r], dist, (size_t)n * sizeof *dist);
        tok = kipp_sampler_draw(s->smp, s->q[r], n);
        pr = 0.0f;
        for (uint32_t i = 0; i < n; i++)
            if (s->q[r][i].id == tok) { pr = s->q[r][i].p; break; }
        j->q[r] = s->q[r];
        j->nq[r] = n;
    }
    if (pr < d->p.p_min) return 0;
    kipp_sampler_accept(s->smp, tok);
    j->draft[j->n_draft++] = tok;
    return 1;
}

/* *t_rounds: seconds spent in the drafting rounds (not in bringing slots up to date: a new
 * request's prompt is prefilled there, which is no part of a round's cost). */
static kipp_status model_draft(kipp_drafter *d, kipp_draft_job *jobs, uint32_t n, double *t_rounds,
                               char *err, size_t err_len) {
    kipp_status st;
    uint32_t active = 0;
    for (uint32_t i = 0; i < n; i++) {
        kipp_draft_job *j = &jobs[i];
        slot_t *s = &d->slots[j->slot];
        if (j->k == 0 || j->n_hist == 0) { j->k = 0; continue; }
        if (j->n_hist + j->k > d->n_ctx_draft) { /* past the draft's context: no drafts */
            j->k = 0;
            continue;
        }
        if ((st = sync_slot(d, s, j->hist, j->n_hist, err, err_len)) != KIPP_OK) return st;
        active++;
    }
    const double t0 = now_s();
    /* round r feeds each live job's newest token (round 0: the history's last) */
    for (uint32_t r = 0; active > 0; r++) {
        uint32_t nb = 0;
        for (uint32_t i = 0; i < n; i++) {
            kipp_draft_job *j = &jobs[i];
            if (j->k == 0) continue;
            slot_t *s = &d->slots[j->slot];
            d->b_tok[nb] = r == 0 ? j->hist[j->n_hist - 1] : j->draft[r - 1];
            d->b_seq[nb] = s->seq;
            d->b_want[nb] = 1;
            nb++;
        }
        const kipp_batch b = {.n = nb, .tokens = d->b_tok, .seq_ids = d->b_seq, .want_logits = d->b_want};
        if ((st = kipp_decode_batch(d->ctx, &b, d->logits, err, err_len)) != KIPP_OK) return st;
        uint32_t row = 0;
        for (uint32_t i = 0; i < n; i++) {
            kipp_draft_job *j = &jobs[i];
            if (j->k == 0) continue;
            slot_t *s = &d->slots[j->slot];
            s->fed[s->n_fed++] = d->b_tok[row];
            if (!pick(d, s, j, d->logits + (size_t)row * d->n_logits) || j->n_draft == j->k) {
                j->k = 0; /* done: this job leaves the rounds */
                active--;
            }
            row++;
        }
    }
    *t_rounds = now_s() - t0;
    return KIPP_OK;
}

kipp_status kipp_drafter_run(kipp_drafter *d, kipp_draft_job *jobs, uint32_t n,
                             kipp_spec_timing *timing, char *err, size_t err_len) {
    const double t0 = now_s();
    for (uint32_t i = 0; i < n; i++) {
        jobs[i].n_draft = 0;
        if (jobs[i].slot >= d->p.n_slots || !d->slots[jobs[i].slot].open)
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "drafter: slot %u is not open",
                             jobs[i].slot);
        if (jobs[i].k > d->p.k_max) jobs[i].k = d->p.k_max;
    }
    if (!d->ctx) {
        for (uint32_t i = 0; i < n; i++) {
            ngram_draft(d, &jobs[i]);
            for (uint32_t k = 0; k < jobs[i].n_draft; k++) jobs[i].q[k] = NULL, jobs[i].nq[k] = 0;
        }
        if (timing) kipp_spec_timing_draft(timing, (now_s() - t0) / (n ? n : 1));
        return KIPP_OK;
    }
    uint32_t rounds = 0;
    for (uint32_t i = 0; i < n; i++) rounds = jobs[i].k > rounds ? jobs[i].k : rounds;
    double t_rounds = 0.0;
    kipp_status st = model_draft(d, jobs, n, &t_rounds, err, err_len);
    uint32_t done = 0;
    for (uint32_t i = 0; i < n; i++) done = jobs[i].n_draft + 1 > done ? jobs[i].n_draft + 1 : done;
    if (done > rounds) done = rounds; /* rounds run: the longest draft, +1 if it stopped early */
    if (st == KIPP_OK && timing && done > 0) kipp_spec_timing_draft(timing, t_rounds / done);
    return st;
}

/* ---- verification ---------------------------------------------------------------------- */

uint32_t kipp_spec_verify(kipp_sampler *s, float *rows, uint32_t n_vocab, const kipp_draft_job *j,
                          int32_t *out, uint32_t *n_accepted) {
    uint32_t m = 0;
    for (; m < j->n_draft; m++) {
        int acc;
        const int32_t t = kipp_sampler_verify(s, rows + (size_t)m * n_vocab, j->draft[m], j->q[m],
                                              j->nq[m], &acc);
        kipp_sampler_accept(s, t);
        out[m] = t;
        if (!acc) {
            *n_accepted = m;
            return m + 1;
        }
    }
    /* every draft kept: the bonus token from the last row */
    const int32_t t = kipp_sampler_sample(s, rows + (size_t)m * n_vocab);
    kipp_sampler_accept(s, t);
    out[m] = t;
    *n_accepted = m;
    return m + 1;
}

/* ---- choosing K ------------------------------------------------------------------------ */

#define ACC_DECAY 0.85
#define TIME_DECAY 0.97
#define PROBE_GAP 16

void kipp_spec_seq_init(kipp_spec_seq *q) {
    memset(q, 0, sizeof *q);
    q->acc_num = 1.0; /* prior: acceptance 1/2, so drafting starts and is then measured */
    q->acc_den = 2.0;
    q->dec_den = 1.0; /* prior: runs give drafts */
}

void kipp_spec_seq_update(kipp_spec_seq *q, uint32_t k, uint32_t m) {
    if (k == 0) {
        q->idle_steps++;
        return;
    }
    q->idle_steps = 0;
    q->n_obs++;
    q->dec_num = ACC_DECAY * q->dec_num;
    q->dec_den = ACC_DECAY * q->dec_den + 1.0;
    /* per-token acceptance of a geometric run: m successes, one failure unless all passed */
    q->acc_num = ACC_DECAY * q->acc_num + m;
    q->acc_den = ACC_DECAY * q->acc_den + m + (m < k);
    q->drafted += k;
    q->accepted += m;
    q->steps++;
}

void kipp_spec_seq_declined(kipp_spec_seq *q) {
    q->idle_steps = 0;
    q->n_obs++;
    q->dec_num = ACC_DECAY * q->dec_num + 1.0;
    q->dec_den = ACC_DECAY * q->dec_den + 1.0;
}

void kipp_spec_timing_init(kipp_spec_timing *t) { memset(t, 0, sizeof *t); }

static void fit(kipp_spec_timing *t) {
    const double det = t->s0 * t->s11 - t->s1 * t->s1;
    double beta = det > 1e-9 * t->s0 * t->s11 ? (t->s0 * t->s1y - t->s1 * t->sy) / det : -1.0;
    const double my = t->sy / t->s0, mx = t->s1 / t->s0;
    if (beta < 0.0) beta = 0.0;
    double alpha = my - beta * mx;
    if (alpha < 0.0) { alpha = 0.0; beta = my / mx; }
    t->alpha = alpha;
    t->beta = beta;
}

static void add_sample(kipp_spec_timing *t, double x, double y, double w) {
    t->s0 = TIME_DECAY * t->s0 + w;
    t->s1 = TIME_DECAY * t->s1 + w * x;
    t->s11 = TIME_DECAY * t->s11 + w * x * x;
    t->sy = TIME_DECAY * t->sy + w * y;
    t->s1y = TIME_DECAY * t->s1y + w * x * y;
}

void kipp_spec_timing_target(kipp_spec_timing *t, uint32_t n_tokens, double seconds) {
    if (!(seconds > 0.0) || n_tokens == 0) return;
    if (t->n_target++ == 0) {
        /* prior until steps of other sizes are seen: an extra token costs a tenth of a
         * one-token step (decode is memory-bound), as two pseudo-observations */
        const double a = seconds / (1.0 + 0.1 * (n_tokens - 1.0));
        add_sample(t, 1.0, 1.1 * a, 1.0);
        add_sample(t, n_tokens + 16.0, a * (1.0 + 0.1 * (n_tokens + 16.0)), 1.0);
    }
    add_sample(t, (double)n_tokens, seconds, 1.0);
    fit(t);
}

void kipp_spec_timing_draft(kipp_spec_timing *t, double seconds_per_round) {
    if (!(seconds_per_round > 0.0)) return;
    t->gamma = t->n_draft++ == 0 ? seconds_per_round : 0.8 * t->gamma + 0.2 * seconds_per_round;
}

/* Tokens a step gives a sequence asked for k drafts: one when the run gives nothing (rate
 * d), else the kept prefix of a geometric run plus the target's token. */
static double expected_tokens(const kipp_spec_seq *q, uint32_t k) {
    if (k == 0) return 1.0;
    const double a = q->acc_num / q->acc_den, d = q->dec_num / q->dec_den;
    const double run = a >= 1.0 - 1e-9 ? k + 1.0 : (1.0 - pow(a, k + 1.0)) / (1.0 - a);
    return d + (1.0 - d) * run;
}

/* Expected tokens per second of a step: a sequence asked for k > 0 drafts adds k rows to
 * the target's batch unless its run gives nothing (rate d: no rows, one draft round); the
 * batch's draft rounds are its longest expected run. */
static double step_rate(const kipp_spec_timing *t, kipp_spec_seq *const *seqs, uint32_t n,
                        uint32_t base, const uint32_t *k) {
    double tokens = 0.0, rows = base, rounds = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        tokens += expected_tokens(seqs[i], k[i]);
        rows += 1.0;
        if (k[i] == 0) continue;
        const double d = seqs[i]->dec_num / seqs[i]->dec_den;
        rows += (1.0 - d) * k[i];
        const double r = d + (1.0 - d) * k[i];
        if (r > rounds) rounds = r;
    }
    return tokens / (t->alpha + t->beta * rows + t->gamma * rounds);
}

void kipp_spec_choose_k(const kipp_spec_timing *t, kipp_spec_seq *const *seqs, const uint32_t *cap,
                        uint32_t n, uint32_t base, uint32_t k_min, int fixed_k, uint32_t *k) {
    for (uint32_t i = 0; i < n; i++) k[i] = fixed_k ? cap[i] : 0;
    if (fixed_k) return;
    if (t->n_target == 0 || t->n_draft == 0) { /* nothing measured yet: draft to measure */
        for (uint32_t i = 0; i < n; i++) k[i] = cap[i] < 4 ? cap[i] : 4;
    } else {
        /* greedy: lengthen the draft that raises the step's expected rate most, while any does */
        double rate = step_rate(t, seqs, n, base, k);
        for (;;) {
            double best = rate;
            uint32_t bi = n;
            for (uint32_t i = 0; i < n; i++) {
                if (k[i] >= cap[i]) continue;
                k[i]++;
                const double r = step_rate(t, seqs, n, base, k);
                k[i]--;
                if (r > best * (1.0 + 1e-6)) { best = r; bi = i; }
            }
            if (bi == n) break;
            k[bi]++;
            rate = best;
        }
    }
    /* Probes: a sequence idle for the gap drafts one token. A probe step pays a draft round
     * for the whole batch, so every sequence idle for half the gap probes with it (they stay
     * in step), and the gap grows with the batch: 16 steps alone, 48 with 8 sequences. */
    const uint32_t gap = PROBE_GAP * (1 + n / 4);
    int probe = 0;
    for (uint32_t i = 0; i < n; i++) probe |= k[i] == 0 && seqs[i]->idle_steps >= gap && cap[i] > 0;
    for (uint32_t i = 0; i < n; i++) {
        if (probe && k[i] == 0 && seqs[i]->idle_steps >= gap / 2 && cap[i] > 0) k[i] = 1;
        if (k[i] > 0 && k[i] < k_min) k[i] = k_min <= cap[i] ? k_min : 0;
    }
}
