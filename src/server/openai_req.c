/* openai_req.c — validates an OpenAI chat or completions request body (jansson) into an
 * oai_request. Every rejection names the field, with OpenAI's ranges; unknown fields are
 * ignored as OpenAI does. The chat messages themselves are checked by kipp_chat_apply
 * later (it knows the template); here only their shape. */
#include "server/openai.h"

#include "engine/json_schema.h"
#include "server/structured.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef oai_perr perr;

int oai_refusev(oai_perr *e, const char *param, const char *fmt, va_list ap) {
    vsnprintf(e->msg, e->msg_len, fmt, ap);
    *e->param = param;
    return -1;
}

static int fail(perr *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    oai_refusev(e, param, fmt, ap);
    va_end(ap);
    return -1;
}

/* Optional number in [lo, hi]; absent or null leaves *out. */
static int get_num(json_t *o, const char *key, double lo, double hi, double *out, perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return fail(e, key, "'%s' must be a number", key);
    const double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return fail(e, key, "'%s' is %g; it must be in [%g, %g]", key, x, lo, hi);
    *out = x;
    return 0;
}

static int get_int(json_t *o, const char *key, long long lo, long long hi, long long *out,
                   perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return fail(e, key, "'%s' must be an integer", key);
    const long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return fail(e, key, "'%s' is %lld; it must be in [%lld, %lld]", key, x, lo, hi);
    *out = x;
    return 0;
}

static int get_bool(json_t *o, const char *key, int *out, perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return fail(e, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static int parse_stop(json_t *o, oai_request *r, perr *e) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    json_t *one[1] = {v};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > OAI_MAX_STOP)
            return fail(e, "stop", "'stop' has %zu strings; at most %d are allowed", n, OAI_MAX_STOP);
    } else if (!json_is_string(v)) {
        return fail(e, "stop", "'stop' must be a string or an array of strings");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : items[i];
        if (!json_is_string(s)) return fail(e, "stop", "'stop' must contain only strings");
        const size_t len = json_string_length(s);
        if (len == 0) return fail(e, "stop", "'stop' strings must not be empty");
        if (len > OAI_MAX_STOP_BYTES)
            return fail(e, "stop", "a 'stop' string is longer than %d bytes", OAI_MAX_STOP_BYTES);
        if (memchr(json_string_value(s), 0, len))
            return fail(e, "stop", "'stop' strings must not contain NUL");
        if (!(r->stop[r->n_stop] = strdup(json_string_value(s))))
            return fail(e, NULL, "out of memory");
        r->n_stop++;
    }
    return 0;
}

/* Fields of the OpenAI API whose other values Kipp does not implement yet: a 400 naming the
 * field rather than a 200 that silently ignores it. */
static int parse_unsupported(json_t *o, oai_endpoint ep, perr *e) {
    if (ep != OAI_CHAT) return 0;
    /* chat fields whose every non-null value asks for something Kipp does not do */
    static const char *const refused[][2] = {
        {"audio", "audio output is not supported (text only)"},
        {"prediction", "predicted outputs are not supported"},
        {"functions", "the deprecated 'functions' are not supported; send 'tools'"},
        {"function_call", "the deprecated 'function_call' is not supported; send 'tool_choice'"},
        {"web_search_options", "web search is not supported"},
        {"verbosity", "verbosity levels are not supported"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        json_t *v = json_object_get(o, refused[i][0]);
        if (v && !json_is_null(v)) return fail(e, refused[i][0], "'%s': %s", refused[i][0], refused[i][1]);
    }
    json_t *mod = json_object_get(o, "modalities");
    if (mod && !json_is_null(mod)) {
        if (!json_is_array(mod)) return fail(e, "modalities", "'modalities' must be an array");
        for (size_t i = 0; i < json_array_size(mod); i++) {
            json_t *m = json_array_get(mod, i);
            if (!json_is_string(m) || strcmp(json_string_value(m), "text"))
                return fail(e, "modalities", "'modalities' may only hold \"text\"");
        }
    }
    json_t *tier = json_object_get(o, "service_tier");
    if (tier && !json_is_null(tier) &&
        (!json_is_string(tier) || (strcmp(json_string_value(tier), "auto") &&
                                   strcmp(json_string_value(tier), "default"))))
        return fail(e, "service_tier", "'service_tier' may only be \"auto\" or \"default\"");
    if (json_is_true(json_object_get(o, "store")))
        return fail(e, "store", "'store': true is not supported: this server keeps no completions");
    return 0;
}

/* A rejection of part of tools[i]: param is "tools[i]" + what (".function.name", ...). */
static int fail_tool(perr *e, oai_request *r, size_t i, const char *what, const char *fmt, ...) {
    snprintf(r->param_buf, sizeof r->param_buf, "tools[%zu]%s", i, what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, e->msg_len, fmt, ap);
    va_end(ap);
    *e->param = r->param_buf;
    return -1;
}

/* tools: an array of {"type": "function", "function": {"name", "description", "parameters",
 * "strict"}} with valid, distinct names and object schemas as parameters (OpenAI's rules);
 * the names go to r->tool_names (a parsed call must name one). The schemas are enforced,
 * and their keywords checked, only for a forced tool_choice (oai_tool_grammar). */
static int parse_tools(json_t *tools, oai_request *r, perr *e) {
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return fail(e, "tools", "'tools' must be an array");
    const size_t n = json_array_size(tools);
    if (n && !(r->tool_names = calloc(n, sizeof *r->tool_names))) return fail(e, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tools, i);
        if (!json_is_object(t))
            return fail_tool(e, r, i, "", "tools[%zu] must be an object {\"type\": \"function\", "
                             "\"function\": {\"name\": ...}}", i);
        json_t *ty = json_object_get(t, "type");
        if (!json_is_string(ty))
            return fail_tool(e, r, i, ".type", "tools[%zu].type must be \"function\"", i);
        if (strcmp(json_string_value(ty), "function"))
            return fail_tool(e, r, i, ".type", "tools[%zu].type '%.40s' is not supported: only "
                             "\"function\" tools are", i, json_string_value(ty));
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn))
            return fail_tool(e, r, i, ".function", "tools[%zu].function must be an object with "
                             "the function's 'name' (and 'description', 'parameters')", i);
        json_t *nm = json_object_get(fn, "name");
        if (!json_is_string(nm) || strlen(json_string_value(nm)) != json_string_length(nm) ||
            !oai_tool_name_valid(json_string_value(nm)))
            return fail_tool(e, r, i, ".function.name", "tools[%zu].function.name must be 1 to 64 "
                             "characters of a-z, A-Z, 0-9, _ and -", i);
        const char *name = json_string_value(nm);
        for (size_t k = 0; k < r->n_tool_names; k++)
            if (!strcmp(r->tool_names[k], name))
                return fail_tool(e, r, i, ".function.name", "tools[%zu].function.name '%s' is "
                                 "already the name of tools[%zu]: names must be unique", i, name, k);
        json_t *d = json_object_get(fn, "description");
        if (d && !json_is_null(d) && !json_is_string(d))
            return fail_tool(e, r, i, ".function.description", "tools[%zu].function.description "
                             "must be a string", i);
        json_t *st = json_object_get(fn, "strict");
        if (st && !json_is_null(st) && !json_is_boolean(st))
            return fail_tool(e, r, i, ".function.strict", "tools[%zu].function.strict must be true "
                             "or false", i);
        json_t *p = json_object_get(fn, "parameters");
        if (p && !json_is_null(p)) {
            if (!json_is_object(p))
                return fail_tool(e, r, i, ".function.parameters", "tools[%zu].function.parameters "
                                 "must be a JSON Schema object (the arguments are a JSON object)", i);
            json_t *pt = json_object_get(p, "type");
            if (pt && !(json_is_string(pt) && !strcmp(json_string_value(pt), "object")))
                return fail_tool(e, r, i, ".function.parameters", "tools[%zu].function.parameters "
                                 "must have \"type\": \"object\" (the arguments are a JSON object)", i);
        }
        if (!(r->tool_names[r->n_tool_names] = strdup(name))) return fail(e, NULL, "out of memory");
        r->n_tool_names++;
    }
    return 0;
}

/* Constrained decoding: response_format (json_object, json_schema), the "grammar"
 * extension, and tool_choice "required" or a named function — at most one of the three.
 * Sets r->grammar to grammar text (compiled by the server) and r->tool_parse. */
static int parse_constraint(json_t *o, oai_endpoint ep, oai_request *r, perr *e) {
    char msg[400] = "";
    json_t *rf = json_object_get(o, "response_format");
    if (rf && !json_is_null(rf)) {
        json_t *t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_string(t))
            return fail(e, "response_format", "'response_format' must be an object with a 'type'");
        const char *type = json_string_value(t);
        if (!strcmp(type, "json_object")) {
            if (kipp_json_schema_grammar(NULL, &r->grammar, &r->grammar_len, msg, sizeof msg))
                return fail(e, "response_format", "response_format: %s", msg);
        } else if (!strcmp(type, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema");
            json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
            if (!json_is_object(schema) && !json_is_boolean(schema))
                return fail(e, "response_format", "'response_format' json_schema needs "
                            "'json_schema': {'name': ..., 'schema': {...}}");
            json_t *strict = json_object_get(js, "strict");
            if (strict && !json_is_null(strict) && !json_is_boolean(strict))
                return fail(e, "response_format", "'response_format'.json_schema.strict must be true or false");
            if (kipp_json_schema_grammar(schema, &r->grammar, &r->grammar_len, msg, sizeof msg))
                return fail(e, "response_format", "response_format.json_schema.schema: %s", msg);
        } else if (strcmp(type, "text") != 0) {
            return fail(e, "response_format", "'response_format' type '%.40s' is not supported (only "
                        "\"text\", \"json_object\" and \"json_schema\")", type);
        }
        if (r->grammar) r->grammar_param = "response_format";
    }
    json_t *gr = json_object_get(o, "grammar");
    if (gr && !json_is_null(gr)) {
        if (!json_is_string(gr)) return fail(e, "grammar", "'grammar' must be a string (docs/grammar.md)");
        if (r->grammar)
            return fail(e, "grammar", "'grammar' and a json 'response_format' cannot both be given");
        const size_t n = json_string_length(gr);
        if (!(r->grammar = malloc(n + 1))) return fail(e, NULL, "out of memory");
        memcpy(r->grammar, json_string_value(gr), n + 1);
        r->grammar_len = n;
        r->grammar_param = "grammar";
    }
    if (ep != OAI_CHAT) return 0;
    json_t *tools = json_object_get(o, "tools");
    if (parse_tools(tools, r, e)) return -1;
    json_t *ptc = json_object_get(o, "parallel_tool_calls");
    if (ptc && !json_is_null(ptc) && !json_is_boolean(ptc))
        return fail(e, "parallel_tool_calls", "'parallel_tool_calls' must be true or false");
    json_t *tc = json_object_get(o, "tool_choice");
    const char *only = NULL;
    int forced = 0;
    if (tc && !json_is_null(tc)) {
        const char *v = json_is_string(tc) ? json_string_value(tc) : NULL;
        if (json_is_object(tc)) {
            json_t *fn = json_object_get(tc, "function");
            only = json_string_value(json_object_get(fn, "name"));
            const char *ty = json_string_value(json_object_get(tc, "type"));
            if (ty && !strcmp(ty, "custom"))
                return fail(e, "tool_choice", "a 'custom' tool_choice is not supported: only "
                            "\"function\" tools are");
            if (!only || (ty && strcmp(ty, "function")))
                return fail(e, "tool_choice", "a named 'tool_choice' must be {\"type\": \"function\", "
                            "\"function\": {\"name\": ...}}");
            forced = 1;
        } else if (v && !strcmp(v, "required")) {
            forced = 1;
        } else if (!v || (strcmp(v, "auto") && strcmp(v, "none"))) {
            return fail(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                        "name a function");
        }
    }
    r->tool_choice_none = json_is_string(tc) && strcmp(json_string_value(tc), "none") == 0;
    r->tool_parse = json_array_size(tools) > 0 && !r->tool_choice_none;
    /* "auto" with parallel_tool_calls false would need "text, or one call": not enforced */
    if (json_is_false(ptc) && !forced && r->tool_parse)
        return fail(e, "parallel_tool_calls", "'parallel_tool_calls': false is supported with "
                    "tool_choice \"required\" or a named function (then exactly one call is "
                    "made), not with \"auto\"");
    if (!forced) return 0;
    if (r->grammar)
        return fail(e, "tool_choice", "a forced 'tool_choice' and '%s' cannot both be given",
                    r->grammar_param);
    if (!json_is_array(tools) || json_array_size(tools) == 0)
        return fail(e, "tool_choice", "tool_choice \"%s\" needs 'tools'", only ? "function" : "required");
    long bad_tool;
    if (!(r->grammar = oai_tool_grammar(tools, only, !only && !json_is_false(ptc), &bad_tool, msg,
                                        sizeof msg))) /* names were checked: a schema's fault */
        return bad_tool >= 0 ? fail_tool(e, r, (size_t)bad_tool, ".function.parameters", "%s", msg)
                             : fail(e, "tool_choice", "%s", msg);
    r->grammar_len = strlen(r->grammar);
    r->grammar_param = "tool_choice";
    return 0;
}

/* logit_bias: {"token id": bias in [-100, 100], ...}, ids as decimal strings (OpenAI). */
static int parse_logit_bias(json_t *o, oai_request *r, uint32_t n_vocab, perr *e) {
    json_t *v = json_object_get(o, "logit_bias");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v))
        return fail(e, "logit_bias", "'logit_bias' must be an object mapping token ids to biases");
    const size_t n = json_object_size(v);
    if (n > OAI_MAX_LOGIT_BIAS)
        return fail(e, "logit_bias", "'logit_bias' has %zu entries; at most %d are allowed", n,
                    OAI_MAX_LOGIT_BIAS);
    if (n == 0) return 0;
    if (!(r->bias = malloc(n * sizeof *r->bias))) return fail(e, NULL, "out of memory");
    const char *key;
    json_t *val;
    size_t i = 0;
    json_object_foreach(v, key, val) {
        char *end = NULL;
        const long long id = strtoll(key, &end, 10);
        if (!*key || *end || key[0] == '+' || key[0] == '-' || key[0] == ' ' || id >= (long long)n_vocab)
            return fail(e, "logit_bias", "'logit_bias' key '%.40s' is not a token id in [0, %u)",
                        key, n_vocab);
        if (!json_is_number(val))
            return fail(e, "logit_bias", "'logit_bias' value for token %lld must be a number", id);
        const double b = json_number_value(val);
        if (!(b >= -100.0 && b <= 100.0))
            return fail(e, "logit_bias", "'logit_bias' value for token %lld is %g; it must be in "
                        "[-100, 100]", id, b);
        r->bias[i++] = (kipp_logit_bias){(int32_t)id, (float)b};
    }
    r->sp.logit_bias = r->bias;
    r->sp.n_logit_bias = (uint32_t)i;
    return 0;
}

static int parse_sampling(json_t *o, oai_request *r, perr *e) {
    double x;
    long long k;
    kipp_sampler_params *sp = &r->sp;
    *sp = kipp_sampler_default_params();
    /* OpenAI's defaults: temperature 1, no truncation, no penalties */
    sp->temperature = 1.0f;
    sp->top_k = 0;
    sp->top_p = 1.0f;
    sp->min_p = 0.0f;
    sp->repetition_penalty = 1.0f;
    sp->presence_penalty = sp->frequency_penalty = 0.0f;
    sp->penalty_last_n = -1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    sp->seed = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec;
    x = sp->temperature;
    if (get_num(o, "temperature", 0, 2, &x, e)) return -1;
    sp->temperature = (float)x;
    x = sp->top_p;
    if (get_num(o, "top_p", 0, 1, &x, e)) return -1;
    if (x <= 0) return fail(e, "top_p", "'top_p' must be above 0");
    sp->top_p = (float)x;
    k = 0;
    if (get_int(o, "top_k", -1, 1000000, &k, e)) return -1;
    sp->top_k = (int32_t)(k < 0 ? 0 : k);
    x = 0;
    if (get_num(o, "min_p", 0, 1, &x, e)) return -1;
    sp->min_p = (float)x;
    x = 0;
    if (get_num(o, "presence_penalty", -2, 2, &x, e)) return -1;
    sp->presence_penalty = (float)x;
    x = 0;
    if (get_num(o, "frequency_penalty", -2, 2, &x, e)) return -1;
    sp->frequency_penalty = (float)x;
    x = 1;
    if (get_num(o, "repetition_penalty", 0, 10, &x, e)) return -1;
    if (x <= 0) return fail(e, "repetition_penalty", "'repetition_penalty' must be above 0");
    sp->repetition_penalty = (float)x;
    json_t *seed = json_object_get(o, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed)) return fail(e, "seed", "'seed' must be an integer");
        sp->seed = (uint64_t)json_integer_value(seed);
    }
    return 0;
}

/* o's messages are normalized (oai_chat_normalize): objects with a known role and, where
 * given, string content. */
static int parse_chat(json_t *o, oai_request *r, perr *e) {
    json_t *msgs = json_object_get(o, "messages");
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (strcmp(role, "system") != 0 && strcmp(role, "user") != 0) continue; /* (an assistant's
                                                                     reasoning may be left out) */
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) r->verbatim_bytes += json_string_length(c);
    }
    json_t *tools = json_object_get(o, "tools"); /* checked by parse_constraint */
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return fail(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r->enable_thinking = 1;
    if (json_is_object(kw) && get_bool(kw, "enable_thinking", &r->enable_thinking, e)) {
        *e->param = "chat_template_kwargs";
        return -1;
    }
    int lp = 0;
    if (get_bool(o, "logprobs", &lp, e)) return -1;
    long long top = 0;
    if (get_int(o, "top_logprobs", 0, KIPP_MAX_TOP_LOGPROBS, &top, e)) return -1;
    if (top > 0 && !lp) return fail(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r->logprobs = lp;
    r->top_logprobs = (uint32_t)top;
    json_t *body = json_object();
    if (!body) return fail(e, NULL, "out of memory");
    json_object_set(body, "messages", msgs);
    if (json_is_array(tools)) json_object_set(body, "tools", tools);
    json_object_set_new(body, "add_generation_prompt", json_true());
    json_t *kwc = json_is_object(kw) ? json_deep_copy(kw) : json_object();
    json_object_set_new(kwc, "enable_thinking", json_boolean(r->enable_thinking));
    json_object_set_new(body, "chat_template_kwargs", kwc);
    r->chat_body = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return r->chat_body ? 0 : fail(e, NULL, "out of memory");
}

static int parse_completions(json_t *o, oai_request *r, uint32_t n_vocab, perr *e) {
    json_t *p = json_object_get(o, "prompt");
    if (!p) return fail(e, "prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0); /* ["text"] or [[ids]] (lm-evaluation-harness): one prompt */
    if (json_is_string(p)) {
        r->prompt_len = json_string_length(p);
        if (r->prompt_len == 0) return fail(e, "prompt", "'prompt' is empty");
        if (!(r->prompt_text = malloc(r->prompt_len + 1))) return fail(e, NULL, "out of memory");
        memcpy(r->prompt_text, json_string_value(p), r->prompt_len + 1);
    } else if (json_is_array(p)) {
        const size_t n = json_array_size(p);
        if (n == 0) return fail(e, "prompt", "'prompt' is empty");
        if (!(r->prompt_ids = malloc(n * sizeof *r->prompt_ids))) return fail(e, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *t = json_array_get(p, i);
            if (!json_is_integer(t))
                return fail(e, "prompt", "'prompt' must be a string or an array of token ids "
                                         "(one prompt per request)");
            const long long id = json_integer_value(t);
            if (id < 0 || id >= (long long)n_vocab)
                return fail(e, "prompt", "prompt[%zu] is token %lld, outside the vocabulary [0, %u)",
                            i, id, n_vocab);
            r->prompt_ids[i] = (int32_t)id;
        }
        r->n_prompt_ids = n;
    } else {
        return fail(e, "prompt", "'prompt' must be a string or an array of token ids");
    }
    long long lp = -1;
    if (get_int(o, "logprobs", 0, KIPP_MAX_TOP_LOGPROBS, &lp, e)) return -1;
    r->logprobs = lp >= 0;
    r->top_logprobs = lp > 0 ? (uint32_t)lp : 0;
    if (get_bool(o, "echo", &r->echo, e)) return -1;
    /* OpenAI's current models refuse max_tokens 0 ("0 is less than the minimum of 1"); with
     * echo it scores the prompt and generates nothing, as vLLM and llama-server serve it */
    if (r->max_tokens == 0 && !r->echo)
        return fail(e, "max_tokens", "'max_tokens' 0 generates nothing: it is allowed with 'echo': "
                    "true (the prompt's log-probabilities, scoring)");
    json_t *suffix = json_object_get(o, "suffix");
    if (suffix && !json_is_null(suffix)) return fail(e, "suffix", "'suffix' is not supported");
    long long best_of = 1;
    if (get_int(o, "best_of", 1, 1, &best_of, e)) return -1;
    return 0;
}

/* The fields Kipp knows for an endpoint (the OpenAI API's and Kipp's extensions); any other
 * is ignored, and the first is reported in r->unknown_field for the server to log. */
static const char *const known_fields[2][48] = {
    {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
     "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "stop",
     "stream", "stream_options", "logprobs", "top_logprobs", "logit_bias", "n", "tools",
     "tool_choice", "parallel_tool_calls", "response_format", "user", "metadata", "store",
     "service_tier", "prompt_cache_key", "safety_identifier", "chat_template_kwargs",
     "ignore_eos", "content_special_tokens", "audio", "modalities", "prediction", "functions",
     "function_call", "web_search_options", "reasoning_effort", "verbosity", "grammar",
     "max_reasoning_tokens", NULL},
    {"model", "prompt", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
     "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "stop",
     "stream", "stream_options", "logprobs", "logit_bias", "n", "echo", "suffix", "best_of",
     "user", "metadata", "response_format", "ignore_eos", "content_special_tokens", "grammar", NULL},
};

static void note_unknown(json_t *o, oai_endpoint ep, oai_request *r) {
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        (void)val;
        int known = 0;
        for (const char *const *k = known_fields[ep == OAI_CHAT ? 0 : 1]; *k && !known; k++)
            known = strcmp(*k, key) == 0;
        if (!known) {
            snprintf(r->unknown_field, sizeof r->unknown_field, "%s", key);
            for (char *c = r->unknown_field; *c; c++) /* it goes into a log line */
                if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
            return;
        }
    }
}

int oai_parse(const char *body, size_t len, oai_endpoint ep, uint32_t n_vocab, oai_request *r,
              char *msg, size_t msg_len, const char **param) {
    return oai_parse_freeing(body, len, ep, n_vocab, r, msg, msg_len, param, NULL, NULL);
}

int oai_parse_freeing(const char *body, size_t len, oai_endpoint ep, uint32_t n_vocab, oai_request *r,
                      char *msg, size_t msg_len, const char **param, void (*done)(void *), void *done_arg) {
    perr e = {msg, msg_len, param};
    memset(r, 0, sizeof *r);
    r->ep = ep;
    r->max_tokens = -1;
    *param = NULL;
    json_error_t je;
    json_t *o = json_loadb(body, len, 0, &je);
    if (done) done(done_arg); /* the body's bytes are not read again */
    if (!o) return fail(&e, NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                        je.line, je.column);
    const int rc = oai_parse_tree(o, ep, n_vocab, r, msg, msg_len, param);
    json_decref(o);
    return rc;
}

int oai_parse_tree(json_t *o, oai_endpoint ep, uint32_t n_vocab, oai_request *r, char *msg, size_t msg_len,
                   const char **param) {
    perr e = {msg, msg_len, param};
    memset(r, 0, sizeof *r);
    r->ep = ep;
    r->max_tokens = -1;
    *param = NULL;
    int rc = -1;
    json_t *norm = NULL;
    if (!json_is_object(o)) {
        fail(&e, NULL, "the body must be a JSON object");
        goto out;
    }
    json_t *model = json_object_get(o, "model");
    if (!model) { fail(&e, "model", "'model' is required"); goto out; }
    if (!json_is_string(model)) { fail(&e, "model", "'model' must be a string"); goto out; }
    if (!(r->model = strdup(json_string_value(model)))) { fail(&e, NULL, "out of memory"); goto out; }
    long long n = 1, mt = -1;
    if (get_int(o, "n", 1, OAI_MAX_N, &n, &e)) goto out;
    r->n = (uint32_t)n;
    /* completions: max_tokens 0 with echo scores the prompt (parse_completions) */
    const long long mt_lo = ep == OAI_COMPLETIONS ? 0 : 1;
    if (get_int(o, "max_tokens", mt_lo, 1 << 30, &mt, &e) ||
        get_int(o, "max_completion_tokens", mt_lo, 1 << 30, &mt, &e))
        goto out;
    r->max_tokens = mt;
    long long mr = -1;
    if (ep == OAI_CHAT && get_int(o, "max_reasoning_tokens", 0, 1 << 30, &mr, &e)) goto out;
    r->max_reasoning_tokens = mr;
    if (get_bool(o, "stream", &r->stream, &e) || get_bool(o, "ignore_eos", &r->ignore_eos, &e))
        goto out;
    json_t *so = json_object_get(o, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) { fail(&e, "stream_options", "'stream_options' must be an object"); goto out; }
        if (get_bool(so, "include_usage", &r->include_usage, &e)) { *param = "stream_options"; goto out; }
        int obfuscate = 0;
        if (get_bool(so, "include_obfuscation", &obfuscate, &e)) { *param = "stream_options"; goto out; }
        if (obfuscate) {
            fail(&e, "stream_options.include_obfuscation", "'stream_options.include_obfuscation': true "
                 "is not supported: this server pads no stream event (send false, or leave it out)");
            goto out;
        }
    }
    r->content_special = -1;
    json_t *cst = json_object_get(o, "content_special_tokens");
    if (cst && !json_is_null(cst)) {
        const char *v = json_is_string(cst) ? json_string_value(cst) : "";
        if (strcmp(v, "parse") && strcmp(v, "text")) {
            fail(&e, "content_special_tokens", "'content_special_tokens' must be \"parse\" or \"text\"");
            goto out;
        }
        r->content_special = strcmp(v, "parse") == 0;
    }
    if (ep == OAI_CHAT) { /* the messages and switches as clients send them, normalized */
        if (oai_chat_normalize(o, r, &norm, &e)) goto out;
        o = norm;
    }
    if (parse_sampling(o, r, &e) || parse_logit_bias(o, r, n_vocab, &e) || parse_stop(o, r, &e) ||
        parse_unsupported(o, ep, &e) || parse_constraint(o, ep, r, &e))
        goto out;
    /* a reply that claims to be JSON (or calls) ends where its grammar says: a stop string
     * would cut it short and still say "stop" (a raw grammar's writer may want that) */
    if (r->n_stop && r->grammar && strcmp(r->grammar_param, "grammar") != 0) {
        fail(&e, "stop", "'stop' cannot be combined with %s: the grammar decides where a "
             "constrained reply ends (a stop string would cut it short)",
             !strcmp(r->grammar_param, "tool_choice") ? "a forced 'tool_choice'" : "a JSON 'response_format'");
        goto out;
    }
    if (ep == OAI_CHAT ? parse_chat(o, r, &e) : parse_completions(o, r, n_vocab, &e)) goto out;
    note_unknown(o, ep, r);
    rc = 0;
out:
    json_decref(norm);
    return rc;
}

void oai_request_free(oai_request *r) {
    free(r->grammar);
    for (size_t i = 0; i < r->n_tool_names; i++) free(r->tool_names[i]);
    free(r->tool_names);
    free(r->model);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->chat_body);
    free(r->prompt_text);
    free(r->prompt_ids);
    free(r->bias);
    memset(r, 0, sizeof *r);
}
