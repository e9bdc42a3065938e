/* http_int.h — what http.c (connections, HTTP rules, routing) and the request handlers
 * (generate.c and each protocol's adapter) share inside kipp-server: the server's state,
 * a connection's state, and the helpers that answer. Private to src/server. */
#ifndef KIPP_SERVER_HTTP_INT_H
#define KIPP_SERVER_HTTP_INT_H

#include "server/server.h"

#include "server/api.h"

#include "server/embeddings.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/structured.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#define WAIT_SLICE_MS 20     /* how often a waiting handler looks at its socket */
#define WATCHDOG_TICK_MS 100 /* how often the watchdog looks at the connections */
#define LINE_DEADLINE_S 1.0  /* first byte of a request to its complete request line */
#define PARSE_WAIT_S 10      /* longest wait for a parsing slot before 503 */
#define BYTES_PER_TOKEN 16   /* prompt bytes > this x max prompt tokens + 4096: 400 untokenized */

/* A counted resource under kipp_server.mu: at most cap units taken at once; a taker waits
 * up to PARSE_WAIT_S for room. */
typedef struct {
    size_t used, cap;
    pthread_cond_t cv;
} budget;

/* One connection as the watchdog sees it (MHD's socket context). */
enum { WD_WAIT, WD_READ, WD_BUSY, WD_KILLED };
typedef struct wd_conn {
    struct wd_conn *prev, *next;
    int fd, state, bad_path;
    double t0, t_first; /* when the wait for this request began; its first byte (0: none) */
    uint64_t base;      /* bytes received before this request */
    uint64_t acked;     /* answering: bytes the client had acknowledged at t_acked, the */
    double t_acked;     /* last time it took one (or had nothing pending) */
} wd_conn;

struct kipp_server {
    struct MHD_Daemon *d;
    kipp_server_params p;
    char *api_key, *model_name;
    char *webui_csp; /* the page's Content-Security-Policy (webui.c) */
    uint16_t port;
    atomic_int ready, draining, stopping, active;
    atomic_int announced; /* /health says "draining" (kipp_server_announce_drain or drain) */
    kipp_metrics_info minfo; /* the KV pool's shape for /metrics, set at attach */
    kipp_model *m;
    kipp_sched *sched;          /* NULL when an embedding model is served */
    oai_embedder *emb;          /* the embedding model's context (NULL: a generative model) */
    oai_structured *structured; /* token trie and grammars for constrained decoding */
    uint32_t n_vocab, n_ctx;
    pthread_mutex_t mu; /* counters, ids */
    kipp_server_counters counters;
    uint64_t next_id, next_rid, next_group;
    char ignored[32][64]; /* request fields already logged as ignored (under mu) */
    int n_ignored;
    budget parsing;           /* requests parsed/tokenized at once: --max-parsing */
    budget bodies;            /* request-body bytes held: --max-parsing x --max-body */
    wd_conn *conns;           /* under wd_mu */
    pthread_mutex_t wd_mu;
    pthread_t wd;
    int wd_started;
    atomic_int wd_stop;
};

typedef struct {
    int endpoint; /* M_EP_* */
    int api;      /* srv_api: the protocol of the route (its error shape, its adapter) */
    kipp_buf body;
    int too_large, responded;
    size_t body_reserved; /* bytes of sv->bodies this request holds */
    int body_refused;     /* no room for the body in time: 503 once it has been read */
    double t_start;
    const char *cors; /* the Origin to echo in Access-Control-Allow-Origin, or NULL */
    int close;        /* answer with Connection: close */
    int http11;       /* HTTP/1.1 or later: an interim 1xx may be sent */
    /* the request's log line (on_completed) and X-Request-Id */
    char rid[65];     /* the client's X-Request-Id when it is sane, else req-N */
    char method[8], path[64];
    int status;       /* the status queued; 0: none (the connection was closed) */
    int active;       /* holds one of sv->active (a generation or an embedding) until
                       * on_completed: the drain waits for the answer's last byte, not
                       * just for its being queued */
    int gen;          /* a generation: the fields below are set */
    uint32_t n_prompt, n_cached, n_completion;
    double queue_s, ttft_s;
    const char *finish;
} conn_state;


enum { PEER_OK, PEER_GONE, PEER_FIN };

/* ---- http.c's helpers for the handlers ---------------------------------------------------- */
double srv_now(void);
void srv_count(kipp_server *sv, int endpoint, int status);
void srv_common_headers(kipp_server *sv, const conn_state *cs, struct MHD_Response *r);
/* Queues body (malloc'd, taken) with status; counts it for the metrics. */
enum MHD_Result srv_send_body(kipp_server *sv, struct MHD_Connection *c, conn_state *cs, int status,
                              char *body, const char *ctype, const char *retry);
/* An error in the shape of the connection's protocol (cs->api: OpenAI's {"error": {...}},
 * Anthropic's, Ollama's). */
enum MHD_Result srv_send_error(kipp_server *sv, struct MHD_Connection *c, conn_state *cs, int status,
                               const char *msg, const char *type, const char *param, const char *code);
enum MHD_Result srv_send_json(kipp_server *sv, struct MHD_Connection *c, conn_state *cs, int status,
                              char *json);
int srv_peer_state(int fd);
/* While a non-streamed answer is being made: 1 when the client is gone. A FIN is told from a
 * half-close by one write (HTTP/1.1: "100 Continue", which clients skip; a closed socket
 * answers it with a reset, which the next look sees); *probed says it was sent (0 at first). */
int srv_client_gone(int fd, int http11, int *probed);
int srv_conn_fd(struct MHD_Connection *c);
void srv_hold_active(kipp_server *sv, conn_state *cs);
void srv_bulk_priority(conn_state *cs);
int srv_parse_enter(kipp_server *sv);
void srv_parse_leave(kipp_server *sv);
void srv_body_bytes_free(void *arg);
void srv_body_release(kipp_server *sv, conn_state *cs);
int srv_model_served(const kipp_server *sv, const char *name);
void srv_note_ignored_field(kipp_server *sv, const char *name);

/* ---- generate.c ------------------------------------------------------------------------- */
/* A generation request on the connection's body: chat or completions in the protocol of
 * cs->api (an adapter translates it to an OpenAI request first). */
enum MHD_Result srv_handle_generate(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                    oai_endpoint ep);

/* ---- the other routes' handlers (the whole body is in cs->body; ready is checked) ---- */
enum MHD_Result srv_handle_count_tokens(kipp_server *sv, struct MHD_Connection *c, conn_state *cs); /* anthropic_http.c */
/* The prompt tokens of the generation request on cs's body, parsed by the route's adapter
 * and rendered as srv_handle_generate would (generate.c). 0, or an HTTP status with the
 * error already sent (*res). */
int srv_count_prompt_tokens(kipp_server *sv, struct MHD_Connection *c, conn_state *cs, size_t *n_tokens,
                            enum MHD_Result *res);
/* Ollama's routes (ollama_http.c): /api/chat and /api/generate (a load call answered at once,
 * the rest handed to srv_handle_generate), /api/version, /api/tags, /api/show, /api/ps,
 * /api/embed(dings), and the model-management routes answered with an error naming what Kipp
 * does instead */
enum MHD_Result srv_handle_ollama(kipp_server *sv, struct MHD_Connection *c, conn_state *cs);
/* /tokenize, /detokenize, /apply-template, /props (util.c) */
enum MHD_Result srv_handle_util(kipp_server *sv, struct MHD_Connection *c, conn_state *cs);
enum MHD_Result srv_handle_rerank(kipp_server *sv, struct MHD_Connection *c, conn_state *cs); /* rerank.c */

#endif
