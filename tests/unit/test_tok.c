/* test_tok.c — unit suite for src/tok (vocab tables, pre-tokenizer, BPE, added-token split,
 * decoding, GGUF loading) on small in-memory vocabularies, plus kt_tok_golden(), which
 * compares the encoder with HF ids from tests/tok/ascii_golden.jsonl over a real GGUF.
 * Not here: non-ASCII golden data (pending the Unicode pre-tokenizer). */
#include "gguf/gguf.h"
#include "kt.h"
#include "tok/vocab.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

int kt_tok_golden(const char *gguf_path, const char *jsonl_path);

/* ---- a small vocab --------------------------------------------------------------------- */

/* Test oracle for the GGUF byte map, written independently of vocab.c: printable bytes map
 * to themselves, the other 68 to U+0100.. in byte order. */
static size_t byte_token_text(unsigned b, char out[2]) {
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
};
static const int32_t extra_types[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 4, 4, 3, 5, 4, 4};
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
        a->tok_len[b] = byte_token_text(b, a->byte_text[b]);
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
    /* non-ASCII placeholder: letters; invalid bytes count as letters too */
    KT_CHECK(splits_to("h\xC3\xA9llo w\xC3\xB6rld", "h\xC3\xA9llo| w\xC3\xB6rld"));
    KT_CHECK(splits_to("a\xFF" "b \xC3", "a\xFF" "b| \xC3"));
    KT_CHECK(splits_to("a\xC2\xA0\xC2\xA0" "b", "a|\xC2\xA0|\xC2\xA0" "b"));
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
    /* without parse_special: CONTROL tokens are plain text, USER_DEFINED still split.
     * "<|" "im" "_start" "|>" "ab" -> byte tokens except "ab". */
    KT_CHECK(ENC(v, "<|im_start|>ab<think>", 0, '<', '|', 'i', 'm', '_', 's', 't', 'a', 'r',
                 't', '|', '>', 259, 267));
    KT_CHECK(ENC(v, "<|endoftext|>", 1, 269));
    KT_CHECK(ENC(v, "<|im_end|><|im_end|>", 1, 266, 266));
    KT_CHECK(ENC(v, "<<|im_end|>>", 1, '<', 266, '>'));
    KT_CHECK(ENC(v, "<a><b><a>", 0, 272, 271), "longest added token first");
    KT_CHECK(ENC(v, "[PAD270]", 1, '[', 'P', 'A', 'D', '2', '7', '0', ']'), "UNUSED never");
    KT_CHECK(ENC(v, " <think> the", 0, ' ', 267, 258));
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
    b = kipp_vocab_token_text(v, 258, &n);
    KT_CHECK(b && n == 5 && memcmp(b, "\xC4\xA0the", 5) == 0);
    KT_CHECK(kipp_vocab_find(v, "\xC4\xA0the", 5) == 258 && kipp_vocab_find(v, "nope", 4) < 0);
    KT_CHECK(kipp_vocab_token_type(v, 267) == KIPP_TOKEN_USER_DEFINED);
    KT_CHECK(kipp_vocab_eos_id(v) == 266 && kipp_vocab_bos_id(v) == 269);
    KT_CHECK(kipp_vocab_is_eog(v, 266) && kipp_vocab_is_eog(v, 269) && !kipp_vocab_is_eog(v, 265)
             && !kipp_vocab_is_eog(v, -3) && !kipp_vocab_is_eog(v, 258));

    /* round trip over every byte value, valid UTF-8 or not, plus text and added tokens */
    char text[300];
    size_t len = 0;
    for (unsigned i = 0; i < 256; i++)
        text[len++] = (char)(255 - i);
    memcpy(text + len, " the<think>aa", 13);
    len += 13;
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
    test_pretokenizer();
    test_bpe();
    test_specials();
    test_decode();
    test_invalid();
    test_gguf();
}

/* ---- golden check against HF tokenizers ----------------------------------------------- */

static char *read_file(const char *path, size_t *n) {
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

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "    %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

/* Returns the number of lines whose ids differ (printing the first few), or -1 when the
 * GGUF or the jsonl cannot be used. */
int kt_tok_golden(const char *gguf_path, const char *jsonl_path) {
    char err[KIPP_ERR_LEN];
    kipp_gguf *g = NULL;
    kipp_vocab *v = NULL;
    if (kipp_gguf_open(gguf_path, &g, err, sizeof err) != KIPP_OK ||
        kipp_vocab_load_gguf(g, &v, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "golden: %s: %s\n", gguf_path, err);
        kipp_gguf_free(g);
        return -1;
    }
    kipp_gguf_free(g);
    size_t len;
    char *all = read_file(jsonl_path, &len);
    if (!all) {
        fprintf(stderr, "golden: cannot read %s\n", jsonl_path);
        kipp_vocab_free(v);
        return -1;
    }
    int mismatches = 0, lines = 0, bad = 0;
    for (char *line = all, *eol; line < all + len; line = eol + 1) {
        eol = memchr(line, '\n', (size_t)(all + len - line));
        if (!eol)
            eol = all + len;
        if (eol == line)
            continue;
        json_error_t je;
        json_t *o = json_loadb(line, (size_t)(eol - line), JSON_ALLOW_NUL, &je);
        json_t *jt = json_object_get(o, "text"), *jids = json_object_get(o, "ids");
        if (!json_is_string(jt) || !json_is_array(jids)) {
            fprintf(stderr, "golden: %s line %d: not {text, ids}: %s\n", jsonl_path, lines + 1,
                    je.text);
            json_decref(o);
            bad = 1;
            break;
        }
        lines++;
        size_t n_want = json_array_size(jids), n = 0;
        int32_t *want = malloc((n_want + 1) * sizeof *want), *ids = NULL;
        for (size_t i = 0; want && i < n_want; i++)
            want[i] = (int32_t)json_integer_value(json_array_get(jids, i));
        const char *text = json_string_value(jt);
        size_t text_len = json_string_length(jt);
        int ok = want && kipp_vocab_encode(v, text, text_len, 1, &ids, &n, err, sizeof err) ==
                             KIPP_OK;
        ok = ok && n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
        if (ok) kt_passed++;
        if (!ok && mismatches++ < 5) {
            fprintf(stderr, "  golden mismatch, line %d\n", lines);
            char *dump = json_dumps(jt, JSON_ENCODE_ANY);
            fprintf(stderr, "    text: %.200s\n", dump ? dump : "?");
            free(dump);
            print_ids("want", want, n_want);
            print_ids("got", ids, ids ? n : 0);
        }
        free(want);
        free(ids);
        json_decref(o);
    }
    free(all);
    kipp_vocab_free(v);
    if (bad)
        return -1;
    fprintf(stderr, "  golden: %d lines, %d mismatches\n", lines, mismatches);
    return mismatches;
}
