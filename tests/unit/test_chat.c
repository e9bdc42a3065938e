/* test_chat.c — unit suites for the chat renderer (src/tok/chat.c), its Python-compatible
 * JSON writer (src/tok/pyjson.c) and the streaming reasoning split (src/tok/reasoning.c),
 * plus kt_chat_golden(), which renders every case in tests/tok/chat_golden/ (made by HF
 * transformers, see tests/tok/make_chat_golden.py) and compares byte for byte.
 * Not here: tokenizing the rendered text (the tokenizer suites do that). */
#include "gguf/gguf.h"
#include "kt.h"
#include "tok/chat.h"
#include "tok/pyjson.h"
#include "tok/reasoning.h"

#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *p = malloc(cap);
    for (size_t got; p && (got = fread(p + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            char *q = realloc(p, cap *= 2);
            if (!q) free(p);
            p = q;
        }
    }
    fclose(f);
    if (p) p[n] = '\0';
    *len = n;
    return p;
}

/* Renders a request written with ' for " (the test requests hold no apostrophes), so the
 * tables below stay readable. Returns the status; *out the text, err the message. */
static kipp_status render(kipp_chat_template_kind kind, const char *req_q, char **out,
                          size_t *len, char *err) {
    size_t n = strlen(req_q);
    char *req = malloc(n + 1);
    if (!req) abort(); /* test harness: out of memory is not a test result */
    for (size_t i = 0; i <= n; i++) req[i] = req_q[i] == '\'' ? '"' : req_q[i];
    kipp_status st = kipp_chat_render_json(kind, req, n, out, len, err, KIPP_ERR_LEN);
    free(req);
    return st;
}

static int render_is(kipp_chat_template_kind kind, const char *req_q, const char *want) {
    char err[KIPP_ERR_LEN] = "", *out = NULL;
    size_t len = 0;
    kipp_status st = render(kind, req_q, &out, &len, err);
    int ok = st == KIPP_OK && len == strlen(want) && memcmp(out, want, len) == 0;
    if (!ok)
        fprintf(stderr, "  request %s\n  got (%d %s) \"%s\"\n  want \"%s\"\n", req_q, (int)st,
                err, out ? out : "", want);
    free(out);
    return ok;
}

/* ---- pyjson ------------------------------------------------------------------------------- */

static void test_float_repr(void) {
    static const struct {
        uint64_t bits;
        const char *want; /* Python json.dumps(float) */
    } cases[] = {
        {0x3ff0000000000000ull, "1.0"},
        {0x3fb999999999999aull, "0.1"},
        {0x3fd3333333333334ull, "0.30000000000000004"},
        {0x8000000000000000ull, "-0.0"},
        {0x0000000000000000ull, "0.0"},
        {0x3f1a36e2eb1c432dull, "0.0001"},
        {0x3ee4f8b588e368f1ull, "1e-05"},
        {0x4341c37937e08000ull, "1e+16"},
        {0x430c6bf526340000ull, "1000000000000000.0"},
        {0x4415af1d78b58c40ull, "1e+20"},
        {0x0000000000000001ull, "5e-324"},
        {0x7fefffffffffffffull, "1.7976931348623157e+308"},
        {0x0010000000000000ull, "2.2250738585072014e-308"},
        {0xc0fe240c9fbe76c9ull, "-123456.789"},
        {0x7ff0000000000000ull, "Infinity"},
        {0xfff0000000000000ull, "-Infinity"},
        {0x7ff8000000000000ull, "NaN"},
        /* powers of two whose nearest 16-digit decimal misses but a neighbour hits */
        {0x0060000000000000ull, "7.120236347223045e-307"},
        {0x0100000000000000ull, "7.291122019556398e-304"},
        {0x13e0000000000000ull, "5.940911144672375e-213"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double x;
        memcpy(&x, &cases[i].bits, sizeof x);
        char buf[32];
        size_t n = kipp_pyjson_float_repr(x, buf);
        KT_CHECK(n == strlen(buf) && strcmp(buf, cases[i].want) == 0, "%016llx: got %s want %s",
                 (unsigned long long)cases[i].bits, buf, cases[i].want);
    }
}

static void dump_is(const char *json, size_t flags, const char *want) {
    json_error_t jerr;
    json_t *v = json_loads(json, flags | JSON_DECODE_ANY, &jerr);
    kipp_buf b = {0};
    char err[KIPP_ERR_LEN] = "";
    kipp_status st = v ? kipp_pyjson_dump(v, &b, err, sizeof err) : KIPP_ERR_FORMAT;
    KT_CHECK(st == KIPP_OK && b.len == strlen(want) && memcmp(b.data, want, b.len) == 0,
             "dump %s: got \"%s\" want \"%s\" (%s)", json, b.data ? b.data : "", want, err);
    kipp_buf_free(&b);
    json_decref(v);
}

static void test_pyjson(void) {
    test_float_repr();
    dump_is("{\"b\":1,\"a\":[true,false,null],\"c\":{}}", 0,
            "{\"b\": 1, \"a\": [true, false, null], \"c\": {}}");
    dump_is("[]", 0, "[]");
    dump_is("[-0, -7, 9007199254740993, 2.50, 1E2, -0.0]", 0,
            "[0, -7, 9007199254740993, 2.5, 100.0, -0.0]");
    dump_is("\"q\\\" b\\\\ s/ \\b\\f\\n\\r\\t \\u0001\\u001f \\u007f \\u00e9 \\u2028 "
            "\\ud83d\\ude00\"", 0,
            "\"q\\\" b\\\\ s/ \\b\\f\\n\\r\\t \\u0001\\u001f \x7f \xc3\xa9 \xe2\x80\xa8 "
            "\xf0\x9f\x98\x80\"");
    dump_is("{\"\\u00fc\\n\": \"x\", \"\": 0}", 0, "{\"\xc3\xbc\\n\": \"x\", \"\": 0}");
    /* a NUL inside a string (jansson needs JSON_ALLOW_NUL) is escaped, not a terminator */
    dump_is("\"a\\u0000b\"", JSON_ALLOW_NUL, "\"a\\u0000b\"");
    dump_is("{\"k\": 1, \"k\": 2}", 0, "{\"k\": 2}"); /* last value wins, as in Python */

    /* nesting beyond the limit is refused, not a stack overflow */
    json_t *deep = json_array(), *cur = deep;
    for (int i = 0; i < KIPP_PYJSON_MAX_DEPTH + 5; i++) {
        json_t *next = json_array();
        json_array_append_new(cur, next);
        cur = next;
    }
    kipp_buf b = {0};
    char err[KIPP_ERR_LEN] = "";
    KT_CHECK(kipp_pyjson_dump(deep, &b, err, sizeof err) == KIPP_ERR_INVALID_ARG &&
                 strstr(err, "nested"), "%s", err);
    kipp_buf_free(&b);
    json_decref(deep);

    size_t n = 99;
    char *s = kipp_buf_take(&b, &n); /* an empty buffer gives "" */
    KT_CHECK(s && n == 0 && s[0] == '\0');
    free(s);
}

/* ---- template recognition ----------------------------------------------------------------- */

typedef struct {
    unsigned char *p;
    size_t n, cap;
} gbuf;

static void gput(gbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        while (b->cap < b->n + n) b->cap = b->cap ? b->cap * 2 : 1024;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort(); /* test harness: out of memory is not a test result */
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void gput_le(gbuf *b, uint64_t v, int n_bytes) {
    unsigned char t[8];
    for (int i = 0; i < n_bytes; i++) t[i] = (unsigned char)(v >> (8 * i));
    gput(b, t, (size_t)n_bytes);
}
static void gput_str(gbuf *b, const char *s, size_t n) {
    gput_le(b, n, 8);
    gput(b, s, n);
}

/* A GGUF with no tensors and one metadata key (none when key is NULL): a string value, or
 * a uint32 when text is NULL. */
static kipp_status check_gguf(const char *key, const char *text, size_t len,
                              kipp_chat_template_kind *kind, char *err) {
    gbuf b = {0};
    gput(&b, "GGUF", 4);
    gput_le(&b, 3, 4);
    gput_le(&b, 0, 8);
    gput_le(&b, key ? 1 : 0, 8);
    if (key) {
        gput_str(&b, key, strlen(key));
        gput_le(&b, text ? KIPP_GGUF_STRING : KIPP_GGUF_UINT32, 4);
        if (text) gput_str(&b, text, len);
        else gput_le(&b, 7, 4);
    }
    while (b.n % 32) gput(&b, "", 1);
    kipp_gguf *g = NULL;
    kipp_status st = kipp_gguf_open_buffer(b.p, b.n, &g, err, KIPP_ERR_LEN);
    if (st == KIPP_OK) st = kipp_chat_template_check(g, kind, err, KIPP_ERR_LEN);
    kipp_gguf_free(g);
    free(b.p);
    return st;
}

static void test_template_check(void) {
    char err[KIPP_ERR_LEN] = "";
    kipp_chat_template_kind kind = KIPP_CHAT_TEMPLATE_NONE;
    size_t len = 0;
    const char *src = kipp_chat_template_source(KIPP_CHAT_TEMPLATE_QWEN3, &len);
    KT_CHECK(src && len == 4116 && strncmp(src, "{%- if tools %}\n", 16) == 0);
    KT_CHECK(kipp_chat_template_source(KIPP_CHAT_TEMPLATE_CHATML, NULL) == NULL);
    KT_CHECK(strcmp(kipp_chat_template_name(KIPP_CHAT_TEMPLATE_QWEN3), "qwen3-hybrid") == 0);

    KT_CHECK(kipp_chat_template_check_text(src, len, &kind, err, sizeof err) == KIPP_OK &&
             kind == KIPP_CHAT_TEMPLATE_QWEN3, "%s", err);
    KT_CHECK(kipp_chat_template_check_text(NULL, 0, &kind, err, sizeof err) == KIPP_OK &&
             kind == KIPP_CHAT_TEMPLATE_CHATML);

    /* one trailing newline (as a chat_template.jinja file has) is what Jinja drops */
    char *copy = malloc(len + 2);
    memcpy(copy, src, len);
    copy[len] = '\n';
    KT_CHECK(kipp_chat_template_check_text(copy, len + 1, &kind, err, sizeof err) == KIPP_OK &&
             kind == KIPP_CHAT_TEMPLATE_QWEN3, "%s", err);
    copy[len + 1] = '\n';
    KT_CHECK(kipp_chat_template_check_text(copy, len + 2, &kind, err, sizeof err) ==
                 KIPP_ERR_UNSUPPORTED && kind == KIPP_CHAT_TEMPLATE_NONE, "%s", err);
    /* one byte changed deep inside: refused, and the error names the template */
    memcpy(copy, src, len);
    copy[len / 2] ^= 1;
    KT_CHECK(kipp_chat_template_check_text(copy, len, &kind, err, sizeof err) ==
                 KIPP_ERR_UNSUPPORTED && strstr(err, "first line \"{%- if tools %}\"") &&
                 strstr(err, "4116 bytes"), "%s", err);
    free(copy);
    static const char other[] = "\n{% for message in messages %}\x01{{ message.content }}";
    KT_CHECK(kipp_chat_template_check_text(other, strlen(other), &kind, err, sizeof err) ==
                 KIPP_ERR_UNSUPPORTED && strstr(err, "\"{% for message in messages %}?{{"),
             "%s", err);
    KT_CHECK(kipp_chat_template_check_text("", 0, &kind, err, sizeof err) ==
             KIPP_ERR_UNSUPPORTED, "%s", err);

    /* the same through a GGUF */
    KT_CHECK(check_gguf("tokenizer.chat_template", src, len, &kind, err) == KIPP_OK &&
             kind == KIPP_CHAT_TEMPLATE_QWEN3, "%s", err);
    KT_CHECK(check_gguf(NULL, NULL, 0, &kind, err) == KIPP_OK &&
             kind == KIPP_CHAT_TEMPLATE_CHATML, "%s", err);
    KT_CHECK(check_gguf("general.name", "x", 1, &kind, err) == KIPP_OK &&
             kind == KIPP_CHAT_TEMPLATE_CHATML, "%s", err);
    KT_CHECK(check_gguf("tokenizer.chat_template", "{{ x }}", 7, &kind, err) ==
             KIPP_ERR_UNSUPPORTED && kind == KIPP_CHAT_TEMPLATE_NONE, "%s", err);
    KT_CHECK(check_gguf("tokenizer.chat_template", NULL, 0, &kind, err) == KIPP_ERR_FORMAT &&
             strstr(err, "tokenizer.chat_template"), "%s", err);

    /* the 2507 and Qwen2.5 texts Kipp carries are the committed test data byte for byte (less
     * the one trailing newline the Qwen2.5 text has on the Hub), and each is recognised as its
     * kind, in a GGUF too, with and without that newline; one byte off is refused */
    static const struct {
        kipp_chat_template_kind kind;
        const char *name, *file;
        kipp_chat_thinking on, off;
        size_t trailing_nl; /* the file ends in one '\n' that the carried text leaves out */
    } t2507[] = {
        {KIPP_CHAT_TEMPLATE_QWEN3_INSTRUCT_2507, "qwen3-instruct-2507",
         "tests/tok/templates/qwen3-instruct-2507.jinja", KIPP_CHAT_THINK_OFF,
         KIPP_CHAT_THINK_OFF, 0},
        {KIPP_CHAT_TEMPLATE_QWEN3_THINKING_2507, "qwen3-thinking-2507",
         "tests/tok/templates/qwen3-thinking-2507.jinja", KIPP_CHAT_THINK_IN_PROMPT,
         KIPP_CHAT_THINK_IN_PROMPT, 0},
        {KIPP_CHAT_TEMPLATE_QWEN25_INSTRUCT, "qwen2.5-instruct",
         "tests/tok/templates/qwen2.5-instruct.jinja", KIPP_CHAT_THINK_NEVER,
         KIPP_CHAT_THINK_NEVER, 1},
    };
    for (size_t i = 0; i < sizeof t2507 / sizeof t2507[0]; i++) {
        size_t flen = 0, slen = 0, nl = t2507[i].trailing_nl;
        char *file = read_all(t2507[i].file, &flen);
        const char *s2 = kipp_chat_template_source(t2507[i].kind, &slen);
        KT_CHECK(file && s2 && flen == slen + nl && memcmp(file, s2, slen) == 0 &&
                     (!nl || file[slen] == '\n'), "%s", t2507[i].file);
        if (file && nl && flen > 0)
            KT_CHECK(kipp_chat_template_check_text(file, flen - 1, &kind, err, sizeof err) ==
                         KIPP_OK && kind == t2507[i].kind, "%s without its newline: %s",
                     t2507[i].name, err);
        KT_CHECK(strcmp(kipp_chat_template_name(t2507[i].kind), t2507[i].name) == 0);
        KT_CHECK(kipp_chat_template_thinking(t2507[i].kind, 1) == t2507[i].on &&
                 kipp_chat_template_thinking(t2507[i].kind, 0) == t2507[i].off);
        if (!file) continue;
        KT_CHECK(kipp_chat_template_check_text(file, flen, &kind, err, sizeof err) == KIPP_OK &&
                 kind == t2507[i].kind, "%s: %s", t2507[i].name, err);
        KT_CHECK(check_gguf("tokenizer.chat_template", file, flen, &kind, err) == KIPP_OK &&
                 kind == t2507[i].kind, "%s: %s", t2507[i].name, err);
        file[flen - 10] ^= 1;
        KT_CHECK(kipp_chat_template_check_text(file, flen, &kind, err, sizeof err) ==
                     KIPP_ERR_UNSUPPORTED && kind == KIPP_CHAT_TEMPLATE_NONE, "%s", err);
        free(file);
    }
    KT_CHECK(kipp_chat_template_thinking(KIPP_CHAT_TEMPLATE_QWEN3, 1) == KIPP_CHAT_THINK_BY_TAG &&
             kipp_chat_template_thinking(KIPP_CHAT_TEMPLATE_QWEN3, 0) == KIPP_CHAT_THINK_OFF &&
             kipp_chat_template_thinking(KIPP_CHAT_TEMPLATE_CHATML, 1) == KIPP_CHAT_THINK_OFF);
}

/* ---- rendering: validation and Kipp-specific rules ---------------------------------------- */

static void test_render_errors(void) {
    static const struct {
        const char *req; /* ' stands for " */
        kipp_status st;
        const char *msg; /* must appear in the error */
    } cases[] = {
        {"not json", KIPP_ERR_INVALID_ARG, "invalid JSON at line 1"},
        {"[]", KIPP_ERR_INVALID_ARG, "request: expected an object, got an array"},
        {"{}", KIPP_ERR_INVALID_ARG, "messages: expected an array, got nothing"},
        {"{'messages': {}}", KIPP_ERR_INVALID_ARG, "messages: expected an array, got an object"},
        {"{'messages': []}", KIPP_ERR_INVALID_ARG, "messages: the array is empty"},
        {"{'messages': ['hi']}", KIPP_ERR_INVALID_ARG,
         "messages[0]: expected an object, got a string"},
        {"{'messages': [{'content': 'x'}]}", KIPP_ERR_INVALID_ARG, "messages[0].role is missing"},
        {"{'messages': [{'role': 1, 'content': 'x'}]}", KIPP_ERR_INVALID_ARG,
         "messages[0].role: expected a string, got a number"},
        {"{'messages': [{'role': 'user', 'content': 'x'}, {'role': 'developer', 'content': 'x'}]}",
         KIPP_ERR_INVALID_ARG, "messages[1].role: unknown role \"developer\""},
        {"{'messages': [{'role': 'user'}]}", KIPP_ERR_INVALID_ARG,
         "messages[0].content is missing"},
        {"{'messages': [{'role': 'user', 'content': null}]}", KIPP_ERR_INVALID_ARG,
         "messages[0].content is missing"},
        {"{'messages': [{'role': 'assistant', 'content': null}]}", KIPP_ERR_INVALID_ARG,
         "messages[0].content is missing"},
        {"{'messages': [{'role': 'assistant', 'content': null, 'tool_calls': []}]}",
         KIPP_ERR_INVALID_ARG, "messages[0].content is missing"},
        {"{'messages': [{'role': 'tool'}]}", KIPP_ERR_INVALID_ARG,
         "messages[0].content is missing"},
        {"{'messages': [{'role': 'user', 'content': [{'type': 'text', 'text': 'x'}]}]}",
         KIPP_ERR_INVALID_ARG, "messages[0].content: expected a string, got an array"},
        {"{'messages': [{'role': 'system', 'content': 5}]}", KIPP_ERR_INVALID_ARG,
         "messages[0].content: expected a string, got a number"},
        {"{'messages': [{'role': 'assistant', 'content': 'a', 'reasoning_content': 5}]}",
         KIPP_ERR_INVALID_ARG, "messages[0].reasoning_content: expected a string, got a number"},
        {"{'messages': [{'role': 'assistant', 'content': 'a', 'tool_calls': {}}]}",
         KIPP_ERR_INVALID_ARG, "messages[0].tool_calls: expected an array, got an object"},
        {"{'messages': [{'role': 'assistant', 'content': 'a', 'tool_calls': [1]}]}",
         KIPP_ERR_INVALID_ARG, "messages[0].tool_calls[0]: expected an object, got a number"},
        {"{'messages': [{'role': 'assistant', 'content': 'a', 'tool_calls': [{'function': "
         "{'name': 'f', 'arguments': {}}}, {'function': {'arguments': {}}}]}]}",
         KIPP_ERR_INVALID_ARG,
         "messages[0].tool_calls[1].function.name: expected a string, got nothing"},
        {"{'messages': [{'role': 'assistant', 'content': 'a', 'tool_calls': [{'function': "
         "{'name': 'f'}}]}]}", KIPP_ERR_INVALID_ARG,
         "messages[0].tool_calls[0].function.arguments is missing"},
        {"{'messages': [{'role': 'assistant', 'content': 'a', 'tool_calls': [{'function': "
         "'f'}]}]}", KIPP_ERR_INVALID_ARG,
         "messages[0].tool_calls[0].function: expected a non-empty object, got a string"},
        {"{'messages': [{'role': 'assistant', 'content': 'a', 'tool_calls': [{'name': 3, "
         "'arguments': {}}]}]}", KIPP_ERR_INVALID_ARG,
         "messages[0].tool_calls[0].name: expected a string, got a number"},
        {"{'messages': [{'role': 'user', 'content': 'x'}], 'tools': {}}", KIPP_ERR_INVALID_ARG,
         "tools: expected an array, got an object"},
        {"{'messages': [{'role': 'user', 'content': 'x'}], 'tools': [{}, 'f']}",
         KIPP_ERR_INVALID_ARG, "tools[1]: expected an object, got a string"},
        {"{'messages': [{'role': 'user', 'content': 'x'}], 'add_generation_prompt': 1}",
         KIPP_ERR_INVALID_ARG, "add_generation_prompt: expected a boolean, got a number"},
        {"{'messages': [{'role': 'user', 'content': 'x'}], 'chat_template_kwargs': "
         "{'enable_thinking': 'no'}}", KIPP_ERR_INVALID_ARG,
         "chat_template_kwargs.enable_thinking: expected a boolean, got a string"},
        {"{'messages': [{'role': 'user', 'content': 'x'}], 'chat_template_kwargs': []}",
         KIPP_ERR_INVALID_ARG, "chat_template_kwargs: expected an object, got an array"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char err[KIPP_ERR_LEN] = "", *out = (char *)1;
        size_t len = 1;
        kipp_status st = render(KIPP_CHAT_TEMPLATE_QWEN3, cases[i].req, &out, &len, err);
        KT_CHECK(st == cases[i].st && strstr(err, cases[i].msg) && out == NULL && len == 0,
                 "%s: got %d \"%s\", want \"%s\"", cases[i].req, (int)st, err, cases[i].msg);
    }
    /* ChatML cannot carry tools */
    char err[KIPP_ERR_LEN] = "", *out = NULL;
    size_t len;
    KT_CHECK(render(KIPP_CHAT_TEMPLATE_CHATML,
                    "{'messages': [{'role': 'user', 'content': 'x'}], 'tools': [{}]}", &out, &len,
                    err) == KIPP_ERR_UNSUPPORTED && strstr(err, "tools"), "%s", err);
    KT_CHECK(render(KIPP_CHAT_TEMPLATE_CHATML,
                    "{'messages': [{'role': 'assistant', 'content': null, 'tool_calls': "
                    "[{'name': 'f', 'arguments': 1}]}]}", &out, &len, err) ==
                 KIPP_ERR_UNSUPPORTED && strstr(err, "messages[0].tool_calls"), "%s", err);
    KT_CHECK(render(KIPP_CHAT_TEMPLATE_NONE, "{'messages': [{'role': 'user', 'content': 'x'}]}",
                    &out, &len, err) == KIPP_ERR_INVALID_ARG, "%s", err);
    KT_CHECK(kipp_chat_render(KIPP_CHAT_TEMPLATE_QWEN3, NULL, NULL, 1, 1, &out, &len, err,
                              sizeof err) == KIPP_ERR_INVALID_ARG);
}

#define U(x) "{'role': 'user', 'content': '" x "'}"
#define QWEN KIPP_CHAT_TEMPLATE_QWEN3

static void test_render_rules(void) {
    /* content null (or absent) beside tool calls renders as content "" (HF would fail) */
    const char *with_empty = "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                             "</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}"
                             "\n</tool_call><|im_end|>\n";
    KT_CHECK(render_is(QWEN, "{'messages': [" U("q") ", {'role': 'assistant', 'content': '', "
                       "'tool_calls': [{'type': 'function', 'function': {'name': 'f', "
                       "'arguments': {'a': 1}}}]}], 'add_generation_prompt': false}",
                       with_empty));
    KT_CHECK(render_is(QWEN, "{'messages': [" U("q") ", {'role': 'assistant', 'content': null, "
                       "'tool_calls': [{'type': 'function', 'function': {'name': 'f', "
                       "'arguments': {'a': 1}}}]}], 'add_generation_prompt': false}",
                       with_empty));
    KT_CHECK(render_is(QWEN, "{'messages': [" U("q") ", {'role': 'assistant', 'tool_calls': "
                       "[{'name': 'f', 'arguments': {'a': 1}}]}], 'add_generation_prompt': false}",
                       with_empty));
    /* defaults of the JSON form: generation prompt on, thinking on; kwargs win; null = absent */
    KT_CHECK(render_is(QWEN, "{'messages': [" U("q") "]}",
                       "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"));
    KT_CHECK(render_is(QWEN, "{'messages': [" U("q") "], 'enable_thinking': true, "
                       "'chat_template_kwargs': {'enable_thinking': false}, 'tools': null}",
                       "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                       "</think>\n\n"));
    KT_CHECK(render_is(QWEN, "{'messages': [" U("q") "], 'enable_thinking': false, "
                       "'chat_template_kwargs': {}, 'model': 'x', 'temperature': 0.5}",
                       "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
                       "</think>\n\n"));
    /* reasoning aliases, in HF's order: reasoning_content, thinking, reasoning */
    KT_CHECK(render_is(QWEN, "{'messages': [" U("q") ", {'role': 'assistant', 'content': 'a', "
                       "'reasoning': 'R', 'thinking': 'T', 'reasoning_content': null}], "
                       "'add_generation_prompt': false}",
                       "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nT\n</think>"
                       "\n\na<|im_end|>\n"));
    /* a NUL byte in content survives (the length, not strlen, is the truth) */
    char err[KIPP_ERR_LEN] = "", *out = NULL;
    size_t len = 0;
    static const char want_nul[] = "<|im_start|>user\na\0b<|im_end|>\n";
    KT_CHECK(render(QWEN, "{'messages': [" U("a\\u0000b") "], 'add_generation_prompt': false}",
                    &out, &len, err) == KIPP_OK && len == sizeof want_nul - 1 &&
             memcmp(out, want_nul, len) == 0, "%s", err);
    free(out);
    /* the json_t API, with tools as a JSON null */
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"q\"}]", 0, NULL);
    json_t *null = json_null();
    KT_CHECK(kipp_chat_render(QWEN, msgs, null, 0, 0, &out, &len, err, sizeof err) == KIPP_OK &&
             strcmp(out, "<|im_start|>user\nq<|im_end|>\n") == 0, "%s", err);
    free(out);
    json_decref(msgs);
    json_decref(null);

    /* Qwen2.5: the default system turn; reasoning fields and enable_thinking change nothing,
     * <think> in content is text; a reasoning field must still be a string (HF ignores any) */
    const kipp_chat_template_kind q25 = KIPP_CHAT_TEMPLATE_QWEN25_INSTRUCT;
#define Q25_SYS "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful " \
                "assistant.<|im_end|>\n"
    KT_CHECK(render_is(q25, "{'messages': [" U("q") ", {'role': 'assistant', 'content': "
                       "'<think>r</think>a', 'reasoning_content': 'R'}], "
                       "'chat_template_kwargs': {'enable_thinking': false}}",
                       Q25_SYS "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
                       "<think>r</think>a<|im_end|>\n<|im_start|>assistant\n"));
    KT_CHECK(render(q25, "{'messages': [" U("q") ", {'role': 'assistant', 'content': 'a', "
                    "'reasoning_content': 5}]}", &out, &len, err) == KIPP_ERR_INVALID_ARG &&
             strstr(err, "messages[1].reasoning_content"), "%s", err);
    /* content null beside tool calls: no "\n" + content; a string argument is a JSON string */
    KT_CHECK(render_is(q25, "{'messages': [" U("q") ", {'role': 'assistant', 'content': null, "
                       "'tool_calls': [{'name': 'f', 'arguments': '{}'}]}], "
                       "'add_generation_prompt': false}",
                       Q25_SYS "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n"
                       "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call>"
                       "<|im_end|>\n"));
#undef Q25_SYS
}

void kt_suite_chat(void) {
    test_pyjson();
    test_template_check();
    test_render_errors();
    test_render_rules();
}

/* ---- reasoning split ---------------------------------------------------------------------- */

typedef struct {
    kipp_buf part[2]; /* [0] content, [1] reasoning */
    int bad_call;      /* an emit with n == 0 */
} collect;

static void on_emit(void *user, int is_reasoning, const char *bytes, size_t n) {
    collect *c = user;
    if (n == 0) c->bad_call = 1;
    kipp_buf_put(&c->part[is_reasoning ? 1 : 0], bytes, n);
}

static int same(const kipp_buf *b, const char *p, size_t n) {
    return b->len == n && (n == 0 || memcmp(b->data, p, n) == 0);
}

/* Streams text cut at the given offsets (sorted, at most 3) and compares with the one-shot
 * split. Returns 1 when equal. */
static int stream_matches(const char *text, kipp_reasoning_mode mode, const size_t *cuts,
                          int n_cuts) {
    const char *r, *c;
    size_t rn, cn, len = strlen(text), at = 0;
    kipp_reasoning_split(text, len, mode, &r, &rn, &c, &cn);
    collect col = {0};
    kipp_reasoning st;
    kipp_reasoning_init(&st, mode, on_emit, &col);
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        kipp_reasoning_feed(&st, text + at, end - at, NULL, 0);
        at = end;
    }
    kipp_reasoning_finish(&st, NULL, 0);
    int ok = !col.bad_call && same(&col.part[1], r, rn) && same(&col.part[0], c, cn);
    kipp_buf_free(&col.part[0]);
    kipp_buf_free(&col.part[1]);
    return ok;
}

static void test_split_table(void) {
    static const struct {
        const char *text;
        int mode;
        const char *reasoning, *content;
    } cases[] = {
        {"<think>\nR\n</think>\n\nA", 0, "R", "A"},
        {"\n\n<think>\n\nR1\n\nR2\n\n</think>\n\n\nA1\n\nA2\n\n", 0, "R1\n\nR2", "A1\n\nA2"},
        {"plain answer\n", 0, "", "plain answer"},
        {"plain </think> answer", 0, "", "plain </think> answer"},
        {"x<think>y</think>z", 0, "", "x<think>y</think>z"},
        {"<thinking>not a tag", 0, "", "<thinking>not a tag"},
        {"<think", 0, "", "<think"},
        {"<think>\nunfinished\n", 0, "unfinished", ""},
        {"<think></think>", 0, "", ""},
        {"<think>a</think>b</think>c<think>d", 0, "a", "b</think>c<think>d"},
        {"<think>a </thinkX b</think> c ", 0, "a </thinkX b", " c "},
        {"<think><</</th</think>>", 0, "<</</th", ">"},
        {"<think> \r\n spaces stay \r\n</think> \n", 0, " \r\n spaces stay \r", " "},
        {"R\n</think>\n\nA", 1, "R", "A"},
        {"<think>\nR\n</think>\nA", 1, "R", "A"},
        {"</think>A", 1, "", "A"},
        {"no close", 1, "no close", ""},
        {"\n<thinX", 1, "<thinX", ""},
        {"<</think>x", 1, "<", "x"},
        {"", 0, "", ""},
        {"\n\n\n", 1, "", ""},
        /* no reasoning (Qwen2.5): tags are text, only the '\n' strip applies */
        {"<think>\nR\n</think>\n\nA", 2, "", "<think>\nR\n</think>\n\nA"},
        {"\n\nR\n</think>\nA\n\n", 2, "", "R\n</think>\nA"},
        {"plain", 2, "", "plain"},
        {"\n\n", 2, "", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *t = cases[i].text, *r, *c;
        size_t rn, cn;
        kipp_reasoning_split(t, strlen(t), (kipp_reasoning_mode)cases[i].mode, &r, &rn, &c, &cn);
        KT_CHECK(rn == strlen(cases[i].reasoning) && memcmp(r, cases[i].reasoning, rn) == 0 &&
                 cn == strlen(cases[i].content) && memcmp(c, cases[i].content, cn) == 0,
                 "split %zu: got [%.*s][%.*s]", i, (int)rn, r, (int)cn, c);
        /* streaming, cut at every one and every two points */
        size_t len = strlen(t);
        int ok = 1;
        for (size_t a = 0; a <= len && ok; a++) {
            ok = stream_matches(t, (kipp_reasoning_mode)cases[i].mode, &a, 1);
            for (size_t b2 = a; b2 <= len && ok; b2++) {
                size_t cuts[2] = {a, b2};
                ok = stream_matches(t, (kipp_reasoning_mode)cases[i].mode, cuts, 2);
            }
        }
        KT_CHECK(ok, "streaming split %zu differs from one-shot", i);
    }
}

/* Longer texts: every single cut, and byte-at-a-time, in both modes. */
static void test_split_streaming(void) {
    static const char *const texts[] = {
        ("<think>\nOkay, the user says hi. I should greet back.\n\nMaybe ask how I can help.\n"
         "</think>\n\nHello! How can I help you today?\n"),
        "\n<think>\n\n\n</think>\n\n\n\n",
        "Sure: <think> is a tag, and so is </think>.\n\n",
        "<think>\nHmm <t <th </ </t </th </thi </thin </think\n\n</think>\n\n<think>\nagain\n",
        "<think>\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80\n</think>\n\xc3\xa9\n",
        "\n\n\n<th\n<think>x",
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        for (int mode = 0; mode < 3; mode++) {
            size_t len = strlen(texts[i]);
            int ok = 1;
            for (size_t a = 0; a <= len && ok; a++)
                ok = stream_matches(texts[i], (kipp_reasoning_mode)mode, &a, 1);
            KT_CHECK(ok, "text %zu mode %d: a single cut changes the split", i, mode);
            /* byte at a time */
            collect col = {0};
            kipp_reasoning st;
            kipp_reasoning_init(&st, (kipp_reasoning_mode)mode, on_emit, &col);
            for (size_t k = 0; k < len; k++) kipp_reasoning_feed(&st, texts[i] + k, 1, NULL, 0);
            kipp_reasoning_finish(&st, NULL, 0);
            const char *r, *c;
            size_t rn, cn;
            kipp_reasoning_split(texts[i], len, (kipp_reasoning_mode)mode, &r, &rn, &c, &cn);
            KT_CHECK(same(&col.part[1], r, rn) && same(&col.part[0], c, cn),
                     "text %zu mode %d: byte-at-a-time differs", i, mode);
            kipp_buf_free(&col.part[0]);
            kipp_buf_free(&col.part[1]);
        }
    }
}

/* What a streaming client sees: interior newlines arrive once the next text does, and the
 * state says when the reasoning ended. */
static void test_stream_events(void) {
    collect col = {0};
    kipp_reasoning st;
    char err[KIPP_ERR_LEN] = "";
    kipp_reasoning_init(&st, KIPP_REASONING_OPEN_BY_TAG, on_emit, &col);
    KT_CHECK(!kipp_reasoning_in_reasoning(&st));
    kipp_reasoning_feed(&st, "<thi", 4, err, sizeof err);
    KT_CHECK(col.part[0].len == 0 && col.part[1].len == 0); /* could still be the tag */
    kipp_reasoning_feed(&st, "nk>\nStep 1.\n\n", 13, err, sizeof err);
    KT_CHECK(kipp_reasoning_in_reasoning(&st) && same(&col.part[1], "Step 1.", 7));
    kipp_reasoning_feed(&st, "Step 2.\n</th", 12, err, sizeof err);
    KT_CHECK(same(&col.part[1], "Step 1.\n\nStep 2.", 16) && col.part[0].len == 0);
    kipp_reasoning_feed(&st, "ink>\n\nDone", 10, err, sizeof err);
    KT_CHECK(!kipp_reasoning_in_reasoning(&st) && same(&col.part[0], "Done", 4));
    KT_CHECK(kipp_reasoning_finish(&st, err, sizeof err) == KIPP_OK);
    KT_CHECK(kipp_reasoning_feed(&st, "x", 1, err, sizeof err) == KIPP_ERR_INVALID_ARG);
    KT_CHECK(kipp_reasoning_finish(&st, err, sizeof err) == KIPP_ERR_INVALID_ARG);
    kipp_buf_free(&col.part[0]);
    kipp_buf_free(&col.part[1]);

    kipp_reasoning_init(&st, KIPP_REASONING_OPEN_IN_PROMPT, NULL, NULL); /* no sink is fine */
    KT_CHECK(kipp_reasoning_in_reasoning(&st));
    kipp_reasoning_feed(&st, "r</think>c", 10, err, sizeof err);
    KT_CHECK(!kipp_reasoning_in_reasoning(&st));
    kipp_reasoning_finish(&st, err, sizeof err);

    /* long runs: the 256-byte output buffer flushes in pieces, newlines are counted */
    static char big[5000];
    memset(big, 'x', sizeof big - 1);
    for (size_t k = 100; k < 3000; k++) big[k] = '\n';
    memcpy(big + 4000, "</think>", 8);
    size_t cut = 3500;
    KT_CHECK(stream_matches(big, KIPP_REASONING_OPEN_IN_PROMPT, &cut, 1));
}

void kt_suite_reasoning(void) {
    test_split_table();
    test_split_streaming();
    test_stream_events();
}

/* ---- goldens ------------------------------------------------------------------------------- */

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Prints up to 40 bytes either side of offset d, with control bytes escaped. */
static void print_around(const char *label, const char *s, size_t n, size_t d) {
    size_t from = d > 40 ? d - 40 : 0, to = n < d + 40 ? n : d + 40;
    fprintf(stderr, "  %s \"", label);
    for (size_t i = from; i < to; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stderr);
        else if (c == '\\' || c == '"') fprintf(stderr, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) fprintf(stderr, "\\x%02x", c);
        else fputc(c, stderr);
    }
    fputs("\"\n", stderr);
}

/* Renders one golden file; 1 = match, 0 = mismatch (reported). */
static int golden_case(const char *path, kipp_chat_template_kind model_kind) {
    size_t len = 0;
    char *text = read_all(path, &len);
    json_t *doc = text ? json_loadb(text, len, JSON_ALLOW_NUL, NULL) : NULL;
    const json_t *want = json_object_get(doc, "expected");
    const char *tname = json_string_value(json_object_get(doc, "template"));
    if (!json_is_string(want) || !tname) {
        fprintf(stderr, "chat golden %s: unreadable case (no \"expected\"/\"template\")\n", path);
        free(text);
        json_decref(doc);
        return 0;
    }
    /* the model's own template, or one named by the case (chatml, 2507, Qwen2.5) */
    static const kipp_chat_template_kind named[] = {KIPP_CHAT_TEMPLATE_CHATML,
                                                    KIPP_CHAT_TEMPLATE_QWEN3_INSTRUCT_2507,
                                                    KIPP_CHAT_TEMPLATE_QWEN3_THINKING_2507,
                                                    KIPP_CHAT_TEMPLATE_QWEN25_INSTRUCT};
    kipp_chat_template_kind kind =
        strcmp(tname, kipp_chat_template_name(model_kind)) == 0 ? model_kind
                                                                : KIPP_CHAT_TEMPLATE_NONE;
    for (size_t k = 0; k < sizeof named / sizeof named[0]; k++)
        if (strcmp(tname, kipp_chat_template_name(named[k])) == 0) kind = named[k];
    char err[KIPP_ERR_LEN] = "", *out = NULL;
    size_t n = 0;
    kipp_status st = kipp_chat_render_json(kind, text, len, &out, &n, err, sizeof err);
    const char *w = json_string_value(want);
    size_t wn = json_string_length(want);
    int ok = st == KIPP_OK && n == wn && memcmp(out, w, n) == 0;
    if (st != KIPP_OK) {
        fprintf(stderr, "chat golden %s: %s: %s\n", path, kipp_status_str(st), err);
    } else if (!ok) {
        size_t d = 0;
        while (d < n && d < wn && out[d] == w[d]) d++;
        fprintf(stderr, "chat golden %s: differs at byte %zu (got %zu bytes, want %zu)\n",
                path, d, n, wn);
        print_around("got: ", out, n, d);
        print_around("want:", w, wn, d);
    }
    free(out);
    free(text);
    json_decref(doc);
    return ok;
}

int kt_chat_golden(const char *gguf_path, const char *dir) {
    char err[KIPP_ERR_LEN] = "";
    kipp_gguf *g = NULL;
    kipp_chat_template_kind kind = KIPP_CHAT_TEMPLATE_NONE;
    if (kipp_gguf_open(gguf_path, &g, err, sizeof err) != KIPP_OK ||
        kipp_chat_template_check(g, &kind, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "chat golden: %s: %s\n", gguf_path, err);
        kipp_gguf_free(g);
        return -1;
    }
    kipp_gguf_free(g);
    if (kind != KIPP_CHAT_TEMPLATE_QWEN3) {
        fprintf(stderr, "chat golden: %s carries no Qwen3 template (%s)\n", gguf_path,
                kipp_chat_template_name(kind));
        return -1;
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "chat golden: cannot open directory %s\n", dir);
        return -1;
    }
    char **names = NULL;
    size_t n_names = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t k = strlen(e->d_name);
        if (k < 6 || strcmp(e->d_name + k - 5, ".json") != 0) continue;
        char **grown = realloc(names, (n_names + 1) * sizeof *names);
        if (!grown) break;
        names = grown;
        names[n_names] = malloc(strlen(dir) + k + 2);
        if (!names[n_names]) break;
        sprintf(names[n_names++], "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (n_names == 0) {
        fprintf(stderr, "chat golden: no *.json cases in %s\n", dir);
        free(names);
        return -1;
    }
    qsort(names, n_names, sizeof *names, cmp_names);
    int bad = 0;
    for (size_t i = 0; i < n_names; i++) {
        if (golden_case(names[i], kind)) kt_passed++;
        else bad++;
        free(names[i]);
    }
    free(names);
    return bad;
}
