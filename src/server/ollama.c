/* ollama.c — Ollama's /api/chat and /api/generate as a protocol adapter (api.h): the request
 * becomes an OpenAI chat request (a raw /api/generate: a completions request) that
 * oai_parse_tree then checks, with `options` mapped onto Kipp's sampling, `format` onto
 * response_format and `think` onto the template's enable_thinking; the generated text,
 * reasoning and tool calls go back as Ollama's NDJSON lines or its one response object, and
 * errors as {"error": "..."}. Every field Ollama defines is used, accepted for a stated reason,
 * or a 400 naming it (docs/server.md, "Ollama API", has the table). Not here: what needs the
 * server or libmicrohttpd (ollama_http.c: load calls, num_ctx against the context, /api/tags,
 * /api/show, /api/embed, the model-management routes). */
#include "server/api.h"

#include "server/metrics.h"
#include "server/ollama.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int generate; /* /api/generate: the text is "response" (and "thinking") at the top level */
} ollama_state;

typedef struct {
    char *msg;
    size_t msg_len;
    const char **param;
    char *unknown; /* the first field outside the protocol (logged once by the server) */
    size_t unknown_len;
} perr;

static json_t *fail(perr *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, e->msg_len, fmt, ap);
    va_end(ap);
    *e->param = param;
    return NULL;
}

/* a field outside the protocol: ignored, its name kept for the server's log line */
static void note_unknown(perr *e, const char *where, const char *key) {
    if (e->unknown[0]) return;
    snprintf(e->unknown, e->unknown_len, "%s%s", where, key);
    for (char *c = e->unknown; *c; c++) /* it goes into a log line */
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

static int is_known(const char *key, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(*names, key)) return 1;
    return 0;
}

/* v is absent, null, "" or [] */
static int is_empty(const json_t *v) {
    return !v || json_is_null(v) || (json_is_string(v) && json_string_length(v) == 0) ||
           (json_is_array(v) && json_array_size(v) == 0);
}

/* ---- options ------------------------------------------------------------------------------- */

/* Options Kipp maps onto an OpenAI field of the same meaning. */
static const char *const mapped[][2] = {
    {"temperature", "temperature"}, {"top_p", "top_p"}, {"top_k", "top_k"}, {"min_p", "min_p"},
    {"seed", "seed"}, {"presence_penalty", "presence_penalty"},
    {"frequency_penalty", "frequency_penalty"}, {"repeat_penalty", "repetition_penalty"},
    {"stop", "stop"},
};

/* Sampling options Kipp does not implement: accepted only at the value that means what Kipp
 * does (the sampler off; penalties over the whole text, newlines included). */
static const struct {
    const char *name, *what;
    double off;
    int is_bool;
} refused[] = {
    {"typical_p", "locally typical sampling", 1.0, 0},
    {"tfs_z", "tail-free sampling", 1.0, 0},
    {"mirostat", "Mirostat sampling", 0.0, 0},
    {"repeat_last_n", "a penalty window of the last N tokens", -1.0, 0},
    {"penalize_newline", "exempting newlines from the penalties", 1.0, 1},
};

/* Options with nothing to do in a running kipp-server: loading and hardware settings (fixed by
 * kipp-server's flags when it starts), context shifting (Kipp never shifts: a full context
 * ends the reply as "length") and Mirostat's parameters (Mirostat is off). */
static const char *const ignored[] = {
    "num_keep", "mirostat_tau", "mirostat_eta", "numa", "num_batch", "num_gpu", "main_gpu",
    "low_vram", "f16_kv", "logits_all", "vocab_only", "use_mmap", "use_mlock", "num_thread",
    "embedding_only", "num_ctx", NULL};

static int option_refused(const char *key, json_t *v, perr *e) {
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        if (strcmp(key, refused[i].name)) continue;
        const int off = refused[i].is_bool ? json_is_boolean(v) && json_is_true(v) == (refused[i].off != 0)
                                           : json_is_number(v) && json_number_value(v) == refused[i].off;
        if (off || json_is_null(v)) return 0;
        char only[16];
        if (refused[i].is_bool) snprintf(only, sizeof only, "%s", refused[i].off ? "true" : "false");
        else snprintf(only, sizeof only, "%g", refused[i].off);
        fail(e, refused[i].name, "'options.%s': %s is not implemented by Kipp; the one value accepted is %s "
             "(what Kipp does)",
             key, refused[i].what, only);
        return -1;
    }
    return 1; /* not one of them */
}

/* options.num_predict into max_tokens: > 0 a bound; -1 (no bound) and -2 (fill the context)
 * run to the end of the context; 0 is Ollama's unset. */
static int map_num_predict(json_t *v, json_t *o, perr *e) {
    if (json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < -2) {
        fail(e, "num_predict", "'options.num_predict' must be an integer: > 0, 0 (not set), -1 (no "
             "limit) or -2 (fill the context)");
        return -1;
    }
    const json_int_t n = json_integer_value(v);
    if (n) json_object_set_new(o, "max_tokens", json_integer(n > 0 ? n : (json_int_t)1 << 30));
    return 0;
}

int ollama_num_ctx(json_t *in, long long *out) {
    json_t *v = json_object_get(json_object_get(in, "options"), "num_ctx");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1) return -1;
    *out = json_integer_value(v);
    return 1;
}

static int map_options(json_t *in, json_t *o, perr *e) {
    json_t *opts = json_object_get(in, "options");
    if (!opts || json_is_null(opts)) return 0;
    if (!json_is_object(opts)) return fail(e, "options", "'options' must be an object"), -1;
    long long ctx;
    if (ollama_num_ctx(in, &ctx) < 0)
        return fail(e, "num_ctx", "'options.num_ctx' must be a positive integer"), -1;
    const char *key;
    json_t *v;
    json_object_foreach(opts, key, v) {
        int done = 0;
        for (size_t i = 0; i < sizeof mapped / sizeof *mapped && !done; i++)
            if (!strcmp(key, mapped[i][0])) {
                json_object_set(o, mapped[i][1], v);
                done = 1;
            }
        if (done || is_known(key, ignored)) continue;
        if (!strcmp(key, "num_predict")) {
            if (map_num_predict(v, o, e)) return -1;
            continue;
        }
        const int r = option_refused(key, v, e);
        if (r < 0) return -1;
        if (r > 0) note_unknown(e, "options.", key); /* Ollama ignores an unknown option too */
    }
    return 0;
}

/* ---- the request's other fields ------------------------------------------------------------ */

/* format: "" (none), "json" (any JSON object) or a JSON schema object, as response_format */
static int map_format(json_t *in, json_t *o, perr *e) {
    json_t *f = json_object_get(in, "format");
    if (is_empty(f)) return 0;
    if (json_is_string(f) && !strcmp(json_string_value(f), "json")) {
        json_object_set_new(o, "response_format", json_pack("{s:s}", "type", "json_object"));
        return 0;
    }
    if (!json_is_object(f))
        return fail(e, "format", "'format' must be \"json\" or a JSON schema object"), -1;
    json_object_set_new(o, "response_format",
                        json_pack("{s:s, s:{s:s, s:O}}", "type", "json_schema", "json_schema", "name",
                                  "format", "schema", f));
    return 0;
}

/* think: true/false switch Qwen3's thinking on/off; "low", "medium" and "high" (the levels
 * some models have) turn it on: Qwen3 has one level. Absent: the template's default. */
static int map_think(json_t *in, json_t *o, perr *e) {
    json_t *t = json_object_get(in, "think");
    if (!t || json_is_null(t)) return 0;
    int on;
    if (json_is_boolean(t)) {
        on = json_is_true(t);
    } else if (json_is_string(t) && (!strcmp(json_string_value(t), "low") ||
                                     !strcmp(json_string_value(t), "medium") ||
                                     !strcmp(json_string_value(t), "high"))) {
        on = 1;
    } else {
        return fail(e, "think", "'think' must be true, false, \"low\", \"medium\" or \"high\""), -1;
    }
    json_object_set_new(o, "chat_template_kwargs", json_pack("{s:b}", "enable_thinking", on));
    return 0;
}

/* The fields both endpoints share: model, stream (default true), keep_alive, format, think,
 * options, logprobs. */
static int map_common(json_t *in, json_t *o, perr *e) {
    json_t *model = json_object_get(in, "model");
    if (!json_is_string(model) || json_string_length(model) == 0)
        return fail(e, "model", "'model' is required (a string)"), -1;
    json_object_set(o, "model", model);
    json_t *st = json_object_get(in, "stream");
    if (st && !json_is_null(st) && !json_is_boolean(st))
        return fail(e, "stream", "'stream' must be true or false"), -1;
    json_object_set_new(o, "stream", json_boolean(!json_is_false(st)));
    json_t *ka = json_object_get(in, "keep_alive");
    if (ka && !json_is_null(ka) && !json_is_number(ka) && !json_is_string(ka))
        return fail(e, "keep_alive", "'keep_alive' must be a duration (\"5m\") or a number of seconds"), -1;
    json_t *lp = json_object_get(in, "logprobs"), *tlp = json_object_get(in, "top_logprobs");
    if (json_is_true(lp) || (tlp && !json_is_null(tlp) && !(json_is_integer(tlp) && !json_integer_value(tlp))))
        return fail(e, json_is_true(lp) ? "logprobs" : "top_logprobs",
                    "'%s' is not implemented on Kipp's Ollama API (POST /v1/chat/completions returns "
                    "logprobs)", json_is_true(lp) ? "logprobs" : "top_logprobs"), -1;
    if (lp && !json_is_null(lp) && !json_is_boolean(lp))
        return fail(e, "logprobs", "'logprobs' must be true or false"), -1;
    return map_format(in, o, e) || map_think(in, o, e) || map_options(in, o, e) ? -1 : 0;
}

/* ---- /api/chat ------------------------------------------------------------------------------ */

/* An assistant message's tool_calls: [{"function": {"name", "arguments": {...}}}] (Ollama's
 * arguments are an object; the chat template writes an object as it is). */
static json_t *copy_tool_calls(json_t *calls, size_t i, perr *e) {
    if (!json_is_array(calls)) return fail(e, "messages", "messages[%zu].tool_calls must be an array", i);
    json_t *out = json_array();
    for (size_t j = 0; out && j < json_array_size(calls); j++) {
        json_t *fn = json_object_get(json_array_get(calls, j), "function");
        json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
        if (!json_is_string(name) || (args && !json_is_null(args) && !json_is_object(args))) {
            json_decref(out);
            return fail(e, "messages", "messages[%zu].tool_calls[%zu] must be {\"function\": {\"name\": "
                        "string, \"arguments\": object}}", i, j);
        }
        json_array_append_new(out, json_pack("{s:s, s:{s:O, s:o}}", "type", "function", "function",
                                             "name", name, "arguments",
                                             json_is_object(args) ? json_incref(args) : json_object()));
    }
    return out;
}

/* One message: role, content (a string), thinking (assistant: its reasoning), tool_calls
 * (assistant), tool_name (tool: accepted; Qwen's templates show results in call order
 * without names), images (a 400: text only). */
static json_t *copy_message(json_t *m, size_t i, perr *e) {
    static const char *const known[] = {"role", "content", "thinking", "tool_calls", "tool_name",
                                        "images", NULL};
    if (!json_is_object(m)) return fail(e, "messages", "messages[%zu] must be an object", i);
    const char *role = json_string_value(json_object_get(m, "role"));
    const int asst = role && !strcmp(role, "assistant"), tool = role && !strcmp(role, "tool");
    if (!role || (strcmp(role, "system") && strcmp(role, "user") && !asst && !tool))
        return fail(e, "messages", "messages[%zu].role must be \"system\", \"user\", \"assistant\" or "
                    "\"tool\"", i);
    json_t *c = json_object_get(m, "content");
    if (c && !json_is_null(c) && !json_is_string(c))
        return fail(e, "messages", "messages[%zu].content must be a string", i);
    if (!is_empty(json_object_get(m, "images")))
        return fail(e, "images", "messages[%zu].images: images are not supported (the models Kipp "
                    "serves read text only)", i);
    json_t *th = json_object_get(m, "thinking"), *calls = json_object_get(m, "tool_calls"),
           *tn = json_object_get(m, "tool_name");
    if ((!is_empty(th) && !asst) || (th && !json_is_null(th) && !json_is_string(th)))
        return fail(e, "messages", "messages[%zu].thinking must be a string, on an assistant message", i);
    if (!is_empty(calls) && !asst)
        return fail(e, "messages", "messages[%zu].tool_calls: only an assistant message makes calls", i);
    if ((!is_empty(tn) && !tool) || (tn && !json_is_null(tn) && !json_is_string(tn)))
        return fail(e, "messages", "messages[%zu].tool_name must be a string, on a tool message", i);
    json_t *out = json_pack("{s:s, s:s%}", "role", role, "content", json_is_string(c) ? json_string_value(c) : "",
                            json_is_string(c) ? json_string_length(c) : (size_t)0);
    if (!out) return fail(e, NULL, "out of memory");
    if (json_is_string(th)) json_object_set(out, "reasoning_content", th);
    if (!is_empty(calls)) {
        json_t *tc = copy_tool_calls(calls, i, e);
        if (!tc) return json_decref(out), NULL;
        json_object_set_new(out, "tool_calls", tc);
    }
    const char *key;
    json_t *v;
    json_object_foreach(m, key, v) if (!is_known(key, known)) note_unknown(e, "messages[].", key);
    return out;
}

static int map_chat(json_t *in, json_t *o, perr *e) {
    json_t *msgs = json_object_get(in, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return fail(e, "messages", "'messages' must be a non-empty array (an empty one loads the model)"), -1;
    json_t *out = json_array();
    json_object_set_new(o, "messages", out);
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = copy_message(json_array_get(msgs, i), i, e);
        if (!m) return -1;
        json_array_append_new(out, m);
    }
    json_t *tools = json_object_get(in, "tools"); /* OpenAI's shape: checked by oai_parse_tree */
    if (tools && !json_is_null(tools)) json_object_set(o, "tools", tools);
    json_t *tc = json_object_get(in, "tool_choice"); /* Kipp's extension (OpenAI's values) */
    if (tc && !json_is_null(tc)) json_object_set(o, "tool_choice", tc);
    return 0;
}

/* ---- /api/generate -------------------------------------------------------------------------- */

static int opt_string(json_t *in, const char *key, perr *e) {
    json_t *v = json_object_get(in, key);
    if (v && !json_is_null(v) && !json_is_string(v)) return fail(e, key, "'%s' must be a string", key), -1;
    return 0;
}

/* The fields /api/generate defines that Kipp refuses when they ask for something. */
static int generate_refusals(json_t *in, perr *e) {
    if (!is_empty(json_object_get(in, "suffix")))
        return fail(e, "suffix", "'suffix' (fill-in-the-middle) is not supported"), -1;
    if (!is_empty(json_object_get(in, "template")))
        return fail(e, "template", "'template' is not supported: Kipp renders the model's own chat "
                    "template (send \"raw\": true with a prompt you rendered yourself)"), -1;
    if (!is_empty(json_object_get(in, "context")))
        return fail(e, "context", "'context' (the deprecated conversation state) is not supported: "
                    "Kipp keeps no state between requests; send the conversation to /api/chat"), -1;
    if (!is_empty(json_object_get(in, "images")))
        return fail(e, "images", "'images' are not supported (the models Kipp serves read text only)"), -1;
    static const char *const image_gen[] = {"width", "height", "steps"};
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(in, image_gen[i]);
        if (v && !json_is_null(v))
            return fail(e, image_gen[i], "'%s': image generation is not supported", image_gen[i]), -1;
    }
    return 0;
}

/* prompt (with system) as a one-turn chat; raw: true sends the prompt as it is (completions) */
static int map_generate(json_t *in, json_t *o, oai_endpoint *ep, perr *e) {
    if (opt_string(in, "prompt", e) || opt_string(in, "system", e) || opt_string(in, "suffix", e) ||
        opt_string(in, "template", e) || generate_refusals(in, e))
        return -1;
    json_t *raw = json_object_get(in, "raw");
    if (raw && !json_is_null(raw) && !json_is_boolean(raw))
        return fail(e, "raw", "'raw' must be true or false"), -1;
    json_t *prompt = json_object_get(in, "prompt"), *sys = json_object_get(in, "system");
    if (json_is_true(raw)) {
        if (!is_empty(sys))
            return fail(e, "system", "'system' with \"raw\": true: a raw prompt is not templated; "
                        "write the system text into it"), -1;
        json_t *th = json_object_get(in, "think");
        if (th && !json_is_null(th))
            return fail(e, "think", "'think' with \"raw\": true: a raw prompt is not templated, so "
                        "the template's thinking switch does not apply"), -1;
        *ep = OAI_COMPLETIONS;
        json_object_set_new(o, "prompt", json_string(json_is_string(prompt) ? json_string_value(prompt) : ""));
        return 0;
    }
    json_t *msgs = json_array();
    json_object_set_new(o, "messages", msgs);
    if (!is_empty(sys)) json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", sys));
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content",
                                          json_is_string(prompt) ? json_string_value(prompt) : ""));
    return 0;
}

/* ---- the adapter ------------------------------------------------------------------------------ */

static const char *const known_common[] = {"model", "stream", "format", "options", "think", "keep_alive",
                                           "logprobs", "top_logprobs", NULL};
static const char *const known_chat[] = {"messages", "tools", "tool_choice", NULL};
static const char *const known_generate[] = {"prompt", "suffix", "system", "template", "context", "raw",
                                             "images", "width", "height", "steps", NULL};

static json_t *to_openai(json_t *in, int endpoint, oai_endpoint *ep, void **state, char *msg, size_t msg_len,
                         const char **param, char *unknown, size_t unknown_len) {
    perr e = {msg, msg_len, param, unknown, unknown_len};
    const int gen = endpoint == M_EP_OLLAMA_GENERATE;
    *ep = OAI_CHAT;
    json_t *o = json_object();
    ollama_state *s = calloc(1, sizeof *s);
    if (!o || !s || map_common(in, o, &e) || (gen ? map_generate(in, o, ep, &e) : map_chat(in, o, &e))) {
        if (!o || !s) fail(&e, NULL, "out of memory");
        json_decref(o);
        free(s);
        return NULL;
    }
    const char *key;
    json_t *v;
    json_object_foreach(in, key, v)
        if (!is_known(key, known_common) && !is_known(key, gen ? known_generate : known_chat))
            note_unknown(&e, "", key);
    s->generate = gen;
    *state = s;
    return o;
}

char *ollama_error_json(const char *message) {
    json_t *o = json_pack("{s:s}", "error", message ? message : "");
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static char *error_json(int status, const char *message, const char *type, const char *param, const char *code) {
    (void)status, (void)type, (void)param, (void)code;
    return ollama_error_json(message);
}

void ollama_now(char *out, size_t cap) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, cap, "%s.%09ldZ", day, (long)ts.tv_nsec);
}

/* {"model", "created_at"}: every line and response begins so */
static json_t *head(const char *model) {
    char t[48];
    ollama_now(t, sizeof t);
    return json_pack("{s:s, s:s}", "model", model ? model : "", "created_at", t);
}

int ollama_is_load_call(json_t *in, int endpoint) {
    if (endpoint == M_EP_OLLAMA_CHAT) {
        json_t *m = json_object_get(in, "messages");
        return !m || json_is_null(m) || (json_is_array(m) && json_array_size(m) == 0);
    }
    return is_empty(json_object_get(in, "prompt")) && is_empty(json_object_get(in, "system"));
}

/* The text part of a line: chat's message {role, content, thinking?, tool_calls?}, or
 * generate's response (and thinking) at the top level. */
static void put_text(json_t *o, int generate, const char *text, size_t n, const char *thinking, size_t n_th,
                     json_t *calls) {
    json_t *dst = o;
    if (!generate) {
        dst = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(o, "message", dst);
    }
    json_object_set_new(dst, generate ? "response" : "content", json_stringn(text ? text : "", n));
    if (n_th) json_object_set_new(dst, "thinking", json_stringn(thinking, n_th));
    if (calls) json_object_set_new(dst, "tool_calls", calls);
}

char *ollama_load_json(const char *model, int endpoint) {
    json_t *o = head(model);
    put_text(o, endpoint != M_EP_OLLAMA_CHAT, "", 0, NULL, 0, NULL);
    json_object_set_new(o, "done", json_true());
    json_object_set_new(o, "done_reason", json_string("load"));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static json_int_t ns(double s) { return s > 0 ? (json_int_t)(s * 1e9) : 0; }

/* The end: done, done_reason and the counts and durations (nanoseconds). The model is loaded
 * when the server starts, so load_duration is 0; prompt evaluation is admission to the
 * first token, evaluation the first token to now. */
static void put_done(json_t *o, const oai_meta *m, const char *finish) {
    const double queue = m->queue_s > 0 ? m->queue_s : 0, ttft = m->ttft_s >= 0 ? m->ttft_s : -1;
    json_object_set_new(o, "done", json_true());
    json_object_set_new(o, "done_reason", json_string(finish && !strcmp(finish, "length") ? "length" : "stop"));
    json_object_set_new(o, "total_duration", json_integer(ns(m->elapsed_s)));
    json_object_set_new(o, "load_duration", json_integer(0));
    json_object_set_new(o, "prompt_eval_count", json_integer(m->n_prompt));
    json_object_set_new(o, "prompt_eval_duration", json_integer(ttft >= 0 ? ns(ttft - queue) : 0));
    json_object_set_new(o, "eval_count", json_integer(m->n_completion));
    json_object_set_new(o, "eval_duration", json_integer(ttft >= 0 ? ns(m->elapsed_s - ttft) : 0));
}

/* A call as Ollama writes it: {"function": {"name", "arguments": {...}}}. The arguments are
 * the text of a JSON object (toolcall.h), so they parse. */
static json_t *call_json(const oai_call *c) {
    json_t *args = json_loadb(c->args.data ? c->args.data : "{}", c->args.len ? c->args.len : 2, 0, NULL);
    return json_pack("{s:{s:s%, s:o}}", "function", "name", c->name.data ? c->name.data : "", c->name.len,
                     "arguments", json_is_object(args) ? args : (json_decref(args), json_object()));
}

/* the calls not sent yet (each is whole when it appears: toolcall.h), or NULL */
static json_t *new_calls(oai_gen *g) {
    json_t *a = NULL;
    for (uint32_t i = 0; i < g->n_calls; i++) {
        if (g->calls[i].head_sent) continue;
        if (!a) a = json_array();
        json_array_append_new(a, call_json(&g->calls[i]));
        g->calls[i].head_sent = 1;
        g->calls[i].args_sent = g->calls[i].args.len;
    }
    return a;
}

static void put_line(kipp_buf *out, json_t *o, int *oom) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s || kipp_buf_put(out, s, strlen(s)) || kipp_buf_put(out, "\n", 1)) *oom = 1;
    free(s);
}

static void stream_events(void *state, oai_gen *g, const oai_meta *meta, const char *finish, kipp_buf *out) {
    const ollama_state *s = state;
    json_t *calls = new_calls(g);
    if (g->content.len || g->reasoning.len || calls) {
        json_t *o = head(meta->model);
        put_text(o, s->generate, g->content.data, g->content.len, g->reasoning.data, g->reasoning.len, calls);
        json_object_set_new(o, "done", json_false());
        put_line(out, o, &g->oom);
        g->content.len = g->reasoning.len = 0;
    }
    if (!finish) return;
    json_t *o = head(meta->model);
    put_text(o, s->generate, "", 0, NULL, 0, NULL);
    put_done(o, meta, finish);
    put_line(out, o, &g->oom);
}

static void stream_error(void *state, const oai_meta *meta, const char *message, const char *type,
                         kipp_buf *out) {
    (void)state, (void)meta, (void)type; /* Ollama's errors are {"error": message} only */
    int oom = 0;
    put_line(out, json_pack("{s:s}", "error", message ? message : "error"), &oom);
}

static char *response_json(void *state, oai_gen *g, const kipp_req *req, const oai_meta *meta,
                           const char *finish) {
    (void)req;
    const ollama_state *s = state;
    json_t *o = head(meta->model);
    put_text(o, s->generate, g->content.data, g->content.len, g->reasoning.data, g->reasoning.len,
             s->generate ? NULL : new_calls(g));
    put_done(o, meta, finish);
    char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return js;
}

const srv_api_ops srv_api_ollama = {.name = "ollama",
                                    .to_openai = to_openai,
                                    .error_json = error_json,
                                    .stream_ctype = "application/x-ndjson",
                                    .probe = " ",
                                    .stream_events = stream_events,
                                    .stream_error = stream_error,
                                    .response_json = response_json,
                                    .free_state = free};
