/* grammar_int.h — the compiled grammar as grammar.c builds it and matcher.c runs it
 * (private to those two files).
 *
 * Every rule is a list of alternatives; an alternative is a run of elements in el[] ending
 * with G_END. An element matches one byte from a byte set (G_BYTES) or a whole rule
 * (G_RULE). Literals and character classes are already lowered to UTF-8 bytes: a class is
 * a rule whose alternatives are byte-range sequences. Position p in el[] is "the next
 * element to match"; a parse stack is a chain of positions (see matcher.c). */
#ifndef KIPP_ENGINE_GRAMMAR_INT_H
#define KIPP_ENGINE_GRAMMAR_INT_H

#include <stdint.h>

enum { G_END = 0, G_BYTES = 1, G_RULE = 2 };

typedef struct {
    uint32_t kind : 2;
    uint32_t arg : 30; /* G_BYTES: byte-set index; G_RULE: rule index */
} kipp_gelem;

struct kipp_grammar {
    kipp_gelem *el;        /* [n_el] */
    uint32_t n_el;
    uint32_t *alt_start;   /* [n_alt] positions in el */
    uint32_t n_alt;
    uint32_t *rule_alt0;   /* [n_rules] first alternative of rule r in alt_start */
    uint32_t *rule_nalt;   /* [n_rules] */
    uint32_t n_rules;
    uint32_t root;
    uint64_t (*sets)[4];   /* [n_sets] 256-bit byte sets */
    uint32_t n_sets;
};

/* The compile-time cost bound (grammar_cost.c; docs/grammar.md "Limits"): from any position,
 * the matcher's resolve may expand at most this many rules before it reaches a byte (it stops
 * there: more would be cut short at run time), and may fall off the end of the rule along at
 * most this many empty derivations (each one resolves what follows again: a mask's cost grows
 * with their square). */
#define KIPP_GRAMMAR_MAX_RESOLVE 4096
#define KIPP_GRAMMAR_MAX_EMPTY_PATHS 64

/* 0 when every position is within both limits; 1: position *bad_pos is over limit *which
 * (0: expansions, 1: empty paths) with count *value (saturated near 2^40); -1: out of memory. */
int kipp_grammar_cost_check(const struct kipp_grammar *g, uint32_t *bad_pos, int *which, uint64_t *value);

static inline int kipp_gset_has(const uint64_t *set, unsigned b) {
    return (int)((set[b >> 6] >> (b & 63)) & 1);
}

#endif
