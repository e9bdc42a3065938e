/* gates_cpu.c — the cpu backend's gate: for every manifest prompt, every position's logits
 * from `cpu` (each ISA level this machine runs, forced through kipp_ctx_params.isa, on 1 and 2
 * threads) must give cpu-ref's argmax and NMSE = sum((a-b)^2)/sum(b^2) <= 1e-4, both token
 * by token and for the whole prompt in one call. Does not compare against the golden vectors
 * (cpu-ref's own gates do that) nor time anything. */
#include "gates.h"

#include "backend/cpu/kernels.h"
#include "gate_common.h"
#include "kt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CPU_NMSE_TOL 1e-4

static double nmse(const float *a, const float *b, uint32_t n) {
    double num = 0.0, den = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (num != num) return 1e30; /* NaN: as far as it gets */
    return den > 0.0 ? num / den : num;
}

/* One cpu configuration against cpu-ref (g->c) over every prompt; returns the worst NMSE. */
static double run_config(kt_gate *g, const char *isa, int n_threads) {
    char err[KIPP_ERR_LEN];
    const uint32_t V = g->info.n_vocab;
    kipp_ctx_params p = kipp_ctx_default_params();
    p.backend = "cpu";
    p.isa = isa;
    p.n_threads = n_threads;
    kipp_ctx *c = NULL;
    kipp_status st = kipp_ctx_init(g->m, &p, &c, err, sizeof err);
    KT_CHECK(st == KIPP_OK, "cpu backend (%s, %d threads): %s", isa, n_threads, err);
    if (st != KIPP_OK) return 1e30;
    double worst = 0.0;
    json_t *prompts = json_object_get(g->mf.root, "prompts");
    for (size_t pi = 0; pi < json_array_size(prompts); pi++) {
        size_t n;
        int32_t *ids = kt_prompt_tokens(json_array_get(prompts, pi), &n);
        if (!ids) { KT_CHECK(0, "prompt %zu has no tokens", pi); continue; }
        kipp_ctx_truncate(g->c, 0, err, sizeof err);
        kipp_ctx_truncate(c, 0, err, sizeof err);
        for (size_t pos = 0; pos < n; pos++) {
            KT_CHECK(kipp_decode(g->c, &ids[pos], 1, g->b, err, sizeof err) == KIPP_OK, "ref: %s", err);
            KT_CHECK(kipp_decode(c, &ids[pos], 1, g->a, err, sizeof err) == KIPP_OK, "cpu: %s", err);
            const double e = nmse(g->a, g->b, V);
            if (e > worst) worst = e;
            KT_CHECK(kt_argmax(g->a, V) == kt_argmax(g->b, V) && e <= CPU_NMSE_TOL,
                     "%s/%dt prompt %zu pos %zu: argmax %u vs ref %u, NMSE %.3g", isa, n_threads, pi,
                     pos, kt_argmax(g->a, V), kt_argmax(g->b, V), e);
        }
        /* the whole prompt in one call: the multi-token path against the ref's last step */
        kipp_ctx_truncate(c, 0, err, sizeof err);
        KT_CHECK(kipp_decode(c, ids, n, g->a, err, sizeof err) == KIPP_OK, "cpu: %s", err);
        const double e = nmse(g->a, g->b, V);
        if (e > worst) worst = e;
        KT_CHECK(kt_argmax(g->a, V) == kt_argmax(g->b, V) && e <= CPU_NMSE_TOL,
                 "%s/%dt prompt %zu as one batch: NMSE %.3g", isa, n_threads, pi, e);
        free(ids);
    }
    kipp_ctx_free(c);
    return worst;
}

int kt_gate_cpu_vs_ref(const char *model_path, const char *vec_dir) {
    kt_gate g;
    if (!kt_gate_open(&g, model_path, vec_dir, NULL)) return 1;
    static const char *const isas[] = {"scalar", "avx2", "avx512", "avx512vnni"};
    static const int threads[] = {1, 2};
    double worst = 0.0;
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        if (!kipp_cpu_isa_available(isas[i])) {
            printf("cpu-vs-ref gate: %s not available on this CPU, skipped\n", isas[i]);
            continue;
        }
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            const double e = run_config(&g, isas[i], threads[t]);
            printf("cpu-vs-ref gate: %-6s %d thread(s): worst NMSE %.3g\n", isas[i], threads[t], e);
            if (e > worst) worst = e;
        }
    }
    printf("cpu-vs-ref gate: worst NMSE %.3g, tolerance %.0e\n", worst, CPU_NMSE_TOL);
    kt_gate_close(&g);
    return kt_failed - g.failed0;
}

/* ---- real-shape models without golden vectors ------------------------------------------- */

#define SHAPE_TOKENS 8u

typedef struct {
    kipp_model *m;
    uint32_t V;
    int32_t ids[SHAPE_TOKENS];
    float *ref; /* [SHAPE_TOKENS][V] cpu-ref logits at every position */
    float *got; /* [2 * SHAPE_TOKENS][V] */
} shape_gate;

static double check_pos(const shape_gate *sg, const float *got, uint32_t pos, const char *what,
                        const char *isa, int n_threads) {
    const float *ref = sg->ref + (size_t)pos * sg->V;
    const double e = nmse(got, ref, sg->V);
    KT_CHECK(kt_argmax(got, sg->V) == kt_argmax(ref, sg->V) && e <= CPU_NMSE_TOL,
             "%s/%dt %s pos %u: argmax %u vs ref %u, NMSE %.3g", isa, n_threads, what, pos,
             kt_argmax(got, sg->V), kt_argmax(ref, sg->V), e);
    return e;
}

/* One cpu configuration: token by token, the prompt as one batch with every logit wanted,
 * and two sequences interleaved in one batch. Returns the worst NMSE. */
static double shape_config(shape_gate *sg, const char *isa, int n_threads) {
    char err[KIPP_ERR_LEN];
    const uint32_t V = sg->V, N = SHAPE_TOKENS;
    kipp_ctx_params p = kipp_ctx_default_params();
    p.backend = "cpu";
    p.isa = isa;
    p.n_threads = n_threads;
    p.n_ctx = 64;
    kipp_ctx *c = NULL;
    kipp_status st = kipp_ctx_init(sg->m, &p, &c, err, sizeof err);
    KT_CHECK(st == KIPP_OK, "cpu backend (%s, %d threads): %s", isa, n_threads, err);
    if (st != KIPP_OK) return 1e30;
    double worst = 0.0, e;
    for (uint32_t pos = 0; pos < N; pos++) {
        KT_CHECK(kipp_decode(c, &sg->ids[pos], 1, sg->got, err, sizeof err) == KIPP_OK, "cpu: %s", err);
        if ((e = check_pos(sg, sg->got, pos, "token by token", isa, n_threads)) > worst) worst = e;
    }
    KT_CHECK(kipp_ctx_truncate(c, 0, err, sizeof err) == KIPP_OK, "%s", err);
    kipp_batch b = {.n = N, .tokens = sg->ids};
    KT_CHECK(kipp_decode_batch(c, &b, sg->got, err, sizeof err) == KIPP_OK, "cpu batch: %s", err);
    for (uint32_t pos = 0; pos < N; pos++)
        if ((e = check_pos(sg, sg->got + (size_t)pos * V, pos, "one batch", isa, n_threads)) > worst)
            worst = e;
    /* sequence 0 (truncated) and a new one, their tokens interleaved */
    KT_CHECK(kipp_ctx_truncate(c, 0, err, sizeof err) == KIPP_OK, "%s", err);
    uint32_t s1 = 0;
    KT_CHECK(kipp_ctx_seq_new(c, &s1, err, sizeof err) == KIPP_OK, "%s", err);
    int32_t toks[2 * SHAPE_TOKENS];
    uint32_t seqs[2 * SHAPE_TOKENS];
    for (uint32_t i = 0; i < N; i++) {
        toks[2 * i] = toks[2 * i + 1] = sg->ids[i];
        seqs[2 * i] = 0;
        seqs[2 * i + 1] = s1;
    }
    kipp_batch b2 = {.n = 2 * N, .tokens = toks, .seq_ids = seqs};
    KT_CHECK(kipp_decode_batch(c, &b2, sg->got, err, sizeof err) == KIPP_OK, "cpu 2 seqs: %s", err);
    for (uint32_t i = 0; i < 2 * N; i++)
        if ((e = check_pos(sg, sg->got + (size_t)i * V, i / 2, i % 2 ? "seq 1 interleaved" : "seq 0 interleaved",
                           isa, n_threads)) > worst)
            worst = e;
    kipp_ctx_free(c);
    return worst;
}

int kt_gate_cpu_vs_ref_shape(const char *model_path, const char *unused) {
    (void)unused;
    const int failed0 = kt_failed;
    char err[KIPP_ERR_LEN];
    shape_gate sg = {0};
    if (kipp_model_load(model_path, &sg.m, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "%s", err);
        return 1;
    }
    kipp_model_info info;
    kipp_model_get_info(sg.m, &info);
    sg.V = info.n_vocab;
    /* fixed, spread-out ordinary token ids: the weights are random, the text does not matter */
    for (uint32_t i = 0; i < SHAPE_TOKENS; i++) sg.ids[i] = (int32_t)(100 + (i * 40503u) % 150000u);
    sg.ref = malloc((size_t)SHAPE_TOKENS * sg.V * sizeof(float));
    sg.got = malloc((size_t)2 * SHAPE_TOKENS * sg.V * sizeof(float));
    kipp_ctx_params p = kipp_ctx_default_params();
    p.backend = "cpu-ref";
    p.n_ctx = 64;
    kipp_ctx *ref = NULL;
    if (!sg.ref || !sg.got || kipp_ctx_init(sg.m, &p, &ref, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "cpu-ref context: %s", err);
        goto done;
    }
    for (uint32_t pos = 0; pos < SHAPE_TOKENS; pos++)
        KT_CHECK(kipp_decode(ref, &sg.ids[pos], 1, sg.ref + (size_t)pos * sg.V, err, sizeof err) == KIPP_OK,
                 "ref: %s", err);
    kipp_ctx_free(ref);
    {
        /* logits spread: a random model must still have a clear argmax for the gate to mean much */
        const float *last = sg.ref + (size_t)(SHAPE_TOKENS - 1) * sg.V;
        float top1 = -INFINITY, top2 = -INFINITY;
        for (uint32_t i = 0; i < sg.V; i++) {
            if (last[i] > top1) { top2 = top1; top1 = last[i]; }
            else if (last[i] > top2) top2 = last[i];
        }
        printf("cpu-vs-ref shape gate: %s: %u layers, last position top1-top2 logit gap %.3f\n",
               model_path, info.n_layer, top1 - top2);
    }
    static const char *const isas[] = {"avx512vnni", "avx512", "avx2", "scalar"};
    double worst = 0.0;
    int best_done = 0;
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        if (!kipp_cpu_isa_available(isas[i])) {
            printf("cpu-vs-ref shape gate: %s not available on this CPU, skipped\n", isas[i]);
            continue;
        }
        /* the best level on 1 and 2 threads, the others on 2 */
        for (int t = best_done ? 2 : 1; t <= 2; t++) {
            const double e = shape_config(&sg, isas[i], t);
            printf("cpu-vs-ref shape gate: %-10s %d thread(s): worst NMSE %.3g\n", isas[i], t, e);
            if (e > worst) worst = e;
        }
        best_done = 1;
    }
    printf("cpu-vs-ref shape gate: worst NMSE %.3g, tolerance %.0e\n", worst, CPU_NMSE_TOL);
done:
    free(sg.ref);
    free(sg.got);
    kipp_model_free(sg.m);
    return kt_failed - failed0;
}
