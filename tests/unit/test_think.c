/* test_think.c — the reasoning gate in front of the matcher (src/engine/think.h), over a
 * nine-token vocabulary: each state's mask (which logits stay finite) and transitions, the
 * reasoning bound, the end of generation banned inside a constrained reasoning, the newline
 * gap after </think>, and the cases that start under the grammar. */
#include "engine/think.h"
#include "kt.h"

#include <math.h>
#include <string.h>

enum { T_OPEN, T_CLOSE, T_NL, T_NL2, T_A, T_B, T_LB, T_RB, T_EOG, N_TOK };
static const char *const toks[N_TOK] = {"<think>", "</think>", "\n", "\n\n", "a", "b", "{", "}", ""};
static const int32_t eog_ids[1] = {T_EOG};

/* The set of tokens left finite by apply, as a bit mask (finite logits must be unchanged). */
static unsigned allowed(kipp_think *t, kipp_matcher *mt) {
    float l[N_TOK];
    for (int i = 0; i < N_TOK; i++) l[i] = (float)i;
    kipp_think_apply(t, mt, l, N_TOK);
    unsigned bits = 0;
    for (int i = 0; i < N_TOK; i++)
        if (isfinite(l[i])) {
            bits |= 1u << i;
            KT_CHECK(l[i] == (float)i, "token %d's logit changed", i);
        }
    return bits;
}

#define B(x) (1u << (x))
#define ALL (B(N_TOK) - 1)

static kipp_matcher *new_matcher(const kipp_grammar *g, const kipp_token_trie *trie) {
    kipp_matcher *mt = NULL;
    char err[256];
    KT_CHECK(kipp_matcher_new(g, trie, &mt, err, sizeof err) == KIPP_OK, "%s", err);
    return mt;
}

void kt_suite_think(void) {
    char err[256];
    size_t lens[N_TOK];
    uint8_t is_eog[N_TOK] = {0};
    for (int i = 0; i < N_TOK; i++) lens[i] = strlen(toks[i]);
    is_eog[T_EOG] = 1;
    kipp_token_trie *trie = NULL;
    kipp_grammar *g = NULL;
    const char *gtext = "root ::= \"{\" \"a\"* \"}\"\n";
    if (kipp_token_trie_build_list(toks, lens, is_eog, N_TOK, &trie, err, sizeof err) != KIPP_OK ||
        kipp_grammar_compile(gtext, strlen(gtext), &g, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "set-up: %s", err);
        kipp_token_trie_free(trie);
        return;
    }
    const kipp_think_vocab v = {.open = T_OPEN, .close = T_CLOSE, .gap = {T_NL, T_NL2}, .eog = eog_ids,
                                .n_eog = 1};
    kipp_think t;

    /* no <think> first: the grammar from the first token */
    kipp_matcher *mt = new_matcher(g, trie);
    kipp_think_init_vocab(&t, &(kipp_think_params){.on = 1, .max_reasoning_tokens = 4}, &v);
    KT_CHECK(allowed(&t, mt) == (B(T_OPEN) | B(T_LB)), "start: %#x", allowed(&t, mt));
    KT_CHECK(!kipp_think_accept(&t, mt, T_A), "a non-grammar first token is refused");
    KT_CHECK(kipp_think_accept(&t, mt, T_LB) && !kipp_think_masks(&t));
    KT_CHECK(allowed(&t, mt) == (B(T_A) | B(T_RB)), "%#x", allowed(&t, mt));
    KT_CHECK(!kipp_think_accept(&t, mt, T_OPEN), "<think> is text once the grammar started");
    KT_CHECK(kipp_think_accept(&t, mt, T_RB) && allowed(&t, mt) == B(T_EOG));
    kipp_matcher_free(mt);

    /* <think> first: free reasoning (no end of generation), bound 2, gap, grammar */
    mt = new_matcher(g, trie);
    kipp_think_init_vocab(&t, &(kipp_think_params){.on = 1, .max_reasoning_tokens = 2}, &v);
    uint32_t n = 99;
    KT_CHECK(kipp_think_accept(&t, mt, T_OPEN) && kipp_think_in_reasoning(&t, &n) && n == 0);
    KT_CHECK(allowed(&t, mt) == (ALL & ~B(T_EOG)), "reasoning: %#x", allowed(&t, mt));
    KT_CHECK(!kipp_think_accept(&t, mt, T_EOG), "the end of generation cannot end the reasoning");
    KT_CHECK(kipp_think_accept(&t, mt, T_B) && kipp_think_accept(&t, mt, T_OPEN));
    KT_CHECK(kipp_think_in_reasoning(&t, &n) && n == 2);
    KT_CHECK(allowed(&t, mt) == B(T_CLOSE), "the bound: only </think>: %#x", allowed(&t, mt));
    KT_CHECK(!kipp_think_accept(&t, mt, T_A), "past the bound only </think>");
    KT_CHECK(kipp_think_accept(&t, mt, T_CLOSE) && !kipp_think_in_reasoning(&t, NULL));
    KT_CHECK(allowed(&t, mt) == (B(T_NL) | B(T_NL2) | B(T_LB)), "gap: %#x", allowed(&t, mt));
    KT_CHECK(kipp_think_accept(&t, mt, T_NL2) && kipp_think_accept(&t, mt, T_NL));
    KT_CHECK(allowed(&t, mt) == B(T_LB), "two gap tokens at most: %#x", allowed(&t, mt));
    KT_CHECK(!kipp_think_accept(&t, mt, T_NL));
    KT_CHECK(kipp_think_accept(&t, mt, T_LB) && kipp_think_accept(&t, mt, T_RB));
    KT_CHECK(kipp_matcher_complete(mt) && !kipp_think_masks(&t));
    kipp_matcher_free(mt);

    /* bound 0: <think> cannot open; in the prompt, </think> at once */
    mt = new_matcher(g, trie);
    kipp_think_init_vocab(&t, &(kipp_think_params){.on = 1, .max_reasoning_tokens = 0}, &v);
    KT_CHECK(allowed(&t, mt) == B(T_LB), "%#x", allowed(&t, mt));
    KT_CHECK(!kipp_think_accept(&t, mt, T_OPEN));
    kipp_matcher_free(mt);
    mt = new_matcher(g, trie);
    kipp_think_init_vocab(&t, &(kipp_think_params){.on = 1, .in_prompt = 1, .max_reasoning_tokens = 0}, &v);
    KT_CHECK(kipp_think_in_reasoning(&t, NULL) && allowed(&t, mt) == B(T_CLOSE));
    kipp_matcher_free(mt);

    /* in the prompt, unbounded: the reasoning goes on until </think> */
    mt = new_matcher(g, trie);
    kipp_think_init_vocab(&t, &(kipp_think_params){.on = 1, .in_prompt = 1,
                                                   .max_reasoning_tokens = KIPP_THINK_NO_BOUND}, &v);
    int all_ok = 1;
    for (int i = 0; i < 100; i++) all_ok &= kipp_think_accept(&t, mt, T_A);
    KT_CHECK(all_ok && kipp_think_accept(&t, mt, T_CLOSE) && kipp_think_accept(&t, mt, T_LB));
    kipp_matcher_free(mt);

    /* off, or a vocabulary without </think>: the grammar from the first token */
    mt = new_matcher(g, trie);
    kipp_think_init_vocab(&t, &(kipp_think_params){.on = 0, .max_reasoning_tokens = 4}, &v);
    KT_CHECK(allowed(&t, mt) == B(T_LB) && !kipp_think_masks(&t));
    kipp_think_init_vocab(&t, NULL, &v);
    KT_CHECK(allowed(&t, mt) == B(T_LB) && !kipp_think_masks(&t));
    kipp_think_vocab no_close = v;
    no_close.close = -1;
    kipp_think_init_vocab(&t, &(kipp_think_params){.on = 1, .in_prompt = 1, .max_reasoning_tokens = 4},
                          &no_close);
    KT_CHECK(allowed(&t, mt) == B(T_LB) && !kipp_think_masks(&t));
    kipp_matcher_free(mt);

    /* no grammar: only the bound; the end of generation may end the reasoning */
    kipp_think_init_vocab(&t, &(kipp_think_params){.on = 1, .max_reasoning_tokens = 1}, &v);
    KT_CHECK(allowed(&t, NULL) == ALL && kipp_think_masks(&t));
    KT_CHECK(kipp_think_accept(&t, NULL, T_OPEN) && allowed(&t, NULL) == ALL);
    KT_CHECK(kipp_think_accept(&t, NULL, T_A) && allowed(&t, NULL) == B(T_CLOSE));
    KT_CHECK(kipp_think_accept(&t, NULL, T_CLOSE) && kipp_think_accept(&t, NULL, T_B));
    KT_CHECK(!kipp_think_masks(&t) && allowed(&t, NULL) == ALL);
    kipp_think_init_vocab(&t, &(kipp_think_params){.on = 1, .max_reasoning_tokens = 5}, &v);
    KT_CHECK(kipp_think_accept(&t, NULL, T_OPEN) && kipp_think_accept(&t, NULL, T_EOG));

    kipp_grammar_free(g);
    kipp_token_trie_free(trie);
}
