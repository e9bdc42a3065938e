/* cli_grammar.c — see cli_grammar.h. */
#include "cli/cli_grammar.h"

#include "cli/cli_args.h"
#include "engine/json_schema.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GRAMMAR_BYTES (16u << 20)

int kipp_cli_grammar_flag(const char *prog, int argc, char **argv, int *i, kipp_cli_grammar *o) {
    const char *a = argv[*i];
    if (strcmp(a, "--grammar-file") && strcmp(a, "--json-schema") && strcmp(a, "--json")) return 0;
    if (o->first_flag) {
        fprintf(stderr, "%s: %s and %s both constrain the output; give one\n", prog, o->first_flag, a);
        return 2;
    }
    o->first_flag = a;
    if (!strcmp(a, "--json")) {
        o->json = 1;
        return 1;
    }
    if (*i + 1 >= argc || !*argv[*i + 1]) {
        fprintf(stderr, "%s: %s needs a file (see --help)\n", prog, a);
        return 2;
    }
    const char *v = argv[++*i];
    if (!strcmp(a, "--grammar-file")) o->grammar_file = v;
    else o->schema_file = v;
    return 1;
}

void kipp_cli_grammar_help(FILE *f, int width) {
    static const char *const rows[][2] = {
        {"--grammar-file FILE", "the output follows this grammar (docs/grammar.md)"},
        {"--json-schema FILE", "the output is JSON valid against this JSON Schema"},
        {"--json", "the output is a JSON object"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        fprintf(f, "      %-*s%s\n", width - 6, rows[i][0], rows[i][1]);
    fprintf(f, "      %-*s%s\n", width - 6, "", "(with --chat and thinking on, after </think>)");
}

static char *read_file(const char *prog, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open %s\n", prog, path);
        return NULL;
    }
    int too_big = 0;
    char *s = kipp_cli_read_all(f, MAX_GRAMMAR_BYTES, len, &too_big);
    fclose(f);
    if (!s) fprintf(stderr, "%s: %s: %s\n", prog, path, too_big ? "larger than 16 MiB" : "cannot read it");
    return s;
}

int kipp_cli_grammar_start(const char *prog, const kipp_cli_grammar *o, const kipp_model *m,
                           kipp_token_trie **trie, kipp_matcher **out) {
    *out = NULL;
    *trie = NULL;
    if (!o->first_flag) return 1;
    char err[KIPP_ERR_LEN];
    char *text = NULL;
    size_t len = 0;
    const char *what = o->grammar_file ? o->grammar_file : o->schema_file ? o->schema_file : "--json";
    if (o->grammar_file) {
        if (!(text = read_file(prog, o->grammar_file, &len))) return 0;
    } else {
        json_t *schema = NULL;
        if (o->schema_file) {
            char *src = read_file(prog, o->schema_file, &len);
            if (!src) return 0;
            json_error_t je;
            schema = json_loadb(src, len, 0, &je);
            free(src);
            if (!schema) {
                fprintf(stderr, "%s: %s: not JSON (line %d: %s)\n", prog, o->schema_file, je.line, je.text);
                return 0;
            }
        }
        const int rc = kipp_json_schema_grammar(schema, &text, &len, err, sizeof err);
        json_decref(schema);
        if (rc) {
            fprintf(stderr, "%s: %s: %s\n", prog, what, err);
            return 0;
        }
    }
    kipp_grammar *g = NULL;
    kipp_status st = kipp_grammar_compile(text, len, &g, err, sizeof err);
    free(text);
    if (st == KIPP_OK) st = kipp_token_trie_build(m, trie, err, sizeof err);
    if (st == KIPP_OK) st = kipp_matcher_new(g, *trie, out, err, sizeof err);
    if (st != KIPP_OK) {
        fprintf(stderr, "%s: %s: %s\n", prog, what, err);
        kipp_grammar_free(g);
        kipp_token_trie_free(*trie);
        *trie = NULL;
        return 0;
    }
    kipp_matcher_own_grammar(*out);
    return 1;
}
