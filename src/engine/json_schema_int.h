/* json_schema_int.h — private to json_schema.c and json_schema_regex.c (which write grammar
 * text into a core kipp_buf, core/buf.h): UTF-8 and grammar-escape helpers, counted repetition, and
 * the regex (pattern keyword) translator. Not an API. */
#ifndef KIPP_ENGINE_JSON_SCHEMA_INT_H
#define KIPP_ENGINE_JSON_SCHEMA_INT_H

#include "core/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIPP_JS_MAX_COUNT 1000000 /* largest length or item count a schema may ask for */

/* Appends one item to a sequence, space-separated. */
static inline void seq_add(kipp_buf *b, const char *item) {
    if (!item[0]) return;
    if (b->len && b->data[b->len - 1] != ' ') kipp_buf_put(b, " ", 1);
    kipp_buf_puts(b, item);
}

/* The code point at s[*i] (jansson strings are valid UTF-8); advances *i. */
static inline uint32_t utf8_next(const char *s, size_t n, size_t *i) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[*i];
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (*i + (size_t)len > n) len = 1;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; k++) cp = cp << 6 | (u[*i + (size_t)k] & 0x3F);
    *i += (size_t)len;
    return cp;
}
static inline int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' :
           c >= 'a' && c <= 'f' ? c - 'a' + 10 :
           c >= 'A' && c <= 'F' ? c - 'A' + 10 :
                                  -1;
}
/* A code point inside a grammar literal ("...") or class ([...]); the grammar text stays ASCII. */
static inline void gram_cp(kipp_buf *b, uint32_t cp, int in_class) {
    if (cp == '"' || cp == '\\' || (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^'))) {
        char e[2] = {'\\', (char)cp};
        kipp_buf_put(b, e, 2);
    } else if (cp >= 0x20 && cp < 0x7F) {
        char c = (char)cp;
        kipp_buf_put(b, &c, 1);
    } else if (cp < 0x80) {
        kipp_buf_printf(b, "\\x%02X", (unsigned)cp);
    } else if (cp < 0x10000) {
        kipp_buf_printf(b, "\\u%04X", (unsigned)cp);
    } else {
        kipp_buf_printf(b, "\\U%08X", (unsigned)cp);
    }
}
/* The postfix for mn..mx repetitions (mx < 0: unbounded), both at most 1000. */
static inline void sb_suffix(kipp_buf *b, long mn, long mx) {
    if (mn == 1 && mx == 1) return;
    if (mn == 0 && mx == 1) kipp_buf_puts(b, "?");
    else if (mn == 0 && mx < 0) kipp_buf_puts(b, "*");
    else if (mn == 1 && mx < 0) kipp_buf_puts(b, "+");
    else if (mx < 0) kipp_buf_printf(b, "{%ld,}", mn);
    else if (mn == mx) kipp_buf_printf(b, "{%ld}", mn);
    else kipp_buf_printf(b, "{%ld,%ld}", mn, mx);
}

/* Appends item (one grammar item) repeated mn..mx times (mx < 0: unbounded), for any
 * 0 <= mn <= mx <= KIPP_JS_MAX_COUNT (json_schema_regex.c). */
void kipp_json_schema_repeat(kipp_buf *o, const char *item, long mn, long mx);

/* Appends the grammar sequence for the inside of a JSON string (quotes excluded) whose
 * decoded value matches the ECMA-262 regex pat[0..n) in JSON Schema's sense (a search:
 * unanchored ends allow any text, written with char_rule, the one-JSON-character rule).
 * Returns 0, or -1 with err saying what is not supported and at which offset. */
int kipp_json_schema_pattern(const char *pat, size_t n, const char *char_rule, kipp_buf *out, char *err,
                             size_t err_len);

#endif
