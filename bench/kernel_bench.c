/* kernel_bench.c — single-thread micro-benchmark and spot check of the CPU gemm kernels
 * (src/backend/cpu/kernels_*.c). For each ISA level and weight type: checks a sample of
 * outputs against a double dot of the dequantized weights and the dequantized activations
 * (|err| <= 1e-5 * sum|w*x|), then times gemm on k x n_rows weights for several token
 * counts. Prints GFLOP/s (2 * rows * tokens * k per second) and, for n_tok = 1, the weight
 * GB/s; n_tok = 1 cycles through enough weight copies (--pool-mib) to miss the caches.
 * Build: make build/kipp-kernbench.
 *
 *   kipp-kernbench [--isa a,b,...] [--type F32,BF16,...] [--k N] [--rows N] [--tok 1,8,64,512]
 *                  [--seconds S] [--pool-mib M] */
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

int main(int argc, char **argv) {
    const char *isas = "avx512vnni,avx512,avx2", *types = NULL, *toks_s = "1,8,64,512";
    uint64_t k = 1024, n_rows = 3072;
    double seconds = 0.3;
    uint64_t pool_mib = 512;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--isa")) isas = argv[i + 1];
        else if (!strcmp(argv[i], "--type")) types = argv[i + 1];
        else if (!strcmp(argv[i], "--k")) k = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--rows")) n_rows = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--tok")) toks_s = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--pool-mib")) pool_mib = strtoull(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    uint64_t toks[16];
    int ntoks = 0;
    for (const char *p = toks_s; *p && ntoks < 16;) {
        toks[ntoks++] = strtoull(p, (char **)&p, 10);
        if (*p == ',') p++;
    }
    uint64_t max_tok = 1;
    for (int i = 0; i < ntoks; i++) max_tok = toks[i] > max_tok ? toks[i] : max_tok;

    float *xf = malloc(max_tok * k * sizeof *xf), *xd = malloc(k * sizeof *xd), *wd = malloc(k * sizeof *wd);
    float *y = malloc(max_tok * n_rows * sizeof *y);
    for (uint64_t i = 0; i < max_tok * k; i++) xf[i] = frand();

    for (const char *p = isas; *p;) {
        const char *e = strchr(p, ',');
        char isa[32];
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(isa, sizeof isa, "%.*s", (int)len, p);
        p += len + (e ? 1 : 0);
        const kipp_cpu_kernels *lv;
        char err[256];
        if (kipp_cpu_kernels_select(isa, &lv, err, sizeof err) != KIPP_OK) {
            printf("%s: %s\n", isa, err);
            continue;
        }
        for (size_t ti = 0; ti < sizeof all_types / sizeof all_types[0]; ti++) {
            const uint32_t type = all_types[ti];
            if (!in_list(types, kipp_type_name(type))) continue;
            const kipp_cpu_mm entry = kipp_cpu_kernels_mm(lv, type);
            if (!entry.gemm) {
                printf("%-10s %-5s  no kernel\n", isa, kipp_type_name(type));
                continue;
            }
            /* the table's kernel, then its many-token kernel (label "many") where it has one */
            for (int variant = 0; variant < (entry.gemm_many ? 2 : 1); variant++) {
                const kipp_cpu_mm mm = variant ? (kipp_cpu_mm){entry.act_many, entry.gemm_many, 0, NULL, 0} : entry;
                const char *vname = variant ? " many" : "";
                const size_t rb = kipp_type_row_bytes(type, k), mat = rb * n_rows;
                size_t ncopy = (pool_mib << 20) / mat;
                ncopy = ncopy < 1 ? 1 : ncopy;
                unsigned char *w = malloc(mat * ncopy);
                for (uint64_t r = 0; r < n_rows; r++) fill_row(type, w + r * rb, k);
                for (size_t c = 1; c < ncopy; c++) memcpy(w + c * mat, w, mat);
                const size_t ab = kipp_cpu_act_row_bytes(mm.act, k);
                unsigned char *xa = malloc(ab * max_tok);
                for (uint64_t t = 0; t < max_tok; t++) {
                    if (mm.act == KIPP_ACT_F32)
                        memcpy(xa + t * ab, xf + t * k, k * sizeof(float));
                    else
                        lv->quant[mm.act](xf + t * k, xa + t * ab, k);
                }
                /* spot check on the largest token count */
                mm.gemm(w, rb, n_rows, xa, ab, max_tok, y, n_rows, k);
                double worst = 0.0;
                for (int s = 0; s < 64; s++) {
                    const uint64_t r = urand() % n_rows, t = urand() % max_tok;
                    kipp_dequantize_row(type, w + r * rb, wd, k);
                    kipp_cpu_act_to_f32(mm.act, xa + t * ab, xd, k);
                    double ref = 0.0, mag = 0.0;
                    for (uint64_t i = 0; i < k; i++) {
                        ref += (double)wd[i] * xd[i];
                        mag += fabs((double)wd[i] * xd[i]);
                    }
                    const double rel = fabs(y[t * n_rows + r] - ref) / (mag + 1e-30);
                    worst = rel > worst ? rel : worst;
                }
                printf("%-10s %-5s%s act %u  check %.2e%s\n", isa, kipp_type_name(type), vname, mm.act, worst,
                       worst > 1e-5 ? "  FAIL" : "");
                for (int i = 0; i < ntoks; i++) {
                    const uint64_t nt = toks[i];
                    const size_t nc = nt == 1 ? ncopy : 1;
                    size_t c = 0;
                    long reps = 0;
                    double best = 1e30, t_all = now_s();
                    while (now_s() - t_all < seconds || reps < 3) {
                        const double t0 = now_s();
                        mm.gemm(w + c * mat, rb, n_rows, xa, ab, nt, y, n_rows, k);
                        const double dt = now_s() - t0;
                        best = dt < best ? dt : best;
                        c = (c + 1) % nc;
                        reps++;
                    }
                    const double avg = (now_s() - t_all) / (double)reps;
                    printf("%-10s %-5s%s k=%llu rows=%llu tok=%-4llu %8.1f GFLOP/s (best %6.1f)", isa,
                           kipp_type_name(type), vname, (unsigned long long)k, (unsigned long long)n_rows,
                           (unsigned long long)nt, 2.0 * n_rows * nt * k / avg * 1e-9, 2.0 * n_rows * nt * k / best * 1e-9);
                    if (nt == 1)
                        printf("  %6.1f GB/s weights (%zu MiB pool)", (double)mat / avg * 1e-9, mat * nc >> 20);
                    printf("\n");
                    fflush(stdout);
                }
                free(w);
                free(xa);
            }
        }
    }
    free(xf);
    free(xd);
    free(wd);
    free(y);
    return 0;
}
