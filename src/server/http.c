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
#include "server/http_int.h"

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

/* A field outside the request's protocol (and Kipp's extensions) is ignored; its name is
 * logged the first time (up to 32 names). */
void srv_note_ignored_field(kipp_server *sv, const char *name) {
    pthread_mutex_lock(&sv->mu);
    int seen = sv->n_ignored == 32;
    for (int i = 0; i < sv->n_ignored && !seen; i++) seen = !strcmp(sv->ignored[i], name);
    if (!seen) snprintf(sv->ignored[sv->n_ignored++], sizeof sv->ignored[0], "%s", name);
    pthread_mutex_unlock(&sv->mu);
    if (!seen)
        fprintf(stderr, "kipp-server: ignoring the request field '%s' (not part of the request's "
                        "API; said once)\n", name);
}

/* a and b name one model: equal, or one is the other with Ollama's default tag ":latest"
 * (Ollama's clients write "name:latest" for "name", and list names so) */
static int same_model(const char *a, const char *b) {
    const size_t la = strlen(a), lb = strlen(b);
    if (la < lb) return same_model(b, a);
    return !strcmp(a, b) || (la == lb + 7 && !strncmp(a, b, lb) && !strcmp(a + lb, ":latest"));
}

/* A request's 'model' names what this server serves: its name or an alias ("*": any). */
int srv_model_served(const kipp_server *sv, const char *name) {
    if (same_model(name, sv->model_name)) return 1;
    for (size_t i = 0; i < sv->p.n_model_aliases; i++)
        if (!strcmp(sv->p.model_aliases[i], "*") || same_model(sv->p.model_aliases[i], name)) return 1;
    return 0;
}

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
/* ---- responses -------------------------------------------------------------------------- */

void srv_count(kipp_server *sv, int endpoint, int status) {
    pthread_mutex_lock(&sv->mu);
    kipp_metrics_count(&sv->counters, endpoint, status);
    pthread_mutex_unlock(&sv->mu);
}

/* What every response gets: CORS for an allowed cross-origin caller, and Connection: close
 * while draining or announcing a drain (the client should reconnect elsewhere). */
void srv_common_headers(kipp_server *sv, const conn_state *cs, struct MHD_Response *r) {
    if (cs->cors) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", cs->cors);
        MHD_add_response_header(r, "Vary", "Origin");
    }
    if (cs->close || atomic_load(&sv->draining) || atomic_load(&sv->announced))
        MHD_add_response_header(r, "Connection", "close");
    MHD_add_response_header(r, "X-Request-Id", cs->rid);
}

enum MHD_Result srv_send_body(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                 int status, char *body, const char *ctype, const char *retry) {
    if (!body) body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    struct MHD_Response *r = MHD_create_response_from_buffer(body ? strlen(body) : 0, body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) { free(body); return MHD_NO; }
    if (ctype) MHD_add_response_header(r, "Content-Type", ctype);
    if (retry) MHD_add_response_header(r, "Retry-After", retry);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    srv_common_headers(sv, cs, r);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    cs->responded = 1;
    cs->status = status;
    srv_count(sv, cs->endpoint, status);
    return ok;
}

enum MHD_Result srv_send_error(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                  int status, const char *msg, const char *type,
                                  const char *param, const char *code) {
    const srv_api_ops *api = srv_api_get((srv_api)cs->api);
    return srv_send_body(sv, c, cs, status,
                         api ? api->error_json(status, msg, type, param, code)
                             : oai_error_json(msg, type, param, code),
                         "application/json", status == 503 ? "1" : NULL);
}

enum MHD_Result srv_send_json(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                 int status, char *json) {
    return srv_send_body(sv, c, cs, status, json, "application/json", NULL);
}

static enum MHD_Result send_too_large(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    char msg[128];
    snprintf(msg, sizeof msg, "the body is larger than the limit of %zu bytes", sv->p.max_body);
    return srv_send_error(sv, c, cs, 413, msg, "invalid_request_error", NULL, "request_too_large");
}

/* ---- the client is gone? ---------------------------------------------------------------- */


/* PEER_GONE: a reset, an error, or both directions closed; PEER_FIN: the peer sent FIN,
 * which is a half-close (it still reads) or a close (it does not): only a write can tell,
 * as a closed socket answers it with a reset. Costs one poll, no read. */
int srv_peer_state(int fd) {
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

int srv_client_gone(int fd, int http11, int *probed) {
    const int ps = srv_peer_state(fd);
    if (ps == PEER_GONE) return 1;
    if (ps != PEER_FIN || *probed) return 0;
    *probed = 1;
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    return http11 && send(fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN &&
           errno != EWOULDBLOCK;
}

int srv_conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}
/* The request counts in sv->active (what the drain waits for) until on_completed, after
 * its answer's last byte went out: a count dropped when the answer was only queued let the
 * drain stop libmicrohttpd before a non-streamed answer was sent (the client saw the
 * connection close with no response). */
void srv_hold_active(kipp_server *sv, conn_state *cs) {
    if (cs->active) return;
    cs->active = 1;
    atomic_fetch_add(&sv->active, 1);
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

void srv_bulk_priority(conn_state *cs) {
#ifdef __linux__
    errno = 0;
    const int cur = getpriority(PRIO_PROCESS, 0); /* Linux: 0 is this thread (as the mask thread's) */
    if (errno == 0 && cur < BULK_NICE) (void)setpriority(PRIO_PROCESS, 0, BULK_NICE);
#endif
    cs->close = 1;
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
int srv_parse_enter(kipp_server *sv) { return budget_take(sv, &sv->parsing, 1); }
void srv_parse_leave(kipp_server *sv) { budget_give(sv, &sv->parsing, 1); }

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

void srv_body_bytes_free(void *arg) { kipp_buf_free(&((conn_state *)arg)->body); }

void srv_body_release(kipp_server *sv, conn_state *cs) {
    kipp_buf_free(&cs->body);
    if (!cs->body_reserved) return;
    budget_give(sv, &sv->bodies, cs->body_reserved);
    cs->body_reserved = 0;
}
/* ---- small endpoints -------------------------------------------------------------------- */

static int served_cb(const void *sv, const char *name) { return srv_model_served(sv, name); }

static enum MHD_Result handle_models(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    return srv_send_json(sv, c, cs, 200,
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
    srv_common_headers(sv, cs, r);
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    cs->responded = 1;
    cs->status = 200;
    srv_count(sv, cs->endpoint, 200);
    return ok;
}

static int key_ok(const kipp_server *sv, struct MHD_Connection *c) {
    if (!sv->api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && strncasecmp(h, "Bearer ", 7) == 0) h += 7;
    else if (!(h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"))) return 0; /* Anthropic's */
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

/* An IP literal in its one text form (an IPv4-mapped IPv6 address as the IPv4 one); -1 when
 * name is not an address. */
static int canonical_ip(const char *name, char *out, size_t cap) {
    unsigned char a[16];
    if (inet_pton(AF_INET, name, a) == 1) return inet_ntop(AF_INET, a, out, (socklen_t)cap) ? 0 : -1;
    if (inet_pton(AF_INET6, name, a) != 1) return -1;
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!memcmp(a, mapped, 12)) return inet_ntop(AF_INET, a + 12, out, (socklen_t)cap) ? 0 : -1;
    return inet_ntop(AF_INET6, a, out, (socklen_t)cap) ? 0 : -1;
}

/* name is the IP address the connection on fd arrived at: a balancer (or a probe) that
 * addresses the replica by its IP. No DNS rebinding can put an attacker's page there: a
 * browser sends the attacker's name, not the address it resolved to. */
static int is_local_addr(int fd, const char *name) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char want[INET6_ADDRSTRLEN], got[INET6_ADDRSTRLEN], text[INET6_ADDRSTRLEN];
    if (fd < 0 || canonical_ip(name, want, sizeof want) != 0) return 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) return 0;
    const void *a = ss.ss_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                                             : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
    if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) return 0;
    if (!inet_ntop(ss.ss_family, a, text, sizeof text) || canonical_ip(text, got, sizeof got) != 0) return 0;
    return !strcmp(want, got);
}

static int host_ok(const kipp_server *sv, struct MHD_Connection *c, const char *h) {
    for (size_t i = 0; i < sv->p.n_allowed_hosts; i++)
        if (!strcmp(sv->p.allowed_hosts[i], "*")) return 1;
    if (!h) return 1; /* HTTP/1.0 without Host: not a browser */
    char name[256];
    if (host_name(h, name, sizeof name) != 0) return 0;
    if (own_name(sv, name) || is_local_addr(srv_conn_fd(c), name)) return 1;
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
    *res = srv_send_error(sv, c, cs, status, msg, "invalid_request_error", NULL, code);
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
    srv_common_headers(sv, cs, r);
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, r);
    MHD_destroy_response(r);
    cs->responded = 1;
    srv_count(sv, cs->endpoint, 204);
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
            w->t0 = srv_now();
            w->t_first = 0;
            w->base = bytes_received(w->fd);
        } else if (state == WD_BUSY) {
            w->t_acked = srv_now();
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
        const double t = srv_now();
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
        w->fd = srv_conn_fd(c);
        w->state = WD_WAIT;
        w->t0 = srv_now();
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

/* Every route: its path, method (GET routes answer HEAD too), endpoint and protocol. The
 * paths without /v1 are the ones clients reach with a base URL that lacks it (llama-server
 * serves both). */
typedef struct {
    const char *path, *method;
    int endpoint, api;
} route_t;
static const route_t routes[] = {
    {"/v1/chat/completions", "POST", M_EP_CHAT, API_OPENAI},
    {"/chat/completions", "POST", M_EP_CHAT, API_OPENAI},
    {"/v1/completions", "POST", M_EP_COMPLETIONS, API_OPENAI},
    {"/completions", "POST", M_EP_COMPLETIONS, API_OPENAI},
    {"/v1/embeddings", "POST", M_EP_EMBEDDINGS, API_OPENAI},
    {"/embeddings", "POST", M_EP_EMBEDDINGS, API_OPENAI},
    {"/v1/models", "GET", M_EP_MODELS, API_OPENAI},
    {"/models", "GET", M_EP_MODELS, API_OPENAI},
    {"/", "GET", M_EP_WEBUI, API_OPENAI},
    {"/index.html", "GET", M_EP_WEBUI, API_OPENAI},
    {"/health", "GET", M_EP_HEALTH, API_OPENAI},
    {"/livez", "GET", M_EP_LIVEZ, API_OPENAI},
    {"/get_load", "GET", M_EP_LOAD, API_OPENAI},
    {"/metrics", "GET", M_EP_METRICS, API_OPENAI},
    {"/v1/messages", "POST", M_EP_MESSAGES, API_ANTHROPIC},
    {"/v1/messages/count_tokens", "POST", M_EP_COUNT_TOKENS, API_ANTHROPIC},
    {"/v1/responses", "POST", M_EP_RESPONSES, API_RESPONSES},
    {"/responses", "POST", M_EP_RESPONSES, API_RESPONSES},
    {"/api/chat", "POST", M_EP_OLLAMA_CHAT, API_OLLAMA},
    {"/api/generate", "POST", M_EP_OLLAMA_GENERATE, API_OLLAMA},
    {"/api/embed", "POST", M_EP_OLLAMA_EMBED, API_OLLAMA},
    {"/api/embeddings", "POST", M_EP_OLLAMA_EMBED, API_OLLAMA},
    {"/api/version", "GET", M_EP_OLLAMA_INFO, API_OLLAMA},
    {"/api/tags", "GET", M_EP_OLLAMA_INFO, API_OLLAMA},
    {"/api/ps", "GET", M_EP_OLLAMA_INFO, API_OLLAMA},
    {"/api/show", "POST", M_EP_OLLAMA_INFO, API_OLLAMA},
    {"/api/pull", "POST", M_EP_OLLAMA_MANAGE, API_OLLAMA},
    {"/api/push", "POST", M_EP_OLLAMA_MANAGE, API_OLLAMA},
    {"/api/create", "POST", M_EP_OLLAMA_MANAGE, API_OLLAMA},
    {"/api/copy", "POST", M_EP_OLLAMA_MANAGE, API_OLLAMA},
    {"/api/delete", "DELETE", M_EP_OLLAMA_MANAGE, API_OLLAMA},
    {"/tokenize", "POST", M_EP_TOKENIZE, API_OPENAI},
    {"/detokenize", "POST", M_EP_DETOKENIZE, API_OPENAI},
    {"/apply-template", "POST", M_EP_APPLY_TEMPLATE, API_OPENAI},
    {"/props", "GET", M_EP_PROPS, API_OPENAI},
    {"/v1/rerank", "POST", M_EP_RERANK, API_OPENAI},
    {"/rerank", "POST", M_EP_RERANK, API_OPENAI},
    {"/v1/reranking", "POST", M_EP_RERANK, API_OPENAI},
    {"/reranking", "POST", M_EP_RERANK, API_OPENAI},
};

static const route_t *route(const char *url) {
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (!strcmp(url, routes[i].path)) return &routes[i];
    return NULL;
}

/* Ollama's documented examples are `curl URL -d '{...}'`, whose body curl labels
 * application/x-www-form-urlencoded, and its clients send none at all: on Ollama's routes a
 * body so labelled (or unlabelled) is read as JSON when the request has no Origin (no
 * browser page sent it: a cross-origin form post carries its Origin). */
static int ollama_plain_post(struct MHD_Connection *c, const conn_state *cs) {
    if (cs->api != API_OLLAMA || MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin")) return 0;
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    return !ct || !strncasecmp(ct, "application/x-www-form-urlencoded", 33);
}

/* GET /livez: the process answers and its engine thread is alive: waiting for work or
 * turning its loop (a step done within KIPP_SERVER_LIVEZ_STALE_S). Not readiness: 200 while
 * the model loads and while draining (/health says those). */
static enum MHD_Result send_livez(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    kipp_sched_stats st = {0};
    const int engine = atomic_load(&sv->ready) && sv->sched;
    if (engine) kipp_sched_get_stats(sv->sched, &st);
    const double stale_s = engine && st.engine_beat_s > 0 && !st.engine_waiting ? srv_now() - st.engine_beat_s : 0;
    char body[200];
    if (engine && st.engine_ended) {
        snprintf(body, sizeof body, "{\"status\":\"dead\",\"message\":\"the engine thread has stopped\"}");
    } else if (stale_s > KIPP_SERVER_LIVEZ_STALE_S) {
        snprintf(body, sizeof body,
                 "{\"status\":\"stuck\",\"message\":\"the engine has been in one step for %.0f s "
                 "(more than %.0f s)\"}",
                 stale_s, KIPP_SERVER_LIVEZ_STALE_S);
    } else {
        return srv_send_body(sv, c, cs, 200, strdup("{\"status\":\"alive\"}"), "application/json", NULL);
    }
    return srv_send_body(sv, c, cs, 503, strdup(body), "application/json", NULL);
}

/* The checks made once the headers are in, before any of the body is read. */
static enum MHD_Result on_headers(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                  const char *url, const char *method) {
    const route_t *rt = route(url);
    cs->endpoint = rt ? rt->endpoint : M_EP_OTHER;
    cs->api = rt ? rt->api : API_OPENAI;
    const int is_post = rt && strcmp(rt->method, "GET") != 0; /* a body is read */
    enum MHD_Result res;
    if (framing_refused(sv, c, cs, &res)) return res;
    const wd_conn *w = wd_of(c);
    if (w && w->bad_path)
        return srv_send_error(sv, c, cs, 400, "the path contains an encoded NUL (%00)",
                          "invalid_request_error", NULL, NULL);
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
    if (!host_ok(sv, c, host)) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "the Host header '%.200s' is not this server's name (allow it with --allowed-host)",
                 host);
        return srv_send_error(sv, c, cs, 403, msg, "invalid_request_error", NULL, "host_not_allowed");
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
            return srv_send_error(sv, c, cs, 403, msg, "invalid_request_error", NULL,
                              "origin_not_allowed");
        }
        if (ok == 2) cs->cors = origin;
    }
    if (cs->endpoint == M_EP_OTHER)
        return srv_send_error(sv, c, cs, 404, "no such endpoint", "not_found_error", NULL, NULL);
    if (!strcmp(method, "OPTIONS")) return send_preflight(sv, c, cs);
    const int method_ok = is_post ? !strcmp(method, rt->method)
                                  : !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!method_ok) {
        char msg[64];
        snprintf(msg, sizeof msg, "this endpoint takes %s", rt->method);
        return srv_send_error(sv, c, cs, 405, msg, "invalid_request_error", NULL, NULL);
    }
    if (cs->endpoint != M_EP_HEALTH && cs->endpoint != M_EP_LIVEZ && cs->endpoint != M_EP_WEBUI &&
        !key_ok(sv, c))
        return srv_send_error(sv, c, cs, 401, "missing or incorrect API key", "authentication_error",
                          NULL, "invalid_api_key");
    if (is_post && !json_ctype(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type")) &&
        !ollama_plain_post(c, cs))
        return srv_send_error(sv, c, cs, 415, "the Content-Type header must be application/json",
                          "invalid_request_error", NULL, "unsupported_media_type");
    if (is_post && atomic_load(&sv->draining))
        return srv_send_error(sv, c, cs, 503, "the server is shutting down", "server_error", NULL,
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
        cs->t_start = srv_now();
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
            srv_body_release(sv, cs);
        } else if (kipp_buf_put(&cs->body, upload, *upload_size)) {
            return MHD_NO;
        } else if (cs->body.len >= BULK_BODY && cs->body.len - *upload_size < BULK_BODY) {
            srv_bulk_priority(cs); /* reading, parsing and tokenizing it is bulk work */
        }
        *upload_size = 0;
        return MHD_YES;
    }
    wd_set(sv, c, WD_BUSY); /* the whole request is in: no read deadline while answering */
    if (cs->too_large) {
        return send_too_large(sv, c, cs);
    }
    if (cs->body_refused)
        return srv_send_error(sv, c, cs, 503, "too many request bodies are being received; retry",
                          "server_error", NULL, "overloaded");
    const int ready = atomic_load(&sv->ready);
    switch (cs->endpoint) {
    case M_EP_WEBUI: return send_webui(sv, c, cs); /* served while loading: the page waits */
    case M_EP_LIVEZ: return send_livez(sv, c, cs);
    case M_EP_HEALTH: {
        const int draining = atomic_load(&sv->draining) || atomic_load(&sv->announced);
        return srv_send_body(sv, c, cs, ready && !draining ? 200 : 503,
                         strdup(draining ? "{\"status\":\"draining\"}"
                                         : ready ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}"),
                         "application/json", ready && !draining ? NULL : "1");
    }
    case M_EP_METRICS: {
        kipp_sched_stats st = {0};
        if (ready && sv->sched) kipp_sched_get_stats(sv->sched, &st);
        /* the pool's shape is written by attach before ready is set: not read before */
        const kipp_metrics_info loading = {.model_name = sv->model_name, .vllm_compat = sv->minfo.vllm_compat};
        pthread_mutex_lock(&sv->mu);
        char *text = kipp_metrics_text(&sv->counters, &st, ready, ready ? &sv->minfo : &loading);
        pthread_mutex_unlock(&sv->mu);
        return srv_send_body(sv, c, cs, 200, text, "text/plain; version=0.0.4", NULL);
    }
    case M_EP_LOAD: { /* SGLang's load endpoint, which vllm-router's power_of_two polls */
        kipp_sched_stats st = {0};
        if (ready && sv->sched) kipp_sched_get_stats(sv->sched, &st);
        char body[64];
        snprintf(body, sizeof body, "{\"load\":%u}", st.running + st.queue_depth);
        return srv_send_body(sv, c, cs, 200, strdup(body), "application/json", NULL);
    }
    default: break;
    }
    if (!ready)
        return srv_send_error(sv, c, cs, 503, "the model is still loading", "server_error", NULL,
                          "loading");
    switch (cs->endpoint) {
    case M_EP_MODELS: return handle_models(sv, c, cs);
    case M_EP_COUNT_TOKENS: return srv_handle_count_tokens(sv, c, cs);
    case M_EP_OLLAMA_CHAT:
    case M_EP_OLLAMA_GENERATE:
    case M_EP_OLLAMA_INFO:
    case M_EP_OLLAMA_MANAGE:
    case M_EP_OLLAMA_EMBED: return srv_handle_ollama(sv, c, cs);
    case M_EP_TOKENIZE:
    case M_EP_DETOKENIZE:
    case M_EP_APPLY_TEMPLATE:
    case M_EP_PROPS: return srv_handle_util(sv, c, cs);
    case M_EP_RERANK: return srv_handle_rerank(sv, c, cs);
    default: break;
    }
    if (cs->endpoint == M_EP_EMBEDDINGS || !sv->sched) { /* src/server/embeddings.c */
        int status = 500;
        srv_hold_active(sv, cs); /* drain waits for it */
        char *js = oai_embeddings_answer(sv->emb, sv->m, cs->endpoint == M_EP_EMBEDDINGS, cs->body.data,
                                         cs->body.len, sv->model_name, served_cb, sv, &status);
        return srv_send_json(sv, c, cs, status, js);
    }
    return srv_handle_generate(sv, c, cs, cs->endpoint == M_EP_COMPLETIONS ? OAI_COMPLETIONS : OAI_CHAT);
}

/* The request's line on stderr: id, method, path, status (- when the connection closed
 * without one), total time and, for a generation, its tokens, queue wait and TTFT. */
static void log_request(const kipp_server *sv, const conn_state *cs, int client_gone) {
    if (!sv->p.log_format) return;
    const double total_ms = (srv_now() - cs->t_start) * 1e3;
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
    srv_body_release(sv, cs);
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
    sv->minfo = (kipp_metrics_info){.model_name = sv->model_name, .vllm_compat = p->metrics_vllm};
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
                             /* 0: MHD keeps no per-address count */
                             MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                             sv->p.max_connections_per_ip == KIPP_SERVER_NO_PER_IP_LIMIT
                                 ? 0u : (unsigned)sv->p.max_connections_per_ip,
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
    kipp_ctx_info ci;
    kipp_sched_ctx_info(sched, &ci);
    sv->minfo.block_size = ci.kv_block_size;
    sv->minfo.n_blocks = ci.kv_blocks;
    sv->minfo.cache_type = kipp_kv_type_name(ci.kv_type);
    if (ci.kv_type_v != ci.kv_type) {
        snprintf(sv->minfo.cache_type_buf, sizeof sv->minfo.cache_type_buf, "%s/%s",
                 kipp_kv_type_name(ci.kv_type), kipp_kv_type_name(ci.kv_type_v));
        sv->minfo.cache_type = sv->minfo.cache_type_buf;
    }
    sv->minfo.prefix_caching = sv->p.prefix_caching;
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

void kipp_server_announce_drain(kipp_server *sv) {
    if (sv) atomic_store(&sv->announced, 1);
}

void kipp_server_drain(kipp_server *sv) {
    if (!sv || atomic_exchange(&sv->draining, 1)) return;
    atomic_store(&sv->announced, 1);
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
