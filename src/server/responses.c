/* responses.c — the output half of the Responses API adapter (responses.h): the generated
 * reasoning, text and tool calls (oai_gen) as output items (reasoning, message,
 * function_call), written as typed SSE events while streaming (response.created, ...
 * response.output_text.delta, ... response.completed, each with its sequence_number) or as
 * one Response object. Both paths run the same item builder, so a streamed response's final
 * object is the non-streamed one. Also the errors, whose param names the Responses field.
 * Does not parse requests (responses_req.c) or touch HTTP. */
#include "server/responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- events ------------------------------------------------------------------------------ */

/* Appends "event: TYPE" and its data, {"type": TYPE, ...o, "sequence_number": N}, to out
 * (o is taken). out NULL: not streaming, nothing is written. */
static void event(resp_state *st, kipp_buf *out, const char *type, json_t *o) {
    if (!out) {
        json_decref(o);
        return;
    }
    json_t *ev = json_pack("{s:s}", "type", type);
    json_object_update(ev, o);
    json_decref(o);
    json_object_set_new(ev, "sequence_number", json_integer((json_int_t)st->seq++));
    char *s = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (!s) {
        out->oom = 1;
        return;
    }
    kipp_buf_printf(out, "event: %s\ndata: %s\n\n", type, s);
    free(s);
}

/* ---- the Response object ------------------------------------------------------------------- */

static json_t *usage_json(const resp_state *st, const oai_meta *meta) {
    const uint64_t rt = st->reasoning_tokens < meta->n_completion ? st->reasoning_tokens : meta->n_completion;
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)meta->n_prompt,
                     "input_tokens_details", "cached_tokens", (json_int_t)meta->n_cached, "output_tokens",
                     (json_int_t)meta->n_completion, "output_tokens_details", "reasoning_tokens", (json_int_t)rt,
                     "total_tokens", (json_int_t)meta->n_prompt + meta->n_completion);
}

/* status: "in_progress" (no output, no usage yet), "completed", "incomplete" (cut by
 * max_output_tokens) or "failed" (message: the error's). */
static json_t *response_obj(const resp_state *st, const oai_meta *meta, const char *status, const char *message) {
    const int begun = !strcmp(status, "in_progress");
    json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:n,s:n,s:s}", "id", st->id, "object", "response", "created_at",
                          (json_int_t)meta->created, "status", status, "error", "incomplete_details", "model",
                          meta->model ? meta->model : "");
    if (!strcmp(status, "incomplete"))
        json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    if (message) json_object_set_new(r, "error", json_pack("{s:s,s:s}", "code", "server_error", "message", message));
    json_object_set_new(r, "output", begun ? json_array() : json_deep_copy(st->output));
    json_object_update(r, st->echo);
    json_object_set_new(r, "usage", begun ? json_null() : usage_json(st, meta));
    return r;
}

/* ---- output items --------------------------------------------------------------------------- */

static json_int_t out_index(const resp_state *st) { return (json_int_t)json_array_size(st->output); }

/* the open item's part, with its text so far */
static json_t *open_part(const resp_state *st) {
    json_t *text = json_stringn(kipp_buf_str(&st->open_text), st->open_text.len);
    if (st->open == RESP_ITEM_REASONING) return json_pack("{s:s,s:o}", "type", "reasoning_text", "text", text);
    return json_pack("{s:s,s:o,s:[]}", "type", "output_text", "text", text, "annotations");
}

/* the open item: parts NULL for the empty one that output_item.added carries */
static json_t *open_item(const resp_state *st, const char *status, json_t *parts) {
    if (!parts) parts = json_array();
    if (st->open == RESP_ITEM_REASONING)
        return json_pack("{s:s,s:s,s:[],s:o,s:s}", "id", st->open_id, "type", "reasoning", "summary",
                         "content", parts, "status", status);
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", st->open_id, "type", "message", "role", "assistant",
                     "status", status, "content", parts);
}

static void begin_item(resp_state *st, resp_item_kind kind, kipp_buf *out) {
    st->open = kind;
    st->open_text.len = 0;
    kipp_buf_put(&st->open_text, "", 0);
    snprintf(st->open_id, sizeof st->open_id, "%s_%s%u", kind == RESP_ITEM_REASONING ? "rs" : "msg",
             st->id + 5, st->n_items++);
    event(st, out, "response.output_item.added",
          json_pack("{s:I,s:o}", "output_index", out_index(st), "item", open_item(st, "in_progress", NULL)));
    json_t *part = open_part(st);
    event(st, out, "response.content_part.added",
          json_pack("{s:s,s:I,s:i,s:o}", "item_id", st->open_id, "output_index", out_index(st), "content_index", 0,
                    "part", part));
}

/* Tokens of the reasoning as the model wrote them: its text re-tokenized, and the <think>
 * and </think> tags. */
static uint64_t reasoning_tokens(const kipp_model *m, const kipp_buf *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    char err[128];
    if (!m || kipp_tokenize_alloc(m, kipp_buf_str(text), text->len, 0, &ids, &n, err, sizeof err) != KIPP_OK) n = 0;
    free(ids);
    return n + 2;
}

/* Ends the open item (if any) with status: its .done events, and it joins the output. */
static void end_item(resp_state *st, const kipp_model *m, const char *status, kipp_buf *out) {
    if (st->open == RESP_ITEM_NONE) return;
    const int rs = st->open == RESP_ITEM_REASONING;
    json_t *text = json_stringn(kipp_buf_str(&st->open_text), st->open_text.len);
    json_t *done = json_pack("{s:s,s:I,s:i,s:O}", "item_id", st->open_id, "output_index", out_index(st),
                             "content_index", 0, "text", text);
    if (!rs) json_object_set_new(done, "logprobs", json_array());
    event(st, out, rs ? "response.reasoning_text.done" : "response.output_text.done", done);
    event(st, out, "response.content_part.done",
          json_pack("{s:s,s:I,s:i,s:o}", "item_id", st->open_id, "output_index", out_index(st), "content_index", 0,
                    "part", open_part(st)));
    json_t *item = open_item(st, status, json_pack("[o]", open_part(st)));
    event(st, out, "response.output_item.done", json_pack("{s:I,s:O}", "output_index", out_index(st), "item", item));
    json_array_append_new(st->output, item);
    json_decref(text);
    if (rs) st->reasoning_tokens += reasoning_tokens(m, &st->open_text);
    st->open = RESP_ITEM_NONE;
}

/* New text for an item of kind: the open one if it is that kind, else a new one. */
static void add_text(resp_state *st, const kipp_model *m, resp_item_kind kind, kipp_buf *text, kipp_buf *out) {
    if (!text->len) return;
    if (st->open != kind) {
        end_item(st, m, "completed", out);
        begin_item(st, kind, out);
    }
    kipp_buf_put(&st->open_text, text->data, text->len);
    json_t *d = json_pack("{s:s,s:I,s:i,s:s%}", "item_id", st->open_id, "output_index", out_index(st),
                          "content_index", 0, "delta", text->data, text->len);
    if (kind == RESP_ITEM_MESSAGE) json_object_set_new(d, "logprobs", json_array());
    event(st, out, kind == RESP_ITEM_MESSAGE ? "response.output_text.delta" : "response.reasoning_text.delta", d);
    text->len = 0;
}

/* A tool call (whole: oai_gen makes a call only once it is certain) as a function_call item:
 * its events, its arguments in one delta. */
static void call_item(resp_state *st, oai_call *c, kipp_buf *out) {
    char id[40];
    snprintf(id, sizeof id, "fc_%s", c->id + 5); /* call_<hex>: fc_<hex> */
    json_t *name = json_stringn(kipp_buf_str(&c->name), c->name.len);
    json_t *args = json_stringn(kipp_buf_str(&c->args), c->args.len);
    json_t *item = json_pack("{s:s,s:s,s:s,s:O,s:s,s:s}", "id", id, "type", "function_call", "call_id", c->id,
                             "name", name, "arguments", "", "status", "in_progress");
    event(st, out, "response.output_item.added", json_pack("{s:I,s:O}", "output_index", out_index(st), "item", item));
    event(st, out, "response.function_call_arguments.delta",
          json_pack("{s:s,s:I,s:O}", "item_id", id, "output_index", out_index(st), "delta", args));
    event(st, out, "response.function_call_arguments.done",
          json_pack("{s:s,s:I,s:O,s:O}", "item_id", id, "output_index", out_index(st), "name", name, "arguments", args));
    json_object_set(item, "arguments", args);
    json_object_set_new(item, "status", json_string("completed"));
    event(st, out, "response.output_item.done", json_pack("{s:I,s:O}", "output_index", out_index(st), "item", item));
    json_array_append_new(st->output, item);
    json_decref(name);
    json_decref(args);
    c->head_sent = 1;
    c->args_sent = c->args.len;
}

/* What g decided since the last call: reasoning, then text, then new calls (taken from g). */
static void advance(resp_state *st, oai_gen *g, kipp_buf *out) {
    add_text(st, g->m, RESP_ITEM_REASONING, &g->reasoning, out);
    add_text(st, g->m, RESP_ITEM_MESSAGE, &g->content, out);
    if (st->calls_done < g->n_calls) end_item(st, g->m, "completed", out);
    for (; st->calls_done < g->n_calls; st->calls_done++) call_item(st, &g->calls[st->calls_done], out);
}

/* The reply ended (finish: OpenAI's reason): the open item ends, a reply with no output at
 * all gets an empty message, and the final Response object is returned. */
static json_t *finish_all(resp_state *st, oai_gen *g, const oai_meta *meta, const char *finish, kipp_buf *out) {
    advance(st, g, out);
    const int cut = finish && !strcmp(finish, "length");
    end_item(st, g->m, cut ? "incomplete" : "completed", out);
    if (!json_array_size(st->output)) {
        begin_item(st, RESP_ITEM_MESSAGE, out);
        end_item(st, g->m, cut ? "incomplete" : "completed", out);
    }
    return response_obj(st, meta, cut ? "incomplete" : "completed", NULL);
}

/* response.created and response.in_progress, once */
static void start(resp_state *st, const oai_meta *meta, kipp_buf *out) {
    if (st->started) return;
    st->started = 1;
    event(st, out, "response.created", json_pack("{s:o}", "response", response_obj(st, meta, "in_progress", NULL)));
    event(st, out, "response.in_progress", json_pack("{s:o}", "response", response_obj(st, meta, "in_progress", NULL)));
}

static void stream_events(void *state, oai_gen *g, const oai_meta *meta, const char *finish, kipp_buf *out) {
    resp_state *st = state;
    start(st, meta, out);
    if (!finish) {
        advance(st, g, out);
        return;
    }
    json_t *r = finish_all(st, g, meta, finish, out);
    event(st, out, !strcmp(json_string_value(json_object_get(r, "status")), "incomplete") ? "response.incomplete"
                                                                                         : "response.completed",
          json_pack("{s:o}", "response", r));
}

/* An error after the stream began: OpenAI's `error` event (code: the error type), then
 * response.failed. */
static void stream_error(void *state, const oai_meta *meta, const char *message, const char *type,
                         kipp_buf *out) {
    resp_state *st = state;
    start(st, meta, out);
    event(st, out, "error", json_pack("{s:s,s:s,s:n}", "code", type, "message", message, "param"));
    event(st, out, "response.failed", json_pack("{s:o}", "response", response_obj(st, meta, "failed", message)));
}

static char *response_json(void *state, oai_gen *g, const kipp_req *req, const oai_meta *meta, const char *finish) {
    (void)req;
    json_t *r = finish_all(state, g, meta, finish, NULL);
    char *s = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    return s;
}

/* ---- errors ------------------------------------------------------------------------------ */

/* The chat request's names (oai_parse_tree's, the template's) as the Responses fields they
 * came from: tools[i].function.X is tools[i].X, messages is input, and so on. */
static const char *responses_param(const char *p, char *buf, size_t len) {
    static const char *const ren[][2] = {{"messages", "input"}, {"max_tokens", "max_output_tokens"},
                                         {"max_completion_tokens", "max_output_tokens"},
                                         {"response_format", "text.format"}};
    if (!p) return NULL;
    for (size_t i = 0; i < sizeof ren / sizeof ren[0]; i++)
        if (!strcmp(p, ren[i][0])) return ren[i][1];
    const char *f = strstr(p, ".function");
    if (!strncmp(p, "tools[", 6) && f) {
        snprintf(buf, len, "%.*s%s", (int)(f - p), p, f + 9);
        return buf;
    }
    return p;
}

char *resp_error_json(int status, const char *message, const char *type, const char *param,
                      const char *code) {
    (void)status;
    char buf[96];
    return oai_error_json(message, type, responses_param(param, buf, sizeof buf), code);
}

const srv_api_ops srv_api_responses = {.name = "responses", .to_openai = resp_to_openai,
                                       .error_json = resp_error_json, .stream_ctype = "text/event-stream",
                                       .stream_events = stream_events, .stream_error = stream_error,
                                       .response_json = response_json, .free_state = resp_state_free};
