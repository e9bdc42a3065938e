/* cli_args.h — what the command-line front ends (kipp, kipp-chat, kipp-server) share:
 * flag-value parsing (bounded integers and numbers, byte sizes, the sampling flags, the
 * runtime flags --backend/--isa/--kv-type), the stdout check before streaming text, and the
 * start-up description of a context. Messages go to stderr, prefixed with the program's
 * name. Not for the library (it never prints). */
#ifndef KIPP_CLI_ARGS_H
#define KIPP_CLI_ARGS_H

#include "kipp.h"

#include <stdint.h>
#include <stdio.h>

/* 1 and *out set, or 0 with "PROG: FLAG expects ..." printed. */
int kipp_cli_long(const char *prog, const char *flag, const char *s, long lo, long hi, long *out);
int kipp_cli_float(const char *prog, const char *flag, const char *s, float lo, float hi,
                   float *out);
/* A byte count: a whole number with an optional suffix K, M, G, KiB, MiB or GiB (all
 * powers of 1024), in [lo, hi]. 1 and *out set, or 0 with a message naming FLAG. */
int kipp_cli_bytes(const char *prog, const char *flag, const char *s, uint64_t lo, uint64_t hi,
                   uint64_t *out);

/* argv[*i] is looked at: a sampling flag (--temp, --greedy, --top-k, --top-p, --min-p,
 * --repeat-penalty, --repeat-last-n, --presence-penalty, --frequency-penalty, -s/--seed)
 * is parsed into sp, *i moving past its value: returns 1, or 2 after printing why its
 * value is missing or bad. Any other flag: 0, nothing consumed. */
int kipp_cli_sampling_flag(const char *prog, int argc, char **argv, int *i,
                           kipp_sampler_params *sp);

/* What every binary runs on: --backend NAME, --isa LEVEL, --kv-type T and llama.cpp's
 * --cache-type-k T --cache-type-v T (accepted only when both are given and equal: Kipp
 * stores K and V in one type). */
typedef struct {
    const char *backend;  /* --backend; default kipp_backend_default() */
    const char *isa;      /* --isa, else $KIPP_CPU_ISA when set, else NULL (the best level) */
    int isa_from_env;     /* isa came from KIPP_CPU_ISA */
    int device;           /* --device N: a device backend's device index (default 0) */
    kipp_kv_type kv_type; /* K's (and V's): KIPP_KV_TYPE_DEFAULT unless a flag names one */
    kipp_kv_type kv_type_v; /* V's when --cache-type-k/-v name both; else DEFAULT (= kv_type) */
    const char *kv_flag, *cache_k, *cache_v; /* the values as given (for _finish) */
    kipp_rope_params rope; /* --rope-scaling and friends (cli/cli_rope.h); apply with
                              kipp_cli_rope_apply after loading the model */
} kipp_cli_runtime;

void kipp_cli_runtime_init(kipp_cli_runtime *rt);
/* Like kipp_cli_sampling_flag, for --backend, --isa, --device, --kv-type, --cache-type-k/-v. */
int kipp_cli_runtime_flag(const char *prog, int argc, char **argv, int *i, kipp_cli_runtime *rt);
/* After the last flag: checks --kv-type against --cache-type-k/-v and fills isa from
 * KIPP_CPU_ISA when --isa was not given. 1, or 0 after printing what is wrong. */
int kipp_cli_runtime_finish(const char *prog, kipp_cli_runtime *rt);
/* The help lines of those flags, the flag column padded to width. */
void kipp_cli_runtime_help(FILE *f, int width);
/* Prints "PROG: ERR" for a context (or scheduler) that did not start, and when the ISA
 * level came from KIPP_CPU_ISA and the message is about it, says so. */
void kipp_cli_ctx_error(const char *prog, const kipp_cli_runtime *rt, const char *err);

/* "backend cpu, ISA avx2, 2 threads, KV f16, KV pool 16 blocks of 16 tokens (256 tokens,
 * 393216 bytes, 1536 bytes/token)" — what a context runs on, for start-up lines. */
void kipp_cli_print_ctx_info(FILE *f, const kipp_ctx_info *ci);

/* Reads f to its end into a malloc'd, NUL-terminated buffer holding fewer than max bytes;
 * *len is the byte count. NULL with *too_big = 1 when f holds more, NULL with *too_big = 0
 * when memory runs out. Read errors end the text like end of file (check ferror(f)). */
char *kipp_cli_read_all(FILE *f, size_t max, size_t *len, int *too_big);

/* Seconds on a monotonic clock. */
double kipp_cli_now(void);

/* Before a front end writes text to stdout: 0, with a message, when stdout is closed (the
 * next open() would take fd 1 and receive the text); otherwise SIGPIPE is ignored, so a
 * closed pipe becomes a write error the caller reports (EPIPE), not a silent death. */
int kipp_cli_stdout_ready(const char *prog);

#endif
