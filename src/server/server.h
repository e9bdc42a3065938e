/* server.h — the HTTP front end of kipp-server: libmicrohttpd with a thread per
 * connection, the OpenAI routes, Host/Origin rules, API-key check, body, prompt and
 * connection limits, a read deadline, SSE streaming with disconnect detection, drain on
 * shutdown, and Prometheus metrics. The engine (model + scheduler) is attached
 * once loaded; until then /health says 503 "loading". Reference: docs/server.md. */
#ifndef KIPP_SERVER_SERVER_H
#define KIPP_SERVER_SERVER_H

#include "engine/sched.h"
#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

/* What a 0 in kipp_server_params means (kipp_server_start fills them in). */
#define KIPP_SERVER_DEFAULT_MAX_BODY (1u << 20)
#define KIPP_SERVER_DEFAULT_MAX_CONNECTIONS 2048
#define KIPP_SERVER_DEFAULT_MAX_CONNECTIONS_PER_IP 64
/* max_connections_per_ip: no per-address limit (behind a balancer every connection comes
 * from its address) */
#define KIPP_SERVER_NO_PER_IP_LIMIT UINT32_MAX
/* GET /livez says 503 when the engine loop, not waiting for work, has not turned for this
 * long (a step stuck; a normal step, prefill bounded by --prefill-step-ms, takes far less) */
#define KIPP_SERVER_LIVEZ_STALE_S 60.0
#define KIPP_SERVER_DEFAULT_READ_TIMEOUT_S 30
#define KIPP_SERVER_DEFAULT_MAX_PARSING 4
#define KIPP_SERVER_DEFAULT_WRITE_TIMEOUT_S 30
/* back-pressure: a request's sequences run at most this many tokens ahead of what the
 * server has handed to the connection (kipp_req_params.window) */
#define KIPP_SERVER_TOKEN_WINDOW 64
/* SO_SNDBUF of a streaming response's socket (the kernel doubles it for its bookkeeping) */
#define KIPP_SERVER_STREAM_SNDBUF (64 * 1024)
/* a non-streamed response body above this many bytes is not built whole: it is sent piece
 * by piece as the client reads (its length counted by a first pass) */
#define KIPP_SERVER_INLINE_BODY (1u << 20)

typedef struct {
    const char *host;            /* "127.0.0.1" unless told otherwise */
    uint16_t port;               /* 0: any free port */
    size_t max_body;             /* bytes; 0: KIPP_SERVER_DEFAULT_MAX_BODY (1 MiB) */
    uint32_t max_prompt_tokens;  /* 0: n_ctx - 1 */
    uint32_t default_max_tokens; /* 0: the rest of the context */
    const char *api_key;         /* NULL: no key needed */
    const char *model_name;      /* the id clients send, and /v1/models lists first */
    int log_format;              /* a line per request on stderr: 0 none, 1 text, 2 JSON */
    const char *const *model_aliases; /* other ids accepted (and listed); "*": any id */
    size_t n_model_aliases;
    uint32_t max_connections;    /* 0: KIPP_SERVER_DEFAULT_MAX_CONNECTIONS, and so on */
    uint32_t max_connections_per_ip; /* KIPP_SERVER_NO_PER_IP_LIMIT: none */
    uint32_t read_timeout_s;     /* a whole request (headers + body) within this */
    uint32_t write_timeout_s;    /* a response the client accepts no byte of for this long
                                    (while the server has bytes for it) is closed and its
                                    request cancelled */
    uint32_t max_parsing;        /* requests parsed/tokenized at once */
    const char *const *allowed_hosts; /* extra Host names ("*": any); loopback names, the
                                    --host address and the address a connection arrived
                                    on (an IP literal) always */
    size_t n_allowed_hosts;
    const char *const *cors_origins;  /* Origins allowed cross-origin ("*": any) */
    size_t n_cors_origins;
    int content_text;            /* special-token text in prompts and message content is
                                    plain text unless a request says "parse" (default 0:
                                    parsed, as HF and llama.cpp do) */
    int reranking;               /* POST /v1/rerank scores the model by its "yes" / "no"
                                    logits even though its GGUF does not say it is a
                                    reranker (src/server/rerank.h) */
    int metrics_vllm;            /* /metrics also under vLLM's names (--metrics-compat vllm) */
    int prefix_caching;          /* the scheduler keeps a prefix cache (for /metrics) */
} kipp_server_params;

typedef struct kipp_server kipp_server;

/* Binds and starts answering (everything but /health is 503 until an engine is attached). */
kipp_status kipp_server_start(const kipp_server_params *p, kipp_server **out, char *err,
                              size_t err_len);
uint16_t kipp_server_port(const kipp_server *sv);
/* Attaches the loaded model and running scheduler: the server is ready. Both stay the
 * caller's and must outlive kipp_server_free. */
void kipp_server_attach(kipp_server *sv, kipp_model *m, kipp_sched *sched);
/* The same for an embedding model (no lm_head, no scheduler): /v1/embeddings runs on e
 * (src/server/embeddings.h) and the generation endpoints answer 400. e stays the caller's. */
struct oai_embedder;
void kipp_server_attach_embedder(kipp_server *sv, kipp_model *m, struct oai_embedder *e);
/* The first step of a drain (--drain-delay): /health says 503 "draining" and responses
 * carry Connection: close, but new connections and requests are still served, so that a
 * balancer's health check takes the replica out before anything is refused. Idempotent. */
void kipp_server_announce_drain(kipp_server *sv);
/* Starts draining: no new connections, new requests get 503, /health says "draining";
 * requests in flight go on. Idempotent. */
void kipp_server_drain(kipp_server *sv);
/* Generation requests not yet fully answered (parsing, queued, running or being written). */
int kipp_server_active(kipp_server *sv);
/* The drain deadline: every request still in flight ends now with an error its client can
 * tell from a normal end (streaming: the protocol's error event, type "server_shutdown", no
 * [DONE]; not streaming: 503); call before stopping the scheduler. */
void kipp_server_shutdown(kipp_server *sv);
/* Stops the daemon (joins connection threads) and frees. NULL is a no-op. */
void kipp_server_free(kipp_server *sv);

#endif
