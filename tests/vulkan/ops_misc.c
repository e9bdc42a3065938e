/* ops_misc.c — operator tests of the vulkan backend's ops.c (kernels.h's "everything else"):
 * RMSNorm (model-width rows and per-head rows), NEOX RoPE, SwiGLU, the residual add, the bias
 * add, the row gather, the experts' weighted sum, the paged KV store and causal paged GQA
 * attention, each against a host reference on random inputs over many shapes (odd sizes,
 * padded strides, in-place calls), KV types f32/f16/bf16, shuffled block tables, and
 * attention's KIPP_FAULT read modes. The KV references are host_kv's own functions: stores
 * are kipp_host_kv_put at kipp_host_kv_row's address, reads kipp_host_kv_row with the fault
 * build's modes (KIPP_FAULT_INJECT defined here; the vulkan layout of one layer,
 * [n_blocks][2][block_size][kv_dim], is the host layout with n_layer = 1). Each op's bound is
 * derived in the comment above its check, from the Vulkan spec's precision of each operation
 * (SPIR-V add, sub, mul correctly rounded; division 2.5 ulp; exp 3 + 2|x| ulp; sqrt as
 * 1/inversesqrt: 2 + 2.5 ulp); one line per op prints the worst error as a fraction of its
 * bound and the test's time. Called by vk_ops.c (kipp_test --vulkan-operators): about 4 s on
 * lavapipe (2 cores), most of it attention. */
#ifndef KIPP_FAULT_INJECT
#define KIPP_FAULT_INJECT 1 /* kipp_host_kv_row's fault modes: the attention reads' reference */
#endif
#include "backend/host_kv.h"
#include "backend/vulkan/kernels.h"
#include "core/types.h"
#include "kt.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int kt_vk_ops_misc(kipp_vk *vk);

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rng(void) { /* xorshift64*: fixed, portable */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}
static float frand(void) { return (float)(rng() >> 8) / 8388608.0f - 1.0f; } /* [-1, 1) */
static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = frand() * scale;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- device helpers: every failure is counted, never fatal ------------------------------ */

static kipp_vk *g_vk;
static int g_fail;

static void dev_fail(const char *what, const char *msg) {
    fprintf(stderr, "FAIL vulkan ops_misc: %s: %s\n", what, msg);
    g_fail++;
    kt_failed++;
}

/* A device buffer of n bytes (at least 4), holding h's bytes when h is given. */
static kipp_vk_buf up(const void *h, size_t n) {
    char err[KIPP_ERR_LEN];
    kipp_vk_buf b;
    memset(&b, 0, sizeof b);
    if (kipp_vk_alloc(g_vk, n < 4 ? 4 : n, "ops_misc", &b, err, sizeof err) != KIPP_OK) {
        dev_fail("alloc", err);
        memset(&b, 0, sizeof b);
        return b;
    }
    if (h && n && kipp_vk_write(g_vk, &b, 0, h, n, err, sizeof err) != KIPP_OK) {
        dev_fail("upload", err);
        kipp_vk_free(g_vk, &b);
    }
    return b;
}

static void dfree(kipp_vk_buf *b) {
    if (b->buf != VK_NULL_HANDLE) kipp_vk_free(g_vk, b);
}

static int down(void *h, const kipp_vk_buf *b, size_t n) {
    char err[KIPP_ERR_LEN];
    if (b->buf == VK_NULL_HANDLE) return 0;
    if (kipp_vk_read(g_vk, b, 0, h, n, err, sizeof err) == KIPP_OK) return 1;
    dev_fail("download", err);
    return 0;
}

/* A launcher's return code (it recorded into the open recording), then the submission. */
static int ran(int rc, const char *what) {
    char err[KIPP_ERR_LEN];
    if (rc) {
        snprintf(err, sizeof err, "launcher returned %d", rc);
        dev_fail(what, err);
        (void)kipp_vk_submit(g_vk, err, sizeof err); /* closes the recording */
        return 0;
    }
    if (kipp_vk_submit(g_vk, err, sizeof err) != KIPP_OK) {
        dev_fail(what, err);
        return 0;
    }
    return 1;
}

static kipp_vk_view all(const kipp_vk_buf *b) { return kipp_vk_all(b); }
static int ok_bufs(const kipp_vk_buf *b, int n) {
    for (int i = 0; i < n; i++)
        if (b[i].buf == VK_NULL_HANDLE) return 0;
    return 1;
}

/* ---- per-op worst error vs bound --------------------------------------------------------- */

typedef struct {
    const char *name;
    double worst;  /* max |err| / bound over all checked values (<= 1 passes) */
    double err_at; /* that |err| */
    long n, bad;
} op_stat;

static void note(op_stat *s, double got, double want, double bound) {
    const double err = fabs(got - want);
    const double r = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0);
    const int nan_mismatch = isnan(got) != isnan(want);
    s->n++;
    if (nan_mismatch || r > s->worst) {
        s->worst = nan_mismatch ? INFINITY : r;
        s->err_at = err;
    }
    if (nan_mismatch || (!(r <= 1.0) && !(isnan(got) && isnan(want)))) {
        if (s->bad < 5)
            fprintf(stderr, "  %s: got %.9g want %.9g (|err| %.3g > bound %.3g)\n", s->name, got,
                    want, err, bound);
        s->bad++;
    }
}

/* Bit-exact comparison of n bytes. */
static void note_bytes(op_stat *s, const void *got, const void *want, size_t n, const char *ctx) {
    const unsigned char *g = got, *w = want;
    long diff = 0;
    size_t first = n;
    for (size_t i = 0; i < n; i++)
        if (g[i] != w[i]) {
            if (!diff) first = i;
            diff++;
        }
    s->n += (long)n;
    if (diff) {
        if (s->bad < 5)
            fprintf(stderr, "  %s: %ld of %zu bytes differ, the first at byte %zu (%s)\n", s->name,
                    diff, n, first, ctx);
        s->bad += diff;
        s->worst = INFINITY;
    }
}

/* One line per op; *t: when its test began (reset here for the next one). */
static double now(void);
static void report(const op_stat *s, double *t) {
    const double t1 = now();
    printf("  vulkan op %-10s %8ld values, worst |err| %.3g = %.3g of its bound (%.1f s)%s\n",
           s->name, s->n, s->err_at, s->worst, t1 - *t, s->bad ? "  FAIL" : "");
    *t = t1;
    KT_CHECK(s->bad == 0 && s->n > 0, "vulkan %s: %ld of %ld values out of bound", s->name,
             s->bad, s->n);
    if (s->bad || s->n == 0) g_fail++;
}

/* ---- rmsnorm ----------------------------------------------------------------------------- */

/* Reference: cpu-ref's rmsnorm verbatim (the sum of squares in double). The kernel sums in f32:
 * 64 invocations each sum c = ceil(n / 64) rounded squares, then a 6-level tree, so its sum
 * is within (c + 7) u relative (u = eps / 2; all terms >= 0). The mean (device division 2.5
 * ulp, host rounding u), + eps (u), sqrt (2 + 2.5 ulp) and 1 / sqrt (2.5 ulp against u) then
 * give scale within ((c + 7) / 4 + 10) eps relative (half the argument's error passes
 * through the square root); the two products round alike on both sides, adding at most 2 eps:
 * bound ((c + 7) / 4 + 12) eps |ref|. Rows of a model's width and per-head rows (q/k norm:
 * n = head_dim, rows = tokens x heads, stride head_dim), in place and not. */
static void test_rmsnorm(op_stat *st) {
    static const uint32_t shapes[][3] = {/* n, rows, row padding */
                                         {64, 7, 0},   {128, 33, 5}, {1000, 5, 3}, {1024, 4, 0},
                                         {4097, 2, 1}, {5120, 2, 0}, {1, 3, 0},    {7, 9, 2},
                                         {128, 70, 0}, {64, 24, 0}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int inplace = 0; inplace < 2; inplace++) {
            const uint32_t n = shapes[c][0], rows = shapes[c][1];
            const size_t ld = n + shapes[c][2], total = ld * rows;
            float *x = malloc(total * 4), *w = malloc(n * 4), *got = malloc(total * 4);
            fill(x, total, 3.0f);
            fill(w, n, 1.5f);
            const float eps = 1e-6f;
            kipp_vk_buf b[3] = {up(x, total * 4), up(w, n * 4), {0}};
            b[2] = inplace ? b[0] : up(x, total * 4); /* the padding keeps x's values */
            if (ok_bufs(b, 3)) {
                kipp_vk_begin(g_vk);
                const int rc = kipp_vk_rmsnorm(g_vk, all(&b[0]), (uint32_t)ld, all(&b[1]), n,
                                               rows, eps, all(&b[2]), (uint32_t)ld);
                if (ran(rc, "rmsnorm") && down(got, &b[2], total * 4)) {
                    const double bound_rel = (((n + 63) / 64 + 7) / 4.0 + 12) * FLT_EPSILON;
                    for (uint32_t r = 0; r < rows; r++) {
                        const float *xr = x + r * ld;
                        double ss = 0.0;
                        for (uint32_t i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
                        const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
                        for (uint32_t i = 0; i < ld; i++) {
                            const float want = i < n ? xr[i] * scale * w[i] : xr[i];
                            note(st, got[r * ld + i], want, bound_rel * fabsf(want));
                        }
                    }
                }
            }
            dfree(&b[0]);
            dfree(&b[1]);
            if (!inplace) dfree(&b[2]);
            free(x), free(w), free(got);
        }
}

/* ---- rope -------------------------------------------------------------------------------- */

/* Reference: cpu-ref's rope_head on host tables (angles pos * 1e6^(-2i/D) in double, as
 * cpu-ref, at positions 0 .. 40000). The kernel rounds each product and the sum one at a
 * time (precise; SPIR-V mul / add / sub are correctly rounded) as the host does: exact (bound
 * 0), and the padding between rows untouched. */
static void test_rope(op_stat *st) {
    static const uint32_t shapes[][4] = {/* n_tok, n_head, head_dim, padding */
                                         {1, 8, 64, 0}, {17, 14, 128, 0}, {5, 2, 64, 3},
                                         {33, 8, 128, 7}, {3, 5, 6, 1},   {2, 40, 256, 0}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const uint32_t n_tok = shapes[c][0], n_head = shapes[c][1], D = shapes[c][2];
        const uint32_t half = D / 2;
        const size_t ld = (size_t)n_head * D + shapes[c][3], total = ld * n_tok;
        const size_t tab = (size_t)n_tok * half;
        float *x = malloc(total * 4), *got = malloc(total * 4), *cs = malloc(2 * tab * 4);
        fill(x, total, 2.0f);
        for (uint32_t t = 0; t < n_tok; t++) {
            const uint32_t pos = t == 0 ? 0 : rng() % 40000;
            for (uint32_t i = 0; i < half; i++) {
                const double th = (double)pos * pow(1e6, -2.0 * i / (double)D);
                cs[t * half + i] = (float)cos(th);
                cs[tab + t * half + i] = (float)sin(th);
            }
        }
        kipp_vk_buf b[2] = {up(x, total * 4), up(cs, 2 * tab * 4)};
        if (ok_bufs(b, 2)) {
            kipp_vk_begin(g_vk);
            const int rc = kipp_vk_rope(g_vk, all(&b[0]), (uint32_t)ld, n_tok, n_head, D,
                                        all(&b[1]));
            if (ran(rc, "rope") && down(got, &b[0], total * 4)) {
                for (uint32_t t = 0; t < n_tok; t++) {
                    for (uint32_t h = 0; h < n_head; h++)
                        for (uint32_t i = 0; i < half; i++) {
                            const float *hp = x + t * ld + (size_t)h * D;
                            const float a = hp[i], bb = hp[i + half];
                            const float c0 = cs[t * half + i], s0 = cs[tab + t * half + i];
                            note(st, got[t * ld + (size_t)h * D + i], a * c0 - bb * s0, 0);
                            note(st, got[t * ld + (size_t)h * D + i + half], a * s0 + bb * c0,
                                 0);
                        }
                    for (size_t i = (size_t)n_head * D; i < ld; i++)
                        note(st, got[t * ld + i], x[t * ld + i], 0);
                }
            }
        }
        dfree(&b[0]);
        dfree(&b[1]);
        free(x), free(got), free(cs);
    }
}

/* ---- swiglu, add, add_bias ------------------------------------------------------------------ */

/* swiglu reference: silu(g) * u with the host's expf (< 1 ulp). The device's exp(-z) is within
 * 3 + 2|z| ulp (Vulkan's bound); its error passes into 1 + e damped by e / (1 + e) <= 1, then
 * 1 + e (u), the division (2.5 ulp) and the product (u) on the device, the same roundings but
 * a correctly rounded division on the host: bound (9 + 2|z|) eps |ref|. add: one correctly
 * rounded add on both sides: exact (bound 0), every element outside the rows (the padding)
 * unchanged. */
static void test_elementwise(op_stat *sw, op_stat *ad) {
    static const uint32_t shapes[][3] = {/* n, n_tok, padding */
                                         {4096, 3, 0}, {12288, 2, 0}, {1001, 5, 3},
                                         {64, 64, 4},  {17, 9, 0},    {3, 1, 0}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int inplace = 0; inplace < 2; inplace++) {
            const uint32_t n = shapes[c][0], n_tok = shapes[c][1];
            const size_t ld = n + shapes[c][2], total = ld * n_tok;
            float *g = malloc(total * 4), *u = malloc(total * 4), *got = malloc(total * 4);
            fill(g, total, 12.0f);
            fill(u, total, 2.0f);
            kipp_vk_buf b[3] = {up(g, total * 4), up(u, total * 4), {0}};
            b[2] = inplace ? b[0] : up(g, total * 4);
            if (ok_bufs(b, 3)) {
                kipp_vk_begin(g_vk);
                int rc = kipp_vk_swiglu(g_vk, all(&b[0]), all(&b[1]), (uint32_t)ld, n, n_tok,
                                        all(&b[2]));
                if (ran(rc, "swiglu") && down(got, &b[2], total * 4))
                    for (size_t e = 0; e < total; e++) {
                        if (e % ld >= n) {
                            note(sw, got[e], g[e], 0);
                            continue;
                        }
                        const float want = g[e] / (1.0f + expf(-g[e])) * u[e];
                        note(sw, got[e], want, (9 + 2 * fabsf(g[e])) * FLT_EPSILON * fabsf(want));
                    }
                /* the residual add into the (restored) gate buffer */
                char err[KIPP_ERR_LEN];
                if (kipp_vk_write(g_vk, &b[0], 0, g, total * 4, err, sizeof err) != KIPP_OK) {
                    dev_fail("upload", err);
                } else {
                    kipp_vk_begin(g_vk);
                    rc = kipp_vk_add(g_vk, all(&b[0]), all(&b[1]), (uint32_t)ld, n, n_tok);
                    if (ran(rc, "add") && down(got, &b[0], total * 4))
                        for (size_t e = 0; e < total; e++)
                            note(ad, got[e], e % ld < n ? g[e] + u[e] : g[e], 0);
                }
            }
            dfree(&b[0]);
            dfree(&b[1]);
            if (!inplace) dfree(&b[2]);
            free(g), free(u), free(got);
        }
}

/* x[t][i] + b[i]: one correctly rounded add on both sides, exact (bound 0); the padding
 * between rows untouched. */
static void test_bias(op_stat *st) {
    static const uint32_t shapes[][3] = {{896, 3, 0}, {128, 17, 5}, {1001, 2, 3}, {16, 64, 0},
                                         {3, 1, 1}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const uint32_t n = shapes[c][0], n_tok = shapes[c][1];
        const size_t ld = n + shapes[c][2], total = ld * n_tok;
        float *x = malloc(total * 4), *bias = malloc(n * 4), *got = malloc(total * 4);
        fill(x, total, 3.0f);
        fill(bias, n, 0.5f);
        kipp_vk_buf b[2] = {up(x, total * 4), up(bias, n * 4)};
        if (ok_bufs(b, 2)) {
            kipp_vk_begin(g_vk);
            const int rc = kipp_vk_add_bias(g_vk, all(&b[0]), (uint32_t)ld, all(&b[1]), n, n_tok);
            if (ran(rc, "add_bias") && down(got, &b[0], total * 4))
                for (size_t e = 0; e < total; e++) {
                    const size_t i = e % ld;
                    note(st, got[e], i < n ? x[e] + bias[i] : x[e], 0);
                }
        }
        dfree(&b[0]);
        dfree(&b[1]);
        free(x), free(bias), free(got);
    }
}

/* ---- get_rows ---------------------------------------------------------------------------- */

/* A copy: bit for bit (bound 0 on the bytes), the source holding NaNs with payloads,
 * subnormals and -0 among random values; rows repeated and out of order; the destination's
 * padding untouched. */
static void test_get_rows(op_stat *st) {
    static const uint32_t shapes[][5] = {/* source rows, n, src padding, n_rows, dst padding */
                                         {37, 1001, 2, 9, 4}, {5, 3, 0, 7, 1},
                                         {3, 5000, 0, 2, 0},  {64, 896, 0, 64, 0},
                                         {70, 1, 0, 66000, 1}}; /* rows folded over y */
    static const uint32_t specials[] = {0x7fc00001u, 0xffa5a5a5u, 0x00000001u, 0x807fffffu,
                                        0x80000000u, 0x7f800000u};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const uint32_t R = shapes[c][0], n = shapes[c][1], n_rows = shapes[c][3];
        const size_t lds = n + shapes[c][2], ldd = n + shapes[c][4];
        uint32_t *src = malloc(R * lds * 4), *dst = malloc(n_rows * ldd * 4);
        uint32_t *got = malloc(n_rows * ldd * 4), *rows = malloc(n_rows * 4);
        for (size_t i = 0; i < R * lds; i++) {
            const float f = frand();
            memcpy(&src[i], &f, 4);
            if (rng() % 16 == 0) src[i] = specials[rng() % 6];
        }
        for (size_t i = 0; i < n_rows * ldd; i++) dst[i] = rng();
        for (uint32_t r = 0; r < n_rows; r++)
            rows[r] = r == 0 ? R - 1 : r == 1 ? 0 : rng() % R; /* the last, the first, any */
        kipp_vk_buf b[3] = {up(src, R * lds * 4), up(rows, n_rows * 4), up(dst, n_rows * ldd * 4)};
        if (ok_bufs(b, 3)) {
            kipp_vk_begin(g_vk);
            const int rc = kipp_vk_get_rows(g_vk, all(&b[0]), (uint32_t)lds, all(&b[1]), n_rows, n,
                                            all(&b[2]), (uint32_t)ldd);
            if (ran(rc, "get_rows") && down(got, &b[2], n_rows * ldd * 4)) {
                for (uint32_t r = 0; r < n_rows; r++)
                    memcpy(dst + r * ldd, src + (size_t)rows[r] * lds, n * 4);
                note_bytes(st, got, dst, n_rows * ldd * 4, "get_rows");
            }
        }
        for (int i = 0; i < 3; i++) dfree(&b[i]);
        free(src), free(dst), free(got), free(rows);
    }
}

/* ---- moe_sum ----------------------------------------------------------------------------- */

/* The host's ((0 + w0 y0) + w1 y1) + ... with each operation rounded (C11: no contraction), the
 * shader's precise products and sums in the same order: exact (bound 0); stored over what the
 * output held, its padding left as it was. The slots in a random group order. */
static void test_moe_sum(op_stat *st) {
    static const uint32_t cases[][3] = {{1, 64, 2}, {8, 2048, 8}, {37, 96, 1}, {200, 128, 4},
                                        {3, 33, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint32_t n_tok = cases[c][0], n = cases[c][1], k = cases[c][2];
        const size_t P = (size_t)n_tok * k, ldx = n + 3, ldy = n + (c & 1);
        float *x = malloc(n_tok * ldx * 4), *ye = malloc((P + 1) * ldy * 4);
        float *w = malloc((P + 1) * 4), *got = malloc(n_tok * ldx * 4);
        uint32_t *slot = malloc((P + 1) * 4);
        fill(x, n_tok * ldx, 4.0f);
        fill(ye, P * ldy, 2.0f);
        for (size_t i = 0; i < P; i++) w[i] = (frand() + 1.0f) * 0.5f;
        for (size_t i = 0; i < P; i++) slot[i] = (uint32_t)i;
        for (size_t i = P; i-- > 1;) {
            const size_t j = rng() % (i + 1);
            const uint32_t tmp = slot[i];
            slot[i] = slot[j];
            slot[j] = tmp;
        }
        kipp_vk_buf b[4] = {up(x, n_tok * ldx * 4), up(ye, P * ldy * 4), up(w, P * 4),
                            up(slot, P * 4)};
        if (ok_bufs(b, 4)) {
            kipp_vk_begin(g_vk);
            const int rc = kipp_vk_moe_sum(g_vk, all(&b[0]), (uint32_t)ldx, all(&b[1]),
                                           (uint32_t)ldy, all(&b[2]), all(&b[3]), n, n_tok, k);
            if (ran(rc, "moe_sum") && down(got, &b[0], n_tok * ldx * 4))
                for (uint32_t t = 0; t < n_tok; t++)
                    for (size_t i = 0; i < ldx; i++) {
                        float want = x[t * ldx + i];
                        if (i < n) {
                            float acc = 0.0f;
                            for (uint32_t s = 0; s < k; s++)
                                acc = acc + w[t * k + s] * ye[(size_t)slot[t * k + s] * ldy + i];
                            want = acc;
                        }
                        note(st, got[t * ldx + i], want, 0);
                    }
        }
        for (int i = 0; i < 4; i++) dfree(&b[i]);
        free(x), free(ye), free(w), free(got), free(slot);
    }
}

/* ---- paged KV: tables, the host view of the storage ------------------------------------------ */

enum { TBL_REVERSED, TBL_INTERLEAVED, TBL_SHARED, TBL_RANDOM, TBL_N };
static const char *const tbl_names[] = {"reversed", "interleaved", "shared-prefix", "random"};

/* Block tables [n_seq][max_blocks] for sequences of nb[s] blocks; returns the storage's block
 * count. reversed: ids handed out from the top; interleaved: round-robin across sequences;
 * shared: every sequence's first half-of-the-shortest blocks are the same physical blocks
 * (a forked prompt); random: a shuffled allocation. Unused entries hold 0, a valid id. */
static uint32_t make_tables(int kind, uint32_t n_seq, const uint32_t *nb, uint32_t max_blocks,
                            uint32_t *tables) {
    uint32_t total = 0, shortest = UINT32_MAX, longest = 0;
    for (uint32_t s = 0; s < n_seq; s++) {
        total += nb[s];
        shortest = nb[s] < shortest ? nb[s] : shortest;
        longest = nb[s] > longest ? nb[s] : longest;
    }
    const uint32_t n_blocks = total + 3; /* spare blocks nobody's table names */
    memset(tables, 0, (size_t)n_seq * max_blocks * sizeof *tables);
    uint32_t next = 0;
    const uint32_t shared = kind == TBL_SHARED ? shortest / 2 : 0;
    for (uint32_t b = 0; b < shared; b++) {
        for (uint32_t s = 0; s < n_seq; s++) tables[s * max_blocks + b] = next;
        next++;
    }
    if (kind == TBL_INTERLEAVED) {
        for (uint32_t b = shared; b < longest; b++)
            for (uint32_t s = 0; s < n_seq; s++)
                if (b < nb[s]) tables[s * max_blocks + b] = next++;
    } else {
        for (uint32_t s = 0; s < n_seq; s++)
            for (uint32_t b = shared; b < nb[s]; b++) tables[s * max_blocks + b] = next++;
    }
    if (kind == TBL_REVERSED || kind == TBL_RANDOM) {
        uint32_t *perm = malloc(n_blocks * sizeof *perm);
        for (uint32_t i = 0; i < n_blocks; i++) perm[i] = n_blocks - 1 - i;
        if (kind == TBL_RANDOM)
            for (uint32_t i = n_blocks; i-- > 1;) {
                const uint32_t j = rng() % (i + 1), x = perm[i];
                perm[i] = perm[j];
                perm[j] = x;
            }
        for (uint32_t s = 0; s < n_seq; s++)
            for (uint32_t b = 0; b < nb[s]; b++)
                tables[s * max_blocks + b] = perm[tables[s * max_blocks + b]];
        free(perm);
    }
    return n_blocks;
}

/* One layer's vulkan storage seen as host_kv storage of one layer (the same bytes). */
static kipp_host_kv host_view(void *data, kipp_kv_type type, uint32_t kv_dim, uint32_t bs,
                              uint32_t n_blocks, int fault) {
    kipp_host_kv h;
    memset(&h, 0, sizeof h);
    h.data = data;
    h.type = type;
    h.type_v = type;
    h.n_layer = 1;
    h.kv_dim = kv_dim;
    h.block_size = bs;
    h.n_blocks = n_blocks;
    h.row_bytes[0] = h.row_bytes[1] = (size_t)kv_dim * kipp_kv_type_size(type);
    h.part_bytes[0] = h.part_bytes[1] = (size_t)bs * kv_dim * kipp_kv_type_size(type);
    h.block_bytes = 2 * h.part_bytes[0];
    h.fault = fault;
    return h;
}

static kipp_kv_seq seq_view(uint32_t *table, uint32_t n_blocks, uint32_t n_tokens) {
    kipp_kv_seq s;
    memset(&s, 0, sizeof s);
    s.blocks = table;
    s.n_blocks = s.cap = n_blocks;
    s.n_tokens = n_tokens;
    s.live = 1;
    return s;
}

static const kipp_kv_type kv_types[3] = {KIPP_KV_TYPE_F32, KIPP_KV_TYPE_F16, KIPP_KV_TYPE_BF16};

/* ---- kv_store ---------------------------------------------------------------------------- */

/* Values whose rounding is delicate, as f32 bits: f16 ties (1 + 2^-11 to even 1, 1 + 3 2^-11
 * up), 65504, just below and at 65520 (f16's overflow tie: inf), 70000, infinities, NaNs
 * (quiet, signalling with a low payload, payload bits to keep), -0, f16 subnormals and their
 * ties (2^-25 to 0, 1.5 2^-24 to even 2^-23, 3 2^-26 up), the f16 normal boundary from below,
 * f32 subnormals, bf16 ties (to even, up, up into inf) and the largest finite f32. */
static const uint32_t kv_specials[] = {
    0x3f801000u, 0x3f803000u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x4788b800u, 0xc788b800u,
    0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffa5a000u, 0x80000000u, 0x33000000u,
    0x33c00000u, 0x33400000u, 0x387fffffu, 0x00000001u, 0x807fffffu, 0x3f808000u, 0x3f818000u,
    0x7f7f8000u, 0x7f7fffffu, 0xb3800000u};
#define N_KV_SPECIALS (sizeof kv_specials / sizeof kv_specials[0])

/* Exact: the storage after the kernel must equal, byte for byte, the same storage (random
 * bytes) after kipp_host_kv_put of each token's rows at kipp_host_kv_row's write address
 * (every other byte unchanged). Rows of random values over 60 binades with the specials above
 * at random places; every position of three sequences stored in one call, the sequences'
 * tokens interleaved; padded source strides. */
static void test_kv_store(op_stat *st) {
    for (int ti = 0; ti < 3; ti++)
        for (int kind = 0; kind < TBL_N; kind++) {
            if (kind == TBL_SHARED) continue; /* stores need private blocks */
            const kipp_kv_type type = kv_types[ti];
            const size_t elt = kipp_kv_type_size(type);
            const uint32_t bs = kind == TBL_INTERLEAVED ? 7 : 16;
            const uint32_t kv_dim = kind == TBL_RANDOM ? 1024 : 136;
            const uint32_t n_seq = 3, ctx[3] = {40, 1, 100}, max_blocks = 16;
            uint32_t nb[3], tables[3 * 16];
            for (int s = 0; s < 3; s++) nb[s] = (ctx[s] + bs - 1) / bs;
            const uint32_t n_blocks = make_tables(kind, n_seq, nb, max_blocks, tables);
            const size_t kv_bytes = (size_t)n_blocks * 2 * bs * kv_dim * elt;
            unsigned char *kv = malloc(kv_bytes), *got = malloc(kv_bytes);
            for (size_t i = 0; i < kv_bytes; i++) kv[i] = (unsigned char)rng();
            uint32_t n_tok = 0, seq_of[141], pos[141];
            for (uint32_t p = 0; p < 100; p++)
                for (uint32_t s = 0; s < n_seq; s++)
                    if (p < ctx[s]) {
                        seq_of[n_tok] = s;
                        pos[n_tok++] = p;
                    }
            const size_t ldk = kv_dim + 4, ldv = kv_dim + 9;
            float *k = malloc(n_tok * ldk * 4), *v = malloc(n_tok * ldv * 4);
            for (size_t i = 0; i < n_tok * ldk; i++)
                k[i] = rng() % 8 == 0 ? from_bits(kv_specials[rng() % N_KV_SPECIALS])
                                      : ldexpf(frand(), (int)(rng() % 60) - 30);
            for (size_t i = 0; i < n_tok * ldv; i++)
                v[i] = rng() % 8 == 0 ? from_bits(kv_specials[rng() % N_KV_SPECIALS])
                                      : ldexpf(frand(), (int)(rng() % 60) - 30);
            kipp_vk_buf b[6] = {up(kv, kv_bytes),       up(k, n_tok * ldk * 4),
                                up(v, n_tok * ldv * 4), up(seq_of, n_tok * 4),
                                up(pos, n_tok * 4),     up(tables, sizeof tables)};
            if (ok_bufs(b, 6)) {
                kipp_vk_begin(g_vk);
                const int rc = kipp_vk_kv_store(g_vk, all(&b[0]), (uint32_t)type, bs, kv_dim,
                                                all(&b[1]), (uint32_t)ldk, all(&b[2]),
                                                (uint32_t)ldv, n_tok, all(&b[3]), all(&b[4]),
                                                all(&b[5]), max_blocks);
                if (ran(rc, "kv_store") && down(got, &b[0], kv_bytes)) {
                    const kipp_host_kv h = host_view(kv, type, kv_dim, bs, n_blocks, 0);
                    for (uint32_t t = 0; t < n_tok; t++) {
                        const uint32_t sq = seq_of[t];
                        const kipp_kv_seq s = seq_view(tables + sq * max_blocks, nb[sq], ctx[sq]);
                        kipp_host_kv_put(type, kipp_host_kv_row(&h, &s, 0, pos[t], KIPP_KV_K,
                                                                KIPP_KV_WRITE),
                                         k + t * ldk, kv_dim);
                        kipp_host_kv_put(type, kipp_host_kv_row(&h, &s, 0, pos[t], KIPP_KV_V,
                                                                KIPP_KV_WRITE),
                                         v + t * ldv, kv_dim);
                    }
                    char ctxs[96];
                    snprintf(ctxs, sizeof ctxs, "kv type %s, %s tables, block %u, kv_dim %u",
                             kipp_kv_type_name(type), tbl_names[kind], bs, kv_dim);
                    note_bytes(st, got, kv, kv_bytes, ctxs);
                }
            }
            for (int i = 0; i < 6; i++) dfree(&b[i]);
            free(kv), free(got), free(k), free(v);
        }
}

/* ---- attention --------------------------------------------------------------------------- */

typedef struct {
    uint32_t n_head, n_kv_head, D, bs;
    kipp_kv_type type;
    uint32_t n_seq;
    uint32_t ctx[4];   /* each sequence's context after this step */
    uint32_t n_new[4]; /* its query tokens: the last n_new positions */
    int tables;
} att_case;

/* Reference: cpu-ref's attention in double over the values the storage holds, read through
 * kipp_host_kv_row with the case's fault mode, scores scaled by the kernel's f32 scale
 * (cpu-ref's 1/sqrtf(D)). Bound per output row, from f32's error terms (eps = 2^-23, u =
 * eps/2; vmax the largest |v| the row reads, qk the largest sum_i |q_i k_ji|, R the range of
 * its scores, T = ceil(n / 256) + 1 >= its tiles and its splits):
 *   scores: an f32 dot of D terms (fused or not) errs by <= D u qk, the scale's product by
 *     u more: Es = (D + 1) u scale qk; a score error Es moves the softmax weights by a factor
 *     within e^(+-2 Es): the output by <= 2 Es vmax (first order);
 *   exp: each weight exp(s - m) is within (3 + 2|s - m|) ulp (Vulkan's exp) of the true one,
 *     the subtraction adds u |s - m|: W = (3 + 2.5 R) eps relative; a position's weight
 *     carries its own exp, the rescale factors exp(m_old - m_new) of the later tiles of its
 *     split (<= T) and the merge's exp: (T + 2) W, moving the output by <= 2 (T + 2) W vmax;
 *   sums: acc is a chain of <= 256 + 1 rounded products and adds per tile, carried by one
 *     product and one add per tile and per split in the merge, then divided (2.5 ulp): a
 *     relative error <= (257 + 4 T + 2) u of sum p |v| <= vmax l; l the same with a chain
 *     of 4 + 6 per tile: (10 + 4 T + 2) u. Together: vmax ((281 + 8 T) u + 2.5 eps).
 * The seen errors are orders of magnitude below this worst case (the printed line). */
static double att_run(op_stat *st, const att_case *c, int fault, float *got_out) {
    const uint32_t D = c->D, n_head = c->n_head, n_kv = c->n_kv_head, kv_dim = n_kv * D;
    const uint32_t bs = c->bs, group = n_head / n_kv;
    const size_t elt = kipp_kv_type_size(c->type);
    uint32_t nb[4], max_blocks = 0, max_ctx = 0, n_tok = 0;
    for (uint32_t s = 0; s < c->n_seq; s++) {
        nb[s] = (c->ctx[s] + bs - 1) / bs;
        max_blocks = nb[s] + 1 > max_blocks ? nb[s] + 1 : max_blocks;
        max_ctx = c->ctx[s] > max_ctx ? c->ctx[s] : max_ctx;
        n_tok += c->n_new[s];
    }
    uint32_t *tables = malloc((size_t)c->n_seq * max_blocks * 4);
    const uint32_t n_blocks = make_tables(c->tables, c->n_seq, nb, max_blocks, tables);
    const size_t n_elts = (size_t)n_blocks * 2 * bs * kv_dim;
    float *vals = malloc(n_elts * 4);
    void *kv = malloc(n_elts * elt);
    fill(vals, n_elts, 1.0f);
    kipp_host_kv_put(c->type, kv, vals, (uint32_t)n_elts);
    uint32_t *seq_of = malloc(n_tok * 4), *pos = malloc(n_tok * 4), t = 0;
    for (uint32_t s = 0; s < c->n_seq; s++)
        for (uint32_t i = 0; i < c->n_new[s]; i++, t++) {
            seq_of[t] = s;
            pos[t] = c->ctx[s] - c->n_new[s] + i;
        }
    const size_t ld_q = (size_t)n_head * D + 3, ld_out = (size_t)n_head * D + 5;
    float *q = malloc(n_tok * ld_q * 4), *got = got_out;
    fill(q, n_tok * ld_q, 4.0f); /* scores up to ~+-4 sqrt(D)/3: peaked softmax rows */
    for (size_t i = 0; i < n_tok * ld_out; i++) got[i] = -7.0f;
    const size_t scratch_bytes = kipp_vk_attention_scratch_bytes(n_tok, n_head, D, max_ctx);
    kipp_vk_buf b[7] = {up(q, n_tok * ld_q * 4), up(kv, n_elts * elt), up(seq_of, n_tok * 4),
                        up(pos, n_tok * 4), up(tables, (size_t)c->n_seq * max_blocks * 4),
                        up(NULL, scratch_bytes), up(got, n_tok * ld_out * 4)};
    const long bad0 = st->bad;
    double worst = 0;
    if (ok_bufs(b, 7)) {
        kipp_vk_begin(g_vk);
        const int rc = kipp_vk_attention(
            g_vk, all(&b[0]), (uint32_t)ld_q, all(&b[1]), (uint32_t)c->type, bs, kv_dim, n_head,
            n_kv, D, n_tok, all(&b[2]), all(&b[3]), all(&b[4]), max_blocks, max_ctx,
            scratch_bytes ? all(&b[5]) : kipp_vk_none(), all(&b[6]), (uint32_t)ld_out, fault,
            n_blocks);
        if (ran(rc, "attention") && down(got, &b[6], n_tok * ld_out * 4)) {
            const kipp_host_kv h = host_view(kv, c->type, kv_dim, bs, n_blocks, fault);
            const float scale_f = 1.0f / sqrtf((float)D);
            const double scale = scale_f, eps = FLT_EPSILON, u = eps / 2;
            double *sc = malloc((size_t)max_ctx * sizeof *sc), *o = malloc(D * sizeof *o);
            float *row = malloc(kv_dim * 4);
            for (t = 0; t < n_tok; t++) {
                const uint32_t s = seq_of[t], n = pos[t] + 1;
                const kipp_kv_seq sv = seq_view(tables + s * max_blocks, nb[s], c->ctx[s]);
                for (uint32_t hh = 0; hh < n_head; hh++) {
                    const float *qh = q + t * ld_q + (size_t)hh * D;
                    const size_t hoff = (size_t)(hh / group) * D;
                    double mx = -INFINITY, mn = INFINITY, qk = 0, vmax = 0;
                    for (uint32_t j = 0; j < n; j++) {
                        kipp_host_kv_get(c->type, row,
                                         kipp_host_kv_row(&h, &sv, 0, j, KIPP_KV_K, KIPP_KV_READ),
                                         kv_dim);
                        double dot = 0, a = 0;
                        for (uint32_t i = 0; i < D; i++) {
                            dot += (double)qh[i] * row[hoff + i];
                            a += fabs((double)qh[i] * row[hoff + i]);
                        }
                        sc[j] = dot * scale;
                        qk = a > qk ? a : qk;
                        mx = sc[j] > mx ? sc[j] : mx;
                        mn = sc[j] < mn ? sc[j] : mn;
                    }
                    double sum = 0;
                    for (uint32_t j = 0; j < n; j++) sum += (sc[j] = exp(sc[j] - mx));
                    memset(o, 0, D * sizeof *o);
                    for (uint32_t j = 0; j < n; j++) {
                        kipp_host_kv_get(c->type, row,
                                         kipp_host_kv_row(&h, &sv, 0, j, KIPP_KV_V, KIPP_KV_READ),
                                         kv_dim);
                        for (uint32_t i = 0; i < D; i++) {
                            const double v = row[hoff + i];
                            o[i] += sc[j] / sum * v;
                            vmax = fabs(v) > vmax ? fabs(v) : vmax;
                        }
                    }
                    const double T = (n + 255) / 256 + 1, R = mx - mn;
                    const double es = (D + 1) * u * scale * qk, W = (3 + 2.5 * R) * eps;
                    const double bound =
                        vmax * (2 * es + 2 * (T + 2) * W + (281 + 8 * T) * u + 2.5 * eps) + 1e-30;
                    for (uint32_t i = 0; i < D; i++) {
                        const double g = got[t * ld_out + (size_t)hh * D + i];
                        note(st, g, o[i], bound);
                        if (fabs(g - o[i]) / bound > worst) worst = fabs(g - o[i]) / bound;
                    }
                }
                /* the padding after the heads is not written */
                for (size_t i = (size_t)n_head * D; i < ld_out; i++)
                    note(st, got[t * ld_out + i], -7.0, 0);
            }
            free(sc), free(o), free(row);
        }
    }
    if (st->bad != bad0)
        fprintf(stderr,
                "  attention case: heads %u/%u D %u kv %s block %u %s tables fault %d, %u tokens, "
                "max ctx %u\n",
                n_head, n_kv, D, kipp_kv_type_name(c->type), bs, tbl_names[c->tables], fault,
                n_tok, max_ctx);
    for (int i = 0; i < 7; i++) dfree(&b[i]);
    free(tables), free(vals), free(kv), free(seq_of), free(pos), free(q);
    return worst;
}

static size_t att_out_floats(const att_case *c) {
    uint32_t n_tok = 0;
    for (uint32_t s = 0; s < c->n_seq; s++) n_tok += c->n_new[s];
    return (size_t)n_tok * ((size_t)c->n_head * c->D + 5);
}

static void att_check(op_stat *st, const att_case *c) {
    float *got = malloc(att_out_floats(c) * 4);
    att_run(st, c, 0, got);
    free(got);
}

/* The plan splits a decode call's context into chunks of 256 positions (up to 64 of them),
 * a prefill of n_tok tokens into at most 1024 / n_tok: the cases below run one split (short
 * contexts), several with sequences far shorter than max_ctx (their later splits empty), a
 * split prefill and 17 splits. */
static void test_attention(op_stat *st, op_stat *fault_st) {
    static const uint32_t heads[][2] = {{4, 4}, {8, 4}, {16, 4}}; /* GQA ratios 1, 2, 4 */
    int k = 0;
    for (int hi = 0; hi < 3; hi++)
        for (uint32_t D = 64; D <= 128; D += 64)
            for (int ti = 0; ti < 3; ti++, k++) {
                const uint32_t bs = k % 3 == 2 ? 7 : 16;
                const kipp_kv_type ty = kv_types[ti];
                /* decode: one token each of three sequences, contexts 1, 37 and 300 + k
                 * (2 splits: the short ones' second split is empty) */
                const att_case dec = {heads[hi][0], heads[hi][1], D, bs, ty, 3,
                                      {1, 37, 300 + (uint32_t)k, 0}, {1, 1, 1, 0}, k % TBL_N};
                att_check(st, &dec);
                /* prefill: 37 tokens of three sequences, one from position 0, two after a
                 * cached past (one split) */
                const att_case pre = {heads[hi][0], heads[hi][1], D, bs, ty, 3,
                                      {5, 212, 20, 0}, {5, 12, 20, 0}, (k + 1) % TBL_N};
                att_check(st, &pre);
            }
    /* a split prefill (20 tokens: at most 51 splits; context 600: 3), a long decode (4097:
     * 17 splits) beside a one-position sequence, head_dim 256 and 96, splits of two tiles */
    const att_case longer[] = {
        {8, 4, 128, 16, KIPP_KV_TYPE_F16, 2, {600, 9, 0, 0}, {17, 3, 0, 0}, TBL_RANDOM},
        {8, 2, 128, 16, KIPP_KV_TYPE_BF16, 2, {4097, 1, 0, 0}, {1, 1, 0, 0}, TBL_REVERSED},
        {4, 2, 256, 16, KIPP_KV_TYPE_F32, 2, {520, 70, 0, 0}, {2, 2, 0, 0}, TBL_SHARED},
        {6, 3, 96, 5, KIPP_KV_TYPE_F16, 1, {77, 0, 0, 0}, {9, 0, 0, 0}, TBL_INTERLEAVED},
        /* 400 tokens: at most 2 splits, here of 512 positions (two tiles: the online
         * rescale), the tokens at positions 200 .. 599 */
        {2, 1, 64, 16, KIPP_KV_TYPE_BF16, 1, {600, 0, 0, 0}, {400, 0, 0, 0}, TBL_RANDOM}};
    for (size_t i = 0; i < sizeof longer / sizeof longer[0]; i++) att_check(st, &longer[i]);
    /* the KIPP_FAULT read modes: the kernel must read what the faulty host function reads,
     * and each mode must change the result (else the test could not see it) */
    const att_case f = {8, 4, 64, 16, KIPP_KV_TYPE_F16, 3, {40, 17, 300, 0}, {1, 1, 20, 0},
                        TBL_RANDOM};
    const size_t nf = att_out_floats(&f);
    float *base = malloc(nf * 4), *got = malloc(nf * 4);
    const uint64_t seed = rng_state;
    att_run(fault_st, &f, 0, base);
    for (int mode = 1; mode <= 4; mode++) {
        rng_state = seed; /* the same tables, storage and queries as the mode-0 run */
        att_run(fault_st, &f, mode, got);
        double diff = 0;
        for (size_t i = 0; i < nf; i++)
            diff = fabs(got[i] - base[i]) > diff ? fabs(got[i] - base[i]) : diff;
        KT_CHECK(diff > 1e-2, "attention fault mode %d: max |change| %.3g from mode 0", mode,
                 diff);
        if (!(diff > 1e-2)) g_fail++;
        printf("  vulkan op att-fault  mode %d changes the output by up to %.3g\n", mode, diff);
    }
    free(base), free(got);
}

/* The launchers' contract: kipp_vk_attention_scratch_bytes is enough for every call of at most
 * n_tok tokens and max_ctx context — a scratch view of exactly that size is accepted (the
 * launcher refuses a smaller one) over a sweep of token counts and contexts (the plan's split
 * count is not monotone in max_ctx: 16384 and 16385 split differently), and each sweep call
 * computes what it should (every token at position 0: out = V's row 0); arguments outside
 * the contract are refused with KIPP_VK_EINVAL before anything is recorded. */
static void test_contract(op_stat *st) {
    static const uint32_t toks[] = {1, 16, 17, 100, 1100};
    static const uint32_t ctxs[] = {1, 257, 16384, 16385};
    enum { NT = 1100 };
    const size_t n_calls = sizeof toks / sizeof toks[0] * (sizeof ctxs / sizeof ctxs[0]);
    const float kv[4] = {0.25f, -3.0f, 9.0f, 9.0f}; /* one block of one slot: K, V */
    float *q = calloc(NT * 2, 4), *got = malloc(n_calls * NT * 8);
    uint32_t *zeros = calloc(NT, 4);
    const size_t most = kipp_vk_attention_scratch_bytes(NT, 1, 2, 16385);
    kipp_vk_buf b[6] = {up(q, NT * 8), up(kv, sizeof kv), up(zeros, NT * 4),
                        up(NULL, n_calls * NT * 8), up(NULL, most), up(NULL, 1024)};
    if (ok_bufs(b, 6) && q && got && zeros) {
        /* one recording: call c writes its own region of b[3] (NaN where nothing wrote) */
        kipp_vk_begin(g_vk);
        kipp_vk_rec_fill(g_vk, all(&b[3]), n_calls * NT * 8, 0x7fc00000u);
        int rc = 0;
        for (size_t i = 0, c = 0; i < sizeof toks / sizeof toks[0]; i++)
            for (size_t j = 0; j < sizeof ctxs / sizeof ctxs[0]; j++, c++) {
                const uint32_t n = toks[i], ctx = ctxs[j];
                const size_t bytes = kipp_vk_attention_scratch_bytes(n, 1, 2, ctx);
                const int r = kipp_vk_attention(
                    g_vk, all(&b[0]), 2, all(&b[1]), KIPP_KV_TYPE_F32, 1, 2, 1, 1, 2, n,
                    all(&b[2]), all(&b[2]), all(&b[2]), 1, ctx,
                    bytes ? kipp_vk_sub(&b[4], 0, bytes) : kipp_vk_none(),
                    kipp_vk_sub(&b[3], c * NT * 8, (size_t)n * 8), 2, 0, 1);
                KT_CHECK(r == 0, "attention, %u tokens, max_ctx %u, scratch %zu bytes: %d", n,
                         ctx, bytes, r);
                rc = rc ? rc : r;
            }
        if (ran(rc, "attention sweep") && down(got, &b[3], n_calls * NT * 8))
            for (size_t i = 0, c = 0; i < sizeof toks / sizeof toks[0]; i++)
                for (size_t j = 0; j < sizeof ctxs / sizeof ctxs[0]; j++, c++)
                    for (uint32_t e = 0; e < 2 * toks[i]; e++) note(st, got[c * NT * 2 + e], 9, 0);
        /* refusals: nothing recorded */
        const uint64_t before = kipp_vk_dispatches(g_vk);
        const size_t need = kipp_vk_attention_scratch_bytes(1, 1, 2, 1000);
        kipp_vk_view none = kipp_vk_none(), sc = kipp_vk_sub(&b[4], 0, need - 16);
        kipp_vk_view x = all(&b[0]), k1 = all(&b[1]), z = all(&b[2]), o = all(&b[3]);
        const int rcs[] = {
            /* head_dim 257 */
            kipp_vk_attention(g_vk, x, 1024, k1, 1, 1, 258, 1, 1, 257, 1, z, z, z, 1, 1, none,
                              o, 1024, 0, 1),
            /* four splits without scratch, and with 16 bytes too few */
            kipp_vk_attention(g_vk, x, 2, k1, 1, 1, 2, 1, 1, 2, 1, z, z, z, 1, 1000, none, o, 2,
                              0, 1),
            kipp_vk_attention(g_vk, x, 2, k1, 1, 1, 2, 1, 1, 2, 1, z, z, z, 1, 1000, sc, o, 2, 0,
                              1),
            /* 3 heads over 2 KV heads; an unknown KV type; fault mode 5 */
            kipp_vk_attention(g_vk, x, 6, k1, 1, 1, 4, 3, 2, 2, 1, z, z, z, 1, 1, none, o, 6, 0,
                              1),
            kipp_vk_attention(g_vk, x, 2, k1, 4, 1, 2, 1, 1, 2, 1, z, z, z, 1, 1, none, o, 2, 0,
                              1),
            kipp_vk_attention(g_vk, x, 2, k1, 1, 1, 2, 1, 1, 2, 1, z, z, z, 1, 1, none, o, 2, 5,
                              1),
            /* an f16 store of odd kv_dim (two elements share a word) */
            kipp_vk_kv_store(g_vk, k1, KIPP_KV_TYPE_F16, 1, 3, x, 3, x, 3, 1, z, z, z, 1),
            /* a RoPE of odd head_dim */
            kipp_vk_rope(g_vk, x, 6, 1, 2, 3, x)};
        for (size_t i = 0; i < sizeof rcs / sizeof rcs[0]; i++) {
            KT_CHECK(rcs[i] == KIPP_VK_EINVAL, "refusal %zu returned %d", i, rcs[i]);
            note(st, rcs[i], KIPP_VK_EINVAL, 0);
        }
        note(st, (double)(kipp_vk_dispatches(g_vk) - before), 0, 0);
    }
    for (int i = 0; i < 6; i++) dfree(&b[i]);
    free(q), free(got), free(zeros);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int kt_vk_ops_misc(kipp_vk *vk) {
    g_vk = vk;
    g_fail = 0;
    op_stat rms = {"rmsnorm", 0, 0, 0, 0}, rope = {"rope", 0, 0, 0, 0};
    op_stat sw = {"swiglu", 0, 0, 0, 0}, ad = {"add", 0, 0, 0, 0};
    op_stat bias = {"add_bias", 0, 0, 0, 0}, gr = {"get_rows", 0, 0, 0, 0};
    op_stat msum = {"moe_sum", 0, 0, 0, 0}, kvs = {"kv_store", 0, 0, 0, 0};
    op_stat att = {"attention", 0, 0, 0, 0}, flt = {"att-fault", 0, 0, 0, 0};
    op_stat con = {"contract", 0, 0, 0, 0};
    double t = now();
    test_rmsnorm(&rms);
    report(&rms, &t);
    test_rope(&rope);
    report(&rope, &t);
    test_elementwise(&sw, &ad);
    report(&sw, &t);
    report(&ad, &t);
    test_bias(&bias);
    report(&bias, &t);
    test_get_rows(&gr);
    report(&gr, &t);
    test_moe_sum(&msum);
    report(&msum, &t);
    test_kv_store(&kvs);
    report(&kvs, &t);
    test_attention(&att, &flt);
    report(&att, &t);
    report(&flt, &t);
    test_contract(&con);
    report(&con, &t);
    return g_fail;
}
