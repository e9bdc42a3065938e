/* kernels_amx.c — BF16 weights on Intel AMX (Sapphire Rapids and later: AMX-TILE +
 * AMX-BF16), built with -mamx-tile -mamx-bf16 and the AVX-512 flags; only reached after
 * cpu.c checked cpuid, XCR0 and the kernel's permission for the tile state. The level "amx"
 * (cpu.c) is avx512vnni's table with this packer for BF16.
 *
 * Layout (repacked once at load, the same size as the GGUF rows): per group of 16 rows,
 * per 32 elements of k, one 1 KiB tile of 16 lines x 64 bytes, line i holding for each row
 * n of the group the pair W[n][2i], W[n][2i+1] — the B operand of TDPBF16PS. A group is
 * k/32 tiles in order of k.
 *
 * The activations come as KIPP_ACT_BF16X2 rows (hi, then lo: kernels.h): each tile product
 * runs on both planes into the same f32 accumulators, so y = W (hi + lo) to about 2^-17 of
 * x, where bf16 activations alone would carry 2^-9 (the gates compare against f32
 * arithmetic). Tiles: C0-C3 (f32, 16 tokens x 16 rows each: 32 tokens x 32 rows), A (a
 * plane of 16 tokens x 32 elements), B (two row groups). A tail of under 16 tokens runs with
 * a second tile configuration whose A and C tiles have that many lines. */
#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* palette 1; C tiles 0-3 and A tiles 4-5 of `rows` lines, B tiles 6-7 of 16 */
static void amx_config(amx_cfg *c, int rows) {
    memset(c, 0, sizeof *c);
    c->palette = 1;
    for (int i = 0; i < 8; i++) {
        c->colsb[i] = 64;
        c->rows[i] = (uint8_t)(i < 6 ? rows : 16);
    }
}

static size_t amx_bytes_bf16(uint32_t type, uint64_t rows, uint64_t k) {
    if (type != KIPP_TYPE_BF16 || k % 32 != 0 || rows == 0) return 0;
    return (size_t)((rows + 15) / 16 * 16 * k * 2);
}

/* Transposes the 16 x 16 matrix of 32-bit words in r: four stages, stage b swapping bit b of
 * the row index with bit b of the column index (the off-diagonal b x b blocks of every 2b x
 * 2b block), so after all four each word (i, j) sits at (j, i). */
static inline void transpose16(__m512i r[16], const __m512i idx[4][2]) {
    for (int s = 0, b = 8; s < 4; s++, b >>= 1)
        for (int i = 0; i < 16; i++) {
            if (i & b) continue;
            const __m512i a = r[i], c = r[i + b];
            r[i] = _mm512_permutex2var_epi32(a, idx[s][0], c);
            r[i + b] = _mm512_permutex2var_epi32(a, idx[s][1], c);
        }
}

/* transpose16's word selections: per stage (b = 8, 4, 2, 1) row i's (its own words where
 * bit b of the column is clear, row i + b's moved up where set) and row i + b's */
static void transpose16_idx(__m512i idx[4][2]) {
    for (int s = 0, b = 8; s < 4; s++, b >>= 1) {
        int32_t lo[16], hi[16];
        for (int c = 0; c < 16; c++) {
            lo[c] = c & b ? 16 | (c - b) : c;
            hi[c] = c & b ? 16 | c : c + b;
        }
        idx[s][0] = _mm512_loadu_si512(lo);
        idx[s][1] = _mm512_loadu_si512(hi);
    }
}

/* Rows [r0, r1) (r0 a multiple of 16) into out (the whole tensor's packed buffer); a last
 * group's rows past n_rows are zeros. A pair of bf16 is one 32-bit word, so each tile is a
 * 16 x 16 transpose of words: 16 rows' 64 bytes in, 16 lines out. */
static void amx_pack_bf16(uint32_t type, const void *w, size_t wrb, uint64_t n_rows, uint64_t r0, uint64_t r1,
                          uint64_t k, void *out) {
    (void)type;
    __m512i idx[4][2];
    transpose16_idx(idx);
    for (uint64_t g0 = r0; g0 < r1; g0 += 16) {
        uint32_t *grp = (uint32_t *)((uint16_t *)out + g0 * k);
        const char *row[16];
        for (uint64_t n = 0; n < 16; n++) row[n] = g0 + n < n_rows ? (const char *)w + (g0 + n) * wrb : NULL;
        for (uint64_t t = 0; t < k / 32; t++) { /* tile t: pairs 16t .. 16t + 15 of each row */
            __m512i r[16];
            for (int n = 0; n < 16; n++)
                r[n] = row[n] ? _mm512_loadu_si512(row[n] + 64 * t) : _mm512_setzero_si512();
            transpose16(r, idx);
            for (int i = 0; i < 16; i++) _mm512_storeu_si512(grp + t * 256 + (uint64_t)i * 16, r[i]);
        }
    }
}

/* row r of the packed tensor p, as f32 (exactly the GGUF row's values) */
static void amx_row_bf16(uint32_t type, const void *p, uint64_t r, uint64_t k, float *out) {
    (void)type;
    const uint16_t *grp = (const uint16_t *)p + r / 16 * 16 * k;
    const uint64_t n = r % 16;
    for (uint64_t kb = 0; kb < k / 32; kb++)
        for (int i = 0; i < 16; i++) {
            const uint16_t *o = grp + kb * 512 + (uint64_t)i * 32 + n * 2;
            out[kb * 32 + 2 * (uint64_t)i] = kipp_bf16_to_f32(o[0]);
            out[kb * 32 + 2 * (uint64_t)i + 1] = kipp_bf16_to_f32(o[1]);
        }
}

/* One block: up to 2 token tiles (x0, x1: 16 or `rows` tokens each; x1 NULL: one) by up to
 * 2 row groups (b1 NULL: one), over k; C stored to y (ldy floats apart). Both planes of each
 * token tile go through A (tile 4). */
static inline __attribute__((always_inline)) void amx_block(const uint16_t *b0, const uint16_t *b1,
                                                            const char *x0, const char *x1, size_t xrb,
                                                            uint64_t k, float *y, size_t ldy) {
    const uint64_t kb_n = k / 32, lo = k * 2; /* bytes from a row's hi plane to its lo plane */
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (uint64_t kb = 0; kb < kb_n; kb++) {
        _tile_loadd(6, b0 + kb * 512, 64);
        if (b1) _tile_loadd(7, b1 + kb * 512, 64);
/* token tile xt's two planes (tiles 4, 5) into accumulators cl (row group b0) and cr (b1);
 * a macro: tile numbers must be immediates */
#define AMX_TOKENS(cl, cr, xt)                                                                     \
    do {                                                                                           \
        _tile_loadd(4, (xt) + kb * 64, xrb);                                                       \
        _tile_loadd(5, (xt) + lo + kb * 64, xrb);                                                  \
        _tile_dpbf16ps(cl, 4, 6);                                                                  \
        if (b1) _tile_dpbf16ps(cr, 4, 7);                                                          \
        _tile_dpbf16ps(cl, 5, 6);                                                                  \
        if (b1) _tile_dpbf16ps(cr, 5, 7);                                                          \
    } while (0)
        AMX_TOKENS(0, 1, x0);
        if (x1) AMX_TOKENS(2, 3, x1);
#undef AMX_TOKENS
    }
    const size_t ys = ldy * sizeof(float);
    _tile_stored(0, y, ys);
    if (b1) _tile_stored(1, y + 16, ys);
    if (x1) {
        _tile_stored(2, y + 16 * ldy, ys);
        if (b1) _tile_stored(3, y + 16 * ldy + 16, ys);
    }
}

/* Token rows [t0, t0 + n) (n <= 32; the loaded configuration's A and C tiles hold n, or
 * 16 when n is 16 or 32) against the row groups of the call: pairs of whole groups into y,
 * a last group of under 16 rows through a scratch tile. */
static void amx_tokens(const uint16_t *w, uint64_t n_rows, const char *x, size_t xrb, uint64_t t0, uint64_t n,
                       float *y, size_t ldy, uint64_t k) {
    const char *x0 = x + t0 * xrb, *x1 = n == 32 ? x0 + 16 * xrb : NULL;
    float *yt = y + t0 * ldy;
    const uint64_t n_grp = n_rows / 16, part = n_rows % 16;
    for (uint64_t g = 0; g < n_grp; g += 2) {
        const uint16_t *b0 = w + g * 16 * k, *b1 = g + 1 < n_grp ? b0 + 16 * k : NULL;
        amx_block(b0, b1, x0, x1, xrb, k, yt + g * 16, ldy);
    }
    if (part) {
        float tmp[32 * 16];
        amx_block(w + n_grp * 16 * k, NULL, x0, x1, xrb, k, tmp, 16);
        const uint64_t nt = n == 32 ? 32 : n < 16 ? n : 16;
        for (uint64_t t = 0; t < nt; t++) memcpy(yt + t * ldy + n_grp * 16, tmp + t * 16, part * sizeof(float));
    }
}

/* kernels.h gemm over the packed layout: w advanced to a group (w_row_bytes = 2k), x
 * KIPP_ACT_BF16X2 rows */
static void amx_gemm_bf16(const void *w, size_t w_row_bytes, uint64_t n_rows, const void *x, size_t x_row_bytes,
                          uint64_t n_tok, float *y, size_t ldy, uint64_t k) {
    (void)w_row_bytes;
    amx_cfg cfg;
    const uint64_t full = n_tok / 16 * 16, tail = n_tok - full;
    if (full) {
        amx_config(&cfg, 16);
        _tile_loadconfig(&cfg);
        /* every pair of token tiles against every row group: the groups' tiles are read
         * again per 32 tokens (from cache: a call's rows are a few hundred KB) */
        for (uint64_t t = 0; t < full; t += 32)
            amx_tokens(w, n_rows, x, x_row_bytes, t, full - t >= 32 ? 32 : 16, y, ldy, k);
    }
    if (tail) {
        amx_config(&cfg, (int)tail);
        _tile_loadconfig(&cfg);
        amx_tokens(w, n_rows, x, x_row_bytes, full, tail, y, ldy, k);
    }
    _tile_release();
}

/* KIPP_ACT_BF16X2 in AVX-512 lanes, the same bits as kipp_cpu_quant_bf16x2_scalar */
static inline __m256i amx_to_bf16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i rounded = _mm512_add_epi32(
        u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    /* NaN: the quiet NaN of its sign (kipp_f32_to_bf16) */
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i r = _mm512_mask_or_epi32(rounded, nan, u, _mm512_set1_epi32(0x00400000));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

static void amx_quant_bf16x2(const float *x, void *out, uint64_t k) {
    uint16_t *hi = out, *lo = hi + k;
    uint64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m256i h = amx_to_bf16(v);
        const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        const __mmask16 fin = _mm512_cmp_ps_mask(_mm512_sub_ps(hf, hf), _mm512_setzero_ps(), _CMP_EQ_OQ);
        const __m256i l = _mm256_maskz_mov_epi16(fin, amx_to_bf16(_mm512_sub_ps(v, hf)));
        _mm256_storeu_si256((__m256i *)(hi + i), h);
        _mm256_storeu_si256((__m256i *)(lo + i), l);
    }
    for (; i < k; i++) kipp_cpu_bf16x2_one(x[i], hi + i, lo + i);
}

const kipp_cpu_packer kipp_cpu_packer_amx_bf16 = {amx_bytes_bf16, amx_pack_bf16, amx_gemm_bf16, amx_row_bf16,
                                                   KIPP_ACT_BF16X2};
const kipp_cpu_quant_fn kipp_cpu_quant_amx_bf16x2 = amx_quant_bf16x2;
