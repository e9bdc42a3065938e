/* buf.h — the one growable byte buffer (kipp_buf) and the one growable-array helper
 * (kipp_grow) of the tree; every module that builds text or bytes of unknown length uses
 * these. Growth doubles, and every size computation is checked for size_t overflow.
 * Not here: formatting beyond printf, JSON (pyjson.c, jansson), files (outfile.h).
 *
 * The failure convention, the same for every function here: a failure returns
 * KIPP_ERR_NOMEM (out of memory, or a size that would overflow size_t) and changes nothing
 * the caller already has. For kipp_buf the failure is also sticky: the first one sets
 * `oom`, and every later append does nothing and returns KIPP_ERR_NOMEM, so a writer may
 * ignore the returns of a run of appends and check `oom` (or kipp_buf_take's NULL) once
 * at the end. */
#ifndef KIPP_CORE_BUF_H
#define KIPP_CORE_BUF_H

#include "kipp.h"

#include <stddef.h>

/* Zero-initialize it ({0}). Once anything was appended (even zero bytes) data is not NULL
 * and data[len] == '\0', so the bytes are also a C string when they hold no NUL. */
typedef struct {
    char *data; /* [cap] malloc'd; owned by the buffer until kipp_buf_take */
    size_t len; /* bytes used, not counting the NUL after them */
    size_t cap; /* bytes allocated: cap >= len + 1 once data is not NULL */
    int oom;    /* sticky: a growth failed; appends are dropped from then on */
} kipp_buf;

/* Makes room for n more bytes (and the NUL after them) without appending: afterwards
 * data[len .. len + n] is writable. Fails when len + n + 1 would overflow size_t. */
kipp_status kipp_buf_reserve(kipp_buf *b, size_t n);

/* Appends n bytes (n == 0 still allocates, so that data is "" rather than NULL). The bytes,
 * and printf's arguments, may point into b itself. */
kipp_status kipp_buf_put(kipp_buf *b, const void *bytes, size_t n);
kipp_status kipp_buf_puts(kipp_buf *b, const char *s);
kipp_status kipp_buf_printf(kipp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The bytes as a C string: "" for a buffer nothing was appended to. Valid until the next
 * append, take or free. */
static inline const char *kipp_buf_str(const kipp_buf *b) { return b->data ? b->data : ""; }

/* Hands the NUL-terminated bytes to the caller (who frees them; "" for an empty buffer)
 * and leaves an empty buffer. After a failure returns NULL (and frees the buffer). len
 * may be NULL. */
char *kipp_buf_take(kipp_buf *b, size_t *len);

/* Frees the bytes and leaves an empty buffer (oom cleared); NULL is a no-op. */
void kipp_buf_free(kipp_buf *b);

/* Grows the array *p of elem-byte entries so that it holds at least need entries: *cap
 * doubles (from 16 when it is 0) until it is >= need, and *p is realloc'd. Nothing happens
 * when need <= *cap already. On failure (out of memory, or need * elem overflowing size_t)
 * *p and *cap are left as they were. */
kipp_status kipp_grow(void **p, size_t *cap, size_t need, size_t elem);

#endif
