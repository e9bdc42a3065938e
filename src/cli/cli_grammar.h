/* cli_grammar.h — kipp's constrained-output flags (llama.cpp's names where it has them):
 * --grammar-file FILE (docs/grammar.md), --json-schema FILE (docs/structured-output.md) and
 * --json (any JSON object), their help, and the matcher they ask for. */
#ifndef KIPP_CLI_GRAMMAR_H
#define KIPP_CLI_GRAMMAR_H

#include "engine/grammar.h"
#include "kipp.h"

#include <stdio.h>

typedef struct {
    const char *grammar_file, *schema_file;
    int json;
    const char *first_flag; /* for messages */
} kipp_cli_grammar;

/* As kipp_cli_spec_flag: 1 consumed, 2 bad value or a second of these flags (printed), 0
 * not one of these flags. */
int kipp_cli_grammar_flag(const char *prog, int argc, char **argv, int *i, kipp_cli_grammar *o);
void kipp_cli_grammar_help(FILE *f, int width);
/* The matcher the flags ask for over m's vocabulary (*out NULL when none is asked). 0
 * after printing why not (a file missing, a grammar error with its line, a schema keyword
 * that cannot be enforced). *trie must be freed after the matcher. */
int kipp_cli_grammar_start(const char *prog, const kipp_cli_grammar *o, const kipp_model *m,
                           kipp_token_trie **trie, kipp_matcher **out);

#endif
