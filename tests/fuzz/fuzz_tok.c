/* fuzz_tok.c — libFuzzer target for the tokenizer: encodes arbitrary bytes in both modes
 * with the full Qwen3 vocab and checks the invariants that need no oracle:
 *  - encode never fails and every id is a real token (< n_vocab, never filler);
 *  - decode(encode(x)) == NFC(lossy(x)) when lossy(x) holds no added-token text;
 *  - encode(decode(encode(x))) == encode(x);
 *  - streaming decode, one id per push, == whole decode (both skip modes);
 *  - NFC is idempotent; the pre-tokenizer's words tile any byte string.
 * The vocab comes from the GGUF named by $KIPP_FUZZ_VOCAB (default
 * models/tiny-tied/kipp-tiny-tied-bf16.gguf, run from the repository root).
 * Build (clang), from the repository root, with every .c file of src/core:
 *   clang -std=c11 -D_POSIX_C_SOURCE=200809L -g -O1 -fsanitize=fuzzer,address,undefined
 *     -Iinclude -Isrc tests/fuzz/fuzz_tok.c src/tok/vocab.c src/tok/bpe.c
 *     src/tok/unicode.c src/tok/detok.c src/gguf/gguf.c src/core/{error,types}.c
 *     -o build/fuzz_tok -lutf8proc -lm
 * Run: build/fuzz_tok -max_total_time=300 build/fuzz-tok-corpus tests/fuzz/corpus/tok
 * (the first directory collects new inputs; the second is the committed seed corpus). */
#include "gguf/gguf.h"
#include "tok/detok.h"
#include "tok/unicode.h"
#include "tok/vocab.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kipp_vocab *g_vocab;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *path = getenv("KIPP_FUZZ_VOCAB");
    if (!path || !*path)
        path = "models/tiny-tied/kipp-tiny-tied-bf16.gguf";
    char err[KIPP_ERR_LEN];
    kipp_gguf *g = NULL;
    if (kipp_gguf_open(path, &g, err, sizeof err) != KIPP_OK ||
        kipp_vocab_load_gguf(g, &g_vocab, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "fuzz_tok: cannot load a vocab from %s: %s (set KIPP_FUZZ_VOCAB)\n",
                path, err);
        exit(1);
    }
    kipp_gguf_free(g);
    return 0;
}

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "fuzz_tok: %s:%d: %s\n", __FILE__, __LINE__, #cond);             \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

static int32_t *encode(const uint8_t *s, size_t n, int parse_special, size_t *n_ids) {
    int32_t *ids = NULL;
    char err[KIPP_ERR_LEN];
    CHECK(kipp_vocab_encode(g_vocab, (const char *)s, n, parse_special, &ids, n_ids, err,
                            sizeof err) == KIPP_OK);
    CHECK(ids != NULL);
    for (size_t i = 0; i < *n_ids; i++) {
        CHECK(ids[i] >= 0 && (uint32_t)ids[i] < kipp_vocab_n_tokens(g_vocab));
        CHECK(kipp_vocab_token_type(g_vocab, ids[i]) != KIPP_TOKEN_UNUSED);
    }
    return ids;
}

static char *decode(const int32_t *ids, size_t n, int skip, size_t *len) {
    char *s = NULL, err[KIPP_ERR_LEN];
    CHECK(kipp_detok_decode(g_vocab, ids, n, skip, &s, len, err, sizeof err) == KIPP_OK);
    return s;
}

static void check_stream(const int32_t *ids, size_t n, int skip, const char *want,
                         size_t want_len) {
    kipp_detok d;
    kipp_detok_init(&d, g_vocab, skip);
    char tmp[4096];
    size_t m = 0, k;
    for (size_t i = 0; i <= n; i++) {
        if (i < n)
            CHECK(kipp_detok_push(&d, ids[i], tmp, sizeof tmp, &k) == KIPP_OK);
        else
            CHECK(kipp_detok_flush(&d, tmp, sizeof tmp, &k) == KIPP_OK);
        CHECK(m + k <= want_len && memcmp(want + m, tmp, k) == 0);
        m += k;
    }
    CHECK(m == want_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the pre-tokenizer on raw bytes: progress, bounds */
    for (size_t p = 0; p < size;) {
        size_t e = kipp_tok_word_end((const char *)data, size, p);
        CHECK(e > p && e <= size);
        p = e;
    }
    /* what HF sees: the lossy decode, then NFC (idempotent) */
    uint8_t *fixed = malloc(3 * size + 1);
    CHECK(fixed);
    size_t fn = kipp_tok_utf8_repair(data, size, fixed);
    CHECK(kipp_tok_utf8_valid_prefix(fixed, fn) == fn);
    kipp_tok_nfc_buf b1 = {0}, b2 = {0};
    const uint8_t *nfc, *nfc2;
    size_t nn, nn2;
    CHECK(kipp_tok_nfc(fixed, fn, &b1, &nfc, &nn));
    CHECK(kipp_tok_nfc(nfc, nn, &b2, &nfc2, &nn2));
    CHECK(nn2 == nn && memcmp(nfc2, nfc, nn) == 0);
    int32_t id;
    size_t tl;
    int has_added = kipp_vocab_next_added(g_vocab, (const char *)fixed, fn, 0, 1, &id, &tl) < fn;

    for (int ps = 0; ps < 2; ps++) {
        size_t n, n2, dn, dsn;
        int32_t *ids = encode(data, size, ps, &n);
        char *dec = decode(ids, n, 0, &dn), *dec_skip = decode(ids, n, 1, &dsn);
        if (!has_added)
            CHECK(dn == nn && memcmp(dec, nfc, nn) == 0);
        if (ps) { /* re-encoding the decoded text gives the same ids */
            int32_t *again = encode((const uint8_t *)dec, dn, 1, &n2);
            CHECK(n2 == n && (n == 0 || memcmp(again, ids, n * sizeof *ids) == 0));
            free(again);
        }
        check_stream(ids, n, 0, dec, dn);
        check_stream(ids, n, 1, dec_skip, dsn);
        free(dec);
        free(dec_skip);
        free(ids);
    }
    kipp_tok_nfc_buf_free(&b1);
    kipp_tok_nfc_buf_free(&b2);
    free(fixed);
    return 0;
}
