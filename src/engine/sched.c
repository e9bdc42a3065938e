/* sched.c — continuous batching (see sched.h). Locking: one mutex guards the queue, the
 * running list, every request's published fields (n_out, finish, cancel, refs) and the
 * statistics. The context, the KV pool and the prefix cache belong to the engine thread
 * alone; admission runs on it too. A step is built and decoded without the lock; tokens
 * are written past the published count and published under the lock afterwards.
 * A grammar's token is tried on the engine thread for a few milliseconds; one that takes
 * longer goes to the mask thread, and the request sits out of the batch until it is back. */
#include "engine/sched.h"

#include "core/error.h"
#include "core/vmath.h"
#include "engine/engine.h"
#include "engine/fair.h"
#include "engine/kv_track.h"
#include "engine/prefix_cache.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sys/resource.h>
#endif

/* A constrained token's grammar work (mask, draw, accept) runs on the engine thread until
 * MASK_INLINE_S has passed (the matcher's yield deadline; MASK_STEP_S for all of a step's
 * together); past that it is redone on the mask thread, with the matcher's own time limit
 * (KIPP_MATCHER_TIME_LIMIT_S) as the visible failure, while the other sequences step on.
 * Every row of a step waits for its inline grammar work, so while rows without a grammar
 * share the step, that work gets at most MASK_SHARE of the step's forward pass (at least
 * MASK_MIN_S): a constrained request never more than half-again slows the others. */
#define MASK_INLINE_S 0.005
#define MASK_STEP_S 0.02
#define MASK_SHARE 0.5
#define MASK_MIN_S 0.0005

/* While requests keep arriving (two API requests within arrival_window_s: a busy server,
 * not one user's long prompt), a prompt alone is read in steps of prefill_busy_s (0.1 s)
 * instead of prefill_step_s (0.25 s): a plain chat that arrives beside a long prompt waits
 * for the step in flight, and at 0.25 s that wait alone exceeded its whole unloaded
 * latency on the 0.6B shape (the robustness attack's tool-output class: 0.45 s against
 * 0.22 s). The long prompt pays with more, shorter steps while the traffic lasts.
 *
 * Chunked prefill beside decoding rows: every decoding sequence waits for the prompt
 * tokens in its step, so while any decode, a step's prompt tokens are capped at what costs
 * about prefill_share (PREFILL_SHARE) of a decode-only step (measured: EMAs of decode-only step time and
 * of seconds per token in prompt-heavy steps), never under PREFILL_MIN_BESIDE; alone,
 * prompts get --batch-tokens, as many as cost about prefill_step_s (a request that arrives
 * during a step waits for its end; never under PREFILL_MIN). One-sequence requests'
 * prompts go first, then those of n > 1 requests, each shortest remaining first; a
 * one-sequence request's whole remaining prompt goes in one step when it fits the alone
 * budget (it is interactive: chunking a short prompt beside decoders would cost it a step
 * per chunk), and the prompts after it get only the beside-decoders budget, as it decodes
 * from the next step on. Measured on the 0.6B shape beside four decoding rows: a 22-token
 * chat prompt took three steps (14 + 16 + 6 tokens, 0.28 s) and now takes one (0.14 s).
 * A one-sequence prompt that does not fit the alone budget is read in chunks of it while
 * only bulk rows (n > 1 requests') decode beside it, which yield to it anyway (the 22-token
 * prompt under the busy bound: 16 + 6 where it took 5 + 5 + 12); beside a one-sequence
 * decoder, in chunks of the beside-decoders budget. */
#define PREFILL_SHARE 0.5 /* the default kipp_sched_params.prefill_share */
#define PREFILL_MIN 16u
#define PREFILL_MIN_BESIDE 4u

/* Prompt log-probabilities (kipp_req_params.prompt_logprobs) want a logits row per prompt
 * token, where a prompt otherwise wants one for its last: a 256-token chunk would be 155 MB
 * of logits with Qwen3's 151,936-entry vocabulary. The scoring requests of a step get at
 * most PLP_ROWS such rows together (their prompts are read in chunks that fit), in rows
 * past the usual max_running * rows_per, allocated at the first such request (19 MB). */
#define PLP_ROWS 32u

/* Fair steps (engine/fair.h): the default share of a step's time the extra sequences of
 * an n > 1 request may add while one-sequence requests share the step. */
#define FAIR_SHARE_DEFAULT 0.25

/* a request's place with the mask thread (kipp_req.mk, under s->mu) */
enum { MK_NONE = 0, MK_QUEUED, MK_RUNNING, MK_DONE };
/* grammar_token's outcomes */
enum { TOK_OK = 0, TOK_NONE, TOK_STOP, TOK_YIELD };

const double kipp_hist_bounds[KIPP_HIST_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                    0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};

void kipp_hist_add(kipp_hist *h, double seconds) {
    int b = 0;
    while (b < KIPP_HIST_BUCKETS && seconds > kipp_hist_bounds[b]) b++;
    h->count[b]++;
    h->n++;
    h->sum += seconds;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct kipp_req {
    kipp_sched *s;
    kipp_logit_bias *bias;  /* the request's copy of p.sampling.logit_bias (its drafter
                               slot's sampler is made later, at admission) */
    /* guarded by s->mu */
    int refs;               /* the consumer's + the engine's while queued or running */
    uint32_t n_out;         /* published tokens */
    kipp_finish finish;     /* published once every token is */
    int cancel;             /* 1: cancelled; 2: stopped early by its consumer (not counted) */
    uint32_t n_read;        /* tokens its consumer has taken (the window counts from here) */
    uint32_t n_cached_pub;
    pthread_cond_t cv;
    kipp_req *next;         /* queue link */
    /* fixed at submit */
    kipp_req_params p;
    uint32_t cap;           /* n_prompt + max_tokens */
    /* engine thread only */
    int32_t *all;           /* [cap] prompt, then generated tokens */
    uint32_t n_all;
    uint32_t n_fed;         /* all[0..n_fed-1] are in the KV cache of seq */
    uint32_t seq;
    int has_seq, admitted_once;
    int parked;             /* queued with its sequence kept (a fair preemption): resumes
                               where it stopped, unless memory runs short first (unpark) */
    int hold;               /* paused by its window this step (set before each step) */
    uint32_t n_gen;         /* tokens written to out (published or not) */
    kipp_finish pending;    /* decided this step, published with the tokens */
    kipp_gen_token *out;    /* [max_tokens] */
    kipp_gen_token *plp;    /* [n_prompt] prompt_logprobs: token i given tokens 0..i-1 */
    uint32_t plp_next;      /* the next prompt token to score (1 at first; a recomputation
                               after a preemption scores nothing twice) */
    kipp_sampler *smp;
    kipp_matcher *mt;       /* p.matcher, owned */
    kipp_think think;       /* the optional reasoning prefix in front of mt */
    double t_submit, t_last;
    double t_admit, t_first; /* first admission, first token published (0: not yet); s->mu */
    uint64_t step_submit, step_first; /* s->st.steps at submission and at the first token's
                                         step (0: not yet); s->mu */
    char err[KIPP_ERR_LEN];
    kipp_req_state state;
    /* speculative decoding (engine thread; drafted/accepted published under s->mu) */
    int slot;               /* the drafter's slot, -1: none */
    kipp_spec_seq spec;
    kipp_draft_job job;     /* this step's drafts */
    uint64_t drafted_pub, accepted_pub;
    /* the mask thread. mk (s->mu) says who holds mt, think, smp and the wk_ fields: the
     * engine while MK_NONE or MK_DONE, the mask thread while MK_QUEUED or MK_RUNNING */
    int mk;
    kipp_req *mk_next;      /* the mask thread's queue (s->mu) */
    int wait_mask;          /* engine thread: 1 handed off, 2 back; out of the batch meanwhile */
    int mask_slow;          /* the last token's grammar work ran past MASK_INLINE_S */
    int32_t wk_tok;         /* the token drawn whose accept is still to do; -1: none */
    int wk_res;             /* the mask thread's grammar_token outcome */
    kipp_gen_token wk_gen;  /* the token drawn, with its log-probabilities */
    float *wk_row, *wk_raw; /* [n_vocab] the logits row handed off, its copy for logprobs */
    int par, par_ok;        /* engine thread: this step's token was drawn in the parallel
                               row phase (sample_row) into out[n_gen]; the think gate took it */
    double row_s, row_last; /* seconds its parallel-phase row took: decayed mean, this step's
                               (written by the host thread that drew it; read after the join) */
};

struct kipp_sched {
    kipp_model *m;
    kipp_ctx *ctx;
    kipp_prefix_cache *pc;
    kipp_kvt *kvt; /* KV-cache events (NULL: none) */
    kipp_sched_params p;
    uint32_t n_ctx, n_vocab;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t work; /* the engine waits here for requests */
    pthread_cond_t any;  /* broadcast when any request publishes (kipp_req_wait_any) */
    int stop;
    kipp_req *q_head, *q_tail;
    uint32_t n_queue;
    kipp_req **running; /* [max_running] in admission order */
    uint32_t n_running;
    kipp_sched_stats st;
    /* engine-thread scratch */
    int32_t *b_tok;
    uint32_t *b_seq;
    uint8_t *b_want;
    uint32_t *b_chunk; /* tokens each running request contributes this step */
    uint32_t *b_row;   /* its logits row when its last token is in the batch */
    uint32_t *b_plp;   /* its first prompt-logprob row (prompt_logprobs) */
    float *logits, *raw;
    uint32_t n_logit_rows, plp_rows; /* logits rows: max_running * rows_per, then the prompt-
                                        logprob rows (0 until a request wants them) */
    kipp_sampler_scratch *scratch; /* shared by the requests' samplers (engine thread only) */
    /* the parallel row phase: host thread t samples in hsc[t] and keeps a row for its
     * log-probabilities in hraw[t] (t = 0, the engine thread: scratch and raw) */
    int n_host;
    kipp_sampler_scratch **hsc;
    float **hraw;
    uint32_t *par; /* [max_running] the running indices sampled in parallel this step */
    uint32_t *ord; /* [max_running] prefilling running indices, shortest remaining first */
    uint32_t b_prefill;            /* prompt tokens in this step's batch */
    double t_arrive[2];            /* the last two API requests' arrivals (under mu) */
    uint64_t arrive_group;         /* the group of the last arrival (siblings arrive once) */
    int arrivals_busy;             /* two arrivals within arrival_window_s (engine's copy) */
    double t_light;                /* the last one-sequence request's arrival (under mu) */
    int light_expected;            /* one arrived within arrival_window_s (engine's copy) */
    double ema_dec_s, ema_tok_s;   /* decode-only step seconds; seconds per batch token in
                                      prompt-heavy steps (0: not measured yet) */
    kipp_step_fit fit;             /* whole decode-only steps: seconds against sequences and
                                      KV positions read */
    double fit_a, fit_b, fit_c;    /* the step model fair_rows last used (the trace shows it) */
    double fit_kv;                 /* KV positions the step's decoding rows read */
    kipp_fair_rows rows;           /* decode-only step seconds by rows (fair.h) */
    double *inc;                   /* [max_running] fair_rows scratch: what each pool row adds */
    double par_s;                  /* this step's parallel row phase (sample_rows), seconds */
    double light_row_s;            /* one-sequence requests' row phase, decayed mean (the
                                      expected light request's price) */
    uint32_t *grp, *progress;      /* [max_running] fair_rows scratch */
    uint8_t *kind, *keep, *bulk;
    double *cost;
    kipp_fair_state fair_st;       /* what the heavy requests' pool carries between steps */
    /* speculative decoding */
    kipp_drafter *drafter;
    uint32_t k_max, k_min;
    int fixed_k;
    kipp_spec_timing timing;
    uint8_t *slot_used;      /* [max_running] */
    kipp_draft_job *jobs;    /* [max_running] scratch for kipp_drafter_run */
    kipp_spec_seq **sq;      /* [max_running] */
    uint32_t *cap, *kk;      /* [max_running] */
    uint64_t e_steps, e_drafted, e_accepted; /* engine-side totals, published under mu */
    uint64_t e_fair_deferred;
    kipp_spec_seq global;    /* acceptance over every request: a new request's prior */
    double e_draft_s;
    /* the mask thread (mask_main) */
    pthread_t mthread;
    int mthread_started, mstop;
    pthread_cond_t mwork;    /* it waits here for masks (s->mu) */
    kipp_req *mq_head, *mq_tail;
    double inline_left;      /* engine thread: this step's inline grammar time left */
    FILE *trace;             /* KIPP_STEP_TRACE: a line per step (engine thread) */
    int trace_rows;          /* KIPP_STEP_TRACE_ROWS=1: and a line per running sequence */
    double t_trace0;
};

/* ---- requests --------------------------------------------------------------------------- */

static void req_free(kipp_req *r) {
    if (!r) return;
    pthread_cond_destroy(&r->cv);
    kipp_sampler_free(r->smp);
    kipp_matcher_free(r->mt);
    free(r->wk_row);
    free(r->wk_raw);
    free(r->all);
    free(r->out);
    free(r->plp);
    free(r->bias);
    free(r);
}

/* Drops one reference; the caller holds s->mu. Returns the request to free (outside the
 * lock) or NULL. */
static kipp_req *req_unref_locked(kipp_req *r) {
    return --r->refs == 0 ? r : NULL;
}

/* The consumer has taken `have` tokens: a request its window paused may go on (lock held). */
static void note_read_locked(kipp_req *r, uint32_t have) {
    if (have <= r->n_read) return;
    r->n_read = have;
    if (r->p.window) pthread_cond_signal(&r->s->work);
}

/* Paused by its window: it has run `window` tokens ahead of its consumer (engine thread,
 * lock held: n_gen is the engine's, n_read the consumer's). */
static int paused_locked(const kipp_req *r) {
    return r->p.window && r->n_gen >= r->n_read + r->p.window;
}

static void deadline_in(struct timespec *dl, int timeout_ms) {
    clock_gettime(CLOCK_MONOTONIC, dl);
    dl->tv_sec += timeout_ms / 1000;
    dl->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl->tv_nsec >= 1000000000L) { dl->tv_sec++; dl->tv_nsec -= 1000000000L; }
}

int kipp_req_wait_any(kipp_req *const *rs, const uint32_t *have, uint32_t n, uint32_t start,
                      int timeout_ms) {
    if (n == 0) return -1;
    kipp_sched *s = rs[0]->s;
    struct timespec dl;
    if (timeout_ms > 0) deadline_in(&dl, timeout_ms);
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < n; i++) note_read_locked(rs[i], have[i]);
    int got = -1;
    for (;;) {
        for (uint32_t k = 0; k < n && got < 0; k++) {
            const uint32_t i = (start + k) % n;
            if (rs[i]->n_out > have[i] || rs[i]->finish != KIPP_FINISH_NONE) got = (int)i;
        }
        if (got >= 0 || timeout_ms == 0) break;
        if (timeout_ms < 0) pthread_cond_wait(&s->any, &s->mu);
        else if (pthread_cond_timedwait(&s->any, &s->mu, &dl) != 0) break;
    }
    pthread_mutex_unlock(&s->mu);
    return got;
}

uint32_t kipp_req_wait(kipp_req *r, uint32_t have, int timeout_ms, kipp_finish *finish) {
    kipp_sched *s = r->s;
    pthread_mutex_lock(&s->mu);
    note_read_locked(r, have);
    if (r->n_out <= have && r->finish == KIPP_FINISH_NONE && timeout_ms != 0) {
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        if (timeout_ms > 0) {
            dl.tv_sec += timeout_ms / 1000;
            dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
            if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
        }
        while (r->n_out <= have && r->finish == KIPP_FINISH_NONE) {
            if (timeout_ms < 0) pthread_cond_wait(&r->cv, &s->mu);
            else if (pthread_cond_timedwait(&r->cv, &s->mu, &dl) != 0) break;
        }
    }
    const uint32_t n = r->n_out;
    *finish = r->finish;
    pthread_mutex_unlock(&s->mu);
    return n;
}

const kipp_gen_token *kipp_req_token(const kipp_req *r, uint32_t i) { return &r->out[i]; }

const kipp_gen_token *kipp_req_prompt_token(const kipp_req *r, uint32_t i) {
    return r->plp ? &r->plp[i] : NULL;
}

uint32_t kipp_req_n_prompt_logprobs(const kipp_req *r) { return r->plp ? r->plp_next : 0; }

uint32_t kipp_req_n_cached(kipp_req *r) {
    pthread_mutex_lock(&r->s->mu);
    const uint32_t n = r->n_cached_pub;
    pthread_mutex_unlock(&r->s->mu);
    return n;
}

void kipp_req_times(kipp_req *r, double *queue_s, double *ttft_s) {
    pthread_mutex_lock(&r->s->mu);
    *queue_s = r->t_admit > 0 ? r->t_admit - r->t_submit : -1.0;
    *ttft_s = r->t_first > 0 ? r->t_first - r->t_submit : -1.0;
    pthread_mutex_unlock(&r->s->mu);
}

int64_t kipp_req_steps_to_first(kipp_req *r) {
    pthread_mutex_lock(&r->s->mu);
    const int64_t n = r->t_first > 0 ? (int64_t)(r->step_first - r->step_submit) : -1;
    pthread_mutex_unlock(&r->s->mu);
    return n;
}

uint64_t kipp_req_step_submitted(kipp_req *r) {
    pthread_mutex_lock(&r->s->mu);
    const uint64_t n = r->step_submit;
    pthread_mutex_unlock(&r->s->mu);
    return n;
}

void kipp_req_spec(kipp_req *r, uint64_t *drafted, uint64_t *accepted) {
    pthread_mutex_lock(&r->s->mu);
    *drafted = r->drafted_pub;
    *accepted = r->accepted_pub;
    pthread_mutex_unlock(&r->s->mu);
}

const char *kipp_req_error(const kipp_req *r) { return r->finish == KIPP_FINISH_ERROR ? r->err : ""; }

void kipp_req_cancel(kipp_req *r) {
    kipp_sched *s = r->s;
    pthread_mutex_lock(&s->mu);
    if (!r->cancel) r->cancel = 1;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

void kipp_req_stop(kipp_req *r) {
    kipp_sched *s = r->s;
    pthread_mutex_lock(&s->mu);
    if (!r->cancel) r->cancel = 2;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
}

/* The matcher's interrupt (kipp_matcher_set_interrupt): the request's cancel flag. */
static int req_cancelled(void *arg) {
    kipp_req *r = arg;
    pthread_mutex_lock(&r->s->mu);
    const int c = r->cancel;
    pthread_mutex_unlock(&r->s->mu);
    return c;
}

void kipp_req_release(kipp_req *r) {
    if (!r) return;
    kipp_sched *s = r->s;
    pthread_mutex_lock(&s->mu);
    if (!r->cancel) r->cancel = 1; /* nobody reads it any more: drop it at the next step */
    pthread_cond_signal(&s->work);
    kipp_req *dead = req_unref_locked(r);
    pthread_mutex_unlock(&s->mu);
    req_free(dead);
}

kipp_status kipp_sched_submit(kipp_sched *s, const kipp_req_params *p, kipp_req **out, char *err,
                              size_t err_len) {
    *out = NULL;
    if (p->n_prompt == 0 || !p->prompt)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "the prompt is empty");
    if (p->n_prompt >= s->n_ctx)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "the prompt has %u tokens; the context holds %u (prompt + completion)",
                         p->n_prompt, s->n_ctx);
    if (p->top_logprobs > KIPP_MAX_TOP_LOGPROBS)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "top_logprobs is above %d",
                         KIPP_MAX_TOP_LOGPROBS);
    if (p->n_score_ids > KIPP_MAX_SCORE_IDS)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "n_score_ids is above %d",
                         KIPP_MAX_SCORE_IDS);
    for (uint32_t i = 0; i < p->n_score_ids; i++)
        if (p->score_ids[i] < 0 || (uint32_t)p->score_ids[i] >= s->n_vocab)
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "score id %u is %d, outside the vocabulary [0, %u)", i, p->score_ids[i],
                             s->n_vocab);
    for (uint32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || (uint32_t)p->prompt[i] >= s->n_vocab)
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "prompt token %u is %d, outside the vocabulary [0, %u)", i,
                             p->prompt[i], s->n_vocab);
    kipp_req *r = calloc(1, sizeof *r);
    if (!r) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "request: out of memory");
    r->s = s;
    r->p = *p;
    if (p->n_score_ids) r->p.logprobs = 1; /* the raw rows are kept for fill_scores */
    const uint32_t room = s->n_ctx - p->n_prompt;
    if (r->p.max_tokens > room) r->p.max_tokens = room;
    r->cap = p->n_prompt + r->p.max_tokens;
    r->all = malloc((size_t)r->cap * sizeof *r->all);
    r->out = malloc((size_t)(r->p.max_tokens ? r->p.max_tokens : 1) * sizeof *r->out);
    if (p->prompt_logprobs && (r->plp = calloc(p->n_prompt, sizeof *r->plp))) {
        for (uint32_t i = 0; i < p->n_prompt; i++) r->plp[i].id = p->prompt[i];
        r->plp_next = 1;
    }
    const uint32_t nb = p->sampling.logit_bias ? p->sampling.n_logit_bias : 0;
    if (nb && (r->bias = malloc((size_t)nb * sizeof *r->bias)))
        memcpy(r->bias, p->sampling.logit_bias, (size_t)nb * sizeof *r->bias);
    r->p.sampling.logit_bias = r->bias;
    kipp_status st = KIPP_OK;
    if (!r->all || !r->out || (nb && !r->bias) || (p->prompt_logprobs && !r->plp))
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "request: out of memory");
    if (st == KIPP_OK) st = kipp_sampler_init(&p->sampling, s->n_vocab, &r->smp, err, err_len);
    /* unconstrained requests' samplers are called on the engine thread only, one at a time:
     * they share one scratch (3.7 MB for Qwen3's vocabulary, else touched per sequence). A
     * constrained request may sample on the mask thread (hand_off): it keeps its own. */
    if (st == KIPP_OK && !p->matcher) kipp_sampler_share_scratch(r->smp, s->scratch);
    if (st != KIPP_OK) {
        free(r->all);
        free(r->out);
        free(r->plp);
        free(r->bias);
        kipp_sampler_free(r->smp);
        free(r);
        return st;
    }
    memcpy(r->all, p->prompt, (size_t)p->n_prompt * sizeof *r->all);
    r->p.prompt = r->all;
    r->mt = p->matcher; /* ours from here on */
    if (r->mt) kipp_matcher_set_interrupt(r->mt, req_cancelled, r);
    kipp_think_init(&r->think, &p->think, s->m);
    r->n_all = p->n_prompt;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->refs = 2;
    r->t_submit = now_s();
    r->slot = -1;
    kipp_spec_seq_init(&r->spec);

    pthread_mutex_lock(&s->mu);
    /* a free running slot takes a queued request at the engine's next look: such a request
     * is not waiting, so it does not count against the queue's bound */
    const uint32_t free_slots = s->p.max_running - s->n_running;
    if (s->stop || s->n_queue >= s->p.max_queue + free_slots) {
        s->st.rejected += !s->stop;
        const int stopping = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (r->mt) kipp_matcher_set_interrupt(r->mt, NULL, NULL);
        r->mt = NULL; /* a failed submit leaves the matcher with the caller */
        req_free(r);
        return kipp_errf(err, err_len, KIPP_ERR_BUSY,
                         stopping ? "the server is shutting down"
                                  : "the request queue is full (%u waiting)",
                         s->p.max_queue);
    }
    if (s->q_tail) s->q_tail->next = r;
    else s->q_head = r;
    s->q_tail = r;
    s->n_queue++;
    s->st.submitted++;
    if (!p->group || p->group != s->arrive_group) { /* an API request's arrival, once */
        s->t_arrive[0] = s->t_arrive[1];
        s->t_arrive[1] = r->t_submit;
        s->arrive_group = p->group;
    }
    if (!p->group) s->t_light = r->t_submit;
    r->step_submit = s->st.steps;
    s->st.queue_depth = s->n_queue;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    *out = r;
    return KIPP_OK;
}

/* ---- the engine thread: sequences ------------------------------------------------------- */

static kipp_kv_pool *pool_of(kipp_sched *s) { return kipp_ctx_kv_pool(s->ctx); }

/* The context's sequence operations, with the KV-event tracker told (kv_track.h). */
static void seq_free(kipp_sched *s, uint32_t seq) {
    kipp_ctx_seq_free(s->ctx, seq, NULL, 0);
    kipp_kvt_drop(s->kvt, seq);
}

static kipp_status seq_truncate(kipp_sched *s, uint32_t seq, uint32_t n_keep, char *err, size_t err_len) {
    const kipp_status st = kipp_ctx_seq_truncate(s->ctx, seq, n_keep, err, err_len);
    if (st == KIPP_OK) kipp_kvt_truncate(s->kvt, seq, n_keep);
    return st;
}

/* Gives a request's drafter slot back (the drafter keeps its KV for reuse). */
static void release_slot(kipp_sched *s, kipp_req *r) {
    if (r->slot >= 0) s->slot_used[r->slot] = 0;
    r->slot = -1;
}

/* Gives a request's sequence back: to the prefix cache (its fed tokens are valid K/V) or
 * to the pool. */
static void release_seq(kipp_sched *s, kipp_req *r, int keep) {
    if (!r->has_seq) return;
    if (s->pc && keep && r->n_fed > 0) kipp_pc_insert(s->pc, r->seq, r->all, r->n_fed);
    else seq_free(s, r->seq);
    r->has_seq = 0;
    r->n_fed = 0;
    release_slot(s, r);
    r->state = KIPP_REQ_QUEUED;
}

/* Evicts prefix-cache entries until the pool has need free blocks or the cache is empty.
 * 1: it has them. */
static int room_for(kipp_sched *s, uint32_t need) {
    while (pool_of(s)->n_free < need && s->pc && kipp_pc_evict_one(s->pc)) {}
    return pool_of(s)->n_free >= need;
}

/* Publishes a finished request (lock held): wakes its consumer, drops the engine's ref. */
static kipp_req *finish_locked(kipp_sched *s, kipp_req *r, kipp_finish f) {
    r->n_out = r->n_gen;
    r->finish = f;
    s->st.finished++;
    s->st.cancelled += f == KIPP_FINISH_CANCELLED;
    s->st.errors += f == KIPP_FINISH_ERROR;
    r->drafted_pub = r->spec.drafted;
    r->accepted_pub = r->spec.accepted;
    if (r->spec.drafted) {
        const double a = (double)r->spec.accepted / (double)r->spec.drafted;
        int b = (int)ceil(a * 10.0) - 1;
        s->st.spec_req_acc[b < 0 ? 0 : b > 9 ? 9 : b]++;
        s->st.spec_req_n++;
        s->st.spec_req_acc_sum += a;
    }
    if (r->mt) {
        kipp_matcher_stats ms;
        kipp_matcher_get_stats(r->mt, &ms);
        s->st.grammar_requests++;
        s->st.grammar_masks += ms.masks;
        s->st.grammar_cache_hits += ms.cache_hits;
        s->st.grammar_mask_seconds += ms.seconds;
        s->st.grammar_masks_partial += ms.partial;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_cond_broadcast(&s->any);
    return req_unref_locked(r);
}

static void running_remove(kipp_sched *s, uint32_t i) {
    memmove(&s->running[i], &s->running[i + 1], (s->n_running - i - 1) * sizeof *s->running);
    s->n_running--;
}

/* Blocks the request needs to run its next step: the rest of its tokens plus one. */
static uint32_t blocks_needed(kipp_sched *s, const kipp_req *r, uint32_t n_have) {
    const kipp_kv_pool *pool = pool_of(s);
    const uint32_t want = kipp_kv_blocks_for(pool, r->n_all + 1);
    const uint32_t have = kipp_kv_blocks_for(pool, n_have);
    return want > have ? want - have : 0;
}

/* A sibling of r (same group) still prefilling: r waits for its KV. */
static int sibling_prefilling(const kipp_sched *s, const kipp_req *r) {
    for (uint32_t i = 0; r->p.group && i < s->n_running; i++)
        if (s->running[i]->p.group == r->p.group && s->running[i]->state == KIPP_REQ_PREFILL) return 1;
    return 0;
}

/* Tokens of r that a cached or running sequence's KV may stand for, plus one (the n of
 * kipp_pc_acquire): all but its last (r computes its own next logits); while r records
 * prompt log-probabilities, only the positions whose logits it no longer needs (none at
 * first: position 0's logits score token 1). */
static uint32_t reuse_limit(const kipp_req *r) {
    return r->plp && r->plp_next < r->p.n_prompt ? r->plp_next : r->n_all;
}

/* The running sequence whose KV shares the longest prefix with r's tokens (at most
 * reuse_limit(r) - 1); 0 when none does. Live sharing: the prefix cache only holds
 * finished sequences. */
static uint32_t live_prefix(const kipp_sched *s, const kipp_req *r, uint32_t *src) {
    uint32_t best = 0;
    const uint32_t cap = reuse_limit(r) - 1;
    for (uint32_t i = 0; i < s->n_running; i++) {
        const kipp_req *q = s->running[i];
        if (!q->has_seq) continue;
        const uint32_t lim = q->n_fed < cap ? q->n_fed : cap;
        uint32_t k = 0;
        while (k < lim && q->all[k] == r->all[k]) k++;
        if (k > best) best = k, *src = q->seq;
    }
    return best;
}

/* Sequences of r's API request (its group) in the running batch; a request without
 * siblings is a group of its own. */
static uint32_t group_running(const kipp_sched *s, const kipp_req *r) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < s->n_running; i++)
        k += s->running[i] == r || (r->p.group && s->running[i]->p.group == r->p.group);
    return k;
}

/* A queued request that could run now: not paused by its window, no sibling prefilling. */
static int runnable_locked(const kipp_sched *s, const kipp_req *r) {
    return !paused_locked(r) && !sibling_prefilling(s, r);
}

/* The queued request to admit next: of the runnable ones, that whose API request has the
 * fewest sequences running, the earliest queued among equals. So requests interleave, not
 * siblings: a plain request waiting behind an n = 16 one takes the next free slot. */
static kipp_req *pick_locked(const kipp_sched *s) {
    kipp_req *best = NULL;
    uint32_t best_k = 0;
    for (kipp_req *q = s->q_head; q; q = q->next) {
        if (q->cancel || !runnable_locked(s, q)) continue;
        const uint32_t k = group_running(s, q);
        if (!best || k < best_k) best = q, best_k = k;
    }
    return best;
}

/* API requests (groups) running or runnable in the queue: the fair share of the slots is
 * max_running over this. */
static uint32_t active_groups(const kipp_sched *s) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_running; i++) {
        const kipp_req *r = s->running[i];
        uint32_t j = 0;
        while (j < i && !(r->p.group && s->running[j]->p.group == r->p.group)) j++;
        n += j == i;
    }
    for (const kipp_req *q = s->q_head; q; q = q->next) {
        if (q->cancel || !runnable_locked(s, q)) continue;
        int seen = 0;
        for (uint32_t i = 0; q->p.group && i < s->n_running && !seen; i++)
            seen = s->running[i]->p.group == q->p.group;
        for (const kipp_req *o = s->q_head; q->p.group && o != q && !seen; o = o->next)
            seen = o->p.group == q->p.group && !o->cancel && runnable_locked(s, o);
        n += !seen;
    }
    return n;
}

static void queue_unlink(kipp_sched *s, kipp_req *r) {
    kipp_req **pp = &s->q_head, *prev = NULL;
    while (*pp != r) prev = *pp, pp = &(*pp)->next;
    *pp = r->next;
    if (s->q_tail == r) s->q_tail = prev;
    r->next = NULL;
    s->n_queue--;
}

/* Gives a parked request's sequence up (to the prefix cache, as a preemption does): it is
 * recomputed from there when it runs again. */
static void unpark(kipp_sched *s, kipp_req *r) {
    if (!r->parked) return;
    r->parked = 0;
    release_seq(s, r, 1);
}

/* Unparks the queued request parked last (lock held): its blocks become evictable. 1: one
 * was. */
static int unpark_one_locked(kipp_sched *s) {
    kipp_req *last = NULL;
    for (kipp_req *q = s->q_head; q; q = q->next)
        if (q->parked) last = q;
    if (!last) return 0;
    unpark(s, last);
    s->st.unparked++;
    return 1;
}

/* Sends running[i] back to the front of the queue. park: its sequence stays (the slot is
 * what is needed, not the memory), so it resumes with no recomputation; else its KV goes
 * to the prefix cache (when there is one), so it resumes cheaply, or is recomputed. */
static void preempt_at_locked(kipp_sched *s, uint32_t i, int park) {
    kipp_req *r = s->running[i];
    if (park && r->has_seq && r->state == KIPP_REQ_DECODE) {
        r->parked = 1;
        release_slot(s, r); /* the drafter reopens one at admission */
        s->st.parked++;
    } else {
        release_seq(s, r, 1);
    }
    running_remove(s, i);
    r->next = s->q_head;
    s->q_head = r;
    if (!s->q_tail) s->q_tail = r;
    s->n_queue++;
    s->st.preempted++;
}

/* Preempts the newest decoding sequence its window paused (its client is not reading):
 * its slot and KV go to a request that could run. 1: one was. */
static int preempt_paused_locked(kipp_sched *s) {
    for (uint32_t i = s->n_running; i-- > 0;)
        if (s->running[i]->state == KIPP_REQ_DECODE && !s->running[i]->wait_mask &&
            paused_locked(s->running[i])) { /* the mask thread's requests keep their slots */
            preempt_at_locked(s, i, 0); /* its memory too: its client is not reading */
            s->st.preempted_paused++;
            return 1;
        }
    return 0;
}

/* No slot is free and r waits: frees one for it when that is fair. First a sequence its
 * window paused (its client is not reading); else, when r's request has fewer than its
 * fair share ceil(max_running / active requests) running, the most advanced decoding
 * sequence of the request holding the most slots, if that is above its share (parked:
 * preempt_at_locked). 1: a slot is free. */
static int make_room_locked(kipp_sched *s, const kipp_req *r) {
    if (preempt_paused_locked(s)) return 1;
    const uint32_t groups = active_groups(s);
    const uint32_t fair = groups ? (s->p.max_running + groups - 1) / groups : s->p.max_running;
    if (group_running(s, r) >= fair) return 0;
    uint32_t victim = 0, most = 0;
    for (uint32_t i = 0; i < s->n_running; i++) {
        const kipp_req *q = s->running[i];
        if (!q->p.group || q->state != KIPP_REQ_DECODE || q->wait_mask) continue;
        const uint32_t k = group_running(s, q);
        if (k > most || (k == most && i > victim)) most = k, victim = i;
    }
    if (most <= fair) return 0;
    /* of that request's decoding sequences the most advanced (the newest among equals): a
     * parked sequence resumes decoding at once, so "the newest" alone would park the same
     * one for every plain request and leave it far behind its siblings */
    const uint64_t grp = s->running[victim]->p.group;
    for (uint32_t i = 0; i < s->n_running; i++) {
        const kipp_req *q = s->running[i];
        if (q->p.group != grp || q->state != KIPP_REQ_DECODE || q->wait_mask) continue;
        if (q->n_gen > s->running[victim]->n_gen || (q->n_gen == s->running[victim]->n_gen && i > victim)) victim = i;
    }
    preempt_at_locked(s, victim, 1);
    s->st.preempted_fair++;
    return 1;
}

/* A drafter slot for an admitted request (a slot is free: at most max_running run). */
static void open_drafter(kipp_sched *s, kipp_req *r) {
    if (!s->drafter) return;
    uint32_t k = 0;
    while (s->slot_used[k]) k++;
    if (kipp_drafter_open(s->drafter, k, &r->p.sampling, NULL, 0) == KIPP_OK) {
        s->slot_used[k] = 1;
        r->slot = (int)k;
        if (s->global.n_obs && !r->admitted_once) {
            /* start from what drafting has been worth to recent requests,
             * weighted as two observations, instead of the fixed prior */
            r->spec.acc_num = 2.0 * s->global.acc_num / s->global.acc_den;
            r->spec.acc_den = 2.0;
            r->spec.dec_num = 2.0 * s->global.dec_num / s->global.dec_den;
            r->spec.dec_den = 2.0;
        }
    } /* else this request runs without speculation */
}

/* The logits rows for prompt log-probabilities (PLP_ROWS), made at the first request that
 * records them (engine thread, between steps: nothing points into s->logits then).
 * 0: out of memory. */
static int plp_rows_ready(kipp_sched *s) {
    if (s->plp_rows) return 1;
    float *l = realloc(s->logits, (size_t)(s->n_logit_rows + PLP_ROWS) * s->n_vocab * sizeof *l);
    if (!l) return 0;
    s->logits = l;
    s->plp_rows = PLP_ROWS;
    return 1;
}

/* Moves queued requests into the running batch while a slot and memory are free (lock
 * held; runs on the engine thread, which owns the pool). Cancelled ones are dropped
 * wherever they wait. */
static void admit_locked(kipp_sched *s, kipp_req **dead, uint32_t *n_dead) {
    for (kipp_req *q = s->q_head, *nx; q; q = nx) {
        nx = q->next;
        if (!q->cancel) continue;
        queue_unlink(s, q);
        unpark(s, q);
        kipp_req *d = finish_locked(s, q, q->cancel == 2 ? KIPP_FINISH_STOP : KIPP_FINISH_CANCELLED);
        if (d) dead[(*n_dead)++] = d;
    }
    for (;;) {
        kipp_req *r = pick_locked(s);
        if (!r) return;
        if (s->n_running >= s->p.max_running && !make_room_locked(s, r)) return;
        if (r->plp && !plp_rows_ready(s)) {
            queue_unlink(s, r);
            snprintf(r->err, sizeof r->err, "out of memory for the prompt's log-probabilities");
            kipp_req *d = finish_locked(s, r, KIPP_FINISH_ERROR);
            if (d) dead[(*n_dead)++] = d;
            continue;
        }
        if (r->parked) { /* its sequence is all there: the next block at most */
            if (room_for(s, blocks_needed(s, r, r->n_fed))) {
                r->parked = 0;
                open_drafter(s, r);
                s->running[s->n_running++] = r;
                queue_unlink(s, r);
                continue;
            }
            unpark(s, r); /* short of memory: from the prefix cache, as any preempted one */
        }
        {
            uint32_t seq = 0, n_hit = s->pc ? kipp_pc_acquire(s->pc, r->all, reuse_limit(r), &seq) : 0;
            uint32_t src = 0;
            const uint32_t n_live = live_prefix(s, r, &src);
            if (n_live > n_hit) { /* a running sequence holds more of the prompt: fork it */
                uint32_t fork;
                if (kipp_ctx_seq_fork(s->ctx, src, &fork, NULL, 0) == KIPP_OK) {
                    kipp_kvt_fork(s->kvt, src, fork);
                    if (seq_truncate(s, fork, n_live, NULL, 0) == KIPP_OK) {
                        if (n_hit) seq_free(s, seq);
                        seq = fork, n_hit = n_live;
                        s->st.live_prefix_tokens += n_live;
                    } else {
                        seq_free(s, fork);
                    }
                }
            }
            if (n_hit == 0) {
                if (kipp_ctx_seq_new(s->ctx, &seq, NULL, 0) != KIPP_OK) return;
                kipp_kvt_drop(s->kvt, seq); /* a recycled id holds nothing */
            }
            const uint32_t need = blocks_needed(s, r, n_hit);
            if (!room_for(s, need) && s->n_running > 0) { /* wait for room */
                seq_free(s, seq);
                if (unpark_one_locked(s)) continue;     /* a parked sequence's KV first, */
                if (preempt_paused_locked(s)) continue; /* then a paused one's */
                return;
            }
            if (s->pc) kipp_pc_note_lookup(s->pc, r->n_all, n_hit);
            r->seq = seq;
            r->has_seq = 1;
            r->n_fed = n_hit;
            r->state = KIPP_REQ_PREFILL;
            open_drafter(s, r);
            if (!r->admitted_once) {
                r->n_cached_pub = n_hit;
                r->t_admit = now_s();
                for (uint32_t i = 0; i < r->p.n_prompt; i++) kipp_sampler_accept(r->smp, r->all[i]);
                /* usage.prompt_tokens: an API request's prompt once, whatever its n */
                if (r->p.sibling == 0) s->st.prompt_tokens += r->p.n_prompt;
                s->st.seq_prompt_tokens += r->p.n_prompt;
                r->admitted_once = 1;
            }
            s->running[s->n_running++] = r;
        }
        queue_unlink(s, r);
    }
}

/* Frees the blocks of the most recently admitted request and puts it back at the front of
 * the queue; it is recomputed from its prompt and the tokens it already produced. Only one
 * in the batch is (a request waiting for the mask thread keeps its blocks), and only while
 * another stays in it: 0 when there is none to preempt. */
static int preempt_newest(kipp_sched *s) {
    uint32_t n_batch = 0, i = s->n_running;
    for (uint32_t k = 0; k < s->n_running; k++) n_batch += !s->running[k]->wait_mask;
    if (n_batch < 2) return 0;
    while (s->running[--i]->wait_mask) {}
    kipp_req *r = s->running[i];
    release_seq(s, r, 1);
    pthread_mutex_lock(&s->mu);
    running_remove(s, i);
    r->next = s->q_head;
    s->q_head = r;
    if (!s->q_tail) s->q_tail = r;
    s->n_queue++;
    s->st.preempted++;
    pthread_mutex_unlock(&s->mu);
    return 1;
}

/* ---- the engine thread: one step -------------------------------------------------------- */

/* Log-probabilities of the raw logits: the chosen token's and the n most likely (the
 * log-sum-exp and the top n in SIMD lanes: src/core/vmath.c). */
static void fill_logprobs(const float *raw, uint32_t n_vocab, kipp_gen_token *t, uint32_t n_top) {
    const double lse = kipp_log_sum_exp(raw, n_vocab);
    t->logprob = (float)(raw[t->id] - lse);
    t->n_top = kipp_vec_top_k(raw, n_vocab, n_top, t->top_id);
    for (uint32_t k = 0; k < t->n_top; k++) t->top_logprob[k] = (float)(raw[t->top_id[k]] - lse);
}

/* The raw log-probabilities of the ids a request asked for (kipp_req_params.score_ids), in
 * their order, in place of the most likely tokens fill_logprobs put there. */
static void fill_scores(const float *raw, uint32_t n_vocab, kipp_gen_token *t, const kipp_req_params *p) {
    if (!p->n_score_ids) return;
    const double lse = kipp_log_sum_exp(raw, n_vocab);
    t->n_top = p->n_score_ids;
    for (uint32_t k = 0; k < t->n_top; k++) {
        t->top_id[k] = p->score_ids[k];
        t->top_logprob[k] = (float)(raw[p->score_ids[k]] - lse);
    }
}

/* A step's prompt budget capped at `cap` tokens, never under `floor` nor over max. */
static uint32_t prompt_cap(uint32_t budget, double cap, uint32_t floor, uint32_t max) {
    if (cap < (double)budget) budget = cap < floor ? floor : (uint32_t)cap;
    return budget > max ? max : budget;
}

/* The order prompts take a step's budget in: one-sequence requests (interactive by nature)
 * before the sequences of n > 1 requests, each class shortest remaining first. */
static uint64_t prompt_key(const kipp_req *r) {
    return ((uint64_t)(r->p.group != 0) << 32) | (uint64_t)(r->n_all - r->n_fed);
}

/* Prompt position pos's logits score prompt token pos + 1: wanted while that token is
 * still unscored. */
static int plp_wanted(const kipp_req *r, uint32_t pos) {
    return r->plp && pos + 1 < r->p.n_prompt && pos + 1 >= r->plp_next;
}

/* The longest of r's next rem prompt tokens whose prompt-logprob rows number at most rows
 * (rem when r records none). */
static uint32_t plp_chunk(const kipp_req *r, uint32_t rem, uint32_t rows) {
    if (!r->plp) return rem;
    const uint32_t from = r->n_fed > r->plp_next - 1 ? r->n_fed : r->plp_next - 1;
    if (from + 1 >= r->p.n_prompt) return rem; /* every token scored */
    const uint32_t lim = from - r->n_fed + rows;
    return rem < lim ? rem : lim;
}

/* Builds the batch: every decoding sequence's pending token and its drafts, then prompt
 * chunks within the step's budget. Returns the batch size; b_chunk[i] is running[i]'s
 * share, b_row[i] its first logits row (b_plp[i] its first prompt-logprob row); *n_logits_rows
 * the rows that want logits. */
static uint32_t build_batch(kipp_sched *s, uint32_t *n_logits_rows) {
    uint32_t n = 0, n_rows = 0, budget = s->p.batch_tokens, n_pre = 0, light_dec = 0;
    uint32_t plp_left = s->plp_rows;
    for (uint32_t i = 0; i < s->n_running; i++) {
        kipp_req *r = s->running[i];
        if (r->wait_mask || r->hold) continue; /* with the mask thread, or paused */
        light_dec += r->state == KIPP_REQ_DECODE && !r->p.group;
        if (r->state != KIPP_REQ_DECODE) { /* insertion: one-sequence first, then shortest, stable */
            const uint64_t key = prompt_key(r);
            uint32_t j = n_pre++;
            while (j > 0 && prompt_key(s->running[s->ord[j - 1]]) > key) {
                s->ord[j] = s->ord[j - 1];
                j--;
            }
            s->ord[j] = i;
            continue;
        }
        s->b_chunk[i] = 1 + r->job.n_draft;
        s->b_row[i] = n_rows;
        for (uint32_t k = 0; k <= r->job.n_draft; k++) {
            s->b_tok[n] = k ? r->job.draft[k - 1] : r->all[r->n_fed];
            s->b_seq[n] = r->seq;
            s->b_want[n++] = 1;
            n_rows++;
        }
    }
    double step_s = s->p.prefill_step_s; /* a request arriving now waits this step */
    if (s->arrivals_busy && s->p.prefill_busy_s > 0 && (step_s <= 0 || s->p.prefill_busy_s < step_s))
        step_s = s->p.prefill_busy_s;
    if (step_s > 0 && s->ema_tok_s > 0)
        budget = prompt_cap(budget, step_s / s->ema_tok_s, PREFILL_MIN, s->p.batch_tokens);
    const uint32_t whole = budget; /* a one-sequence request's prompt up to this goes in whole */
    const int measured = s->ema_dec_s > 0 && s->ema_tok_s > 0;
    const uint32_t beside = measured ? prompt_cap(budget, s->p.prefill_share * s->ema_dec_s / s->ema_tok_s,
                                                  PREFILL_MIN_BESIDE, s->p.batch_tokens)
                                     : budget;
    if (n > 0) budget = beside;
    s->b_prefill = 0;
    for (uint32_t o = 0; o < n_pre; o++) {
        const uint32_t i = s->ord[o];
        kipp_req *r = s->running[i];
        const uint32_t rem = plp_chunk(r, r->n_all - r->n_fed, plp_left);
        uint32_t chunk = rem < budget ? rem : budget;
        if (!r->p.group && rem <= whole && s->b_prefill + rem <= whole) {
            chunk = rem; /* whole; it decodes next step: the rest get the beside budget */
            const uint32_t room = whole - (s->b_prefill + chunk); /* and never past whole */
            budget = beside < room ? beside : room;
        } else if (!r->p.group && !light_dec && s->b_prefill < whole) {
            /* too long for one step, and only bulk rows decode (they yield to a
             * one-sequence request anyway): chunks of the alone budget */
            const uint32_t room = whole - s->b_prefill;
            chunk = rem < room ? rem : room;
            budget = beside < room - chunk ? beside : room - chunk;
        } else {
            budget -= chunk;
        }
        if (chunk == 0) {
            if (r->plp) continue; /* the step's prompt-logprob rows are spent */
            break;
        }
        s->b_prefill += chunk;
        s->b_chunk[i] = chunk;
        s->b_row[i] = 0;
        for (uint32_t k = 0, n_plp = 0; k < chunk; k++) {
            const uint32_t pos = r->n_fed + k;
            const int plp = plp_wanted(r, pos), last = pos + 1 == r->n_all && r->p.max_tokens > 0;
            s->b_tok[n] = r->all[pos];
            s->b_seq[n] = r->seq;
            s->b_want[n] = plp || last; /* the prompt rows before the last row */
            if (plp && n_plp++ == 0) s->b_plp[i] = n_rows;
            if (last) s->b_row[i] = n_rows;
            plp_left -= (uint32_t)plp;
            n_rows += s->b_want[n];
            n++;
        }
    }
    *n_logits_rows = n_rows;
    return n;
}

/* The step-time EMAs build_batch sizes prompt chunks by: n tokens, of which b_prefill were
 * prompt tokens, took dt seconds. */
static void step_timing(kipp_sched *s, uint32_t n, double dt) {
    if (n == 0 || !(dt > 0)) return;
    if (s->b_prefill == 0) s->ema_dec_s = s->ema_dec_s > 0 ? 0.8 * s->ema_dec_s + 0.2 * dt : dt;
    else if (s->b_prefill >= PREFILL_MIN && s->b_prefill * 2 >= n) {
        const double per = dt / n;
        s->ema_tok_s = s->ema_tok_s > 0 ? 0.8 * s->ema_tok_s + 0.2 * per : per;
    }
}

/* Seconds running[i]'s draw took (decayed), or a sibling's while it has drawn none yet;
 * 0 when none of them has. */
static double row_seconds(const kipp_sched *s, uint32_t i) {
    const kipp_req *r = s->running[i];
    if (r->row_s > 0 || !r->p.group) return r->row_s;
    for (uint32_t j = 0; j < s->n_running; j++)
        if (s->running[j]->p.group == r->p.group && s->running[j]->row_s > 0) return s->running[j]->row_s;
    return 0;
}

/* Holds decoding sequences of n > 1 requests out of this step (hold = 2) while
 * one-sequence requests share it, or one is expected (kipp_fair_select), each row priced
 * by the step model at its context length. Returns the decoding sequences left; fit_kv
 * their KV positions. */
static uint32_t fair_rows(kipp_sched *s) {
    for (uint32_t i = 0; i < s->n_running; i++) {
        const kipp_req *r = s->running[i];
        uint32_t g = i;
        for (uint32_t j = 0; r->p.group && j < i; j++)
            if (s->running[j]->p.group == r->p.group) { g = s->grp[j]; break; }
        s->grp[i] = g;
        s->kind[i] = r->wait_mask || r->hold ? KIPP_FAIR_OUT
                     : r->state == KIPP_REQ_DECODE ? KIPP_FAIR_DECODE
                     : r->state == KIPP_REQ_PREFILL ? KIPP_FAIR_PREFILL : KIPP_FAIR_OUT;
        s->progress[i] = r->n_gen;
        s->bulk[i] = r->p.group != 0;
    }
    double a = 0, b = 0, c = 0;
    if (s->p.fair_slope > 0) b = s->p.fair_slope;
    else if (s->p.fair_share < 0 || !kipp_step_fit_plane(&s->fit, s->ema_tok_s, &a, &b, &c)) a = b = c = 0;
    /* the fitted model prices the forward pass; a row's draw (the sampler over the whole
     * vocabulary, its log-probabilities) is its request's own measured time, shared by the
     * host threads (a sibling's where the sequence has drawn none yet; a fixed model, the
     * gates' --fair-slope, prices the forward alone) */
    const int own = s->p.fair_slope <= 0;
    /* a step of m rows is priced at the table's m (fair.h: kipp_fair_rows) where it has
     * measured steps, each row then at its KV term and draw, each pool row at the step it
     * adds; the plane's line until then */
    const int tab = own && s->p.fair_share >= 0 && (a > 0 || b > 0) && kipp_fair_rows_at(&s->rows, 1, b) > 0;
    const double row_b = tab ? 0 : b; /* with the table, a row's own part is in its step */
    uint32_t light = 0;
    for (uint32_t i = 0; i < s->n_running; i++) {
        const kipp_req *r = s->running[i];
        const double draw = own ? kipp_fair_draw_cost(row_seconds(s, i), s->n_host) : 0;
        s->cost[i] = row_b + c * (r->n_fed + 1) + draw;
        light += s->kind[i] == KIPP_FAIR_DECODE && !s->bulk[i];
    }
    s->fit_a = a, s->fit_b = b, s->fit_c = c;
    const double ghost = row_b + c + (own ? kipp_fair_draw_cost(s->light_row_s, s->n_host) : 0);
    const double *inc = NULL;
    if (tab) { /* light rows present: the step of theirs; expected: a step of one, the pool's first row in its place */
        a = kipp_fair_rows_at(&s->rows, light ? light : 1, b);
        double prev = a; /* the step of the rows before pool row k */
        for (uint32_t k = 0; k < s->n_running; k++) {
            if (!light && k == 0) { /* in the expected row's place: its step is a */
                s->inc[k] = 0;
                continue;
            }
            const double next = kipp_fair_rows_at(&s->rows, light + k + 1, b), d = next - prev;
            prev = next;
            /* a row is never priced under half the plane's: measured noise can order two
             * counts' steps the wrong way round, which must not make a row free */
            s->inc[k] = d > 0.5 * b ? d : 0.5 * b;
        }
        inc = s->inc;
    }
    const uint32_t kept = kipp_fair_select(s->n_running, s->grp, s->kind, s->bulk, s->progress, s->cost, inc,
                                           s->p.fair_share, a, s->light_expected ? ghost : 0, &s->fair_st, s->keep);
    s->fit_kv = 0;
    for (uint32_t i = 0; i < s->n_running; i++) {
        kipp_req *r = s->running[i];
        if (s->kind[i] != KIPP_FAIR_DECODE) continue;
        if (s->keep[i]) {
            s->fit_kv += r->n_fed + 1;
            continue;
        }
        r->hold = 2;
        s->e_fair_deferred++;
    }
    return kept;
}

/* Drafts for every decoding request with a drafter slot: K per request from its measured
 * acceptance and the step-time model (kipp_spec_choose_k), one batched draft run. */
static void draft(kipp_sched *s) {
    uint32_t n = 0, prefill = 0;
    for (uint32_t i = 0; i < s->n_running; i++) {
        kipp_req *r = s->running[i];
        r->job.n_draft = 0;
        if (r->state != KIPP_REQ_DECODE) {
            const uint32_t rem = r->n_all - r->n_fed;
            prefill += rem < s->p.batch_tokens ? rem : s->p.batch_tokens;
            continue;
        }
        /* no drafts under a grammar or a reasoning bound (one mask per token), or while paused */
        if (r->slot < 0 || r->mt || kipp_think_masks(&r->think) || r->hold) continue;
        uint32_t cap = s->k_max;
        const uint32_t room = s->n_ctx - r->n_all, left = r->p.max_tokens - r->n_gen - 1;
        if (cap > room) cap = room;
        if (cap > left) cap = left;
        s->sq[n] = &r->spec;
        s->cap[n] = cap;
        s->jobs[n].slot = (uint32_t)i; /* running index, for now */
        n++;
    }
    if (!s->drafter || n == 0) return;
    if (prefill > s->p.batch_tokens) prefill = s->p.batch_tokens;
    kipp_spec_choose_k(&s->timing, s->sq, s->cap, n, prefill, s->k_min, s->fixed_k, s->kk);
    uint32_t nj = 0;
    for (uint32_t j = 0; j < n; j++) {
        kipp_req *r = s->running[s->jobs[j].slot];
        if (s->kk[j] == 0) { kipp_spec_seq_update(&r->spec, 0, 0); continue; }
        kipp_draft_job *job = &s->jobs[nj++];
        job->slot = (uint32_t)r->slot;
        job->hist = r->all;
        job->n_hist = r->n_all;
        job->k = s->kk[j];
    }
    if (nj == 0) return;
    char err[KIPP_ERR_LEN];
    const double t0 = now_s();
    if (kipp_drafter_run(s->drafter, s->jobs, nj, &s->timing, err, sizeof err) != KIPP_OK) {
        for (uint32_t j = 0; j < nj; j++) s->jobs[j].n_draft = 0; /* decode without drafts */
        return;
    }
    const double dt = now_s() - t0;
    for (uint32_t j = 0; j < nj; j++) { /* jobs follow running order */
        kipp_draft_job *job = &s->jobs[j];
        for (uint32_t i = 0; i < s->n_running; i++) {
            kipp_req *r = s->running[i];
            if (r->slot != (int)job->slot || r->state != KIPP_REQ_DECODE) continue;
            r->job = *job;
            if (r->job.n_draft < s->k_min) r->job.n_draft = 0;
            if (r->job.n_draft == 0) { /* declined */
                kipp_spec_seq_declined(&r->spec);
                kipp_spec_seq_declined(&s->global);
            }
            break;
        }
    }
    s->e_draft_s += dt;
}

/* Appends the final token r->out[r->n_gen] (filled in) to a request; 0 when it finished
 * the request. */
static int emit_filled(kipp_sched *s, kipp_req *r) {
    const int32_t tok = r->out[r->n_gen].id;
    r->all[r->n_all++] = tok;
    r->n_gen++;
    /* under a grammar an end-of-generation token is allowed only once the sentence is whole
     * (never in the reasoning): it ends the reply even with ignore_eos, or the end tokens
     * would repeat into the text after the sentence */
    if ((!r->p.ignore_eos || r->mt) && kipp_token_is_eog(s->m, tok)) r->pending = KIPP_FINISH_STOP;
    else if (r->n_gen >= r->p.max_tokens || r->n_all >= s->n_ctx) r->pending = KIPP_FINISH_LENGTH;
    return r->pending == KIPP_FINISH_NONE;
}

/* Appends one final token to a request; 0 when it finished the request. */
static int emit(kipp_sched *s, kipp_req *r, int32_t tok, const float *raw) {
    kipp_gen_token *g = &r->out[r->n_gen];
    g->id = tok;
    g->logprob = 0;
    g->n_top = 0;
    if (r->p.logprobs) fill_logprobs(raw, s->n_vocab, g, r->p.top_logprobs);
    fill_scores(raw, s->n_vocab, g, &r->p);
    return emit_filled(s, r);
}

/* 1 when request r (whose first n tokens are in the KV cache) ends here instead of being
 * sampled: it was cancelled (it finishes as the engine loop would finish it, this step
 * instead of after the mask), or its matcher failed (the grammar's time limit: an error). */
static int grammar_stopped(kipp_req *r, uint32_t n) {
    const int c = req_cancelled(r);
    const char *e = kipp_matcher_error(r->mt);
    if (!c && !e) return 0;
    r->n_fed = n;
    if (c) r->pending = c == 2 ? KIPP_FINISH_STOP : KIPP_FINISH_CANCELLED;
    else snprintf(r->err, sizeof r->err, "%s", e), r->pending = KIPP_FINISH_ERROR;
    return 1;
}

/* The grammar's part of one token of request r (which has no drafts): the think gate's and
 * the matcher's mask over row, the draw, the token fed back (r->wk_tok >= 0: drawn already,
 * only feeding it back is left). r->wk_gen gets the token, with log-probabilities from raw
 * when asked. On the engine thread under the matcher's yield deadline (TOK_YIELD: it gave
 * up with nothing changed, to be redone from where wk_tok says) or on the mask thread
 * without one. TOK_STOP: the matcher failed (time limit, interrupt); TOK_NONE: nothing is
 * allowed. */
static int grammar_token(kipp_sched *s, kipp_req *r, float *row, const float *raw) {
    if (r->wk_tok < 0) {
        kipp_think_apply(&r->think, r->mt, row, s->n_vocab);
        if (kipp_matcher_yielded(r->mt)) return TOK_YIELD;
        if (kipp_matcher_error(r->mt)) return TOK_STOP;
        kipp_gen_token *g = &r->wk_gen;
        g->id = kipp_sampler_sample(r->smp, row);
        kipp_sampler_accept(r->smp, g->id);
        g->logprob = 0;
        g->n_top = 0;
        if (r->p.logprobs) fill_logprobs(raw, s->n_vocab, g, r->p.top_logprobs);
        fill_scores(raw, s->n_vocab, g, &r->p);
        r->wk_tok = g->id;
    }
    if (!kipp_think_accept(&r->think, r->mt, r->wk_tok))
        return kipp_matcher_yielded(r->mt) ? TOK_YIELD : kipp_matcher_error(r->mt) ? TOK_STOP : TOK_NONE;
    r->wk_tok = -1;
    return TOK_OK;
}

/* Ends a constrained token on the engine thread (N: the tokens in the KV cache): the
 * request stops (cancelled, the matcher failed), fails (nothing allowed) or gets it. */
static void grammar_done(kipp_sched *s, kipp_req *r, int res, uint32_t N) {
    if (grammar_stopped(r, N)) return;
    if (res != TOK_OK) {
        snprintf(r->err, sizeof r->err, "the grammar allows no token after %u generated tokens "
                 "(is the grammar satisfiable?)", r->n_gen);
        r->pending = KIPP_FINISH_ERROR;
        return;
    }
    r->n_fed = N;
    r->out[r->n_gen] = r->wk_gen;
    emit_filled(s, r);
}

/* Hands request r's token to the mask thread: the logits row (untouched by a yielded try)
 * unless a token is drawn already; r sits out of the batch until it is back. */
static void hand_off(kipp_sched *s, kipp_req *r, const float *row, uint32_t N) {
    const size_t bytes = (size_t)s->n_vocab * sizeof *row;
    if ((!r->wk_row && !(r->wk_row = malloc(bytes))) ||
        (r->p.logprobs && !r->wk_raw && !(r->wk_raw = malloc(bytes)))) {
        snprintf(r->err, sizeof r->err, "out of memory for a grammar mask");
        r->pending = KIPP_FINISH_ERROR;
        return;
    }
    if (r->wk_tok < 0) {
        memcpy(r->wk_row, row, bytes);
        if (r->p.logprobs) memcpy(r->wk_raw, s->raw, bytes);
    }
    r->n_fed = N;
    r->wait_mask = 1;
    pthread_mutex_lock(&s->mu);
    r->mk = MK_QUEUED;
    s->st.grammar_masks_deferred++;
    if (s->mq_tail) s->mq_tail->mk_next = r;
    else s->mq_head = r;
    s->mq_tail = r;
    pthread_cond_signal(&s->mwork);
    pthread_mutex_unlock(&s->mu);
}

/* The mask thread: grammar tokens the engine handed off, one at a time, at the lowest
 * priority (so on a small machine the engine's own threads keep their speed). A request it
 * holds is the engine's again once it is MK_DONE. */
static void *mask_main(void *arg) {
    kipp_sched *s = arg;
#ifdef __linux__
    (void)setpriority(PRIO_PROCESS, 0, 19); /* Linux: nice is per thread; this one only */
#endif
    pthread_mutex_lock(&s->mu);
    for (;;) {
        kipp_req *r = s->mq_head;
        if (!r) {
            if (s->mstop) break;
            pthread_cond_wait(&s->mwork, &s->mu);
            continue;
        }
        s->mq_head = r->mk_next;
        if (!s->mq_head) s->mq_tail = NULL;
        r->mk_next = NULL;
        r->mk = MK_RUNNING;
        const int cancelled = r->cancel;
        pthread_mutex_unlock(&s->mu);
        const double t0 = now_s();
        /* the matcher's time limit bounds this, its interrupt (the cancel flag) ends it */
        const int res = cancelled ? TOK_STOP : grammar_token(s, r, r->wk_row, r->wk_raw);
        r->mask_slow = now_s() - t0 > MASK_INLINE_S;
        pthread_mutex_lock(&s->mu);
        r->wk_res = res;
        r->mk = MK_DONE;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* A decoding request's rows: verify its drafts (none: plain sampling), roll rejected drafts
 * out of the KV cache, emit the final tokens. */
static void finish_decode(kipp_sched *s, kipp_req *r, float *rows) {
    const uint32_t k = r->job.n_draft, N = r->n_all; /* all[N-1] was pending */
    if (r->par) { /* drawn in the parallel row phase: out[n_gen] is filled */
        r->par = 0;
        if (!r->par_ok) {
            snprintf(r->err, sizeof r->err, "the grammar allows no token after %u generated tokens "
                     "(is the grammar satisfiable?)", r->n_gen);
            r->pending = KIPP_FINISH_ERROR;
            return;
        }
        r->n_fed = N;
        emit_filled(s, r);
        return;
    }
    if (r->p.logprobs) memcpy(s->raw, rows, (size_t)(k + 1) * s->n_vocab * sizeof *rows);
    int32_t out[KIPP_SPEC_MAX_K + 1];
    uint32_t m = 0, n_out;
    if (k == 0 && r->mt) { /* never drafted for (draft) */
        /* a mask is bounded in time and stops when the request is cancelled (the matcher
         * asks req_cancelled): a client gone mid-mask costs no more than what was done */
        if (grammar_stopped(r, N)) return;
        r->wk_tok = -1;
        int res = TOK_YIELD; /* the last token's was slow, or the step's time is spent */
        if (!r->mask_slow && s->inline_left > 0) {
            const double t0 = now_s();
            kipp_matcher_set_yield(r->mt, t0 + (s->inline_left < MASK_INLINE_S ? s->inline_left
                                                                                : MASK_INLINE_S));
            res = grammar_token(s, r, rows, s->raw);
            kipp_matcher_set_yield(r->mt, 0);
            s->inline_left -= now_s() - t0;
        }
        if (res == TOK_YIELD) hand_off(s, r, rows, N);
        else grammar_done(s, r, res, N);
        return;
    }
    /* drafts to verify (an undrafted, unconstrained row was drawn in the parallel phase) */
    n_out = kipp_spec_verify(r->smp, rows, s->n_vocab, &r->job, out, &m);
    kipp_spec_seq_update(&r->spec, k, m);
    kipp_spec_seq_update(&s->global, k, m);
    if (m < k && seq_truncate(s, r->seq, N + m, r->err, sizeof r->err) != KIPP_OK) {
        r->pending = KIPP_FINISH_ERROR;
        return;
    }
    s->e_steps++;
    s->e_drafted += k;
    s->e_accepted += m;
    r->n_fed = N + m;
    for (uint32_t i = 0; i < n_out; i++)
        if (!emit(s, r, out[i], s->raw + (size_t)i * s->n_vocab)) break;
}

/* One row of the parallel phase (host thread ith): request running[par[j]], undrafted and
 * unconstrained, gets its think gate, its draw and the drawn token's log-probabilities into
 * out[n_gen]; all of it touches only the request, its row and thread ith's scratch.
 * finish_decode appends the token on the engine thread. */
static void sample_row(void *arg, uint32_t j, int ith) {
    kipp_sched *s = arg;
    const uint32_t i = s->par[j];
    kipp_req *r = s->running[i];
    const double t0 = now_s();
    float *row = s->logits + (size_t)s->b_row[i] * s->n_vocab, *raw = s->hraw[ith];
    if (r->p.logprobs) memcpy(raw, row, (size_t)s->n_vocab * sizeof *row);
    kipp_sampler_share_scratch(r->smp, s->hsc[ith]);
    kipp_think_apply(&r->think, NULL, row, s->n_vocab);
    kipp_gen_token *g = &r->out[r->n_gen];
    g->id = kipp_sampler_sample(r->smp, row);
    kipp_sampler_accept(r->smp, g->id);
    g->logprob = 0;
    g->n_top = 0;
    r->par_ok = kipp_think_accept(&r->think, NULL, g->id);
    if (r->par_ok && r->p.logprobs) fill_logprobs(raw, s->n_vocab, g, r->p.top_logprobs);
    if (r->par_ok) fill_scores(raw, s->n_vocab, g, &r->p);
    r->par = 1;
    r->row_last = now_s() - t0;
    r->row_s = r->row_s > 0 ? 0.5 * r->row_s + 0.5 * r->row_last : r->row_last;
}

/* After a forward pass of fwd_s seconds: the step's inline grammar budget (while rows
 * without a grammar share the step, MASK_SHARE of the pass, at least MASK_MIN_S; else
 * MASK_STEP_S), then the rows sampled in parallel: requests in the batch that finish a
 * token with no drafts to verify and no grammar (a grammar's mask may hand off to the mask
 * thread). */
static void sample_rows(kipp_sched *s, double fwd_s) {
    uint32_t n = 0;
    int shared = 0;
    for (uint32_t i = 0; i < s->n_running; i++) {
        const kipp_req *r = s->running[i];
        if (r->wait_mask || r->mt || s->b_chunk[i] == 0) continue;
        shared = 1; /* an unconstrained row waits for the step's grammar work too */
        if (r->state == KIPP_REQ_DECODE ? r->job.n_draft == 0
                                        : r->n_fed + s->b_chunk[i] >= r->n_all && r->p.max_tokens > 0)
            s->par[n++] = i;
    }
    const double share = MASK_SHARE * fwd_s;
    s->inline_left = !shared || share > MASK_STEP_S ? MASK_STEP_S : share < MASK_MIN_S ? MASK_MIN_S : share;
    const double t0 = now_s();
    kipp_ctx_host_for(s->ctx, n, sample_row, s);
    s->par_s = now_s() - t0;
    for (uint32_t j = 0; j < n; j++) { /* the one-sequence requests' draws: a light row's price */
        const kipp_req *r = s->running[s->par[j]];
        if (!r->p.group) s->light_row_s = s->light_row_s > 0 ? 0.8 * s->light_row_s + 0.2 * r->row_last : r->row_last;
    }
}

/* The prompt log-probabilities of running[i]'s prefill chunk, from its rows at b_plp[i]
 * (before n_fed moves past the chunk). Tokens are scored in order only: a position past
 * the next one to score (a reused prefix that skipped some) records nothing from there on,
 * and the request's answer fails visibly (kipp_req_n_prompt_logprobs < n_prompt). */
static void record_prompt_logprobs(kipp_sched *s, kipp_req *r, uint32_t i, uint32_t chunk) {
    const float *row = s->logits + (size_t)s->b_plp[i] * s->n_vocab;
    for (uint32_t k = 0; k < chunk; k++) {
        const uint32_t pos = r->n_fed + k;
        if (!plp_wanted(r, pos)) continue;
        if (pos + 1 == r->plp_next) {
            fill_logprobs(row, s->n_vocab, &r->plp[pos + 1], r->p.top_logprobs);
            r->plp_next++;
        }
        row += s->n_vocab;
    }
}

static void step(kipp_sched *s, kipp_req **dead, uint32_t *n_dead) {
    char err[KIPP_ERR_LEN];
    kipp_status st;
    uint32_t n, n_want;
    const double t_step = now_s();
    s->par_s = 0;
    const uint32_t n_dec = fair_rows(s);
    draft(s);
    double t0;
    for (;;) {
        memset(s->b_chunk, 0, s->n_running * sizeof *s->b_chunk);
        n = build_batch(s, &n_want);
        if (n == 0) { /* every request waits for the mask thread (one came back: publish) */
            st = KIPP_OK;
            t0 = now_s();
            break;
        }
        const kipp_batch b = {.n = n, .tokens = s->b_tok, .seq_ids = s->b_seq, .want_logits = s->b_want};
        t0 = now_s();
        st = kipp_decode_batch(s->ctx, &b, s->logits, err, sizeof err);
        if (st != KIPP_ERR_KV_FULL) break;
        int had_drafts = 0; /* memory is short: drop this step's drafts first */
        for (uint32_t i = 0; i < s->n_running; i++) {
            had_drafts |= s->running[i]->job.n_draft > 0;
            s->running[i]->job.n_draft = 0;
        }
        if (had_drafts) continue;
        if (s->pc && kipp_pc_evict_one(s->pc)) continue;
        pthread_mutex_lock(&s->mu);
        const int unparked = unpark_one_locked(s); /* before any running sequence */
        pthread_mutex_unlock(&s->mu);
        if (unparked) continue;
        if (preempt_newest(s)) continue;
        break; /* a lone sequence the pool cannot hold: it ends with "length" below */
    }
    const double t = now_s();
    if (st == KIPP_OK) step_timing(s, n, t - t0);
    if (st == KIPP_OK && s->drafter && n > 0) {
        /* the model prices rows that need logits (decode and verification: the lm_head is
         * most of a small model's row); a step with prompt rows, which skip the lm_head, is
         * learned from only while nothing else has been seen */
        if (n_want == n || s->timing.n_target == 0) kipp_spec_timing_target(&s->timing, n, t - t0);
    }
    if (st == KIPP_OK) sample_rows(s, t - t0);
    for (uint32_t i = 0; i < s->n_running; i++) {
        kipp_req *r = s->running[i];
        if (r->wait_mask) continue; /* not in this batch */
        if (st == KIPP_ERR_KV_FULL) { r->pending = KIPP_FINISH_LENGTH; continue; }
        if (st != KIPP_OK) {
            snprintf(r->err, sizeof r->err, "%s", err);
            r->pending = KIPP_FINISH_ERROR;
            continue;
        }
        const uint32_t chunk = s->b_chunk[i];
        if (chunk == 0) continue;
        float *rows = s->logits + (size_t)s->b_row[i] * s->n_vocab;
        if (r->state == KIPP_REQ_DECODE) {
            finish_decode(s, r, rows);
            continue;
        }
        if (r->plp) record_prompt_logprobs(s, r, i, chunk);
        if (r->n_fed + chunk < r->n_all) { r->n_fed += chunk; continue; } /* prefill goes on */
        if (r->p.max_tokens == 0) { /* scoring only: nothing to generate */
            r->n_fed = r->n_all;
            r->pending = KIPP_FINISH_LENGTH;
            continue;
        }
        r->n_fed = r->n_all - 1; /* the prompt's last token is in; its logits give token 1 */
        r->job.n_draft = 0;
        finish_decode(s, r, rows);
        if (r->pending == KIPP_FINISH_NONE) r->state = KIPP_REQ_DECODE;
    }
    /* tokens the mask thread has finished: the engine's again */
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < s->n_running; i++) {
        kipp_req *r = s->running[i];
        if (r->wait_mask == 1 && r->mk == MK_DONE) r->mk = MK_NONE, r->wait_mask = 2;
    }
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; i < s->n_running; i++) {
        kipp_req *r = s->running[i];
        if (r->wait_mask != 2) continue;
        r->wait_mask = 0;
        grammar_done(s, r, r->wk_res, r->n_fed);
    }
    /* blocks this step filled: announced now, while their requests run (kv_track.h) */
    for (uint32_t i = 0; s->kvt && i < s->n_running; i++)
        if (s->running[i]->has_seq) kipp_kvt_fill(s->kvt, s->running[i]->seq, s->running[i]->all, s->running[i]->n_fed);
    /* publish */
    pthread_mutex_lock(&s->mu);
    s->st.steps++;
    s->st.batched_tokens += n;
    s->st.spec_steps = s->e_steps;
    s->st.spec_drafted = s->e_drafted;
    s->st.spec_accepted = s->e_accepted;
    s->st.spec_draft_seconds = s->e_draft_s;
    s->st.fair_deferred = s->e_fair_deferred;
    int published = 0;
    for (uint32_t i = 0; i < s->n_running;) {
        kipp_req *r = s->running[i];
        r->drafted_pub = r->spec.drafted;
        r->accepted_pub = r->spec.accepted;
        if (r->n_gen > r->n_out) {
            s->st.generated_tokens += r->n_gen - r->n_out;
            if (r->n_out == 0) {
                kipp_hist_add(&s->st.ttft, t - r->t_submit);
                r->t_first = t;
                r->step_first = s->st.steps;
            }
            else kipp_hist_add(&s->st.itl, t - r->t_last);
            r->t_last = t;
            r->n_out = r->n_gen;
            pthread_cond_broadcast(&r->cv);
            published = 1;
        }
        if (r->pending == KIPP_FINISH_NONE) { i++; continue; }
        pthread_mutex_unlock(&s->mu);
        release_seq(s, r, r->pending != KIPP_FINISH_ERROR);
        r->state = KIPP_REQ_DONE;
        pthread_mutex_lock(&s->mu);
        kipp_req *d = finish_locked(s, r, r->pending);
        if (d) dead[(*n_dead)++] = d;
        running_remove(s, i);
    }
    if (published) pthread_cond_broadcast(&s->any);
    pthread_mutex_unlock(&s->mu);
    /* the model is of the step without its parallel draws, which each row brings at its own price */
    if (st == KIPP_OK && s->b_prefill == 0) {
        const double dt = now_s() - t_step - (s->p.fair_slope <= 0 ? s->par_s : 0);
        kipp_step_fit_add(&s->fit, n_dec, s->fit_kv, dt);
        if (s->p.fair_slope <= 0) kipp_fair_rows_add(&s->rows, n_dec, dt - s->fit_c * s->fit_kv);
    }
    if (s->trace) {
        uint32_t waiting = 0, held = 0;
        for (uint32_t i = 0; i < s->n_running; i++) waiting += s->running[i]->wait_mask != 0, held += s->running[i]->hold != 0;
        const double t1 = kipp_fair_rows_at(&s->rows, 1, s->fit_b), t2 = kipp_fair_rows_at(&s->rows, 2, s->fit_b);
        fprintf(s->trace, "%.6f %.6f %.6f %.6f %u %u %u %u %u %u %.6f %.6f %.3e %.6f %.6f\n", t_step - s->t_trace0,
                t0 - t_step, t - t0, now_s() - t, n, n_dec, s->b_prefill, s->n_running, waiting, held, s->fit_a, s->fit_b,
                s->fit_c, t1 > 0 ? t1 : 0, t2 > 0 ? t2 : 0);
        if (s->trace_rows) {
            for (uint32_t i = 0; i < s->n_running; i++) {
                const kipp_req *r = s->running[i];
                fprintf(s->trace, "  R %u g%llu.%u st%d ch%u fed%u all%u gen%u hold%d\n", i, (unsigned long long)r->p.group,
                        r->p.sibling, (int)r->state, s->b_chunk[i], r->n_fed, r->n_all, r->n_gen, r->hold);
            }
            fprintf(s->trace, "  Q %u\n", s->n_queue);
        }
    }
}

/* Snapshot of the pool for the statistics (engine thread, lock held). */
static void pool_stats_locked(kipp_sched *s) {
    const kipp_kv_pool *pool = pool_of(s);
    s->st.kv_blocks_total = pool->n_blocks;
    s->st.kv_blocks_used = pool->n_blocks - pool->n_free;
    s->st.queue_depth = s->n_queue;
    s->st.running = s->n_running;
    s->st.paused = 0;
    for (uint32_t i = 0; i < s->n_running; i++) s->st.paused += paused_locked(s->running[i]);
    for (const kipp_req *q = s->q_head; q; q = q->next) s->st.paused += paused_locked(q);
    if (s->pc) {
        kipp_pc_stats ps;
        kipp_pc_get_stats(s->pc, &ps);
        s->st.kv_blocks_cached = ps.n_blocks_cached_only;
        s->st.pc_lookups = ps.lookups;
        s->st.pc_hits = ps.hits;
        s->st.pc_lookup_tokens = ps.lookup_tokens;
        s->st.pc_hit_tokens = ps.hit_tokens;
    }
}

static void *engine_main(void *arg) {
    kipp_sched *s = arg;
    kipp_req **dead = malloc((4 * (size_t)s->p.max_running + s->p.max_queue + 1) * sizeof *dead);
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        uint32_t n_dead = 0;
        s->st.engine_beat_s = now_s(); /* the heartbeat /livez reads */
        s->st.engine_waiting = 0;
        /* drop cancelled running requests */
        for (uint32_t i = 0; i < s->n_running;) {
            kipp_req *r = s->running[i];
            /* one with the mask thread is interrupted there and ends when it is back */
            if (!r->cancel || r->wait_mask) { i++; continue; }
            pthread_mutex_unlock(&s->mu);
            release_seq(s, r, 1);
            pthread_mutex_lock(&s->mu);
            kipp_req *d = finish_locked(s, r, r->cancel == 2 ? KIPP_FINISH_STOP : KIPP_FINISH_CANCELLED);
            if (d) dead[n_dead++] = d;
            running_remove(s, i);
        }
        admit_locked(s, dead, &n_dead);
        pool_stats_locked(s);
        if (n_dead) {
            pthread_mutex_unlock(&s->mu);
            for (uint32_t i = 0; i < n_dead; i++) req_free(dead[i]);
            pthread_mutex_lock(&s->mu);
            continue;
        }
        int runnable = 0; /* in the batch, or back from the mask thread */
        for (uint32_t i = 0; i < s->n_running && !runnable; i++)
            runnable = !s->running[i]->wait_mask || s->running[i]->mk == MK_DONE;
        if (!runnable) {
            kipp_kvt_flush(s->kvt); /* the removals of cancelled and evicted ones */
            s->st.engine_waiting = 1;
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        /* sequences their window pauses sit this step out (their consumer is behind) */
        uint32_t n_run = 0;
        for (uint32_t i = 0; i < s->n_running; i++) {
            kipp_req *r = s->running[i];
            r->hold = r->state == KIPP_REQ_DECODE && paused_locked(r);
            n_run += !r->hold;
        }
        if (n_run == 0) { /* every one is paused: wait for a consumer to read (or a cancel) */
            kipp_kvt_flush(s->kvt);
            s->st.engine_waiting = 1;
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        const double t_now = now_s();
        s->arrivals_busy = s->t_arrive[0] > 0 && t_now - s->t_arrive[0] < s->p.arrival_window_s;
        s->light_expected = s->t_light > 0 && t_now - s->t_light < s->p.arrival_window_s;
        pthread_mutex_unlock(&s->mu);
        step(s, dead, &n_dead);
        kipp_kvt_flush(s->kvt); /* one batch of events per step */
        for (uint32_t i = 0; i < n_dead; i++) req_free(dead[i]);
        pthread_mutex_lock(&s->mu);
    }
    /* stopping: every request still here ends as cancelled, those with the mask thread once
     * it has handed them back (cancelled: its matcher's interrupt stops the mask) */
    for (;;) {
        int busy = 0;
        for (uint32_t i = 0; i < s->n_running; i++) {
            kipp_req *r = s->running[i];
            if (!r->wait_mask || r->mk == MK_DONE) continue;
            busy = 1;
            if (!r->cancel) r->cancel = 1;
        }
        if (!busy) break;
        pthread_cond_wait(&s->work, &s->mu);
    }
    uint32_t n_dead = 0;
    while (s->n_running) {
        kipp_req *r = s->running[--s->n_running];
        release_seq(s, r, 0);
        kipp_req *d = finish_locked(s, r, KIPP_FINISH_CANCELLED);
        if (d) dead[n_dead++] = d;
    }
    while (s->q_head) {
        kipp_req *r = s->q_head;
        s->q_head = r->next;
        release_seq(s, r, 0); /* a parked one's sequence */
        kipp_req *d = finish_locked(s, r, KIPP_FINISH_CANCELLED);
        if (d) dead[n_dead++] = d;
    }
    s->q_tail = NULL;
    s->n_queue = 0;
    pool_stats_locked(s);
    s->st.engine_ended = 1;
    pthread_mutex_unlock(&s->mu);
    for (uint32_t i = 0; i < n_dead; i++) req_free(dead[i]);
    free(dead);
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------------------- */

kipp_status kipp_sched_start(kipp_model *m, const kipp_sched_params *pp, kipp_sched **out,
                             char *err, size_t err_len) {
    *out = NULL;
    kipp_sched_params p = *pp;
    if (!p.max_running) p.max_running = 8;
    if (!p.max_queue) p.max_queue = 64;
    if (!p.batch_tokens) p.batch_tokens = 256;
    if (p.fair_share == 0) p.fair_share = FAIR_SHARE_DEFAULT;
    if (!(p.prefill_share > 0)) p.prefill_share = PREFILL_SHARE;
    if (p.prefill_step_s == 0) p.prefill_step_s = KIPP_SCHED_PREFILL_STEP_S;
    if (p.prefill_busy_s == 0) p.prefill_busy_s = KIPP_SCHED_PREFILL_BUSY_S;
    if (!(p.arrival_window_s > 0)) p.arrival_window_s = KIPP_SCHED_ARRIVAL_WINDOW_S;
    if (!p.block_size) p.block_size = 16;
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    uint32_t n_ctx = p.n_ctx ? p.n_ctx : (info.n_ctx_train < 4096 ? info.n_ctx_train : 4096);
    kipp_ctx_params cp = {.backend = p.backend, .n_ctx = n_ctx, .n_threads = p.n_threads,
                          .kv_block_size = p.block_size, .kv_type = p.kv_type,
                          .kv_type_v = p.kv_type_v, .isa = p.isa,
                          .device = p.device};
    uint64_t per_token;
    kipp_kv_type kv_type;
    kipp_status st = kipp_ctx_kv_bytes_per_token(m, &cp, &per_token, &kv_type, err, err_len);
    if (st != KIPP_OK) return st;
    if (!p.n_kv_tokens) { /* a context per running sequence, within a memory budget */
        uint64_t n = (uint64_t)n_ctx * p.max_running;
        const uint64_t fit = (p.kv_memory ? p.kv_memory : KIPP_SCHED_DEFAULT_KV_BYTES) / per_token;
        if (n > fit) n = fit;
        char types[40];
        if (p.kv_type_v && p.kv_type_v != kv_type)
            snprintf(types, sizeof types, "%s K and %s V", kipp_kv_type_name(kv_type),
                     kipp_kv_type_name(p.kv_type_v));
        else snprintf(types, sizeof types, "%s K/V", kipp_kv_type_name(kv_type));
        if (p.kv_memory && n < (uint64_t)n_ctx + p.block_size)
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "a KV memory limit of %llu bytes holds %llu tokens of %s (%llu "
                             "bytes each); one context of %u tokens plus a block needs %llu bytes",
                             (unsigned long long)p.kv_memory, (unsigned long long)fit,
                             types,
                             (unsigned long long)per_token, n_ctx,
                             (unsigned long long)(per_token * (n_ctx + p.block_size)));
        if (n < (uint64_t)n_ctx + p.block_size) n = (uint64_t)n_ctx + p.block_size;
        if (p.kv_memory) n -= n % p.block_size; /* whole blocks, within the limit */
        p.n_kv_tokens = (uint32_t)n;
    }
    if (p.n_kv_tokens < n_ctx + p.block_size)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "the KV pool (%u tokens) must hold at least one full context (%u) "
                         "plus one block (%u)",
                         p.n_kv_tokens, n_ctx, p.block_size);
    kipp_sched *s = calloc(1, sizeof *s);
    if (!s) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "scheduler: out of memory");
    s->m = m;
    s->p = p;
    const char *trace_path = getenv("KIPP_STEP_TRACE");
    if (trace_path && *trace_path) {
        s->trace = fopen(trace_path, "w");
        const char *rows = getenv("KIPP_STEP_TRACE_ROWS");
        s->trace_rows = rows && strcmp(rows, "1") == 0;
        if (s->trace) setvbuf(s->trace, NULL, _IOLBF, 0);
        else fprintf(stderr, "kipp: KIPP_STEP_TRACE: cannot write '%s': %s (no step trace)\n", trace_path,
                     strerror(errno));
    }
    s->t_trace0 = now_s();
    s->n_vocab = info.n_vocab;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_condattr_t ca; /* kipp_req_wait_any's deadline is on CLOCK_MONOTONIC */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->any, &ca);
    pthread_condattr_destroy(&ca);
    cp.n_kv_blocks = (p.n_kv_tokens + p.block_size - 1) / p.block_size;
    st = kipp_ctx_init(m, &cp, &s->ctx, err, err_len);
    if (st != KIPP_OK) goto fail;
    s->n_ctx = kipp_ctx_n_ctx(s->ctx);
    if (p.prefix_cache_entries &&
        (st = kipp_pc_init(s->ctx, p.prefix_cache_entries, &s->pc, err, err_len)) != KIPP_OK)
        goto fail;
    if (p.kv_events) {
        if (!(s->kvt = kipp_kvt_new(kipp_ctx_kv_pool(s->ctx)->block_size, p.kv_events))) {
            st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "scheduler: out of memory for KV-cache events");
            goto fail;
        }
        if (s->pc) kipp_pc_set_tracker(s->pc, s->kvt);
    }
    uint32_t rows_per = 1;
    if (p.spec) {
        kipp_spec_params sp = *p.spec;
        sp.n_ctx = s->n_ctx;
        sp.n_slots = p.max_running;
        if ((st = kipp_drafter_init(m, &sp, &s->drafter, err, err_len)) != KIPP_OK) goto fail;
        s->k_max = sp.k_max;
        s->k_min = sp.k_min;
        s->fixed_k = sp.fixed_k;
        rows_per = 1 + sp.k_max;
        kipp_spec_timing_init(&s->timing);
        kipp_spec_seq_init(&s->global);
        s->slot_used = calloc(p.max_running, 1);
        s->jobs = calloc(p.max_running, sizeof *s->jobs);
        s->sq = calloc(p.max_running, sizeof *s->sq);
        s->cap = calloc(p.max_running, sizeof *s->cap);
        s->kk = calloc(p.max_running, sizeof *s->kk);
        if (!s->slot_used || !s->jobs || !s->sq || !s->cap || !s->kk) {
            st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "scheduler: out of memory");
            goto fail;
        }
    }
    const size_t max_batch = (size_t)p.batch_tokens + (size_t)p.max_running * rows_per;
    s->running = calloc(p.max_running, sizeof *s->running);
    s->b_chunk = calloc(p.max_running, sizeof *s->b_chunk);
    s->b_row = calloc(p.max_running, sizeof *s->b_row);
    s->b_plp = calloc(p.max_running, sizeof *s->b_plp);
    s->b_tok = malloc(max_batch * sizeof *s->b_tok);
    s->b_seq = malloc(max_batch * sizeof *s->b_seq);
    s->b_want = malloc(max_batch);
    s->n_logit_rows = p.max_running * rows_per;
    s->logits = malloc((size_t)s->n_logit_rows * s->n_vocab * sizeof *s->logits);
    s->raw = malloc((size_t)rows_per * s->n_vocab * sizeof *s->raw);
    if (kipp_sampler_scratch_init(s->n_vocab, &s->scratch, err, err_len) != KIPP_OK) {
        st = KIPP_ERR_NOMEM;
        goto fail;
    }
    /* the parallel row phase's per-thread scratch (malloc'd: resident once a thread uses it) */
    s->n_host = kipp_ctx_host_threads(s->ctx);
    if (s->n_host > 256) s->n_host = 256;
    s->hsc = calloc((size_t)s->n_host, sizeof *s->hsc);
    s->hraw = calloc((size_t)s->n_host, sizeof *s->hraw);
    s->par = calloc(p.max_running, sizeof *s->par);
    s->ord = calloc(p.max_running, sizeof *s->ord);
    s->grp = calloc(p.max_running, sizeof *s->grp);
    s->progress = calloc(p.max_running, sizeof *s->progress);
    s->kind = calloc(p.max_running, 1);
    s->keep = calloc(p.max_running, 1);
    s->bulk = calloc(p.max_running, 1);
    s->inc = calloc(p.max_running, sizeof *s->inc);
    s->rows.n_max = p.max_running;
    s->rows.g = calloc(p.max_running + 1, sizeof *s->rows.g);
    s->rows.seen = calloc(p.max_running + 1, 1);
    s->cost = calloc(p.max_running, sizeof *s->cost);
    if (!s->hsc || !s->hraw || !s->par || !s->ord || !s->grp || !s->progress || !s->kind || !s->keep || !s->bulk || !s->cost || !s->inc ||
        !s->rows.g || !s->rows.seen) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "scheduler: out of memory");
        goto fail;
    }
    s->hsc[0] = s->scratch;
    s->hraw[0] = s->raw;
    for (int t = 1; t < s->n_host; t++) {
        if (kipp_sampler_scratch_init(s->n_vocab, &s->hsc[t], err, err_len) != KIPP_OK) {
            st = KIPP_ERR_NOMEM;
            goto fail;
        }
        if (!(s->hraw[t] = malloc((size_t)s->n_vocab * sizeof *s->hraw[t]))) {
            st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "scheduler: out of memory");
            goto fail;
        }
    }
    if (!s->running || !s->b_chunk || !s->b_row || !s->b_plp || !s->b_tok || !s->b_seq || !s->b_want || !s->logits || !s->raw) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "scheduler: out of memory");
        goto fail;
    }
    pool_stats_locked(s);
    pthread_cond_init(&s->mwork, NULL);
    if (pthread_create(&s->mthread, NULL, mask_main, s) != 0) {
        pthread_cond_destroy(&s->mwork);
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "scheduler: cannot start the mask thread");
        goto fail;
    }
    s->mthread_started = 1;
    if (pthread_create(&s->thread, NULL, engine_main, s) != 0) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "scheduler: cannot start the engine thread");
        goto fail;
    }
    s->thread_started = 1;
    *out = s;
    return KIPP_OK;
fail:
    kipp_sched_free(s);
    return st;
}

void kipp_sched_stop(kipp_sched *s) {
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_signal(&s->work);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        s->thread_started = 0;
    }
    if (s->mthread_started) { /* after the engine: it has taken every request back */
        pthread_mutex_lock(&s->mu);
        s->mstop = 1;
        pthread_cond_signal(&s->mwork);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->mthread, NULL);
        pthread_cond_destroy(&s->mwork);
        s->mthread_started = 0;
    }
}

void kipp_sched_free(kipp_sched *s) {
    if (!s) return;
    kipp_sched_stop(s);
    kipp_pc_free(s->pc);
    kipp_kvt_free(s->kvt); /* after the cache, which tells it of the sequences it frees */
    kipp_drafter_free(s->drafter);
    free(s->slot_used);
    free(s->jobs);
    free(s->sq);
    free(s->cap);
    free(s->kk);
    kipp_ctx_free(s->ctx);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->any);
    pthread_mutex_destroy(&s->mu);
    free(s->running);
    free(s->b_chunk);
    free(s->b_row);
    free(s->b_plp);
    free(s->b_tok);
    free(s->b_seq);
    free(s->b_want);
    free(s->logits);
    free(s->raw);
    kipp_sampler_scratch_free(s->scratch);
    for (int t = 1; t < s->n_host && s->hsc && s->hraw; t++) {
        kipp_sampler_scratch_free(s->hsc[t]);
        free(s->hraw[t]);
    }
    free(s->hsc);
    free(s->hraw);
    free(s->par);
    free(s->ord);
    free(s->grp);
    free(s->progress);
    free(s->cost);
    free(s->kind);
    free(s->bulk);
    free(s->inc);
    free(s->rows.g);
    free(s->rows.seen);
    free(s->keep);
    if (s->trace) fclose(s->trace);
    free(s);
}

uint32_t kipp_sched_n_ctx(const kipp_sched *s) { return s->n_ctx; }
uint32_t kipp_sched_max_running(const kipp_sched *s) { return s->p.max_running; }

void kipp_sched_ctx_info(const kipp_sched *s, kipp_ctx_info *out) { kipp_ctx_get_info(s->ctx, out); }

void kipp_sched_get_stats(kipp_sched *s, kipp_sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}
