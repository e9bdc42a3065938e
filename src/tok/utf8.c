/* utf8.c — see utf8.h. */
#include "tok/utf8.h"

/* Expected sequence length from a lead byte; 0 for a continuation or invalid byte. */
static size_t seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

size_t kipp_utf8_complete_prefix(const char *buf, size_t n) {
    /* Only the last 3 bytes can belong to an unfinished sequence: find the last lead byte. */
    size_t back = n < 4 ? n : 4;
    for (size_t i = 1; i <= back; i++) {
        unsigned char c = (unsigned char)buf[n - i];
        if ((c & 0xC0) == 0x80) continue; /* continuation byte: keep looking for its lead */
        size_t need = seq_len(c);
        if (need > i) {
            /* check that the bytes present are continuations; if not, it is already broken */
            for (size_t j = 1; j < i; j++)
                if (((unsigned char)buf[n - i + j] & 0xC0) != 0x80) return n;
            return n - i;
        }
        return n;
    }
    return n;
}
