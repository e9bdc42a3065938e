/* gates_cpu.c — the cpu backend's gate: for every manifest prompt, every position's logits
 * from `cpu` (each ISA level this machine runs, forced through KIPP_CPU_ISA, on 1 and 2
 * threads) must give cpu-ref's argmax and NMSE = sum((a-b)^2)/sum(b^2) <= 1e-4, both token
 * by token and for the whole prompt in one call. Does not compare against the golden vectors
 * (cpu-ref's own gates do that) nor time anything. */
#include "gates.h"

#include "backend/cpu/kernels.h"
#include "gate_common.h"
#include "kt.h"

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
    setenv("KIPP_CPU_ISA", isa, 1);
    kipp_ctx_params p = kipp_ctx_default_params();
    p.backend = "cpu";
    p.n_threads = n_threads;
    kipp_ctx *c = NULL;
    kipp_status st = kipp_ctx_init(g->m, &p, &c, err, sizeof err);
    unsetenv("KIPP_CPU_ISA");
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
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
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
