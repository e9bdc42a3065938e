/* test_tok_golden.c — kt_tok_golden(): the tokenizer against HF tokenizers' goldens in a
 * JSONL file (tests/tok/golden.jsonl from make_golden.py; the older ascii_golden.jsonl
 * format, {text, ids}, works too). Per encode line: ids with added-token parsing, ids
 * without (HF split_special_tokens), NFC against HF's normalizer, decode(encode(x)) ==
 * NFC(x) when x holds no added-token text, and streaming decode == whole decode. Per
 * decode line: whole and streaming decode against HF decode, with and without
 * skip_special_tokens. Each passing check counts one kt_passed. */
#include "gguf/gguf.h"
#include "kt.h"
#include "tok/detok.h"
#include "tok/unicode.h"
#include "tok/vocab.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *s = malloc(cap + 1);
    while (s) {
        len += fread(s + len, 1, cap - len, f);
        if (len < cap)
            break;
        char *p = realloc(s, 2 * cap + 1);
        if (!p) {
            free(s);
            s = NULL;
            break;
        }
        s = p;
        cap *= 2;
    }
    fclose(f);
    if (s)
        s[len] = 0;
    *n = len;
    return s;
}

/* Standard base64 (with padding) into a malloc'd buffer; NULL if malformed. */
static uint8_t *b64_decode(const char *s, size_t n, size_t *out_len) {
    uint8_t *out = malloc(n / 4 * 3 + 3);
    size_t m = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; out && i < n && s[i] != '='; i++) {
        const char *al = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const char *q = s[i] ? strchr(al, s[i]) : NULL;
        if (!q) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)(q - al);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[m++] = (uint8_t)(acc >> bits);
        }
    }
    *out_len = m;
    return out;
}

static int32_t *ids_of(json_t *arr, size_t *n) {
    *n = json_array_size(arr);
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    for (size_t i = 0; ids && i < *n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return ids;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "    %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static void print_text(const char *what, const char *s, size_t n) {
    json_t *j = json_stringn_nocheck(s, n);
    char *dump = json_dumps(j, JSON_ENCODE_ANY);
    fprintf(stderr, "    %s: %.300s\n", what, dump ? dump : "?");
    free(dump);
    json_decref(j);
}

typedef struct {
    const kipp_vocab *v;
    int line, mismatches;
} golden;

static void check(golden *g, int ok, const char *what) {
    if (ok) {
        kt_passed++;
        return;
    }
    if (g->mismatches++ < 8)
        fprintf(stderr, "  golden mismatch, line %d: %s\n", g->line, what);
}

/* One id per push, then flush: must equal the whole decode. */
static int stream_equals(const kipp_vocab *v, const int32_t *ids, size_t n, int skip,
                         const char *want, size_t want_len) {
    kipp_detok d;
    kipp_detok_init(&d, v, skip);
    size_t m = 0, cap = 3 * want_len + 64;
    char *buf = malloc(cap), tmp[4096];
    int ok = buf != NULL;
    for (size_t i = 0; ok && i <= n; i++) {
        size_t k = 0;
        kipp_status st = i < n ? kipp_detok_push(&d, ids[i], tmp, sizeof tmp, &k)
                               : kipp_detok_flush(&d, tmp, sizeof tmp, &k);
        ok = st == KIPP_OK && m + k <= cap;
        if (ok)
            memcpy(buf + m, tmp, k), m += k;
    }
    ok = ok && m == want_len && memcmp(buf, want, m) == 0;
    free(buf);
    return ok;
}

static int encodes_as(golden *g, const char *text, size_t len, int parse_special, json_t *jw,
                      int32_t **ids_out, size_t *n_out) {
    size_t n_want = 0, n = 0;
    int32_t *want = ids_of(jw, &n_want), *ids = NULL;
    char err[KIPP_ERR_LEN];
    int ok = want && kipp_vocab_encode(g->v, text, len, parse_special, &ids, &n, err,
                                       sizeof err) == KIPP_OK;
    ok = ok && n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok && g->mismatches < 8) {
        print_text("text", text, len);
        print_ids("want", want, n_want);
        print_ids("got", ids, ids ? n : 0);
    }
    check(g, ok, parse_special ? "ids" : "ids_nospecial");
    free(want);
    if (ids_out)
        *ids_out = ids, *n_out = n;
    else
        free(ids);
    return ok;
}

static void encode_line(golden *g, json_t *o, const char *text, size_t len) {
    int32_t *ids = NULL;
    size_t n = 0;
    encodes_as(g, text, len, 1, json_object_get(o, "ids"), &ids, &n);
    json_t *jns = json_object_get(o, "ids_nospecial");
    if (json_is_array(jns))
        encodes_as(g, text, len, 0, jns, NULL, NULL);

    /* NFC of the repaired text against HF's normalizer */
    uint8_t *fixed = malloc(3 * len + 1);
    size_t fn = fixed ? kipp_tok_utf8_repair((const uint8_t *)text, len, fixed) : 0;
    kipp_tok_nfc_buf nb = {0};
    const uint8_t *nfc = NULL;
    size_t nfc_len = 0;
    json_t *jn = json_object_get(o, "nfc");
    const char *want = jn ? json_string_value(jn) : (const char *)fixed;
    size_t want_len = jn ? json_string_length(jn) : fn;
    int ok = fixed && want && kipp_tok_nfc(fixed, fn, &nb, &nfc, &nfc_len);
    ok = ok && nfc_len == want_len && memcmp(nfc, want, want_len) == 0;
    if (!ok && g->mismatches < 8 && nfc) {
        print_text("want nfc", want ? want : "", want_len);
        print_text("got nfc", (const char *)nfc, nfc_len);
    }
    check(g, ok, "nfc");

    char *dec = NULL, *dec_skip = NULL, err[KIPP_ERR_LEN];
    size_t dn = 0, dsn = 0;
    ok = kipp_detok_decode(g->v, ids, n, 0, &dec, &dn, err, sizeof err) == KIPP_OK &&
         kipp_detok_decode(g->v, ids, n, 1, &dec_skip, &dsn, err, sizeof err) == KIPP_OK;
    int32_t id;
    size_t tl;
    if (ok && nfc && kipp_vocab_next_added(g->v, (const char *)fixed, fn, 0, 1, &id, &tl) == fn) {
        int rt = dn == nfc_len && memcmp(dec, nfc, dn) == 0;
        if (!rt && g->mismatches < 8)
            print_text("decode(encode(x))", dec, dn);
        check(g, rt, "decode(encode(x)) != NFC(x)");
    }
    check(g, ok && stream_equals(g->v, ids, n, 0, dec, dn) &&
                 stream_equals(g->v, ids, n, 1, dec_skip, dsn),
          "streaming decode != whole decode");
    free(dec);
    free(dec_skip);
    kipp_tok_nfc_buf_free(&nb);
    free(fixed);
    free(ids);
}

static void decode_line(golden *g, json_t *o) {
    size_t n;
    int32_t *ids = ids_of(json_object_get(o, "dec_ids"), &n);
    for (int skip = 0; skip < 2 && ids; skip++) {
        json_t *jt = json_object_get(o, skip ? "dec_text_skip" : "dec_text");
        const char *want = json_string_value(jt);
        size_t want_len = json_string_length(jt);
        char *dec = NULL, err[KIPP_ERR_LEN];
        size_t dn = 0;
        int ok = want && kipp_detok_decode(g->v, ids, n, skip, &dec, &dn, err, sizeof err) ==
                             KIPP_OK;
        ok = ok && dn == want_len && memcmp(dec, want, dn) == 0;
        if (!ok && g->mismatches < 8) {
            print_ids("ids", ids, n);
            print_text("want", want ? want : "", want_len);
            print_text("got", dec ? dec : "", dn);
        }
        check(g, ok, skip ? "decode (skip_special)" : "decode");
        check(g, want && stream_equals(g->v, ids, n, skip, want, want_len),
              skip ? "streaming decode (skip_special)" : "streaming decode");
        free(dec);
    }
    free(ids);
}

int kt_tok_golden(const char *gguf_path, const char *jsonl_path) {
    char err[KIPP_ERR_LEN];
    kipp_gguf *gg = NULL;
    kipp_vocab *v = NULL;
    if (kipp_gguf_open(gguf_path, &gg, err, sizeof err) != KIPP_OK ||
        kipp_vocab_load_gguf(gg, &v, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "golden: %s: %s\n", gguf_path, err);
        kipp_gguf_free(gg);
        return -1;
    }
    kipp_gguf_free(gg);
    size_t len;
    char *all = read_all(jsonl_path, &len);
    if (!all) {
        fprintf(stderr, "golden: cannot read %s\n", jsonl_path);
        kipp_vocab_free(v);
        return -1;
    }
    golden g = {v, 0, 0};
    int bad = 0, n_enc = 0, n_dec = 0;
    for (char *line = all, *eol; line < all + len; line = eol + 1) {
        eol = memchr(line, '\n', (size_t)(all + len - line));
        if (!eol)
            eol = all + len;
        g.line++;
        if (eol == line)
            continue;
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)(eol - line), JSON_ALLOW_NUL, &je);
        json_t *jt = json_object_get(o, "text"), *jb = json_object_get(o, "bytes_b64");
        if ((json_is_string(jt) || json_is_string(jb)) &&
            json_is_array(json_object_get(o, "ids"))) {
            size_t bl = 0;
            uint8_t *bytes = jb ? b64_decode(json_string_value(jb), json_string_length(jb), &bl)
                                : NULL;
            if (jb && !bytes) {
                fprintf(stderr, "golden: %s line %d: bad base64\n", jsonl_path, g.line);
                bad = 1;
            } else if (jb) {
                encode_line(&g, o, (const char *)bytes, bl);
            } else {
                encode_line(&g, o, json_string_value(jt), json_string_length(jt));
            }
            free(bytes);
            n_enc++;
        } else if (json_is_array(json_object_get(o, "dec_ids"))) {
            decode_line(&g, o);
            n_dec++;
        } else {
            fprintf(stderr, "golden: %s line %d: not an encode or decode case: %s\n",
                    jsonl_path, g.line, o ? "unknown keys" : je.text);
            bad = 1;
        }
        json_decref(o);
        if (bad)
            break;
    }
    free(all);
    kipp_vocab_free(v);
    if (bad)
        return -1;
    fprintf(stderr, "  golden: %d encode + %d decode lines, %d mismatches\n", n_enc, n_dec,
            g.mismatches);
    return g.mismatches;
}
