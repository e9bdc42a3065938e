/* json_schema.c — JSON Schema to grammar text in grammar.h's dialect: types, objects (the
 * 2n-rule construction for optional properties), arrays, strings with lengths, formats,
 * regex patterns (translated in json_schema_regex.c), exact integer ranges, enum/const,
 * anyOf/oneOf/allOf, local $ref with recursion. It generates a subset of the valid
 * documents and refuses (an error naming the keyword and its JSON pointer) whatever it
 * cannot honour exactly; it never ignores a constraint. Design and the supported list:
 * docs/structured-output.md. */
#include "engine/json_schema.h"

#include "engine/json_schema_int.h"

#include <math.h>

#define WS_MAX 20         /* indentation after the one newline allowed between two tokens */
#define INT_DIGITS 16     /* digits of an integer part (and of integer ranges) */
#define FRAC_DIGITS 16    /* digits after the decimal point */
#define EXP_DIGITS 3      /* digits of an exponent; a positive one at most 292 (P_NUMBER's rule):
                             a 16-digit integer part times 1e292 stays below DBL_MAX (1.8e308),
                             so every number parses as a finite double (a negative exponent can
                             only round to 0) */
#define INT_LIM 9999999999999999LL /* the largest INT_DIGITS-digit integer */
#define MAX_NEST 64       /* schema nesting, through a $ref target on its first visit too */
#define NAME_CAP 256      /* rule names */

/* ---- generator state ---------------------------------------------------------------------- */

/* Shared rules, emitted once per schema when used: P_VALUE is any JSON value, P_OBJECT any
 * object, and so on; P_U is the tail of a \u escape (surrogates only as a valid pair). */
enum { P_WS, P_CHAR, P_U, P_STRING, P_NUMBER, P_INTEGER, P_BOOLEAN, P_VALUE, P_OBJECT, P_ARRAY, N_PRIM };
static const char *const PRIM_HINT[N_PRIM] = {"ws",      "char",    "u",     "string", "number",
                                              "integer", "boolean", "value", "object", "array"};
static const unsigned PRIM_DEPS[N_PRIM] = {
    [P_CHAR] = 1u << P_U,
    [P_STRING] = 1u << P_CHAR,
    [P_VALUE] = 1u << P_OBJECT | 1u << P_ARRAY | 1u << P_STRING | 1u << P_NUMBER | 1u << P_BOOLEAN,
    [P_OBJECT] = 1u << P_WS | 1u << P_STRING | 1u << P_VALUE,
    [P_ARRAY] = 1u << P_WS | 1u << P_VALUE,
};

enum { F_DATE, F_TIME, F_DATE_TIME, F_UUID, F_IPV4, F_EMAIL, N_FMT };
static const char *const FORMAT_NAME[N_FMT] = {"date", "time", "date-time", "uuid", "ipv4", "email"};

/* JSON types as sets a schema accepts (integers and other numbers apart, for oneOf). */
enum { A_NULL = 1, A_BOOL = 2, A_OBJ = 4, A_ARR = 8, A_STR = 16, A_INT = 32, A_FRAC = 64, A_ALL = 127 };

/* A $ref target (or the root): its rule, and the targets its rule can reach before consuming
 * input (edges of the left-recursion check). */
typedef struct {
    const json_t *node;
    char *rule, *ptr;
    size_t *edge, n_edge, cap_edge;
    int mark;
} refent;

typedef struct {
    const json_t *root;
    const char *name;
    kipp_buf *out;
    char **names; /* rule names defined in the buffer, ours included */
    size_t n_names, cap_names;
    refent *refs;
    size_t n_refs, cap_refs;
    long head; /* the refent whose rule we are at the start of, or -1 */
    char prim[N_PRIM][NAME_CAP];
    unsigned prims_used;
    char fmt[N_FMT][NAME_CAP]; /* a format's string rule, "" until made */
    char path[1024];
    size_t path_n;
    int depth, failed, oom;
    char *err;
    size_t err_len;
} gen;

static int fail(gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(gen *g, const char *fmt, ...) {
    if (!g->failed && g->err && g->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->err, g->err_len, fmt, ap);
        va_end(ap);
    }
    g->failed = 1;
    return -1;
}
static const char *where(const gen *g) { return g->path_n ? g->path : "(root)"; }

/* JSON pointer segment push (escaped ~0 ~1); returns the length to pop back to. */
static size_t path_push(gen *g, const char *seg) {
    size_t old = g->path_n, n = old;
    if (n + 1 < sizeof g->path) g->path[n++] = '/';
    for (const char *c = seg; *c && n + 3 < sizeof g->path; c++) {
        if (*c == '~' || *c == '/') {
            g->path[n++] = '~';
            g->path[n++] = *c == '~' ? '0' : '1';
        } else {
            g->path[n++] = *c;
        }
    }
    g->path[n] = 0;
    g->path_n = n;
    return old;
}
static size_t path_push_idx(gen *g, size_t i) {
    char s[32];
    snprintf(s, sizeof s, "%zu", i);
    return path_push(g, s);
}
static void path_pop(gen *g, size_t old) {
    g->path_n = old;
    g->path[old] = 0;
}

static int name_used(const gen *g, const char *s, size_t n) {
    for (size_t i = 0; i < g->n_names; i++)
        if (strlen(g->names[i]) == n && memcmp(g->names[i], s, n) == 0) return 1;
    return 0;
}
static int name_add(gen *g, const char *s, size_t n) {
    if (kipp_grow((void **)&g->names, &g->cap_names, g->n_names + 1, sizeof *g->names)) {
        g->oom = 1;
        return fail(g, "out of memory");
    }
    char *c = malloc(n + 1);
    if (!c) { g->oom = 1; return fail(g, "out of memory"); }
    memcpy(c, s, n);
    c[n] = 0;
    g->names[g->n_names++] = c;
    return 0;
}
static int is_name_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

/* A fresh rule name: name-HINT (HINT sanitized, its last 40 characters), then -2, -3, ... */
static int rule_name(gen *g, const char *hint, char out[NAME_CAP]) {
    char h[48];
    size_t hn = strlen(hint), start = hn > 40 ? hn - 40 : 0, k = 0;
    for (size_t i = start; i < hn; i++) h[k++] = is_name_char((unsigned char)hint[i]) ? hint[i] : '_';
    h[k] = 0;
    snprintf(out, NAME_CAP, "%s-%s", g->name, k ? h : "x");
    size_t base = strlen(out);
    for (unsigned i = 2; name_used(g, out, strlen(out)); i++) snprintf(out + base, NAME_CAP - base, "-%u", i);
    return name_add(g, out, strlen(out));
}
/* A hint from the current path: its segments without the keywords that only nest. */
static void path_hint(const gen *g, const char *kind, char out[NAME_CAP]) {
    size_t n = 0;
    const char *p = g->path;
    while (*p) {
        const char *q = strchr(p + 1, '/');
        size_t len = q ? (size_t)(q - p - 1) : strlen(p + 1);
        int skip = (len == 10 && !memcmp(p + 1, "properties", 10)) ||
                   (len == 5 && !memcmp(p + 1, "$defs", 5)) ||
                   (len == 11 && !memcmp(p + 1, "definitions", 11));
        if (!skip && len && n + len + 2 < NAME_CAP) {
            if (n) out[n++] = '-';
            memcpy(out + n, p + 1, len);
            n += len;
        }
        p = q ? q : p + 1 + len;
    }
    if (!n) n = (size_t)snprintf(out, NAME_CAP, "%s", kind);
    out[n] = 0;
}

static void emit_rule(gen *g, const char *name, const char *body) {
    kipp_buf_puts(g->out, name);
    kipp_buf_puts(g->out, " ::= ");
    kipp_buf_puts(g->out, body);
    kipp_buf_puts(g->out, "\n");
}
static const char *prim(gen *g, int p) {
    g->prims_used |= 1u << p;
    return g->prim[p];
}

/* ---- literals: JSON text and grammar escapes ------------------------------------------------ */

/* Grammar literal matching exactly the UTF-8 text s[0..n). */
static void gram_lit(kipp_buf *b, const char *s, size_t n) {
    kipp_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n;) gram_cp(b, utf8_next(s, n, &i), 0);
    kipp_buf_put(b, "\"", 1);
}

/* Python's repr of a double (json.dumps writes floats with it): the shortest digits that
 * read back the same; fixed notation for decimal exponents -4..15, else d.ddde+XX. */
static void py_float(kipp_buf *b, double v) {
    char tmp[40];
    int prec = 0;
    for (; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec, v);
        if (strtod(tmp, NULL) == v) break;
    }
    char digits[24];
    size_t nd = 0;
    const char *p = tmp;
    if (*p == '-') { kipp_buf_put(b, "-", 1); p++; }
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int e10 = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (e10 >= -4 && e10 < 16) {
        if (e10 < 0) {
            kipp_buf_puts(b, "0.");
            for (int i = -1; i > e10; i--) kipp_buf_put(b, "0", 1);
            kipp_buf_put(b, digits, nd);
        } else {
            size_t n_int = (size_t)e10 + 1;
            for (size_t i = 0; i < n_int; i++) kipp_buf_put(b, i < nd ? &digits[i] : "0", 1);
            kipp_buf_put(b, ".", 1);
            if (nd > n_int) kipp_buf_put(b, digits + n_int, nd - n_int);
            else kipp_buf_put(b, "0", 1);
        }
    } else {
        kipp_buf_put(b, digits, 1);
        if (nd > 1) { kipp_buf_put(b, ".", 1); kipp_buf_put(b, digits + 1, nd - 1); }
        kipp_buf_printf(b, "e%c%02d", e10 < 0 ? '-' : '+', abs(e10));
    }
}

/* A value's JSON text as Python's json.dumps(v, ensure_ascii=False, separators=(",", ":"))
 * writes it: raw UTF-8, short escapes, \u00xx for other controls, keys in document order. */
static void json_text(kipp_buf *b, const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: kipp_buf_puts(b, "null"); break;
    case JSON_TRUE: kipp_buf_puts(b, "true"); break;
    case JSON_FALSE: kipp_buf_puts(b, "false"); break;
    case JSON_INTEGER: kipp_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: py_float(b, json_real_value(v)); break;
    case JSON_STRING: {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        kipp_buf_put(b, "\"", 1);
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)s[i];
            const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (e) kipp_buf_puts(b, e);
            else if (c < 0x20) kipp_buf_printf(b, "\\u%04x", c);
            else kipp_buf_put(b, (const char *)&c, 1);
        }
        kipp_buf_put(b, "\"", 1);
        break;
    }
    case JSON_ARRAY: {
        kipp_buf_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) kipp_buf_put(b, ",", 1);
            json_text(b, json_array_get(v, i));
        }
        kipp_buf_put(b, "]", 1);
        break;
    }
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        int first = 1;
        kipp_buf_put(b, "{", 1);
        json_object_foreach((json_t *)v, k, x) {
            if (!first) kipp_buf_put(b, ",", 1);
            first = 0;
            json_t *ks = json_string(k);
            if (!ks) { b->oom = 1; return; }
            json_text(b, ks);
            json_decref(ks);
            kipp_buf_put(b, ":", 1);
            json_text(b, x);
        }
        kipp_buf_put(b, "}", 1);
        break;
    }
    }
}
/* Appends a grammar literal for v's JSON text. */
static void value_lit(kipp_buf *b, const json_t *v) {
    kipp_buf t = {0};
    json_text(&t, v);
    if (t.oom) b->oom = 1;
    gram_lit(b, kipp_buf_str(&t), t.len);
    free(t.data);
}

/* JSON Schema equality: numbers by value (1 == 1.0), objects regardless of key order. */
static int schema_equal(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b)) {
        if (json_is_integer(a) && json_is_integer(b)) return json_integer_value(a) == json_integer_value(b);
        return json_number_value(a) == json_number_value(b);
    }
    if (json_typeof(a) != json_typeof(b)) return 0;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!schema_equal(json_array_get(a, i), json_array_get(b, i))) return 0;
        return 1;
    }
    if (json_is_object(a)) {
        const char *k;
        json_t *x;
        if (json_object_size(a) != json_object_size(b)) return 0;
        json_object_foreach((json_t *)a, k, x) {
            const json_t *y = json_object_get(b, k);
            if (!y || !schema_equal(x, y)) return 0;
        }
        return 1;
    }
    return json_equal((json_t *)a, (json_t *)b);
}
static unsigned value_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return A_NULL;
    case JSON_TRUE: case JSON_FALSE: return A_BOOL;
    case JSON_OBJECT: return A_OBJ;
    case JSON_ARRAY: return A_ARR;
    case JSON_STRING: return A_STR;
    case JSON_INTEGER: return A_INT;
    case JSON_REAL: return floor(json_real_value(v)) == json_real_value(v) ? A_INT : A_FRAC;
    }
    return 0;
}

/* ---- keywords ------------------------------------------------------------------------------- */

enum {
    K_ANNOT, K_DEFS, K_ID, K_REF, K_ALLOF, K_ANYOF, K_ONEOF, K_ENUM, K_CONST, K_TYPE,
    K_OBJ, K_ARR, K_STR, K_NUM, K_UNKNOWN
};
static const struct {
    const char *kw;
    int cls;
} KEYWORDS[] = {
    {"description", K_ANNOT}, {"title", K_ANNOT}, {"default", K_ANNOT}, {"examples", K_ANNOT},
    {"$schema", K_ANNOT}, {"$comment", K_ANNOT}, {"deprecated", K_ANNOT}, {"readOnly", K_ANNOT},
    {"writeOnly", K_ANNOT}, {"strict", K_ANNOT},
    {"discriminator", K_ANNOT}, /* OpenAPI's hint beside oneOf: it constrains nothing */
    {"$defs", K_DEFS}, {"definitions", K_DEFS}, {"$id", K_ID}, {"$ref", K_REF}, {"allOf", K_ALLOF},
    {"anyOf", K_ANYOF}, {"oneOf", K_ONEOF}, {"enum", K_ENUM}, {"const", K_CONST}, {"type", K_TYPE},
    {"properties", K_OBJ}, {"required", K_OBJ}, {"additionalProperties", K_OBJ},
    {"items", K_ARR}, {"prefixItems", K_ARR}, {"minItems", K_ARR}, {"maxItems", K_ARR},
    {"minLength", K_STR}, {"maxLength", K_STR}, {"pattern", K_STR}, {"format", K_STR},
    {"minimum", K_NUM}, {"maximum", K_NUM}, {"exclusiveMinimum", K_NUM}, {"exclusiveMaximum", K_NUM},
};
static int keyword_class(const char *k) {
    for (size_t i = 0; i < sizeof KEYWORDS / sizeof KEYWORDS[0]; i++)
        if (!strcmp(KEYWORDS[i].kw, k)) return KEYWORDS[i].cls;
    return K_UNKNOWN;
}
/* Fails on the first keyword beside `kw` that is not an annotation or in `also` (a class
 * bitmask): the combination would be an intersection, which is not supported. */
static int only_annotations(gen *g, const json_t *s, const char *kw, unsigned also) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        int c = keyword_class(k);
        if (c == K_ANNOT || c == K_DEFS || c == K_ID || !strcmp(k, kw) || (also >> c & 1)) continue;
        return fail(g, "%s/%s next to %s is not supported", g->path, k, kw);
    }
    return 0;
}
/* A non-negative integer keyword; *out untouched when absent. */
static int get_count(gen *g, const json_t *s, const char *kw, long *out) {
    const json_t *v = json_object_get(s, kw);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(g, "%s/%s must be a non-negative integer", g->path, kw);
    if (json_integer_value(v) > KIPP_JS_MAX_COUNT)
        return fail(g, "%s/%s above %d is not supported", g->path, kw, KIPP_JS_MAX_COUNT);
    *out = (long)json_integer_value(v);
    return 0;
}
static int type_mask(gen *g, const json_t *t, unsigned *mask, int quiet) {
    static const struct { const char *n; unsigned m; } T[] = {
        {"null", A_NULL}, {"boolean", A_BOOL}, {"object", A_OBJ}, {"array", A_ARR},
        {"string", A_STR}, {"number", A_INT | A_FRAC}, {"integer", A_INT},
    };
    *mask = 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_is_array(t) ? json_array_get(t, i) : t;
        unsigned m = 0;
        for (size_t j = 0; json_is_string(e) && j < sizeof T / sizeof T[0]; j++)
            if (!strcmp(json_string_value(e), T[j].n)) m = T[j].m;
        if (!m)
            return quiet ? -1 : fail(g, "%s/type must be a JSON Schema type name or a list of them", g->path);
        *mask |= m;
    }
    if (!*mask) return quiet ? -1 : fail(g, "%s/type is an empty list", g->path);
    return 0;
}

/* ---- $ref ----------------------------------------------------------------------------------- */

/* Resolves a local reference ("#" or "#/json/pointer", %XX and ~0 ~1 decoded); NULL if not. */
static const json_t *resolve(const gen *g, const char *ref) {
    if (ref[0] != '#') return NULL;
    const json_t *node = g->root;
    const char *p = ref + 1;
    if (!*p) return node;
    if (*p != '/') return NULL;
    while (*p == '/' && node) {
        char seg[256];
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            int c = (unsigned char)*p;
            if (c == '%' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
                c = hexval(p[1]) * 16 + hexval(p[2]);
                p += 2;
            }
            if (n + 1 >= sizeof seg) return NULL;
            seg[n++] = (char)c;
        }
        seg[n] = 0;
        char dec[256];
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (seg[i] == '~' && (seg[i + 1] == '0' || seg[i + 1] == '1')) {
                dec[m++] = seg[i + 1] == '0' ? '~' : '/';
                i++;
            } else {
                dec[m++] = seg[i];
            }
        }
        dec[m] = 0;
        if (json_is_object(node)) {
            node = json_object_get(node, dec);
        } else if (json_is_array(node)) {
            char *end;
            unsigned long idx = strtoul(dec, &end, 10);
            node = *dec && !*end ? json_array_get(node, idx) : NULL;
        } else {
            node = NULL;
        }
    }
    return node;
}
static long ref_find(const gen *g, const json_t *node) {
    for (size_t i = 0; i < g->n_refs; i++)
        if (g->refs[i].node == node) return (long)i;
    return -1;
}
static long ref_add(gen *g, const json_t *node, const char *rule, const char *ptr) {
    if (kipp_grow((void **)&g->refs, &g->cap_refs, g->n_refs + 1, sizeof *g->refs)) {
        g->oom = 1;
        return fail(g, "out of memory");
    }
    refent *r = &g->refs[g->n_refs];
    memset(r, 0, sizeof *r);
    r->node = node;
    r->rule = strdup(rule);
    r->ptr = strdup(ptr);
    if (!r->rule || !r->ptr) {
        free(r->rule);
        free(r->ptr);
        g->oom = 1;
        return fail(g, "out of memory");
    }
    return (long)g->n_refs++;
}
/* Records that the rule at the head of which we stand can begin with target's rule. */
static int head_edge(gen *g, long target) {
    if (g->head < 0) return 0;
    refent *r = &g->refs[g->head];
    if (kipp_grow((void **)&r->edge, &r->cap_edge, r->n_edge + 1, sizeof *r->edge)) {
        g->oom = 1;
        return fail(g, "out of memory");
    }
    r->edge[r->n_edge++] = (size_t)target;
    return 0;
}
static int cycle_from(gen *g, size_t i) {
    refent *r = &g->refs[i];
    if (r->mark == 1)
        return fail(g, "%s%s: a $ref cycle that consumes no input (left recursion) is not supported",
                    r->ptr[0] ? "" : "(root)", r->ptr);
    if (r->mark == 2) return 0;
    r->mark = 1;
    for (size_t e = 0; e < r->n_edge; e++)
        if (cycle_from(g, g->refs[i].edge[e])) return -1;
    g->refs[i].mark = 2;
    return 0;
}

static int gen_node(gen *g, const json_t *s, kipp_buf *item);

/* The rule of a $ref target (generated once, so recursive schemas make recursive rules). */
static int gen_ref(gen *g, const json_t *s, kipp_buf *item) {
    const json_t *rv = json_object_get(s, "$ref");
    if (!json_is_string(rv)) return fail(g, "%s/$ref must be a string", g->path);
    const char *ref = json_string_value(rv);
    if (ref[0] != '#' || (ref[1] && ref[1] != '/'))
        return fail(g, "%s/$ref \"%s\" is not supported (only local references: \"#\", \"#/$defs/...\")",
                    g->path, ref);
    const json_t *node = resolve(g, ref);
    if (!node) return fail(g, "%s/$ref \"%s\" does not resolve", g->path, ref);
    long idx = ref_find(g, node);
    if (idx < 0) {
        char rule[NAME_CAP];
        const char *last = strrchr(ref, '/');
        if (rule_name(g, last && last[1] ? last + 1 : "root", rule)) return -1;
        if ((idx = ref_add(g, node, rule, ref + 1)) < 0 || head_edge(g, idx)) return -1;
        char saved[sizeof g->path];
        size_t saved_n = g->path_n;
        long saved_head = g->head;
        memcpy(saved, g->path, sizeof saved);
        snprintf(g->path, sizeof g->path, "%s", ref + 1);
        g->path_n = strlen(g->path);
        g->head = idx;
        kipp_buf body = {0};
        int rc = gen_node(g, node, &body);
        if (!rc) emit_rule(g, g->refs[idx].rule, kipp_buf_str(&body));
        if (body.oom) g->oom = 1;
        free(body.data);
        memcpy(g->path, saved, sizeof saved);
        g->path_n = saved_n;
        g->head = saved_head;
        if (rc) return -1;
    } else if (head_edge(g, idx)) {
        return -1;
    }
    seq_add(item, g->refs[idx].rule);
    return 0;
}

/* ---- integers ------------------------------------------------------------------------------- */

/* Alternatives matching the digit strings of length n between x and y (same length, leading
 * zeros allowed: these are suffixes). Each level either fixes a digit or splits into the
 * low edge, a full middle block and the high edge, so the text is O(n). */
static void digit_range(kipp_buf *b, const char *x, const char *y, size_t n);
/* c then the range of the remaining digits, in parentheses only when it has alternatives */
static void digit_then(kipp_buf *b, char c, const char *x, const char *y, size_t n) {
    kipp_buf t = {0};
    digit_range(&t, x, y, n);
    kipp_buf_printf(b, strstr(kipp_buf_str(&t), " | ") ? "\"%c\" ( %s )" : "\"%c\" %s", c, kipp_buf_str(&t));
    if (t.oom) b->oom = 1;
    free(t.data);
}
static void digit_range(kipp_buf *b, const char *x, const char *y, size_t n) {
    if (n == 1) {
        if (x[0] == y[0]) kipp_buf_printf(b, "\"%c\"", x[0]);
        else kipp_buf_printf(b, "[%c-%c]", x[0], y[0]);
        return;
    }
    if (x[0] == y[0]) {
        digit_then(b, x[0], x + 1, y + 1, n - 1);
        return;
    }
    char nines[INT_DIGITS + 1], zeros[INT_DIGITS + 1];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    int low_all = !memcmp(x + 1, zeros, n - 1), high_all = !memcmp(y + 1, nines, n - 1);
    char a = (char)(x[0] + !low_all), c = (char)(y[0] - !high_all);
    const char *sep = "";
    if (!low_all) {
        digit_then(b, x[0], x + 1, nines, n - 1);
        sep = " | ";
    }
    if (a <= c) {
        kipp_buf_puts(b, sep);
        if (a == c) kipp_buf_printf(b, "\"%c\"", a);
        else kipp_buf_printf(b, "[%c-%c]", a, c);
        kipp_buf_puts(b, " [0-9]");
        sb_suffix(b, (long)n - 1, (long)n - 1);
        sep = " | ";
    }
    if (!high_all) {
        kipp_buf_puts(b, sep);
        digit_then(b, y[0], zeros, y + 1, n - 1);
    }
}
static long long pow10ll(int d) {
    long long p = 1;
    while (d-- > 0) p *= 10;
    return p;
}
/* Alternatives for the integers a..b, 1 <= a <= b <= INT_LIM, without leading zeros. Whole
 * digit-count blocks in a row merge into [1-9] [0-9]{m,n}. */
static void pos_range(kipp_buf *b, long long a, long long c) {
    char xs[24], ys[24];
    int da = snprintf(xs, sizeof xs, "%lld", a), dc = snprintf(ys, sizeof ys, "%lld", c);
    const char *sep = "";
    for (int d = da; d <= dc; d++) {
        long long lo = a > pow10ll(d - 1) ? a : pow10ll(d - 1), hi = c < pow10ll(d) - 1 ? c : pow10ll(d) - 1;
        if (lo == pow10ll(d - 1) && hi == pow10ll(d) - 1) {
            int e = d;
            while (e < dc && c >= pow10ll(e + 1) - 1) e++;
            kipp_buf_puts(b, sep);
            if (d == 1 && e == 1) kipp_buf_puts(b, "[1-9]");
            else { kipp_buf_puts(b, "[1-9] [0-9]"); sb_suffix(b, d - 1, e - 1); }
            d = e;
        } else {
            snprintf(xs, sizeof xs, "%lld", lo);
            snprintf(ys, sizeof ys, "%lld", hi);
            kipp_buf_puts(b, sep);
            digit_range(b, xs, ys, (size_t)d);
        }
        sep = " | ";
    }
}
/* A bound keyword as an integer limit, saturated just outside [-INT_LIM, INT_LIM]. */
static long long bound_of(const json_t *v, int up) {
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        return i > INT_LIM ? INT_LIM + 1 : i < -INT_LIM ? -INT_LIM - 1 : (long long)i;
    }
    double d = json_real_value(v);
    if (d > 1e16) return INT_LIM + 1;
    if (d < -1e16) return -INT_LIM - 1;
    double r = up ? ceil(d) : floor(d);
    return r > (double)INT_LIM ? INT_LIM + 1 : r < -(double)INT_LIM ? -INT_LIM - 1 : (long long)r;
}
static int gen_integer(gen *g, const json_t *s, kipp_buf *item) {
    static const char *const KW[4] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    long long lo = -INT_LIM, hi = INT_LIM;
    const char *lo_kw = NULL, *hi_kw = NULL; /* what set lo and hi */
    int bounded = 0;
    for (int k = 0; k < 4; k++) {
        const json_t *v = json_object_get(s, KW[k]);
        if (!v) continue;
        if (json_is_boolean(v) && k % 2) { /* draft 4: exclusiveMinimum: true makes minimum exclusive */
            const json_t *base = json_object_get(s, KW[k - 1]);
            if (!base) return fail(g, "%s/%s without %s", g->path, KW[k], KW[k - 1]);
            long long b = k == 1 ? bound_of(base, 0) + 1 : bound_of(base, 1) - 1;
            if (json_is_true(v) && k == 1 && b > lo) { lo = b; lo_kw = KW[k]; }
            if (json_is_true(v) && k == 3 && b < hi) { hi = b; hi_kw = KW[k]; }
            continue;
        }
        if (!json_is_number(v)) return fail(g, "%s/%s must be a number", g->path, KW[k]);
        bounded = 1;
        long long b = k == 0 ? bound_of(v, 1) :
                      k == 1 ? bound_of(v, 0) + 1 :
                      k == 2 ? bound_of(v, 0) :
                               bound_of(v, 1) - 1;
        if (k < 2 && b >= lo) { lo = b; lo_kw = KW[k]; }
        if (k >= 2 && b <= hi) { hi = b; hi_kw = KW[k]; }
    }
    if (lo > hi && lo_kw && hi_kw)
        return fail(g, "%s/%s and %s/%s leave no integer of at most %d digits", g->path, lo_kw, g->path,
                    hi_kw, INT_DIGITS);
    if (lo > hi)
        return fail(g, "%s/%s leaves no integer of at most %d digits", g->path, lo_kw ? lo_kw : hi_kw,
                    INT_DIGITS);
    if (!bounded || (lo == -INT_LIM && hi == INT_LIM)) {
        seq_add(item, prim(g, P_INTEGER));
        return 0;
    }
    kipp_buf b = {0};
    kipp_buf_puts(&b, "(");
    const char *sep = " ";
    if (lo < 0) {
        kipp_buf_puts(&b, " \"-\" (");
        pos_range(&b, hi < -1 ? -hi : 1, -lo);
        kipp_buf_puts(&b, ")");
        sep = " | ";
    }
    if (lo <= 0 && hi >= 0) { kipp_buf_printf(&b, "%s\"0\"", sep); sep = " | "; }
    if (hi > 0) { kipp_buf_puts(&b, sep); pos_range(&b, lo > 1 ? lo : 1, hi); }
    kipp_buf_puts(&b, " )");
    if (b.oom) g->oom = 1;
    seq_add(item, kipp_buf_str(&b));
    free(b.data);
    return 0;
}

/* ---- strings: lengths, formats ----------------------------------------------------------------- */

static int gen_format(gen *g, const char *f, kipp_buf *item) {
    int k = 0;
    while (k < N_FMT && strcmp(FORMAT_NAME[k], f)) k++;
    if (k == N_FMT) return fail(g, "%s/format \"%s\" is not supported", g->path, f);
    if (!g->fmt[k][0]) {
        static const char *const HEX = "[0-9a-fA-F]", *const TWO4 = "( [01] [0-9] | \"2\" [0-3] )",
                                 *const LEAP2 = "( \"0\" [48] | [2468] [048] | [13579] [26] )";
        char body[NAME_CAP], sub[NAME_CAP], sub2[NAME_CAP];
        kipp_buf t = {0};
        if (k == F_DATE || k == F_DATE_TIME) {
            /* the day must exist in its month; the 29th of February in leap years only */
            if (rule_name(g, "date", body) || rule_name(g, "year", sub) || rule_name(g, "leap-year", sub2))
                return -1;
            emit_rule(g, sub, "[0-9]{3} [1-9] | [0-9]{2} [1-9] \"0\" | [0-9] [1-9] \"00\" | [1-9] \"000\"");
            kipp_buf_printf(&t, "[0-9]{2} %s | %s \"00\"", LEAP2, LEAP2);
            emit_rule(g, sub2, kipp_buf_str(&t));
            t.len = 0;
            kipp_buf_printf(
                &t,
                "%s \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | "
                "( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
                "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | %s \"-02-29\"",
                sub, sub2);
            emit_rule(g, body, kipp_buf_str(&t));
        }
        if (k == F_TIME || k == F_DATE_TIME) {
            if (rule_name(g, "time", k == F_TIME ? body : sub)) return -1;
            t.len = 0;
            kipp_buf_printf(&t,
                      "%s \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? ( \"Z\" | [+-] %s \":\" "
                      "[0-5] [0-9] )",
                      TWO4, TWO4);
            emit_rule(g, k == F_TIME ? body : sub, kipp_buf_str(&t));
        }
        if (k == F_DATE_TIME) {
            memcpy(sub2, body, NAME_CAP);
            if (rule_name(g, "date-time", body)) return -1;
            t.len = 0;
            kipp_buf_printf(&t, "%s \"T\" %s", sub2, sub);
            emit_rule(g, body, kipp_buf_str(&t));
        } else if (k == F_UUID) {
            if (rule_name(g, "uuid", body)) return -1;
            t.len = 0;
            kipp_buf_printf(&t, "%s{8} \"-\" %s{4} \"-\" %s{4} \"-\" %s{4} \"-\" %s{12}", HEX, HEX, HEX, HEX, HEX);
            emit_rule(g, body, kipp_buf_str(&t));
        } else if (k == F_IPV4) {
            if (rule_name(g, "ipv4", body) || rule_name(g, "octet", sub)) return -1;
            emit_rule(g, sub, "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]");
            t.len = 0;
            kipp_buf_printf(&t, "%s \".\" %s \".\" %s \".\" %s", sub, sub, sub, sub);
            emit_rule(g, body, kipp_buf_str(&t));
        } else if (k == F_EMAIL) {
            /* RFC 5322 dot-atom local part @ a host name with an alphabetic top-level label */
            if (rule_name(g, "email", body) || rule_name(g, "atom", sub) || rule_name(g, "label", sub2))
                return -1;
            emit_rule(g, sub, "[A-Za-z0-9!#$%&'*+/=?\\^_`{|}~\\-]+");
            emit_rule(g, sub2, "[A-Za-z0-9] ( [A-Za-z0-9\\-]{0,61} [A-Za-z0-9] )?");
            t.len = 0;
            kipp_buf_printf(&t, "%s ( \".\" %s )* \"@\" ( %s \".\" )+ [A-Za-z]{2,63}", sub, sub, sub2);
            emit_rule(g, body, kipp_buf_str(&t));
        }
        free(t.data);
        char str[NAME_CAP];
        snprintf(sub, sizeof sub, "%s-string", FORMAT_NAME[k]);
        if (rule_name(g, sub, str)) return -1;
        kipp_buf q = {0};
        kipp_buf_printf(&q, "\"\\\"\" %s \"\\\"\"", body);
        emit_rule(g, str, kipp_buf_str(&q));
        free(q.data);
        memcpy(g->fmt[k], str, NAME_CAP);
    }
    seq_add(item, g->fmt[k]);
    return 0;
}

/* A rule for a string whose value matches the pattern (json_schema_regex.c). */
static int gen_pattern(gen *g, const char *pat, size_t n, kipp_buf *item) {
    kipp_buf body = {0};
    char perr[256] = "";
    const char *any = g->prim[P_CHAR];
    kipp_buf_puts(&body, "\"\\\"\"");
    int rc = kipp_json_schema_pattern(pat, n, any, &body, perr, sizeof perr) ?
                 fail(g, "%s: %s", g->path, perr) :
                 0;
    if (!rc && strstr(kipp_buf_str(&body), any)) prim(g, P_CHAR);
    seq_add(&body, "\"\\\"\"");
    char name[NAME_CAP];
    path_hint(g, "pattern", name);
    if (!rc && !(rc = rule_name(g, name, name))) {
        emit_rule(g, name, kipp_buf_str(&body));
        seq_add(item, name);
    }
    if (body.oom) g->oom = 1;
    free(body.data);
    return rc;
}

static int gen_string(gen *g, const json_t *s, kipp_buf *item) {
    const json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    int has_len = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if (fmt) {
        if (!json_is_string(fmt)) return fail(g, "%s/format must be a string", g->path);
        if (pat || has_len)
            return fail(g, "%s/%s next to format is not supported", g->path,
                        pat ? "pattern" : "minLength/maxLength");
        return gen_format(g, json_string_value(fmt), item);
    }
    if (pat) {
        if (!json_is_string(pat)) return fail(g, "%s/pattern must be a string", g->path);
        if (has_len) return fail(g, "%s/minLength/maxLength next to pattern is not supported", g->path);
        size_t old = path_push(g, "pattern");
        int rc = gen_pattern(g, json_string_value(pat), json_string_length(pat), item);
        path_pop(g, old);
        return rc;
    }
    long mn = 0, mx = -1;
    if (get_count(g, s, "minLength", &mn) || get_count(g, s, "maxLength", &mx)) return -1;
    if (mx >= 0 && mn > mx) return fail(g, "%s/minLength is above maxLength", g->path);
    if (mn == 0 && mx < 0) {
        seq_add(item, prim(g, P_STRING));
        return 0;
    }
    /* one P_CHAR is one code point however it is written (a surrogate-pair escape is one) */
    kipp_buf t = {0};
    kipp_buf_puts(&t, "( \"\\\"\"");
    kipp_json_schema_repeat(&t, prim(g, P_CHAR), mn, mx);
    seq_add(&t, "\"\\\"\" )");
    seq_add(item, kipp_buf_str(&t));
    if (t.oom) g->oom = 1;
    free(t.data);
    return 0;
}

/* ---- objects and arrays --------------------------------------------------------------------- */

static int gen_object(gen *g, const json_t *s, kipp_buf *item) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
                 *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(g, "%s/properties must be an object", g->path);
    if (req && !json_is_array(req)) return fail(g, "%s/required must be an array", g->path);
    if (addl && !json_is_object(addl) && !json_is_boolean(addl))
        return fail(g, "%s/additionalProperties must be a schema", g->path);
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) return fail(g, "%s/required/%zu must be a string", g->path, i);
        if (!props || !json_object_get(props, json_string_value(r)))
            return fail(g, "%s/required/%zu: \"%s\" is not in properties (not supported)", g->path, i,
                        json_string_value(r));
    }
    const char *ws = prim(g, P_WS);
    char rn[NAME_CAP], hint[NAME_CAP];
    path_hint(g, "obj", hint);
    if (!props || !json_object_size(props)) {
        if (!addl || json_is_true(addl)) { seq_add(item, prim(g, P_OBJECT)); return 0; }
        kipp_buf t = {0};
        int rc = 0;
        if (json_is_false(addl)) {
            kipp_buf_printf(&t, "( \"{\" %s \"}\" )", ws);
            seq_add(item, kipp_buf_str(&t));
        } else { /* a map: any keys, every value valid against additionalProperties */
            kipp_buf v = {0};
            long saved = g->head;
            size_t old = path_push(g, "additionalProperties");
            g->head = -1;
            rc = gen_node(g, addl, &v);
            g->head = saved;
            path_pop(g, old);
            const char *str = prim(g, P_STRING);
            kipp_buf_printf(&t, "\"{\" %s ( %s %s \":\" %s %s %s ( \",\" %s %s %s \":\" %s %s %s )* )? \"}\"", ws,
                      str, ws, ws, kipp_buf_str(&v), ws, ws, str, ws, ws, kipp_buf_str(&v), ws);
            if (!rc && !(rc = rule_name(g, hint, rn))) { emit_rule(g, rn, kipp_buf_str(&t)); seq_add(item, rn); }
            free(v.data);
        }
        free(t.data);
        return rc;
    }
    /* the properties in schema order; kv[i] is `"key" ws ":" ws value` */
    size_t n = 0, cap = json_object_size(props);
    char **kv = calloc(cap, sizeof *kv);
    int *required = calloc(cap, sizeof *required);
    int rc = kv && required ? 0 : fail(g, "out of memory");
    const char *key;
    json_t *ps;
    long saved = g->head;
    g->head = -1;
    json_object_foreach((json_t *)props, key, ps) {
        if (rc) break;
        int is_req = 0;
        for (size_t i = 0; req && i < json_array_size(req); i++)
            if (!strcmp(json_string_value(json_array_get(req, i)), key)) is_req = 1;
        size_t old = path_push(g, "properties");
        path_push(g, key);
        if (json_is_false(ps)) {
            if (is_req) rc = fail(g, "%s is false but required", g->path);
            path_pop(g, old);
            continue; /* may never appear: never generated */
        }
        kipp_buf t = {0};
        json_t *ks = json_string(key);
        if (!ks) rc = fail(g, "out of memory");
        else value_lit(&t, ks);
        json_decref(ks);
        kipp_buf_printf(&t, " %s \":\" %s ", ws, ws);
        if (!rc) rc = gen_node(g, ps, &t);
        path_pop(g, old);
        if (t.oom) rc = fail(g, "out of memory");
        kv[n] = t.data;
        required[n++] = is_req;
    }
    g->head = saved;
    kipp_buf body = {0};
    int all_req = 1;
    for (size_t i = 0; i < n; i++) all_req &= required[i];
    if (!rc && all_req) {
        kipp_buf_printf(&body, "\"{\" %s", ws);
        for (size_t i = 0; i < n; i++) {
            if (i) kipp_buf_printf(&body, " \",\" %s", ws);
            kipp_buf_printf(&body, " %s %s", kv[i], ws);
        }
        kipp_buf_puts(&body, " \"}\"");
    } else if (!rc) {
        /* F[i]: the properties from i on, none written yet (no comma first); R[i]: the same
         * after one was written (each starts with a comma). An optional property is skipped by
         * the second alternative, so commas come out right whatever is omitted. */
        char (*F)[NAME_CAP] = calloc(n + 1, sizeof *F), (*R)[NAME_CAP] = calloc(n + 1, sizeof *R);
        if (!F || !R) rc = fail(g, "out of memory");
        for (size_t i = 1; !rc && i < n; i++) {
            char h[NAME_CAP + 32];
            snprintf(h, sizeof h, "%s-r%zu", hint, i);
            rc = rule_name(g, h, R[i]);
        }
        int f_reached = 1; /* F[i] is used while every property before i is optional */
        for (size_t i = 0; !rc && i < n && f_reached; i++) {
            char h[NAME_CAP + 32];
            snprintf(h, sizeof h, "%s-f%zu", hint, i);
            rc = rule_name(g, h, F[i]);
            f_reached = !required[i];
        }
        for (size_t i = n; !rc && i-- > 0;) {
            kipp_buf t = {0};
            for (int first = 0; first < 2; first++) {
                if ((first ? F[i] : R[i])[0] == 0) continue;
                t.len = 0;
                const char *next_r = i + 1 < n ? R[i + 1] : "",
                           *skip = first ? (i + 1 < n ? F[i + 1] : "") : next_r;
                kipp_buf one = {0};
                if (!first) kipp_buf_printf(&one, "\",\" %s ", ws);
                kipp_buf_printf(&one, "%s %s", kv[i], ws);
                seq_add(&one, next_r);
                if (required[i]) kipp_buf_puts(&t, kipp_buf_str(&one));
                else if (skip[0]) kipp_buf_printf(&t, "%s | %s", kipp_buf_str(&one), skip);
                else kipp_buf_printf(&t, "( %s )?", kipp_buf_str(&one));
                emit_rule(g, first ? F[i] : R[i], kipp_buf_str(&t));
                free(one.data);
            }
            free(t.data);
        }
        if (!rc) kipp_buf_printf(&body, "\"{\" %s %s \"}\"", ws, F[0]);
        free(F);
        free(R);
    }
    if (!rc && !(rc = rule_name(g, hint, rn))) { emit_rule(g, rn, kipp_buf_str(&body)); seq_add(item, rn); }
    free(body.data);
    for (size_t i = 0; i < n; i++) free(kv[i]);
    free(kv);
    free(required);
    return rc;
}

static int gen_array(gen *g, const json_t *s, kipp_buf *item) {
    const json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    long mn = 0, mx = -1;
    if (get_count(g, s, "minItems", &mn) || get_count(g, s, "maxItems", &mx)) return -1;
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return fail(g, "%s/items must be a schema (the array form is not supported: use prefixItems)",
                    g->path);
    if (prefix && !json_is_array(prefix)) return fail(g, "%s/prefixItems must be an array", g->path);
    size_t k = prefix ? json_array_size(prefix) : 0;
    long cap = items && json_is_false(items) ? (long)k : -1; /* most items allowed, -1: any */
    for (size_t i = 0; i < k; i++)
        if (json_is_false(json_array_get(prefix, i))) { k = i; cap = (long)i; break; }
    if (mx >= 0 && (cap < 0 || mx < cap)) cap = mx;
    if (cap >= 0 && mn > cap)
        return fail(g, "%s/minItems %ld cannot be met (at most %ld items)", g->path, mn, cap);
    if (cap >= 0 && (long)k > cap) k = (size_t)cap;
    const char *ws = prim(g, P_WS);
    long saved = g->head;
    g->head = -1;
    kipp_buf body = {0}, el = {0}, tail = {0};
    int rc = 0;
    kipp_buf_printf(&body, "\"[\" %s", ws);
    size_t open = 0;
    for (size_t i = 0; !rc && i < k; i++) {
        el.len = 0;
        size_t old = path_push(g, "prefixItems");
        path_push_idx(g, i);
        rc = gen_node(g, json_array_get(prefix, i), &el);
        path_pop(g, old);
        if (rc) break;
        if ((long)i >= mn) { seq_add(&body, "("); open++; }
        if (i) kipp_buf_printf(&body, " \",\" %s", ws);
        kipp_buf_printf(&body, " %s %s", kipp_buf_str(&el), ws);
    }
    long tmin = mn > (long)k ? mn - (long)k : 0, tmax = cap < 0 ? -1 : cap - (long)k;
    if (!rc && tmax != 0) {
        el.len = 0;
        if (!items || json_is_true(items)) seq_add(&el, prim(g, P_VALUE));
        else {
            size_t old = path_push(g, "items");
            rc = gen_node(g, items, &el);
            path_pop(g, old);
        }
        kipp_buf more = {0};
        kipp_buf_printf(&more, "( \",\" %s %s %s )", ws, kipp_buf_str(&el), ws);
        if (!rc && k > 0) kipp_json_schema_repeat(&body, kipp_buf_str(&more), tmin, tmax);
        else if (!rc) {
            kipp_buf_printf(&tail, "%s %s", kipp_buf_str(&el), ws);
            kipp_json_schema_repeat(&tail, kipp_buf_str(&more), tmin > 0 ? tmin - 1 : 0, tmax < 0 ? -1 : tmax - 1);
            if (tmin > 0) seq_add(&body, kipp_buf_str(&tail));
            else { seq_add(&body, "("); seq_add(&body, kipp_buf_str(&tail)); seq_add(&body, ")?"); }
        }
        free(more.data);
    }
    g->head = saved;
    while (open--) kipp_buf_puts(&body, " )?");
    seq_add(&body, "\"]\"");
    char rn[NAME_CAP], hint[NAME_CAP];
    path_hint(g, "arr", hint);
    if (!rc && !(rc = rule_name(g, hint, rn))) { emit_rule(g, rn, kipp_buf_str(&body)); seq_add(item, rn); }
    if (body.oom || el.oom || tail.oom) g->oom = 1;
    free(body.data);
    free(el.data);
    free(tail.data);
    return rc;
}

/* ---- oneOf: accepted only when its branches cannot both match ------------------------------- */

static const json_t *deref(const gen *g, const json_t *s) {
    for (int d = 0; d < 16 && json_is_object(s); d++) {
        const json_t *r = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
        if (json_is_string(r)) s = resolve(g, json_string_value(r));
        else if (json_is_array(all) && json_array_size(all) == 1) s = json_array_get(all, 0);
        else break;
    }
    return s;
}
/* The types of the values s accepts (an over-approximation: A_ALL when unsure). */
static unsigned accepted(gen *g, const json_t *s, int depth) {
    s = deref(g, s);
    if (!s || json_is_false(s)) return 0;
    if (!json_is_object(s) || depth > 16) return A_ALL;
    unsigned m = A_ALL, t;
    const json_t *type = json_object_get(s, "type"), *en = json_object_get(s, "enum"),
                 *co = json_object_get(s, "const");
    if (type && !type_mask(g, type, &t, 1)) m &= t;
    if (co) m &= value_type(co);
    if (json_is_array(en)) {
        unsigned e = 0;
        for (size_t i = 0; i < json_array_size(en); i++) e |= value_type(json_array_get(en, i));
        m &= e;
    }
    const char *kws[2] = {"anyOf", "oneOf"};
    for (int k = 0; k < 2; k++) {
        const json_t *a = json_object_get(s, kws[k]);
        if (!json_is_array(a)) continue;
        unsigned u = 0;
        for (size_t i = 0; i < json_array_size(a); i++) u |= accepted(g, json_array_get(a, i), depth + 1);
        m &= u;
    }
    return m;
}
/* The const/enum values a property schema allows, or NULL. */
static const json_t *fixed_values(const gen *g, const json_t *s, json_t **tmp) {
    s = deref(g, s);
    if (!json_is_object(s)) return NULL;
    const json_t *en = json_object_get(s, "enum"), *co = json_object_get(s, "const");
    if (co) return *tmp = json_pack("[O]", co);
    return json_is_array(en) ? en : NULL;
}
static int is_required(const json_t *s, const char *key) {
    const json_t *req = json_object_get(s, "required");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (json_is_string(json_array_get(req, i)) && !strcmp(json_string_value(json_array_get(req, i)), key))
            return 1;
    return 0;
}
/* 1 if no value is valid against both a and b: their types differ, or both are objects with a
 * required property whose const/enum values differ (a tagged union). */
static int disjoint(gen *g, const json_t *a, const json_t *b) {
    unsigned ta = accepted(g, a, 0), tb = accepted(g, b, 0);
    if (!(ta & tb)) return 1;
    if (ta != A_OBJ || tb != A_OBJ) return 0;
    a = deref(g, a);
    b = deref(g, b);
    const json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties");
    const char *key;
    json_t *x;
    if (!json_is_object(pa) || !json_is_object(pb)) return 0;
    json_object_foreach((json_t *)pa, key, x) {
        const json_t *y = json_object_get(pb, key);
        if (!y || !is_required(a, key) || !is_required(b, key)) continue;
        json_t *ta_tmp = NULL, *tb_tmp = NULL;
        const json_t *va = fixed_values(g, x, &ta_tmp), *vb = fixed_values(g, y, &tb_tmp);
        int overlap = !va || !vb;
        for (size_t i = 0; !overlap && i < json_array_size(va); i++)
            for (size_t j = 0; !overlap && j < json_array_size(vb); j++)
                overlap = schema_equal(json_array_get(va, i), json_array_get(vb, j));
        json_decref(ta_tmp);
        json_decref(tb_tmp);
        if (!overlap) return 1;
    }
    return 0;
}

/* ---- a schema node ------------------------------------------------------------------------ */

static int gen_enum(gen *g, const json_t *s, kipp_buf *item) {
    const json_t *en = json_object_get(s, "enum"), *co = json_object_get(s, "const"),
                 *type = json_object_get(s, "type");
    unsigned tm = A_ALL;
    if (en && !json_is_array(en)) return fail(g, "%s/enum must be an array", g->path);
    if (type && type_mask(g, type, &tm, 0)) return -1;
    kipp_buf t = {0};
    size_t n_alt = 0, n = en ? json_array_size(en) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = en ? json_array_get(en, i) : co;
        if (!(value_type(v) & tm) || (en && co && !schema_equal(v, co))) continue;
        if (n_alt++) kipp_buf_puts(&t, " | ");
        value_lit(&t, v);
    }
    int rc = 0;
    if (!n_alt)
        rc = fail(g, "%s/%s: no value is also valid against the rest of the schema", g->path,
                  en ? "enum" : "const");
    else if (n_alt == 1) seq_add(item, kipp_buf_str(&t));
    else { seq_add(item, "("); seq_add(item, kipp_buf_str(&t)); seq_add(item, ")"); }
    if (t.oom) g->oom = 1;
    free(t.data);
    return rc;
}

static int gen_alternatives(gen *g, const json_t *s, const char *kw, kipp_buf *item) {
    const json_t *a = json_object_get(s, kw);
    if (!json_is_array(a) || !json_array_size(a))
        return fail(g, "%s/%s must be a non-empty array", g->path, kw);
    if (!strcmp(kw, "allOf") && json_array_size(a) != 1)
        return fail(g, "%s/allOf with %zu members is not supported (only one)", g->path, json_array_size(a));
    if (!strcmp(kw, "oneOf"))
        for (size_t i = 0; i < json_array_size(a); i++)
            for (size_t j = i + 1; j < json_array_size(a); j++)
                if (!disjoint(g, json_array_get(a, i), json_array_get(a, j)))
                    return fail(g,
                                "%s/oneOf is not supported: members %zu and %zu may both match (oneOf needs "
                                "members of different types or objects told apart by a required const "
                                "property; use anyOf)",
                                g->path, i, j);
    kipp_buf t = {0};
    int rc = 0;
    for (size_t i = 0; !rc && i < json_array_size(a); i++) {
        size_t old = path_push(g, kw);
        path_push_idx(g, i);
        if (i) kipp_buf_puts(&t, " |");
        rc = gen_node(g, json_array_get(a, i), &t);
        path_pop(g, old);
    }
    if (!rc && json_array_size(a) == 1) seq_add(item, kipp_buf_str(&t));
    else if (!rc) { seq_add(item, "("); seq_add(item, kipp_buf_str(&t)); seq_add(item, ")"); }
    if (t.oom) g->oom = 1;
    free(t.data);
    return rc;
}

static int gen_typed(gen *g, const json_t *s, unsigned have, kipp_buf *item) {
    unsigned tm = 0;
    const json_t *type = json_object_get(s, "type");
    if (type) {
        if (type_mask(g, type, &tm, 0)) return -1;
    } else {
        if (have >> K_OBJ & 1) tm |= A_OBJ;
        if (have >> K_ARR & 1) tm |= A_ARR;
        if (have >> K_STR & 1) tm |= A_STR;
        if (have >> K_NUM & 1) tm |= A_INT | A_FRAC;
        if (!tm) { seq_add(item, prim(g, P_VALUE)); return 0; }
    }
    if ((tm & A_FRAC) && (have >> K_NUM & 1)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)s, k, v) if (keyword_class(k) == K_NUM) return fail(
            g, "%s/%s is not supported for numbers (only for \"type\": \"integer\")", g->path, k);
    }
    kipp_buf t = {0};
    size_t n_alt = 0;
    int rc = 0;
    for (unsigned bit = 1; !rc && bit <= A_FRAC; bit <<= 1) {
        if (!(tm & bit) || (bit == A_INT && (tm & A_FRAC))) continue;
        if (n_alt++) kipp_buf_puts(&t, " |");
        switch (bit) {
        case A_NULL: seq_add(&t, "\"null\""); break;
        case A_BOOL: seq_add(&t, prim(g, P_BOOLEAN)); break;
        case A_OBJ: rc = gen_object(g, s, &t); break;
        case A_ARR: rc = gen_array(g, s, &t); break;
        case A_STR: rc = gen_string(g, s, &t); break;
        case A_INT: rc = gen_integer(g, s, &t); break;
        case A_FRAC: seq_add(&t, prim(g, P_NUMBER)); break;
        }
    }
    if (!rc && n_alt == 1) seq_add(item, kipp_buf_str(&t));
    else if (!rc) { seq_add(item, "("); seq_add(item, kipp_buf_str(&t)); seq_add(item, ")"); }
    if (t.oom) g->oom = 1;
    free(t.data);
    return rc;
}

/* Appends one grammar item matching (a subset of) the values valid against s. */
static int gen_node(gen *g, const json_t *s, kipp_buf *item) {
    if (json_is_true(s)) { seq_add(item, prim(g, P_VALUE)); return 0; }
    if (json_is_false(s)) return fail(g, "the schema at %s is false: no value is valid", where(g));
    if (!json_is_object(s)) return fail(g, "the schema at %s is not an object or a boolean", where(g));
    if (g->depth >= MAX_NEST)
        return fail(g, "%s: schemas nested deeper than %d are not supported", where(g), MAX_NEST);
    unsigned have = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        int c = keyword_class(k);
        if (c == K_UNKNOWN) return fail(g, "%s/%s is not supported", g->path, k);
        if (c == K_ID && s != g->root) return fail(g, "%s/$id is only supported at the root", g->path);
        have |= 1u << c;
    }
    g->depth++;
    int rc;
    if (have >> K_REF & 1) rc = only_annotations(g, s, "$ref", 0) ? -1 : gen_ref(g, s, item);
    else if (have >> K_ALLOF & 1)
        rc = only_annotations(g, s, "allOf", 0) ? -1 : gen_alternatives(g, s, "allOf", item);
    else if (have >> K_ANYOF & 1)
        rc = only_annotations(g, s, "anyOf", 0) ? -1 : gen_alternatives(g, s, "anyOf", item);
    else if (have >> K_ONEOF & 1)
        rc = only_annotations(g, s, "oneOf", 0) ? -1 : gen_alternatives(g, s, "oneOf", item);
    else if (have & (1u << K_ENUM | 1u << K_CONST))
        rc = only_annotations(g, s, have >> K_ENUM & 1 ? "enum" : "const",
                              1u << K_TYPE | 1u << K_ENUM | 1u << K_CONST) ?
                 -1 :
                 gen_enum(g, s, item);
    else rc = gen_typed(g, s, have, item);
    g->depth--;
    return rc;
}

/* ---- shared rules and the entry points ------------------------------------------------------- */

static void emit_prims(gen *g) {
    unsigned used = g->prims_used, prev;
    do { /* close over dependencies */
        prev = used;
        for (int p = 0; p < N_PRIM; p++)
            if (used >> p & 1) used |= PRIM_DEPS[p];
    } while (used != prev);
    char(*P)[NAME_CAP] = g->prim;
    kipp_buf t = {0};
    for (int p = 0; p < N_PRIM; p++) {
        if (!(used >> p & 1)) continue;
        t.len = 0;
        switch (p) {
        case P_WS: kipp_buf_printf(&t, "( \" \" | \"\\n\" [ \\t]{0,%d} )?", WS_MAX); break;
        case P_CHAR:
            kipp_buf_printf(&t, "[^\\\"\\\\\\x00-\\x1F] | \"\\\\\" [\\\"\\\\/bfnrt] | \"\\\\u\" %s", P[P_U]);
            break;
        case P_U:
            kipp_buf_puts(&t, "[0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | "
                        "[dD] [89abAB] [0-9a-fA-F]{2} \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F]{2}");
            break;
        case P_STRING: kipp_buf_printf(&t, "\"\\\"\" %s* \"\\\"\"", P[P_CHAR]); break;
        case P_NUMBER:
            kipp_buf_printf(
                &t,
                "\"-\"? ( \"0\" | [1-9] [0-9]{0,%d} ) ( \".\" [0-9]{1,%d} )? ( [eE] ( \"-\" [0-9]{1,%d} | "
                "\"+\"? ( [0-9]{1,%d} | [01] [0-9]{%d} | \"2\" [0-8] [0-9] | \"29\" [0-2] ) ) )?",
                INT_DIGITS - 1, FRAC_DIGITS, EXP_DIGITS, EXP_DIGITS - 1, EXP_DIGITS - 1);
            break;
        case P_INTEGER: kipp_buf_printf(&t, "\"0\" | \"-\"? [1-9] [0-9]{0,%d}", INT_DIGITS - 1); break;
        case P_BOOLEAN: kipp_buf_puts(&t, "\"true\" | \"false\""); break;
        case P_VALUE:
            kipp_buf_printf(&t, "%s | %s | %s | %s | %s | \"null\"", P[P_OBJECT], P[P_ARRAY], P[P_STRING],
                      P[P_NUMBER], P[P_BOOLEAN]);
            break;
        case P_OBJECT:
            kipp_buf_printf(&t, "\"{\" %s ( %s %s \":\" %s %s %s ( \",\" %s %s %s \":\" %s %s %s )* )? \"}\"",
                      P[P_WS], P[P_STRING], P[P_WS], P[P_WS], P[P_VALUE], P[P_WS], P[P_WS], P[P_STRING],
                      P[P_WS], P[P_WS], P[P_VALUE], P[P_WS]);
            break;
        case P_ARRAY:
            kipp_buf_printf(&t, "\"[\" %s ( %s %s ( \",\" %s %s %s )* )? \"]\"", P[P_WS], P[P_VALUE], P[P_WS],
                      P[P_WS], P[P_VALUE], P[P_WS]);
            break;
        }
        emit_rule(g, P[p], kipp_buf_str(&t));
    }
    if (t.oom) g->oom = 1;
    free(t.data);
}

/* Rule names already defined in the buffer: a name at the start of a line before "::=". */
static int scan_names(gen *g, const char *buf, size_t len) {
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && (buf[j] == ' ' || buf[j] == '\t')) j++;
        size_t s = j;
        while (j < len && is_name_char((unsigned char)buf[j])) j++;
        size_t e = j;
        while (j < len && (buf[j] == ' ' || buf[j] == '\t')) j++;
        if (e > s && j + 3 <= len && !memcmp(buf + j, "::=", 3) && name_add(g, buf + s, e - s)) return -1;
        while (i < len && buf[i] != '\n') i++;
        i++;
    }
    return 0;
}

int kipp_json_schema_rules(const json_t *schema, const char *name, char **buf, size_t *len, size_t *cap,
                           char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (!schema || !name || !buf || !len || !cap) {
        if (err && err_len) snprintf(err, err_len, "kipp_json_schema_rules: a NULL argument");
        return -1;
    }
    kipp_buf out = {*buf, *len, *cap, 0};
    size_t len0 = *len;
    gen g = {.root = schema, .name = name, .out = &out, .head = -1, .err = err, .err_len = err_len};
    int rc = 0;
    size_t nl = strlen(name);
    if (!nl || nl > 100) rc = fail(&g, "the rule name \"%s\" must be 1 to 100 characters", name);
    for (size_t i = 0; !rc && i < nl; i++)
        if (!is_name_char((unsigned char)name[i]))
            rc = fail(&g, "the rule name \"%s\" must match [A-Za-z0-9_-]+", name);
    if (!rc) rc = scan_names(&g, kipp_buf_str(&out), out.len);
    if (!rc && name_used(&g, name, nl)) rc = fail(&g, "the rule name \"%s\" is already defined", name);
    if (!rc) rc = name_add(&g, name, nl);
    for (int p = 0; !rc && p < N_PRIM; p++) rc = rule_name(&g, PRIM_HINT[p], g.prim[p]);
    long root = rc ? -1 : ref_add(&g, schema, name, "");
    if (root < 0) rc = -1;
    kipp_buf body = {0};
    if (!rc) {
        g.head = root;
        rc = gen_node(&g, schema, &body);
        g.head = -1;
    }
    for (size_t i = 0; !rc && i < g.n_refs; i++) rc = cycle_from(&g, i);
    if (!rc) {
        emit_rule(&g, name, kipp_buf_str(&body));
        emit_prims(&g);
    }
    if (!rc && (g.oom || out.oom || body.oom)) rc = fail(&g, "out of memory building the grammar");
    free(body.data);
    for (size_t i = 0; i < g.n_names; i++) free(g.names[i]);
    free(g.names);
    for (size_t i = 0; i < g.n_refs; i++) {
        free(g.refs[i].rule);
        free(g.refs[i].ptr);
        free(g.refs[i].edge);
    }
    free(g.refs);
    *buf = out.data;
    *cap = out.cap;
    *len = rc ? len0 : out.len;
    if (*buf && *cap > *len) (*buf)[*len] = 0;
    return rc ? -1 : 0;
}

int kipp_json_schema_grammar(const json_t *schema, char **out, size_t *out_len, char *err, size_t err_len) {
    json_t *any = NULL;
    if (!schema && !(schema = any = json_pack("{s:s}", "type", "object"))) {
        if (err && err_len) snprintf(err, err_len, "out of memory");
        return -1;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = kipp_json_schema_rules(schema, "root", &buf, &len, &cap, err, err_len);
    json_decref(any);
    if (rc) {
        free(buf);
        return -1;
    }
    *out = buf;
    *out_len = len;
    return 0;
}
