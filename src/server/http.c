/* http.c — kipp-server's HTTP layer on libmicrohttpd (a thread per connection, so a handler
 * may block while its request generates). Routes, the API key (constant-time compare),
 * the body limit (413 before the body is read when Content-Length says so), JSON errors,
 * SSE streaming through a content-reader callback, and disconnect detection: while a
 * handler waits for tokens it peeks at its socket, so a client that leaves is cancelled at
 * the next step even when no byte is being written. Not here: the OpenAI field mapping
 * (openai_req.c / openai_gen.c) and scheduling (src/engine/sched.c). */
#include "server/server.h"

#include "server/metrics.h"
#include "server/openai.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define WAIT_SLICE_MS 20 /* how often a waiting handler looks at its socket */

struct kipp_server {
    struct MHD_Daemon *d;
    kipp_server_params p;
    char *api_key, *model_name;
    uint16_t port;
    atomic_int ready, stopping;
    kipp_model *m;
    kipp_sched *sched;
    uint32_t n_vocab, n_ctx;
    pthread_mutex_t mu; /* counters, ids */
    kipp_server_counters counters;
    uint64_t next_id;
};

typedef struct {
    int endpoint; /* M_EP_* */
    oai_buf body;
    int too_large, responded;
    double t_start;
} conn_state;

/* A generation in progress: shared by the blocking non-stream path and the SSE reader. */
typedef struct {
    kipp_server *sv;
    struct MHD_Connection *conn;
    oai_request rq;
    oai_gen g;
    kipp_req *req;
    oai_meta meta;
    char id[48];
    uint32_t n_prompt, n_seen;
    int first, done;
    oai_buf out; /* SSE bytes not yet handed to MHD */
    size_t out_pos;
    double t_start, t_checked;
} gen_state;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- responses -------------------------------------------------------------------------- */

static void count(kipp_server *sv, int endpoint, int status) {
    pthread_mutex_lock(&sv->mu);
    kipp_metrics_count(&sv->counters, endpoint, status);
    pthread_mutex_unlock(&sv->mu);
}

static enum MHD_Result send_body(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                 int status, char *body, const char *ctype, const char *retry) {
    if (!body) body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    struct MHD_Response *r = MHD_create_response_from_buffer(body ? strlen(body) : 0, body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) { free(body); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (retry) MHD_add_response_header(r, "Retry-After", retry);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    cs->responded = 1;
    count(sv, cs->endpoint, status);
    return ok;
}

static enum MHD_Result send_error(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                  int status, const char *msg, const char *type,
                                  const char *param, const char *code) {
    return send_body(sv, c, cs, status, oai_error_json(msg, type, param, code), "application/json",
                     status == 503 ? "1" : NULL);
}

static enum MHD_Result send_json(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                 int status, char *json) {
    return send_body(sv, c, cs, status, json, "application/json", NULL);
}

/* ---- the client is gone? ---------------------------------------------------------------- */

static int client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    char b;
    const ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return 1; /* orderly shutdown by the peer */
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return 1;
    return 0; /* alive, or a pipelined next request is waiting */
}

/* ---- generation ------------------------------------------------------------------------- */

static const char *finish_reason(kipp_finish f) {
    return f == KIPP_FINISH_LENGTH ? "length" : "stop";
}

/* Pulls the request's new tokens through the text pipeline. Returns the finish state
 * (KIPP_FINISH_NONE while running); *gone is set when the client left. */
static kipp_finish pump(gen_state *gs, int *gone) {
    kipp_finish fin = KIPP_FINISH_NONE;
    *gone = 0;
    for (;;) {
        const uint32_t n = kipp_req_wait(gs->req, gs->n_seen, WAIT_SLICE_MS, &fin);
        /* the socket is looked at every WAIT_SLICE_MS even while tokens flow: a fast model
         * never leaves a wait idle long enough otherwise */
        const double t = now_s();
        if (t - gs->t_checked >= WAIT_SLICE_MS * 1e-3 || (n == gs->n_seen && fin == KIPP_FINISH_NONE)) {
            gs->t_checked = t;
            if (atomic_load(&gs->sv->stopping) || client_gone(gs->conn)) {
                kipp_req_cancel(gs->req);
                *gone = 1;
                return KIPP_FINISH_CANCELLED;
            }
        }
        if (n > gs->n_seen || fin != KIPP_FINISH_NONE) {
            for (; gs->n_seen < n; gs->n_seen++)
                if (oai_gen_push(&gs->g, kipp_req_token(gs->req, gs->n_seen)))
                    kipp_req_stop(gs->req); /* a stop string: the text is complete */
            /* a stop string ends the text even when the engine also reached max_tokens */
            if (gs->g.stopped && fin != KIPP_FINISH_ERROR) fin = KIPP_FINISH_STOP;
            return fin;
        }
    }
}

static void fill_meta(gen_state *gs, kipp_finish fin) {
    gs->meta.finish_reason = fin == KIPP_FINISH_NONE ? NULL : finish_reason(fin);
    gs->meta.n_completion = gs->g.n_used;
    gs->meta.n_cached = kipp_req_n_cached(gs->req);
}

/* A generation request's whole time, arrival to its last byte queued. */
static void note_duration(gen_state *gs) {
    pthread_mutex_lock(&gs->sv->mu);
    kipp_hist_add(&gs->sv->counters.duration, now_s() - gs->t_start);
    pthread_mutex_unlock(&gs->sv->mu);
}

static void gen_free(gen_state *gs) {
    if (!gs) return;
    kipp_req_release(gs->req);
    oai_gen_free(&gs->g);
    oai_request_free(&gs->rq);
    oai_buf_free(&gs->out);
    free(gs);
}

static void sse(gen_state *gs, char *json) {
    if (!json) { gs->g.oom = 1; return; }
    oai_buf_add(&gs->out, "data: ", 6);
    oai_buf_add(&gs->out, json, strlen(json));
    oai_buf_add(&gs->out, "\n\n", 2);
    free(json);
}

/* MHD content reader for streaming: hands out SSE bytes, producing more as tokens come. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    gen_state *gs = cls;
    (void)pos;
    for (;;) {
        if (gs->out_pos < gs->out.n) {
            size_t n = gs->out.n - gs->out_pos;
            if (n > max) n = max;
            memcpy(buf, gs->out.p + gs->out_pos, n);
            gs->out_pos += n;
            if (gs->out_pos == gs->out.n) gs->out_pos = gs->out.n = 0;
            return (ssize_t)n;
        }
        if (gs->done) return MHD_CONTENT_READER_END_OF_STREAM;
        int gone;
        const uint32_t tok0 = gs->n_seen;
        kipp_finish fin = pump(gs, &gone);
        if (gone) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (fin == KIPP_FINISH_ERROR || fin == KIPP_FINISH_CANCELLED) {
            char *e = oai_error_json(fin == KIPP_FINISH_ERROR ? kipp_req_error(gs->req)
                                                              : "the request was cancelled",
                                     "server_error", NULL, NULL);
            sse(gs, e);
            oai_buf_add(&gs->out, "data: [DONE]\n\n", 14);
            gs->done = 1;
            continue;
        }
        if (fin != KIPP_FINISH_NONE) oai_gen_finish(&gs->g);
        const uint32_t tok1 = gs->g.n_used < gs->n_seen ? gs->g.n_used : gs->n_seen;
        fill_meta(gs, KIPP_FINISH_NONE);
        if (gs->g.content.n || gs->g.reasoning.n || gs->first ||
            (gs->rq.logprobs && tok1 > tok0))
            sse(gs, oai_chunk_json(&gs->g, &gs->meta, gs->req, tok0, tok1 > tok0 ? tok1 : tok0,
                                   gs->first));
        gs->first = 0;
        if (fin != KIPP_FINISH_NONE) {
            fill_meta(gs, fin);
            sse(gs, oai_chunk_json(&gs->g, &gs->meta, gs->req, 0, 0, 0));
            if (gs->rq.include_usage) sse(gs, oai_usage_chunk_json(&gs->g, &gs->meta));
            oai_buf_add(&gs->out, "data: [DONE]\n\n", 14);
            gs->done = 1;
            note_duration(gs);
        }
    }
}

static void stream_free(void *cls) { gen_free(cls); }

/* Tokenizes the request's prompt (chat template or completions prompt). Returns 0 or an
 * HTTP status with the error already sent. */
static int build_prompt(kipp_server *sv, struct MHD_Connection *c, conn_state *cs, gen_state *gs,
                        int32_t **ids, size_t *n_ids, enum MHD_Result *res) {
    char err[KIPP_ERR_LEN];
    const char *text = gs->rq.prompt_text;
    size_t len = gs->rq.prompt_len;
    char *rendered = NULL;
    if (gs->rq.ep == OAI_CHAT) {
        if (kipp_chat_apply(sv->m, gs->rq.chat_body, strlen(gs->rq.chat_body), &rendered, &len,
                            err, sizeof err) != KIPP_OK) {
            *res = send_error(sv, c, cs, 400, err, "invalid_request_error", "messages", NULL);
            return 400;
        }
        text = rendered;
    }
    if (!text) { /* token ids */
        *ids = gs->rq.prompt_ids;
        *n_ids = gs->rq.n_prompt_ids;
        gs->rq.prompt_ids = NULL;
        return 0;
    }
    size_t cap = len + 16, n = 0;
    int32_t *buf = malloc(cap * sizeof *buf);
    kipp_status st = buf ? kipp_tokenize(sv->m, text, len, 1, buf, cap, &n, err, sizeof err)
                         : KIPP_ERR_NOMEM;
    free(rendered);
    if (st != KIPP_OK) {
        free(buf);
        *res = send_error(sv, c, cs, 400, st == KIPP_ERR_NOMEM ? "out of memory" : err,
                          "invalid_request_error", gs->rq.ep == OAI_CHAT ? "messages" : "prompt",
                          NULL);
        return 400;
    }
    *ids = buf;
    *n_ids = n;
    return 0;
}

static enum MHD_Result handle_generate(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                       oai_endpoint ep) {
    char msg[KIPP_ERR_LEN];
    const char *param = NULL;
    gen_state *gs = calloc(1, sizeof *gs);
    if (!gs) return send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
    gs->sv = sv;
    gs->conn = c;
    gs->first = 1;
    gs->t_start = cs->t_start;
    enum MHD_Result res;
    if (oai_parse(cs->body.p ? cs->body.p : "", cs->body.n, ep, sv->n_vocab, &gs->rq, msg,
                  sizeof msg, &param) != 0) {
        res = send_error(sv, c, cs, 400, msg, "invalid_request_error", param, NULL);
        gen_free(gs);
        return res;
    }
    if (strcmp(gs->rq.model, sv->model_name) != 0) {
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist; this server serves '%.200s'",
                 gs->rq.model, sv->model_name);
        res = send_error(sv, c, cs, 404, msg, "invalid_request_error", "model", "model_not_found");
        gen_free(gs);
        return res;
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (build_prompt(sv, c, cs, gs, &ids, &n_ids, &res) != 0) {
        gen_free(gs);
        return res;
    }
    const uint32_t max_prompt = sv->p.max_prompt_tokens ? sv->p.max_prompt_tokens : sv->n_ctx - 1;
    if (n_ids == 0 || n_ids > max_prompt) {
        if (n_ids) snprintf(msg, sizeof msg, "the prompt has %zu tokens; this server accepts at most %u",
                            n_ids, max_prompt);
        else snprintf(msg, sizeof msg, "the prompt is empty");
        free(ids);
        res = send_error(sv, c, cs, 400, msg, "invalid_request_error",
                         ep == OAI_CHAT ? "messages" : "prompt", "context_length_exceeded");
        gen_free(gs);
        return res;
    }
    kipp_req_params rp = {.prompt = ids, .n_prompt = (uint32_t)n_ids, .sampling = gs->rq.sp,
                          .ignore_eos = gs->rq.ignore_eos, .logprobs = gs->rq.logprobs,
                          .top_logprobs = gs->rq.top_logprobs};
    const uint32_t room = sv->n_ctx - (uint32_t)n_ids;
    uint64_t mt = gs->rq.max_tokens > 0 ? (uint64_t)gs->rq.max_tokens
                                        : (sv->p.default_max_tokens ? sv->p.default_max_tokens : room);
    rp.max_tokens = (uint32_t)(mt < room ? mt : room);
    gs->n_prompt = (uint32_t)n_ids;
    char err[KIPP_ERR_LEN];
    kipp_status st = oai_gen_init(&gs->g, sv->m, &gs->rq) == 0
                         ? kipp_sched_submit(sv->sched, &rp, &gs->req, err, sizeof err)
                         : KIPP_ERR_NOMEM;
    free(ids);
    if (st != KIPP_OK) {
        res = st == KIPP_ERR_BUSY
                  ? send_error(sv, c, cs, 503, err, "server_error", NULL, "overloaded")
                  : send_error(sv, c, cs, st == KIPP_ERR_INVALID_ARG ? 400 : 500,
                               st == KIPP_ERR_NOMEM ? "out of memory" : err,
                               st == KIPP_ERR_INVALID_ARG ? "invalid_request_error" : "server_error",
                               NULL, NULL);
        gen_free(gs);
        return res;
    }
    pthread_mutex_lock(&sv->mu);
    snprintf(gs->id, sizeof gs->id, "%s-%llu", ep == OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)++sv->next_id);
    pthread_mutex_unlock(&sv->mu);
    gs->meta = (oai_meta){.id = gs->id, .model = sv->model_name, .created = (long long)time(NULL),
                          .n_prompt = gs->n_prompt};
    if (gs->rq.stream) {
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, gs, stream_free);
        if (!r) {
            gen_free(gs);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        res = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        cs->responded = 1;
        count(sv, cs->endpoint, 200);
        return res;
    }
    /* not streamed: wait here for the whole completion */
    kipp_finish fin;
    int gone;
    while ((fin = pump(gs, &gone)) == KIPP_FINISH_NONE) {}
    if (gone) { /* nobody to answer: close the connection */
        gen_free(gs);
        cs->responded = 1;
        return MHD_NO;
    }
    if (fin == KIPP_FINISH_ERROR || fin == KIPP_FINISH_CANCELLED) {
        res = send_error(sv, c, cs, 500,
                         fin == KIPP_FINISH_ERROR ? kipp_req_error(gs->req) : "the request was cancelled",
                         "server_error", NULL, NULL);
        gen_free(gs);
        return res;
    }
    oai_gen_finish(&gs->g);
    fill_meta(gs, fin);
    res = send_json(sv, c, cs, 200, oai_response_json(&gs->g, &gs->meta, gs->req));
    note_duration(gs);
    gen_free(gs);
    return res;
}

/* ---- small endpoints -------------------------------------------------------------------- */

static enum MHD_Result handle_models(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    return send_json(sv, c, cs, 200, oai_models_json(sv->model_name));
}

static int key_ok(const kipp_server *sv, struct MHD_Connection *c) {
    if (!sv->api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return 0;
    h += 7;
    const size_t lk = strlen(sv->api_key), lh = strlen(h);
    /* constant time in the key's content: every byte is compared whatever differs */
    unsigned char diff = (unsigned char)(lk != lh);
    for (size_t i = 0; i < lk; i++) diff |= (unsigned char)(sv->api_key[i] ^ (i < lh ? h[i] : 0));
    return diff == 0;
}

/* ---- the access handler ----------------------------------------------------------------- */

static int route(const char *url, int *post) {
    *post = 1;
    if (!strcmp(url, "/v1/chat/completions")) return M_EP_CHAT;
    if (!strcmp(url, "/v1/completions")) return M_EP_COMPLETIONS;
    *post = 0;
    if (!strcmp(url, "/v1/models")) return M_EP_MODELS;
    if (!strcmp(url, "/health")) return M_EP_HEALTH;
    if (!strcmp(url, "/metrics")) return M_EP_METRICS;
    return M_EP_OTHER;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    kipp_server *sv = cls;
    (void)version;
    conn_state *cs = *con_cls;
    int is_post;
    if (!cs) { /* first call: headers only */
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        cs->t_start = now_s();
        cs->endpoint = route(url, &is_post);
        if (cs->endpoint == M_EP_OTHER)
            return send_error(sv, c, cs, 404, "no such endpoint", "not_found_error", NULL, NULL);
        const int want_post = is_post;
        if (strcmp(method, want_post ? "POST" : "GET") != 0)
            return send_error(sv, c, cs, 405,
                              want_post ? "this endpoint takes POST" : "this endpoint takes GET",
                              "invalid_request_error", NULL, NULL);
        if (cs->endpoint != M_EP_HEALTH && !key_ok(sv, c))
            return send_error(sv, c, cs, 401, "missing or incorrect API key",
                              "authentication_error", NULL, "invalid_api_key");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > sv->p.max_body) {
            char msg[128];
            snprintf(msg, sizeof msg, "the body is larger than the limit of %zu bytes", sv->p.max_body);
            return send_error(sv, c, cs, 413, msg, "invalid_request_error", NULL, "request_too_large");
        }
        return MHD_YES;
    }
    if (cs->responded) { /* an early error: discard the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (cs->body.n + *upload_size > sv->p.max_body) cs->too_large = 1;
        else if (oai_buf_add(&cs->body, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cs->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the body is larger than the limit of %zu bytes", sv->p.max_body);
        return send_error(sv, c, cs, 413, msg, "invalid_request_error", NULL, "request_too_large");
    }
    const int ready = atomic_load(&sv->ready);
    switch (cs->endpoint) {
    case M_EP_HEALTH:
        return send_body(sv, c, cs, ready ? 200 : 503,
                         strdup(ready ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}"),
                         "application/json", ready ? NULL : "1");
    case M_EP_METRICS: {
        kipp_sched_stats st = {0};
        if (ready) kipp_sched_get_stats(sv->sched, &st);
        pthread_mutex_lock(&sv->mu);
        char *text = kipp_metrics_text(&sv->counters, &st, ready);
        pthread_mutex_unlock(&sv->mu);
        return send_body(sv, c, cs, 200, text, "text/plain; version=0.0.4", NULL);
    }
    default: break;
    }
    if (!ready)
        return send_error(sv, c, cs, 503, "the model is still loading", "server_error", NULL,
                          "loading");
    if (cs->endpoint == M_EP_MODELS) return handle_models(sv, c, cs);
    return handle_generate(sv, c, cs, cs->endpoint == M_EP_CHAT ? OAI_CHAT : OAI_COMPLETIONS);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    (void)toe;
    conn_state *cs = *con_cls;
    if (!cs) return;
    oai_buf_free(&cs->body);
    free(cs);
    *con_cls = NULL;
}

/* ---- life cycle ------------------------------------------------------------------------- */

/* libmicrohttpd's own messages (a client that left mid-response, a refused connection),
 * marked as such on stderr. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = 0;
    fprintf(stderr, "kipp-server: http: %s\n", line);
}

kipp_status kipp_server_start(const kipp_server_params *p, kipp_server **out, char *err,
                              size_t err_len) {
    *out = NULL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char port_s[8];
    snprintf(port_s, sizeof port_s, "%u", p->port);
    const char *host = p->host ? p->host : "127.0.0.1";
    int gai = getaddrinfo(host, port_s, &hints, &ai);
    if (gai != 0) {
        snprintf(err, err_len, "--host '%s' is not a numeric IPv4 or IPv6 address: %s", host,
                 gai_strerror(gai));
        return KIPP_ERR_INVALID_ARG;
    }
    kipp_server *sv = calloc(1, sizeof *sv);
    if (!sv) {
        freeaddrinfo(ai);
        snprintf(err, err_len, "out of memory");
        return KIPP_ERR_NOMEM;
    }
    sv->p = *p;
    sv->model_name = strdup(p->model_name ? p->model_name : "kipp");
    sv->api_key = p->api_key ? strdup(p->api_key) : NULL;
    pthread_mutex_init(&sv->mu, NULL);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    sv->d = MHD_start_daemon(flags, p->port, NULL, NULL, on_request, sv,
                             MHD_OPTION_EXTERNAL_LOGGER, mhd_log, sv,
                             MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                             MHD_OPTION_CONNECTION_LIMIT,
                             (unsigned)(p->max_connections ? p->max_connections : 256),
                             MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300,
                             MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!sv->d) {
        snprintf(err, err_len, "cannot listen on %s port %u (in use, or not an address of this host)",
                 host, p->port);
        kipp_server_free(sv);
        return KIPP_ERR_IO;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(sv->d, MHD_DAEMON_INFO_BIND_PORT);
    sv->port = di ? di->port : p->port;
    *out = sv;
    return KIPP_OK;
}

uint16_t kipp_server_port(const kipp_server *sv) { return sv->port; }

void kipp_server_attach(kipp_server *sv, kipp_model *m, kipp_sched *sched) {
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    sv->m = m;
    sv->sched = sched;
    sv->n_vocab = info.n_vocab;
    sv->n_ctx = kipp_sched_n_ctx(sched);
    atomic_store(&sv->ready, 1);
}

void kipp_server_shutdown(kipp_server *sv) {
    if (sv) atomic_store(&sv->stopping, 1);
}

void kipp_server_free(kipp_server *sv) {
    if (!sv) return;
    atomic_store(&sv->stopping, 1);
    if (sv->d) MHD_stop_daemon(sv->d);
    pthread_mutex_destroy(&sv->mu);
    free(sv->model_name);
    free(sv->api_key);
    free(sv);
}
