/* test_detok_paths.c — `kipp_test --detok-paths MODEL CORPUS`: every front end streams
 * generated text through one detokenizer (kipp_detokenizer_next/_end). For each line of a
 * corpus of multi-byte text, the ids it encodes to — and the same bytes re-split into one
 * single-byte token each, so 4-byte characters arrive 1+1+1+1 — go through the path kipp
 * and kipp-chat print from and the server's (oai_gen: stop-string hold-back, text_offset),
 * and must give exactly the whole-sequence decode, which must be the line (NFC) itself.
 * Special tokens are dropped and non-special added tokens (<think>, <|fim_prefix|>) kept:
 * HF's skip_special_tokens=True. */
#include "kt.h"
#include "server/openai.h"

#include <stdlib.h>
#include <string.h>

static size_t n_chars(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* kipp and kipp-chat: concatenated _next/_end output. malloc'd. */
static char *stream_cli(const kipp_model *m, const int32_t *ids, size_t n, size_t *len) {
    kipp_detokenizer *dt = NULL;
    char err[KIPP_ERR_LEN];
    kipp_buf out = {0};
    KT_CHECK(kipp_detokenizer_init(m, 1, &dt, err, sizeof err) == KIPP_OK, "%s", err);
    if (!dt) return NULL;
    for (size_t i = 0; i <= n; i++) {
        const char *t;
        size_t k;
        kipp_status st = i < n ? kipp_detokenizer_next(dt, ids[i], &t, &k)
                               : kipp_detokenizer_end(dt, &t, &k);
        KT_CHECK(st == KIPP_OK, "token %zu (id %d)", i, i < n ? ids[i] : -1);
        kipp_buf_put(&out, t, k);
    }
    kipp_detokenizer_free(dt);
    *len = out.len;
    return out.data ? out.data : strdup("");
}

/* The server: oai_gen over the same ids (completions endpoint, no stop strings, and with a
 * stop string that never matches but makes every '\xF0'-led tail be held back). The corpus
 * has end-of-generation tokens (<|fim_pad|>, ...) in the middle of lines, which only
 * ignore_eos lets through a server reply (without it the token that ends a reply adds no
 * text): ignore_eos is set. */
static char *stream_server(const kipp_model *m, const int32_t *ids, size_t n, size_t *len,
                           const char *never_stop, uint32_t **offsets) {
    oai_request rq;
    memset(&rq, 0, sizeof rq);
    rq.ep = OAI_COMPLETIONS;
    rq.ignore_eos = 1;
    char *stop = never_stop ? strdup(never_stop) : NULL;
    if (stop) rq.stop[rq.n_stop++] = stop;
    oai_gen g;
    KT_CHECK(oai_gen_init(&g, m, &rq) == 0);
    for (size_t i = 0; i < n; i++) {
        kipp_gen_token t;
        memset(&t, 0, sizeof t);
        t.id = ids[i];
        KT_CHECK(oai_gen_push(&g, &t) == 0, "token %zu (id %d) stopped the stream", i, ids[i]);
    }
    oai_gen_finish(&g);
    KT_CHECK(!g.oom && g.n_used == n);
    char *s = malloc(g.content.len + 1);
    memcpy(s, g.content.data ? g.content.data : "", g.content.len);
    s[g.content.len] = 0;
    *len = g.content.len;
    if (offsets) {
        *offsets = malloc((n + 1) * sizeof **offsets);
        memcpy(*offsets, g.text_offset, n * sizeof **offsets);
    }
    oai_gen_free(&g);
    free(stop);
    return s;
}

/* One id sequence through every path; want (whole decode) must come out of each. */
static void check_ids(const kipp_model *m, const int32_t *ids, size_t n, const char *want,
                      size_t want_len, const char *what, size_t line) {
    size_t l1 = 0, l2 = 0, l3 = 0;
    uint32_t *off = NULL;
    char *cli = stream_cli(m, ids, n, &l1);
    char *srv = stream_server(m, ids, n, &l2, NULL, &off);
    char *srv_stop = stream_server(m, ids, n, &l3, "\xF0\x9F\x98\x80\xF0\x9F\x98\x80!", NULL);
    KT_CHECK(cli && l1 == want_len && memcmp(cli, want, want_len) == 0,
             "line %zu (%s): kipp/kipp-chat stream gives '%.*s', whole decode '%s'", line, what,
             (int)l1, cli ? cli : "", want);
    KT_CHECK(l2 == want_len && memcmp(srv, want, want_len) == 0,
             "line %zu (%s): server stream gives '%.*s', whole decode '%s'", line, what,
             (int)l2, srv, want);
    KT_CHECK(l3 == want_len && memcmp(srv_stop, want, want_len) == 0,
             "line %zu (%s): server stream with a stop string gives '%.*s', want '%s'", line,
             what, (int)l3, srv_stop, want);
    /* text_offset: 0 first, never decreasing, and where the ids before a token decode to a
     * prefix of the text, exactly that prefix's length in characters */
    for (size_t i = 0; off && i < n; i++) {
        char *pre = NULL;
        size_t pl = 0;
        KT_CHECK(kipp_detokenize(m, ids, i, 1, &pre, &pl, NULL, 0) == KIPP_OK);
        if (pl <= want_len && memcmp(pre, want, pl) == 0)
            KT_CHECK(off[i] == n_chars(pre, pl), "line %zu (%s): text_offset[%zu] = %u, want %zu",
                     line, what, i, off[i], n_chars(pre, pl));
        if (i) KT_CHECK(off[i] >= off[i - 1], "line %zu: text_offset decreases at %zu", line, i);
        free(pre);
    }
    free(cli);
    free(srv);
    free(srv_stop);
    free(off);
}

int kt_detok_paths(const char *gguf_path, const char *corpus_path) {
    int failed0 = kt_failed;
    kipp_model *m = NULL;
    char err[KIPP_ERR_LEN];
    if (kipp_model_load(gguf_path, &m, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "detok-paths: %s\n", err);
        return -1;
    }
    FILE *f = fopen(corpus_path, "rb");
    if (!f) {
        fprintf(stderr, "detok-paths: cannot open %s\n", corpus_path);
        kipp_model_free(m);
        return -1;
    }
    /* the single-byte token of each byte value (byte-level BPE has all 256) */
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    int32_t byte_id[256];
    for (int b = 0; b < 256; b++) byte_id[b] = -1;
    for (uint32_t id = 0; id < info.n_vocab; id++) {
        size_t k;
        const char *t = kipp_token_bytes(m, (int32_t)id, &k);
        if (t && k == 1 && byte_id[(unsigned char)t[0]] < 0 && !kipp_token_is_eog(m, (int32_t)id))
            byte_id[(unsigned char)t[0]] = (int32_t)id;
    }
    char *line = NULL;
    size_t cap = 0, n_lines = 0, n_split = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) > 0) {
        size_t len = (size_t)got;
        if (line[len - 1] == '\n') line[--len] = 0;
        if (len == 0 || line[0] == '#') continue;
        n_lines++;
        int32_t *ids = NULL;
        size_t n = 0;
        KT_CHECK(kipp_tokenize_alloc(m, line, len, 1, &ids, &n, err, sizeof err) == KIPP_OK,
                 "%s", err);
        char *want = NULL;
        size_t want_len = 0;
        KT_CHECK(kipp_detokenize(m, ids, n, 1, &want, &want_len, err, sizeof err) == KIPP_OK);
        check_ids(m, ids, n, want, want_len, "encoded ids", n_lines);
        /* the same bytes, one single-byte token each (special tokens, which have no bytes, stay) */
        int32_t *split = NULL;
        size_t n_s = 0, cap_s = 0;
        for (size_t i = 0; i < n; i++) {
            size_t k;
            const char *t = kipp_token_bytes(m, ids[i], &k);
            int plain = k > 1;
            for (size_t q = 0; plain && q < k; q++) plain = byte_id[(unsigned char)t[q]] >= 0;
            size_t add = plain ? k : 1;
            if (n_s + add > cap_s) {
                cap_s = 2 * (n_s + add);
                split = realloc(split, cap_s * sizeof *split);
            }
            if (plain) {
                for (size_t q = 0; q < k; q++) split[n_s++] = byte_id[(unsigned char)t[q]];
                n_split++;
            } else {
                split[n_s++] = ids[i];
            }
        }
        check_ids(m, split, n_s, want, want_len, "one token per byte", n_lines);
        free(split);
        free(want);
        free(ids);
    }
    free(line);
    fclose(f);
    KT_CHECK(n_lines >= 20, "corpus %s has only %zu lines", corpus_path, n_lines);
    KT_CHECK(n_split > 0, "no token was split into bytes");

    kipp_model_free(m);
    printf("detok-paths: %zu lines, %zu tokens re-split into bytes\n", n_lines, n_split);
    return kt_failed - failed0;
}
