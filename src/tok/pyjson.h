/* pyjson.h — writes jansson values byte for byte as Python's json.dumps(x) does with the
 * arguments HF transformers' chat-template `tojson` filter passes (ensure_ascii=False,
 * indent=None, separators=None, sort_keys=False): ", " and ": " separators, keys in
 * insertion order, non-ASCII text raw, control characters as \uXXXX, floats as Python's
 * repr. Writes into the core growable buffer (core/buf.h).
 * Not here: parsing (jansson does that), indent/sort_keys/ensure_ascii variants, integers
 * beyond int64 (jansson rejects them when parsing, Python would print them). */
#ifndef KIPP_TOK_PYJSON_H
#define KIPP_TOK_PYJSON_H

#include "kipp.h"
#include "core/buf.h"

#include <jansson.h>
#include <stddef.h>

/* Python repr() of a double, e.g. "1.0", "0.1", "1e-05", "1e+16", "-0.0", "NaN",
 * "Infinity" (json.dumps spellings for the non-finite ones). Returns the length. */
size_t kipp_pyjson_float_repr(double x, char out[32]);

/* Appends json.dumps(v). Fails (KIPP_ERR_INVALID_ARG) only on nesting deeper than
 * KIPP_PYJSON_MAX_DEPTH, and with KIPP_ERR_NOMEM when the buffer could not grow. */
#define KIPP_PYJSON_MAX_DEPTH 512
kipp_status kipp_pyjson_dump(const json_t *v, kipp_buf *out, char *err, size_t err_len);

#endif
