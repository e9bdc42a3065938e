/* util.c — llama-server's utility endpoints: POST /tokenize (ids, or ids with their pieces),
 * POST /detokenize, POST /apply-template (the prompt a chat request renders to, through the
 * chat endpoint's own parser, so the two cannot disagree) and GET /props (the defaults a
 * request gets, the context, the slots, the chat template). Errors in OpenAI's shape; auth,
 * Host/Origin and body limits are http.c's. No generation happens here.
 * Reference: docs/server.md, "Utility endpoints". */
#include "server/http_int.h"

#include "tok/chat.h"
#include "tok/unicode.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The body as a JSON object, or NULL with a 400 sent (*res). */
static json_t *body_object(kipp_server *sv, struct MHD_Connection *c, conn_state *cs,
                           enum MHD_Result *res) {
    json_error_t je;
    json_t *o = json_loadb(cs->body.data ? cs->body.data : "", cs->body.len, 0, &je);
    char msg[256];
    if (!o) snprintf(msg, sizeof msg, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                     je.line, je.column);
    else if (!json_is_object(o)) snprintf(msg, sizeof msg, "the body must be a JSON object");
    else return o;
    json_decref(o);
    *res = srv_send_error(sv, c, cs, 400, msg, "invalid_request_error", NULL, NULL);
    return NULL;
}

/* Logs the first field of o outside known (ignored, said once per name). */
static void note_unknown(kipp_server *sv, json_t *o, const char *const *known) {
    const char *key;
    json_t *val;
    json_object_foreach(o, key, val) {
        (void)val;
        const char *const *k = known;
        while (*k && strcmp(*k, key)) k++;
        if (!*k) {
            char name[64];
            snprintf(name, sizeof name, "%s", key);
            for (char *p = name; *p; p++) /* it goes into a log line */
                if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
            srv_note_ignored_field(sv, name);
            return;
        }
    }
}

/* An optional boolean field (absent or null: *out unchanged); else msg names it. */
static int get_flag(json_t *o, const char *key, int *out, char *msg, size_t msg_len) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) {
        snprintf(msg, msg_len, "'%s' must be true or false", key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

/* ---- POST /tokenize ------------------------------------------------------------------------ */

/* A token's piece: its text when its bytes are valid UTF-8 on their own, else the bytes as
 * an array of numbers (a fragment of a character); a special token's text (its bytes are
 * empty) as the detokenizer writes it. */
static json_t *piece_json(const kipp_model *m, int32_t id) {
    size_t n;
    const char *b = kipp_token_bytes(m, id, &n);
    if (n == 0) {
        char err[KIPP_ERR_LEN], *text = NULL;
        size_t len = 0;
        json_t *s = kipp_detokenize(m, &id, 1, 0, &text, &len, err, sizeof err) == KIPP_OK
                        ? json_stringn(text, len) : NULL;
        free(text);
        return s;
    }
    if (kipp_tok_utf8_valid_prefix((const uint8_t *)b, n) == n) return json_stringn(b, n);
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

/* {"tokens": [...]} written token by token (a tree of a long text's pieces would take
 * tens of bytes per token more than its text): malloc'd, or NULL out of memory. vllm > 0:
 * vLLM's shape, {"count", "max_model_len": vllm, "tokens"} (vllm-router reads count). */
static char *tokens_body(const kipp_model *m, const int32_t *ids, size_t n, int with_pieces,
                         uint32_t vllm) {
    kipp_buf b = {0};
    if (vllm) kipp_buf_printf(&b, "{\"count\":%zu,\"max_model_len\":%u,", n, (unsigned)vllm);
    else kipp_buf_puts(&b, "{");
    kipp_buf_puts(&b, "\"tokens\":[");
    for (size_t i = 0; i < n && !b.oom; i++) {
        if (i) kipp_buf_put(&b, ",", 1);
        if (!with_pieces) {
            kipp_buf_printf(&b, "%d", (int)ids[i]);
            continue;
        }
        json_t *t = json_pack("{s:i, s:o}", "id", (json_int_t)ids[i], "piece", piece_json(m, ids[i]));
        char *js = t ? json_dumps(t, JSON_COMPACT) : NULL;
        json_decref(t);
        if (!js) b.oom = 1;
        else kipp_buf_puts(&b, js);
        free(js);
    }
    kipp_buf_puts(&b, "]}");
    return kipp_buf_take(&b, NULL);
}

/* {content, add_special?, parse_special?, with_pieces?} -> {"tokens": [...]}. add_special
 * appends what the tokenizer appends to every input (Qwen3-Embedding's <|endoftext|>; a
 * Qwen generative model's tokenizer adds nothing: no BOS). vLLM's body for a completion's
 * prompt, {"model", "prompt": TEXT}, is read as content and answered in vLLM's shape:
 * vllm-router's cache_aware and kv_aware policies tokenize a request so on its replica. */
static enum MHD_Result handle_tokenize(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    static const char *const known[] = {"content", "prompt", "add_special", "parse_special",
                                        "with_pieces", "model", NULL};
    enum MHD_Result res;
    json_t *o = body_object(sv, c, cs, &res);
    if (!o) return res;
    char msg[KIPP_ERR_LEN] = "";
    const char *param = NULL;
    int add_special = 0, parse_special = 1, with_pieces = 0;
    json_t *content = json_object_get(o, "content");
    json_t *prompt = json_object_get(o, "prompt");
    if (content && prompt)
        snprintf(msg, sizeof msg, "give 'content' or 'prompt' (vLLM's name), not both"), param = "prompt";
    else if (prompt && !json_is_string(prompt))
        snprintf(msg, sizeof msg, "'prompt' must be a string"), param = "prompt";
    else if (!json_is_string(content = prompt ? prompt : content))
        snprintf(msg, sizeof msg, "'content' (a string) is required"), param = "content";
    else if (get_flag(o, "add_special", &add_special, msg, sizeof msg)) param = "add_special";
    else if (get_flag(o, "parse_special", &parse_special, msg, sizeof msg)) param = "parse_special";
    else if (get_flag(o, "with_pieces", &with_pieces, msg, sizeof msg)) param = "with_pieces";
    if (msg[0]) {
        json_decref(o);
        return srv_send_error(sv, c, cs, 400, msg, "invalid_request_error", param, NULL);
    }
    note_unknown(sv, o, known);
    if (srv_parse_enter(sv) != 0) {
        json_decref(o);
        return srv_send_error(sv, c, cs, 503, "too many requests are being parsed; retry", "server_error",
                              NULL, "overloaded");
    }
    int32_t *ids = NULL;
    size_t n = 0;
    kipp_status st = kipp_tokenize_alloc(sv->m, json_string_value(content), json_string_length(content),
                                         parse_special, &ids, &n, msg, sizeof msg);
    json_decref(o);
    kipp_model_info info;
    kipp_model_get_info(sv->m, &info);
    if (st == KIPP_OK && add_special && info.add_eos) {
        int32_t *grown = realloc(ids, (n + 1) * sizeof *ids);
        if (grown) (ids = grown)[n++] = (int32_t)info.eos_id;
        else st = KIPP_ERR_NOMEM;
    }
    char *js = st == KIPP_OK ? tokens_body(sv->m, ids, n, with_pieces, prompt ? sv->n_ctx : 0) : NULL;
    srv_parse_leave(sv);
    free(ids);
    if (st != KIPP_OK && st != KIPP_ERR_NOMEM) /* (valid JSON text always tokenizes) */
        return srv_send_error(sv, c, cs, 400, msg, "invalid_request_error", "content", NULL);
    return js ? srv_send_json(sv, c, cs, 200, js)
              : srv_send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
}

/* ---- POST /detokenize ---------------------------------------------------------------------- */

/* {tokens: [ids]} -> {"content": text}; special tokens are written as their text (so
 * /detokenize of /tokenize's ids gives the content back), invalid UTF-8 as U+FFFD. */
static enum MHD_Result handle_detokenize(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    static const char *const known[] = {"tokens", "model", NULL};
    enum MHD_Result res;
    json_t *o = body_object(sv, c, cs, &res);
    if (!o) return res;
    json_t *toks = json_object_get(o, "tokens");
    char msg[KIPP_ERR_LEN], param[40] = "tokens";
    msg[0] = 0;
    const size_t n = json_array_size(toks);
    int32_t *ids = n ? malloc(n * sizeof *ids) : NULL;
    if (n && !ids) {
        json_decref(o);
        return srv_send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
    }
    if (!json_is_array(toks)) snprintf(msg, sizeof msg, "'tokens' (an array of token ids) is required");
    for (size_t i = 0; !msg[0] && i < n; i++) {
        json_t *t = json_array_get(toks, i);
        const long long id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= (long long)sv->n_vocab) {
            snprintf(param, sizeof param, "tokens[%zu]", i);
            snprintf(msg, sizeof msg, "tokens[%zu] is not a token id in [0, %u)", i, sv->n_vocab);
        } else {
            ids[i] = (int32_t)id;
        }
    }
    if (!msg[0]) note_unknown(sv, o, known);
    json_decref(o);
    if (msg[0]) {
        free(ids);
        return srv_send_error(sv, c, cs, 400, msg, "invalid_request_error", param, NULL);
    }
    char *text = NULL;
    size_t len = 0;
    const kipp_status st = kipp_detokenize(sv->m, ids, n, 0, &text, &len, msg, sizeof msg);
    free(ids);
    json_t *out = st == KIPP_OK ? json_pack("{s:s%}", "content", text ? text : "", len) : NULL;
    free(text);
    char *js = out ? json_dumps(out, JSON_COMPACT) : NULL;
    json_decref(out);
    return js ? srv_send_json(sv, c, cs, 200, js)
              : srv_send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
}

/* ---- POST /apply-template ------------------------------------------------------------------ */

/* A chat request's body (model optional: this server's template renders it) -> {"prompt":
 * the text the chat endpoint tokenizes for it}. Parsed by oai_parse_tree as the chat
 * endpoint parses it: the same fields, normalization and errors. */
static enum MHD_Result handle_apply_template(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    enum MHD_Result res;
    json_t *o = body_object(sv, c, cs, &res);
    if (!o) return res;
    if (!json_object_get(o, "model")) json_object_set_new(o, "model", json_string(sv->model_name));
    if (srv_parse_enter(sv) != 0) {
        json_decref(o);
        return srv_send_error(sv, c, cs, 503, "too many requests are being parsed; retry", "server_error",
                              NULL, "overloaded");
    }
    oai_request rq;
    char msg[KIPP_ERR_LEN];
    const char *param = NULL;
    const int bad = oai_parse_tree(o, OAI_CHAT, sv->n_vocab, &rq, msg, sizeof msg, &param);
    json_decref(o);
    char *prompt = NULL;
    size_t len = 0;
    kipp_status st = KIPP_OK;
    if (!bad) {
        if (rq.unknown_field[0]) srv_note_ignored_field(sv, rq.unknown_field);
        st = kipp_chat_apply(sv->m, rq.chat_body, strlen(rq.chat_body), &prompt, &len, msg, sizeof msg);
        param = "messages";
    }
    srv_parse_leave(sv);
    if (bad || st != KIPP_OK) { /* (param may point into rq) */
        free(prompt);
        const int oom = st == KIPP_ERR_NOMEM;
        res = srv_send_error(sv, c, cs, oom ? 500 : 400, oom ? "out of memory" : msg,
                             oom ? "server_error" : "invalid_request_error", oom ? NULL : param, NULL);
        oai_request_free(&rq);
        return res;
    }
    oai_request_free(&rq);
    json_t *out = json_pack("{s:s%}", "prompt", prompt, len);
    free(prompt);
    char *js = out ? json_dumps(out, JSON_COMPACT) : NULL;
    json_decref(out);
    return js ? srv_send_json(sv, c, cs, 200, js)
              : srv_send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
}

/* ---- GET /props ---------------------------------------------------------------------------- */

/* The Jinja text of the model's template ("" for plain ChatML, which has none). */
static const char *template_source(const kipp_model *m, const char **name) {
    kipp_chat_thinking th;
    *name = "none";
    if (kipp_chat_template_info(m, 1, name, &th, NULL, 0) != KIPP_OK) return "";
    for (int k = KIPP_CHAT_TEMPLATE_QWEN3; k <= KIPP_CHAT_TEMPLATE_QWEN25_INSTRUCT; k++)
        if (!strcmp(kipp_chat_template_name((kipp_chat_template_kind)k), *name)) {
            const char *src = kipp_chat_template_source((kipp_chat_template_kind)k, NULL);
            return src ? src : "";
        }
    return "";
}

/* The sampling a request gets when it sets nothing: the parser's own defaults, read from a
 * minimal request (so /props cannot drift from what a request gets). */
static json_t *default_params(const kipp_server *sv) {
    json_t *req = json_pack("{s:s, s:[{s:s, s:s}]}", "model", sv->model_name, "messages", "role",
                            "user", "content", "x");
    oai_request rq = {0};
    char msg[256];
    const char *param;
    const int bad = !req || oai_parse_tree(req, OAI_CHAT, sv->n_vocab, &rq, msg, sizeof msg, &param);
    json_decref(req);
    if (bad) {
        oai_request_free(&rq);
        return NULL;
    }
    const kipp_sampler_params *sp = &rq.sp;
    const json_int_t max_tokens = sv->p.default_max_tokens ? (json_int_t)sv->p.default_max_tokens : -1;
    json_t *p = json_pack("{s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:i, s:[], s:b, s:b, s:i, s:b}",
                          "temperature", (double)sp->temperature, "top_k", (int)sp->top_k, "top_p",
                          (double)sp->top_p, "min_p", (double)sp->min_p, "repeat_penalty",
                          (double)sp->repetition_penalty, "presence_penalty", (double)sp->presence_penalty,
                          "frequency_penalty", (double)sp->frequency_penalty, "max_tokens", max_tokens,
                          "n_predict", max_tokens, "seed", -1, "stop", "ignore_eos", rq.ignore_eos,
                          "stream", rq.stream, "n_probs", 0, "enable_thinking", rq.enable_thinking);
    oai_request_free(&rq);
    return p;
}

static enum MHD_Result handle_props(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    const char *tname;
    const char *src = template_source(sv->m, &tname);
    char build[160] = "kipp-server";
    json_t *kv = NULL; /* the KV pool: types, size, bytes per token (a generative model's) */
    if (sv->sched) {
        kipp_ctx_info ci;
        kipp_sched_ctx_info(sv->sched, &ci);
        snprintf(build, sizeof build, "kipp-server (backend %s, ISA %s)", ci.backend, ci.isa);
        kv = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "type_k", kipp_kv_type_name(ci.kv_type),
                       "type_v", kipp_kv_type_name(ci.kv_type_v), "blocks", (json_int_t)ci.kv_blocks,
                       "block_size", (json_int_t)ci.kv_block_size,
                       "tokens", (json_int_t)ci.kv_blocks * ci.kv_block_size,
                       "bytes", (json_int_t)ci.kv_bytes, "bytes_per_token", (json_int_t)ci.kv_bytes_per_token);
    }
    json_t *params = default_params(sv);
    json_t *out = params ? json_pack("{s:{s:i, s:o}, s:i, s:s, s:s, s:s, s:s, s:{s:b, s:b}, s:s, s:b}",
                                     "default_generation_settings", "n_ctx", (int)sv->n_ctx, "params",
                                     params, "total_slots", sv->sched ? (int)kipp_sched_max_running(sv->sched) : 1,
                                     "model_path", sv->model_name, "model_alias", sv->model_name,
                                     "chat_template", src, "chat_template_name", tname, "modalities",
                                     "vision", 0, "audio", 0, "build_info", build, "embedding", sv->sched == NULL)
                         : NULL;
    if (out && kv) json_object_set(out, "kv_cache", kv);
    json_decref(kv);
    char *js = out ? json_dumps(out, JSON_COMPACT) : NULL;
    json_decref(out);
    return js ? srv_send_json(sv, c, cs, 200, js)
              : srv_send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
}

enum MHD_Result srv_handle_util(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    switch (cs->endpoint) {
    case M_EP_TOKENIZE: return handle_tokenize(sv, c, cs);
    case M_EP_DETOKENIZE: return handle_detokenize(sv, c, cs);
    case M_EP_APPLY_TEMPLATE: return handle_apply_template(sv, c, cs);
    default: return handle_props(sv, c, cs);
    }
}
