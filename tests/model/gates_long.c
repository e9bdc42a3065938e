/* gates_long.c — the long-context gate (kipp_test --longctx M [V]): one sequence decoded to
 * the model's trained context length (n_ctx_train, or --ctx N below it) on the gate's
 * backend and KV type, streamed in 61-token batches (block boundaries fall at every offset)
 * and finished with two single-token steps. At five far positions (about L/2, 3L/4, L-17,
 * L-2, L-1) the cached logits must equal kipp_forward_nocache of the same prefix on the same
 * context within 1e-6 with the same argmax; on a backend or KV type other than the
 * reference they must also match cpu-ref's recomputation (f32, never reads a KV cache):
 * same argmax, NMSE <= 1e-4. The tokens are the manifest's prompts repeated when V is
 * given, else fixed ids. Does not check golden vectors (they stop at the prompts' ends). */
#include "gates.h"

#include "gate_common.h"
#include "kt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LONG_CHUNK 61u /* tokens per streamed batch */
#define N_CHECK 5u
#define LONG_MIN 64u   /* shorter contexts have no "far" positions */

/* ids[0..L) from the manifest's prompts, repeated; 0 if it has none. */
static int fill_from_manifest(const kt_gate *g, int32_t *ids, uint32_t L) {
    json_t *prompts = json_object_get(g->mf.root, "prompts");
    uint32_t n = 0;
    for (size_t pi = 0; n < L; pi = (pi + 1) % json_array_size(prompts)) {
        size_t k;
        int32_t *p = kt_prompt_tokens(json_array_get(prompts, pi), &k);
        if (!p) return 0;
        for (size_t i = 0; i < k && n < L; i++) ids[n++] = p[i];
        free(p);
    }
    return 1;
}

/* The far positions, ascending and distinct. */
static uint32_t checkpoints(uint32_t L, uint32_t *cp) {
    const uint32_t want[N_CHECK] = {L / 2 + 3, 3 * L / 4 + 9, L - 17, L - 2, L - 1};
    uint32_t n = 0;
    for (uint32_t i = 0; i < N_CHECK; i++)
        if (want[i] < L && (n == 0 || want[i] > cp[n - 1])) cp[n++] = want[i];
    return n;
}

int kt_gate_longctx(const char *model_path, const char *vec_dir, const kt_opts *o) {
    char err[KIPP_ERR_LEN];
    /* the trained context, to size the contexts */
    kipp_model *probe = NULL;
    if (kipp_model_load(model_path, &probe, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "%s", err);
        return 1;
    }
    kipp_model_info mi;
    kipp_model_get_info(probe, &mi);
    kipp_model_free(probe);
    const uint32_t want_L = o && o->ctx ? o->ctx : mi.n_ctx_train;
    if (want_L > mi.n_ctx_train || want_L < LONG_MIN) {
        KT_CHECK(0, "--ctx %u: the long-context gate needs %u..%u (the model's n_ctx_train)",
                 want_L, LONG_MIN, mi.n_ctx_train);
        return 1;
    }
    const uint32_t L = want_L;
    kipp_ctx_params cp = kipp_ctx_default_params();
    cp.n_ctx = L;
    kt_gate g;
    if (!kt_gate_open(&g, model_path, vec_dir, o, &cp)) return 1;
    const uint32_t V = g.info.n_vocab;
    uint32_t at[N_CHECK];
    const uint32_t n_at = checkpoints(L, at);
    int32_t *ids = malloc((size_t)L * sizeof *ids);
    float *cached = malloc((size_t)N_CHECK * V * sizeof *cached);
    uint8_t *want = malloc(LONG_CHUNK);
    if (!ids || !cached || !want) {
        KT_CHECK(0, "out of memory");
        goto done;
    }
    if (vec_dir) {
        if (!fill_from_manifest(&g, ids, L)) { KT_CHECK(0, "%s: a prompt has no tokens", vec_dir); goto done; }
    } else {
        for (uint32_t i = 0; i < L; i++) ids[i] = (int32_t)(100 + (i * 40503u) % (V - 200));
    }
    if (g.info.n_expert) {
        /* a MoE model: the pins are this very sequence's (cpu-ref's routing of ids[0..L)), not
         * the manifest prompts' that kt_gate_open recorded -- this sequence repeats them at other
         * positions, after other prefixes (gate_common.h) */
        kt_moe_unpin(g.moe_pin, NULL);
        const int32_t *pin_ids[1] = {ids};
        const size_t pin_n[1] = {L};
        g.moe_pin = kt_moe_pin_on(g.is_ref ? g.c : kt_gate_ref(&g), &g.info, pin_ids, pin_n, 1, g.b);
    }

    /* the cached run: 61-token batches to L-2, logits only at checkpoints, then two steps */
    uint32_t k = 0; /* next checkpoint */
    for (uint32_t pos = 0; pos < L - 2;) {
        const uint32_t n = L - 2 - pos < LONG_CHUNK ? L - 2 - pos : LONG_CHUNK;
        uint32_t first = k;
        for (uint32_t i = 0; i < n; i++) want[i] = k < n_at && at[k] == pos + i ? (k++, 1) : 0;
        const kipp_batch b = {.n = n, .tokens = ids + pos, .want_logits = want};
        if (kipp_decode_batch(g.c, &b, cached + (size_t)first * V, err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "%s batch at position %u: %s", g.label, pos, err);
            goto done;
        }
        pos += n;
    }
    for (uint32_t pos = L - 2; pos < L; pos++) {
        float *out = k < n_at && at[k] == pos ? cached + (size_t)k++ * V : g.a;
        if (kipp_decode(g.c, &ids[pos], 1, out, err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "%s step at position %u: %s", g.label, pos, err);
            goto done;
        }
    }
    KT_CHECK(k == n_at && kipp_ctx_n_past(g.c) == L, "%s: %u of %u checkpoints, %u positions",
             g.label, k, n_at, kipp_ctx_n_past(g.c));

    /* each checkpoint against recomputation here, and elsewhere against cpu-ref too */
    double worst = 0.0, worst_ref = 0.0, worst_tol = KT_EXACT_TOL;
    const char *worst_what = "max |a-b|";
    kipp_ctx *ref = g.is_ref ? NULL : kt_gate_ref(&g);
    for (uint32_t i = 0; i < n_at; i++) {
        const float *got = cached + (size_t)i * V;
        if (kt_recompute(&g, g.c, ids, at[i] + 1, g.a, err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "%s recomputation to %u: %s", g.label, at[i], err);
            continue;
        }
        double e, tol;
        const char *what;
        const int same = kt_same_ok(&g, got, g.a, V, &e, &tol, &what);
        KT_CHECK(same && kt_same_argmax(&g, got, g.a, V),
                 "%s position %u: cached vs recomputed %s %.3g > %g or argmax %u vs %u", g.label,
                 at[i], what, e, tol, kt_argmax(got, V), kt_argmax(g.a, V));
        if (e > worst) worst = e;
        worst_tol = tol;
        worst_what = what;
        if (!ref) continue;
        if (kt_recompute(&g, ref, ids, at[i] + 1, g.b, err, sizeof err) != KIPP_OK) {
            KT_CHECK(0, "cpu-ref recomputation to %u: %s", at[i], err);
            continue;
        }
        double nm;
        KT_CHECK(kt_matches_ref(got, g.b, V, &nm),
                 "%s position %u: argmax %u vs cpu-ref %u, NMSE %.3g > %g", g.label, at[i],
                 kt_argmax(got, V), kt_argmax(g.b, V), nm, KT_NMSE_TOL);
        if (nm > worst_ref) worst_ref = nm;
    }
    printf("longctx gate (%s): %u positions (n_ctx_train %u), checked at", g.label, L,
           mi.n_ctx_train);
    for (uint32_t i = 0; i < n_at; i++) printf(" %u", at[i]);
    printf("; worst cached vs recomputed %s = %.3g, tolerance %g", worst_what, worst, worst_tol);
    if (ref) printf("; worst NMSE vs cpu-ref %.3g, tolerance %g", worst_ref, KT_NMSE_TOL);
    printf("\n");
done:
    free(ids);
    free(cached);
    free(want);
    kt_gate_close(&g);
    return kt_failed - g.failed0;
}
