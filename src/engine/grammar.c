/* grammar.c — compiles the EBNF dialect of grammar.h into the byte-level form of
 * grammar_int.h: literals become byte sequences, character classes become rules of UTF-8
 * byte-range sequences, groups and repetitions become helper rules (x* is R ::= x R | ε,
 * right-recursive so that the matcher's tail calls keep the stack flat). Refuses undefined
 * rules and left recursion, which a top-down matcher cannot run. Does not match anything
 * (matcher.c). */
#include "engine/grammar.h"

#include "core/buf.h"
#include "core/error.h"
#include "engine/grammar_int.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPEAT 1000
#define MAX_RULES (1u << 20)
#define MAX_DEPTH 200 /* nesting of ( ) */

typedef struct {
    kipp_gelem *p;
    uint32_t n;
    size_t cap; /* kipp_grow's */
} evec;

typedef struct {
    char *name; /* NULL for helper rules */
    evec body;  /* alternatives, each terminated by G_END */
    int defined;
    uint32_t line; /* first use, for "not defined" */
    uint32_t def_line; /* where a named rule is defined; a helper rule: where it was made */
    uint32_t owner;    /* the named rule whose definition made it (itself for a named rule) */
} prule;

typedef struct {
    const char *s;
    size_t n, i;
    uint32_t line;
    prule *rules;
    uint32_t n_rules;
    size_t cap_rules;
    uint64_t (*sets)[4];
    uint32_t n_sets;
    size_t cap_sets;
    uint32_t *names, *setix; /* hash tables (open addressing) of rule names and byte sets:
                                index + 1, 0 empty; sized to stay under half full */
    uint32_t cap_names, cap_setix;
    char *err;
    size_t err_len;
    int failed, oom, depth;
    uint32_t cur; /* the named rule being parsed (helper rules' owner) */
} parser;

static uint32_t hash_bytes(const void *s, size_t n) {
    const unsigned char *b = s;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

/* Grows a table to twice its size and reinserts every key (key_of gives an entry's bytes). */
static int rehash(uint32_t **tab, uint32_t *cap, uint32_t n_used, const void *(*key_of)(const void *, uint32_t, size_t *),
                  const void *ctx) {
    uint32_t nc = *cap ? 2 * *cap : 256;
    while (nc < 2 * (n_used + 1)) nc *= 2;
    uint32_t *t = calloc(nc, sizeof *t);
    if (!t) return -1;
    for (uint32_t i = 0; i < *cap; i++) {
        if (!(*tab)[i]) continue;
        size_t n;
        const void *k = key_of(ctx, (*tab)[i] - 1, &n);
        uint32_t h = hash_bytes(k, n) & (nc - 1);
        while (t[h]) h = (h + 1) & (nc - 1);
        t[h] = (*tab)[i];
    }
    free(*tab);
    *tab = t;
    *cap = nc;
    return 0;
}

static int perr(parser *p, const char *fmt, const char *a) {
    if (!p->failed) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, a ? a : "");
        kipp_errf(p->err, p->err_len, KIPP_ERR_INVALID_ARG, "grammar line %u: %s", p->line, msg);
    }
    p->failed = 1;
    return -1;
}

/* Grows *arr (elem bytes per entry, *cap entries) with the core's kipp_grow to hold n + 1
 * entries; n counts in uint32_t, so an entry past UINT32_MAX fails like out of memory. */
static int grow(parser *p, void **arr, size_t *cap, uint32_t n, size_t elem) {
    if (n == UINT32_MAX || kipp_grow(arr, cap, (size_t)n + 1, elem) != KIPP_OK) {
        p->oom = 1;
        return perr(p, "out of memory", NULL);
    }
    return 0;
}

static int push(parser *p, evec *v, unsigned kind, uint32_t arg) {
    if (grow(p, (void **)&v->p, &v->cap, v->n, sizeof *v->p)) return -1;
    v->p[v->n].kind = kind;
    v->p[v->n].arg = arg;
    v->n++;
    return 0;
}

static int64_t new_rule(parser *p, const char *name, size_t len) {
    if (p->n_rules >= MAX_RULES) return perr(p, "too many rules", NULL);
    if (grow(p, (void **)&p->rules, &p->cap_rules, p->n_rules, sizeof *p->rules)) return -1;
    prule *r = &p->rules[p->n_rules];
    memset(r, 0, sizeof *r);
    r->line = r->def_line = p->line;
    r->owner = name ? p->n_rules : p->cur;
    if (name) {
        if (!(r->name = malloc(len + 1))) { p->oom = 1; return perr(p, "out of memory", NULL); }
        memcpy(r->name, name, len);
        r->name[len] = 0;
    }
    return p->n_rules++;
}

static const void *name_key(const void *ctx, uint32_t i, size_t *n) {
    const parser *p = ctx;
    *n = strlen(p->rules[i].name);
    return p->rules[i].name;
}

static const void *set_key(const void *ctx, uint32_t i, size_t *n) {
    const parser *p = ctx;
    *n = 32;
    return p->sets[i];
}

static int64_t rule_named(parser *p, const char *name, size_t len) {
    if (2 * (p->n_rules + 1) > p->cap_names && rehash(&p->names, &p->cap_names, p->n_rules, name_key, p)) {
        p->oom = 1;
        return perr(p, "out of memory", NULL);
    }
    uint32_t h = hash_bytes(name, len) & (p->cap_names - 1);
    for (; p->names[h]; h = (h + 1) & (p->cap_names - 1)) {
        const char *nm = p->rules[p->names[h] - 1].name;
        if (strlen(nm) == len && !memcmp(nm, name, len)) return p->names[h] - 1;
    }
    int64_t r = new_rule(p, name, len);
    if (r >= 0) p->names[h] = (uint32_t)r + 1;
    return r;
}

static int64_t byte_set(parser *p, const uint64_t set[4]) {
    if (2 * (p->n_sets + 1) > p->cap_setix && rehash(&p->setix, &p->cap_setix, p->n_sets, set_key, p)) {
        p->oom = 1;
        return perr(p, "out of memory", NULL);
    }
    uint32_t h = hash_bytes(set, 32) & (p->cap_setix - 1);
    for (; p->setix[h]; h = (h + 1) & (p->cap_setix - 1))
        if (!memcmp(p->sets[p->setix[h] - 1], set, 32)) return p->setix[h] - 1;
    if (grow(p, (void **)&p->sets, &p->cap_sets, p->n_sets, sizeof *p->sets)) return -1;
    memcpy(p->sets[p->n_sets], set, 32);
    p->setix[h] = p->n_sets + 1;
    return p->n_sets++;
}

static int push_range(parser *p, evec *v, unsigned lo, unsigned hi) {
    uint64_t set[4] = {0};
    for (unsigned b = lo; b <= hi; b++) set[b >> 6] |= 1ull << (b & 63);
    int64_t k = byte_set(p, set);
    return k < 0 ? -1 : push(p, v, G_BYTES, (uint32_t)k);
}

/* ---- lexing ------------------------------------------------------------------------------ */

static void skip_space(parser *p, int newlines) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            p->i++;
        } else if (c == '\n' && newlines) {
            p->line++;
            p->i++;
        } else {
            break;
        }
    }
}

static int is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes one UTF-8 character of the grammar text at p->i (strictly). */
static int64_t utf8_char(parser *p) {
    const unsigned char *s = (const unsigned char *)p->s + p->i;
    const size_t left = p->n - p->i;
    unsigned c = s[0], n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                                          : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!n || left < n) return perr(p, "the grammar text is not valid UTF-8", NULL);
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (unsigned k = 1; k < n; k++) {
        if ((s[k] & 0xC0) != 0x80) return perr(p, "the grammar text is not valid UTF-8", NULL);
        cp = cp << 6 | (s[k] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return perr(p, "the grammar text is not valid UTF-8", NULL);
    p->i += n;
    return cp;
}

/* One character of a literal or class, escapes resolved. */
static int64_t read_char(parser *p) {
    if (p->i >= p->n) return perr(p, "unexpected end of the grammar", NULL);
    if (p->s[p->i] == '\n') return perr(p, "a literal or class runs to the end of the line", NULL);
    if (p->s[p->i] != '\\') return utf8_char(p);
    if (p->i + 1 >= p->n) return perr(p, "unexpected end of the grammar after '\\'", NULL);
    char e = p->s[p->i + 1];
    p->i += 2;
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': case '"': case '\'': case ']': case '[': case '-': case '^': case '/':
        return (unsigned char)e;
    case 'x': case 'u': case 'U': {
        const int nd = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (int k = 0; k < nd; k++) {
            int h = p->i < p->n ? hexval(p->s[p->i]) : -1;
            if (h < 0) return perr(p, "'\\%s' needs hexadecimal digits", e == 'x' ? "x" : e == 'u' ? "u" : "U");
            v = v * 16 + (uint32_t)h;
            p->i++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return perr(p, "an escape names a code point that is not a character", NULL);
        return v;
    }
    default: {
        char s[2] = {e, 0};
        return perr(p, "unknown escape '\\%s'", s);
    }
    }
}

/* ---- code points to UTF-8 byte ranges -------------------------------------------------- */

static unsigned utf8_encode(uint32_t cp, unsigned char *b) {
    if (cp < 0x80) { b[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { b[0] = (unsigned char)(0xC0 | cp >> 6); b[1] = (unsigned char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | cp >> 18);
    b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Appends to rule body v one alternative per byte-range sequence of [lo, hi] (no
 * surrogates inside): split until every byte position is a plain range, the way UTF-8
 * range compilers in regex engines do. */
static int utf8_alts(parser *p, evec *v, uint32_t lo, uint32_t hi) {
    uint32_t st[96][2];
    int sp = 0;
    st[sp][0] = lo, st[sp][1] = hi, sp++;
    while (sp > 0) {
        sp--;
        uint32_t s = st[sp][0], e = st[sp][1];
    again:
        if (sp > 90) return perr(p, "internal: UTF-8 range split too deep", NULL);
        static const uint32_t limits[3] = {0x7F, 0x7FF, 0xFFFF};
        int split = 0;
        for (int k = 0; k < 3 && !split; k++)
            if (s <= limits[k] && limits[k] < e) {
                st[sp][0] = limits[k] + 1, st[sp][1] = e, sp++;
                e = limits[k];
                split = 1;
            }
        for (int k = 1; k < 4 && !split && e >= 0x80; k++) {
            const uint32_t m = (1u << (6 * k)) - 1;
            if ((s & ~m) == (e & ~m)) continue;
            if (s & m) {
                st[sp][0] = (s | m) + 1, st[sp][1] = e, sp++;
                e = s | m;
                split = 1;
            } else if ((e & m) != m) {
                st[sp][0] = e & ~m, st[sp][1] = e, sp++;
                e = (e & ~m) - 1;
                split = 1;
            }
        }
        if (split) goto again;
        unsigned char a[4], b[4];
        const unsigned na = utf8_encode(s, a);
        utf8_encode(e, b);
        for (unsigned k = 0; k < na; k++)
            if (push_range(p, v, a[k], b[k])) return -1;
        if (push(p, v, G_END, 0)) return -1;
    }
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* A class as one element: a byte set when it is all ASCII, else a helper rule. ranges
 * holds n [lo, hi] pairs (scratch: sorted and merged here). */
static int push_class(parser *p, evec *v, uint32_t (*ranges)[2], uint32_t n, int negate) {
    qsort(ranges, n, sizeof *ranges, cmp_range);
    uint32_t m = 0;
    for (uint32_t k = 0; k < n; k++) {
        if (m && ranges[k][0] <= ranges[m - 1][1] + 1) {
            if (ranges[k][1] > ranges[m - 1][1]) ranges[m - 1][1] = ranges[k][1];
        } else {
            ranges[m][0] = ranges[k][0], ranges[m][1] = ranges[k][1], m++;
        }
    }
    uint32_t out[260][2], no = 0; /* the set to match, surrogates cut out */
    uint32_t tmp[260][2], nt = 0;
    if (negate) {
        uint32_t next = 0;
        for (uint32_t k = 0; k < m; k++) {
            if (ranges[k][0] > next) tmp[nt][0] = next, tmp[nt][1] = ranges[k][0] - 1, nt++;
            next = ranges[k][1] + 1;
        }
        if (next <= 0x10FFFF) tmp[nt][0] = next, tmp[nt][1] = 0x10FFFF, nt++;
    } else {
        memcpy(tmp, ranges, m * sizeof *tmp);
        nt = m;
    }
    for (uint32_t k = 0; k < nt; k++) {
        uint32_t lo = tmp[k][0], hi = tmp[k][1];
        if (lo < 0xD800 && hi > 0xDFFF) {
            out[no][0] = lo, out[no][1] = 0xD7FF, no++;
            out[no][0] = 0xE000, out[no][1] = hi, no++;
        } else if (lo >= 0xD800 && hi <= 0xDFFF) {
            continue;
        } else {
            if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
            if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
            out[no][0] = lo, out[no][1] = hi, no++;
        }
    }
    if (no == 0) return perr(p, "a character class matches nothing", NULL);
    uint64_t ascii[4] = {0};
    int only_ascii = 1;
    for (uint32_t k = 0; k < no; k++) {
        if (out[k][1] >= 0x80) only_ascii = 0;
        for (uint32_t c = out[k][0]; c <= out[k][1] && c < 0x80; c++) ascii[c >> 6] |= 1ull << (c & 63);
    }
    if (only_ascii) {
        int64_t s = byte_set(p, ascii);
        return s < 0 ? -1 : push(p, v, G_BYTES, (uint32_t)s);
    }
    int64_t r = new_rule(p, NULL, 0);
    if (r < 0) return -1;
    p->rules[r].defined = 1;
    evec body = {0};
    int st = 0;
    if (ascii[0] | ascii[1]) {
        int64_t s = byte_set(p, ascii);
        st = s < 0 || push(p, &body, G_BYTES, (uint32_t)s) || push(p, &body, G_END, 0);
    }
    for (uint32_t k = 0; k < no && !st; k++) {
        uint32_t lo = out[k][0] < 0x80 ? 0x80 : out[k][0];
        if (lo <= out[k][1]) st = utf8_alts(p, &body, lo, out[k][1]);
    }
    p->rules[r].body = body; /* rules may have moved */
    return st ? -1 : push(p, v, G_RULE, (uint32_t)r);
}

static int parse_class(parser *p, evec *v) {
    p->i++; /* [ */
    int negate = 0;
    if (p->i < p->n && p->s[p->i] == '^') negate = 1, p->i++;
    uint32_t ranges[256][2], n = 0;
    while (p->i < p->n && p->s[p->i] != ']') {
        int64_t lo = read_char(p), hi = lo;
        if (lo < 0) return -1;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if ((hi = read_char(p)) < 0) return -1;
            if (hi < lo) return perr(p, "a class range runs backwards", NULL);
        }
        if (n == 256) return perr(p, "a character class has more than 256 ranges", NULL);
        ranges[n][0] = (uint32_t)lo, ranges[n][1] = (uint32_t)hi, n++;
    }
    if (p->i >= p->n) return perr(p, "a character class is not closed with ']'", NULL);
    p->i++;
    if (n == 0 && !negate) return perr(p, "an empty character class '[]' matches nothing", NULL);
    return push_class(p, v, ranges, n, negate);
}

static int parse_literal(parser *p, evec *v) {
    const char q = p->s[p->i++];
    while (p->i < p->n && p->s[p->i] != q) {
        int64_t c = read_char(p);
        if (c < 0) return -1;
        unsigned char b[4];
        const unsigned nb = utf8_encode((uint32_t)c, b);
        for (unsigned k = 0; k < nb; k++)
            if (push_range(p, v, b[k], b[k])) return -1;
    }
    if (p->i >= p->n) return perr(p, "a literal is not closed", NULL);
    p->i++;
    return 0;
}

/* ---- expressions ------------------------------------------------------------------------ */

static int parse_alts(parser *p, evec *v, int nested);

/* Moves elements v[from..) into a new helper rule (one alternative) and leaves one G_RULE. */
static int64_t wrap(parser *p, evec *v, uint32_t from) {
    int64_t r = new_rule(p, NULL, 0);
    if (r < 0) return -1;
    evec body = {0};
    for (uint32_t k = from; k < v->n; k++)
        if (push(p, &body, v->p[k].kind, v->p[k].arg)) { free(body.p); return -1; }
    if (push(p, &body, G_END, 0)) { free(body.p); return -1; }
    p->rules[r].body = body;
    p->rules[r].defined = 1;
    v->n = from;
    return r;
}

/* A helper rule with the given alternatives: each a list of (kind, arg) pairs. */
static int64_t helper(parser *p, const kipp_gelem *alt1, uint32_t n1, int with_empty) {
    int64_t r = new_rule(p, NULL, 0);
    if (r < 0) return -1;
    evec body = {0};
    for (uint32_t k = 0; k < n1; k++)
        if (push(p, &body, alt1[k].kind, alt1[k].arg)) { free(body.p); return -1; }
    if (push(p, &body, G_END, 0) || (with_empty && push(p, &body, G_END, 0))) { free(body.p); return -1; }
    p->rules[r].body = body;
    p->rules[r].defined = 1;
    return r;
}

static int parse_postfix(parser *p, evec *v, uint32_t start) {
    if (p->i >= p->n) return 0;
    const char c = p->s[p->i];
    if (c != '*' && c != '+' && c != '?' && c != '{') return 0;
    uint32_t lo, hi; /* hi == UINT32_MAX: unbounded */
    p->i++;
    if (c == '*') lo = 0, hi = UINT32_MAX;
    else if (c == '+') lo = 1, hi = UINT32_MAX;
    else if (c == '?') lo = 0, hi = 1;
    else {
        char *end;
        skip_space(p, 0);
        unsigned long a = strtoul(p->s + p->i, &end, 10);
        if (end == p->s + p->i) return perr(p, "'{' needs a count, as in {2} or {1,3}", NULL);
        p->i = (size_t)(end - p->s);
        skip_space(p, 0);
        unsigned long b = a;
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            skip_space(p, 0);
            if (p->i < p->n && p->s[p->i] == '}') b = ULONG_MAX;
            else {
                b = strtoul(p->s + p->i, &end, 10);
                if (end == p->s + p->i) return perr(p, "'{m,' needs a maximum or '}'", NULL);
                p->i = (size_t)(end - p->s);
            }
        }
        skip_space(p, 0);
        if (p->i >= p->n || p->s[p->i] != '}') return perr(p, "a repetition is not closed with '}'", NULL);
        p->i++;
        if (a > MAX_REPEAT || (b != ULONG_MAX && b > MAX_REPEAT))
            return perr(p, "a repetition count is above 1000", NULL);
        if (b < a) return perr(p, "a repetition's maximum is below its minimum", NULL);
        lo = (uint32_t)a, hi = b == ULONG_MAX ? UINT32_MAX : (uint32_t)b;
    }
    if (v->n - start != 1) {
        int64_t r = wrap(p, v, start);
        if (r < 0 || push(p, v, G_RULE, (uint32_t)r)) return -1;
    }
    const kipp_gelem x = v->p[start];
    v->n = start;
    for (uint32_t k = 0; k < lo; k++)
        if (push(p, v, x.kind, x.arg)) return -1;
    if (hi == UINT32_MAX) { /* R ::= x R | ε */
        int64_t r = new_rule(p, NULL, 0);
        if (r < 0) return -1;
        const kipp_gelem alt[2] = {x, {.kind = G_RULE, .arg = (uint32_t)r}};
        evec body = {0};
        if (push(p, &body, alt[0].kind, alt[0].arg) || push(p, &body, alt[1].kind, alt[1].arg) ||
            push(p, &body, G_END, 0) || push(p, &body, G_END, 0)) { free(body.p); return -1; }
        p->rules[r].body = body;
        p->rules[r].defined = 1;
        return push(p, v, G_RULE, (uint32_t)r);
    }
    if (hi > lo) { /* O_1 ::= x | ε ; O_k ::= x O_{k-1} | ε */
        int64_t prev = -1;
        for (uint32_t k = 0; k < hi - lo; k++) {
            const kipp_gelem alt[2] = {x, {.kind = G_RULE, .arg = (uint32_t)(prev < 0 ? 0 : prev)}};
            if ((prev = helper(p, alt, prev < 0 ? 1 : 2, 1)) < 0) return -1;
        }
        return push(p, v, G_RULE, (uint32_t)prev);
    }
    return 0;
}

static int parse_seq(parser *p, evec *v, int nested) {
    for (;;) {
        skip_space(p, nested);
        if (p->i >= p->n) return 0;
        const char c = p->s[p->i];
        const uint32_t start = v->n;
        if (c == '"' || c == '\'') {
            if (parse_literal(p, v)) return -1;
        } else if (c == '[') {
            if (parse_class(p, v)) return -1;
        } else if (c == '.') {
            p->i++;
            uint32_t all[1][2] = {{0, 0x10FFFF}};
            if (push_class(p, v, all, 1, 0)) return -1;
        } else if (c == '(') {
            if (++p->depth > MAX_DEPTH) return perr(p, "groups nest more than 200 deep", NULL);
            p->i++;
            evec sub = {0};
            if (parse_alts(p, &sub, 1)) { free(sub.p); return -1; }
            skip_space(p, 1);
            if (p->i >= p->n || p->s[p->i] != ')') { free(sub.p); return perr(p, "a '(' is not closed with ')'", NULL); }
            p->i++;
            p->depth--;
            int64_t r = new_rule(p, NULL, 0);
            if (r < 0) { free(sub.p); return -1; }
            p->rules[r].body = sub;
            p->rules[r].defined = 1;
            if (push(p, v, G_RULE, (uint32_t)r)) return -1;
        } else if (is_name_char(c)) {
            size_t b = p->i;
            while (p->i < p->n && is_name_char(p->s[p->i])) p->i++;
            size_t save = p->i;
            skip_space(p, 0);
            if (p->i + 3 <= p->n && !memcmp(p->s + p->i, "::=", 3)) { /* the next rule */
                p->i = b;
                return 0;
            }
            p->i = save;
            int64_t r = rule_named(p, p->s + b, save - b);
            if (r < 0 || push(p, v, G_RULE, (uint32_t)r)) return -1;
        } else {
            return 0; /* | ) newline or something the caller judges */
        }
        if (parse_postfix(p, v, start)) return -1;
    }
}

static int parse_alts(parser *p, evec *v, int nested) {
    for (;;) {
        if (parse_seq(p, v, nested) || push(p, v, G_END, 0)) return -1;
        skip_space(p, nested);
        if (p->i >= p->n || p->s[p->i] != '|') return 0;
        p->i++;
    }
}

static int parse_rules(parser *p) {
    for (;;) {
        skip_space(p, 1);
        if (p->i >= p->n) return 0;
        size_t b = p->i;
        while (p->i < p->n && is_name_char(p->s[p->i])) p->i++;
        if (p->i == b) {
            char s[2] = {p->s[p->i], 0};
            return perr(p, "expected a rule name, found '%s'", s);
        }
        const size_t e = p->i;
        skip_space(p, 0);
        if (p->i + 3 > p->n || memcmp(p->s + p->i, "::=", 3) != 0)
            return perr(p, "expected '::=' after the rule name", NULL);
        p->i += 3;
        int64_t r = rule_named(p, p->s + b, e - b);
        if (r < 0) return -1;
        if (p->rules[r].defined) return perr(p, "rule '%s' is defined twice", p->rules[r].name);
        p->rules[r].defined = 1;
        p->rules[r].def_line = p->line;
        p->cur = (uint32_t)r;
        evec body = {0};
        if (parse_alts(p, &body, 0)) { free(body.p); return -1; }
        p->rules[r].body = body;
        if (p->i < p->n && p->s[p->i] != '\n') {
            char s[2] = {p->s[p->i], 0};
            return perr(p, "unexpected '%s'", s);
        }
    }
}

/* ---- checks and flattening --------------------------------------------------------------- */

/* Left recursion: rule r can reach itself again before matching a byte. */
static int check_left_recursion(parser *p, const uint8_t *nullable) {
    const uint32_t n = p->n_rules;
    uint8_t *mark = calloc(n, 1); /* 0 unvisited, 1 on the path, 2 done */
    uint32_t *stack = malloc((size_t)n * 2 * sizeof *stack);
    if (!mark || !stack) { free(mark); free(stack); p->oom = 1; return perr(p, "out of memory", NULL); }
    int st = 0;
    for (uint32_t r0 = 0; r0 < n && !st; r0++) {
        if (mark[r0]) continue;
        /* iterative DFS: stack of (rule, element index to look at next) */
        uint32_t sp = 0;
        stack[sp * 2] = r0, stack[sp * 2 + 1] = 0, sp++;
        mark[r0] = 1;
        while (sp && !st) {
            uint32_t r = stack[(sp - 1) * 2], k = stack[(sp - 1) * 2 + 1];
            const evec *b = &p->rules[r].body;
            /* the next element that starts (after a nullable prefix) an alternative */
            int64_t next = -1;
            while (k < b->n) {
                uint32_t here = k++;
                int at_start = here == 0 || b->p[here - 1].kind == G_END;
                if (!at_start) { /* inside an alternative: only after nullable rules */
                    uint32_t j = here;
                    int all_null = 1;
                    while (j > 0 && b->p[j - 1].kind != G_END) {
                        j--;
                        if (b->p[j].kind != G_RULE || !nullable[b->p[j].arg]) { all_null = 0; break; }
                    }
                    if (!all_null) continue;
                }
                if (b->p[here].kind == G_RULE) { next = b->p[here].arg; break; }
            }
            stack[(sp - 1) * 2 + 1] = k;
            if (next < 0) { mark[r] = 2; sp--; continue; }
            if (mark[next] == 1) {
                const char *nm = p->rules[next].name;
                st = perr(p, "rule '%s' is left-recursive (it can reach itself before matching "
                             "any character); rewrite it with repetition", nm ? nm : "(a group)");
            } else if (mark[next] == 0) {
                mark[next] = 1;
                stack[sp * 2] = (uint32_t)next, stack[sp * 2 + 1] = 0, sp++;
            }
        }
    }
    free(mark);
    free(stack);
    return st;
}

static kipp_grammar *flatten(parser *p) {
    kipp_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    uint32_t n_el = 0, n_alt = 0;
    for (uint32_t r = 0; r < p->n_rules; r++) {
        n_el += p->rules[r].body.n;
        for (uint32_t k = 0; k < p->rules[r].body.n; k++) n_alt += p->rules[r].body.p[k].kind == G_END;
    }
    g->el = malloc((size_t)(n_el + 1) * sizeof *g->el);
    g->alt_start = malloc((size_t)(n_alt + 1) * sizeof *g->alt_start);
    g->rule_alt0 = malloc((size_t)p->n_rules * sizeof *g->rule_alt0);
    g->rule_nalt = malloc((size_t)p->n_rules * sizeof *g->rule_nalt);
    if (!g->el || !g->alt_start || !g->rule_alt0 || !g->rule_nalt) { kipp_grammar_free(g); return NULL; }
    for (uint32_t r = 0; r < p->n_rules; r++) {
        const evec *b = &p->rules[r].body;
        g->rule_alt0[r] = g->n_alt;
        g->rule_nalt[r] = 0;
        int at_start = 1;
        for (uint32_t k = 0; k < b->n; k++) {
            if (at_start) g->alt_start[g->n_alt++] = g->n_el, g->rule_nalt[r]++;
            g->el[g->n_el++] = b->p[k];
            at_start = b->p[k].kind == G_END;
        }
    }
    g->n_rules = p->n_rules;
    g->sets = p->sets;
    g->n_sets = p->n_sets;
    p->sets = NULL;
    return g;
}

/* The cost bound (grammar_cost.c): the error names the rule (a helper rule's named owner),
 * its line, the limit and the count. */
static int check_cost(parser *p, const kipp_grammar *g) {
    uint32_t pos;
    int which;
    uint64_t v;
    const int r = kipp_grammar_cost_check(g, &pos, &which, &v);
    if (r < 0) { p->oom = 1; return perr(p, "out of memory", NULL); }
    if (r == 0) return 0;
    uint32_t rule = 0; /* the rule whose alternatives hold pos */
    while (rule + 1 < g->n_rules && g->alt_start[g->rule_alt0[rule + 1]] <= pos) rule++;
    const prule *h = &p->rules[rule], *o = &p->rules[h->owner];
    char msg[400], count[32];
    if (v >= (uint64_t)1 << 40) snprintf(count, sizeof count, "more than 10^12");
    else snprintf(count, sizeof count, "%llu", (unsigned long long)v);
    p->line = h->def_line;
    if (which == 0)
        snprintf(msg, sizeof msg, "rule '%s' needs %s rule expansions before it matches a character; "
                 "the limit is %u (a chain of rules that only name the next rule counts one per "
                 "rule)", o->name ? o->name : "?", count, KIPP_GRAMMAR_MAX_RESOLVE);
    else
        snprintf(msg, sizeof msg, "rule '%s' can match the empty string in %s ways at one point; "
                 "the limit is %u (a counted repetition of something that can be empty, as in "
                 "(\"x\"{0,9}){0,100} or (\"x\"?){0,100}: repeat something that cannot be "
                 "empty, as in \"x\"{0,900})", o->name ? o->name : "?", count, KIPP_GRAMMAR_MAX_EMPTY_PATHS);
    kipp_errf(p->err, p->err_len, KIPP_ERR_INVALID_ARG, "grammar line %u: %s", p->line, msg);
    p->failed = 1; /* not perr: its buffer is shorter than this message */
    return -1;
}

kipp_status kipp_grammar_compile(const char *text, size_t len, kipp_grammar **out, char *err,
                                 size_t err_len) {
    *out = NULL;
    parser p = {.s = text, .n = len, .line = 1, .err = err, .err_len = err_len};
    int st = parse_rules(&p);
    int64_t root = -1;
    for (uint32_t r = 0; r < p.n_rules && !st; r++)
        if (p.rules[r].name && !strcmp(p.rules[r].name, "root")) root = r;
    if (!st && root < 0) st = perr(&p, "no rule named 'root' (the start rule)", NULL);
    for (uint32_t r = 0; r < p.n_rules && !st; r++)
        if (!p.rules[r].defined) {
            p.line = p.rules[r].line;
            st = perr(&p, "rule '%s' is used but not defined", p.rules[r].name);
        }
    uint8_t *nullable = st ? NULL : calloc(p.n_rules ? p.n_rules : 1, 1);
    if (!st && !nullable) st = perr(&p, "out of memory", NULL);
    for (int changed = 1; !st && changed;) { /* fixpoint: a rule with an all-nullable alternative */
        changed = 0;
        for (uint32_t r = 0; r < p.n_rules; r++) {
            if (nullable[r]) continue;
            const evec *b = &p.rules[r].body;
            int ok = 1;
            for (uint32_t k = 0; k < b->n; k++) {
                if (b->p[k].kind == G_END) {
                    if (ok) { nullable[r] = 1; changed = 1; break; }
                    ok = 1;
                } else if (b->p[k].kind == G_BYTES || !nullable[b->p[k].arg]) {
                    ok = 0;
                }
            }
        }
    }
    if (!st) st = check_left_recursion(&p, nullable);
    kipp_grammar *g = st ? NULL : flatten(&p);
    if (!st && !g) st = perr(&p, "out of memory", NULL);
    if (g) g->root = (uint32_t)root;
    if (!st) st = check_cost(&p, g);
    if (st) kipp_grammar_free(g), g = NULL;
    free(nullable);
    for (uint32_t r = 0; r < p.n_rules; r++) {
        free(p.rules[r].name);
        free(p.rules[r].body.p);
    }
    free(p.rules);
    free(p.sets);
    free(p.names);
    free(p.setix);
    if (st) return p.oom ? KIPP_ERR_NOMEM : KIPP_ERR_INVALID_ARG;
    *out = g;
    return KIPP_OK;
}

void kipp_grammar_free(kipp_grammar *g) {
    if (!g) return;
    free(g->el);
    free(g->alt_start);
    free(g->rule_alt0);
    free(g->rule_nalt);
    free(g->sets);
    free(g);
}
