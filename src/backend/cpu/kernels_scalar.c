/* kernels_scalar.c — the portable kernel level ("scalar") and the reference semantics every
 * other level reproduces: the activation converters (bf16, Q8_0, Q8_K as kernels.h defines
 * them), the dequantize-then-dot gemm any level may fall back to, and plain C gemms —
 * F32/F16/BF16 weights on f32 activations, Q8_0/Q4_0 on Q8_0 activations (an int32 dot per
 * 32-block, then the two scales), Q4_K/Q6_K on Q8_K activations (an int dot per sub-block
 * with ggml's scale/min decode, the Q4_K mins folded through bsums). Uses no intrinsics;
 * f32 sums in 8 interleaved partials so the compiler may vectorize without -ffast-math. */
#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <math.h>
#include <string.h>

size_t kipp_cpu_act_row_bytes(uint32_t act, uint64_t k) {
    switch (act) {
    case KIPP_ACT_F32: return (size_t)k * sizeof(float);
    case KIPP_ACT_BF16: return (size_t)k * sizeof(uint16_t);
    case KIPP_ACT_Q8_0: return (size_t)(k / 32) * sizeof(kipp_act_q8_0);
    case KIPP_ACT_Q8_K: return (size_t)(k / 256) * sizeof(kipp_act_q8_k);
    case KIPP_ACT_Q16: return (size_t)(k / 32) * sizeof(kipp_act_q16);
    case KIPP_ACT_BF16X2: return (size_t)k * 2 * sizeof(uint16_t);
    default: return 0;
    }
}

/* ---- activation converters ------------------------------------------------------------- */

/* Round to nearest, ties to even, for |v| < 2^22 (the quantizers' |v| <= 127 + ulp). */
static inline float round_ne(float v) {
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    return (v + magic) - magic;
}


void kipp_cpu_quant_bf16_scalar(const float *x, void *out, uint64_t k) {
    uint16_t *o = out;
    for (uint64_t i = 0; i < k; i++) o[i] = kipp_f32_to_bf16(x[i]);
}

void kipp_cpu_quant_bf16x2_scalar(const float *x, void *out, uint64_t k) {
    uint16_t *hi = out, *lo = hi + k;
    for (uint64_t i = 0; i < k; i++) kipp_cpu_bf16x2_one(x[i], hi + i, lo + i);
}

static float block_amax(const float *x, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        const float a = x[i] < 0 ? -x[i] : x[i];
        if (a > amax) amax = a;
    }
    return amax;
}

void kipp_cpu_quant_q8_0_scalar(const float *x, void *out, uint64_t k) {
    kipp_act_q8_0 *b = out;
    for (uint64_t blk = 0; blk < k / 32; blk++, x += 32, b++) {
        const float amax = block_amax(x, 32);
        const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            const int q = (int)round_ne(x[i] * id);
            b->qs[i] = (int8_t)q;
            sum += q;
        }
        b->d = d;
        b->s = d * (float)sum;
    }
}

void kipp_cpu_quant_q8_k_scalar(const float *x, void *out, uint64_t k) {
    kipp_act_q8_k *b = out;
    for (uint64_t blk = 0; blk < k / 256; blk++, x += 256, b++) {
        const float amax = block_amax(x, 256);
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        b->d = amax / 127.0f;
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 16 * j; i < 16 * j + 16; i++) {
                int q = (int)round_ne(x[i] * id);
                q = q > 127 ? 127 : q < -127 ? -127 : q;
                b->qs[i] = (int8_t)q;
                sum += q;
            }
            b->bsums[j] = (int16_t)sum;
        }
    }
}

void kipp_cpu_quant_q16_scalar(const float *x, void *out, uint64_t k) {
    kipp_act_q16 *b = out;
    for (uint64_t blk = 0; blk < k / 32; blk++, x += 32, b++) {
        const float amax = block_amax(x, 32);
        const float id = amax > 0.0f ? 32767.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) {
            int q = (int)round_ne(x[i] * id);
            q = q > 32767 ? 32767 : q < -32767 ? -32767 : q;
            b->qs[i] = (int16_t)q;
            sum += q;
        }
        b->d = amax / 32767.0f;
        b->sum = sum;
    }
}

void kipp_cpu_act_to_f32(uint32_t act, const void *a, float *out, uint64_t k) {
    for (uint64_t i = 0; i < k; i++) {
        switch (act) {
        case KIPP_ACT_F32: out[i] = ((const float *)a)[i]; break;
        case KIPP_ACT_BF16: out[i] = kipp_bf16_to_f32(((const uint16_t *)a)[i]); break;
        case KIPP_ACT_Q8_0: {
            const kipp_act_q8_0 *b = (const kipp_act_q8_0 *)a + i / 32;
            out[i] = b->d * b->qs[i % 32];
            break;
        }
        case KIPP_ACT_Q8_K: {
            const kipp_act_q8_k *b = (const kipp_act_q8_k *)a + i / 256;
            out[i] = b->d * b->qs[i % 256];
            break;
        }
        case KIPP_ACT_Q16: {
            const kipp_act_q16 *b = (const kipp_act_q16 *)a + i / 32;
            out[i] = b->d * b->qs[i % 32];
            break;
        }
        case KIPP_ACT_BF16X2: {
            const uint16_t *h = a;
            out[i] = kipp_bf16_to_f32(h[i]) + kipp_bf16_to_f32(h[k + i]);
            break;
        }
        default: out[i] = 0.0f; break;
        }
    }
}

/* ---- f32 dots and the dequantize fallback --------------------------------------------- */

static float reduce8(const float acc[8]) {
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static float dot_f32(const float *a, const float *b, uint64_t n) {
    float acc[8] = {0};
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    for (; i < n; i++) acc[i & 7] += a[i] * b[i];
    return reduce8(acc);
}

static void axpy_f32(float *y, float a, const float *x, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* Weight rows are dequantized a chunk at a time (a multiple of every block size) and each
 * chunk is dotted with all n_tok activation rows, so a row is decoded once per call. */
enum { DEQ_CHUNK = 4096 };

void kipp_cpu_gemm_dequant(uint32_t wtype, const void *w, size_t w_row_bytes, uint64_t n_rows,
                           const void *x, size_t x_row_bytes, uint64_t n_tok, float *y,
                           size_t ldy, uint64_t k) {
    float buf[DEQ_CHUNK];
    const uint32_t be = kipp_type_block_elems(wtype), bb = kipp_type_block_bytes(wtype);
    for (uint64_t r = 0; r < n_rows; r++) {
        const unsigned char *wr = (const unsigned char *)w + r * w_row_bytes;
        for (uint64_t t = 0; t < n_tok; t++) y[t * ldy + r] = 0.0f;
        for (uint64_t c0 = 0; c0 < k; c0 += DEQ_CHUNK) {
            const uint64_t len = k - c0 < DEQ_CHUNK ? k - c0 : DEQ_CHUNK;
            kipp_dequantize_row(wtype, wr + (be ? c0 / be * bb : 0), buf, len);
            for (uint64_t t = 0; t < n_tok; t++) {
                const float *xt = (const float *)((const char *)x + t * x_row_bytes);
                y[t * ldy + r] += dot_f32(buf, xt + c0, len);
            }
        }
    }
}

/* ---- float-weight gemms (f32 activations) ----------------------------------------------- */

static void gemm_f32(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x,
                     size_t x_row_bytes, uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    for (uint64_t r = 0; r < n_rows; r++) {
        const float *wr = (const float *)((const char *)w + r * w_row_bytes);
        for (uint64_t t = 0; t < n_tok; t++)
            y[t * ldy + r] = dot_f32(wr, (const float *)((const char *)x + t * x_row_bytes), k);
    }
}

static void gemm_f16(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x,
                     size_t x_row_bytes, uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    kipp_cpu_gemm_dequant(KIPP_TYPE_F16, w, w_row_bytes, n_rows, x, x_row_bytes, n_tok, y, ldy, k);
}

static void gemm_bf16(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x,
                      size_t x_row_bytes, uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    kipp_cpu_gemm_dequant(KIPP_TYPE_BF16, w, w_row_bytes, n_rows, x, x_row_bytes, n_tok, y, ldy,
                          k);
}

/* ---- 32-block gemms (Q8_0 activations) ---------------------------------------------------- */

static float rd_f16(const unsigned char *p) {
    return kipp_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* Q8_0 weights: per block (dw * dx) * sum(wq * xq), the sum exact in int32. */
static void gemm_q8_0(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x,
                      size_t x_row_bytes, uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    const uint64_t nb = k / 32;
    for (uint64_t r = 0; r < n_rows; r++) {
        const unsigned char *wr = (const unsigned char *)w + r * w_row_bytes;
        for (uint64_t t = 0; t < n_tok; t++) {
            const kipp_act_q8_0 *xb = (const kipp_act_q8_0 *)((const char *)x + t * x_row_bytes);
            float acc = 0.0f;
            for (uint64_t b = 0; b < nb; b++) {
                const unsigned char *wb = wr + b * 34;
                const int8_t *q = (const int8_t *)(wb + 2);
                int32_t isum = 0;
                for (int i = 0; i < 32; i++) isum += (int32_t)q[i] * xb[b].qs[i];
                acc += (rd_f16(wb) * xb[b].d) * (float)isum;
            }
            y[t * ldy + r] = acc;
        }
    }
}

/* Q4_0 weights: element i is (lo nibble of qs[i] - 8), element i+16 (hi nibble - 8). */
static void gemm_q4_0(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x,
                      size_t x_row_bytes, uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    const uint64_t nb = k / 32;
    for (uint64_t r = 0; r < n_rows; r++) {
        const unsigned char *wr = (const unsigned char *)w + r * w_row_bytes;
        for (uint64_t t = 0; t < n_tok; t++) {
            const kipp_act_q8_0 *xb = (const kipp_act_q8_0 *)((const char *)x + t * x_row_bytes);
            float acc = 0.0f;
            for (uint64_t b = 0; b < nb; b++) {
                const unsigned char *wb = wr + b * 18, *qs = wb + 2;
                int32_t isum = 0;
                for (int i = 0; i < 16; i++)
                    isum += ((qs[i] & 0x0f) - 8) * xb[b].qs[i] + ((qs[i] >> 4) - 8) * xb[b].qs[i + 16];
                acc += (rd_f16(wb) * xb[b].d) * (float)isum;
            }
            y[t * ldy + r] = acc;
        }
    }
}

/* ---- K-quant gemms (Q8_K activations) ------------------------------------------------------- */

/* 6-bit scale and min of Q4_K sub-block s (0..7) from the 12-byte packing (ggml's
 * get_scale_min_k4). */
static void k4_scale_min(int s, const unsigned char *sc, int *scale, int *min) {
    if (s < 4) {
        *scale = sc[s] & 63;
        *min = sc[s + 4] & 63;
    } else {
        *scale = (sc[s + 4] & 0x0f) | ((sc[s - 4] >> 6) << 4);
        *min = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
    }
}

/* Q4_K (144 B): d, dmin, scales[12], qs[128]; element 64g + l is the low nibble of
 * qs[32g + l] (sub-block 2g), element 64g + 32 + l its high nibble (sub-block 2g + 1);
 * value = d*scale*q - dmin*min. Dot with a Q8_K block:
 *   dx * (d * sum_s scale_s * sum(q * xq) - dmin * sum_s min_s * (bsums[2s] + bsums[2s+1])).
 * Each weight block is unpacked once (q[256], 6-bit scales/mins) and reused for every token;
 * the per-token sums accumulate in y, block by block. */
static void gemm_q4_k(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x,
                      size_t x_row_bytes, uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    const uint64_t nb = k / 256;
    for (uint64_t r = 0; r < n_rows; r++) {
        const unsigned char *wr = (const unsigned char *)w + r * w_row_bytes;
        for (uint64_t t = 0; t < n_tok; t++) y[t * ldy + r] = 0.0f;
        for (uint64_t b = 0; b < nb; b++) {
            const unsigned char *wb = wr + b * 144, *qs = wb + 16;
            const float d = rd_f16(wb), dmin = rd_f16(wb + 2);
            int8_t q[256];
            int sc[8], m[8];
            for (int s = 0; s < 8; s++) {
                k4_scale_min(s, wb + 4, &sc[s], &m[s]);
                const unsigned char *qg = qs + 32 * (s / 2);
                for (int l = 0; l < 32; l++) q[32 * s + l] = (int8_t)((qg[l] >> (4 * (s & 1))) & 0x0f);
            }
            for (uint64_t t = 0; t < n_tok; t++) {
                const kipp_act_q8_k *xb =
                    (const kipp_act_q8_k *)((const char *)x + t * x_row_bytes) + b;
                int32_t isum = 0, imin = 0;
                for (int s = 0; s < 8; s++) {
                    int32_t sub = 0;
                    for (int l = 0; l < 32; l++) sub += q[32 * s + l] * xb->qs[32 * s + l];
                    isum += sc[s] * sub;
                    imin += m[s] * (xb->bsums[2 * s] + xb->bsums[2 * s + 1]);
                }
                y[t * ldy + r] += xb->d * (d * (float)isum - dmin * (float)imin);
            }
        }
    }
}

/* Q6_K (210 B): ql[128], qh[64], int8 scales[16], d (last). Half h (128 elements) uses
 * ql + 64h, qh + 32h; element 128h + 32j + l (j < 4, l < 32) is
 *   (4 bits of ql[l + 32(j&1)] (low for j < 2, high otherwise) | 2 bits of qh[l] at 2j) - 32
 * with scale scales[8h + 2j + l/16]; i.e. element e has scale scales[e / 16]. Each block is
 * unpacked once into q[256] (signed) and reused for every token. */
static void gemm_q6_k(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x,
                      size_t x_row_bytes, uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    const uint64_t nb = k / 256;
    for (uint64_t r = 0; r < n_rows; r++) {
        const unsigned char *wr = (const unsigned char *)w + r * w_row_bytes;
        for (uint64_t t = 0; t < n_tok; t++) y[t * ldy + r] = 0.0f;
        for (uint64_t b = 0; b < nb; b++) {
            const unsigned char *wb = wr + b * 210;
            const int8_t *sc = (const int8_t *)(wb + 192);
            const float d = rd_f16(wb + 208);
            int8_t q[256];
            for (int h = 0; h < 2; h++) {
                const unsigned char *ql = wb + 64 * h, *qh = wb + 128 + 32 * h;
                for (int j = 0; j < 4; j++)
                    for (int l = 0; l < 32; l++) {
                        const int lo = (ql[l + 32 * (j & 1)] >> (4 * (j >> 1))) & 0x0f;
                        q[128 * h + 32 * j + l] = (int8_t)((lo | (((qh[l] >> (2 * j)) & 3) << 4)) - 32);
                    }
            }
            for (uint64_t t = 0; t < n_tok; t++) {
                const kipp_act_q8_k *xb =
                    (const kipp_act_q8_k *)((const char *)x + t * x_row_bytes) + b;
                int32_t isum = 0;
                for (int s = 0; s < 16; s++) {
                    int32_t sub = 0;
                    for (int l = 0; l < 16; l++) sub += q[16 * s + l] * xb->qs[16 * s + l];
                    isum += sc[s] * sub;
                }
                y[t * ldy + r] += (xb->d * d) * (float)isum;
            }
        }
    }
}

/* ---- two-plane 8-bit activations (kernels.h: kipp_cpu_quant2_fn) ---- */

static void split_block(const float *x, uint32_t n, float *d_hi, float *d_lo, int8_t *hi,
                        int8_t *lo) {
    float amax = 0.0f;
    for (uint32_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / (127.0f * 128.0f), id = d > 0.0f ? 1.0f / d : 0.0f;
    for (uint32_t i = 0; i < n; i++) {
        int v = (int)lrintf(x[i] * id);
        if (v > 127 * 128) v = 127 * 128;
        if (v < -127 * 128) v = -127 * 128;
        const int h = (v >= 0 ? v : v - 127) / 128; /* floor(v / 128) */
        hi[i] = (int8_t)h;
        lo[i] = (int8_t)(v - 128 * h);
    }
    *d_hi = 128.0f * d;
    *d_lo = d;
}

void kipp_cpu_quant2_q8_0_scalar(const float *x, void *out_hi, void *out_lo, uint64_t k) {
    kipp_act_q8_0 *bh = out_hi, *bl = out_lo;
    for (uint64_t b = 0; b < k / 32; b++) {
        split_block(x + b * 32, 32, &bh[b].d, &bl[b].d, bh[b].qs, bl[b].qs);
        int sh = 0, sl = 0;
        for (int i = 0; i < 32; i++) { sh += bh[b].qs[i]; sl += bl[b].qs[i]; }
        bh[b].s = bh[b].d * (float)sh;
        bl[b].s = bl[b].d * (float)sl;
    }
}

void kipp_cpu_quant2_q8_k_scalar(const float *x, void *out_hi, void *out_lo, uint64_t k) {
    kipp_act_q8_k *bh = out_hi, *bl = out_lo;
    for (uint64_t b = 0; b < k / 256; b++) {
        split_block(x + b * 256, 256, &bh[b].d, &bl[b].d, bh[b].qs, bl[b].qs);
        for (int j = 0; j < 16; j++) {
            int sh = 0, sl = 0;
            for (int i = 0; i < 16; i++) { sh += bh[b].qs[16 * j + i]; sl += bl[b].qs[16 * j + i]; }
            bh[b].bsums[j] = (int16_t)sh;
            bl[b].bsums[j] = (int16_t)sl;
        }
    }
}

const kipp_cpu_kernels kipp_cpu_kernels_scalar = {
    .isa = "scalar",
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
    .quant2 = {NULL, NULL, kipp_cpu_quant2_q8_0_scalar, kipp_cpu_quant2_q8_k_scalar},
};
