/* responses_req.c — a Responses API request (POST /v1/responses) as the OpenAI chat request
 * that oai_parse_tree then checks: input items to chat messages (message, function_call,
 * function_call_output, reasoning), instructions to a first system message, flat function
 * tools to chat tools, text.format to response_format, reasoning.effort to Qwen3's thinking
 * switch. Every field the Responses API defines is implemented, accepted with a documented
 * reason, or a 400 naming it; a field outside it is ignored (reported in `unknown`). Does
 * not render, tokenize or generate; nothing is stored (previous_response_id is a 400). */
#include "server/responses.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

typedef struct {
    char *msg;
    size_t msg_len;
    const char **param;
} rerr;

/* a rejection's param when it names a part of a field ("input[3].content[0].type") */
static _Thread_local char param_buf[96];

static int fail(rerr *e, const char *param, const char *fmt, ...) {
    if (param && param != param_buf) snprintf(param_buf, sizeof param_buf, "%s", param);
    *e->param = param ? param_buf : NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, e->msg_len, fmt, ap);
    va_end(ap);
    return -1;
}

/* param_buf as printf makes it (then pass param_buf to fail) */
static const char *pname(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *pname(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(param_buf, sizeof param_buf, fmt, ap);
    va_end(ap);
    return param_buf;
}

/* key's value unless it is absent or null */
static json_t *get(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

/* v is NULL or one of the strings in set (NULL-terminated) */
static int one_of(json_t *v, const char *const *set) {
    if (!v) return 1;
    if (!json_is_string(v)) return 0;
    for (; *set; set++)
        if (!strcmp(json_string_value(v), *set)) return 1;
    return 0;
}

/* ---- input items ------------------------------------------------------------------------ */

typedef struct {
    json_t *msgs;       /* the chat messages so far */
    kipp_buf reasoning; /* a reasoning item's text, for the assistant turn that follows it */
    int has_reasoning;
} conv;

/* The text of content (a string, or text parts: input_text, output_text, refusal) joined
 * by "\n". what names the field ("input[2].content") in errors. */
static int content_text(json_t *c, const char *what, kipp_buf *out, rerr *e) {
    if (json_is_string(c))
        return kipp_buf_put(out, json_string_value(c), json_string_length(c)) ? fail(e, NULL, "out of memory") : 0;
    if (!json_is_array(c))
        return fail(e, what, "'%s' must be a string or an array of content parts", what);
    kipp_buf_put(out, "", 0);
    for (size_t j = 0; j < json_array_size(c); j++) {
        json_t *p = json_array_get(c, j);
        const char *ty = json_string_value(json_object_get(p, "type"));
        if (!ty) return fail(e, pname("%s[%zu].type", what, j), "%s[%zu] must be a content part with a 'type'", what, j);
        const char *key = !strcmp(ty, "input_text") || !strcmp(ty, "output_text") ? "text"
                          : !strcmp(ty, "refusal")                              ? "refusal"
                                                                                : NULL;
        if (!key && (!strncmp(ty, "input_", 6)))
            return fail(e, pname("%s[%zu].type", what, j), "%s[%zu]: '%.40s' parts are not supported: "
                        "this server's model reads text only", what, j, ty);
        if (!key)
            return fail(e, pname("%s[%zu].type", what, j), "%s[%zu].type '%.40s' is not a text part "
                        "(input_text, output_text or refusal)", what, j, ty);
        json_t *t = json_object_get(p, key);
        if (!json_is_string(t)) return fail(e, pname("%s[%zu].%s", what, j, key), "%s[%zu].%s must be a string", what, j, key);
        if (j) kipp_buf_put(out, "\n", 1);
        kipp_buf_put(out, json_string_value(t), json_string_length(t));
    }
    return out->oom ? fail(e, NULL, "out of memory") : 0;
}

/* A new chat message {role, content} (text NULL: content null, an assistant's tool calls).
 * An assistant message takes the pending reasoning as reasoning_content. */
static json_t *add_message(conv *cv, const char *role, const char *text, size_t len) {
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string(role));
    json_object_set_new(m, "content", text ? json_stringn(text, len) : json_null());
    if (!strcmp(role, "assistant") && cv->has_reasoning) {
        json_object_set_new(m, "reasoning_content", json_stringn(kipp_buf_str(&cv->reasoning), cv->reasoning.len));
        cv->reasoning.len = 0;
        cv->has_reasoning = 0;
    }
    json_array_append_new(cv->msgs, m);
    return m;
}

static int message_item(conv *cv, json_t *it, size_t i, rerr *e) {
    json_t *role = json_object_get(it, "role");
    static const char *const roles[] = {"user", "assistant", "system", "developer", NULL};
    if (!json_is_string(role) || !one_of(role, roles))
        return fail(e, pname("input[%zu].role", i), "input[%zu].role must be \"user\", \"assistant\", "
                    "\"system\" or \"developer\"", i);
    json_t *c = json_object_get(it, "content");
    if (!c) return fail(e, pname("input[%zu].content", i), "input[%zu].content is required", i);
    kipp_buf text = {0};
    char what[48];
    snprintf(what, sizeof what, "input[%zu].content", i);
    int rc = content_text(c, what, &text, e);
    const char *r = json_string_value(role);
    if (!rc) add_message(cv, !strcmp(r, "developer") ? "system" : r, kipp_buf_str(&text), text.len);
    kipp_buf_free(&text);
    return rc;
}

static int string_field(json_t *it, const char *key, size_t i, rerr *e) {
    if (json_is_string(json_object_get(it, key))) return 0;
    return fail(e, pname("input[%zu].%s", i, key), "input[%zu].%s must be a string", i, key);
}

/* A function_call joins the assistant message just before it (its text, its other calls),
 * or begins one, as a chat tool_calls entry. */
static int call_item(conv *cv, json_t *it, size_t i, rerr *e) {
    if (string_field(it, "call_id", i, e) || string_field(it, "name", i, e) || string_field(it, "arguments", i, e))
        return -1;
    const size_t n = json_array_size(cv->msgs);
    json_t *last = n ? json_array_get(cv->msgs, n - 1) : NULL;
    const char *lr = json_string_value(json_object_get(last, "role"));
    json_t *m = lr && !strcmp(lr, "assistant") && !cv->has_reasoning ? last : add_message(cv, "assistant", NULL, 0);
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls) json_object_set_new(m, "tool_calls", calls = json_array());
    json_t *fn = json_object(), *tc = json_object();
    json_object_set(fn, "name", json_object_get(it, "name"));
    json_object_set(fn, "arguments", json_object_get(it, "arguments"));
    json_object_set(tc, "id", json_object_get(it, "call_id"));
    json_object_set_new(tc, "type", json_string("function"));
    json_object_set_new(tc, "function", fn);
    json_array_append_new(calls, tc);
    return 0;
}

static int call_output_item(conv *cv, json_t *it, size_t i, rerr *e) {
    if (string_field(it, "call_id", i, e)) return -1;
    json_t *out = json_object_get(it, "output");
    if (!out) return fail(e, pname("input[%zu].output", i), "input[%zu].output is required", i);
    kipp_buf text = {0};
    char what[48];
    snprintf(what, sizeof what, "input[%zu].output", i);
    int rc = content_text(out, what, &text, e);
    if (!rc) {
        json_t *m = add_message(cv, "tool", kipp_buf_str(&text), text.len);
        json_object_set(m, "tool_call_id", json_object_get(it, "call_id"));
    }
    kipp_buf_free(&text);
    return rc;
}

/* A reasoning item's reasoning_text parts become the reasoning_content of the assistant turn
 * after it (Qwen3's template shows it for the turns after the last user message, as the
 * model was trained); summary and encrypted_content are not read (Kipp writes neither). */
static int reasoning_item(conv *cv, json_t *it, size_t i, rerr *e) {
    json_t *c = get(it, "content");
    if (c && !json_is_array(c))
        return fail(e, pname("input[%zu].content", i), "input[%zu].content must be an array of "
                    "reasoning_text parts", i);
    for (size_t j = 0; j < json_array_size(c); j++) {
        json_t *t = json_object_get(json_array_get(c, j), "text");
        if (!json_is_string(t))
            return fail(e, pname("input[%zu].content[%zu].text", i, j), "input[%zu].content[%zu].text "
                        "must be a string", i, j);
        if (cv->has_reasoning && cv->reasoning.len) kipp_buf_put(&cv->reasoning, "\n", 1);
        kipp_buf_put(&cv->reasoning, json_string_value(t), json_string_length(t));
        cv->has_reasoning = 1;
    }
    return cv->reasoning.oom ? fail(e, NULL, "out of memory") : 0;
}

static int input_item(conv *cv, json_t *it, size_t i, rerr *e) {
    if (!json_is_object(it)) return fail(e, pname("input[%zu]", i), "input[%zu] must be an object", i);
    json_t *t = json_object_get(it, "type");
    if (t && !json_is_string(t)) return fail(e, pname("input[%zu].type", i), "input[%zu].type must be a string", i);
    const char *ty = t ? json_string_value(t) : "message"; /* {role, content}: a message */
    if (!strcmp(ty, "message")) return message_item(cv, it, i, e);
    if (!strcmp(ty, "function_call")) return call_item(cv, it, i, e);
    if (!strcmp(ty, "function_call_output")) return call_output_item(cv, it, i, e);
    if (!strcmp(ty, "reasoning")) return reasoning_item(cv, it, i, e);
    if (!strcmp(ty, "item_reference"))
        return fail(e, pname("input[%zu].type", i), "input[%zu]: an item_reference needs stored "
                    "items; this server stores nothing: send the item itself", i);
    return fail(e, pname("input[%zu].type", i), "input[%zu].type '%.40s' is not supported: input "
                "items are messages, function_call, function_call_output and reasoning (this "
                "server runs function tools only)", i, ty);
}

/* instructions and input as chat messages */
static json_t *messages(json_t *in, rerr *e) {
    json_t *ins = get(in, "instructions"), *input = get(in, "input");
    if (ins && !json_is_string(ins)) return fail(e, "instructions", "'instructions' must be a string"), NULL;
    if (!input)
        return fail(e, "input", "'input' is required (this server is stateless: the whole "
                    "conversation goes in 'input')"), NULL;
    if (!json_is_string(input) && (!json_is_array(input) || !json_array_size(input)))
        return fail(e, "input", "'input' must be a string or a non-empty array of items"), NULL;
    conv cv = {.msgs = json_array()};
    if (ins) add_message(&cv, "system", json_string_value(ins), json_string_length(ins));
    if (json_is_string(input)) add_message(&cv, "user", json_string_value(input), json_string_length(input));
    int rc = 0;
    for (size_t i = 0; json_is_array(input) && i < json_array_size(input) && !rc; i++)
        rc = input_item(&cv, json_array_get(input, i), i, e);
    kipp_buf_free(&cv.reasoning);
    if (!rc && json_array_size(cv.msgs) == (ins ? 1u : 0u)) /* only reasoning items */
        rc = fail(e, "input", "'input' has no message, function_call or function_call_output");
    if (rc) json_decref(cv.msgs);
    return rc ? NULL : cv.msgs;
}

/* ---- tools, tool_choice, text.format, reasoning --------------------------------------------- */

/* tools: function tools, flat ({type, name, description, parameters, strict}), as chat's
 * {type, function: {...}}; oai_parse_tree checks names and schemas. */
static int map_tools(json_t *in, json_t *o, rerr *e) {
    json_t *tools = get(in, "tools");
    if (!tools) return 0;
    if (!json_is_array(tools)) return fail(e, "tools", "'tools' must be an array");
    json_t *out = json_array();
    json_object_set_new(o, "tools", out);
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        const char *ty = json_string_value(json_object_get(t, "type"));
        if (!json_is_object(t) || !ty)
            return fail(e, pname("tools[%zu]", i), "tools[%zu] must be an object with a 'type'", i);
        if (strcmp(ty, "function"))
            return fail(e, pname("tools[%zu].type", i), "tools[%zu].type '%.40s' is not supported: "
                        "this server runs no built-in tools, only \"function\" tools (which the "
                        "client executes)", i, ty);
        json_t *fn = json_object(), *ct = json_object();
        static const char *const keys[] = {"name", "description", "parameters", "strict"};
        for (size_t k = 0; k < 4; k++)
            if (json_object_get(t, keys[k])) json_object_set(fn, keys[k], json_object_get(t, keys[k]));
        json_object_set_new(ct, "type", json_string("function"));
        json_object_set_new(ct, "function", fn);
        json_array_append_new(out, ct);
    }
    return 0;
}

static int map_tool_choice(json_t *in, json_t *o, rerr *e) {
    json_t *tc = get(in, "tool_choice");
    if (!tc) return 0;
    if (json_is_string(tc)) return json_object_set(o, "tool_choice", tc), 0; /* auto, none, required */
    const char *ty = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !ty)
        return fail(e, "tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                    "{\"type\": \"function\", \"name\": ...}");
    if (strcmp(ty, "function"))
        return fail(e, "tool_choice", "'tool_choice' type '%.40s' is not supported: only \"auto\", "
                    "\"none\", \"required\" and {\"type\": \"function\", \"name\": ...}", ty);
    json_t *name = json_object_get(tc, "name");
    if (!json_is_string(name))
        return fail(e, "tool_choice", "'tool_choice' {\"type\": \"function\"} needs the function's 'name'");
    json_t *fn = json_object(), *ct = json_object();
    json_object_set(fn, "name", name);
    json_object_set_new(ct, "type", json_string("function"));
    json_object_set_new(ct, "function", fn);
    json_object_set_new(o, "tool_choice", ct);
    return 0;
}

/* text: {format: text | json_object | json_schema {name, schema, strict, description},
 * verbosity}. verbosity "medium" is the model's only one. */
static int map_text(json_t *in, json_t *o, rerr *e) {
    json_t *text = get(in, "text");
    if (!text) return 0;
    if (!json_is_object(text)) return fail(e, "text", "'text' must be an object");
    static const char *const medium[] = {"medium", NULL};
    if (!one_of(get(text, "verbosity"), medium))
        return fail(e, "text.verbosity", "'text.verbosity': only \"medium\" is supported (the "
                    "model has one verbosity)");
    json_t *f = get(text, "format");
    if (!f) return 0;
    const char *ty = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || !ty) return fail(e, "text.format", "'text.format' must be an object with a 'type'");
    json_t *rf = json_object();
    json_object_set_new(o, "response_format", rf);
    json_object_set_new(rf, "type", json_string(ty));
    if (strcmp(ty, "json_schema")) return 0; /* text, json_object; another is oai_parse_tree's 400 */
    if (!json_is_string(json_object_get(f, "name")))
        return fail(e, "text.format.name", "'text.format' json_schema needs a 'name' (a string)");
    json_t *schema = json_object_get(f, "schema");
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return fail(e, "text.format.schema", "'text.format' json_schema needs a 'schema' (a JSON Schema object)");
    json_t *d = get(f, "description");
    if (d && !json_is_string(d)) return fail(e, "text.format.description", "'text.format.description' must be a string");
    json_t *js = json_object();
    json_object_set(js, "name", json_object_get(f, "name"));
    json_object_set(js, "schema", schema);
    if (get(f, "strict")) json_object_set(js, "strict", get(f, "strict"));
    json_object_set_new(rf, "json_schema", js);
    return 0;
}

/* reasoning.effort: Qwen3's thinking switch (chat_template_kwargs.enable_thinking, over the
 * extension's own value): "none" and "minimal" turn it off, "low", "medium", "high" on. */
static int map_reasoning(json_t *in, json_t *o, rerr *e) {
    json_t *kw = get(in, "chat_template_kwargs"); /* the chat extension, checked there */
    if (kw) json_object_set_new(o, "chat_template_kwargs", json_deep_copy(kw));
    json_t *r = get(in, "reasoning");
    if (!r) return 0;
    if (!json_is_object(r)) return fail(e, "reasoning", "'reasoning' must be an object");
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", NULL};
    static const char *const summaries[] = {"auto", "concise", "detailed", NULL};
    json_t *eff = get(r, "effort");
    if (!one_of(eff, efforts))
        return fail(e, "reasoning.effort", "'reasoning.effort' must be \"none\", \"minimal\", \"low\", "
                    "\"medium\" or \"high\"");
    if (!one_of(get(r, "summary"), summaries) || !one_of(get(r, "generate_summary"), summaries))
        return fail(e, "reasoning.summary", "'reasoning.summary' must be \"auto\", \"concise\" or \"detailed\"");
    if (!eff) return 0;
    const char *v = json_string_value(eff);
    if (!kw) json_object_set_new(o, "chat_template_kwargs", json_object());
    /* (kwargs that are no object stay as they are: chat's 400) */
    json_object_set_new(json_object_get(o, "chat_template_kwargs"), "enable_thinking",
                        json_boolean(strcmp(v, "none") && strcmp(v, "minimal")));
    return 0;
}

/* parallel_tool_calls false with tool_choice "auto" (Codex sends both): at most one call,
 * enforced by ending the reply at the first call's </tool_call> (a stop string; the split
 * keeps a call whose arguments closed before the cut), where chat refuses the pair. A JSON
 * text.format needs none (its reply makes no calls). */
static void one_call(json_t *in, json_t *o) {
    json_t *tc = get(in, "tool_choice");
    const char *v = json_string_value(tc);
    if (!json_is_false(get(in, "parallel_tool_calls")) || (tc && (!v || strcmp(v, "auto"))) ||
        !json_array_size(get(in, "tools")))
        return; /* forced, none or no tools: chat's rules as they are */
    json_object_del(o, "parallel_tool_calls");
    json_t *rf = json_object_get(json_object_get(o, "response_format"), "type");
    json_t *stop = get(in, "stop");
    if ((json_is_string(rf) && strcmp(json_string_value(rf), "text")) ||
        (stop && !json_is_string(stop) && !json_is_array(stop))) /* the latter: chat's 400 */
        return;
    json_t *all = json_array();
    if (json_is_string(stop)) json_array_append(all, stop);
    else if (stop) json_array_extend(all, stop);
    json_array_append_new(all, json_string("</tool_call>"));
    json_object_set_new(o, "stop", all);
}

/* ---- the other fields --------------------------------------------------------------------- */

/* Fields of the Responses API that ask for what a stateless server cannot do: a 400 when
 * not null (background: when true). */
static int refused(json_t *in, rerr *e) {
    static const char *const no[][2] = {
        {"previous_response_id", "this server is stateless and keeps no responses: send the "
                                 "whole conversation in 'input' (the earlier output items as they came)"},
        {"conversation", "this server is stateless and keeps no conversations: send the whole "
                         "conversation in 'input'"},
        {"prompt", "stored prompt templates are not supported: send 'instructions' and 'input'"},
        {"max_tool_calls", "a bound on built-in tool calls is not supported (this server runs "
                           "no built-in tools; parallel_tool_calls: false makes one function call)"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (get(in, no[i][0])) return fail(e, no[i][0], "'%s': %s", no[i][0], no[i][1]);
    json_t *bg = get(in, "background");
    if (bg && !json_is_boolean(bg)) return fail(e, "background", "'background' must be true or false");
    if (json_is_true(bg))
        return fail(e, "background", "'background': true is not supported: a background response "
                    "is stored to be polled, and this server stores nothing");
    json_t *st = get(in, "store");
    if (st && !json_is_boolean(st)) return fail(e, "store", "'store' must be true or false");
    json_t *tl = get(in, "top_logprobs");
    if (tl && !json_is_integer(tl)) return fail(e, "top_logprobs", "'top_logprobs' must be an integer");
    if (tl && json_integer_value(tl) != 0)
        return fail(e, "top_logprobs", "'top_logprobs' is not supported here: /v1/responses returns "
                    "no logprobs (/v1/chat/completions does)");
    static const char *const trunc[] = {"auto", "disabled", NULL};
    if (!one_of(get(in, "truncation"), trunc))
        return fail(e, "truncation", "'truncation' must be \"auto\" or \"disabled\"");
    return 0;
}

/* include: what each value asks for is given (encrypted reasoning: the reasoning itself, in
 * the clear), or concerns items this server never makes; logprobs are a 400. */
static int check_include(json_t *in, rerr *e) {
    json_t *inc = get(in, "include");
    if (!inc) return 0;
    if (!json_is_array(inc)) return fail(e, "include", "'include' must be an array of strings");
    static const char *const ok[] = {"reasoning.encrypted_content", "code_interpreter_call.outputs",
                                     "computer_call_output.output.image_url", "file_search_call.results",
                                     "message.input_image.image_url", "web_search_call.results",
                                     "web_search_call.action.sources", NULL};
    for (size_t i = 0; i < json_array_size(inc); i++) {
        json_t *v = json_array_get(inc, i);
        if (json_is_string(v) && !strcmp(json_string_value(v), "message.output_text.logprobs"))
            return fail(e, pname("include[%zu]", i), "include[%zu] 'message.output_text.logprobs' is "
                        "not supported: /v1/responses returns no logprobs (/v1/chat/completions does)", i);
        if (!json_is_string(v) || !one_of(v, ok))
            return fail(e, pname("include[%zu]", i), "include[%zu] is not a value this server knows", i);
    }
    return 0;
}

/* strings that are only carried: their type is checked */
static int check_types(json_t *in, rerr *e) {
    static const char *const strs[] = {"user", "prompt_cache_key", "safety_identifier"};
    for (size_t i = 0; i < 3; i++) {
        json_t *v = get(in, strs[i]);
        if (v && !json_is_string(v)) return fail(e, strs[i], "'%s' must be a string", strs[i]);
    }
    json_t *md = get(in, "metadata");
    if (md && !json_is_object(md)) return fail(e, "metadata", "'metadata' must be an object");
    json_t *so = get(in, "stream_options");
    if (so && !json_is_object(so)) return fail(e, "stream_options", "'stream_options' must be an object");
    return 0;
}

/* The fields of the Responses API, then Kipp's chat extensions (copied as they are). */
static const char *const api_fields[] = {
    "model", "input", "instructions", "tools", "tool_choice", "text", "max_output_tokens",
    "temperature", "top_p", "reasoning", "store", "previous_response_id", "stream",
    "stream_options", "parallel_tool_calls", "metadata", "user", "truncation", "include",
    "background", "conversation", "prompt", "service_tier", "top_logprobs", "max_tool_calls",
    "prompt_cache_key", "safety_identifier", NULL};
static const char *const copied[] = {
    "model", "temperature", "top_p", "stream", "parallel_tool_calls", "service_tier",
    /* extensions */ "top_k", "min_p", "repetition_penalty", "presence_penalty",
    "frequency_penalty", "seed", "stop", "max_reasoning_tokens", "content_special_tokens", "grammar",
    "logit_bias", NULL};

static void note_unknown(json_t *in, char *unknown, size_t unknown_len) {
    const char *key;
    json_t *v;
    json_object_foreach(in, key, v) {
        int known = !strcmp(key, "chat_template_kwargs");
        for (const char *const *k = api_fields; *k && !known; k++) known = !strcmp(*k, key);
        for (const char *const *k = copied; *k && !known; k++) known = !strcmp(*k, key);
        if (known) continue;
        snprintf(unknown, unknown_len, "%s", key);
        for (char *c = unknown; *c; c++) /* it goes into a log line */
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        return;
    }
}

/* What the Response object repeats: the request's values or the API's defaults. */
static json_t *echo_fields(json_t *in) {
    json_t *ec = json_object();
    struct { const char *key; json_t *dflt; } f[] = {
        {"instructions", json_null()}, {"tools", json_array()}, {"tool_choice", json_string("auto")},
        {"parallel_tool_calls", json_true()}, {"temperature", json_real(1.0)}, {"top_p", json_real(1.0)},
        {"max_output_tokens", json_null()}, {"metadata", json_object()}, {"truncation", json_string("disabled")},
        {"service_tier", json_string("default")}, {"top_logprobs", json_integer(0)},
        {"reasoning", json_pack("{s:n,s:n}", "effort", "summary")},
        {"text", json_pack("{s:{s:s}}", "format", "type", "text")}, {"user", json_null()},
        {"store", json_true()}, {"prompt_cache_key", json_null()}, {"safety_identifier", json_null()},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        json_t *v = get(in, f[i].key);
        json_object_set_new(ec, f[i].key, v ? json_incref(v) : f[i].dflt);
        if (v) json_decref(f[i].dflt);
    }
    json_t *t = json_object_get(ec, "text"); /* text given without a format: the default one */
    if (json_is_object(t) && !get(t, "format")) {
        t = json_deep_copy(t);
        json_object_set_new(t, "format", json_pack("{s:s}", "type", "text"));
        json_object_set_new(ec, "text", t);
    }
    json_object_set_new(ec, "background", json_false());
    json_object_set_new(ec, "previous_response_id", json_null());
    return ec;
}

static resp_state *state_new(json_t *in) {
    resp_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    uint64_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts; /* no entropy yet: the clock and the address */
        clock_gettime(CLOCK_REALTIME, &ts);
        r = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) * 0x9e3779b97f4a7c15ull ^
            (uint64_t)(uintptr_t)st;
    }
    snprintf(st->id, sizeof st->id, "resp_%016llx", (unsigned long long)r);
    st->echo = echo_fields(in);
    st->output = json_array();
    return st;
}

void resp_state_free(void *state) {
    resp_state *st = state;
    if (!st) return;
    json_decref(st->echo);
    json_decref(st->output);
    kipp_buf_free(&st->open_text);
    free(st);
}

json_t *resp_to_openai(json_t *in, int endpoint, oai_endpoint *ep, void **state, char *msg,
                       size_t msg_len, const char **param, char *unknown, size_t unknown_len) {
    (void)endpoint;
    rerr e = {msg, msg_len, param};
    *param = NULL;
    *ep = OAI_CHAT;
    *state = NULL;
    if (refused(in, &e) || check_include(in, &e) || check_types(in, &e)) return NULL;
    json_t *mt = get(in, "max_output_tokens");
    if (mt && (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > (1 << 30))) {
        fail(&e, "max_output_tokens", "'max_output_tokens' must be an integer in [1, 1073741824]");
        return NULL;
    }
    json_t *msgs = messages(in, &e);
    if (!msgs) return NULL;
    json_t *o = json_object();
    json_object_set_new(o, "messages", msgs);
    for (const char *const *k = copied; *k; k++)
        if (json_object_get(in, *k)) json_object_set(o, *k, json_object_get(in, *k));
    if (mt) json_object_set(o, "max_tokens", mt);
    if (map_tools(in, o, &e) || map_tool_choice(in, o, &e) || map_text(in, o, &e) || map_reasoning(in, o, &e) ||
        !(*state = state_new(in))) {
        if (!*param && !*state) fail(&e, NULL, "out of memory");
        json_decref(o);
        return NULL;
    }
    one_call(in, o);
    note_unknown(in, unknown, unknown_len);
    return o;
}
