/* kipp_test.c — the test binary: unit suites with no arguments (or --unit), and the model
 * gates on a GGUF + golden-vector directory. Every mode ends with "N passed, N failed" and
 * exits non-zero on any failure. */
#include "gates.h"
#include "kt.h"

#include <stdio.h>
#include <string.h>

int kt_passed, kt_failed;

/* Gates and golden checks: (model, dir-or-file) → failures (< 0: inputs unusable). */
static const struct {
    const char *flag, *args, *what;
    int (*run)(const char *, const char *);
} modes[] = {
    {"--model", "M V", "cpu-ref logits vs golden vectors (bound, exact argmax)", kt_gate_golden},
    {"--phase2-model", "M V", "cached decode vs full recomputation (1e-6)", kt_gate_phase2},
    {"--multilogit", "M V", "N-token forward vs N single-token steps (1e-6)", kt_gate_multilogit},
    {"--paged-cpu", "M V", "adversarial block tables vs identity layout (1e-6)", kt_gate_paged},
    {"--pooled-cpu", "M V", "interleaved sequences in one pool vs solo runs (1e-6)", kt_gate_pooled},
    {"--fault-reference", "M V", "identity-layout tolerance gate vs golden vectors",
     kt_gate_fault_reference},
    {"--cpu-vs-ref", "M V", "cpu backend vs cpu-ref, every ISA level, 1/2 threads (NMSE 1e-4)",
     kt_gate_cpu_vs_ref},
    {"--cpu-vs-ref-shape", "M", "cpu vs cpu-ref on a model without vectors (random real shapes)",
     kt_gate_cpu_vs_ref_shape},
    {"--sched", "M", "scheduler: solo == batch of 8 == prefix cache == preemption; cancel, queue",
     kt_gate_sched},
    {"--tok-golden", "M J", "tokenizer vs HF ids in a JSONL file", kt_tok_golden},
    {"--chat-golden", "M D", "chat template vs HF apply_chat_template renderings", kt_chat_golden},
    {"--detok-paths", "M F", "CLI and server streaming text == whole decode on a corpus",
     kt_detok_paths},
    {"--content-special", "M", "special-token text in chat content read as text when asked",
     kt_content_special},
};

static void usage(void) {
    fprintf(stderr, "usage: kipp_test [--unit]\n");
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
        fprintf(stderr, "       kipp_test %-17s %s  %s\n", modes[i].flag, modes[i].args,
                modes[i].what);
    fprintf(stderr, "M is a GGUF file, V a directory made by tools/make_vectors.py.\n");
}

int main(int argc, char **argv) {
    if (argc == 1 || (argc == 2 && strcmp(argv[1], "--unit") == 0)) {
        kt_suite_types();
        kt_suite_gguf();
        kt_suite_sampler();
        kt_suite_tok();
        kt_suite_detok();
        kt_suite_chat();
        kt_suite_reasoning();
        kt_suite_kv();
        kt_suite_cpu_kernels();
    } else {
        size_t i = 0, n = sizeof modes / sizeof modes[0];
        /* modes take two arguments ("M V") or one ("M") */
        while (i < n && !(argc == (modes[i].args[1] ? 4 : 3) && strcmp(argv[1], modes[i].flag) == 0))
            i++;
        if (i == n) {
            usage();
            return 2;
        }
        /* Passes are counted inside. A mode returns its failures: those it did not already
         * count with KT_CHECK are added, and unusable inputs (< 0) count as one. */
        int failed0 = kt_failed;
        int bad = modes[i].run(argv[2], argc == 4 ? argv[3] : NULL);
        if (bad > 0 && kt_failed - failed0 < bad) kt_failed = failed0 + bad;
        if (bad < 0 && kt_failed == failed0) kt_failed++;
    }
    printf("%d passed, %d failed\n", kt_passed, kt_failed);
    return kt_failed ? 1 : 0;
}
