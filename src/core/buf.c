/* buf.c — the growable byte buffer and array growth of buf.h. Capacities double from a
 * small first size; each doubling and each byte count is checked against SIZE_MAX before
 * it is used. Not here: shrinking (a buffer keeps its largest size until freed). */
#include "core/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_FIRST_CAP 256 /* bytes: most texts built here are a few hundred bytes */
#define GROW_FIRST_CAP 16 /* entries */

/* The smallest cap = first * 2^k >= need, or 0 when that would overflow max. */
static size_t doubled_cap(size_t cap, size_t first, size_t need, size_t max) {
    size_t c = cap ? cap : first;
    while (c < need) {
        if (c > max / 2) return need <= max ? need : 0;
        c *= 2;
    }
    return c;
}

kipp_status kipp_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return KIPP_OK;
    if (elem == 0) elem = 1;
    size_t c = doubled_cap(*cap, GROW_FIRST_CAP, need, SIZE_MAX / elem);
    if (!c) return KIPP_ERR_NOMEM;
    void *q = realloc(*p, c * elem);
    if (!q) return KIPP_ERR_NOMEM;
    *p = q;
    *cap = c;
    return KIPP_OK;
}

kipp_status kipp_buf_reserve(kipp_buf *b, size_t n) {
    if (b->oom) return KIPP_ERR_NOMEM;
    if (n >= SIZE_MAX - b->len) { /* len + n + 1 would overflow */
        b->oom = 1;
        return KIPP_ERR_NOMEM;
    }
    size_t need = b->len + n + 1;
    if (need <= b->cap) return KIPP_OK;
    size_t cap = doubled_cap(b->cap, BUF_FIRST_CAP, need, SIZE_MAX);
    char *q = cap ? realloc(b->data, cap) : NULL;
    if (!q) {
        b->oom = 1;
        return KIPP_ERR_NOMEM;
    }
    if (!b->data) q[0] = '\0';
    b->data = q;
    b->cap = cap;
    return KIPP_OK;
}

kipp_status kipp_buf_put(kipp_buf *b, const void *bytes, size_t n) {
    /* bytes may point into b itself: kept as an offset across the realloc */
    const char *src = bytes;
    const uintptr_t at = (uintptr_t)src, lo = (uintptr_t)b->data;
    const int inside = b->data && n && at >= lo && at - lo < b->cap;
    const size_t off = inside ? (size_t)(at - lo) : 0;
    kipp_status st = kipp_buf_reserve(b, n);
    if (st != KIPP_OK) return st;
    if (inside) src = b->data + off;
    if (n) memmove(b->data + b->len, src, n);
    b->len += n;
    b->data[b->len] = '\0';
    return KIPP_OK;
}

kipp_status kipp_buf_puts(kipp_buf *b, const char *s) { return kipp_buf_put(b, s, strlen(s)); }

kipp_status kipp_buf_printf(kipp_buf *b, const char *fmt, ...) {
    if (b->oom) return KIPP_ERR_NOMEM;
    /* formatted aside first, so that an argument may point into b itself */
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) { /* an encoding error: a failure like any other, sticky */
        b->oom = 1;
        return KIPP_ERR_NOMEM;
    }
    if ((size_t)k < sizeof tmp) return kipp_buf_put(b, tmp, (size_t)k);
    char *big = (size_t)k < SIZE_MAX ? malloc((size_t)k + 1) : NULL;
    if (!big) {
        b->oom = 1;
        return KIPP_ERR_NOMEM;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    kipp_status st = kipp_buf_put(b, big, (size_t)k);
    free(big);
    return st;
}

char *kipp_buf_take(kipp_buf *b, size_t *len) {
    if (!b->data) kipp_buf_put(b, "", 0); /* an empty result is "" not NULL */
    if (b->oom) {
        kipp_buf_free(b);
        if (len) *len = 0;
        return NULL;
    }
    char *p = b->data;
    if (len) *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

void kipp_buf_free(kipp_buf *b) {
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}
