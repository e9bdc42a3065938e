/* pyjson.c — json.dumps-compatible writer for jansson values (see pyjson.h). The float
 * repr reproduces CPython's float_repr_style 'short': the shortest digit string that reads back to the same double (ties: the one nearest
 * the value), printed positionally when the decimal exponent is in [-4, 16) and as
 * d.ddde+XX otherwise. Not here: parsing, Python's big integers, indent/sort options. */
#include "tok/pyjson.h"

#include "core/error.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- float repr ------------------------------------------------------------------------- */

/* Does the decimal m * 10^e10 read back (correctly rounded, as strtod does) as x? */
static int reads_back(uint64_t m, int e10, double x) {
    char s[48];
    snprintf(s, sizeof s, "%llue%d", (unsigned long long)m, e10);
    return strtod(s, NULL) == x;
}

/* Shortest round-tripping decimal of finite x > 0: digits as an integer m with n_digits
 * digits (no trailing zeros) and decpt, so that x ~ 0.DIGITS * 10^decpt. */
static void shortest_digits(double x, uint64_t *m_out, int *decpt_out) {
    for (int p = 1; p <= 17; p++) {
        char s[40];
        snprintf(s, sizeof s, "%.*e", p - 1, x); /* correctly rounded: d.ddd e[+-]XX */
        uint64_t m = 0;
        const char *c = s;
        for (; *c && *c != 'e'; c++)
            if (*c >= '0' && *c <= '9') m = m * 10 + (uint64_t)(*c - '0');
        int e10 = atoi(c + 1) - (p - 1); /* x ~ m * 10^e10 */
        uint64_t cand[3] = {m, m + 1, m - 1};
        /* The nearest p-digit decimal is the best candidate; when it misses, a neighbour can
         * still fall inside x's rounding interval, which is lopsided at powers of two. */
        for (int k = 0; k < 3; k++) {
            if (cand[k] == 0 || !reads_back(cand[k], e10, x)) continue;
            m = cand[k];
            int e = e10;
            while (m % 10 == 0) {
                m /= 10;
                e++;
            }
            int nd = 0;
            for (uint64_t t = m; t; t /= 10) nd++;
            *m_out = m;
            *decpt_out = nd + e;
            return;
        }
    }
    /* unreachable: 17 significant digits always round-trip a double */
    *m_out = 0;
    *decpt_out = 1;
}

size_t kipp_pyjson_float_repr(double x, char out[32]) {
    if (isnan(x)) return (size_t)snprintf(out, 32, "NaN");
    if (isinf(x)) return (size_t)snprintf(out, 32, "%s", x > 0 ? "Infinity" : "-Infinity");
    if (x == 0) return (size_t)snprintf(out, 32, "%s", signbit(x) ? "-0.0" : "0.0");
    size_t n = 0;
    if (x < 0) {
        out[n++] = '-';
        x = -x;
    }
    uint64_t m;
    int decpt;
    shortest_digits(x, &m, &decpt);
    char d[24];
    int nd = snprintf(d, sizeof d, "%llu", (unsigned long long)m);
    if (decpt > -4 && decpt <= 16) { /* CPython: exponent form when decpt <= -4 or > 16 */
        if (decpt <= 0) {
            out[n++] = '0';
            out[n++] = '.';
            for (int i = 0; i < -decpt; i++) out[n++] = '0';
            memcpy(out + n, d, (size_t)nd);
            n += (size_t)nd;
        } else if (decpt >= nd) {
            memcpy(out + n, d, (size_t)nd);
            n += (size_t)nd;
            for (int i = nd; i < decpt; i++) out[n++] = '0';
            out[n++] = '.';
            out[n++] = '0';
        } else {
            memcpy(out + n, d, (size_t)decpt);
            n += (size_t)decpt;
            out[n++] = '.';
            memcpy(out + n, d + decpt, (size_t)(nd - decpt));
            n += (size_t)(nd - decpt);
        }
    } else {
        out[n++] = d[0];
        if (nd > 1) {
            out[n++] = '.';
            memcpy(out + n, d + 1, (size_t)(nd - 1));
            n += (size_t)(nd - 1);
        }
        int e = decpt - 1;
        n += (size_t)snprintf(out + n, 32 - n, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    out[n] = '\0';
    return n;
}

/* ---- json.dumps ------------------------------------------------------------------------- */

/* Python's py_encode_basestring: escape '"', '\\' and bytes < 0x20 (short forms for
 * \b \f \n \r \t, else \u00xx in lower-case hex); everything else, UTF-8 included, raw. */
static void put_string(kipp_buf *b, const char *s, size_t n) {
    kipp_buf_put(b, "\"", 1);
    size_t run = 0; /* start of the pending raw run */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        kipp_buf_put(b, s + run, i - run);
        run = i + 1;
        char esc[8];
        switch (c) {
        case '"': kipp_buf_put(b, "\\\"", 2); break;
        case '\\': kipp_buf_put(b, "\\\\", 2); break;
        case '\b': kipp_buf_put(b, "\\b", 2); break;
        case '\f': kipp_buf_put(b, "\\f", 2); break;
        case '\n': kipp_buf_put(b, "\\n", 2); break;
        case '\r': kipp_buf_put(b, "\\r", 2); break;
        case '\t': kipp_buf_put(b, "\\t", 2); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", c);
            kipp_buf_put(b, esc, 6);
        }
    }
    kipp_buf_put(b, s + run, n - run);
    kipp_buf_put(b, "\"", 1);
}

static kipp_status dump(const json_t *v, kipp_buf *b, int depth, char *err, size_t err_len) {
    if (depth > KIPP_PYJSON_MAX_DEPTH)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "JSON value nested deeper than %d levels", KIPP_PYJSON_MAX_DEPTH);
    char num[32];
    switch (json_typeof(v)) {
    case JSON_NULL: kipp_buf_puts(b, "null"); break;
    case JSON_TRUE: kipp_buf_puts(b, "true"); break;
    case JSON_FALSE: kipp_buf_puts(b, "false"); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        kipp_buf_puts(b, num);
        break;
    case JSON_REAL: kipp_buf_put(b, num, kipp_pyjson_float_repr(json_real_value(v), num)); break;
    case JSON_STRING: put_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY:
        kipp_buf_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) kipp_buf_put(b, ", ", 2);
            kipp_status st = dump(json_array_get(v, i), b, depth + 1, err, err_len);
            if (st) return st;
        }
        kipp_buf_put(b, "]", 1);
        break;
    case JSON_OBJECT: {
        kipp_buf_put(b, "{", 1);
        int first = 1;
        /* jansson (>= 2.8) iterates objects in insertion order, as Python dicts do */
        for (void *it = json_object_iter((json_t *)v); it;
             it = json_object_iter_next((json_t *)v, it)) {
            if (!first) kipp_buf_put(b, ", ", 2);
            first = 0;
            put_string(b, json_object_iter_key(it), json_object_iter_key_len(it));
            kipp_buf_put(b, ": ", 2);
            kipp_status st = dump(json_object_iter_value(it), b, depth + 1, err, err_len);
            if (st) return st;
        }
        kipp_buf_put(b, "}", 1);
        break;
    }
    }
    return KIPP_OK;
}

kipp_status kipp_pyjson_dump(const json_t *v, kipp_buf *out, char *err, size_t err_len) {
    if (!v) return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "no JSON value to serialize");
    kipp_status st = dump(v, out, 0, err, err_len);
    if (st == KIPP_OK && out->oom)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory serializing JSON");
    return st;
}
