/* kernels_neon.c — the ARMv8.2 NEON + dotprod kernel level ("neon"; built with
 * -march=armv8.2-a+dotprod+fp16 on aarch64 only; `make neon-check` cross-compiles it on x86).
 * Mirrors kernels_scalar.c's semantics with 4-lane float FMAs and vdotq_s32:
 *   F32/F16/BF16 weights on f32 activations (f16 widened with vcvt, bf16 by a 16-bit shift);
 *   Q8_0/Q4_0 on Q8_0 activations: an exact int32 dot per 32-block, then dw * dx;
 *   Q4_K/Q6_K on Q8_K activations: an int dot per sub-block times its scale, the Q4_K mins
 *     through bsums, Q6_K's values offset by -32 before the dot.
 * One weight row against up to 4 tokens per pass. Converters are the scalar ones. */
#if defined(__aarch64__)

#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <arm_neon.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

enum { TILE = 4 };

INLINE float rd_f16(const unsigned char *p) {
    return kipp_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* ---- attention helpers ------------------------------------------------------------------ */

static float dot_f32(const float *a, const float *b, uint64_t n) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = vdupq_n_f32(0.0f);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        a0 = vfmaq_f32(a0, vld1q_f32(a + i), vld1q_f32(b + i));
        a1 = vfmaq_f32(a1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    }
    for (; i + 4 <= n; i += 4) a0 = vfmaq_f32(a0, vld1q_f32(a + i), vld1q_f32(b + i));
    float s = vaddvq_f32(vaddq_f32(a0, a1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void axpy_f32(float *y, float a, const float *x, uint64_t n) {
    uint64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++) y[i] += a * x[i];
}

/* ---- float-weight gemms (f32 activations) --------------------------------------------------- */

INLINE float32x4_t ld_f32(const void *w, uint64_t i) { return vld1q_f32((const float *)w + i); }
INLINE float32x4_t ld_f16(const void *w, uint64_t i) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)w + i)));
}
INLINE float32x4_t ld_bf16(const void *w, uint64_t i) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)w + i), 16));
}
INLINE float sc_f32(const void *w, uint64_t i) { return ((const float *)w)[i]; }
INLINE float sc_f16(const void *w, uint64_t i) { return kipp_f16_to_f32(((const uint16_t *)w)[i]); }
INLINE float sc_bf16(const void *w, uint64_t i) { return kipp_bf16_to_f32(((const uint16_t *)w)[i]); }

/* One weight row against nt (constant) tokens; a tail under 4 elements in scalar. */
#define FLOAT_TILE(NAME, LD, SC)                                                                   \
    INLINE void NAME(const void *wr, const float *const *xt, float *y, size_t ldy, uint64_t k,      \
                     const int nt) {                                                               \
        float32x4_t acc[TILE];                                                                     \
        for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f);                                   \
        uint64_t i = 0;                                                                            \
        for (; i + 4 <= k; i += 4) {                                                               \
            const float32x4_t w = LD(wr, i);                                                       \
            for (int t = 0; t < nt; t++) acc[t] = vfmaq_f32(acc[t], w, vld1q_f32(xt[t] + i));      \
        }                                                                                          \
        for (int t = 0; t < nt; t++) {                                                             \
            float s = vaddvq_f32(acc[t]);                                                          \
            for (uint64_t j = i; j < k; j++) s += SC(wr, j) * xt[t][j];                            \
            y[t * ldy] = s;                                                                        \
        }                                                                                          \
    }

FLOAT_TILE(tile_f32, ld_f32, sc_f32)
FLOAT_TILE(tile_f16, ld_f16, sc_f16)
FLOAT_TILE(tile_bf16, ld_bf16, sc_bf16)

/* The row x token-tile loop shared by every gemm (constant nt for each tile call). */
#define GEMM_DRIVER(NAME, TILE_FN, XT)                                                             \
    static void NAME(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x,           \
                     size_t x_row_bytes, uint64_t n_tok, float *y, size_t ldy, uint64_t k) {       \
        for (uint64_t t0 = 0; t0 < n_tok; t0 += TILE) {                                            \
            const uint64_t nt = n_tok - t0 < TILE ? n_tok - t0 : TILE;                             \
            const XT *xt[TILE];                                                                    \
            for (uint64_t t = 0; t < nt; t++)                                                      \
                xt[t] = (const XT *)((const char *)x + (t0 + t) * x_row_bytes);                    \
            for (uint64_t r = 0; r < n_rows; r++) {                                                \
                const void *wr = (const char *)w + r * w_row_bytes;                                \
                float *yr = y + t0 * ldy + r;                                                      \
                switch (nt) {                                                                      \
                case 4: TILE_FN(wr, xt, yr, ldy, k, 4); break;                                     \
                case 3: TILE_FN(wr, xt, yr, ldy, k, 3); break;                                     \
                case 2: TILE_FN(wr, xt, yr, ldy, k, 2); break;                                     \
                default: TILE_FN(wr, xt, yr, ldy, k, 1); break;                                    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

GEMM_DRIVER(gemm_f32, tile_f32, float)
GEMM_DRIVER(gemm_f16, tile_f16, float)
GEMM_DRIVER(gemm_bf16, tile_bf16, float)

/* ---- 32-block gemms (Q8_0 activations) -------------------------------------------------------- */

/* Block b of the row unpacked into 32 signed values (two 16-lane halves). */
INLINE void w32_q8_0(const unsigned char *qs, int8x16_t *w0, int8x16_t *w1) {
    *w0 = vld1q_s8((const int8_t *)qs);
    *w1 = vld1q_s8((const int8_t *)qs + 16);
}
/* Q4_0: elements 0..15 the low nibbles, 16..31 the high ones, minus 8 */
INLINE void w32_q4_0(const unsigned char *qs, int8x16_t *w0, int8x16_t *w1) {
    const uint8x16_t q = vld1q_u8(qs);
    *w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    *w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
}

#define BLOCK32_TILE(NAME, BB, W32)                                                                 \
    INLINE void NAME(const void *wr, const kipp_act_q8_0 *const *xt, float *y, size_t ldy,          \
                     uint64_t k, const int nt) {                                                    \
        float32x4_t acc[TILE];                                                                      \
        for (int t = 0; t < nt; t++) acc[t] = vdupq_n_f32(0.0f);                                    \
        const unsigned char *wb = wr;                                                               \
        for (uint64_t b = 0; b < k / 32; b++, wb += BB) {                                           \
            int8x16_t w0, w1;                                                                       \
            W32(wb + 2, &w0, &w1);                                                                  \
            const float dw = rd_f16(wb);                                                            \
            for (int t = 0; t < nt; t++) {                                                          \
                int32x4_t p = vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(xt[t][b].qs));                 \
                p = vdotq_s32(p, w1, vld1q_s8(xt[t][b].qs + 16));                                   \
                acc[t] = vfmaq_n_f32(acc[t], vcvtq_f32_s32(p), dw * xt[t][b].d);                    \
            }                                                                                       \
        }                                                                                           \
        for (int t = 0; t < nt; t++) y[t * ldy] = vaddvq_f32(acc[t]);                               \
    }

BLOCK32_TILE(tile_q8_0, 34, w32_q8_0)
BLOCK32_TILE(tile_q4_0, 18, w32_q4_0)
GEMM_DRIVER(gemm_q8_0, tile_q8_0, kipp_act_q8_0)
GEMM_DRIVER(gemm_q4_0, tile_q4_0, kipp_act_q8_0)

/* ---- K-quant gemms (Q8_K activations) ------------------------------------------------------------ */

/* 6-bit scales and mins of the 8 Q4_K sub-blocks (ggml's get_scale_min_k4) */
INLINE void k4_scales(const unsigned char *sc, int scale[8], int min[8]) {
    for (int s = 0; s < 4; s++) {
        scale[s] = sc[s] & 63;
        min[s] = sc[s + 4] & 63;
        scale[s + 4] = (sc[s + 8] & 0x0f) | ((sc[s] >> 6) << 4);
        min[s + 4] = (sc[s + 8] >> 4) | ((sc[s + 4] >> 6) << 4);
    }
}

/* int dot of 32 signed pairs (w as two 16-lane halves) */
INLINE int32_t dot32(int8x16_t w0, int8x16_t w1, const int8_t *x) {
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(x)), w1, vld1q_s8(x + 16)));
}

INLINE void tile_q4_k(const void *wr, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                      uint64_t k, const int nt) {
    float acc[TILE];
    for (int t = 0; t < nt; t++) acc[t] = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    const unsigned char *wb = wr;
    for (uint64_t b = 0; b < k / 256; b++, wb += 144) {
        int scale[8], min[8];
        k4_scales(wb + 4, scale, min);
        const float d = rd_f16(wb), dmin = rd_f16(wb + 2);
        int32_t isum[TILE] = {0};
        for (int g = 0; g < 4; g++) {
            const uint8x16_t q0 = vld1q_u8(wb + 16 + 32 * g), q1 = vld1q_u8(wb + 16 + 32 * g + 16);
            const int8x16_t lo0 = vreinterpretq_s8_u8(vandq_u8(q0, m4));
            const int8x16_t lo1 = vreinterpretq_s8_u8(vandq_u8(q1, m4));
            const int8x16_t hi0 = vreinterpretq_s8_u8(vshrq_n_u8(q0, 4));
            const int8x16_t hi1 = vreinterpretq_s8_u8(vshrq_n_u8(q1, 4));
            for (int t = 0; t < nt; t++) {
                const int8_t *xq = xt[t][b].qs + 64 * g;
                isum[t] += scale[2 * g] * dot32(lo0, lo1, xq) + scale[2 * g + 1] * dot32(hi0, hi1, xq + 32);
            }
        }
        for (int t = 0; t < nt; t++) {
            const int16_t *bs = xt[t][b].bsums;
            int32_t imin = 0;
            for (int s = 0; s < 8; s++) imin += min[s] * (bs[2 * s] + bs[2 * s + 1]);
            acc[t] += xt[t][b].d * (d * (float)isum[t] - dmin * (float)imin);
        }
    }
    for (int t = 0; t < nt; t++) y[t * ldy] = acc[t];
}

INLINE void tile_q6_k(const void *wr, const kipp_act_q8_k *const *xt, float *y, size_t ldy,
                      uint64_t k, const int nt) {
    float acc[TILE];
    for (int t = 0; t < nt; t++) acc[t] = 0.0f;
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m2 = vdupq_n_u8(3);
    const int8x16_t k32 = vdupq_n_s8(32);
    const unsigned char *wb = wr;
    for (uint64_t b = 0; b < k / 256; b++, wb += 210) {
        const int8_t *sc = (const int8_t *)(wb + 192);
        int32_t isum[TILE] = {0};
        for (int h = 0; h < 2; h++) {
            const unsigned char *ql = wb + 64 * h, *qh = wb + 128 + 32 * h;
            for (int half = 0; half < 2; half++) { /* l in 16*half .. 16*half + 15 */
                const uint8x16_t l0 = vld1q_u8(ql + 16 * half), l1 = vld1q_u8(ql + 32 + 16 * half);
                const uint8x16_t hb = vld1q_u8(qh + 16 * half);
                uint8x16_t q[4]; /* element 128h + 32j + 16half + lane, unsigned 0..63 */
                q[0] = vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(hb, m2), 4));
                q[1] = vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), m2), 4));
                q[2] = vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), m2), 4));
                q[3] = vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4));
                for (int j = 0; j < 4; j++) {
                    const int8x16_t qs = vsubq_s8(vreinterpretq_s8_u8(q[j]), k32);
                    const int s = sc[8 * h + 2 * j + half];
                    for (int t = 0; t < nt; t++) {
                        const int8_t *xq = xt[t][b].qs + 128 * h + 32 * j + 16 * half;
                        isum[t] += s * vaddvq_s32(vdotq_s32(vdupq_n_s32(0), qs, vld1q_s8(xq)));
                    }
                }
            }
        }
        const float d = rd_f16(wb + 208);
        for (int t = 0; t < nt; t++) acc[t] += (xt[t][b].d * d) * (float)isum[t];
    }
    for (int t = 0; t < nt; t++) y[t * ldy] = acc[t];
}

GEMM_DRIVER(gemm_q4_k, tile_q4_k, kipp_act_q8_k)
GEMM_DRIVER(gemm_q6_k, tile_q6_k, kipp_act_q8_k)

const kipp_cpu_kernels kipp_cpu_kernels_neon = {
    .isa = "neon",
    .f32 = {KIPP_ACT_F32, gemm_f32},
    .f16 = {KIPP_ACT_F32, gemm_f16},
    .bf16 = {KIPP_ACT_F32, gemm_bf16},
    .q8_0 = {KIPP_ACT_Q8_0, gemm_q8_0},
    .q4_0 = {KIPP_ACT_Q8_0, gemm_q4_0},
    .q4_k = {KIPP_ACT_Q8_K, gemm_q4_k},
    .q6_k = {KIPP_ACT_Q8_K, gemm_q6_k},
    .quant = {NULL, kipp_cpu_quant_bf16_scalar, kipp_cpu_quant_q8_0_scalar,
              kipp_cpu_quant_q8_k_scalar},
    .dot_f32 = dot_f32,
    .axpy_f32 = axpy_f32,
};

#endif /* __aarch64__ */
