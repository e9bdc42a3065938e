/* kernels_packed.h — Q8_0, Q4_K, Q5_K and Q6_K weights repacked once at load, and the int16 kernels that
 * run every token count from that layout. Included by the ISA files that offer them
 * (kernels_avx2.c; kernels_avx512.c when built as level avx512vnni), which define
 * KP_DOT(acc, w, x): acc + the int32 sums of adjacent int16 products of w and x (vpmaddwd +
 * vpaddd on avx2, one vpdpwssd with AVX512-VNNI). The layout is the same for every includer,
 * so the packed bytes do not depend on the level; the packers are kp_packer_q8_0,
 * kp_packer_q4_k, kp_packer_q5_k and kp_packer_q6_k (kernels.h: kipp_cpu_packer). Only ISA files include this (intrinsics). */
#ifndef KIPP_CPU_KERNELS_PACKED_H
#define KIPP_CPU_KERNELS_PACKED_H

#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#ifndef KP_DOT
#error "kernels_packed.h: define KP_DOT(acc, w, x) before including it"
#endif

#define KP_INLINE static inline __attribute__((always_inline))
#define KP_UNROLL _Pragma("GCC unroll 16")

enum { KP_T = 3 }; /* tokens per register tile */

KP_INLINE float kp_rd_f16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return _cvtsh_ss(v);
}

KP_INLINE int32_t kp_ld_pair(const int16_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* lanes [0, n) set, n <= 8 */
KP_INLINE __m256i kp_tail_mask(uint64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Q4_K's 12-byte packing of 8 6-bit scales and mins (ggml's get_scale_min_k4), at load */
static void kp_k4_scales(const uint8_t *q, uint8_t scale[8], uint8_t min[8]) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scale[j] = q[j] & 63;
            min[j] = q[j + 4] & 63;
        } else {
            scale[j] = (uint8_t)((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
            min[j] = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
        }
    }
}

/* The gemm of a packed type over its tile: w the packed tensor advanced to row r (r a
 * multiple of 16), wrb = group bytes / 16; groups of 16 rows x up to TMAX tokens, each tile
 * width dispatched by CASES (a switch on T over TILE(T, grp, k, xt, xrb, yt, ldy, nr)). */
#define KP_GEMM_OVER(NAME, TMAX, CASES)                                                                   \
    static void NAME(const void *w, size_t wrb, uint64_t n_rows, const void *x, size_t xrb, uint64_t n_tok, \
                     float *y, size_t ldy, uint64_t k) {                                                  \
        for (uint64_t r0 = 0; r0 < n_rows; r0 += 16) {                                                    \
            const int nr = n_rows - r0 >= 16 ? 16 : (int)(n_rows - r0);                                   \
            const uint8_t *grp = (const uint8_t *)w + r0 * wrb;                                           \
            for (uint64_t t = 0; t < n_tok; t += (TMAX)) {                                                \
                const int T = n_tok - t >= (TMAX) ? (TMAX) : (int)(n_tok - t);                            \
                const char *xt = (const char *)x + t * xrb;                                               \
                float *yt = y + t * ldy + r0;                                                             \
                CASES                                                                                     \
            }                                                                                             \
        }                                                                                                 \
    }
#define KP_CASE(TILE, N) case N: TILE(N, grp, k, xt, xrb, yt, ldy, nr); break;
#define KP_GEMM(NAME, TILE)                                                                               \
    KP_GEMM_OVER(NAME, KP_T, switch (T) {                                                                 \
        KP_CASE(TILE, 3) KP_CASE(TILE, 2) default: TILE(1, grp, k, xt, xrb, yt, ldy, nr); break;         \
    })

/* y[t][0..nr) = acc[0..1][t] (rows 8g..8g+7), rows past nr left as they are */
KP_INLINE void kp_store(int T, __m256 acc[2][KP_T], float *y, size_t ldy, int nr) {
    KP_UNROLL for (int g = 0; g < 2; g++) {
        if (8 * g >= nr) break;
        const __m256i m = kp_tail_mask((uint64_t)(nr - 8 * g));
        KP_UNROLL for (int t = 0; t < T; t++) _mm256_maskstore_ps(y + t * ldy + 8 * g, m, acc[g][t]);
    }
}

/* Every packed layout below is one stream read front to back: a block's values, scales and
 * minimums lie together, in the order the tile reads them. With the scales in a second region
 * of the group (values for all of k, then all the scales) a one-token product read from memory
 * at 13-15 GB/s on the 2-core EPYC (Zen 4) whatever was prefetched; one stream per group
 * reads at 22-27 (kernels-epyc-avx512bf16.json). The K-quants' tiles also prefetch: step j
 * of n of a block of `block` bytes at p prefetches its n-th of the next block, so the whole
 * next block is on its way by the end of this one (a few percent on the K-quants; Q8_0's
 * one-token tile runs faster without it: kp_prefetch_q8_0). */
#define KP_PREFETCH_NEXT(p, block, j, n)                                                                  \
    KP_UNROLL for (int l_ = 0; l_ < ((block) / (n) + 63) / 64; l_++)                                      \
        _mm_prefetch((const char *)(p) + (block) + (uint64_t)(j) * ((block) / (n)) + 64 * l_, _MM_HINT_T0)

/* ---- Q8_0 repacked once at load -------------------------------------------------------------
 * A tensor is stored as groups of 16 rows (the last padded with zero rows), a group as k/32
 * blocks of K8P_B bytes: for every two consecutive k of the block the 16 rows' signed 8-bit
 * values pair-interleaved (16 x 32 bytes: row r's (w[k], w[k+1]) at 2r), then the 16 rows'
 * f32 scales of the block: 18 k bytes per group, 1.125 bytes a weight against Q8_0's 1.0625 (+5.9 %; the GGUF pages
 * are released after packing, forward.c). Q4_0 (0.5625) would nearly double and stays
 * mmapped. The kernel widens each pair vector to int16 as it goes (vpmovsxbw) and runs
 * the int16 tiles over KIPP_ACT_Q16 rows for every token count: no per-call decode or
 * transposition, so small batches (a server's decode step of 8 sequences) get the panel's
 * arithmetic rate, and decode reads one stream per 16 rows. */
enum { K8P_SC = 512, K8P_B = K8P_SC + 16 * sizeof(float) }; /* a block: 16 rows' 32 values, then their 16 scales */
KP_INLINE uint64_t kp_group_bytes_q8_0(uint64_t k) { return k / 32 * K8P_B; }

static size_t kp_bytes_q8_0(uint32_t type, uint64_t rows, uint64_t k) {
    if (type != KIPP_TYPE_Q8_0 || k % 32 != 0 || rows == 0) return 0;
    return (size_t)((rows + 15) / 16 * kp_group_bytes_q8_0(k));
}

/* Rows [r0, r1) (r0 a multiple of 16) into out (the whole tensor's packed buffer) */
static void kp_pack_q8_0(uint32_t type, const void *w, size_t wrb, uint64_t n_rows, uint64_t r0, uint64_t r1,
                         uint64_t k, void *out) {
    (void)type;
    for (uint64_t g0 = r0; g0 < r1; g0 += 16) {
        uint8_t *grp = (uint8_t *)out + g0 / 16 * kp_group_bytes_q8_0(k);
        const int nr = n_rows - g0 >= 16 ? 16 : (int)(n_rows - g0);
        for (int r = 0; r < 16; r++) {
            const uint8_t *row = (const uint8_t *)w + (g0 + (uint64_t)r) * wrb;
            for (uint64_t j = 0; j < k / 32; j++) {
                const uint8_t *b = row + j * 34;
                float *sc = (float *)(grp + j * K8P_B + K8P_SC);
                sc[r] = r < nr ? kp_rd_f16(b) : 0.0f;
                for (int s = 0; s < 16; s++) { /* pair s of the block: 2 bytes at lane r */
                    uint8_t *o = grp + j * K8P_B + (uint64_t)s * 32 + 2 * r;
                    if (r < nr) memcpy(o, b + 2 + 2 * s, 2);
                    else o[0] = o[1] = 0;
                }
            }
        }
    }
}

/* Block j's prefetch for a tile of two or more tokens: the block four ahead, whole. A
 * one-token tile reads faster without it (22-27 against 19-22 GB/s from memory on the
 * EPYC); a tile of 8 tokens, which spends longer on each block, needs it (0.6B Q8_0, 8
 * server clients: 122-126 tok/s without, 162-174 with). */
KP_INLINE void kp_prefetch_q8_0(int T, const uint8_t *qv) {
    if (T < 2) return;
    KP_UNROLL for (int l = 0; l < K8P_B / 64; l++) _mm_prefetch((const char *)qv + 4 * K8P_B + 64 * l, _MM_HINT_T0);
}

/* One group (16 rows) against T tokens over all of k: y[t][0..nr) = group . x_t */
KP_INLINE void kp_tile_q8_0(int T, const uint8_t *grp, uint64_t k, const char *x, size_t xrb, float *y, size_t ldy,
                            int nr) {
    __m256 acc[2][KP_T];
    KP_UNROLL for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (uint64_t j = 0; j < k / 32; j++) {
        const kipp_act_q16 *xb[KP_T];
        __m256i ai[2][KP_T];
        KP_UNROLL for (int t = 0; t < T; t++) {
            xb[t] = (const kipp_act_q16 *)(x + t * xrb) + j;
            ai[0][t] = ai[1][t] = _mm256_setzero_si256();
        }
        const uint8_t *qv = grp + j * K8P_B;
        const float *scv = (const float *)(qv + K8P_SC);
        kp_prefetch_q8_0(T, qv);
        _Pragma("GCC unroll 4") for (int s = 0; s < 16; s++) {
            const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qv + 32 * s)));
            const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qv + 32 * s + 16)));
            KP_UNROLL for (int t = 0; t < T; t++) {
                const __m256i xv = _mm256_set1_epi32(kp_ld_pair(xb[t]->qs + 2 * s));
                ai[0][t] = KP_DOT(ai[0][t], w0, xv);
                ai[1][t] = KP_DOT(ai[1][t], w1, xv);
                __asm__("" : "+x"(ai[0][t]), "+x"(ai[1][t])); /* as kp_tile_q4_k */
            }
        }
        KP_UNROLL for (int g = 0; g < 2; g++) {
            const __m256 sc = _mm256_loadu_ps(scv + 8 * g);
            KP_UNROLL for (int t = 0; t < T; t++) {
                const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(ai[g][t]), _mm256_set1_ps(xb[t]->d));
                acc[g][t] = _mm256_fmadd_ps(f, sc, acc[g][t]);
            }
        }
    }
    kp_store(T, acc, y, ldy, nr);
}

#ifndef KP_DOT512
KP_GEMM(kp_gemm_q8_0, kp_tile_q8_0)
#endif

#ifdef KP_DOT512
/* The same groups at 512 bits (levels with AVX-512 define KP_DOT512 as KP_DOT at zmm width):
 * one vector holds a pair of all 16 rows, so a pair is widened once and feeds up to
 * KP_T512 tokens. Every lane does what kp_tile_q8_0's does (the exact int32 block dot, then
 * (float)dot * d_x, then fma with the row scale, blocks in order), so both give the same
 * bits: the cached-decode and prefix-reuse gates compare results across token counts and
 * levels. */
enum { KP_T512 = 8 };

/* The 512-bit tiles' gemm: groups of 16 rows x up to KP_T512 tokens */
#define KP_GEMM512(NAME, TILE)                                                                            \
    KP_GEMM_OVER(NAME, KP_T512, switch (T) {                                                              \
        KP_CASE(TILE, 8) KP_CASE(TILE, 7) KP_CASE(TILE, 6) KP_CASE(TILE, 5) KP_CASE(TILE, 4)              \
        KP_CASE(TILE, 3) KP_CASE(TILE, 2) default: TILE(1, grp, k, xt, xrb, yt, ldy, nr); break;          \
    })

/* Independent int32 chains per token: a tile of one or two tokens has too few accumulators to
 * hide vpdpwssd's latency (4-5 cycles), so its pairs go round-robin into KP_CH(T) chains that
 * are added at the end of the block. The sums are exact integers, so the chains change no bit
 * (the same-bits rule above holds). */
#define KP_CH(T) ((T) == 1 ? 4 : (T) == 2 ? 2 : 1)

/* ai[0][t] += ai[1..ch)[t] (exact int32) */
KP_INLINE void kp_chains_sum(int T, int ch, __m512i ai[4][KP_T512]) {
    KP_UNROLL for (int c = 1; c < ch; c++) KP_UNROLL for (int t = 0; t < T; t++) ai[0][t] = _mm512_add_epi32(ai[0][t], ai[c][t]);
}

KP_INLINE void kp_tile512_q8_0(int T, const uint8_t *grp, uint64_t k, const char *x, size_t xrb, float *y,
                               size_t ldy, int nr) {
    const kipp_act_q16 *xr[KP_T512];
    __m512 acc[KP_T512];
    KP_UNROLL for (int t = 0; t < T; t++) {
        xr[t] = (const kipp_act_q16 *)(x + t * xrb);
        acc[t] = _mm512_setzero_ps();
    }
    const int ch = KP_CH(T);
    for (uint64_t j = 0; j < k / 32; j++) {
        __m512i ai[4][KP_T512];
        KP_UNROLL for (int c = 0; c < ch; c++) KP_UNROLL for (int t = 0; t < T; t++) ai[c][t] = _mm512_setzero_si512();
        const uint8_t *qv = grp + j * K8P_B;
        kp_prefetch_q8_0(T, qv);
        KP_UNROLL for (int s = 0; s < 16; s++) {
            const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(qv + 32 * s)));
            KP_UNROLL for (int t = 0; t < T; t++)
                ai[s % ch][t] = KP_DOT512(ai[s % ch][t], w, _mm512_set1_epi32(kp_ld_pair(xr[t][j].qs + 2 * s)));
        }
        kp_chains_sum(T, ch, ai);
        const __m512 sc = _mm512_loadu_ps(qv + K8P_SC);
        KP_UNROLL for (int t = 0; t < T; t++) {
            const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(ai[0][t]), _mm512_set1_ps(xr[t][j].d));
            acc[t] = _mm512_fmadd_ps(f, sc, acc[t]);
        }
    }
    const __mmask16 m = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
    KP_UNROLL for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy, m, acc[t]);
}

KP_GEMM512(kp_gemm512_q8_0, kp_tile512_q8_0)
#endif

/* ---- Q4_K and Q5_K repacked once at load ----------------------------------------------------
 * The same idea as Q8_0's groups of 16 rows, at Q4_K's own size: per 256-element super-block
 * a group holds the 16 rows' d and dmin as f32 ([16] each), then per 32-element sub-block
 * its 256 bytes of nibbles, for Q5_K its fifth bits (KQ_HI: 64 bytes: half g, one 32-byte
 * vector whose 16-bit lane 2r + e holds bit 4 of w[8g + r][2m + e] in bit m, m < 16 the
 * pair), and the 16 rows' 6-bit scale and min as bytes: 152 bytes a row per 256 against
 * Q4_K's 144 (+5.6 %, as Q8_0's +5.9 %), 184 against Q5_K's 176 (+4.5 %). The nibbles are
 * laid out for the vpmaddwd tiles with no shuffle: in a sub-block, quad u (pairs
 * 4u..4u+3) and half g (rows 8g..8g+7), one 32-byte vector whose 16-bit lane 2r + e holds
 * w[8g + r][2(4u + q) + e] in bits 4q..4q+3 (q < 4): a shift and a mask give the int16 pair
 * vector of pair 4u + q (Q5_K: and its fifth bit or'd in). Exact: int32 per sub-block and
 * token, then y += dx * (d * scale) * dot - dx * sum_x * (dmin * min), as the panel path
 * does. Each function takes q5 (0: Q4_K, 1: Q5_K) as a constant. */
enum { KQ_HI = 256 };
KP_INLINE int kq_sub(int q5) { return q5 ? 256 + 64 + 32 : 256 + 32; } /* bytes of a sub-block */
KP_INLINE int kq_sc(int q5) { return q5 ? 256 + 64 : 256; }            /* its scales; mins 16 on */
KP_INLINE int kq_sb(int q5) { return 128 + 8 * kq_sub(q5); } /* a super-block */
/* sub-block j of a super-block at o */
KP_INLINE uint8_t *kq_sub_at(int q5, const uint8_t *o, int j) { return (uint8_t *)o + 128 + j * kq_sub(q5); }

KP_INLINE uint32_t kq_type(int q5) { return q5 ? KIPP_TYPE_Q5_K : KIPP_TYPE_Q4_K; }

KP_INLINE size_t kq_bytes(int q5, uint32_t type, uint64_t rows, uint64_t k) {
    if (type != kq_type(q5) || k % 256 != 0 || rows == 0) return 0;
    return (size_t)((rows + 15) / 16 * (k / 256) * (uint64_t)kq_sb(q5));
}
static size_t kp_bytes_q4_k(uint32_t type, uint64_t rows, uint64_t k) { return kq_bytes(0, type, rows, k); }
static size_t kp_bytes_q5_k(uint32_t type, uint64_t rows, uint64_t k) { return kq_bytes(1, type, rows, k); }

KP_INLINE void kq_pack(int q5, const void *w, size_t wrb, uint64_t n_rows, uint64_t r0, uint64_t r1, uint64_t k,
                       void *out) {
    const uint64_t gb = k / 256 * (uint64_t)kq_sb(q5);
    const int sc = kq_sc(q5), mn = kq_sc(q5) + 16;
    for (uint64_t g0 = r0; g0 < r1; g0 += 16) {
        uint8_t *grp = (uint8_t *)out + g0 / 16 * gb;
        const int nr = n_rows - g0 >= 16 ? 16 : (int)(n_rows - g0);
        for (uint64_t sb = 0; sb < k / 256; sb++) {
            uint8_t *o = grp + sb * kq_sb(q5);
            float *od = (float *)o, *odm = od + 16;
            uint8_t q[16][256]; /* the super-block's values per row, 0..15 or 0..31 (padding rows 0) */
            memset(q, 0, sizeof q);
            for (int r = 0; r < 16; r++) {
                if (r >= nr) {
                    for (int j = 0; j < 8; j++) kq_sub_at(q5, o, j)[sc + r] = kq_sub_at(q5, o, j)[mn + r] = 0;
                    od[r] = odm[r] = 0.0f;
                    continue;
                }
                /* Q4_K: d, dmin, scales[12], qs[128] (144 B); Q5_K: the same with qh[32] before qs (176 B) */
                const uint8_t *b = (const uint8_t *)w + (g0 + (uint64_t)r) * wrb + sb * (q5 ? 176 : 144);
                const uint8_t *qh = b + 16, *qs = b + (q5 ? 48 : 16);
                uint8_t scale[8], min[8];
                kp_k4_scales(b + 4, scale, min);
                for (int j = 0; j < 8; j++) {
                    kq_sub_at(q5, o, j)[sc + r] = scale[j];
                    kq_sub_at(q5, o, j)[mn + r] = min[j];
                    for (int l = 0; l < 32; l++) /* core/types.c's order: sub-block j the low (j even) or high nibble */
                        q[r][32 * j + l] = (uint8_t)(((qs[32 * (j / 2) + l] >> (4 * (j & 1))) & 0x0f) |
                                                     (q5 ? ((qh[l] >> j) & 1) << 4 : 0));
                }
                od[r] = kp_rd_f16(b);
                odm[r] = kp_rd_f16(b + 2);
            }
            for (int j = 0; j < 8; j++)
                for (int g = 0; g < 2; g++) {
                    for (int u = 0; u < 4; u++) {
                        uint16_t *v = (uint16_t *)(kq_sub_at(q5, o, j) + (u * 2 + g) * 32);
                        for (int r = 0; r < 8; r++)
                            for (int e = 0; e < 2; e++) {
                                unsigned lane = 0;
                                for (int qq = 0; qq < 4; qq++)
                                    lane |= (unsigned)(q[8 * g + r][32 * j + 2 * (4 * u + qq) + e] & 0x0f) << (4 * qq);
                                v[2 * r + e] = (uint16_t)lane;
                            }
                    }
                    if (!q5) continue;
                    uint16_t *v = (uint16_t *)(kq_sub_at(q5, o, j) + KQ_HI + g * 32);
                    for (int r = 0; r < 8; r++)
                        for (int e = 0; e < 2; e++) {
                            unsigned lane = 0;
                            for (int m = 0; m < 16; m++) lane |= (unsigned)(q[8 * g + r][32 * j + 2 * m + e] >> 4) << m;
                            v[2 * r + e] = (uint16_t)lane;
                        }
                }
        }
    }
}
static void kp_pack_q4_k(uint32_t type, const void *w, size_t wrb, uint64_t n_rows, uint64_t r0, uint64_t r1,
                         uint64_t k, void *out) {
    (void)type;
    kq_pack(0, w, wrb, n_rows, r0, r1, k, out);
}
static void kp_pack_q5_k(uint32_t type, const void *w, size_t wrb, uint64_t n_rows, uint64_t r0, uint64_t r1,
                         uint64_t k, void *out) {
    (void)type;
    kq_pack(1, w, wrb, n_rows, r0, r1, k, out);
}

/* bit 4 of pair m's values (from a fifth-bit vector) in place */
KP_INLINE __m256i kq_hi(__m256i hv, int m) {
    const __m256i v = m >= 4 ? _mm256_srli_epi16(hv, m - 4) : _mm256_slli_epi16(hv, 4 - m);
    return _mm256_and_si256(v, _mm256_set1_epi16(0x10));
}

/* One group (16 rows) against T tokens over all of k */
KP_INLINE void kq_tile(int q5, int T, const uint8_t *grp, uint64_t k, const char *x, size_t xrb, float *y,
                       size_t ldy, int nr) {
    const __m256i m4 = _mm256_set1_epi16(0x0f);
    const int sco = kq_sc(q5);
    __m256 acc[2][KP_T];
    KP_UNROLL for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (uint64_t sb = 0; sb < k / 256; sb++) {
        const uint8_t *o = grp + sb * kq_sb(q5);
        const float *od = (const float *)o;
        for (int j = 0; j < 8; j++) {
            const kipp_act_q16 *xb[KP_T];
            __m256i ai[2][KP_T];
            KP_UNROLL for (int t = 0; t < T; t++) {
                xb[t] = (const kipp_act_q16 *)(x + t * xrb) + sb * 8 + (uint64_t)j;
                ai[0][t] = ai[1][t] = _mm256_setzero_si256();
            }
            const uint8_t *qv = kq_sub_at(q5, o, j);
            KP_PREFETCH_NEXT(o, kq_sb(q5), j, 8);
            __m256i hv0 = _mm256_setzero_si256(), hv1 = hv0;
            if (q5) {
                hv0 = _mm256_loadu_si256((const __m256i *)(qv + KQ_HI));
                hv1 = _mm256_loadu_si256((const __m256i *)(qv + KQ_HI + 32));
            }
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {
                const __m256i v0 = _mm256_loadu_si256((const __m256i *)(qv + 64 * u));
                const __m256i v1 = _mm256_loadu_si256((const __m256i *)(qv + 64 * u + 32));
                KP_UNROLL for (int q = 0; q < 4; q++) {
                    __m256i w0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4 * q), m4);
                    __m256i w1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4 * q), m4);
                    if (q5) {
                        w0 = _mm256_or_si256(w0, kq_hi(hv0, 4 * u + q));
                        w1 = _mm256_or_si256(w1, kq_hi(hv1, 4 * u + q));
                    }
                    KP_UNROLL for (int t = 0; t < T; t++) {
                        const __m256i xv = _mm256_set1_epi32(kp_ld_pair(xb[t]->qs + 2 * (4 * u + q)));
                        ai[0][t] = KP_DOT(ai[0][t], w0, xv);
                        ai[1][t] = KP_DOT(ai[1][t], w1, xv);
                        /* one chain per accumulator: gcc's reassociation into a tree of
                         * adds would spill (measured: 235 stack moves, 86 vs 103 GFLOP/s) */
                        __asm__("" : "+x"(ai[0][t]), "+x"(ai[1][t]));
                    }
                }
            }
            KP_UNROLL for (int g = 0; g < 2; g++) {
                const __m256 sc = _mm256_mul_ps(
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qv + sco + 8 * g)))),
                    _mm256_loadu_ps(od + 8 * g));
                const __m256 mn = _mm256_mul_ps(
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qv + sco + 16 + 8 * g)))),
                    _mm256_loadu_ps(od + 16 + 8 * g));
                KP_UNROLL for (int t = 0; t < T; t++) {
                    const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(ai[g][t]), _mm256_set1_ps(xb[t]->d));
                    acc[g][t] = _mm256_fmadd_ps(f, sc, acc[g][t]);
                    acc[g][t] = _mm256_fnmadd_ps(mn, _mm256_set1_ps(xb[t]->d * (float)xb[t]->sum), acc[g][t]);
                }
            }
        }
    }
    kp_store(T, acc, y, ldy, nr);
}

#ifndef KP_DOT512
KP_INLINE void kp_tile_q4_k(int T, const uint8_t *grp, uint64_t k, const char *x, size_t xrb, float *y, size_t ldy,
                            int nr) {
    kq_tile(0, T, grp, k, x, xrb, y, ldy, nr);
}
KP_INLINE void kp_tile_q5_k(int T, const uint8_t *grp, uint64_t k, const char *x, size_t xrb, float *y, size_t ldy,
                            int nr) {
    kq_tile(1, T, grp, k, x, xrb, y, ldy, nr);
}
KP_GEMM(kp_gemm_q4_k, kp_tile_q4_k)
KP_GEMM(kp_gemm_q5_k, kp_tile_q5_k)
#endif

#ifdef KP_DOT512
/* kq_tile at 512 bits: a quad's two 32-byte half vectors (rows 0-7, 8-15) lie side by side,
 * so one 64-byte load holds all 16 rows (Q5_K's two fifth-bit vectors likewise); each lane
 * does what kq_tile's does, in the same order (the same bits, see kp_tile512_q8_0); the
 * fifth bit goes in with one vpternlogd (nibble | (shifted & 0x10)) */
KP_INLINE void kq_tile512(int q5, int T, const uint8_t *grp, uint64_t k, const char *x, size_t xrb, float *y,
                          size_t ldy, int nr) {
    const __m512i m4 = _mm512_set1_epi16(0x0f), b4 = _mm512_set1_epi16(0x10);
    const int ch = KP_CH(T), sco = kq_sc(q5);
    __m512 acc[KP_T512];
    KP_UNROLL for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (uint64_t sb = 0; sb < k / 256; sb++) {
        const uint8_t *o = grp + sb * kq_sb(q5);
        const float *od = (const float *)o;
        for (int j = 0; j < 8; j++) {
            const kipp_act_q16 *xb[KP_T512];
            __m512i ai[4][KP_T512];
            KP_UNROLL for (int t = 0; t < T; t++) {
                xb[t] = (const kipp_act_q16 *)(x + t * xrb) + sb * 8 + (uint64_t)j;
                KP_UNROLL for (int c = 0; c < ch; c++) ai[c][t] = _mm512_setzero_si512();
            }
            const uint8_t *qv = kq_sub_at(q5, o, j);
            KP_PREFETCH_NEXT(o, kq_sb(q5), j, 8);
            const __m512i hv = q5 ? _mm512_loadu_si512((const void *)(qv + KQ_HI)) : _mm512_setzero_si512();
            _Pragma("GCC unroll 4") for (int u = 0; u < 4; u++) {
                const __m512i v = _mm512_loadu_si512((const void *)(qv + 64 * u));
                KP_UNROLL for (int q = 0; q < 4; q++) {
                    const int m = 4 * u + q;
                    __m512i w = _mm512_and_si512(_mm512_srli_epi16(v, 4 * q), m4);
                    if (q5) {
                        const __m512i hs = m >= 4 ? _mm512_srli_epi16(hv, (unsigned)(m - 4))
                                                  : _mm512_slli_epi16(hv, (unsigned)(4 - m));
                        w = _mm512_ternarylogic_epi32(w, hs, b4, 0xf8); /* 0xf8: a | (b & c) */
                    }
                    KP_UNROLL for (int t = 0; t < T; t++) {
                        ai[q % ch][t] = KP_DOT512(ai[q % ch][t], w, _mm512_set1_epi32(kp_ld_pair(xb[t]->qs + 2 * m)));
                        __asm__("" : "+v"(ai[q % ch][t]));
                    }
                }
            }
            kp_chains_sum(T, ch, ai);
            const __m512 sc = _mm512_mul_ps(
                _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qv + sco)))),
                _mm512_loadu_ps(od));
            const __m512 mn = _mm512_mul_ps(
                _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qv + sco + 16)))),
                _mm512_loadu_ps(od + 16));
            KP_UNROLL for (int t = 0; t < T; t++) {
                const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(ai[0][t]), _mm512_set1_ps(xb[t]->d));
                acc[t] = _mm512_fmadd_ps(f, sc, acc[t]);
                acc[t] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(xb[t]->d * (float)xb[t]->sum), acc[t]);
            }
        }
    }
    const __mmask16 m = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
    KP_UNROLL for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy, m, acc[t]);
}

KP_INLINE void kp_tile512_q4_k(int T, const uint8_t *grp, uint64_t k, const char *x, size_t xrb, float *y,
                               size_t ldy, int nr) {
    kq_tile512(0, T, grp, k, x, xrb, y, ldy, nr);
}
KP_INLINE void kp_tile512_q5_k(int T, const uint8_t *grp, uint64_t k, const char *x, size_t xrb, float *y,
                               size_t ldy, int nr) {
    kq_tile512(1, T, grp, k, x, xrb, y, ldy, nr);
}
KP_GEMM512(kp_gemm512_q4_k, kp_tile512_q4_k)
KP_GEMM512(kp_gemm512_q5_k, kp_tile512_q5_k)
#endif

/* ---- Q6_K repacked once at load ------------------------------------------------------------
 * Per 256-element super-block a group of 16 rows holds the 16 rows' d as f32, then per
 * 32-element sub-block j its low nibbles as Q4_K's packed form (256 bytes), its high two
 * bits (128 bytes: half g and pairs 8h..8h+7, one 32-byte vector whose 16-bit lane 2r + e
 * holds bits 4-5 of w[8g + r][2(8h + m) + e] in bits 2m..2m+1) and the 16 rows' int8 scales
 * of its two 16-element halves ([2][16]): 212 bytes a row per 256 against Q6_K's 210. Values
 * are q - 32 in int16; each 16-element half of a sub-block has its own scale, so its int32
 * sums are scaled on their own: y += dx * (d * scale) * dot. */
enum { K6P_D = 0, K6P_HI = 256, K6P_SC = 384, K6P_SUB = 416, K6P_SB = 64 + 8 * K6P_SUB };
/* sub-block j of a super-block at o: low nibbles (256 bytes), high bits (K6P_HI: 128),
 * the 16 rows' scales of its two halves (K6P_SC: 32) */
KP_INLINE uint8_t *kp_q6_sub(const uint8_t *o, int j) { return (uint8_t *)o + 64 + j * K6P_SUB; }

static size_t kp_bytes_q6_k(uint32_t type, uint64_t rows, uint64_t k) {
    if (type != KIPP_TYPE_Q6_K || k % 256 != 0 || rows == 0) return 0;
    return (size_t)((rows + 15) / 16 * (k / 256) * K6P_SB);
}

static void kp_pack_q6_k(uint32_t type, const void *w, size_t wrb, uint64_t n_rows, uint64_t r0, uint64_t r1,
                           uint64_t k, void *out) {
    (void)type;
    const uint64_t gb = k / 256 * K6P_SB;
    for (uint64_t g0 = r0; g0 < r1; g0 += 16) {
        uint8_t *grp = (uint8_t *)out + g0 / 16 * gb;
        const int nr = n_rows - g0 >= 16 ? 16 : (int)(n_rows - g0);
        for (uint64_t sb = 0; sb < k / 256; sb++) {
            uint8_t *o = grp + sb * K6P_SB;
            float *od = (float *)(o + K6P_D);
            uint8_t q[16][256]; /* the super-block's values per row, 0..63 (padding rows 32: zero) */
            memset(q, 32, sizeof q);
            for (int r = 0; r < 16; r++) {
                if (r >= nr) {
                    for (int i = 0; i < 16; i++) kp_q6_sub(o, i / 2)[K6P_SC + (i % 2) * 16 + r] = 0;
                    od[r] = 0.0f;
                    continue;
                }
                const uint8_t *b = (const uint8_t *)w + (g0 + (uint64_t)r) * wrb + sb * 210;
                for (int i = 0; i < 16; i++) kp_q6_sub(o, i / 2)[K6P_SC + (i % 2) * 16 + r] = b[192 + i];
                od[r] = kp_rd_f16(b + 208);
                for (int n = 0; n < 2; n++) /* ggml's element order per 128 */
                    for (int l = 0; l < 32; l++) {
                        const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
                        q[r][128 * n + l] = (uint8_t)((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4);
                        q[r][128 * n + l + 32] = (uint8_t)((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4);
                        q[r][128 * n + l + 64] = (uint8_t)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
                        q[r][128 * n + l + 96] = (uint8_t)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
                    }
            }
            for (int j = 0; j < 8; j++)
                for (int g = 0; g < 2; g++) {
                    for (int u = 0; u < 4; u++) {
                        uint16_t *v = (uint16_t *)(kp_q6_sub(o, j) + (u * 2 + g) * 32);
                        for (int r = 0; r < 8; r++)
                            for (int e = 0; e < 2; e++) {
                                unsigned lane = 0;
                                for (int qq = 0; qq < 4; qq++)
                                    lane |= (unsigned)(q[8 * g + r][32 * j + 2 * (4 * u + qq) + e] & 0x0f) << (4 * qq);
                                v[2 * r + e] = (uint16_t)lane;
                            }
                    }
                    for (int h = 0; h < 2; h++) {
                        uint16_t *v = (uint16_t *)(kp_q6_sub(o, j) + K6P_HI + (g * 2 + h) * 32);
                        for (int r = 0; r < 8; r++)
                            for (int e = 0; e < 2; e++) {
                                unsigned lane = 0;
                                for (int m = 0; m < 8; m++)
                                    lane |= (unsigned)(q[8 * g + r][32 * j + 2 * (8 * h + m) + e] >> 4) << (2 * m);
                                v[2 * r + e] = (uint16_t)lane;
                            }
                    }
                }
        }
    }
}

/* bits 4-5 of pair m's values (from a high-bit vector) in place */
KP_INLINE __m256i kp_q6_hi(__m256i hv, int m) {
    const __m256i v = 2 * m >= 4 ? _mm256_srli_epi16(hv, 2 * m - 4) : _mm256_slli_epi16(hv, 4 - 2 * m);
    return _mm256_and_si256(v, _mm256_set1_epi16(0x30));
}

/* One group (16 rows) against T tokens over all of k */
KP_INLINE void kp_tile_q6_k(int T, const uint8_t *grp, uint64_t k, const char *x, size_t xrb, float *y,
                             size_t ldy, int nr) {
    const __m256i m4 = _mm256_set1_epi16(0x0f), k32 = _mm256_set1_epi16(32);
    __m256 acc[2][KP_T];
    KP_UNROLL for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (uint64_t sb = 0; sb < k / 256; sb++) {
        const uint8_t *o = grp + sb * K6P_SB;
        const float *od = (const float *)(o + K6P_D);
        for (int j = 0; j < 8; j++) {
            const kipp_act_q16 *xb[KP_T];
            KP_UNROLL for (int t = 0; t < T; t++) xb[t] = (const kipp_act_q16 *)(x + t * xrb) + sb * 8 + (uint64_t)j;
            const uint8_t *sub = kp_q6_sub(o, j);
            KP_PREFETCH_NEXT(o, K6P_SB, j, 8);
            for (int h = 0; h < 2; h++) { /* the sub-block's halves: 16 elements, one scale each */
                __m256i ai[2][KP_T];
                KP_UNROLL for (int t = 0; t < T; t++) ai[0][t] = ai[1][t] = _mm256_setzero_si256();
                const __m256i hv0 = _mm256_loadu_si256((const __m256i *)(sub + K6P_HI + (0 * 2 + h) * 32));
                const __m256i hv1 = _mm256_loadu_si256((const __m256i *)(sub + K6P_HI + (1 * 2 + h) * 32));
                KP_UNROLL for (int uu = 0; uu < 2; uu++) {
                    const int u = 2 * h + uu;
                    const __m256i v0 = _mm256_loadu_si256((const __m256i *)(sub + 64 * u));
                    const __m256i v1 = _mm256_loadu_si256((const __m256i *)(sub + 64 * u + 32));
                    KP_UNROLL for (int qq = 0; qq < 4; qq++) {
                        const int m = 4 * uu + qq; /* the pair within the half */
                        const __m256i w0 = _mm256_sub_epi16(
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v0, 4 * qq), m4), kp_q6_hi(hv0, m)), k32);
                        const __m256i w1 = _mm256_sub_epi16(
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v1, 4 * qq), m4), kp_q6_hi(hv1, m)), k32);
                        KP_UNROLL for (int t = 0; t < T; t++) {
                            const __m256i xv = _mm256_set1_epi32(kp_ld_pair(xb[t]->qs + 2 * (4 * u + qq)));
                            ai[0][t] = KP_DOT(ai[0][t], w0, xv);
                            ai[1][t] = KP_DOT(ai[1][t], w1, xv);
                            __asm__("" : "+x"(ai[0][t]), "+x"(ai[1][t])); /* as kp_tile_q4_k */
                        }
                    }
                }
                KP_UNROLL for (int g = 0; g < 2; g++) {
                    const __m256 sc = _mm256_mul_ps(
                        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                            _mm_loadl_epi64((const __m128i *)(sub + K6P_SC + h * 16 + 8 * g)))),
                        _mm256_loadu_ps(od + 8 * g));
                    KP_UNROLL for (int t = 0; t < T; t++) {
                        const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(ai[g][t]), _mm256_set1_ps(xb[t]->d));
                        acc[g][t] = _mm256_fmadd_ps(f, sc, acc[g][t]);
                    }
                }
            }
        }
    }
    kp_store(T, acc, y, ldy, nr);
}

#ifndef KP_DOT512
KP_GEMM(kp_gemm_q6_k, kp_tile_q6_k)
#endif

#ifdef KP_DOT512
KP_INLINE __m512i kp_q6_hi512(__m512i hv, int m) {
    const __m512i v = 2 * m >= 4 ? _mm512_srli_epi16(hv, 2 * m - 4) : _mm512_slli_epi16(hv, 4 - 2 * m);
    return _mm512_and_si512(v, _mm512_set1_epi16(0x30));
}

/* kp_tile_q6_k at 512 bits: lanes 0-7 rows 0-7 and 8-15 rows 8-15, the same order per lane
 * (the same bits, see kp_tile512_q8_0) */
KP_INLINE void kp_tile512_q6_k(int T, const uint8_t *grp, uint64_t k, const char *x, size_t xrb, float *y,
                               size_t ldy, int nr) {
    const __m512i m4 = _mm512_set1_epi16(0x0f), k32 = _mm512_set1_epi16(32);
    const int ch = KP_CH(T);
    __m512 acc[KP_T512];
    KP_UNROLL for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (uint64_t sb = 0; sb < k / 256; sb++) {
        const uint8_t *o = grp + sb * K6P_SB;
        const float *od = (const float *)(o + K6P_D);
        for (int j = 0; j < 8; j++) {
            const kipp_act_q16 *xb[KP_T512];
            KP_UNROLL for (int t = 0; t < T; t++) xb[t] = (const kipp_act_q16 *)(x + t * xrb) + sb * 8 + (uint64_t)j;
            const uint8_t *sub = kp_q6_sub(o, j);
            KP_PREFETCH_NEXT(o, K6P_SB, j, 8);
            for (int h = 0; h < 2; h++) {
                __m512i ai[4][KP_T512];
                KP_UNROLL for (int c = 0; c < ch; c++) KP_UNROLL for (int t = 0; t < T; t++) ai[c][t] = _mm512_setzero_si512();
                const __m512i hv = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(sub + K6P_HI + (0 * 2 + h) * 32))),
                    _mm256_loadu_si256((const __m256i *)(sub + K6P_HI + (1 * 2 + h) * 32)), 1);
                KP_UNROLL for (int uu = 0; uu < 2; uu++) {
                    const int u = 2 * h + uu;
                    const __m512i v = _mm512_loadu_si512((const void *)(sub + 64 * u));
                    KP_UNROLL for (int qq = 0; qq < 4; qq++) {
                        const int m = 4 * uu + qq;
                        const __m512i w = _mm512_sub_epi16(
                            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4 * qq), m4), kp_q6_hi512(hv, m)), k32);
                        KP_UNROLL for (int t = 0; t < T; t++) {
                            ai[qq % ch][t] = KP_DOT512(ai[qq % ch][t], w,
                                                       _mm512_set1_epi32(kp_ld_pair(xb[t]->qs + 2 * (4 * u + qq))));
                            __asm__("" : "+v"(ai[qq % ch][t]));
                        }
                    }
                }
                kp_chains_sum(T, ch, ai);
                const __m512 sc = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(sub + K6P_SC + h * 16)))),
                    _mm512_loadu_ps(od));
                KP_UNROLL for (int t = 0; t < T; t++) {
                    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(ai[0][t]), _mm512_set1_ps(xb[t]->d));
                    acc[t] = _mm512_fmadd_ps(f, sc, acc[t]);
                }
            }
        }
    }
    const __mmask16 m = (__mmask16)(nr >= 16 ? 0xffff : (1u << nr) - 1);
    KP_UNROLL for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy, m, acc[t]);
}

KP_GEMM512(kp_gemm512_q6_k, kp_tile512_q6_k)
#endif

/* ---- one row back from the packed form (a tied embedding table's lookups) ---------------------
 * The same values and the same evaluation order as kipp_dequantize_row (core/types.c):
 * q * d (Q8_0), (d * scale) * q - dmin * min (Q4_K), (d * scale) * (q - 32) (Q6_K). */
static void kp_row_q8_0(uint32_t type, const void *p, uint64_t r, uint64_t k, float *out) {
    (void)type;
    const uint8_t *grp = (const uint8_t *)p + r / 16 * kp_group_bytes_q8_0(k);
    const uint64_t rr = r % 16;
    for (uint64_t i = 0; i < k; i++) {
        const uint8_t *blk = grp + i / 32 * K8P_B;
        float d;
        memcpy(&d, blk + K8P_SC + 4 * rr, 4);
        out[i] = (float)(int8_t)blk[(i % 32) / 2 * 32 + 2 * rr + i % 2] * d;
    }
}

KP_INLINE void kq_row(int q5, const void *p, uint64_t r, uint64_t k, float *out) {
    const int rr = (int)(r % 16), g = rr / 8, lr = rr % 8, sco = kq_sc(q5);
    for (uint64_t sb = 0; sb < k / 256; sb++) {
        const uint8_t *o = (const uint8_t *)p + (r / 16 * (k / 256) + sb) * kq_sb(q5);
        const float *od = (const float *)o;
        for (int j = 0; j < 8; j++) {
            const uint8_t *sub = kq_sub_at(q5, o, j);
            const float d1 = od[rr] * (float)sub[sco + rr], m1 = od[16 + rr] * (float)sub[sco + 16 + rr];
            for (int e32 = 0; e32 < 32; e32++) {
                const int pair = e32 / 2, u = pair / 4, qq = pair % 4;
                uint16_t lane, hi = 0;
                memcpy(&lane, sub + (u * 2 + g) * 32 + 2 * (2 * lr + e32 % 2), 2);
                if (q5) memcpy(&hi, sub + KQ_HI + g * 32 + 2 * (2 * lr + e32 % 2), 2);
                const int q = ((lane >> (4 * qq)) & 0x0f) | ((hi >> pair) & 1) << 4;
                out[sb * 256 + (uint64_t)(32 * j + e32)] = d1 * (float)q - m1;
            }
        }
    }
}
static void kp_row_q4_k(uint32_t type, const void *p, uint64_t r, uint64_t k, float *out) {
    (void)type;
    kq_row(0, p, r, k, out);
}
static void kp_row_q5_k(uint32_t type, const void *p, uint64_t r, uint64_t k, float *out) {
    (void)type;
    kq_row(1, p, r, k, out);
}

static void kp_row_q6_k(uint32_t type, const void *p, uint64_t r, uint64_t k, float *out) {
    (void)type;
    const int rr = (int)(r % 16), g = rr / 8, lr = rr % 8;
    for (uint64_t sb = 0; sb < k / 256; sb++) {
        const uint8_t *o = (const uint8_t *)p + (r / 16 * (k / 256) + sb) * K6P_SB;
        const float d = ((const float *)(o + K6P_D))[rr];
        for (int j = 0; j < 8; j++) {
            const uint8_t *sub = kp_q6_sub(o, j);
            for (int e32 = 0; e32 < 32; e32++) {
                const int pair = e32 / 2, u = pair / 4, qq = pair % 4, h = pair / 8, m = pair % 8;
                uint16_t lo, hi;
                memcpy(&lo, sub + (u * 2 + g) * 32 + 2 * (2 * lr + e32 % 2), 2);
                memcpy(&hi, sub + K6P_HI + (g * 2 + h) * 32 + 2 * (2 * lr + e32 % 2), 2);
                const int q = (((lo >> (4 * qq)) & 0x0f) | ((hi >> (2 * m)) & 3) << 4) - 32;
                const float sc = (float)(int8_t)sub[K6P_SC + (e32 / 16) * 16 + rr];
                out[sb * 256 + (uint64_t)(32 * j + e32)] = d * sc * (float)q;
            }
        }
    }
}

#ifdef KP_DOT512
static const kipp_cpu_packer kp_packer_q8_0 = {kp_bytes_q8_0, kp_pack_q8_0, kp_gemm512_q8_0, kp_row_q8_0, KIPP_ACT_Q16};
#else
static const kipp_cpu_packer kp_packer_q8_0 = {kp_bytes_q8_0, kp_pack_q8_0, kp_gemm_q8_0, kp_row_q8_0, KIPP_ACT_Q16};
#endif
#ifdef KP_DOT512
static const kipp_cpu_packer kp_packer_q4_k = {kp_bytes_q4_k, kp_pack_q4_k, kp_gemm512_q4_k, kp_row_q4_k, KIPP_ACT_Q16};
#else
static const kipp_cpu_packer kp_packer_q4_k = {kp_bytes_q4_k, kp_pack_q4_k, kp_gemm_q4_k, kp_row_q4_k, KIPP_ACT_Q16};
#endif
#ifdef KP_DOT512
static const kipp_cpu_packer kp_packer_q6_k = {kp_bytes_q6_k, kp_pack_q6_k, kp_gemm512_q6_k, kp_row_q6_k, KIPP_ACT_Q16};
#else
static const kipp_cpu_packer kp_packer_q6_k = {kp_bytes_q6_k, kp_pack_q6_k, kp_gemm_q6_k, kp_row_q6_k, KIPP_ACT_Q16};
#endif
#ifdef KP_DOT512
static const kipp_cpu_packer kp_packer_q5_k = {kp_bytes_q5_k, kp_pack_q5_k, kp_gemm512_q5_k, kp_row_q5_k, KIPP_ACT_Q16};
#else
static const kipp_cpu_packer kp_packer_q5_k = {kp_bytes_q5_k, kp_pack_q5_k, kp_gemm_q5_k, kp_row_q5_k, KIPP_ACT_Q16};
#endif

#endif
