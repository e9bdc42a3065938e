/* json_schema_regex.c — the `pattern` keyword: an ECMA-262 regex subset (literals, escapes,
 * classes with \d \w \s, ".", groups, alternation, * + ? {m,n}, ^ and $ at the ends)
 * translated into grammar text for the inside of a JSON string, plus counted repetition for
 * the whole converter. The regex constrains the decoded string, so every character comes
 * out JSON-escaped where JSON requires it. Refuses lookarounds, backreferences, word
 * boundaries, \p{...} and anchors inside the pattern (docs/structured-output.md). */
#include "engine/json_schema_int.h"

#define MAX_RX_NEST 32 /* group nesting in a pattern */

/* ---- repetition ------------------------------------------------------------------------------ */

/* The dialect's counts stop at 1000, so larger ones nest: with K = ( x{1000} ),
 * x{0,o} for o = 1000q + r is ( K{0,q-1} x{0,999} | K{q} x{0,r} ). */
void kipp_json_schema_repeat(kipp_buf *o, const char *item, long mn, long mx) {
    if (!item[0] || mx == 0) return;
    kipp_buf t = {0}, k = {0};
    if (mn <= 1000 && mx <= 1000) {
        kipp_buf_puts(&t, item);
        sb_suffix(&t, mn, mx);
    } else {
        kipp_buf_printf(&k, "( %s{1000} )", item);
        long a = mn / 1000, b = mn % 1000;
        if (a) { seq_add(&t, kipp_buf_str(&k)); sb_suffix(&t, a, a); }
        if (b) { seq_add(&t, item); sb_suffix(&t, b, b); }
        if (mx < 0) {
            seq_add(&t, item);
            kipp_buf_puts(&t, "*");
        } else if (mx > mn) {
            long q = (mx - mn) / 1000, r = (mx - mn) % 1000;
            if (!q) {
                seq_add(&t, item);
                sb_suffix(&t, 0, r);
            } else {
                seq_add(&t, "(");
                if (q > 1) { seq_add(&t, kipp_buf_str(&k)); sb_suffix(&t, 0, q - 1); }
                seq_add(&t, item);
                kipp_buf_puts(&t, "{0,999} |");
                seq_add(&t, kipp_buf_str(&k));
                sb_suffix(&t, q, q);
                if (r) { seq_add(&t, item); sb_suffix(&t, 0, r); }
                seq_add(&t, ")");
            }
        }
    }
    if (t.oom || k.oom) o->oom = 1;
    seq_add(o, kipp_buf_str(&t));
    free(t.data);
    free(k.data);
}

/* ---- code point sets ---------------------------------------------------------------------- */

/* A set of code points: sorted, merged ranges once normalized. */
typedef struct {
    uint32_t (*r)[2];
    size_t n, cap;
    int oom;
} cpset;

static void cs_add(cpset *s, uint32_t lo, uint32_t hi) {
    if (kipp_grow((void **)&s->r, &s->cap, s->n + 1, sizeof *s->r)) {
        s->oom = 1;
        return;
    }
    s->r[s->n][0] = lo;
    s->r[s->n][1] = hi;
    s->n++;
}
static int cmp_range(const void *a, const void *b) {
    uint32_t x = ((const uint32_t *)a)[0], y = ((const uint32_t *)b)[0];
    return x < y ? -1 : x > y;
}
static void cs_norm(cpset *s) {
    if (!s->n) return;
    qsort(s->r, s->n, sizeof s->r[0], cmp_range);
    size_t m = 0;
    for (size_t i = 1; i < s->n; i++) {
        if (s->r[i][0] <= s->r[m][1] + 1) {
            if (s->r[i][1] > s->r[m][1]) s->r[m][1] = s->r[i][1];
        } else {
            s->r[++m][0] = s->r[i][0];
            s->r[m][1] = s->r[i][1];
        }
    }
    s->n = m + 1;
}
static void cs_negate(cpset *s) {
    cs_norm(s);
    cpset t = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[i][0] > next) cs_add(&t, next, s->r[i][0] - 1);
        next = s->r[i][1] + 1;
    }
    if (next <= 0x10FFFF) cs_add(&t, next, 0x10FFFF);
    t.oom |= s->oom;
    free(s->r);
    *s = t;
}
static int cs_has(const cpset *s, uint32_t c) {
    for (size_t i = 0; i < s->n; i++)
        if (c >= s->r[i][0] && c <= s->r[i][1]) return 1;
    return 0;
}
static void cs_union(cpset *s, const cpset *t) {
    for (size_t i = 0; i < t->n; i++) cs_add(s, t->r[i][0], t->r[i][1]);
    s->oom |= t->oom;
}
/* \d \w \s and their negations. Engines disagree past ASCII: ECMA-262 (the JSON Schema spec)
 * has ASCII \d and \w and counts U+FEFF as \s; Python's re and Rust's regex have Unicode \d
 * \w and other spaces. So each escape adds its smallest reading (what every engine matches)
 * to small and its largest (anything some engine matches) to large (may be NULL): a class
 * uses the smallest reading, a negated one the complement of the largest, which keeps
 * \D \W \S and [^\s...] to ASCII. */
static void cs_class_escape(cpset *small, cpset *large, char e) {
    cpset a = {0}, b = {0};
    char lower = (char)(e | 0x20);
    if (lower == 'd') cs_add(&a, '0', '9');
    if (lower == 'w') {
        cs_add(&a, '0', '9');
        cs_add(&a, 'A', 'Z');
        cs_add(&a, 'a', 'z');
        cs_add(&a, '_', '_');
    }
    if (lower == 's') {
        static const uint32_t SP[][2] = {{9, 13},          {32, 32},         {0xA0, 0xA0},
                                         {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                                         {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
        for (size_t i = 0; i < sizeof SP / sizeof SP[0]; i++) cs_add(&a, SP[i][0], SP[i][1]);
        cs_add(&b, 0x1C, 0x1F); /* Python's re */
    }
    cs_union(&b, &a);
    cs_add(&b, 0x80, 0x10FFFF);
    if (e != lower) { /* \D: not the largest \d; its largest: not the smallest \d */
        cs_negate(&a);
        cs_negate(&b);
        cpset t = a;
        a = b;
        b = t;
    }
    cs_union(small, &a);
    if (large) cs_union(large, &b);
    free(a.r);
    free(b.r);
}

typedef struct {
    const char *s;
    size_t n, i;
    int depth, failed, oom;
    const char *char_rule;
    char *err;
    size_t err_len;
} rxp;

static int rx_fail(rxp *r, const char *what) {
    if (!r->failed && r->err && r->err_len)
        snprintf(r->err, r->err_len, "%s (at offset %zu) is not supported", what, r->i);
    r->failed = 1;
    return -1;
}
/* One string code point from set s as JSON string text: raw where JSON allows it, else the
 * escapes for ", \ and control characters (short ones and \u00XX). */
static int cs_emit(rxp *r, cpset *s, kipp_buf *item) {
    cs_norm(s);
    kipp_buf t = {0};
    size_t n_alt = 0;
    kipp_buf raw = {0};
    for (size_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i][0], hi = s->r[i][1];
        static const uint32_t CUT[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0xD800, 0xDFFF}};
        /* the pieces of [lo, hi] outside CUT */
        uint32_t a = lo;
        while (a <= hi) {
            int moved = 0;
            for (size_t c = 0; c < 4; c++)
                if (a >= CUT[c][0] && a <= CUT[c][1]) { a = CUT[c][1] + 1; moved = 1; }
            if (moved) continue;
            uint32_t b = hi;
            for (size_t c = 0; c < 4; c++)
                if (CUT[c][0] > a && CUT[c][0] - 1 < b) b = CUT[c][0] - 1;
            gram_cp(&raw, a, 1);
            if (b > a) { kipp_buf_put(&raw, "-", 1); gram_cp(&raw, b, 1); }
            a = b + 1;
            if (b == 0x10FFFF) break;
        }
    }
    if (raw.len) { kipp_buf_printf(&t, "[%s]", kipp_buf_str(&raw)); n_alt++; }
    free(raw.data);
    static const struct { uint32_t c; const char *lit; } ESC[] = {
        {'"', "\"\\\\\\\"\""}, {'\\', "\"\\\\\\\\\""}, {8, "\"\\\\b\""}, {12, "\"\\\\f\""},
        {10, "\"\\\\n\""}, {13, "\"\\\\r\""}, {9, "\"\\\\t\""},
    };
    for (size_t i = 0; i < sizeof ESC / sizeof ESC[0]; i++)
        if (cs_has(s, ESC[i].c)) { kipp_buf_printf(&t, "%s%s", n_alt++ ? " | " : "", ESC[i].lit); }
    for (unsigned hi4 = 0; hi4 < 2; hi4++) {
        char cls[40];
        size_t k = 0;
        for (unsigned lo4 = 0; lo4 < 16; lo4++) {
            if (!cs_has(s, hi4 * 16 + lo4)) continue;
            cls[k++] = "0123456789abcdef"[lo4];
            if (lo4 >= 10) cls[k++] = "ABCDEF"[lo4 - 10];
        }
        cls[k] = 0;
        if (k) kipp_buf_printf(&t, "%s\"\\\\u00%u\" [%s]", n_alt++ ? " | " : "", hi4, cls);
    }
    int rc = 0;
    if (!n_alt) rc = rx_fail(r, "a character class that matches nothing");
    else if (n_alt == 1) seq_add(item, kipp_buf_str(&t));
    else { seq_add(item, "("); seq_add(item, kipp_buf_str(&t)); seq_add(item, ")"); }
    if (t.oom || s->oom) r->oom = 1;
    free(t.data);
    return rc;
}

static int rx_hex(rxp *r, int digits, uint32_t *out) {
    *out = 0;
    for (int k = 0; k < digits; k++) {
        int h = r->i < r->n ? hexval(r->s[r->i]) : -1;
        if (h < 0) return rx_fail(r, "a malformed \\x or \\u escape");
        *out = *out * 16 + (uint32_t)h;
        r->i++;
    }
    return 0;
}
/* After a backslash: a class escape into set (returns 1) or one code point (returns 0). */
static int rx_escape(rxp *r, int in_class, cpset *set, cpset *large, uint32_t *cp) {
    if (r->i >= r->n) return rx_fail(r, "a trailing backslash");
    char e = r->s[r->i++];
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': cs_class_escape(set, large, e); return 1;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0':
        if (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') return rx_fail(r, "an octal escape");
        *cp = 0;
        return 0;
    case 'b':
        if (!in_class) return rx_fail(r, "the word boundary \\b");
        *cp = 8;
        return 0;
    case 'B': return rx_fail(r, "the word boundary \\B");
    case 'k': return rx_fail(r, "a backreference (\\k)");
    case 'p': case 'P': return rx_fail(r, "a Unicode property escape (\\p)");
    case 'c':
        if (r->i < r->n && ((r->s[r->i] | 0x20) >= 'a' && (r->s[r->i] | 0x20) <= 'z')) {
            *cp = (uint32_t)(r->s[r->i++] & 31);
            return 0;
        }
        return rx_fail(r, "a malformed \\c escape");
    case 'x': if (rx_hex(r, 2, cp)) return -1; return 0;
    case 'u':
        if (r->i < r->n && r->s[r->i] == '{') return rx_fail(r, "\\u{...} (the u flag)");
        if (rx_hex(r, 4, cp)) return -1;
        if (*cp >= 0xD800 && *cp < 0xDC00 && r->i + 6 <= r->n && r->s[r->i] == '\\' &&
            r->s[r->i + 1] == 'u') {
            size_t save = r->i;
            uint32_t lo;
            r->i += 2;
            if (!rx_hex(r, 4, &lo) && lo >= 0xDC00 && lo < 0xE000)
                *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
            else r->i = save;
        }
        if (*cp >= 0xD800 && *cp < 0xE000) return rx_fail(r, "a lone surrogate escape");
        return 0;
    default:
        if (e >= '1' && e <= '9') return rx_fail(r, "a backreference");
        if ((e | 0x20) >= 'a' && (e | 0x20) <= 'z') return rx_fail(r, "an unknown letter escape");
        r->i--;
        *cp = utf8_next(r->s, r->n, &r->i);
        return 0;
    }
}
/* A class after its "[": set gets its smallest reading (see cs_class_escape). */
static int rx_class(rxp *r, cpset *set) {
    cpset large = {0};
    int neg = r->i < r->n && r->s[r->i] == '^';
    if (neg) r->i++;
    if (r->i < r->n && r->s[r->i] == ']') return rx_fail(r, "an empty class [] or [^]");
    while (r->i < r->n && r->s[r->i] != ']') {
        uint32_t lo, hi;
        int is_set = 0;
        if (r->s[r->i] == '\\') {
            r->i++;
            if ((is_set = rx_escape(r, 1, set, &large, &lo)) < 0) goto fail;
        } else {
            lo = utf8_next(r->s, r->n, &r->i);
        }
        if (is_set) continue;
        hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                int k = rx_escape(r, 1, set, &large, &hi);
                if (k < 0) goto fail;
                if (k) { rx_fail(r, "a range ending in a class escape"); goto fail; }
            } else {
                hi = utf8_next(r->s, r->n, &r->i);
            }
            if (hi < lo) { rx_fail(r, "a range out of order"); goto fail; }
        }
        cs_add(set, lo, hi);
        cs_add(&large, lo, hi);
    }
    if (r->i >= r->n) { rx_fail(r, "an unterminated class"); goto fail; }
    r->i++;
    if (large.oom) r->oom = 1;
    if (neg) {
        free(set->r);
        *set = large;
        cs_negate(set);
    } else {
        free(large.r);
    }
    return 0;
fail:
    free(large.r);
    return -1;
}
/* A quantifier at r->i: 1 with its bounds (mx < 0: unbounded), 0 if none. */
static int rx_quant(rxp *r, long *mn, long *mx) {
    if (r->i >= r->n) return 0;
    char c = r->s[r->i];
    size_t j = r->i + 1;
    if (c == '*') { *mn = 0; *mx = -1; }
    else if (c == '+') { *mn = 1; *mx = -1; }
    else if (c == '?') { *mn = 0; *mx = 1; }
    else if (c == '{') {
        long a = 0, b;
        int da = 0, db = 0;
        while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && a <= KIPP_JS_MAX_COUNT) {
            a = a * 10 + (r->s[j++] - '0');
            da++;
        }
        if (!da) return 0; /* a literal { (as in ECMA-262 Annex B) */
        b = a;
        if (j < r->n && r->s[j] == ',') {
            j++;
            b = 0;
            while (j < r->n && r->s[j] >= '0' && r->s[j] <= '9' && b <= KIPP_JS_MAX_COUNT) {
                b = b * 10 + (r->s[j++] - '0');
                db++;
            }
            if (!db) b = -1;
        }
        if (j >= r->n || r->s[j] != '}') return 0;
        j++;
        if (a > KIPP_JS_MAX_COUNT || b > KIPP_JS_MAX_COUNT) {
            r->i = j;
            return rx_fail(r, "a repetition count above 1000000");
        }
        if (b >= 0 && a > b) { r->i = j; return rx_fail(r, "a repetition {m,n} with m > n"); }
        *mn = a;
        *mx = b;
    } else {
        return 0;
    }
    r->i = j;
    if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: the same language */
    return 1;
}
static int rx_alt(rxp *r, kipp_buf *out, int top);

/* One atom as one item (or nothing for an empty group); *lit_cp set for a plain literal
 * (one raw JSON character) so the caller can merge runs of them. */
static int rx_atom(rxp *r, kipp_buf *item, long *lit_cp) {
    *lit_cp = -1;
    const char *s = r->s;
    char c = s[r->i];
    cpset set = {0};
    uint32_t cp;
    int rc = 0;
    if (c == '(') {
        r->i++;
        if (r->i < r->n && s[r->i] == '?') {
            if (r->i + 1 < r->n && s[r->i + 1] == ':') r->i += 2;
            else if (r->i + 2 < r->n && s[r->i + 1] == '<' && s[r->i + 2] != '=' && s[r->i + 2] != '!') {
                while (r->i < r->n && s[r->i] != '>') r->i++; /* a named group: just a group */
                if (r->i >= r->n) return rx_fail(r, "an unterminated group name");
                r->i++;
            } else return rx_fail(r, "a lookaround or group flag (?");
        }
        if (++r->depth > MAX_RX_NEST) return rx_fail(r, "nesting this deep");
        kipp_buf inner = {0};
        rc = rx_alt(r, &inner, 0);
        r->depth--;
        if (!rc && (r->i >= r->n || s[r->i] != ')')) rc = rx_fail(r, "an unbalanced (");
        if (!rc) {
            r->i++;
            if (inner.len) { seq_add(item, "("); seq_add(item, kipp_buf_str(&inner)); seq_add(item, ")"); }
        }
        free(inner.data);
        return rc;
    }
    if (c == '[') {
        r->i++;
        rc = rx_class(r, &set);
    } else if (c == '.') {
        r->i++;
        cs_add(&set, '\n', '\n');
        cs_add(&set, '\r', '\r');
        cs_add(&set, 0x2028, 0x2029);
        cs_negate(&set);
    } else if (c == '\\') {
        r->i++;
        int k = rx_escape(r, 0, &set, NULL, &cp);
        if (k < 0) rc = -1;
        else if (!k) cs_add(&set, cp, cp);
    } else {
        cp = utf8_next(s, r->n, &r->i);
        cs_add(&set, cp, cp);
    }
    if (!rc && set.n == 1 && set.r[0][0] == set.r[0][1] && set.r[0][0] >= 0x20 && set.r[0][0] != '"' &&
        set.r[0][0] != '\\')
        *lit_cp = set.r[0][0];
    else if (!rc)
        rc = cs_emit(r, &set, item);
    free(set.r);
    return rc;
}
/* A sequence; at the top level also its anchors: without ^ (or $) any text may come before
 * (after) it, as JSON Schema patterns are searches, not whole-string matches. */
static int rx_seq(rxp *r, kipp_buf *out, int top) {
    int start = 0, end = 0;
    kipp_buf core = {0}, lit = {0};
    if (top && r->i < r->n && r->s[r->i] == '^') { r->i++; start = 1; }
    int rc = 0;
    while (!rc && r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        char c = r->s[r->i];
        long mn = 0, mx = 0, cp = -1;
        if (c == '$' && top && (r->i + 1 == r->n || r->s[r->i + 1] == '|')) { r->i++; end = 1; break; }
        if (c == '^' || c == '$') { rc = rx_fail(r, "an anchor ^ or $ not at an end of the pattern"); break; }
        size_t at = r->i;
        if ((rc = rx_quant(r, &mn, &mx)) != 0) {
            if (rc > 0) { r->i = at; rc = rx_fail(r, "a quantifier with nothing to repeat"); }
            break;
        }
        kipp_buf atom = {0};
        rc = rx_atom(r, &atom, &cp);
        int q = rc ? 0 : rx_quant(r, &mn, &mx);
        if (q < 0) rc = -1;
        if (!rc && cp >= 0 && !q) {
            gram_cp(&lit, (uint32_t)cp, 0);
        } else if (!rc) {
            if (lit.len) {
                kipp_buf_puts(&core, " \"");
                kipp_buf_puts(&core, kipp_buf_str(&lit));
                kipp_buf_puts(&core, "\"");
                lit.len = 0;
            }
            if (cp >= 0) { kipp_buf_puts(&atom, "\""); gram_cp(&atom, (uint32_t)cp, 0); kipp_buf_puts(&atom, "\""); }
            if (q && r->i < r->n && r->s[r->i] && strchr("*+?", r->s[r->i]))
                rc = rx_fail(r, "a quantifier after a quantifier");
            else if (q) kipp_json_schema_repeat(&core, kipp_buf_str(&atom), mn, mx);
            else seq_add(&core, kipp_buf_str(&atom));
        }
        free(atom.data);
    }
    if (!rc && lit.len) { kipp_buf_puts(&core, " \""); kipp_buf_puts(&core, kipp_buf_str(&lit)); kipp_buf_puts(&core, "\""); }
    if (!rc && top && r->i < r->n && r->s[r->i] == ')') rc = rx_fail(r, "an unbalanced )");
    if (!rc) {
        const char *any = top && (!start || !end) ? r->char_rule : "";
        kipp_buf star = {0};
        if (any[0]) { kipp_buf_puts(&star, any); kipp_buf_puts(&star, "*"); }
        if (any[0] && !core.len) seq_add(out, kipp_buf_str(&star));
        else {
            if (top && !start) seq_add(out, kipp_buf_str(&star));
            seq_add(out, kipp_buf_str(&core));
            if (top && !end) seq_add(out, kipp_buf_str(&star));
        }
        free(star.data);
    }
    if (core.oom || lit.oom) r->oom = 1;
    free(core.data);
    free(lit.data);
    return rc;
}
static int rx_alt(rxp *r, kipp_buf *out, int top) {
    kipp_buf alts = {0};
    size_t n_alt = 0;
    int has_empty = 0, rc = 0;
    for (;;) {
        kipp_buf seq = {0};
        rc = rx_seq(r, &seq, top);
        if (!rc && seq.len) { kipp_buf_printf(&alts, "%s%s", n_alt++ ? " | " : "", kipp_buf_str(&seq)); }
        else if (!rc) has_empty = 1;
        free(seq.data);
        if (rc || r->i >= r->n || r->s[r->i] != '|') break;
        r->i++;
    }
    if (!rc && n_alt) {
        if (n_alt == 1 && !has_empty) seq_add(out, kipp_buf_str(&alts));
        else { seq_add(out, "("); seq_add(out, kipp_buf_str(&alts)); kipp_buf_puts(out, has_empty ? " )?" : " )"); }
    }
    if (alts.oom) r->oom = 1;
    free(alts.data);
    return rc;
}

int kipp_json_schema_pattern(const char *pat, size_t n, const char *char_rule, kipp_buf *out, char *err,
                             size_t err_len) {
    rxp r = {.s = pat, .n = n, .char_rule = char_rule, .err = err, .err_len = err_len};
    int rc = rx_alt(&r, out, 1);
    if (!rc && r.i < r.n) rc = rx_fail(&r, "an unbalanced )");
    if (!rc && r.oom) {
        snprintf(err, err_len, "out of memory");
        rc = -1;
    }
    return rc;
}
