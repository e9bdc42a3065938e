/* generate.c — kipp-server's generation requests: parsing (through a protocol adapter for
 * the APIs other than OpenAI's), rendering and tokenizing the prompt, submitting the choices
 * to the scheduler, then answering: SSE (or NDJSON) events from a content-reader callback,
 * or a whole body (a large one piece by piece). The HTTP rules around it are http.c's. */
#include "server/http_int.h"

#include "server/api.h"

#include "server/structured.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

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
    int cut; /* ended by the shutdown deadline: an error its client sees, not a finish */
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
    const srv_api_ops *api; /* another protocol's adapter (NULL: OpenAI) and its state */
    void *api_state;
} gen_state;


/* ---- generation ------------------------------------------------------------------------- */

/* what a request cut by the shutdown deadline is told */
#define SHUTDOWN_MSG "the server is shutting down: the request was cut at its shutdown timeout"

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
 * (kipp_server_shutdown) the request ends at once as cancelled with gs->cut set. */
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
        const double t = srv_now();
        if (t - gs->t_checked >= WAIT_SLICE_MS * 1e-3 || k < 0) {
            gs->t_checked = t;
            const int ps = srv_peer_state(gs->fd);
            if (ps == PEER_GONE) {
                cancel_all(gs);
                *gone = 1;
                return KIPP_FINISH_CANCELLED;
            }
            if (ps == PEER_FIN && !gs->probed) {
                gs->probed = 1;
                if (gs->rq.stream) {
                    const char *probe = gs->api && gs->api->probe ? gs->api->probe : ": probe\n\n";
                    kipp_buf_put(&gs->out, probe, strlen(probe));
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
                    cancel_all(gs); /* the shutdown deadline: end it as cut */
                    gc->tok0 = gc->n_seen;
                    gs->turn = (uint32_t)(gc - gs->ch + 1) % gs->n_ch;
                    *which = gc;
                    gs->cut = 1;
                    return KIPP_FINISH_CANCELLED;
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
        if (fin == KIPP_FINISH_CANCELLED && atomic_load(&gs->sv->stopping)) gs->cut = 1;
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
    gs->meta.queue_s = cs->queue_s;
    gs->meta.ttft_s = cs->ttft_s;
    gs->meta.elapsed_s = srv_now() - gs->t_start;
}

/* A generation request's whole time, arrival to its last byte queued. */
static void note_duration(gen_state *gs) {
    pthread_mutex_lock(&gs->sv->mu);
    kipp_hist_add(&gs->sv->counters.duration, srv_now() - gs->t_start);
    pthread_mutex_unlock(&gs->sv->mu);
}

static void gen_free(gen_state *gs) {
    if (!gs) return;
    for (uint32_t i = 0; i < gs->n_ch; i++) {
        kipp_req_release(gs->ch[i].req);
        oai_gen_free(&gs->ch[i].g);
    }
    free(gs->ch);
    if (gs->api && gs->api->free_state) gs->api->free_state(gs->api_state);
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

/* A stream in another protocol (one choice): its adapter's events for what was decided. */
static void api_step(gen_state *gs, gen_choice *gc, kipp_finish fin) {
    if (fin == KIPP_FINISH_ERROR || fin == KIPP_FINISH_CANCELLED) {
        cancel_all(gs);
        fill_meta(gs, gc, KIPP_FINISH_NONE);
        gs->api->stream_error(gs->api_state, &gs->meta,
                              fin == KIPP_FINISH_ERROR ? kipp_req_error(gc->req)
                              : gs->cut                ? SHUTDOWN_MSG
                                                       : "the request was cancelled",
                              gs->cut ? "server_shutdown" : "server_error", &gs->out);
        gs->done = 1;
        return;
    }
    if (fin != KIPP_FINISH_NONE) oai_gen_finish(&gc->g);
    fill_meta(gs, gc, fin);
    gs->api->stream_events(gs->api_state, &gc->g, &gs->meta, gs->meta.finish_reason, &gs->out);
    if (gc->g.oom) gs->ch[0].g.oom = 1;
    if (fin != KIPP_FINISH_NONE) {
        gc->done = 1;
        gs->done = 1;
        note_duration(gs);
    }
}

/* Why choice gc, finished as fin, has no answer, or NULL: an error or a cancellation, or
 * (echo with logprobs) a prompt whose log-probabilities were not all computed (a pool too
 * small for it, or the shutdown deadline): an error, never entries left out. */
static const char *gen_failure(const gen_state *gs, const gen_choice *gc, kipp_finish fin) {
    if (fin == KIPP_FINISH_ERROR) return kipp_req_error(gc->req);
    if (fin == KIPP_FINISH_CANCELLED && gs->cut) return SHUTDOWN_MSG;
    if (fin == KIPP_FINISH_CANCELLED) return "the request was cancelled";
    if (gs->rq.echo && gs->rq.logprobs && fin != KIPP_FINISH_NONE &&
        kipp_req_n_prompt_logprobs(gc->req) < gs->n_prompt)
        return "the prompt's log-probabilities could not all be computed (the KV pool cannot hold "
               "the prompt, or the server is shutting down)";
    return NULL;
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
        if (gs->api) {
            api_step(gs, gc, fin);
            continue;
        }
        const uint32_t tok0 = gc->tok0;
        const char *failed = gen_failure(gs, gc, fin);
        if (failed) {
            char *e = gs->cut ? oai_error_json(failed, "server_shutdown", NULL, "server_shutdown")
                              : oai_error_json(failed, "server_error", NULL, NULL);
            cancel_all(gs);
            sse(gs, e);
            /* a cut stream has no [DONE]: a client must not take it for a whole answer */
            if (!gs->cut) kipp_buf_put(&gs->out, "data: [DONE]\n\n", 14);
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
        res = srv_send_json(sv, c, cs, 200, kipp_buf_take(&first, NULL));
        note_duration(gs);
        gen_free(gs);
        return res;
    }
    srv_bulk_priority(cs);
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
        res = srv_send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
        gen_free(gs);
        return res;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    srv_common_headers(sv, cs, r);
    res = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    cs->responded = 1;
    cs->status = 200;
    srv_count(sv, cs->endpoint, 200);
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
            *res = srv_send_error(sv, c, cs, 400, err, "invalid_request_error", "messages", NULL);
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
        *res = srv_send_error(sv, c, cs, 400, msg, "invalid_request_error",
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
        *res = srv_send_error(sv, c, cs, oom ? 500 : 400, oom ? "out of memory tokenizing the prompt" : err,
                          oom ? "server_error" : "invalid_request_error",
                          gs->rq.ep == OAI_CHAT ? "messages" : "prompt", NULL);
        return oom ? 500 : 400;
    }
    *ids = buf;
    *n_ids = n;
    return 0;
}

/* Another protocol's request: its adapter makes the OpenAI request that oai_parse_tree
 * then checks (a failure's msg and param are the adapter's, in its protocol's names). */
static int parse_other(kipp_server *sv, conn_state *cs, gen_state *gs, oai_endpoint *ep, char *msg,
                       size_t msg_len, const char **param) {
    json_error_t je;
    json_t *in = json_loadb(cs->body.data ? cs->body.data : "", cs->body.len, 0, &je);
    srv_body_bytes_free(cs);
    *param = NULL;
    if (!in) {
        snprintf(msg, msg_len, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                 je.column);
        return -1;
    }
    if (!json_is_object(in)) {
        json_decref(in);
        snprintf(msg, msg_len, "the body must be a JSON object");
        return -1;
    }
    char unknown[64] = "";
    json_t *o = gs->api->to_openai(in, cs->endpoint, ep, &gs->api_state, msg, msg_len, param, unknown,
                                   sizeof unknown);
    json_decref(in);
    if (!o) return -1;
    const int rc = oai_parse_tree(o, *ep, sv->n_vocab, &gs->rq, msg, msg_len, param);
    json_decref(o);
    if (rc == 0 && unknown[0]) snprintf(gs->rq.unknown_field, sizeof gs->rq.unknown_field, "%s", unknown);
    return rc;
}

enum MHD_Result srv_handle_generate(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                                       oai_endpoint ep) {
    char msg[KIPP_ERR_LEN];
    const char *param = NULL;
    gen_state *gs = calloc(1, sizeof *gs);
    if (!gs) return srv_send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
    srv_hold_active(sv, cs); /* before the draining check: drain waits for it */
    gs->sv = sv;
    gs->cs = cs;
    gs->conn = c;
    gs->fd = srv_conn_fd(c);
    gs->http11 = cs->http11;
    gs->t_start = cs->t_start;
    enum MHD_Result res;
    if (atomic_load(&sv->draining)) {
        res = srv_send_error(sv, c, cs, 503, "the server is shutting down", "server_error", NULL,
                         "shutting_down");
        gen_free(gs);
        return res;
    }
    if (srv_parse_enter(sv) != 0) {
        res = srv_send_error(sv, c, cs, 503, "too many requests are being parsed; retry", "server_error",
                         NULL, "overloaded");
        gen_free(gs);
        return res;
    }
    /* the body's bytes go once parsed into a tree; its reservation stays until the request
     * is parsed (the tree and its copies are what the reservation now stands for) */
    gs->api = srv_api_get((srv_api)cs->api);
    if ((gs->api ? parse_other(sv, cs, gs, &ep, msg, sizeof msg, &param)
                 : oai_parse_freeing(cs->body.data ? cs->body.data : "", cs->body.len, ep, sv->n_vocab,
                                     &gs->rq, msg, sizeof msg, &param, srv_body_bytes_free, cs)) != 0) {
        srv_parse_leave(sv);
        res = srv_send_error(sv, c, cs, 400, msg, "invalid_request_error", param, NULL);
        gen_free(gs);
        return res;
    }
    srv_body_release(sv, cs); /* parsed: the body is not needed any more */
    if (oai_apply_tool_choice(&gs->rq, sv->m) != 0) {
        srv_parse_leave(sv);
        res = srv_send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
        gen_free(gs);
        return res;
    }
    if (gs->rq.unknown_field[0]) srv_note_ignored_field(sv, gs->rq.unknown_field);
    if (!srv_model_served(sv, gs->rq.model)) {
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist; this server serves '%.200s'%s",
                 gs->rq.model, sv->model_name,
                 sv->p.n_model_aliases ? " and its aliases (GET /v1/models lists them)" : "");
        srv_parse_leave(sv);
        res = srv_send_error(sv, c, cs, 404, msg, "invalid_request_error", "model", "model_not_found");
        gen_free(gs);
        return res;
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    const int bad = build_prompt(sv, c, cs, gs, &ids, &n_ids, &res);
    srv_parse_leave(sv);
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
        res = srv_send_error(sv, c, cs, 400, msg, "invalid_request_error",
                         ep == OAI_CHAT ? "messages" : "prompt", "context_length_exceeded");
        gen_free(gs);
        return res;
    }
    kipp_req_params rp = {.prompt = ids, .n_prompt = (uint32_t)n_ids, .sampling = gs->rq.sp,
                          .ignore_eos = gs->rq.ignore_eos, .logprobs = gs->rq.logprobs,
                          .top_logprobs = gs->rq.top_logprobs,
                          .prompt_logprobs = gs->rq.echo && gs->rq.logprobs};
    const uint32_t room = sv->n_ctx - (uint32_t)n_ids;
    uint64_t mt = gs->rq.max_tokens >= 0 ? (uint64_t)gs->rq.max_tokens
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
        /* echo: every choice scores its own copy of the prompt (sched.h: a scoring request
         * shares no prefix), so each choice's entries are its request's */
        st = oai_gen_init(&gc->g, sv->m, &gs->rq) == 0 &&
                     (!gs->rq.echo || oai_gen_echo(&gc->g, ids, (uint32_t)n_ids) == 0)
                 ? kipp_sched_submit(sv->sched, &rp, &gc->req, err, sizeof err)
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
                  ? srv_send_error(sv, c, cs, 503, err, "server_error", NULL, "overloaded")
                  : srv_send_error(sv, c, cs, st == KIPP_ERR_INVALID_ARG ? 400 : 500,
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
        if (gs->n_ch > 1) srv_bulk_priority(cs);
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, gs, stream_free);
        if (!r) {
            gen_free(gs);
            return MHD_NO;
        }
        if (gs->api) { /* the protocol's opening events go out now, before the prefill ends
                        * (Anthropic's message_start, the Responses API's response.created) */
            fill_meta(gs, &gs->ch[0], KIPP_FINISH_NONE);
            gs->api->stream_events(gs->api_state, &gs->ch[0].g, &gs->meta, NULL, &gs->out);
        }
        MHD_add_response_header(r, "Content-Type", gs->api ? gs->api->stream_ctype : "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        srv_common_headers(sv, cs, r);
        res = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        cs->responded = 1;
        cs->status = 200;
        srv_count(sv, cs->endpoint, 200);
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
        const char *failed = gen_failure(gs, gc, fin);
        if (failed) {
            cancel_all(gs);
            res = gs->cut ? srv_send_error(sv, c, cs, 503, failed, "server_shutdown", NULL, "server_shutdown")
                          : srv_send_error(sv, c, cs, 500, failed, "server_error", NULL, NULL);
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
    if (gs->api) { /* another protocol: one choice, its adapter's body */
        res = srv_send_json(sv, c, cs, 200,
                            gs->api->response_json(gs->api_state, &gs->ch[0].g, gs->ch[0].req, &gs->meta,
                                                   gs->fins[0]));
        note_duration(gs);
        gen_free(gs);
        return res;
    }
    return send_body_pieces(sv, c, cs, gs);
}


/* POST /v1/messages/count_tokens (anthropic_http.c): the tokens of the prompt that the
 * request on cs's body would have, parsed by the route's adapter, rendered and tokenized
 * exactly as srv_handle_generate does (so the count is the generation's n_prompt). Returns
 * 0 with *n_tokens, or nonzero with the error already sent (*res). */
int srv_count_prompt_tokens(kipp_server *sv, struct MHD_Connection *c, conn_state *cs, size_t *n_tokens,
                            enum MHD_Result *res) {
    char msg[KIPP_ERR_LEN];
    const char *param = NULL;
    oai_endpoint ep = OAI_CHAT;
    gen_state *gs = calloc(1, sizeof *gs);
    if (!gs) return *res = srv_send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL), 500;
    gs->api = srv_api_get((srv_api)cs->api);
    if (srv_parse_enter(sv) != 0) {
        *res = srv_send_error(sv, c, cs, 503, "too many requests are being parsed; retry", "server_error", NULL,
                              "overloaded");
        gen_free(gs);
        return 503;
    }
    int status = 0;
    int32_t *ids = NULL;
    if (!gs->api || parse_other(sv, cs, gs, &ep, msg, sizeof msg, &param) != 0) {
        *res = srv_send_error(sv, c, cs, 400, gs->api ? msg : "no adapter for this route", "invalid_request_error",
                              param, NULL);
        status = 400;
    } else if (!srv_model_served(sv, gs->rq.model)) {
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist; this server serves '%.200s'", gs->rq.model,
                 sv->model_name);
        *res = srv_send_error(sv, c, cs, 404, msg, "invalid_request_error", "model", "model_not_found");
        status = 404;
    } else {
        srv_body_release(sv, cs);
        status = build_prompt(sv, c, cs, gs, &ids, n_tokens, res);
    }
    srv_parse_leave(sv);
    free(ids);
    gen_free(gs);
    return status;
}
