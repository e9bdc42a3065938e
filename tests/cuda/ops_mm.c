/* ops_mm.c — GPU operator test of src/backend/cuda/mm.cu (kipp_cuda_matmul, both paths,
 * kipp_cuda_matmul_exact, kipp_cuda_matmul_experts, both paths, and kipp_cuda_get_rows)
 * against a host f64 reference built from kipp_dequantize_row(), for every type
 * kipp_cuda_mm_type_supported() accepts and many shapes (odd n_out, n_tok on both sides of
 * the decode/GEMM switch, row lengths not a multiple of 32 for the float types, unaligned and
 * padded strides, expert groups empty, single and full). Runs only on a GPU (called by
 * kipp_test_cuda --cuda-operators after it found one); compiled everywhere.
 *
 * Bounds, per output y = sum_i w_i x_i with S = sum_i |w_i x_i| (f64), u = 2^-24:
 *  - matvec: the weights are the exact f32 dequantized values (quant_math.h, bit-exact); a
 *    lane runs an FMA chain of m = 8 ceil(n_in / 256) terms, then 5 butterfly additions, each
 *    operation one rounding: |err| <= gamma(m + 5) S, gamma(k) = k u / (1 - k u).
 *  - GEMM: x = xh + xl + rx with |rx| <= 2^-18 |x| and the same for w, and xl*wl is dropped,
 *    so each product is off by at most 3.02 * 2^-18 |w x| < 2^-16 |w x|. The 16x16x16 bf16
 *    products are exact in f32. mm.cu sums each BK = 32 step's (up to) 6 mma in a fresh
 *    fragment; tensor cores may truncate when adding into it, so each of those mma is charged
 *    2 * 2^-23 of (partial + terms) <= 2^-22 * 1.01 S_step: 6.06 * 2^-22 S over all steps.
 *    The steps' sums are then added in IEEE f32, a chain of n_in / 32 roundings:
 *    gamma(n_in / 32) S. |err| <= (2^-16 + 6.06 * 2^-22 + gamma(n_in / 32)) S.
 *    That worst-case bound, linear in n_in, would not see a lost lo plane at n_in 4096
 *    (random errors grow as sqrt(n_in)), so a statistical check goes with it: NMSE over a
 *    case <= 1e-9 (two planes: ~2^-36 ~ 1.5e-11; a single bf16 plane: ~1e-6), and 1e-11
 *    for matvec (f32 rounding only: ~1e-14).
 *  - decode vs GEMM on the same tokens: |gemm - matvec| <= both bounds added.
 *  - matmul_exact: the matvec bound at every n_tok, and each token's y bit for bit the one a
 *    one-token kipp_cuda_matmul gives (a token's FMA chain does not depend on its neighbours).
 *  - matmul_experts: each row against its expert's f64 product with the matvec bound (groups
 *    of at most 8 rows) or the GEMM bound (more); on the matvec path each row bit for bit a
 *    one-token kipp_cuda_matmul of its expert's matrix.
 *  - get_rows: bit-exact with kipp_dequantize_row.
 * Every y is written into a buffer pre-filled with a NaN sentinel and a row stride one wider
 * than n_out: the padding column must come back untouched (out-of-range work is masked). */
#include "backend/cuda/kernels.h"
#include "core/types.h"
#include "kt.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t k_types[] = {
    KIPP_TYPE_F32,  KIPP_TYPE_F16,  KIPP_TYPE_BF16, KIPP_TYPE_Q8_0,   KIPP_TYPE_Q4_0,
    KIPP_TYPE_Q4_K, KIPP_TYPE_Q6_K, KIPP_TYPE_Q4_1, KIPP_TYPE_Q5_0,   KIPP_TYPE_Q5_1,
    KIPP_TYPE_Q5_K, KIPP_TYPE_Q3_K, KIPP_TYPE_Q2_K, KIPP_TYPE_IQ4_NL, KIPP_TYPE_IQ4_XS,
};
static const uint32_t k_n_in[] = {8, 48, 32, 96, 256, 288, 1024, 2816, 4096};
static const uint32_t k_n_out[] = {1, 7, 33, 1000, 4097};
static const uint32_t k_n_tok[] = {1, 2, 3, 8, 9, 17, 64, 200};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
/* host reference work per case (n_in * n_out * n_tok multiply-adds in f64) */
#define MAX_MACS (1u << 24)
#define MV_MAX_TOK 8 /* mm.cu's decode/GEMM switch */

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545f4914f6cdd1dull) >> 32);
}
static float urand(void) { return (float)((double)rnd() / 2147483648.0 - 1.0); } /* [-1, 1) */

#define CK(call)                                                                                 \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "ops_mm: %s: %s\n", #call, cudaGetErrorString(e_));                  \
            bad++;                                                                               \
            goto out;                                                                            \
        }                                                                                        \
    } while (0)

/* n_rows random rows of n elements: float types from values in [-1, 1); quantized types
 * as random blocks (every quant and sub-scale bit pattern) whose f16 scales are sane,
 * 2^-11 .. 2^-6 with a random sign, so weights stay O(1) and finite. */
static void make_weights(uint32_t type, uint32_t n, uint32_t n_rows, uint8_t *w) {
    const uint64_t rb = kipp_type_row_bytes(type, n);
    if (type == KIPP_TYPE_F32 || type == KIPP_TYPE_F16 || type == KIPP_TYPE_BF16) {
        for (uint64_t i = 0; i < (uint64_t)n * n_rows; i++) {
            const float v = urand();
            if (type == KIPP_TYPE_F32) {
                memcpy(w + 4 * i, &v, 4);
            } else {
                const uint16_t h = type == KIPP_TYPE_F16 ? kipp_f32_to_f16(v) : kipp_f32_to_bf16(v);
                w[2 * i] = (uint8_t)h, w[2 * i + 1] = (uint8_t)(h >> 8);
            }
        }
        return;
    }
    const uint32_t bb = kipp_type_block_bytes(type);
    int off[3]; /* kt_scale_offsets (test_cuda_quant_math.c) */
    kt_scale_offsets(type, off);
    for (uint64_t i = 0; i < rb * n_rows; i++) w[i] = (uint8_t)rnd();
    for (uint64_t b = 0; b < rb * n_rows / bb; b++)
        for (int k = 0; k < 2 && off[k] >= 0; k++) {
            /* exponent field 4..9 (2^-11 .. 2^-6), random mantissa and sign */
            const uint16_t h = (uint16_t)((rnd() & 0x83ffu) | (4u + rnd() % 6u) << 10);
            w[b * bb + off[k]] = (uint8_t)h, w[b * bb + off[k] + 1] = (uint8_t)(h >> 8);
        }
}

typedef struct {
    double worst;      /* max |err| / bound */
    double worst_nmse; /* max NMSE over cases */
    int cases, fails;
} stat;

static void stat_line(const char *type, const char *path, const stat *s) {
    printf("  cuda mm %-6s %-9s %4d cases  worst err/bound %.3g  worst nmse %.3g  %s\n", type,
           path, s->cases, s->worst, s->worst_nmse, s->fails || !s->cases ? "FAIL" : "ok");
}

/* The GEMM's relative bound (the comment at the top). */
static double gemm_gamma(uint32_t n_in) {
    const double k = (n_in + 31) / 32, u = ldexp(1.0, -24);
    return ldexp(1.0, -16) + 6.06 * ldexp(1.0, -22) + k * u / (1 - k * u);
}

/* Checks y (device result, row stride ldy = n_out + 1) against the f64 reference; `mv`
 * picks the bound. Returns failures. */
static int check_y(const float *y, const double *ref, const double *sabs, uint32_t n_out,
                   uint32_t n_tok, uint32_t n_in, int mv, stat *st, const char *what) {
    int bad = 0;
    double e2 = 0, r2 = 0;
    const double u = ldexp(1.0, -24);
    const double kmv = 8.0 * ((n_in + 255) / 256) + 5;
    const double g_mv = kmv * u / (1 - kmv * u);
    const double g_mm = gemm_gamma(n_in);
    const double nmse_max = mv ? 1e-11 : 1e-9;
    for (uint32_t t = 0; t < n_tok; t++) {
        for (uint32_t o = 0; o < n_out; o++) {
            const double r = ref[(size_t)t * n_out + o], v = y[(size_t)t * (n_out + 1) + o];
            const double bound = (mv ? g_mv : g_mm) * sabs[(size_t)t * n_out + o] + 1e-30;
            const double err = fabs(v - r);
            if (!(err <= bound)) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s t %u o %u: %.9g want %.9g (bound %.3g)\n", what, t, o,
                            v, r, bound);
            }
            if (isnan(err)) st->worst = INFINITY;
            else if (err / bound > st->worst) st->worst = err / bound;
            e2 += (v - r) * (v - r), r2 += r * r;
        }
        if (!isnan(y[(size_t)t * (n_out + 1) + n_out])) {
            if (bad++ < 3) fprintf(stderr, "  %s t %u: padding column written\n", what, t);
        }
    }
    const double nmse = r2 > 0 ? e2 / r2 : e2;
    if (nmse > st->worst_nmse) st->worst_nmse = nmse;
    if (!(nmse <= nmse_max)) {
        bad++;
        fprintf(stderr, "  %s: nmse %.3g > %.3g\n", what, nmse, nmse_max);
    }
    st->cases++;
    st->fails += bad != 0;
    return bad;
}

/* One matmul on the device: x (host [n_tok][ldx]) -> y (host [n_tok][n_out + 1]); exact:
 * kipp_cuda_matmul_exact instead. */
static int run_matmul_as(int exact, uint32_t type, const void *d_w, uint32_t n_in, uint32_t n_out,
                         const float *x, size_t ldx, uint32_t n_tok, float *y) {
    int bad = 0;
    float *d_x = NULL, *d_y = NULL;
    void *d_s = NULL;
    const size_t ldy = (size_t)n_out + 1, sb = kipp_cuda_matmul_scratch_bytes(type, n_in, n_tok);
    CK(cudaMalloc((void **)&d_x, sizeof(float) * ldx * n_tok));
    CK(cudaMalloc((void **)&d_y, sizeof(float) * ldy * n_tok));
    if (sb) CK(cudaMalloc(&d_s, sb));
    CK(cudaMemcpy(d_x, x, sizeof(float) * ldx * n_tok, cudaMemcpyHostToDevice));
    CK(cudaMemset(d_y, 0xff, sizeof(float) * ldy * n_tok)); /* NaN sentinel */
    if (exact)
        CK((cudaError_t)kipp_cuda_matmul_exact(type, d_w, n_in, n_out, d_x, ldx, n_tok, d_y, ldy, 0));
    else
        CK((cudaError_t)kipp_cuda_matmul(type, d_w, n_in, n_out, d_x, ldx, n_tok, d_y, ldy, d_s, 0));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(y, d_y, sizeof(float) * ldy * n_tok, cudaMemcpyDeviceToHost));
out:
    cudaFree(d_x);
    cudaFree(d_y);
    cudaFree(d_s);
    return bad;
}

static int run_matmul(uint32_t type, const void *d_w, uint32_t n_in, uint32_t n_out,
                      const float *x, size_t ldx, uint32_t n_tok, float *y) {
    return run_matmul_as(0, type, d_w, n_in, n_out, x, ldx, n_tok, y);
}

/* The reference of rows whose inputs are x rows xr[r] against matrix rows wf (n_out of
 * n_in) of expert ex[r] (each expert's n_out rows n_out * n_in floats apart). */
static void ref_rows(const float *wf, uint32_t n_in, uint32_t n_out, const float *x, size_t ldx,
                     const uint32_t *xr, const uint32_t *ex, uint32_t n_rows, double *ref,
                     double *sabs) {
    for (uint32_t r = 0; r < n_rows; r++)
        for (uint32_t o = 0; o < n_out; o++) {
            const float *wr = wf + ((size_t)ex[r] * n_out + o) * n_in, *xp = x + xr[r] * ldx;
            double acc = 0, sa = 0;
            for (uint32_t i = 0; i < n_in; i++) {
                const double p = (double)wr[i] * (double)xp[i];
                acc += p, sa += fabs(p);
            }
            ref[(size_t)r * n_out + o] = acc, sabs[(size_t)r * n_out + o] = sa;
        }
}

/* kipp_cuda_matmul_exact: a router-like product (n_out 40) at token counts on both sides of
 * 8 and past several block rows, against the f64 reference (matvec bound), and a few tokens'
 * rows bit for bit against one-token kipp_cuda_matmul calls. */
static int test_exact(uint32_t type, stat *st, stat *same) {
    static const uint32_t ntok[] = {1, 5, 8, 9, 17, 64};
    const uint32_t n_in = 256, n_out = 40;
    int bad = 0;
    const uint64_t rb = kipp_type_row_bytes(type, n_in);
    uint8_t *w = malloc(rb * n_out);
    float *wf = malloc(sizeof(float) * n_in * n_out), *x = NULL, *y = NULL, *y1 = NULL;
    double *ref = NULL, *sabs = NULL;
    uint32_t *xr = NULL, *ex = NULL;
    void *d_w = NULL;
    if (!w || !wf) goto out;
    make_weights(type, n_in, n_out, w);
    for (uint32_t r = 0; r < n_out; r++) kipp_dequantize_row(type, w + rb * r, wf + (size_t)r * n_in, n_in);
    CK(cudaMalloc(&d_w, rb * n_out));
    CK(cudaMemcpy(d_w, w, rb * n_out, cudaMemcpyHostToDevice));
    for (size_t c = 0; c < COUNT(ntok); c++) {
        const uint32_t n_tok = ntok[c];
        const size_t ldx = n_in + c % 2;
        free(x), free(y), free(y1), free(ref), free(sabs), free(xr), free(ex);
        x = malloc(sizeof(float) * ldx * n_tok);
        y = malloc(sizeof(float) * (n_out + 1) * n_tok);
        y1 = malloc(sizeof(float) * (n_out + 1));
        ref = malloc(sizeof(double) * n_out * n_tok);
        sabs = malloc(sizeof(double) * n_out * n_tok);
        xr = malloc(sizeof(uint32_t) * n_tok);
        ex = calloc(n_tok, sizeof(uint32_t));
        if (!x || !y || !y1 || !ref || !sabs || !xr || !ex) {
            bad++;
            goto out;
        }
        for (size_t i = 0; i < ldx * n_tok; i++) x[i] = urand();
        for (uint32_t t = 0; t < n_tok; t++) xr[t] = t;
        ref_rows(wf, n_in, n_out, x, ldx, xr, ex, n_tok, ref, sabs);
        char what[96];
        snprintf(what, sizeof what, "%s exact n_tok %u", kipp_type_name(type), n_tok);
        if (run_matmul_as(1, type, d_w, n_in, n_out, x, ldx, n_tok, y)) {
            bad++;
            goto out;
        }
        bad += check_y(y, ref, sabs, n_out, n_tok, n_in, 1, st, what);
        const uint32_t probe[3] = {0, n_tok / 2, n_tok - 1};
        int diff = 0;
        for (int i = 0; i < 3; i++) {
            if (run_matmul(type, d_w, n_in, n_out, x + (size_t)probe[i] * ldx, ldx, 1, y1)) {
                bad++;
                goto out;
            }
            diff += memcmp(y1, y + (size_t)probe[i] * (n_out + 1), sizeof(float) * n_out) != 0;
        }
        if (diff) fprintf(stderr, "  %s: %d tokens differ from their one-token product\n", what, diff);
        same->cases++;
        same->fails += diff != 0;
        bad += diff != 0;
    }
out:
    free(w), free(wf), free(x), free(y), free(y1), free(ref), free(sabs), free(xr), free(ex);
    cudaFree(d_w);
    return bad;
}

/* kipp_cuda_matmul_experts: E = 5 experts of n_out 40 (one allocation, expert e at e times
 * its bytes), n_tok tokens each choosing k = 2 distinct experts (expert 3 never: an empty
 * group; half the cases route every token to expert 0 first: a full group), the pairs sorted
 * by expert with their tokens ascending, the inputs read through x_rows (every other case:
 * the rows gathered on the host, x_rows NULL). max_per_expert = n_tok: 1..8 the matrix-vector
 * path, 9 and 40 the GEMM; the padding column of y must stay a NaN. */
static int test_experts(uint32_t type, stat *s_mv, stat *s_mm, stat *same) {
    static const uint32_t ntok[] = {1, 3, 8, 9, 40};
    enum { E = 5, K = 2 };
    const uint32_t n_in = 256, n_out = 40;
    int bad = 0;
    const uint64_t rb = kipp_type_row_bytes(type, n_in), eb = rb * n_out;
    uint8_t *w = malloc(eb * E);
    float *wf = malloc(sizeof(float) * n_in * n_out * E), *x = NULL, *xg = NULL, *y = NULL, *y1 = NULL;
    double *ref = NULL, *sabs = NULL;
    uint32_t *xr = NULL, *ex = NULL, *chosen = NULL, off[E + 1];
    int32_t *rows = NULL;
    void *d_w = NULL, *d_s = NULL;
    float *d_x = NULL, *d_y = NULL;
    uint32_t *d_off = NULL;
    int32_t *d_rows = NULL;
    if (!w || !wf) goto out;
    make_weights(type, n_in, n_out * E, w);
    for (uint32_t r = 0; r < n_out * E; r++) kipp_dequantize_row(type, w + rb * r, wf + (size_t)r * n_in, n_in);
    CK(cudaMalloc(&d_w, eb * E));
    CK(cudaMemcpy(d_w, w, eb * E, cudaMemcpyHostToDevice));
    for (size_t c = 0; c < COUNT(ntok); c++) {
        const uint32_t n_tok = ntok[c], P = n_tok * K;
        const int gathered = c % 2, mv = n_tok <= MV_MAX_TOK;
        const size_t ldx = n_in + (c + 1) % 2;
        free(x), free(xg), free(y), free(y1), free(ref), free(sabs), free(xr), free(ex), free(chosen), free(rows);
        cudaFree(d_x), cudaFree(d_y), cudaFree(d_off), cudaFree(d_rows), cudaFree(d_s);
        d_x = d_y = NULL, d_off = NULL, d_rows = NULL, d_s = NULL;
        x = malloc(sizeof(float) * ldx * n_tok);
        xg = malloc(sizeof(float) * ldx * P);
        y = malloc(sizeof(float) * (n_out + 1) * P);
        y1 = malloc(sizeof(float) * (n_out + 1));
        ref = malloc(sizeof(double) * n_out * P);
        sabs = malloc(sizeof(double) * n_out * P);
        xr = malloc(sizeof(uint32_t) * P);
        ex = malloc(sizeof(uint32_t) * P);
        chosen = malloc(sizeof(uint32_t) * P);
        rows = malloc(sizeof(int32_t) * P);
        if (!x || !xg || !y || !y1 || !ref || !sabs || !xr || !ex || !chosen || !rows) {
            bad++;
            goto out;
        }
        for (size_t i = 0; i < ldx * n_tok; i++) x[i] = urand();
        for (uint32_t t = 0; t < n_tok; t++) {
            static const uint32_t pick[] = {0, 1, 2, 4};
            const uint32_t a = (c & 2) ? 0 : pick[rnd() % 4];
            uint32_t b = pick[rnd() % 4];
            while (b == a) b = pick[rnd() % 4];
            chosen[t * K] = a, chosen[t * K + 1] = b;
        }
        memset(off, 0, sizeof off);
        for (uint32_t p = 0; p < P; p++) off[chosen[p] + 1]++;
        for (uint32_t e = 0; e < E; e++) off[e + 1] += off[e];
        uint32_t at[E + 1];
        memcpy(at, off, sizeof at);
        for (uint32_t p = 0; p < P; p++) {
            const uint32_t g = at[chosen[p]]++;
            rows[g] = (int32_t)(p / K);
            ex[g] = chosen[p];
        }
        for (uint32_t g = 0; g < P; g++) {
            xr[g] = (uint32_t)rows[g];
            memcpy(xg + (size_t)g * ldx, x + (size_t)rows[g] * ldx, sizeof(float) * ldx);
        }
        ref_rows(wf, n_in, n_out, x, ldx, xr, ex, P, ref, sabs);
        const size_t sb = kipp_cuda_matmul_experts_scratch_bytes(type, n_in, P, n_tok);
        const size_t ldy = (size_t)n_out + 1;
        CK(cudaMalloc((void **)&d_x, sizeof(float) * ldx * (gathered ? P : n_tok)));
        CK(cudaMalloc((void **)&d_y, sizeof(float) * ldy * P));
        CK(cudaMalloc((void **)&d_off, sizeof off));
        CK(cudaMalloc((void **)&d_rows, sizeof(int32_t) * P));
        if (sb) CK(cudaMalloc(&d_s, sb));
        CK(cudaMemcpy(d_x, gathered ? xg : x, sizeof(float) * ldx * (gathered ? P : n_tok),
                      cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_off, off, sizeof off, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_rows, rows, sizeof(int32_t) * P, cudaMemcpyHostToDevice));
        CK(cudaMemset(d_y, 0xff, sizeof(float) * ldy * P));
        CK((cudaError_t)kipp_cuda_matmul_experts(type, d_w, eb, E, n_in, n_out, d_x, ldx,
                                                 gathered ? NULL : d_rows, P, d_off, n_tok, d_y,
                                                 ldy, d_s, 0));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y, d_y, sizeof(float) * ldy * P, cudaMemcpyDeviceToHost));
        char what[96];
        snprintf(what, sizeof what, "%s experts n_tok %u%s", kipp_type_name(type), n_tok,
                 gathered ? " (gathered)" : "");
        bad += check_y(y, ref, sabs, n_out, P, n_in, mv, mv ? s_mv : s_mm, what);
        if (mv) { /* rows bit for bit their expert's one-token product */
            int diff = 0;
            for (uint32_t g = 0; g < P; g += 1 + P / 4) {
                if (run_matmul(type, (const uint8_t *)d_w + (size_t)ex[g] * eb, n_in, n_out,
                               x + (size_t)xr[g] * ldx, ldx, 1, y1)) {
                    bad++;
                    goto out;
                }
                diff += memcmp(y1, y + (size_t)g * ldy, sizeof(float) * n_out) != 0;
            }
            if (diff) fprintf(stderr, "  %s: %d rows differ from their one-token product\n", what, diff);
            same->cases++;
            same->fails += diff != 0;
            bad += diff != 0;
        }
    }
out:
    free(w), free(wf), free(x), free(xg), free(y), free(y1), free(ref), free(sabs);
    free(xr), free(ex), free(chosen), free(rows);
    cudaFree(d_w), cudaFree(d_s), cudaFree(d_x), cudaFree(d_y), cudaFree(d_off), cudaFree(d_rows);
    return bad;
}

/* get_rows of 17 ids (first and last rows included) from an n_rows x n matrix, into a
 * stride of n + 3: bit-exact with the host rows. */
static int check_get_rows(uint32_t type, const void *d_w, const float *wf, uint32_t n,
                          uint32_t n_rows, stat *st) {
    enum { NT = 17 };
    int bad = 0, diff = 0;
    int32_t ids[NT];
    int32_t *d_ids = NULL;
    float *d_o = NULL, *o = NULL;
    const size_t ldo = (size_t)n + 3;
    for (int t = 0; t < NT; t++)
        ids[t] = t == 0 ? 0 : t == 1 ? (int32_t)n_rows - 1 : (int32_t)(rnd() % n_rows);
    o = malloc(sizeof(float) * ldo * NT);
    if (!o) return 1;
    CK(cudaMalloc((void **)&d_ids, sizeof ids));
    CK(cudaMalloc((void **)&d_o, sizeof(float) * ldo * NT));
    CK(cudaMemcpy(d_ids, ids, sizeof ids, cudaMemcpyHostToDevice));
    CK((cudaError_t)kipp_cuda_get_rows(type, d_w, n, d_ids, NT, d_o, ldo, 0));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(o, d_o, sizeof(float) * ldo * NT, cudaMemcpyDeviceToHost));
    for (int t = 0; t < NT; t++)
        if (memcmp(o + (size_t)t * ldo, wf + (size_t)ids[t] * n, sizeof(float) * n) != 0) diff++;
    if (diff) {
        fprintf(stderr, "  %s get_rows n %u: %d rows differ\n", kipp_type_name(type), n, diff);
        bad++;
    }
out:
    cudaFree(d_ids);
    cudaFree(d_o);
    free(o);
    st->cases++;
    st->fails += bad != 0;
    return bad;
}

/* All shapes of one type. */
static int test_type(uint32_t type) {
    int bad = 0;
    stat s_mv = {0, 0, 0, 0}, s_mm = {0, 0, 0, 0}, s_agree = {0, 0, 0, 0}, s_rows = {0, 0, 0, 0};
    const uint32_t be = kipp_type_block_elems(type);
    const char *name = kipp_type_name(type);
    for (size_t a = 0; a < COUNT(k_n_in); a++) {
        const uint32_t n_in = k_n_in[a];
        if (n_in % be != 0) continue;
        uint32_t max_out = 0;
        for (size_t b = 0; b < COUNT(k_n_out); b++)
            if ((uint64_t)n_in * k_n_out[b] <= MAX_MACS) max_out = k_n_out[b];
        const uint64_t rb = kipp_type_row_bytes(type, n_in);
        uint8_t *w = malloc(rb * max_out);
        float *wf = malloc(sizeof(float) * n_in * (size_t)max_out);
        void *d_buf = NULL, *d_w = NULL;
        float *x = NULL, *y = NULL, *y8 = NULL;
        double *ref = NULL, *sabs = NULL;
        if (!w || !wf) {
            free(w);
            free(wf);
            return bad + 1;
        }
        make_weights(type, n_in, max_out, w);
        for (uint32_t r = 0; r < max_out; r++)
            kipp_dequantize_row(type, w + rb * r, wf + (size_t)r * n_in, n_in);
        /* every other n_in the matrix sits 2 bytes past an aligned address: the byte path of
         * the float types and Q4_K/Q5_K (mm.cu's vector loads need 16-byte alignment) */
        CK(cudaMalloc(&d_buf, rb * max_out + 16));
        d_w = (uint8_t *)d_buf + (a % 2 ? 2 : 0);
        CK(cudaMemcpy(d_w, w, rb * max_out, cudaMemcpyHostToDevice));
        bad += check_get_rows(type, d_w, wf, n_in, max_out, &s_rows);
        for (size_t b = 0; b < COUNT(k_n_out); b++) {
            const uint32_t n_out = k_n_out[b];
            if (n_out > max_out) continue;
            for (size_t c = 0; c < COUNT(k_n_tok); c++) {
                const uint32_t n_tok = k_n_tok[c];
                if ((uint64_t)n_in * n_out * n_tok > MAX_MACS) continue;
                /* strides: dense (16-byte aligned float4 path) or one wider (scalar path) */
                const size_t ldx = n_in + (size_t)((a + b + c) % 2);
                x = malloc(sizeof(float) * ldx * n_tok);
                y = malloc(sizeof(float) * (n_out + 1) * (size_t)n_tok);
                y8 = malloc(sizeof(float) * (n_out + 1) * (size_t)MV_MAX_TOK);
                ref = malloc(sizeof(double) * n_out * (size_t)n_tok);
                sabs = malloc(sizeof(double) * n_out * (size_t)n_tok);
                if (!x || !y || !y8 || !ref || !sabs) {
                    bad++;
                    goto out;
                }
                for (size_t i = 0; i < ldx * n_tok; i++) x[i] = urand();
                for (uint32_t t = 0; t < n_tok; t++)
                    for (uint32_t o = 0; o < n_out; o++) {
                        const float *wr = wf + (size_t)o * n_in, *xr = x + t * ldx;
                        double acc = 0, sa = 0;
                        for (uint32_t i = 0; i < n_in; i++) {
                            const double p = (double)wr[i] * (double)xr[i];
                            acc += p, sa += fabs(p);
                        }
                        ref[(size_t)t * n_out + o] = acc, sabs[(size_t)t * n_out + o] = sa;
                    }
                char what[96];
                snprintf(what, sizeof what, "%s n_in %u n_out %u n_tok %u", name, n_in, n_out,
                         n_tok);
                const int mv = n_tok <= MV_MAX_TOK;
                if (run_matmul(type, d_w, n_in, n_out, x, ldx, n_tok, y)) {
                    bad++;
                    goto out;
                }
                bad += check_y(y, ref, sabs, n_out, n_tok, n_in, mv, mv ? &s_mv : &s_mm, what);
                if (!mv) { /* the same first 8 tokens through the decode kernel */
                    if (run_matmul(type, d_w, n_in, n_out, x, ldx, MV_MAX_TOK, y8)) {
                        bad++;
                        goto out;
                    }
                    const double kmv = 8.0 * ((n_in + 255) / 256) + 5, u = ldexp(1.0, -24);
                    const double g = kmv * u / (1 - kmv * u) + gemm_gamma(n_in);
                    int dis = 0;
                    for (uint32_t t = 0; t < MV_MAX_TOK; t++)
                        for (uint32_t o = 0; o < n_out; o++) {
                            const double d = fabs((double)y[(size_t)t * (n_out + 1) + o] -
                                                  (double)y8[(size_t)t * (n_out + 1) + o]);
                            const double bound = g * sabs[(size_t)t * n_out + o] + 1e-30;
                            if (!(d <= bound)) dis++;
                            if (d / bound > s_agree.worst) s_agree.worst = d / bound;
                        }
                    if (dis) fprintf(stderr, "  %s: decode vs GEMM: %d outputs apart\n", what, dis);
                    s_agree.cases++;
                    s_agree.fails += dis != 0;
                    bad += dis != 0;
                }
                free(x), free(y), free(y8), free(ref), free(sabs);
                x = y = y8 = NULL, ref = sabs = NULL;
            }
        }
    out:
        free(x), free(y), free(y8), free(ref), free(sabs);
        free(w);
        free(wf);
        cudaFree(d_buf);
    }
    stat_line(name, "matvec", &s_mv);
    stat_line(name, "gemm", &s_mm);
    stat_line(name, "agree", &s_agree);
    stat_line(name, "get_rows", &s_rows);
    stat s_ex = {0, 0, 0, 0}, s_exs = {0, 0, 0, 0}, s_emv = {0, 0, 0, 0}, s_emm = {0, 0, 0, 0};
    stat s_es = {0, 0, 0, 0};
    bad += test_exact(type, &s_ex, &s_exs);
    bad += test_experts(type, &s_emv, &s_emm, &s_es);
    stat_line(name, "exact", &s_ex);
    stat_line(name, "exact=1t", &s_exs);
    stat_line(name, "exp-mv", &s_emv);
    stat_line(name, "exp-gemm", &s_emm);
    stat_line(name, "exp=1t", &s_es);
    return bad;
}

int kt_cuda_ops_mm(void) {
    int bad = 0;
    for (size_t i = 0; i < COUNT(k_types); i++) {
        KT_CHECK(kipp_cuda_mm_type_supported(k_types[i]), "%s", kipp_type_name(k_types[i]));
        if (!kipp_cuda_mm_type_supported(k_types[i])) {
            bad++;
            continue;
        }
        const int b = test_type(k_types[i]);
        KT_CHECK(b == 0, "cuda mm %s: %d failures", kipp_type_name(k_types[i]), b);
        bad += b;
    }
    /* refused: an unsupported type and a row length that is not a multiple of the block */
    KT_CHECK(!kipp_cuda_mm_type_supported(9), "Q8_1 has no kernels");
    KT_CHECK(kipp_cuda_matmul(KIPP_TYPE_Q4_K, NULL, 32, 1, NULL, 32, 1, NULL, 1, NULL, 0) != 0,
             "Q4_K with n_in 32 is refused");
    KT_CHECK(!kipp_cuda_mm_shape_supported(KIPP_TYPE_F32, 12) && kipp_cuda_mm_shape_supported(KIPP_TYPE_F32, 48) &&
                 !kipp_cuda_mm_shape_supported(KIPP_TYPE_Q8_0, 48),
             "row lengths: f32 48 taken, f32 12 and q8_0 48 refused");
    const uint32_t groups[3] = {0, 1, 1}; /* read by no kernel: the call is refused first */
    KT_CHECK(kipp_cuda_matmul_experts(KIPP_TYPE_F32, NULL, 16, 2, 32, 1, NULL, 32, NULL, 1, groups,
                                      1, NULL, 1, NULL, 0) != 0,
             "an expert product whose experts overlap (16 bytes apart, 128 each) is refused");
    return bad;
}
