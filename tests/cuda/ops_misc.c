/* ops_misc.c — GPU operator tests of ops.cu (kernels.h's "everything else"): RMSNorm, NEOX
 * RoPE, SwiGLU, the residual add, the paged KV store and causal paged GQA attention, each
 * against a host reference on random inputs over many shapes (odd sizes, padded strides,
 * unaligned pointers, in-place calls), KV types f32/f16/bf16, adversarial block tables
 * (reversed, interleaved, shared prefix blocks, random), and attention's KIPP_FAULT read
 * modes. Each op's bound is derived in the comment above its check; one line per op prints
 * the worst error as a fraction of its bound. The host side of the conversions and the KV
 * addressing is ops_math.h, itself checked against host_kv.c by the unit suite. Linked into
 * build/kipp_test_cuda only; needs a GPU. */
#include "backend/cuda/kernels.h"
#include "backend/cuda/ops_math.h"
#include "kt.h"

#include <cuda_runtime_api.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kt_cuda_ops_misc(void);

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

/* ---- device helpers: every failure is counted, never fatal ------------------------------ */

static int g_fail;

static int ck(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 1;
    fprintf(stderr, "FAIL cuda ops_misc: %s: %s\n", what, cudaGetErrorString(e));
    g_fail++;
    kt_failed++;
    return 0;
}

static void *up(const void *h, size_t n) {
    void *d = NULL;
    if (!ck(cudaMalloc(&d, n ? n : 1), "cudaMalloc")) return NULL;
    if (h && n && !ck(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), "upload")) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

static int down(void *h, const void *d, size_t n) {
    return ck(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), "download");
}

/* A launcher's status, then the stream's (an illegal address surfaces at the sync). */
static int ran(int status, const char *what) {
    if (!ck((cudaError_t)status, what)) return 0;
    return ck(cudaDeviceSynchronize(), what);
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
    s->n++;
    if (r > s->worst || isnan(got) != isnan(want)) {
        s->worst = isnan(got) != isnan(want) ? INFINITY : r;
        s->err_at = err;
    }
    if (!(r <= 1.0) && !(isnan(got) && isnan(want))) {
        if (s->bad < 5)
            fprintf(stderr, "  %s: got %.9g want %.9g (|err| %.3g > bound %.3g)\n", s->name, got,
                    want, err, bound);
        s->bad++;
    }
}

static void report(const op_stat *s) {
    printf("cuda op %-10s %8ld values, worst |err| %.3g = %.3g of its bound%s\n", s->name, s->n,
           s->err_at, s->worst, s->bad ? "  FAIL" : "");
    KT_CHECK(s->bad == 0 && s->n > 0, "cuda %s: %ld of %ld values out of bound", s->name, s->bad,
             s->n);
    if (s->bad || s->n == 0) g_fail++;
}

/* ---- rmsnorm ----------------------------------------------------------------------------- */

/* Reference: cpu-ref's rmsnorm verbatim (sequential double sum). The GPU sums the same exact
 * double squares in another order: the double results differ by < n 2^-53 relative, so
 * (float)(ss/n) and then scale differ by at most 1 float ulp; out = (x * scale) * w with
 * each product rounded then differs by <= 1 ulp + 2 roundings: bound 4 eps |ref|. */
static void test_rmsnorm(op_stat *st) {
    static const uint32_t shapes[][3] = {{64, 7, 0}, {128, 33, 5}, {1000, 5, 3}, {1024, 4, 0},
                                         {4096, 3, 0}, {4097, 2, 1}, {5120, 2, 0}, {1, 3, 0}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int inplace = 0; inplace < 2; inplace++) {
            const uint32_t n = shapes[c][0], rows = shapes[c][1];
            const size_t ld = n + shapes[c][2], total = ld * rows;
            float *x = malloc(total * sizeof *x), *w = malloc(n * sizeof *w);
            float *got = malloc(total * sizeof *got);
            fill(x, total, 3.0f);
            fill(w, n, 1.5f);
            const float eps = 1e-6f;
            float *dx = up(x, total * 4), *dw = up(w, n * 4);
            float *dout = inplace ? dx : up(NULL, total * 4);
            if (dx && dw && dout &&
                ran(kipp_cuda_rmsnorm(dx, ld, dw, n, rows, eps, dout, ld, 0), "rmsnorm") &&
                down(got, dout, total * 4))
                for (uint32_t r = 0; r < rows; r++) {
                    const float *xr = x + r * ld;
                    double ss = 0.0;
                    for (uint32_t i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
                    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
                    for (uint32_t i = 0; i < n; i++) {
                        const float want = xr[i] * scale * w[i];
                        note(st, got[r * ld + i], want, 4 * FLT_EPSILON * fabsf(want) + 1e-37);
                    }
                }
            cudaFree(dx);
            cudaFree(dw);
            if (!inplace) cudaFree(dout);
            free(x);
            free(w);
            free(got);
        }
}

/* ---- rope -------------------------------------------------------------------------------- */

/* Reference: cpu-ref's rope_head on host tables (angles pos * 1e6^(-2i/D) in double, as
 * cpu-ref). The kernel rounds each product and the sum separately, as the host does, so the
 * results should be identical; the bound allows one rounding of either product
 * (eps (|a c| + |b s|)) in case a host compiler contracts. */
static void test_rope(op_stat *st) {
    static const uint32_t shapes[][4] = {
        {1, 8, 64, 0}, {17, 14, 128, 0}, {64, 32, 128, 0}, {5, 2, 64, 3}, {33, 8, 128, 7}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const uint32_t n_tok = shapes[c][0], n_head = shapes[c][1], D = shapes[c][2];
        const uint32_t half = D / 2;
        const size_t ld = (size_t)n_head * D + shapes[c][3], total = ld * n_tok;
        float *x = malloc(total * 4), *got = malloc(total * 4);
        float *ct = malloc((size_t)n_tok * half * 4), *stb = malloc((size_t)n_tok * half * 4);
        fill(x, total, 2.0f);
        for (uint32_t t = 0; t < n_tok; t++) {
            const uint32_t pos = rng() % 40000;
            for (uint32_t i = 0; i < half; i++) {
                const double th = (double)pos * pow(1e6, -2.0 * i / (double)D);
                ct[t * half + i] = (float)cos(th);
                stb[t * half + i] = (float)sin(th);
            }
        }
        float *dx = up(x, total * 4), *dc = up(ct, (size_t)n_tok * half * 4);
        float *ds = up(stb, (size_t)n_tok * half * 4);
        if (dx && dc && ds && ran(kipp_cuda_rope(dx, ld, n_tok, n_head, D, dc, ds, 0), "rope") &&
            down(got, dx, total * 4))
            for (uint32_t t = 0; t < n_tok; t++)
                for (uint32_t h = 0; h < n_head; h++)
                    for (uint32_t i = 0; i < half; i++) {
                        const float *hp = x + t * ld + (size_t)h * D;
                        const float a = hp[i], b = hp[i + half];
                        const float c0 = ct[t * half + i], s0 = stb[t * half + i];
                        const float ac = a * c0, bs = b * s0, as = a * s0, bc = b * c0;
                        const double bnd = FLT_EPSILON * (fabsf(a) + fabsf(b)) + 1e-37;
                        note(st, got[t * ld + (size_t)h * D + i], ac - bs, bnd);
                        note(st, got[t * ld + (size_t)h * D + i + half], as + bc, bnd);
                    }
        /* the padding between rows must be untouched */
        for (uint32_t t = 0; t < n_tok; t++)
            for (size_t i = (size_t)n_head * D; i < ld; i++)
                note(st, got[t * ld + i], x[t * ld + i], 0);
        cudaFree(dx);
        cudaFree(dc);
        cudaFree(ds);
        free(x);
        free(got);
        free(ct);
        free(stb);
    }
}

/* ---- swiglu and add ---------------------------------------------------------------------- */

/* swiglu reference: silu(g) * u with the host's expf. CUDA's expf is within 2 ulp; 1 + e,
 * the division and the product add 3 roundings, and e's error is damped by 1/(1+e): bound
 * 8 eps |ref|. add: one rounding in the same IEEE add on both sides: exact (bound 0). Both
 * run aligned (the float4 path) and at a one-float offset with odd n (the scalar path). */
static void test_elementwise(op_stat *sw, op_stat *ad) {
    static const uint32_t shapes[][3] = {{4096, 3, 0}, {12288, 2, 0}, {1001, 5, 3}, {64, 64, 4},
                                         {17, 9, 0}, {3, 1, 0}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int off = 0; off < 2; off++)
            for (int inplace = 0; inplace < 2; inplace++) {
                const uint32_t n = shapes[c][0] - (uint32_t)off, n_tok = shapes[c][1];
                const size_t ld = shapes[c][0] + shapes[c][2], total = ld * n_tok + 1;
                float *g = malloc(total * 4), *u = malloc(total * 4), *got = malloc(total * 4);
                fill(g, total, 12.0f);
                fill(u, total, 2.0f);
                float *dg = up(g, total * 4), *du = up(u, total * 4);
                float *dout = inplace ? dg : up(g, total * 4);
                if (dg && du && dout &&
                    ran(kipp_cuda_swiglu(dg + off, du + off, ld, n, n_tok, dout + off, 0),
                        "swiglu") &&
                    down(got, dout, total * 4))
                    for (uint32_t t = 0; t < n_tok; t++)
                        for (uint32_t i = 0; i < n; i++) {
                            const size_t e = off + t * ld + i;
                            const float want = g[e] / (1.0f + expf(-g[e])) * u[e];
                            note(sw, got[e], want, 8 * FLT_EPSILON * fabsf(want) + 1e-37);
                        }
                if (dg && du &&
                    ck(cudaMemcpy(dg, g, total * 4, cudaMemcpyHostToDevice), "upload") &&
                    ran(kipp_cuda_add(dg + off, du + off, ld, n, n_tok, 0), "add") &&
                    down(got, dg, total * 4))
                    for (size_t e = 0; e < total; e++) { /* every element: the gaps unchanged */
                        const size_t t = e >= (size_t)off ? (e - off) / ld : 0;
                        const size_t i = e >= (size_t)off ? (e - off) % ld : ld;
                        const int in = e >= (size_t)off && t < n_tok && i < n;
                        note(ad, got[e], in ? g[e] + u[e] : g[e], 0);
                    }
                cudaFree(dg);
                cudaFree(du);
                if (!inplace) cudaFree(dout);
                free(g);
                free(u);
                free(got);
            }
}

/* ---- paged KV: tables, storage -------------------------------------------------------- */

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

/* ---- kv_store ---------------------------------------------------------------------------- */

/* Exact: the stored bytes must equal ops_math.h's rounding at kipp_om_kv_offset's place, and
 * every other byte of the storage must keep its previous value. */
static void test_kv_store(op_stat *st) {
    static const uint32_t types[] = {KIPP_OM_KV_F32, KIPP_OM_KV_F16, KIPP_OM_KV_BF16};
    for (int ti = 0; ti < 3; ti++)
        for (int kind = 0; kind < TBL_N; kind++) {
            const uint32_t type = types[ti], elt = kipp_om_kv_elt(type);
            const uint32_t n_layer = 3, bs = kind & 1 ? 7 : 16, kv_dim = (kind & 2) ? 1024 : 136;
            const uint32_t n_seq = 3, ctx[3] = {40, 1, 100}, max_blocks = 16;
            uint32_t nb[3], tables[3 * 16];
            for (int s = 0; s < 3; s++) nb[s] = (ctx[s] + bs - 1) / bs;
            const int k2 = kind == TBL_SHARED ? TBL_RANDOM : kind; /* stores need private blocks */
            const uint32_t n_blocks = make_tables(k2, n_seq, nb, max_blocks, tables);
            const kipp_om_kv_geom g = {n_layer, bs, kv_dim, n_blocks, 0};
            const size_t kv_bytes = (size_t)n_blocks * 2 * n_layer * bs * kv_dim * elt;
            unsigned char *kv = malloc(kv_bytes), *got = malloc(kv_bytes);
            for (size_t i = 0; i < kv_bytes; i++) kv[i] = (unsigned char)rng();
            /* tokens: every position of each sequence, in an order that mixes sequences */
            uint32_t n_tok = 0, seq_of[141], pos[141];
            for (uint32_t p = 0; p < 100; p++)
                for (uint32_t s = 0; s < n_seq; s++)
                    if (p < ctx[s]) {
                        seq_of[n_tok] = s;
                        pos[n_tok++] = p;
                    }
            const uint32_t layer = (uint32_t)kind % n_layer;
            const size_t ldk = kv_dim + 4, ldv = kv_dim + 9;
            float *k = malloc(n_tok * ldk * 4), *v = malloc(n_tok * ldv * 4);
            fill(k, n_tok * ldk, 70000.0f); /* past f16's range too: inf must round alike */
            fill(v, n_tok * ldv, 1e-5f);    /* f16 subnormals */
            void *dkv = up(kv, kv_bytes);
            float *dk = up(k, n_tok * ldk * 4), *dv = up(v, n_tok * ldv * 4);
            uint32_t *dseq = up(seq_of, n_tok * 4), *dpos = up(pos, n_tok * 4);
            uint32_t *dtab = up(tables, sizeof tables);
            if (dkv && dk && dv && dseq && dpos && dtab &&
                ran(kipp_cuda_kv_store(dkv, type, n_layer, bs, kv_dim, layer, dk, ldk, dv, ldv,
                                       n_tok, dseq, dpos, dtab, max_blocks, 0),
                    "kv_store") &&
                down(got, dkv, kv_bytes)) {
                for (uint32_t t = 0; t < n_tok; t++) {
                    const uint32_t *tab = tables + seq_of[t] * max_blocks;
                    const size_t ko = kipp_om_kv_offset(&g, tab, layer, pos[t], 0, 0);
                    const size_t vo = kipp_om_kv_offset(&g, tab, layer, pos[t], 1, 0);
                    for (uint32_t d = 0; d < kv_dim; d++) {
                        kipp_om_kv_store(type, kv, ko + d, k[t * ldk + d]);
                        kipp_om_kv_store(type, kv, vo + d, v[t * ldv + d]);
                    }
                }
                long diff = 0;
                for (size_t i = 0; i < kv_bytes; i++) diff += kv[i] != got[i];
                st->n += (long)kv_bytes;
                if (diff) {
                    fprintf(stderr, "  kv_store: %ld bytes differ (type %u, %s tables)\n", diff,
                            type, tbl_names[k2]);
                    st->bad += diff;
                    st->worst = INFINITY;
                }
            }
            cudaFree(dkv);
            cudaFree(dk);
            cudaFree(dv);
            cudaFree(dseq);
            cudaFree(dpos);
            cudaFree(dtab);
            free(kv);
            free(got);
            free(k);
            free(v);
        }
}

/* ---- attention --------------------------------------------------------------------------- */

typedef struct {
    uint32_t n_head, n_kv_head, D, type, bs;
    uint32_t n_seq;
    uint32_t ctx[4];   /* each sequence's context after this step */
    uint32_t n_new[4]; /* its query tokens: the last n_new positions */
    int tables, fault;
} att_case;

/* Reference: cpu-ref's attention in double over the values the storage holds (read through
 * kipp_om_kv_offset with the same fault mode). Bound, per output row, from f32's error
 * terms (eps = 2^-23, |q|, |k|, |v| as drawn):
 *   scores: the f32 dot of D terms errs by <= D eps sum_i |q_i k_i| (the standard
 *     recursive-summation bound), times the scale: Es = scale D eps max_j sum_i |q_i k_ij|;
 *     a score error Es moves the softmax weights by a factor within e^(+-2 Es), so the
 *     output by <= 2 Es max|v| (to first order);
 *   sums: l and acc are sums of 32 terms per tile, carried over n/32 tiles by one multiply
 *     (alpha) and one add each, then merged over the splits: a relative error within
 *     (32 + 2 n/32 + 2 n_split) eps, for both, plus expf's 2 ulp per weight and the final
 *     division: (2 (32 + 2 n/32 + 2 n_split) + 8) eps max|v|.
 * Seen errors are orders of magnitude below this worst case; the printed line shows them. */
static void test_attention_case(op_stat *st, const att_case *c) {
    const uint32_t D = c->D, n_head = c->n_head, n_kv = c->n_kv_head, kv_dim = n_kv * D;
    const uint32_t n_layer = 2, layer = 1, bs = c->bs, group = n_head / n_kv;
    const uint32_t elt = kipp_om_kv_elt(c->type);
    uint32_t nb[4], max_blocks = 0, max_ctx = 0, n_tok = 0;
    for (uint32_t s = 0; s < c->n_seq; s++) {
        nb[s] = (c->ctx[s] + bs - 1) / bs;
        max_blocks = nb[s] + 1 > max_blocks ? nb[s] + 1 : max_blocks;
        max_ctx = c->ctx[s] > max_ctx ? c->ctx[s] : max_ctx;
        n_tok += c->n_new[s];
    }
    uint32_t *tables = malloc((size_t)c->n_seq * max_blocks * 4);
    const uint32_t n_blocks = make_tables(c->tables, c->n_seq, nb, max_blocks, tables);
    const kipp_om_kv_geom g = {n_layer, bs, kv_dim, n_blocks, c->fault};
    const size_t n_elts = (size_t)n_blocks * 2 * n_layer * bs * kv_dim;
    void *kv = malloc(n_elts * elt);
    for (size_t i = 0; i < n_elts; i++) kipp_om_kv_store(c->type, kv, i, frand());
    /* tokens: sequences in order, each sequence's new positions ascending */
    uint32_t *seq_of = malloc(n_tok * 4), *pos = malloc(n_tok * 4), t = 0;
    for (uint32_t s = 0; s < c->n_seq; s++)
        for (uint32_t i = 0; i < c->n_new[s]; i++, t++) {
            seq_of[t] = s;
            pos[t] = c->ctx[s] - c->n_new[s] + i;
        }
    const size_t ld_q = (size_t)n_head * D + 3, ld_out = (size_t)n_head * D + 5;
    float *q = malloc(n_tok * ld_q * 4), *got = malloc(n_tok * ld_out * 4);
    fill(q, n_tok * ld_q, 4.0f); /* scores up to ~+-4 sqrt(D)/3: peaked softmax rows */
    const size_t scratch_bytes = kipp_cuda_attention_scratch_bytes(n_tok, n_head, D, max_ctx);
    void *dkv = up(kv, n_elts * elt), *dscratch = up(NULL, scratch_bytes);
    float *dq = up(q, n_tok * ld_q * 4), *dout = up(NULL, n_tok * ld_out * 4);
    uint32_t *dseq = up(seq_of, n_tok * 4), *dpos = up(pos, n_tok * 4);
    uint32_t *dtab = up(tables, (size_t)c->n_seq * max_blocks * 4);
    if (c->fault) kipp_cuda_set_fault(c->fault, n_blocks);
    const int ok = dkv && dscratch && dq && dout && dseq && dpos && dtab &&
                   ran(kipp_cuda_attention(dq, ld_q, dkv, c->type, n_layer, bs, kv_dim, layer,
                                           n_head, n_kv, D, n_tok, dseq, dpos, dtab, max_blocks,
                                           max_ctx, dscratch, dout, ld_out, 0),
                       "attention") &&
                   down(got, dout, n_tok * ld_out * 4);
    if (c->fault) kipp_cuda_set_fault(0, 0);
    const long bad0 = st->bad;
    if (ok) {
        const double scale = 1.0 / sqrt((double)D), eps = FLT_EPSILON;
        const uint32_t n_split_max = max_ctx / 128 + 2; /* >= the kernel's split count */
        double *sc = malloc((size_t)max_ctx * sizeof *sc), *o = malloc(D * sizeof *o);
        float *krow = malloc(D * 4);
        for (t = 0; t < n_tok; t++) {
            const uint32_t *tab = tables + seq_of[t] * max_blocks, n = pos[t] + 1;
            for (uint32_t h = 0; h < n_head; h++) {
                const float *qh = q + t * ld_q + (size_t)h * D;
                const size_t hoff = (size_t)(h / group) * D;
                double mx = -INFINITY, qk_abs = 0, vmax = 0;
                for (uint32_t j = 0; j < n; j++) {
                    const size_t ko = kipp_om_kv_offset(&g, tab, layer, j, 0, 1) + hoff;
                    double dot = 0, a = 0;
                    for (uint32_t i = 0; i < D; i++) {
                        krow[i] = kipp_om_kv_load(c->type, kv, ko + i);
                        dot += (double)qh[i] * krow[i];
                        a += fabs((double)qh[i] * krow[i]);
                    }
                    sc[j] = dot * scale;
                    qk_abs = a > qk_abs ? a : qk_abs;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                double sum = 0;
                for (uint32_t j = 0; j < n; j++) sum += (sc[j] = exp(sc[j] - mx));
                memset(o, 0, D * sizeof *o);
                for (uint32_t j = 0; j < n; j++) {
                    const size_t vo = kipp_om_kv_offset(&g, tab, layer, j, 1, 1) + hoff;
                    for (uint32_t i = 0; i < D; i++) {
                        const double v = kipp_om_kv_load(c->type, kv, vo + i);
                        o[i] += sc[j] / sum * v;
                        vmax = fabs(v) > vmax ? fabs(v) : vmax;
                    }
                }
                const double es = scale * D * eps * qk_abs;
                const double bound =
                    vmax * (2 * es + (2.0 * (32 + 2.0 * n / 32 + 2.0 * n_split_max) + 8) * eps) +
                    1e-30;
                for (uint32_t i = 0; i < D; i++)
                    note(st, got[t * ld_out + (size_t)h * D + i], o[i], bound);
            }
        }
        free(sc);
        free(o);
        free(krow);
    }
    if (st->bad != bad0)
        fprintf(stderr,
                "  attention case: heads %u/%u D %u kv type %u block %u %s tables fault %d, "
                "%u tokens, max ctx %u\n",
                n_head, n_kv, D, c->type, bs, tbl_names[c->tables], c->fault, n_tok, max_ctx);
    cudaFree(dkv);
    cudaFree(dscratch);
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(dseq);
    cudaFree(dpos);
    cudaFree(dtab);
    free(tables);
    free(kv);
    free(seq_of);
    free(pos);
    free(q);
    free(got);
}

static void test_attention(op_stat *st, op_stat *fault_st) {
    static const uint32_t heads[][2] = {{8, 8}, {16, 8}, {32, 8}, {14, 2}};
    static const uint32_t types[] = {KIPP_OM_KV_F32, KIPP_OM_KV_F16, KIPP_OM_KV_BF16};
    int k = 0;
    for (int hi = 0; hi < 4; hi++)
        for (uint32_t D = 64; D <= 128; D += 64)
            for (int ti = 0; ti < 3; ti++, k++) {
                const uint32_t bs = k % 3 == 2 ? 7 : 16;
                /* decode: one token each of three sequences at contexts 1, 17, 255 */
                const att_case dec = {heads[hi][0], heads[hi][1], D, types[ti], bs, 3,
                                      {1, 17, 255, 0}, {1, 1, 1, 0}, k % TBL_N, 0};
                test_attention_case(st, &dec);
                /* prefill: 64 tokens of three sequences, one from position 0, two after a
                 * cached past (tiles of query tokens straddle the sequence boundaries) */
                const att_case pre = {heads[hi][0], heads[hi][1], D, types[ti], bs, 3,
                                      {5, 212, 47, 0}, {5, 12, 47, 0}, (k + 1) % TBL_N, 0};
                test_attention_case(st, &pre);
                /* n_tok 1..16 of one sequence (the decode plan with several query tokens) */
                const att_case spec = {heads[hi][0], heads[hi][1], D, types[ti], bs, 1,
                                       {90 + (uint32_t)k, 0, 0, 0}, {1 + (uint32_t)k % 16, 0, 0, 0},
                                       (k + 2) % TBL_N, 0};
                test_attention_case(st, &spec);
            }
    /* long contexts: the split decode path (33 splits) and a split prefill chunk */
    for (int hi = 0; hi < 4; hi++) {
        const att_case dec = {heads[hi][0], heads[hi][1], 128, types[hi % 3], 16, 2,
                              {4097, 33, 0, 0}, {1, 1, 0, 0}, hi % TBL_N, 0};
        test_attention_case(st, &dec);
        const att_case pre = {heads[hi][0], heads[hi][1], 128, types[(hi + 1) % 3], 16, 1,
                              {4097, 0, 0, 0}, {40, 0, 0, 0}, (hi + 1) % TBL_N, 0};
        test_attention_case(st, &pre);
    }
    /* the KIPP_FAULT read modes: the kernel must read what the faulty host function reads */
    for (int mode = 1; mode <= 4; mode++) {
        const att_case f = {16, 8, 64, KIPP_OM_KV_F16, 16, 3, {40, 17, 300, 0}, {1, 1, 20, 0},
                            TBL_RANDOM, mode};
        test_attention_case(fault_st, &f);
    }
}

int kt_cuda_ops_misc(void) {
    g_fail = 0;
    op_stat rms = {"rmsnorm", 0, 0, 0, 0}, rope = {"rope", 0, 0, 0, 0};
    op_stat sw = {"swiglu", 0, 0, 0, 0}, ad = {"add", 0, 0, 0, 0};
    op_stat kvs = {"kv_store", 0, 0, 0, 0}, att = {"attention", 0, 0, 0, 0};
    op_stat flt = {"att-fault", 0, 0, 0, 0};
    test_rmsnorm(&rms);
    report(&rms);
    test_rope(&rope);
    report(&rope);
    test_elementwise(&sw, &ad);
    report(&sw);
    report(&ad);
    test_kv_store(&kvs);
    report(&kvs);
    test_attention(&att, &flt);
    report(&att);
    report(&flt);
    return g_fail;
}
