/* test_grammar.c — the EBNF compiler and the matcher: compile errors name what is wrong,
 * byte-level acceptance (UTF-8 classes checked code point by code point against the class
 * definition), repetition bounds, flat stacks for long repetitions, token masks checked
 * against brute force (every token tried on a fresh matcher that replays the output), the
 * compile-time cost bound, the run-time expansion limit, the per-token time limit and the
 * yield deadline the scheduler tries masks under. */
#include "engine/grammar.h"
#include "kt.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kipp_grammar *compile(const char *text) {
    kipp_grammar *g = NULL;
    char err[512];
    if (kipp_grammar_compile(text, strlen(text), &g, err, sizeof err) != KIPP_OK)
        fprintf(stderr, "grammar failed to compile: %s\n", err);
    return g;
}

/* 1 if the bytes are accepted and (want_complete) end a sentence. */
static int matches(const kipp_grammar *g, const char *s, size_t n) {
    kipp_matcher *m;
    char err[256];
    if (kipp_matcher_new(g, NULL, &m, err, sizeof err) != KIPP_OK) return -1;
    int ok = kipp_matcher_accept_bytes(m, s, n) && kipp_matcher_complete(m);
    kipp_matcher_free(m);
    return ok;
}
static int matches_s(const kipp_grammar *g, const char *s) { return matches(g, s, strlen(s)); }

static void check_error(const char *text, const char *want) {
    kipp_grammar *g = NULL;
    char err[512] = "";
    kipp_status st = kipp_grammar_compile(text, strlen(text), &g, err, sizeof err);
    KT_CHECK(st != KIPP_OK && g == NULL && strstr(err, want) != NULL, "grammar %s: got '%s', want '%s'",
             text, err, want);
    kipp_grammar_free(g);
}

static void test_errors(void) {
    check_error("root ::= a", "rule 'a' is used but not defined");
    check_error("a ::= \"x\"", "no rule named 'root'");
    check_error("root ::= root \"x\"", "rule 'root' is left-recursive");
    check_error("root ::= b\nb ::= c? b \"x\"\nc ::= \"y\"", "left-recursive");
    check_error("root ::= (\"a\" | root) \"x\"", "left-recursive");
    check_error("root ::= \"x\"{1001}", "above 1000");
    check_error("root ::= \"x\"{3,2}", "below its minimum");
    check_error("root ::= \"abc", "not closed");
    check_error("root ::= [abc", "not closed");
    check_error("root ::= (\"a\"", "not closed");
    check_error("root ::= \"\\q\"", "unknown escape");
    check_error("root ::= \"\\uD800\"", "not a character");
    check_error("root ::= []", "matches nothing");
    check_error("root ::= [z-a]", "backwards");
    check_error("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    check_error("root ::= \"\xC3\x28\"", "not valid UTF-8");
    check_error("root ::= \"a\" )", "unexpected ')'");
    check_error("root = \"a\"", "expected '::='");
    /* right recursion and recursion after a byte are fine */
    kipp_grammar *g = compile("root ::= \"(\" root \")\" | \"x\"");
    KT_CHECK(g != NULL);
    if (g) {
        KT_CHECK(matches_s(g, "((x))") == 1);
        KT_CHECK(matches_s(g, "((x)") == 0);
        KT_CHECK(matches_s(g, "(x))") == 0);
    }
    kipp_grammar_free(g);
}

static void test_bytes(void) {
    kipp_grammar *g = compile("# a comment\nroot ::= \"ab\" [0-9]+ (\"x\" | \"yz\")? tail # end\n"
                              "tail ::= | \"!\"\n");
    KT_CHECK(g != NULL);
    if (!g) return;
    KT_CHECK(matches_s(g, "ab1") == 1);
    KT_CHECK(matches_s(g, "ab12yz!") == 1);
    KT_CHECK(matches_s(g, "ab0x") == 1);
    KT_CHECK(matches_s(g, "abx") == 0);
    KT_CHECK(matches_s(g, "ab") == 0);
    KT_CHECK(matches_s(g, "ab1y") == 0);
    KT_CHECK(matches_s(g, "ab1xx") == 0);
    /* a rejected byte leaves the state as it was */
    kipp_matcher *m;
    char err[256];
    KT_CHECK(kipp_matcher_new(g, NULL, &m, err, sizeof err) == KIPP_OK);
    KT_CHECK(kipp_matcher_accept_bytes(m, "ab", 2) == 1 && kipp_matcher_complete(m) == 0);
    KT_CHECK(kipp_matcher_accept_bytes(m, "9q", 2) == 0);
    KT_CHECK(kipp_matcher_accept_bytes(m, "9", 1) == 1 && kipp_matcher_complete(m) == 1);
    KT_CHECK(kipp_matcher_finished(m) == 0);
    KT_CHECK(kipp_matcher_accept_bytes(m, "yz!", 3) == 1 && kipp_matcher_finished(m) == 1);
    kipp_matcher_free(m);
    kipp_grammar_free(g);

    g = compile("root ::= \"a\"{2,4} \"b\"{3} \"c\"{2,}\n");
    KT_CHECK(g != NULL);
    if (g) {
        KT_CHECK(matches_s(g, "aabbbcc") == 1);
        KT_CHECK(matches_s(g, "aaaabbbccccc") == 1);
        KT_CHECK(matches_s(g, "abbbcc") == 0);
        KT_CHECK(matches_s(g, "aaaaabbbcc") == 0);
        KT_CHECK(matches_s(g, "aabbcc") == 0);
        KT_CHECK(matches_s(g, "aabbbc") == 0);
    }
    kipp_grammar_free(g);

    /* escapes; multi-line groups */
    g = compile("root ::= \"\\x41\\u00e9\\U0001F600\\n\\\"\" (\n  \"p\" |\n  \"q\"\n)\n");
    KT_CHECK(g != NULL);
    if (g) KT_CHECK(matches_s(g, "A\xC3\xA9\xF0\x9F\x98\x80\n\"q") == 1);
    kipp_grammar_free(g);

    /* a long repetition runs in a flat stack (tail calls): 200,000 bytes */
    g = compile("root ::= \"[\" [a-z]* \"]\"");
    KT_CHECK(g != NULL);
    if (g) {
        size_t n = 200002;
        char *s = malloc(n);
        s[0] = '[';
        memset(s + 1, 'k', n - 2);
        s[n - 1] = ']';
        KT_CHECK(matches(g, s, n) == 1);
        free(s);
    }
    kipp_grammar_free(g);
}

static size_t enc(uint32_t cp, char *b) {
    if (cp < 0x80) { b[0] = (char)cp; return 1; }
    if (cp < 0x800) { b[0] = (char)(0xC0 | cp >> 6); b[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | (cp >> 6 & 0x3F)), b[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    b[2] = (char)(0x80 | (cp >> 6 & 0x3F)), b[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Classes over code points: every code point in a sample (all boundaries of the UTF-8
 * lengths and of the class ranges, plus a stride) is accepted exactly when it is in the
 * class, encoded as UTF-8; surrogates and malformed bytes never are. */
static void test_utf8_classes(void) {
    static const struct { const char *g; uint32_t lo[4], hi[4]; int n, neg; } cases[] = {
        {"root ::= [a-z\\u00e0-\\u00ff\\u3040-\\u30ff\\U0001F300-\\U0001F5FF]",
         {'a', 0xE0, 0x3040, 0x1F300}, {'z', 0xFF, 0x30FF, 0x1F5FF}, 4, 0},
        {"root ::= [^\"\\\\\\x00-\\x1f]", {'"', '\\', 0, 0}, {'"', '\\', 0x1F, 0}, 3, 1},
        {"root ::= [\\u07ff-\\u0801\\uffff-\\U00010001]", {0x7FF, 0xFFFF, 0, 0}, {0x801, 0x10001, 0, 0}, 2, 0},
        {"root ::= .", {0, 0, 0, 0}, {0x10FFFF, 0, 0, 0}, 1, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kipp_grammar *g = compile(cases[c].g);
        KT_CHECK(g != NULL);
        if (!g) continue;
        int bad = 0;
        uint32_t pts[4096];
        int np = 0;
        static const uint32_t edges[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF,
                                         0x10000, 0x10FFFF, 0x3F, 0x40, 0xFFF, 0x1000, 0x3FFFF, 0x40000};
        for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++) pts[np++] = edges[k];
        for (int r = 0; r < cases[c].n; r++)
            for (int d = -1; d <= 1; d++) {
                pts[np++] = cases[c].lo[r] + (uint32_t)d;
                pts[np++] = cases[c].hi[r] + (uint32_t)d;
            }
        for (uint32_t cp = 1; cp < 0x110000 && np < 4096; cp += 313) pts[np++] = cp;
        for (int k = 0; k < np; k++) {
            const uint32_t cp = pts[k];
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
            int in = 0;
            for (int r = 0; r < cases[c].n; r++) in |= cp >= cases[c].lo[r] && cp <= cases[c].hi[r];
            if (cases[c].neg) in = !in;
            char b[4];
            size_t nb = enc(cp, b);
            if (matches(g, b, nb) != in) {
                if (bad++ < 5) fprintf(stderr, "class %s: U+%04X accepted=%d\n", cases[c].g, cp, !in);
            }
        }
        KT_CHECK(bad == 0, "%d code points misclassified", bad);
        /* never a surrogate, an overlong form or a stray continuation byte */
        KT_CHECK(matches(g, "\xED\xA0\x80", 3) == 0);
        KT_CHECK(matches(g, "\xC0\x80", 2) == 0);
        KT_CHECK(matches(g, "\xE0\x80\x80", 3) == 0);
        KT_CHECK(matches(g, "\x80", 1) == 0);
        KT_CHECK(matches(g, "\xF4\x90\x80\x80", 4) == 0);
        kipp_grammar_free(g);
    }
}

/* Masks vs brute force on a small vocabulary with multi-byte pieces. */
static void test_masks(void) {
    static const char *const toks[] = {
        "a", "b", "ab", "ba", "abc", "c", "\xC3", "\xA9", "\xC3\xA9", "", "<eos>", "cc", "\"",
        "x\"", "\",", "{", "}", "{\"", "\":", " ", "1", "12", "0", "-", "e", "9", ",\"",
    };
    enum { N = sizeof toks / sizeof toks[0] };
    size_t lens[N];
    uint8_t eog[N] = {0};
    for (int i = 0; i < N; i++) lens[i] = strlen(toks[i]);
    lens[10] = 0; /* the eos token has no text */
    eog[10] = 1;
    kipp_token_trie *t;
    char err[256];
    KT_CHECK(kipp_token_trie_build_list(toks, lens, eog, N, &t, err, sizeof err) == KIPP_OK);
    static const char *const grammars[] = {
        "root ::= \"ab\" \"c\"*",
        "root ::= \"{\" (\"\\\"\" [a-c\\u00e9x]* \"\\\":\" num (\",\" \"\\\"\" [a-c]* \"\\\":\" num)*)? \"}\"\n"
        "num ::= \"-\"? ([1-9] [0-9]* | \"0\")\n",
        "root ::= [^\"]* \"\\\"\"",
        /* ambiguous: several stacks match the same byte (merged states) */
        "root ::= (\"a\" \"b\"* | \"a\" [bc]* | \"ab\" \"c\"?) (\"\\\"\" | \"cc\")",
    };
    uint64_t rng = 12345;
    for (size_t gi = 0; gi < sizeof grammars / sizeof grammars[0]; gi++) {
        kipp_grammar *g = compile(grammars[gi]);
        KT_CHECK(g != NULL);
        if (!g) continue;
        for (int walk = 0; walk < 30; walk++) {
            kipp_matcher *m;
            KT_CHECK(kipp_matcher_new(g, t, &m, err, sizeof err) == KIPP_OK);
            int hist[64], nh = 0, bad = 0;
            for (int step = 0; step < 40; step++) {
                uint32_t bits[1];
                kipp_matcher_mask(m, bits);
                int allowed[N], n_allowed = 0;
                for (int id = 0; id < N; id++) {
                    kipp_matcher *f; /* brute force: replay the history, then try the token */
                    kipp_matcher_new(g, t, &f, err, sizeof err);
                    for (int h = 0; h < nh; h++) kipp_matcher_accept_token(f, hist[h]);
                    const int ok = kipp_matcher_accept_token(f, id);
                    kipp_matcher_free(f);
                    const int got = (bits[0] >> id) & 1;
                    if (ok != got && bad++ < 3)
                        fprintf(stderr, "grammar %zu step %d token %d: mask %d, brute force %d\n", gi, step, id, got, ok);
                    if (ok) allowed[n_allowed++] = id;
                }
                float logits[N];
                for (int id = 0; id < N; id++) logits[id] = 0.0f;
                kipp_matcher_apply(m, logits, N);
                int n_finite = 0;
                for (int id = 0; id < N; id++) n_finite += isfinite(logits[id]);
                KT_CHECK(n_finite == n_allowed, "apply keeps %d, mask allows %d", n_finite, n_allowed);
                if (n_allowed == 0) break;
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                const int id = allowed[(rng >> 33) % (uint64_t)n_allowed];
                if (eog[id]) {
                    KT_CHECK(kipp_matcher_complete(m) == 1);
                    break;
                }
                KT_CHECK(kipp_matcher_accept_token(m, id) == 1);
                hist[nh++] = id;
            }
            KT_CHECK(bad == 0, "grammar %zu: %d mask bits differ from brute force", gi, bad);
            kipp_matcher_stats st;
            kipp_matcher_get_stats(m, &st);
            KT_CHECK(st.masks > 0);
            if (gi == 2 && walk == 0) KT_CHECK(st.cache_hits > 0, "a repeated state was not served from the cache");
            kipp_matcher_free(m);
        }
        kipp_grammar_free(g);
    }
    /* a walk over its work budget: a partial mask, every token in it allowed, counted */
    kipp_grammar *gb = compile(grammars[1]);
    kipp_matcher *mb;
    if (gb && kipp_matcher_new(gb, t, &mb, err, sizeof err) == KIPP_OK) {
        KT_CHECK(kipp_matcher_accept_token(mb, 15) == 1); /* "{" */
        kipp_matcher_set_work_budget(mb, 3);
        uint32_t bits[1];
        kipp_matcher_mask(mb, bits);
        int n_set = 0, n_allowed = 0, wrong = 0;
        for (int id = 0; id < N; id++) {
            const int a = kipp_matcher_allows_token(mb, id), b = (int)((bits[0] >> id) & 1);
            n_set += b, n_allowed += a, wrong += b && !a;
        }
        kipp_matcher_stats st;
        kipp_matcher_get_stats(mb, &st);
        KT_CHECK(st.partial == 1 && wrong == 0 && n_set < n_allowed, "partial %llu, set %d of %d allowed, %d wrong",
                 (unsigned long long)st.partial, n_set, n_allowed, wrong);
        kipp_matcher_set_work_budget(mb, 1u << 30);
        kipp_matcher_mask(mb, bits); /* not cached: computed again, whole */
        n_set = 0;
        for (int id = 0; id < N; id++) n_set += (int)((bits[0] >> id) & 1);
        KT_CHECK(n_set == n_allowed, "after the budget is raised: %d of %d", n_set, n_allowed);
        kipp_matcher_free(mb);
    }
    kipp_grammar_free(gb);
    /* a token that is not allowed leaves the state unchanged */
    kipp_grammar *g = compile("root ::= \"ab\"");
    kipp_matcher *m;
    if (g && kipp_matcher_new(g, t, &m, err, sizeof err) == KIPP_OK) {
        KT_CHECK(kipp_matcher_accept_token(m, 1) == 0); /* "b" */
        KT_CHECK(kipp_matcher_accept_token(m, 10) == 0); /* eos before the end */
        KT_CHECK(kipp_matcher_accept_token(m, 2) == 1 && kipp_matcher_finished(m));
        KT_CHECK(kipp_matcher_accept_token(m, 10) == 1);
        KT_CHECK(kipp_matcher_accept_token(m, 9) == 0); /* no text: never allowed */
        kipp_matcher_free(m);
    }
    kipp_grammar_free(g);
    kipp_token_trie_free(t);
}

/* Appends printf-style text to a malloc'd string (the tests' grammars that are too long to
 * write out). */
static void cat(char **s, size_t *n, size_t *cap, const char *fmt, int a, int b) {
    char tmp[128];
    const int k = snprintf(tmp, sizeof tmp, fmt, a, b);
    if (*n + (size_t)k + 1 > *cap) {
        *cap = 2 * (*n + (size_t)k + 1);
        *s = realloc(*s, *cap);
    }
    memcpy(*s + *n, tmp, (size_t)k + 1);
    *n += (size_t)k;
}

/* root ::= r1, r1 ::= r2, ..., r<n> ::= "a": n rule expansions before the first byte. */
static char *chain(int n) {
    char *s = NULL;
    size_t len = 0, cap = 0;
    cat(&s, &len, &cap, "root ::= r1\n", 0, 0);
    for (int i = 1; i < n; i++) cat(&s, &len, &cap, "r%d ::= r%d\n", i, i + 1);
    cat(&s, &len, &cap, "r%d ::= \"a\"\n", n, 0);
    return s;
}

/* The compile-time cost bound (docs/grammar.md "Limits"): grammars whose resolve would be
 * cut short (more than 4,096 expansions before a byte) or whose masks cost the square of an
 * ambiguity (more than 64 empty paths) are refused, naming the rule, the line and the limit;
 * grammars at the limits compile and work. */
static void test_cost_bound(void) {
    /* issue 30: one mask took 7 s, three deep held the engine for 82 s */
    check_error("root ::= ((\"x\"{0,1000}){0,1000})", "grammar line 1: rule 'root' can match the empty string");
    check_error("root ::= ((\"x\"{0,1000}){0,1000})", "the limit is 64");
    check_error("root ::= (((\"x\"{0,1000}){0,1000}){0,1000})", "the limit is");
    check_error("root ::= (\"x\"?){0,64}", "65 ways");
    check_error("root ::= item \",\"\n# a comment\nitem ::= \"[\" (\"a\"? \"b\"?){0,100} \"]\"",
                "grammar line 3: rule 'item' can match the empty string in 65 ways");
    kipp_grammar *g = compile("root ::= (\"x\"?){0,63} \"!\""); /* 64 ways: at the limit */
    KT_CHECK(g != NULL);
    if (g) KT_CHECK(matches_s(g, "xxx!") == 1 && matches_s(g, "!") == 1);
    kipp_grammar_free(g);
    g = compile("root ::= (\"x\"{1,1000}){0,1000} | ([a-z] [0-9]?){0,1000}"); /* not empty: fine */
    KT_CHECK(g != NULL);
    kipp_grammar_free(g);
    /* issue 30 item 7: a chain of 4,097 rules that only name the next one answered every
     * request with "the grammar allows no token" (a 500); now a compile error */
    char *c = chain(4096);
    g = compile(c);
    KT_CHECK(g != NULL, "a chain of 4096 rules is within the limit");
    if (g) KT_CHECK(matches_s(g, "a") == 1 && matches_s(g, "") == 0);
    kipp_grammar_free(g);
    free(c);
    c = chain(4097);
    check_error(c, "grammar line 1: rule 'root' needs 4097 rule expansions before it matches a character; "
                   "the limit is 4096");
    free(c);
    c = chain(20000); /* the error points where the limit is crossed, not at root */
    check_error(c, "grammar line 15904: rule 'r15903' needs 4097 rule expansions");
    free(c);
}

/* A byte after which several stacks each need many expansions: each stack gets the full
 * expansion budget when a token is accepted, as it does in the mask (a budget shared by all
 * stacks of a step cut the last alternatives, and the mask allowed a token accept refused). */
static void test_resolve_budget_per_stack(void) {
    char *s = NULL;
    size_t len = 0, cap = 0;
    cat(&s, &len, &cap, "root ::= \"a\" c1-1", 0, 0);
    for (int k = 2; k <= 5; k++) cat(&s, &len, &cap, " | \"a\" c%d-1", k, 0);
    cat(&s, &len, &cap, "\n", 0, 0);
    for (int k = 1; k <= 5; k++) {
        for (int i = 1; i < 1000; i++) {
            cat(&s, &len, &cap, "c%d-%d ::= ", k, i);
            cat(&s, &len, &cap, "c%d-%d\n", k, i + 1);
        }
        cat(&s, &len, &cap, "c%d-1000 ::= \"%d\"\n", k, k);
    }
    kipp_grammar *g = compile(s);
    KT_CHECK(g != NULL);
    if (g)
        for (int k = 1; k <= 5; k++) {
            char w[3] = {'a', (char)('0' + k), 0};
            KT_CHECK(matches_s(g, w) == 1, "\"%s\" (alternative %d, 5 x 1000 expansions after the 'a')", w, k);
        }
    kipp_grammar_free(g);
    free(s);
}

/* A closure that climbs out of its rule into the callers (their rest can be empty): 3,000
 * expansions inside the rule and 3,000 in the caller pass the compile-time bound (per
 * position) and must work; one that climbs through 20 callers of 4,000 each is past the
 * run-time limit and fails visibly, naming it, instead of silently losing the stacks. */
/* Nested parentheses whose closing one sits at the end of a chain of 4,000 pass-through
 * rules: each "(" costs 4,000 expansions before the next character. */
static kipp_grammar *paren_chain(void) {
    char *s = NULL;
    size_t len = 0, cap = 0;
    cat(&s, &len, &cap, "root ::= r\nr ::= \"(\" r p1 | \"x\"\n", 0, 0);
    for (int i = 1; i < 4000; i++) cat(&s, &len, &cap, "p%d ::= p%d\n", i, i + 1);
    cat(&s, &len, &cap, "p4000 ::= \")\" | \"\"\n", 0, 0);
    kipp_grammar *g = compile(s);
    free(s);
    return g;
}

static void test_resolve_climbs(void) {
    char *s = NULL;
    size_t len = 0, cap = 0;
    cat(&s, &len, &cap, "root ::= a c1\na ::= \"x\" b1 | \"y\"\n", 0, 0);
    for (int i = 1; i < 3000; i++) cat(&s, &len, &cap, "b%d ::= b%d\n", i, i + 1);
    cat(&s, &len, &cap, "b3000 ::= \"q\" | \"\"\n", 0, 0);
    for (int i = 1; i < 3000; i++) cat(&s, &len, &cap, "c%d ::= c%d\n", i, i + 1);
    cat(&s, &len, &cap, "c3000 ::= \"z\"\n", 0, 0);
    kipp_grammar *g = compile(s);
    KT_CHECK(g != NULL);
    if (g) KT_CHECK(matches_s(g, "xz") == 1 && matches_s(g, "xqz") == 1 && matches_s(g, "yz") == 1);
    kipp_grammar_free(g);
    free(s);
    g = paren_chain();
    KT_CHECK(g != NULL);
    kipp_matcher *m;
    char err[256];
    if (g && kipp_matcher_new(g, NULL, &m, err, sizeof err) == KIPP_OK) {
        KT_CHECK(kipp_matcher_accept_bytes(m, "((((((((((", 10) == 1);
        KT_CHECK(kipp_matcher_accept_bytes(m, "((((((((((x", 11) == 0);
        const char *e = kipp_matcher_error(m);
        KT_CHECK(e != NULL && strstr(e, "more than 65536 rule expansions") != NULL, "error: %s", e ? e : "(none)");
        kipp_matcher_free(m);
    }
    if (g && kipp_matcher_new(g, NULL, &m, err, sizeof err) == KIPP_OK) { /* 10 deep: fine */
        KT_CHECK(kipp_matcher_accept_bytes(m, "((((((((((x))", 13) == 1 && kipp_matcher_complete(m) == 1);
        KT_CHECK(kipp_matcher_error(m) == NULL);
        kipp_matcher_free(m);
    }
    kipp_grammar_free(g);
}

/* The expansion limit reached through a chain of 4,000 pass-through rules, on a thread
 * with a 256 KiB stack (the server's matcher runs on its own threads): resolve follows
 * the chain on an explicit stack, so this ends with the limit's error. As C recursion
 * (65,536 expansions deep, ~5 MB) it overflowed such a stack and the process died. */
static void *climb_small_stack(void *arg) {
    kipp_grammar *g = arg;
    kipp_matcher *m;
    char err[256];
    static int ok;
    ok = 0;
    if (kipp_matcher_new(g, NULL, &m, err, sizeof err) == KIPP_OK) {
        const int rejected = kipp_matcher_accept_bytes(m, "((((((((((", 10) == 1 &&
                             kipp_matcher_accept_bytes(m, "((((((((((x", 11) == 0;
        const char *e = kipp_matcher_error(m);
        ok = rejected && e != NULL && strstr(e, "more than 65536 rule expansions") != NULL;
        kipp_matcher_free(m);
    }
    return &ok;
}

static void test_resolve_small_stack(void) {
    kipp_grammar *g = paren_chain();
    KT_CHECK(g != NULL);
    if (!g) return;
    pthread_attr_t at;
    pthread_t th;
    void *res = NULL;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 * 1024);
    const int started = pthread_create(&th, &at, climb_small_stack, g) == 0;
    pthread_attr_destroy(&at);
    if (started) pthread_join(th, &res);
    KT_CHECK(started && res && *(int *)res, "the expansion limit on a 256 KiB stack: no limit error");
    kipp_grammar_free(g);
}

static int n_asked;
static int interrupt_now(void *arg) {
    n_asked++;
    return *(const int *)arg;
}

/* The wall-time bound and the interrupt: a grammar within the compile-time bound whose first
 * mask merges a million stacks (minutes of work) stops at the limit; the matcher then fails
 * for good (error set, no token allowed, accepts refused); the interrupt stops it the same
 * way. */
static void test_time_limit(void) {
    static const char *const toks[] = {"a", "w1", "aw1", "!", "<eos>", "w"};
    enum { N = sizeof toks / sizeof toks[0] };
    size_t lens[N];
    uint8_t eog[N] = {0};
    for (int i = 0; i < N; i++) lens[i] = strlen(toks[i]);
    lens[4] = 0;
    eog[4] = 1;
    kipp_token_trie *t;
    char err[512];
    KT_CHECK(kipp_token_trie_build_list(toks, lens, eog, N, &t, err, sizeof err) == KIPP_OK);
    /* root ::= "a" e "!" | ... (1,000 times), e ::= "w0" | ... | "w999": after "a", 1,000
     * stacks each lead to 1,000 */
    char *s = NULL;
    size_t len = 0, cap = 0;
    cat(&s, &len, &cap, "root ::= \"a\" e \"!\"", 0, 0);
    for (int k = 1; k < 1000; k++) cat(&s, &len, &cap, " | \"a\" e \"!\"", 0, 0);
    cat(&s, &len, &cap, "\ne ::= \"w0\"", 0, 0);
    for (int k = 1; k < 1000; k++) cat(&s, &len, &cap, " | \"w%d\"", k, 0);
    cat(&s, &len, &cap, "\n", 0, 0);
    kipp_grammar *g = compile(s);
    free(s);
    KT_CHECK(g != NULL, "within the compile-time bound");
    kipp_matcher *m;
    if (g && kipp_matcher_new(g, t, &m, err, sizeof err) == KIPP_OK) {
        KT_CHECK(kipp_matcher_error(m) == NULL);
        kipp_matcher_set_time_limit(m, 0.05);
        uint32_t bits[1] = {~0u};
        kipp_matcher_mask(m, bits);
        const char *e = kipp_matcher_error(m);
        KT_CHECK(e != NULL && strstr(e, "time limit of 0.05 s") != NULL, "error: %s", e ? e : "(none)");
        KT_CHECK(bits[0] == 0, "a failed mask allows nothing (0x%x)", bits[0]);
        kipp_matcher_stats st;
        kipp_matcher_get_stats(m, &st);
        KT_CHECK(st.seconds < 5.0, "the mask took %.2f s", st.seconds);
        KT_CHECK(kipp_matcher_accept_token(m, 0) == 0, "a failed matcher accepts nothing");
        kipp_matcher_set_time_limit(m, 0); /* failed for good, even without a limit */
        kipp_matcher_mask(m, bits);
        KT_CHECK(bits[0] == 0 && kipp_matcher_error(m) != NULL);
        kipp_matcher_free(m);
    }
    if (g && kipp_matcher_new(g, t, &m, err, sizeof err) == KIPP_OK) {
        int stop = 0;
        n_asked = 0;
        kipp_matcher_set_time_limit(m, 0);
        kipp_matcher_set_interrupt(m, interrupt_now, &stop);
        KT_CHECK(kipp_matcher_accept_token(m, 5) == 0 && kipp_matcher_error(m) == NULL); /* "w": no */
        stop = 1;
        uint32_t bits[1] = {~0u};
        kipp_matcher_mask(m, bits);
        const char *e = kipp_matcher_error(m);
        KT_CHECK(e != NULL && strstr(e, "interrupted") != NULL, "error: %s", e ? e : "(none)");
        KT_CHECK(n_asked == 1 && bits[0] == 0, "asked %d times, bits 0x%x", n_asked, bits[0]);
        kipp_matcher_free(m);
    }
    kipp_grammar_free(g);
    /* an ordinary grammar with the smallest limit still works (the clock is read every few
     * thousand units: a cheap step never looks at it) */
    g = compile("root ::= \"a\" \"w1\"? \"!\"");
    if (g && kipp_matcher_new(g, t, &m, err, sizeof err) == KIPP_OK) {
        kipp_matcher_set_time_limit(m, 1e-9);
        uint32_t bits[1];
        kipp_matcher_mask(m, bits);
        KT_CHECK(kipp_matcher_error(m) == NULL && bits[0] == ((1u << 0) | (1u << 2)), "bits 0x%x", bits[0]);
        KT_CHECK(kipp_matcher_accept_token(m, 2) == 1 && kipp_matcher_accept_token(m, 3) == 1);
        KT_CHECK(kipp_matcher_complete(m) == 1);
        kipp_matcher_free(m);
    }
    kipp_grammar_free(g);
    kipp_token_trie_free(t);
}

/* The yield deadline (kipp_matcher_set_yield): a mask or accept still running then stops
 * without failing and changes nothing (logits, state, cache); the same computation without
 * it gives the real answer, and the time limit still fails visibly. */
static void test_yield(void) {
    static const char *const toks[] = {"a", "w1", "aw1", "!", "<eos>", "w"};
    enum { N = sizeof toks / sizeof toks[0] };
    size_t lens[N];
    uint8_t eog[N] = {0};
    for (int i = 0; i < N; i++) lens[i] = strlen(toks[i]);
    lens[4] = 0;
    eog[4] = 1;
    kipp_token_trie *t;
    char err[512];
    KT_CHECK(kipp_token_trie_build_list(toks, lens, eog, N, &t, err, sizeof err) == KIPP_OK);
    for (int n = 1000; n >= 30; n -= 970) { /* n x n stacks after "a": 1000 is slow, 30 is not */
        char *s = NULL;
        size_t len = 0, cap = 0;
        cat(&s, &len, &cap, "root ::= \"a\" e \"!\"", 0, 0);
        for (int k = 1; k < n; k++) cat(&s, &len, &cap, " | \"a\" e \"!\"", 0, 0);
        cat(&s, &len, &cap, "\ne ::= \"w0\"", 0, 0);
        for (int k = 1; k < n; k++) cat(&s, &len, &cap, " | \"w%d\"", k, 0);
        cat(&s, &len, &cap, "\n", 0, 0);
        kipp_grammar *g = compile(s);
        free(s);
        kipp_matcher *m;
        if (!g || kipp_matcher_new(g, t, &m, err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "%d x %d: %s", n, n, g ? err : "does not compile");
            kipp_grammar_free(g);
            continue;
        }
        kipp_matcher_set_time_limit(m, 0);
        kipp_matcher_set_yield(m, 1e-9); /* long past */
        float logits[N] = {1, 1, 1, 1, 1, 1};
        kipp_matcher_apply(m, logits, N);
        KT_CHECK(kipp_matcher_yielded(m) && kipp_matcher_error(m) == NULL, "%d: a yield is no failure", n);
        for (int i = 0; i < N; i++) KT_CHECK(logits[i] == 1, "%d: logit %d touched by a yielded mask", n, i);
        kipp_matcher_stats st;
        kipp_matcher_get_stats(m, &st);
        KT_CHECK(st.masks == 0 && st.cache_hits == 0, "%d: a yielded mask counted", n);
        KT_CHECK(kipp_matcher_accept_token(m, 0) == 0 && kipp_matcher_yielded(m) &&
                 kipp_matcher_error(m) == NULL, "%d: a yielded accept", n);
        kipp_matcher_set_yield(m, 0);
        if (n == 30) { /* cheap enough to finish: the state is what it was */
            kipp_matcher_apply(m, logits, N);
            KT_CHECK(!kipp_matcher_yielded(m) && logits[0] == 1 && logits[2] == 1 && isinf(logits[1]),
                     "the mask after a yield: %g %g %g", logits[0], logits[1], logits[2]);
            KT_CHECK(kipp_matcher_accept_token(m, 0) == 1 && kipp_matcher_accept_token(m, 1) == 1 &&
                     kipp_matcher_accept_token(m, 3) == 1 && kipp_matcher_complete(m),
                     "a yielded accept left the state as it was");
        } else { /* the time limit still fails it, visibly */
            kipp_matcher_set_time_limit(m, 0.05);
            uint32_t bits[1] = {~0u};
            kipp_matcher_mask(m, bits);
            const char *e = kipp_matcher_error(m);
            KT_CHECK(!kipp_matcher_yielded(m) && e && strstr(e, "time limit of 0.05 s") && bits[0] == 0,
                     "after a yield, the time limit: %s", e ? e : "(none)");
        }
        kipp_matcher_free(m);
        kipp_grammar_free(g);
    }
    kipp_token_trie_free(t);
}

/* Tokens far longer than any real one (a hostile or odd GGUF): the trie is as deep as the
 * longest token, and building it and walking it used a stack frame per byte (a 22,030-byte
 * token overflowed the stack under ASan; 300,000 bytes does without). Masks equal brute
 * force, and the long token is accepted. */
static void test_long_tokens(void) {
    enum { LX = 300000, LY = 100000, N = 6 };
    char *x = malloc(LX), *y = malloc(LY);
    if (!x || !y) { KT_CHECK(0, "out of memory"); free(x); free(y); return; }
    memset(x, 'x', LX);
    memset(y, 'y', LY);
    const char *toks[N] = {"x", "xx", x, "y", y, ""};
    size_t lens[N] = {1, 2, LX, 1, LY, 0};
    uint8_t eog[N] = {0, 0, 0, 0, 0, 1};
    kipp_token_trie *t = NULL;
    char err[256];
    KT_CHECK(kipp_token_trie_build_list(toks, lens, eog, N, &t, err, sizeof err) == KIPP_OK, "%s", err);
    static const char *const grammars[] = {"root ::= \"x\"+", "root ::= [xy]*", "root ::= \"y\" [xy]{0,5}"};
    static const uint32_t want[] = {0x7, 0x3f, 0x8}; /* mask bits before the first token */
    for (size_t gi = 0; t && gi < sizeof grammars / sizeof grammars[0]; gi++) {
        kipp_grammar *g = compile(grammars[gi]);
        kipp_matcher *m = NULL;
        KT_CHECK(g && kipp_matcher_new(g, t, &m, err, sizeof err) == KIPP_OK, "grammar %zu", gi);
        if (!m) { kipp_grammar_free(g); continue; }
        uint32_t bits[1] = {0};
        kipp_matcher_mask(m, bits);
        int agree = 1;
        for (int id = 0; id < N - 1; id++) agree &= (int)((bits[0] >> id) & 1) == kipp_matcher_allows_token(m, id);
        KT_CHECK((bits[0] & 0x1f) == (want[gi] & 0x1f) && agree, "grammar %zu: mask %#x, want %#x, brute force agrees %d",
                 gi, bits[0], want[gi], agree);
        if (gi < 2) {
            KT_CHECK(kipp_matcher_accept_token(m, 2) == 1, "grammar %zu: the 300,000-byte token refused", gi);
            kipp_matcher_mask(m, bits);
            KT_CHECK((bits[0] & 0x7) == 0x7 && kipp_matcher_complete(m), "grammar %zu after it: mask %#x", gi, bits[0]);
        }
        kipp_matcher_free(m);
        kipp_grammar_free(g);
    }
    kipp_token_trie_free(t);
    free(x);
    free(y);
}

void kt_suite_grammar(void) {
    test_errors();
    test_bytes();
    test_utf8_classes();
    test_masks();
    test_cost_bound();
    test_resolve_budget_per_stack();
    test_resolve_climbs();
    test_resolve_small_stack();
    test_time_limit();
    test_yield();
    test_long_tokens();
}
