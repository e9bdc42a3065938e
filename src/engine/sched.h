/* sched.h — the scheduler: continuous batching of many requests over one context. One
 * engine thread owns the context; each step it decodes one token of every running sequence
 * plus a budget of prompt tokens of sequences still prefilling, as one batch. Requests join
 * at token boundaries, share the paged KV pool and the prefix cache, wait in a bounded queue
 * when no slot or no memory is free, are preempted (and later recomputed) when the pool runs
 * dry, and are cancelled by their consumer at any time. Admission is fair across API
 * requests (a group of n siblings gets its share of the slots when others wait), and a
 * request with a window pauses while its consumer lags. Thread-safe: submit, wait, cancel
 * and stats may be called from any thread. Does not detokenize, apply stop strings or speak
 * HTTP (src/server does). Design: docs/server.md ("Scheduling"). */
#ifndef KIPP_ENGINE_SCHED_H
#define KIPP_ENGINE_SCHED_H

#include "engine/grammar.h"
#include "engine/kv_track.h"
#include "engine/spec.h"
#include "engine/think.h"
#include "kipp.h"

#include <stdint.h>

#define KIPP_MAX_TOP_LOGPROBS 20
#define KIPP_MAX_SCORE_IDS 8 /* kipp_req_params.score_ids (<= KIPP_MAX_TOP_LOGPROBS) */
#define KIPP_SCHED_DEFAULT_KV_BYTES (2ull << 30) /* default KV pool budget: 2 GiB */
#define KIPP_SCHED_PREFILL_STEP_S 0.25               /* default prefill_step_s */
#define KIPP_SCHED_PREFILL_BUSY_S 0.1                /* default prefill_busy_s */
#define KIPP_SCHED_ARRIVAL_WINDOW_S 2.0              /* default arrival_window_s */

typedef struct kipp_sched kipp_sched;
typedef struct kipp_req kipp_req;

typedef struct {
    const char *backend;           /* see kipp_ctx_params */
    int n_threads;
    uint32_t n_ctx;                /* longest sequence (prompt + completion); 0 = model's, <= 4096 */
    uint32_t n_kv_tokens;          /* pool size in tokens; 0 = n_ctx * max_running, capped at
                                      KIPP_SCHED_DEFAULT_KV_BYTES (at least n_ctx + a block) */
    uint32_t block_size;           /* 0 = 16 */
    uint32_t max_running;          /* sequences in the running batch; 0 = 8 */
    uint32_t max_queue;            /* waiting requests before submit says KIPP_ERR_BUSY; 0 = 64 */
    uint32_t batch_tokens;         /* prompt tokens per step (chunked prefill); 0 = 256 */
    double prefill_step_s;         /* fewer prompt tokens in a step when they would take
                                      longer than about this (measured seconds per prompt
                                      token; at least 16): bounds how long a request that
                                      arrives meanwhile waits for the step to end; 0 =
                                      KIPP_SCHED_PREFILL_STEP_S; < 0: no bound */
    double prefill_busy_s;         /* the same bound while requests keep arriving (two API
                                      requests within arrival_window_s), when it is lower: a
                                      long prompt is then read in shorter steps, so a request
                                      that arrives beside it waits less; 0 =
                                      KIPP_SCHED_PREFILL_BUSY_S; < 0: prefill_step_s always */
    double arrival_window_s;       /* see prefill_busy_s; 0 = KIPP_SCHED_ARRIVAL_WINDOW_S */
    uint32_t prefix_cache_entries; /* kept sequences; 0 = no prefix cache */
    kipp_kv_type kv_type;          /* see kipp_ctx_params; 0 = the backend's default */
    kipp_kv_type kv_type_v;        /* see kipp_ctx_params; 0 = kv_type */
    const char *isa;               /* see kipp_ctx_params; NULL = best */
    int device;                    /* see kipp_ctx_params; 0 = the first */
    uint64_t kv_memory;            /* with n_kv_tokens 0: the pool holds at most this many
                                      bytes of K/V (0 = KIPP_SCHED_DEFAULT_KV_BYTES) */
    double fair_share;             /* while a request of several sequences (n > 1) shares the
                                      batch with one-sequence requests, its sequences past one
                                      may add at most this share to the step's time (from the
                                      measured step-time model); 0 = 0.25; < 0: no cap */
    double prefill_share;          /* while sequences decode, a step's prompt tokens (past a
                                      one-sequence request's whole prompt) cost at most about
                                      this share of a decode-only step, at least 4 tokens;
                                      0 = 0.5 */
    double fair_slope;             /* > 0: the step-time model is this many seconds per
                                      sequence and nothing fixed, instead of measured (for
                                      reproducible tests); 0 = measured */
    const kipp_kv_event_sink *kv_events; /* KV-cache events (NULL: none): each engine step's
                                      blocks stored and removed, handed to this sink on the
                                      engine thread (engine/kv_track.h); copied at start */
    const kipp_spec_params *spec;  /* speculative decoding (NULL: none): the drafter gets a
                                      slot per running sequence; n_ctx and n_slots are set
                                      here; ctx.n_threads etc. as given */
} kipp_sched_params;

/* A request's life: queued (waiting for a slot and memory), prefilling its prompt in
 * chunks, decoding (one token per step, or a verified draft run with speculation), done.
 * Preemption sends a running request back to queued. */
typedef enum { KIPP_REQ_QUEUED = 0, KIPP_REQ_PREFILL, KIPP_REQ_DECODE, KIPP_REQ_DONE } kipp_req_state;

typedef enum {
    KIPP_FINISH_NONE = 0,  /* still running */
    KIPP_FINISH_STOP,      /* an end-of-generation token */
    KIPP_FINISH_LENGTH,    /* max_tokens or the context */
    KIPP_FINISH_CANCELLED, /* the consumer cancelled */
    KIPP_FINISH_ERROR      /* the backend failed; kipp_req_error says why */
} kipp_finish;

typedef struct {
    const int32_t *prompt; /* [n_prompt] copied by submit */
    uint32_t n_prompt;     /* >= 1 and < n_ctx */
    uint32_t max_tokens;   /* capped by the context; 0: nothing is generated (the prompt is
                              computed, its log-probabilities recorded with
                              prompt_logprobs, and the request finishes as LENGTH) */
    kipp_sampler_params sampling;
    int ignore_eos;
    int logprobs;          /* record each token's log-probability */
    uint32_t top_logprobs; /* and the n most likely alternatives (<= KIPP_MAX_TOP_LOGPROBS) */
    int prompt_logprobs;   /* scoring: record each prompt token's log-probability given the
                              tokens before it, with top_logprobs alternatives
                              (kipp_req_prompt_token). Such a request computes its prompt
                              itself (no cached or shared prefix), a bounded number of
                              prompt rows per step */
    kipp_matcher *matcher; /* grammar-constrained output (NULL: none): every token is drawn
                              from the tokens it allows. A successful submit takes it over
                              (freed with the request); after a failed one it is still the
                              caller's. Such a request is never drafted for. */
    kipp_think_params think; /* the reply may reason before the matcher applies (an optional
                                <think>...</think> prefix, bounded; engine/think.h). Zero:
                                the matcher applies from the first token */
    uint32_t n_score_ids;  /* > 0: each generated token records the raw log-probabilities of
                              score_ids[0..n_score_ids) in its top_id / top_logprob, in this
                              order (n_top = n_score_ids), instead of the most likely tokens
                              (logprobs is then implied; top_logprobs is not used). With
                              max_tokens 1 they are the last prompt position's: a reranker's
                              "yes" and "no" (src/server/rerank.c) */
    int32_t score_ids[KIPP_MAX_SCORE_IDS];
    uint64_t group;        /* siblings (the n choices of one API request; 0: none): a
                              request is not admitted while a sibling is still prefilling,
                              then starts from a fork of that sibling's KV (one prefill) */
    uint32_t sibling;      /* its index among its siblings: prompt_tokens counts the prompt
                              once per group, for sibling 0 (seq_prompt_tokens for each) */
    uint32_t window;       /* back-pressure (0: none): the request is paused while it has
                              generated this many tokens past what its consumer has taken
                              (the `have` of its last kipp_req_wait / _wait_any), and goes
                              on once the consumer takes more. A paused sequence keeps its
                              KV and slot while no other request waits for one */
} kipp_req_params;

/* One generated token. Log-probabilities are of the model's raw distribution (before
 * penalties and temperature), as OpenAI and vLLM report them. */
typedef struct {
    int32_t id;
    float logprob;
    uint32_t n_top;
    int32_t top_id[KIPP_MAX_TOP_LOGPROBS]; /* most likely first */
    float top_logprob[KIPP_MAX_TOP_LOGPROBS];
} kipp_gen_token;

/* Fixed-bucket latency histogram (seconds), Prometheus style (cumulative on output). */
#define KIPP_HIST_BUCKETS 14
typedef struct {
    uint64_t count[KIPP_HIST_BUCKETS + 1]; /* per bucket; the last is +Inf */
    uint64_t n;
    double sum;
} kipp_hist;
extern const double kipp_hist_bounds[KIPP_HIST_BUCKETS];
void kipp_hist_add(kipp_hist *h, double seconds);

typedef struct {
    uint64_t steps, prompt_tokens, generated_tokens, batched_tokens;
    uint64_t submitted, rejected, cancelled, preempted, finished, errors;
    uint32_t queue_depth, running;
    uint32_t kv_blocks_total, kv_blocks_used, kv_blocks_cached; /* cached: held only by the cache */
    uint64_t pc_lookups, pc_hits, pc_lookup_tokens, pc_hit_tokens;
    uint64_t live_prefix_tokens; /* prompt tokens taken from a running sequence's KV (fork) */
    uint64_t seq_prompt_tokens;  /* prompt tokens of every admitted sequence (prompt_tokens
                                    counts a group's shared prompt once) */
    uint64_t preempted_fair, preempted_paused; /* of preempted: to give a waiting request
                                    its fair share of slots; a paused sequence's slot */
    uint64_t parked, unparked;   /* fair preemptions that kept the sequence's KV (it resumes
                                    with nothing recomputed); of those, given up for memory */
    uint64_t fair_deferred;      /* decoding sequences held out of a step so that a request
                                    of several sequences does not slow one-sequence requests
                                    by more than fair_share */
    uint32_t paused;             /* sequences paused by their window (running or queued) */
    uint64_t spec_steps, spec_drafted, spec_accepted; /* speculative decoding */
    double spec_draft_seconds;
    /* finished requests that drafted, by acceptance: count[i] for (i/10, (i+1)/10], [0]
     * includes 0 */
    uint64_t spec_req_acc[10], spec_req_n;
    double spec_req_acc_sum;
    kipp_hist ttft, itl; /* submit → first token; between consecutive tokens of a request */
    /* constrained decoding, counted when a request finishes: token masks computed, of them
     * served from the matcher's cache, seconds spent computing them */
    uint64_t grammar_requests, grammar_masks, grammar_cache_hits, grammar_masks_partial;
    double grammar_mask_seconds;
    uint64_t grammar_masks_deferred; /* constrained tokens handed to the mask thread */
    /* liveness (kipp-server's /livez): when the engine loop last turned (CLOCK_MONOTONIC
     * seconds; it turns before every step), whether it is now waiting for work (nothing to
     * run, every sequence paused, or the mask thread), and whether it has ended
     * (kipp_sched_stop). A loop neither waiting nor turning for long is stuck in a step. */
    double engine_beat_s;
    int engine_waiting, engine_ended;
} kipp_sched_stats;

/* Loads nothing: the model is the caller's and must outlive the scheduler. Starts the
 * engine thread. Errors: the backend, memory, inconsistent sizes. */
kipp_status kipp_sched_start(kipp_model *m, const kipp_sched_params *p, kipp_sched **out,
                             char *err, size_t err_len);
/* Stops the engine thread; requests still queued or running finish as cancelled (their
 * consumers wake up and may still read them). Idempotent. */
void kipp_sched_stop(kipp_sched *s);
/* Stops (if needed) and frees; every request must have been released. NULL is a no-op. */
void kipp_sched_free(kipp_sched *s);

/* The context the engine runs (backend, ISA level, threads, KV type and pool size). */
void kipp_sched_ctx_info(const kipp_sched *s, kipp_ctx_info *out);
uint32_t kipp_sched_n_ctx(const kipp_sched *s);
/* Sequences decoded together at most (kipp_sched_params.max_running, defaults applied). */
uint32_t kipp_sched_max_running(const kipp_sched *s);
void kipp_sched_get_stats(kipp_sched *s, kipp_sched_stats *out);

/* Queues a request. KIPP_ERR_BUSY: the queue is full (tell the client to retry);
 * KIPP_ERR_INVALID_ARG: bad parameters (err names which). *out is the caller's reference:
 * release it with kipp_req_release. */
kipp_status kipp_sched_submit(kipp_sched *s, const kipp_req_params *p, kipp_req **out,
                              char *err, size_t err_len);

/* Waits until the request has more than `have` tokens or has finished, at most timeout_ms
 * (< 0: forever). Returns the number of tokens available; *finish is set once every token
 * is in (KIPP_FINISH_NONE before). Tokens 0..n-1 may then be read with kipp_req_token. */
uint32_t kipp_req_wait(kipp_req *r, uint32_t have, int timeout_ms, kipp_finish *finish);
/* The same for several requests of one scheduler: waits until one of rs[0..n) has more
 * than have[i] tokens or has finished, at most timeout_ms (< 0: forever). Returns the first
 * such index at or after `start` (round robin), or -1 on timeout. Each have[i] counts as
 * taken by the consumer (see kipp_req_params.window). */
int kipp_req_wait_any(kipp_req *const *rs, const uint32_t *have, uint32_t n, uint32_t start,
                      int timeout_ms);
/* Token i < the count kipp_req_wait returned; valid until kipp_req_release. */
const kipp_gen_token *kipp_req_token(const kipp_req *r, uint32_t i);
/* Prompt token i (i < n_prompt) with its log-probability given tokens 0..i-1 and its
 * alternatives, for a request with prompt_logprobs (NULL without). Token 0 has none
 * (logprob 0, n_top 0). Valid, until kipp_req_release, once kipp_req_wait has returned a
 * token or a finish, for i < kipp_req_n_prompt_logprobs. */
const kipp_gen_token *kipp_req_prompt_token(const kipp_req *r, uint32_t i);
/* Prompt tokens recorded so far, token 0 included: n_prompt once the prompt was computed
 * (fewer when the request ended before: cancelled, an error, or a pool too small for it). */
uint32_t kipp_req_n_prompt_logprobs(const kipp_req *r);
/* Prompt tokens served from the prefix cache (final once the first token is out). */
uint32_t kipp_req_n_cached(kipp_req *r);
/* Seconds from submission to first admission (the queue wait) and to the first token
 * published; -1 while it has not happened. */
void kipp_req_times(kipp_req *r, double *queue_s, double *ttft_s);
/* Engine steps that ended from the request's submission to the step that published its
 * first token, that step included (1: the next step gave it; the step in flight at
 * submission counts too); -1 while it has not happened. */
int64_t kipp_req_steps_to_first(kipp_req *r);
/* Engine steps that had ended when the request was submitted (the scheduler's step count,
 * from 0 at kipp_sched_start). */
uint64_t kipp_req_step_submitted(kipp_req *r);
/* Speculative decoding: tokens drafted for the request and verified, and kept (0 without). */
void kipp_req_spec(kipp_req *r, uint64_t *drafted, uint64_t *accepted);
/* The backend's error message for KIPP_FINISH_ERROR ("" otherwise). */
const char *kipp_req_error(const kipp_req *r);
/* Asks the engine to drop the request at its next step; its blocks go back to the pool. */
void kipp_req_cancel(kipp_req *r);
/* Ends the request early as finished, not cancelled (a stop string matched). */
void kipp_req_stop(kipp_req *r);
/* Drops the caller's reference (cancelling the request if it still runs). NULL: no-op. */
void kipp_req_release(kipp_req *r);

#endif
