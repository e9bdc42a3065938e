/* toolcall.h — splits a Qwen3 reply's content (after the <think> split of reasoning.h) into
 * plain content and tool calls written as <tool_call>\n{"name": ..., "arguments": ...}\n
 * </tool_call>, one-shot or streaming over arbitrarily split chunks (a tag may straddle
 * chunks). Not here: the OpenAI JSON around the calls (src/server), token ids (this works on
 * detokenized text), checking the arguments against the tools' schemas.
 *
 * The split, as defined by kipp_toolcall_parse (the reference):
 *  1. A call opens at "<tool_call>" and its body runs to the first "</tool_call>" that is
 *     not inside a JSON string, or to the end of the text when the generation was cut
 *     short: the end closes an open call. Strings count when the body's first byte other
 *     than JSON whitespace is '{' (so it may be a call): from there '"' opens and closes a
 *     string, '\' inside one escapes the next byte. In a body that cannot be a call the
 *     first "</tool_call>" ends it. "<tool_call>" inside a body is not special.
 *  2. Calls in the template's order. If the body starts (JSON whitespace allowed between
 *     the tokens) with {"name": <string>, "arguments": — the order and the literal keys
 *     Qwen3's template teaches — with a name that decodes to a declared name (below), the
 *     arguments are the JSON value that follows:
 *       - an object: its text up to the bracket that closes it (strings and escapes
 *         respected, any kind of bracket counting), as the model wrote it, when that text
 *         is a valid JSON object; what follows it in the body is ignored;
 *       - a string: its decoded value, when that is the text of a valid JSON object (the
 *         model wrote OpenAI's arguments string itself).
 *     Anything else — a value that is not closed when the body ends (cut short, or
 *     "</tool_call>" came first), invalid JSON, an array, a number, null — makes the body
 *     no call: rule 2 decides for every body that starts with its prefix.
 *  3. Other bodies (keys in another order, escapes in the key names, extra keys first) are
 *     parsed whole with jansson: a JSON object (no duplicate keys) whose "name" is a
 *     declared name is a call when its "arguments" is an object (its own text), a string
 *     holding a JSON object (decoded) or absent ("{}"); otherwise it is no call.
 *     So every call's arguments are the text of a JSON object.
 *  4. Declared names: with a list of names (kipp_toolcall_set_names, or the parse's names)
 *     a name must be one of them, byte for byte; without one any non-empty string is a
 *     name. A call to an undeclared function is no call.
 *  5. A body that is no call and was closed by </tool_call> stays in the content verbatim,
 *     <tool_call>body</tool_call>, as if the tags were plain text. One that the end of the text
 *     cut short is dropped (a reply cut off by max_tokens never shows half a call as
 *     content, nor a call whose arguments are incomplete).
 *  6. Content is the text outside calls, except JSON whitespace (space, \t, \n, \r)
 *     directly before a call's <tool_call>, directly after its </tool_call> (between calls,
 *     and around them), and at the end of the text.
 * Calls are numbered from 0 in text order; only calls take a number.
 *
 * Streaming emits the same split as events: content bytes; a call's BEGIN with its name,
 * its ARGS and its END. For every chunking of a text, the content pieces concatenate to the
 * one-shot content and each call's ARGS pieces to its one-shot arguments (the invariant
 * tests/unit/test_toolcall.c checks at every split point). A call is emitted only once it
 * is certain, so it is never withdrawn: a rule-2 call whole (BEGIN, ARGS, END) as soon as
 * its arguments value closes and is valid, a rule-3 call whole at the end of its body.
 * Held back meanwhile: a run of whitespace in content (until a byte shows whether it is
 * kept), a partial tag, and the body of a call not yet decided (it may turn out no call
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
 * kipp_toolcall_result_free, also after a failure). names[0..n_names): the declared names
 * (rule 4; NULL: any name). Fails only with KIPP_ERR_NOMEM. */
kipp_status kipp_toolcall_parse(const char *text, size_t len, const char *const *names,
                                size_t n_names, kipp_toolcall_result *out, char *err,
                                size_t err_len);
void kipp_toolcall_result_free(kipp_toolcall_result *r); /* NULL is a no-op */

/* ---- streaming ------------------------------------------------------------------------------ */

typedef enum {
    KIPP_TOOLCALL_CONTENT = 0, /* bytes: the next plain content (index unused) */
    KIPP_TOOLCALL_BEGIN = 1,   /* call index begins; bytes: its whole name */
    KIPP_TOOLCALL_ARGS = 2,    /* bytes: the next piece of call index's arguments */
    KIPP_TOOLCALL_END = 3,     /* call index is complete (n = 0) */
} kipp_toolcall_event;

/* Receives one event. Calls come in order: BEGIN i, its ARGS (one event), END i, then
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
    kipp_buf text; /* the body so far (until its call is emitted) */
    size_t lit;             /* rule 2's prefix matcher: bytes of the current key read */
    size_t mark;            /* where the name's string token starts in text */
    int in_str, esc;        /* the body's JSON lexing (rule 1): inside a string, after a
                               backslash */
    int seen, json;         /* the body's first non-whitespace byte was seen; it was '{' */
    size_t args0;           /* where the arguments value starts in text */
    uint32_t depth;         /* brackets open in the arguments */
    const char *const *names; /* declared names (rule 4), NULL: any */
    size_t n_names;
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
/* The declared names (rule 4; NULL: any name), before the first feed. The array and its
 * strings are borrowed: they must outlive t. */
void kipp_toolcall_set_names(kipp_toolcall *t, const char *const *names, size_t n_names);

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
