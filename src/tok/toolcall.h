/* toolcall.h — splits a Qwen3 reply's content (after the <think> split of reasoning.h) into
 * plain content and tool calls written as <tool_call>\n{"name": ..., "arguments": ...}\n
 * </tool_call>, one-shot or streaming over arbitrarily split chunks (a tag may straddle
 * chunks). Not here: the OpenAI JSON around the calls (src/server), token ids (this works on
 * detokenized text), checking the arguments against the tools' schemas.
 *
 * The split, as defined by kipp_toolcall_parse (the reference):
 *  1. A call opens at "<tool_call>" and its body runs to the first "</tool_call>" (tags
 *     inside a body are not special), or to the end of the text when the generation was
 *     cut short: the end closes an open call.
 *  2. Announced calls. If the body starts (JSON whitespace allowed between the tokens) with
 *     {"name": <string>, "arguments": — the order and the literal keys Qwen3's template
 *     teaches — with a name that decodes to a non-empty string, the call is announced there
 *     and its arguments are the JSON value that follows, as the model wrote it:
 *       - an object or array: its text up to the bracket that closes it (strings and escapes
 *         respected); what follows it in the body is ignored. If the body ends first (cut
 *         short, or </tool_call> came early) the arguments are the text up to there, left
 *         unbalanced — an announced call is never withdrawn.
 *       - a string: its decoded value (OpenAI's arguments is a string; the model may have
 *         written one); "" if the string is not complete and valid JSON.
 *       - any other token (a number, true, null): its text if it is a valid JSON value,
 *         else "". Nothing after "arguments": gives "".
 *     The rest of the body need not be valid JSON.
 *  3. Other bodies (keys in another order, escapes in the key names, extra keys first) are
 *     parsed whole with jansson: a JSON object whose "name" is a non-empty string is a
 *     call; its arguments are the "arguments" value's own text (a string value decoded), or
 *     "{}" when it has none. Duplicate keys make the body invalid.
 *  4. An invalid body closed by </tool_call> is no call: the text <tool_call>body</tool_call>
 *     stays in the content verbatim, as if the tags were plain text. A body the end of the
 *     text cut short before it became a call is dropped (a reply cut off by max_tokens never
 *     shows half a call as content).
 *  5. Content is the text outside calls, except JSON whitespace (space, \t, \n, \r)
 *     directly before a call's <tool_call>, directly after its </tool_call> (between calls,
 *     and around them), and at the end of the text.
 * Calls are numbered from 0 in text order; only calls (rule 2 or 3) take a number.
 *
 * Streaming emits the same split as events: content bytes; a call's BEGIN with its name,
 * its ARGS pieces and its END. For every chunking of a text, the content pieces concatenate
 * to the one-shot content and each call's ARGS pieces to its one-shot arguments (the
 * invariant tests/unit/test_toolcall.c checks at every split point). An announced call's
 * BEGIN comes as soon as "arguments": is read, and an object or array is streamed as it
 * arrives, holding back only what may be part of "</tool_call>"; a string or other token is
 * sent whole at the call's end. A rule-3 call is sent whole (BEGIN, ARGS, END) at its end.
 * Held back meanwhile: a run of whitespace in content (until a byte shows whether it is
 * kept), a partial tag, and the body of a call not yet announced (it may turn out invalid
 * and become content). */
#ifndef KIPP_TOK_TOOLCALL_H
#define KIPP_TOK_TOOLCALL_H

#include "kipp.h"
#include "core/buf.h"

#include <stddef.h>
#include <stdint.h>

/* ---- one-shot reference ------------------------------------------------------------------ */

typedef struct {
    char *name; /* NUL-terminated, UTF-8 (decoded from JSON, so without NUL bytes) */
    size_t name_len;
    char *args; /* NUL-terminated; args_len bytes (a decoded string may hold NUL) */
    size_t args_len;
} kipp_toolcall_call;

typedef struct {
    char *content; /* NUL-terminated; content_len bytes */
    size_t content_len;
    kipp_toolcall_call *calls; /* [n_calls] */
    size_t n_calls;
} kipp_toolcall_result;

/* Splits text (len bytes) by the rules above into *out (owned by the caller: free with
 * kipp_toolcall_result_free, also after a failure). Fails only with KIPP_ERR_NOMEM. */
kipp_status kipp_toolcall_parse(const char *text, size_t len, kipp_toolcall_result *out,
                                char *err, size_t err_len);
void kipp_toolcall_result_free(kipp_toolcall_result *r); /* NULL is a no-op */

/* ---- streaming ------------------------------------------------------------------------------ */

typedef enum {
    KIPP_TOOLCALL_CONTENT = 0, /* bytes: the next plain content (index unused) */
    KIPP_TOOLCALL_BEGIN = 1,   /* call index begins; bytes: its whole name */
    KIPP_TOOLCALL_ARGS = 2,    /* bytes: the next piece of call index's arguments */
    KIPP_TOOLCALL_END = 3,     /* call index is complete (n = 0) */
} kipp_toolcall_event;

/* Receives one event. Calls come in order: BEGIN i, its ARGS (possibly none), END i, then
 * i + 1; CONTENT only outside BEGIN..END. CONTENT and ARGS have n > 0 and may split a UTF-8
 * character only where the fed chunks did. The bytes are valid during the call only. */
typedef void (*kipp_toolcall_emit_fn)(void *user, kipp_toolcall_event ev, uint32_t index,
                                      const char *bytes, size_t n);

/* Streaming state: the caller owns the struct (stack is fine) and frees it with
 * kipp_toolcall_free; fields are private (toolcall.c). */
typedef struct {
    int mode;               /* CONTENT, BODY or DONE (toolcall.c) */
    int lead_drop;          /* content's leading whitespace is dropped (right after a call) */
    kipp_buf ws;   /* content whitespace held back */
    char tag[16];           /* partial <tool_call> or </tool_call> held back */
    size_t n_tag;
    int body;               /* the call's sub-state (toolcall.c) */
    kipp_buf text; /* the body (not announced yet) or the arguments token held */
    size_t lit;             /* announced-prefix matcher: bytes of the current key read */
    size_t mark;            /* where the name's string token starts in text */
    int in_str, esc;        /* JSON lexing: inside a string, after a backslash */
    uint32_t depth;         /* brackets open in streamed arguments */
    uint32_t n_calls;       /* calls begun */
    int oom;
    kipp_toolcall_emit_fn emit;
    void *user;
    int out_ev;             /* pending output: CONTENT or ARGS */
    char out[256];
    size_t n_out;
} kipp_toolcall;

void kipp_toolcall_init(kipp_toolcall *t, kipp_toolcall_emit_fn emit, void *user);
void kipp_toolcall_free(kipp_toolcall *t); /* frees what the state holds; NULL is a no-op */

/* Feeds the next chunk; emits what is decided. KIPP_ERR_INVALID_ARG after finish;
 * KIPP_ERR_NOMEM when a held-back buffer cannot grow (the output is then incomplete). */
kipp_status kipp_toolcall_feed(kipp_toolcall *t, const char *text, size_t len, char *err,
                               size_t err_len);

/* End of the text: closes an open call (rule 1) and emits what was held, less trailing
 * whitespace. */
kipp_status kipp_toolcall_finish(kipp_toolcall *t, char *err, size_t err_len);

/* Calls begun so far. */
uint32_t kipp_toolcall_n_calls(const kipp_toolcall *t);

#endif
