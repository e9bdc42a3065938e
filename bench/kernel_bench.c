/* kernel_bench.c — single-thread micro-benchmark and spot check of the CPU gemm kernels
 * (src/backend/cpu/kernels_*.c). For each ISA level and weight type: checks a sample of
 * outputs against a double dot of the dequantized weights and the dequantized activations
 * (|err| <= 1e-5 * sum|w*x|), then times gemm on k x n_rows weights for several token
 * counts. Prints GFLOP/s (2 * rows * tokens * k per second) and, for n_tok = 1, the weight
 * GB/s; n_tok = 1 cycles through enough weight copies (--pool-mib) to miss the caches.
 * Each type's levels are timed interleaved (five rounds of a slice each per token count),
 * so a machine whose speed drifts moves them alike; a level running another's very kernel
 * (amx's table is avx512vnni's but for BF16) gets that level's figure, not a second timing. Build: make build/kipp-kernbench.
 *
 *   kipp-kernbench [--isa a,b,...] [--type F32,BF16,...] [--k N] [--rows N] [--tok 1,8,64,512]
 *                  [--seconds S] [--pool-mib M] [--json PATH] [--check-auto MARGIN]
 *
 * The kernels are timed as the forward pass runs them: 8-bit activations in two planes (two
 * rows per token), the repacked path on a packed copy. --json writes the record that
 * src/backend/cpu/choice.c's preferences cite (bench/results/kernels-*.json). */
#include "backend/cpu/kernels.h"
#include "core/types.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frand(void) { return (float)urand() / 4294967296.0f * 2.0f - 1.0f; } /* [-1, 1) */

static void put_f16(unsigned char *p, float f) {
    const uint16_t h = kipp_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* One row of k elements of type with random contents and sane scales. */
static void fill_row(uint32_t type, unsigned char *p, uint64_t k) {
    const uint32_t be = kipp_type_block_elems(type), bb = kipp_type_block_bytes(type);
    for (uint64_t i = 0; i < k / be * bb; i++) p[i] = (unsigned char)urand();
    for (uint64_t b = 0; b < k / be; b++, p += bb) {
        switch (type) {
        case KIPP_TYPE_F32:
            for (uint64_t i = 0; i < 1; i++) {
                const float f = frand() * 0.1f;
                memcpy(p, &f, 4);
            }
            break;
        case KIPP_TYPE_F16: put_f16(p, frand() * 0.1f); break;
        case KIPP_TYPE_BF16: {
            const float f = frand() * 0.1f;
            uint32_t u;
            memcpy(&u, &f, 4);
            const uint16_t h = (uint16_t)(u >> 16);
            memcpy(p, &h, 2);
            break;
        }
        case KIPP_TYPE_Q8_0:
        case KIPP_TYPE_Q4_0: put_f16(p, 0.001f + 0.01f * (float)(urand() % 1000) / 1000.0f); break;
        case KIPP_TYPE_Q4_K:
            put_f16(p, 0.0005f + 0.001f * (float)(urand() % 1000) / 1000.0f);
            put_f16(p + 2, 0.0005f + 0.001f * (float)(urand() % 1000) / 1000.0f);
            break;
        case KIPP_TYPE_Q6_K: put_f16(p + 208, 0.0005f + 0.001f * (float)(urand() % 1000) / 1000.0f); break;
        case KIPP_TYPE_Q5_0:
        case KIPP_TYPE_IQ4_NL: put_f16(p, 0.0001f + 0.001f * (float)(urand() % 1000) / 1000.0f); break;
        case KIPP_TYPE_Q4_1:
        case KIPP_TYPE_Q5_1:
        case KIPP_TYPE_Q5_K:
            put_f16(p, 0.0005f + 0.001f * (float)(urand() % 1000) / 1000.0f);
            put_f16(p + 2, 0.0005f + 0.001f * (float)(urand() % 1000) / 1000.0f);
            break;
        case KIPP_TYPE_Q2_K:
            put_f16(p + 80, 0.0005f + 0.001f * (float)(urand() % 1000) / 1000.0f);
            put_f16(p + 82, 0.0005f + 0.001f * (float)(urand() % 1000) / 1000.0f);
            break;
        case KIPP_TYPE_Q3_K: put_f16(p + 108, 0.0005f + 0.001f * (float)(urand() % 1000) / 1000.0f); break;
        case KIPP_TYPE_IQ4_XS: put_f16(p, 0.00002f + 0.0001f * (float)(urand() % 1000) / 1000.0f); break;
        }
    }
}

static const uint32_t all_types[] = {KIPP_TYPE_F32,  KIPP_TYPE_F16,  KIPP_TYPE_BF16,   KIPP_TYPE_Q8_0,
                                     KIPP_TYPE_Q4_0, KIPP_TYPE_Q4_K, KIPP_TYPE_Q6_K,   KIPP_TYPE_Q4_1,
                                     KIPP_TYPE_Q5_0, KIPP_TYPE_Q5_1, KIPP_TYPE_Q2_K,   KIPP_TYPE_Q3_K,
                                     KIPP_TYPE_Q5_K, KIPP_TYPE_IQ4_NL, KIPP_TYPE_IQ4_XS};

static int in_list(const char *list, const char *name) {
    if (!list) return 1;
    const size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        p += len + (e ? 1 : 0);
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: kipp-kernbench [--isa a,b,...] [--type F32,BF16,...] [--k N] [--rows N]\n"
            "                      [--tok 1,8,64,512] [--seconds S] [--pool-mib M] [--json PATH]\n"
            "                      [--check-auto MARGIN] [--choices FEATURES]\n"
            "Times each ISA level's gemm kernels, one thread, per weight type and token count:\n"
            "the few-token kernel (8-bit activations in two planes, as the forward pass runs it),\n"
            "the many-token kernel and the repacked path where the level has them. --isa: levels\n"
            "(default: every level this CPU runs); --json: a record with the CPU, its features and\n"
            "what the auto table chose per type; --check-auto: exit 1 when, for some type and\n"
            "token count, the kernel the auto table runs is more than MARGIN (0.1 = 10 %%) slower\n"
            "than the fastest level's; --choices: print the auto table's choices for a CPU with the\n"
            "listed features (e.g. 'avx2 fma f16c') and exit, timing nothing.\n");
}

/* p, or a clear exit when an allocation of n bytes failed (a --pool-mib too large) */
static void *must(void *p, size_t n) {
    if (!p) {
        fprintf(stderr, "kipp-kernbench: out of memory (%zu bytes; lower --pool-mib, --rows or --k)\n", n);
        exit(1);
    }
    return p;
}

/* One timed kernel: (level, type, variant, token count). */
typedef struct {
    const char *isa;
    uint32_t type;
    const char *variant; /* "gemm", "many", "packed" */
    uint64_t tok;
    double gflops, best_gflops, gbps;
} result;

static result *results;
static size_t n_results, cap_results;

static void add_result(result r) {
    if (n_results == cap_results) {
        cap_results = cap_results ? 2 * cap_results : 256;
        results = realloc(results, cap_results * sizeof *results);
        if (!results) {
            fprintf(stderr, "kipp-kernbench: out of memory\n");
            exit(1);
        }
    }
    results[n_results++] = r;
}

static const result *find_result(const char *isa, uint32_t type, const char *variant, uint64_t tok) {
    for (size_t i = 0; i < n_results; i++)
        if (!strcmp(results[i].isa, isa) && results[i].type == type && !strcmp(results[i].variant, variant) &&
            results[i].tok == tok)
            return &results[i];
    return NULL;
}

/* The level and kernel the auto table runs for tok tokens (as forward.c picks them). */
static void auto_kernel(const kipp_cpu_choice *c, uint64_t tok, const char **level, const char **variant) {
    uint32_t i = 0;
    while (i + 1 < c->n_range && tok >= c->range[i + 1].min_tok) i++;
    *level = c->range[i].level;
    *variant = c->range[i].variant;
}

/* The auto table's choices as a JSON object, one member per weight type. */
static void print_choices(FILE *f, const kipp_cpu_choice *ch) {
    fprintf(f, "{");
    for (size_t i = 0; i < KIPP_CPU_N_CHOICE; i++) {
        char buf[1024];
        kipp_cpu_choice_json(&ch[i], buf, sizeof buf);
        fprintf(f, "%s\n  \"%s\": %s", i ? "," : "", kipp_type_name(ch[i].type), buf);
    }
    fprintf(f, "}");
}

int main(int argc, char **argv) {
    const char *isas = NULL, *types = NULL, *toks_s = "1,2,4,8,16,64,512", *json = NULL;
    uint64_t k = 1024, n_rows = 3072;
    double seconds = 0.4, margin = -1.0;
    uint64_t pool_mib = 512;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "kipp-kernbench: %s needs a value\n", argv[i]);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(argv[i - 1], "--isa")) isas = v;
        else if (!strcmp(argv[i - 1], "--type")) types = v;
        else if (!strcmp(argv[i - 1], "--k")) k = strtoull(v, &end, 10);
        else if (!strcmp(argv[i - 1], "--rows")) n_rows = strtoull(v, &end, 10);
        else if (!strcmp(argv[i - 1], "--tok")) toks_s = v;
        else if (!strcmp(argv[i - 1], "--seconds")) seconds = strtod(v, &end);
        else if (!strcmp(argv[i - 1], "--pool-mib")) pool_mib = strtoull(v, &end, 10);
        else if (!strcmp(argv[i - 1], "--json")) json = v;
        else if (!strcmp(argv[i - 1], "--check-auto")) margin = strtod(v, &end);
        else if (!strcmp(argv[i - 1], "--choices")) { /* no timing: the auto table for a feature list */
            kipp_cpu_features f;
            char err[256];
            if (kipp_cpu_features_parse(v, &f, err, sizeof err) != KIPP_OK) {
                fprintf(stderr, "kipp-kernbench: --choices: %s\n", err);
                return 2;
            }
            kipp_cpu_kernels tab;
            kipp_cpu_choice ch[KIPP_CPU_N_CHOICE];
            kipp_cpu_kernels_compose(&f, &tab, ch);
            print_choices(stdout, ch);
            printf("\n");
            return 0;
        }
        else {
            fprintf(stderr, "kipp-kernbench: unknown option %s\n", argv[i - 1]);
            usage(stderr);
            return 2;
        }
        if (end && (*end || end == v)) {
            fprintf(stderr, "kipp-kernbench: %s: not a number: '%s'\n", argv[i - 1], v);
            return 2;
        }
    }
    if (k == 0 || k % 256 != 0 || n_rows == 0 || n_rows % 16 != 0) {
        fprintf(stderr, "kipp-kernbench: --k must be a positive multiple of 256, --rows of 16\n");
        return 2;
    }
    uint64_t toks[16];
    int ntoks = 0;
    for (const char *p = toks_s; *p;) {
        char *e;
        const unsigned long long t = strtoull(p, &e, 10);
        if (e == p || t == 0 || t > 4096 || ntoks == 16 || (*e && *e != ',')) {
            fprintf(stderr, "kipp-kernbench: --tok: up to 16 counts in 1..4096, comma-separated: '%s'\n", toks_s);
            return 2;
        }
        toks[ntoks++] = t;
        p = *e ? e + 1 : e;
    }
    uint64_t max_tok = 1;
    for (int i = 0; i < ntoks; i++) max_tok = toks[i] > max_tok ? toks[i] : max_tok;
    kipp_cpu_features feat;
    kipp_cpu_features_detect(&feat);
    static const char *const all_levels[] = {"amx", "avx512bf16", "avx512vnni", "avx512", "avx2", "neon", "scalar"};
    char level_list[128] = "";
    for (size_t i = 0; i < sizeof all_levels / sizeof all_levels[0]; i++)
        if (kipp_cpu_level_table(all_levels[i]) && kipp_cpu_level_runs(&feat, all_levels[i]) &&
            strcmp(all_levels[i], "scalar") != 0)
            snprintf(level_list + strlen(level_list), sizeof level_list - strlen(level_list), "%s%s",
                     level_list[0] ? "," : "", all_levels[i]);
    if (!isas) isas = level_list;
    /* every level asked for is checked before anything is allocated or timed */
    for (const char *p = isas; *p;) {
        const char *e = strchr(p, ',');
        char isa[32], err[256];
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(isa, sizeof isa, "%.*s", (int)len, p);
        p += len + (e ? 1 : 0);
        const kipp_cpu_kernels *lv;
        if (kipp_cpu_kernels_select(isa, &lv, err, sizeof err) != KIPP_OK) {
            fprintf(stderr, "kipp-kernbench: %s\n", err);
            return 2;
        }
    }

    /* two planes per token for 8-bit activations: 2 * max_tok rows */
    float *xf = malloc(2 * max_tok * k * sizeof *xf), *xd = malloc(k * sizeof *xd), *wd = malloc(k * sizeof *wd);
    float *y = malloc(2 * max_tok * n_rows * sizeof *y);
    if (!xf || !xd || !wd || !y) {
        fprintf(stderr, "kipp-kernbench: out of memory\n");
        free(xf), free(xd), free(wd), free(y);
        return 1;
    }
    for (uint64_t i = 0; i < 2 * max_tok * k; i++) xf[i] = frand();
    int failed = 0;

    /* Per type, every level's kernels are prepared first, then timed interleaved: each token
     * count in ROUNDS rounds, each round a slice of every kernel (the order rotating), so a
     * machine whose speed drifts over minutes (a shared VM: 1.7x within minutes here) moves
     * every level's figure alike instead of favouring the level timed in its fast minute. */
    enum { ROUNDS = 5, MAX_CAND = 32 };
    typedef struct {
        const char *lname, *vname;
        uint32_t act;
        int planes;
        kipp_cpu_gemm_fn gemm;
        const kipp_cpu_packer *packer;
        const unsigned char *wk;
        size_t wrb, wmat, wcopies, ab, c;
        unsigned char *xa, *pk; /* pk: owned (NULL when it shares an earlier candidate's) */
        double t_sum, best;
        long reps;
        int same; /* index of an earlier candidate running this very kernel on the same data
                     (the amx level's table is avx512vnni's but for BF16), else -1: timed once */
    } cand;
    for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
        const uint32_t type = all_types[ti];
        if (!in_list(types, kipp_type_name(type))) continue;
        const size_t rb = kipp_type_row_bytes(type, k), mat = rb * n_rows;
        size_t ncopy = (pool_mib << 20) / mat;
        ncopy = ncopy < 1 ? 1 : ncopy;
        unsigned char *w = NULL;
        cand cs[MAX_CAND];
        int nc = 0;
        for (const char *p = isas; *p;) {
            const char *e = strchr(p, ',');
            char isa[32];
            const size_t len = e ? (size_t)(e - p) : strlen(p);
            snprintf(isa, sizeof isa, "%.*s", (int)len, p);
            p += len + (e ? 1 : 0);
            const kipp_cpu_kernels *lv;
            char err[256];
            if (kipp_cpu_kernels_select(isa, &lv, err, sizeof err) != KIPP_OK) {
                fprintf(stderr, "kipp-kernbench: %s\n", err);
                return 2;
            }
            const char *lname = kipp_cpu_level_table(isa) ? kipp_cpu_level_table(isa)->isa : "auto";
            const kipp_cpu_mm entry = kipp_cpu_kernels_mm(lv, type);
            if (!entry.gemm && !entry.packer) {
                printf("%-10s %-6s no kernel (dequantize fallback)\n", lname, kipp_type_name(type));
                continue;
            }
            if (!w) {
                w = must(malloc(mat * ncopy), mat * ncopy);
                for (uint64_t r = 0; r < n_rows; r++) fill_row(type, w + r * rb, k);
                for (size_t c = 1; c < ncopy; c++) memcpy(w + c * mat, w, mat);
            }
            /* the level's few-token kernel, its many-token kernel, its repacked path */
            for (int variant = 0; variant < 3 && nc < MAX_CAND; variant++) {
                if (variant == 0 && !entry.gemm) continue; /* a level that only packs the type */
                if (variant == 1 && !entry.gemm_many) continue;
                if (variant == 2 && (!entry.packer || !entry.packer->bytes(type, n_rows, k))) continue;
                cand *cd = &cs[nc++];
                memset(cd, 0, sizeof *cd);
                cd->lname = lname;
                cd->vname = variant == 0 ? "gemm" : variant == 1 ? "many" : "packed";
                cd->act = variant == 0 ? entry.act : variant == 1 ? entry.act_many : entry.packer->act;
                cd->gemm = variant == 0 ? entry.gemm : variant == 1 ? entry.gemm_many : entry.packer->gemm;
                cd->planes = cd->act == KIPP_ACT_Q8_0 || cd->act == KIPP_ACT_Q8_K ? 2 : 1;
                cd->ab = kipp_cpu_act_row_bytes(cd->act, k);
                cd->xa = must(malloc(cd->ab * 2 * max_tok), cd->ab * 2 * max_tok);
                kipp_cpu_quant_fn q = lv->quant[cd->act];
                if (!q && cd->act == KIPP_ACT_Q16) q = kipp_cpu_quant_q16_scalar;
                if (!q && cd->act == KIPP_ACT_BF16X2) q = kipp_cpu_quant_bf16x2_scalar;
                for (uint64_t t = 0; t < 2 * max_tok; t++) {
                    if (cd->act == KIPP_ACT_F32)
                        memcpy(cd->xa + t * cd->ab, xf + t * k, k * sizeof(float));
                    else
                        q(xf + t * k, cd->xa + t * cd->ab, k);
                }
                /* the weights as this kernel reads them (a packed copy per pool copy, shared
                 * by the levels with the same packer) */
                cd->wk = w, cd->wrb = rb, cd->wmat = mat, cd->wcopies = ncopy;
                if (variant == 2) {
                    cd->packer = entry.packer;
                    cd->wmat = entry.packer->bytes(type, n_rows, k);
                    cd->wrb = entry.packer->bytes(type, 16, k) / 16;
                    cd->wcopies = (pool_mib << 20) / cd->wmat;
                    cd->wcopies = cd->wcopies < 1 ? 1 : cd->wcopies;
                    for (int j = 0; j < nc - 1 && cd->wk == w; j++)
                        if (cs[j].packer == entry.packer) cd->wk = cs[j].wk;
                    if (cd->wk == w) {
                        cd->pk = must(aligned_alloc(64, (cd->wmat * cd->wcopies + 63) / 64 * 64),
                                      cd->wmat * cd->wcopies);
                        entry.packer->pack(type, w, rb, n_rows, 0, n_rows, k, cd->pk);
                        for (size_t c = 1; c < cd->wcopies; c++) memcpy(cd->pk + c * cd->wmat, cd->pk, cd->wmat);
                        cd->wk = cd->pk;
                    }
                }
                cd->same = -1;
                for (int j = 0; j < nc - 1 && cd->same < 0; j++)
                    if (cs[j].gemm == cd->gemm && cs[j].act == cd->act && cs[j].wk == cd->wk) cd->same = j;
                /* spot check on the largest token count */
                cd->gemm(cd->wk, cd->wrb, n_rows, cd->xa, cd->ab, max_tok, y, n_rows, k);
                double worst = 0.0;
                for (int s = 0; s < 64; s++) {
                    const uint64_t r = urand() % n_rows, t = urand() % max_tok;
                    kipp_dequantize_row(type, w + r * rb, wd, k);
                    kipp_cpu_act_to_f32(cd->act, cd->xa + t * cd->ab, xd, k);
                    double ref = 0.0, mag = 0.0;
                    for (uint64_t i = 0; i < k; i++) {
                        ref += (double)wd[i] * xd[i];
                        mag += fabs((double)wd[i] * xd[i]);
                    }
                    const double rel = fabs(y[t * n_rows + r] - ref) / (mag + 1e-30);
                    worst = rel > worst ? rel : worst;
                }
                printf("%-10s %-6s %-6s act %u  check %.2e%s\n", lname, kipp_type_name(type), cd->vname, cd->act,
                       worst, worst > 1e-5 ? "  FAIL" : "");
                if (worst > 1e-5) failed = 1;
            }
        }
        for (int i = 0; i < ntoks && nc; i++) {
            const uint64_t nt = toks[i];
            for (int j = 0; j < nc; j++) cs[j].t_sum = 0, cs[j].best = 1e30, cs[j].reps = 0, cs[j].c = 0;
            const double slice = seconds / ROUNDS;
            for (int round = 0; round < ROUNDS; round++)
                for (int jj = 0; jj < nc; jj++) {
                    cand *cd = &cs[(jj + round) % nc];
                    if (cd->same >= 0) continue;
                    const size_t ncp = nt == 1 ? cd->wcopies : 1;
                    const double t_all = now_s();
                    long reps = 0;
                    while (now_s() - t_all < slice || reps < 1) {
                        const double t0 = now_s();
                        cd->gemm(cd->wk + cd->c * cd->wmat, cd->wrb, n_rows, cd->xa, cd->ab,
                                 (uint64_t)cd->planes * nt, y, n_rows, k);
                        const double dt = now_s() - t0;
                        cd->best = dt < cd->best ? dt : cd->best;
                        cd->c = (cd->c + 1) % ncp;
                        reps++;
                    }
                    cd->t_sum += now_s() - t_all;
                    cd->reps += reps;
                }
            for (int j = 0; j < nc; j++) {
                const cand *cd = cs[j].same >= 0 ? &cs[cs[j].same] : &cs[j];
                const double avg = cd->t_sum / (double)cd->reps, flop = 2.0 * n_rows * nt * k;
                result r = {cd->lname, type, cd->vname, nt, flop / avg * 1e-9, flop / cd->best * 1e-9, 0.0};
                r.isa = cs[j].lname;
                printf("%-10s %-6s %-6s k=%llu rows=%llu tok=%-4llu %8.1f GFLOP/s (best %6.1f)", cs[j].lname,
                       kipp_type_name(type), cd->vname, (unsigned long long)k, (unsigned long long)n_rows,
                       (unsigned long long)nt, r.gflops, r.best_gflops);
                if (cs[j].same >= 0) printf("  (%s's kernel: its figure)", cd->lname);
                if (nt == 1) {
                    r.gbps = (double)cd->wmat / avg * 1e-9;
                    printf("  %6.1f GB/s weights (%zu MiB pool)", r.gbps, cd->wmat * cd->wcopies >> 20);
                }
                printf("\n");
                add_result(r);
            }
            fflush(stdout);
        }
        for (int j = 0; j < nc; j++) {
            free(cs[j].xa);
            free(cs[j].pk);
        }
        free(w);
    }

    /* what the auto table runs per type and token count, against the fastest level */
    kipp_cpu_kernels autok;
    kipp_cpu_choice choices[KIPP_CPU_N_CHOICE];
    kipp_cpu_kernels_compose(&feat, &autok, choices);
    /* Two regimes per type: its weights repacked at load (one "packed" kernel for every token
     * count) or left mmapped (a kernel per count). Packing is all or nothing, so the check is
     * per regime: at every count the kernel auto runs is within margin of the fastest of its
     * own regime, and the other regime does not beat it by more than margin at every count
     * (a regime slower by more at some count, e.g. decode, is a trade the table may make). */
    int slow = 0;
    for (size_t ci = 0; ci < KIPP_CPU_N_CHOICE; ci++) {
        const uint32_t type = choices[ci].type;
        if (!in_list(types, kipp_type_name(type)) || !strcmp(choices[ci].range[0].level, "dequantize")) continue;
        int other_wins = 0, counts = 0;
        const result *other_at_1 = NULL, *chosen_at_1 = NULL;
        for (int i = 0; i < ntoks; i++) {
            const char *lvl, *v;
            auto_kernel(&choices[ci], toks[i], &lvl, &v);
            const result *chosen = find_result(lvl, type, v, toks[i]);
            if (!chosen) continue; /* that level was not measured */
            const int packed = !strcmp(v, "packed");
            const result *best = chosen, *other = NULL;
            for (size_t j = 0; j < n_results; j++) {
                if (results[j].type != type || results[j].tok != toks[i]) continue;
                if ((strcmp(results[j].variant, "packed") == 0) == packed) {
                    if (results[j].gflops > best->gflops) best = &results[j];
                } else if (!other || results[j].gflops > other->gflops) {
                    other = &results[j];
                }
            }
            counts++;
            if (other && (1.0 - margin) * other->gflops > chosen->gflops) other_wins++;
            if (!other_at_1) other_at_1 = other, chosen_at_1 = chosen;
            if (margin >= 0 && chosen->gflops < (1.0 - margin) * best->gflops) {
                printf("check-auto: %s tok=%llu: auto runs %s %s at %.1f GFLOP/s, %s %s does %.1f\n",
                       kipp_type_name(type), (unsigned long long)toks[i], lvl, v, chosen->gflops, best->isa,
                       best->variant, best->gflops);
                slow = 1;
            }
        }
        if (margin >= 0 && counts && other_wins == counts && other_at_1) {
            printf("check-auto: %s: the %s regime is faster at every token count (at %llu: %s %s %.1f against %.1f)\n",
                   kipp_type_name(type), strcmp(other_at_1->variant, "packed") ? "mmapped" : "repacked",
                   (unsigned long long)other_at_1->tok, other_at_1->isa, other_at_1->variant, other_at_1->gflops,
                   chosen_at_1->gflops);
            slow = 1;
        }
    }
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "kipp-kernbench: cannot write %s\n", json);
            return 1;
        }
        char feats[256], cpu[256] = "unknown";
        kipp_cpu_features_string(&feat, feats, sizeof feats);
        FILE *ci = fopen("/proc/cpuinfo", "r");
        if (ci) {
            char line[512];
            while (fgets(line, sizeof line, ci))
                if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
                    snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
                    cpu[strcspn(cpu, "\n\"\\")] = '\0';
                    break;
                }
            fclose(ci);
        }
        fprintf(f, "{\"kind\": \"kernel-bench\", \"cpu\": \"%s\", \"features\": \"%s\", \"levels\": \"%s\",\n", cpu,
                feats, isas);
        fprintf(f, " \"k\": %llu, \"rows\": %llu, \"seconds\": %g, \"threads\": 1,\n \"auto\": ", (unsigned long long)k,
                (unsigned long long)n_rows, seconds);
        print_choices(f, choices);
        fprintf(f, ",\n \"results\": [");
        for (size_t i = 0; i < n_results; i++)
            fprintf(f,
                    "%s\n  {\"isa\": \"%s\", \"type\": \"%s\", \"variant\": \"%s\", \"tok\": %llu, \"gflops\": %.2f, "
                    "\"best_gflops\": %.2f, \"gbps\": %.2f}",
                    i ? "," : "", results[i].isa, kipp_type_name(results[i].type), results[i].variant,
                    (unsigned long long)results[i].tok, results[i].gflops, results[i].best_gflops, results[i].gbps);
        fprintf(f, "\n]}\n");
        if (fclose(f) != 0) {
            fprintf(stderr, "kipp-kernbench: cannot write %s\n", json);
            return 1;
        }
    }
    free(xf);
    free(xd);
    free(wd);
    free(y);
    free(results);
    return failed || slow ? 1 : 0;
}
