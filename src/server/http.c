/* http.c — kipp-server's HTTP layer on libmicrohttpd (a thread per connection, so a handler
 * may block while its request generates). Routes, strict RFC 9112 framing (every header
 * line, before any body is read), Host/Origin/Content-Type rules, the API
 * key (constant-time compare), the body limit (413 before the body is read when
 * Content-Length says so), JSON errors, SSE streaming through a content-reader callback,
 * disconnect detection (a reset or error on the socket cancels at once; a FIN is probed
 * with a harmless write, so a half-closed client still gets its answer), a bound on
 * requests being parsed and tokenized at once, a watchdog thread that enforces the read
 * deadline MHD's per-byte idle timeout cannot and closes responses the client stopped
 * taking (--write-timeout), back-pressure (a token window per request, a small send buffer
 * for streams), large non-streamed bodies sent piece by piece, and drain on shutdown. Not
 * here: the OpenAI field mapping (openai_req.c / openai_gen.c) and scheduling
 * (src/engine/sched.c). */
#include "server/server.h"

#include "server/embeddings.h"
#include "server/metrics.h"
#include "server/structured.h"
#include "server/webui.h"
#include "server/openai.h"

#include <jansson.h>

#include <arpa/inet.h>
#include <errno.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received */
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <linux/sockios.h> /* SIOCOUTQ */
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

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

/* A field outside the OpenAI API (and Kipp's extensions) is ignored; its name is logged the
 * first time (up to 32 names). */
static void note_ignored_field(kipp_server *sv, const char *name) {
    pthread_mutex_lock(&sv->mu);
    int seen = sv->n_ignored == 32;
    for (int i = 0; i < sv->n_ignored && !seen; i++) seen = !strcmp(sv->ignored[i], name);
    if (!seen) snprintf(sv->ignored[sv->n_ignored++], sizeof sv->ignored[0], "%s", name);
    pthread_mutex_unlock(&sv->mu);
    if (!seen)
        fprintf(stderr, "kipp-server: ignoring the request field '%s' (not part of the OpenAI "
                        "API; said once)\n", name);
}

/* A request's 'model' names what this server serves: its name or an alias ("*": any). */
static int model_served(const kipp_server *sv, const char *name) {
    if (strcmp(name, sv->model_name) == 0) return 1;
    for (size_t i = 0; i < sv->p.n_model_aliases; i++)
        if (!strcmp(sv->p.model_aliases[i], "*") || !strcmp(sv->p.model_aliases[i], name)) return 1;
    return 0;
}

typedef struct {
    int endpoint; /* M_EP_* */
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

/* One choice of a generation (a request with n > 1 has n, sampled with seed + i). */
typedef struct {
    oai_gen g;
    kipp_req *req;
    uint32_t n_seen, tok0; /* tokens taken; where the last pump began */
    int first, done;
} gen_choice;

/* A generation in progress: shared by the blocking non-stream path and the SSE reader. */
typedef struct {
    kipp_server *sv;
    struct MHD_Connection *conn;
    oai_request rq;
    gen_choice *ch; /* [n_ch] */
    uint32_t n_ch, turn; /* turn: the choice the stream reader serves next */
    oai_meta meta;
    char id[48];
    uint32_t n_prompt;
    int done;
    int fd, http11, probed; /* the socket; 1xx allowed; a FIN was answered with a probe */
    conn_state *cs; /* its connection's state (alive while MHD calls the handler or reader) */
    kipp_buf out; /* SSE (or a piece of a large body) not yet handed to MHD */
    size_t out_pos;
    double t_start, t_checked;
    /* a non-streamed body sent piece by piece (KIPP_SERVER_INLINE_BODY) */
    oai_gen *gens[OAI_MAX_N];
    kipp_req *reqs[OAI_MAX_N];
    const char *fins[OAI_MAX_N];
    oai_body body;
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

/* What every response gets: CORS for an allowed cross-origin caller, and Connection: close
 * while draining (the client should reconnect elsewhere). */
static void common_headers(kipp_server *sv, const conn_state *cs, struct MHD_Response *r) {
    if (cs->cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", cs->cors);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    if (cs->close || atomic_load(&sv->draining)) MHD_add_response_header(r, "Connection", "close");
    MHD_add_response_header(r, "X-Request-Id", cs->rid);
}

static enum MHD_Result send_body(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                 int status, char *body, const char *ctype, const char *retry) {
    if (!body) body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    struct MHD_Response *r = MHD_create_response_from_buffer(body ? strlen(body) : 0, body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) { free(body); return MHD_NO; }
    if (ctype) MHD_add_response_header(r, "Content-Type", ctype);
    if (retry) MHD_add_response_header(r, "Retry-After", retry);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    common_headers(sv, cs, r);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    cs->responded = 1;
    cs->status = status;
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

static enum MHD_Result send_too_large(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    char msg[128];
    snprintf(msg, sizeof msg, "the body is larger than the limit of %zu bytes", sv->p.max_body);
    return send_error(sv, c, cs, 413, msg, "invalid_request_error", NULL, "request_too_large");
}

/* ---- the client is gone? ---------------------------------------------------------------- */

enum { PEER_OK, PEER_GONE, PEER_FIN };

/* PEER_GONE: a reset, an error, or both directions closed; PEER_FIN: the peer sent FIN,
 * which is a half-close (it still reads) or a close (it does not): only a write can tell,
 * as a closed socket answers it with a reset. Costs one poll, no read. */
static int peer_state(int fd) {
    if (fd < 0) return PEER_GONE;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 0) <= 0) return PEER_OK;
    if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return PEER_GONE;
    if (p.revents & POLLIN) {
        char b;
        const ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) return PEER_FIN;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return PEER_GONE;
    }
    return PEER_OK; /* alive, or a pipelined next request is waiting */
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* ---- generation ------------------------------------------------------------------------- */

/* "tool_calls" when the reply made calls and was not cut short (OpenAI's rule) */
static const char *finish_reason(const gen_choice *gc, kipp_finish f) {
    return f == KIPP_FINISH_LENGTH ? "length" : gc->g.n_calls ? "tool_calls" : "stop";
}

static void cancel_all(gen_state *gs) {
    for (uint32_t i = 0; i < gs->n_ch; i++)
        if (gs->ch[i].req) kipp_req_cancel(gs->ch[i].req);
}

/* Waits for the next choice with new tokens (or finished), round robin over the choices
 * still running, and pulls its new tokens through the text pipeline; *which is that
 * choice and gc->tok0 the token it began at. Waiting on all choices at once matters: a
 * choice still queued must not hold up its siblings, which the window pauses until their
 * tokens are taken. Returns the finish state (KIPP_FINISH_NONE while running); *gone is
 * set when the client left. When the peer sent FIN, the first time: a streaming request
 * returns KIPP_FINISH_NONE with *which NULL and an SSE comment in gs->out (the write that
 * tells a closed socket from a half-closed one); a non-streaming HTTP/1.1 one sends "100
 * Continue" (which clients skip) for the same reason. After the shutdown deadline
 * (kipp_server_shutdown) the request ends at once as "length". */
static kipp_finish pump(gen_state *gs, gen_choice **which, int *gone) {
    kipp_finish fin = KIPP_FINISH_NONE;
    *gone = 0;
    *which = NULL;
    kipp_req *rs[OAI_MAX_N];
    uint32_t have[OAI_MAX_N], n_live = 0;
    gen_choice *map[OAI_MAX_N];
    for (uint32_t k = 0; k < gs->n_ch; k++) {
        gen_choice *x = &gs->ch[(gs->turn + k) % gs->n_ch];
        if (x->done) continue;
        rs[n_live] = x->req, have[n_live] = x->n_seen, map[n_live++] = x;
    }
    if (n_live == 0) return KIPP_FINISH_STOP; /* callers never ask then */
    for (;;) {
        int k; /* one choice waits on its own request (a broadcast per step wakes wait_any) */
        if (n_live == 1) {
            kipp_finish f;
            k = kipp_req_wait(rs[0], have[0], WAIT_SLICE_MS, &f) > have[0] || f != KIPP_FINISH_NONE ? 0 : -1;
        } else {
            k = kipp_req_wait_any(rs, have, n_live, 0, WAIT_SLICE_MS);
        }
        /* the socket is looked at every WAIT_SLICE_MS even while tokens flow: a fast model
         * never leaves a wait idle long enough otherwise */
        const double t = now_s();
        if (t - gs->t_checked >= WAIT_SLICE_MS * 1e-3 || k < 0) {
            gs->t_checked = t;
            const int ps = peer_state(gs->fd);
            if (ps == PEER_GONE) {
                cancel_all(gs);
                *gone = 1;
                return KIPP_FINISH_CANCELLED;
            }
            if (ps == PEER_FIN && !gs->probed) {
                gs->probed = 1;
                if (gs->rq.stream) {
                    kipp_buf_put(&gs->out, ": probe\n\n", 10);
                    return KIPP_FINISH_NONE;
                }
                static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
                if (gs->http11 && send(gs->fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
                    errno != EAGAIN && errno != EWOULDBLOCK) {
                    cancel_all(gs);
                    *gone = 1;
                    return KIPP_FINISH_CANCELLED;
                }
            }
            if (atomic_load(&gs->sv->stopping)) {
                gen_choice *gc = k >= 0 ? map[k] : map[0];
                kipp_finish f;
                kipp_req_wait(gc->req, gc->n_seen, 0, &f);
                if (f == KIPP_FINISH_NONE) {
                    cancel_all(gs); /* the shutdown deadline: end it as cut short */
                    gc->tok0 = gc->n_seen;
                    gs->turn = (uint32_t)(gc - gs->ch + 1) % gs->n_ch;
                    *which = gc;
                    return KIPP_FINISH_LENGTH;
                }
            }
        }
        if (k < 0) continue;
        gen_choice *gc = map[k];
        gs->turn = (uint32_t)(gc - gs->ch + 1) % gs->n_ch;
        *which = gc;
        gc->tok0 = gc->n_seen;
        const uint32_t n = kipp_req_wait(gc->req, gc->n_seen, 0, &fin);
        for (; gc->n_seen < n; gc->n_seen++)
            if (oai_gen_push(&gc->g, kipp_req_token(gc->req, gc->n_seen)))
                kipp_req_stop(gc->req); /* a stop string: the text is complete */
        /* a stop string ends the text even when the engine also reached max_tokens */
        if (gc->g.stopped && fin != KIPP_FINISH_ERROR) fin = KIPP_FINISH_STOP;
        /* the engine stopping (kipp_sched_stop) after the deadline also ends as cut */
        if (fin == KIPP_FINISH_CANCELLED && atomic_load(&gs->sv->stopping)) fin = KIPP_FINISH_LENGTH;
        return fin;
    }
}

/* The meta for a chunk of choice gc (its finish reason) and the usage of every choice. */
static void fill_meta(gen_state *gs, gen_choice *gc, kipp_finish fin) {
    gs->meta.finish_reason = fin == KIPP_FINISH_NONE ? NULL : finish_reason(gc, fin);
    gs->meta.n_completion = 0;
    gs->meta.spec_drafted = gs->meta.spec_accepted = 0;
    for (uint32_t i = 0; i < gs->n_ch; i++) {
        uint64_t d, a;
        gs->meta.n_completion += gs->ch[i].g.n_used;
        kipp_req_spec(gs->ch[i].req, &d, &a);
        gs->meta.spec_drafted += d, gs->meta.spec_accepted += a;
    }
    gs->meta.n_cached = kipp_req_n_cached(gs->ch[0].req);
    conn_state *cs = gs->cs; /* for the request's log line */
    cs->gen = 1;
    cs->n_prompt = gs->meta.n_prompt;
    cs->n_cached = gs->meta.n_cached;
    cs->n_completion = gs->meta.n_completion;
    cs->finish = gs->meta.finish_reason;
    kipp_req_times(gs->ch[0].req, &cs->queue_s, &cs->ttft_s);
}

/* A generation request's whole time, arrival to its last byte queued. */
static void note_duration(gen_state *gs) {
    pthread_mutex_lock(&gs->sv->mu);
    kipp_hist_add(&gs->sv->counters.duration, now_s() - gs->t_start);
    pthread_mutex_unlock(&gs->sv->mu);
}

/* The request counts in sv->active (what the drain waits for) until on_completed, after
 * its answer's last byte went out: a count dropped when the answer was only queued let the
 * drain stop libmicrohttpd before a non-streamed answer was sent (the client saw the
 * connection close with no response). */
static void hold_active(kipp_server *sv, conn_state *cs) {
    if (cs->active) return;
    cs->active = 1;
    atomic_fetch_add(&sv->active, 1);
}

static void gen_free(gen_state *gs) {
    if (!gs) return;
    for (uint32_t i = 0; i < gs->n_ch; i++) {
        kipp_req_release(gs->ch[i].req);
        oai_gen_free(&gs->ch[i].g);
    }
    free(gs->ch);
    oai_request_free(&gs->rq);
    kipp_buf_free(&gs->out);
    free(gs);
}

static void sse(gen_state *gs, char *json) {
    if (!json) { gs->ch[0].g.oom = 1; return; }
    kipp_buf_put(&gs->out, "data: ", 6);
    kipp_buf_put(&gs->out, json, strlen(json));
    kipp_buf_put(&gs->out, "\n\n", 2);
    free(json);
}

/* MHD content reader for streaming: hands out SSE bytes, producing more as tokens come. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    gen_state *gs = cls;
    (void)pos;
    for (;;) {
        if (gs->out_pos < gs->out.len) {
            size_t n = gs->out.len - gs->out_pos;
            if (n > max) n = max;
            memcpy(buf, gs->out.data + gs->out_pos, n);
            gs->out_pos += n;
            if (gs->out_pos == gs->out.len) gs->out_pos = gs->out.len = 0;
            return (ssize_t)n;
        }
        if (gs->done) return MHD_CONTENT_READER_END_OF_STREAM;
        int gone;
        gen_choice *gc; /* the next choice with news, round robin */
        kipp_finish fin = pump(gs, &gc, &gone);
        if (gone) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (!gc) continue; /* the probe is in gs->out */
        const uint32_t tok0 = gc->tok0;
        if (fin == KIPP_FINISH_ERROR || fin == KIPP_FINISH_CANCELLED) {
            char *e = oai_error_json(fin == KIPP_FINISH_ERROR ? kipp_req_error(gc->req)
                                                              : "the request was cancelled",
                                     "server_error", NULL, NULL);
            cancel_all(gs);
            sse(gs, e);
            kipp_buf_put(&gs->out, "data: [DONE]\n\n", 14);
            gs->done = 1;
            continue;
        }
        if (fin != KIPP_FINISH_NONE) oai_gen_finish(&gc->g);
        const uint32_t tok1 = gc->g.n_used < gc->n_seen ? gc->g.n_used : gc->n_seen;
        fill_meta(gs, gc, KIPP_FINISH_NONE);
        if (gc->g.content.len || gc->g.reasoning.len || gc->first || (gs->rq.logprobs && tok1 > tok0))
            sse(gs, oai_chunk_json(&gc->g, &gs->meta, gc->req, tok0, tok1 > tok0 ? tok1 : tok0,
                                   gc->first));
        for (char *tj; (tj = oai_tool_chunk_json(&gc->g, &gs->meta));) sse(gs, tj);
        gc->first = 0;
        if (fin != KIPP_FINISH_NONE) {
            gc->done = 1;
            fill_meta(gs, gc, fin);
            sse(gs, oai_chunk_json(&gc->g, &gs->meta, gc->req, 0, 0, 0));
            int all = 1;
            for (uint32_t i = 0; i < gs->n_ch; i++) all &= gs->ch[i].done;
            if (all) {
                if (gs->rq.include_usage) sse(gs, oai_usage_chunk_json(&gc->g, &gs->meta));
                kipp_buf_put(&gs->out, "data: [DONE]\n\n", 14);
                gs->done = 1;
                note_duration(gs);
            }
        }
    }
}

static void stream_free(void *cls) { gen_free(cls); }

/* MHD content reader for a large non-streamed body: its pieces as the client takes them. */
static ssize_t body_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    gen_state *gs = cls;
    (void)pos;
    while (gs->out_pos == gs->out.len) {
        gs->out_pos = gs->out.len = 0;
        const int more = oai_body_next(&gs->body, &gs->out);
        if (more < 0) return MHD_CONTENT_READER_END_WITH_ERROR; /* out of memory: cut */
        if (more == 0) return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = gs->out.len - gs->out_pos;
    if (n > max) n = max;
    memcpy(buf, gs->out.data + gs->out_pos, n);
    gs->out_pos += n;
    return (ssize_t)n;
}

/* A large body (and a stream of n > 1 choices, below) is bulk work: serializing it (a count pass, then every piece again as the
 * client reads) takes a core for about a second per 14 MB, and on a machine whose cores run
 * the forward pass it slowed every other request's steps beside it (the robustness attack's
 * big reply: its plain probes' slowest came as it was sent). Its connection thread runs at
 * nice +BULK_NICE (Linux: nice is per thread), so it takes the CPU the forward pass leaves;
 * an unprivileged thread cannot raise its priority again, so the connection closes after
 * this response. */
#define BULK_NICE 10

/* A request body of this many bytes is bulk work too: receiving and parsing it, and
 * rendering and tokenizing its prompt when that fits the context, cost CPU in proportion to
 * its size, so its connection thread drops to nice +BULK_NICE from the moment that much of
 * it is in. A chat request is a few KB. */
#define BULK_BODY (256u << 10)

static void bulk_priority(conn_state *cs) {
#ifdef __linux__
    errno = 0;
    const int cur = getpriority(PRIO_PROCESS, 0); /* Linux: 0 is this thread (as the mask thread's) */
    if (errno == 0 && cur < BULK_NICE) (void)setpriority(PRIO_PROCESS, 0, BULK_NICE);
#endif
    cs->close = 1;
}

/* Answers a finished non-streamed generation. A body of at most KIPP_SERVER_INLINE_BODY
 * bytes is built whole and sent; a larger one (n choices with logprobs) is never whole in
 * memory: a first pass counts its bytes (Content-Length), then its pieces are made again
 * as the client reads them (body_reader), so a client that stops reading holds one piece. */
static enum MHD_Result send_body_pieces(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                        gen_state *gs) {
    oai_body_init(&gs->body, gs->gens, gs->reqs, gs->fins, gs->n_ch, &gs->meta);
    kipp_buf first = {0};
    int more;
    while ((more = oai_body_next(&gs->body, &first)) > 0 && first.len <= KIPP_SERVER_INLINE_BODY) {}
    enum MHD_Result res;
    if (more == 0) {
        res = send_json(sv, c, cs, 200, kipp_buf_take(&first, NULL));
        note_duration(gs);
        gen_free(gs);
        return res;
    }
    bulk_priority(cs);
    uint64_t total = first.len;
    kipp_buf_free(&first);
    kipp_buf piece = {0};
    while (more > 0) {
        piece.len = 0;
        more = oai_body_next(&gs->body, &piece);
        total += piece.len;
    }
    kipp_buf_free(&piece);
    struct MHD_Response *r = NULL;
    if (more == 0) {
        oai_body_init(&gs->body, gs->gens, gs->reqs, gs->fins, gs->n_ch, &gs->meta);
        gs->out.len = gs->out_pos = 0;
        r = MHD_create_response_from_callback(total, 16384, body_reader, gs, stream_free);
    }
    if (!r) {
        res = send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
        gen_free(gs);
        return res;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    common_headers(sv, cs, r);
    res = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    cs->responded = 1;
    cs->status = 200;
    count(sv, cs->endpoint, 200);
    note_duration(gs);
    return res;
}

/* Tokenizes the request's prompt (chat template or completions prompt). Returns 0 or an
 * HTTP status with the error already sent. */
static int build_prompt(kipp_server *sv, struct MHD_Connection *c, conn_state *cs, gen_state *gs,
                        int32_t **ids, size_t *n_ids, enum MHD_Result *res) {
    char err[KIPP_ERR_LEN];
    const char *text = gs->rq.prompt_text;
    size_t len = gs->rq.prompt_len;
    char *rendered = NULL;
    size_t *spans = NULL, n_spans = 0;
    /* special-token text the client sent: parsed (<|im_end|> is the token) or plain text */
    const int parse = gs->rq.content_special >= 0 ? gs->rq.content_special : !sv->p.content_text;
    const uint32_t max_prompt = sv->p.max_prompt_tokens ? sv->p.max_prompt_tokens : sv->n_ctx - 1;
    const uint64_t max_bytes = (uint64_t)BYTES_PER_TOKEN * max_prompt + 4096;
    int sized = text != NULL, floor_only = 0; /* len is the prompt's bytes (or a floor on them) */
    if (gs->rq.ep == OAI_CHAT && gs->rq.verbatim_bytes > max_bytes) {
        len = gs->rq.verbatim_bytes; /* the rendered prompt holds at least these: not rendered */
        sized = floor_only = 1;
    } else if (gs->rq.ep == OAI_CHAT) {
        /* the request's own text is marked only when it is to be read as plain text */
        if (kipp_chat_apply_spans(sv->m, gs->rq.chat_body, strlen(gs->rq.chat_body), &rendered,
                                  &len, parse ? NULL : &spans, parse ? NULL : &n_spans, err,
                                  sizeof err) != KIPP_OK) {
            *res = send_error(sv, c, cs, 400, err, "invalid_request_error", "messages", NULL);
            return 400;
        }
        text = rendered;
        sized = 1;
    }
    if (sized && len > max_bytes) { /* far too long to fit: not worth tokenizing */
        char msg[256];
        snprintf(msg, sizeof msg,
                 "the prompt is %s%zu bytes; this server accepts at most %u tokens and refuses "
                 "prompts over %llu bytes without tokenizing them",
                 floor_only ? "at least " : "", len, max_prompt, (unsigned long long)max_bytes);
        free(rendered);
        free(spans);
        *res = send_error(sv, c, cs, 400, msg, "invalid_request_error",
                          gs->rq.ep == OAI_CHAT ? "messages" : "prompt", "context_length_exceeded");
        return 400;
    }
    if (!text) { /* token ids */
        *ids = gs->rq.prompt_ids;
        *n_ids = gs->rq.n_prompt_ids;
        gs->rq.prompt_ids = NULL;
        return 0;
    }
    /* exactly sized: NFC can make more tokens than the text has bytes */
    size_t n = 0;
    int32_t *buf = NULL;
    kipp_status st =
        gs->rq.ep == OAI_CHAT && !parse
            ? kipp_tokenize_spans(sv->m, text, len, spans, n_spans, &buf, &n, err, sizeof err)
            : kipp_tokenize_alloc(sv->m, text, len, parse, &buf, &n, err, sizeof err);
    free(rendered);
    free(spans);
    if (st != KIPP_OK) {
        free(buf);
        const int oom = st == KIPP_ERR_NOMEM;
        *res = send_error(sv, c, cs, oom ? 500 : 400, oom ? "out of memory tokenizing the prompt" : err,
                          oom ? "server_error" : "invalid_request_error",
                          gs->rq.ep == OAI_CHAT ? "messages" : "prompt", NULL);
        return oom ? 500 : 400;
    }
    *ids = buf;
    *n_ids = n;
    return 0;
}

/* Takes n units of b, waiting up to PARSE_WAIT_S for room (a taker of more than b->cap
 * never gets them). 0: taken; -1: not. */
static int budget_take(kipp_server *sv, budget *b, size_t n) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += PARSE_WAIT_S;
    int rc = 0;
    pthread_mutex_lock(&sv->mu);
    while (b->used + n > b->cap && rc == 0)
        if (pthread_cond_timedwait(&b->cv, &sv->mu, &dl) == ETIMEDOUT) rc = -1;
    if (rc == 0) b->used += n;
    pthread_mutex_unlock(&sv->mu);
    return rc;
}

static void budget_give(kipp_server *sv, budget *b, size_t n) {
    pthread_mutex_lock(&sv->mu);
    b->used -= n;
    pthread_cond_broadcast(&b->cv); /* takers want different amounts: wake them all */
    pthread_mutex_unlock(&sv->mu);
}

/* At most --max-parsing requests are parsed, rendered and tokenized at once (their memory
 * is many times the body's); the others wait up to PARSE_WAIT_S. 0: a slot; -1: none. */
static int parse_enter(kipp_server *sv) { return budget_take(sv, &sv->parsing, 1); }
static void parse_leave(kipp_server *sv) { budget_give(sv, &sv->parsing, 1); }

/* Request bodies held in memory are bounded too (32 clients each sending a maximal body at
 * once must not cost 32 bodies): a request reserves its whole Content-Length (or --max-body
 * when it is chunked) before its first byte is stored, so no two requests can each hold
 * part of the budget and wait for the other. While it waits its connection is not read
 * (TCP pushes back on the client); after PARSE_WAIT_S it gets 503. 0: reserved; -1: not. */
static int body_reserve(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    size_t need = sv->p.max_body;
    if (cl) {
        unsigned long long v = strtoull(cl, NULL, 10);
        if (v < need) need = (size_t)v;
    }
    if (budget_take(sv, &sv->bodies, need) != 0) return -1;
    cs->body_reserved = need;
    return 0;
}

static void body_bytes_free(void *arg) { kipp_buf_free(&((conn_state *)arg)->body); }

static void body_release(kipp_server *sv, conn_state *cs) {
    kipp_buf_free(&cs->body);
    if (!cs->body_reserved) return;
    budget_give(sv, &sv->bodies, cs->body_reserved);
    cs->body_reserved = 0;
}

static enum MHD_Result handle_generate(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                       oai_endpoint ep) {
    char msg[KIPP_ERR_LEN];
    const char *param = NULL;
    gen_state *gs = calloc(1, sizeof *gs);
    if (!gs) return send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
    hold_active(sv, cs); /* before the draining check: drain waits for it */
    gs->sv = sv;
    gs->cs = cs;
    gs->conn = c;
    gs->fd = conn_fd(c);
    gs->http11 = cs->http11;
    gs->t_start = cs->t_start;
    enum MHD_Result res;
    if (atomic_load(&sv->draining)) {
        res = send_error(sv, c, cs, 503, "the server is shutting down", "server_error", NULL,
                         "shutting_down");
        gen_free(gs);
        return res;
    }
    if (parse_enter(sv) != 0) {
        res = send_error(sv, c, cs, 503, "too many requests are being parsed; retry", "server_error",
                         NULL, "overloaded");
        gen_free(gs);
        return res;
    }
    /* the body's bytes go once parsed into a tree; its reservation stays until the request
     * is parsed (the tree and its copies are what the reservation now stands for) */
    if (oai_parse_freeing(cs->body.data ? cs->body.data : "", cs->body.len, ep, sv->n_vocab, &gs->rq, msg,
                          sizeof msg, &param, body_bytes_free, cs) != 0) {
        parse_leave(sv);
        res = send_error(sv, c, cs, 400, msg, "invalid_request_error", param, NULL);
        gen_free(gs);
        return res;
    }
    body_release(sv, cs); /* parsed: the body is not needed any more */
    if (oai_apply_tool_choice(&gs->rq, sv->m) != 0) {
        parse_leave(sv);
        res = send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
        gen_free(gs);
        return res;
    }
    if (gs->rq.unknown_field[0]) note_ignored_field(sv, gs->rq.unknown_field);
    if (!model_served(sv, gs->rq.model)) {
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist; this server serves '%.200s'%s",
                 gs->rq.model, sv->model_name,
                 sv->p.n_model_aliases ? " and its aliases (GET /v1/models lists them)" : "");
        parse_leave(sv);
        res = send_error(sv, c, cs, 404, msg, "invalid_request_error", "model", "model_not_found");
        gen_free(gs);
        return res;
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    const int bad = build_prompt(sv, c, cs, gs, &ids, &n_ids, &res);
    parse_leave(sv);
    if (bad) {
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
    const char *err_param = NULL;
    kipp_status st = KIPP_OK;
    gs->n_ch = gs->rq.n ? gs->rq.n : 1;
    if (!(gs->ch = calloc(gs->n_ch, sizeof *gs->ch))) st = KIPP_ERR_NOMEM, gs->n_ch = 0;
    if (gs->n_ch > 1) { /* siblings: one prefill, then forks of its KV */
        pthread_mutex_lock(&sv->mu);
        rp.group = ++sv->next_group;
        pthread_mutex_unlock(&sv->mu);
    }
    kipp_matcher **ms = NULL; /* constrained decoding: a bad grammar is the client's 400 */
    if (st == KIPP_OK && gs->rq.grammar) {
        if (!sv->structured || !(ms = calloc(gs->n_ch, sizeof *ms))) st = KIPP_ERR_NOMEM;
        else st = oai_structured_matchers(sv->structured, gs->rq.grammar, gs->rq.grammar_len, gs->n_ch, ms, err,
                                          sizeof err);
        if (st != KIPP_OK) err_param = gs->rq.grammar_param;
    }
    for (uint32_t i = 0; i < gs->n_ch && st == KIPP_OK; i++) {
        gen_choice *gc = &gs->ch[i];
        gc->first = 1;
        rp.sampling.seed = gs->rq.sp.seed + i;
        rp.sibling = i;
        rp.window = KIPP_SERVER_TOKEN_WINDOW;
        rp.matcher = ms ? ms[i] : NULL;
        if (ms) ms[i] = NULL; /* the submit's now (or freed below if it fails) */
        rp.think = (kipp_think_params){0};
        /* with thinking on, a reply that opens with <think> reasons freely up to </think>, and
         * the grammar applies after it; any other reply is constrained from its first token.
         * The reasoning of a constrained reply is bounded (by default half of max_tokens) so
         * that the grammar gets its turn (the template decides whether the model thinks:
         * Instruct-2507 and Qwen2.5 never do, Thinking-2507's prompt already opened the <think>) */
        kipp_chat_thinking th = KIPP_CHAT_THINK_OFF;
        if (gs->rq.ep == OAI_CHAT && (gs->rq.grammar || gs->rq.max_reasoning_tokens >= 0) &&
            kipp_chat_template_info(sv->m, gs->rq.enable_thinking, NULL, &th, NULL, 0) == KIPP_OK &&
            (th == KIPP_CHAT_THINK_BY_TAG || th == KIPP_CHAT_THINK_IN_PROMPT))
            rp.think = (kipp_think_params){
                .on = 1, .in_prompt = th == KIPP_CHAT_THINK_IN_PROMPT,
                .max_reasoning_tokens = gs->rq.max_reasoning_tokens >= 0 ? (uint32_t)gs->rq.max_reasoning_tokens
                                                                         : rp.max_tokens / 2};
        st = oai_gen_init(&gc->g, sv->m, &gs->rq) == 0 ? kipp_sched_submit(sv->sched, &rp, &gc->req, err, sizeof err)
                                                     : KIPP_ERR_NOMEM;
        gc->g.index = i;
        if (st != KIPP_OK) kipp_matcher_free(rp.matcher); /* still ours after a failed submit */
    }
    for (uint32_t i = 0; ms && i < gs->n_ch; i++) kipp_matcher_free(ms[i]); /* those not handed over */
    free(ms);
    free(ids);
    if (st != KIPP_OK) {
        cancel_all(gs);
        res = st == KIPP_ERR_BUSY
                  ? send_error(sv, c, cs, 503, err, "server_error", NULL, "overloaded")
                  : send_error(sv, c, cs, st == KIPP_ERR_INVALID_ARG ? 400 : 500,
                               st == KIPP_ERR_NOMEM ? "out of memory" : err,
                               st == KIPP_ERR_INVALID_ARG ? "invalid_request_error" : "server_error",
                               err_param, NULL);
        gen_free(gs);
        return res;
    }
    pthread_mutex_lock(&sv->mu);
    snprintf(gs->id, sizeof gs->id, "%s-%llu", ep == OAI_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)++sv->next_id);
    pthread_mutex_unlock(&sv->mu);
    /* the id the client asked for: the served name or one of its aliases */
    gs->meta = (oai_meta){.id = gs->id, .model = gs->rq.model, .created = (long long)time(NULL),
                          .n_prompt = gs->n_prompt};
    if (gs->rq.stream) {
        /* the kernel's send buffer would otherwise grow to net.ipv4.tcp_wmem's maximum (4 MiB)
         * for a client that does not read, and hold thousands of tokens before the window
         * could pause anything */
        const int sndbuf = KIPP_SERVER_STREAM_SNDBUF;
        if (gs->fd >= 0) setsockopt(gs->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        /* n > 1 choices are bulk work (as fair steps take them): their events, n per token and
         * with logprobs each (the attack's n 16 x top_logprobs 20: ~2 KB a token), are made on
         * this connection's thread, which then takes the CPU the forward pass leaves (a
         * client catching up on a held stream made the plain requests beside it 6x slower on
         * the tiny model) */
        if (gs->n_ch > 1) bulk_priority(cs);
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, gs, stream_free);
        if (!r) {
            gen_free(gs);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        common_headers(sv, cs, r);
        res = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        cs->responded = 1;
        cs->status = 200;
        count(sv, cs->endpoint, 200);
        return res;
    }
    /* not streamed: wait here for the whole completion; the choices run together and are
     * taken as their tokens come (so the window never pauses them) */
    for (uint32_t left = gs->n_ch; left;) {
        gen_choice *gc;
        int gone;
        const kipp_finish fin = pump(gs, &gc, &gone);
        if (gone) { /* nobody to answer: close the connection */
            gen_free(gs);
            cs->responded = 1;
            return MHD_NO;
        }
        if (!gc || fin == KIPP_FINISH_NONE) continue;
        if (fin == KIPP_FINISH_ERROR || fin == KIPP_FINISH_CANCELLED) {
            cancel_all(gs);
            res = send_error(sv, c, cs, 500,
                             fin == KIPP_FINISH_ERROR ? kipp_req_error(gc->req) : "the request was cancelled",
                             "server_error", NULL, NULL);
            gen_free(gs);
            return res;
        }
        oai_gen_finish(&gc->g);
        gc->done = 1;
        left--;
        fill_meta(gs, gc, fin);
        const uint32_t i = (uint32_t)(gc - gs->ch);
        gs->gens[i] = &gc->g, gs->reqs[i] = gc->req, gs->fins[i] = gs->meta.finish_reason;
    }
    return send_body_pieces(sv, c, cs, gs);
}

/* ---- small endpoints -------------------------------------------------------------------- */

static int served_cb(const void *sv, const char *name) { return model_served(sv, name); }

static enum MHD_Result handle_models(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    return send_json(sv, c, cs, 200,
                     oai_models_json(sv->model_name, sv->p.model_aliases, sv->p.n_model_aliases));
}

/* The chat page (webui.c). It needs no API key: it holds no data, and its API calls carry
 * the key. Its policy allows only its own inline script and style and fetches to us. */
static enum MHD_Result send_webui(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    size_t n;
    const char *page = kipp_webui_page(&n);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)page, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", sv->webui_csp);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    common_headers(sv, cs, r);
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    cs->responded = 1;
    cs->status = 200;
    count(sv, cs->endpoint, 200);
    return ok;
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

/* ---- Host, Origin, Content-Type --------------------------------------------------------- */

static int is_wildcard_addr(const char *h) { return !strcmp(h, "0.0.0.0") || !strcmp(h, "::"); }

/* The name part of a Host value ("name", "name:port", "[v6]", "[v6]:port") into out;
 * 0, or -1 when it is malformed. */
static int host_name(const char *h, char *out, size_t cap) {
    size_t n;
    const char *rest;
    if (h[0] == '[') {
        const char *e = strchr(h, ']');
        if (!e) return -1;
        n = (size_t)(e - h - 1);
        h++;
        rest = e + 1;
    } else {
        const char *col = strchr(h, ':');
        if (col && strchr(col + 1, ':')) return -1; /* an unbracketed IPv6 address */
        n = col ? (size_t)(col - h) : strlen(h);
        rest = h + n;
    }
    if (*rest == ':') {
        rest++;
        if (!*rest) return -1;
        for (; *rest; rest++)
            if (*rest < '0' || *rest > '9') return -1;
    } else if (*rest) {
        return -1;
    }
    if (n == 0 || n >= cap) return -1;
    memcpy(out, h, n);
    out[n] = 0;
    return 0;
}

/* A loopback name, or the address the server is bound to (when it is a specific one). */
static int own_name(const kipp_server *sv, const char *name) {
    if (!strcasecmp(name, "localhost") || !strcmp(name, "127.0.0.1") || !strcmp(name, "::1"))
        return 1;
    const char *bound = sv->p.host ? sv->p.host : "127.0.0.1";
    return !is_wildcard_addr(bound) && !strcasecmp(name, bound);
}

static int host_ok(const kipp_server *sv, const char *h) {
    for (size_t i = 0; i < sv->p.n_allowed_hosts; i++)
        if (!strcmp(sv->p.allowed_hosts[i], "*")) return 1;
    if (!h) return 1; /* HTTP/1.0 without Host: not a browser */
    char name[256];
    if (host_name(h, name, sizeof name) != 0) return 0;
    if (own_name(sv, name)) return 1;
    for (size_t i = 0; i < sv->p.n_allowed_hosts; i++)
        if (!strcasecmp(sv->p.allowed_hosts[i], name) || !strcasecmp(sv->p.allowed_hosts[i], h))
            return 1;
    return 0;
}

/* 0: refused; 1: same origin (http://<loopback or bound address>:<our port>); 2: allowed
 * cross-origin by --cors-origin. */
static int origin_ok(const kipp_server *sv, const char *o) {
    if (!strncasecmp(o, "http://", 7)) {
        char name[256];
        const char *hp = o + 7;
        const char *col = hp[0] == '[' ? strstr(hp, "]:") : strrchr(hp, ':');
        if (col && host_name(hp, name, sizeof name) == 0 && own_name(sv, name)) {
            const char *port = col + (hp[0] == '[' ? 2 : 1);
            if (strtoul(port, NULL, 10) == sv->port) return 1;
        }
    }
    for (size_t i = 0; i < sv->p.n_cors_origins; i++)
        if (!strcmp(sv->p.cors_origins[i], "*") || !strcasecmp(sv->p.cors_origins[i], o)) return 2;
    return 0;
}

/* "application/json", any case, optionally followed by parameters (";charset=utf-8"). */
static int json_ctype(const char *ct) {
    if (!ct) return 0;
    while (*ct == ' ' || *ct == '\t') ct++;
    if (strncasecmp(ct, "application/json", 16) != 0) return 0;
    ct += 16;
    while (*ct == ' ' || *ct == '\t') ct++;
    return *ct == 0 || *ct == ';';
}

/* Every header field line of a request (MHD's lookup sees only the first of a name; this
 * sees duplicates too), as the framing checks need it. */
typedef struct {
    int n_cl, cl_bad;   /* Content-Length lines; one that is not a number */
    int n_te, n_host;   /* Transfer-Encoding and Host lines */
    const char *te;     /* the first Transfer-Encoding value */
    const char *name;   /* a field name that is not a token ("Transfer-Encoding " from a space
                         * before the colon: MHD keeps it in the name) */
    const char *expect; /* an Expect value other than 100-continue */
} hdr_scan;

static int is_token(const char *s) { /* RFC 9110 5.6.2 */
    if (!*s) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              strchr("!#$%&'*+-.^_`|~", *s)))
            return 0;
    return 1;
}

/* s without leading and trailing spaces and tabs, as [*b, *e) */
static void ows_trim(const char *s, size_t n, const char **b, const char **e) {
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    *b = s, *e = s + n;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
    (void)kind;
    hdr_scan *sc = cls;
    if (!key) return MHD_YES;
    if (!is_token(key) && !sc->name) sc->name = key;
    if (!strcasecmp(key, "Content-Length")) {
        sc->n_cl++;
        if (!value || !*value || strspn(value, "0123456789") != strlen(value) || strlen(value) > 18)
            sc->cl_bad = 1;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        if (!sc->n_te++) sc->te = value ? value : "";
    } else if (!strcasecmp(key, "Host")) {
        sc->n_host++;
    } else if (!strcasecmp(key, "Expect") && !sc->expect) {
        const char *b, *e;
        ows_trim(value ? value : "", value ? strlen(value) : 0, &b, &e);
        if (e - b != 12 || strncasecmp(b, "100-continue", 12)) sc->expect = value ? value : "";
    }
    return MHD_YES;
}

/* s for a message: at most 64 bytes, control and non-ASCII bytes as '?' */
static void printable(char *out, size_t cap, const char *s) {
    size_t i = 0;
    for (; s[i] && i + 1 < cap && i < 64; i++)
        out[i] = (unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f ? '?' : s[i];
    out[i] = 0;
}

/* The Transfer-Encoding value te: 0 when it is the one coding Kipp reads, chunked, spelled as
 * libmicrohttpd recognizes it (exactly "chunked", any case: with anything else MHD does not
 * de-chunk but reads to the end of the connection); else the status (400 or 501) with its
 * message in msg. */
static int te_status(const char *te, char *msg, size_t cap) {
    char shown[72];
    printable(shown, sizeof shown, te);
    if (!strcasecmp(te, "chunked")) return 0;
    /* the codings of the list, in order; the last one decides the framing (RFC 9112 6.3) */
    const char *last_b = NULL, *last_e = NULL;
    int n = 0, chunked_before = 0, other_before = 0;
    for (const char *p = te;;) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *b, *e;
        ows_trim(p, len, &b, &e);
        if (e > b) {
            if (n++) {
                if (last_e - last_b == 7 && !strncasecmp(last_b, "chunked", 7)) chunked_before = 1;
                else other_before = 1;
            }
            last_b = b, last_e = e;
        }
        if (!comma) break;
        p = comma + 1;
    }
    if (!n || last_e - last_b != 7 || strncasecmp(last_b, "chunked", 7)) {
        snprintf(msg, cap, "the Transfer-Encoding '%s' does not end in chunked: the body's length "
                           "cannot be known (RFC 9112 section 6.3)", shown);
        return 400;
    }
    if (chunked_before) {
        snprintf(msg, cap, "the Transfer-Encoding '%s' applies chunked more than once", shown);
        return 400;
    }
    if (other_before) {
        snprintf(msg, cap, "the Transfer-Encoding '%s' is not implemented: chunked is the only "
                           "transfer coding this server reads", shown);
        return 501;
    }
    snprintf(msg, cap, "the Transfer-Encoding '%s' must be exactly 'chunked'", shown);
    return 400;
}

/* RFC 9112 framing and the Expect field, checked first: a request whose length two parsers
 * (a proxy in front, libmicrohttpd here) could read differently is refused, and so is what
 * libmicrohttpd would mis-frame. Returns 1 with the answer queued (always Connection: close:
 * where the request ends, and so where the next one starts, is not known), else 0. */
static int framing_refused(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                           enum MHD_Result *res) {
    hdr_scan sc = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, scan_header, &sc);
    char msg[320], shown[72];
    int status = 400;
    const char *code = NULL;
    if (sc.name) {
        printable(shown, sizeof shown, sc.name);
        snprintf(msg, sizeof msg, "the header name '%s' is not a token (letters, digits and "
                                  "!#$%%&'*+-.^_`|~; no space before the colon: RFC 9112 section "
                                  "5.1)", shown);
    } else if (sc.n_host > 1) {
        snprintf(msg, sizeof msg, "more than one Host header");
    } else if (sc.n_cl > 1 || sc.cl_bad) {
        snprintf(msg, sizeof msg, "%s", sc.n_cl > 1 ? "more than one Content-Length header"
                                                    : "the Content-Length header is not a number");
    } else if (sc.n_te && sc.n_cl) {
        snprintf(msg, sizeof msg, "both Transfer-Encoding and Content-Length are given (RFC 9112 "
                                  "section 6.3)");
    } else if (sc.n_te > 1) {
        snprintf(msg, sizeof msg, "more than one Transfer-Encoding header");
    } else if (sc.n_te && !cs->http11) {
        snprintf(msg, sizeof msg, "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 section 6.1)");
    } else if (sc.n_te && (status = te_status(sc.te, msg, sizeof msg)) != 0) {
        if (status == 501) code = "unsupported_transfer_encoding";
    } else if (sc.expect) {
        printable(shown, sizeof shown, sc.expect);
        snprintf(msg, sizeof msg, "the expectation '%s' cannot be met: 100-continue is the only "
                                  "one this server knows", shown);
        status = 417;
        code = "expectation_failed";
    } else {
        return 0;
    }
    cs->close = 1;
    *res = send_error(sv, c, cs, status, msg, "invalid_request_error", NULL, code);
    return 1;
}

static enum MHD_Result send_preflight(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Allow", "GET, HEAD, POST, OPTIONS");
    if (cs->cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
        const char *req = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                      "Access-Control-Request-Headers");
        const int plain = req && strlen(req) < 1024 &&
                          strspn(req, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789-_, ") == strlen(req);
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                plain ? req : "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    common_headers(sv, cs, r);
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, r);
    MHD_destroy_response(r);
    cs->responded = 1;
    count(sv, cs->endpoint, 204);
    return ok;
}

/* ---- the watchdog ------------------------------------------------------------------------- */

static uint64_t bytes_received(int fd) {
    struct tcp_info ti;
    socklen_t l = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) != 0) return 0;
    return l >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received
               ? ti.tcpi_bytes_received
               : 0;
}

static uint64_t bytes_acked(int fd) {
    struct tcp_info ti;
    socklen_t l = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) != 0) return 0;
    return l >= offsetof(struct tcp_info, tcpi_bytes_acked) + sizeof ti.tcpi_bytes_acked
               ? ti.tcpi_bytes_acked
               : 0;
}

/* A response stalled: the socket has bytes the client has not acknowledged and it took
 * none for --write-timeout (watchdog, wd_mu held). */
static int write_stalled(wd_conn *w, double t, double limit) {
    int pending = 0;
    const uint64_t acked = bytes_acked(w->fd);
    if (ioctl(w->fd, SIOCOUTQ, &pending) != 0 || pending <= 0 || acked != w->acked) {
        w->acked = acked;
        w->t_acked = t;
        return 0;
    }
    return t - w->t_acked > limit;
}

static wd_conn *wd_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void wd_set(kipp_server *sv, struct MHD_Connection *c, int state) {
    wd_conn *w = wd_of(c);
    if (!w) return;
    pthread_mutex_lock(&sv->wd_mu);
    if (w->state != WD_KILLED) {
        w->state = state;
        if (state == WD_WAIT) {
            w->t0 = now_s();
            w->t_first = 0;
            w->base = bytes_received(w->fd);
        } else if (state == WD_BUSY) {
            w->t_acked = now_s();
            w->acked = bytes_acked(w->fd);
        }
    }
    pthread_mutex_unlock(&sv->wd_mu);
}

/* Closes (shutdown: MHD's thread then sees EOF and cleans up) every connection that has not
 * delivered a whole request within --read-timeout of the wait for it starting, or whose
 * request line is not complete LINE_DEADLINE_S after its first byte (garbage, TLS), or
 * whose response the client has taken no byte of for --write-timeout (the socket's send
 * queue full and not draining: its request is cancelled when MHD's write fails). */
static void *watchdog(void *arg) {
    kipp_server *sv = arg;
    const double limit = sv->p.read_timeout_s, wlimit = sv->p.write_timeout_s;
    while (!atomic_load(&sv->wd_stop)) {
        const double t = now_s();
        pthread_mutex_lock(&sv->wd_mu);
        for (wd_conn *w = sv->conns; w; w = w->next) {
            if (w->state == WD_BUSY && write_stalled(w, t, wlimit)) {
                shutdown(w->fd, SHUT_RDWR);
                w->state = WD_KILLED;
                continue;
            }
            if (w->state == WD_BUSY || w->state == WD_KILLED) continue;
            int kill = t - w->t0 > limit;
            if (!kill && w->state == WD_WAIT) {
                if (!w->t_first) {
                    if (bytes_received(w->fd) > w->base) w->t_first = t;
                } else if (t - w->t_first > LINE_DEADLINE_S) {
                    kill = 1;
                }
            }
            if (kill) {
                shutdown(w->fd, SHUT_RDWR);
                w->state = WD_KILLED;
            }
        }
        pthread_mutex_unlock(&sv->wd_mu);
        struct timespec ts = {0, WATCHDOG_TICK_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    kipp_server *sv = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        wd_conn *w = calloc(1, sizeof *w);
        if (!w) return;
        w->fd = conn_fd(c);
        w->state = WD_WAIT;
        w->t0 = now_s();
        pthread_mutex_lock(&sv->wd_mu);
        w->next = sv->conns;
        if (sv->conns) sv->conns->prev = w;
        sv->conns = w;
        pthread_mutex_unlock(&sv->wd_mu);
        *socket_context = w;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        wd_conn *w = *socket_context;
        pthread_mutex_lock(&sv->wd_mu);
        if (w->prev) w->prev->next = w->next;
        else sv->conns = w->next;
        if (w->next) w->next->prev = w->prev;
        pthread_mutex_unlock(&sv->wd_mu);
        free(w);
        *socket_context = NULL;
    }
}

/* Called when a request line has been parsed, with the raw (still escaped) URI. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    kipp_server *sv = cls;
    wd_conn *w = wd_of(c);
    if (w) {
        pthread_mutex_lock(&sv->wd_mu);
        if (w->state != WD_KILLED) w->state = WD_READ;
        /* %00 would end the unescaped path early ("/health%00x" reads as "/health") */
        w->bad_path = uri && strstr(uri, "%00") != NULL;
        pthread_mutex_unlock(&sv->wd_mu);
    }
    return NULL;
}

/* ---- the access handler ----------------------------------------------------------------- */

static int route(const char *url, int *post) {
    *post = 1;
    if (!strcmp(url, "/v1/chat/completions")) return M_EP_CHAT;
    if (!strcmp(url, "/v1/completions")) return M_EP_COMPLETIONS;
    if (!strcmp(url, "/v1/embeddings")) return M_EP_EMBEDDINGS;
    *post = 0;
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) return M_EP_WEBUI;
    if (!strcmp(url, "/v1/models")) return M_EP_MODELS;
    if (!strcmp(url, "/health")) return M_EP_HEALTH;
    if (!strcmp(url, "/metrics")) return M_EP_METRICS;
    return M_EP_OTHER;
}

/* The checks made once the headers are in, before any of the body is read. */
static enum MHD_Result on_headers(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                  const char *url, const char *method) {
    int is_post;
    cs->endpoint = route(url, &is_post);
    enum MHD_Result res;
    if (framing_refused(sv, c, cs, &res)) return res;
    const wd_conn *w = wd_of(c);
    if (w && w->bad_path)
        return send_error(sv, c, cs, 400, "the path contains an encoded NUL (%00)",
                          "invalid_request_error", NULL, NULL);
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (!host_ok(sv, host)) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "the Host header '%.200s' is not this server's name (allow it with --allowed-host)",
                 host);
        return send_error(sv, c, cs, 403, msg, "invalid_request_error", NULL, "host_not_allowed");
    }
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin) {
        const int ok = origin_ok(sv, origin);
        if (!ok) {
            char msg[400];
            snprintf(msg, sizeof msg,
                     "cross-origin requests from Origin '%.200s' are not allowed (allow it with "
                     "--cors-origin)",
                     origin);
            return send_error(sv, c, cs, 403, msg, "invalid_request_error", NULL,
                              "origin_not_allowed");
        }
        if (ok == 2) cs->cors = origin;
    }
    if (cs->endpoint == M_EP_OTHER)
        return send_error(sv, c, cs, 404, "no such endpoint", "not_found_error", NULL, NULL);
    if (!strcmp(method, "OPTIONS")) return send_preflight(sv, c, cs);
    const int method_ok = is_post ? !strcmp(method, "POST")
                                  : !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!method_ok)
        return send_error(sv, c, cs, 405, is_post ? "this endpoint takes POST" : "this endpoint takes GET",
                          "invalid_request_error", NULL, NULL);
    if (cs->endpoint != M_EP_HEALTH && cs->endpoint != M_EP_WEBUI && !key_ok(sv, c))
        return send_error(sv, c, cs, 401, "missing or incorrect API key", "authentication_error",
                          NULL, "invalid_api_key");
    if (is_post && !json_ctype(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type")))
        return send_error(sv, c, cs, 415, "the Content-Type header must be application/json",
                          "invalid_request_error", NULL, "unsupported_media_type");
    if (is_post && atomic_load(&sv->draining))
        return send_error(sv, c, cs, 503, "the server is shutting down", "server_error", NULL,
                          "shutting_down");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > sv->p.max_body) {
        return send_too_large(sv, c, cs);
    }
    return MHD_YES;
}

/* X-Request-Id: the client's when it is 1..64 printable ASCII characters without spaces,
 * else req-N; method and path (truncated) for the log line. */
static void set_log_ids(kipp_server *sv, struct MHD_Connection *c, conn_state *cs, const char *url,
                        const char *method) {
    const char *id = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    size_t n = id ? strlen(id) : 0;
    int sane = n >= 1 && n < sizeof cs->rid;
    for (size_t i = 0; sane && i < n; i++) sane = id[i] > 0x20 && id[i] < 0x7f;
    if (sane) memcpy(cs->rid, id, n + 1);
    else {
        pthread_mutex_lock(&sv->mu);
        const unsigned long long k = ++sv->next_rid;
        pthread_mutex_unlock(&sv->mu);
        snprintf(cs->rid, sizeof cs->rid, "req-%llu", k);
    }
    snprintf(cs->method, sizeof cs->method, "%s", method ? method : "?");
    snprintf(cs->path, sizeof cs->path, "%s", url ? url : "?");
    for (char *p = cs->path; *p; p++) /* no control bytes or spaces in a log line */
        if ((unsigned char)*p <= 0x20 || *p == 0x7f) *p = '?';
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    kipp_server *sv = cls;
    conn_state *cs = *con_cls;
    if (!cs) { /* first call: headers only */
        if (!(cs = calloc(1, sizeof *cs))) return MHD_NO;
        *con_cls = cs;
        cs->t_start = now_s();
        set_log_ids(sv, c, cs, url, method);
        cs->http11 = version && strcmp(version, MHD_HTTP_VERSION_1_0) != 0;
        return on_headers(sv, c, cs, url, method);
    }
    if (cs->responded) { /* an early error: discard the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cs->body_reserved && !cs->body_refused && !cs->too_large &&
            body_reserve(sv, c, cs) != 0)
            cs->body_refused = 1;
        if (cs->body_refused || cs->too_large) { /* read and dropped */
        } else if (cs->body.len + *upload_size > cs->body_reserved) {
            cs->too_large = 1; /* past --max-body, or past what Content-Length said */
            body_release(sv, cs);
        } else if (kipp_buf_put(&cs->body, upload, *upload_size)) {
            return MHD_NO;
        } else if (cs->body.len >= BULK_BODY && cs->body.len - *upload_size < BULK_BODY) {
            bulk_priority(cs); /* reading, parsing and tokenizing it is bulk work */
        }
        *upload_size = 0;
        return MHD_YES;
    }
    wd_set(sv, c, WD_BUSY); /* the whole request is in: no read deadline while answering */
    if (cs->too_large) {
        return send_too_large(sv, c, cs);
    }
    if (cs->body_refused)
        return send_error(sv, c, cs, 503, "too many request bodies are being received; retry",
                          "server_error", NULL, "overloaded");
    const int ready = atomic_load(&sv->ready);
    switch (cs->endpoint) {
    case M_EP_WEBUI: return send_webui(sv, c, cs); /* served while loading: the page waits */
    case M_EP_HEALTH: {
        const int draining = atomic_load(&sv->draining);
        return send_body(sv, c, cs, ready && !draining ? 200 : 503,
                         strdup(draining ? "{\"status\":\"draining\"}"
                                         : ready ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}"),
                         "application/json", ready && !draining ? NULL : "1");
    }
    case M_EP_METRICS: {
        kipp_sched_stats st = {0};
        if (ready && sv->sched) kipp_sched_get_stats(sv->sched, &st);
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
    if (cs->endpoint == M_EP_EMBEDDINGS || !sv->sched) { /* src/server/embeddings.c */
        int status = 500;
        hold_active(sv, cs); /* drain waits for it */
        char *js = oai_embeddings_answer(sv->emb, sv->m, cs->endpoint == M_EP_EMBEDDINGS, cs->body.data,
                                         cs->body.len, sv->model_name, served_cb, sv, &status);
        return send_json(sv, c, cs, status, js);
    }
    return handle_generate(sv, c, cs, cs->endpoint == M_EP_CHAT ? OAI_CHAT : OAI_COMPLETIONS);
}

/* The request's line on stderr: id, method, path, status (- when the connection closed
 * without one), total time and, for a generation, its tokens, queue wait and TTFT. */
static void log_request(const kipp_server *sv, const conn_state *cs, int client_gone) {
    if (!sv->p.log_format) return;
    const double total_ms = (now_s() - cs->t_start) * 1e3;
    char line[768];
    int n;
    if (sv->p.log_format == 2) {
        json_t *o = json_pack("{s:s, s:s, s:s, s:f}", "request_id", cs->rid, "method", cs->method,
                              "path", cs->path, "total_ms", total_ms);
        if (!o) return;
        json_object_set_new(o, "status", cs->status ? json_integer(cs->status) : json_null());
        if (client_gone) json_object_set_new(o, "client_gone", json_true());
        if (cs->gen) {
            json_object_set_new(o, "prompt_tokens", json_integer(cs->n_prompt));
            json_object_set_new(o, "cached_tokens", json_integer(cs->n_cached));
            json_object_set_new(o, "completion_tokens", json_integer(cs->n_completion));
            json_object_set_new(o, "finish_reason", cs->finish ? json_string(cs->finish) : json_null());
            json_object_set_new(o, "queue_ms", cs->queue_s >= 0 ? json_real(cs->queue_s * 1e3) : json_null());
            json_object_set_new(o, "ttft_ms", cs->ttft_s >= 0 ? json_real(cs->ttft_s * 1e3) : json_null());
        }
        char *s = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (!s) return;
        fprintf(stderr, "%s\n", s);
        free(s);
        return;
    }
    char st[8] = "-";
    if (cs->status) snprintf(st, sizeof st, "%d", cs->status);
    n = snprintf(line, sizeof line, "kipp-server: %s %s %s %s%s %.1f ms", cs->rid, cs->method, cs->path,
                 st, client_gone ? " (client gone)" : "", total_ms);
    if (cs->gen && n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n,
                 "; prompt %u (cached %u), completion %u, %s; queue %.1f ms, ttft %.1f ms",
                 cs->n_prompt, cs->n_cached, cs->n_completion, cs->finish ? cs->finish : "unfinished",
                 cs->queue_s >= 0 ? cs->queue_s * 1e3 : 0.0, cs->ttft_s >= 0 ? cs->ttft_s * 1e3 : 0.0);
    fprintf(stderr, "%s\n", line);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    kipp_server *sv = cls;
    wd_set(sv, c, WD_WAIT); /* the read deadline starts again for the next request */
    conn_state *cs = *con_cls;
    if (!cs) return;
    if (cs->active) atomic_fetch_sub(&sv->active, 1); /* its answer is sent (or the client left) */
    log_request(sv, cs, toe != MHD_REQUEST_TERMINATED_COMPLETED_OK);
    body_release(sv, cs);
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
    if (!sv->p.max_connections) sv->p.max_connections = KIPP_SERVER_DEFAULT_MAX_CONNECTIONS;
    if (!sv->p.max_connections_per_ip)
        sv->p.max_connections_per_ip = KIPP_SERVER_DEFAULT_MAX_CONNECTIONS_PER_IP;
    if (!sv->p.read_timeout_s) sv->p.read_timeout_s = KIPP_SERVER_DEFAULT_READ_TIMEOUT_S;
    if (!sv->p.write_timeout_s) sv->p.write_timeout_s = KIPP_SERVER_DEFAULT_WRITE_TIMEOUT_S;
    if (!sv->p.max_parsing) sv->p.max_parsing = KIPP_SERVER_DEFAULT_MAX_PARSING;
    if (!sv->p.max_body) sv->p.max_body = KIPP_SERVER_DEFAULT_MAX_BODY;
    sv->parsing.cap = sv->p.max_parsing;
    sv->bodies.cap = (size_t)sv->p.max_parsing * sv->p.max_body;
    pthread_mutex_init(&sv->mu, NULL);
    pthread_mutex_init(&sv->wd_mu, NULL);
    pthread_cond_init(&sv->parsing.cv, NULL);
    pthread_cond_init(&sv->bodies.cv, NULL);
    if (!(sv->webui_csp = kipp_webui_csp())) {
        freeaddrinfo(ai);
        snprintf(err, err_len, "out of memory");
        kipp_server_free(sv);
        return KIPP_ERR_NOMEM;
    }
    if (pthread_create(&sv->wd, NULL, watchdog, sv) != 0) {
        freeaddrinfo(ai);
        snprintf(err, err_len, "cannot start the watchdog thread");
        kipp_server_free(sv);
        return KIPP_ERR_NOMEM;
    }
    sv->wd_started = 1;
    /* MHD_USE_ITC: MHD_quiesce_daemon (drain) needs it in this threading mode */
    /* MHD_USE_POLL: descriptors above FD_SETSIZE (1024) must work with thousands of
     * connections */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_USE_POLL |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    /* MHD's own timeout restarts with every byte: it only catches dead connections while a
     * response is written; the read deadline is the watchdog's */
    sv->d = MHD_start_daemon(flags, p->port, NULL, NULL, on_request, sv,
                             MHD_OPTION_EXTERNAL_LOGGER, mhd_log, sv,
                             MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)sv->p.max_connections,
                             /* a thread per connection: slow clients held by the thousand
                              * must be cheap (the deepest stack use, jansson's 2048-level
                              * parse, is far below this) */
                             MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1u << 20),
                             MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)sv->p.max_connections_per_ip,
                             MHD_OPTION_CONNECTION_TIMEOUT,
                             (unsigned)(sv->p.read_timeout_s > 300 ? sv->p.read_timeout_s : 300),
                             MHD_OPTION_NOTIFY_CONNECTION, on_connection, sv,
                             MHD_OPTION_URI_LOG_CALLBACK, on_uri, sv,
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
    sv->structured = oai_structured_new(m);
    atomic_store(&sv->ready, 1);
}

void kipp_server_attach_embedder(kipp_server *sv, kipp_model *m, oai_embedder *e) {
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    sv->m = m;
    sv->emb = e;
    sv->n_vocab = info.n_vocab;
    sv->n_ctx = oai_embedder_n_ctx(e);
    atomic_store(&sv->ready, 1);
}

void kipp_server_drain(kipp_server *sv) {
    if (!sv || atomic_exchange(&sv->draining, 1)) return;
    if (sv->d) {
        const MHD_socket ls = MHD_quiesce_daemon(sv->d); /* no new connections */
        if (ls != MHD_INVALID_SOCKET) close(ls);
    }
}

int kipp_server_active(kipp_server *sv) { return sv ? atomic_load(&sv->active) : 0; }

void kipp_server_shutdown(kipp_server *sv) {
    if (sv) atomic_store(&sv->stopping, 1);
}

void kipp_server_free(kipp_server *sv) {
    if (!sv) return;
    atomic_store(&sv->stopping, 1);
    if (sv->d) MHD_stop_daemon(sv->d);
    if (sv->wd_started) {
        atomic_store(&sv->wd_stop, 1);
        pthread_join(sv->wd, NULL);
    }
    pthread_mutex_destroy(&sv->mu);
    pthread_mutex_destroy(&sv->wd_mu);
    pthread_cond_destroy(&sv->parsing.cv);
    pthread_cond_destroy(&sv->bodies.cv);
    oai_structured_free(sv->structured);
    free(sv->model_name);
    free(sv->api_key);
    free(sv->webui_csp);
    free(sv);
}
