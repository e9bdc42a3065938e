/* gates.c — the model gates of build/kipp_test, run on a GGUF M and a golden-vector
 * directory V made by tools/make_vectors.py from HF transformers:
 *   golden:  cpu-ref logits within the vector's bound, exact argmax, at every position;
 *   phase-2: cached incremental decode equals full recomputation within 1e-6.
 * Reads V/manifest.json with jansson; does not generate vectors. */
#include "gates.h"

#include "kt.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PHASE2_TOL 1e-6

typedef struct {
    json_t *root;
    double bound;
    size_t top_k;
    uint32_t n_vocab;
} manifest;

static int load_manifest(const char *dir, manifest *mf) {
    char path[4096];
    json_error_t je;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    mf->root = json_load_file(path, 0, &je);
    if (!mf->root) {
        fprintf(stderr, "gate: cannot read %s: %s (line %d)\n", path, je.text, je.line);
        return 0;
    }
    json_t *b = json_object_get(mf->root, "bound"), *k = json_object_get(mf->root, "top_k"),
           *nv = json_object_get(mf->root, "n_vocab"), *pr = json_object_get(mf->root, "prompts");
    if (!json_is_number(b) || !json_is_integer(k) || !json_is_integer(nv) || !json_is_array(pr) ||
        json_array_size(pr) == 0) {
        fprintf(stderr, "gate: %s lacks bound/top_k/n_vocab/prompts\n", path);
        json_decref(mf->root);
        return 0;
    }
    mf->bound = json_number_value(b);
    mf->top_k = (size_t)json_integer_value(k);
    mf->n_vocab = (uint32_t)json_integer_value(nv);
    return 1;
}

/* Token ids of one prompt, malloc'd. */
static int32_t *prompt_tokens(json_t *p, size_t *n) {
    json_t *t = json_object_get(p, "tokens");
    *n = json_array_size(t);
    if (!json_is_array(t) || *n == 0) return NULL;
    int32_t *ids = malloc(*n * sizeof *ids);
    if (!ids) return NULL;
    for (size_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(t, i));
    return ids;
}

static uint32_t argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* What both gates hold: the vectors, the model on cpu-ref, and two logits buffers. */
typedef struct {
    manifest mf;
    kipp_model *m;
    kipp_ctx *c;
    kipp_model_info info;
    float *a, *b; /* n_vocab floats each */
    int failed0;
} gate;

static void gate_close(gate *g) {
    free(g->a);
    free(g->b);
    kipp_ctx_free(g->c);
    kipp_model_free(g->m);
    if (g->mf.root) json_decref(g->mf.root);
}

static int gate_open(gate *g, const char *model_path, const char *vec_dir) {
    char err[KIPP_ERR_LEN];
    memset(g, 0, sizeof *g);
    g->failed0 = kt_failed;
    if (!load_manifest(vec_dir, &g->mf)) return 0;
    if (kipp_model_load(model_path, &g->m, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "gate: %s\n", err);
        gate_close(g);
        return 0;
    }
    kipp_ctx_params cp = kipp_ctx_default_params();
    cp.backend = "cpu-ref";
    if (kipp_ctx_init(g->m, &cp, &g->c, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "gate: %s\n", err);
        gate_close(g);
        return 0;
    }
    kipp_model_get_info(g->m, &g->info);
    g->a = malloc((size_t)g->info.n_vocab * sizeof *g->a);
    g->b = malloc((size_t)g->info.n_vocab * sizeof *g->b);
    if (!g->a || !g->b) {
        fprintf(stderr, "gate: out of memory\n");
        gate_close(g);
        return 0;
    }
    return 1;
}

/* max_i |a_i - b_i|, with NaN counted as infinitely far */
static double max_abs_diff(const float *a, const float *b, uint32_t n) {
    double e = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) return INFINITY;
        if (d > e) e = d;
    }
    return e;
}

/* Reads row r of n floats from a little-endian f32 file. */
static int read_logits_row(const char *dir, const char *file, size_t r, uint32_t n, float *out) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "gate: cannot open %s\n", path); return 0; }
    int ok = fseek(f, (long)(r * n * sizeof(float)), SEEK_SET) == 0 &&
             fread(out, sizeof(float), n, f) == n;
    fclose(f);
    if (!ok) fprintf(stderr, "gate: %s is too short for row %zu\n", path, r);
    return ok;
}

int kt_gate_golden(const char *model_path, const char *vec_dir) {
    gate g;
    if (!gate_open(&g, model_path, vec_dir)) return 1;
    const manifest mf = g.mf;
    kipp_model *m = g.m;
    kipp_ctx *c = g.c;
    const kipp_model_info info = g.info;
    float *logits = g.a, *ref = g.b;
    KT_CHECK(info.n_vocab == mf.n_vocab, "model n_vocab %u vs vectors %u", info.n_vocab, mf.n_vocab);
    double worst = 0.0;
    size_t n_positions = 0;
    json_t *prompts = json_object_get(mf.root, "prompts");
    for (size_t pi = 0; pi < json_array_size(prompts) && info.n_vocab == mf.n_vocab; pi++) {
        json_t *p = json_array_get(prompts, pi);
        size_t n;
        int32_t *ids = prompt_tokens(p, &n);
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

        json_t *am = json_object_get(p, "argmax"), *tki = json_object_get(p, "topk_ids"),
               *tkl = json_object_get(p, "topk_logits"),
               *flp = json_object_get(p, "full_logits_positions"),
               *flf = json_object_get(p, "full_logits_file");
        for (size_t pos = 0; pos < n; pos++) {
            kipp_status st = kipp_decode(c, &ids[pos], 1, logits, err, sizeof err);
            if (st != KIPP_OK) { KT_CHECK(0, "decode: %s", err); break; }
            n_positions++;
            uint32_t want = (uint32_t)json_integer_value(json_array_get(am, pos));
            uint32_t got = argmax(logits, info.n_vocab);
            KT_CHECK(got == want, "prompt %zu position %zu: argmax %u, oracle %u", pi, pos, got, want);
            json_t *ids_k = json_array_get(tki, pos), *lg_k = json_array_get(tkl, pos);
            double e_pos = 0.0;
            for (size_t j = 0; j < json_array_size(ids_k); j++) {
                uint32_t id = (uint32_t)json_integer_value(json_array_get(ids_k, j));
                if (id >= info.n_vocab) continue;
                double e = fabs((double)logits[id] - json_number_value(json_array_get(lg_k, j)));
                if (e > e_pos) e_pos = e;
            }
            KT_CHECK(json_array_size(ids_k) == mf.top_k && e_pos <= mf.bound,
                     "prompt %zu position %zu: top-%zu logit error %.3g > bound %.3g", pi, pos,
                     mf.top_k, e_pos, mf.bound);
            if (e_pos > worst) worst = e_pos;
            for (size_t r = 0; r < json_array_size(flp); r++) {
                if ((size_t)json_integer_value(json_array_get(flp, r)) != pos) continue;
                if (!read_logits_row(vec_dir, json_string_value(flf), r, info.n_vocab, ref)) {
                    KT_CHECK(0, "missing full logits for prompt %zu", pi);
                    continue;
                }
                double e_full = max_abs_diff(logits, ref, info.n_vocab);
                KT_CHECK(e_full <= mf.bound,
                         "prompt %zu position %zu: full-vocab logit error %.3g > bound %.3g", pi,
                         pos, e_full, mf.bound);
                if (e_full > worst) worst = e_full;
            }
        }
        free(ids);
    }
    printf("golden gate: %zu positions, max |logit - oracle| = %.3g, bound = %.3g\n", n_positions,
           worst, mf.bound);
    gate_close(&g);
    return kt_failed - g.failed0;
}

int kt_gate_phase2(const char *model_path, const char *vec_dir) {
    gate g;
    if (!gate_open(&g, model_path, vec_dir)) return 1;
    kipp_ctx *c = g.c;
    const kipp_model_info info = g.info;
    float *cached = g.a, *fresh = g.b;
    double worst = 0.0;
    json_t *prompts = json_object_get(g.mf.root, "prompts");
    for (size_t pi = 0; pi < json_array_size(prompts); pi++) {
        size_t n;
        int32_t *ids = prompt_tokens(json_array_get(prompts, pi), &n);
        if (!ids) { KT_CHECK(0, "prompt %zu has no tokens", pi); continue; }
        char err[KIPP_ERR_LEN];
        kipp_ctx_truncate(c, 0, err, sizeof err);
        for (size_t pos = 0; pos < n; pos++) {
            kipp_status st = kipp_decode(c, &ids[pos], 1, cached, err, sizeof err);
            if (st == KIPP_OK) st = kipp_forward_nocache(c, ids, (uint32_t)pos + 1, fresh, err, sizeof err);
            if (st != KIPP_OK) { KT_CHECK(0, "%s", err); break; }
            double e = max_abs_diff(cached, fresh, info.n_vocab);
            KT_CHECK(e <= PHASE2_TOL, "prompt %zu position %zu: cached vs recomputed %.3g > %g",
                     pi, pos, e, PHASE2_TOL);
            KT_CHECK(argmax(cached, info.n_vocab) == argmax(fresh, info.n_vocab),
                     "prompt %zu position %zu: argmax differs", pi, pos);
            if (e > worst) worst = e;
        }
        /* rollback: truncating and decoding again must reproduce the same logits */
        if (n >= 2) {
            kipp_ctx_truncate(c, (uint32_t)n - 2, err, sizeof err);
            kipp_decode(c, &ids[n - 2], 2, fresh, err, sizeof err);
            double e = max_abs_diff(cached, fresh, info.n_vocab);
            KT_CHECK(e <= PHASE2_TOL, "prompt %zu: decode after truncate differs by %.3g", pi, e);
        }
        free(ids);
    }
    printf("phase-2 gate: max |cached - recomputed| = %.3g, tolerance = %g\n", worst, PHASE2_TOL);
    gate_close(&g);
    return kt_failed - g.failed0;
}
