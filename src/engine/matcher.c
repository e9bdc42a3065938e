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

#include "core/error.h"
#include "engine/grammar_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_TOPS 1024   /* stacks kept per state (ambiguous grammars beyond: the rest are dropped) */
#define MAX_RESOLVE 4096 /* rule expansions per step without a byte (bounds hostile grammars) */
#define N_CACHE 64

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
    uint32_t n_vocab, max_depth;
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

static int64_t trie_node(trie_builder *b, uint32_t lo, uint32_t hi, uint32_t depth) {
    kipp_token_trie *t = b->t;
    if (t->n_nodes == t->cap_nodes) {
        uint32_t cap = t->cap_nodes ? 2 * t->cap_nodes : 1024;
        uint32_t *e0 = realloc(t->e0, cap * sizeof *e0), *t0 = e0 ? realloc(t->t0, cap * sizeof *t0) : NULL;
        if (e0) t->e0 = e0;
        if (t0) t->t0 = t0;
        uint16_t *ne = t0 ? realloc(t->ne, cap * sizeof *ne) : NULL;
        if (ne) t->ne = ne;
        uint16_t *nt = ne ? realloc(t->nt, cap * sizeof *nt) : NULL;
        if (nt) t->nt = nt;
        if (!nt) { b->oom = 1; return -1; }
        t->cap_nodes = cap;
    }
    const uint32_t node = t->n_nodes++;
    if (depth > t->max_depth) t->max_depth = depth;
    t->t0[node] = t->n_toks;
    t->nt[node] = 0;
    while (lo < hi && tok_len(t, b->ids[lo]) == depth) t->toks[t->n_toks++] = (int32_t)b->ids[lo++], t->nt[node]++;
    uint32_t n_child = 0;
    for (uint32_t i = lo; i < hi;) {
        const unsigned char c = (unsigned char)t->blob[t->off[b->ids[i]] + depth];
        while (i < hi && (unsigned char)t->blob[t->off[b->ids[i]] + depth] == c) i++;
        n_child++;
    }
    if (t->n_edges + n_child > t->cap_edges) {
        uint32_t cap = t->cap_edges ? t->cap_edges : 1024;
        while (cap < t->n_edges + n_child) cap *= 2;
        uint8_t *eb = realloc(t->ebyte, cap);
        if (eb) t->ebyte = eb;
        uint32_t *ec = eb ? realloc(t->echild, cap * sizeof *ec) : NULL;
        if (!ec) { b->oom = 1; return -1; }
        t->echild = ec;
        t->cap_edges = cap;
    }
    const uint32_t e0 = t->n_edges;
    t->e0[node] = e0;
    t->ne[node] = (uint16_t)n_child;
    t->n_edges += n_child;
    uint32_t k = 0;
    for (uint32_t i = lo; i < hi; k++) {
        const unsigned char c = (unsigned char)t->blob[t->off[b->ids[i]] + depth];
        uint32_t j = i;
        while (j < hi && (unsigned char)t->blob[t->off[b->ids[j]] + depth] == c) j++;
        int64_t child = trie_node(b, i, j, depth + 1);
        if (child < 0) return -1;
        b->t->ebyte[e0 + k] = c;
        b->t->echild[e0 + k] = (uint32_t)child;
        i = j;
    }
    return node;
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
    int64_t root = trie_node(&b, 0, n_ids, 0);
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

/* During a mask walk: what a top frame leads to once it has matched a byte (the closure of
 * the position after it). It does not depend on which byte, and frames are immutable, so
 * it is computed once per frame per walk; valid while gen matches the walk's. */
typedef struct {
    uint32_t off, n; /* tops in mbuf */
    uint32_t gen;
    int complete;
    uint32_t visits; /* trie nodes walked in this state */
    uint32_t disp;   /* its dispatch table in dbuf (built on the second visit), or NO_DISP */
    uint64_t allow[4];
} memo_ent;

#define NO_DISP UINT32_MAX
#define DISP_MULTI 0xFFFF /* more than one top matches the byte */

struct kipp_matcher {
    const kipp_grammar *g;
    const kipp_token_trie *t;
    uint32_t *fpos, *fpar; /* frames; index 0 is the bottom (no frame) */
    uint32_t nf, capf;
    sset cur;
    sset *lv;              /* walk levels: lv[d] is the state after d bytes of a token */
    uint32_t n_lv;
    uint32_t n_words;
    cache_entry cache[N_CACHE];
    uint32_t clock;
    uint32_t *key;
    uint32_t cap_key;
    uint32_t budget;       /* expansions left in this step */
    memo_ent *memo;        /* [capf] */
    uint32_t gen;          /* the current walk (memo entries of other walks are stale) */
    uint32_t *mbuf;        /* memo results and merged states of the current walk */
    uint32_t n_mbuf, cap_mbuf;
    uint16_t *dbuf;        /* dispatch tables: per byte, 1 + the one top that matches it,
                              0 for none, DISP_MULTI */
    uint32_t n_dbuf, cap_dbuf;
    sset tmp;              /* memo_of's scratch */
    sset merge;            /* walk's scratch for states several tops lead to */
    int oom;
    int owns_grammar;
    kipp_matcher_stats st;
};

static uint32_t new_frame(kipp_matcher *m, uint32_t pos, uint32_t parent) {
    if (m->nf == m->capf) {
        uint32_t cap = 2 * m->capf;
        uint32_t *p = realloc(m->fpos, cap * sizeof *p), *q = p ? realloc(m->fpar, cap * sizeof *q) : NULL;
        if (p) m->fpos = p;
        if (q) m->fpar = q;
        memo_ent *me = q ? realloc(m->memo, cap * sizeof *me) : NULL;
        if (!me) { m->oom = 1; return 0; }
        memset(me + m->capf, 0, (cap - m->capf) * sizeof *me);
        m->memo = me;
        m->capf = cap;
    }
    m->fpos[m->nf] = pos;
    m->fpar[m->nf] = parent;
    return m->nf++;
}

static void add_top(kipp_matcher *m, sset *s, uint32_t pos, uint32_t parent) {
    for (uint32_t k = 0; k < s->n; k++)
        if (m->fpos[s->top[k]] == pos && m->fpar[s->top[k]] == parent) return;
    if (s->n == s->cap) {
        if (s->cap >= MAX_TOPS) return;
        uint32_t cap = s->cap ? 2 * s->cap : 16;
        uint32_t *p = realloc(s->top, cap * sizeof *p);
        if (!p) { m->oom = 1; return; }
        s->top = p;
        s->cap = cap;
    }
    uint32_t f = new_frame(m, pos, parent);
    if (f) s->top[s->n++] = f;
}

/* Follows position pos (with its return chain parent) to every G_BYTES element it can
 * reach without consuming a byte; reaching the end of the bottom frame marks complete. */
static void resolve(kipp_matcher *m, uint32_t pos, uint32_t parent, sset *out) {
    const kipp_grammar *g = m->g;
    for (;;) {
        const kipp_gelem e = g->el[pos];
        if (e.kind == G_END) {
            if (parent == 0) { out->complete = 1; return; }
            pos = m->fpos[parent];
            parent = m->fpar[parent];
            continue;
        }
        if (e.kind == G_BYTES) { add_top(m, out, pos, parent); return; }
        if (m->budget == 0) return;
        m->budget--;
        /* a rule: its caller resumes at pos + 1, unless that is the end (a tail call) */
        const uint32_t np = g->el[pos + 1].kind == G_END ? parent : new_frame(m, pos + 1, parent);
        if (np == 0 && g->el[pos + 1].kind != G_END) return; /* out of memory */
        const uint32_t a0 = g->rule_alt0[e.arg], na = g->rule_nalt[e.arg];
        for (uint32_t a = 0; a < na; a++) resolve(m, g->alt_start[a0 + a], np, out);
        return;
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
    m->budget = MAX_RESOLVE;
    for (uint32_t k = 0; k < in->n; k++) {
        const uint32_t f = in->top[k], pos = m->fpos[f];
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
    memset(m->memo, 0, m->capf * sizeof *m->memo);
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
    m->gen = 1;
    m->nf = 1;
    m->n_lv = (t ? t->max_depth : 0) + 2;
    m->lv = calloc(m->n_lv, sizeof *m->lv);
    m->n_words = t ? (t->n_vocab + 31) / 32 : 0;
    int bad = !m->fpos || !m->fpar || !m->memo || !m->lv || sset_reserve(m, &m->cur) ||
              sset_reserve(m, &m->tmp) || sset_reserve(m, &m->merge);
    for (uint32_t k = 0; k < m->n_lv && !bad; k++) bad = sset_reserve(m, &m->lv[k]);
    if (!bad) {
        m->budget = MAX_RESOLVE;
        const uint32_t a0 = g->rule_alt0[g->root], na = g->rule_nalt[g->root];
        for (uint32_t a = 0; a < na; a++) resolve(m, g->alt_start[a0 + a], 0, &m->cur);
        bad = m->oom;
    }
    if (bad) {
        kipp_matcher_free(m);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory for a grammar matcher");
    }
    *out = m;
    return KIPP_OK;
}

void kipp_matcher_free(kipp_matcher *m) {
    if (!m) return;
    free(m->fpos), free(m->fpar), free(m->cur.top), free(m->key), free(m->memo), free(m->mbuf);
    free(m->dbuf);
    free(m->tmp.top), free(m->merge.top);
    for (uint32_t k = 0; m->lv && k < m->n_lv; k++) free(m->lv[k].top);
    free(m->lv);
    for (int k = 0; k < N_CACHE; k++) free(m->cache[k].key), free(m->cache[k].mask);
    if (m->owns_grammar) kipp_grammar_free((kipp_grammar *)m->g);
    free(m);
}

void kipp_matcher_own_grammar(kipp_matcher *m) {
    m->owns_grammar = 1;
}

/* Runs bytes from the current state; commit: make the result the state. 1 if accepted. */
static int run_bytes(kipp_matcher *m, const char *bytes, size_t n, int commit) {
    if (n == 0) return 1;
    const uint32_t mark = m->nf;
    sset *a = &m->lv[0], *b = &m->lv[1];
    sset_copy(m, a, &m->cur);
    for (size_t i = 0; i < n; i++) {
        advance(m, a, (unsigned char)bytes[i], b);
        if (b->n == 0 && (!b->complete || i + 1 < n)) {
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
    if (!t || id < 0 || (uint32_t)id >= t->n_vocab) return 0;
    if (t->is_eog[id]) return m->cur.complete;
    const uint32_t len = tok_len(t, (uint32_t)id);
    return len ? run_bytes(m, t->blob + t->off[id], len, commit) : 0;
}

int kipp_matcher_accept_token(kipp_matcher *m, int32_t id) { return token(m, id, 1); }
int kipp_matcher_allows_token(kipp_matcher *m, int32_t id) { return token(m, id, 0); }

/* ---- masks ----------------------------------------------------------------------------------- */

static int mbuf_reserve(kipp_matcher *m, uint32_t extra) {
    if (m->n_mbuf + extra <= m->cap_mbuf) return 0;
    uint32_t cap = m->cap_mbuf ? 2 * m->cap_mbuf : 4096;
    while (cap < m->n_mbuf + extra) cap *= 2;
    uint32_t *p = realloc(m->mbuf, cap * sizeof *p);
    if (!p) { m->oom = 1; return -1; }
    m->mbuf = p, m->cap_mbuf = cap;
    return 0;
}

/* The memoized closure of top frame f after it matched a byte (see memo_ent). */
static memo_ent memo_of(kipp_matcher *m, uint32_t f) {
    if (m->memo[f].gen == m->gen) return m->memo[f];
    sset *t = &m->tmp;
    t->n = 0;
    t->complete = 0;
    m->budget = MAX_RESOLVE;
    resolve(m, m->fpos[f] + 1, m->fpar[f], t); /* may grow the frame arrays and memo[] */
    if (mbuf_reserve(m, t->n)) t->n = 0;
    memo_ent *e = &m->memo[f];
    memset(e, 0, sizeof *e);
    e->off = m->n_mbuf;
    e->n = t->n;
    e->complete = t->complete;
    e->gen = m->gen;
    e->disp = NO_DISP;
    memcpy(m->mbuf + m->n_mbuf, t->top, t->n * sizeof *t->top);
    m->n_mbuf += t->n;
    for (uint32_t k = 0; k < t->n; k++) {
        const uint64_t *set = m->g->sets[m->g->el[m->fpos[t->top[k]]].arg];
        e->allow[0] |= set[0], e->allow[1] |= set[1], e->allow[2] |= set[2], e->allow[3] |= set[3];
    }
    return *e;
}

static int top_has(const kipp_matcher *m, uint32_t f, unsigned b) {
    return kipp_gset_has(m->g->sets[m->g->el[m->fpos[f]].arg], b);
}

/* Per byte: the one top of state (off, n) that matches it. */
static uint32_t build_disp(kipp_matcher *m, uint32_t off, uint32_t n, const uint64_t *allow) {
    if (m->n_dbuf + 256 > m->cap_dbuf) {
        uint32_t cap = m->cap_dbuf ? 2 * m->cap_dbuf : 256 * 64;
        uint16_t *p = realloc(m->dbuf, cap * sizeof *p);
        if (!p) { m->oom = 1; return NO_DISP; }
        m->dbuf = p, m->cap_dbuf = cap;
    }
    uint16_t *d = m->dbuf + m->n_dbuf;
    for (unsigned b = 0; b < 256; b++) {
        d[b] = 0;
        if (!kipp_gset_has(allow, b)) continue;
        for (uint32_t k = 0; k < n; k++)
            if (top_has(m, m->mbuf[off + k], b)) {
                d[b] = d[b] ? DISP_MULTI : (uint16_t)(k + 1);
                if (d[b] == DISP_MULTI) break;
            }
    }
    m->n_dbuf += 256;
    return m->n_dbuf - 256;
}

/* Below trie node `node` with the state held in mbuf[off, off + n) (sid: the frame whose
 * memo entry that is, 0 for a merged state): marks every token the state allows. Frames
 * made here live until the whole walk ends (the memo refers to them). */
static void walk(kipp_matcher *m, uint32_t node, uint32_t off, uint32_t n, uint32_t sid,
                 uint32_t *bits) {
    const kipp_token_trie *t = m->t;
    uint64_t allow[4];
    const uint16_t *disp = NULL;
    if (sid) {
        memo_ent *e = &m->memo[sid];
        memcpy(allow, e->allow, sizeof allow);
        if (e->disp == NO_DISP && ++e->visits >= 2) e->disp = build_disp(m, off, n, allow);
        if (m->memo[sid].disp != NO_DISP) disp = m->dbuf + m->memo[sid].disp;
    } else {
        memset(allow, 0, sizeof allow);
        for (uint32_t k = 0; k < n; k++) {
            const uint64_t *set = m->g->sets[m->g->el[m->fpos[m->mbuf[off + k]]].arg];
            allow[0] |= set[0], allow[1] |= set[1], allow[2] |= set[2], allow[3] |= set[3];
        }
    }
    const uint32_t e0 = t->e0[node], ne = t->ne[node];
    for (uint32_t e = e0; e < e0 + ne; e++) {
        const unsigned b = t->ebyte[e];
        if (!kipp_gset_has(allow, b)) continue;
        const uint32_t child = t->echild[e];
        uint32_t k1 = 0; /* 1 + the one matching top, or DISP_MULTI */
        if (disp) k1 = disp[b];
        else
            for (uint32_t k = 0; k < n && k1 != DISP_MULTI; k++)
                if (top_has(m, m->mbuf[off + k], b)) k1 = k1 ? DISP_MULTI : k + 1;
        uint32_t coff, cn, csid = 0;
        int complete;
        if (k1 != DISP_MULTI) { /* the usual case: the child's state is one memo entry */
            csid = m->mbuf[off + k1 - 1];
            const memo_ent me = memo_of(m, csid);
            coff = me.off, cn = me.n, complete = me.complete;
        } else { /* several tops match: merge their closures, dropping repeated stacks */
            complete = 0;
            sset *mg = &m->merge;
            mg->n = 0;
            for (uint32_t k = 0; k < n; k++) {
                const uint32_t f = m->mbuf[off + k];
                if (!top_has(m, f, b)) continue;
                const memo_ent me = memo_of(m, f);
                complete |= me.complete;
                for (uint32_t j = 0; j < me.n; j++) {
                    const uint32_t g = m->mbuf[me.off + j];
                    add_top(m, mg, m->fpos[g], m->fpar[g]);
                }
            }
            if (mbuf_reserve(m, mg->n)) mg->n = 0;
            coff = m->n_mbuf;
            cn = mg->n;
            memcpy(m->mbuf + coff, mg->top, cn * sizeof *mg->top);
            m->n_mbuf += cn;
        }
        m->st.trie_nodes++;
        if (cn || complete) {
            for (uint32_t k = t->t0[child]; k < t->t0[child] + t->nt[child]; k++)
                bits[t->toks[k] >> 5] |= 1u << (t->toks[k] & 31);
            if (cn && t->ne[child]) walk(m, child, coff, cn, csid, bits);
        }
    }
}

/* The state as a key: each stack's chain of positions, top first, 0-separated (positions
 * are stored + 1). Equal keys mean equal states, hence equal masks. */
static uint32_t state_key(kipp_matcher *m) {
    uint32_t n = 0;
    for (uint32_t k = 0; k <= m->cur.n; k++) {
        for (uint32_t f = k < m->cur.n ? m->cur.top[k] : 0;; f = m->fpar[f]) {
            if (n + 2 > m->cap_key) {
                uint32_t cap = m->cap_key ? 2 * m->cap_key : 256;
                uint32_t *p = realloc(m->key, cap * sizeof *p);
                if (!p) { m->oom = 1; return 0; }
                m->key = p;
                m->cap_key = cap;
            }
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
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
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
        m->n_dbuf = 0;
        if (m->cur.n && !mbuf_reserve(m, m->cur.n)) {
            memcpy(m->mbuf, m->cur.top, m->cur.n * sizeof *m->mbuf);
            m->n_mbuf = m->cur.n;
            walk(m, 0, 0, m->cur.n, 0, bits);
        }
        m->nf = mark;
        m->gen++; /* the walk's frames are gone: so are its memo entries */
        if (m->cur.complete)
            for (uint32_t k = 0; k < t->n_eog; k++) bits[t->eog[k] >> 5] |= 1u << (t->eog[k] & 31);
        if (nk && !m->oom) { /* keep it */
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
    for (uint32_t i = 0; i < n; i++)
        if (i >= m->t->n_vocab || !((bits[i >> 5] >> (i & 31)) & 1)) logits[i] = -INFINITY;
    if (bits != stack_bits) free(bits);
}

void kipp_matcher_get_stats(const kipp_matcher *m, kipp_matcher_stats *out) { *out = m->st; }
