/* pyjson.h — writes jansson values byte for byte as Python's json.dumps(x) does with the
 * arguments HF transformers' chat-template `tojson` filter passes (ensure_ascii=False,
 * indent=None, separators=None, sort_keys=False): ", " and ": " separators, keys in
 * insertion order, non-ASCII text raw, control characters as \uXXXX, floats as Python's
 * repr. Also the growable byte buffer the chat renderer writes into.
 * Not here: parsing (jansson does that), indent/sort_keys/ensure_ascii variants, integers
 * beyond int64 (jansson rejects them when parsing, Python would print them). */
#ifndef KIPP_TOK_PYJSON_H
#define KIPP_TOK_PYJSON_H

#include "kipp.h"

#include <jansson.h>
#include <stddef.h>

/* A growable byte buffer. Zero-initialize it ({0}); appends never fail loudly: the first
 * failed allocation sets `oom` and later appends do nothing, so a writer checks once at
 * the end. The bytes are always followed by a NUL once anything was appended. */
typedef struct {
    char *ptr;
    size_t len, cap;
    int oom;
    /* Optional: with track set, kipp_sbuf_mark records byte ranges [at, end) (pairs in
     * marks); the chat renderer marks the text that came from the request's strings. */
    int track;
    size_t *marks, n_marks, cap_marks;
} kipp_sbuf;

/* Records [from, b->len) as a marked range (nothing when !b->track or it is empty); an
 * allocation failure sets oom. */
void kipp_sbuf_mark(kipp_sbuf *b, size_t from);

void kipp_sbuf_put(kipp_sbuf *b, const void *bytes, size_t n);
void kipp_sbuf_puts(kipp_sbuf *b, const char *s);
void kipp_sbuf_free(kipp_sbuf *b); /* frees the bytes, leaves an empty buffer */
/* Hands the NUL-terminated bytes to the caller (who frees them) and empties the buffer.
 * NULL after an allocation failure (the buffer is freed then too). */
char *kipp_sbuf_take(kipp_sbuf *b, size_t *len);

/* Python repr() of a double, e.g. "1.0", "0.1", "1e-05", "1e+16", "-0.0", "NaN",
 * "Infinity" (json.dumps spellings for the non-finite ones). Returns the length. */
size_t kipp_pyjson_float_repr(double x, char out[32]);

/* Appends json.dumps(v). Fails (KIPP_ERR_INVALID_ARG) only on nesting deeper than
 * KIPP_PYJSON_MAX_DEPTH, and with KIPP_ERR_NOMEM when the buffer could not grow. */
#define KIPP_PYJSON_MAX_DEPTH 512
kipp_status kipp_pyjson_dump(const json_t *v, kipp_sbuf *out, char *err, size_t err_len);

#endif
