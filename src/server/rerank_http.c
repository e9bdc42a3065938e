/* rerank_http.c — the HTTP handler of POST /v1/rerank (and /rerank, /v1/reranking,
 * /reranking): checks that the served model is a reranker, parses the body (rerank.c),
 * tokenizes every document's prompt (all of them before anything runs, so a document too
 * long for the context is a 400 naming it), then scores them through the scheduler, each a
 * request of max_tokens 1 that records the last prompt position's log-probabilities of the
 * two label tokens (kipp_req_params.score_ids): the first document alone, so that its
 * prompt enters the prefix cache and the others read their common prefix (system prompt,
 * instruction, query) from it, then the rest RERANK_INFLIGHT at a time, batched by the
 * scheduler. Errors are OpenAI's shape. Not here: the request's fields, the prompt format
 * and the response body (rerank.c). */
#include "server/http_int.h"

#include "server/rerank.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RERANK_INFLIGHT 8 /* documents submitted at once (the rest wait their turn here) */

/* One request's documents: their prompts, then their scores. */
typedef struct {
    kipp_server *sv;
    rerank_request rq;
    int32_t labels[2];
    int32_t **ids; /* [rq.n_docs] */
    size_t *n_ids;
    double *scores;
    uint64_t n_prompt, n_cached;
    const char *code; /* the error's code, if any ("model_not_found", ...) */
} rerank_job;

static void job_free(rerank_job *j) {
    for (size_t i = 0; j->ids && i < j->rq.n_docs; i++) free(j->ids[i]);
    free(j->ids);
    free(j->n_ids);
    free(j->scores);
    rerank_request_free(&j->rq);
}

/* Parses the body into j->rq. 0, or an HTTP status with msg and *param set. */
static int parse_body(kipp_server *sv, conn_state *cs, rerank_job *j, char *msg, size_t msg_len,
                      const char **param) {
    json_error_t je;
    json_t *in = json_loadb(cs->body.data ? cs->body.data : "", cs->body.len, JSON_REJECT_DUPLICATES, &je);
    srv_body_bytes_free(cs);
    *param = NULL;
    if (!in) {
        snprintf(msg, msg_len, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                 je.column);
        return 400;
    }
    char unknown[64] = "";
    const int rc = rerank_parse(in, &j->rq, msg, msg_len, param, unknown, sizeof unknown);
    json_decref(in);
    if (rc != 0) return rc == -2 ? 500 : 400;
    if (unknown[0]) srv_note_ignored_field(sv, unknown);
    if (!srv_model_served(sv, j->rq.model)) {
        snprintf(msg, msg_len, "the model '%.200s' does not exist; this server serves '%.200s'%s", j->rq.model,
                 sv->model_name, sv->p.n_model_aliases ? " and its aliases (GET /v1/models lists them)" : "");
        *param = "model";
        j->code = "model_not_found";
        return 404;
    }
    return 0;
}

/* Every document's prompt as tokens. 0, or an HTTP status with msg and *param set. */
static int tokenize_all(kipp_server *sv, rerank_job *j, char *msg, size_t msg_len, const char **param) {
    const size_t n = j->rq.n_docs;
    j->ids = calloc(n, sizeof *j->ids);
    j->n_ids = calloc(n, sizeof *j->n_ids);
    j->scores = calloc(n, sizeof *j->scores);
    if (!j->ids || !j->n_ids || !j->scores) return snprintf(msg, msg_len, "out of memory"), 500;
    const uint32_t max_prompt = sv->p.max_prompt_tokens ? sv->p.max_prompt_tokens : sv->n_ctx - 1;
    const int parse = !sv->p.content_text;
    for (size_t i = 0; i < n; i++) {
        char err[KIPP_ERR_LEN];
        snprintf(j->rq.param, sizeof j->rq.param, "documents[%zu]", i);
        *param = j->rq.param;
        const kipp_status st = rerank_prompt(sv->m, &j->rq, i, parse, &j->ids[i], &j->n_ids[i], err, sizeof err);
        if (st != KIPP_OK) {
            snprintf(msg, msg_len, "%s: %.400s", j->rq.param, st == KIPP_ERR_NOMEM ? "out of memory" : err);
            return st == KIPP_ERR_NOMEM ? 500 : 400;
        }
        if (j->n_ids[i] > max_prompt) {
            snprintf(msg, msg_len, "%s: its prompt (the reranker's template, the instruction, the query "
                     "and the document) has %zu tokens; this server accepts at most %u",
                     j->rq.param, j->n_ids[i], max_prompt);
            j->code = "context_length_exceeded";
            return 400;
        }
        j->n_prompt += j->n_ids[i];
    }
    *param = NULL;
    return 0;
}

static kipp_status submit_doc(rerank_job *j, size_t i, kipp_req **out, char *err, size_t err_len) {
    kipp_req_params rp = {.prompt = j->ids[i], .n_prompt = (uint32_t)j->n_ids[i], .max_tokens = 1,
                          .sampling = kipp_sampler_default_params(), .n_score_ids = 2,
                          .score_ids = {j->labels[0], j->labels[1]}};
    rp.sampling.temperature = 0; /* the token drawn is not used: the cheapest draw */
    return kipp_sched_submit(j->sv->sched, &rp, out, err, err_len);
}

/* Takes the finished request of document i: its score. 0, or an HTTP status with msg set. */
static int take_score(rerank_job *j, kipp_req *r, size_t i, uint32_t got, kipp_finish fin, char *msg,
                      size_t msg_len) {
    const kipp_gen_token *t = got ? kipp_req_token(r, 0) : NULL;
    if (!t || t->n_top != 2 || fin == KIPP_FINISH_ERROR || fin == KIPP_FINISH_CANCELLED) {
        if (fin == KIPP_FINISH_ERROR) snprintf(msg, msg_len, "scoring document %zu failed: %s", i, kipp_req_error(r));
        else snprintf(msg, msg_len, "the request was cancelled (the server is shutting down)");
        j->code = fin == KIPP_FINISH_ERROR ? NULL : "shutting_down";
        return fin == KIPP_FINISH_ERROR ? 500 : 503;
    }
    j->scores[i] = rerank_score(t->top_logprob[0], t->top_logprob[1]);
    j->n_cached += kipp_req_n_cached(r);
    return 0;
}

/* Runs every document's prompt. 0, -1 (the client left), or an HTTP status with msg set. */
static int score_all(rerank_job *j, int fd, int http11, char *msg, size_t msg_len) {
    kipp_req *live[RERANK_INFLIGHT];
    size_t doc[RERANK_INFLIGHT];
    uint32_t have[RERANK_INFLIGHT];
    uint32_t n_live = 0;
    size_t next = 0, done = 0;
    int rc = 0, probed = 0;
    while (done < j->rq.n_docs && rc == 0) {
        /* the first document alone: the others' common prefix is then in the prefix cache */
        const uint32_t cap = done == 0 ? 1 : RERANK_INFLIGHT;
        while (n_live < cap && next < j->rq.n_docs && rc == 0) {
            char err[KIPP_ERR_LEN];
            const kipp_status st = submit_doc(j, next, &live[n_live], err, sizeof err);
            if (st == KIPP_ERR_BUSY && (n_live || done)) break; /* the queue is full: wait for room */
            if (st != KIPP_OK) {
                snprintf(msg, msg_len, "%s", st == KIPP_ERR_NOMEM ? "out of memory" : err);
                rc = st == KIPP_ERR_BUSY ? 503 : st == KIPP_ERR_INVALID_ARG ? 400 : 500;
                j->code = st == KIPP_ERR_BUSY ? "overloaded" : NULL;
                break;
            }
            have[n_live] = 0;
            doc[n_live++] = next++;
        }
        if (rc) break;
        if (!n_live) { /* others' requests fill the queue: ours wait for room */
            const struct timespec ts = {0, WAIT_SLICE_MS * 1000000L};
            nanosleep(&ts, NULL);
            if (srv_client_gone(fd, http11, &probed)) rc = -1;
            continue;
        }
        const int k = kipp_req_wait_any(live, have, n_live, 0, WAIT_SLICE_MS);
        if (srv_client_gone(fd, http11, &probed)) rc = -1;
        if (k < 0 || rc) continue;
        kipp_finish fin;
        have[k] = kipp_req_wait(live[k], have[k], 0, &fin);
        if (fin == KIPP_FINISH_NONE) continue; /* its token is out; the request ends next */
        rc = take_score(j, live[k], doc[k], have[k], fin, msg, msg_len);
        kipp_req_release(live[k]);
        live[k] = live[--n_live], doc[k] = doc[n_live], have[k] = have[n_live];
        done++;
    }
    for (uint32_t k = 0; k < n_live; k++) kipp_req_release(live[k]); /* cancels what still runs */
    return rc;
}

/* The request's log line: its prompts' tokens and how many the prefix cache served. */
static void note_log(conn_state *cs, const rerank_job *j) {
    cs->gen = 1;
    cs->n_prompt = (uint32_t)j->n_prompt;
    cs->n_cached = (uint32_t)j->n_cached;
    cs->n_completion = 0;
    cs->finish = "stop";
    cs->queue_s = cs->ttft_s = -1;
}

static enum MHD_Result answer(kipp_server *sv, struct MHD_Connection *c, conn_state *cs, rerank_job *j) {
    char msg[KIPP_ERR_LEN];
    const int rc = score_all(j, srv_conn_fd(c), cs->http11, msg, sizeof msg);
    if (rc < 0) { /* nobody to answer: close the connection */
        cs->responded = 1;
        return MHD_NO;
    }
    if (rc) return srv_send_error(sv, c, cs, rc, msg, rc == 400 ? "invalid_request_error" : "server_error", NULL, j->code);
    char id[48];
    pthread_mutex_lock(&sv->mu);
    snprintf(id, sizeof id, "rerank-%llu", (unsigned long long)++sv->next_id);
    pthread_mutex_unlock(&sv->mu);
    note_log(cs, j);
    return srv_send_json(sv, c, cs, 200, rerank_response_json(&j->rq, id, j->scores, j->n_prompt));
}

enum MHD_Result srv_handle_rerank(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    char msg[KIPP_ERR_LEN];
    const char *param = NULL;
    rerank_job j = {.sv = sv};
    srv_hold_active(sv, cs); /* drain waits for it */
    if (atomic_load(&sv->draining))
        return srv_send_error(sv, c, cs, 503, "the server is shutting down", "server_error", NULL, "shutting_down");
    if (!sv->sched) { /* an embedding model: no lm_head to score with */
        snprintf(msg, sizeof msg, "this server runs an embedding model: it cannot rerank");
        return srv_send_error(sv, c, cs, 400, msg, "invalid_request_error", "model", "model_not_reranker");
    }
    if (rerank_labels(sv->m, sv->p.reranking, j.labels, msg, sizeof msg) != 0)
        return srv_send_error(sv, c, cs, 400, msg, "invalid_request_error", "model", "model_not_reranker");
    if (srv_parse_enter(sv) != 0)
        return srv_send_error(sv, c, cs, 503, "too many requests are being parsed; retry", "server_error", NULL,
                              "overloaded");
    int st = parse_body(sv, cs, &j, msg, sizeof msg, &param);
    srv_body_release(sv, cs);
    if (!st) st = tokenize_all(sv, &j, msg, sizeof msg, &param);
    srv_parse_leave(sv);
    enum MHD_Result res;
    if (st)
        res = srv_send_error(sv, c, cs, st, msg, st == 500 ? "server_error" : "invalid_request_error", param,
                             j.code);
    else
        res = answer(sv, c, cs, &j);
    job_free(&j);
    return res;
}
