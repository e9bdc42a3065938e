/* error.h — filling caller-given error buffers, and overflow-checked size arithmetic.
 * Nothing here prints or exits. */
#ifndef KIPP_CORE_ERROR_H
#define KIPP_CORE_ERROR_H

#include "kipp.h"
#include <stddef.h>
#include <stdint.h>

/* printf-style: writes the message into err (if err is not NULL) and returns st. */
kipp_status kipp_errf(char *err, size_t err_len, kipp_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* a*b and a+b on size_t/uint64 with overflow detection: return 0 on overflow. */
static inline int kipp_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int kipp_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

#endif
