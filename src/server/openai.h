/* openai.h — the OpenAI API mapping, independent of HTTP: parsing and validating a request
 * body into an oai_request (every rejection names the field), and turning a request's
 * generated tokens into text with stop strings, the Qwen3 reasoning split and its
 * <tool_call> split (tool_calls), as response objects or SSE chunks. Does not touch sockets (http.c) or the engine's threads. */
#ifndef KIPP_SERVER_OPENAI_H
#define KIPP_SERVER_OPENAI_H

#include "core/buf.h"
#include "engine/sched.h"
#include "kipp.h"
#include "tok/reasoning.h"
#include "tok/toolcall.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { OAI_CHAT = 0, OAI_COMPLETIONS = 1 } oai_endpoint;

#define OAI_MAX_STOP 16 /* OpenAI allows 4; more are an extension */
#define OAI_MAX_STOP_BYTES 256
#define OAI_MAX_LOGIT_BIAS 1024 /* logit_bias entries per request */
#define OAI_MAX_N 16            /* choices per request (OpenAI allows 128) */

typedef struct {
    oai_endpoint ep;
    char *model;
    int stream, include_usage;
    int64_t max_tokens;          /* -1: not given */
    int64_t max_reasoning_tokens; /* chat: tokens of reasoning before </think> is forced
                                     (-1: not given; the server's default applies) */
    uint32_t n;                  /* choices (1..OAI_MAX_N); choice i samples with seed + i */
    kipp_sampler_params sp;
    int n_stop;
    char *stop[OAI_MAX_STOP];
    int logprobs;                /* chat: bool; completions: logprobs given */
    uint32_t top_logprobs;
    int ignore_eos;
    int content_special;         /* "content_special_tokens": -1 not given (the server's
                                    default), 1 "parse", 0 "text" */
    int enable_thinking;         /* chat: chat_template_kwargs.enable_thinking (default 1) */
    int tool_parse;              /* chat: split <tool_call>s out of the reply into tool_calls
                                    (a non-empty 'tools' and tool_choice not "none") */
    int tool_choice_none;        /* chat: tool_choice "none": <tool_call> is banned
                                    (oai_apply_tool_choice) */
    char **tool_names;           /* chat: the tools' function names [n_tool_names]: a parsed
                                    call must name one of them */
    size_t n_tool_names;
    char param_buf[80];          /* a rejection's param when it names a part of a field
                                    (e.g. "tools[1].function"); *param points here */
    char *chat_body;             /* chat: JSON for kipp_chat_apply */
    size_t verbatim_bytes;       /* chat: bytes of the system and user messages' text, which
                                    the template copies whole: a floor on the rendered size */
    char *prompt_text;           /* completions: a string prompt, or */
    size_t prompt_len;
    int32_t *prompt_ids;         /* ... an array of token ids */
    size_t n_prompt_ids;
    int echo;                    /* completions: the prompt's text (and with logprobs its
                                    tokens' entries) before the completion's */
    kipp_logit_bias *bias;       /* logit_bias; sp.logit_bias points here */
    char *grammar;               /* constrained decoding (NULL: none): grammar text from
                                    response_format, "grammar" or a forced tool call */
    size_t grammar_len;
    const char *grammar_param;   /* the field it came from (for errors) */
    char unknown_field[64];      /* the first field outside the API and Kipp's extensions
                                    (ignored; the server logs each name once), or "" */
} oai_request;

/* The bias that bans a token. Not OpenAI's -100: a repetition penalty below 1 multiplies a
 * seen token's negative logit and could bring -100 back into reach; this stays far below
 * any logit, and finite (the sampler takes finite biases only). */
#define OAI_BAN_BIAS (-1e30f)

/* Parses body (len bytes, not necessarily NUL-terminated). On failure returns nonzero and
 * fills msg and *param (a static field name, or NULL when the body as a whole is at fault).
 * n_vocab bounds token-id prompts. free with oai_request_free (also after a failure). */
int oai_parse(const char *body, size_t len, oai_endpoint ep, uint32_t n_vocab, oai_request *out,
              char *msg, size_t msg_len, const char **param);
/* oai_parse, calling done(done_arg) once the body has been read into a JSON tree (before any
 * field is looked at), so the caller can free the body's bytes: a large request then holds
 * its tree and the copies made from it, never the raw bytes as well. */
int oai_parse_freeing(const char *body, size_t len, oai_endpoint ep, uint32_t n_vocab, oai_request *out,
                      char *msg, size_t msg_len, const char **param, void (*done)(void *), void *done_arg);
/* The same on a parsed JSON tree (borrowed): the path the other protocols take once their
 * adapter has turned their request into an OpenAI one (src/server/api.h). */
struct json_t;
int oai_parse_tree(struct json_t *o, oai_endpoint ep, uint32_t n_vocab, oai_request *out, char *msg,
                   size_t msg_len, const char **param);
void oai_request_free(oai_request *r);

/* ---- the parser's internals, shared by openai_req.c and openai_chat.c ------------------- */
struct json_t;
/* A rejection being written: msg gets the sentence, *param the field at fault (a static
 * name, or r->param_buf for a part of one). oai_refusev formats it and returns -1. */
typedef struct {
    char *msg;
    size_t msg_len;
    const char **param;
} oai_perr;
int oai_refusev(oai_perr *e, const char *param, const char *fmt, va_list ap);
/* A chat request as clients send it (o, borrowed) normalized for the rest of the parser:
 * *out is a new shallow copy of o whose messages have string content (text parts joined
 * with "\n", an assistant's refusal as its text), "developer" turned "system",
 * chat_template_kwargs.enable_thinking set from reasoning_effort (off: r->max_reasoning_tokens
 * 0 too; call after it is parsed), and a tool_choice
 * {"type": "allowed_tools"} turned into its mode with only those tools (openai_chat.c).
 * A field outside the API found inside a message goes to r->unknown_field. */
int oai_chat_normalize(struct json_t *o, oai_request *r, struct json_t **out, oai_perr *e);
/* Bans token id through r's logit_bias (an entry the client gave for it is overridden: the
 * sampler adds up repeated ids). 0 ok, -1 out of memory. */
int oai_request_ban_token(oai_request *r, int32_t id);
/* What tool_choice needs from the model: for "none", bans the <tool_call> token (when the
 * vocabulary has it as one token). Call after oai_parse, before the sampling parameters
 * are used. 0 ok, -1 out of memory. */
int oai_apply_tool_choice(oai_request *r, const kipp_model *m);

/* ---- turning tokens into a response --------------------------------------------------- */

/* A tool call split out of the reply (rq->tool_parse). */
typedef struct {
    char id[24];      /* "call_" and 16 hex digits, unique per call */
    kipp_buf name, args;
    size_t args_sent; /* streaming: bytes of args already sent in a chunk */
    int head_sent;    /* streaming: the delta with the id and the name was sent */
} oai_call;

typedef struct {
    const kipp_model *m;
    const oai_request *rq;
    kipp_detokenizer *dt;
    kipp_reasoning rs;
    kipp_buf held;               /* text held back: it may start a stop string */
    kipp_buf content, reasoning; /* text decided since the caller last took it */
    uint32_t index;             /* the choice's index (n > 1) */
    kipp_toolcall tc;           /* the content's <tool_call> split (rq->tool_parse) */
    oai_call *calls;            /* [n_calls] in order; kept to the end (the final response
                                   carries them all) */
    uint32_t n_calls, cap_calls;
    uint64_t call_seed;         /* random: the calls' ids */
    int stopped;                /* a stop string matched: ignore later tokens */
    int stop_index;             /* which one (rq->stop[stop_index]); -1 while none did */
    uint32_t n_used;            /* tokens that count (up to and including the stop) */
    uint32_t *text_offset;      /* [n_used] characters (code points) of text decoded before
                                   each token: the completions logprobs' text_offset */
    size_t text_offset_cap, n_chars;
    /* echo (completions): the prompt's text, decoded with its special tokens, and where each
     * of its n_echo tokens begins in it; the completion's offsets count from its end. The
     * logprobs entries are the prompt's n_echo (kipp_req_prompt_token), then n_used */
    kipp_buf echo;
    uint32_t *echo_offset, n_echo;
    int echo_sent;              /* streaming: the first chunk carried it */
    int oom;
} oai_gen;

int oai_gen_init(oai_gen *g, const kipp_model *m, const oai_request *rq);
void oai_gen_free(oai_gen *g);
/* Feeds one generated token. Returns 1 when a stop string just matched (cancel the
 * request), 0 otherwise. */
int oai_gen_push(oai_gen *g, const kipp_gen_token *t);
/* echo: decodes the prompt's n tokens into g->echo (call before any oai_gen_push).
 * 0 ok, -1 out of memory. */
int oai_gen_echo(oai_gen *g, const int32_t *ids, uint32_t n);
/* The request finished: flushes everything held. */
void oai_gen_finish(oai_gen *g);

/* JSON (malloc'd, compact) for the response pieces. finish: NULL while streaming. */
typedef struct {
    const char *id, *model;
    long long created;
    const char *finish_reason;       /* NULL: not finished */
    uint32_t n_prompt, n_completion, n_cached;
    uint64_t spec_drafted, spec_accepted; /* speculative decoding: drafted, kept (0, 0: off) */
    double queue_s, ttft_s;          /* submit to admission, submit to first token (-1: not yet) */
    double elapsed_s;                /* arrival of the request to now */
} oai_meta;

/* A streamed chunk with the text in g->content / g->reasoning (taken: the buffers are
 * emptied) and the logprobs of tokens [tok0, tok1) of req. first: the chat role delta. */
char *oai_chunk_json(oai_gen *g, const oai_meta *meta, const kipp_req *req, uint32_t tok0,
                     uint32_t tok1, int first);
char *oai_usage_chunk_json(const oai_gen *g, const oai_meta *meta);
/* The next streamed tool-call delta, or NULL when every call's id, name and arguments so
 * far were sent: for a new call {"index", "id", "type", "function": {"name", "arguments":
 * ""}}, then its new arguments as {"index", "function": {"arguments"}}. Call until NULL
 * after each oai_chunk_json. */
char *oai_tool_chunk_json(oai_gen *g, const oai_meta *meta);
/* The whole non-streamed response: choice i from gs[i] and reqs[i], with finish reason
 * finish[i]; meta's usage covers every choice. */
char *oai_response_json(oai_gen *const *gs, kipp_req *const *reqs, const char *const *finish,
                        uint32_t n, const oai_meta *meta);
/* The same response made piece by piece (bounded memory: a piece is the envelope, a
 * choice's head or tail, up to 32 tokens' logprobs, or the usage), so a large body need
 * never be whole in memory. Nothing is consumed: running it again from oai_body_init gives
 * the same bytes. The arrays must outlive the iterator. */
typedef struct {
    oai_gen *const *gs;
    kipp_req *const *reqs;
    const char *const *finish;
    uint32_t n;
    const oai_meta *meta;
    int phase, part; /* internal */
    uint32_t ch, tok;
} oai_body;
void oai_body_init(oai_body *b, oai_gen *const *gs, kipp_req *const *reqs,
                   const char *const *finish, uint32_t n, const oai_meta *meta);
/* Appends the next piece to out: 1 while pieces remain, 0 once the body is complete (and
 * nothing appended), -1 out of memory. */
int oai_body_next(oai_body *b, kipp_buf *out);
/* GET /v1/models: the served name, then each alias but "*". */
char *oai_models_json(const char *name, const char *const *aliases, size_t n_aliases);
/* {"error": {...}} */
char *oai_error_json(const char *message, const char *type, const char *param, const char *code);

#endif
