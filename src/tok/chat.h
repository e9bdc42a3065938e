/* chat.h — renders an OpenAI-style conversation to the prompt text a Qwen model expects,
 * byte for byte what HF transformers' apply_chat_template(..., tokenize=False) produces with
 * the Qwen3 hybrid-thinking template, the Qwen3-2507 Instruct and Thinking templates or the
 * Qwen2.5 Instruct template. Design, supported templates and the places where Kipp is
 * stricter than HF: the header of chat.c. Tokenize the result with parse_special = 1.
 * Not here: a Jinja interpreter, multimodal content parts, tokenization, stop handling. */
#ifndef KIPP_TOK_CHAT_H
#define KIPP_TOK_CHAT_H

#include "gguf/gguf.h"
#include "kipp.h"

#include <jansson.h>
#include <stddef.h>

typedef enum {
    KIPP_CHAT_TEMPLATE_NONE = 0,   /* not a template: what a failed check leaves in *out */
    KIPP_CHAT_TEMPLATE_QWEN3 = 1,  /* Qwen3 hybrid thinking (0.6B-32B, April 2025) */
    KIPP_CHAT_TEMPLATE_CHATML = 2, /* plain ChatML: only for GGUFs that carry no template */
    KIPP_CHAT_TEMPLATE_QWEN3_INSTRUCT_2507 = 3, /* Qwen3-*-Instruct-2507: never thinks */
    KIPP_CHAT_TEMPLATE_QWEN3_THINKING_2507 = 4, /* Qwen3-*-Thinking-2507: always thinks */
    KIPP_CHAT_TEMPLATE_QWEN25_INSTRUCT = 5, /* Qwen2.5-*-Instruct: no reasoning at all */
} kipp_chat_template_kind;

/* "qwen3-hybrid", "qwen3-instruct-2507", "qwen3-thinking-2507", "qwen2.5-instruct", "chatml"
 * or "none". Static storage. */
const char *kipp_chat_template_name(kipp_chat_template_kind kind);

/* The Jinja text a kind stands for (NULL for CHATML and NONE): static storage. */
const char *kipp_chat_template_source(kipp_chat_template_kind kind, size_t *len);

/* What a template does with thinking for a request's enable_thinking (kipp.h's
 * kipp_chat_thinking, which says what each value means). The 2507 and Qwen2.5 templates
 * ignore enable_thinking, as HF does: Instruct-2507 is always OFF, Thinking-2507 always
 * IN_PROMPT, Qwen2.5 always NEVER. */
kipp_chat_thinking kipp_chat_template_thinking(kipp_chat_template_kind kind, int enable_thinking);

/* Picks the renderer for a template text. text == NULL means the model has no template
 * (-> CHATML). Any text other than a known one is KIPP_ERR_UNSUPPORTED, with the
 * template's first line, length and hash in err; *out is NONE then. */
kipp_status kipp_chat_template_check_text(const char *text, size_t len,
                                          kipp_chat_template_kind *out, char *err,
                                          size_t err_len);

/* The same on the GGUF key tokenizer.chat_template (absent -> CHATML; present but not a
 * string -> KIPP_ERR_FORMAT). */
kipp_status kipp_chat_template_check(const kipp_gguf *g, kipp_chat_template_kind *out,
                                     char *err, size_t err_len);

/* Renders messages (a JSON array of {role, content, reasoning_content?, tool_calls?}) with
 * tools (a JSON array of OpenAI tool schemas, or NULL / JSON null). enable_thinking = 0 is
 * the template's `enable_thinking=False` (an empty think block after the generation
 * prompt); 1 is the default. The 2507 and Qwen2.5 templates have no such switch and ignore
 * it. On success *out is a malloc'd NUL-terminated string the caller frees, *out_len its
 * length (the text may hold NUL bytes from JSON "\u0000").
 * Bad input: KIPP_ERR_INVALID_ARG naming the message index and field, e.g.
 * "messages[2].content: expected a string, got an array". */
kipp_status kipp_chat_render(kipp_chat_template_kind kind, const json_t *messages,
                             const json_t *tools, int add_generation_prompt,
                             int enable_thinking, char **out, size_t *out_len, char *err,
                             size_t err_len);

/* Convenience over a JSON request object such as an OpenAI chat-completions body:
 * {"messages": [...], "tools": [...]?, "add_generation_prompt": bool?,
 *  "enable_thinking": bool?, "chat_template_kwargs": {"enable_thinking": bool}?}.
 * Defaults: add_generation_prompt true, enable_thinking true; chat_template_kwargs wins
 * over the top-level key. Other keys (model, temperature, ...) are ignored. */
kipp_status kipp_chat_render_json(kipp_chat_template_kind kind, const char *request,
                                  size_t request_len, char **out, size_t *out_len, char *err,
                                  size_t err_len);
/* The same, plus the ranges of *out that came from the request's strings (see
 * kipp_chat_apply_spans). spans may be NULL. */
kipp_status kipp_chat_render_json_spans(kipp_chat_template_kind kind, const char *request,
                                        size_t request_len, char **out, size_t *out_len,
                                        size_t **spans, size_t *n_spans, char *err,
                                        size_t err_len);

#endif
