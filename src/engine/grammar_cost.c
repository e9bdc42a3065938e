/* grammar_cost.c — the compile-time cost bound of a grammar (grammar_int.h): for every
 * position, what the matcher's resolve (matcher.c) does from it without consuming a byte —
 * how many rule expansions, and along how many paths it falls off the end of the rule (the
 * empty derivations, each of which resolves what follows once more). Does not parse or match.
 *
 * Both are exact counts of resolve's walk, not estimates: for position p,
 *   G_END:    X = 0, N = 1          G_BYTES: X = 0, N = 0 (a stack top)
 *   G_RULE r: X = 1 + XR(r) + NR(r) * X(p + 1),  N = NR(r) * N(p + 1)
 * where XR(r), NR(r) sum X and N over r's alternatives. X above the matcher's expansion
 * limit means resolve is cut short (stacks silently missing: a chain of 4,097 rules that only
 * name the next allowed nothing); N is the ambiguity that makes a mask's cost grow with its
 * square ((x{0,1000}){0,1000}: 1,001 empty paths per iteration level). The dependencies
 * follow only rules reached through a nullable prefix, which left recursion (refused
 * earlier) would make cyclic, so a depth-first pass with an explicit stack (no recursion:
 * chains of a million rules) computes every position once. */
#include "engine/grammar.h"
#include "engine/grammar_int.h"

#include <stdlib.h>

#define CAP ((uint64_t)1 << 40) /* saturation: far above every limit */

static uint64_t sat_add(uint64_t a, uint64_t b) { return a + b > CAP ? CAP : a + b; }
static uint64_t sat_mul(uint64_t a, uint64_t b) {
    if (a == 0 || b == 0) return 0;
    return a > CAP / b ? CAP : a * b > CAP ? CAP : a * b;
}

typedef struct {
    uint64_t x, n;
    uint8_t st; /* 0 not yet, 1 on the stack, 2 done */
} cost;

int kipp_grammar_cost_check(const kipp_grammar *g, uint32_t *bad_pos, int *which, uint64_t *value) {
    /* nodes: positions 0..n_el-1, then rules n_el..n_el+n_rules-1 */
    const uint64_t n_nodes = (uint64_t)g->n_el + g->n_rules;
    cost *c = calloc(n_nodes ? n_nodes : 1, sizeof *c);
    uint32_t *stack = malloc((n_nodes ? n_nodes : 1) * sizeof *stack);
    if (!c || !stack) { free(c); free(stack); return -1; }
    int res = 0;
    for (uint32_t p0 = 0; p0 < g->n_el && !res; p0++) {
        if (c[p0].st == 2) continue;
        uint32_t sp = 0;
        stack[sp++] = p0;
        c[p0].st = 1;
        while (sp) {
            const uint32_t v = stack[sp - 1];
            uint32_t need = UINT32_MAX; /* a dependency not computed yet */
            if (v < g->n_el) {
                const kipp_gelem e = g->el[v];
                if (e.kind == G_END) {
                    c[v].x = 0, c[v].n = 1;
                } else if (e.kind == G_BYTES) {
                    c[v].x = 0, c[v].n = 0;
                } else {
                    const cost *r = &c[g->n_el + e.arg];
                    if (r->st != 2) need = g->n_el + e.arg;
                    else if (r->n && c[v + 1].st != 2) need = v + 1;
                    else {
                        const uint64_t xn = r->n ? c[v + 1].x : 0, nn = r->n ? c[v + 1].n : 0;
                        c[v].x = sat_add(sat_add(1, r->x), sat_mul(r->n, xn));
                        c[v].n = sat_mul(r->n, nn);
                    }
                }
            } else {
                const uint32_t rule = v - g->n_el, a0 = g->rule_alt0[rule], na = g->rule_nalt[rule];
                uint64_t x = 0, n = 0;
                for (uint32_t a = 0; a < na && need == UINT32_MAX; a++) {
                    const uint32_t s = g->alt_start[a0 + a];
                    if (c[s].st != 2) need = s;
                    else x = sat_add(x, c[s].x), n = sat_add(n, c[s].n);
                }
                c[v].x = x, c[v].n = n;
            }
            if (need == UINT32_MAX) {
                c[v].st = 2;
                sp--;
            } else if (c[need].st == 1) { /* a cycle: only left recursion makes one */
                c[need].x = c[need].n = CAP;
                c[need].st = 2;
            } else {
                c[need].st = 1;
                stack[sp++] = need;
            }
        }
    }
    /* the position where a limit is crossed first: the smallest count over it (ties: the
     * later position, which is usually the more deeply nested helper rule) */
    for (int w = 0; w < 2 && !res; w++)
        for (uint32_t p = 0; p < g->n_el; p++) {
            const uint64_t v = w ? c[p].n : c[p].x;
            if (v > (w ? KIPP_GRAMMAR_MAX_EMPTY_PATHS : KIPP_GRAMMAR_MAX_RESOLVE) && (!res || v <= *value))
                *bad_pos = p, *which = w, *value = v, res = 1;
        }
    free(c);
    free(stack);
    return res;
}
