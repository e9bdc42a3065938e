/* anthropic.c — the Anthropic Messages API (POST /v1/messages) as a protocol adapter
 * (api.h): a Messages request becomes an OpenAI chat request (system, text / tool_use /
 * tool_result / thinking blocks, tools and tool_choice, thinking, stop_sequences, sampling),
 * and the generated reasoning, text and tool calls become Anthropic's content blocks, its
 * SSE events and its error shape. Pure translation: no HTTP (count_tokens' handler is
 * anthropic_http.c), no generation, no second JSON checker (oai_parse_tree checks the
 * result). The field table is docs/server.md's "Anthropic Messages API". */
#include "server/api.h"

#include "server/metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The stream's progress (the adapter's state for a /v1/messages request). */
enum { B_NONE, B_THINKING, B_TEXT, B_TOOL };
typedef struct {
    int started;       /* message_start was sent */
    int open;          /* the open block's kind */
    uint32_t n_blocks; /* blocks started: the next one's index */
    uint32_t n_calls;  /* tool calls whose block was started */
    kipp_buf ws;       /* whitespace-only text, held until text that is not follows */
} anth_state;

/* ---- the request ------------------------------------------------------------------------ */

typedef struct {
    char *msg;
    size_t msg_len;
    const char **param;
} aerr;

static json_t *fail(aerr *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static json_t *fail(aerr *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, e->msg_len, fmt, ap);
    va_end(ap);
    *e->param = param;
    return NULL;
}

static int given(const json_t *v) { return v && !json_is_null(v); }

/* The fields the Messages API defines (any other is ignored and logged once). */
static const char *const known_fields[] = {
    "model", "max_tokens", "messages", "system", "stop_sequences", "temperature", "top_p", "top_k",
    "stream", "metadata", "thinking", "tools", "tool_choice", "output_config", "service_tier",
    "cache_control", "container", "mcp_servers", "context_management", "diagnostics",
    "inference_geo", "speed", "user_profile_id", "workspace_id", NULL};

/* Defined fields Kipp does not implement: a 400 when given (null is "not given"). */
static const struct { const char *name, *why; } refused[] = {
    {"container", "code-execution containers are not supported (Kipp runs no tools)"},
    {"mcp_servers", "MCP servers are not supported (Kipp runs no tools; define client tools)"},
    {"context_management", "server-side context management is not supported"},
    {"diagnostics", "diagnostics are not supported"},
    {"inference_geo", "there is one place of inference: this server"},
};

static void note_unknown(json_t *in, char *unknown, size_t unknown_len) {
    const char *key;
    json_t *v;
    json_object_foreach(in, key, v) {
        int known = 0;
        for (const char *const *k = known_fields; *k && !known; k++) known = !strcmp(*k, key);
        if (!known) {
            snprintf(unknown, unknown_len, "%s", key);
            for (char *c = unknown; *c; c++) /* it goes into a log line */
                if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
            return;
        }
    }
}

/* Appends text (a string) to b, separated from what b holds by a newline. */
static void join_text(kipp_buf *b, const json_t *text) {
    if (b->len) kipp_buf_put(b, "\n", 1);
    kipp_buf_put(b, json_string_value(text), json_string_length(text));
}

static json_t *buf_string(const kipp_buf *b) { return json_stringn(b->data ? b->data : "", b->len); }

/* A text block {"type": "text", "text", "cache_control", "citations"} into b (what names it:
 * where). cache_control is ignored (the prefix cache is automatic); citations Kipp never
 * makes, so a block that carries some is refused rather than passed on without them. */
static int text_block(const json_t *blk, kipp_buf *b, aerr *e, const char *param, const char *where) {
    const json_t *t = json_object_get(blk, "text");
    if (!json_is_string(t)) return fail(e, param, "%s.text must be a string", where), -1;
    const json_t *cit = json_object_get(blk, "citations");
    if (given(cit) && !(json_is_array(cit) && json_array_size(cit) == 0))
        return fail(e, param, "%s.citations: citations are not supported", where), -1;
    join_text(b, t);
    return 0;
}

/* content that is a string or an array of text blocks (system, tool_result content). */
static int text_content(const json_t *c, kipp_buf *b, aerr *e, const char *param, const char *where) {
    if (json_is_string(c)) { join_text(b, c); return 0; }
    if (!json_is_array(c))
        return fail(e, param, "%s must be a string or an array of text blocks", where), -1;
    char w[96];
    for (size_t j = 0; j < json_array_size(c); j++) {
        const json_t *blk = json_array_get(c, j);
        const char *ty = json_string_value(json_object_get(blk, "type"));
        snprintf(w, sizeof w, "%s[%zu]", where, j);
        if (!ty) return fail(e, param, "%s must be a block with a 'type'", w), -1;
        if (strcmp(ty, "text"))
            return fail(e, param, "%s: '%.40s' blocks are not supported here (text only)", w, ty), -1;
        if (text_block(blk, b, e, param, w)) return -1;
    }
    return 0;
}

static json_t *message(const char *role, json_t *content) {
    json_t *m = json_pack("{s:s}", "role", role);
    json_object_set_new(m, "content", content ? content : json_string(""));
    return m;
}

/* {"type": "tool_result", "tool_use_id", "content", "is_error"} as a tool message; an error
 * result's text is marked "Error: " (Qwen's template has no flag for it). */
static json_t *tool_result(const json_t *blk, aerr *e, const char *w) {
    const json_t *id = json_object_get(blk, "tool_use_id");
    if (!json_is_string(id)) return fail(e, "messages", "%s.tool_use_id must be a string", w);
    const json_t *err = json_object_get(blk, "is_error");
    if (given(err) && !json_is_boolean(err)) return fail(e, "messages", "%s.is_error must be true or false", w);
    kipp_buf b = {0};
    if (json_is_true(err)) kipp_buf_puts(&b, "Error: ");
    const json_t *c = json_object_get(blk, "content");
    char wc[96];
    snprintf(wc, sizeof wc, "%s.content", w);
    if (given(c) && text_content(c, &b, e, "messages", wc)) {
        kipp_buf_free(&b);
        return NULL;
    }
    json_t *m = message("tool", buf_string(&b));
    json_object_set(m, "tool_call_id", (json_t *)id);
    kipp_buf_free(&b);
    return m;
}

/* A user turn: its text blocks joined into user messages, each tool_result a tool message
 * (in the order given). */
static int user_turn(const json_t *c, json_t *out, aerr *e, size_t i) {
    kipp_buf text = {0};
    int have_text = 0, rc = 0;
    char w[64];
    for (size_t j = 0; j < json_array_size(c) && !rc; j++) {
        const json_t *blk = json_array_get(c, j);
        const char *ty = json_string_value(json_object_get(blk, "type"));
        snprintf(w, sizeof w, "messages[%zu].content[%zu]", i, j);
        if (!ty) {
            rc = -1, fail(e, "messages", "%s must be a block with a 'type'", w);
        } else if (!strcmp(ty, "text")) {
            rc = text_block(blk, &text, e, "messages", w);
            have_text = 1;
        } else if (!strcmp(ty, "tool_result")) {
            if (have_text) json_array_append_new(out, message("user", buf_string(&text)));
            text.len = 0, have_text = 0;
            json_t *m = tool_result(blk, e, w);
            if (m) json_array_append_new(out, m);
            else rc = -1;
        } else {
            rc = -1, fail(e, "messages", "%s: '%.40s' blocks are not supported in a user turn (Kipp "
                                         "reads text and tool_result blocks)", w, ty);
        }
    }
    if (!rc && (have_text || json_array_size(c) == 0)) json_array_append_new(out, message("user", buf_string(&text)));
    kipp_buf_free(&text);
    return rc;
}

/* {"type": "tool_use", "id", "name", "input"} as an OpenAI tool call */
static json_t *tool_use(const json_t *blk, aerr *e, const char *w) {
    const json_t *id = json_object_get(blk, "id"), *name = json_object_get(blk, "name");
    const json_t *input = json_object_get(blk, "input");
    if (!json_is_string(id) || !json_is_string(name))
        return fail(e, "messages", "%s needs 'id' and 'name' strings", w);
    if (!json_is_object(input)) return fail(e, "messages", "%s.input must be an object", w);
    return json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function", "function", "name", name,
                     "arguments", input);
}

/* An assistant turn: text blocks into content, thinking into reasoning_content, tool_use
 * into tool_calls. redacted_thinking is left out: it is another model's encrypted reasoning,
 * which Kipp cannot read (and Qwen's template drops earlier turns' reasoning anyway). */
static int assistant_turn(const json_t *c, json_t *out, aerr *e, size_t i) {
    kipp_buf text = {0}, think = {0};
    json_t *calls = json_array();
    int have_think = 0, rc = 0;
    char w[64];
    for (size_t j = 0; j < json_array_size(c) && !rc; j++) {
        const json_t *blk = json_array_get(c, j);
        const char *ty = json_string_value(json_object_get(blk, "type"));
        snprintf(w, sizeof w, "messages[%zu].content[%zu]", i, j);
        if (!ty) {
            rc = -1, fail(e, "messages", "%s must be a block with a 'type'", w);
        } else if (!strcmp(ty, "text")) {
            rc = text_block(blk, &text, e, "messages", w);
        } else if (!strcmp(ty, "thinking")) {
            const json_t *t = json_object_get(blk, "thinking");
            if (!json_is_string(t)) rc = -1, fail(e, "messages", "%s.thinking must be a string", w);
            else join_text(&think, t), have_think = 1;
        } else if (!strcmp(ty, "tool_use")) {
            json_t *call = tool_use(blk, e, w);
            if (call) json_array_append_new(calls, call);
            else rc = -1;
        } else if (strcmp(ty, "redacted_thinking")) {
            rc = -1, fail(e, "messages", "%s: '%.40s' blocks are not supported in an assistant turn "
                                         "(Kipp reads text, thinking and tool_use blocks)", w, ty);
        }
    }
    if (!rc) {
        json_t *m = message("assistant", buf_string(&text));
        if (have_think) json_object_set_new(m, "reasoning_content", buf_string(&think));
        if (json_array_size(calls)) json_object_set(m, "tool_calls", calls);
        json_array_append_new(out, m);
    }
    json_decref(calls);
    kipp_buf_free(&text);
    kipp_buf_free(&think);
    return rc;
}

/* system, then messages, as OpenAI messages. The last turn must be the user's: a final
 * assistant turn (Anthropic's prefill) would need the template to continue it, not
 * implemented. */
static json_t *messages(json_t *in, aerr *e) {
    json_t *out = json_array();
    const json_t *sys = json_object_get(in, "system");
    if (given(sys)) {
        kipp_buf b = {0};
        const int rc = text_content(sys, &b, e, "system", "system");
        if (!rc) json_array_append_new(out, message("system", buf_string(&b)));
        kipp_buf_free(&b);
        if (rc) { json_decref(out); return NULL; }
    }
    const json_t *ms = json_object_get(in, "messages");
    if (!ms) { json_decref(out); return fail(e, "messages", "'messages' is required"); }
    if (!json_is_array(ms) || json_array_size(ms) == 0) {
        json_decref(out);
        return fail(e, "messages", "'messages' must be a non-empty array");
    }
    for (size_t i = 0; i < json_array_size(ms); i++) {
        const json_t *m = json_array_get(ms, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        const json_t *c = json_object_get(m, "content");
        int rc = 0;
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
            rc = -1, fail(e, "messages", "messages[%zu].role must be \"user\" or \"assistant\" (the system "
                                         "prompt is the top-level 'system')", i);
        else if (json_is_string(c))
            json_array_append_new(out, message(role, json_copy((json_t *)c)));
        else if (!json_is_array(c))
            rc = -1, fail(e, "messages", "messages[%zu].content must be a string or an array of blocks", i);
        else rc = !strcmp(role, "user") ? user_turn(c, out, e, i) : assistant_turn(c, out, e, i);
        if (!rc && i + 1 == json_array_size(ms) && !strcmp(role, "assistant"))
            rc = -1, fail(e, "messages", "the last message is the assistant's: continuing a prefilled "
                                         "assistant turn is not supported (end with a user turn)");
        if (rc) { json_decref(out); return NULL; }
    }
    return out;
}

/* tools[i] {"name", "description", "input_schema", "type": "custom", "strict", ...} as an
 * OpenAI function tool. Anthropic's own tools (bash, web search, ...: a type other than
 * custom) run on Anthropic's servers: refused. */
static json_t *tool(const json_t *t, size_t i, aerr *e) {
    if (!json_is_object(t)) return fail(e, "tools", "tools[%zu] must be an object", i);
    const json_t *ty = json_object_get(t, "type");
    if (given(ty) && !(json_is_string(ty) && !strcmp(json_string_value(ty), "custom")))
        return fail(e, "tools", "tools[%zu].type '%.60s' is not supported: Kipp runs no server tools; "
                                "define a client tool with 'name' and 'input_schema'",
                    i, json_is_string(ty) ? json_string_value(ty) : "?");
    static const char *const no[] = {"input_examples", "allowed_callers"};
    for (size_t k = 0; k < 2; k++)
        if (given(json_object_get(t, no[k])))
            return fail(e, "tools", "tools[%zu].%s is not supported", i, no[k]);
    if (json_is_true(json_object_get(t, "defer_loading")))
        return fail(e, "tools", "tools[%zu].defer_loading is not supported (no tool search)", i);
    const json_t *name = json_object_get(t, "name"), *schema = json_object_get(t, "input_schema");
    if (!json_is_string(name)) return fail(e, "tools", "tools[%zu].name must be a string", i);
    if (!json_is_object(schema)) return fail(e, "tools", "tools[%zu].input_schema must be an object", i);
    /* in OpenAI's order: the template writes the tools as JSON, keys in order */
    json_t *fn = json_pack("{s:O}", "name", name);
    const json_t *d = json_object_get(t, "description"), *strict = json_object_get(t, "strict");
    if (given(d)) json_object_set(fn, "description", (json_t *)d);
    json_object_set(fn, "parameters", (json_t *)schema);
    if (given(strict)) json_object_set(fn, "strict", (json_t *)strict);
    return json_pack("{s:s, s:o}", "type", "function", "function", fn);
}

/* tool_choice {"type": auto | any | tool | none, "name", "disable_parallel_tool_use"}:
 * any is OpenAI's "required" and tool a named function, so the grammar enforces both. */
static int tool_choice(const json_t *tc, json_t *o, aerr *e) {
    const char *ty = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !ty)
        return fail(e, "tool_choice", "'tool_choice' must be an object with a 'type'"), -1;
    const json_t *dp = json_object_get(tc, "disable_parallel_tool_use");
    if (given(dp) && !json_is_boolean(dp))
        return fail(e, "tool_choice", "tool_choice.disable_parallel_tool_use must be true or false"), -1;
    const int one = json_is_true(dp);
    if (!strcmp(ty, "auto") || !strcmp(ty, "none")) {
        if (one && !strcmp(ty, "auto"))
            return fail(e, "tool_choice", "tool_choice.disable_parallel_tool_use is supported with type "
                                          "\"any\" or \"tool\" (the grammar then allows one call), not "
                                          "with \"auto\""), -1;
        json_object_set_new(o, "tool_choice", json_string(ty));
    } else if (!strcmp(ty, "any")) {
        json_object_set_new(o, "tool_choice", json_string("required"));
    } else if (!strcmp(ty, "tool")) {
        const json_t *name = json_object_get(tc, "name");
        if (!json_is_string(name))
            return fail(e, "tool_choice", "tool_choice {\"type\": \"tool\"} needs a 'name' string"), -1;
        json_object_set_new(o, "tool_choice", json_pack("{s:s, s:{s:O}}", "type", "function", "function",
                                                        "name", name));
    } else {
        return fail(e, "tool_choice", "tool_choice.type must be \"auto\", \"any\", \"tool\" or \"none\""), -1;
    }
    if (one) json_object_set_new(o, "parallel_tool_calls", json_false());
    return 0;
}

/* thinking {"type": enabled (budget_tokens) | adaptive | disabled, "display"}. Not given:
 * off, as Anthropic's default is. */
static int thinking(const json_t *th, long long max_tokens, json_t *o, aerr *e) {
    int on = 0;
    if (given(th)) {
        const char *ty = json_string_value(json_object_get(th, "type"));
        if (!json_is_object(th) || !ty) return fail(e, "thinking", "'thinking' must be an object with a 'type'"), -1;
        const json_t *disp = json_object_get(th, "display");
        if (given(disp) && !(json_is_string(disp) && !strcmp(json_string_value(disp), "summarized")))
            return fail(e, "thinking", "thinking.display may only be \"summarized\" (Kipp returns the "
                                       "whole reasoning; \"omitted\" is not supported)"), -1;
        if (!strcmp(ty, "enabled")) {
            const json_t *b = json_object_get(th, "budget_tokens");
            if (!json_is_integer(b) || json_integer_value(b) < 1)
                return fail(e, "thinking", "thinking.budget_tokens must be a positive integer"), -1;
            if (max_tokens > 0 && json_integer_value(b) >= max_tokens)
                return fail(e, "thinking", "thinking.budget_tokens must be less than max_tokens"), -1;
            json_object_set_new(o, "max_reasoning_tokens", json_integer(json_integer_value(b)));
            on = 1;
        } else if (!strcmp(ty, "adaptive")) {
            on = 1;
        } else if (strcmp(ty, "disabled")) {
            return fail(e, "thinking", "thinking.type must be \"enabled\", \"adaptive\" or \"disabled\""), -1;
        }
    }
    json_object_set_new(o, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", on));
    return 0;
}

/* output_config {"format": {"type": "json_schema", "schema"}, "effort"}: the format is
 * OpenAI's json_schema response_format (grammar-enforced). */
static int output_config(const json_t *oc, json_t *o, aerr *e) {
    if (!json_is_object(oc)) return fail(e, "output_config", "'output_config' must be an object"), -1;
    if (given(json_object_get(oc, "effort")))
        return fail(e, "output_config", "output_config.effort is not supported (set thinking.budget_tokens)"), -1;
    const json_t *f = json_object_get(oc, "format");
    if (!given(f)) return 0;
    const char *ty = json_string_value(json_object_get(f, "type"));
    const json_t *schema = json_object_get(f, "schema");
    if (!ty || strcmp(ty, "json_schema") || !json_is_object(schema))
        return fail(e, "output_config", "output_config.format must be {\"type\": \"json_schema\", \"schema\": "
                                        "{...}}"), -1;
    json_object_set_new(o, "response_format", json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema",
                                                        "json_schema", "name", "output", "schema", schema));
    return 0;
}

/* A number field in [lo, hi] ((lo, hi] when lo_open) copied to o. */
static int number(json_t *in, json_t *o, const char *name, double lo, double hi, int lo_open, aerr *e) {
    const json_t *v = json_object_get(in, name);
    if (!given(v)) return 0;
    const double x = json_number_value(v);
    if (!json_is_number(v) || x < lo || x > hi || (lo_open && x <= lo))
        return fail(e, name, "'%s' must be a number in %s%g, %g]", name, lo_open ? "(" : "[", lo, hi), -1;
    json_object_set(o, name, (json_t *)v);
    return 0;
}

/* A string field that may only be ok (or not given). */
static int only(json_t *in, const char *name, const char *ok, const char *why, aerr *e) {
    const json_t *v = json_object_get(in, name);
    if (given(v) && !(json_is_string(v) && !strcmp(json_string_value(v), ok)))
        return fail(e, name, "'%s' may only be \"%s\" (%s)", name, ok, why), -1;
    return 0;
}

/* model, max_tokens (required unless counting), stream; and the fields refused whole. */
static int limits(json_t *in, json_t *o, int counting, long long *max_tokens, aerr *e) {
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++)
        if (given(json_object_get(in, refused[k].name)))
            return fail(e, refused[k].name, "'%s' is not supported: %s", refused[k].name, refused[k].why), -1;
    const json_t *model = json_object_get(in, "model");
    if (!json_is_string(model)) return fail(e, "model", "'model' is required (a string)"), -1;
    json_object_set(o, "model", (json_t *)model);
    const json_t *mt = json_object_get(in, "max_tokens");
    if (!given(mt) && !counting) return fail(e, "max_tokens", "'max_tokens' is required"), -1;
    if (given(mt) && (!json_is_integer(mt) || json_integer_value(mt) < 1))
        return fail(e, "max_tokens", "'max_tokens' must be a positive integer"), -1;
    *max_tokens = given(mt) ? json_integer_value(mt) : -1;
    if (given(mt) && !counting) json_object_set(o, "max_tokens", (json_t *)mt);
    const json_t *s = json_object_get(in, "stream");
    if (given(s) && !json_is_boolean(s)) return fail(e, "stream", "'stream' must be true or false"), -1;
    if (given(s) && !counting) json_object_set(o, "stream", (json_t *)s);
    return 0;
}

/* temperature, top_p, top_k, stop_sequences (OpenAI's stop: its checks apply), and the
 * fields accepted without effect: metadata, service_tier "auto", speed "standard". */
static int sampling(json_t *in, json_t *o, aerr *e) {
    if (number(in, o, "temperature", 0, 1, 0, e) || number(in, o, "top_p", 0, 1, 1, e)) return -1;
    const json_t *k = json_object_get(in, "top_k");
    if (given(k) && (!json_is_integer(k) || json_integer_value(k) < 0 || json_integer_value(k) > 1000000))
        return fail(e, "top_k", "'top_k' must be an integer in [0, 1000000] (0: off)"), -1;
    if (given(k)) json_object_set(o, "top_k", (json_t *)k);
    const json_t *st = json_object_get(in, "stop_sequences");
    if (given(st) && !json_is_array(st))
        return fail(e, "stop_sequences", "'stop_sequences' must be an array of strings"), -1;
    if (given(st) && json_array_size(st)) json_object_set(o, "stop", (json_t *)st);
    const json_t *md = json_object_get(in, "metadata"), *user = json_object_get(md, "user_id");
    if (given(md) && (!json_is_object(md) || (given(user) && !json_is_string(user))))
        return fail(e, "metadata", "'metadata' must be an object whose user_id is a string"), -1;
    if (only(in, "service_tier", "auto", "one tier here", e) || only(in, "speed", "standard", "no fast mode", e))
        return -1;
    return 0;
}

/* tools: each a client tool (tool()) */
static int tools(const json_t *ts, json_t *o, aerr *e) {
    if (!json_is_array(ts)) return fail(e, "tools", "'tools' must be an array"), -1;
    json_t *out = json_array();
    json_object_set_new(o, "tools", out);
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *t = tool(json_array_get(ts, i), i, e);
        if (!t) return -1;
        json_array_append_new(out, t);
    }
    return 0;
}

static json_t *to_openai(json_t *in, int endpoint, oai_endpoint *ep, void **state, char *msg, size_t msg_len,
                         const char **param, char *unknown, size_t unknown_len) {
    aerr e = {msg, msg_len, param};
    *ep = OAI_CHAT;
    *state = NULL;
    const int counting = endpoint == M_EP_COUNT_TOKENS;
    json_t *o = json_object();
    long long max_tokens = -1;
    const json_t *ts = json_object_get(in, "tools"), *tc = json_object_get(in, "tool_choice"),
                 *oc = json_object_get(in, "output_config");
    if (!o || limits(in, o, counting, &max_tokens, &e) || sampling(in, o, &e) ||
        thinking(json_object_get(in, "thinking"), max_tokens, o, &e) || (given(ts) && tools(ts, o, &e)) ||
        (given(tc) && tool_choice(tc, o, &e)) || (given(oc) && output_config(oc, o, &e)))
        goto bad;
    json_t *ms = messages(in, &e);
    if (!ms) goto bad;
    json_object_set_new(o, "messages", ms);
    note_unknown(in, unknown, unknown_len);
    if (!counting && !(*state = calloc(1, sizeof(anth_state)))) {
        fail(&e, NULL, "out of memory");
        goto bad;
    }
    return o;
bad:
    json_decref(o);
    return NULL;
}

/* ---- errors ----------------------------------------------------------------------------- */

/* Anthropic's error types by HTTP status. Kipp's 503s (busy, loading, shutting down) are
 * overloaded_error with the status kept: the SDK retries 503 as it does 529, and honours
 * the Retry-After that comes with it. */
static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

/* Checks made on the OpenAI request (oai_parse_tree) name OpenAI's fields: the Anthropic
 * field they came from leads the message. */
static const char *anthropic_field(const char *param) {
    static const char *const map[][2] = {
        {"stop", "stop_sequences"}, {"response_format", "output_config.format"},
        {"parallel_tool_calls", "tool_choice.disable_parallel_tool_use"},
        {"chat_template_kwargs", "thinking"}, {"max_reasoning_tokens", "thinking.budget_tokens"}};
    for (size_t i = 0; param && i < sizeof map / sizeof *map; i++)
        if (!strncmp(param, map[i][0], strlen(map[i][0]))) return map[i][1];
    return NULL;
}

static char *error_body(int status, const char *message, const char *param) {
    const char *field = status == 400 ? anthropic_field(param) : NULL;
    char *full = NULL;
    if (field) {
        const size_t n = strlen(field) + strlen(message) + 3;
        if ((full = malloc(n))) snprintf(full, n, "%s: %s", field, message);
    }
    json_t *o = json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type", error_type(status),
                          "message", full ? full : message);
    free(full);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static char *error_json(int status, const char *message, const char *type, const char *param, const char *code) {
    (void)type, (void)code;
    return error_body(status, message, param);
}

/* ---- the reply -------------------------------------------------------------------------- */

static const char *stop_reason(const oai_gen *g, const char *finish) {
    if (!strcmp(finish, "length")) return "max_tokens";
    if (!strcmp(finish, "tool_calls")) return "tool_use";
    return g->stop_index >= 0 ? "stop_sequence" : "end_turn";
}

static json_t *stop_sequence(const oai_gen *g, const char *finish) {
    return !strcmp(stop_reason(g, finish), "stop_sequence") ? json_string(g->rq->stop[g->stop_index])
                                                            : json_null();
}

/* input_tokens excludes the tokens read from the prefix cache, as Anthropic counts them: the
 * prompt is input_tokens + cache_read_input_tokens (= count_tokens' input_tokens). */
static json_t *usage(const oai_meta *meta) {
    return json_pack("{s:I, s:I, s:i, s:I}", "input_tokens", (json_int_t)(meta->n_prompt - meta->n_cached),
                     "output_tokens", (json_int_t)meta->n_completion, "cache_creation_input_tokens", 0,
                     "cache_read_input_tokens", (json_int_t)meta->n_cached);
}

/* "msg_" and the request's number (meta->id is "chatcmpl-N") */
static json_t *message_id(const oai_meta *meta) {
    const char *dash = strrchr(meta->id, '-');
    char id[64];
    snprintf(id, sizeof id, "msg_%s", dash ? dash + 1 : meta->id);
    return json_string(id);
}

/* "toolu_" and the call id's hex digits ("call_" + 16) */
static json_t *tool_id(const oai_call *c) {
    char id[32];
    snprintf(id, sizeof id, "toolu_%s", c->id + 5);
    return json_string(id);
}

static json_t *envelope(const oai_meta *meta) {
    json_t *o = json_pack("{s:o, s:s, s:s, s:s, s:[]}", "id", message_id(meta), "type", "message", "role",
                          "assistant", "model", meta->model, "content");
    return o;
}

static int all_ws(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", s[i])) return 0;
    return 1;
}

/* The content blocks of the whole reply: thinking, text, tool_use. Text that is only
 * whitespace beside tool calls (and whitespace after the text) is no block. A call cut short
 * (max_tokens) whose arguments are not a JSON object has input {}. */
static json_t *content_blocks(const oai_gen *g) {
    json_t *c = json_array();
    if (g->reasoning.len)
        json_array_append_new(c, json_pack("{s:s, s:s%, s:s}", "type", "thinking", "thinking", g->reasoning.data,
                                           g->reasoning.len, "signature", ""));
    size_t n = g->content.len;
    while (g->n_calls && n && strchr(" \t\r\n", g->content.data[n - 1])) n--;
    if (n) json_array_append_new(c, json_pack("{s:s, s:s%}", "type", "text", "text", g->content.data, n));
    for (uint32_t i = 0; i < g->n_calls; i++) {
        const oai_call *k = &g->calls[i];
        json_t *input = json_loadb(k->args.data ? k->args.data : "", k->args.len, 0, NULL);
        if (!json_is_object(input)) json_decref(input), input = json_object();
        json_array_append_new(c, json_pack("{s:s, s:o, s:s%, s:o}", "type", "tool_use", "id", tool_id(k), "name",
                                           k->name.data ? k->name.data : "", k->name.len, "input", input));
    }
    return c;
}

static char *response_json(void *state, oai_gen *g, const kipp_req *req, const oai_meta *meta, const char *finish) {
    (void)state, (void)req;
    json_t *o = envelope(meta);
    if (!o) return NULL;
    json_object_set_new(o, "content", content_blocks(g));
    json_object_set_new(o, "stop_reason", json_string(stop_reason(g, finish)));
    json_object_set_new(o, "stop_sequence", stop_sequence(g, finish));
    json_object_set_new(o, "usage", usage(meta));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* ---- streaming -------------------------------------------------------------------------- */

/* "event: NAME\ndata: JSON\n\n" (data taken) */
static void event(kipp_buf *out, const char *name, json_t *data) {
    char *s = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!s) { out->oom = 1; return; }
    kipp_buf_printf(out, "event: %s\ndata: %s\n\n", name, s);
    free(s);
}

static void close_block(anth_state *st, kipp_buf *out) {
    if (st->open == B_NONE) return;
    event(out, "content_block_stop", json_pack("{s:s, s:I}", "type", "content_block_stop", "index",
                                               (json_int_t)st->n_blocks - 1));
    st->open = B_NONE;
}

/* Makes a block of kind the open one (closing another), started with block (taken). */
static void open_block(anth_state *st, int kind, json_t *block, kipp_buf *out) {
    if (st->open == kind && kind != B_TOOL) { json_decref(block); return; }
    close_block(st, out);
    event(out, "content_block_start", json_pack("{s:s, s:I, s:o}", "type", "content_block_start", "index",
                                                (json_int_t)st->n_blocks, "content_block", block));
    st->n_blocks++;
    st->open = kind;
}

static void delta(anth_state *st, const char *type, const char *key, json_t *value, kipp_buf *out) {
    if (!value) { out->oom = 1; return; }
    event(out, "content_block_delta", json_pack("{s:s, s:I, s:{s:s, s:o}}", "type", "content_block_delta",
                                                "index", (json_int_t)st->n_blocks - 1, "delta", "type", type,
                                                key, value));
}

static void text_out(anth_state *st, const char *s, size_t n, kipp_buf *out) {
    open_block(st, B_TEXT, json_pack("{s:s, s:s}", "type", "text", "text", ""), out);
    delta(st, "text_delta", "text", json_stringn(s, n), out);
}

/* Decided text: whitespace alone is held (it may only separate tool calls); text that is
 * not goes out with the whitespace before it. */
static void text_step(anth_state *st, oai_gen *g, kipp_buf *out) {
    if (!g->content.len) return;
    kipp_buf_put(&st->ws, g->content.data, g->content.len);
    g->content.len = 0;
    if (all_ws(st->ws.data, st->ws.len)) return;
    text_out(st, st->ws.data, st->ws.len, out);
    st->ws.len = 0;
}

/* New tool calls and arguments: a tool_use block per call, input_json_delta for its
 * arguments (whole UTF-8 characters: a character split across tokens waits). */
static void calls_step(anth_state *st, oai_gen *g, kipp_buf *out) {
    for (;;) {
        if (st->open == B_TOOL) {
            oai_call *c = &g->calls[st->n_calls - 1];
            size_t n = c->args.len - c->args_sent, cut = 0;
            json_t *s = NULL;
            while (n > cut && cut < 4 && !(s = json_stringn(c->args.data + c->args_sent, n - cut))) cut++;
            if (s) {
                c->args_sent += n - cut;
                delta(st, "input_json_delta", "partial_json", s, out);
            }
        }
        if (st->n_calls == g->n_calls) return;
        oai_call *c = &g->calls[st->n_calls++];
        st->ws.len = 0; /* whitespace before a call is no text */
        open_block(st, B_TOOL, json_pack("{s:s, s:o, s:s%, s:{}}", "type", "tool_use", "id", tool_id(c), "name",
                                         c->name.data ? c->name.data : "", c->name.len, "input"),
                   out);
        c->head_sent = 1;
    }
}

static void stream_events(void *state, oai_gen *g, const oai_meta *meta, const char *finish, kipp_buf *out) {
    anth_state *st = state;
    if (!st->started) {
        json_t *m = envelope(meta);
        json_object_set_new(m, "stop_reason", json_null());
        json_object_set_new(m, "stop_sequence", json_null());
        json_object_set_new(m, "usage", usage(meta));
        event(out, "message_start", json_pack("{s:s, s:o}", "type", "message_start", "message", m));
        event(out, "ping", json_pack("{s:s}", "type", "ping"));
        st->started = 1;
    }
    if (g->reasoning.len) {
        open_block(st, B_THINKING, json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", ""),
                   out);
        delta(st, "thinking_delta", "thinking", json_stringn(g->reasoning.data, g->reasoning.len), out);
        g->reasoning.len = 0;
    }
    text_step(st, g, out);
    calls_step(st, g, out);
    if (!finish) goto done;
    if (st->ws.len && !g->n_calls) text_out(st, st->ws.data, st->ws.len, out);
    close_block(st, out);
    json_t *d = json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta", "stop_reason",
                          stop_reason(g, finish), "stop_sequence", stop_sequence(g, finish), "usage", usage(meta));
    event(out, "message_delta", d);
    event(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
done:
    if (out->oom || st->ws.oom) g->oom = 1;
}

/* cut by the shutdown deadline: overloaded_error (503's), which tells a client to retry */
static void stream_error(void *state, const oai_meta *meta, const char *message, const char *type,
                         kipp_buf *out) {
    (void)state, (void)meta;
    char *s = error_body(strcmp(type, "server_shutdown") ? 500 : 503, message, NULL);
    if (!s) { out->oom = 1; return; }
    kipp_buf_printf(out, "event: error\ndata: %s\n\n", s);
    free(s);
}

static void free_state(void *state) {
    anth_state *st = state;
    if (st) kipp_buf_free(&st->ws);
    free(st);
}

const srv_api_ops srv_api_anthropic = {.name = "anthropic", .to_openai = to_openai, .error_json = error_json,
                                       .stream_ctype = "text/event-stream", .stream_events = stream_events,
                                       .stream_error = stream_error, .response_json = response_json,
                                       .free_state = free_state};
