/* test_tok.c — unit suite for src/tok (lossy UTF-8, character classes, NFC, pre-tokenizer,
 * BPE, added-token split, decoding tables, GGUF loading) on small in-memory vocabularies.
 * The comparison with HF ids over a real GGUF is kt_tok_golden (test_tok_golden.c); the
 * streaming detokenizer has its own suite (test_detok.c). */
#include "gguf/gguf.h"
#include "kt.h"
#include "tok/unicode.h"
#include "tok/vocab.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- a small vocab --------------------------------------------------------------------- */

/* Test oracle for the GGUF byte map, written independently of vocab.c: printable bytes map
 * to themselves, the other 68 to U+0100.. in byte order. */
size_t kt_byte_token_text(unsigned b, char out[2]) {
    int identity = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    unsigned cp = b;
    if (!identity) {
        cp = 0x100;
        for (unsigned x = 0; x < b; x++)
            cp += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

/* Ids 0..255 are the byte tokens (id = byte value); then merge results and added tokens. */
static const char *const extra_tokens[] = {
    "\xC4\xA0t",            /* 256 "Ġt"   */
    "he",                   /* 257        */
    "\xC4\xA0the",          /* 258 "Ġthe" */
    "ab",                   /* 259        */
    "bc",                   /* 260        */
    "aa",                   /* 261        */
    "\xC4\xA0\xC4\xA0",     /* 262 "ĠĠ"   */
    "yz",                   /* 263        */
    "xy",                   /* 264        */
    "<|im_start|>",         /* 265 CONTROL */
    "<|im_end|>",           /* 266 CONTROL */
    "<think>",              /* 267 USER_DEFINED */
    "</think>",             /* 268 USER_DEFINED */
    "<|endoftext|>",        /* 269 CONTROL */
    "[PAD270]",             /* 270 UNUSED */
    "<a>",                  /* 271 USER_DEFINED */
    "<a><b>",               /* 272 USER_DEFINED */
    "<|fim_pad|>",          /* 273 CONTROL, but not special in HF */
    "<ab",                  /* 274 CONTROL (special) */
    "b>",                   /* 275 USER_DEFINED */
};
static const int32_t extra_types[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 4, 4, 3, 5, 4, 4, 3, 3, 4};
/* rank order matters: "a b" before "b c", but "y z" before "x y" */
static const char *const test_merges[] = {
    "\xC4\xA0 t", "h e", "\xC4\xA0t he", "a b", "b c", "a a", "\xC4\xA0 \xC4\xA0",
    "y z", "x y",
};
#define N_EXTRA (sizeof extra_tokens / sizeof *extra_tokens)
#define N_MERGES (sizeof test_merges / sizeof *test_merges)
#define N_TOKENS (256 + N_EXTRA)

typedef struct {
    char byte_text[256][2];
    const char *tok[N_TOKENS];
    size_t tok_len[N_TOKENS];
    int32_t type[N_TOKENS];
    const char *mer[N_MERGES + 4];
    size_t mer_len[N_MERGES + 4];
} vocab_arrays;

static void fill_arrays(vocab_arrays *a) {
    for (unsigned b = 0; b < 256; b++) {
        a->tok_len[b] = kt_byte_token_text(b, a->byte_text[b]);
        a->tok[b] = a->byte_text[b];
        a->type[b] = KIPP_TOKEN_NORMAL;
    }
    for (size_t i = 0; i < N_EXTRA; i++) {
        a->tok[256 + i] = extra_tokens[i];
        a->tok_len[256 + i] = strlen(extra_tokens[i]);
        a->type[256 + i] = extra_types[i];
    }
    for (size_t i = 0; i < N_MERGES; i++) {
        a->mer[i] = test_merges[i];
        a->mer_len[i] = strlen(test_merges[i]);
    }
}

static kipp_vocab *small_vocab(void) {
    static vocab_arrays a; /* large-ish; the vocab copies it anyway */
    fill_arrays(&a);
    char err[KIPP_ERR_LEN] = "";
    kipp_vocab *v = NULL;
    kipp_status st = kipp_vocab_init(a.tok, a.tok_len, a.type, N_TOKENS, a.mer, a.mer_len,
                                     N_MERGES, &v, err, sizeof err);
    KT_CHECK(st == KIPP_OK && v, "small vocab: %s", err);
    return v;
}

/* Encodes and compares with want[0..n_want). */
static int encodes_to(const kipp_vocab *v, const char *text, size_t len, int parse_special,
                      const int32_t *want, size_t n_want) {
    int32_t *ids = NULL;
    size_t n = 0;
    char err[KIPP_ERR_LEN] = "";
    if (kipp_vocab_encode(v, text, len, parse_special, &ids, &n, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "  encode failed: %s\n", err);
        return 0;
    }
    int ok = n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok) {
        fprintf(stderr, "  got %zu ids:", n);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fputc('\n', stderr);
    }
    free(ids);
    return ok;
}
#define ENC(v, s, ps, ...)                                                                   \
    encodes_to(v, s, sizeof(s) - 1, ps, (const int32_t[]){__VA_ARGS__},                      \
               sizeof((const int32_t[]){__VA_ARGS__}) / sizeof(int32_t))

/* ---- tests ----------------------------------------------------------------------------- */

/* Words joined with '|' (inputs avoid '|'). */
static int splits_to(const char *text, const char *want) {
    char got[512];
    size_t len = strlen(text), g = 0;
    for (size_t p = 0; p < len && g + 2 < sizeof got;) {
        size_t e = kipp_tok_word_end(text, len, p);
        if (e <= p || e > len)
            return 0;
        if (p > 0)
            got[g++] = '|';
        for (size_t i = p; i < e && g + 1 < sizeof got; i++)
            got[g++] = text[i];
        p = e;
    }
    got[g] = 0;
    if (strcmp(got, want) != 0)
        fprintf(stderr, "  split '%s' -> '%s', want '%s'\n", text, got, want);
    return strcmp(got, want) == 0;
}

static void test_pretokenizer(void) {
    KT_CHECK(splits_to("Hello world", "Hello| world"));
    KT_CHECK(splits_to("it's we're I'll they'VE IT'S WE'RE you'D I'M can't",
                       "it|'s| we|'re| I|'ll| they|'VE| IT|'S| WE|'RE| you|'D| I|'M| can|'t"));
    KT_CHECK(splits_to("'sup 'hello '", "'s|up| '|hello| '"));
    KT_CHECK(splits_to("'hello 'Re", "'hello| '|Re"));
    KT_CHECK(splits_to("2025 abc123", "2|0|2|5| abc|1|2|3"));
    KT_CHECK(splits_to("a   b", "a|  | b"));
    KT_CHECK(splits_to("a  ,", "a| | ,"));
    KT_CHECK(splits_to("a  1", "a| | |1"));
    KT_CHECK(splits_to("a  ", "a|  "));
    KT_CHECK(splits_to("a\n\nb", "a|\n\n|b"));
    KT_CHECK(splits_to("a\n \nb", "a|\n \n|b"));
    KT_CHECK(splits_to("a \n  b", "a| \n| | b"));
    KT_CHECK(splits_to("x\r\ny\r\n\r\n", "x|\r\n|y|\r\n\r\n"));
    KT_CHECK(splits_to("a...b a ...\n\nb", "a|...|b| a| ...\n\n|b"));
    KT_CHECK(splits_to("f(x);  !!!?", "f|(x|);| | !!!?"));
    KT_CHECK(splits_to("\tfoo  \tbar", "\tfoo|  |\tbar"));
    KT_CHECK(splits_to("x\t\tfoo", "x|\t|\tfoo"));
    KT_CHECK(splits_to("\x0b\x0cy", "\x0b|\x0cy"));
    KT_CHECK(splits_to("a\x1c" "b", "a|\x1c" "b"));
    KT_CHECK(splits_to("_start-word", "_start|-word"));
    KT_CHECK(splits_to("", ""));
    /* Unicode classes: letters, marks (not letters), digits, spaces */
    KT_CHECK(splits_to("h\xC3\xA9llo w\xC3\xB6rld", "h\xC3\xA9llo| w\xC3\xB6rld"));
    KT_CHECK(splits_to("\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96",    /* 你好，世 */
                       "\xE4\xBD\xA0\xE5\xA5\xBD|\xEF\xBC\x8C\xE4\xB8\x96"));
    KT_CHECK(splits_to("x\xD9\xA3\xD9\xA4", "x|\xD9\xA3|\xD9\xA4"));              /* ٣٤ */
    KT_CHECK(splits_to("\xE0\xA4\xB9\xE0\xA4\xBF\xE0\xA4\xA8",                    /* हिन */
                       "\xE0\xA4\xB9|\xE0\xA4\xBF\xE0\xA4\xA8"));
    KT_CHECK(splits_to("a\xCC\x81\xCC\x81", "a|\xCC\x81\xCC\x81"), "marks are 'other'");
    KT_CHECK(splits_to("a\xC2\xA0\xC2\xA0" "b", "a|\xC2\xA0|\xC2\xA0" "b"));
    KT_CHECK(splits_to("a\xE3\x80\x80\xE3\x80\x80" "b", "a|\xE3\x80\x80|\xE3\x80\x80" "b"));
    KT_CHECK(splits_to("a\xE2\x80\xA8\n b", "a|\xE2\x80\xA8\n| b"), "U+2028 is \\s");
    KT_CHECK(splits_to("a\xC2\x85" "b", "a|\xC2\x85" "b"), "NEL is \\s, not CR/LF");
    KT_CHECK(splits_to("1\xC2\xAD" "2", "1|\xC2\xAD|2"), "soft hyphen is Cf: other");
    KT_CHECK(splits_to("\xF0\x90\xB5\x80x", "\xF0\x90\xB5\x80|x"), "U+10D40 Garay digit");
    KT_CHECK(splits_to("'\xC5\xBF" "a '\xE2\x84\xAA", "'\xC5\xBF|a| '|\xE2\x84\xAA"),
             "U+017F folds to s; the Kelvin sign is no contraction");
    KT_CHECK(splits_to("'\xC5", "'\xC5"), "half a long s");
    KT_CHECK(splits_to("\xF0\x9F\x99\x82 \xF0\x9F\x99\x82", "\xF0\x9F\x99\x82| \xF0\x9F\x99\x82"));
    /* bytes that are not UTF-8 count as U+FFFD (other) and never crash */
    KT_CHECK(splits_to("a\xFF" "b \xC3", "a|\xFF" "b| \xC3"));
    KT_CHECK(splits_to("\xE2\x82" "1", "\xE2\x82|1"));
}

/* ---- Unicode ----------------------------------------------------------------------------- */

static int lossy_is(const char *s, size_t len, const uint32_t *cps, const size_t *lens,
                    size_t n) {
    size_t k = 0, i = 0;
    while (i < len) {
        size_t step;
        uint32_t cp = kipp_tok_utf8_next((const uint8_t *)s, len, i, &step);
        if (k >= n || cp != cps[k] || step != lens[k])
            return 0;
        i += step, k++;
    }
    return k == n;
}
#define LOSSY(s, cps, lens)                                                                  \
    lossy_is(s, sizeof(s) - 1, (const uint32_t[])cps, (const size_t[])lens,                  \
             sizeof((const size_t[])lens) / sizeof(size_t))
#define A(...) {__VA_ARGS__}
#define R KIPP_TOK_REPLACEMENT

static void test_utf8(void) {
    /* maximal subparts, as Python's decode('utf-8', 'replace') */
    KT_CHECK(LOSSY("a\xC3\xA9", A('a', 0xE9), A(1, 2)));
    KT_CHECK(LOSSY("\xC0\xAF", A(R, R), A(1, 1)), "C0 is never a lead byte");
    KT_CHECK(LOSSY("\xE0\x80\xAF", A(R, R, R), A(1, 1, 1)), "overlong");
    KT_CHECK(LOSSY("\xED\xA0\x80", A(R, R, R), A(1, 1, 1)), "surrogate");
    KT_CHECK(LOSSY("\xF4\x90\x80\x80", A(R, R, R, R), A(1, 1, 1, 1)), "above U+10FFFF");
    KT_CHECK(LOSSY("\xE2\x82" "a", A(R, 'a'), A(2, 1)), "truncated: one U+FFFD");
    KT_CHECK(LOSSY("\xF0\x9F\x98", A(R), A(3)), "truncated at the end");
    KT_CHECK(LOSSY("\xF0\x9F\x98\x80\x80", A(0x1F600, R), A(4, 1)));
    KT_CHECK(LOSSY("\xF5\xFF\x80", A(R, R, R), A(1, 1, 1)));
    KT_CHECK(LOSSY("\xEF\xBF\xBD", A(R), A(3)), "a real U+FFFD");
    uint8_t out[32];
    KT_CHECK(kipp_tok_utf8_repair((const uint8_t *)"x\xE2\x82\xFFy", 5, out) == 8 &&
             memcmp(out, "x\xEF\xBF\xBD\xEF\xBF\xBDy", 8) == 0);
    KT_CHECK(kipp_tok_utf8_valid_prefix((const uint8_t *)"abcdefghij\xC3\xA9z\xC3", 14) == 13);
    KT_CHECK(kipp_tok_utf8_valid_prefix((const uint8_t *)"\xEF\xBF\xBD", 3) == 3);
    KT_CHECK(kipp_tok_utf8_put(0x10FFFF, out) == 4 && memcmp(out, "\xF4\x8F\xBF\xBF", 4) == 0);
}

static void test_classes(void) {
    static const struct {
        uint32_t cp;
        int cls;
    } cases[] = {
        {'a', KIPP_CC_LETTER}, {'7', KIPP_CC_NUMBER}, {' ', KIPP_CC_SPACE}, {'-', KIPP_CC_OTHER},
        {0xE9, KIPP_CC_LETTER}, {0x4E2D, KIPP_CC_LETTER}, {0x0663, KIPP_CC_NUMBER},
        {0x2163, KIPP_CC_NUMBER}, {0xBD, KIPP_CC_NUMBER}, {0x3000, KIPP_CC_SPACE},
        {0x85, KIPP_CC_SPACE}, {0x2028, KIPP_CC_SPACE}, {0xA0, KIPP_CC_SPACE},
        {0x180E, KIPP_CC_OTHER}, {0x200B, KIPP_CC_OTHER}, {0x301, KIPP_CC_OTHER},
        {0x378, KIPP_CC_OTHER}, {0xFFFD, KIPP_CC_OTHER}, {0xE000, KIPP_CC_OTHER},
        {0x105C0, KIPP_CC_LETTER}, {0x10D40, KIPP_CC_NUMBER}, {0x2EBF0, KIPP_CC_LETTER},
        {0x1F600, KIPP_CC_OTHER}, {0x110000, KIPP_CC_OTHER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        KT_CHECK(kipp_tok_cp_class(cases[i].cp) == cases[i].cls, "U+%04X", cases[i].cp);
    KT_CHECK(strcmp(kipp_tok_utf8proc_version(), kipp_tok_tables_version()) == 0,
             "utf8proc has Unicode %s but src/tok/unicode.c's patch tables were made for %s: "
             "run tests/tok/make_unicode_tables.py", kipp_tok_utf8proc_version(),
             kipp_tok_tables_version());
}

static int nfc_is(const char *in, const char *want) {
    kipp_tok_nfc_buf b = {0};
    const uint8_t *out;
    size_t n;
    int ok = kipp_tok_nfc((const uint8_t *)in, strlen(in), &b, &out, &n) &&
             n == strlen(want) && memcmp(out, want, n) == 0;
    if (!ok)
        fprintf(stderr, "  nfc of '%s' gave %zu bytes\n", in, n);
    kipp_tok_nfc_buf_free(&b);
    return ok;
}

/* utf8proc's own NFC of a code point sequence, as an oracle (quadratic but short). */
static size_t oracle_nfc(const int32_t *cps, size_t n, uint8_t *out) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        m += kipp_tok_utf8_put((uint32_t)cps[i], out + m);
    uint8_t *r = NULL;
    utf8proc_ssize_t k = utf8proc_map(out, (utf8proc_ssize_t)m, &r, UTF8PROC_STABLE |
                                      UTF8PROC_COMPOSE);
    if (k < 0)
        return 0;
    memcpy(out, r, (size_t)k);
    free(r);
    return (size_t)k;
}

static void test_nfc(void) {
    KT_CHECK(nfc_is("e\xCC\x81", "\xC3\xA9"));
    KT_CHECK(nfc_is("a\xCC\x81\xCC\x96", "\xC3\xA1\xCC\x96"), "reordered, then composed");
    KT_CHECK(nfc_is("\xE2\x84\xAB", "\xC3\x85"), "singleton Angstrom -> A-ring");
    KT_CHECK(nfc_is("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81"), "Hangul LVT");
    KT_CHECK(nfc_is("\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC"), "exclusion U+0958");
    KT_CHECK(nfc_is("\xE0\xA7\x87\xE0\xA6\xBE", "\xE0\xA7\x8B"), "ccc-0 second U+09BE");
    KT_CHECK(nfc_is("\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0", "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0"),
             "U+11935 U+11930 stay apart: HF's Unicode 9.0 has no such composition");
    KT_CHECK(nfc_is("a\xE1\xAA\xBF\xCC\x81", "a\xE1\xAA\xBF\xCC\x81"),
             "U+1ABF is a starter to HF: it blocks U+0301 from composing with a");
    KT_CHECK(nfc_is("\xE1\xAA\xBF\xCC\x81", "\xE1\xAA\xBF\xCC\x81"));
    KT_CHECK(nfc_is("", ""));
    const char *ascii = "plain ASCII stays where it is";
    kipp_tok_nfc_buf b = {0};
    const uint8_t *out;
    size_t n;
    KT_CHECK(kipp_tok_nfc((const uint8_t *)ascii, strlen(ascii), &b, &out, &n) &&
             out == (const uint8_t *)ascii && n == strlen(ascii) && b.out == NULL,
             "NFC text is not copied");
    /* a long run of marks (counting-sort path) against utf8proc's own NFC */
    static const int32_t marks[] = {0x301, 0x316, 0x334, 0x345, 0x5B0, 0xE38, 0x300, 0x327};
    int32_t cps[3001];
    uint8_t text[12004], want[12004];
    size_t m = 0;
    uint32_t x = 12345;
    cps[0] = 'a';
    for (int i = 1; i < 3001; i++) {
        x = x * 1103515245u + 12345u;
        cps[i] = marks[(x >> 16) % 8];
    }
    for (int i = 0; i < 3001; i++)
        m += kipp_tok_utf8_put((uint32_t)cps[i], text + m);
    size_t wn = oracle_nfc(cps, 3001, want);
    KT_CHECK(kipp_tok_nfc(text, m, &b, &out, &n) && n == wn && memcmp(out, want, n) == 0);
    kipp_tok_nfc_buf_free(&b);
    /* every code point the quick check calls stable is left alone by utf8proc's NFC */
    int bad = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if ((cp >= 0xD800 && cp <= 0xDFFF) || !kipp_tok_nfc_stable(cp))
            continue;
        int32_t one = (int32_t)cp;
        utf8proc_int32_t buf[8];
        utf8proc_ssize_t k = utf8proc_decompose_char(one, buf, 8, UTF8PROC_DECOMPOSE, NULL);
        k = utf8proc_normalize_utf32(buf, k, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (k != 1 || buf[0] != one || utf8proc_get_property(one)->combining_class)
            bad++;
    }
    KT_CHECK(bad == 0, "%d stable code points are changed by NFC", bad);
}

static void test_bpe(void) {
    kipp_vocab *v = small_vocab();
    if (!v)
        return;
    KT_CHECK(kipp_vocab_n_tokens(v) == N_TOKENS);
    KT_CHECK(ENC(v, " the", 0, 258));
    KT_CHECK(ENC(v, "the the", 0, 't', 257, 258));
    KT_CHECK(ENC(v, "abc", 0, 259, 'c'), "'a b' has the lower rank");
    KT_CHECK(ENC(v, "xyz", 0, 'x', 263), "'y z' has the lower rank");
    KT_CHECK(ENC(v, "aaa", 0, 261, 'a'), "ties go to the leftmost pair");
    KT_CHECK(ENC(v, "aaaaa", 0, 261, 261, 'a'));
    KT_CHECK(ENC(v, "a   b", 0, 'a', 262, ' ', 'b'));
    KT_CHECK(ENC(v, "ab1", 0, 259, '1'));
    int32_t *ids = NULL;
    size_t n = 99;
    char err[KIPP_ERR_LEN];
    KT_CHECK(kipp_vocab_encode(v, "", 0, 1, &ids, &n, err, sizeof err) == KIPP_OK && n == 0 &&
             ids != NULL);
    free(ids);
    KT_CHECK(kipp_vocab_encode(v, NULL, 0, 1, &ids, &n, err, sizeof err) == KIPP_OK && n == 0);
    free(ids);
    /* a long run stays linear-ish and correct: 100001 'a' = 50000 "aa" + "a" */
    size_t big = 100001;
    char *s = malloc(big);
    memset(s, 'a', big);
    KT_CHECK(kipp_vocab_encode(v, s, big, 0, &ids, &n, err, sizeof err) == KIPP_OK &&
             n == 50001 && ids[0] == 261 && ids[49999] == 261 && ids[50000] == 'a');
    free(ids);
    free(s);
    kipp_vocab_free(v);
}

static void test_specials(void) {
    kipp_vocab *v = small_vocab();
    if (!v)
        return;
    const char *t = "<|im_start|>ab<think>he</think><|im_end|>";
    KT_CHECK(encodes_to(v, t, strlen(t), 1, (const int32_t[]){265, 259, 267, 257, 268, 266},
                        6));
    /* without parse_special (HF split_special_tokens): special tokens are plain text,
     * non-special added tokens still split. "<|" "im" "_start" "|>" "ab" -> byte tokens
     * except "ab". */
    KT_CHECK(ENC(v, "<|im_start|>ab<think>", 0, '<', '|', 'i', 'm', '_', 's', 't', 'a', 'r',
                 't', '|', '>', 259, 267));
    KT_CHECK(ENC(v, "<|endoftext|>", 1, 269));
    KT_CHECK(ENC(v, "<|im_end|><|im_end|>", 1, 266, 266));
    KT_CHECK(ENC(v, "<<|im_end|>>", 1, '<', 266, '>'));
    KT_CHECK(ENC(v, "<a><b><a>", 0, 272, 271), "longest added token at the leftmost match");
    KT_CHECK(ENC(v, "<a<a><b>", 0, '<', 'a', 272));
    KT_CHECK(ENC(v, "[PAD270]", 1, '[', 'P', 'A', 'D', '2', '7', '0', ']'), "UNUSED never");
    KT_CHECK(ENC(v, " <think> the", 0, ' ', 267, 258));
    /* <|fim_pad|> is CONTROL in GGUF but special=false in HF: split in both modes */
    KT_CHECK(ENC(v, "x<|fim_pad|>", 0, 'x', 273) && ENC(v, "x<|fim_pad|>", 1, 'x', 273));
    KT_CHECK(!kipp_vocab_is_special(v, 273) && kipp_vocab_is_special(v, 265) &&
             !kipp_vocab_is_special(v, 267) && !kipp_vocab_is_special(v, 258));
    /* HF's matcher: "<ab" (special) wins at the leftmost position; without parse_special
     * that match is dropped whole and the search resumes after it, so "b>" is not found */
    KT_CHECK(ENC(v, "<ab>", 1, 274, '>'));
    KT_CHECK(ENC(v, "<ab>", 0, '<', 259, '>'));
    KT_CHECK(ENC(v, "a b>", 0, 'a', ' ', 275));
    /* added tokens are cut before NFC: a mark after one does not compose with '>' */
    KT_CHECK(ENC(v, "<think>\xCC\xB8", 1, 267, 0xCC, 0xB8));
    KT_CHECK(ENC(v, ">\xCC\xB8", 1, 0xE2, 0x89, 0xAF), "but >+U+0338 is U+226F elsewhere");
    kipp_vocab_free(v);
}

static void test_decode(void) {
    kipp_vocab *v = small_vocab();
    if (!v)
        return;
    size_t n;
    const char *b = kipp_vocab_token_bytes(v, 258, &n);
    KT_CHECK(b && n == 4 && memcmp(b, " the", 4) == 0);
    b = kipp_vocab_token_bytes(v, 262, &n);
    KT_CHECK(b && n == 2 && memcmp(b, "  ", 2) == 0);
    b = kipp_vocab_token_bytes(v, 0, &n);
    KT_CHECK(b && n == 1 && b[0] == 0, "byte 0 decodes to NUL");
    b = kipp_vocab_token_bytes(v, 0xAD, &n);
    KT_CHECK(b && n == 1 && (uint8_t)b[0] == 0xAD);
    b = kipp_vocab_token_bytes(v, 265, &n);
    KT_CHECK(b && n == 0, "CONTROL decodes to nothing");
    b = kipp_vocab_token_bytes(v, 270, &n);
    KT_CHECK(b && n == 0, "UNUSED decodes to nothing");
    b = kipp_vocab_token_bytes(v, 267, &n);
    KT_CHECK(b && n == 7 && memcmp(b, "<think>", 7) == 0, "USER_DEFINED is literal");
    KT_CHECK(kipp_vocab_token_bytes(v, -1, &n) == NULL && kipp_vocab_token_bytes(v, N_TOKENS,
                                                                                  &n) == NULL);
    /* pieces: what HF's decode contributes */
    b = kipp_vocab_token_piece(v, 265, 0, &n);
    KT_CHECK(b && n == 12 && memcmp(b, "<|im_start|>", 12) == 0);
    b = kipp_vocab_token_piece(v, 265, 1, &n);
    KT_CHECK(b && n == 0, "special tokens skipped on request");
    b = kipp_vocab_token_piece(v, 273, 1, &n);
    KT_CHECK(b && n == 11, "<|fim_pad|> is not special in HF");
    b = kipp_vocab_token_piece(v, 267, 1, &n);
    KT_CHECK(b && n == 7 && memcmp(b, "<think>", 7) == 0);
    b = kipp_vocab_token_piece(v, 258, 1, &n);
    KT_CHECK(b && n == 4 && memcmp(b, " the", 4) == 0);
    b = kipp_vocab_token_piece(v, 270, 0, &n);
    KT_CHECK(b && n == 0, "filler ids are unknown to HF");
    KT_CHECK(kipp_vocab_token_piece(v, N_TOKENS, 0, &n) == NULL && n == 0);
    b = kipp_vocab_token_text(v, 258, &n);
    KT_CHECK(b && n == 5 && memcmp(b, "\xC4\xA0the", 5) == 0);
    KT_CHECK(kipp_vocab_find(v, "\xC4\xA0the", 5) == 258 && kipp_vocab_find(v, "nope", 4) < 0);
    KT_CHECK(kipp_vocab_token_type(v, 267) == KIPP_TOKEN_USER_DEFINED);
    KT_CHECK(kipp_vocab_eos_id(v) == 266 && kipp_vocab_bos_id(v) == 269);
    KT_CHECK(kipp_vocab_is_eog(v, 266) && kipp_vocab_is_eog(v, 269) && !kipp_vocab_is_eog(v, 265)
             && !kipp_vocab_is_eog(v, -3) && !kipp_vocab_is_eog(v, 258));

    /* round trip of valid UTF-8 (already NFC) with added tokens; bytes that are not UTF-8
     * come back as U+FFFD, as HF sees Python's decode(errors='replace') */
    const char *text = "h\xC3\xA9llo \xE4\xB8\xAD\xF0\x9F\x99\x82\x01\x7F\xC2\xAD the<think>aa";
    size_t len = strlen(text);
    int32_t *ids = NULL;
    char err[KIPP_ERR_LEN];
    KT_CHECK(kipp_vocab_encode(v, text, len, 1, &ids, &n, err, sizeof err) == KIPP_OK, "%s",
             err);
    char back[600];
    size_t m = 0;
    for (size_t i = 0; ids && i < n; i++) {
        size_t k;
        const char *s = kipp_vocab_token_bytes(v, ids[i], &k);
        if (s && m + k <= sizeof back) {
            memcpy(back + m, s, k);
            m += k;
        }
    }
    KT_CHECK(m == len && memcmp(back, text, len) == 0, "round trip %zu vs %zu bytes", m, len);
    free(ids);
    KT_CHECK(ENC(v, "\xFF", 0, 0xEF, 0xBF, 0xBD));
    KT_CHECK(ENC(v, "a\xE2\x82" "b", 0, 'a', 0xEF, 0xBF, 0xBD, 'b'));
    KT_CHECK(ENC(v, "e\xCC\x81", 0, 0xC3, 0xA9), "NFC before BPE");
    kipp_vocab_free(v);
}

static kipp_status init_with(vocab_arrays *a, uint32_t n_merges, char *err) {
    kipp_vocab *v = NULL;
    err[0] = 0;
    kipp_status st = kipp_vocab_init(a->tok, a->tok_len, a->type, N_TOKENS, a->mer, a->mer_len,
                                     n_merges, &v, err, KIPP_ERR_LEN);
    KT_CHECK((st == KIPP_OK) == (v != NULL));
    kipp_vocab_free(v);
    return st;
}

static void test_invalid(void) {
    static vocab_arrays a;
    char err[KIPP_ERR_LEN];
    fill_arrays(&a);
    a.mer[N_MERGES] = "q zz"; /* right part not a token */
    a.mer_len[N_MERGES] = 4;
    KT_CHECK(init_with(&a, N_MERGES + 1, err) == KIPP_ERR_FORMAT && strstr(err, "merge 9"),
             "%s", err);
    a.mer[N_MERGES] = "qq"; /* no space */
    a.mer_len[N_MERGES] = 2;
    KT_CHECK(init_with(&a, N_MERGES + 1, err) == KIPP_ERR_FORMAT && strstr(err, "merge 9"),
             "%s", err);
    a.mer[N_MERGES] = "q r"; /* "qr" is not a token */
    a.mer_len[N_MERGES] = 3;
    KT_CHECK(init_with(&a, N_MERGES + 1, err) == KIPP_ERR_FORMAT && strstr(err, "merge 9"),
             "%s", err);
    a.type[3] = 9;
    KT_CHECK(init_with(&a, N_MERGES, err) == KIPP_ERR_FORMAT && strstr(err, "token 3"), "%s",
             err);
    a.type[3] = KIPP_TOKEN_NORMAL;
    KT_CHECK(init_with(&a, N_MERGES, err) == KIPP_OK, "%s", err);

    kipp_vocab *v = (kipp_vocab *)&a;
    KT_CHECK(kipp_vocab_init(a.tok, a.tok_len, NULL, 0, NULL, NULL, 0, &v, err, sizeof err) ==
                 KIPP_ERR_FORMAT && v == NULL);
    KT_CHECK(kipp_vocab_init(a.tok, a.tok_len, NULL, 1, NULL, NULL, 0, NULL, err, sizeof err) ==
             KIPP_ERR_INVALID_ARG);
    kipp_vocab_free(NULL);

    /* a vocab without most byte tokens drops what it cannot represent, never crashes */
    const char *few[2] = {"a", "b"};
    size_t few_len[2] = {1, 1};
    KT_CHECK(kipp_vocab_init(few, few_len, NULL, 2, NULL, NULL, 0, &v, err, sizeof err) ==
             KIPP_OK);
    KT_CHECK(ENC(v, "abc", 1, 0, 1));
    KT_CHECK(kipp_vocab_eos_id(v) == KIPP_VOCAB_NONE && !kipp_vocab_is_eog(v, 0));
    int32_t *ids = NULL;
    size_t n = 0;
    KT_CHECK(kipp_vocab_encode(v, NULL, 3, 0, &ids, &n, err, sizeof err) ==
             KIPP_ERR_INVALID_ARG && ids == NULL);
    KT_CHECK(kipp_vocab_encode(v, "a", 1, 0, NULL, &n, err, sizeof err) == KIPP_ERR_INVALID_ARG);
    kipp_vocab_free(v);
}

/* ---- GGUF ------------------------------------------------------------------------------ */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p)
            abort(); /* test code: an allocation failure here is not the code under test */
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t x) {
    uint8_t le[4] = {(uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16), (uint8_t)(x >> 24)};
    put(b, le, 4);
}
static void put_u64(buf *b, uint64_t x) {
    put_u32(b, (uint32_t)x);
    put_u32(b, (uint32_t)(x >> 32));
}
static void put_str(buf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}
static void kv_str(buf *b, const char *key, const char *val) {
    put_str(b, key, strlen(key));
    put_u32(b, KIPP_GGUF_STRING);
    put_str(b, val, strlen(val));
}
static void kv_u32(buf *b, const char *key, uint32_t val) {
    put_str(b, key, strlen(key));
    put_u32(b, KIPP_GGUF_UINT32);
    put_u32(b, val);
}
static void kv_str_arr(buf *b, const char *key, const char *const *s, const size_t *lens,
                       size_t n) {
    put_str(b, key, strlen(key));
    put_u32(b, KIPP_GGUF_ARRAY);
    put_u32(b, KIPP_GGUF_STRING);
    put_u64(b, n);
    for (size_t i = 0; i < n; i++)
        put_str(b, s[i], lens[i]);
}

enum { G_NO_MERGES = 1, G_LLAMA = 2, G_BAD_MERGE = 4, G_BAD_EOS = 8, G_NO_TYPES = 16,
       G_BAD_PRE = 32 };

/* A vocab-only GGUF v3 (no tensors) holding the small vocab, with optional defects. */
static buf make_gguf(int flags) {
    static vocab_arrays a;
    fill_arrays(&a);
    a.mer[N_MERGES] = "q zz";
    a.mer_len[N_MERGES] = 4;
    int n_kv = 6 - !!(flags & G_NO_MERGES) - !!(flags & G_NO_TYPES);
    buf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, (uint64_t)n_kv);
    kv_str(&b, "tokenizer.ggml.model", flags & G_LLAMA ? "llama" : "gpt2");
    kv_str(&b, "tokenizer.ggml.pre", flags & G_BAD_PRE ? "llama-bpe" : "qwen2");
    kv_str_arr(&b, "tokenizer.ggml.tokens", a.tok, a.tok_len, N_TOKENS);
    if (!(flags & G_NO_TYPES)) {
        put_str(&b, "tokenizer.ggml.token_type", strlen("tokenizer.ggml.token_type"));
        put_u32(&b, KIPP_GGUF_ARRAY);
        put_u32(&b, KIPP_GGUF_INT32);
        put_u64(&b, N_TOKENS);
        for (size_t i = 0; i < N_TOKENS; i++)
            put_u32(&b, (uint32_t)a.type[i]);
    }
    if (!(flags & G_NO_MERGES))
        kv_str_arr(&b, "tokenizer.ggml.merges", a.mer, a.mer_len,
                   N_MERGES + !!(flags & G_BAD_MERGE));
    kv_u32(&b, "tokenizer.ggml.eos_token_id", flags & G_BAD_EOS ? 100000 : 269);
    while (b.n % 32)
        put(&b, "", 1);
    return b;
}

static kipp_status load_flags(int flags, kipp_vocab **v, char *err) {
    buf b = make_gguf(flags);
    kipp_gguf *g = NULL;
    *v = NULL;
    err[0] = 0;
    kipp_status st = kipp_gguf_open_buffer(b.p, b.n, &g, err, KIPP_ERR_LEN);
    KT_CHECK(st == KIPP_OK, "the GGUF reader rejected the test file: %s", err);
    if (st == KIPP_OK)
        st = kipp_vocab_load_gguf(g, v, err, KIPP_ERR_LEN);
    kipp_gguf_free(g); /* the vocab must not borrow from the file */
    free(b.p);
    return st;
}

static void test_gguf(void) {
    char err[KIPP_ERR_LEN];
    kipp_vocab *v = NULL;
    KT_CHECK(load_flags(0, &v, err) == KIPP_OK && v, "%s", err);
    if (v) {
        KT_CHECK(kipp_vocab_n_tokens(v) == N_TOKENS && kipp_vocab_eos_id(v) == 269);
        KT_CHECK(kipp_vocab_is_eog(v, 269) && kipp_vocab_is_eog(v, 266));
        KT_CHECK(ENC(v, "<|im_start|> the<think>", 1, 265, 258, 267));
        kipp_vocab_free(v);
    }
    KT_CHECK(load_flags(G_NO_TYPES, &v, err) == KIPP_OK && v, "%s", err);
    if (v) { /* all NORMAL: <think> is ordinary text now */
        KT_CHECK(kipp_vocab_token_type(v, 267) == KIPP_TOKEN_NORMAL);
        KT_CHECK(ENC(v, "<think>", 1, '<', 't', 'h', 'i', 'n', 'k', '>'));
        kipp_vocab_free(v);
    }
    KT_CHECK(load_flags(G_NO_MERGES, &v, err) == KIPP_ERR_FORMAT && !v &&
             strstr(err, "tokenizer.ggml.merges"), "%s", err);
    KT_CHECK(load_flags(G_LLAMA, &v, err) == KIPP_ERR_UNSUPPORTED && !v &&
             strstr(err, "tokenizer.ggml.model"), "%s", err);
    KT_CHECK(load_flags(G_BAD_PRE, &v, err) == KIPP_ERR_UNSUPPORTED && !v &&
             strstr(err, "tokenizer.ggml.pre"), "%s", err);
    KT_CHECK(load_flags(G_BAD_MERGE, &v, err) == KIPP_ERR_FORMAT && !v &&
             strstr(err, "merge 9"), "%s", err);
    KT_CHECK(load_flags(G_BAD_EOS, &v, err) == KIPP_ERR_FORMAT && !v &&
             strstr(err, "eos_token_id"), "%s", err);
    KT_CHECK(kipp_vocab_load_gguf(NULL, &v, err, sizeof err) == KIPP_ERR_INVALID_ARG);
}

void kt_suite_tok(void) {
    test_utf8();
    test_classes();
    test_nfc();
    test_pretokenizer();
    test_bpe();
    test_specials();
    test_decode();
    test_invalid();
    test_gguf();
}
