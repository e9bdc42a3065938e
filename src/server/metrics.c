/* metrics.c — Prometheus text exposition format 0.0.4: HELP and TYPE lines, counters,
 * gauges and cumulative histograms with le buckets, _sum and _count; with --metrics-compat
 * vllm, the load figures routers read (queue, running, KV use, cache config, prefix-cache
 * tokens) again under vLLM's names and labels. */
#include "server/metrics.h"

#include "server/openai.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

const int kipp_metrics_statuses[M_ST_N] = {200, 204, 400, 401, 403, 404, 405, 413, 415, 417, 500, 501, 503, 0};
const char *const kipp_metrics_endpoints[M_EP_N] = {"chat_completions", "completions", "models",
                                                    "health", "metrics", "embeddings",
                                                    "webui", "anthropic_messages",
                                                    "anthropic_count_tokens", "responses",
                                                    "ollama_chat", "ollama_generate", "ollama_embed",
                                                    "ollama_info", "ollama_manage", "tokenize",
                                                    "detokenize", "apply_template", "props",
                                                    "rerank", "livez", "get_load", "other"};

void kipp_metrics_count(kipp_server_counters *c, int endpoint, int status) {
    int k = 0;
    while (k < M_ST_N - 1 && kipp_metrics_statuses[k] != status) k++;
    c->requests[endpoint][k]++;
}

static void metric(kipp_buf *b, const char *name, const char *type, const char *help, double v) {
    kipp_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

static void histogram(kipp_buf *b, const char *name, const char *help, const kipp_hist *h) {
    kipp_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < KIPP_HIST_BUCKETS; i++) {
        cum += h->count[i];
        kipp_buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name, kipp_hist_bounds[i], (unsigned long long)cum);
    }
    cum += h->count[KIPP_HIST_BUCKETS];
    kipp_buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    kipp_buf_printf(b, "%s_sum %.17g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->n);
}

double kipp_metrics_kv_usage(const kipp_sched_stats *s) {
    if (!s->kv_blocks_total || s->kv_blocks_used <= s->kv_blocks_cached) return 0.0;
    const double held = (double)(s->kv_blocks_used - s->kv_blocks_cached);
    return held >= s->kv_blocks_total ? 1.0 : held / (double)s->kv_blocks_total;
}

/* A label value as the exposition format writes it: \\, \" and \n escaped. */
static void label_value(kipp_buf *b, const char *v) {
    for (const char *p = v ? v : ""; *p; p++) {
        if (*p == '\\' || *p == '"') kipp_buf_printf(b, "\\%c", *p);
        else if (*p == '\n') kipp_buf_printf(b, "\\n");
        else kipp_buf_put(b, p, 1);
    }
}

/* One sample of a vLLM-named metric labelled as vLLM labels its engine's metrics. */
static void vllm_metric(kipp_buf *b, const kipp_metrics_info *info, const char *name, const char *type,
                        const char *help, double v) {
    kipp_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s{engine=\"0\",model_name=\"", name, help, name, type,
                    name);
    label_value(b, info->model_name);
    kipp_buf_printf(b, "\"} %.17g\n", v);
}

/* --metrics-compat vllm: the figures that routers with vLLM's names built in read (vLLM
 * v1's names and labels; the Gateway API Inference Extension's endpoint picker defaults,
 * vllm-router, production-stack). The same numbers as the kipp_ ones. */
static void vllm_set(kipp_buf *b, const kipp_sched_stats *s, const kipp_metrics_info *info) {
    const double usage = kipp_metrics_kv_usage(s);
    vllm_metric(b, info, "vllm:num_requests_running", "gauge", "Sequences in the running batch (kipp_running_sequences).",
                s->running);
    vllm_metric(b, info, "vllm:num_requests_waiting", "gauge", "Sequences waiting for a running slot (kipp_queue_depth).",
                s->queue_depth);
    vllm_metric(b, info, "vllm:kv_cache_usage_perc", "gauge",
                "KV-cache usage, 0..1: blocks held by live requests / the pool (kipp_kv_cache_usage_ratio).", usage);
    vllm_metric(b, info, "vllm:gpu_cache_usage_perc", "gauge", "The same as vllm:kv_cache_usage_perc (its older name).",
                usage);
    vllm_metric(b, info, "vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
                (double)s->pc_lookup_tokens);
    vllm_metric(b, info, "vllm:prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache.",
                (double)s->pc_hit_tokens);
    vllm_metric(b, info, "vllm:gpu_prefix_cache_queries_total", "counter",
                "The same as vllm:prefix_cache_queries_total (its older name).", (double)s->pc_lookup_tokens);
    vllm_metric(b, info, "vllm:gpu_prefix_cache_hits_total", "counter",
                "The same as vllm:prefix_cache_hits_total (its older name).", (double)s->pc_hit_tokens);
    vllm_metric(b, info, "vllm:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
                (double)s->prompt_tokens);
    vllm_metric(b, info, "vllm:generation_tokens_total", "counter", "Tokens generated.", (double)s->generated_tokens);
    if (info->block_size) {
        kipp_buf_printf(b, "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig (Kipp's KV pool).\n"
                           "# TYPE vllm:cache_config_info gauge\n"
                           "vllm:cache_config_info{block_size=\"%u\",cache_dtype=\"", info->block_size);
        label_value(b, info->cache_type);
        kipp_buf_printf(b, "\",enable_prefix_caching=\"%s\",engine=\"0\",num_cpu_blocks=\"0\",num_gpu_blocks=\"%u\"} 1\n",
                        info->prefix_caching ? "True" : "False", info->n_blocks);
    }
    /* the value is the time the figures were taken (the endpoint picker keeps the latest) */
    kipp_buf_printf(b, "# HELP vllm:lora_requests_info Running stats on LoRA requests (Kipp serves no adapters).\n"
                       "# TYPE vllm:lora_requests_info gauge\n"
                       "vllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} %.17g\n",
                    (double)time(NULL));
}

char *kipp_metrics_text(const kipp_server_counters *c, const kipp_sched_stats *s, int ready,
                        const kipp_metrics_info *info) {
    kipp_buf b = {0};
    kipp_buf_printf(&b, "# HELP kipp_requests_total HTTP requests answered, by endpoint and status code.\n"
            "# TYPE kipp_requests_total counter\n");
    for (int e = 0; e < M_EP_N; e++)
        for (int k = 0; k < M_ST_N; k++)
            if (c->requests[e][k] || (k == 0 && e <= M_EP_COMPLETIONS)) {
                if (kipp_metrics_statuses[k])
                    kipp_buf_printf(&b, "kipp_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                        kipp_metrics_endpoints[e], kipp_metrics_statuses[k],
                        (unsigned long long)c->requests[e][k]);
                else
                    kipp_buf_printf(&b, "kipp_requests_total{endpoint=\"%s\",status=\"other\"} %llu\n",
                        kipp_metrics_endpoints[e], (unsigned long long)c->requests[e][k]);
            }
    metric(&b, "kipp_ready", "gauge", "1 once the model is loaded.", ready);
    metric(&b, "kipp_requests_cancelled_total", "counter",
           "Sequences dropped because their client disconnected (or the server stopped).",
           (double)s->cancelled);
    metric(&b, "kipp_requests_rejected_total", "counter", "503s because the wait queue was full.",
           (double)s->rejected);
    metric(&b, "kipp_requests_preempted_total", "counter",
           "Sequences sent back to wait: their KV freed (recomputed later) or, parked, kept.", (double)s->preempted);
    metric(&b, "kipp_requests_preempted_fair_total", "counter",
           "Of them, to give a waiting request its fair share of the running slots.",
           (double)s->preempted_fair);
    metric(&b, "kipp_requests_parked_total", "counter",
           "Of the fair preemptions, those that kept the sequence's KV, so it resumed with nothing recomputed.",
           (double)s->parked);
    metric(&b, "kipp_requests_unparked_total", "counter",
           "Of the parked sequences, those whose KV was given up for memory before they resumed.",
           (double)s->unparked);
    metric(&b, "kipp_fair_deferred_total", "counter",
           "Decoding sequences of n > 1 requests held out of a step so one-sequence requests keep their pace (--fair-share).",
           (double)s->fair_deferred);
    metric(&b, "kipp_requests_preempted_paused_total", "counter",
           "Of them, paused sequences (their client not reading) giving their slot to a waiting request.",
           (double)s->preempted_paused);
    metric(&b, "kipp_engine_errors_total", "counter", "Sequences that ended with a backend error.",
           (double)s->errors);
    metric(&b, "kipp_prompt_tokens_total", "counter",
           "Prompt tokens of admitted requests, once per request whatever its n (usage.prompt_tokens).",
           (double)s->prompt_tokens);
    metric(&b, "kipp_sequence_prompt_tokens_total", "counter",
           "Prompt tokens of every admitted sequence (each of n choices; most come from a fork or the cache).",
           (double)s->seq_prompt_tokens);
    metric(&b, "kipp_generated_tokens_total", "counter", "Tokens generated.", (double)s->generated_tokens);
    metric(&b, "kipp_engine_steps_total", "counter", "Batched decode steps.", (double)s->steps);
    metric(&b, "kipp_engine_batched_tokens_total", "counter", "Tokens run through the model.",
           (double)s->batched_tokens);
    metric(&b, "kipp_prefix_cache_lookups_total", "counter", "Prompts looked up in the prefix cache.",
           (double)s->pc_lookups);
    metric(&b, "kipp_prefix_cache_hits_total", "counter", "Lookups that reused cached KV blocks.",
           (double)s->pc_hits);
    metric(&b, "kipp_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the cache.",
           (double)s->pc_hit_tokens);
    metric(&b, "kipp_prefix_live_tokens_total", "counter",
           "Prompt tokens taken from a running sequence's KV by a fork (n > 1 siblings, shared prefixes).",
           (double)s->live_prefix_tokens);
    metric(&b, "kipp_prefix_cache_queries_total", "counter",
           "Prompt tokens looked up in the prefix cache (vLLM's prefix_cache_queries; the tokens found: "
           "kipp_prefix_cache_hit_tokens_total).",
           (double)s->pc_lookup_tokens);
    metric(&b, "kipp_prefix_cache_hit_rate", "gauge", "Cached prompt tokens / looked-up prompt tokens.",
           s->pc_lookup_tokens ? (double)s->pc_hit_tokens / (double)s->pc_lookup_tokens : 0.0);
    metric(&b, "kipp_spec_steps_total", "counter",
           "Speculative verification steps (a request's drafts checked in one batch).",
           (double)s->spec_steps);
    metric(&b, "kipp_spec_drafted_tokens_total", "counter", "Drafted tokens verified.",
           (double)s->spec_drafted);
    metric(&b, "kipp_spec_accepted_tokens_total", "counter", "Drafted tokens kept.",
           (double)s->spec_accepted);
    metric(&b, "kipp_spec_acceptance_rate", "gauge", "Accepted / drafted tokens, all requests.",
           s->spec_drafted ? (double)s->spec_accepted / (double)s->spec_drafted : 0.0);
    metric(&b, "kipp_spec_draft_seconds_total", "counter", "Time spent drafting.",
           s->spec_draft_seconds);
    metric(&b, "kipp_grammar_requests_total", "counter", "Finished requests with constrained decoding.",
           (double)s->grammar_requests);
    metric(&b, "kipp_grammar_masks_total", "counter", "Token masks applied (one per constrained token).",
           (double)s->grammar_masks);
    metric(&b, "kipp_grammar_mask_cache_hits_total", "counter", "Token masks served from the matcher's cache.",
           (double)s->grammar_cache_hits);
    metric(&b, "kipp_grammar_mask_seconds_total", "counter", "Time spent computing token masks.",
           s->grammar_mask_seconds);
    metric(&b, "kipp_grammar_masks_partial_total", "counter",
           "Token masks cut short by the work budget (a hostile, highly ambiguous grammar).",
           (double)s->grammar_masks_partial);
    metric(&b, "kipp_grammar_masks_deferred_total", "counter",
           "Constrained tokens whose grammar work ran past 5 ms on the engine thread and was "
           "redone on the mask thread.",
           (double)s->grammar_masks_deferred);
    kipp_buf_printf(&b, "# HELP kipp_spec_request_acceptance Per-request acceptance (kept / drafted) of "
            "finished requests that drafted.\n# TYPE kipp_spec_request_acceptance histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < 10; i++) {
        cum += s->spec_req_acc[i];
        kipp_buf_printf(&b, "kipp_spec_request_acceptance_bucket{le=\"%g\"} %llu\n", (i + 1) / 10.0,
            (unsigned long long)cum);
    }
    kipp_buf_printf(&b, "kipp_spec_request_acceptance_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    kipp_buf_printf(&b, "kipp_spec_request_acceptance_sum %.17g\nkipp_spec_request_acceptance_count %llu\n",
        s->spec_req_acc_sum, (unsigned long long)s->spec_req_n);
    metric(&b, "kipp_queue_depth", "gauge", "Requests waiting for a running slot.", s->queue_depth);
    metric(&b, "kipp_running_sequences", "gauge", "Sequences in the running batch.", s->running);
    metric(&b, "kipp_paused_sequences", "gauge",
           "Sequences paused because they ran a window of tokens ahead of their client.", s->paused);
    metric(&b, "kipp_kv_blocks_total", "gauge", "Blocks in the paged KV pool.", s->kv_blocks_total);
    metric(&b, "kipp_kv_blocks_used", "gauge", "KV blocks referenced by a sequence or the prefix cache.",
           s->kv_blocks_used);
    metric(&b, "kipp_kv_blocks_cached", "gauge", "KV blocks held only by the prefix cache.",
           s->kv_blocks_cached);
    metric(&b, "kipp_kv_cache_usage_ratio", "gauge",
           "KV blocks held by live requests / the pool's blocks, 0..1 (blocks held only by the prefix cache are free).",
           kipp_metrics_kv_usage(s));
    if (info->block_size) {
        kipp_buf_printf(&b, "# HELP kipp_cache_config_info The KV pool: tokens per block, blocks, KV type.\n"
                            "# TYPE kipp_cache_config_info gauge\n"
                            "kipp_cache_config_info{block_size=\"%u\",num_blocks=\"%u\",cache_type=\"",
                        info->block_size, info->n_blocks);
        label_value(&b, info->cache_type);
        kipp_buf_printf(&b, "\"} 1\n");
    }
    histogram(&b, "kipp_time_to_first_token_seconds", "From submission to the first token.", &s->ttft);
    histogram(&b, "kipp_inter_token_latency_seconds", "Between consecutive tokens of a request.", &s->itl);
    histogram(&b, "kipp_request_duration_seconds", "Generation requests, arrival to the last byte.",
              &c->duration);
    if (info->vllm_compat) vllm_set(&b, s, info);
    return b.data;
}
