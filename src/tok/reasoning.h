/* reasoning.h — splits a Qwen3 model's generated text into reasoning (between <think> and
 * </think>) and content, one-shot or streaming over arbitrarily split chunks (a tag may
 * straddle chunks). The streamed pieces concatenate to exactly the one-shot split.
 * Not here: tool-call parsing, token ids (this works on detokenized text).
 *
 * The split, as defined by kipp_reasoning_split (the reference):
 *  1. Leading '\n' bytes are skipped. If the text then starts with "<think>", that tag
 *     opens the reasoning. Otherwise the text starts in the mode's default part: content
 *     (KIPP_REASONING_OPEN_BY_TAG: hybrid Qwen3, and thinking disabled) or reasoning
 *     (KIPP_REASONING_OPEN_IN_PROMPT: templates such as Qwen3-Thinking-2507 that end the
 *     prompt with "<think>\n", so the model only writes the closing tag). In
 *     KIPP_REASONING_NONE (templates without reasoning: Qwen2.5) the whole text is content,
 *     tags and all: nothing is looked for.
 *  2. Reasoning runs to the first "</think>", which is dropped; everything after it is
 *     content, verbatim (later tags included). Without "</think>" (generation cut short)
 *     everything is reasoning. Content that did not follow reasoning never splits.
 *  3. Each part is stripped of leading and trailing '\n' (only '\n': spaces and '\r' stay),
 *     as Qwen's model card does (.strip("\n")) and as the chat template does when the turn
 *     is sent back (reasoning.strip('\n'), content.lstrip('\n')).
 * Streaming therefore holds back a run of '\n' until a non-'\n' byte shows it is interior
 * (or the end shows it is trailing), and a possible partial tag (at most 7 bytes) until it
 * completes or breaks. Nothing is allocated. */
#ifndef KIPP_TOK_REASONING_H
#define KIPP_TOK_REASONING_H

#include "kipp.h"

#include <stddef.h>

typedef enum {
    KIPP_REASONING_OPEN_BY_TAG = 0,    /* content unless the text opens with <think> */
    KIPP_REASONING_OPEN_IN_PROMPT = 1, /* reasoning from the start (<think> optional) */
    KIPP_REASONING_NONE = 2,           /* all content, <think> and </think> as plain text */
} kipp_reasoning_mode;

/* One-shot split. Both parts are slices of text (no copy): valid as long as text is. */
void kipp_reasoning_split(const char *text, size_t len, kipp_reasoning_mode mode,
                          const char **reasoning, size_t *reasoning_len, const char **content,
                          size_t *content_len);

/* Receives the next bytes of one part. Called only with n > 0; consecutive calls may carry
 * the same part. The bytes are valid during the call only. */
typedef void (*kipp_reasoning_emit_fn)(void *user, int is_reasoning, const char *bytes,
                                       size_t n);

/* Streaming state: a plain struct the caller owns (stack is fine); fields are private. */
typedef struct {
    int part;              /* START, REASONING, CONTENT, DONE (reasoning.c) */
    int fallback;          /* the part START turns into when "<think>" does not come */
    int started;           /* the current part has emitted a non-'\n' byte */
    size_t n_nl;           /* '\n' bytes held back */
    char tag[8];           /* bytes of a partial tag held back (after the '\n' run) */
    size_t n_tag;
    kipp_reasoning_emit_fn emit;
    void *user;
    char out[256];         /* pending output of one part, flushed to emit */
    size_t n_out;
    int out_reasoning;
} kipp_reasoning;

void kipp_reasoning_init(kipp_reasoning *r, kipp_reasoning_mode mode,
                         kipp_reasoning_emit_fn emit, void *user);

/* Feeds the next chunk; emits what is decided. KIPP_ERR_INVALID_ARG after finish. */
kipp_status kipp_reasoning_feed(kipp_reasoning *r, const char *text, size_t len, char *err,
                                size_t err_len);

/* End of the text: emits what was held (a broken partial tag; trailing '\n' are dropped). */
kipp_status kipp_reasoning_finish(kipp_reasoning *r, char *err, size_t err_len);

/* 1 while inside the reasoning part; before the first non-'\n' byte, 1 if the mode starts
 * in reasoning. */
int kipp_reasoning_in_reasoning(const kipp_reasoning *r);

#endif
