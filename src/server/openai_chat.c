/* openai_chat.c — a chat request as clients send it, normalized into the request the rest of
 * the parser (openai_req.c) and the chat template (tok/chat.c) read: `content` as a string
 * or an array of parts on every role (text parts joined with "\n", as vLLM and llama-server
 * join them), an assistant's `refusal` (field or part) as its text, `developer` as `system`,
 * tool_choice {"type": "allowed_tools"} as the request with only those tools, and
 * `reasoning_effort` as chat_template_kwargs.enable_thinking. Every refusal names the part
 * at fault (messages[2].content[1].type). Does not render, tokenize or check the other
 * fields. Reference: docs/server.md, "Request fields". */
#include "server/openai.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail(oai_perr *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int rc = oai_refusev(e, param, fmt, ap);
    va_end(ap);
    return rc;
}

/* Records a field outside the API (ignored) for the server's log, when none was yet. */
static void note_unknown(oai_request *r, const char *where, const char *key) {
    if (r->unknown_field[0]) return;
    snprintf(r->unknown_field, sizeof r->unknown_field, "%s%s", where, key);
    for (char *c = r->unknown_field; *c; c++) /* it goes into a log line */
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

static int is_known(const char *key, const char *const *known) {
    for (; *known; known++)
        if (!strcmp(key, *known)) return 1;
    return 0;
}

/* ---- messages ------------------------------------------------------------------------------ */

typedef enum { R_SYSTEM, R_DEVELOPER, R_USER, R_ASSISTANT, R_TOOL, R_N } role_t;
static const char *const role_names[R_N] = {"system", "developer", "user", "assistant", "tool"};

/* What each role may carry besides role and content (OpenAI's message types, and the
 * reasoning fields chat.c reads on an assistant message); any other key is ignored. */
static const char *const known_keys[R_N][12] = {
    [R_SYSTEM] = {"role", "content", "name", NULL},
    [R_DEVELOPER] = {"role", "content", "name", NULL},
    [R_USER] = {"role", "content", "name", NULL},
    [R_ASSISTANT] = {"role", "content", "name", "refusal", "audio", "function_call", "tool_calls",
                     "reasoning_content", "thinking", "reasoning", NULL},
    [R_TOOL] = {"role", "content", "tool_call_id", "name", NULL},
};

static int message_role(json_t *m, size_t i, oai_request *r, role_t *out, oai_perr *e) {
    snprintf(r->param_buf, sizeof r->param_buf, "messages[%zu].role", i);
    json_t *role = json_object_get(m, "role");
    if (!json_is_string(role))
        return fail(e, r->param_buf, "messages[%zu].role must be a string (\"system\", \"developer\", "
                    "\"user\", \"assistant\" or \"tool\")", i);
    const char *s = json_string_value(role);
    for (int k = 0; k < R_N; k++)
        if (!strcmp(s, role_names[k])) {
            *out = (role_t)k;
            return 0;
        }
    if (!strcmp(s, "function"))
        return fail(e, r->param_buf, "messages[%zu]: the deprecated 'function' role is not supported; "
                    "send the result as a 'tool' message (with 'tools', not 'functions')", i);
    return fail(e, r->param_buf, "messages[%zu].role '%.40s' is not one of \"system\", \"developer\", "
                "\"user\", \"assistant\" and \"tool\"", i, s);
}

/* Appends one piece of a message's text: pieces are joined with "\n". */
static void put_piece(kipp_buf *b, int *n, const char *s, size_t len) {
    if ((*n)++) kipp_buf_put(b, "\n", 1);
    kipp_buf_put(b, s, len);
}

/* content[j], a part of message i: "text" on every role, "refusal" on an assistant's. */
static int content_part(json_t *p, size_t i, size_t j, role_t role, oai_request *r, kipp_buf *b,
                        int *n, oai_perr *e) {
    snprintf(r->param_buf, sizeof r->param_buf, "messages[%zu].content[%zu]", i, j);
    if (!json_is_object(p))
        return fail(e, r->param_buf, "messages[%zu].content[%zu] must be an object {\"type\": \"text\", "
                    "\"text\": ...}", i, j);
    json_t *ty = json_object_get(p, "type");
    snprintf(r->param_buf, sizeof r->param_buf, "messages[%zu].content[%zu].type", i, j);
    if (!json_is_string(ty))
        return fail(e, r->param_buf, "messages[%zu].content[%zu].type must be a string (\"text\")", i, j);
    const char *type = json_string_value(ty);
    const char *field = !strcmp(type, "text") ? "text" : !strcmp(type, "refusal") ? "refusal" : NULL;
    if (!field)
        return fail(e, r->param_buf, "messages[%zu].content[%zu] is a '%.40s' part: this server runs "
                    "a text-only model and takes \"text\" parts only (no images, audio or files)",
                    i, j, type);
    if (!strcmp(field, "refusal") && role != R_ASSISTANT)
        return fail(e, r->param_buf, "messages[%zu].content[%zu]: a \"refusal\" part belongs to an "
                    "assistant message", i, j);
    json_t *t = json_object_get(p, field);
    if (!json_is_string(t)) {
        snprintf(r->param_buf, sizeof r->param_buf, "messages[%zu].content[%zu].%s", i, j, field);
        return fail(e, r->param_buf, "messages[%zu].content[%zu].%s must be a string", i, j, field);
    }
    const char *key;
    json_t *val;
    json_object_foreach(p, key, val) {
        (void)val;
        if (strcmp(key, "type") && strcmp(key, field)) note_unknown(r, "messages[].content[].", key);
    }
    put_piece(b, n, json_string_value(t), json_string_length(t));
    return 0;
}

/* The fields of an assistant message Kipp does not implement, and its tool calls' type. */
static int assistant_fields(json_t *m, size_t i, oai_request *r, oai_perr *e) {
    static const char *const refused[][2] = {
        {"audio", "a reply's audio is not supported (text only)"},
        {"function_call", "the deprecated 'function_call' is not supported; send 'tool_calls'"},
    };
    for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++) {
        json_t *v = json_object_get(m, refused[k][0]);
        if (v && !json_is_null(v)) {
            snprintf(r->param_buf, sizeof r->param_buf, "messages[%zu].%s", i, refused[k][0]);
            return fail(e, r->param_buf, "messages[%zu].%s: %s", i, refused[k][0], refused[k][1]);
        }
    }
    json_t *calls = json_object_get(m, "tool_calls");
    for (size_t j = 0; json_is_array(calls) && j < json_array_size(calls); j++) {
        json_t *ty = json_object_get(json_array_get(calls, j), "type");
        if (ty && !json_is_null(ty) && !(json_is_string(ty) && !strcmp(json_string_value(ty), "function"))) {
            snprintf(r->param_buf, sizeof r->param_buf, "messages[%zu].tool_calls[%zu].type", i, j);
            return fail(e, r->param_buf, "messages[%zu].tool_calls[%zu].type must be \"function\" "
                        "(custom tool calls are not supported)", i, j);
        }
    }
    return 0;
}

/* A message's text: its content (a string, or its parts joined) and, on an assistant
 * message, its refusal after it. Leaves *text NULL when there is neither (the template
 * decides: an assistant message with tool calls may have none). */
static int message_text(json_t *m, size_t i, role_t role, oai_request *r, json_t **text, oai_perr *e) {
    *text = NULL;
    json_t *c = json_object_get(m, "content");
    json_t *refusal = role == R_ASSISTANT ? json_object_get(m, "refusal") : NULL;
    if (refusal && !json_is_null(refusal) && !json_is_string(refusal)) {
        snprintf(r->param_buf, sizeof r->param_buf, "messages[%zu].refusal", i);
        return fail(e, r->param_buf, "messages[%zu].refusal must be a string", i);
    }
    if (json_is_null(refusal)) refusal = NULL;
    const int calls = role == R_ASSISTANT && json_array_size(json_object_get(m, "tool_calls")) > 0;
    if ((!c || json_is_null(c)) && !refusal && !calls) {
        snprintf(r->param_buf, sizeof r->param_buf, "messages[%zu].content", i);
        return fail(e, r->param_buf, "messages[%zu].content is required (only an assistant message "
                    "with tool_calls or a refusal may leave it out)", i);
    }
    if ((!c || json_is_null(c) || json_is_string(c)) && !refusal) return 0; /* as it is */
    if (c && !json_is_null(c) && !json_is_string(c) && !json_is_array(c)) {
        snprintf(r->param_buf, sizeof r->param_buf, "messages[%zu].content", i);
        return fail(e, r->param_buf, "messages[%zu].content must be a string or an array of "
                    "{\"type\": \"text\", \"text\": ...} parts", i);
    }
    kipp_buf b = {0};
    int n = 0;
    if (json_string_length(c)) /* ("" beside a refusal adds nothing) */
        put_piece(&b, &n, json_string_value(c), json_string_length(c));
    for (size_t j = 0; json_is_array(c) && j < json_array_size(c); j++)
        if (content_part(json_array_get(c, j), i, j, role, r, &b, &n, e)) {
            kipp_buf_free(&b);
            return -1;
        }
    if (refusal) put_piece(&b, &n, json_string_value(refusal), json_string_length(refusal));
    *text = b.oom ? NULL : json_stringn_nocheck(b.data ? b.data : "", b.len);
    kipp_buf_free(&b);
    return *text ? 0 : fail(e, NULL, "out of memory");
}

/* messages[i] as the template reads it (a new object in *out). */
static int normalize_message(json_t *m, size_t i, oai_request *r, json_t **out, oai_perr *e) {
    *out = NULL;
    if (!json_is_object(m)) {
        snprintf(r->param_buf, sizeof r->param_buf, "messages[%zu]", i);
        return fail(e, r->param_buf, "messages[%zu] must be an object with a 'role' and a 'content'", i);
    }
    role_t role = R_USER;
    if (message_role(m, i, r, &role, e) || (role == R_ASSISTANT && assistant_fields(m, i, r, e)))
        return -1;
    static const char *const str_keys[] = {"name", "tool_call_id"};
    for (size_t k = 0; k < 2; k++) {
        json_t *v = json_object_get(m, str_keys[k]);
        if (v && !json_is_null(v) && !json_is_string(v)) {
            snprintf(r->param_buf, sizeof r->param_buf, "messages[%zu].%s", i, str_keys[k]);
            return fail(e, r->param_buf, "messages[%zu].%s must be a string", i, str_keys[k]);
        }
    }
    json_t *text;
    if (message_text(m, i, role, r, &text, e)) return -1;
    const char *key;
    json_t *val;
    json_object_foreach(m, key, val) {
        (void)val;
        if (!is_known(key, known_keys[role])) note_unknown(r, "messages[].", key);
    }
    json_t *copy = json_copy(m); /* shallow: only role and content change */
    if (!copy) {
        json_decref(text);
        return fail(e, NULL, "out of memory");
    }
    if (role == R_DEVELOPER) json_object_set_new(copy, "role", json_string("system"));
    if (text) json_object_set_new(copy, "content", text);
    *out = copy;
    return 0;
}

static int normalize_messages(json_t *msgs, oai_request *r, json_t **out, oai_perr *e) {
    *out = NULL;
    if (!msgs) return fail(e, "messages", "'messages' is required");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return fail(e, "messages", "'messages' must be a non-empty array");
    json_t *a = json_array();
    if (!a) return fail(e, NULL, "out of memory");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m;
        if (normalize_message(json_array_get(msgs, i), i, r, &m, e)) {
            json_decref(a);
            return -1;
        }
        if (json_array_append_new(a, m)) {
            json_decref(a);
            return fail(e, NULL, "out of memory");
        }
    }
    *out = a;
    return 0;
}

/* ---- reasoning_effort ---------------------------------------------------------------------- */

/* reasoning_effort as Qwen3's thinking switch: "none" and "minimal" turn thinking off (Qwen3
 * has no graded effort: the least reasoning it can do is none), "low", "medium" and "high"
 * leave it on. Set into a copy of chat_template_kwargs (*kw, a new reference) unless the
 * client set enable_thinking there too: then the two must agree. Off also bounds the
 * reasoning to 0 tokens (r->max_reasoning_tokens, which must not say otherwise): a template
 * without the switch that always thinks (Thinking-2507) then closes its <think> at once. */
static int reasoning_effort(json_t *o, oai_request *r, json_t **kw, oai_perr *e) {
    json_t *v = json_object_get(o, "reasoning_effort");
    json_t *k = json_object_get(o, "chat_template_kwargs");
    *kw = NULL;
    if (!v || json_is_null(v)) return 0;
    static const char *const off[] = {"none", "minimal", NULL}, *const on[] = {"low", "medium", "high", NULL};
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    const int think = is_known(s, on);
    if (!think && !is_known(s, off))
        return fail(e, "reasoning_effort", "'reasoning_effort' must be \"none\", \"minimal\", \"low\", "
                    "\"medium\" or \"high\" (Qwen3's thinking is off for the first two, on for the others)");
    if (k && !json_is_null(k) && !json_is_object(k)) return 0; /* parse_chat names it */
    json_t *given = json_is_object(k) ? json_object_get(k, "enable_thinking") : NULL;
    if (given && !json_is_null(given) && !json_is_boolean(given)) return 0; /* parse_chat names it */
    if (json_is_boolean(given) && json_is_true(given) != think)
        return fail(e, "reasoning_effort", "'reasoning_effort' \"%s\" turns thinking %s, but "
                    "chat_template_kwargs.enable_thinking is %s: send one of them, or values that agree",
                    s, think ? "on" : "off", think ? "false" : "true");
    if (!think && r->max_reasoning_tokens > 0)
        return fail(e, "reasoning_effort", "'reasoning_effort' \"%s\" allows no reasoning, but "
                    "'max_reasoning_tokens' is %lld", s, (long long)r->max_reasoning_tokens);
    if (!think) r->max_reasoning_tokens = 0;
    *kw = json_is_object(k) ? json_copy(k) : json_object();
    if (!*kw || json_object_set_new(*kw, "enable_thinking", json_boolean(think))) {
        json_decref(*kw);
        *kw = NULL;
        return fail(e, NULL, "out of memory");
    }
    return 0;
}

/* ---- tool_choice {"type": "allowed_tools"} ------------------------------------------------- */

/* The declared function tool named name, or NULL. */
static json_t *tool_named(json_t *tools, const char *name) {
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *n = json_string_value(json_object_get(fn, "name"));
        if (n && !strcmp(n, name)) return json_array_get(tools, i);
    }
    return NULL;
}

/* {"type": "allowed_tools", "allowed_tools": {"mode": "auto"|"required", "tools": [{"type":
 * "function", "function": {"name": ...}}, ...]}}: the request as if it declared only those
 * tools (the prompt lists them alone, a call can name no other) with tool_choice mode.
 * *tools and *choice are new references, or NULL when tool_choice is something else. */
static int allowed_tools(json_t *o, oai_request *r, json_t **tools, json_t **choice, oai_perr *e) {
    *tools = *choice = NULL;
    json_t *tc = json_object_get(o, "tool_choice");
    if (!json_is_object(tc) || !json_is_string(json_object_get(tc, "type")) ||
        strcmp(json_string_value(json_object_get(tc, "type")), "allowed_tools"))
        return 0;
    json_t *at = json_object_get(tc, "allowed_tools");
    const char *mode = json_string_value(json_object_get(at, "mode"));
    json_t *list = json_object_get(at, "tools");
    if (!mode || (strcmp(mode, "auto") && strcmp(mode, "required")) || !json_is_array(list))
        return fail(e, "tool_choice", "tool_choice \"allowed_tools\" must be {\"type\": \"allowed_tools\", "
                    "\"allowed_tools\": {\"mode\": \"auto\" or \"required\", \"tools\": [{\"type\": "
                    "\"function\", \"function\": {\"name\": ...}}, ...]}}");
    json_t *declared = json_object_get(o, "tools");
    json_t *sub = json_array();
    if (!sub) return fail(e, NULL, "out of memory");
    for (size_t k = 0; k < json_array_size(list); k++) {
        json_t *t = json_array_get(list, k);
        const char *ty = json_string_value(json_object_get(t, "type"));
        const char *name = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        json_t *decl = ty && !strcmp(ty, "function") && name ? tool_named(declared, name) : NULL;
        if (!decl) {
            json_decref(sub);
            snprintf(r->param_buf, sizeof r->param_buf, "tool_choice.allowed_tools.tools[%zu]", k);
            return fail(e, r->param_buf, "tool_choice.allowed_tools.tools[%zu] must be {\"type\": "
                        "\"function\", \"function\": {\"name\": ...}} naming one of 'tools' (custom "
                        "tools are not supported)", k);
        }
        if (!tool_named(sub, name)) json_array_append(sub, decl); /* listed twice: once */
    }
    if (json_array_size(sub) == 0) {
        json_decref(sub);
        return fail(e, "tool_choice", "tool_choice \"allowed_tools\" lists no tools");
    }
    *tools = sub;
    *choice = json_string(mode);
    return *choice ? 0 : fail(e, NULL, "out of memory");
}

/* ---- the request --------------------------------------------------------------------------- */

static int string_fields(json_t *o, oai_perr *e) {
    static const char *const keys[] = {"user", "prompt_cache_key", "safety_identifier"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        json_t *v = json_object_get(o, keys[k]);
        if (v && !json_is_null(v) && !json_is_string(v))
            return fail(e, keys[k], "'%s' must be a string", keys[k]);
    }
    return 0;
}

int oai_chat_normalize(json_t *o, oai_request *r, json_t **out, oai_perr *e) {
    *out = NULL;
    json_t *msgs = NULL, *kw = NULL, *tools = NULL, *choice = NULL;
    if (string_fields(o, e) || normalize_messages(json_object_get(o, "messages"), r, &msgs, e) ||
        reasoning_effort(o, r, &kw, e) || allowed_tools(o, r, &tools, &choice, e))
        goto fail;
    json_t *copy = json_copy(o); /* shallow: the fields above are replaced, the rest shared */
    if (!copy) {
        fail(e, NULL, "out of memory");
        goto fail;
    }
    json_object_set_new(copy, "messages", msgs);
    if (kw) json_object_set_new(copy, "chat_template_kwargs", kw);
    if (tools) json_object_set_new(copy, "tools", tools);
    if (choice) json_object_set_new(copy, "tool_choice", choice);
    *out = copy;
    return 0;
fail:
    json_decref(msgs);
    json_decref(kw);
    json_decref(tools);
    json_decref(choice);
    return -1;
}
