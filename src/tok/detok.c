/* detok.c — see detok.h. The streaming path walks the held-back bytes and the new token's
 * bytes as one virtual buffer with the same maximal-subpart rule as unicode.c's lossy
 * decoder; the whole-sequence path concatenates and repairs once. The unit tests check
 * that the two agree under every split. */
#include "tok/detok.h"

#include "core/error.h"
#include "tok/unicode.h"

#include <stdlib.h>
#include <string.h>

void kipp_detok_init(kipp_detok *d, const kipp_vocab *v, int skip_special) {
    memset(d, 0, sizeof *d);
    d->vocab = v;
    d->skip_special = skip_special;
}

static const char *piece_of(const kipp_detok *d, int32_t id, size_t *len) {
    const char *p = kipp_vocab_token_piece(d->vocab, id, d->skip_special, len);
    if (!p)
        *len = 0;
    return p;
}

size_t kipp_detok_bound(const kipp_detok *d, int32_t id) {
    size_t k;
    piece_of(d, id, &k);
    return 3 * (d->n_pending + k);
}

/* Byte i of pending ++ piece. */
static uint8_t at(const kipp_detok *d, const char *piece, size_t i) {
    return i < d->n_pending ? d->pending[i] : (uint8_t)piece[i - d->n_pending];
}

kipp_status kipp_detok_push(kipp_detok *d, int32_t id, char *out, size_t cap, size_t *n_out) {
    size_t k;
    const char *piece = piece_of(d, id, &k);
    size_t need = 3 * (d->n_pending + k);
    *n_out = 0;
    if (cap < need) {
        *n_out = need;
        return KIPP_ERR_INVALID_ARG;
    }
    if (k == 0)
        return KIPP_OK;
    size_t total = d->n_pending + k, m = 0, i = 0;
    while (i < total) {
        uint8_t b = at(d, piece, i);
        if (b < 0x80) {
            out[m++] = (char)b;
            i++;
            continue;
        }
        size_t len;
        uint8_t lo = 0x80, hi = 0xBF; /* the same table as kipp_tok_utf8_next */
        if (b >= 0xC2 && b <= 0xDF)
            len = 2;
        else if (b >= 0xE0 && b <= 0xEF)
            len = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
        else if (b >= 0xF0 && b <= 0xF4)
            len = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
        else { /* C0, C1, F5..FF or a stray continuation byte */
            memcpy(out + m, "\xEF\xBF\xBD", 3);
            m += 3;
            i++;
            continue;
        }
        size_t j = 1;
        while (j < len && i + j < total) {
            uint8_t c = at(d, piece, i + j);
            if (c < lo || c > hi)
                break;
            lo = 0x80, hi = 0xBF;
            j++;
        }
        if (j < len && i + j == total) { /* unfinished but so far well-formed: hold back */
            uint8_t keep[4];
            for (size_t q = 0; q < j; q++)
                keep[q] = at(d, piece, i + q);
            memcpy(d->pending, keep, j);
            d->n_pending = j;
            *n_out = m;
            return KIPP_OK;
        }
        if (j < len) { /* ill-formed: one U+FFFD for the maximal subpart */
            memcpy(out + m, "\xEF\xBF\xBD", 3);
            m += 3;
        } else {
            for (size_t q = 0; q < len; q++)
                out[m++] = (char)at(d, piece, i + q);
        }
        i += j;
    }
    d->n_pending = 0;
    *n_out = m;
    return KIPP_OK;
}

kipp_status kipp_detok_flush(kipp_detok *d, char *out, size_t cap, size_t *n_out) {
    *n_out = 0;
    if (!d->n_pending)
        return KIPP_OK;
    if (cap < 3) {
        *n_out = 3;
        return KIPP_ERR_INVALID_ARG;
    }
    memcpy(out, "\xEF\xBF\xBD", 3);
    *n_out = 3;
    d->n_pending = 0;
    return KIPP_OK;
}

kipp_status kipp_detok_decode(const kipp_vocab *v, const int32_t *ids, size_t n_ids,
                              int skip_special, char **out, size_t *out_len, char *err,
                              size_t err_len) {
    if (!out || !out_len)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "decode: out/out_len is NULL");
    *out = NULL;
    *out_len = 0;
    if (!v || (!ids && n_ids))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "decode: vocab or ids is NULL");
    size_t total = 0;
    for (size_t i = 0; i < n_ids; i++) {
        size_t k = 0;
        kipp_vocab_token_piece(v, ids[i], skip_special, &k);
        if (k > (SIZE_MAX - 1) / 3 - total)
            return kipp_errf(err, err_len, KIPP_ERR_NOMEM,
                             "decode: %zu ids decode to more bytes than memory holds", n_ids);
        total += k;
    }
    uint8_t *raw = malloc(total + 1), *text = malloc(3 * total + 1);
    if (!raw || !text) {
        free(raw);
        free(text);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "decode: out of memory for %zu ids",
                         n_ids);
    }
    size_t m = 0;
    for (size_t i = 0; i < n_ids; i++) {
        size_t k = 0;
        const char *p = kipp_vocab_token_piece(v, ids[i], skip_special, &k);
        if (k)
            memcpy(raw + m, p, k);
        m += k;
    }
    size_t n = kipp_tok_utf8_repair(raw, m, text);
    free(raw);
    text[n] = 0;
    *out = (char *)text;
    *out_len = n;
    return KIPP_OK;
}
