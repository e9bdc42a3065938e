/* test_types.c — unit suite for src/core/types.c: the type table, row sizes, f16 <-> f32
 * (exhaustive over all 65536 halves, ties, overflow, subnormals, NaN) and bit-exact
 * dequantization against fixtures written by tests/fuzz/make_quant_fixture.py from gguf-py.
 * Fixtures are read from $KIPP_TEST_DATA (default "tests/unit/data"). */
#include "core/types.h"
#include "kt.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- type table and row sizes ------------------------------------------------------------ */

static void test_type_table(void) {
    static const uint32_t supported[] = {0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23, 30};
    static const uint32_t blk[] = {1, 1, 32, 32, 32, 32, 32, 256, 256, 256, 256, 256, 32, 256, 1};
    static const uint32_t bytes[] = {4, 2, 18, 20, 22, 24, 34, 84, 110, 144, 176, 210, 18, 136, 2};
    uint64_t mask = 0;
    for (size_t i = 0; i < sizeof supported / sizeof supported[0]; i++) {
        KT_CHECK(kipp_type_supported(supported[i]), "type %u", supported[i]);
        KT_CHECK(kipp_type_block_elems(supported[i]) == blk[i], "type %u", supported[i]);
        KT_CHECK(kipp_type_block_bytes(supported[i]) == bytes[i], "type %u", supported[i]);
        mask |= 1ull << supported[i];
    }
    KT_CHECK(kipp_type_mask() == mask, "mask %llx want %llx", (unsigned long long)kipp_type_mask(),
             (unsigned long long)mask);
    static const uint32_t unsupported[] = {4, 5, 9, 15, 16, 17, 18, 19, 21, 22, 24, 28, 29, 31,
                                           39, 42, 43, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        KT_CHECK(!kipp_type_supported(unsupported[i]), "type %u", unsupported[i]);
        KT_CHECK(kipp_type_block_elems(unsupported[i]) == 0, "type %u", unsupported[i]);
        KT_CHECK(kipp_type_block_bytes(unsupported[i]) == 0, "type %u", unsupported[i]);
    }
    KT_CHECK(strcmp(kipp_type_name(0), "F32") == 0);
    KT_CHECK(strcmp(kipp_type_name(12), "Q4_K") == 0);
    KT_CHECK(strcmp(kipp_type_name(13), "Q5_K") == 0);
    KT_CHECK(strcmp(kipp_type_name(14), "Q6_K") == 0);
    KT_CHECK(strcmp(kipp_type_name(20), "IQ4_NL") == 0);
    KT_CHECK(strcmp(kipp_type_name(30), "BF16") == 0);
    KT_CHECK(strcmp(kipp_type_name(39), "MXFP4") == 0);
    KT_CHECK(strcmp(kipp_type_name(42), "Q2_0") == 0);
    KT_CHECK(strcmp(kipp_type_name(4), "type 4") == 0, "%s", kipp_type_name(4));
    KT_CHECK(strcmp(kipp_type_name(99), "type 99") == 0, "%s", kipp_type_name(99));
    KT_CHECK(strcmp(kipp_type_name(UINT32_MAX), "type 4294967295") == 0);
}

static void test_row_bytes(void) {
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_F32, 7) == 28);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_F16, 7) == 14);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_BF16, 1024) == 2048);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q8_0, 32) == 34);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q4_0, 1024) == 32 * 18);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q4_K, 4096) == 16 * 144);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q6_K, 256) == 210);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q5_K, 1024) == 4 * 176);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q3_K, 512) == 2 * 110);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q2_K, 256) == 84);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_IQ4_XS, 2560) == 10 * 136);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q5_1, 64) == 48);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_IQ4_NL, 96) == 54);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q5_0, 48) == 0);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_IQ4_XS, 32) == 0);
    /* not a multiple of the block size */
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q8_0, 33) == 0);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q4_K, 255) == 0);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q6_K, 128) == 0);
    /* unsupported types and zero */
    KT_CHECK(kipp_type_row_bytes(16, 256) == 0);
    KT_CHECK(kipp_type_row_bytes(999, 256) == 0);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_F32, 0) == 0);
    /* overflow of n/blk * bytes */
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_F32, 1ull << 62) == 0);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_F32, (1ull << 62) - 1) == ((1ull << 62) - 1) * 4);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q8_0, UINT64_MAX - (UINT64_MAX % 32)) == 0);
    /* 210/256 < 1: the largest Q6_K row does not overflow */
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q6_K, UINT64_MAX - (UINT64_MAX % 256)) ==
             ((1ull << 56) - 1) * 210);
    /* the new geometries: 24/32 and 176/256 < 1 never overflow; nothing above 1 byte per
     * element is added, so only F32 (above) can */
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q5_1, UINT64_MAX - (UINT64_MAX % 32)) ==
             ((1ull << 59) - 1) * 24);
    KT_CHECK(kipp_type_row_bytes(KIPP_TYPE_Q5_K, UINT64_MAX - (UINT64_MAX % 256)) ==
             ((1ull << 56) - 1) * 176);
}

/* ---- f16 ----------------------------------------------------------------------------- */

/* Independent decoding by arithmetic, to check the bit-twiddling one. */
static float f16_by_arith(uint16_t h) {
    const int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    if (exp == 0) return sign * ldexpf((float)man, -24);
    if (exp == 31) return man ? NAN : sign * INFINITY;
    return sign * ldexpf((float)(1024 + man), exp - 25);
}

static void test_f16_to_f32(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = kipp_f16_to_f32((uint16_t)h);
        const uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
        int ok;
        if (exp == 31 && man) /* NaN: sign and payload kept, as ggml's conversion does */
            ok = isnan(f) && bits_of(f) == (((h & 0x8000u) << 16) | 0x7f800000u | (man << 13));
        else
            ok = bits_of(f) == bits_of(f16_by_arith((uint16_t)h));
        if (!ok && bad++ < 5) KT_CHECK(ok, "h=0x%04x -> 0x%08x", (unsigned)h, bits_of(f));
    }
    KT_CHECK(bad == 0, "%d halves decoded wrong", bad);
    KT_CHECK(kipp_f16_to_f32(0x3c00) == 1.0f);
    KT_CHECK(kipp_f16_to_f32(0xc000) == -2.0f);
    KT_CHECK(kipp_f16_to_f32(0x7bff) == 65504.0f);
    KT_CHECK(kipp_f16_to_f32(0x0001) == ldexpf(1.0f, -24));  /* smallest subnormal */
    KT_CHECK(kipp_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24)); /* largest subnormal */
    KT_CHECK(kipp_f16_to_f32(0x0400) == ldexpf(1.0f, -14));  /* smallest normal */
    KT_CHECK(bits_of(kipp_f16_to_f32(0x8000)) == 0x80000000u); /* -0 */
    KT_CHECK(kipp_f16_to_f32(0x7c00) == INFINITY);
    KT_CHECK(kipp_f16_to_f32(0xfc00) == -INFINITY);
    KT_CHECK(isnan(kipp_f16_to_f32(0x7e00)) && isnan(kipp_f16_to_f32(0xfc01)));
}

static void test_f32_to_f16(void) {
    int bad = 0;
    /* every non-NaN half survives a round trip */
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
        const uint16_t back = kipp_f32_to_f16(kipp_f16_to_f32((uint16_t)h));
        if (back != h && bad++ < 5) KT_CHECK(back == h, "h=0x%04x -> 0x%04x", (unsigned)h, back);
    }
    KT_CHECK(bad == 0, "%d round trips failed", bad);

    /* Midpoints between neighbouring finite halves (exact in f32: 12 significant bits) tie
     * to the even one; one f32 ulp either side rounds to the nearer one. */
    bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        const float lo = kipp_f16_to_f32((uint16_t)h), hi = kipp_f16_to_f32((uint16_t)(h + 1));
        const float mid = (float)(((double)lo + (double)hi) / 2);
        const uint16_t even = (uint16_t)((h & 1) ? h + 1 : h);
        for (int s = 0; s < 2; s++) {
            const uint16_t sg = s ? 0x8000 : 0;
            const float m = s ? -mid : mid;
            const int ok = kipp_f32_to_f16(m) == (even | sg) &&
                           kipp_f32_to_f16(nextafterf(m, s ? -INFINITY : INFINITY)) ==
                               ((h + 1) | sg) &&
                           kipp_f32_to_f16(nextafterf(m, 0.0f)) == (h | sg);
            if (!ok && bad++ < 5) KT_CHECK(ok, "rounding around h=0x%04x sign %d", (unsigned)h, s);
        }
    }
    KT_CHECK(bad == 0, "%d rounding cases failed", bad);

    /* overflow: 65520 is the tie between 65504 (odd) and 2^16, so it goes to inf */
    KT_CHECK(kipp_f32_to_f16(65504.0f) == 0x7bff);
    KT_CHECK(kipp_f32_to_f16(nextafterf(65520.0f, 0.0f)) == 0x7bff);
    KT_CHECK(kipp_f32_to_f16(65520.0f) == 0x7c00);
    KT_CHECK(kipp_f32_to_f16(-65520.0f) == 0xfc00);
    KT_CHECK(kipp_f32_to_f16(1e10f) == 0x7c00);
    KT_CHECK(kipp_f32_to_f16(FLT_MAX) == 0x7c00);
    KT_CHECK(kipp_f32_to_f16(INFINITY) == 0x7c00);
    KT_CHECK(kipp_f32_to_f16(-INFINITY) == 0xfc00);
    /* underflow: 2^-25 ties to even zero; anything above rounds to the smallest subnormal */
    KT_CHECK(kipp_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000);
    KT_CHECK(kipp_f32_to_f16(-ldexpf(1.0f, -25)) == 0x8000);
    KT_CHECK(kipp_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 0x0001);
    KT_CHECK(kipp_f32_to_f16(ldexpf(3.0f, -25)) == 0x0002); /* 1.5 ulp ties to 2 */
    KT_CHECK(kipp_f32_to_f16(ldexpf(1.0f, -30)) == 0x0000);
    KT_CHECK(kipp_f32_to_f16(-ldexpf(1.0f, -30)) == 0x8000);
    KT_CHECK(kipp_f32_to_f16(float_of(1)) == 0x0000); /* f32 subnormal */
    KT_CHECK(kipp_f32_to_f16(ldexpf(2047.0f, -25)) == 0x0400); /* rounds up into normals */
    KT_CHECK(kipp_f32_to_f16(-0.0f) == 0x8000);
    KT_CHECK(kipp_f32_to_f16(1.0f) == 0x3c00);
    KT_CHECK(kipp_f32_to_f16(0.1f) == 0x2e66);
    /* NaN stays NaN (quiet), sign kept, even a signalling NaN with a low-bit payload */
    const uint16_t qn = kipp_f32_to_f16(NAN), sn = kipp_f32_to_f16(float_of(0xff800001u));
    KT_CHECK((qn & 0x7c00) == 0x7c00 && (qn & 0x3ff) != 0, "0x%04x", qn);
    KT_CHECK((sn & 0x7c00) == 0x7c00 && (sn & 0x3ff) != 0 && (sn & 0x8000), "0x%04x", sn);
}

static void test_bf16(void) {
    KT_CHECK(kipp_bf16_to_f32(0x3f80) == 1.0f);
    KT_CHECK(kipp_bf16_to_f32(0xc000) == -2.0f);
    KT_CHECK(kipp_bf16_to_f32(0x7f80) == INFINITY);
    KT_CHECK(isnan(kipp_bf16_to_f32(0x7fc1)));
    KT_CHECK(bits_of(kipp_bf16_to_f32(0x0001)) == 0x00010000u);
}

/* ---- dequantization ---------------------------------------------------------------------- */

/* Known answers built by hand, independent of gguf-py. */
static void test_dequant_known(void) {
    uint8_t blk[210];
    float y[256];
    /* Q8_0: d = 0.5 (0x3800), q = j - 16 */
    blk[0] = 0x00, blk[1] = 0x38;
    for (int j = 0; j < 32; j++) blk[2 + j] = (uint8_t)(int8_t)(j - 16);
    kipp_dequantize_row(KIPP_TYPE_Q8_0, blk, y, 32);
    for (int j = 0; j < 32; j++) KT_CHECK(y[j] == (float)(j - 16) * 0.5f, "q8_0 j=%d", j);
    /* Q4_0: d = -2 (0xc000); byte j = lo j, hi 15-j -> element j = (j-8)*d, j+16 = (7-j)*d */
    blk[0] = 0x00, blk[1] = 0xc0;
    for (int j = 0; j < 16; j++) blk[2 + j] = (uint8_t)(j | ((15 - j) << 4));
    kipp_dequantize_row(KIPP_TYPE_Q4_0, blk, y, 32);
    for (int j = 0; j < 16; j++) {
        KT_CHECK(y[j] == (float)(j - 8) * -2.0f, "q4_0 j=%d", j);
        KT_CHECK(y[j + 16] == (float)(7 - j) * -2.0f, "q4_0 j=%d", j + 16);
    }
    /* Q4_K: d = 1, dmin = 0.5; sub-block s gets scale s+1 and min 2s (6-bit packing), every
     * nibble is 3: element in sub-block s = (s+1)*3 - 0.5*2s. */
    memset(blk, 0, sizeof blk);
    blk[0] = 0x00, blk[1] = 0x3c, blk[2] = 0x00, blk[3] = 0x38;
    for (int s = 0; s < 8; s++) {
        const int sc = s + 1, mn = 2 * s;
        if (s < 4) {
            blk[4 + s] |= (uint8_t)sc;
            blk[4 + s + 4] |= (uint8_t)mn;
        } else {
            blk[4 + s + 4] = (uint8_t)((sc & 15) | ((mn & 15) << 4));
            blk[4 + s - 4] |= (uint8_t)((sc >> 4) << 6);
            blk[4 + s] |= (uint8_t)((mn >> 4) << 6);
        }
    }
    memset(blk + 16, 0x33, 128);
    kipp_dequantize_row(KIPP_TYPE_Q4_K, blk, y, 256);
    for (int e = 0; e < 256; e++) {
        const int s = e / 32;
        KT_CHECK(y[e] == (float)(s + 1) * 3.0f - 0.5f * (float)(2 * s), "q4_k e=%d %g", e, y[e]);
    }
    /* Q6_K: d = 1 at byte 208, scales[i] = i - 8, all ql/qh zero -> q = -32 */
    memset(blk, 0, sizeof blk);
    for (int i = 0; i < 16; i++) blk[192 + i] = (uint8_t)(int8_t)(i - 8);
    blk[208] = 0x00, blk[209] = 0x3c;
    kipp_dequantize_row(KIPP_TYPE_Q6_K, blk, y, 256);
    for (int e = 0; e < 256; e++) KT_CHECK(y[e] == (float)(e / 16 - 8) * -32.0f, "q6_k e=%d", e);
    /* F32 copies; unsupported types and bad n give zeros rather than garbage */
    const float src[3] = {1.5f, -0.0f, 3.25f};
    kipp_dequantize_row(KIPP_TYPE_F32, src, y, 3);
    KT_CHECK(memcmp(y, src, sizeof src) == 0);
    y[0] = y[1] = 7.0f;
    kipp_dequantize_row(16, blk, y, 2);
    KT_CHECK(y[0] == 0.0f && y[1] == 0.0f);
}

typedef struct {
    const char *file;
    uint32_t type;
} fixture;

static uint8_t *read_file(const char *path, size_t *n_out) {
    FILE *f = fopen(path, "rb");
    uint8_t *p = NULL;
    long n;
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (p = malloc((size_t)n)) && fread(p, 1, (size_t)n, f) == (size_t)n) {
        *n_out = (size_t)n;
    } else {
        free(p);
        p = NULL;
    }
    fclose(f);
    return p;
}

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Layout: docs at the top of tests/fuzz/make_quant_fixture.py. */
static void test_dequant_fixture(const fixture *fx) {
    const char *dir = getenv("KIPP_TEST_DATA");
    char path[1024];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/%s", dir && dir[0] ? dir : "tests/unit/data", fx->file);
    uint8_t *buf = read_file(path, &n);
    KT_CHECK(buf != NULL, "cannot read fixture %s (set KIPP_TEST_DATA)", path);
    if (!buf) return;
    const uint32_t n_blocks = n >= 24 ? rd32(buf + 12) : 0;
    const uint32_t blk_bytes = n >= 24 ? rd32(buf + 16) : 0, blk_elems = n >= 24 ? rd32(buf + 20) : 0;
    const uint64_t n_elems = (uint64_t)n_blocks * blk_elems;
    const int hdr_ok = n >= 24 && memcmp(buf, "KQFX", 4) == 0 && rd32(buf + 4) == 1 &&
                       rd32(buf + 8) == fx->type && blk_bytes == kipp_type_block_bytes(fx->type) &&
                       blk_elems == kipp_type_block_elems(fx->type) &&
                       n == 24 + (uint64_t)n_blocks * blk_bytes + n_elems * 4;
    KT_CHECK(hdr_ok, "fixture %s has a bad header or size", path);
    if (!hdr_ok) {
        free(buf);
        return;
    }
    const uint8_t *blocks = buf + 24, *expected = blocks + (size_t)n_blocks * blk_bytes;
    float *y = malloc((size_t)n_elems * sizeof *y);
    KT_CHECK(y != NULL);
    if (!y) {
        free(buf);
        return;
    }
    /* whole buffer in one call, then block by block: both must be bit-identical */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0) {
            kipp_dequantize_row(fx->type, blocks, y, n_elems);
        } else {
            for (uint32_t b = 0; b < n_blocks; b++)
                kipp_dequantize_row(fx->type, blocks + (size_t)b * blk_bytes, y + (size_t)b * blk_elems,
                                    blk_elems);
        }
        uint64_t n_bad = 0, first = 0;
        for (uint64_t i = 0; i < n_elems; i++) {
            if (bits_of(y[i]) != rd32(expected + 4 * i) && n_bad++ == 0) first = i;
        }
        KT_CHECK(n_bad == 0, "%s pass %d: %llu of %llu values differ; first at %llu: got 0x%08x "
                 "want 0x%08x", fx->file, pass, (unsigned long long)n_bad,
                 (unsigned long long)n_elems, (unsigned long long)first, bits_of(y[first]),
                 rd32(expected + 4 * first));
    }
    free(y);
    free(buf);
}

void kt_suite_types(void) {
    static const fixture fixtures[] = {
        {"quant_f16.bin", KIPP_TYPE_F16},   {"quant_bf16.bin", KIPP_TYPE_BF16},
        {"quant_q4_0.bin", KIPP_TYPE_Q4_0}, {"quant_q8_0.bin", KIPP_TYPE_Q8_0},
        {"quant_q4_k.bin", KIPP_TYPE_Q4_K}, {"quant_q6_k.bin", KIPP_TYPE_Q6_K},
        {"quant_q4_1.bin", KIPP_TYPE_Q4_1}, {"quant_q5_0.bin", KIPP_TYPE_Q5_0},
        {"quant_q5_1.bin", KIPP_TYPE_Q5_1}, {"quant_q2_k.bin", KIPP_TYPE_Q2_K},
        {"quant_q3_k.bin", KIPP_TYPE_Q3_K}, {"quant_q5_k.bin", KIPP_TYPE_Q5_K},
        {"quant_iq4_nl.bin", KIPP_TYPE_IQ4_NL}, {"quant_iq4_xs.bin", KIPP_TYPE_IQ4_XS},
        {"quant_q4_1_enc.bin", KIPP_TYPE_Q4_1}, {"quant_q5_0_enc.bin", KIPP_TYPE_Q5_0},
        {"quant_q5_1_enc.bin", KIPP_TYPE_Q5_1},
    };
    test_type_table();
    test_row_bytes();
    test_f16_to_f32();
    test_f32_to_f16();
    test_bf16();
    test_dequant_known();
    for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++)
        test_dequant_fixture(&fixtures[i]);
}
