/* ops_misc.c — GPU operator tests of ops.cu (kernels.h's "everything else"): RMSNorm, NEOX
 * RoPE, SwiGLU, the residual add, the bias add, the paged KV store, causal paged GQA
 * attention, and a mixture-of-experts layer's routing and weighted sum, each
 * against a host reference on random inputs over many shapes (odd sizes, padded strides,
 * unaligned pointers, in-place calls), KV types f32/f16/bf16, adversarial block tables
 * (reversed, interleaved, shared prefix blocks, random), and attention's KIPP_FAULT read
 * modes. Each op's bound is derived in the comment above its check; one line per op prints
 * the worst error as a fraction of its bound. The host side of the conversions and the KV
 * addressing is ops_math.h, itself checked against host_kv.c by the unit suite. Linked into
 * build/kipp_test_cuda only; needs a GPU. */
#include "backend/cuda/kernels.h"
#include "backend/cuda/ops_math.h"
#include "backend/moe.h"
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

/* ---- bias -------------------------------------------------------------------------------- */

/* x[t][i] + b[i]: one IEEE add on both sides, exact (bound 0); the row gaps stay untouched. */
static void test_bias(op_stat *st) {
    static const uint32_t shapes[][3] = {{896, 3, 0}, {128, 17, 5}, {1001, 2, 3}, {16, 64, 0}, {3, 1, 1}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const uint32_t n = shapes[c][0], n_tok = shapes[c][1];
        const size_t ld = n + shapes[c][2], total = ld * n_tok;
        float *x = malloc(total * 4), *b = malloc(n * 4), *got = malloc(total * 4);
        fill(x, total, 3.0f);
        fill(b, n, 0.5f);
        float *dx = up(x, total * 4), *db = up(b, n * 4);
        if (dx && db && ran(kipp_cuda_add_bias(dx, ld, db, n, n_tok, 0), "add_bias") &&
            down(got, dx, total * 4))
            for (size_t e = 0; e < total; e++) {
                const size_t i = e % ld;
                note(st, got[e], i < n ? x[e] + b[i] : x[e], 0);
            }
        cudaFree(dx);
        cudaFree(db);
        free(x);
        free(b);
        free(got);
    }
}

/* ---- mixture of experts ------------------------------------------------------------------ */

/* The routing kernel (a warp per token, 16 warps: the 512-token cases give each warp 32)
 * against moe.c's kipp_moe_route on the host, row by row. The device's
 * expf is within 2 ulp of the host's: each probability (one expf, a sum of n of them, a
 * division) is then within (4 + n) eps relative of the host's, a weight (renormalized: a sum
 * of k and a division more) within (6 + n + k) eps: the bounds below. The choice must be the
 * host's, except where the host's two candidates' probabilities lie within twice that bound
 * (a near tie that expf's rounding may order either way: counted in near_ties, reported,
 * not a failure); rows drawn from four values tie exactly and must match exactly. The pairs'
 * grouping must be exactly the counting sort of the device's own choice (tokens ascending
 * within an expert). */
static void test_moe_route(op_stat *choice, op_stat *prob, op_stat *grp, long *near_ties) {
    static const uint32_t cases[][4] = {/* n_tok, n_expert, k, kind (0 random, 1 ties) */
                                        {1, 8, 2, 0},   {5, 8, 2, 1},    {300, 128, 8, 0},
                                        {512, 128, 8, 1}, {64, 64, 1, 0}, {17, 160, 8, 0},
                                        {9, 3, 3, 0},   {256, 256, 4, 0}, {2, 1, 1, 0},
                                        {3, 1024, 8, 0}, {40, 1024, 2, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int norm = 0; norm < 2; norm++) {
            const uint32_t n_tok = cases[c][0], E = cases[c][1], k = cases[c][2];
            const size_t ld = E + (c & 1), P = (size_t)n_tok * k;
            float *lg = malloc(n_tok * ld * 4), *hp = malloc(n_tok * ld * 4);
            float *gp = malloc(n_tok * ld * 4), *hw = malloc(P * 4), *gw = malloc(P * 4);
            uint32_t *hc = malloc(P * 4), *gc = malloc(P * 4), *goff = malloc((E + 1) * 4);
            uint32_t *gslot = malloc(P * 4), *want_off = malloc((E + 2) * 4);
            int32_t *gtok = malloc(P * 4);
            for (size_t i = 0; i < n_tok * ld; i++)
                lg[i] = cases[c][3] ? (float)(rng() % 4) * 0.5f : frand() * 6.0f;
            memcpy(hp, lg, n_tok * ld * 4);
            for (uint32_t t = 0; t < n_tok; t++)
                kipp_moe_route(hp + t * ld, E, k, norm, hc + (size_t)t * k, hw + (size_t)t * k, 0, 0, 0);
            float *dlg = up(lg, n_tok * ld * 4), *dw = up(NULL, P * 4);
            uint32_t *dc = up(NULL, P * 4), *doff = up(NULL, (E + 1) * 4), *dslot = up(NULL, P * 4);
            int32_t *dtok = up(NULL, P * 4);
            if (dlg && dw && dc && doff && dslot && dtok &&
                ran(kipp_cuda_moe_route(dlg, ld, n_tok, E, k, norm, 0, NULL, NULL, NULL, dc, dw, doff, dtok,
                                        dslot, 0),
                    "moe_route") &&
                down(gp, dlg, n_tok * ld * 4) && down(gw, dw, P * 4) && down(gc, dc, P * 4) &&
                down(goff, doff, (E + 1) * 4) && down(gslot, dslot, P * 4) &&
                down(gtok, dtok, P * 4)) {
                const double pb = (4.0 + E) * FLT_EPSILON, wb = (6.0 + E + k) * FLT_EPSILON;
                for (uint32_t t = 0; t < n_tok; t++) {
                    for (uint32_t e = 0; e < E; e++)
                        note(prob, gp[t * ld + e], hp[t * ld + e], pb * hp[t * ld + e] + 1e-37);
                    for (uint32_t s2 = 0; s2 < k; s2++) {
                        const uint32_t a = hc[t * k + s2], b = gc[t * k + s2];
                        int same = a == b;
                        if (!same && b < E && cases[c][3] == 0 &&
                            fabs((double)hp[t * ld + a] - hp[t * ld + b]) <= 2 * pb * hp[t * ld + a]) {
                            (*near_ties)++;
                            break; /* the rest of the row follows the flipped choice */
                        }
                        note(choice, same ? 0.0 : 1.0, 0.0, 0);
                        if (same) note(prob, gw[t * k + s2], hw[t * k + s2], wb * hw[t * k + s2] + 1e-37);
                    }
                }
                /* the grouping of the device's choice */
                memset(want_off, 0, (E + 2) * 4);
                for (size_t i = 0; i < P; i++)
                    if (gc[i] < E) want_off[gc[i] + 1]++;
                for (uint32_t e = 0; e < E; e++) want_off[e + 1] += want_off[e];
                for (uint32_t e = 0; e <= E; e++) note(grp, goff[e], want_off[e], 0);
                for (size_t i = 0; i < P; i++) {
                    if (gc[i] >= E) {
                        note(grp, 1, 0, 0);
                        continue;
                    }
                    const uint32_t g = want_off[gc[i]]++;
                    note(grp, gslot[i], g, 0);
                    note(grp, gtok[g], (double)(i / k), 0);
                }
            }
            cudaFree(dlg);
            cudaFree(dw);
            cudaFree(dc);
            cudaFree(doff);
            cudaFree(dslot);
            cudaFree(dtok);
            free(lg), free(hp), free(gp), free(hw), free(gw), free(hc), free(gc), free(goff);
            free(gslot), free(want_off), free(gtok);
        }
}

/* The gates' pin on the device: one layer's routing of 40 tokens (positions out of order) under
 * a record (moe.h's trace in PIN mode) of 3 slots per (layer, position), each token's cell one
 * of six cases: its own token at a small L1 distance holding its own set, another set at a
 * near-tie margin or at a wide one; its token too far off (no match); another token with its
 * exact probabilities beside its own token farther off with another set at a near-tie (the
 * token decides); two slots of its token, the nearer differing. The device's choices, weights
 * and counts against kipp_moe_route's under the same trace on the host (logits drawn 1/8
 * apart: no near-tie of the device's own, and the device's probabilities within a few ulp of
 * the host's, far from the distances that decide a match). */
static void test_moe_pin(op_stat *st) {
    enum { NL = 3, NP = 40, S = 3, K = 4, N = 16 };
    const uint32_t layer = 2;
    static int32_t tok[NL * NP * S];
    static uint32_t rec[NL * NP * S * K];
    static float margin[NL * NP * S], probs[NL * NP * S * N];
    uint32_t pos[NP], chosen[NP * K], gchosen[NP * K], counts[3];
    int32_t ids[NP];
    float lg[NP * N], hp[NP * N], w[NP * K], gw[NP * K];
    for (uint32_t i = 0; i < NL * NP * S; i++) tok[i] = -1, margin[i] = 0.5f;
    for (uint32_t i = 0; i < NL * NP * S * K; i++) rec[i] = i % N;
    for (uint32_t i = 0; i < NL * NP * S * N; i++) probs[i] = 1.0f / N;
    for (uint32_t t = 0; t < NP; t++) {
        pos[t] = (t * 7) % NP; /* positions out of order */
        ids[t] = (int32_t)(rng() % 5000u);
        for (uint32_t e = 0; e < N; e++) lg[t * N + e] = (float)(rng() % 64) / 8.0f;
        float p[N];
        uint32_t own[K], other[K];
        memcpy(p, lg + t * N, sizeof p);
        kipp_om_moe_topk(p, N, K, own);
        /* other: own with its last choice swapped for the first expert left out; both as sets */
        uint32_t out = N;
        for (uint32_t e = N; e-- > 0;) {
            int taken = 0;
            for (uint32_t i = 0; i < K; i++) taken |= own[i] == e;
            if (!taken) out = e;
        }
        memcpy(other, own, sizeof own);
        other[K - 1] = out;
        for (uint32_t *set = own; set; set = set == own ? other : NULL)
            for (uint32_t i = 1; i < K; i++)
                for (uint32_t j = i; j > 0 && set[j - 1] > set[j]; j--) {
                    const uint32_t x = set[j];
                    set[j] = set[j - 1], set[j - 1] = x;
                }
        const size_t base = ((size_t)layer * NP + pos[t]) * S;
#define SLOT(s_, t_, d_, set_, m_)                                                                 \
    do {                                                                                           \
        tok[base + (s_)] = (t_);                                                                   \
        float *q_ = probs + (base + (s_)) * N;                                                     \
        memcpy(q_, p, sizeof p);                                                                   \
        q_[0] += (d_) / 2, q_[1] -= (d_) / 2;                                                      \
        memcpy(rec + (base + (s_)) * K, (set_), sizeof own);                                       \
        margin[base + (s_)] = (m_);                                                                \
    } while (0)
        switch (t % 6) {
        case 0: SLOT(0, ids[t], 0.01f, own, 0.01f); break;
        case 1: SLOT(1, ids[t], 0.01f, other, 0.01f); break;
        case 2: SLOT(2, ids[t], 0.01f, other, 0.5f); break;
        case 3: SLOT(0, ids[t], 0.3f, other, 0.01f); break;
        case 4:
            SLOT(0, ids[t] + 1, 0.0f, own, 0.5f);
            SLOT(1, ids[t], 0.04f, other, 0.01f);
            break;
        default:
            SLOT(0, ids[t], 0.04f, own, 0.5f);
            SLOT(2, ids[t], 0.01f, other, 0.02f);
            break;
        }
#undef SLOT
    }
    kipp_moe_trace tr = {.mode = KIPP_MOE_TRACE_PIN, .n_layer = NL, .n_pos = NP, .n_slot = S, .k = K,
                         .n_exp = N, .delta = 0.05f, .token = tok, .chosen = rec, .margin = margin,
                         .probs = probs};
    memcpy(hp, lg, sizeof lg);
    kipp_moe_trace_use(&tr);
    for (uint32_t t = 0; t < NP; t++)
        kipp_moe_route(hp + t * N, N, K, 1, chosen + t * K, w + t * K, layer, pos[t], ids[t]);
    kipp_moe_trace_use(NULL);
    uint32_t zero[3] = {0, 0, 0}, *drec = up(rec, sizeof rec), *dpos = up(pos, sizeof pos);
    uint32_t *dcnt = up(zero, sizeof zero);
    int32_t *dtoks = up(tok, sizeof tok), *dids = up(ids, sizeof ids);
    float *dmar = up(margin, sizeof margin), *dprob = up(probs, sizeof probs);
    float *dlg = up(lg, sizeof lg), *dw = up(NULL, sizeof gw);
    uint32_t *dc = up(NULL, sizeof gchosen), *doff = up(NULL, (N + 1) * 4), *dslot = up(NULL, sizeof gchosen);
    int32_t *dtok = up(NULL, sizeof gchosen);
    const kipp_cuda_moe_pin pin = {{dtoks, drec, dmar, dprob, NL, NP, S, K, N, 0.05f}, dcnt};
    if (drec && dpos && dcnt && dtoks && dids && dmar && dprob && dlg && dw && dc && doff && dslot && dtok &&
        ran(kipp_cuda_moe_route(dlg, N, NP, N, K, 1, layer, dpos, dids, &pin, dc, dw, doff, dtok, dslot, 0),
            "moe_route (pinned)") &&
        down(gchosen, dc, sizeof gchosen) && down(gw, dw, sizeof gw) && down(counts, dcnt, sizeof counts)) {
        const double wb = (6.0 + N + K) * FLT_EPSILON;
        for (uint32_t i = 0; i < NP * K; i++) {
            note(st, gchosen[i], chosen[i], 0);
            note(st, gw[i], w[i], wb * w[i] + 1e-37);
        }
        note(st, counts[0], atomic_load(&tr.pinned), 0);
        note(st, counts[1], atomic_load(&tr.mismatched), 0);
        float widest;
        memcpy(&widest, &counts[2], sizeof widest);
        note(st, counts[0] ? widest : 0.0f, atomic_load(&tr.pinned) ? tr.worst_pinned : 0.0f, 0);
        /* the cases above: 7 + 6 + 6 pinned (cases 1, 4, 5), 7 mismatched (case 2) */
        note(st, atomic_load(&tr.pinned), 19, 0);
        note(st, atomic_load(&tr.mismatched), 7, 0);
    }
    cudaFree(drec), cudaFree(dpos), cudaFree(dcnt), cudaFree(dtoks), cudaFree(dids), cudaFree(dmar);
    cudaFree(dprob), cudaFree(dlg), cudaFree(dw), cudaFree(dc), cudaFree(doff), cudaFree(dslot);
    cudaFree(dtok);
}

/* The weighted sum: the host's ((0 + w0 y0) + w1 y1) + ... with each operation rounded (C11:
 * no contraction), ops_math.h's kipp_om_mul_add on the device: exact; stored over what the
 * output held, the padding between its rows left as it was. */
static void test_moe_sum(op_stat *st) {
    static const uint32_t cases[][3] = {{1, 64, 2}, {8, 2048, 8}, {37, 96, 1}, {200, 128, 4}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint32_t n_tok = cases[c][0], n = cases[c][1], k = cases[c][2];
        const size_t P = (size_t)n_tok * k, ldx = n + 3, ldy = n + (c & 1);
        float *x = malloc(n_tok * ldx * 4), *ye = malloc(P * ldy * 4), *w = malloc(P * 4);
        float *got = malloc(n_tok * ldx * 4);
        uint32_t *slot = malloc(P * 4);
        fill(x, n_tok * ldx, 4.0f);
        fill(ye, P * ldy, 2.0f);
        for (size_t i = 0; i < P; i++) w[i] = (frand() + 1.0f) * 0.5f;
        for (size_t i = 0; i < P; i++) slot[i] = (uint32_t)i;
        for (size_t i = P; i-- > 1;) { /* a random permutation: pairs in some group order */
            const size_t j = rng() % (i + 1);
            const uint32_t tmp = slot[i];
            slot[i] = slot[j];
            slot[j] = tmp;
        }
        float *dx = up(x, n_tok * ldx * 4), *dy = up(ye, P * ldy * 4), *dw = up(w, P * 4);
        uint32_t *ds = up(slot, P * 4);
        if (dx && dy && dw && ds &&
            ran(kipp_cuda_moe_sum(dx, ldx, dy, ldy, dw, ds, n, n_tok, k, 0), "moe_sum") &&
            down(got, dx, n_tok * ldx * 4))
            for (uint32_t t = 0; t < n_tok; t++)
                for (size_t i = 0; i < ldx; i++) {
                    float want = x[t * ldx + i];
                    if (i < n) {
                        float acc = 0.0f;
                        for (uint32_t s2 = 0; s2 < k; s2++)
                            acc = acc + w[t * k + s2] * ye[(size_t)slot[t * k + s2] * ldy + i];
                        want = acc;
                    }
                    note(st, got[t * ldx + i], want, 0);
                }
        cudaFree(dx);
        cudaFree(dy);
        cudaFree(dw);
        cudaFree(ds);
        free(x), free(ye), free(w), free(got), free(slot);
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
    op_stat flt = {"att-fault", 0, 0, 0, 0}, bias = {"add_bias", 0, 0, 0, 0};
    op_stat rchoice = {"moe-choice", 0, 0, 0, 0}, rprob = {"moe-prob", 0, 0, 0, 0};
    op_stat rgrp = {"moe-groups", 0, 0, 0, 0}, msum = {"moe_sum", 0, 0, 0, 0};
    op_stat rpin = {"moe-pin", 0, 0, 0, 0};
    long near_ties = 0;
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
    test_bias(&bias);
    report(&bias);
    test_moe_route(&rchoice, &rprob, &rgrp, &near_ties);
    report(&rchoice);
    report(&rprob);
    report(&rgrp);
    printf("cuda op moe-choice: %ld near ties ordered otherwise by the device's expf (not failures)\n",
           near_ties);
    test_moe_pin(&rpin);
    report(&rpin);
    test_moe_sum(&msum);
    report(&msum);
    return g_fail;
}
