/* metrics.h — the server's own counters (HTTP requests by endpoint and status, request
 * durations) and the Prometheus text exposition of them together with the scheduler's
 * statistics. Not thread-safe by itself: http.c guards the counters with its lock. */
#ifndef KIPP_SERVER_METRICS_H
#define KIPP_SERVER_METRICS_H

#include "engine/sched.h"

#include <stdint.h>

enum { M_EP_CHAT, M_EP_COMPLETIONS, M_EP_MODELS, M_EP_HEALTH, M_EP_METRICS, M_EP_EMBEDDINGS,
       M_EP_WEBUI,
       M_EP_MESSAGES, M_EP_COUNT_TOKENS,                          /* Anthropic (anthropic.c) */
       M_EP_RESPONSES,                                            /* OpenAI Responses (responses.c) */
       M_EP_OLLAMA_CHAT, M_EP_OLLAMA_GENERATE, M_EP_OLLAMA_EMBED, /* Ollama (ollama.c) */
       M_EP_OLLAMA_INFO, M_EP_OLLAMA_MANAGE,
       M_EP_TOKENIZE, M_EP_DETOKENIZE, M_EP_APPLY_TEMPLATE, M_EP_PROPS, /* util.c */
       M_EP_RERANK,                                               /* rerank.c */
       M_EP_LIVEZ, M_EP_LOAD,                                     /* http.c: /livez, /get_load */
       M_EP_OTHER, M_EP_N };
enum { M_ST_N = 14 };
extern const int kipp_metrics_statuses[M_ST_N]; /* 200 204 400 401 403 404 405 413 415 417 500 501 503, other */
extern const char *const kipp_metrics_endpoints[M_EP_N];

typedef struct {
    uint64_t requests[M_EP_N][M_ST_N];
    kipp_hist duration; /* whole generation requests, arrival to last byte queued */
} kipp_server_counters;

/* What the exposition says besides the counters: the served name and the KV pool's shape
 * (cache_config_info; zeros and NULL before a generative model is attached). */
typedef struct {
    const char *model_name;
    uint32_t block_size, n_blocks; /* tokens per KV block; blocks in the pool */
    const char *cache_type;        /* the KV type's name ("f16", "q8_0", ...; "K/V" when the
                                      two differ, e.g. "q8_0/q4_0") */
    char cache_type_buf[16];       /* the storage of a "K/V" cache_type */
    int prefix_caching;            /* the prefix cache is on */
    int vllm_compat;               /* --metrics-compat vllm: the vLLM-named set as well */
} kipp_metrics_info;

void kipp_metrics_count(kipp_server_counters *c, int endpoint, int status);
/* The fraction (0..1) of the pool's KV blocks held by live requests: running, queued with
 * KV, or parked. Blocks held only by the prefix cache are free (evicted on demand). */
double kipp_metrics_kv_usage(const kipp_sched_stats *s);
/* The exposition text (malloc'd). ready: the model is loaded. */
char *kipp_metrics_text(const kipp_server_counters *c, const kipp_sched_stats *s, int ready,
                        const kipp_metrics_info *info);

#endif
