/* toolcall.c — the <tool_call> split of toolcall.h: a one-shot reference made of plain string
 * searches and whole-body scans, and a byte-at-a-time streaming state machine that must
 * agree with it for every way of chunking the text (tests/unit/test_toolcall.c checks every
 * split point). Both use jansson for what is decoded (names, string arguments, bodies in
 * another key order). Not here: the OpenAI JSON, ids, schemas. */
#include "tok/toolcall.h"

#include "core/error.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char open_tag[] = "<tool_call>";
static const char close_tag[] = "</tool_call>";
#define OPEN_LEN (sizeof open_tag - 1)
#define CLOSE_LEN (sizeof close_tag - 1)

static const char key_name[] = "\"name\"";
static const char key_args[] = "\"arguments\"";

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* A byte that ends a bare JSON token (number, true, ...) after an object key. */
static int ends_token(char c) { return is_ws(c) || c == ',' || c == '}' || c == ']'; }

/* ---- decoding (shared by both paths) ------------------------------------------------------ */

/* Rule 4: name[0..n) is a declared name (any name when there is no list). */
static int declared(const char *const *names, size_t n_names, const char *name, size_t n) {
    if (!names) return 1;
    for (size_t i = 0; i < n_names; i++)
        if (strlen(names[i]) == n && memcmp(names[i], name, n) == 0) return 1;
    return 0;
}

/* A JSON string token (quotes included) as a call name: 1 (and, when name is not NULL, a
 * malloc'd copy) when it is valid JSON and decodes to a non-empty declared name (jansson
 * refuses \u0000), 0 when it does not, -1 out of memory. */
static int decode_name(const char *tok, size_t n, const char *const *names, size_t n_names,
                       char **name, size_t *name_len) {
    json_error_t je;
    json_t *v = json_loadb(tok, n, JSON_DECODE_ANY, &je);
    int ok = json_is_string(v) && json_string_length(v) > 0 &&
             declared(names, n_names, json_string_value(v), json_string_length(v));
    if (ok && name) {
        *name_len = json_string_length(v);
        *name = malloc(*name_len + 1);
        if (*name) memcpy(*name, json_string_value(v), *name_len + 1);
        else ok = -1;
    }
    json_decref(v);
    return ok;
}

/* s[0..n) is the text of a JSON object: what a client's json.loads takes (numbers of any
 * size that fit a double; \u0000 allowed). */
static int is_object_text(const char *s, size_t n) {
    json_error_t je;
    json_t *v = json_loadb(s, n, JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, &je);
    const int ok = json_is_object(v);
    json_decref(v);
    return ok;
}

/* The arguments of a call given as a JSON string value v: 1 with its decoded text in out
 * when that is a JSON object's text, 0 when not, -1 out of memory. */
static int string_args(const json_t *v, kipp_buf *out) {
    const char *s = json_string_value(v);
    const size_t n = json_string_length(v);
    if (!is_object_text(s, n)) return 0;
    return kipp_buf_put(out, s, n) ? -1 : 1;
}

/* ---- scanning whole texts (the reference; rule 3 also in streaming) ----------------------- */

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}

static size_t find(const char *s, size_t n, size_t from, const char *pat, size_t pat_len) {
    for (size_t i = from; i + pat_len <= n; i++)
        if (memcmp(s + i, pat, pat_len) == 0) return i;
    return n;
}

/* Rule 1: where the body that starts at s[from] ends — its first </tool_call> outside a
 * JSON string (strings counting when the body starts with '{') — or n. */
static size_t find_close(const char *s, size_t n, size_t from) {
    int seen = 0, json = 0, in_str = 0, esc = 0;
    for (size_t i = from; i < n; i++) {
        const char c = s[i];
        if (in_str) {
            if (esc) esc = 0;
            else if (c == '\\') esc = 1;
            else if (c == '"') in_str = 0;
            continue;
        }
        if (n - i >= CLOSE_LEN && memcmp(s + i, close_tag, CLOSE_LEN) == 0) return i;
        if (!seen && !is_ws(c)) seen = 1, json = c == '{';
        if (json && c == '"') in_str = 1;
    }
    return n;
}

/* s[i] is '"': sets *end just past the closing quote and returns 1, or returns 0 when the
 * text ends first. */
static int scan_string(const char *s, size_t n, size_t i, size_t *end) {
    for (size_t j = i + 1; j < n; j++) {
        if (s[j] == '\\') j++;
        else if (s[j] == '"') {
            *end = j + 1;
            return 1;
        }
    }
    return 0;
}

#define NOT_CLOSED ((size_t)-1)

/* s[i] is '{' or '[': the end of the bracketed value (past the bracket that brings the
 * depth back to 0, any kind of bracket counting), or NOT_CLOSED when the text ends first. */
static size_t scan_tree(const char *s, size_t n, size_t i) {
    size_t depth = 0;
    for (size_t j = i; j < n; j++) {
        const char c = s[j];
        if (c == '"') {
            size_t e;
            if (!scan_string(s, n, j, &e)) return NOT_CLOSED;
            j = e - 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return j + 1;
        }
    }
    return NOT_CLOSED;
}

/* Rule 2's prefix {"name": <string>, "arguments": — 1 with the decoded name and *rest (just
 * past the colon) when b starts with it and the name is declared; 0 otherwise (also when b
 * ends inside it); -1 out of memory. */
static int match_announced(const char *b, size_t n, const char *const *names, size_t n_names,
                           char **name, size_t *name_len, size_t *rest) {
    size_t i = skip_ws(b, n, 0), e;
    if (i == n || b[i] != '{') return 0;
    i = skip_ws(b, n, i + 1);
    if (n - i < sizeof key_name - 1 || memcmp(b + i, key_name, sizeof key_name - 1)) return 0;
    i = skip_ws(b, n, i + sizeof key_name - 1);
    if (i == n || b[i] != ':') return 0;
    i = skip_ws(b, n, i + 1);
    if (i == n || b[i] != '"' || !scan_string(b, n, i, &e)) return 0;
    const size_t name0 = i;
    i = skip_ws(b, n, e);
    if (i == n || b[i] != ',') return 0;
    i = skip_ws(b, n, i + 1);
    if (n - i < sizeof key_args - 1 || memcmp(b + i, key_args, sizeof key_args - 1)) return 0;
    i = skip_ws(b, n, i + sizeof key_args - 1);
    if (i == n || b[i] != ':') return 0;
    const int rc = decode_name(b + name0, e - name0, names, n_names, name, name_len);
    if (rc == 1) *rest = i + 1;
    return rc;
}

/* Rule 2's arguments from the text after "arguments": 1 (a call), 0 (no call), -1. */
static int announced_args(const char *s, size_t n, kipp_buf *out) {
    const size_t i = skip_ws(s, n, 0);
    if (i == n) return 0;
    if (s[i] == '{') {
        const size_t e = scan_tree(s, n, i);
        if (e == NOT_CLOSED || !is_object_text(s + i, e - i)) return 0;
        return kipp_buf_put(out, s + i, e - i) ? -1 : 1;
    }
    size_t e;
    if (s[i] != '"' || !scan_string(s, n, i, &e)) return 0;
    json_error_t je;
    json_t *v = json_loadb(s + i, e - i, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    const int rc = json_is_string(v) ? string_args(v, out) : 0;
    json_decref(v);
    return rc;
}

/* The text of the top-level "arguments" value of b, a valid JSON object (jansson said so);
 * 0 when it is not found. */
static int find_args_text(const char *b, size_t n, size_t *v0, size_t *v1) {
    size_t i = skip_ws(b, n, 0) + 1; /* past '{' */
    for (;;) {
        i = skip_ws(b, n, i);
        if (i >= n || b[i] != '"') return 0;
        size_t ke, ve;
        if (!scan_string(b, n, i, &ke)) return 0;
        const size_t k0 = i;
        i = skip_ws(b, n, ke) + 1; /* past ':' */
        i = skip_ws(b, n, i);
        if (i >= n) return 0;
        if (b[i] == '"') {
            if (!scan_string(b, n, i, &ve)) return 0;
        } else if (b[i] == '{' || b[i] == '[') {
            ve = scan_tree(b, n, i);
            if (ve == NOT_CLOSED) return 0;
        } else {
            ve = i;
            while (ve < n && !ends_token(b[ve])) ve++;
        }
        json_error_t je;
        json_t *k = json_loadb(b + k0, ke - k0, JSON_DECODE_ANY, &je);
        const int hit = json_is_string(k) && strcmp(json_string_value(k), "arguments") == 0;
        json_decref(k);
        if (hit) {
            *v0 = i, *v1 = ve;
            return 1;
        }
        i = skip_ws(b, n, ve);
        if (i >= n || b[i] != ',') return 0;
        i++;
    }
}

/* Rule 3: 1 with the call's name and arguments when b is a JSON object with a declared
 * "name" and object arguments; 0 when it is no call; -1 out of memory. */
static int parse_other(const char *b, size_t n, const char *const *names, size_t n_names,
                       char **name, size_t *name_len, kipp_buf *args) {
    json_error_t je;
    json_t *o = json_loadb(b, n, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &je);
    json_t *nm = json_object_get(o, "name"); /* NULL when o is not an object */
    json_t *a = json_object_get(o, "arguments");
    if (!json_is_string(nm) || json_string_length(nm) == 0 ||
        !declared(names, n_names, json_string_value(nm), json_string_length(nm)) ||
        (a && !json_is_object(a) && !json_is_string(a))) {
        json_decref(o);
        return 0;
    }
    size_t v0, v1;
    int rc = 1;
    if (!a) rc = kipp_buf_put(args, "{}", 2) ? -1 : 1;
    else if (json_is_string(a)) rc = string_args(a, args);
    else if (find_args_text(b, n, &v0, &v1)) rc = kipp_buf_put(args, b + v0, v1 - v0) ? -1 : 1;
    else { /* not reached for a valid object; re-encoding keeps the value */
        char *s = json_dumps(a, JSON_COMPACT);
        rc = !s || kipp_buf_put(args, s, strlen(s)) ? -1 : 1;
        free(s);
    }
    if (rc == 1) {
        *name_len = json_string_length(nm);
        if (!(*name = malloc(*name_len + 1))) rc = -1;
        else memcpy(*name, json_string_value(nm), *name_len + 1);
    }
    json_decref(o);
    if (rc != 1) {
        free(args->data);
        *args = (kipp_buf){0};
    }
    return rc;
}

/* A body (rules 2 and 3): 1 with the call's name and arguments, 0 no call, -1. */
static int parse_body(const char *b, size_t n, const char *const *names, size_t n_names,
                      char **name, size_t *name_len, kipp_buf *args) {
    size_t rest;
    int rc = match_announced(b, n, names, n_names, name, name_len, &rest);
    if (rc == 0) return parse_other(b, n, names, n_names, name, name_len, args);
    if (rc == 1) rc = announced_args(b + rest, n - rest, args);
    if (rc != 1) {
        free(*name);
        *name = NULL;
        free(args->data);
        *args = (kipp_buf){0};
    }
    return rc;
}

/* ---- one-shot reference -------------------------------------------------------------------- */

/* Appends content s[0..n) less leading whitespace (after a call) and trailing whitespace
 * (before a call or at the end). */
static int add_segment(kipp_buf *c, const char *s, size_t n, int strip_lead) {
    if (strip_lead)
        while (n && is_ws(s[0])) s++, n--;
    while (n && is_ws(s[n - 1])) n--;
    return kipp_buf_put(c, s, n);
}

kipp_status kipp_toolcall_parse(const char *text, size_t len, const char *const *names,
                                size_t n_names, kipp_toolcall_result *out, char *err,
                                size_t err_len) {
    memset(out, 0, sizeof *out);
    kipp_buf content = {0};
    size_t cap = 0;
    size_t pos = 0;  /* start of the current content segment */
    size_t from = 0; /* where the next <tool_call> is looked for */
    int after_call = 0;
    if (kipp_buf_put(&content, "", 0)) goto nomem;
    for (;;) {
        const size_t at = find(text, len, from, open_tag, OPEN_LEN);
        if (at == len) {
            if (add_segment(&content, text + pos, len - pos, after_call)) goto nomem;
            break;
        }
        const size_t b0 = at + OPEN_LEN;
        const size_t close = find_close(text, len, b0);
        const size_t next = close < len ? close + CLOSE_LEN : len;
        char *name = NULL;
        size_t name_len = 0;
        kipp_buf args = {0};
        const int rc = parse_body(text + b0, close - b0, names, n_names, &name, &name_len, &args);
        if (rc < 0) goto nomem;
        if (rc == 0 && close == len) { /* cut short before it became a call: dropped */
            if (add_segment(&content, text + pos, at - pos, after_call)) goto nomem;
            break;
        }
        if (rc == 0) { /* no call: its text stays in the segment */
            from = next;
            continue;
        }
        if (kipp_grow((void **)&out->calls, &cap, out->n_calls + 1, sizeof *out->calls) != KIPP_OK) {
            free(name);
            free(args.data);
            goto nomem;
        }
        out->calls[out->n_calls++] =
            (kipp_toolcall_call){.name = name, .name_len = name_len, .args = args.data, .args_len = args.len};
        if (add_segment(&content, text + pos, at - pos, after_call)) goto nomem;
        after_call = 1;
        pos = from = next;
    }
    out->content = content.data;
    out->content_len = content.len;
    return KIPP_OK;
nomem:
    free(content.data);
    return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "tool-call split: out of memory");
}

void kipp_toolcall_result_free(kipp_toolcall_result *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].args);
    }
    free(r->calls);
    free(r->content);
    memset(r, 0, sizeof *r);
}

/* ---- streaming -------------------------------------------------------------------------------- */

enum { M_CONTENT, M_BODY, M_DONE };

/* A call's sub-states. P_*: reading rule 2's prefix; DEFERRED: it failed (the body is kept
 * for rule 3); A_*: after it (rule 2 decides). */
enum {
    P_OPEN,      /* ws* '{' */
    P_KEY_NAME,  /* ws* "name" */
    P_COLON1,    /* ws* ':' */
    P_QUOTE,     /* ws* '"' */
    P_NAME,      /* inside the name string */
    P_COMMA,     /* ws* ',' */
    P_KEY_ARGS,  /* ws* "arguments" */
    P_COLON2,    /* ws* ':' -> rule 2 */
    DEFERRED,
    A_WS,        /* whitespace before the arguments value */
    A_TREE,      /* inside an object */
    A_STRING,    /* inside a string value */
    A_BAD,       /* the arguments are no object: no call */
    A_DONE,      /* the call was emitted; the rest of the body is ignored */
};

void kipp_toolcall_init(kipp_toolcall *t, kipp_toolcall_emit_fn emit, void *user) {
    memset(t, 0, sizeof *t);
    t->mode = M_CONTENT;
    t->emit = emit;
    t->user = user;
}

void kipp_toolcall_set_names(kipp_toolcall *t, const char *const *names, size_t n_names) {
    t->names = names;
    t->n_names = names ? n_names : 0;
}

void kipp_toolcall_free(kipp_toolcall *t) {
    if (!t) return;
    free(t->ws.data);
    free(t->text.data);
    t->ws = t->text = (kipp_buf){0};
}

uint32_t kipp_toolcall_n_calls(const kipp_toolcall *t) { return t->n_calls; }

static void add(kipp_toolcall *t, kipp_buf *b, const char *s, size_t n) {
    if (kipp_buf_put(b, s, n)) t->oom = 1;
}

static void flush(kipp_toolcall *t) {
    if (t->n_out && t->emit)
        t->emit(t->user, (kipp_toolcall_event)t->out_ev,
                t->out_ev == KIPP_TOOLCALL_ARGS ? t->n_calls - 1 : 0, t->out, t->n_out);
    t->n_out = 0;
}

static void out_byte(kipp_toolcall *t, int ev, char c) {
    if (t->n_out && (t->out_ev != ev || t->n_out == sizeof t->out)) flush(t);
    t->out_ev = ev;
    t->out[t->n_out++] = c;
}

static void event(kipp_toolcall *t, kipp_toolcall_event ev, const char *s, size_t n) {
    flush(t);
    if (t->emit) t->emit(t->user, ev, t->n_calls - 1, s, n);
}

/* A content byte past the tag layer: whitespace is held until a byte shows it is interior
 * (or dropped: leading after a call, trailing before a call or at the end). */
static void content_byte(kipp_toolcall *t, char c) {
    if (is_ws(c)) {
        add(t, &t->ws, &c, 1);
        return;
    }
    if (!t->lead_drop)
        for (size_t i = 0; i < t->ws.len; i++) out_byte(t, KIPP_TOOLCALL_CONTENT, t->ws.data[i]);
    t->ws.len = 0;
    t->lead_drop = 0;
    out_byte(t, KIPP_TOOLCALL_CONTENT, c);
}

/* A decided call, whole: BEGIN, ARGS, END. */
static void emit_call(kipp_toolcall *t, const char *name, size_t name_len, const char *args,
                      size_t args_len) {
    t->ws.len = 0; /* the whitespace before <tool_call> */
    t->n_calls++;
    event(t, KIPP_TOOLCALL_BEGIN, name, name_len);
    if (args_len) event(t, KIPP_TOOLCALL_ARGS, args, args_len);
    event(t, KIPP_TOOLCALL_END, "", 0);
}

/* Rule 2: the arguments value just closed (an object's last bracket, a string's quote):
 * the call is emitted when they are an object, else the body is no call. */
static void args_closed(kipp_toolcall *t) {
    const char *b = t->text.data, *v0 = b + t->args0;
    const size_t n = t->text.len, vn = n - t->args0;
    kipp_buf decoded = {0}; /* a string value's decoded text */
    int rc;
    if (t->body == A_TREE) {
        rc = is_object_text(v0, vn);
    } else {
        json_error_t je;
        json_t *v = json_loadb(v0, vn, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        rc = json_is_string(v) ? string_args(v, &decoded) : 0;
        json_decref(v);
    }
    char *name = NULL;
    size_t name_len = 0, e = t->mark;
    scan_string(b, n, t->mark, &e);
    if (rc == 1 && decode_name(b + t->mark, e - t->mark, NULL, 0, &name, &name_len) != 1) rc = -1;
    if (rc < 0) t->oom = 1; /* the name decoded at P_NAME: only memory can fail now */
    if (rc == 1) {
        if (t->body == A_TREE) emit_call(t, name, name_len, v0, vn);
        else emit_call(t, name, name_len, decoded.data, decoded.len);
        t->body = A_DONE;
        t->text.len = 0;
    } else {
        t->body = A_BAD;
    }
    free(name);
    free(decoded.data);
}

static void end_call(kipp_toolcall *t, int closed) {
    int call = t->body == A_DONE;
    if (t->body <= DEFERRED) { /* rule 2's prefix did not match: rule 3 */
        char *name = NULL;
        size_t name_len = 0;
        kipp_buf args = {0};
        const int rc = parse_other(t->text.data ? t->text.data : "", t->text.len, t->names,
                                   t->n_names, &name, &name_len, &args);
        if (rc < 0) t->oom = 1;
        if (rc == 1) emit_call(t, name, name_len, args.data, args.len);
        call = rc == 1;
        free(name);
        free(args.data);
    }
    if (call) {
        t->lead_drop = 1;
    } else if (closed) { /* no call: the text was plain text after all */
        for (size_t i = 0; i < OPEN_LEN; i++) content_byte(t, open_tag[i]);
        for (size_t i = 0; i < t->text.len; i++) content_byte(t, t->text.data[i]);
        for (size_t i = 0; i < CLOSE_LEN; i++) content_byte(t, close_tag[i]);
    } /* else cut short before it became a call: dropped (no tag text in content) */
    t->mode = M_CONTENT;
    t->text.len = 0;
}

/* One byte of rule 2's prefix (already appended to t->text; the lexer has seen it). */
static void prefix_byte(kipp_toolcall *t, char c) {
    static const char single[] = {[P_OPEN] = '{', [P_COLON1] = ':', [P_QUOTE] = '"',
                                  [P_COMMA] = ',', [P_COLON2] = ':'};
    switch (t->body) {
    case P_NAME:
        if (!t->in_str) /* the closing quote */
            t->body = decode_name(t->text.data + t->mark, t->text.len - t->mark, t->names,
                                  t->n_names, NULL, NULL) == 1
                          ? P_COMMA
                          : DEFERRED;
        return;
    case P_KEY_NAME:
    case P_KEY_ARGS: {
        const char *key = t->body == P_KEY_NAME ? key_name : key_args;
        const size_t key_len = t->body == P_KEY_NAME ? sizeof key_name - 1 : sizeof key_args - 1;
        if (t->lit == 0 && is_ws(c)) return;
        if (c != key[t->lit]) t->body = DEFERRED;
        else if (++t->lit == key_len) t->body++, t->lit = 0;
        return;
    }
    default:
        if (is_ws(c)) return;
        if (c != single[t->body]) {
            t->body = DEFERRED;
        } else if (t->body == P_QUOTE) {
            t->mark = t->text.len - 1; /* the name's token starts at its quote */
            t->body = P_NAME;
        } else {
            t->body = t->body == P_COLON2 ? A_WS : t->body + 1;
        }
    }
}

/* One byte of a call's body (past the close-tag layer and the lexer); was_str: the byte
 * was inside a JSON string. */
static void body_byte(kipp_toolcall *t, char c, int was_str) {
    if (t->body == A_DONE) return;
    add(t, &t->text, &c, 1);
    switch (t->body) {
    case DEFERRED:
    case A_BAD:
        return;
    case A_WS:
        if (is_ws(c)) return;
        t->args0 = t->text.len - 1;
        t->depth = 1;
        t->body = c == '{' ? A_TREE : c == '"' ? A_STRING : A_BAD;
        return;
    case A_TREE:
        if (was_str) return;
        if (c == '{' || c == '[') t->depth++;
        else if ((c == '}' || c == ']') && --t->depth == 0) args_closed(t);
        return;
    case A_STRING:
        if (!t->in_str) args_closed(t); /* the closing quote */
        return;
    default: /* P_*: the body is kept whole until the prefix is decided */
        prefix_byte(t, c);
    }
}

/* Rule 1's lexer over every body byte, in order, then the byte itself. */
static void body_feed(kipp_toolcall *t, char c) {
    const int was_str = t->in_str;
    if (t->in_str) {
        if (t->esc) t->esc = 0;
        else if (c == '\\') t->esc = 1;
        else if (c == '"') t->in_str = 0;
    } else {
        if (!t->seen && !is_ws(c)) t->seen = 1, t->json = c == '{';
        if (t->json && c == '"') t->in_str = 1;
    }
    body_byte(t, c, was_str);
}

static void step(kipp_toolcall *t, char c);

/* Re-runs held bytes through the machine after a partial tag broke. */
static void restep(kipp_toolcall *t, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) step(t, bytes[i]);
}

/* A partial tag that cannot complete: its first byte is text of the current mode, a later
 * byte may begin another tag. */
static void break_tag(kipp_toolcall *t) {
    char held[sizeof t->tag];
    const size_t n_held = t->n_tag;
    memcpy(held, t->tag, n_held);
    t->n_tag = 0;
    if (t->mode == M_BODY) body_feed(t, held[0]);
    else content_byte(t, held[0]);
    restep(t, held + 1, n_held - 1);
}

static void step(kipp_toolcall *t, char c) {
    const int in_body = t->mode == M_BODY;
    if (in_body && t->in_str) { /* no tag inside a string (no partial tag is held then) */
        body_feed(t, c);
        return;
    }
    const char *tag = in_body ? close_tag : open_tag;
    const size_t tag_len = in_body ? CLOSE_LEN : OPEN_LEN;
    if (c == tag[t->n_tag]) {
        t->tag[t->n_tag++] = c;
        if (t->n_tag < tag_len) return;
        t->n_tag = 0;
        if (in_body) {
            end_call(t, 1);
        } else {
            t->mode = M_BODY; /* the whitespace before the tag stays held: the body may be no call */
            t->body = P_OPEN;
            t->text.len = 0;
            t->lit = 0;
            t->esc = t->in_str = t->seen = t->json = 0;
        }
        return;
    }
    if (t->n_tag == 0) {
        if (in_body) body_feed(t, c);
        else content_byte(t, c);
        return;
    }
    break_tag(t);
    step(t, c);
}

kipp_status kipp_toolcall_feed(kipp_toolcall *t, const char *text, size_t len, char *err,
                               size_t err_len) {
    if (t->mode == M_DONE)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "tool-call split: text fed after finish");
    for (size_t i = 0; i < len; i++) step(t, text[i]);
    flush(t);
    if (t->oom)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "tool-call split: out of memory holding text back");
    return KIPP_OK;
}

kipp_status kipp_toolcall_finish(kipp_toolcall *t, char *err, size_t err_len) {
    if (t->mode == M_DONE)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "tool-call split: finished twice");
    while (t->n_tag) break_tag(t); /* a partial tag that can no longer complete */
    if (t->mode == M_BODY) end_call(t, 0); /* cut short inside a call: the end closes it */
    flush(t);                              /* trailing whitespace is never emitted */
    t->ws.len = 0;
    t->mode = M_DONE;
    if (t->oom)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "tool-call split: out of memory holding text back");
    return KIPP_OK;
}
