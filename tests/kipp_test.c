/* kipp_test.c — the test binary: unit suites with no arguments (or --unit), and the model
 * gates on a GGUF + golden-vector directory. Every mode ends with "N passed, N failed" and
 * exits non-zero on any failure. */
#include "gates.h"
#include "kt.h"

#include <stdio.h>
#include <string.h>

int kt_passed, kt_failed;



static void usage(void) {
    fprintf(stderr,
            "usage: kipp_test [--unit]\n"
            "       kipp_test --model M V         cpu-ref logits vs golden vectors (bound, argmax)\n"
            "       kipp_test --phase2-model M V  cached decode vs full recomputation (1e-6)\n"
            "       kipp_test --tok-golden M J    tokenizer vs HF ids in a JSONL file\n"
            "M is a GGUF file, V a directory made by tools/make_vectors.py.\n");
}

int main(int argc, char **argv) {
    if (argc == 1 || (argc == 2 && strcmp(argv[1], "--unit") == 0)) {
        kt_suite_types();
        kt_suite_gguf();
        kt_suite_sampler();
        kt_suite_tok();
        kt_suite_cli();
    } else if (argc == 4 && strcmp(argv[1], "--model") == 0) {
        if (kt_gate_golden(argv[2], argv[3]) && kt_failed == 0) kt_failed = 1;
    } else if (argc == 4 && strcmp(argv[1], "--phase2-model") == 0) {
        if (kt_gate_phase2(argv[2], argv[3]) && kt_failed == 0) kt_failed = 1;
    } else if (argc == 4 && strcmp(argv[1], "--tok-golden") == 0) {
        int bad = kt_tok_golden(argv[2], argv[3]); /* < 0: inputs unusable */
        if (bad) kt_failed += bad > 0 ? bad : 1; /* each matching line counted a pass */
    } else {
        usage();
        return 2;
    }
    printf("%d passed, %d failed\n", kt_passed, kt_failed);
    return kt_failed ? 1 : 0;
}
