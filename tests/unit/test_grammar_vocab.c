/* test_grammar_vocab.c — `kipp_test --grammar-vocab MODEL`: token masks over a real
 * vocabulary (Qwen3's 151,669 tokens, multi-byte pieces, tokens that carry part of a
 * character, added tokens such as <tool_call>) checked against brute force: at every step of
 * random walks through several grammars, each token's mask bit must equal what
 * kipp_matcher_allows_token (the state advanced byte by byte) says. The walks prefer
 * multi-byte tokens so that characters split across tokens are visited. */
#include "engine/grammar.h"
#include "kipp.h"
#include "kt.h"

#include <stdlib.h>
#include <string.h>

static const char *const grammars[] = {
    /* JSON, as the schema front end writes it */
    "root ::= value\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws (string ws \":\" ws value ws (\",\" ws string ws \":\" ws value ws)*)? \"}\"\n"
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"
    "string ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))* \"\\\"\"\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"
    "ws ::= [ \\t\\n]{0,20}\n",
    /* non-ASCII only: every allowed token is a run of whole or partial CJK/Cyrillic/emoji */
    "root ::= ([\\u4e00-\\u9fff] | [\\u0400-\\u04ff] | [\\U0001F300-\\U0001F64F] | \" \")+ \"。\"\n",
    /* an added token's text as a literal: <tool_call> is one token or several */
    "root ::= \"<tool_call>\\n{\\\"name\\\": \\\"\" [a-z_]+ \"\\\"}\\n</tool_call>\"\n",
};

int kt_grammar_vocab(const char *gguf_path, const char *unused) {
    (void)unused;
    char err[KIPP_ERR_LEN];
    kipp_model *m;
    if (kipp_model_load(gguf_path, &m, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "grammar-vocab: %s\n", err);
        return -1;
    }
    kipp_token_trie *t;
    if (kipp_token_trie_build(m, &t, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "grammar-vocab: %s\n", err);
        kipp_model_free(m);
        return -1;
    }
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    const uint32_t nv = info.n_vocab, nw = (nv + 31) / 32;
    uint32_t *bits = malloc(nw * sizeof *bits);
    int32_t *allowed = malloc(nv * sizeof *allowed);
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int bad_total = 0;
    for (size_t gi = 0; gi < sizeof grammars / sizeof grammars[0]; gi++) {
        kipp_grammar *g;
        if (kipp_grammar_compile(grammars[gi], strlen(grammars[gi]), &g, err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "grammar %zu: %s", gi, err);
            continue;
        }
        for (int walk = 0; walk < 2; walk++) {
            kipp_matcher *mt;
            KT_CHECK(kipp_matcher_new(g, t, &mt, err, sizeof err) == KIPP_OK);
            int bad = 0, steps = 0, finished = 0;
            for (int step = 0; step < 12 && !finished; step++, steps++) {
                kipp_matcher_mask(mt, bits);
                uint32_t n_allowed = 0, n_multi = 0;
                for (uint32_t id = 0; id < nv; id++) {
                    const int want = kipp_matcher_allows_token(mt, (int32_t)id);
                    const int got = (int)((bits[id >> 5] >> (id & 31)) & 1);
                    if (want != got && bad++ < 5)
                        fprintf(stderr, "grammar %zu step %d: token %u mask %d, brute force %d\n", gi,
                                step, id, got, want);
                    if (want) {
                        size_t len;
                        const char *b = kipp_token_bytes(m, (int32_t)id, &len);
                        int multi = 0;
                        for (size_t k = 0; k < len; k++) multi |= (unsigned char)b[k] >= 0x80;
                        /* multi-byte tokens first in the list, so the walk can prefer them */
                        if (multi) {
                            allowed[n_allowed++] = allowed[n_multi];
                            allowed[n_multi++] = (int32_t)id;
                        } else {
                            allowed[n_allowed++] = (int32_t)id;
                        }
                    }
                }
                KT_CHECK(n_allowed > 0, "grammar %zu step %d: nothing allowed", gi, step);
                if (n_allowed == 0) break;
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                const uint32_t pool = n_multi && (rng >> 60) < 12 ? n_multi : n_allowed;
                const int32_t id = allowed[(rng >> 20) % pool];
                if (kipp_token_is_eog(m, id)) { finished = 1; break; }
                KT_CHECK(kipp_matcher_accept_token(mt, id) == 1);
            }
            KT_CHECK(bad == 0, "grammar %zu walk %d: %d of %u mask bits differ from brute force", gi,
                     walk, bad, nv * (uint32_t)steps);
            bad_total += bad;
            kipp_matcher_free(mt);
        }
        kipp_grammar_free(g);
    }
    free(bits);
    free(allowed);
    kipp_token_trie_free(t);
    kipp_model_free(m);
    return 0;
}
