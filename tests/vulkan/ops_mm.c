/* ops_mm.c — Vulkan operator test of src/backend/vulkan/mm.c (kipp_vk_matmul, both paths,
 * exact = 1, gathers and offsets, and kipp_vk_dequantize) against kipp_dequantize_row() and a
 * host f64 reference, for all 15 weight types. Called by tests/vulkan/vk_ops.c
 * (`build/kipp_test --vulkan-operators`) with the device it opened; returns the failures it
 * found (each also counted by KT_CHECK).
 *
 * Shapes are chosen to be few (lavapipe runs them on the CPU, and compiling 45 pipelines is
 * most of the time) but to reach every edge: row lengths of 65 to 96 groups of 8 (520 / 544 /
 * 768 elements: more groups than the matrix-vector kernel's threads, uneven over them) and
 * small ones (40: a partial 32-input step of the tiled kernel for the float types; one block
 * for the others); n_out 67 (odd: a half-used last workgroup of the matrix-vector kernel at
 * 32 threads a row, a 3-row last tile of 64); n_tok 1, 2, 3, 8 (matrix-vector) and 9, 33, 40
 * (tiled: a second token tile); exact = 1 at 11 tokens (two passes). The matrix-vector cases
 * run at 1, 4, 8 and 32 threads per row (kipp_vk_mm_force_tpr: lavapipe's choice, fewer
 * threads than tokens, the GPUs' choices), so lavapipe runs the GPUs' reduction tree too; a
 * last case folds the matrix-vector grid past 65535 workgroups. Every matrix is expert 1 of
 * a stack of 2 that starts 1..3 bytes into its buffer, so w_byte0 = base + n_out * row_bytes
 * is unaligned for every type. Inputs come through x_rows (with repeats, from x_row0 = 2) in
 * half the cases; y is written at (y_row0, y_col0) into a buffer pre-filled with a NaN
 * sentinel whose other elements (rows above and below, columns left and right) must come back
 * untouched.
 *
 * Bounds, per output y = sum_i w_i x_i with S = sum_i |w_i x_i| (f64), u = 2^-24,
 * gamma(k) = k u / (1 - k u); the weights are the exact f32 dequantized values (checked bit
 * for bit by the dequantize cases), so only the summation rounds:
 *  - matrix-vector at tpr threads per row: a thread's chain takes m = 8 ceil(n_in / 8 / tpr)
 *    products (fused or not: the dot-product bound gamma(m) holds for both), then log2(tpr)
 *    tree additions: |err| <= gamma(m + log2 tpr) S.
 *  - tiled: each 32-input step sums 32 products into a fresh partial (gamma(32)), then adds it
 *    to the accumulator, a chain of ceil(n_in / 32) additions: |err| <= gamma(32 + n_in/32) S.
 *  These worst-case bounds grow linearly with n_in and would not see a small systematic
 *  error, so an NMSE check goes with them: sum err^2 / sum ref^2 <= 1e-11 per case (f32
 *  rounding gives ~1e-14, 3e-13 for one 768-long chain at tpr 1; a weight off by one quant
 *  step or a dropped group gives > 1e-5).
 *  - exact = 1: the matrix-vector bound, and tokens 0, 5 and 10 (slots 0 and 5 of the first
 *    pass, slot 2 of the second) bit for bit the y of one-token calls.
 *  - dequantize: bit-exact with kipp_dequantize_row (random blocks: every quant and
 *    sub-scale bit pattern, f16 scales random but finite, subnormal and large included). */
#include "backend/vulkan/kernels.h"
#include "core/types.h"
#include "kt.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kt_vk_ops_mm(kipp_vk *vk);

static const uint32_t k_types[] = {
    KIPP_TYPE_F32,  KIPP_TYPE_F16,  KIPP_TYPE_BF16, KIPP_TYPE_Q8_0,   KIPP_TYPE_Q4_0,
    KIPP_TYPE_Q4_K, KIPP_TYPE_Q6_K, KIPP_TYPE_Q4_1, KIPP_TYPE_Q5_0,   KIPP_TYPE_Q5_1,
    KIPP_TYPE_Q5_K, KIPP_TYPE_Q3_K, KIPP_TYPE_Q2_K, KIPP_TYPE_IQ4_NL, KIPP_TYPE_IQ4_XS,
};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define SENTINEL 0xffffffffu /* a NaN */
#define MV_MAX_TOK 8         /* mm.c's switch */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545f4914f6cdd1dull) >> 32);
}
static float urand(void) { return (float)((double)rnd() / 2147483648.0 - 1.0); } /* [-1, 1) */

static int is_float_type(uint32_t type) {
    return type == KIPP_TYPE_F32 || type == KIPP_TYPE_F16 || type == KIPP_TYPE_BF16;
}

/* n_rows random rows of n elements of `type` at w. Float types: values in [-1, 1) (wide:
 * any finite bit pattern, subnormals included). Quantized types: random bytes (every quant
 * and sub-scale pattern) with the f16 scale fields' exponents kept finite: 2^-11 .. 2^-6
 * (sane: weights O(1), for the products) or, wide, any finite exponent (subnormals too). */
static void make_weights(uint32_t type, uint32_t n, uint32_t n_rows, int wide, uint8_t *w) {
    const uint64_t rb = kipp_type_row_bytes(type, n);
    if (is_float_type(type)) {
        for (uint64_t i = 0; i < (uint64_t)n * n_rows; i++) {
            if (wide) {
                uint32_t u = rnd();
                if (type == KIPP_TYPE_F32) {
                    if (((u >> 23) & 0xffu) == 0xffu) u &= 0xbfffffffu; /* finite */
                    memcpy(w + 4 * i, &u, 4);
                } else {
                    uint16_t h = (uint16_t)u;
                    if (type == KIPP_TYPE_F16 && ((h >> 10) & 0x1fu) == 0x1fu) h &= 0xbfffu;
                    if (type == KIPP_TYPE_BF16 && ((h >> 7) & 0xffu) == 0xffu) h &= 0xbfffu;
                    w[2 * i] = (uint8_t)h, w[2 * i + 1] = (uint8_t)(h >> 8);
                }
                continue;
            }
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
    int off[3];
    kt_scale_offsets(type, off);
    for (uint64_t i = 0; i < rb * n_rows; i++) w[i] = (uint8_t)rnd();
    for (uint64_t b = 0; b < rb * n_rows / bb; b++)
        for (int k = 0; k < 3 && off[k] >= 0; k++) {
            uint16_t h;
            if (wide) /* exponent 0..30: subnormal to 2^15, never inf or NaN */
                h = (uint16_t)((rnd() & 0x83ffu) | (rnd() % 31u) << 10);
            else /* exponent 4..9: 2^-11 .. 2^-6, random mantissa and sign */
                h = (uint16_t)((rnd() & 0x83ffu) | (4u + rnd() % 6u) << 10);
            w[b * bb + off[k]] = (uint8_t)h, w[b * bb + off[k] + 1] = (uint8_t)(h >> 8);
        }
}

/* A device buffer holding `n` host bytes at byte `at` (the rest zero), its size rounded up
 * to a whole word. */
static int upload(kipp_vk *vk, const void *src, uint64_t at, uint64_t n, kipp_vk_buf *b) {
    char err[256];
    const uint64_t size = (at + n + 3) & ~(uint64_t)3;
    if (kipp_vk_alloc(vk, size, "ops_mm", b, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "  ops_mm: %s\n", err);
        return 1;
    }
    if (src && n && kipp_vk_write(vk, b, at, src, n, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "  ops_mm: %s\n", err);
        kipp_vk_free(vk, b);
        return 1;
    }
    return 0;
}

static int submit(kipp_vk *vk, const char *what) {
    char err[256];
    if (kipp_vk_submit(vk, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "  ops_mm %s: submit: %s\n", what, err);
        return 1;
    }
    return 0;
}

/* A weight stack on the device: 2 experts of n_out rows of n_in, starting `base` bytes into
 * the buffer; host copies of the bytes and of the dequantized rows (f32). */
typedef struct {
    uint32_t type, n_in, n_out, base;
    uint64_t rb;
    uint8_t *w;
    float *wf;
    kipp_vk_buf buf;
} wstack;

static int wstack_make(kipp_vk *vk, wstack *s, uint32_t type, uint32_t n_in, uint32_t n_out,
                       uint32_t base, int wide) {
    memset(s, 0, sizeof *s);
    s->type = type, s->n_in = n_in, s->n_out = n_out, s->base = base;
    s->rb = kipp_type_row_bytes(type, n_in);
    const uint64_t rows = 2ull * n_out;
    s->w = malloc(s->rb * rows);
    s->wf = malloc(sizeof(float) * n_in * rows);
    if (!s->w || !s->wf) return 1;
    make_weights(type, n_in, (uint32_t)rows, wide, s->w);
    for (uint64_t r = 0; r < rows; r++)
        kipp_dequantize_row(type, s->w + s->rb * r, s->wf + r * n_in, n_in);
    return upload(vk, s->w, base, s->rb * rows, &s->buf);
}

static void wstack_free(kipp_vk *vk, wstack *s) {
    if (s->buf.buf != VK_NULL_HANDLE) kipp_vk_free(vk, &s->buf);
    free(s->w);
    free(s->wf);
}

/* expert 1's matrix: its byte offset in the buffer and its f32 rows */
static uint64_t wstack_byte0(const wstack *s) { return s->base + s->rb * s->n_out; }
static const float *wstack_rows(const wstack *s) { return s->wf + (size_t)s->n_out * s->n_in; }

/* ---- dequantize ------------------------------------------------------------------------- */

static int test_dequant(kipp_vk *vk, uint32_t type, uint32_t n_in, uint32_t n_rows,
                        uint32_t base) {
    wstack s;
    int bad = 0;
    float *y = malloc(sizeof(float) * n_in * n_rows);
    kipp_vk_buf dy = {0};
    char what[96];
    snprintf(what, sizeof what, "%s dequantize n_in %u rows %u", kipp_type_name(type), n_in,
             n_rows);
    if (!y || wstack_make(vk, &s, type, n_in, n_rows, base, 1) ||
        upload(vk, NULL, 0, sizeof(float) * n_in * n_rows, &dy)) {
        bad = 1;
        goto out;
    }
    kipp_vk_begin(vk);
    const int rc = kipp_vk_dequantize(vk, type, kipp_vk_all(&s.buf), wstack_byte0(&s), n_in,
                                      n_rows, kipp_vk_all(&dy));
    kipp_vk_rec_read(vk, kipp_vk_all(&dy), y, sizeof(float) * n_in * n_rows);
    if (submit(vk, what) || rc != 0) {
        bad = 1;
        goto out;
    }
    int diff = 0;
    const float *ref = wstack_rows(&s);
    for (uint64_t i = 0; i < (uint64_t)n_in * n_rows; i++) {
        uint32_t a, b;
        memcpy(&a, y + i, 4), memcpy(&b, ref + i, 4);
        if (a != b && diff++ < 3)
            fprintf(stderr, "  %s: element %llu: %08x want %08x\n", what, (unsigned long long)i,
                    a, b);
    }
    bad = diff != 0;
out:
    KT_CHECK(bad == 0, "%s: bit-exact with kipp_dequantize_row", what);
    wstack_free(vk, &s);
    if (dy.buf != VK_NULL_HANDLE) kipp_vk_free(vk, &dy);
    free(y);
    return bad;
}

/* ---- matmul ------------------------------------------------------------------------------ */

typedef struct {
    uint32_t n_tok, gather, x_row0, y_row0, y_col0;
    int exact;
} mm_case;

typedef struct {
    double worst, worst_nmse;
    int cases, fails;
} stat;

static double gamma_k(double k) {
    const double u = ldexp(1.0, -24);
    return k * u / (1 - k * u);
}
static double bound_mv(uint32_t n_in, uint32_t tpr) {
    double lg = 0;
    for (uint32_t t = tpr; t > 1; t >>= 1) lg++;
    return gamma_k(8.0 * ((n_in / 8 + tpr - 1) / tpr) + lg);
}
static double bound_mm(uint32_t n_in) { return gamma_k(32.0 + (n_in + 31) / 32); }

/* One kipp_vk_matmul of expert 1 of s: x has n_src rows of stride ldx; xr (n_tok entries
 * from x_row0 of a list, or NULL: rows x_row0 ..); y comes back whole ([y_rows][ldy],
 * sentinel-filled first). */
static int run_mm(kipp_vk *vk, const wstack *s, const float *x, uint32_t n_src, uint32_t ldx,
                  const uint32_t *xr_list, uint32_t n_list, const mm_case *c, uint32_t ldy,
                  uint32_t y_rows, float *y, const char *what) {
    kipp_vk_buf dx = {0}, dr = {0}, dy = {0};
    int bad = 0;
    const uint64_t ybytes = sizeof(float) * (uint64_t)ldy * y_rows;
    if (upload(vk, x, 0, sizeof(float) * (uint64_t)ldx * n_src, &dx) ||
        (xr_list && upload(vk, xr_list, 0, sizeof(uint32_t) * n_list, &dr)) ||
        upload(vk, NULL, 0, ybytes, &dy)) {
        bad = 1;
        goto out;
    }
    kipp_vk_begin(vk);
    kipp_vk_rec_fill(vk, kipp_vk_all(&dy), ybytes, SENTINEL);
    const int rc = kipp_vk_matmul(vk, s->type, kipp_vk_all(&s->buf), wstack_byte0(s), s->n_in,
                                  s->n_out, kipp_vk_all(&dx), ldx,
                                  xr_list ? kipp_vk_all(&dr) : kipp_vk_none(), c->x_row0,
                                  c->n_tok, kipp_vk_all(&dy), ldy, c->y_row0, c->y_col0,
                                  c->exact);
    kipp_vk_rec_read(vk, kipp_vk_all(&dy), y, ybytes);
    if (submit(vk, what) || rc != 0) {
        if (rc) fprintf(stderr, "  ops_mm %s: kipp_vk_matmul returned %d\n", what, rc);
        bad = 1;
    }
out:
    if (dx.buf != VK_NULL_HANDLE) kipp_vk_free(vk, &dx);
    if (dr.buf != VK_NULL_HANDLE) kipp_vk_free(vk, &dr);
    if (dy.buf != VK_NULL_HANDLE) kipp_vk_free(vk, &dy);
    return bad;
}

/* Checks one case's y against the f64 reference (bound `g` relative to S) and the sentinel
 * everywhere outside the written block; returns 1 when any of it fails. */
static int check_mm(const wstack *s, const float *x, uint32_t ldx, const uint32_t *xr,
                    const mm_case *c, const float *y, uint32_t ldy, uint32_t y_rows, double g,
                    stat *st, const char *what) {
    const uint32_t n_in = s->n_in, n_out = s->n_out;
    const float *wf = wstack_rows(s);
    int bad = 0;
    double e2 = 0, r2 = 0;
    for (uint32_t t = 0; t < c->n_tok; t++) {
        const float *xp = x + (size_t)xr[t] * ldx;
        for (uint32_t o = 0; o < n_out; o++) {
            const float *wr = wf + (size_t)o * n_in;
            double acc = 0, sa = 0;
            for (uint32_t i = 0; i < n_in; i++) {
                const double p = (double)wr[i] * (double)xp[i];
                acc += p, sa += fabs(p);
            }
            const double v = y[(size_t)(c->y_row0 + t) * ldy + c->y_col0 + o];
            const double err = fabs(v - acc), bound = g * sa;
            if (!(err <= bound) && bad++ < 3)
                fprintf(stderr, "  %s t %u o %u: %.9g want %.9g (bound %.3g)\n", what, t, o, v,
                        acc, bound);
            if (isnan(err)) st->worst = INFINITY;
            else if (bound > 0 && err / bound > st->worst) st->worst = err / bound;
            e2 += (v - acc) * (v - acc), r2 += acc * acc;
        }
    }
    const double nmse = r2 > 0 ? e2 / r2 : e2;
    if (!(nmse <= st->worst_nmse)) st->worst_nmse = isnan(nmse) ? INFINITY : nmse;
    if (!(nmse <= 1e-11)) {
        bad++;
        fprintf(stderr, "  %s: nmse %.3g > 1e-11\n", what, nmse);
    }
    int touched = 0;
    for (uint32_t r = 0; r < y_rows; r++)
        for (uint32_t col = 0; col < ldy; col++) {
            const int in = r >= c->y_row0 && r < c->y_row0 + c->n_tok && col >= c->y_col0 &&
                           col < c->y_col0 + n_out;
            uint32_t u;
            memcpy(&u, y + (size_t)r * ldy + col, 4);
            if (!in && u != SENTINEL) touched++;
        }
    if (touched) {
        bad++;
        fprintf(stderr, "  %s: %d elements outside the output block written\n", what, touched);
    }
    st->cases++;
    st->fails += bad != 0;
    return bad != 0;
}

/* The rows a case reads: its list entries from x_row0, or x_row0 + t. */
static void case_rows(const mm_case *c, const uint32_t *list, uint32_t *xr) {
    for (uint32_t t = 0; t < c->n_tok; t++) xr[t] = c->gather ? list[c->x_row0 + t] : c->x_row0 + t;
}

/* Every case of one weight stack (n_out 67): the matrix-vector ones (n_tok <= 8 or exact)
 * once per threads-per-row value of tprs[], the tiled ones once. */
static int test_stack(kipp_vk *vk, const wstack *s, const mm_case *cases, size_t n_cases,
                      const uint32_t *tprs, size_t n_tprs, stat *s_mv, stat *s_mm, stat *s_ex,
                      stat *s_same) {
    enum { N_SRC = 48 };
    const uint32_t n_in = s->n_in, n_out = s->n_out, ldx = n_in + 3;
    int bad = 0;
    float *x = malloc(sizeof(float) * ldx * N_SRC);
    uint32_t list[N_SRC + 8], xr[N_SRC];
    float *y = NULL, *y1 = malloc(sizeof(float) * (n_out + 2));
    if (!x || !y1) {
        free(x), free(y1);
        return 1;
    }
    for (size_t i = 0; i < (size_t)ldx * N_SRC; i++) x[i] = urand();
    for (size_t i = 0; i < COUNT(list); i++) list[i] = rnd() % N_SRC;
    for (size_t k = 0; k < n_cases; k++) {
        const mm_case *c = &cases[k];
        const uint32_t ldy = c->y_col0 + n_out + 2, y_rows = c->y_row0 + c->n_tok + 1;
        const int mv = c->exact || c->n_tok <= MV_MAX_TOK;
        free(y);
        y = malloc(sizeof(float) * ldy * y_rows);
        if (!y) {
            bad++;
            break;
        }
        case_rows(c, list, xr);
        for (size_t ti = 0; ti < (mv ? n_tprs : 1); ti++) {
            if (mv) kipp_vk_mm_force_tpr(tprs[ti]);
            const uint32_t tpr = kipp_vk_matvec_threads_per_row(vk, n_in);
            char what[128];
            snprintf(what, sizeof what, "%s n_in %u n_out %u n_tok %u%s%s", kipp_type_name(s->type),
                     n_in, n_out, c->n_tok, c->gather ? " gathered" : "", c->exact ? " exact" : "");
            if (mv) snprintf(what + strlen(what), sizeof what - strlen(what), " tpr %u", tpr);
            if (run_mm(vk, s, x, N_SRC, ldx, c->gather ? list : NULL, (uint32_t)COUNT(list), c,
                       ldy, y_rows, y, what)) {
                bad++;
                continue;
            }
            bad += check_mm(s, x, ldx, xr, c, y, ldy, y_rows,
                            mv ? bound_mv(n_in, tpr) : bound_mm(n_in),
                            c->exact ? s_ex : mv ? s_mv : s_mm, what);
            if (!c->exact) continue;
            /* tokens in both passes bit for bit their one-token product */
            int diff = 0;
            const uint32_t probe[3] = {0, 5, c->n_tok - 1};
            for (int i = 0; i < 3; i++) {
                const mm_case c1 = {1, 0, xr[probe[i]], 0, 0, 0};
                if (run_mm(vk, s, x, N_SRC, ldx, NULL, 0, &c1, n_out + 2, 1, y1, what)) {
                    diff++;
                    continue;
                }
                diff += memcmp(y1, y + (size_t)(c->y_row0 + probe[i]) * ldy + c->y_col0,
                               sizeof(float) * n_out) != 0;
            }
            if (diff)
                fprintf(stderr, "  %s: %d tokens differ from their one-token product\n", what,
                        diff);
            s_same->cases++;
            s_same->fails += diff != 0;
            bad += diff != 0;
        }
        kipp_vk_mm_force_tpr(0);
    }
    free(x), free(y), free(y1);
    return bad;
}

static void stat_print(const char *path, const stat *s) {
    printf(" %s %d: err/bound %.2g nmse %.2g %s", path, s->cases, s->worst, s->worst_nmse,
           s->fails || !s->cases ? "FAIL" : "ok");
}

/* The row lengths of a type: one whose group count exceeds matvec.comp's 64 threads, one
 * small (one block; 40 for the float types: a partial 32-input step). */
static void type_lengths(uint32_t type, uint32_t *big, uint32_t *small) {
    const uint32_t be = kipp_type_block_elems(type);
    if (be == 1) *big = 520, *small = 40;
    else if (be == 32) *big = 544, *small = 32;
    else *big = 768, *small = 256;
}

static int test_type(kipp_vk *vk, uint32_t type, uint32_t idx) {
    /* {n_tok, gather, x_row0, y_row0, y_col0, exact} */
    static const mm_case big[] = {
        {1, 0, 0, 0, 0, 0},  {3, 1, 2, 1, 2, 0},  {8, 0, 2, 2, 1, 0}, {11, 1, 2, 1, 3, 1},
        {9, 0, 0, 1, 1, 0},  {40, 1, 2, 2, 3, 0},
    };
    static const mm_case small[] = {{2, 1, 2, 1, 1, 0}, {33, 0, 2, 1, 2, 0}};
    const char *name = kipp_type_name(type);
    uint32_t n_big, n_small;
    type_lengths(type, &n_big, &n_small);
    /* the matrix-vector kernel's threads per row: lavapipe's 1 (no tree), 4 and 8 (fewer
     * threads than tokens store a row's 8 sums; the GPUs' choice for rows of 32 and 40), the
     * GPUs' 32, and the device's own choices if they are none of these */
    uint32_t tprs[6] = {1, 4, 8, 32, 0, 0};
    size_t n_tprs = 4;
    for (int k = 0; k < 2; k++) {
        const uint32_t own = kipp_vk_matvec_threads_per_row(vk, k ? n_small : n_big);
        int have = 0;
        for (size_t i = 0; i < n_tprs; i++) have |= tprs[i] == own;
        if (!have) tprs[n_tprs++] = own;
    }
    const int dq = test_dequant(vk, type, n_big, 3, 1 + idx % 3) +
                   test_dequant(vk, type, n_small, 2, 1 + (idx + 1) % 3);
    int bad = dq;
    stat s_mv = {0, 0, 0, 0}, s_mm = {0, 0, 0, 0}, s_ex = {0, 0, 0, 0}, s_same = {0, 0, 0, 0};
    for (int pass = 0; pass < 2; pass++) {
        wstack s;
        const uint32_t n_in = pass ? n_small : n_big;
        if (wstack_make(vk, &s, type, n_in, 67, 1 + (idx + pass) % 3, 0)) {
            bad++;
        } else {
            bad += pass ? test_stack(vk, &s, small, COUNT(small), tprs, n_tprs, &s_mv, &s_mm,
                                     &s_ex, &s_same)
                        : test_stack(vk, &s, big, COUNT(big), tprs, n_tprs, &s_mv, &s_mm, &s_ex,
                                     &s_same);
        }
        wstack_free(vk, &s);
    }
    printf("  vulkan mm %-6s dequant %s", name, dq ? "FAIL" : "ok");
    stat_print("| matvec", &s_mv);
    stat_print("| tiled", &s_mm);
    stat_print("| exact", &s_ex);
    printf(" | =1 token %s\n", s_same.fails || !s_same.cases ? "FAIL" : "ok");
    return bad;
}

/* A matrix-vector grid past 65535 workgroups (131073 rows, 2 per group at 32 threads a row:
 * folded into two dimensions), F16 rows of 8: every row checked, the last included. */
static int test_fold(kipp_vk *vk) {
    const uint32_t n_in = 8, n_out = 2 * 65535 + 3;
    wstack s;
    int bad = 0;
    float x[8], *y = malloc(sizeof(float) * (n_out + 2));
    stat st = {0, 0, 0, 0};
    for (int i = 0; i < 8; i++) x[i] = urand();
    if (!y || wstack_make(vk, &s, KIPP_TYPE_F16, n_in, n_out, 0, 0)) {
        bad = 1;
    } else {
        const mm_case c = {1, 0, 0, 0, 1, 0};
        const uint32_t xr[1] = {0};
        kipp_vk_mm_force_tpr(32);
        if (run_mm(vk, &s, x, 1, 8, NULL, 0, &c, n_out + 2, 1, y, "fold")) bad = 1;
        else bad = check_mm(&s, x, 8, xr, &c, y, n_out + 2, 1,
                            bound_mv(n_in, 32), &st, "f16 n_out 131073 (folded grid)");
        kipp_vk_mm_force_tpr(0);
    }
    KT_CHECK(bad == 0, "matvec over 131073 rows (a folded grid)");
    wstack_free(vk, &s);
    free(y);
    return bad;
}

int kt_vk_ops_mm(kipp_vk *vk) {
    int bad = 0;
    for (uint32_t i = 0; i < COUNT(k_types); i++) {
        const uint32_t t = k_types[i];
        KT_CHECK(kipp_vk_mm_type_supported(t), "%s", kipp_type_name(t));
        if (!kipp_vk_mm_type_supported(t)) {
            bad++;
            continue;
        }
        const int b = test_type(vk, t, i);
        KT_CHECK(b == 0, "vulkan mm %s: %d failures", kipp_type_name(t), b);
        bad += b;
    }
    bad += test_fold(vk);
    /* refused: an unsupported type, row lengths off the block or off 8, an output block wider
     * than its row stride; nothing is recorded for them */
    const int r0 = kipp_vk_mm_type_supported(9) == 0;
    KT_CHECK(r0, "Q8_1 has no kernels");
    const int r1 = kipp_vk_mm_shape_supported(KIPP_TYPE_F32, 48) &&
                   !kipp_vk_mm_shape_supported(KIPP_TYPE_F32, 12) &&
                   !kipp_vk_mm_shape_supported(KIPP_TYPE_Q8_0, 48) &&
                   !kipp_vk_mm_shape_supported(KIPP_TYPE_Q4_K, 128) &&
                   kipp_vk_mm_shape_supported(KIPP_TYPE_Q4_K, 512);
    KT_CHECK(r1, "row lengths: f32 48 and q4_k 512 taken, f32 12, q8_0 48, q4_k 128 refused");
    const kipp_vk_view nv = kipp_vk_none();
    const int r2 = kipp_vk_matmul(vk, KIPP_TYPE_Q4_K, nv, 0, 32, 1, nv, 32, nv, 0, 1, nv, 1, 0,
                                  0, 0) == KIPP_VK_EINVAL &&
                   kipp_vk_dequantize(vk, KIPP_TYPE_Q4_0, nv, 0, 48, 1, nv) == KIPP_VK_EINVAL;
    KT_CHECK(r2, "q4_k n_in 32 and q4_0 n_in 48 are refused");
    kipp_vk_buf b;
    char err[256];
    int r3 = 0;
    if (kipp_vk_alloc(vk, 4096, "ops_mm", &b, err, sizeof err) == KIPP_OK) {
        const kipp_vk_view v = kipp_vk_all(&b);
        r3 = kipp_vk_matmul(vk, KIPP_TYPE_F32, v, 0, 8, 4, v, 8, nv, 0, 1, v, 5, 0, 2, 0) ==
                 KIPP_VK_EINVAL && /* columns 2..5 in rows of 5 */
             kipp_vk_matmul(vk, KIPP_TYPE_F32, v, 0, 8, 4, v, 7, nv, 0, 1, v, 4, 0, 0, 0) ==
                 KIPP_VK_EINVAL && /* ldx 7 < n_in 8 */
             kipp_vk_matmul(vk, KIPP_TYPE_F32, v, 4000, 8, 4, v, 8, nv, 0, 1, v, 4, 0, 0, 0) ==
                 KIPP_VK_EINVAL; /* W past its view */
        kipp_vk_free(vk, &b);
    }
    KT_CHECK(r3, "outputs past ldy, ldx < n_in and W past its view are refused");
    bad += !r0 + !r1 + !r2 + !r3;
    return bad;
}
