/* fuzz_grammar.c — libFuzzer target for the grammar compiler (src/engine/grammar.c), the
 * matcher (src/engine/matcher.c) and the JSON-Schema front end (src/engine/json_schema.c).
 * Input: a mode byte, then text up to the first NUL, then bytes to feed the matcher.
 * Mode even: the text is grammar source, compiled or refused with a message. Mode odd: the
 * text is a JSON Schema; a schema the front end accepts must give a grammar that compiles
 * (anything else is a front-end bug), and every refusal says why. Either way a compiled
 * grammar then runs over the bytes one at a time (a refused byte leaves the state as it
 * was, so the next byte is tried from there), with a token mask computed over a small
 * vocabulary (every byte, multi-byte pieces, JSON punctuation) before each byte and checked
 * against kipp_matcher_allows_token token by token. */
#include "engine/grammar.h"
#include "engine/json_schema.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static kipp_token_trie *vocab(void) {
    static kipp_token_trie *t;
    static const char *const words[] = {
        "{\"", "\":", "\",", "\"}", "},{", "[{", "}]", "true", "false", "null", "\"a", "ab", "abc",
        " \"", "  ", "\n", "\n  ", "0.", "12", "-1", "e+", "\\n", "\\u00", "\xC3\xA9", "\xE2\x82\xAC",
        "\xF0\x9F\x98\x80", "\xE4\xB8", "\xAD", "<tool_call>", "\"name\": \"", "a-z", "yes", "no.",
    };
    if (t) return t;
    enum { NW = sizeof words / sizeof words[0], N = 256 + NW + 1 };
    static char bytes[256];
    const char *toks[N];
    size_t lens[N];
    uint8_t eog[N] = {0};
    for (int b = 0; b < 256; b++) bytes[b] = (char)b, toks[b] = &bytes[b], lens[b] = 1;
    for (int i = 0; i < NW; i++) toks[256 + i] = words[i], lens[256 + i] = strlen(words[i]);
    toks[N - 1] = "", lens[N - 1] = 0, eog[N - 1] = 1;
    char err[256];
    if (kipp_token_trie_build_list(toks, lens, eog, N, &t, err, sizeof err) != KIPP_OK) abort();
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const int schema = data[0] & 1;
    const char *text = (const char *)data + 1;
    const uint8_t *nul = memchr(text, 0, size - 1);
    const size_t tlen = nul ? (size_t)((const char *)nul - text) : size - 1;
    const uint8_t *feed = nul ? nul + 1 : data + size;
    const size_t nfeed = (size_t)(data + size - feed);
    char err[512] = "";
    char *src = NULL;
    size_t slen = tlen;
    if (schema) {
        json_error_t je;
        json_t *s = json_loadb(text, tlen, JSON_DECODE_ANY, &je);
        if (!s) return 0;
        int rc = kipp_json_schema_grammar(s, &src, &slen, err, sizeof err);
        json_decref(s);
        if (rc != 0) {
            if (!err[0]) abort(); /* every refusal says why */
            return 0;
        }
        text = src;
    }
    kipp_grammar *g = NULL;
    if (kipp_grammar_compile(text, slen, &g, err, sizeof err) != KIPP_OK) {
        if (schema || !err[0]) abort(); /* the front end wrote a bad grammar / no message */
        free(src);
        return 0;
    }
    kipp_matcher *m;
    kipp_token_trie *t = vocab();
    uint32_t bits[(256 + 64 + 31) / 32];
    if (kipp_matcher_new(g, t, &m, err, sizeof err) == KIPP_OK) {
        for (size_t i = 0; i < nfeed && i < 256; i++) {
            kipp_matcher_mask(m, bits);
            for (int32_t id = 0; id < 256; id += 7) /* a sample: the walk vs the byte-level state */
                if (((bits[id >> 5] >> (id & 31)) & 1) != (uint32_t)kipp_matcher_allows_token(m, id)) abort();
            kipp_matcher_accept_bytes(m, (const char *)feed + i, 1);
        }
        (void)kipp_matcher_complete(m);
        kipp_matcher_free(m);
    }
    kipp_grammar_free(g);
    free(src);
    return 0;
}
