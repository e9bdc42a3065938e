/* gates_cpu.c — the cpu backend's gate: for every manifest prompt, every position's logits
 * from `cpu` (each ISA level this machine runs, asked for with kipp_ctx_params.isa and
 * checked with kipp_ctx_get_info, on 1 and 2 threads) must give cpu-ref's argmax and
 * NMSE = sum((a-b)^2)/sum(b^2) <= 1e-4, both token by token and for the whole prompt in one
 * call. --backend names another backend to gate the same way (one configuration per thread
 * count: only cpu has levels), --kv-type its KV type; the reference is cpu-ref with f32 KV.
 * Does not compare against the golden vectors (the golden gate does) nor time anything. */
#include "gates.h"

#include "backend/cpu/kernels.h"
#include "gate_common.h"
#include "kt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CPU_NMSE_TOL KT_NMSE_TOL

/* best first: "auto" is the default table (per weight type and token count the measured
 * fastest kernels, src/backend/cpu/choice.c), then each level on its own */
static const char *const all_isas[] = {"auto", "amx", "avx512bf16", "avx512vnni", "avx512", "avx2", "neon", "scalar"};

/* The levels to run: every level this CPU has for the cpu backend, else one configuration
 * with the backend's own choice (NULL). KIPP_GATE_ISA narrows them (the test tier's model
 * gates on the quantized files; the unit suite covers every level x type at kernel level):
 * "best" keeps the first only ("auto", the default table), else a comma list of levels, each of which must be
 * available (a level asked for and missing is a failure, not a silent skip). Returns how
 * many. */
static size_t levels(const kipp_ctx_params *p, const char **out) {
    if (strcmp(p->backend, "cpu") != 0) {
        out[0] = NULL;
        return 1;
    }
    const char *want = getenv("KIPP_GATE_ISA");
    if (want && !*want) want = NULL;
    size_t n = 0;
    for (size_t i = 0; i < sizeof all_isas / sizeof all_isas[0]; i++) {
        const int have = kipp_cpu_isa_available(all_isas[i]);
        int asked = !want || (strcmp(want, "best") == 0 && n == 0);
        if (want && strcmp(want, "best") != 0) {
            const size_t len = strlen(all_isas[i]);
            for (const char *w = want; *w; w = strchr(w, ',') ? strchr(w, ',') + 1 : w + strlen(w))
                if (strncmp(w, all_isas[i], len) == 0 && (w[len] == ',' || !w[len])) asked = 1;
            KT_CHECK(!asked || have, "KIPP_GATE_ISA names %s, which this CPU does not run",
                     all_isas[i]);
        }
        if (have && asked) out[n++] = all_isas[i];
        else if (!have) printf("cpu-vs-ref gate: %s not available on this CPU, skipped\n", all_isas[i]);
        else printf("cpu-vs-ref gate: %s left out (KIPP_GATE_ISA=%s)\n", all_isas[i], want);
    }
    /* every name asked for is a level (a typo would gate nothing) */
    for (const char *w = want; w && strcmp(want, "best") != 0 && *w;) {
        const size_t len = strchr(w, ',') ? (size_t)(strchr(w, ',') - w) : strlen(w);
        int known = 0;
        for (size_t i = 0; i < sizeof all_isas / sizeof all_isas[0]; i++)
            known |= strlen(all_isas[i]) == len && strncmp(w, all_isas[i], len) == 0;
        KT_CHECK(known, "KIPP_GATE_ISA names '%.*s', which is not an ISA level", (int)len, w);
        w += len + (w[len] == ',');
    }
    KT_CHECK(n > 0, "cpu-vs-ref gate: no ISA level to run (KIPP_GATE_ISA=%s)", want ? want : "");
    return n;
}

/* A context of the backend under test (p) at level isa (NULL: its default) on n_threads;
 * the level it runs is checked (a level asked for and not used would gate nothing). */
static kipp_ctx *open_tested(kipp_model *m, kipp_ctx_params p, const char *isa, int n_threads) {
    char err[KIPP_ERR_LEN], label[48];
    p.isa = isa;
    p.n_threads = n_threads;
    kipp_ctx *c = NULL;
    kipp_status st = kipp_ctx_init(m, &p, &c, err, sizeof err);
    KT_CHECK(st == KIPP_OK, "%s (%s, %d threads): %s", kt_label(&p, label, sizeof label),
             isa ? isa : "default level", n_threads, err);
    if (st != KIPP_OK) return NULL;
    kipp_ctx_info ci;
    kipp_ctx_get_info(c, &ci);
    KT_CHECK(!isa || (ci.isa && (strcmp(ci.isa, isa) == 0 || (strcmp(isa, "auto") == 0 && ci.kernels))),
             "%s asked for ISA level %s, the context runs %s", p.backend, isa,
             ci.isa ? ci.isa : "(none)");
    return c;
}

/* cpu-ref's logits at every position of every prompt, computed once for all configurations. */
typedef struct {
    int32_t *ids[KT_MAX_PROMPTS];
    size_t n[KT_MAX_PROMPTS];
    float *ref[KT_MAX_PROMPTS]; /* [n][V] */
    size_t n_prompts;
} ref_rows;

static void ref_rows_free(ref_rows *r) {
    for (size_t i = 0; i < r->n_prompts; i++) {
        free(r->ids[i]);
        free(r->ref[i]);
    }
}

static int ref_rows_make(kt_gate *g, ref_rows *r) {
    char err[KIPP_ERR_LEN];
    const uint32_t V = g->info.n_vocab;
    memset(r, 0, sizeof *r);
    json_t *prompts = json_object_get(g->mf.root, "prompts");
    KT_CHECK(json_array_size(prompts) <= KT_MAX_PROMPTS, "more than %d prompts", KT_MAX_PROMPTS);
    for (size_t pi = 0; pi < json_array_size(prompts) && pi < KT_MAX_PROMPTS; pi++) {
        size_t n;
        int32_t *ids = kt_prompt_tokens(json_array_get(prompts, pi), &n);
        if (!ids) { KT_CHECK(0, "prompt %zu has no tokens", pi); continue; }
        float *ref = malloc(n * V * sizeof *ref);
        r->ids[r->n_prompts] = ids;
        r->n[r->n_prompts] = n;
        r->ref[r->n_prompts++] = ref;
        if (!ref) { KT_CHECK(0, "out of memory"); return 0; }
        kipp_ctx_truncate(g->c, 0, err, sizeof err);
        for (size_t pos = 0; pos < n; pos++)
            if (kipp_decode(g->c, &ids[pos], 1, ref + pos * V, err, sizeof err) != KIPP_OK) {
                KT_CHECK(0, "ref: %s", err);
                return 0;
            }
    }
    return 1;
}

/* One configuration of the tested backend against the cpu-ref rows; returns the worst NMSE. */
static double run_config(kt_gate *g, const ref_rows *r, const kipp_ctx_params *tp, const char *isa,
                         int n_threads) {
    char err[KIPP_ERR_LEN];
    const uint32_t V = g->info.n_vocab;
    kipp_ctx *c = open_tested(g->m, *tp, isa, n_threads);
    if (!c) return 1e30;
    const char *lvl = isa ? isa : "default";
    double worst = 0.0, e;
    for (size_t pi = 0; pi < r->n_prompts; pi++) {
        const int32_t *ids = r->ids[pi];
        const size_t n = r->n[pi];
        kipp_ctx_truncate(c, 0, err, sizeof err);
        for (size_t pos = 0; pos < n; pos++) {
            const float *ref = r->ref[pi] + pos * V;
            KT_CHECK(kipp_decode(c, &ids[pos], 1, g->a, err, sizeof err) == KIPP_OK, "%s: %s", tp->backend, err);
            KT_CHECK(kt_matches_ref(g->a, ref, V, &e),
                     "%s/%dt prompt %zu pos %zu: argmax %u vs ref %u, NMSE %.3g", lvl, n_threads, pi,
                     pos, kt_argmax(g->a, V), kt_argmax(ref, V), e);
            if (e > worst) worst = e;
        }
        /* the whole prompt in one call: the multi-token path against the ref's last step */
        const float *last = r->ref[pi] + (n - 1) * V;
        kipp_ctx_truncate(c, 0, err, sizeof err);
        KT_CHECK(kipp_decode(c, ids, n, g->a, err, sizeof err) == KIPP_OK, "%s: %s", tp->backend, err);
        KT_CHECK(kt_matches_ref(g->a, last, V, &e), "%s/%dt prompt %zu as one batch: NMSE %.3g", lvl,
                 n_threads, pi, e);
        if (e > worst) worst = e;
    }
    kipp_ctx_free(c);
    return worst;
}

int kt_gate_cpu_vs_ref(const char *model_path, const char *vec_dir, const kt_opts *o) {
    kt_gate g;
    if (!kt_gate_open(&g, model_path, vec_dir, NULL, NULL)) return 1; /* the reference */
    const kipp_ctx_params tp = kt_ctx_params(o, "cpu");
    ref_rows r;
    if (!ref_rows_make(&g, &r)) {
        ref_rows_free(&r);
        kt_gate_close(&g);
        return kt_failed - g.failed0;
    }
    const char *isas[8];
    const size_t n_isas = levels(&tp, isas);
    static const int threads[] = {1, 2};
    double worst = 0.0;
    char label[48];
    for (size_t i = 0; i < n_isas; i++) {
        for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
            const double e = run_config(&g, &r, &tp, isas[i], threads[t]);
            printf("cpu-vs-ref gate: %s %-10s %d thread(s): worst NMSE %.3g\n",
                   kt_label(&tp, label, sizeof label), isas[i] ? isas[i] : "default", threads[t], e);
            if (e > worst) worst = e;
        }
    }
    printf("cpu-vs-ref gate: %s worst NMSE %.3g, tolerance %.0e\n", kt_label(&tp, label, sizeof label),
           worst, CPU_NMSE_TOL);
    ref_rows_free(&r);
    kt_gate_close(&g);
    return kt_failed - g.failed0;
}

/* ---- real-shape models without golden vectors ------------------------------------------- */

#define SHAPE_TOKENS 8u

typedef struct {
    kipp_model *m;
    kipp_ctx_params tp; /* the backend under test */
    uint32_t V;
    int32_t ids[SHAPE_TOKENS];
    float *ref; /* [SHAPE_TOKENS][V] cpu-ref logits at every position */
    float *got; /* [2 * SHAPE_TOKENS][V] */
    kipp_ctx *ref_ctx; /* cpu-ref, for a MoE model's routing trace (kt_moe_pin_on) */
    kipp_model_info info;
} shape_gate;

static double check_pos(const shape_gate *sg, const float *got, uint32_t pos, const char *what,
                        const char *isa, int n_threads) {
    const float *ref = sg->ref + (size_t)pos * sg->V;
    const double e = kt_nmse(got, ref, sg->V);
    KT_CHECK(kt_argmax(got, sg->V) == kt_argmax(ref, sg->V) && e <= CPU_NMSE_TOL,
             "%s/%dt %s pos %u: argmax %u vs ref %u, NMSE %.3g", isa, n_threads, what, pos,
             kt_argmax(got, sg->V), kt_argmax(ref, sg->V), e);
    return e;
}

/* One cpu configuration: token by token, the prompt as one batch with every logit wanted,
 * and two sequences interleaved in one batch. Returns the worst NMSE. */
static double shape_config(shape_gate *sg, const char *isa_or_null, int n_threads) {
    char err[KIPP_ERR_LEN];
    const uint32_t V = sg->V, N = SHAPE_TOKENS;
    kipp_ctx_params p = sg->tp;
    p.n_ctx = 64;
    kipp_ctx *c = open_tested(sg->m, p, isa_or_null, n_threads);
    const char *isa = isa_or_null ? isa_or_null : "default";
    if (!c) return 1e30;
    double worst = 0.0, e;
    const int32_t *pin_ids[1] = {sg->ids};
    const size_t pin_n[1] = {N};
    kipp_moe_trace *pin = kt_moe_pin_on(sg->ref_ctx, &sg->info, pin_ids, pin_n, 1, sg->got); /* MoE near-ties */
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
    char what[64];
    snprintf(what, sizeof what, "%s/%dt", isa, n_threads);
    kt_moe_unpin(pin, what);
    kipp_ctx_free(c);
    return worst;
}

int kt_gate_cpu_vs_ref_shape(const char *model_path, const char *unused, const kt_opts *o) {
    (void)unused;
    const int failed0 = kt_failed;
    char err[KIPP_ERR_LEN], label[48];
    shape_gate sg = {0};
    sg.tp = kt_ctx_params(o, "cpu");
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
    sg.info = info;
    if (!sg.ref || !sg.got || kipp_ctx_init(sg.m, &p, &ref, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "cpu-ref context: %s", err);
        goto done;
    }
    for (uint32_t pos = 0; pos < SHAPE_TOKENS; pos++)
        KT_CHECK(kipp_decode(ref, &sg.ids[pos], 1, sg.ref + (size_t)pos * sg.V, err, sizeof err) == KIPP_OK,
                 "ref: %s", err);
    sg.ref_ctx = ref;
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
    const char *isas[8];
    const size_t n_isas = levels(&sg.tp, isas);
    double worst = 0.0;
    kt_label(&sg.tp, label, sizeof label);
    for (size_t i = 0; i < n_isas; i++) {
        /* the first (auto) on 1 and 2 threads, the levels on 2 */
        for (int t = i ? 2 : 1; t <= 2; t++) {
            const double e = shape_config(&sg, isas[i], t);
            printf("cpu-vs-ref shape gate: %s %-10s %d thread(s): worst NMSE %.3g\n", label,
                   isas[i] ? isas[i] : "default", t, e);
            if (e > worst) worst = e;
        }
    }
    printf("cpu-vs-ref shape gate: %s worst NMSE %.3g, tolerance %.0e\n", label, worst, CPU_NMSE_TOL);
done:
    kipp_ctx_free(sg.ref_ctx);
    free(sg.ref);
    free(sg.got);
    kipp_model_free(sg.m);
    return kt_failed - failed0;
}
