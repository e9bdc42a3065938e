/* test_json_schema.c — unit suite for src/engine/json_schema.c through the grammar matcher:
 * the schema corpus (tests/unit/data/schema_corpus, written and cross-checked against the
 * jsonschema package by tests/tools/make_schema_corpus.py), the bounds the grammar adds
 * (whitespace, digits), integer ranges against brute force, several schemas in one grammar,
 * and an error naming each unsupported keyword. Does not test token masks (test_grammar.c). */
#include "engine/grammar.h"
#include "engine/json_schema.h"
#include "kt.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

/* Compiles a grammar text; NULL (and a failed check) if it does not compile. */
static kipp_grammar *compile_text(const char *text, size_t n, const char *what) {
    char err[512] = "";
    kipp_grammar *g = NULL;
    kipp_status st = kipp_grammar_compile(text, n, &g, err, sizeof err);
    KT_CHECK(st == KIPP_OK && g, "%s: grammar does not compile: %s", what, err);
    return st == KIPP_OK ? g : NULL;
}

static kipp_grammar *compile_schema(const json_t *schema, const char *what) {
    char err[512] = "", *text = NULL;
    size_t n = 0;
    int rc = kipp_json_schema_grammar(schema, &text, &n, err, sizeof err);
    KT_CHECK(rc == 0 && text, "%s: %s", what, err);
    kipp_grammar *g = rc == 0 ? compile_text(text, n, what) : NULL;
    free(text);
    return g;
}

/* 1 if text is a whole sentence of g; bytewise feeds it one byte per call. */
static int matches(const kipp_grammar *g, const char *text, size_t n, int bytewise) {
    char err[256];
    kipp_matcher *m = NULL;
    if (kipp_matcher_new(g, NULL, &m, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "kipp_matcher_new: %s", err);
        return -1;
    }
    int ok = 1;
    if (bytewise)
        for (size_t i = 0; ok && i < n; i++) ok = kipp_matcher_accept_bytes(m, text + i, 1);
    else
        ok = kipp_matcher_accept_bytes(m, text, n);
    ok = ok && kipp_matcher_complete(m);
    kipp_matcher_free(m);
    return ok;
}
static int matches_str(const kipp_grammar *g, const char *text) { return matches(g, text, strlen(text), 0); }

static json_t *parse(const char *s) {
    json_error_t je;
    json_t *j = json_loads(s, JSON_DECODE_ANY, &je);
    KT_CHECK(j != NULL, "bad test JSON %s: %s", s, je.text);
    return j;
}

/* ---- the corpus ------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void run_case(const char *path) {
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    KT_CHECK(c != NULL, "%s: %s", path, je.text);
    if (!c) return;
    const json_t *schema = json_object_get(c, "schema"), *acc = json_object_get(c, "accept"),
                 *rej = json_object_get(c, "reject");
    kipp_grammar *g = compile_schema(schema, path);
    for (size_t i = 0; g && i < json_array_size(acc); i++) {
        const json_t *t = json_array_get(acc, i);
        const char *s = json_string_value(t);
        size_t n = json_string_length(t);
        KT_CHECK(matches(g, s, n, 0) == 1, "%s: rejects the valid document %s", path, s);
        KT_CHECK(matches(g, s, n, 1) == 1, "%s: rejects the valid document %s fed bytewise", path, s);
    }
    for (size_t i = 0; g && i < json_array_size(rej); i++) {
        const json_t *t = json_array_get(rej, i);
        KT_CHECK(matches(g, json_string_value(t), json_string_length(t), 0) == 0,
                 "%s: accepts the invalid document %s", path, json_string_value(t));
    }
    kipp_grammar_free(g);
    json_decref(c);
}

static void test_corpus(void) {
    const char *dir = getenv("KIPP_TEST_DATA");
    char root[1024];
    snprintf(root, sizeof root, "%s/schema_corpus", dir && dir[0] ? dir : "tests/unit/data");
    DIR *d = opendir(root);
    KT_CHECK(d != NULL, "cannot open %s (set KIPP_TEST_DATA)", root);
    if (!d) return;
    char *names[256];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".json")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    KT_CHECK(n >= 25, "%s holds %zu schemas, expected at least 25", root, n);
    for (size_t i = 0; i < n; i++) {
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", root, names[i]);
        run_case(path);
        free(names[i]);
    }
}

/* ---- what the grammar adds: bounds, escapes, one spelling per value -------------------- */

static void test_bounds(void) {
    json_t *any = parse("{}"), *integer = parse("{\"type\":\"integer\"}");
    kipp_grammar *g = compile_schema(any, "{}"), *gi = compile_schema(integer, "integer");
    json_decref(any);
    json_decref(integer);
    if (!g || !gi) goto out;
    char buf[64];
    snprintf(buf, sizeof buf, "[\n%20s1]", "");
    KT_CHECK(matches_str(g, buf) == 1, "a newline and 20 spaces are allowed between tokens");
    snprintf(buf, sizeof buf, "[\n%21s1]", "");
    KT_CHECK(matches_str(g, buf) == 0, "21 spaces are not");
    KT_CHECK(matches_str(g, "[  1]") == 0, "two spaces are not");
    KT_CHECK(matches_str(g, "[\n\n1]") == 0, "two newlines are not");
    KT_CHECK(matches_str(g, "{\"a\": 1, \"b\": [1, 2]}") == 1, "Python's separators");
    KT_CHECK(matches_str(g, "{\n  \"a\": [\n    1\n  ]\n}") == 1, "indented");
    KT_CHECK(matches_str(g, "{\"a\"\n\t:1}") == 1 && matches_str(g, "{\"a\" \n\t:1}") == 0,
             "one gap, one kind");
    KT_CHECK(matches_str(g, " 1") == 0, "no whitespace before the document");
    KT_CHECK(matches_str(g, "1 ") == 0, "nor after it");
    KT_CHECK(matches_str(g, "1234567890123456") == 1, "16 integer digits");
    KT_CHECK(matches_str(g, "12345678901234567") == 0, "17 integer digits");
    KT_CHECK(matches_str(g, "0.1234567890123456") == 1, "16 fraction digits");
    KT_CHECK(matches_str(g, "0.12345678901234567") == 0, "17 fraction digits");
    KT_CHECK(matches_str(g, "1e292") == 1 && matches_str(g, "1E+292") == 1 && matches_str(g, "1e+099") == 1 &&
                 matches_str(g, "1e7") == 1 && matches_str(g, "1e05") == 1 && matches_str(g, "1e199") == 1,
             "positive exponents up to 292");
    KT_CHECK(matches_str(g, "1e293") == 0 && matches_str(g, "1e300") == 0 && matches_str(g, "1e+308") == 0 &&
                 matches_str(g, "1e999") == 0 && matches_str(g, "-1E+300") == 0,
             "positive exponents above 292 (1e999 is infinity to a double parser)");
    KT_CHECK(matches_str(g, "1E-300") == 1 && matches_str(g, "-1e-999") == 1, "3-digit negative exponents");
    KT_CHECK(matches_str(g, "-9999999999999999.9999999999999999e292") == 1,
             "the largest number still a finite double");
    KT_CHECK(matches_str(g, "1e0308") == 0 && matches_str(g, "1e0100") == 0 && matches_str(g, "1e-0100") == 0,
             "4 exponent digits");
    KT_CHECK(matches_str(g, "-0") == 1 && matches_str(gi, "-0") == 0,
             "-0 is a number, not an integer spelling");
    KT_CHECK(matches_str(gi, "1.0") == 0 && matches_str(gi, "1e2") == 0, "integers are written as digits");
    KT_CHECK(matches_str(gi, "-1234567890123456") == 1 && matches_str(gi, "00") == 0);
    /* an integer without bounds is an int64 (16 digits < 2^63 - 1, 19 digits) */
    KT_CHECK(matches_str(gi, "9999999999999999") == 1 && matches_str(gi, "-9999999999999999") == 1 &&
                 matches_str(gi, "10000000000000000") == 0 && matches_str(gi, "9223372036854775807") == 0 &&
                 matches_str(gi, "-9223372036854775808") == 0,
             "unbounded integers stay inside the signed 64-bit range");
    /* strings: escapes, surrogates only in pairs, no raw control characters */
    KT_CHECK(matches_str(g, "\"\\ud83d\\ude00\\u00E9\\/\\b\\f\\n\\r\\t\\\"\\\\\"") == 1, "every JSON escape");
    KT_CHECK(matches_str(g, "\"\\ud800\"") == 0, "a lone high surrogate escape");
    KT_CHECK(matches_str(g, "\"\\udc00\"") == 0, "a lone low surrogate escape");
    KT_CHECK(matches_str(g, "\"\\ud800\\u0041\"") == 0, "a high surrogate without its low half");
    KT_CHECK(matches_str(g, "\"\\x41\"") == 0 && matches_str(g, "\"\\u12\"") == 0, "malformed escapes");
    KT_CHECK(matches_str(g, "\"a\x01\"") == 0 && matches_str(g, "\"a\nb\"") == 0, "raw control characters");
    KT_CHECK(matches_str(g, "\"\xF0\x9F\x98\x80\xC3\xA9\"") == 1, "raw UTF-8");
out:
    kipp_grammar_free(g);
    kipp_grammar_free(gi);
}

/* Integer ranges against brute force: every value from lo-150 to hi+150. */
static void check_range(long long lo, long long hi, int has_lo, int has_hi) {
    char sch[160];
    int k = snprintf(sch, sizeof sch, "{\"type\":\"integer\"");
    if (has_lo) k += snprintf(sch + k, sizeof sch - (size_t)k, ",\"minimum\":%lld", lo);
    if (has_hi) k += snprintf(sch + k, sizeof sch - (size_t)k, ",\"maximum\":%lld", hi);
    snprintf(sch + k, sizeof sch - (size_t)k, "}");
    json_t *s = parse(sch);
    kipp_grammar *g = compile_schema(s, sch);
    json_decref(s);
    int bad = 0;
    for (long long v = lo - 150; g && v <= hi + 150 && bad < 3; v++) {
        char t[32];
        snprintf(t, sizeof t, "%lld", v);
        int want = (!has_lo || v >= lo) && (!has_hi || v <= hi);
        if (matches_str(g, t) != want) {
            bad++;
            KT_CHECK(0, "%s: %lld should be %s", sch, v, want ? "accepted" : "rejected");
        }
    }
    if (!bad) KT_CHECK(1);
    kipp_grammar_free(g);
}
static void test_integer_ranges(void) {
    static const long long R[][2] = {{0, 0},       {7, 7},     {-7, -7},       {-50, -3},  {5, 123},
                                     {0, 150},     {99, 1000}, {100, 999},     {-99, -10}, {-4567, -123},
                                     {199, 200},   {-1, 1},    {-1000, 10009}, {1, 9},     {10, 99}};
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) check_range(R[i][0], R[i][1], 1, 1);
    check_range(-20, 0, 1, 0);
    check_range(0, -20, 0, 1);
    check_range(0, 0, 0, 0);
    uint64_t x = 88172645463325252ull; /* xorshift: the same ranges every run */
    for (int t = 0; t < 40; t++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        long long lo = (long long)(x % 20000) - 10000, hi = lo + (long long)((x >> 20) % (t % 2 ? 2500 : 40));
        check_range(lo, hi, 1, 1);
    }
    /* bounds beyond int64 (a real, jansson's largest integers) leave the 16-digit range */
    static const char *const HUGE[] = {
        "{\"type\":\"integer\",\"minimum\":-1e30,\"maximum\":1e30}",
        "{\"type\":\"integer\",\"minimum\":-9223372036854775808,\"maximum\":9223372036854775807}",
        "{\"type\":\"integer\",\"minimum\":5}",
        "{\"type\":\"integer\",\"maximum\":-5}",
    };
    for (size_t i = 0; i < sizeof HUGE / sizeof HUGE[0]; i++) {
        json_t *h = parse(HUGE[i]);
        kipp_grammar *gh = compile_schema(h, HUGE[i]);
        json_decref(h);
        if (!gh) continue;
        const int pos = i != 3, neg = i != 2;
        KT_CHECK(matches_str(gh, "9999999999999999") == pos && matches_str(gh, "-9999999999999999") == neg &&
                     matches_str(gh, "10000000000000000") == 0 && matches_str(gh, "-10000000000000000") == 0 &&
                     matches_str(gh, "9223372036854775807") == 0,
                 "%s: at most 16 digits, inside int64", HUGE[i]);
        kipp_grammar_free(gh);
    }
    /* 16-digit bounds; exclusive and real bounds */
    json_t *s =
        parse("{\"type\":\"integer\",\"exclusiveMinimum\":-2.5,\"exclusiveMaximum\":9999999999999999}");
    kipp_grammar *g = compile_schema(s, "16-digit range");
    json_decref(s);
    if (g) {
        KT_CHECK(matches_str(g, "-2") == 1 && matches_str(g, "-3") == 0);
        KT_CHECK(matches_str(g, "9999999999999998") == 1 && matches_str(g, "9999999999999999") == 0);
    }
    kipp_grammar_free(g);
}

/* Lengths and counts above the dialect's 1000 (nested repetition groups), at their edges. */
static void test_big_counts(void) {
    static const struct { const char *schema; long unit_min, unit_max; int prefix, suffix;
    } C[] = {
        {"{\"type\":\"string\",\"minLength\":999,\"maxLength\":2500}", 999, 2500, '"', '"'},
        {"{\"type\":\"string\",\"minLength\":2001,\"maxLength\":4005}", 2001, 4005, '"', '"'},
        {"{\"type\":\"string\",\"minLength\":1500}", 1500, -1, '"', '"'},
        {"{\"type\":\"string\",\"pattern\":\"^a{1000,3001}$\"}", 1000, 3001, '"', '"'},
        {"{\"type\":\"array\",\"items\":{\"const\":7},\"minItems\":1001,\"maxItems\":2002}", 1001, 2002, '[',
         ']'},
    };
    char *doc = malloc(2 * 6000 + 3);
    for (size_t c = 0; doc && c < sizeof C / sizeof C[0]; c++) {
        json_t *s = parse(C[c].schema);
        kipp_grammar *g = compile_schema(s, C[c].schema);
        json_decref(s);
        long hi = C[c].unit_max < 0 ? 5000 : C[c].unit_max;
        const long lens[] = {C[c].unit_min - 1, C[c].unit_min, 1000, 1999, 2000, 2001, 3000, hi, hi + 1};
        for (size_t k = 0; g && k < sizeof lens / sizeof lens[0]; k++) {
            long n = lens[k];
            if (n < 0 || n > 5001) continue;
            size_t len = 0;
            doc[len++] = (char)C[c].prefix;
            for (long i = 0; i < n; i++) {
                if (C[c].prefix == '[') { if (i) doc[len++] = ','; doc[len++] = '7'; }
                else doc[len++] = 'a';
            }
            doc[len++] = (char)C[c].suffix;
            int want = n >= C[c].unit_min && (C[c].unit_max < 0 || n <= C[c].unit_max);
            KT_CHECK(matches(g, doc, len, 0) == want, "%s: %ld units should be %s", C[c].schema, n,
                     want ? "accepted" : "rejected");
        }
        kipp_grammar_free(g);
    }
    free(doc);
}

/* ---- several schemas in one grammar ------------------------------------------------------- */

static void test_multi(void) {
    char *buf = NULL, err[512] = "";
    size_t len = 0, cap = 0;
    json_t *a = parse("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"object\",\"properties\":"
                      "{\"n\":{\"type\":\"integer\"}}}},\"required\":[\"x\"]}");
    json_t *b = parse("{\"anyOf\":[{\"type\":\"string\",\"pattern\":\"^b+$\"},{\"$ref\":\"#/$defs/x\"}],"
                      "\"$defs\":{\"x\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/x\"}}}}");
    KT_CHECK(kipp_json_schema_rules(a, "a", &buf, &len, &cap, err, sizeof err) == 0, "%s", err);
    size_t len_a = len;
    KT_CHECK(kipp_json_schema_rules(b, "b", &buf, &len, &cap, err, sizeof err) == 0, "%s", err);
    /* the same name again, or a name the first schema already made, is refused untouched */
    char *copy = buf ? strdup(buf) : NULL;
    size_t len_ab = len;
    KT_CHECK(kipp_json_schema_rules(b, "a", &buf, &len, &cap, err, sizeof err) == -1 &&
             strstr(err, "already"));
    KT_CHECK(kipp_json_schema_rules(b, "a-ws", &buf, &len, &cap, err, sizeof err) == -1 &&
             strstr(err, "already"));
    KT_CHECK(kipp_json_schema_rules(b, "no spaces", &buf, &len, &cap, err, sizeof err) == -1);
    KT_CHECK(len == len_ab && copy && !strcmp(buf, copy), "a refused schema leaves the buffer as it was");
    free(copy);
    /* every rule defined once; b's rules all named b or b-... */
    size_t n_rules = 0, dup = 0, stray = 0;
    char names[256][128];
    for (const char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : "") {
        const char *def = strstr(line, " ::= ");
        if (!def || def - line >= 128 || n_rules >= 256) continue;
        memcpy(names[n_rules], line, (size_t)(def - line));
        names[n_rules][def - line] = 0;
        for (size_t i = 0; i < n_rules; i++) dup += !strcmp(names[i], names[n_rules]);
        if ((size_t)(line - buf) >= len_a && strcmp(names[n_rules], "b") && strncmp(names[n_rules], "b-", 2))
            stray++;
        n_rules++;
    }
    KT_CHECK(n_rules > 10 && !dup && !stray, "%zu rules, %zu defined twice, %zu misnamed", n_rules, dup,
             stray);
    /* one grammar choosing between them */
    const char *root = "root ::= \"A\" a | \"B\" b\n";
    size_t rl = strlen(root);
    char *text = malloc(len + rl + 1);
    if (text) {
        memcpy(text, root, rl);
        memcpy(text + rl, buf, len + 1);
        kipp_grammar *g = compile_text(text, len + rl, "two schemas");
        if (g) {
            KT_CHECK(matches_str(g, "A{\"x\":{\"n\":1}}") == 1 && matches_str(g, "A{\"x\":{}}") == 1);
            KT_CHECK(matches_str(g, "B\"bbb\"") == 1 && matches_str(g, "B[[],[[]]]") == 1);
            KT_CHECK(matches_str(g, "A\"bbb\"") == 0 && matches_str(g, "B{\"x\":{}}") == 0);
            KT_CHECK(matches_str(g, "B\"abb\"") == 0 && matches_str(g, "B[1]") == 0);
        }
        kipp_grammar_free(g);
    }
    free(text);
    free(buf);
    json_decref(a);
    json_decref(b);
    /* response_format json_object: any object */
    kipp_grammar *g = compile_schema(NULL, "json_object");
    if (g) {
        KT_CHECK(matches_str(g, "{}") == 1 && matches_str(g, "{\"a\":[1,{\"b\":null}]}") == 1);
        KT_CHECK(matches_str(g, "[]") == 0 && matches_str(g, "\"{}\"") == 0);
    }
    kipp_grammar_free(g);
}

/* ---- refusals: each names the keyword and where it is ---------------------------------------- */

static void test_errors(void) {
    static const char *const CASES[][2] = {
        {"{\"type\":\"integer\",\"multipleOf\":2}", "/multipleOf is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":0}}}",
         "/properties/a/minimum is not supported"},
        {"{\"type\":\"number\",\"exclusiveMaximum\":1}", "/exclusiveMaximum is not supported"},
        {"{\"maximum\":3}", "/maximum is not supported"},
        {"{\"type\":\"string\",\"format\":\"hostname\"}", "/format \"hostname\" is not supported"},
        {"{\"type\":\"object\",\"patternProperties\":{\"a\":{}}}", "/patternProperties is not supported"},
        {"{\"type\":\"object\",\"propertyNames\":{}}", "/propertyNames is not supported"},
        {"{\"type\":\"object\",\"minProperties\":1}", "/minProperties is not supported"},
        {"{\"type\":\"object\",\"maxProperties\":1}", "/maxProperties is not supported"},
        {"{\"type\":\"object\",\"dependentRequired\":{}}", "/dependentRequired is not supported"},
        {"{\"type\":\"object\",\"dependentSchemas\":{}}", "/dependentSchemas is not supported"},
        {"{\"type\":\"object\",\"unevaluatedProperties\":false}", "/unevaluatedProperties is not supported"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "/uniqueItems is not supported"},
        {"{\"type\":\"array\",\"contains\":{}}", "/contains is not supported"},
        {"{\"type\":\"array\",\"items\":{\"type\":\"array\",\"minContains\":1}}",
         "/items/minContains is not supported"},
        {"{\"type\":\"array\",\"additionalItems\":false}", "/additionalItems is not supported"},
        {"{\"type\":\"array\",\"unevaluatedItems\":false}", "/unevaluatedItems is not supported"},
        {"{\"type\":\"array\",\"items\":[{}]}", "/items must be a schema"},
        {"{\"not\":{\"type\":\"null\"}}", "/not is not supported"},
        {"{\"if\":{},\"then\":{}}", "/if is not supported"},
        {"{\"type\":\"string\",\"contentEncoding\":\"base64\"}", "/contentEncoding is not supported"},
        {"{\"type\":\"string\",\"nullable\":true}", "/nullable is not supported"},
        {"{\"$anchor\":\"a\"}", "/$anchor is not supported"},
        {"{\"$dynamicRef\":\"#a\"}", "/$dynamicRef is not supported"},
        {"{\"allOf\":[{},{}]}", "/allOf with 2 members is not supported"},
        {"{\"allOf\":[{\"type\":\"string\"}],\"minLength\":2}", "/minLength next to allOf is not supported"},
        {"{\"anyOf\":[{\"type\":\"string\"}],\"type\":\"string\"}", "/type next to anyOf is not supported"},
        {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", "/oneOf is not supported"},
        {"{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]},"
         "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[2,1.0]}},\"required\":[\"k\"]}]}",
         "/oneOf is not supported"},
        {"{\"properties\":{\"p\":{\"$ref\":\"#/$defs/x\",\"maxLength\":1}},\"$defs\":{\"x\":{}}}",
         "/properties/p/maxLength next to $ref is not supported"},
        {"{\"$ref\":\"https://example.com/s.json\"}",
         "/$ref \"https://example.com/s.json\" is not supported"},
        {"{\"$ref\":\"#/$defs/missing\"}", "/$ref \"#/$defs/missing\" does not resolve"},
        {"{\"$ref\":\"#\"}", "left recursion"},
        {"{\"anyOf\":[{\"$ref\":\"#/$defs/"
         "a\"},{\"type\":\"null\"}],\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#\"}]}}}",
         "left recursion"},
        {"{\"type\":\"string\",\"pattern\":\"(?=a)b\"}", "/pattern: a lookaround"},
        {"{\"type\":\"string\",\"pattern\":\"a(?<!b)\"}", "/pattern: a lookaround"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "/pattern: a backreference"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\bword\"}", "/pattern: the word boundary"},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", "/pattern: an anchor"},
        {"{\"type\":\"string\",\"pattern\":\"\\\\p{L}\"}", "/pattern: a Unicode property"},
        {"{\"type\":\"string\",\"pattern\":\"*a\"}", "/pattern: a quantifier with nothing to repeat"},
        {"{\"type\":\"string\",\"pattern\":\"(a\"}", "/pattern: an unbalanced ("},
        {"{\"type\":\"string\",\"pattern\":\"[a\"}", "/pattern: an unterminated class"},
        {"{\"type\":\"string\",\"pattern\":\"a\",\"minLength\":1}", "/minLength/maxLength next to pattern"},
        {"{\"type\":\"string\",\"format\":\"date\",\"maxLength\":1}", "next to format is not supported"},
        {"{\"type\":\"integer\",\"minimum\":10,\"maximum\":5}", "/minimum and /maximum leave no integer"},
        {"{\"type\":\"integer\",\"minimum\":1e20}", "/minimum leaves no integer of at most 16 digits"},
        {"{\"type\":\"integer\",\"exclusiveMaximum\":-9999999999999999}", "/exclusiveMaximum leaves no"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "/minLength is above maxLength"},
        {"{\"type\":\"string\",\"maxLength\":2000000}", "/maxLength above 1000000"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "/minItems 3 cannot be met"},
        {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}",
         "/minItems 2 cannot be met"},
        {"{\"type\":\"object\",\"required\":[\"x\"]}", "/required/0: \"x\" is not in properties"},
        {"{\"type\":\"object\",\"properties\":{\"x\":false},\"required\":[\"x\"]}", "/properties/x is false"},
        {"{\"type\":\"strin\"}", "/type must be"},
        {"{\"enum\":[]}", "/enum: no value"},
        {"{\"type\":\"string\",\"enum\":[1,2]}", "/enum: no value"},
        {"{\"properties\":{\"a~b/c\":{\"foo\":1}}}", "/properties/a~0b~1c/foo is not supported"},
        {"{\"$defs\":{\"n\":{\"bar\":1}},\"$ref\":\"#/$defs/n\"}", "/$defs/n/bar is not supported"},
        {"{\"properties\":{\"a\":{\"$id\":\"x\"}}}", "/properties/a/$id is only supported at the root"},
        {"false", "is false"},
        {"3", "not an object or a boolean"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        json_t *s = parse(CASES[i][0]);
        if (!s) continue;
        char *buf = strdup("x ::= \"x\"\n"), err[512] = "";
        size_t len = strlen(buf), cap = len + 1;
        int rc = kipp_json_schema_rules(s, "t", &buf, &len, &cap, err, sizeof err);
        KT_CHECK(rc == -1 && strstr(err, CASES[i][1]), "%s: got rc %d, \"%s\"; want \"%s\"", CASES[i][0], rc,
                 err, CASES[i][1]);
        KT_CHECK(len == 10 && buf && !strcmp(buf, "x ::= \"x\"\n"), "%s: the buffer changed on error",
                 CASES[i][0]);
        free(buf);
        json_decref(s);
    }
    /* nesting is bounded (a $ref chain makes rules instead) */
    char deep[80 * 12 + 8];
    size_t n = 0;
    for (int i = 0; i < 70; i++) n += (size_t)snprintf(deep + n, sizeof deep - n, "{\"items\":");
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{}");
    for (int i = 0; i < 70; i++) deep[n++] = '}';
    deep[n] = 0;
    json_t *d = parse(deep);
    char err[512] = "", *out = NULL;
    size_t out_len = 0;
    KT_CHECK(d && kipp_json_schema_grammar(d, &out, &out_len, err, sizeof err) == -1 &&
                 strstr(err, "nested deeper"),
             "70 nested schemas: %s", err);
    free(out);
    json_decref(d);
    /* the keywords it ignores are only annotations */
    json_t *s = parse(
        "{\"type\":\"string\",\"title\":\"t\",\"description\":\"d\",\"default\":\"x\",\"examples\":[\"y\"],"
        "\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"urn:x\",\"strict\":true,"
        "\"$comment\":\"c\",\"deprecated\":false,\"readOnly\":false,\"writeOnly\":false}");
    kipp_grammar *g = compile_schema(s, "annotations");
    if (g) KT_CHECK(matches_str(g, "\"s\"") == 1 && matches_str(g, "1") == 0);
    kipp_grammar_free(g);
    json_decref(s);
}

void kt_suite_json_schema(void) {
    test_corpus();
    test_bounds();
    test_integer_ranges();
    test_big_counts();
    test_multi();
    test_errors();
}
