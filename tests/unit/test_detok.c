/* test_detok.c — unit suite for the streaming detokenizer (src/tok/detok.c) on a small
 * in-memory vocab: byte fragments of multi-byte characters, ill-formed bytes, flush of an
 * unfinished sequence, special tokens skipped or kept, unknown ids, buffer sizing, and
 * streaming == whole decode over random id sequences. The same properties are checked on
 * the real Qwen3 vocab against HF in kt_tok_golden. */
#include "kt.h"
#include "tok/detok.h"
#include "tok/vocab.h"

#include <stdlib.h>
#include <string.h>


/* Ids 0..255: single bytes. Then: */
enum {
    T_ZH_HEAD = 256, /* E4 B8: two thirds of U+4E2D */
    T_ZH_TAIL,       /* AD */
    T_SMILE_HEAD,    /* F0 9F 99 */
    T_HELLO,         /* " hello" */
    T_IM_END,        /* <|im_end|> CONTROL */
    T_THINK,         /* <think> USER_DEFINED */
    T_PAD,           /* [PAD] UNUSED */
    N_DT
};

static kipp_vocab *detok_vocab(void) {
    static char bytes[256][2];
    static char extra[4][16];
    const char *tok[N_DT];
    size_t len[N_DT];
    int32_t type[N_DT];
    for (unsigned b = 0; b < 256; b++) {
        len[b] = kt_byte_token_text(b, bytes[b]);
        tok[b] = bytes[b];
        type[b] = KIPP_TOKEN_NORMAL;
    }
    static const uint8_t raw[4][7] = {{0xE4, 0xB8}, {0xAD}, {0xF0, 0x9F, 0x99},
                                      {' ', 'h', 'e', 'l', 'l', 'o'}};
    static const size_t raw_len[4] = {2, 1, 3, 6};
    for (int i = 0; i < 4; i++) {
        size_t m = 0;
        for (size_t k = 0; k < raw_len[i]; k++)
            m += kt_byte_token_text(raw[i][k], extra[i] + m);
        tok[256 + i] = extra[i];
        len[256 + i] = m;
        type[256 + i] = KIPP_TOKEN_NORMAL;
    }
    tok[T_IM_END] = "<|im_end|>", type[T_IM_END] = KIPP_TOKEN_CONTROL;
    tok[T_THINK] = "<think>", type[T_THINK] = KIPP_TOKEN_USER_DEFINED;
    tok[T_PAD] = "[PAD]", type[T_PAD] = KIPP_TOKEN_UNUSED;
    for (int i = T_IM_END; i < N_DT; i++)
        len[i] = strlen(tok[i]);
    kipp_vocab *v = NULL;
    char err[KIPP_ERR_LEN] = "";
    KT_CHECK(kipp_vocab_init(tok, len, type, N_DT, NULL, NULL, 0, &v, err, sizeof err) ==
                 KIPP_OK, "%s", err);
    return v;
}

/* Pushes ids one by one (then flushes if flush), comparing each push's output. */
static int stream_is(const kipp_vocab *v, int skip, const int32_t *ids, size_t n,
                     const char *const *want, int flush) {
    kipp_detok d;
    kipp_detok_init(&d, v, skip);
    char out[256];
    for (size_t i = 0; i <= n; i++) {
        size_t k = 0;
        if (i == n && !flush)
            break;
        kipp_status st = i < n ? kipp_detok_push(&d, ids[i], out, sizeof out, &k)
                               : kipp_detok_flush(&d, out, sizeof out, &k);
        if (st != KIPP_OK || k != strlen(want[i]) || memcmp(out, want[i], k) != 0) {
            fprintf(stderr, "  push %zu: status %d, %zu bytes, want '%s'\n", i, (int)st, k,
                    want[i]);
            return 0;
        }
    }
    return 1;
}
#define STREAM(v, skip, flush, ids, ...)                                                     \
    stream_is(v, skip, (const int32_t[])ids, sizeof((const int32_t[])ids) / sizeof(int32_t), \
              (const char *const[]){__VA_ARGS__}, flush)
#define IDS(...) {__VA_ARGS__}
#define FFFD "\xEF\xBF\xBD"

static void test_fragments(const kipp_vocab *v) {
    KT_CHECK(STREAM(v, 0, 1, IDS(0xE4, 0xB8, 0xAD), "", "", "\xE4\xB8\xAD", ""));
    KT_CHECK(STREAM(v, 0, 1, IDS(T_ZH_HEAD, T_ZH_TAIL, T_HELLO), "", "\xE4\xB8\xAD", " hello",
                    ""));
    KT_CHECK(STREAM(v, 0, 1, IDS(T_SMILE_HEAD, 0x82), "", "\xF0\x9F\x99\x82", ""));
    KT_CHECK(STREAM(v, 0, 1, IDS('a', T_SMILE_HEAD), "a", "", FFFD), "flush: one U+FFFD");
    KT_CHECK(STREAM(v, 0, 1, IDS(T_ZH_HEAD), "", FFFD));
    KT_CHECK(STREAM(v, 0, 1, IDS(0xFF, 'x'), FFFD, "x", ""), "ill-formed: replaced at once");
    KT_CHECK(STREAM(v, 0, 1, IDS(0xE2, 'A'), "", FFFD "A", ""), "cut short by the next byte");
    KT_CHECK(STREAM(v, 0, 1, IDS(T_ZH_HEAD, T_ZH_HEAD, T_ZH_TAIL), "", FFFD, "\xE4\xB8\xAD",
                    ""));
    KT_CHECK(STREAM(v, 0, 1, IDS(0xED, 0xA0, 0x80), "", FFFD FFFD, FFFD, ""), "surrogate");
    KT_CHECK(STREAM(v, 0, 1, IDS(0xF0, 0x9F), "", "", FFFD), "one U+FFFD for F0 9F");
    KT_CHECK(STREAM(v, 0, 1, IDS(0xC3, 0xA9, 0xC3), "", "\xC3\xA9", "", FFFD));
}

static void test_specials(const kipp_vocab *v) {
    /* skipped special tokens vanish, so the character around them reassembles (as HF) */
    KT_CHECK(STREAM(v, 1, 1, IDS(T_ZH_HEAD, T_IM_END, T_ZH_TAIL), "", "", "\xE4\xB8\xAD", ""));
    KT_CHECK(STREAM(v, 0, 1, IDS(T_ZH_HEAD, T_IM_END, T_ZH_TAIL), "", FFFD "<|im_end|>",
                    FFFD, ""));
    KT_CHECK(STREAM(v, 1, 1, IDS(T_THINK, 'x', T_IM_END), "<think>", "x", "", ""),
             "non-special added tokens are kept");
    KT_CHECK(STREAM(v, 0, 1, IDS(T_PAD, 'x', N_DT, -1, 100000), "", "x", "", "", "", ""),
             "filler and unknown ids are ignored");
    KT_CHECK(STREAM(v, 0, 1, IDS(0xE4, T_PAD, 0xB8, -5, 0xAD), "", "", "", "", "\xE4\xB8\xAD",
                    ""), "ignored ids keep the pending bytes");
}

static void test_api(const kipp_vocab *v) {
    kipp_detok d;
    kipp_detok_init(&d, v, 0);
    char out[64];
    size_t k = 99;
    KT_CHECK(kipp_detok_bound(&d, T_HELLO) == 18);
    KT_CHECK(kipp_detok_push(&d, T_HELLO, out, 17, &k) == KIPP_ERR_INVALID_ARG && k == 18);
    KT_CHECK(kipp_detok_push(&d, T_HELLO, out, 18, &k) == KIPP_OK && k == 6);
    KT_CHECK(kipp_detok_push(&d, T_ZH_HEAD, out, sizeof out, &k) == KIPP_OK && k == 0 &&
             d.n_pending == 2);
    KT_CHECK(kipp_detok_push(&d, T_ZH_TAIL, out, 3, &k) == KIPP_ERR_INVALID_ARG && k == 9 &&
             d.n_pending == 2, "too small: nothing changes");
    KT_CHECK(kipp_detok_flush(&d, out, 2, &k) == KIPP_ERR_INVALID_ARG && k == 3);
    KT_CHECK(kipp_detok_flush(&d, out, 3, &k) == KIPP_OK && k == 3 && d.n_pending == 0);
    KT_CHECK(kipp_detok_flush(&d, out, 0, &k) == KIPP_OK && k == 0, "nothing pending");
    KT_CHECK(kipp_detok_push(&d, 'z', out, sizeof out, &k) == KIPP_OK && k == 1 &&
             out[0] == 'z', "reusable after flush");

    char *s = NULL, err[KIPP_ERR_LEN];
    size_t n = 9;
    KT_CHECK(kipp_detok_decode(v, NULL, 0, 0, &s, &n, err, sizeof err) == KIPP_OK && s &&
             n == 0 && s[0] == 0);
    free(s);
    const int32_t ids[] = {T_HELLO, T_ZH_HEAD, T_IM_END, T_ZH_TAIL, T_THINK, 0xE2};
    KT_CHECK(kipp_detok_decode(v, ids, 6, 1, &s, &n, err, sizeof err) == KIPP_OK &&
             n == 6 + 3 + 7 + 3 && memcmp(s, " hello\xE4\xB8\xAD<think>" FFFD, n) == 0);
    free(s);
    KT_CHECK(kipp_detok_decode(v, ids, 6, 0, &s, &n, err, sizeof err) == KIPP_OK &&
             n == 6 + 3 + 10 + 3 + 7 + 3 &&
             memcmp(s, " hello" FFFD "<|im_end|>" FFFD "<think>" FFFD, n) == 0);
    free(s);
    KT_CHECK(kipp_detok_decode(v, NULL, 1, 0, &s, &n, err, sizeof err) ==
             KIPP_ERR_INVALID_ARG && s == NULL);
}

/* Random id sequences biased to byte fragments: streaming == whole decode. */
static void test_random(const kipp_vocab *v) {
    static const int32_t pool[] = {0xE4, 0xB8, 0xAD, 0xF0, 0x9F, 0x99, 0x82, 0xC3, 0xA9,
                                   0xED, 0xA0, 0x80, 0xFF, 0xC0, 'a', ' ', 0xE2, 0x82, 0xAC,
                                   0xF4, 0x90, 0x8F, T_ZH_HEAD, T_ZH_TAIL, T_SMILE_HEAD,
                                   T_HELLO, T_IM_END, T_THINK, T_PAD, N_DT, -1};
    uint32_t x = 2024;
    int bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
        int32_t ids[24];
        x = x * 1664525u + 1013904223u;
        size_t n = (x >> 24) % 24;
        for (size_t i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            ids[i] = pool[(x >> 16) % (sizeof pool / sizeof *pool)];
        }
        for (int skip = 0; skip < 2; skip++) {
            char *whole = NULL, err[KIPP_ERR_LEN], got[1024];
            size_t wn = 0, m = 0, k;
            kipp_detok_decode(v, ids, n, skip, &whole, &wn, err, sizeof err);
            kipp_detok d;
            kipp_detok_init(&d, v, skip);
            for (size_t i = 0; i < n; i++) {
                kipp_detok_push(&d, ids[i], got + m, sizeof got - m, &k);
                m += k;
            }
            kipp_detok_flush(&d, got + m, sizeof got - m, &k);
            m += k;
            bad += !whole || m != wn || memcmp(got, whole, m) != 0;
            free(whole);
        }
    }
    KT_CHECK(bad == 0, "%d random sequences stream differently", bad);
}

void kt_suite_detok(void) {
    kipp_vocab *v = detok_vocab();
    if (!v)
        return;
    test_fragments(v);
    test_specials(v);
    test_api(v);
    test_random(v);
    kipp_vocab_free(v);
}
