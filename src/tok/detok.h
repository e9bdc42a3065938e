/* detok.h — ids back to text, as HF tokenizers' decode(ids, skip_special_tokens) gives it:
 * each token contributes its bytes (kipp_vocab_token_piece: NORMAL tokens through the
 * inverse GPT-2 byte map, added tokens as their text, special ones dropped on request,
 * unknown ids ignored), and the byte stream becomes UTF-8 text with every ill-formed part
 * replaced by U+FFFD as String::from_utf8_lossy does (one per maximal subpart).
 * The streaming form never emits part of a character: bytes that may still be completed
 * by the next token are held back (at most 3), and flush settles them. Whatever the split
 * of the ids into pushes, the concatenated output equals kipp_detok_decode of all of them.
 * Not here: HF's cleanup_tokenization_spaces (false for Qwen), stop strings. */
#ifndef KIPP_TOK_DETOK_H
#define KIPP_TOK_DETOK_H

#include "kipp.h"
#include "tok/vocab.h"

#include <stddef.h>
#include <stdint.h>

/* Streaming state: a plain value, no allocation, nothing to free. */
typedef struct {
    const kipp_vocab *vocab; /* borrowed: must outlive the detokenizer */
    int skip_special;        /* drop HF-special tokens (<|im_end|> ...), like
                                skip_special_tokens=True; non-special added tokens such as
                                <think> are always kept */
    uint8_t pending[4];      /* a well-formed but unfinished UTF-8 prefix (<= 3 bytes) */
    size_t n_pending;
} kipp_detok;

void kipp_detok_init(kipp_detok *d, const kipp_vocab *v, int skip_special);

/* Most bytes kipp_detok_push(d, id, ...) can write now (every byte replaced: 3 each). */
size_t kipp_detok_bound(const kipp_detok *d, int32_t id);
#define KIPP_DETOK_FLUSH_MAX 3

/* Appends the text id completes to out[0..cap), *n_out bytes, always whole characters
 * (possibly none). If cap < kipp_detok_bound(d, id) nothing happens: the return value is
 * KIPP_ERR_INVALID_ARG and *n_out the size needed. */
kipp_status kipp_detok_push(kipp_detok *d, int32_t id, char *out, size_t cap, size_t *n_out);

/* End of the stream: held-back bytes become one U+FFFD (cap >= KIPP_DETOK_FLUSH_MAX).
 * The state is reset, ready for a new stream. */
kipp_status kipp_detok_flush(kipp_detok *d, char *out, size_t cap, size_t *n_out);

/* Whole-sequence decode: a malloc'd NUL-terminated string the caller frees (*out_len
 * excludes the NUL). Fails only when out of memory. */
kipp_status kipp_detok_decode(const kipp_vocab *v, const int32_t *ids, size_t n_ids,
                              int skip_special, char **out, size_t *out_len, char *err,
                              size_t err_len);

#endif
