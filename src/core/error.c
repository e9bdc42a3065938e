/* error.c — status names and the error-buffer helper used by every module. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>

const char *kipp_status_str(kipp_status s) {
    switch (s) {
    case KIPP_OK: return "ok";
    case KIPP_ERR_IO: return "I/O error";
    case KIPP_ERR_FORMAT: return "format error";
    case KIPP_ERR_UNSUPPORTED: return "unsupported";
    case KIPP_ERR_NOMEM: return "out of memory";
    case KIPP_ERR_INVALID_ARG: return "invalid argument";
    case KIPP_ERR_BACKEND: return "backend error";
    case KIPP_ERR_CONTEXT_FULL: return "context full";
    case KIPP_ERR_NUMERIC: return "numeric error";
    case KIPP_ERR_KV_FULL: return "KV cache full";
    case KIPP_ERR_BUSY: return "busy";
    }
    return "unknown status";
}

kipp_status kipp_errf(char *err, size_t err_len, kipp_status st, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return st;
}
