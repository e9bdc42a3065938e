/* cli_args.c — see cli_args.h. */
#include "cli/cli_args.h"
#include "cli/cli_rope.h"

#include "core/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int kipp_cli_long(const char *prog, const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "%s: %s expects an integer in [%ld, %ld], got '%s'\n", prog, flag, lo, hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

int kipp_cli_float(const char *prog, const char *flag, const char *s, float lo, float hi,
                   float *out) {
    char *end;
    errno = 0;
    /* parsed as a double and then narrowed: strtof reports ERANGE for a float subnormal
     * such as 1e-38, which is a valid (tiny) value; a double that underflows is ~0 */
    double d = strtod(s, &end);
    if (errno == ERANGE && fabs(d) < 1.0) errno = 0;
    float v = (float)d;
    if (errno || end == s || *end != '\0' || !isfinite(d) || d < lo || d > hi || !isfinite(v)) {
        fprintf(stderr, "%s: %s expects a number in [%g, %g], got '%s'\n", prog, flag, (double)lo,
                (double)hi, s);
        return 0;
    }
    *out = v;
    return 1;
}

int kipp_cli_bytes(const char *prog, const char *flag, const char *s, uint64_t lo, uint64_t hi,
                   uint64_t *out) {
    static const struct { const char *name; uint64_t mult; } suffix[] = {
        {"", 1}, {"K", 1ull << 10}, {"KiB", 1ull << 10}, {"M", 1ull << 20}, {"MiB", 1ull << 20},
        {"G", 1ull << 30}, {"GiB", 1ull << 30}};
    char *end;
    errno = 0;
    const int digit = s[0] >= '0' && s[0] <= '9';
    unsigned long long v = digit ? strtoull(s, &end, 10) : 0;
    const int overflow = digit && errno == ERANGE;
    uint64_t mult = 0;
    if (digit)
        for (size_t k = 0; k < sizeof suffix / sizeof suffix[0]; k++)
            if (strcmp(end, suffix[k].name) == 0) mult = suffix[k].mult;
    if (!mult) {
        fprintf(stderr,
                "%s: %s expects a size in bytes: a whole number with an optional suffix K, M, "
                "G, KiB, MiB or GiB (powers of 1024), e.g. 512M; got '%s'\n",
                prog, flag, s);
        return 0;
    }
    if (overflow || v > UINT64_MAX / mult || v * mult > hi) {
        fprintf(stderr, "%s: %s %s is too large (at most %llu bytes)\n", prog, flag, s,
                (unsigned long long)hi);
        return 0;
    }
    if (v * mult < lo) {
        fprintf(stderr, "%s: %s %s is too small (at least %llu byte%s)\n", prog, flag, s,
                (unsigned long long)lo, lo == 1 ? "" : "s");
        return 0;
    }
    *out = v * mult;
    return 1;
}

int kipp_cli_sampling_flag(const char *prog, int argc, char **argv, int *i,
                           kipp_sampler_params *sp) {
    const char *a = argv[*i];
#define IS(s) (strcmp(a, s) == 0)
    if (IS("--greedy")) {
        sp->temperature = 0.0f;
        return 1;
    }
    if (!(IS("--temp") || IS("--top-k") || IS("--top-p") || IS("--min-p") ||
          IS("--repeat-penalty") || IS("--repeat-last-n") || IS("--presence-penalty") ||
          IS("--frequency-penalty") || IS("-s") || IS("--seed")))
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, a);
        return 2;
    }
    const char *v = argv[++*i];
    long l;
    int ok;
    if (IS("--temp")) ok = kipp_cli_float(prog, a, v, 0.0f, 100.0f, &sp->temperature);
    else if (IS("--top-k")) {
        if ((ok = kipp_cli_long(prog, a, v, 0, 1 << 24, &l))) sp->top_k = (int32_t)l;
    } else if (IS("--top-p")) ok = kipp_cli_float(prog, a, v, 1e-6f, 1.0f, &sp->top_p);
    else if (IS("--min-p")) ok = kipp_cli_float(prog, a, v, 0.0f, 1.0f, &sp->min_p);
    else if (IS("--repeat-penalty"))
        ok = kipp_cli_float(prog, a, v, 1e-3f, 100.0f, &sp->repetition_penalty);
    else if (IS("--repeat-last-n")) {
        if ((ok = kipp_cli_long(prog, a, v, -1, 1 << 24, &l))) sp->penalty_last_n = (int32_t)l;
    } else if (IS("--presence-penalty"))
        ok = kipp_cli_float(prog, a, v, -2.0f, 2.0f, &sp->presence_penalty);
    else if (IS("--frequency-penalty"))
        ok = kipp_cli_float(prog, a, v, -2.0f, 2.0f, &sp->frequency_penalty);
    else { /* -s / --seed */
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 10);
        ok = !(errno || end == v || *end || v[0] == '-');
        if (ok) sp->seed = s;
        else fprintf(stderr, "%s: --seed expects a non-negative integer, got '%s'\n", prog, v);
    }
#undef IS
    return ok ? 1 : 2;
}

void kipp_cli_runtime_init(kipp_cli_runtime *rt) {
    memset(rt, 0, sizeof *rt);
    rt->backend = kipp_backend_default();
    kipp_cli_rope_init(&rt->rope);
}

int kipp_cli_runtime_flag(const char *prog, int argc, char **argv, int *i, kipp_cli_runtime *rt) {
    const char *a = argv[*i], **dst;
    const int rr = kipp_cli_rope_flag(prog, argc, argv, i, &rt->rope);
    if (rr) return rr;
    if (!strcmp(a, "--device")) {
        char *end = NULL;
        const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
        const long d = v ? strtol(v, &end, 10) : -1;
        if (!v || !*v || *end || d < 0 || d > 1023) {
            fprintf(stderr, "%s: --device expects a device index (0, 1, ...), got %s%s%s\n", prog,
                    v ? "'" : "", v ? v : "nothing", v ? "'" : "");
            return 2;
        }
        rt->device = (int)d;
        *i += 1;
        return 1;
    }
    if (!strcmp(a, "--backend")) dst = &rt->backend;
    else if (!strcmp(a, "--isa")) dst = &rt->isa;
    else if (!strcmp(a, "--kv-type")) dst = &rt->kv_flag;
    else if (!strcmp(a, "--cache-type-k")) dst = &rt->cache_k;
    else if (!strcmp(a, "--cache-type-v")) dst = &rt->cache_v;
    else return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, a);
        return 2;
    }
    const char *v = argv[++*i];
    if (!*v) {
        fprintf(stderr, "%s: %s expects a name, got ''\n", prog, a);
        return 2;
    }
    *dst = v;
    return 1;
}

/* Parses the value of flag into *t; 0 after printing why not. */
static int kv_type_value(const char *prog, const char *flag, const char *v, kipp_kv_type *t) {
    char err[KIPP_ERR_LEN];
    if (kipp_kv_type_parse(v, t, err, sizeof err) == KIPP_OK) return 1;
    fprintf(stderr, "%s: %s: %s\n", prog, flag, err);
    return 0;
}

int kipp_cli_runtime_finish(const char *prog, kipp_cli_runtime *rt) {
    kipp_kv_type k = KIPP_KV_TYPE_DEFAULT, v = KIPP_KV_TYPE_DEFAULT;
    if (rt->kv_flag && !kv_type_value(prog, "--kv-type", rt->kv_flag, &rt->kv_type)) return 0;
    if (rt->cache_k && !kv_type_value(prog, "--cache-type-k", rt->cache_k, &k)) return 0;
    if (rt->cache_v && !kv_type_value(prog, "--cache-type-v", rt->cache_v, &v)) return 0;
    if (!rt->cache_k != !rt->cache_v) {
        fprintf(stderr,
                "%s: %s %s is given without %s: give both (K and V may differ), or --kv-type "
                "%s for both\n",
                prog, rt->cache_k ? "--cache-type-k" : "--cache-type-v",
                rt->cache_k ? rt->cache_k : rt->cache_v,
                rt->cache_k ? "--cache-type-v" : "--cache-type-k",
                rt->cache_k ? rt->cache_k : rt->cache_v);
        return 0;
    }
    if (rt->cache_k && rt->kv_flag && (k != rt->kv_type || v != rt->kv_type)) {
        fprintf(stderr, "%s: --kv-type %s and --cache-type-k %s / --cache-type-v %s disagree; give "
                        "one of them\n",
                prog, rt->kv_flag, rt->cache_k, rt->cache_v);
        return 0;
    }
    if (rt->cache_k) {
        rt->kv_type = k;
        rt->kv_type_v = v;
    }
    const char *env = getenv("KIPP_CPU_ISA");
    if (!rt->isa && env && *env) {
        rt->isa = env;
        rt->isa_from_env = 1;
    }
    return 1;
}

/* One help entry: the flag padded to the description column, then lines of text. */
static void help_entry(FILE *f, int width, const char *flag, const char *const *lines) {
    fprintf(f, "      %-*s%s\n", width - 6, flag, lines[0]);
    for (int k = 1; lines[k]; k++) fprintf(f, "%*s%s\n", width, "", lines[k]);
}

void kipp_cli_runtime_help(FILE *f, int width) {
    char backend[2][96];
    snprintf(backend[0], sizeof backend[0], "backend: %s (default); this binary has %s",
             kipp_backend_default(), kipp_backend_names());
    snprintf(backend[1], sizeof backend[1], "(cpu-ref: the scalar reference). A named one");
    const char *b[] = {backend[0], backend[1],
                       "that is unknown, missing or fails to start is fatal:",
                       "Kipp never falls back to another backend.", NULL};
    const char *i[] = {"cpu kernels: auto, or one level: scalar, avx2, avx512,",
                       "avx512vnni, avx512bf16, amx, neon (default: $KIPP_CPU_ISA when set, else",
                       "auto: per weight type the fastest kernels this CPU",
                       "runs; a level it lacks is an error)", NULL};
    const char *k[] = {"KV cache type of K and V: f32, f16, bf16, q8_0 or",
                       "q4_0 (default: the backend's own; the start-up line",
                       "says which; q8_0/q4_0 need a head dim that is a",
                       "multiple of 32 and run on cpu-ref and cpu)", NULL};
    const char *c[] = {"llama.cpp's spelling: K's type and V's type, which",
                       "may differ (e.g. q8_0 and q4_0); give both", NULL};
    help_entry(f, width, "--backend NAME", b);
    help_entry(f, width, "--isa LEVEL", i);
    const char *d[] = {"device backends (vulkan, cuda): the device to run on,",
                       "by index (default 0; an index the machine lacks is an",
                       "error naming the devices there are)", NULL};
    help_entry(f, width, "--device N", d);
    help_entry(f, width, "--kv-type T", k);
    fprintf(f, "      --cache-type-k T, --cache-type-v T\n");
    help_entry(f, width, "", c);
    kipp_cli_rope_help(f, width);
}

void kipp_cli_ctx_error(const char *prog, const kipp_cli_runtime *rt, const char *err) {
    fprintf(stderr, "%s: %s\n", prog, err);
    if (rt->isa_from_env && strstr(err, rt->isa))
        fprintf(stderr, "%s: the ISA level '%s' comes from the environment variable "
                        "KIPP_CPU_ISA (--isa LEVEL overrides it)\n", prog, rt->isa);
}

void kipp_cli_print_ctx_info(FILE *f, const kipp_ctx_info *ci) {
    fprintf(f,
            "backend %s, ISA %s, %d thread%s, KV %s%s%s, KV pool %u blocks of %u tokens (%llu "
            "tokens, %llu bytes = %.2f MiB, %llu bytes/token)",
            ci->backend, ci->isa, ci->n_threads, ci->n_threads == 1 ? "" : "s",
            kipp_kv_type_name(ci->kv_type), ci->kv_type_v != ci->kv_type ? "/" : "",
            ci->kv_type_v != ci->kv_type ? kipp_kv_type_name(ci->kv_type_v) : "", ci->kv_blocks, ci->kv_block_size,
            (unsigned long long)ci->kv_blocks * ci->kv_block_size,
            (unsigned long long)ci->kv_bytes, ci->kv_bytes / 1048576.0,
            (unsigned long long)ci->kv_bytes_per_token);
    if (ci->weights_repacked)
        fprintf(f, ", weights repacked %.2f MiB", ci->weights_repacked / 1048576.0);
    if (ci->rope && strcmp(ci->rope, "none")) fprintf(f, ", rope %s", ci->rope);
}

char *kipp_cli_read_all(FILE *f, size_t max, size_t *len, int *too_big) {
    /* kipp_grow's caps are 4096 * 2^k here (it doubles to exactly the need asked for when
     * that is 16 * 2^k), so the limit is the same cap test as ever: a full buffer whose cap
     * reached max is too big. */
    size_t cap = 0, n = 0;
    char *buf = NULL;
    *too_big = 0;
    if (kipp_grow((void **)&buf, &cap, 4096, 1) != KIPP_OK) return NULL;
    for (;;) {
        if (n + 1 >= cap) {
            if (cap >= max) {
                *too_big = 1;
                free(buf);
                return NULL;
            }
            if (kipp_grow((void **)&buf, &cap, cap * 2, 1) != KIPP_OK) { free(buf); return NULL; }
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

double kipp_cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int kipp_cli_stdout_ready(const char *prog) {
    if (fcntl(STDOUT_FILENO, F_GETFD) < 0) {
        fprintf(stderr, "%s: stdout is closed: there is nowhere to write the output\n", prog);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    return 1;
}
