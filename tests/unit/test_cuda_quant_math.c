/* test_cuda_quant_math.c — unit suite for src/backend/cuda/quant_math.h, the dequantization
 * the cuda kernels run, compiled here as plain C: for every type it decodes, random blocks and
 * extreme ones (f16 scales at max / subnormal / zero / inf / NaN, all-min and all-max quants)
 * read group by group through kq_row_group8() must equal kipp_dequantize_row() bit for bit;
 * f16 -> f32 over all 65536 halves; the bf16 split's error bound. Runs without a GPU. */
#include "backend/cuda/quant_math.h"
#include "core/types.h"
#include "kt.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t k_types[] = {
    KIPP_TYPE_F32,  KIPP_TYPE_F16,  KIPP_TYPE_BF16, KIPP_TYPE_Q8_0,   KIPP_TYPE_Q4_0,
    KIPP_TYPE_Q4_K, KIPP_TYPE_Q6_K, KIPP_TYPE_Q4_1, KIPP_TYPE_Q5_0,   KIPP_TYPE_Q5_1,
    KIPP_TYPE_Q5_K, KIPP_TYPE_Q3_K, KIPP_TYPE_Q2_K, KIPP_TYPE_IQ4_NL, KIPP_TYPE_IQ4_XS,
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) { /* xorshift64*, reproducible */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545f4914f6cdd1dull) >> 32);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Byte offsets of the f16 scale fields of one block of each quantized type (the fields the
 * extreme cases overwrite); -1 ends the list. */
void kt_scale_offsets(uint32_t type, int off[3]) {
    off[0] = off[1] = off[2] = -1;
    switch (type) {
    case KIPP_TYPE_Q4_0: case KIPP_TYPE_Q5_0: case KIPP_TYPE_Q8_0: case KIPP_TYPE_IQ4_NL:
    case KIPP_TYPE_IQ4_XS: off[0] = 0; break;
    case KIPP_TYPE_Q4_1: case KIPP_TYPE_Q5_1: case KIPP_TYPE_Q4_K: case KIPP_TYPE_Q5_K:
        off[0] = 0, off[1] = 2; break;
    case KIPP_TYPE_Q2_K: off[0] = 80, off[1] = 82; break;
    case KIPP_TYPE_Q3_K: off[0] = 108; break;
    case KIPP_TYPE_Q6_K: off[0] = 208; break;
    default: break;
    }
}

/* Compares one row of n elements decoded both ways; returns the mismatch count (NaN equal
 * to NaN only with the same bits). */
static int compare_row(uint32_t type, const uint8_t *row, uint32_t n, float *ref,
                       const char *what) {
    int bad = 0;
    kipp_dequantize_row(type, row, ref, n);
    for (uint32_t k = 0; k < n / 8; k++) {
        float o[8];
        if (!kq_row_group8(type, row, k, o)) return (int)n;
        for (int i = 0; i < 8; i++)
            if (bits(o[i]) != bits(ref[8 * k + i])) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s %s element %u: %08x want %08x\n", kipp_type_name(type),
                            what, 8 * k + i, bits(o[i]), bits(ref[8 * k + i]));
            }
    }
    return bad;
}

static void test_geometry(void) {
    for (size_t t = 0; t < N_TYPES; t++) {
        const uint32_t ty = k_types[t];
        const uint32_t be = kipp_type_block_elems(ty), bb = kipp_type_block_bytes(ty);
        /* a kernel block of the float types is 8 elements of the file's 1-element blocks */
        const uint32_t mul = be == 1 ? 8 : 1;
        KT_CHECK((uint32_t)kq_block_elems(ty) == be * mul, "%s", kipp_type_name(ty));
        KT_CHECK((uint32_t)kq_block_bytes(ty) == bb * mul, "%s", kipp_type_name(ty));
    }
    KT_CHECK(kq_block_elems(KIPP_TYPE_Q8_0 + 1) == 0);
    float o[8];
    KT_CHECK(kq_dequant8(9, (const uint8_t *)"", 0, o) == 0, "Q8_1 is not decoded");
}

static void test_f16_all(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++)
        if (bits(kq_f16(h)) != bits(kipp_f16_to_f32((uint16_t)h))) bad++;
    KT_CHECK(bad == 0, "%d halves differ", bad);
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++)
        if (bits(kq_bf16(h)) != bits(kipp_bf16_to_f32((uint16_t)h))) bad++;
    KT_CHECK(bad == 0, "%d bf16 differ", bad);
}

static void test_random_blocks(void) {
    enum { N = 1024 }; /* 4 K-quant blocks, 32 small blocks, 128 float groups */
    static uint8_t row[N * 4];
    static float ref[N];
    for (size_t t = 0; t < N_TYPES; t++) {
        const uint32_t ty = k_types[t];
        const uint64_t nb = kipp_type_row_bytes(ty, N);
        const uint32_t bb = kipp_type_block_bytes(ty);
        int off[3];
        kt_scale_offsets(ty, off);
        int bad = 0;
        for (int trial = 0; trial < 200; trial++) {
            for (uint64_t i = 0; i < nb; i++) row[i] = (uint8_t)rnd();
            /* Random bytes make f16 scales NaN/inf in 1/32 of blocks, which a NaN-equal
             * comparison covers; keep most scales finite so the arithmetic is exercised. */
            if (trial % 4 != 0 && off[0] >= 0)
                for (uint64_t b = 0; b < nb / bb; b++)
                    for (int f = 0; f < 3 && off[f] >= 0; f++) row[b * bb + off[f] + 1] &= 0x7b;
            bad += compare_row(ty, row, N, ref, "random");
        }
        KT_CHECK(bad == 0, "%s: %d random elements differ", kipp_type_name(ty), bad);
    }
}

/* Extreme blocks: every byte outside the scales 0x00, 0xff or 0x55/0xaa patterns (all-min,
 * all-max, alternating quants and sub-scales), with every scale field one of max, the
 * smallest subnormal, the largest subnormal, +-0, inf, NaN, 1.0. */
static void test_extreme_blocks(void) {
    static const uint16_t scales[] = {0x7bff, 0xfbff, 0x0001, 0x03ff, 0x8001, 0x0000, 0x8000,
                                      0x7c00, 0x7e01, 0x3c00, 0x0400};
    static const uint8_t fill[] = {0x00, 0xff, 0x55, 0xaa, 0x0f, 0xf0, 0x80, 0x7f};
    enum { N = 512 };
    static uint8_t row[N * 4];
    static float ref[N];
    for (size_t t = 0; t < N_TYPES; t++) {
        const uint32_t ty = k_types[t];
        const uint64_t nb = kipp_type_row_bytes(ty, N);
        const uint32_t bb = kipp_type_block_bytes(ty);
        int off[3], bad = 0;
        kt_scale_offsets(ty, off);
        for (size_t f = 0; f < sizeof fill; f++)
            for (size_t s0 = 0; s0 < sizeof scales / sizeof scales[0]; s0++) {
                const size_t s1 = (s0 * 7 + 3) % (sizeof scales / sizeof scales[0]);
                memset(row, fill[f], nb);
                if (off[0] < 0) { /* float types: the scale patterns are the values */
                    for (uint64_t i = 0; i + 1 < nb; i += 2) {
                        row[i] = (uint8_t)scales[(s0 + i) % 11];
                        row[i + 1] = (uint8_t)(scales[(s0 + i) % 11] >> 8);
                    }
                } else {
                    for (uint64_t b = 0; b < nb / bb; b++)
                        for (int k = 0; k < 3 && off[k] >= 0; k++) {
                            const uint16_t v = scales[k == 0 ? s0 : s1];
                            row[b * bb + off[k]] = (uint8_t)v;
                            row[b * bb + off[k] + 1] = (uint8_t)(v >> 8);
                        }
                }
                bad += compare_row(ty, row, N, ref, "extreme");
            }
        KT_CHECK(bad == 0, "%s: %d extreme elements differ", kipp_type_name(ty), bad);
    }
}

/* The bf16 split: hi + lo recovers x to 2^-16 relative (the derivation in quant_math.h gives
 * 2^-18; the GEMM's bound in tests/cuda/ops_mm.c relies on 2^-16), and hi is bf16(x) rounded
 * to nearest even, as types.c's kipp_f32_to_bf16. */
static void test_bf16_split(void) {
    int bad = 0, bad_rn = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = rnd();
        const uint32_t e = (u >> 23) & 0xff;
        if (e == 0xff || e < 30 || e > 220) u = (u & 0x807fffffu) | 0x3f800000u;
        float x;
        memcpy(&x, &u, sizeof x);
        uint16_t hi, lo;
        kq_bf16_split(x, &hi, &lo);
        if (hi != kipp_f32_to_bf16(x)) bad_rn++;
        const double r = (double)x - ((double)kq_bf16(hi) + (double)kq_bf16(lo));
        if (fabs(r) > ldexp(fabs((double)x), -16)) bad++;
    }
    KT_CHECK(bad == 0, "%d splits worse than 2^-16", bad);
    KT_CHECK(bad_rn == 0, "%d hi differ from kipp_f32_to_bf16", bad_rn);
}

void kt_suite_cuda_quant_math(void) {
    test_geometry();
    test_f16_all();
    test_random_blocks();
    test_extreme_blocks();
    test_bf16_split();
}
