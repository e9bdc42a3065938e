/* kt.h — the tiny test harness shared by the unit suites inside build/kipp_test.
 * KT_CHECK counts a pass or prints the failing expression with its location. */
#ifndef KIPP_KT_H
#define KIPP_KT_H

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

extern int kt_passed, kt_failed;

#define KT_CHECK(cond, ...)                                                                  \
    do {                                                                                     \
        if (cond) {                                                                          \
            kt_passed++;                                                                     \
        } else {                                                                             \
            kt_failed++;                                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                  \
            fprintf(stderr, " " __VA_ARGS__);                                                \
            fputc('\n', stderr);                                                             \
        }                                                                                    \
    } while (0)

/* Unit suites: each returns nothing and reports through KT_CHECK. */
void kt_suite_types(void);
void kt_suite_buf(void);       /* core growable buffer and array growth (test_buf.c) */
void kt_suite_vmath(void);     /* log-sum-exp and top k of a logits row (test_vmath.c) */
void kt_suite_fair(void);      /* fair steps in continuous batching (test_fair.c) */
void kt_suite_threadpool(void); /* the CPU thread pool's chunks (test_threadpool.c) */
void kt_suite_gguf(void);
void kt_suite_arch(void);     /* the architecture table (test_arch.c) */
void kt_suite_rope(void);     /* rope scaling's frequencies vs HF transformers (test_rope.c) */
void kt_suite_program(void);  /* the layer program's driver (test_program.c) */
void kt_suite_sampler(void);
void kt_suite_tok(void);
void kt_suite_detok(void);     /* streaming detokenizer (tests/unit/test_detok.c) */
void kt_suite_think(void);     /* the reasoning gate before the matcher (test_think.c) */
void kt_suite_chat(void);      /* chat template renderer + Python-compatible JSON */
void kt_suite_reasoning(void); /* <think> ... </think> streaming split */
void kt_suite_kv(void);        /* block pool, tables, refcounts, copy-on-write */
void kt_suite_kv_track(void);  /* KV-cache events' holder counts (test_kv_track.c) */
void kt_suite_cpu_kernels(void); /* cpu backend kernels vs scalar reference */
void kt_suite_cuda_quant_math(void); /* cuda dequantization (host side of quant_math.h) */
void kt_suite_cuda_ops_math(void);   /* cuda conversions, silu, KV addressing, MoE router (ops_math.h) */
void kt_suite_cuda_probe(void);      /* cuda start-up decision: every fatal message */
/* The byte offsets of a quantized block's f16 scale fields (-1: none), for tests that plant
 * extreme scales (test_cuda_quant_math.c; the cuda operator tests use it too). */
void kt_scale_offsets(uint32_t type, int off[3]);
void kt_suite_grammar(void);     /* EBNF compiler, matcher, token masks (test_grammar.c) */
void kt_suite_json_schema(void); /* JSON Schema -> grammar (test_json_schema.c) */
void kt_suite_toolcall(void);    /* <tool_call> parsing, streaming (test_toolcall.c) */

/* Test oracle for the GPT-2 byte map (tests/unit/test_tok.c), written independently of
 * vocab.c: the UTF-8 text (1 or 2 bytes) of byte b's vocabulary symbol. */
size_t kt_byte_token_text(unsigned b, char out[2]);

/* Streaming text through the CLI and server paths vs whole decode, for each line of a
 * corpus file (tests/unit/test_detok_paths.c): returns mismatches, or -1. */
int kt_detok_paths(const char *gguf_path, const char *corpus_path);
/* Special-token text in chat content as text (tests/unit/test_content_special.c). */
int kt_content_special(const char *gguf_path, const char *unused);
/* Token masks over a real vocabulary vs brute force (tests/unit/test_grammar_vocab.c). */
int kt_grammar_vocab(const char *gguf_path, const char *unused);
/* Tokenizer vs HF ids in a JSONL file: returns mismatches, or -1 if inputs are unusable. */
int kt_tok_golden(const char *gguf_path, const char *jsonl_path);
/* Chat renderings vs HF apply_chat_template goldens in a directory: returns mismatches, or
 * -1 if inputs are unusable. */
int kt_chat_golden(const char *gguf_path, const char *dir);

#endif
