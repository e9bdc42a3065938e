/* kipp_test.c — the test binary: unit suites with no arguments (or --unit [SUITE...]), and the model
 * gates on a GGUF + golden-vector directory. Every mode ends with "N passed, N failed" and
 * exits non-zero on any failure. */
#include "gates.h"
#include "kt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kt_passed, kt_failed;

/* The GPU operator tests (tests/cuda/cuda_ops.c) are linked into build/kipp_test_cuda only;
 * here a weak reference, null in the ordinary kipp_test. */
int kt_cuda_operators(const char *unused1, const char *unused2) __attribute__((weak));
static int cuda_operators(const char *a, const char *b) {
    if (!kt_cuda_operators) {
        fprintf(stderr, "kipp_test: --cuda-operators: this binary has no cuda backend; build and "
                        "run build/kipp_test_cuda (`make test-cuda`, on a machine with an "
                        "NVIDIA GPU)\n");
        return -1;
    }
    return kt_cuda_operators(a, b);
}

/* The vulkan operator tests (tests/vulkan/) are in every kipp_test built with the vulkan
 * backend (it opens the loader at run time); a weak reference for builds without it. */
int kt_vulkan_operators(const char *unused1, const char *unused2) __attribute__((weak));
static int vulkan_operators(const char *a, const char *b) {
    if (!kt_vulkan_operators) {
        fprintf(stderr, "kipp_test: --vulkan-operators: this binary was built without the vulkan "
                        "backend (glslc and the Vulkan headers were missing: run make deps and "
                        "rebuild)\n");
        return -1;
    }
    return kt_vulkan_operators(a, b);
}

/* Modes: (model, dir-or-file) → failures (< 0: inputs unusable). Model gates (gate set)
 * take the trailing flags; the tokenizer and text checks (run set) take none. */
enum { NO_FLAGS = 0, BACKEND_FLAGS = 1, CTX_FLAG = 2 };
static const struct {
    const char *flag, *args, *what;
    int (*gate)(const char *, const char *, const kt_opts *);
    int (*run)(const char *, const char *);
    int flags;
} modes[] = {
    {"--model", "M V", "golden vectors: bound + exact argmax on cpu-ref; elsewhere argmax + NMSE 1e-4 vs cpu-ref",
     kt_gate_golden, NULL, BACKEND_FLAGS},
    {"--phase2-model", "M V", "cached decode vs full recomputation, same backend (1e-6)", kt_gate_phase2,
     NULL, BACKEND_FLAGS},
    {"--multilogit", "M V", "N-token forward vs N single-token steps (1e-6)", kt_gate_multilogit, NULL,
     BACKEND_FLAGS},
    {"--paged-cpu", "M V", "adversarial block tables vs identity layout (1e-6)", kt_gate_paged, NULL,
     BACKEND_FLAGS},
    {"--pooled-cpu", "M V", "interleaved sequences in one pool vs solo runs (1e-6)", kt_gate_pooled, NULL,
     BACKEND_FLAGS},
    {"--fault-reference", "M V", "the golden checks on the identity layout (fault matrix)",
     kt_gate_fault_reference, NULL, BACKEND_FLAGS},
    {"--longctx", "M [V]", "decode to n_ctx_train: cached vs recomputed (1e-6) far out, vs cpu-ref",
     kt_gate_longctx, NULL, BACKEND_FLAGS | CTX_FLAG},
    {"--cpu-vs-ref", "M V", "a backend (default cpu: every ISA level) vs cpu-ref, 1/2 threads (NMSE 1e-4)",
     kt_gate_cpu_vs_ref, NULL, BACKEND_FLAGS},
    {"--cpu-vs-ref-shape", "M", "the same on a model without vectors (random real shapes)",
     kt_gate_cpu_vs_ref_shape, NULL, BACKEND_FLAGS},
    {"--sched", "M", "scheduler (default cpu): solo == batch of 8 == prefix cache == preemption",
     kt_gate_sched, NULL, BACKEND_FLAGS},
    {"--draft-spec", "M D", "speculative decoding: greedy == plain with the target, each draft in D (comma-separated) and prompt lookup, alone and batched (default cpu); rollback",
     kt_gate_draft_spec, NULL, BACKEND_FLAGS},
    {"--spec-stat", "", "speculative sampling: emitted tokens distributed as plain sampling (chi-square)",
     kt_gate_spec_stat, NULL, NO_FLAGS},
    {"--embed-golden", "M V", "embedding model: last-token embeddings vs HF goldens (cosine 0.9999, max |a-b|), single and batched",
     kt_gate_embed_golden, NULL, BACKEND_FLAGS},
    {"--tok-golden", "M J", "tokenizer vs HF ids in a JSONL file", NULL, kt_tok_golden, NO_FLAGS},
    {"--chat-golden", "M D", "chat template vs HF apply_chat_template renderings", NULL, kt_chat_golden,
     NO_FLAGS},
    {"--detok-paths", "M F", "CLI and server streaming text == whole decode on a corpus", NULL,
     kt_detok_paths, NO_FLAGS},
    {"--content-special", "M", "special-token text in chat content read as text when asked", NULL,
     kt_content_special, NO_FLAGS},
    {"--cuda-operators", "", "every cuda kernel vs the CPU reference on random inputs, many shapes "
     "(kipp_test_cuda on a GPU)", NULL, cuda_operators, NO_FLAGS},
    {"--vulkan-operators", "", "the vulkan runtime and every vulkan kernel vs the CPU reference, many "
     "shapes (the first Vulkan device; KIPP_VK_DEVICE=N)", NULL, vulkan_operators, NO_FLAGS},
    {"--grammar-vocab", "M", "grammar token masks over the model's vocabulary == brute force", NULL,
     kt_grammar_vocab, NO_FLAGS},
};
#define N_MODES (sizeof modes / sizeof modes[0])

/* The unit suites, in the order --unit runs them; kipp_test --unit NAME... runs some. */
static const struct {
    const char *name, *what;
    void (*run)(void);
} suites[] = {
    {"types", "tensor types, dequantization vs gguf-py fixtures", kt_suite_types},
    {"buf", "core growable buffer and array growth", kt_suite_buf},
    {"vmath", "log-sum-exp and top k of a logits row (log-probabilities)", kt_suite_vmath},
    {"gguf", "GGUF reader on valid and malformed files", kt_suite_gguf},
    {"arch", "architecture table: fields, shapes, each op's tensors bound", kt_suite_arch},
    {"rope", "rope scaling (none, linear, YaRN): inverse frequencies and attention factor vs HF", kt_suite_rope},
    {"program", "the layer program's driver: each program op as backend operations", kt_suite_program},
    {"sampler", "sampling", kt_suite_sampler},
    {"tok", "tokenizer: pre-tokenizer, BPE, added tokens, NFC, invalid UTF-8", kt_suite_tok},
    {"detok", "streaming detokenizer", kt_suite_detok},
    {"chat", "chat template renderer, Python-compatible JSON", kt_suite_chat},
    {"reasoning", "<think> streaming split", kt_suite_reasoning},
    {"kv", "KV block pool, tables, refcounts, copy-on-write", kt_suite_kv},
    {"kv_track", "KV-cache events: blocks held by hash, stored once, removed with the last holder", kt_suite_kv_track},
    {"cpu_kernels", "cpu kernels of every ISA level vs scalar references", kt_suite_cpu_kernels},
    {"cuda_quant_math", "cuda dequantization, host side", kt_suite_cuda_quant_math},
    {"cuda_ops_math", "cuda conversions, silu, KV addressing, MoE router, host side", kt_suite_cuda_ops_math},
    {"cuda_probe", "cuda start-up decision", kt_suite_cuda_probe},
    {"grammar", "grammar compiler, matcher, token masks", kt_suite_grammar},
    {"json_schema", "JSON Schema -> grammar", kt_suite_json_schema},
    {"toolcall", "tool-call splitter", kt_suite_toolcall},
    {"think", "reasoning prefix gate before the grammar", kt_suite_think},
    {"fair", "fair steps: step-time line, decoding sequences chosen beside light requests", kt_suite_fair},
    {"threadpool", "thread pool: every index once, fixed chunks, a held thread does not hold the job", kt_suite_threadpool},
};
#define N_SUITES (sizeof suites / sizeof suites[0])

static void usage(void) {
    fprintf(stderr, "usage: kipp_test [--unit [SUITE...]]   (--unit --list names the suites)\n");
    for (size_t i = 0; i < N_MODES; i++)
        fprintf(stderr, "       kipp_test %-17s %-5s  %s\n", modes[i].flag, modes[i].args,
                modes[i].what);
    fprintf(stderr,
            "M is a GGUF file, V a directory made by tools/make_vectors.py.\n"
            "Model gates (--model ... --sched) take trailing flags:\n"
            "  --backend NAME   backend under test (%s); default cpu-ref, cpu for --sched and\n"
            "                   --cpu-vs-ref*; the reference is always cpu-ref with f32 KV\n"
            "  --kv-type T      KV cache type: f32, f16, bf16, q8_0, q4_0 or default (the\n"
            "                   backend's); K/V (e.g. q8_0/q4_0) gives K and V each a type\n"
            "  --ctx N          --longctx only: positions to reach (default: n_ctx_train)\n",
            kipp_backend_names());
}

/* Parses the trailing flags argv[i..argc) into o; 0 (after saying why) on a bad one. */
static int parse_flags(int flags, const char *mode, int i, int argc, char **argv, kt_opts *o) {
    int seen_kv = 0;
    for (; i < argc; i += 2) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const int is_backend = strcmp(f, "--backend") == 0, is_kv = strcmp(f, "--kv-type") == 0,
                  is_ctx = strcmp(f, "--ctx") == 0;
        if (!is_backend && !is_kv && !is_ctx) {
            fprintf(stderr, "kipp_test: %s: unknown argument '%s'\n", mode, f);
            return 0;
        }
        if (!(flags & BACKEND_FLAGS) || (is_ctx && !(flags & CTX_FLAG))) {
            fprintf(stderr, "kipp_test: %s does not take %s\n", mode, f);
            return 0;
        }
        if (!v || !*v || strncmp(v, "--", 2) == 0) {
            fprintf(stderr, "kipp_test: %s needs a value\n", f);
            return 0;
        }
        if ((is_backend && o->backend) || (is_kv && seen_kv) || (is_ctx && o->ctx)) {
            fprintf(stderr, "kipp_test: %s given twice\n", f);
            return 0;
        }
        if (is_backend) o->backend = v;
        if (is_kv) {
            char err[KIPP_ERR_LEN];
            char kbuf[16];
            const char *slash = strchr(v, '/');
            snprintf(kbuf, sizeof kbuf, "%.*s", slash ? (int)(slash - v) : (int)strlen(v), v);
            if (kipp_kv_type_parse(kbuf, &o->kv_type, err, sizeof err) != KIPP_OK ||
                (slash && kipp_kv_type_parse(slash + 1, &o->kv_type_v, err, sizeof err) != KIPP_OK)) {
                fprintf(stderr, "kipp_test: --kv-type: %s\n", err);
                return 0;
            }
            seen_kv = 1;
        }
        if (is_ctx) {
            char *end;
            unsigned long n = strtoul(v, &end, 10);
            if (*end || n == 0 || n > UINT32_MAX || v[0] == '-') {
                fprintf(stderr, "kipp_test: --ctx needs a positive number, not '%s'\n", v);
                return 0;
            }
            o->ctx = (uint32_t)n;
        }
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc == 1 || strcmp(argv[1], "--unit") == 0) {
        /* --unit [SUITE...]: the named suites (all without names); --unit --list names them */
        if (argc == 3 && strcmp(argv[2], "--list") == 0) {
            for (size_t k = 0; k < N_SUITES; k++) printf("%-16s %s\n", suites[k].name, suites[k].what);
            return 0;
        }
        for (int a = 2; a < argc; a++) {
            size_t k = 0;
            while (k < N_SUITES && strcmp(argv[a], suites[k].name) != 0) k++;
            if (k == N_SUITES) {
                fprintf(stderr, "kipp_test: --unit: unknown suite '%s' (kipp_test --unit --list "
                                "names them)\n", argv[a]);
                return 2;
            }
        }
        for (size_t k = 0; k < N_SUITES; k++) {
            int wanted = argc <= 2;
            for (int a = 2; a < argc && !wanted; a++) wanted = strcmp(argv[a], suites[k].name) == 0;
            if (wanted) suites[k].run();
        }
    } else {
        size_t i = 0;
        while (i < N_MODES && strcmp(argv[1], modes[i].flag) != 0) i++;
        if (i == N_MODES) {
            fprintf(stderr, "kipp_test: unknown mode '%s'\n", argv[1]);
            usage();
            return 2;
        }
        /* positional arguments: "M V" two, "M" one, "M [V]" one or two */
        const char *args = modes[i].args;
        const int n_req = !args[0] ? 0 : args[1] && args[2] != '[' ? 2 : 1,
                  n_opt = args[0] && args[1] && args[2] == '[';
        int n_pos = 0;
        while (2 + n_pos < argc && n_pos < n_req + n_opt && strncmp(argv[2 + n_pos], "--", 2) != 0)
            n_pos++;
        kt_opts o = {0};
        if (n_pos < n_req) {
            fprintf(stderr, "kipp_test: %s needs %s\n", modes[i].flag, args);
            usage();
            return 2;
        }
        if (!parse_flags(modes[i].flags, modes[i].flag, 2 + n_pos, argc, argv, &o)) {
            usage();
            return 2;
        }
        const char *a2 = n_pos == 2 ? argv[3] : NULL;
        /* Passes are counted inside. A mode returns its failures: those it did not already
         * count with KT_CHECK are added, and unusable inputs (< 0) count as one. */
        int failed0 = kt_failed;
        const char *a1 = n_pos >= 1 ? argv[2] : NULL;
        int bad = modes[i].gate ? modes[i].gate(a1, a2, &o) : modes[i].run(a1, a2);
        if (bad > 0 && kt_failed - failed0 < bad) kt_failed = failed0 + bad;
        if (bad < 0 && kt_failed == failed0) kt_failed++;
    }
    printf("%d passed, %d failed\n", kt_passed, kt_failed);
    return kt_failed ? 1 : 0;
}
