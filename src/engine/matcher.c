/* matcher.c — runs a compiled grammar (grammar_int.h) over bytes and computes per-step token
 * masks over the vocabulary's byte trie. Does not parse grammar text (grammar.c).
 *
 * State: the set of parse stacks the output so far leaves open, each a chain of frames
 * (position in el[], parent frame) whose top sits on a G_BYTES element, plus "complete"
 * (some stack emptied: the output is a whole sentence). Frames are immutable and shared, so
 * advancing by a byte creates only the frames it changes. A rule reference in tail position
 * replaces its frame instead of stacking one, so repetitions (R ::= x R | ε) run flat.
 *
 * The mask: a depth-first walk of the token trie that advances the state one byte per edge
 * and prunes a subtree as soon as no stack survives; frames made below a trie node are
 * dropped on the way back up (the frame arena is a stack). Masks are cached by the exact
 * state (the chains of positions), which repeats constantly: every character inside a
 * JSON string leaves the same state. */
#include "engine/grammar.h"

#include "core/buf.h"
#include "core/error.h"
#include "engine/grammar_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TOPS 1024   /* stacks kept per state (ambiguous grammars beyond: the rest are dropped) */
/* Rule expansions per closure (one resolve from a stack top). The compiler bounds every
 * position's own closure by KIPP_GRAMMAR_MAX_RESOLVE (grammar_int.h); a closure that falls
 * off the end of its rule goes on in the callers (their rest is nullable), which no count at
 * compile time bounds (it grows with the nesting), so this has room for that. Past it the
 * matcher fails visibly (kipp_matcher_error names it) instead of dropping stacks. */
#define MAX_RESOLVE (16u * KIPP_GRAMMAR_MAX_RESOLVE)
#define N_CACHE 64
/* A mask walk stops after this much work (edges, tops scanned and merged): a grammar
 * ambiguous enough to need more (a hostile one) gets a partial mask — every token in it is
 * allowed, some allowed ones are missing — instead of holding the engine for seconds. Real
 * grammars stay far below (every walk of the JSON corpus's replay fits in 0.5 M). */
#define WALK_WORK_BUDGET (32u << 20)
#define HC_BITS 14      /* frame hash-consing table: 16K slots */
/* Work units (resolve steps, tops scanned, merge comparisons, trie edges) between looks at
 * the clock and the interrupt: a few microseconds of work, so the time limit is overrun by
 * about that much at most. */
#define CHECK_EVERY 4096u

/* Grows n_arr parallel arrays (*arrs[i], elems[i] bytes per entry) that share the uint32_t
 * capacity *cap to hold need entries, each with the core's kipp_grow, so that all reach the
 * same doubled capacity; the counts here are uint32_t, so a need past UINT32_MAX fails too.
 * -1 when out of memory: *cap is left as it was, and the arrays grown before the failure
 * keep their larger blocks (harmless: each still holds *cap entries or more). */
static int grow_arrays(void **const arrs[], const size_t elems[], unsigned n_arr, uint32_t *cap,
                       uint64_t need) {
    if (need <= *cap) return 0;
    if (need > UINT32_MAX) return -1;
    size_t common = SIZE_MAX;
    for (unsigned i = 0; i < n_arr; i++) {
        size_t c = *cap;
        if (kipp_grow(arrs[i], &c, (size_t)need, elems[i]) != KIPP_OK) return -1;
        if (c < common) common = c; /* the same for all but where a doubling would overflow */
    }
    *cap = common > UINT32_MAX ? UINT32_MAX : (uint32_t)common;
    return 0;
}

/* ---- the token trie ------------------------------------------------------------------------- */

struct kipp_token_trie {
    uint32_t n_nodes, cap_nodes;
    uint32_t *e0;    /* [n_nodes] first edge */
    uint16_t *ne;    /* [n_nodes] edges (children) */
    uint32_t *t0;    /* [n_nodes] first token in toks */
    uint16_t *nt;    /* [n_nodes] tokens ending here */
    uint32_t n_edges, cap_edges;
    uint8_t *ebyte;  /* [n_edges] */
    uint32_t *echild;
    int32_t *toks;   /* token ids, grouped by node */
    uint32_t n_toks;
    uint32_t n_vocab;
    char *blob;      /* every token's bytes */
    uint64_t *off;   /* [n_vocab + 1] into blob */
    uint8_t *is_eog; /* [n_vocab] */
    int32_t *eog;
    uint32_t n_eog;
};

typedef struct {
    kipp_token_trie *t;
    const uint32_t *ids; /* sorted by bytes */
    int oom;
} trie_builder;

static const kipp_token_trie *g_sort_trie; /* qsort has no context argument (C11) */

static int cmp_tok(const void *a, const void *b) {
    const kipp_token_trie *t = g_sort_trie;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    size_t lx = t->off[x + 1] - t->off[x], ly = t->off[y + 1] - t->off[y];
    int c = memcmp(t->blob + t->off[x], t->blob + t->off[y], lx < ly ? lx : ly);
    return c ? c : lx < ly ? -1 : lx > ly;
}

static uint32_t tok_len(const kipp_token_trie *t, uint32_t id) {
    return (uint32_t)(t->off[id + 1] - t->off[id]);
}

/* Opens the node of the sorted ids [lo, hi) that share their first `depth` bytes: the tokens
 * ending there, then one edge slot per distinct next byte (filled as the children are
 * made). *first: the first id of its children; *e0: its first edge. -1: out of memory. */
static int64_t trie_open(trie_builder *b, uint32_t lo, uint32_t hi, uint32_t depth, uint32_t *first, uint32_t *e0) {
    kipp_token_trie *t = b->t;
    {
        void **const nodes[] = {(void **)&t->e0, (void **)&t->t0, (void **)&t->ne, (void **)&t->nt};
        const size_t elems[] = {sizeof *t->e0, sizeof *t->t0, sizeof *t->ne, sizeof *t->nt};
        if (grow_arrays(nodes, elems, 4, &t->cap_nodes, (uint64_t)t->n_nodes + 1)) return -1;
    }
    const uint32_t node = t->n_nodes++;
    t->t0[node] = t->n_toks;
    t->nt[node] = 0;
    while (lo < hi && tok_len(t, b->ids[lo]) == depth) t->toks[t->n_toks++] = (int32_t)b->ids[lo++], t->nt[node]++;
    uint32_t n_child = 0;
    for (uint32_t i = lo; i < hi;) {
        const unsigned char c = (unsigned char)t->blob[t->off[b->ids[i]] + depth];
        while (i < hi && (unsigned char)t->blob[t->off[b->ids[i]] + depth] == c) i++;
        n_child++;
    }
    {
        void **const edges[] = {(void **)&t->ebyte, (void **)&t->echild};
        const size_t elems[] = {sizeof *t->ebyte, sizeof *t->echild};
        if (grow_arrays(edges, elems, 2, &t->cap_edges, (uint64_t)t->n_edges + n_child)) return -1;
    }
    *e0 = t->e0[node] = t->n_edges;
    t->ne[node] = (uint16_t)n_child;
    t->n_edges += n_child;
    *first = lo;
    return node;
}

/* The trie of the sorted ids [0, n), depth first with nodes in preorder and each node's
 * edges in byte order; iterative (an explicit stack), since a token of any length may be
 * in a GGUF and recursion one frame a byte overflowed the stack on a 22,030-byte token
 * under ASan. Returns the root (0), -1: out of memory. */
typedef struct {
    uint32_t i, hi, depth, e0, k; /* next child's first id, end, node depth, edges, done */
} trie_frame;

static int64_t trie_build(trie_builder *b, uint32_t n) {
    trie_frame *st = NULL;
    size_t cap = 0, sp = 0;
    uint32_t first, e0;
    const int64_t root = trie_open(b, 0, n, 0, &first, &e0);
    if (root < 0 || kipp_grow((void **)&st, &cap, 1, sizeof *st) != KIPP_OK) goto oom;
    st[sp++] = (trie_frame){first, n, 0, e0, 0};
    while (sp) {
        trie_frame *f = &st[sp - 1];
        if (f->i >= f->hi) { sp--; continue; }
        const kipp_token_trie *t = b->t;
        const uint32_t depth = f->depth, i = f->i;
        const unsigned char c = (unsigned char)t->blob[t->off[b->ids[i]] + depth];
        uint32_t j = i;
        while (j < f->hi && (unsigned char)t->blob[t->off[b->ids[j]] + depth] == c) j++;
        const int64_t child = trie_open(b, i, j, depth + 1, &first, &e0);
        if (child < 0) goto oom;
        b->t->ebyte[f->e0 + f->k] = c;
        b->t->echild[f->e0 + f->k] = (uint32_t)child;
        f->k++;
        f->i = j;
        if (kipp_grow((void **)&st, &cap, sp + 1, sizeof *st) != KIPP_OK) goto oom;
        st[sp++] = (trie_frame){first, j, depth + 1, e0, 0}; /* f may have moved: not used */
    }
    free(st);
    return root;
oom:
    free(st);
    b->oom = 1;
    return -1;
}

kipp_status kipp_token_trie_build_list(const char *const *toks, const size_t *lens,
                                       const uint8_t *is_eog, uint32_t n, kipp_token_trie **out,
                                       char *err, size_t err_len) {
    *out = NULL;
    kipp_token_trie *t = calloc(1, sizeof *t);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += lens[i];
    uint32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (t) {
        t->n_vocab = n;
        t->off = malloc(((size_t)n + 1) * sizeof *t->off);
        t->blob = malloc(total + 1);
        t->is_eog = calloc(n ? n : 1, 1);
        t->toks = malloc((size_t)(n ? n : 1) * sizeof *t->toks);
        t->eog = malloc((size_t)(n ? n : 1) * sizeof *t->eog);
    }
    if (!t || !ids || !t->off || !t->blob || !t->is_eog || !t->toks || !t->eog) {
        free(ids);
        kipp_token_trie_free(t);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory building the token trie");
    }
    uint32_t n_ids = 0;
    uint64_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        t->off[i] = at;
        if (lens[i]) memcpy(t->blob + at, toks[i], lens[i]);
        at += lens[i];
        if (is_eog && is_eog[i]) {
            t->is_eog[i] = 1;
            t->eog[t->n_eog++] = (int32_t)i;
        } else if (lens[i]) {
            ids[n_ids++] = i;
        }
    }
    t->off[n] = at;
    g_sort_trie = t;
    qsort(ids, n_ids, sizeof *ids, cmp_tok);
    trie_builder b = {.t = t, .ids = ids};
    int64_t root = trie_build(&b, n_ids);
    free(ids);
    if (root < 0) {
        kipp_token_trie_free(t);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory building the token trie");
    }
    *out = t;
    return KIPP_OK;
}

void kipp_token_trie_free(kipp_token_trie *t) {
    if (!t) return;
    free(t->e0), free(t->ne), free(t->t0), free(t->nt), free(t->ebyte), free(t->echild);
    free(t->toks), free(t->blob), free(t->off), free(t->is_eog), free(t->eog);
    free(t);
}

/* ---- states ---------------------------------------------------------------------------------- */

typedef struct {
    uint32_t *top; /* frame indices */
    uint32_t n, cap;
    int complete;
} sset;

typedef struct {
    uint32_t hash, n_key, used;
    uint32_t *key;
    uint32_t *mask;
    int valid;
} cache_entry;

/* A mask walk's states. A state is a set of tops (in mbuf) reached below some trie node;
 * many nodes reach the same state, so what is derived from it is computed once per walk:
 * which bytes it accepts (allow), which of its tops each byte matches (a dispatch table,
 * built on the state's second visit), and the state each byte leads to. The state after a
 * top matched a byte is the closure of the position after it, whatever the byte, so it is
 * memoized per frame (memo_ent); when several tops match a byte, the merged state is
 * memoized per set of tops (a "class" of bytes). Everything is valid for one walk (gen). */
typedef struct {
    uint32_t off, n;      /* tops in mbuf */
    int complete;
    uint32_t visits;      /* trie nodes walked in this state */
    uint32_t disp;        /* dispatch table in dbuf, or NONE */
    uint32_t cls, n_cls;  /* byte classes that match several tops, in cbuf */
    uint64_t allow[4];
} wstate;

typedef struct {
    uint32_t gen, sid; /* frame f's closure after a byte: state sid (when gen is the walk's) */
} memo_ent;

typedef struct {
    uint64_t tops; /* which tops (by index, the state has at most 64) the class's bytes match */
    uint32_t sid;  /* the merged state, or NONE until needed */
} wclass;

#define NONE UINT32_MAX
/* dispatch entries: 0 no top matches; 1 + k: only top k; CLASS | c: byte class c; MULTI:
 * several tops, no class (the state has more than 64 tops or 0x3FFF classes) */
#define CLASS 0x8000u
#define MULTI 0x7FFFu

/* One trie level of a walk: the walk state, the node's edges left, the state's dispatch
 * table and allowed bytes (copied: deeper steps may move the buffers). */
typedef struct {
    uint32_t sid, e, e_end, disp;
    uint64_t allow[4];
} walk_frame;

struct kipp_matcher {
    const kipp_grammar *g;
    const kipp_token_trie *t;
    uint32_t *fpos, *fpar; /* frames; index 0 is the bottom (no frame) */
    uint32_t nf, capf;
    sset cur;
    sset step[2];          /* run_bytes' states: before and after a byte */
    uint32_t n_words;
    cache_entry cache[N_CACHE];
    uint32_t clock;
    uint32_t *key;
    uint32_t cap_key;
    uint32_t budget;       /* expansions left in this step */
    memo_ent *memo;        /* [capf] */
    uint32_t *hc;          /* [1 << HC_BITS] frame index by (pos, parent) hash */
    uint32_t gen;          /* the current walk (memo entries of other walks are stale) */
    uint32_t *mbuf;        /* the walk states' tops */
    uint32_t n_mbuf, cap_mbuf;
    wstate *ws;            /* the walk's states */
    uint32_t n_ws, cap_ws;
    uint16_t *dbuf;        /* dispatch tables, 256 entries each */
    uint32_t n_dbuf, cap_dbuf;
    wclass *cbuf;          /* byte classes */
    uint32_t n_cbuf, cap_cbuf;
    uint32_t *intern;      /* walk states by content: sid + 1, 0 empty; cap_intern slots */
    uint32_t cap_intern, intern_gen;
    uint32_t *intern_stamp; /* the walk (gen) a slot was written in: older slots are empty */
    walk_frame *wstk;      /* walk's stack: a frame per trie level entered */
    uint32_t cap_wstk;
    uint32_t *rstk;        /* resolve's stack: (pos, parent) pairs still to follow */
    uint32_t cap_rstk;
    sset tmp;              /* memo_of's scratch */
    sset merge;            /* walk's scratch for states several tops lead to */
    int oom;
    int owns_grammar;
    uint64_t work, budget_work; /* this walk's work, and where it stops (WALK_WORK_BUDGET) */
    kipp_matcher_stats st;
    /* the wall-time bound of one mask or accept (kipp_matcher_set_time_limit) */
    uint64_t ops, next_check; /* work done since creation; when to look at the clock next */
    double time_limit, deadline; /* seconds; CLOCK_MONOTONIC seconds (the wall bound) */
    double cpu_deadline;         /* the computing thread's CPU seconds (the limit itself) */
    int (*interrupt)(void *);
    void *interrupt_arg;
    int failed;            /* sticky: the time limit or the interrupt stopped a computation */
    double yield_at;       /* kipp_matcher_set_yield: a soft deadline (0: none) */
    int yielded;           /* the last computation stopped at it (not sticky) */
    char why[160];
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the calling thread (0 where the clock is missing: then only the wall
 * bound applies). */
static double thread_cpu_s(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Starts the clocks of one computation (a mask, an accept) that began at time t: the limit
 * counts the computing thread's CPU time, so a mask on the mask thread (nice 19) that a
 * loaded machine starves is not failed for the wait; the wall clock still bounds it at
 * KIPP_MATCHER_WALL_FACTOR times the limit. */
static void begin(kipp_matcher *m, double t) {
    m->deadline = t + KIPP_MATCHER_WALL_FACTOR * m->time_limit;
    m->cpu_deadline = thread_cpu_s() + m->time_limit;
    m->next_check = m->ops + CHECK_EVERY;
}

/* 1 when the computation must stop: the matcher failed already, or (every CHECK_EVERY units
 * of m->ops) the interrupt asks for it, the yield deadline or the time limit has passed. */
static int stop_now(kipp_matcher *m) {
    if (m->failed || m->yielded) return 1;
    if (m->ops < m->next_check) return 0;
    m->next_check = m->ops + CHECK_EVERY;
    if (m->interrupt && m->interrupt(m->interrupt_arg)) {
        m->failed = 1;
        snprintf(m->why, sizeof m->why, "the grammar computation was interrupted");
    } else if (m->time_limit > 0 || m->yield_at > 0) {
        const double t = now_s();
        if (m->yield_at > 0 && t > m->yield_at) {
            m->yielded = 1; /* not a failure: the caller redoes it without the deadline */
        } else if (m->time_limit > 0 && thread_cpu_s() > m->cpu_deadline) {
            m->failed = 1;
            snprintf(m->why, sizeof m->why, "the grammar took longer than its time limit of %g s "
                     "for one token (it is too ambiguous to follow)", m->time_limit);
        } else if (m->time_limit > 0 && t > m->deadline) {
            m->failed = 1;
            snprintf(m->why, sizeof m->why, "the grammar took longer than %g s of wall time for one "
                     "token (the server is too busy to follow it)", KIPP_MATCHER_WALL_FACTOR * m->time_limit);
        }
    }
    return m->failed || m->yielded;
}

/* Grows an array (of elem bytes per entry) to hold n + extra entries (grow_arrays with one
 * array). -1 (and m->oom) when out of memory. */
static int grow(kipp_matcher *m, void **p, uint32_t *cap, uint32_t n, uint32_t extra, size_t elem) {
    void **const arrs[] = {p};
    if (grow_arrays(arrs, &elem, 1, cap, (uint64_t)n + extra)) {
        m->oom = 1;
        return -1;
    }
    return 0;
}

/* Frames are hash-consed: a (pos, parent) pair that exists already is reused, so stacks
 * that are equal are the same frame index, and deduplicating tops by (pos, parent) is
 * structural. Without it an ambiguous grammar (`.* "a"+ "b" .*`, what an unanchored
 * pattern becomes) grows a copy of the same stack per byte. The table is a direct-mapped
 * cache checked against the frame's contents, so a stale or overwritten slot only costs a
 * duplicate, never a wrong frame. */
static uint32_t new_frame(kipp_matcher *m, uint32_t pos, uint32_t parent) {
    const uint32_t h = ((pos * 0x9E3779B1u) ^ (parent * 0x85EBCA77u)) >> (32 - HC_BITS);
    const uint32_t c = m->hc[h];
    if (c && c < m->nf && m->fpos[c] == pos && m->fpar[c] == parent) return c;
    if (m->nf == m->capf) {
        const uint32_t old = m->capf;
        void **const frames[] = {(void **)&m->fpos, (void **)&m->fpar, (void **)&m->memo};
        const size_t elems[] = {sizeof *m->fpos, sizeof *m->fpar, sizeof *m->memo};
        if (grow_arrays(frames, elems, 3, &m->capf, (uint64_t)m->nf + 1)) {
            m->oom = 1;
            return 0;
        }
        memset(m->memo + old, 0, (m->capf - old) * sizeof *m->memo);
    }
    m->fpos[m->nf] = pos;
    m->fpar[m->nf] = parent;
    m->hc[h] = m->nf;
    return m->nf++;
}

static void add_top(kipp_matcher *m, sset *s, uint32_t pos, uint32_t parent) {
    m->ops += s->n;
    for (uint32_t k = 0; k < s->n; k++)
        if (m->fpos[s->top[k]] == pos && m->fpar[s->top[k]] == parent) return;
    if (s->n == s->cap) {
        if (s->cap >= MAX_TOPS) return;
        if (grow(m, (void **)&s->top, &s->cap, s->n, 1, sizeof *s->top)) return;
    }
    uint32_t f = new_frame(m, pos, parent);
    if (f) s->top[s->n++] = f;
}

/* Follows position pos (with its return chain parent) to every G_BYTES element it can
 * reach without consuming a byte; reaching the end of the bottom frame marks complete.
 * Depth first, a rule's alternatives in order, as a recursion over the alternatives would
 * go, but on an explicit stack (m->rstk): a chain of rules is as deep as the expansion
 * budget (65,536), which as C recursion took ~5 MB of a thread's stack and overflowed
 * ThreadSanitizer's shadow stack (make test-tsan crashed in the next suite). */
static void resolve(kipp_matcher *m, uint32_t pos0, uint32_t parent0, sset *out) {
    const kipp_grammar *g = m->g;
    uint32_t n = 0;
    if (grow(m, (void **)&m->rstk, &m->cap_rstk, 0, 2, sizeof *m->rstk)) return;
    m->rstk[n++] = pos0;
    m->rstk[n++] = parent0;
    while (n > 0) {
        uint32_t parent = m->rstk[--n], pos = m->rstk[--n];
        for (;;) {
            m->ops++;
            if (stop_now(m)) return;
            const kipp_gelem e = g->el[pos];
            if (e.kind == G_END) {
                if (parent == 0) { out->complete = 1; break; }
                pos = m->fpos[parent];
                parent = m->fpar[parent];
                continue;
            }
            if (e.kind == G_BYTES) { add_top(m, out, pos, parent); break; }
            if (m->budget == 0) {
                m->failed = 1;
                snprintf(m->why, sizeof m->why, "the grammar needs more than %u rule expansions "
                         "before its next character here (the limit)", MAX_RESOLVE);
                break;
            }
            m->budget--;
            /* a rule: its caller resumes at pos + 1, unless that is the end (a tail call) */
            const uint32_t np = g->el[pos + 1].kind == G_END ? parent : new_frame(m, pos + 1, parent);
            if (np == 0 && g->el[pos + 1].kind != G_END) break; /* out of memory */
            const uint32_t a0 = g->rule_alt0[e.arg], na = g->rule_nalt[e.arg];
            if (grow(m, (void **)&m->rstk, &m->cap_rstk, n, 2 * na, sizeof *m->rstk)) return;
            for (uint32_t a = na; a-- > 0;) { /* pushed last first: the first alternative pops first */
                m->rstk[n++] = g->alt_start[a0 + a];
                m->rstk[n++] = np;
            }
            break;
        }
    }
}

static int sset_reserve(kipp_matcher *m, sset *s) {
    (void)m;
    if (s->cap) return 0;
    s->top = malloc(16 * sizeof *s->top);
    if (!s->top) return -1;
    s->cap = 16;
    return 0;
}

static void advance(kipp_matcher *m, const sset *in, unsigned b, sset *out) {
    out->n = 0;
    out->complete = 0;
    for (uint32_t k = 0; k < in->n; k++) {
        const uint32_t f = in->top[k], pos = m->fpos[f];
        m->budget = MAX_RESOLVE; /* per top, as in the mask's after(): the two agree */
        if (kipp_gset_has(m->g->sets[m->g->el[pos].arg], b)) resolve(m, pos + 1, m->fpar[f], out);
    }
}

static void sset_copy(kipp_matcher *m, sset *dst, const sset *src) {
    if (dst->cap < src->n) {
        uint32_t *p = realloc(dst->top, (src->n ? src->n : 1) * sizeof *p);
        if (!p) { m->oom = 1; return; }
        dst->top = p;
        dst->cap = src->n;
    }
    memcpy(dst->top, src->top, src->n * sizeof *dst->top);
    dst->n = src->n;
    dst->complete = src->complete;
}

/* Copies the frames the current state uses to the front of the arena (everything else was
 * made by steps now behind us). */
static void compact(kipp_matcher *m) {
    const uint32_t nf = m->nf;
    uint32_t *map = calloc(nf, sizeof *map);
    uint32_t *pos = malloc(m->capf * sizeof *pos), *par = malloc(m->capf * sizeof *par);
    uint32_t *chain = malloc(nf * sizeof *chain);
    if (!map || !pos || !par || !chain) { free(map), free(pos), free(par), free(chain); return; }
    uint32_t n = 1;
    for (uint32_t k = 0; k < m->cur.n; k++) {
        uint32_t len = 0; /* the chain up to the first frame already copied */
        for (uint32_t f = m->cur.top[k]; f && !map[f]; f = m->fpar[f]) chain[len++] = f;
        while (len) {
            const uint32_t f = chain[--len];
            pos[n] = m->fpos[f];
            par[n] = m->fpar[f] ? map[m->fpar[f]] : 0;
            map[f] = n++;
        }
        m->cur.top[k] = map[m->cur.top[k]];
    }
    free(m->fpos), free(m->fpar);
    m->fpos = pos, m->fpar = par, m->nf = n;
    memset(m->memo, 0, m->capf * sizeof *m->memo); /* renumbered frames */
    free(map), free(chain);
}

kipp_status kipp_matcher_new(const kipp_grammar *g, const kipp_token_trie *t, kipp_matcher **out,
                             char *err, size_t err_len) {
    *out = NULL;
    kipp_matcher *m = calloc(1, sizeof *m);
    if (!m) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory for a grammar matcher");
    m->g = g, m->t = t;
    m->capf = 1024;
    m->fpos = malloc(m->capf * sizeof *m->fpos);
    m->fpar = malloc(m->capf * sizeof *m->fpar);
    m->memo = calloc(m->capf, sizeof *m->memo);
    m->budget_work = WALK_WORK_BUDGET;
    m->time_limit = KIPP_MATCHER_TIME_LIMIT_S;
    m->hc = calloc(1u << HC_BITS, sizeof *m->hc);
    m->gen = 1;
    m->nf = 1;
    m->n_words = t ? (t->n_vocab + 31) / 32 : 0;
    int bad = !m->fpos || !m->fpar || !m->memo || !m->hc || sset_reserve(m, &m->cur) ||
              sset_reserve(m, &m->tmp) || sset_reserve(m, &m->merge);
    for (uint32_t k = 0; k < 2 && !bad; k++) bad = sset_reserve(m, &m->step[k]);
    if (!bad) {
        begin(m, now_s());
        const uint32_t a0 = g->rule_alt0[g->root], na = g->rule_nalt[g->root];
        for (uint32_t a = 0; a < na; a++) {
            m->budget = MAX_RESOLVE;
            resolve(m, g->alt_start[a0 + a], 0, &m->cur);
        }
        bad = m->oom;
    }
    if (bad) {
        kipp_matcher_free(m);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory for a grammar matcher");
    }
    if (m->failed) { /* the start state alone ran past the time limit */
        kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "%s", m->why);
        kipp_matcher_free(m);
        return KIPP_ERR_INVALID_ARG;
    }
    *out = m;
    return KIPP_OK;
}

void kipp_matcher_free(kipp_matcher *m) {
    if (!m) return;
    free(m->fpos), free(m->fpar), free(m->cur.top), free(m->key), free(m->memo), free(m->mbuf);
    free(m->dbuf), free(m->hc), free(m->ws), free(m->cbuf), free(m->intern), free(m->intern_stamp);
    free(m->wstk);
    free(m->rstk);
    free(m->tmp.top), free(m->merge.top);
    free(m->step[0].top), free(m->step[1].top);
    for (int k = 0; k < N_CACHE; k++) free(m->cache[k].key), free(m->cache[k].mask);
    if (m->owns_grammar) kipp_grammar_free((kipp_grammar *)m->g);
    free(m);
}

void kipp_matcher_own_grammar(kipp_matcher *m) {
    m->owns_grammar = 1;
}

/* Runs bytes from the current state; commit: make the result the state. 1 if accepted. */
static int run_bytes(kipp_matcher *m, const char *bytes, size_t n, int commit) {
    m->yielded = 0;
    if (m->failed) return 0;
    if (n == 0) return 1;
    begin(m, now_s());
    const uint32_t mark = m->nf;
    sset *a = &m->step[0], *b = &m->step[1];
    sset_copy(m, a, &m->cur);
    for (size_t i = 0; i < n; i++) {
        advance(m, a, (unsigned char)bytes[i], b);
        if (m->failed || m->yielded || (b->n == 0 && (!b->complete || i + 1 < n))) {
            m->nf = mark;
            return 0;
        }
        sset *x = a;
        a = b, b = x;
    }
    if (!commit) {
        m->nf = mark;
        return 1;
    }
    sset_copy(m, &m->cur, a);
    compact(m);
    return 1;
}

int kipp_matcher_accept_bytes(kipp_matcher *m, const char *bytes, size_t n) {
    return run_bytes(m, bytes, n, 1);
}

int kipp_matcher_complete(const kipp_matcher *m) { return m->cur.complete; }
int kipp_matcher_finished(const kipp_matcher *m) { return m->cur.complete && m->cur.n == 0; }

static int token(kipp_matcher *m, int32_t id, int commit) {
    const kipp_token_trie *t = m->t;
    m->yielded = 0;
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab || m->failed) return 0;
    if (t->is_eog[id]) return m->cur.complete;
    const uint32_t len = tok_len(t, (uint32_t)id);
    return len ? run_bytes(m, t->blob + t->off[id], len, commit) : 0;
}

int kipp_matcher_accept_token(kipp_matcher *m, int32_t id) { return token(m, id, 1); }
int kipp_matcher_allows_token(kipp_matcher *m, int32_t id) { return token(m, id, 0); }

/* ---- masks ----------------------------------------------------------------------------------- */

static int top_has(const kipp_matcher *m, uint32_t f, unsigned b) {
    return kipp_gset_has(m->g->sets[m->g->el[m->fpos[f]].arg], b);
}

static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t state_hash(const uint32_t *tops, uint32_t n, int complete) {
    uint32_t h = 2166136261u ^ (uint32_t)complete;
    for (uint32_t k = 0; k < n; k++) h = (h ^ tops[k]) * 16777619u;
    return h;
}

/* The walk state with these tops (sorted here; not a pointer into mbuf): an existing one
 * when it has the same tops, so a state reached along many trie paths (an ambiguous
 * grammar's loops reach the same set over and over) is derived from once. NONE: out of
 * memory. */
static uint32_t new_state(kipp_matcher *m, uint32_t *tops, uint32_t n, int complete) {
    qsort(tops, n, sizeof *tops, cmp_u32);
    if (2 * (m->n_ws + 1) > m->cap_intern) { /* grow and rehash this walk's states */
        const uint32_t cap = m->cap_intern ? 2 * m->cap_intern : 64;
        uint32_t *t = calloc(cap, sizeof *t), *st = calloc(cap, sizeof *st);
        if (!t || !st) { free(t), free(st); m->oom = 1; return NONE; }
        for (uint32_t i = 0; i < m->n_ws; i++) {
            const wstate *w = &m->ws[i];
            uint32_t h = state_hash(m->mbuf + w->off, w->n, w->complete) & (cap - 1);
            while (st[h] == m->gen) h = (h + 1) & (cap - 1);
            t[h] = i + 1, st[h] = m->gen;
        }
        free(m->intern), free(m->intern_stamp);
        m->intern = t, m->intern_stamp = st, m->cap_intern = cap;
    }
    uint32_t h = state_hash(tops, n, complete) & (m->cap_intern - 1);
    for (; m->intern_stamp[h] == m->gen; h = (h + 1) & (m->cap_intern - 1)) {
        const wstate *w = &m->ws[m->intern[h] - 1];
        if (w->n == n && w->complete == complete && !memcmp(m->mbuf + w->off, tops, n * sizeof *tops))
            return m->intern[h] - 1;
    }
    if (grow(m, (void **)&m->mbuf, &m->cap_mbuf, m->n_mbuf, n, sizeof *m->mbuf) ||
        grow(m, (void **)&m->ws, &m->cap_ws, m->n_ws, 1, sizeof *m->ws))
        return NONE;
    wstate *w = &m->ws[m->n_ws];
    memset(w, 0, sizeof *w);
    w->off = m->n_mbuf;
    w->n = n;
    w->complete = complete;
    w->disp = w->cls = NONE;
    memcpy(m->mbuf + m->n_mbuf, tops, n * sizeof *tops);
    m->n_mbuf += n;
    for (uint32_t k = 0; k < n; k++) {
        const uint64_t *set = m->g->sets[m->g->el[m->fpos[tops[k]]].arg];
        w->allow[0] |= set[0], w->allow[1] |= set[1], w->allow[2] |= set[2], w->allow[3] |= set[3];
    }
    m->intern[h] = m->n_ws + 1;
    m->intern_stamp[h] = m->gen;
    return m->n_ws++;
}

/* The state after top frame f matched a byte (memoized per walk). */
static uint32_t after(kipp_matcher *m, uint32_t f) {
    if (m->memo[f].gen == m->gen) return m->memo[f].sid;
    sset *t = &m->tmp;
    t->n = 0;
    t->complete = 0;
    m->budget = MAX_RESOLVE;
    resolve(m, m->fpos[f] + 1, m->fpar[f], t); /* may grow the frame arrays and memo[] */
    m->work += MAX_RESOLVE - m->budget + t->n;
    const uint32_t sid = new_state(m, t->top, t->n, t->complete);
    m->memo[f] = (memo_ent){.gen = m->gen, .sid = sid};
    return sid;
}

/* The state after byte b when several tops of state sid match it: the union of what each
 * leads to, repeated stacks dropped (frames are hash-consed: equal stacks, equal index). */
static uint32_t merge(kipp_matcher *m, uint32_t sid, unsigned b) {
    sset *mg = &m->merge;
    mg->n = 0;
    int complete = 0;
    for (uint32_t k = 0; k < m->ws[sid].n; k++) {
        const uint32_t f = m->mbuf[m->ws[sid].off + k];
        if (!top_has(m, f, b)) continue;
        const uint32_t a = after(m, f);
        if (a == NONE || m->failed || m->yielded) return NONE;
        complete |= m->ws[a].complete;
        m->work += (uint64_t)m->ws[a].n * (mg->n + 1);
        for (uint32_t j = 0; j < m->ws[a].n; j++) {
            m->ops += mg->n + 1;
            if (stop_now(m)) return NONE;
            const uint32_t g = m->mbuf[m->ws[a].off + j];
            uint32_t q = 0;
            while (q < mg->n && mg->top[q] != g) q++;
            if (q < mg->n) continue;
            if (mg->n == mg->cap && grow(m, (void **)&mg->top, &mg->cap, mg->n, 1, sizeof *mg->top))
                return NONE;
            mg->top[mg->n++] = g;
        }
    }
    return new_state(m, mg->top, mg->n, complete);
}

/* State sid's dispatch table and byte classes. */
static void build_disp(kipp_matcher *m, uint32_t sid) {
    if (grow(m, (void **)&m->dbuf, &m->cap_dbuf, m->n_dbuf, 256, sizeof *m->dbuf)) return;
    uint16_t *d = m->dbuf + m->n_dbuf;
    const uint32_t n = m->ws[sid].n, off = m->ws[sid].off, c0 = m->n_cbuf;
    m->work += 256u * n;
    m->ops += 256u * n;
    uint32_t n_cls = 0;
    for (unsigned b = 0; b < 256; b++) {
        d[b] = 0;
        if (!kipp_gset_has(m->ws[sid].allow, b)) continue;
        uint64_t tops = 0;
        uint32_t count = 0, last = 0;
        for (uint32_t k = 0; k < n; k++)
            if (top_has(m, m->mbuf[off + k], b)) {
                count++, last = k;
                if (k < 64) tops |= 1ull << k;
            }
        if (count == 1 && last < MULTI - 1) { d[b] = (uint16_t)(last + 1); continue; }
        if (count == 0) continue;
        d[b] = MULTI;
        if (n > 64) continue;
        uint32_t c = 0;
        while (c < n_cls && m->cbuf[c0 + c].tops != tops) c++;
        if (c == n_cls) {
            if (n_cls == MULTI - 1 || grow(m, (void **)&m->cbuf, &m->cap_cbuf, m->n_cbuf, 1, sizeof *m->cbuf))
                continue;
            m->cbuf[m->n_cbuf++] = (wclass){.tops = tops, .sid = NONE};
            n_cls++;
        }
        d[b] = (uint16_t)(CLASS | c);
    }
    m->ws[sid].disp = m->n_dbuf;
    m->ws[sid].cls = c0;
    m->ws[sid].n_cls = n_cls;
    m->n_dbuf += 256;
}

/* Enters trie node `node` in walk state sid (a walk_frame on m->wstk). 0: out of memory
 * (the tokens below stay masked). */
static int walk_push(kipp_matcher *m, uint32_t *sp, uint32_t node, uint32_t sid) {
    if (grow(m, (void **)&m->wstk, &m->cap_wstk, *sp, 1, sizeof *m->wstk)) return 0;
    if (m->ws[sid].disp == NONE && ++m->ws[sid].visits >= 2) build_disp(m, sid);
    walk_frame *f = &m->wstk[(*sp)++];
    f->sid = sid;
    f->e = m->t->e0[node];
    f->e_end = f->e + m->t->ne[node];
    f->disp = m->ws[sid].disp; /* offsets: deeper steps may move the buffers */
    memcpy(f->allow, m->ws[sid].allow, sizeof f->allow);
    return 1;
}

/* Below trie node `root` in walk state sid0: marks every token the state allows, depth
 * first in edge order. Iterative (m->wstk): the trie is as deep as the longest token, and
 * a GGUF may hold a token of any length. Frames made here live until the whole walk ends
 * (states refer to them). */
static void walk(kipp_matcher *m, uint32_t root, uint32_t sid0, uint32_t *bits) {
    const kipp_token_trie *t = m->t;
    uint32_t sp = 0;
    if (!walk_push(m, &sp, root, sid0)) return;
    while (sp) {
        walk_frame *f = &m->wstk[sp - 1];
        if (f->e >= f->e_end) { sp--; continue; }
        const uint32_t e = f->e++, sid = f->sid, disp = f->disp;
        const unsigned b = t->ebyte[e];
        if (!kipp_gset_has(f->allow, b)) continue;
        if (++m->work > m->budget_work) return; /* partial: see WALK_WORK_BUDGET */
        m->ops++;
        if (stop_now(m)) return; /* failed: the caller discards the mask */
        uint32_t d;
        if (disp != NONE) {
            d = m->dbuf[disp + b];
        } else { /* first visit: find the matching top */
            d = 0;
            m->work += m->ws[sid].n;
            m->ops += m->ws[sid].n;
            for (uint32_t k = 0; k < m->ws[sid].n && d != MULTI; k++)
                if (top_has(m, m->mbuf[m->ws[sid].off + k], b)) d = d ? MULTI : k + 1;
        }
        uint32_t csid;
        if (d == 0) continue;
        if (d < MULTI) { /* the usual case: one top matches */
            csid = after(m, m->mbuf[m->ws[sid].off + d - 1]);
        } else if (d & CLASS) {
            wclass *c = &m->cbuf[m->ws[sid].cls + (d & ~CLASS)];
            if (c->sid == NONE) {
                const uint32_t r = merge(m, sid, b); /* may move cbuf */
                m->cbuf[m->ws[sid].cls + (d & ~CLASS)].sid = r;
            }
            csid = m->cbuf[m->ws[sid].cls + (d & ~CLASS)].sid;
        } else {
            csid = merge(m, sid, b);
        }
        if (csid == NONE) continue; /* out of memory: the token stays masked */
        m->st.trie_nodes++;
        const uint32_t child = t->echild[e];
        if (m->ws[csid].n || m->ws[csid].complete) {
            for (uint32_t k = t->t0[child]; k < t->t0[child] + t->nt[child]; k++)
                bits[t->toks[k] >> 5] |= 1u << (t->toks[k] & 31);
            if (m->ws[csid].n && t->ne[child]) walk_push(m, &sp, child, csid); /* f may move */
        }
    }
}

/* The state as a key: each stack's chain of positions, top first, 0-separated (positions
 * are stored + 1). Equal keys mean equal states, hence equal masks. */
static uint32_t state_key(kipp_matcher *m) {
    uint32_t n = 0;
    for (uint32_t k = 0; k <= m->cur.n; k++) {
        for (uint32_t f = k < m->cur.n ? m->cur.top[k] : 0;; f = m->fpar[f]) {
            if (grow(m, (void **)&m->key, &m->cap_key, n, 2, sizeof *m->key)) return 0;
            if (k == m->cur.n) { m->key[n++] = (uint32_t)m->cur.complete; break; }
            if (!f) { m->key[n++] = 0; break; }
            m->key[n++] = m->fpos[f] + 1;
        }
    }
    return n;
}

void kipp_matcher_mask(kipp_matcher *m, uint32_t *bits) {
    const kipp_token_trie *t = m->t;
    if (!t) return;
    m->yielded = 0;
    if (m->failed) { /* for good: nothing is allowed */
        memset(bits, 0, m->n_words * sizeof *bits);
        return;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    begin(m, (double)t0.tv_sec + 1e-9 * (double)t0.tv_nsec);
    m->st.masks++;
    const uint32_t nk = state_key(m);
    uint32_t h = 2166136261u;
    for (uint32_t k = 0; k < nk; k++) h = (h ^ m->key[k]) * 16777619u;
    cache_entry *hit = NULL, *victim = &m->cache[0];
    for (int k = 0; k < N_CACHE && nk; k++) {
        cache_entry *c = &m->cache[k];
        if (c->valid && c->hash == h && c->n_key == nk && !memcmp(c->key, m->key, nk * sizeof *m->key)) {
            hit = c;
            break;
        }
        if (!c->valid || c->used < victim->used) victim = c;
    }
    if (hit) {
        memcpy(bits, hit->mask, m->n_words * sizeof *bits);
        hit->used = ++m->clock;
        m->st.cache_hits++;
    } else {
        memset(bits, 0, m->n_words * sizeof *bits);
        const uint32_t mark = m->nf;
        m->n_mbuf = m->n_ws = m->n_dbuf = m->n_cbuf = 0;
        m->work = 0;
        if (m->cur.n) {
            sset_copy(m, &m->tmp, &m->cur); /* new_state sorts its argument */
            const uint32_t root = new_state(m, m->tmp.top, m->tmp.n, m->cur.complete);
            if (root != NONE) walk(m, 0, root, bits);
        }
        m->nf = mark;
        m->gen++; /* the walk's frames are gone: so are its states */
        const int partial = m->work > m->budget_work;
        m->st.partial += partial;
        if (m->cur.complete)
            for (uint32_t k = 0; k < t->n_eog; k++) bits[t->eog[k] >> 5] |= 1u << (t->eog[k] & 31);
        if (m->failed || m->yielded) memset(bits, 0, m->n_words * sizeof *bits);
        m->st.masks -= m->yielded; /* not a mask: it is computed again */
        if (nk && !m->oom && !partial && !m->failed && !m->yielded) { /* keep it (a partial mask is not worth keeping) */
            if (!victim->mask) victim->mask = malloc(m->n_words * sizeof *victim->mask);
            uint32_t *key = realloc(victim->key, nk * sizeof *key);
            if (key) victim->key = key;
            if (victim->mask && key) {
                memcpy(victim->key, m->key, nk * sizeof *key);
                memcpy(victim->mask, bits, m->n_words * sizeof *bits);
                victim->n_key = nk, victim->hash = h, victim->valid = 1, victim->used = ++m->clock;
            } else {
                victim->valid = 0;
            }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    m->st.seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

void kipp_matcher_apply(kipp_matcher *m, float *logits, uint32_t n) {
    if (!m->t) return;
    uint32_t stack_bits[8192];
    uint32_t *bits = m->n_words <= 8192 ? stack_bits : malloc(m->n_words * sizeof *bits);
    if (!bits) { /* no memory for the mask: allow only end-of-generation */
        for (uint32_t i = 0; i < n; i++)
            if (i >= m->t->n_vocab || !m->t->is_eog[i]) logits[i] = -INFINITY;
        return;
    }
    kipp_matcher_mask(m, bits);
    if (m->yielded) { /* logits untouched: the caller computes it again */
        if (bits != stack_bits) free(bits);
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        if (i >= m->t->n_vocab || !((bits[i >> 5] >> (i & 31)) & 1)) logits[i] = -INFINITY;
    if (bits != stack_bits) free(bits);
}

void kipp_matcher_get_stats(const kipp_matcher *m, kipp_matcher_stats *out) { *out = m->st; }

void kipp_matcher_set_work_budget(kipp_matcher *m, uint64_t units) { m->budget_work = units; }

void kipp_matcher_set_time_limit(kipp_matcher *m, double seconds) { m->time_limit = seconds > 0 ? seconds : 0; }

void kipp_matcher_set_interrupt(kipp_matcher *m, int (*fn)(void *), void *arg) {
    m->interrupt = fn;
    m->interrupt_arg = arg;
}

const char *kipp_matcher_error(const kipp_matcher *m) { return m->failed ? m->why : NULL; }

void kipp_matcher_set_yield(kipp_matcher *m, double deadline) { m->yield_at = deadline > 0 ? deadline : 0; }

int kipp_matcher_yielded(const kipp_matcher *m) { return m->yielded; }
