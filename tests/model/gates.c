/* gates.c — the model gates of build/kipp_test, run on a GGUF M and a golden-vector
 * directory V made by tools/make_vectors.py from HF transformers, on the backend and KV
 * type the flags name (default cpu-ref, f32):
 *   golden:  on the reference, logits within the vector's bound and exact argmax at every
 *            position; elsewhere exact argmax and NMSE <= 1e-4 vs cpu-ref recomputation;
 *   phase-2: cached incremental decode equals full recomputation on the same backend and
 *            KV type within 1e-6.
 * Reads V/manifest.json with jansson; does not generate vectors. */
#include "gates.h"

#include "gate_common.h"
#include "kt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


int kt_gate_golden(const char *model_path, const char *vec_dir, const kt_opts *o) {
    kt_gate g;
    if (!kt_gate_open(&g, model_path, vec_dir, o, NULL)) return 1;
    const kt_manifest mf = g.mf;
    kipp_model *m = g.m;
    kipp_ctx *c = g.c;
    const kipp_model_info info = g.info;
    float *logits = g.a;
    KT_CHECK(info.n_vocab == mf.n_vocab, "model n_vocab %u vs vectors %u", info.n_vocab, mf.n_vocab);
    if (info.n_expert) {
        /* a MoE model's vectors must route clear of near-ties: HF's f32/f64 runs and cpu-ref
         * agree to ~1e-6 in the router's logits, so a choice closer than the floor could flip
         * between them (tools/make_vectors.py records the margins; pick another seed). Exact
         * ties are HF's and Kipp's same rule (the lower index) and are exempt. */
        json_t *r = json_object_get(mf.root, "routing");
        const double gap = json_number_value(json_object_get(r, "min_logit_gap_excluding_exact_ties"));
        KT_CHECK(r && gap >= KT_MOE_GOLDEN_MARGIN,
                 "MoE vectors: routing margin %.3g below %g (or not recorded): a near-tie could flip", gap,
                 KT_MOE_GOLDEN_MARGIN);
    }
    double worst = 0.0;
    size_t n_positions = 0;
    json_t *prompts = json_object_get(mf.root, "prompts");
    for (size_t pi = 0; pi < json_array_size(prompts) && info.n_vocab == mf.n_vocab; pi++) {
        json_t *p = json_array_get(prompts, pi);
        size_t n;
        int32_t *ids = kt_prompt_tokens(p, &n);
        if (!ids) { KT_CHECK(0, "prompt %zu has no tokens", pi); continue; }
        char err[KIPP_ERR_LEN];
        KT_CHECK(kipp_ctx_truncate(c, 0, err, sizeof err) == KIPP_OK, "%s", err);

        /* the simple BPE encoder must reproduce HF's ids for these ASCII prompts */
        json_t *text = json_object_get(p, "text");
        if (json_is_string(text)) {
            int32_t *enc = malloc((n + 64) * sizeof *enc);
            size_t n_enc = 0;
            kipp_status st = kipp_tokenize(m, json_string_value(text), json_string_length(text), 1,
                                           enc, n + 64, &n_enc, err, sizeof err);
            KT_CHECK(st == KIPP_OK && n_enc == n && memcmp(enc, ids, n * sizeof *ids) == 0,
                     "prompt %zu: kipp tokenization differs from HF (%zu vs %zu ids)", pi, n_enc, n);
            free(enc);
        }

        for (size_t pos = 0; pos < n; pos++) {
            kipp_status st = kipp_decode(c, &ids[pos], 1, logits, err, sizeof err);
            if (st != KIPP_OK) { KT_CHECK(0, "decode: %s", err); break; }
            n_positions++;
            double e = kt_golden_position(&g, vec_dir, pi, ids, pos, logits);
            if (e > worst) worst = e;
        }
        free(ids);
    }
    if (g.is_ref)
        printf("golden gate (%s): %zu positions, max |logit - oracle| = %.3g, bound = %.3g\n",
               g.label, n_positions, worst, mf.bound);
    else
        printf("golden gate (%s): %zu positions, oracle argmax, worst NMSE vs cpu-ref = %.3g, "
               "tolerance %g\n", g.label, n_positions, worst, KT_NMSE_TOL);
    kt_gate_close(&g);
    return kt_failed - g.failed0;
}

int kt_gate_phase2(const char *model_path, const char *vec_dir, const kt_opts *o) {
    kt_gate g;
    if (!kt_gate_open(&g, model_path, vec_dir, o, NULL)) return 1;
    kipp_ctx *c = g.c;
    const kipp_model_info info = g.info;
    float *cached = g.a, *fresh = g.b;
    double worst = 0.0, worst_nmse = 0.0; /* the NMSE is reported, not gated: it says how far */
    json_t *prompts = json_object_get(g.mf.root, "prompts");
    for (size_t pi = 0; pi < json_array_size(prompts); pi++) {
        size_t n;
        int32_t *ids = kt_prompt_tokens(json_array_get(prompts, pi), &n);
        if (!ids) { KT_CHECK(0, "prompt %zu has no tokens", pi); continue; }
        char err[KIPP_ERR_LEN];
        kipp_ctx_truncate(c, 0, err, sizeof err);
        for (size_t pos = 0; pos < n; pos++) {
            kipp_status st = kipp_decode(c, &ids[pos], 1, cached, err, sizeof err);
            if (st == KIPP_OK) st = kt_recompute(&g, c, ids, (uint32_t)pos + 1, fresh, err, sizeof err);
            if (st != KIPP_OK) { KT_CHECK(0, "%s", err); break; }
            double e, tol;
            const char *what;
            KT_CHECK(kt_same_ok(&g, cached, fresh, info.n_vocab, &e, &tol, &what),
                     "%s prompt %zu position %zu: cached vs recomputed %s %.3g > %g", g.label, pi,
                     pos, what, e, tol);
            KT_CHECK(kt_same_argmax(&g, cached, fresh, info.n_vocab),
                     "%s prompt %zu position %zu: argmax differs", g.label, pi, pos);
            const double ea = kt_max_abs_diff(cached, fresh, info.n_vocab);
            if (ea > worst) worst = ea;
            const double nm = kt_nmse(cached, fresh, info.n_vocab);
            if (nm > worst_nmse) worst_nmse = nm;
        }
        /* rollback: truncating and decoding again must reproduce the same logits */
        if (n >= 2) {
            kipp_ctx_truncate(c, (uint32_t)n - 2, err, sizeof err);
            kipp_decode(c, &ids[n - 2], 2, fresh, err, sizeof err);
            double e, tol;
            const char *what;
            KT_CHECK(kt_same_ok(&g, cached, fresh, info.n_vocab, &e, &tol, &what),
                     "%s prompt %zu: decode after truncate differs by %s %.3g > %g", g.label, pi,
                     what, e, tol);
        }
        free(ids);
    }
    printf("phase-2 gate (%s): max |cached - recomputed| = %.3g, NMSE %.3g (bound: %s)\n",
           g.label, worst, worst_nmse,
           g.is_ref || (g.cp.backend && strcmp(g.cp.backend, KT_REF_BACKEND) == 0)
               ? "max |a-b| 1e-6"
               : g.cp.kv_type == KIPP_KV_TYPE_Q4_0 ? "NMSE 2e-3, q4_0 K" : "NMSE 1e-5");
    kt_gate_close(&g);
    return kt_failed - g.failed0;
}
