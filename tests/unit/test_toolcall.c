/* test_toolcall.c — unit suite for the <tool_call> split (src/tok/toolcall.c): the one-shot
 * reference against hand-written expectations, and the streaming invariant — for every case,
 * fed whole, split at every pair of byte positions and byte by byte, the streamed events
 * are well ordered and concatenate to the one-shot result. Plus when streaming decides
 * (the name before the body ends, arguments as they arrive, nothing of a tag leaked), and
 * the server's text path (src/server/openai_gen.c) on an in-memory vocab: token ids in,
 * message.tool_calls and the streamed tool_calls deltas out, and the <tool_call> ban.
 * Not here: HTTP and the chat template (tests/server/test_tools.py). */
#include "kt.h"
#include "model/model.h"
#include "server/openai.h"
#include "tok/toolcall.h"
#include "tok/vocab.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

/* The tables are written with ' for " (no case needs an apostrophe) to stay readable. */
static char *unq(const char *s) {
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (!p) abort(); /* test harness: out of memory is not a test result */
    for (size_t i = 0; i <= n; i++) p[i] = s[i] == '\'' ? '"' : s[i];
    return p;
}

typedef struct {
    char *p;
    size_t n, cap;
} tbuf;

static void tput(tbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        if (!(b->p = realloc(b->p, b->cap))) abort();
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

#define MAX_CALLS 4

/* What a stream emitted, and whether its events came in a legal order. */
typedef struct {
    tbuf content, name[MAX_CALLS], args[MAX_CALLS];
    size_t n_calls, n_args_events;
    int open; /* between BEGIN and END */
    const char *bad; /* the first order violation, or NULL */
} collect;

static void on_event(void *user, kipp_toolcall_event ev, uint32_t index, const char *bytes,
                     size_t n) {
    collect *c = user;
    switch (ev) {
    case KIPP_TOOLCALL_CONTENT:
        if (c->open || n == 0) c->bad = c->bad ? c->bad : "content inside a call, or empty";
        tput(&c->content, bytes, n);
        break;
    case KIPP_TOOLCALL_BEGIN:
        if (c->open || index != c->n_calls || c->n_calls == MAX_CALLS) {
            c->bad = c->bad ? c->bad : "BEGIN out of order";
            return;
        }
        tput(&c->name[c->n_calls++], bytes, n);
        c->open = 1;
        break;
    case KIPP_TOOLCALL_ARGS:
        if (!c->open || index + 1 != c->n_calls || n == 0) {
            c->bad = c->bad ? c->bad : "ARGS outside its call, or empty";
            return;
        }
        tput(&c->args[index], bytes, n);
        c->n_args_events++;
        break;
    case KIPP_TOOLCALL_END:
        if (!c->open || index + 1 != c->n_calls || n != 0) c->bad = c->bad ? c->bad : "END out of order";
        c->open = 0;
        break;
    }
}

static void collect_free(collect *c) {
    free(c->content.p);
    for (size_t i = 0; i < MAX_CALLS; i++) free(c->name[i].p), free(c->args[i].p);
    memset(c, 0, sizeof *c);
}

/* A NULL-terminated list's length (0 for NULL: any name). */
static size_t n_of(const char *const *names) {
    size_t n = 0;
    while (names && names[n]) n++;
    return n;
}

/* Streams text cut at cuts[0..n_cuts) (ascending; repeats give empty chunks), with the
 * declared names (NULL-terminated; NULL: any). */
static void run_stream(const char *text, size_t len, const char *const *names, const size_t *cuts,
                       size_t n_cuts, collect *c) {
    memset(c, 0, sizeof *c);
    kipp_toolcall t;
    kipp_toolcall_init(&t, on_event, c);
    kipp_toolcall_set_names(&t, names, n_of(names));
    size_t at = 0;
    for (size_t k = 0; k <= n_cuts; k++) {
        size_t end = k < n_cuts ? cuts[k] : len;
        if (kipp_toolcall_feed(&t, text + at, end - at, NULL, 0) != KIPP_OK)
            c->bad = c->bad ? c->bad : "feed failed";
        at = end;
    }
    if (kipp_toolcall_finish(&t, NULL, 0) != KIPP_OK) c->bad = c->bad ? c->bad : "finish failed";
    if (c->open) c->bad = c->bad ? c->bad : "a call left open after finish";
    if (kipp_toolcall_n_calls(&t) != c->n_calls) c->bad = c->bad ? c->bad : "n_calls disagrees";
    kipp_toolcall_free(&t);
}

static int same_bytes(const char *a, size_t an, const char *b, size_t bn) {
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

/* The streamed result equals the one-shot one; prints the difference when not. */
static int stream_agrees(const char *text, const char *const *names, const kipp_toolcall_result *ref,
                         const size_t *cuts, size_t n_cuts) {
    collect c;
    run_stream(text, strlen(text), names, cuts, n_cuts, &c);
    int ok = !c.bad && same_bytes(c.content.p, c.content.n, ref->content, ref->content_len) &&
             c.n_calls == ref->n_calls;
    for (size_t i = 0; ok && i < c.n_calls; i++)
        ok = same_bytes(c.name[i].p, c.name[i].n, ref->calls[i].name, ref->calls[i].name_len) &&
             same_bytes(c.args[i].p, c.args[i].n, ref->calls[i].args, ref->calls[i].args_len);
    if (!ok) {
        fprintf(stderr, "  text \"%s\" cut at", text);
        for (size_t k = 0; k < n_cuts; k++) fprintf(stderr, " %zu", cuts[k]);
        fprintf(stderr, "\n  streamed content \"%s\", %zu calls%s%s", c.content.p ? c.content.p : "",
                c.n_calls, c.bad ? ", " : "", c.bad ? c.bad : "");
        for (size_t i = 0; i < c.n_calls; i++)
            fprintf(stderr, " [%s %s]", c.name[i].p ? c.name[i].p : "", c.args[i].p ? c.args[i].p : "");
        fprintf(stderr, "\n  one-shot content \"%s\", %zu calls", ref->content, ref->n_calls);
        for (size_t i = 0; i < ref->n_calls; i++)
            fprintf(stderr, " [%s %s]", ref->calls[i].name, ref->calls[i].args);
        fputc('\n', stderr);
    }
    collect_free(&c);
    return ok;
}

/* ---- cases ---------------------------------------------------------------------------------- */

typedef struct {
    const char *what, *text, *content;
    size_t n_calls;
    const char *call[MAX_CALLS][2]; /* name, arguments */
} tc_case;

static const char *const DECLARED[] = {"f", "get_weather", NULL};

#define TC "<tool_call>\n"
#define TE "\n</tool_call>"

static const tc_case cases[] = {
    {"single call", TC "{'name': 'get_weather', 'arguments': {'city': 'Paris'}}" TE, "", 1,
     {{"get_weather", "{'city': 'Paris'}"}}},
    {"several calls", TC "{'name': 'a', 'arguments': {'x': 1}}" TE "\n" TC
     "{'name': 'b', 'arguments': {}}" TE "\n" TC "{'name': 'c', 'arguments': {'y': [2]}}" TE "\n",
     "", 3, {{"a", "{'x': 1}"}, {"b", "{}"}, {"c", "{'y': [2]}"}}},
    {"content before the calls", "Let me check.\n\n" TC "{'name': 'f', 'arguments': {}}" TE,
     "Let me check.", 1, {{"f", "{}"}}},
    {"unicode", "Voil\xc3\xa0 \xf0\x9f\x91\x8d\n" TC
     "{'name': 'm\xc3\xa9t\xc3\xa9o', 'arguments': {'ville': 'Z\xc3\xbcrich \xe6\x9d\xb1\xe4\xba\xac "
     "\xf0\x9f\x8c\xa7'}}" TE,
     "Voil\xc3\xa0 \xf0\x9f\x91\x8d", 1,
     {{"m\xc3\xa9t\xc3\xa9o", "{'ville': 'Z\xc3\xbcrich \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x8c\xa7'}"}}},
    {"nested arguments, brackets and quotes inside strings",
     TC "{'name': 'f', 'arguments': {'a': {'b': [1, {'c': '}]'}]}, 'd': 'x\\'}y', 'e': '\\\\'}}" TE,
     "", 1, {{"f", "{'a': {'b': [1, {'c': '}]'}]}, 'd': 'x\\'}y', 'e': '\\\\'}"}}},
    {"arguments as a JSON string", TC "{'name': 'f', 'arguments': '{\\'x\\': 1}'}" TE, "", 1,
     {{"f", "{'x': 1}"}}},
    {"string arguments with escapes", TC "{'name': 'f', 'arguments': '{\\'k\\': \\'a\\\\nb\\u00e9\\ud83d\\ude00\\'}'}" TE,
     "", 1, {{"f", "{'k': 'a\\nb\xc3\xa9\xf0\x9f\x98\x80'}"}}},
    {"string arguments that are no object are no call", TC "{'name': 'f', 'arguments': 'a\\nb'}" TE,
     TC "{'name': 'f', 'arguments': 'a\\nb'}" TE, 0, {{0}}},
    {"arguments before name", TC "{'arguments': {'q': 'x y'}, 'name': 'search'}" TE, "", 1,
     {{"search", "{'q': 'x y'}"}}},
    {"another key first", TC "{'id': 1, 'name': 'f', 'arguments': {'a': [1, 'b']}}" TE, "", 1,
     {{"f", "{'a': [1, 'b']}"}}},
    {"array arguments, other order, are no call", TC "{'id': 1, 'name': 'f', 'arguments': [1]}" TE,
     TC "{'id': 1, 'name': 'f', 'arguments': [1]}" TE, 0, {{0}}},
    {"no arguments key", TC "{'name': 'now'}" TE, "", 1, {{"now", "{}"}}},
    {"string arguments, other order", TC "{'arguments': ' {}\\t', 'name': 'f'}" TE, "", 1,
     {{"f", " {}\t"}}},
    {"string arguments, other order, no object", TC "{'arguments': 'x', 'name': 'f'}" TE,
     TC "{'arguments': 'x', 'name': 'f'}" TE, 0, {{0}}},
    {"extra key after arguments", TC "{'name': 'f', 'arguments': {'x': 1}, 'id': 7}" TE, "", 1,
     {{"f", "{'x': 1}"}}},
    /* arguments that are no JSON object make no call: the block stays content */
    {"array arguments", TC "{'name': 'f', 'arguments': [1, 2]}" TE, TC "{'name': 'f', 'arguments': [1, 2]}" TE,
     0, {{0}}},
    {"number arguments", TC "{'name': 'f', 'arguments': 42}" TE, TC "{'name': 'f', 'arguments': 42}" TE, 0, {{0}}},
    {"null arguments", TC "{'name': 'f', 'arguments':null}" TE, TC "{'name': 'f', 'arguments':null}" TE, 0, {{0}}},
    {"invalid bare token", TC "{'name': 'f', 'arguments': tru}" TE, TC "{'name': 'f', 'arguments': tru}" TE, 0, {{0}}},
    {"invalid string escape", TC "{'name': 'f', 'arguments': '\\x'}" TE, TC "{'name': 'f', 'arguments': '\\x'}" TE,
     0, {{0}}},
    {"nothing after arguments", TC "{'name': 'f', 'arguments': }" TE, TC "{'name': 'f', 'arguments': }" TE, 0, {{0}}},
    {"mismatched brackets", TC "{'name': 'f', 'arguments': {'a': [1}}}" TE,
     TC "{'name': 'f', 'arguments': {'a': [1}}}" TE, 0, {{0}}},
    {"invalid JSON inside the arguments", TC "{'name': 'f', 'arguments': {'a': 1,}}" TE,
     TC "{'name': 'f', 'arguments': {'a': 1,}}" TE, 0, {{0}}},
    {"numbers of any size in the arguments", TC "{'name': 'f', 'arguments': {'a': 123456789012345678901234}}" TE,
     "", 1, {{"f", "{'a': 123456789012345678901234}"}}},
    {"compact", "<tool_call>{'name':'f','arguments':{'a':1}}</tool_call>", "", 1, {{"f", "{'a':1}"}}},
    {"every kind of whitespace",
     "<tool_call>\r\n {\r\n'name' :\t'f' ,\n'arguments' :\n{ }\n}\r\n</tool_call>", "", 1,
     {{"f", "{ }"}}},
    {"escaped name", TC "{'name': 'a\\u00e9\\/b', 'arguments': {}}" TE, "", 1, {{"a\xc3\xa9/b", "{}"}}},
    {"markup inside arguments", TC "{'name': 'f', 'arguments': {'h': '<b>x</b> </tool'}}" TE, "", 1,
     {{"f", "{'h': '<b>x</b> </tool'}"}}},
    {"text between and after calls",
     "A\n" TC "{'name': 'a', 'arguments': {}}" TE "\n\nmid text\n" TC "{'name': 'b', 'arguments': {}}" TE
     "\nDone.\n",
     "Amid textDone.", 2, {{"a", "{}"}, {"b", "{}"}}},
    {"whitespace kept inside content", "  hi\n there  ", "  hi\n there", 0, {{0}}},
    {"no calls", "Hello <tool world </tool_call> <tool_cal", "Hello <tool world </tool_call> <tool_cal",
     0, {{0}}},
    {"invalid JSON is content", "Sure.\n" TC "not json" TE "\nBye", "Sure.\n" TC "not json" TE "\nBye",
     0, {{0}}},
    {"invalid then valid", "X " TC "{oops" TE " " TC "{'name': 'f', 'arguments': {}}" TE,
     "X " TC "{oops" TE, 1, {{"f", "{}"}}},
    {"valid then invalid", TC "{'name': 'f', 'arguments': {}}" TE "\n" TC "[1]" TE "\n",
     TC "[1]" TE, 1, {{"f", "{}"}}},
    {"empty name is no call", TC "{'name': '', 'arguments': {}}" TE, TC "{'name': '', 'arguments': {}}" TE,
     0, {{0}}},
    {"name not a string", TC "{'arguments': {}, 'name': 3}" TE, TC "{'arguments': {}, 'name': 3}" TE,
     0, {{0}}},
    {"duplicate keys", TC "{'arguments': 1, 'name': 'a', 'name': 'b'}" TE,
     TC "{'arguments': 1, 'name': 'a', 'name': 'b'}" TE, 0, {{0}}},
    {"open tag inside a body", TC "<tool_call>{'name': 'f', 'arguments': {}}" TE,
     TC "<tool_call>{'name': 'f', 'arguments': {}}" TE, 0, {{0}}},
    /* </tool_call> inside a JSON string does not end the body */
    {"close tag inside an argument string",
     "<tool_call>{'name': 'f', 'arguments': {'s': 'a</tool_call>b'}}</tool_call> ok",
     "ok", 1, {{"f", "{'s': 'a</tool_call>b'}"}}},
    {"close tag inside an argument string, escaped quotes around it",
     TC "{'name': 'f', 'arguments': {'s': '\\'</tool_call>\\\\', 't': '\\\\'}}" TE,
     "", 1, {{"f", "{'s': '\\'</tool_call>\\\\', 't': '\\\\'}"}}},
    {"close tag inside a string, other order",
     TC "{'arguments': {'s': '</tool_call>'}, 'name': 'f'}" TE, "", 1, {{"f", "{'s': '</tool_call>'}"}}},
    {"close tag inside string arguments",
     TC "{'name': 'f', 'arguments': '{\\'s\\': \\'</tool_call>\\'}'}" TE, "", 1, {{"f", "{'s': '</tool_call>'}"}}},
    {"close tag after the arguments' last bracket, inside a string",
     TC "{'name': 'f', 'arguments': {}, 'x': '</tool_call>'}" TE, "", 1, {{"f", "{}"}}},
    {"a body that is no JSON ends at the first close tag", "<tool_call>say 'hi</tool_call> bye",
     "<tool_call>say 'hi</tool_call> bye", 0, {{0}}},
    {"an unclosed string runs to the end (dropped)", "A " TC "{'name': 'f</tool_call> tail", "A", 0, {{0}}},
    {"announced, body invalid after the value", TC "{'name': 'f', 'arguments': {'a': 1}" TE, "", 1,
     {{"f", "{'a': 1}"}}},
    /* cut short: a call only when its arguments closed before the end */
    {"cut short in the arguments (dropped)", "Hi " TC "{'name': 'f', 'arguments': {'a': [1, 2", "Hi", 0,
     {{0}}},
    {"cut short after the arguments closed", "Hi " TC "{'name': 'f', 'arguments': {'a': 2}", "Hi", 1,
     {{"f", "{'a': 2}"}}},
    {"cut short after a complete call, in the next", TC "{'name': 'f', 'arguments': {}}" TE "\n" TC
     "{'name': 'f', 'arguments': {'a' : 22000659210157", "", 1, {{"f", "{}"}}},
    {"cut short in a partial close tag", TC "{'name': 'f', 'arguments': {'a': 1}}\n</tool_", "", 1,
     {{"f", "{'a': 1}"}}},
    {"cut short in a string argument (dropped)", TC "{'name': 'f', 'arguments': '{", "", 0, {{0}}},
    {"cut short in a bare token (dropped)", TC "{'name': 'f', 'arguments': 12", "", 0, {{0}}},
    {"cut short before the announcement (dropped)", "Hi\n" TC "{'name': 'f", "Hi", 0, {{0}}},
    {"cut short after the body, other order", "<tool_call>{'arguments': {}, 'name': 'g'}\n", "", 1,
     {{"g", "{}"}}},
    {"cut short in a partial open tag", "Hi <tool_ca", "Hi <tool_ca", 0, {{0}}},
    {"cut short right after the open tag (dropped)", "Hi\n<tool_call>\n", "Hi", 0, {{0}}},
    {"an invalid closed call stays content", "Hi " TC "{'nam': 1}</tool_call>", "Hi " TC "{'nam': 1}</tool_call>", 0, {{0}}},
    /* declared names: a call to another function is no call */
    {"empty text", "", "", 0, {{0}}},
};

/* Cases with the declared names "f" and "get_weather": a call to another function is no call. */
static const tc_case declared_cases[] = {
    {"close tag inside the name", TC "{'name': 'f</tool_call>', 'arguments': {}}" TE " x",
     TC "{'name': 'f</tool_call>', 'arguments': {}}" TE " x", 0, {{0}}},
    {"a declared name", TC "{'name': 'get_weather', 'arguments': {}}" TE, "", 1, {{"get_weather", "{}"}}},
    {"an undeclared name stays content", "X " TC "{'name': 'rm_rf', 'arguments': {'p': '/'}}" TE " Y",
     "X " TC "{'name': 'rm_rf', 'arguments': {'p': '/'}}" TE " Y", 0, {{0}}},
    {"an undeclared name, other order", TC "{'arguments': {}, 'name': 'g'}" TE,
     TC "{'arguments': {}, 'name': 'g'}" TE, 0, {{0}}},
    {"a name that only starts like a declared one", TC "{'name': 'ff', 'arguments': {}}" TE,
     TC "{'name': 'ff', 'arguments': {}}" TE, 0, {{0}}},
    {"an undeclared call cut short is dropped", "Hi " TC "{'name': 'rm_rf', 'arguments': {}}", "Hi", 0, {{0}}},
    {"undeclared between declared", TC "{'name': 'f', 'arguments': {}}" TE "\n" TC
     "{'name': 'x', 'arguments': {}}" TE "\n" TC "{'name': 'f', 'arguments': {'b': 1}}" TE,
     TC "{'name': 'x', 'arguments': {}}" TE, 2, {{"f", "{}"}, {"f", "{'b': 1}"}}},
    {"escaped declared name", TC "{'name': '\\u0066', 'arguments': {}}" TE, "", 1, {{"f", "{}"}}},
};

static void run_cases(const tc_case *table, size_t n_cases, const char *const *names) {
    for (size_t i = 0; i < n_cases; i++) {
        const tc_case *k = &table[i];
        char *text = unq(k->text), *content = unq(k->content);
        const size_t len = strlen(text);
        kipp_toolcall_result r;
        char err[KIPP_ERR_LEN];
        KT_CHECK(kipp_toolcall_parse(text, len, names, n_of(names), &r, err, sizeof err) == KIPP_OK,
                 "%s: %s", k->what, err);
        int ok = same_bytes(r.content, r.content_len, content, strlen(content)) && r.n_calls == k->n_calls &&
                 r.content[r.content_len] == 0;
        for (size_t j = 0; ok && j < r.n_calls; j++) {
            char *args = unq(k->call[j][1]);
            ok = strcmp(r.calls[j].name, k->call[j][0]) == 0 &&
                 same_bytes(r.calls[j].args, r.calls[j].args_len, args, strlen(args));
            free(args);
        }
        KT_CHECK(ok, "one-shot: %s: content \"%s\", %zu calls%s%s%s%s", k->what, r.content,
                 r.n_calls, r.n_calls ? ", first " : "", r.n_calls ? r.calls[0].name : "",
                 r.n_calls ? " " : "", r.n_calls ? r.calls[0].args : "");
        /* the invariant: every chunking streams the one-shot result */
        ok = stream_agrees(text, names, &r, NULL, 0);
        for (size_t a = 0; ok && a <= len; a++)
            for (size_t b = a; ok && b <= len; b++) {
                const size_t cuts[2] = {a, b};
                ok = stream_agrees(text, names, &r, cuts, 2);
            }
        if (ok && len) {
            size_t *cuts = malloc(len * sizeof *cuts);
            if (!cuts) abort();
            for (size_t a = 0; a < len; a++) cuts[a] = a + 1;
            ok = stream_agrees(text, names, &r, cuts, len - 1); /* byte by byte */
            free(cuts);
        }
        KT_CHECK(ok, "streaming disagrees with the one-shot split: %s", k->what);
        kipp_toolcall_result_free(&r);
        free(text);
        free(content);
    }
}

static void test_oneshot_and_streaming(void) {
    run_cases(cases, sizeof cases / sizeof cases[0], NULL);
    run_cases(declared_cases, sizeof declared_cases / sizeof declared_cases[0], DECLARED);
}

/* Random texts from fragments that make and break calls, tags and JSON: the one-shot split
 * has no expectation here, but streaming must agree with it at random chunkings and byte
 * by byte, and the one-shot content must never hold a tag that a valid call used. */
static void test_random_texts(void) {
    static const char *const frag[] = {
        "<tool_call>", "</tool_call>", "<tool_", "</tool", "<", "\n", " ", "\t", "x", "\xc3\xa9",
        "{", "}", "[", "]", "'", "\\", ",", ":", "{'name': 'f', 'arguments': ", "{'name':'g',",
        "'arguments':", "'name'", "'f'", "{'arguments': {}, 'name': 'h'}", "{'a': 1}", "12", "null",
        "'s\\'q'", "\xff", "'\\u00e9'", "'\\'}'", "'}]'", "{'k': [", "'</tool_call>'", "'{}'",
        "{'name': 'g', 'arguments': ", "'a</tool_call",
    };
    /* half the texts open an announced call, so the fragments land in streamed arguments */
    static const char *const start[] = {"", "<tool_call>{'name': 'f', 'arguments': "};
    const size_t n_frag = sizeof frag / sizeof frag[0];
    uint64_t rng = 0x243f6a8885a308d3ull;
#define NEXT() (rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17, rng)
    int ok = 1;
    for (int iter = 0; iter < 5000 && ok; iter++) {
        tbuf b = {0};
        char *st = unq(start[NEXT() % 2]);
        tput(&b, st, strlen(st));
        free(st);
        const size_t n = 1 + NEXT() % 24;
        for (size_t k = 0; k < n; k++) {
            char *f = unq(frag[NEXT() % n_frag]);
            tput(&b, f, strlen(f));
            free(f);
        }
        /* every other text declares only "f" and "get_weather" ('g' and 'h' are undeclared) */
        const char *const *names = iter % 2 ? DECLARED : NULL;
        kipp_toolcall_result r;
        if (kipp_toolcall_parse(b.p, b.n, names, n_of(names), &r, NULL, 0) != KIPP_OK) abort();
        for (size_t i = 0; i < r.n_calls; i++) { /* every call's arguments are a JSON object */
            json_t *a = json_loadb(r.calls[i].args, r.calls[i].args_len,
                                   JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, NULL);
            if (!json_is_object(a)) {
                fprintf(stderr, "  arguments that are no JSON object: \"%s\"\n", r.calls[i].args);
                ok = 0;
            }
            json_decref(a);
        }
        size_t cuts[4];
        for (int k = 0; k < 4; k++) cuts[k] = NEXT() % (b.n + 1);
        for (int i = 1; i < 4; i++) /* ascending */
            for (int j = i; j > 0 && cuts[j] < cuts[j - 1]; j--) {
                size_t t = cuts[j];
                cuts[j] = cuts[j - 1], cuts[j - 1] = t;
            }
        ok = ok && stream_agrees(b.p, names, &r, cuts, 4);
        if (ok && b.n) {
            size_t *all = malloc(b.n * sizeof *all);
            if (!all) abort();
            for (size_t a = 0; a < b.n; a++) all[a] = a + 1;
            ok = stream_agrees(b.p, names, &r, all, b.n - 1);
            free(all);
        }
        kipp_toolcall_result_free(&r);
        free(b.p);
    }
#undef NEXT
    KT_CHECK(ok, "streaming disagrees with the one-shot split on a random text");
}

/* Streaming decides early: the name as soon as "arguments": is read, object arguments byte
 * by byte, content up to a possible tag — and never a byte of a tag. */
static void test_streaming_timing(void) {
    collect c;
    memset(&c, 0, sizeof c);
    kipp_toolcall t;
    char err[KIPP_ERR_LEN];
    kipp_toolcall_init(&t, on_event, &c);
    char *s = unq("I will call it. <tool_c");
    kipp_toolcall_feed(&t, s, strlen(s), err, sizeof err);
    free(s);
    KT_CHECK(same_bytes(c.content.p, c.content.n, "I will call it.", 15), "content \"%s\"",
             c.content.p ? c.content.p : "");
    s = unq("all>\n{'name': 'lookup', 'argu");
    kipp_toolcall_feed(&t, s, strlen(s), err, sizeof err);
    free(s);
    KT_CHECK(c.n_calls == 0 && c.content.n == 15, "no call before its prefix is complete");
    s = unq("ments': {'q': 'a}");
    kipp_toolcall_feed(&t, s, strlen(s), err, sizeof err);
    free(s);
    KT_CHECK(c.n_calls == 0 && c.content.n == 15, "no call before its arguments close");
    s = unq("'}}\n</tool_");
    kipp_toolcall_feed(&t, s, strlen(s), err, sizeof err);
    free(s);
    char *want = unq("{'q': 'a}'}");
    KT_CHECK(c.n_calls == 1 && !c.open && strcmp(c.name[0].p, "lookup") == 0 && c.args[0].p &&
                 strcmp(c.args[0].p, want) == 0 && c.n_args_events == 1,
             "the call comes whole when its arguments close, before </tool_call>: \"%s\"",
             c.args[0].p ? c.args[0].p : "");
    free(want);
    kipp_toolcall_feed(&t, "call>\n\n", 7, err, sizeof err);
    KT_CHECK(!c.open && c.n_calls == 1 && c.content.n == 15, "nothing more at </tool_call>");
    KT_CHECK(kipp_toolcall_finish(&t, err, sizeof err) == KIPP_OK);
    KT_CHECK(kipp_toolcall_feed(&t, "x", 1, err, sizeof err) == KIPP_ERR_INVALID_ARG &&
             strstr(err, "after finish"), "feed after finish: %s", err);
    KT_CHECK(kipp_toolcall_finish(&t, err, sizeof err) == KIPP_ERR_INVALID_ARG);
    KT_CHECK(!c.bad, "%s", c.bad);
    kipp_toolcall_free(&t);
    kipp_toolcall_free(&t); /* freeing twice is harmless */
    kipp_toolcall_free(NULL);
    collect_free(&c);

    /* a body in another order is held whole: nothing before </tool_call> */
    memset(&c, 0, sizeof c);
    kipp_toolcall_init(&t, on_event, &c);
    s = unq(TC "{'arguments': {'a': 1}, 'name': 'f'}\n");
    kipp_toolcall_feed(&t, s, strlen(s), err, sizeof err);
    free(s);
    KT_CHECK(c.n_calls == 0 && c.content.n == 0, "another order waits for the end");
    kipp_toolcall_feed(&t, "</tool_call>", 12, err, sizeof err);
    KT_CHECK(c.n_calls == 1 && !c.open && c.n_args_events == 1, "then comes whole");
    kipp_toolcall_finish(&t, err, sizeof err);
    kipp_toolcall_free(&t);
    collect_free(&c);

    /* long arguments are held until they close (a call is never withdrawn), and a close
     * tag inside one of their strings does not end the call */
    memset(&c, 0, sizeof c);
    kipp_toolcall_init(&t, on_event, &c);
    s = unq(TC "{'name': 'f', 'arguments': {'k': '</tool_call>");
    kipp_toolcall_feed(&t, s, strlen(s), err, sizeof err);
    free(s);
    for (int i = 0; i < 1000; i++) kipp_toolcall_feed(&t, "abc", 3, err, sizeof err);
    KT_CHECK(c.n_calls == 0 && c.content.n == 0, "nothing before the arguments close");
    s = unq("'}}" TE);
    kipp_toolcall_feed(&t, s, strlen(s), err, sizeof err);
    free(s);
    KT_CHECK(c.n_calls == 1 && c.args[0].n == 7 + 12 + 3000 + 2 && c.n_args_events == 1 && c.content.n == 0,
             "%zu calls, %zu bytes in %zu events, %zu content bytes", c.n_calls, c.args[0].n,
             c.n_args_events, c.content.n);
    kipp_toolcall_finish(&t, err, sizeof err);
    KT_CHECK(!c.open && !c.bad);
    kipp_toolcall_free(&t);
    collect_free(&c);

    /* cut short inside the arguments: nothing at all, at any point */
    memset(&c, 0, sizeof c);
    kipp_toolcall_init(&t, on_event, &c);
    s = unq(TC "{'name': 'f', 'arguments': {'a': 2200065921015766, 'b':");
    kipp_toolcall_feed(&t, s, strlen(s), err, sizeof err);
    free(s);
    kipp_toolcall_finish(&t, err, sizeof err);
    KT_CHECK(c.n_calls == 0 && c.content.n == 0 && !c.bad, "%zu calls, content \"%s\"", c.n_calls,
             c.content.p ? c.content.p : "");
    kipp_toolcall_free(&t);
    collect_free(&c);

    kipp_toolcall_result_free(NULL);
}

/* ---- the server's text path ---------------------------------------------------------------- */

/* Ids 0..255: single bytes. Then the added tokens the split cares about: */
enum { T_CALL = 256, T_CALL_END, T_THINK, T_THINK_END, N_TV };

static kipp_vocab *tool_vocab(void) {
    static char bytes[256][2];
    const char *tok[N_TV];
    size_t len[N_TV];
    int32_t type[N_TV];
    for (unsigned b = 0; b < 256; b++) {
        len[b] = kt_byte_token_text(b, bytes[b]);
        tok[b] = bytes[b];
        type[b] = KIPP_TOKEN_NORMAL;
    }
    tok[T_CALL] = "<tool_call>", tok[T_CALL_END] = "</tool_call>";
    tok[T_THINK] = "<think>", tok[T_THINK_END] = "</think>";
    for (int i = T_CALL; i < N_TV; i++) {
        len[i] = strlen(tok[i]);
        type[i] = KIPP_TOKEN_USER_DEFINED; /* added, not special: detokenized as text */
    }
    kipp_vocab *v = NULL;
    char err[KIPP_ERR_LEN] = "";
    KT_CHECK(kipp_vocab_init(tok, len, type, N_TV, NULL, NULL, 0, &v, err, sizeof err) == KIPP_OK,
             "%s", err);
    return v;
}

/* text as ids: each tag one token, every other byte its byte token (so characters arrive
 * in fragments, as a model's byte fallback makes them) */
static size_t text_ids(const char *text, int32_t *ids) {
    static const struct {
        const char *s;
        int32_t id;
    } tags[] = {{"<tool_call>", T_CALL}, {"</tool_call>", T_CALL_END}, {"<think>", T_THINK},
                {"</think>", T_THINK_END}};
    size_t n = 0;
    for (const char *p = text; *p;) {
        size_t k = 0;
        while (k < 4 && strncmp(p, tags[k].s, strlen(tags[k].s))) k++;
        if (k < 4) {
            ids[n++] = tags[k].id;
            p += strlen(tags[k].s);
        } else {
            ids[n++] = (unsigned char)*p++;
        }
    }
    return n;
}

static const char *jstr(json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

/* Pushes text's tokens through oai_gen (tools on), whole or streamed as http.c does. */
static const char tool_reply[] =
    "<think>\nhmm\n</think>\n\nChecking.\n<tool_call>\n{'name': 'get_weather', 'arguments': "
    "{'city': 'Z\xc3\xbcrich', 'days': [1, 2]}}\n</tool_call>\n<tool_call>\n{'arguments': {}, "
    "'name': 'now'}\n</tool_call>\n";

static void test_server_response(kipp_model *m) {
    char *text = unq(tool_reply), *want_args = unq("{'city': 'Z\xc3\xbcrich', 'days': [1, 2]}");
    int32_t ids[512];
    const size_t n = text_ids(text, ids);
    oai_request rq;
    memset(&rq, 0, sizeof rq);
    rq.ep = OAI_CHAT;
    rq.tool_parse = 1;
    oai_meta meta = {.id = "chatcmpl-1", .model = "m", .created = 1, .finish_reason = "tool_calls"};
    char first_id[2][32] = {"", ""};
    for (int run = 0; run < 2; run++) { /* twice: ids must differ between responses */
        oai_gen g;
        KT_CHECK(oai_gen_init(&g, m, &rq) == 0);
        for (size_t i = 0; i < n; i++) {
            kipp_gen_token t;
            memset(&t, 0, sizeof t);
            t.id = ids[i];
            oai_gen_push(&g, &t);
        }
        oai_gen_finish(&g);
        oai_gen *gp = &g;
        kipp_req *rq0 = NULL;
        char *js = oai_response_json(&gp, &rq0, &meta.finish_reason, 1, &meta);
        json_error_t je;
        json_t *o = js ? json_loads(js, 0, &je) : NULL;
        json_t *msg = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
        json_t *calls = json_object_get(msg, "tool_calls");
        KT_CHECK(jstr(msg, "content") && strcmp(jstr(msg, "content"), "Checking.") == 0 &&
                     jstr(msg, "reasoning_content") && strcmp(jstr(msg, "reasoning_content"), "hmm") == 0 &&
                     json_array_size(calls) == 2,
                 "response %s", js ? js : "(null)");
        json_t *c0 = json_array_get(calls, 0), *c1 = json_array_get(calls, 1);
        json_t *f0 = json_object_get(c0, "function"), *f1 = json_object_get(c1, "function");
        KT_CHECK(jstr(c0, "type") && !strcmp(jstr(c0, "type"), "function") && jstr(f0, "name") &&
                     !strcmp(jstr(f0, "name"), "get_weather") && jstr(f0, "arguments") &&
                     !strcmp(jstr(f0, "arguments"), want_args) && jstr(f1, "name") &&
                     !strcmp(jstr(f1, "name"), "now") && jstr(f1, "arguments") &&
                     !strcmp(jstr(f1, "arguments"), "{}"),
                 "tool_calls %s", js ? js : "(null)");
        const char *id0 = jstr(c0, "id"), *id1 = jstr(c1, "id");
        KT_CHECK(id0 && id1 && !strncmp(id0, "call_", 5) && strlen(id0) == 21 && strcmp(id0, id1),
                 "ids %s %s", id0 ? id0 : "-", id1 ? id1 : "-");
        snprintf(first_id[run], sizeof first_id[run], "%s", id0 ? id0 : "");
        json_decref(o);
        free(js);
        oai_gen_free(&g);
    }
    KT_CHECK(strcmp(first_id[0], first_id[1]) != 0, "two responses gave the call id %s", first_id[0]);

    /* only calls: content is null; without tool parsing the same text is all content */
    char *only = unq("<tool_call>{'name': 'f', 'arguments': {}}</tool_call>");
    const size_t n_only = text_ids(only, ids);
    for (int parse = 1; parse >= 0; parse--) {
        rq.tool_parse = parse;
        oai_gen g;
        KT_CHECK(oai_gen_init(&g, m, &rq) == 0);
        for (size_t i = 0; i < n_only; i++) {
            kipp_gen_token t;
            memset(&t, 0, sizeof t);
            t.id = ids[i];
            oai_gen_push(&g, &t);
        }
        oai_gen_finish(&g);
        oai_gen *gp = &g;
        kipp_req *rq0 = NULL;
        char *js = oai_response_json(&gp, &rq0, &meta.finish_reason, 1, &meta);
        json_t *o = js ? json_loads(js, 0, NULL) : NULL;
        json_t *msg = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
        if (parse)
            KT_CHECK(json_is_null(json_object_get(msg, "content")) &&
                         json_array_size(json_object_get(msg, "tool_calls")) == 1, "%s", js);
        else
            KT_CHECK(jstr(msg, "content") && !strcmp(jstr(msg, "content"), only) &&
                         !json_object_get(msg, "tool_calls"), "%s", js);
        json_decref(o);
        free(js);
        oai_gen_free(&g);
    }
    free(only);

    /* the request's tools are the declared names: a call to another function stays text */
    char *names[2] = {"get_weather", "now"};
    rq.tool_parse = 1;
    rq.tool_names = names;
    rq.n_tool_names = 2;
    char *undeclared = unq("<tool_call>{'name': 'rm_rf', 'arguments': {}}</tool_call>"
                           "<tool_call>{'name': 'now', 'arguments': {}}</tool_call>");
    const size_t n_und = text_ids(undeclared, ids);
    oai_gen g;
    KT_CHECK(oai_gen_init(&g, m, &rq) == 0);
    for (size_t i = 0; i < n_und; i++) {
        kipp_gen_token t;
        memset(&t, 0, sizeof t);
        t.id = ids[i];
        oai_gen_push(&g, &t);
    }
    oai_gen_finish(&g);
    oai_gen *gp = &g;
    kipp_req *rq0 = NULL;
    char *js = oai_response_json(&gp, &rq0, &meta.finish_reason, 1, &meta);
    json_t *o = js ? json_loads(js, 0, NULL) : NULL;
    json_t *msg = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    json_t *calls = json_object_get(msg, "tool_calls");
    char *want = unq("<tool_call>{'name': 'rm_rf', 'arguments': {}}</tool_call>");
    KT_CHECK(g.n_calls == 1 && json_array_size(calls) == 1 &&
                 !strcmp(jstr(json_object_get(json_array_get(calls, 0), "function"), "name"), "now") &&
                 jstr(msg, "content") && !strcmp(jstr(msg, "content"), want),
             "undeclared: %s", js ? js : "(null)");
    free(want);
    json_decref(o);
    free(js);
    oai_gen_free(&g);
    free(undeclared);
    free(text);
    free(want_args);
}

/* The SSE chunks http.c makes after each token: the content chunk, then the tool deltas. */
static void test_server_stream(kipp_model *m) {
    char *text = unq(tool_reply), *want_args = unq("{'city': 'Z\xc3\xbcrich', 'days': [1, 2]}");
    int32_t ids[512];
    const size_t n = text_ids(text, ids);
    size_t first_close = 0;
    while (ids[first_close] != T_CALL_END) first_close++;
    oai_request rq;
    memset(&rq, 0, sizeof rq);
    rq.ep = OAI_CHAT;
    rq.tool_parse = 1;
    oai_meta meta = {.id = "chatcmpl-2", .model = "m", .created = 1};
    oai_gen g;
    KT_CHECK(oai_gen_init(&g, m, &rq) == 0);
    tbuf content = {0}, args[2] = {{0}, {0}};
    char name[2][32] = {"", ""};
    int n_heads = 0, bad = 0;
    size_t head_at[2] = {0, 0}, n_arg_deltas[2] = {0, 0};
    for (size_t i = 0; i <= n; i++) {
        if (i < n) {
            kipp_gen_token t;
            memset(&t, 0, sizeof t);
            t.id = ids[i];
            oai_gen_push(&g, &t);
        } else {
            oai_gen_finish(&g);
        }
        json_t *chunks[64];
        size_t n_chunks = 0;
        if (g.content.len || g.reasoning.len || i == 0) {
            char *js = oai_chunk_json(&g, &meta, NULL, 0, 0, i == 0);
            chunks[n_chunks++] = json_loads(js ? js : "", 0, NULL);
            free(js);
        }
        for (char *js; n_chunks < 64 && (js = oai_tool_chunk_json(&g, &meta));) {
            chunks[n_chunks++] = json_loads(js, 0, NULL);
            free(js);
        }
        for (size_t k = 0; k < n_chunks; k++) {
            json_t *ch = json_array_get(json_object_get(chunks[k], "choices"), 0);
            json_t *d = json_object_get(ch, "delta");
            if (!d || !json_is_null(json_object_get(ch, "finish_reason"))) bad = 1;
            if (jstr(d, "content")) tput(&content, jstr(d, "content"), strlen(jstr(d, "content")));
            json_t *tcs = json_object_get(d, "tool_calls");
            if (!tcs) continue;
            json_t *tc = json_array_get(tcs, 0), *fn = json_object_get(tc, "function");
            const json_int_t idx = json_integer_value(json_object_get(tc, "index"));
            if (json_array_size(tcs) != 1 || idx < 0 || idx > 1 || !jstr(fn, "arguments")) {
                bad = 1;
                continue;
            }
            if (jstr(tc, "id")) { /* a call's first delta: id, type, name, no arguments */
                if (idx != n_heads || strncmp(jstr(tc, "id"), "call_", 5) || !jstr(tc, "type") ||
                    strcmp(jstr(tc, "type"), "function") || !jstr(fn, "name") || *jstr(fn, "arguments"))
                    bad = 1;
                else
                    snprintf(name[n_heads], sizeof name[0], "%s", jstr(fn, "name"));
                head_at[n_heads++] = i;
            } else if (idx >= n_heads || jstr(fn, "name") || !*jstr(fn, "arguments")) {
                bad = 1; /* arguments before the head, or an empty piece */
            } else {
                tput(&args[idx], jstr(fn, "arguments"), strlen(jstr(fn, "arguments")));
                n_arg_deltas[idx]++;
            }
        }
        for (size_t k = 0; k < n_chunks; k++) json_decref(chunks[k]);
    }
    KT_CHECK(!bad, "a malformed or misplaced delta");
    KT_CHECK(n_heads == 2 && !strcmp(name[0], "get_weather") && !strcmp(name[1], "now"),
             "%d calls: %s %s", n_heads, name[0], name[1]);
    KT_CHECK(content.p && !strcmp(content.p, "Checking."), "content %s", content.p ? content.p : "");
    KT_CHECK(args[0].p && !strcmp(args[0].p, want_args) && args[1].p && !strcmp(args[1].p, "{}"),
             "arguments %s / %s", args[0].p ? args[0].p : "", args[1].p ? args[1].p : "");
    /* the first call comes whole when its arguments close, before its </tool_call>; the
     * second (another key order) whole after its own */
    KT_CHECK(head_at[0] < first_close && n_arg_deltas[0] == 1 && n_arg_deltas[1] == 1,
             "head at token %zu (close at %zu), %zu and %zu argument deltas", head_at[0],
             first_close, n_arg_deltas[0], n_arg_deltas[1]);
    meta.finish_reason = "tool_calls"; /* http.c's final chunk: nothing left to send */
    KT_CHECK(oai_tool_chunk_json(&g, &meta) == NULL);
    oai_gen_free(&g);
    free(content.p);
    free(args[0].p);
    free(args[1].p);
    free(text);
    free(want_args);
}

/* tool_choice "none": the <tool_call> token is banned, over what the client asked for it */
static void test_ban(kipp_model *m) {
    oai_request rq;
    memset(&rq, 0, sizeof rq);
    rq.bias = malloc(3 * sizeof *rq.bias);
    if (!rq.bias) abort();
    rq.bias[0] = (kipp_logit_bias){T_CALL, 100.0f};
    rq.bias[1] = (kipp_logit_bias){7, 1.0f};
    rq.bias[2] = (kipp_logit_bias){T_CALL, 5.0f}; /* "256" and "0256": the sampler adds them */
    rq.sp.logit_bias = rq.bias;
    rq.sp.n_logit_bias = 3;
    KT_CHECK(oai_apply_tool_choice(&rq, m) == 0 && rq.sp.n_logit_bias == 3 &&
             rq.bias[0].bias == 100.0f, "no ban without tool_choice none");
    rq.tool_choice_none = 1;
    KT_CHECK(oai_apply_tool_choice(&rq, m) == 0);
    KT_CHECK(rq.sp.n_logit_bias == 3 && rq.sp.logit_bias == rq.bias &&
                 rq.bias[0].bias + rq.bias[2].bias == OAI_BAN_BIAS && rq.bias[1].bias == 1.0f,
             "the client's biases for the token are overridden: %g %g", rq.bias[0].bias, rq.bias[2].bias);
    KT_CHECK(oai_request_ban_token(&rq, 9) == 0 && rq.sp.n_logit_bias == 4 &&
             rq.sp.logit_bias == rq.bias && rq.bias[3].id == 9 && rq.bias[3].bias == OAI_BAN_BIAS);
    free(rq.bias);
    memset(&rq, 0, sizeof rq); /* no logit_bias given: one entry is added */
    rq.tool_choice_none = 1;
    KT_CHECK(oai_apply_tool_choice(&rq, m) == 0 && rq.sp.n_logit_bias == 1 &&
             rq.sp.logit_bias == rq.bias && rq.bias[0].id == T_CALL);
    free(rq.bias);
}

static void test_server_path(void) {
    kipp_model m;
    memset(&m, 0, sizeof m); /* the text path only uses the vocabulary */
    m.vocab = tool_vocab();
    if (!m.vocab) return;
    test_server_response(&m);
    test_server_stream(&m);
    test_ban(&m);
    kipp_vocab_free(m.vocab);
}

void kt_suite_toolcall(void) {
    test_oneshot_and_streaming();
    test_random_texts();
    test_streaming_timing();
    test_server_path();
}
