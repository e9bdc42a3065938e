/* gate_common.c — shared helpers of the model gates: manifest loading (jansson), opening a
 * model + cpu-ref context, logits comparison, and the golden check of one position. Runs
 * no gate by itself. */
#include "gate_common.h"

#include "kt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int load_manifest(const char *dir, kt_manifest *mf) {
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
        mf->root = NULL;
        return 0;
    }
    mf->bound = json_number_value(b);
    mf->top_k = (size_t)json_integer_value(k);
    mf->n_vocab = (uint32_t)json_integer_value(nv);
    return 1;
}

int32_t *kt_prompt_tokens(json_t *p, size_t *n) {
    json_t *t = json_object_get(p, "tokens");
    *n = json_array_size(t);
    if (!json_is_array(t) || *n == 0) return NULL;
    int32_t *ids = malloc(*n * sizeof *ids);
    if (!ids) return NULL;
    for (size_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(t, i));
    return ids;
}

uint32_t kt_argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

double kt_max_abs_diff(const float *a, const float *b, uint32_t n) {
    double e = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) return INFINITY;
        if (d > e) e = d;
    }
    return e;
}

void kt_gate_close(kt_gate *g) {
    free(g->a);
    free(g->b);
    kipp_ctx_free(g->c);
    kipp_model_free(g->m);
    if (g->mf.root) json_decref(g->mf.root);
    g->a = g->b = NULL;
    g->c = NULL;
    g->m = NULL;
    g->mf.root = NULL;
}

int kt_gate_open(kt_gate *g, const char *model_path, const char *vec_dir,
                 const kipp_ctx_params *cp) {
    char err[KIPP_ERR_LEN];
    memset(g, 0, sizeof *g);
    g->failed0 = kt_failed;
    if (!load_manifest(vec_dir, &g->mf)) return 0;
    if (kipp_model_load(model_path, &g->m, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "gate: %s\n", err);
        kt_gate_close(g);
        return 0;
    }
    kipp_ctx_params p = cp ? *cp : kipp_ctx_default_params();
    p.backend = "cpu-ref";
    if (kipp_ctx_init(g->m, &p, &g->c, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "gate: %s\n", err);
        kt_gate_close(g);
        return 0;
    }
    kipp_model_get_info(g->m, &g->info);
    g->a = malloc((size_t)g->info.n_vocab * sizeof *g->a);
    g->b = malloc((size_t)g->info.n_vocab * sizeof *g->b);
    if (!g->a || !g->b) {
        fprintf(stderr, "gate: out of memory\n");
        kt_gate_close(g);
        return 0;
    }
    return 1;
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

double kt_golden_check(const kt_gate *g, const char *vec_dir, size_t pi, size_t pos,
                       const float *logits, float *ref) {
    const kt_manifest *mf = &g->mf;
    const uint32_t n_vocab = g->info.n_vocab;
    json_t *p = json_array_get(json_object_get(mf->root, "prompts"), pi);
    json_t *am = json_object_get(p, "argmax"), *tki = json_object_get(p, "topk_ids"),
           *tkl = json_object_get(p, "topk_logits"),
           *flp = json_object_get(p, "full_logits_positions"),
           *flf = json_object_get(p, "full_logits_file");
    uint32_t want = (uint32_t)json_integer_value(json_array_get(am, pos));
    uint32_t got = kt_argmax(logits, n_vocab);
    KT_CHECK(got == want, "prompt %zu position %zu: argmax %u, oracle %u", pi, pos, got, want);
    json_t *ids_k = json_array_get(tki, pos), *lg_k = json_array_get(tkl, pos);
    double worst = 0.0;
    for (size_t j = 0; j < json_array_size(ids_k); j++) {
        uint32_t id = (uint32_t)json_integer_value(json_array_get(ids_k, j));
        if (id >= n_vocab) continue;
        double e = fabs((double)logits[id] - json_number_value(json_array_get(lg_k, j)));
        if (isnan(e)) e = INFINITY;
        if (e > worst) worst = e;
    }
    KT_CHECK(json_array_size(ids_k) == mf->top_k && worst <= mf->bound,
             "prompt %zu position %zu: top-%zu logit error %.3g > bound %.3g", pi, pos, mf->top_k,
             worst, mf->bound);
    for (size_t r = 0; r < json_array_size(flp); r++) {
        if ((size_t)json_integer_value(json_array_get(flp, r)) != pos) continue;
        if (!read_logits_row(vec_dir, json_string_value(flf), r, n_vocab, ref)) {
            KT_CHECK(0, "missing full logits for prompt %zu", pi);
            continue;
        }
        double e_full = kt_max_abs_diff(logits, ref, n_vocab);
        KT_CHECK(e_full <= mf->bound,
                 "prompt %zu position %zu: full-vocab logit error %.3g > bound %.3g", pi, pos,
                 e_full, mf->bound);
        if (e_full > worst) worst = e_full;
    }
    return worst;
}
