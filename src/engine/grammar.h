/* grammar.h — grammar-constrained decoding: a small EBNF compiled to a byte-level pushdown
 * automaton, and a per-step mask over the whole vocabulary that says which tokens keep the
 * output a prefix of some sentence of the grammar (multi-byte tokens and characters split
 * across tokens included). The JSON-Schema and tool-call front ends (src/server) produce
 * grammar text; this module knows nothing of JSON. docs/grammar.md defines the dialect.
 *
 * The dialect (GBNF-like):
 *   rule    ::= name "::=" alts          one rule per line; a newline inside ( ) continues
 *   alts    ::= seq ("|" seq)*           an empty seq is the empty string
 *   seq     ::= (item postfix?)*
 *   item    ::= "literal" | [class] | [^class] | . | name | "(" alts ")"
 *   postfix ::= * | + | ? | {m} | {m,} | {m,n}        (m, n <= 1000)
 *   names: [A-Za-z0-9_-]+; "#" starts a comment to the end of the line; the start rule is
 *   "root". Escapes in literals and classes: \n \r \t \\ \" \' \] \[ \- \^ \/ \xHH \uHHHH
 *   \UHHHHHHHH. Literals and classes are Unicode code points, matched as UTF-8 (a class
 *   never matches a surrogate or an invalid byte sequence); "." is any code point.
 * Left recursion (direct or through rules that can match the empty string) is refused at
 * compile time, as is a reference to an undefined rule, and so is a grammar over the cost
 * bound (grammar_cost.c: more than 4,096 rule expansions before a byte, or more than 64 ways
 * to match the empty string at one point; docs/grammar.md "Limits"). */
#ifndef KIPP_ENGINE_GRAMMAR_H
#define KIPP_ENGINE_GRAMMAR_H

#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kipp_grammar kipp_grammar;

/* Compiles grammar text (len bytes). Errors name the line and what is wrong. The compiled
 * grammar is immutable: share it between matchers and threads. */
kipp_status kipp_grammar_compile(const char *text, size_t len, kipp_grammar **out, char *err,
                                 size_t err_len);
void kipp_grammar_free(kipp_grammar *g); /* NULL is a no-op */

/* The vocabulary as a byte trie (built once per model; immutable, shareable). Tokens whose
 * text is empty when special tokens are skipped (control tokens) are left out; end-of-
 * generation tokens are allowed exactly when the grammar is complete. */
typedef struct kipp_token_trie kipp_token_trie;
kipp_status kipp_token_trie_build(const kipp_model *m, kipp_token_trie **out, char *err,
                                  size_t err_len);
/* The same from a plain list (tests, tools): token id i has bytes toks[i] (lens[i] bytes; 0:
 * left out); is_eog[i] marks end-of-generation ids (may be NULL). */
kipp_status kipp_token_trie_build_list(const char *const *toks, const size_t *lens,
                                       const uint8_t *is_eog, uint32_t n, kipp_token_trie **out,
                                       char *err, size_t err_len);
void kipp_token_trie_free(kipp_token_trie *t); /* NULL is a no-op */

/* A matcher: where one sequence's output stands in the grammar. Not thread-safe. t may be
 * NULL for byte-level use (accept_bytes, complete); masks and tokens then need a trie. */
typedef struct kipp_matcher kipp_matcher;
kipp_status kipp_matcher_new(const kipp_grammar *g, const kipp_token_trie *t, kipp_matcher **out,
                             char *err, size_t err_len);
void kipp_matcher_free(kipp_matcher *m);
/* Hands the matcher its grammar (the one it was made with): kipp_matcher_free frees it. */
void kipp_matcher_own_grammar(kipp_matcher *m);
/* Feeds bytes; 1 if they keep the output a prefix of a sentence (state advanced), 0 if not
 * (state unchanged). */
int kipp_matcher_accept_bytes(kipp_matcher *m, const char *bytes, size_t n);
/* 1 if the output so far is a whole sentence of the grammar. */
int kipp_matcher_complete(const kipp_matcher *m);
/* 1 if no byte can follow (the sentence is complete and nothing may extend it). */
int kipp_matcher_finished(const kipp_matcher *m);
/* Feeds a token (its bytes; an end-of-generation token is accepted only when complete).
 * 1 if accepted, 0 if the token was not allowed (state unchanged). */
int kipp_matcher_accept_token(kipp_matcher *m, int32_t id);
/* 1 if accept_token would accept id; the state does not change (the slow, obvious check
 * the masks are tested against). */
int kipp_matcher_allows_token(kipp_matcher *m, int32_t id);
/* Sets logits[id] = -INFINITY for every token id < n that the grammar does not allow next
 * (t's vocabulary; ids not in the trie and not end-of-generation are always disallowed). */
void kipp_matcher_apply(kipp_matcher *m, float *logits, uint32_t n);
/* The mask itself: bit id of bits[] (n_vocab bits, ceil(n/32) words) set when allowed. */
void kipp_matcher_mask(kipp_matcher *m, uint32_t *bits);

/* Counters for the bench and /metrics: masks computed, served from the cache, trie edges
 * walked, masks cut short by the work budget (partial: every token in such a mask is
 * allowed, some allowed ones may be missing; only hostile, highly ambiguous grammars get
 * there), seconds. */
typedef struct {
    uint64_t masks, cache_hits, trie_nodes, partial;
    double seconds;
} kipp_matcher_stats;
void kipp_matcher_get_stats(const kipp_matcher *m, kipp_matcher_stats *out);
/* The work after which a mask walk stops (default: about 32 M units; the tests lower it). */
void kipp_matcher_set_work_budget(kipp_matcher *m, uint64_t units);

/* The time bound of one computation: one mask, one accept, the start state (seconds of the
 * computing thread's CPU time, and KIPP_MATCHER_WALL_FACTOR times as many of wall time;
 * default KIPP_MATCHER_TIME_LIMIT_S; 0: none). The work budget above counts units, and a
 * grammar that passes the compile-time cost bound can still make single units expensive
 * (thousands of alternatives that each lead to thousands of stacks), so the clock is read
 * every few thousand units of work. A computation past the limit stops and the matcher
 * fails for good: kipp_matcher_error says why, masks allow no token, accepts refuse. The
 * scheduler ends such a request with an error instead of holding every other sequence. */
#define KIPP_MATCHER_TIME_LIMIT_S 2.0
#define KIPP_MATCHER_WALL_FACTOR 15.0
void kipp_matcher_set_time_limit(kipp_matcher *m, double seconds);
/* Asked as often as the clock: when fn(arg) returns nonzero the computation stops and the
 * matcher fails as on the time limit (the scheduler passes the request's cancel flag, so a
 * client that went away stops costing mask time at once). NULL: none. */
void kipp_matcher_set_interrupt(kipp_matcher *m, int (*fn)(void *), void *arg);
/* NULL while the matcher works; else why it failed (borrowed: valid until it is freed). */
const char *kipp_matcher_error(const kipp_matcher *m);
/* A soft deadline for the computations that follow (CLOCK_MONOTONIC seconds; 0: none), read
 * with the clock above: a mask or accept still running then stops without failing and
 * leaves everything as it was (the state, the logits kipp_matcher_apply was given; a mask
 * is not cached, an accept returns 0), and kipp_matcher_yielded says so until the next
 * computation. The scheduler tries a mask on its engine thread within a few milliseconds
 * this way and hands one that runs longer to its mask thread (docs/grammar.md "Limits"). */
void kipp_matcher_set_yield(kipp_matcher *m, double deadline);
/* 1 when the last mask or accept stopped at the yield deadline (its result means nothing). */
int kipp_matcher_yielded(const kipp_matcher *m);

#endif
