/* types.c — ggml tensor type table, f16 <-> f32 conversion and scalar row dequantization
 * for the types Kipp computes with (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS). Bit-exact with ggml's reference
 * dequantize_row_* (and gguf-py's gguf.quants, the reference the fixtures are made from);
 * plain C, no SIMD. Does not quantize. Layouts: docs/qwen3-gguf-reference.md section 5 and
 * the comment above each dequantizer. */

/* Numerics: d and dmin are f16 (11 significant bits) and the sub-scales and quants are
 * small integers (|d*scale*q| spans at most 23 bits: IQ4_XS's 6-bit scale times its 7-bit
 * levels), so every product below (d*scale, dmin*min, (d*scale)*q) is exact in f32; the
 * only roundings are the final addition of the min (Q4_1, Q5_1) or its subtraction (Q2_K,
 * Q4_K, Q5_K). Hence ggml's order (d*scale first, then *q, then - dmin*min) is kept for
 * clarity, and an FMA cannot change a result either. */

#include "core/types.h"

#include <stdio.h>
#include <string.h>

/* ---- type table -------------------------------------------------------------------- */

typedef struct {
    const char *name;     /* NULL: id retired or never assigned */
    uint32_t block_elems; /* 0: not supported by Kipp */
    uint32_t block_bytes;
} type_traits;

/* Ids and names follow ggml's enum ggml_type (reference section 5.1). Only the supported
 * rows carry a geometry: a tensor of any other type is refused by the GGUF reader. */
static const type_traits k_types[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 0, 0},        [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 0, 0},       [16] = {"IQ2_XXS", 0, 0},
    [17] = {"IQ2_XS", 0, 0},     [18] = {"IQ3_XXS", 0, 0},    [19] = {"IQ1_S", 0, 0},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 0, 0},      [22] = {"IQ2_S", 0, 0},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 0, 0},         [25] = {"I16", 0, 0},
    [26] = {"I32", 0, 0},        [27] = {"I64", 0, 0},        [28] = {"F64", 0, 0},
    [29] = {"IQ1_M", 0, 0},      [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 0, 0},
    [35] = {"TQ2_0", 0, 0},      [39] = {"MXFP4", 0, 0},      [40] = {"NVFP4", 0, 0},
    [41] = {"Q1_0", 0, 0},       [42] = {"Q2_0", 0, 0},
};
#define N_TYPES (sizeof(k_types) / sizeof(k_types[0]))

static const type_traits *traits_of(uint32_t type_id) {
    return type_id < N_TYPES ? &k_types[type_id] : NULL;
}

int kipp_type_supported(uint32_t type_id) {
    const type_traits *t = traits_of(type_id);
    return t && t->block_elems != 0;
}

uint64_t kipp_type_mask(void) {
    uint64_t m = 0;
    for (uint32_t i = 0; i < N_TYPES && i < 64; i++)
        if (k_types[i].block_elems) m |= 1ull << i;
    return m;
}

const char *kipp_type_name(uint32_t type_id) {
    /* Thread-local so two threads naming unknown ids do not garble each other's text; the
     * string stays valid until the same thread asks again. */
    static _Thread_local char unknown[32];
    const type_traits *t = traits_of(type_id);
    if (t && t->name) return t->name;
    snprintf(unknown, sizeof unknown, "type %u", (unsigned)type_id);
    return unknown;
}

uint32_t kipp_type_block_elems(uint32_t type_id) {
    return kipp_type_supported(type_id) ? k_types[type_id].block_elems : 0;
}

uint32_t kipp_type_block_bytes(uint32_t type_id) {
    return kipp_type_supported(type_id) ? k_types[type_id].block_bytes : 0;
}

uint64_t kipp_type_row_bytes(uint32_t type_id, uint64_t n) {
    uint64_t n_bytes;
    if (!kipp_type_supported(type_id)) return 0;
    const type_traits *t = &k_types[type_id];
    if (n % t->block_elems != 0) return 0;
    if (__builtin_mul_overflow(n / t->block_elems, (uint64_t)t->block_bytes, &n_bytes)) return 0;
    return n_bytes;
}

/* ---- f16 / f32 ----------------------------------------------------------------------- */

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float kipp_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp_h = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp_h == 0x1f) /* inf, or NaN with its payload and quiet bit kept as ggml does */
        return f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp_h == 0) {
        if (man == 0) return f32_from_bits(sign); /* +-0 */
        /* Subnormal man * 2^-24: shift the leading 1 up to bit 10 and lower the exponent
         * by one per shift; every f16 subnormal is a normal f32, so this is exact. */
        uint32_t exp_f = 127 - 15 + 1;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp_f--;
        }
        return f32_from_bits(sign | (exp_f << 23) | ((man & 0x3ffu) << 13));
    }
    return f32_from_bits(sign | ((exp_h + 127 - 15) << 23) | (man << 13));
}

uint16_t kipp_f32_to_f16(float f) {
    const uint32_t x = f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: keep the top payload bits and force the quiet bit so a
                           * signalling NaN whose payload lives in the low bits stays NaN */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520 = halfway between 65504 (odd mantissa) and 2^16:
                            * ties-to-even rounds up, i.e. to infinity (inf maps here too) */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* normal f16 range, >= 2^-14 */
        /* Add just under half an ulp, plus one if the kept lsb is odd: round-to-nearest-
         * even. A mantissa carry correctly bumps the exponent. Then rebias 127 -> 15. */
        const uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    const uint32_t exp_f = ax >> 23;
    if (exp_f < 102) /* below 2^-25: rounds to zero (2^-25 itself ties to even zero) */
        return sign;
    /* f16 subnormal: value in units of 2^-24 is man_full * 2^(exp_f - 126). */
    const uint32_t man_full = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp_f; /* 14..24 */
    uint32_t q = man_full >> shift;
    const uint32_t rem = man_full & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++; /* may carry into the smallest normal */
    return (uint16_t)(sign | q);
}

/* ---- dequantization ----------------------------------------------------------------- */

/* Blocks are byte-packed with no alignment guarantee: read little-endian bytes. */
static uint16_t rd_u16le(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static float rd_f16(const uint8_t *p) { return kipp_f16_to_f32(rd_u16le(p)); }

/* Q4_0 (18 B): d f16, qs[16]; element j = (lo(qs[j]) - 8) * d, element j+16 uses hi. */
static void dequant_q4_0(const uint8_t *b, float *y, uint64_t n_blocks) {
    for (uint64_t i = 0; i < n_blocks; i++, b += 18, y += 32) {
        const float d = rd_f16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            const int x0 = (qs[j] & 0x0f) - 8;
            const int x1 = (qs[j] >> 4) - 8;
            y[j] = (float)x0 * d;
            y[j + 16] = (float)x1 * d;
        }
    }
}

/* Q8_0 (34 B): d f16, int8 q[32]; element = q * d. */
static void dequant_q8_0(const uint8_t *b, float *y, uint64_t n_blocks) {
    for (uint64_t i = 0; i < n_blocks; i++, b += 34, y += 32) {
        const float d = rd_f16(b);
        for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + j] * d;
    }
}

/* 6-bit scale and min of sub-block s (0..7) from the 12-byte packing shared by Q4_K/Q5_K. */
static void k4_scale_min(int s, const uint8_t *sc, uint8_t *scale, uint8_t *min) {
    if (s < 4) {
        *scale = sc[s] & 63;
        *min = sc[s + 4] & 63;
    } else {
        *scale = (uint8_t)((sc[s + 4] & 0x0f) | ((sc[s - 4] >> 6) << 4));
        *min = (uint8_t)((sc[s + 4] >> 4) | ((sc[s] >> 6) << 4));
    }
}

/* Q4_K (144 B): d @0, dmin @2, scales[12] @4, qs[128] @16. 4 groups of 64: low nibbles
 * of qs[32g..] are sub-block 2g, high nibbles sub-block 2g+1. Evaluation order as ggml:
 * d1 = d*scale and m1 = dmin*min (each rounded), then d1*q, then minus m1. */
static void dequant_q4_k(const uint8_t *b, float *y, uint64_t n_blocks) {
    for (uint64_t i = 0; i < n_blocks; i++, b += 144) {
        const float d = rd_f16(b);
        const float dmin = rd_f16(b + 2);
        const uint8_t *sc = b + 4;
        const uint8_t *q = b + 16;
        for (int g = 0; g < 4; g++, q += 32) {
            uint8_t s_lo, m_lo, s_hi, m_hi;
            k4_scale_min(2 * g, sc, &s_lo, &m_lo);
            k4_scale_min(2 * g + 1, sc, &s_hi, &m_hi);
            const float d1 = d * (float)s_lo, m1 = dmin * (float)m_lo;
            const float d2 = d * (float)s_hi, m2 = dmin * (float)m_hi;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* Q6_K (210 B): ql[128] @0, qh[64] @128, int8 scales[16] @192, d f16 @208 (last).
 * Two halves of 128; element = (d * scales[e/16]) * q with q = 6-bit value - 32. */
static void dequant_q6_k(const uint8_t *b, float *y, uint64_t n_blocks) {
    for (uint64_t i = 0; i < n_blocks; i++, b += 210) {
        const float d = rd_f16(b + 208);
        const uint8_t *ql = b;
        const uint8_t *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, y += 128) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * (float)sc[is + 0] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* Q4_1 (20 B): d f16, m f16, qs[16]; element j = lo(qs[j]) * d + m, element j+16 uses hi. */
static void dequant_q4_1(const uint8_t *b, float *y, uint64_t n_blocks) {
    for (uint64_t i = 0; i < n_blocks; i++, b += 20, y += 32) {
        const float d = rd_f16(b), m = rd_f16(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(qs[j] & 0x0f) * d + m;
            y[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

static uint32_t rd_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The 5-bit values of a Q5_0/Q5_1 block: element j (< 16) is lo(qs[j]) | bit j of qh << 4,
 * element j + 16 is hi(qs[j]) | bit j + 16 of qh << 4 (qh a little-endian uint32). */
static void q5_values(const uint8_t *qh4, const uint8_t *qs, int q[32]) {
    const uint32_t qh = rd_u32le(qh4);
    for (int j = 0; j < 16; j++) {
        q[j] = (int)((qs[j] & 0x0f) | ((qh >> j) & 1u) << 4);
        q[j + 16] = (int)((qs[j] >> 4) | ((qh >> (j + 16)) & 1u) << 4);
    }
}

/* Q5_0 (22 B): d f16, qh[4], qs[16]; element = (5-bit value - 16) * d. */
static void dequant_q5_0(const uint8_t *b, float *y, uint64_t n_blocks) {
    int q[32];
    for (uint64_t i = 0; i < n_blocks; i++, b += 22, y += 32) {
        const float d = rd_f16(b);
        q5_values(b + 2, b + 6, q);
        for (int j = 0; j < 32; j++) y[j] = (float)(q[j] - 16) * d;
    }
}

/* Q5_1 (24 B): d f16, m f16, qh[4], qs[16]; element = 5-bit value * d + m. */
static void dequant_q5_1(const uint8_t *b, float *y, uint64_t n_blocks) {
    int q[32];
    for (uint64_t i = 0; i < n_blocks; i++, b += 24, y += 32) {
        const float d = rd_f16(b), m = rd_f16(b + 2);
        q5_values(b + 4, b + 8, q);
        for (int j = 0; j < 32; j++) y[j] = (float)q[j] * d + m;
    }
}

/* Q2_K (84 B): scales[16] @0 (low nibble scale, high nibble min), qs[64] @16, d f16 @80,
 * dmin f16 @82. Element 128h + 32j + l (h < 2, j < 4, l < 32) is 2 bits of qs[32h + l] at
 * 2j; element e has scale/min byte e / 16. Value (d * scale) * q - dmin * min. */
static void dequant_q2_k(const uint8_t *b, float *y, uint64_t n_blocks) {
    for (uint64_t i = 0; i < n_blocks; i++, b += 84, y += 256) {
        const float d = rd_f16(b + 80), dmin = rd_f16(b + 82);
        const uint8_t *sc = b, *qs = b + 16;
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, j = (e / 32) % 4, l = e % 32;
            const int q = (qs[32 * h + l] >> (2 * j)) & 3;
            const float dl = d * (float)(sc[e / 16] & 0x0f), ml = dmin * (float)(sc[e / 16] >> 4);
            y[e] = dl * (float)q - ml;
        }
    }
}

/* Q3_K (110 B): hmask[32] @0, qs[64] @32, scales[12] @96, d f16 @108. Element
 * 128h + 32j + l is 2 bits of qs[32h + l] at 2j minus 4 unless bit 4h + j of hmask[l] is
 * set; element e has the 6-bit scale s = e / 16: low 4 bits from scales[s] (s < 8) or the
 * high nibble of scales[s - 8], high 2 bits from scales[8 + s % 4] at 2 * (s / 4); value
 * (d * (scale - 32)) * q. */
static void dequant_q3_k(const uint8_t *b, float *y, uint64_t n_blocks) {
    for (uint64_t i = 0; i < n_blocks; i++, b += 110, y += 256) {
        const float d = rd_f16(b + 108);
        const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
        float dl[16];
        for (int s = 0; s < 16; s++) {
            const int lo = s < 8 ? sc[s] & 0x0f : sc[s - 8] >> 4;
            const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
            dl[s] = d * (float)((lo | hi << 4) - 32);
        }
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, j = (e / 32) % 4, l = e % 32;
            const int q = ((qs[32 * h + l] >> (2 * j)) & 3) - ((hm[l] >> (4 * h + j)) & 1 ? 0 : 4);
            y[e] = dl[e / 16] * (float)q;
        }
    }
}

/* Q5_K (176 B): d @0, dmin @2, scales[12] @4 (Q4_K's packing), qh[32] @16, qs[128] @48.
 * Sub-block s (32 elements) takes the low (s even) or high nibble of qs[32(s/2) + l] and
 * bit s of qh[l] as bit 4; value as Q4_K: (d * scale) * q - dmin * min. */
static void dequant_q5_k(const uint8_t *b, float *y, uint64_t n_blocks) {
    for (uint64_t i = 0; i < n_blocks; i++, b += 176) {
        const float d = rd_f16(b), dmin = rd_f16(b + 2);
        const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + 48;
        for (int s = 0; s < 8; s++) {
            uint8_t scale, min;
            k4_scale_min(s, sc, &scale, &min);
            const float d1 = d * (float)scale, m1 = dmin * (float)min;
            const uint8_t *q = qs + 32 * (s / 2);
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> (4 * (s & 1))) & 0x0f) | ((qh[l] >> s) & 1) << 4;
                *y++ = d1 * (float)v - m1;
            }
        }
    }
}

/* IQ4_NL's 16 non-linear levels (ggml's kvalues_iq4nl), shared by IQ4_XS. */
static const int8_t k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

/* IQ4_NL (18 B): d f16, qs[16]; element j = kvalues[lo(qs[j])] * d, j+16 uses hi. */
static void dequant_iq4_nl(const uint8_t *b, float *y, uint64_t n_blocks) {
    for (uint64_t i = 0; i < n_blocks; i++, b += 18, y += 32) {
        const float d = rd_f16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)k_iq4nl[qs[j] & 0x0f];
            y[j + 16] = d * (float)k_iq4nl[qs[j] >> 4];
        }
    }
}

/* IQ4_XS (136 B): d f16 @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8. Sub-block s
 * (32 elements) has the 6-bit scale (nibble s % 2 of scales_l[s / 2]) | (2 bits of scales_h
 * at 2s) << 4, minus 32; its elements are IQ4_NL-coded like one IQ4_NL block over
 * qs[16s .. 16s + 15]. Value (d * scale) * kvalue. */
static void dequant_iq4_xs(const uint8_t *b, float *y, uint64_t n_blocks) {
    for (uint64_t i = 0; i < n_blocks; i++, b += 136) {
        const float d = rd_f16(b);
        const unsigned sh = rd_u16le(b + 2);
        const uint8_t *sl = b + 4, *qs = b + 8;
        for (int s = 0; s < 8; s++, qs += 16, y += 32) {
            const int ls = (((sl[s / 2] >> (4 * (s % 2))) & 0x0f) | ((sh >> (2 * s)) & 3) << 4) - 32;
            const float dl = d * (float)ls;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)k_iq4nl[qs[j] & 0x0f];
                y[j + 16] = dl * (float)k_iq4nl[qs[j] >> 4];
            }
        }
    }
}

void kipp_dequantize_row(uint32_t type_id, const void *row, float *out, uint64_t n) {
    const uint8_t *b = (const uint8_t *)row;
    const uint32_t blk = kipp_type_block_elems(type_id);
    if (blk == 0 || n % blk != 0) {
        /* Caller bug (the GGUF reader guarantees both): produce zeros, never garbage. */
        memset(out, 0, (size_t)n * sizeof *out);
        return;
    }
    switch ((kipp_type)type_id) {
    case KIPP_TYPE_F32: /* GGUF is little-endian, like every host Kipp targets */
        memcpy(out, b, (size_t)n * sizeof(float));
        return;
    case KIPP_TYPE_F16:
        for (uint64_t i = 0; i < n; i++) out[i] = rd_f16(b + 2 * i);
        return;
    case KIPP_TYPE_BF16:
        for (uint64_t i = 0; i < n; i++) out[i] = kipp_bf16_to_f32(rd_u16le(b + 2 * i));
        return;
    case KIPP_TYPE_Q4_0: dequant_q4_0(b, out, n / 32); return;
    case KIPP_TYPE_Q8_0: dequant_q8_0(b, out, n / 32); return;
    case KIPP_TYPE_Q4_K: dequant_q4_k(b, out, n / 256); return;
    case KIPP_TYPE_Q6_K: dequant_q6_k(b, out, n / 256); return;
    case KIPP_TYPE_Q4_1: dequant_q4_1(b, out, n / 32); return;
    case KIPP_TYPE_Q5_0: dequant_q5_0(b, out, n / 32); return;
    case KIPP_TYPE_Q5_1: dequant_q5_1(b, out, n / 32); return;
    case KIPP_TYPE_Q2_K: dequant_q2_k(b, out, n / 256); return;
    case KIPP_TYPE_Q3_K: dequant_q3_k(b, out, n / 256); return;
    case KIPP_TYPE_Q5_K: dequant_q5_k(b, out, n / 256); return;
    case KIPP_TYPE_IQ4_NL: dequant_iq4_nl(b, out, n / 32); return;
    case KIPP_TYPE_IQ4_XS: dequant_iq4_xs(b, out, n / 256); return;
    }
}

uint16_t kipp_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
