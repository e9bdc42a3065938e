/* test_cpu_kernels.c — the cpu backend's dot kernels against a double-precision reference
 * built on kipp_dequantize_row: every ISA level this machine runs, each of F32/F16/BF16/Q8_0
 * (plus the dequantize fallback on Q8_0/Q4_0 rows), random rows of odd lengths for the
 * unblocked types. Also the ISA selector's errors. Does not time the kernels. */
#include "kt.h"

#include "backend/cpu/kernels.h"
#include "core/types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345u;
static float frand(void) { /* [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

/* A random row of n elements in type's storage (n a multiple of the block size). */
static void fill_row(uint32_t type, unsigned char *row, uint64_t n) {
    if (type == KIPP_TYPE_F32) {
        for (uint64_t i = 0; i < n; i++) { float v = frand(); memcpy(row + 4 * i, &v, 4); }
    } else if (type == KIPP_TYPE_F16 || type == KIPP_TYPE_BF16) {
        for (uint64_t i = 0; i < n; i++) {
            float v = frand();
            uint32_t u;
            memcpy(&u, &v, 4);
            uint16_t h = type == KIPP_TYPE_F16 ? kipp_f32_to_f16(v) : (uint16_t)(u >> 16);
            memcpy(row + 2 * i, &h, 2);
        }
    } else { /* block types: random bytes with a sane f16 scale at each block's start */
        const uint32_t bb = kipp_type_block_bytes(type);
        for (uint64_t i = 0; i < kipp_type_row_bytes(type, n); i++) row[i] = (unsigned char)(frand() * 128 + 128);
        for (uint64_t b = 0; b < kipp_type_row_bytes(type, n) / bb; b++) {
            uint16_t d = kipp_f32_to_f16(0.01f + 0.02f * fabsf(frand()));
            memcpy(row + b * bb, &d, 2);
        }
    }
}

static double ref_dot(uint32_t type, const void *row, const float *x, uint64_t n, double *mag) {
    float *w = malloc(n * sizeof *w);
    kipp_dequantize_row(type, row, w, n);
    double s = 0.0;
    *mag = 0.0;
    for (uint64_t i = 0; i < n; i++) { s += (double)w[i] * x[i]; *mag += fabs((double)w[i] * x[i]); }
    free(w);
    return s;
}

static void check_level(const kipp_cpu_kernels *k) {
    static const uint32_t types[] = {KIPP_TYPE_F32, KIPP_TYPE_F16, KIPP_TYPE_BF16, KIPP_TYPE_Q8_0};
    static const uint64_t lens[] = {1, 7, 15, 17, 31, 33, 100, 257, 1023, 4099};
    enum { MAXN = 4352 };
    unsigned char *row = malloc(MAXN * 4);
    float *x = malloc(MAXN * sizeof *x);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti], be = kipp_type_block_elems(type);
        kipp_cpu_dot_fn dot = kipp_cpu_kernels_dot(k, type);
        KT_CHECK(dot != NULL, "%s has no dot for %s", k->isa, kipp_type_name(type));
        if (!dot) continue;
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const uint64_t n = be == 1 ? lens[li] : ((lens[li] + be - 1) / be) * be;
            for (uint64_t i = 0; i < n; i++) x[i] = frand();
            fill_row(type, row, n);
            double mag;
            const double want = ref_dot(type, row, x, n, &mag);
            const double got = dot(row, x, n);
            /* f32 accumulation of n products: error well under n * eps * sum|w x| */
            KT_CHECK(fabs(got - want) <= 1e-6 * (double)n * mag + 1e-30, "%s %s n=%llu: %.9g vs %.9g",
                     k->isa, kipp_type_name(type), (unsigned long long)n, got, want);
        }
    }
    /* the dequantize fallback on two block types */
    static const uint32_t fb[] = {KIPP_TYPE_Q8_0, KIPP_TYPE_Q4_0};
    for (size_t ti = 0; ti < 2; ti++) {
        const uint64_t n = 8 * kipp_type_block_elems(fb[ti]);
        for (uint64_t i = 0; i < n; i++) x[i] = frand();
        fill_row(fb[ti], row, n);
        double mag;
        const double want = ref_dot(fb[ti], row, x, n, &mag);
        const double got = kipp_cpu_dot_dequant(fb[ti], row, x, n);
        KT_CHECK(fabs(got - want) <= 1e-6 * (double)n * mag, "dequant fallback %s: %.9g vs %.9g",
                 kipp_type_name(fb[ti]), got, want);
    }
    free(row);
    free(x);
}

void kt_suite_cpu_kernels(void) {
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    char err[256];
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        const kipp_cpu_kernels *k;
        kipp_status st = kipp_cpu_kernels_select(isas[i], &k, err, sizeof err);
        if (!kipp_cpu_isa_available(isas[i])) {
            KT_CHECK(st != KIPP_OK && strstr(err, "lacks"), "forcing missing %s: %s", isas[i], err);
            continue;
        }
        KT_CHECK(st == KIPP_OK && strcmp(k->isa, isas[i]) == 0, "select %s: %s", isas[i], err);
        if (st == KIPP_OK) check_level(k);
    }
    const kipp_cpu_kernels *k;
    KT_CHECK(kipp_cpu_kernels_select("avx9", &k, err, sizeof err) != KIPP_OK && strstr(err, "avx9"),
             "unknown level accepted");
    KT_CHECK(kipp_cpu_kernels_select(NULL, &k, err, sizeof err) == KIPP_OK, "best level: %s", err);
}
