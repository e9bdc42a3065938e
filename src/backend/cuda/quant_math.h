/* quant_math.h — GGUF block dequantization shared by the cuda kernels (mm.cu) and the host
 * unit test (tests/unit/test_cuda_quant_math.c): __host__ __device__ inline functions that
 * decode one "group" of 8 consecutive elements of a block, bit-exact with
 * kipp_dequantize_row() (src/core/types.c). Plain C11 when __CUDACC__ is not defined, so the
 * ordinary unit suite checks on the CPU the very code the GPU runs. Does not quantize.
 *
 * Why groups of 8: a warp reading a weight row hands lane i group i of the row, so the 32
 * lanes of a 256-element K-quant block share one block (its scales broadcast from one cache
 * line) and the lanes of 32-element blocks read 8 neighbouring blocks: every load of a warp
 * falls into one contiguous run of the row. F32/F16/BF16 rows are treated as blocks of 8
 * elements, so every type is "block of kq_block_elems() elements, kq_block_bytes() bytes,
 * kq_block_elems()/8 groups".
 *
 * Numerics are types.c's: the same products in the same order. Every product there is exact
 * in f32 (f16 scales times small integers), so a fused multiply-add, which nvcc forms by
 * default, rounds the one final addition exactly as the separate operations do. Blocks have
 * no alignment guarantee (Q8_0 is 34 bytes): fields are read byte by byte, little-endian. */
#ifndef KIPP_CUDA_QUANT_MATH_H
#define KIPP_CUDA_QUANT_MATH_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KIPP_HD __host__ __device__
#else
#define KIPP_HD
#endif

/* GGUF type ids (src/core/types.h's kipp_type; repeated because this header is compiled by
 * nvcc without the C library headers' C11-only parts, and the values are the file format). */
enum {
    KQ_F32 = 0, KQ_F16 = 1, KQ_Q4_0 = 2, KQ_Q4_1 = 3, KQ_Q5_0 = 6, KQ_Q5_1 = 7, KQ_Q8_0 = 8,
    KQ_Q2_K = 10, KQ_Q3_K = 11, KQ_Q4_K = 12, KQ_Q5_K = 13, KQ_Q6_K = 14, KQ_IQ4_NL = 20,
    KQ_IQ4_XS = 23, KQ_BF16 = 30
};

/* ---- scalars ------------------------------------------------------------------------------ */

static inline KIPP_HD float kq_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline KIPP_HD uint32_t kq_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline KIPP_HD uint32_t kq_u16(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

/* f16 -> f32, exact for every half (subnormals become normal f32, inf stays inf, a NaN keeps
 * its sign and payload as types.c's kipp_f16_to_f32 does); integer code, so the host does not
 * need CUDA's half type and the device does not depend on its NaN conventions. */
static inline KIPP_HD float kq_f16(uint32_t h) {
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (e == 0x1f) return kq_f32_from_bits(sign | 0x7f800000u | man << 13);
    if (e == 0) {
        if (man == 0) return kq_f32_from_bits(sign);
        /* subnormal man * 2^-24: normalize the leading one up to bit 10 */
        uint32_t ef = 127 - 15 + 1;
        while (!(man & 0x400u)) {
            man <<= 1;
            ef--;
        }
        return kq_f32_from_bits(sign | ef << 23 | (man & 0x3ffu) << 13);
    }
    return kq_f32_from_bits(sign | (e + 127 - 15) << 23 | man << 13);
}

static inline KIPP_HD float kq_bf16(uint32_t b) { return kq_f32_from_bits(b << 16); }

/* f32 -> bf16 bits, round to nearest even (types.c's kipp_f32_to_bf16, NaN kept quiet). */
static inline KIPP_HD uint16_t kq_bf16_rn(float f) {
    const uint32_t u = kq_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The two-term bf16 split of the tensor-core path: x = hi + lo + r with hi = bf16(x),
 * lo = bf16(x - hi). x - hi is exact in f32 (Sterbenz-like: hi is x rounded to 8 significant
 * bits, so the difference fits in x's 24), |x - hi| <= 2^-9 |x|, and rounding it to 8 bits
 * leaves |r| <= 2^-9 |x - hi| <= 2^-18 |x| (for finite x not near the f32 overflow edge). */
static inline KIPP_HD void kq_bf16_split(float x, uint16_t *hi, uint16_t *lo) {
    *hi = kq_bf16_rn(x);
    *lo = kq_bf16_rn(x - kq_bf16(*hi));
}

/* IQ4_NL's 16 non-linear levels (ggml's kvalues_iq4nl: -127 -104 -83 -65 -49 -35 -22 -10
 * 1 13 25 38 53 69 89 113), shared by IQ4_XS, packed as signed bytes into two words: a
 * lookup in registers, with no table in local or __constant__ memory, that host and device
 * share. */
static inline KIPP_HD int kq_iq4nl(uint32_t i) {
    const uint64_t w = (i & 8u) ? 0x7159453526190D01ull : 0xF6EADDCFBFAD9881ull;
    return (int)(int8_t)(uint8_t)(w >> (8 * (i & 7u)));
}

/* ---- groups of 8 ----------------------------------------------------------------------------
 * kq_<type>_8(b, g, o): o[0..7] = elements 8g .. 8g+7 of the block at b. */

/* The float types from words (little-endian u32, as a 16-byte aligned vector load gives
 * them): F32 takes 8 words, F16 and BF16 4. The byte versions gather the same words. */
static inline KIPP_HD void kq_f32_8w(const uint32_t *w, float *o) {
    for (int i = 0; i < 8; i++) o[i] = kq_f32_from_bits(w[i]);
}

static inline KIPP_HD void kq_f16_8w(const uint32_t *w, float *o) {
    for (int i = 0; i < 8; i++) o[i] = kq_f16((w[i >> 1] >> (16 * (i & 1))) & 0xffffu);
}

static inline KIPP_HD void kq_bf16_8w(const uint32_t *w, float *o) {
    for (int i = 0; i < 8; i++) o[i] = kq_bf16((w[i >> 1] >> (16 * (i & 1))) & 0xffffu);
}

static inline KIPP_HD uint32_t kq_u32(const uint8_t *p) { return kq_u16(p) | kq_u16(p + 2) << 16; }

static inline KIPP_HD void kq_f32_8(const uint8_t *b, int g, float *o) {
    uint32_t w[8];
    (void)g;
    for (int i = 0; i < 8; i++) w[i] = kq_u32(b + 4 * i);
    kq_f32_8w(w, o);
}

static inline KIPP_HD void kq_f16_8(const uint8_t *b, int g, float *o) {
    uint32_t w[4];
    (void)g;
    for (int i = 0; i < 4; i++) w[i] = kq_u32(b + 4 * i);
    kq_f16_8w(w, o);
}

static inline KIPP_HD void kq_bf16_8(const uint8_t *b, int g, float *o) {
    uint32_t w[4];
    (void)g;
    for (int i = 0; i < 4; i++) w[i] = kq_u32(b + 4 * i);
    kq_bf16_8w(w, o);
}

/* Q8_0 (34 B): d f16, int8 q[32]; element = q * d. */
static inline KIPP_HD void kq_q8_0_8(const uint8_t *b, int g, float *o) {
    const float d = kq_f16(kq_u16(b));
    for (int i = 0; i < 8; i++) o[i] = (float)(int8_t)b[2 + 8 * g + i] * d;
}

/* The 4-bit value of element j (< 32) of a 32-element block with nibbles qs[16]: low nibble
 * of qs[j] for j < 16, high nibble of qs[j - 16] otherwise (Q4_0, Q4_1, IQ4_NL, and each
 * IQ4_XS sub-block). */
static inline KIPP_HD uint32_t kq_nib32(const uint8_t *qs, int j) {
    return j < 16 ? qs[j] & 0x0fu : (uint32_t)qs[j - 16] >> 4;
}

/* Q4_0 (18 B): d f16, qs[16]; element = (nibble - 8) * d. */
static inline KIPP_HD void kq_q4_0_8(const uint8_t *b, int g, float *o) {
    const float d = kq_f16(kq_u16(b));
    for (int i = 0; i < 8; i++) o[i] = (float)((int)kq_nib32(b + 2, 8 * g + i) - 8) * d;
}

/* Q4_1 (20 B): d f16, m f16, qs[16]; element = nibble * d + m. */
static inline KIPP_HD void kq_q4_1_8(const uint8_t *b, int g, float *o) {
    const float d = kq_f16(kq_u16(b)), m = kq_f16(kq_u16(b + 2));
    for (int i = 0; i < 8; i++) o[i] = (float)kq_nib32(b + 4, 8 * g + i) * d + m;
}

/* The 5-bit value of element j of a Q5_0/Q5_1 block: the nibble as Q4_0, bit j of the
 * little-endian uint32 qh as bit 4. */
static inline KIPP_HD uint32_t kq_q5v(const uint8_t *qh, const uint8_t *qs, int j) {
    return kq_nib32(qs, j) | ((uint32_t)(qh[j >> 3] >> (j & 7)) & 1u) << 4;
}

/* Q5_0 (22 B): d f16, qh[4], qs[16]; element = (value - 16) * d. */
static inline KIPP_HD void kq_q5_0_8(const uint8_t *b, int g, float *o) {
    const float d = kq_f16(kq_u16(b));
    for (int i = 0; i < 8; i++) o[i] = (float)((int)kq_q5v(b + 2, b + 6, 8 * g + i) - 16) * d;
}

/* Q5_1 (24 B): d f16, m f16, qh[4], qs[16]; element = value * d + m. */
static inline KIPP_HD void kq_q5_1_8(const uint8_t *b, int g, float *o) {
    const float d = kq_f16(kq_u16(b)), m = kq_f16(kq_u16(b + 2));
    for (int i = 0; i < 8; i++) o[i] = (float)kq_q5v(b + 4, b + 8, 8 * g + i) * d + m;
}

/* IQ4_NL (18 B): d f16, qs[16]; element = d * level[nibble]. */
static inline KIPP_HD void kq_iq4_nl_8(const uint8_t *b, int g, float *o) {
    const float d = kq_f16(kq_u16(b));
    for (int i = 0; i < 8; i++) o[i] = d * (float)kq_iq4nl(kq_nib32(b + 2, 8 * g + i));
}

/* Q4_K and Q5_K from words: hdr = bytes 0..15 of the block (d, dmin, scales[12]) as four
 * little-endian u32, one 16-byte load when the block is 16-byte aligned (144 and 176 are
 * multiples of 16); the scale byte k is byte k % 4 of hdr[1 + k / 4]. types.c's k4_scale_min
 * packing read from the words: sub-block s uses bytes s & 3 of hdr[1], hdr[2], hdr[3]. */
static inline KIPP_HD void kq_k4_scale_min_w(int s, const uint32_t *hdr, float *d1, float *m1) {
    const int sh = 8 * (s & 3);
    const uint32_t a = hdr[1] >> sh, b = hdr[2] >> sh, c = hdr[3] >> sh;
    uint32_t scale, min;
    if (s < 4) {
        scale = a & 63u;
        min = b & 63u;
    } else {
        scale = (c & 0x0fu) | ((a >> 6) & 3u) << 4;
        min = ((c >> 4) & 0x0fu) | ((b >> 6) & 3u) << 4;
    }
    *d1 = kq_f16(hdr[0] & 0xffffu) * (float)scale;
    *m1 = kq_f16(hdr[0] >> 16) * (float)min;
}

/* Q4_K (144 B): d @0, dmin @2, scales[12] @4, qs[128] @16. Sub-block s = g / 4 (32
 * elements) is the low (s even) or high nibble of qs[32 (s / 2) + l]; element
 * (d * scale) * q - dmin * min. q0, q1: the group's 8 bytes qs[32 (s / 2) + 8 (g % 4) ..]
 * as two little-endian words (8-byte aligned in an aligned block). */
static inline KIPP_HD void kq_q4_k_8w(const uint32_t *hdr, uint32_t q0, uint32_t q1, int g,
                                      float *o) {
    const int s = g >> 2, sh = 4 * (s & 1);
    float d1, m1;
    kq_k4_scale_min_w(s, hdr, &d1, &m1);
    for (int i = 0; i < 8; i++) {
        const uint32_t q = ((i < 4 ? q0 : q1) >> (8 * (i & 3) + sh)) & 0x0fu;
        o[i] = d1 * (float)q - m1;
    }
}

static inline KIPP_HD void kq_q4_k_8(const uint8_t *b, int g, float *o) {
    const uint32_t hdr[4] = {kq_u32(b), kq_u32(b + 4), kq_u32(b + 8), kq_u32(b + 12)};
    const uint8_t *q = b + 16 + 32 * (g >> 3) + 8 * (g & 3);
    kq_q4_k_8w(hdr, kq_u32(q), kq_u32(q + 4), g, o);
}

/* Q5_K (176 B): d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48; Q4_K's nibble plus
 * bit s of qh[l] as bit 4. h0, h1: qh[8 (g % 4) ..], q0, q1: qs[32 (s / 2) + 8 (g % 4) ..]. */
static inline KIPP_HD void kq_q5_k_8w(const uint32_t *hdr, uint32_t h0, uint32_t h1, uint32_t q0,
                                      uint32_t q1, int g, float *o) {
    const int s = g >> 2, sh = 4 * (s & 1);
    float d1, m1;
    kq_k4_scale_min_w(s, hdr, &d1, &m1);
    for (int i = 0; i < 8; i++) {
        const int bs = 8 * (i & 3);
        const uint32_t v = (((i < 4 ? q0 : q1) >> (bs + sh)) & 0x0fu) |
                           (((i < 4 ? h0 : h1) >> (bs + s)) & 1u) << 4;
        o[i] = d1 * (float)v - m1;
    }
}

static inline KIPP_HD void kq_q5_k_8(const uint8_t *b, int g, float *o) {
    const uint32_t hdr[4] = {kq_u32(b), kq_u32(b + 4), kq_u32(b + 8), kq_u32(b + 12)};
    const uint8_t *q = b + 48 + 32 * (g >> 3) + 8 * (g & 3), *qh = b + 16 + 8 * (g & 3);
    kq_q5_k_8w(hdr, kq_u32(qh), kq_u32(qh + 4), kq_u32(q), kq_u32(q + 4), g, o);
}

/* Q6_K (210 B): ql[128] @0, qh[64] @128, int8 scales[16] @192, d f16 @208. Element
 * 128h + 32k + l (k < 4, l < 32) takes the low (k < 2) or high (k >= 2) nibble of
 * ql[64h + 32 (k & 1) + l], bits 2k, 2k+1 of qh[32h + l] as bits 4, 5, minus 32; its scale
 * is scales[8h + l / 16 + 2k]; value (d * scale) * q. */
static inline KIPP_HD void kq_q6_k_8(const uint8_t *b, int g, float *o) {
    const int h = g >> 4, k = (g >> 2) & 3, l0 = 8 * (g & 3);
    const float d = kq_f16(kq_u16(b + 208));
    const float ds = d * (float)(int8_t)b[192 + 8 * h + (l0 >> 4) + 2 * k];
    const uint8_t *ql = b + 64 * h + 32 * (k & 1) + l0, *qh = b + 128 + 32 * h + l0;
    const int shl = 4 * (k >> 1), shh = 2 * k;
    for (int i = 0; i < 8; i++) {
        const int q = (((ql[i] >> shl) & 0x0f) | ((qh[i] >> shh) & 3) << 4) - 32;
        o[i] = ds * (float)q;
    }
}

/* Q2_K (84 B): scales[16] @0 (low nibble scale, high nibble min), qs[64] @16, d @80,
 * dmin @82. Element 128h + 32j + l: 2 bits of qs[32h + l] at 2j; scale byte e / 16 = g / 2;
 * value (d * scale) * q - dmin * min. */
static inline KIPP_HD void kq_q2_k_8(const uint8_t *b, int g, float *o) {
    const int h = g >> 4, j = (g >> 2) & 3, l0 = 8 * (g & 3);
    const uint32_t sc = b[g >> 1];
    const float dl = kq_f16(kq_u16(b + 80)) * (float)(sc & 0x0f);
    const float ml = kq_f16(kq_u16(b + 82)) * (float)(sc >> 4);
    const uint8_t *q = b + 16 + 32 * h + l0;
    for (int i = 0; i < 8; i++) o[i] = dl * (float)((q[i] >> (2 * j)) & 3) - ml;
}

/* Q3_K (110 B): hmask[32] @0, qs[64] @32, scales[12] @96, d @108. Element 128h + 32j + l:
 * 2 bits of qs[32h + l] at 2j, minus 4 unless bit 4h + j of hmask[l] is set; 6-bit scale
 * s = g / 2 (low 4 bits from scales[s] or scales[s - 8] >> 4, high 2 from
 * scales[8 + s % 4] at 2 (s / 4)); value (d * (scale - 32)) * q. */
static inline KIPP_HD void kq_q3_k_8(const uint8_t *b, int g, float *o) {
    const int h = g >> 4, j = (g >> 2) & 3, l0 = 8 * (g & 3), s = g >> 1;
    const uint8_t *sc = b + 96;
    const int lo = s < 8 ? sc[s] & 0x0f : sc[s - 8] >> 4;
    const int hi = (sc[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
    const float dl = kq_f16(kq_u16(b + 108)) * (float)((lo | hi << 4) - 32);
    const uint8_t *q = b + 32 + 32 * h + l0, *hm = b + l0;
    for (int i = 0; i < 8; i++) {
        const int v = ((q[i] >> (2 * j)) & 3) - (((hm[i] >> (4 * h + j)) & 1) ? 0 : 4);
        o[i] = dl * (float)v;
    }
}

/* IQ4_XS (136 B): d @0, scales_h u16 @2, scales_l[4] @4, qs[128] @8. Sub-block s = g / 4
 * has the 6-bit scale (nibble s % 2 of scales_l[s / 2]) | (bits 2s of scales_h) << 4, minus
 * 32, and is IQ4_NL-coded over qs[16s .. 16s + 15]; value (d * scale) * level. */
static inline KIPP_HD void kq_iq4_xs_8(const uint8_t *b, int g, float *o) {
    const int s = g >> 2, j0 = 8 * (g & 3);
    const uint32_t sh = kq_u16(b + 2);
    const int ls = (int)(((b[4 + (s >> 1)] >> (4 * (s & 1))) & 0x0f) | ((sh >> (2 * s)) & 3) << 4)
                   - 32;
    const float dl = kq_f16(kq_u16(b)) * (float)ls;
    for (int i = 0; i < 8; i++) o[i] = dl * (float)kq_iq4nl(kq_nib32(b + 8 + 16 * s, j0 + i));
}

/* ---- dispatch (host tests, get_rows) ------------------------------------------------------- */

/* Elements and bytes of a kernel "block" (8 for the float types); 0 for an unsupported type. */
static inline KIPP_HD int kq_block_elems(uint32_t type) {
    switch (type) {
    case KQ_F32: case KQ_F16: case KQ_BF16: return 8;
    case KQ_Q4_0: case KQ_Q4_1: case KQ_Q5_0: case KQ_Q5_1: case KQ_Q8_0: case KQ_IQ4_NL:
        return 32;
    case KQ_Q2_K: case KQ_Q3_K: case KQ_Q4_K: case KQ_Q5_K: case KQ_Q6_K: case KQ_IQ4_XS:
        return 256;
    default: return 0;
    }
}

static inline KIPP_HD int kq_block_bytes(uint32_t type) {
    switch (type) {
    case KQ_F32: return 32;
    case KQ_F16: case KQ_BF16: return 16;
    case KQ_Q4_0: case KQ_IQ4_NL: return 18;
    case KQ_Q4_1: return 20;
    case KQ_Q5_0: return 22;
    case KQ_Q5_1: return 24;
    case KQ_Q8_0: return 34;
    case KQ_Q2_K: return 84;
    case KQ_Q3_K: return 110;
    case KQ_Q4_K: return 144;
    case KQ_Q5_K: return 176;
    case KQ_Q6_K: return 210;
    case KQ_IQ4_XS: return 136;
    default: return 0;
    }
}

/* o[0..7] = elements 8g .. 8g+7 of the block at b of `type`; returns 0 for a type it does not
 * know (o untouched). */
static inline KIPP_HD int kq_dequant8(uint32_t type, const uint8_t *b, int g, float *o) {
    switch (type) {
    case KQ_F32: kq_f32_8(b, g, o); return 1;
    case KQ_F16: kq_f16_8(b, g, o); return 1;
    case KQ_BF16: kq_bf16_8(b, g, o); return 1;
    case KQ_Q4_0: kq_q4_0_8(b, g, o); return 1;
    case KQ_Q4_1: kq_q4_1_8(b, g, o); return 1;
    case KQ_Q5_0: kq_q5_0_8(b, g, o); return 1;
    case KQ_Q5_1: kq_q5_1_8(b, g, o); return 1;
    case KQ_Q8_0: kq_q8_0_8(b, g, o); return 1;
    case KQ_IQ4_NL: kq_iq4_nl_8(b, g, o); return 1;
    case KQ_Q2_K: kq_q2_k_8(b, g, o); return 1;
    case KQ_Q3_K: kq_q3_k_8(b, g, o); return 1;
    case KQ_Q4_K: kq_q4_k_8(b, g, o); return 1;
    case KQ_Q5_K: kq_q5_k_8(b, g, o); return 1;
    case KQ_Q6_K: kq_q6_k_8(b, g, o); return 1;
    case KQ_IQ4_XS: kq_iq4_xs_8(b, g, o); return 1;
    default: return 0;
    }
}

/* o[0..7] = elements 8k .. 8k+7 of a row of `type` (k counts groups of 8 from the row start). */
static inline KIPP_HD int kq_row_group8(uint32_t type, const uint8_t *row, uint32_t k, float *o) {
    const int be = kq_block_elems(type);
    if (be == 0) return 0;
    const uint32_t gpb = (uint32_t)be / 8;
    return kq_dequant8(type, row + (size_t)(k / gpb) * (size_t)kq_block_bytes(type),
                       (int)(k % gpb), o);
}

#endif
