/* openai_gen.c — from generated tokens to OpenAI responses: streaming detokenization, stop
 * strings (text that may begin a stop string is held back until it cannot), the Qwen3
 * reasoning split for chat, then (when the request has tools) the <tool_call> split of the
 * content into tool_calls (src/tok/toolcall.c), and the JSON of chunks, whole responses
 * (also made piece by piece, oai_body, so a large one is never whole in memory),
 * usage and errors. Text is always valid UTF-8 (the detokenizer never emits half a
 * character; stop strings are matched on bytes and cut only where a whole stop string
 * begins). */
#include "server/openai.h"

#include "core/buf.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* The reasoning split's output: content goes on through the tool-call split when the
 * request has tools. */
static void emit_part(void *user, int is_reasoning, const char *bytes, size_t n) {
    oai_gen *g = user;
    if (!is_reasoning && g->rq->tool_parse) {
        if (kipp_toolcall_feed(&g->tc, bytes, n, NULL, 0) != KIPP_OK) g->oom = 1;
        return;
    }
    if (kipp_buf_put(is_reasoning ? &g->reasoning : &g->content, bytes, n)) g->oom = 1;
}

/* splitmix64's finalizer: a bijection, so distinct call numbers give distinct ids */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void emit_tool(void *user, kipp_toolcall_event ev, uint32_t index, const char *bytes,
                      size_t n) {
    oai_gen *g = user;
    if (ev == KIPP_TOOLCALL_CONTENT) {
        /* a forced tool_choice's grammar allows only calls: content there is what is left of
         * a call cut short (a partial "<tool_call" tag at the end of a cut reply), never text */
        if (g->rq->grammar_param && !strcmp(g->rq->grammar_param, "tool_choice")) return;
        if (kipp_buf_put(&g->content, bytes, n)) g->oom = 1;
    } else if (ev == KIPP_TOOLCALL_BEGIN) {
        if (g->n_calls == g->cap_calls) {
            /* the count is uint32_t: a call past UINT32_MAX fails like out of memory */
            size_t cap = g->cap_calls;
            if (g->n_calls == UINT32_MAX ||
                kipp_grow((void **)&g->calls, &cap, (size_t)g->n_calls + 1, sizeof *g->calls)) {
                g->oom = 1; /* the call is lost; its ARGS find no slot below */
                return;
            }
            g->cap_calls = cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
        }
        oai_call *c = &g->calls[g->n_calls];
        memset(c, 0, sizeof *c);
        snprintf(c->id, sizeof c->id, "call_%016llx",
                 (unsigned long long)mix64(g->call_seed + index));
        if (kipp_buf_put(&c->name, bytes, n) || kipp_buf_put(&c->args, "", 0)) g->oom = 1;
        g->n_calls++;
    } else if (ev == KIPP_TOOLCALL_ARGS && index < g->n_calls) {
        if (kipp_buf_put(&g->calls[index].args, bytes, n)) g->oom = 1;
    }
}

int oai_gen_init(oai_gen *g, const kipp_model *m, const oai_request *rq) {
    memset(g, 0, sizeof *g);
    g->stop_index = -1;
    g->m = m;
    g->rq = rq;
    /* a prompt that ends inside <think> (Thinking-2507) makes the reply start as reasoning; a
     * template without reasoning (Qwen2.5) makes it all content, <think> and all */
    kipp_chat_thinking th = KIPP_CHAT_THINK_OFF;
    if (rq->ep == OAI_CHAT) (void)kipp_chat_template_info(m, rq->enable_thinking, NULL, &th, NULL, 0);
    kipp_reasoning_init(&g->rs,
                        th == KIPP_CHAT_THINK_IN_PROMPT ? KIPP_REASONING_OPEN_IN_PROMPT
                        : th == KIPP_CHAT_THINK_NEVER   ? KIPP_REASONING_NONE
                                                        : KIPP_REASONING_OPEN_BY_TAG,
                        emit_part, g);
    kipp_toolcall_init(&g->tc, emit_tool, g);
    /* a call must name one of the request's tools (toolcall.h, rule 4) */
    if (rq->tool_names) kipp_toolcall_set_names(&g->tc, (const char *const *)rq->tool_names, rq->n_tool_names);
    /* call ids must not repeat across requests or restarts: random, or the clock when the
     * kernel has no entropy to give yet */
    if (getrandom(&g->call_seed, sizeof g->call_seed, GRND_NONBLOCK) != (ssize_t)sizeof g->call_seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g->call_seed = mix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
                       (uint64_t)(uintptr_t)g;
    }
    return kipp_detokenizer_init(m, 1, &g->dt, NULL, 0) == KIPP_OK ? 0 : -1;
}

void oai_gen_free(oai_gen *g) {
    kipp_detokenizer_free(g->dt);
    free(g->text_offset);
    free(g->echo_offset);
    kipp_buf_free(&g->echo);
    kipp_buf_free(&g->held);
    kipp_buf_free(&g->content);
    kipp_buf_free(&g->reasoning);
    kipp_toolcall_free(&g->tc);
    for (uint32_t i = 0; i < g->n_calls; i++) {
        kipp_buf_free(&g->calls[i].name);
        kipp_buf_free(&g->calls[i].args);
    }
    free(g->calls);
    g->calls = NULL;
    g->n_calls = g->cap_calls = 0;
}

/* ---- the request's model-bound part (here, not in openai_req.c: parsing needs no model) -- */

int oai_request_ban_token(oai_request *r, int32_t id) {
    int found = 0;
    for (uint32_t i = 0; i < r->sp.n_logit_bias; i++) /* "7" and "07" are both token 7 */
        if (r->bias[i].id == id) r->bias[i].bias = found++ ? 0.0f : OAI_BAN_BIAS;
    if (found) return 0;
    /* openai_req.c allocates the list to its size, so its cap is its count; the count is
     * uint32_t, so an entry past UINT32_MAX fails like out of memory */
    size_t cap = r->sp.n_logit_bias;
    if (r->sp.n_logit_bias == UINT32_MAX ||
        kipp_grow((void **)&r->bias, &cap, (size_t)r->sp.n_logit_bias + 1, sizeof *r->bias))
        return -1;
    r->bias[r->sp.n_logit_bias] = (kipp_logit_bias){id, OAI_BAN_BIAS};
    r->sp.logit_bias = r->bias;
    r->sp.n_logit_bias++;
    return 0;
}

int oai_apply_tool_choice(oai_request *r, const kipp_model *m) {
    if (!r->tool_choice_none) return 0;
    int32_t ids[2];
    size_t n = 0;
    char err[KIPP_ERR_LEN];
    /* more than one token: the vocabulary has no <tool_call> token, nothing to ban */
    if (kipp_tokenize(m, "<tool_call>", 11, 1, ids, 2, &n, err, sizeof err) != KIPP_OK || n != 1)
        return 0;
    return oai_request_ban_token(r, ids[0]);
}

/* Decided text: through the reasoning split for chat, straight to content otherwise. */
static void emit_text(oai_gen *g, const char *s, size_t n) {
    if (n == 0) return;
    if (g->rq->ep == OAI_CHAT) kipp_reasoning_feed(&g->rs, s, n, NULL, 0);
    else if (kipp_buf_put(&g->content, s, n)) g->oom = 1;
}

/* Bytes at the end of the held text that could begin a stop string. */
static size_t stop_holdback(const oai_gen *g) {
    size_t keep = 0;
    for (int i = 0; i < g->rq->n_stop; i++) {
        const char *st = g->rq->stop[i];
        const size_t ls = strlen(st);
        for (size_t k = ls - 1 < g->held.len ? ls - 1 : g->held.len; k > keep; k--)
            if (memcmp(g->held.data + g->held.len - k, st, k) == 0) { keep = k; break; }
    }
    return keep;
}

/* Moves the held text on: cut at the first stop string, or emit all that cannot start one. */
static int settle(oai_gen *g) {
    const char *first = NULL;
    int which = -1;
    for (int i = 0; i < g->rq->n_stop && g->held.len; i++) {
        const char *st = g->rq->stop[i];
        const size_t ls = strlen(st);
        for (size_t at = 0; at + ls <= g->held.len; at++)
            if (memcmp(g->held.data + at, st, ls) == 0) {
                if (!first || g->held.data + at < first) first = g->held.data + at, which = i;
                break;
            }
    }
    if (first) {
        emit_text(g, g->held.data, (size_t)(first - g->held.data));
        g->held.len = 0;
        g->stopped = 1;
        g->stop_index = which;
        return 1;
    }
    const size_t keep = stop_holdback(g);
    emit_text(g, g->held.data, g->held.len - keep);
    if (keep) memmove(g->held.data, g->held.data + g->held.len - keep, keep);
    g->held.len = keep;
    return 0;
}

/* Code points in valid UTF-8 text: the bytes that do not continue a character. */
static size_t utf8_chars(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

int oai_gen_echo(oai_gen *g, const int32_t *ids, uint32_t n) {
    kipp_detokenizer *dt; /* special tokens kept: the prompt's tokens concatenate to it */
    if (kipp_detokenizer_init(g->m, 0, &dt, NULL, 0) != KIPP_OK) return -1;
    if (!(g->echo_offset = malloc((size_t)(n ? n : 1) * sizeof *g->echo_offset))) {
        kipp_detokenizer_free(dt);
        return -1;
    }
    const char *text;
    size_t len;
    int bad = 0;
    for (uint32_t i = 0; i < n && !bad; i++) {
        g->echo_offset[i] = (uint32_t)g->n_chars;
        bad = kipp_detokenizer_next(dt, ids[i], &text, &len) != KIPP_OK ||
              (len && kipp_buf_put(&g->echo, text, len));
        g->n_chars += bad ? 0 : utf8_chars(text, len);
    }
    bad = bad || kipp_detokenizer_end(dt, &text, &len) != KIPP_OK || (len && kipp_buf_put(&g->echo, text, len));
    g->n_chars += bad ? 0 : utf8_chars(text, len);
    kipp_detokenizer_free(dt);
    g->n_echo = n;
    return bad ? -1 : 0;
}

int oai_gen_push(oai_gen *g, const kipp_gen_token *t) {
    if (g->stopped) return 0;
    /* n_used is uint32_t: a token past UINT32_MAX fails like out of memory */
    if (g->n_used == UINT32_MAX ||
        kipp_grow((void **)&g->text_offset, &g->text_offset_cap, (size_t)g->n_used + 1,
                  sizeof *g->text_offset)) {
        g->oom = 1;
        return 1;
    }
    g->text_offset[g->n_used++] = (uint32_t)g->n_chars;
    /* the same streaming detokenizer kipp and kipp-chat print through */
    const char *text;
    size_t n;
    /* the token that ends the generation adds no text, even one HF does not call special
     * (<|fim_pad|>, <|file_sep|>, ...): a reply, or a constrained JSON document, never ends in
     * an end marker */
    if ((!g->rq->ignore_eos || g->rq->grammar) && kipp_token_is_eog(g->m, t->id))
        return settle(g); /* under a grammar it ends the reply even with ignore_eos (sched.c) */
    if (kipp_detokenizer_next(g->dt, t->id, &text, &n) != KIPP_OK) {
        g->oom = 1;
        return 1;
    }
    g->n_chars += utf8_chars(text, n);
    if (n && kipp_buf_put(&g->held, text, n)) g->oom = 1;
    return settle(g);
}

void oai_gen_finish(oai_gen *g) {
    if (!g->stopped) {
        const char *text;
        size_t n = 0;
        if (kipp_detokenizer_end(g->dt, &text, &n) != KIPP_OK) g->oom = 1;
        else if (n && kipp_buf_put(&g->held, text, n)) g->oom = 1;
        if (!settle(g)) { /* no stop string: what was held back is plain text */
            emit_text(g, g->held.data, g->held.len);
            g->held.len = 0;
        }
    }
    if (g->rq->ep == OAI_CHAT) kipp_reasoning_finish(&g->rs, NULL, 0);
    /* a call cut short before its arguments closed is dropped (toolcall.h) */
    if (g->rq->ep == OAI_CHAT && g->rq->tool_parse && kipp_toolcall_finish(&g->tc, NULL, 0) != KIPP_OK)
        g->oom = 1;
}

/* ---- JSON ------------------------------------------------------------------------------- */

/* A token's bytes as JSON text (invalid UTF-8 replaced, as HF decode does) and as a byte
 * array (what OpenAI's "bytes" carries). */
static json_t *token_text(const kipp_model *m, int32_t id, json_t **bytes_out) {
    size_t n;
    const char *b = kipp_token_bytes(m, id, &n);
    char *s;
    size_t sl;
    json_t *txt = kipp_detokenize(m, &id, 1, 0, &s, &sl, NULL, 0) == KIPP_OK
                      ? json_stringn(s, sl)
                      : json_string("");
    if (txt) free(s);
    if (bytes_out) {
        *bytes_out = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(*bytes_out, json_integer((unsigned char)b[i]));
    }
    return txt ? txt : json_string("");
}

static json_t *chat_logprobs(const kipp_model *m, const kipp_req *req, uint32_t t0, uint32_t t1) {
    json_t *content = json_array();
    for (uint32_t i = t0; i < t1; i++) {
        const kipp_gen_token *t = kipp_req_token(req, i);
        json_t *bytes, *e = json_object(), *tops = json_array();
        json_object_set_new(e, "token", token_text(m, t->id, &bytes));
        json_object_set_new(e, "logprob", json_real(t->logprob));
        json_object_set_new(e, "bytes", bytes);
        for (uint32_t k = 0; k < t->n_top; k++) {
            json_t *tb, *te = json_object();
            json_object_set_new(te, "token", token_text(m, t->top_id[k], &tb));
            json_object_set_new(te, "logprob", json_real(t->top_logprob[k]));
            json_object_set_new(te, "bytes", tb);
            json_array_append_new(tops, te);
        }
        json_object_set_new(e, "top_logprobs", tops);
        json_array_append_new(content, e);
    }
    json_t *lp = json_object();
    json_object_set_new(lp, "content", content);
    return lp;
}

/* A token's top alternatives as completions' {"text": logprob} */
static json_t *top_dict(const kipp_model *m, const kipp_gen_token *t) {
    json_t *top = json_object();
    for (uint32_t k = 0; k < t->n_top; k++) {
        json_t *s = token_text(m, t->top_id[k], NULL);
        json_object_set_new(top, json_string_value(s), json_real(t->top_logprob[k]));
        json_decref(s);
    }
    return top;
}

/* Entry i (< n_echo) of an echoed prompt in completions' array `part`: the first token has
 * no log-probability (null, as OpenAI gives it). */
static json_t *echo_entry(const oai_gen *g, const kipp_req *req, uint32_t i, int part) {
    const kipp_gen_token *t = kipp_req_prompt_token(req, i);
    switch (part) {
    case 0: return token_text(g->m, t->id, NULL);
    case 1: return i ? json_real(t->logprob) : json_null();
    case 2: return i ? top_dict(g->m, t) : json_null();
    default: return json_integer((json_int_t)g->echo_offset[i]);
    }
}

/* Logprobs entry i: chat's object, or completions' element of array `part` (0 tokens, 1
 * token_logprobs, 2 top_logprobs, 3 text_offset); with echo, the prompt's n_echo entries
 * come first. text_offset: where the token's text begins in the choice's text, in
 * characters, from the streaming decode (a token that only starts a character shares the
 * offset of the one that completes it). */
static json_t *lp_entry(const oai_gen *g, const kipp_req *req, uint32_t i, int chat, int part) {
    if (i < g->n_echo) return echo_entry(g, req, i, part);
    i -= g->n_echo;
    const kipp_gen_token *t = kipp_req_token(req, i);
    if (chat) {
        json_t *bytes, *e = json_object(), *tops = json_array();
        json_object_set_new(e, "token", token_text(g->m, t->id, &bytes));
        json_object_set_new(e, "logprob", json_real(t->logprob));
        json_object_set_new(e, "bytes", bytes);
        for (uint32_t k = 0; k < t->n_top; k++) {
            json_t *tb, *te = json_object();
            json_object_set_new(te, "token", token_text(g->m, t->top_id[k], &tb));
            json_object_set_new(te, "logprob", json_real(t->top_logprob[k]));
            json_object_set_new(te, "bytes", tb);
            json_array_append_new(tops, te);
        }
        json_object_set_new(e, "top_logprobs", tops);
        return e;
    }
    switch (part) {
    case 0: return token_text(g->m, t->id, NULL);
    case 1: return json_real(t->logprob);
    case 2: return top_dict(g->m, t);
    default:
        return json_integer(i < g->n_used ? (json_int_t)g->text_offset[i] : (json_int_t)g->n_chars);
    }
}

static const char *const lp_parts[4] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};

/* Completions' logprobs object of entries [e0, e1) (lp_entry's numbering). */
static json_t *completion_logprobs(const oai_gen *g, const kipp_req *req, uint32_t e0, uint32_t e1) {
    json_t *lp = json_object();
    for (int part = 0; part < 4; part++) {
        json_t *a = json_array();
        for (uint32_t i = e0; i < e1; i++) json_array_append_new(a, lp_entry(g, req, i, 0, part));
        json_object_set_new(lp, lp_parts[part], a);
    }
    return lp;
}

/* A choice's text as JSON: the echoed prompt (when with_echo) and the content. */
static json_t *choice_text(const oai_gen *g, int with_echo) {
    kipp_buf t = {0};
    if (with_echo && g->echo.len) kipp_buf_put(&t, g->echo.data, g->echo.len);
    if (g->content.len) kipp_buf_put(&t, g->content.data, g->content.len);
    json_t *s = t.oom ? NULL : json_stringn(t.data ? t.data : "", t.len);
    kipp_buf_free(&t);
    return s ? s : json_string("");
}

static json_t *usage_json(const oai_meta *meta) {
    json_t *u = json_object(), *d = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(meta->n_prompt));
    json_object_set_new(u, "completion_tokens", json_integer(meta->n_completion));
    json_object_set_new(u, "total_tokens", json_integer((json_int_t)meta->n_prompt + meta->n_completion));
    json_object_set_new(d, "cached_tokens", json_integer(meta->n_cached));
    json_object_set_new(u, "prompt_tokens_details", d);
    if (meta->spec_drafted) { /* OpenAI's names for predicted tokens kept and rejected */
        json_t *c = json_object();
        json_object_set_new(c, "accepted_prediction_tokens", json_integer((json_int_t)meta->spec_accepted));
        json_object_set_new(c, "rejected_prediction_tokens",
                            json_integer((json_int_t)(meta->spec_drafted - meta->spec_accepted)));
        json_object_set_new(u, "completion_tokens_details", c);
    }
    return u;
}

static json_t *envelope(const oai_meta *meta, const char *object) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(meta->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(meta->created));
    json_object_set_new(o, "model", json_string(meta->model));
    json_object_set_new(o, "system_fingerprint", json_string("kipp"));
    return o;
}

static char *dump(json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static json_t *finish_json(const oai_meta *meta) {
    return meta->finish_reason ? json_string(meta->finish_reason) : json_null();
}

/* Takes a buffer's text as a JSON string (NULL when empty and omit_empty) and empties it. */
static json_t *take(kipp_buf *b, int omit_empty) {
    if (b->len == 0 && omit_empty) return NULL;
    json_t *s = json_stringn(b->data ? b->data : "", b->len);
    b->len = 0;
    return s ? s : json_string("");
}

char *oai_chunk_json(oai_gen *g, const oai_meta *meta, const kipp_req *req, uint32_t tok0,
                     uint32_t tok1, int first) {
    const int chat = g->rq->ep == OAI_CHAT;
    json_t *o = envelope(meta, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = json_object();
    json_object_set_new(choice, "index", json_integer(g->index));
    if (chat) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        json_t *r = take(&g->reasoning, 1), *c = take(&g->content, !first);
        if (r) json_object_set_new(delta, "reasoning_content", r);
        if (c) json_object_set_new(delta, "content", c);
        json_object_set_new(choice, "delta", delta);
    }
    /* echo: the first chunk carries the prompt's text and entries (OpenAI's order) */
    const int echo = !chat && g->n_echo && !g->echo_sent;
    if (!chat) {
        json_object_set_new(choice, "text", choice_text(g, echo));
        g->content.len = 0;
        g->echo_sent = 1;
    }
    const uint32_t e0 = echo ? 0 : g->n_echo + tok0;
    json_object_set_new(choice, "logprobs",
                        g->rq->logprobs && g->n_echo + tok1 > e0
                            ? (chat ? chat_logprobs(g->m, req, tok0, tok1)
                                    : completion_logprobs(g, req, e0, g->n_echo + tok1))
                            : json_null());
    json_object_set_new(choice, "finish_reason", finish_json(meta));
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    return dump(o);
}

/* The longest prefix of s[0..n) that does not end inside a UTF-8 character: a streamed
 * piece must be a valid JSON string (the rest follows in the next piece). */
static size_t utf8_whole(const char *s, size_t n) {
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, back++;
    if (i == 0) return n;
    const unsigned char lead = (unsigned char)s[i - 1];
    const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return back + 1 >= need ? n : i - 1;
}

static json_t *string_or_empty(const char *s, size_t n) {
    json_t *v = json_stringn(s ? s : "", n);
    return v ? v : json_string("");
}

char *oai_tool_chunk_json(oai_gen *g, const oai_meta *meta) {
    oai_call *c = NULL;
    size_t n_args = 0;
    for (uint32_t i = 0; i < g->n_calls && !c; i++) {
        oai_call *k = &g->calls[i];
        n_args = k->args_sent + utf8_whole(k->args.data + k->args_sent, k->args.len - k->args_sent);
        if (!k->head_sent || n_args > k->args_sent) c = k;
    }
    if (!c) return NULL;
    json_t *tc = json_object(), *fn = json_object();
    json_object_set_new(tc, "index", json_integer(c - g->calls));
    if (!c->head_sent) { /* OpenAI's first delta of a call: id and name, no arguments yet */
        json_object_set_new(tc, "id", json_string(c->id));
        json_object_set_new(tc, "type", json_string("function"));
        json_object_set_new(fn, "name", string_or_empty(c->name.data, c->name.len));
        json_object_set_new(fn, "arguments", json_string(""));
        c->head_sent = 1;
    } else {
        json_object_set_new(fn, "arguments", string_or_empty(c->args.data + c->args_sent, n_args - c->args_sent));
        c->args_sent = n_args;
    }
    json_object_set_new(tc, "function", fn);
    json_t *calls = json_array(), *delta = json_object(), *choice = json_object();
    json_array_append_new(calls, tc);
    json_object_set_new(delta, "tool_calls", calls);
    json_object_set_new(choice, "index", json_integer(g->index));
    json_object_set_new(choice, "delta", delta);
    json_object_set_new(choice, "logprobs", json_null());
    json_object_set_new(choice, "finish_reason", json_null());
    json_t *choices = json_array(), *o = envelope(meta, "chat.completion.chunk");
    json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    return dump(o);
}

/* message.tool_calls of the whole response: every call, arguments as a JSON string */
static json_t *tool_calls_json(const oai_gen *g) {
    json_t *a = json_array();
    for (uint32_t i = 0; i < g->n_calls; i++) {
        const oai_call *c = &g->calls[i];
        json_t *tc = json_object(), *fn = json_object();
        json_object_set_new(tc, "id", json_string(c->id));
        json_object_set_new(tc, "type", json_string("function"));
        json_object_set_new(fn, "name", string_or_empty(c->name.data, c->name.len));
        json_object_set_new(fn, "arguments", string_or_empty(c->args.data, c->args.len));
        json_object_set_new(tc, "function", fn);
        json_array_append_new(a, tc);
    }
    return a;
}

char *oai_usage_chunk_json(const oai_gen *g, const oai_meta *meta) {
    json_t *o = envelope(meta, g->rq->ep == OAI_CHAT ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage_json(meta));
    return dump(o);
}

/* ---- the whole response, piece by piece ---------------------------------------------- */

/* A buffer's text as a JSON string without emptying it (NULL when empty and omit_empty):
 * the body is serialized twice when it is large (once to count its length). */
static json_t *peek(const kipp_buf *b, int omit_empty) {
    if (b->len == 0 && omit_empty) return NULL;
    json_t *s = json_stringn(b->data ? b->data : "", b->len);
    return s ? s : json_string("");
}

/* Appends o's compact JSON (any value) and frees o; without its last byte when strip. */
static void put_json(kipp_buf *out, json_t *o, int strip) {
    char *t = o ? json_dumps(o, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(o);
    if (!t) { out->oom = 1; return; }
    const size_t n = strlen(t);
    kipp_buf_put(out, t, strip && n ? n - 1 : n);
    free(t);
}

void oai_body_init(oai_body *b, oai_gen *const *gs, kipp_req *const *reqs,
                   const char *const *finish, uint32_t n, const oai_meta *meta) {
    *b = (oai_body){.gs = gs, .reqs = reqs, .finish = finish, .n = n, .meta = meta};
}

#define BODY_SLICE 32 /* logprobs entries per piece */

int oai_body_next(oai_body *b, kipp_buf *out) {
    if (b->phase == 3) return 0;
    const int chat = b->gs[0]->rq->ep == OAI_CHAT;
    if (b->phase == 0) { /* the envelope, up to the choices */
        put_json(out, envelope(b->meta, chat ? "chat.completion" : "text_completion"), 1);
        kipp_buf_puts(out, ",\"choices\":[");
        b->phase = 1, b->ch = 0, b->tok = 0, b->part = -1;
        return out->oom ? -1 : 1;
    }
    if (b->phase == 1 && b->ch == b->n) { /* the usage, and the end */
        kipp_buf_puts(out, "],\"usage\":");
        put_json(out, usage_json(b->meta), 0);
        kipp_buf_puts(out, "}");
        b->phase = 3;
        return out->oom ? -1 : 1;
    }
    const oai_gen *g = b->gs[b->ch];
    const kipp_req *req = b->reqs[b->ch];
    if (b->part < 0) { /* a choice's head: index and text, up to its logprobs */
        json_t *choice = json_object();
        json_object_set_new(choice, "index", json_integer(g->index));
        if (chat) {
            json_t *msg = json_object();
            json_object_set_new(msg, "role", json_string("assistant"));
            /* OpenAI: content is null when the reply is only tool calls */
            json_t *content = peek(&g->content, g->n_calls > 0);
            json_object_set_new(msg, "content", content ? content : json_null());
            json_t *r = peek(&g->reasoning, 1);
            json_object_set_new(msg, "reasoning_content", r ? r : json_null());
            if (g->n_calls) json_object_set_new(msg, "tool_calls", tool_calls_json(g));
            json_object_set_new(choice, "message", msg);
        } else {
            json_object_set_new(choice, "text", choice_text(g, 1));
        }
        put_json(out, choice, 1);
        kipp_buf_puts(out, ",\"logprobs\":");
        if (g->rq->logprobs) {
            kipp_buf_puts(out, chat ? "{\"content\":[" : "{\"tokens\":[");
            b->part = 0, b->tok = 0;
            return out->oom ? -1 : 1;
        }
        kipp_buf_puts(out, "null");
        b->part = 4; /* straight to the tail */
    }
    if (b->part < 4) { /* a slice of the logprobs */
        const uint32_t n_lp = g->n_echo + g->n_used;
        const uint32_t t1 = b->tok + BODY_SLICE < n_lp ? b->tok + BODY_SLICE : n_lp;
        for (uint32_t i = b->tok; i < t1; i++) {
            if (i) kipp_buf_puts(out, ",");
            put_json(out, lp_entry(g, req, i, chat, b->part), 0);
        }
        b->tok = t1;
        if (t1 == n_lp) {
            b->part = chat ? 4 : b->part + 1;
            b->tok = 0;
            if (b->part < 4) kipp_buf_printf(out, "],\"%s\":[", lp_parts[b->part]);
            else kipp_buf_puts(out, "]}");
        }
        if (b->part < 4) return out->oom ? -1 : 1;
    }
    /* the choice's tail */
    kipp_buf_puts(out, ",\"finish_reason\":");
    put_json(out, b->finish[b->ch] ? json_string(b->finish[b->ch]) : json_null(), 0);
    kipp_buf_puts(out, b->ch + 1 < b->n ? "}," : "}");
    b->ch++, b->part = -1;
    return out->oom ? -1 : 1;
}

char *oai_response_json(oai_gen *const *gs, kipp_req *const *reqs, const char *const *finish,
                        uint32_t n, const oai_meta *meta) {
    oai_body b;
    kipp_buf out = {0};
    oai_body_init(&b, gs, reqs, finish, n, meta);
    int more;
    while ((more = oai_body_next(&b, &out)) > 0) {}
    if (more < 0) {
        kipp_buf_free(&out);
        return NULL;
    }
    return kipp_buf_take(&out, NULL);
}

char *oai_error_json(const char *message, const char *type, const char *param, const char *code) {
    json_t *e = json_object(), *o = json_object();
    json_t *m = json_string(message);
    json_object_set_new(e, "message", m ? m : json_string("(the message was not valid UTF-8)"));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", param ? json_string(param) : json_null());
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    json_object_set_new(o, "error", e);
    return dump(o);
}

char *oai_models_json(const char *name, const char *const *aliases, size_t n_aliases) {
    json_t *data = json_array(), *o = json_object();
    for (size_t i = 0; i <= n_aliases; i++) {
        const char *id = i == 0 ? name : aliases[i - 1];
        if (strcmp(id, "*") == 0) continue;
        json_t *m = json_object();
        json_object_set_new(m, "id", json_string(id));
        json_object_set_new(m, "object", json_string("model"));
        json_object_set_new(m, "created", json_integer(0));
        json_object_set_new(m, "owned_by", json_string("kipp"));
        json_array_append_new(data, m);
    }
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", data);
    return dump(o);
}
