/* gates_embed.c — the embedding gate: Kipp's last-token embeddings of an embedding model
 * (kipp_ctx_params.embeddings, L2-normalized here as the server does) against the golden
 * embeddings of tools/make_embed_vectors.py (HF Qwen3Model, last_hidden_state of the last
 * token, normalized): cosine >= the manifest's cosine_min (0.9999) and max |a - b| <= its
 * max_abs_bound (EMB_FAST_ABS on an optimized backend), per input, one sequence at a time and all inputs as one batch of
 * interleaved sequences. Also: the model reports pooling "last" and no lm_head, and a
 * logits context on it is refused. Does not test the HTTP endpoint (tests/server). */
#include "gates.h"

#include "gate_common.h"
#include "kt.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EMB_MAX_INPUTS 32
/* max |a - b| on an optimized backend: its kernels round activations to bf16 or 8-bit blocks
 * (gates_cpu.c), so it misses the float32 oracle by more than cpu-ref does (measured on
 * tiny-embed bf16: <= 6.1e-5 on cpu, <= 1e-5 on cpu-ref); 8x margin. The cosine bound is the
 * manifest's on every backend. */
#define EMB_FAST_ABS 5e-4

static void l2_normalize(float *x, uint32_t n) {
    double ss = 0.0;
    for (uint32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const double inv = ss > 0.0 ? 1.0 / sqrt(ss) : 0.0;
    for (uint32_t i = 0; i < n; i++) x[i] = (float)(x[i] * inv);
}

static double cosine(const float *a, const float *b, uint32_t n) {
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (uint32_t i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i],
                                     bb += (double)b[i] * b[i];
    return aa > 0.0 && bb > 0.0 ? ab / sqrt(aa * bb) : 0.0;
}

/* Checks one embedding against the golden one; what: "single" or "batch". */
static void check_one(const char *label, const char *what, size_t k, const float *got,
                      const float *want, uint32_t n, double cos_min, double bound) {
    const double c = cosine(got, want, n), d = kt_max_abs_diff(got, want, n);
    KT_CHECK(c >= cos_min && d <= bound,
             "%s %s input %zu: cosine %.8f (>= %.6f wanted), max |a-b| %.3g (<= %.3g wanted)",
             label, what, k, c, cos_min, d, bound);
}

int kt_gate_embed_golden(const char *model_path, const char *vec_dir, const kt_opts *o) {
    char err[KIPP_ERR_LEN], path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", vec_dir);
    json_error_t je;
    json_t *mf = json_load_file(path, 0, &je);
    if (!mf) {
        fprintf(stderr, "embed gate: %s: %s (line %d)\n", path, je.text, je.line);
        return -1;
    }
    const double cos_min = json_number_value(json_object_get(mf, "cosine_min"));
    double bound = json_number_value(json_object_get(mf, "max_abs_bound"));
    json_t *inputs = json_object_get(mf, "inputs");
    const size_t n_in = json_array_size(inputs);
    kipp_model *m = NULL;
    kipp_ctx *c = NULL;
    float *got = NULL, *want = NULL;
    int32_t *toks[EMB_MAX_INPUTS] = {0};
    size_t n_tok[EMB_MAX_INPUTS] = {0};
    int rc = -1;
    if (!(cos_min > 0.0 && bound > 0.0 && n_in > 0 && n_in <= EMB_MAX_INPUTS)) {
        fprintf(stderr, "embed gate: %s lacks cosine_min, max_abs_bound or 1..%d inputs\n", path,
                EMB_MAX_INPUTS);
        goto done;
    }
    if (kipp_model_load(model_path, &m, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "embed gate: %s\n", err);
        goto done;
    }
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    const uint32_t H = info.n_embd;
    KT_CHECK(info.pooling == KIPP_POOLING_LAST && !info.has_lm_head,
             "model info: pooling %s, has_lm_head %d (last, 0 expected)",
             kipp_pooling_name(info.pooling), info.has_lm_head);

    /* generation on a model without an lm_head is refused with a sentence saying so */
    kipp_ctx_params cp = kt_ctx_params(o, "cpu-ref");
    kipp_status st = kipp_ctx_init(m, &cp, &c, err, sizeof err);
    KT_CHECK(st == KIPP_ERR_UNSUPPORTED && !c && strstr(err, "embeddings = 1"),
             "a logits context on an embedding model: status %s, message '%s'",
             kipp_status_str(st), err);
    kipp_ctx_free(c);
    c = NULL;

    cp.embeddings = 1;
    cp.n_kv_blocks = 0;
    cp.n_ctx = 256;
    cp.n_kv_blocks = 8 * (EMB_MAX_INPUTS + 1); /* every input at once, 16-token blocks */
    if ((st = kipp_ctx_init(m, &cp, &c, err, sizeof err)) != KIPP_OK) {
        fprintf(stderr, "embed gate: context on %s: %s\n", kt_backend(o, "cpu-ref"), err);
        goto done;
    }
    kipp_ctx_info ci;
    kipp_ctx_get_info(c, &ci);
    KT_CHECK(ci.embeddings && ci.n_logits == H, "context info: embeddings %d, row %u (1, %u wanted)",
             ci.embeddings, ci.n_logits, H);
    char label[48];
    kt_label(&cp, label, sizeof label);
    if (strcmp(ci.backend, "cpu-ref") != 0 && bound < EMB_FAST_ABS) bound = EMB_FAST_ABS;
    got = malloc((size_t)n_in * H * sizeof *got);
    want = malloc((size_t)n_in * H * sizeof *want);
    if (!got || !want) goto done;
    size_t n_all = 0;
    for (size_t k = 0; k < n_in; k++) {
        json_t *e = json_array_get(inputs, k), *emb = json_object_get(e, "embedding");
        toks[k] = kt_prompt_tokens(e, &n_tok[k]);
        if (!toks[k] || json_array_size(emb) != H) {
            fprintf(stderr, "embed gate: input %zu lacks tokens or an embedding of %u floats\n", k, H);
            goto done;
        }
        for (uint32_t i = 0; i < H; i++)
            want[k * H + i] = (float)json_number_value(json_array_get(emb, i));
        n_all += n_tok[k];
    }

    /* one input at a time in sequence 0, only the last token wanted */
    for (size_t k = 0; k < n_in; k++) {
        kipp_ctx_truncate(c, 0, NULL, 0);
        uint8_t *w = calloc(n_tok[k], 1);
        if (!w) goto done;
        w[n_tok[k] - 1] = 1;
        const kipp_batch b = {.n = (uint32_t)n_tok[k], .tokens = toks[k], .want_logits = w};
        st = kipp_decode_batch(c, &b, got + k * H, err, sizeof err);
        free(w);
        KT_CHECK(st == KIPP_OK, "%s input %zu: decode: %s", label, k, err);
        if (st != KIPP_OK) continue;
        l2_normalize(got + k * H, H);
        check_one(label, "single", k, got + k * H, want + k * H, H, cos_min, bound);
    }

    /* every input in its own sequence, tokens interleaved round-robin, in one batch */
    kipp_ctx_truncate(c, 0, NULL, 0);
    uint32_t seq[EMB_MAX_INPUTS];
    int32_t *bt = malloc(n_all * sizeof *bt);
    uint32_t *bs = malloc(n_all * sizeof *bs);
    uint8_t *bw = calloc(n_all, 1);
    size_t order[EMB_MAX_INPUTS], n_rows = 0, n = 0;
    int ok = bt && bs && bw;
    for (size_t k = 0; ok && k < n_in; k++)
        ok = (k == 0 ? (seq[0] = 0, KIPP_OK) : kipp_ctx_seq_new(c, &seq[k], err, sizeof err)) == KIPP_OK;
    for (size_t pos = 0; ok && n < n_all; pos++)
        for (size_t k = 0; k < n_in; k++) {
            if (pos >= n_tok[k]) continue;
            bt[n] = toks[k][pos];
            bs[n] = seq[k];
            if (pos + 1 == n_tok[k]) bw[n] = 1, order[n_rows++] = k;
            n++;
        }
    if (ok) {
        const kipp_batch b = {.n = (uint32_t)n_all, .tokens = bt, .seq_ids = bs, .want_logits = bw};
        float *rows = malloc((size_t)n_in * H * sizeof *rows);
        st = rows ? kipp_decode_batch(c, &b, rows, err, sizeof err) : KIPP_ERR_NOMEM;
        KT_CHECK(st == KIPP_OK, "%s batch of %zu inputs: decode: %s", label, n_in, err);
        for (size_t r = 0; st == KIPP_OK && r < n_rows; r++) {
            l2_normalize(rows + r * H, H);
            check_one(label, "batch", order[r], rows + r * H, want + order[r] * H, H, cos_min, bound);
        }
        free(rows);
    } else {
        KT_CHECK(0, "%s: could not set up the batch: %s", label, err);
    }
    free(bt); free(bs); free(bw);
    printf("embed gate %s: %zu inputs (%zu tokens), cosine >= %.4f and max |a-b| <= %.2g\n", label,
           n_in, n_all, cos_min, bound);
    rc = 0;
done:
    for (size_t k = 0; k < EMB_MAX_INPUTS; k++) free(toks[k]);
    free(got); free(want);
    kipp_ctx_free(c);
    kipp_model_free(m);
    json_decref(mf);
    return rc;
}
