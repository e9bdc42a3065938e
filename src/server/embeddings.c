/* embeddings.c — POST /v1/embeddings: parses the OpenAI request (input as a string, an
 * array of strings, an array of token ids, or an array of arrays of token ids; dimensions;
 * encoding_format float or base64; user), embeds each input with last-token pooling through
 * one embeddings context under a mutex, L2-normalizes (after truncating to `dimensions`, as
 * OpenAI's text-embedding-3 does), and writes the list object with usage. Not here: HTTP
 * (http.c), mean/CLS pooling, or batching several requests' inputs into one decode. */
#include "server/embeddings.h"

#include "core/error.h"
#include "server/openai.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct oai_embedder {
    kipp_model *m;
    kipp_ctx *c;      /* embeddings context; one input at a time in sequence 0 */
    pthread_mutex_t mu;
    uint32_t n_embd, n_ctx;
    uint8_t *want;    /* [n_ctx] scratch: only the last token's row is wanted */
};

kipp_status oai_embedder_init(kipp_model *m, const kipp_ctx_params *p, oai_embedder **out,
                              char *err, size_t err_len) {
    *out = NULL;
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    if (info.pooling != KIPP_POOLING_LAST)
        return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                         "embeddings: the model's pooling is '%s'; only 'last' is served",
                         kipp_pooling_name(info.pooling));
    oai_embedder *e = calloc(1, sizeof *e);
    if (!e) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "embeddings: out of memory");
    kipp_ctx_params cp = *p;
    cp.embeddings = 1;
    cp.n_kv_blocks = 0; /* one sequence of n_ctx */
    kipp_status st = kipp_ctx_init(m, &cp, &e->c, err, err_len);
    if (st != KIPP_OK) {
        free(e);
        return st;
    }
    e->m = m;
    e->n_embd = info.n_embd;
    e->n_ctx = kipp_ctx_n_ctx(e->c);
    e->want = calloc(e->n_ctx, 1);
    if (!e->want) {
        oai_embedder_free(e);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "embeddings: out of memory");
    }
    pthread_mutex_init(&e->mu, NULL);
    *out = e;
    return KIPP_OK;
}

void oai_embedder_free(oai_embedder *e) {
    if (!e) return;
    if (e->want) pthread_mutex_destroy(&e->mu);
    kipp_ctx_free(e->c);
    free(e->want);
    free(e);
}

uint32_t oai_embedder_n_ctx(const oai_embedder *e) { return e->n_ctx; }

/* ---- embedding and the response ----------------------------------------------------------- */

/* Runs one input; writes its n_embd-float final-norm hidden state of the last token. */
static kipp_status embed_one(oai_embedder *e, const oai_emb_input *in, float *out, char *err,
                             size_t err_len) {
    pthread_mutex_lock(&e->mu);
    kipp_status st = kipp_ctx_truncate(e->c, 0, err, err_len);
    if (st == KIPP_OK) {
        memset(e->want, 0, in->n);
        e->want[in->n - 1] = 1;
        const kipp_batch b = {.n = (uint32_t)in->n, .tokens = in->ids, .want_logits = e->want};
        st = kipp_decode_batch(e->c, &b, out, err, err_len);
        e->want[in->n - 1] = 0;
        kipp_ctx_truncate(e->c, 0, NULL, 0); /* release the blocks for the next input */
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* Keeps the first d values and scales them to unit length (in double: d may be 1..n_embd). */
static void truncate_normalize(float *x, uint32_t d) {
    double ss = 0.0;
    for (uint32_t i = 0; i < d; i++) ss += (double)x[i] * x[i];
    const double inv = ss > 0.0 ? 1.0 / sqrt(ss) : 0.0;
    for (uint32_t i = 0; i < d; i++) x[i] = (float)(x[i] * inv);
}

/* Standard base64 (RFC 4648, padded) of the d floats' little-endian bytes: what the OpenAI
 * client decodes with numpy.frombuffer(..., dtype="float32"). */
static json_t *base64_floats(const float *x, uint32_t d) {
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t n = (size_t)d * 4;
    unsigned char *b = malloc(n);
    char *s = malloc((n + 2) / 3 * 4 + 1);
    json_t *out = NULL;
    if (b && s) {
        for (uint32_t i = 0; i < d; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)(u >> (8 * k));
        }
        size_t o = 0;
        for (size_t i = 0; i < n; i += 3) {
            const uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) |
                               (i + 2 < n ? b[i + 2] : 0);
            s[o++] = tbl[v >> 18 & 63];
            s[o++] = tbl[v >> 12 & 63];
            s[o++] = i + 1 < n ? tbl[v >> 6 & 63] : '=';
            s[o++] = i + 2 < n ? tbl[v & 63] : '=';
        }
        s[o] = 0;
        out = json_string(s);
    }
    free(b);
    free(s);
    return out;
}

static char *error_body(int *status, int code, const char *msg, const char *type,
                        const char *param, const char *err_code) {
    *status = code;
    return oai_error_json(msg, type, param, err_code);
}

char *oai_embeddings_answer(oai_embedder *e, const kipp_model *m, int is_embeddings,
                            const char *body, size_t len, const char *served_name,
                            oai_model_check_fn served, const void *served_ctx, int *status) {
    char msg[KIPP_ERR_LEN];
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    if (!is_embeddings) /* a generation endpoint on an embedding model */
        return error_body(status, 400,
                          "this server runs an embedding model (no lm_head): it cannot generate "
                          "text; use POST /v1/embeddings",
                          "invalid_request_error", "model", "model_not_generative");
    if (!e) {
        snprintf(msg, sizeof msg,
                 "the loaded model is a generative model (pooling '%s'), not an embedding model; "
                 "/v1/embeddings needs one with last-token pooling (%s.pooling_type = 3, e.g. "
                 "Qwen3-Embedding)",
                 kipp_pooling_name(info.pooling), info.architecture);
        return error_body(status, 400, msg, "invalid_request_error", "model", "model_not_embedding");
    }
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(msg, sizeof msg, "the body is not valid JSON: %s (line %d)", je.text, je.line);
        return error_body(status, 400, msg, "invalid_request_error", NULL, NULL);
    }
    oai_emb_request r;
    const char *param = NULL;
    char *out = NULL;
    json_t *data = NULL, *resp = NULL;
    float *v = NULL;
    if (!oai_emb_parse(m, root, &r, msg, sizeof msg, &param)) {
        out = error_body(status, 400, msg, "invalid_request_error", param, NULL);
        goto done;
    }
    if (!served(served_ctx, r.model)) {
        snprintf(msg, sizeof msg, "the model '%.200s' does not exist; this server serves '%.200s'",
                 r.model, served_name);
        out = error_body(status, 404, msg, "invalid_request_error", "model", "model_not_found");
        goto done;
    }
    uint64_t n_tokens = 0;
    for (size_t i = 0; i < r.n_in; i++) {
        if (r.in[i].n > e->n_ctx) {
            snprintf(msg, sizeof msg, "input[%zu] has %zu tokens; this server embeds at most %u "
                                      "tokens per input", i, r.in[i].n, e->n_ctx);
            out = error_body(status, 400, msg, "invalid_request_error", "input",
                             "context_length_exceeded");
            goto done;
        }
        n_tokens += r.in[i].n;
    }
    const uint32_t d = r.dims ? r.dims : e->n_embd;
    v = malloc((size_t)e->n_embd * sizeof *v);
    data = json_array();
    if (!v || !data) goto oom;
    for (size_t i = 0; i < r.n_in; i++) {
        char err[KIPP_ERR_LEN];
        if (embed_one(e, &r.in[i], v, err, sizeof err) != KIPP_OK) {
            snprintf(msg, sizeof msg, "embedding input %zu failed: %.400s", i, err);
            out = error_body(status, 500, msg, "server_error", NULL, NULL);
            goto done;
        }
        truncate_normalize(v, d);
        json_t *vec = NULL;
        if (r.base64) {
            vec = base64_floats(v, d);
        } else if ((vec = json_array())) {
            for (uint32_t k = 0; k < d; k++)
                if (json_array_append_new(vec, json_real(v[k]))) goto oom;
        }
        json_t *item = vec ? json_pack("{s:s, s:I, s:o}", "object", "embedding", "index",
                                       (json_int_t)i, "embedding", vec)
                           : NULL;
        if (!item || json_array_append_new(data, item)) goto oom;
    }
    resp = json_pack("{s:s, s:O, s:s, s:{s:I, s:I}}", "object", "list", "data", data, "model",
                     r.model, "usage", "prompt_tokens", (json_int_t)n_tokens, "total_tokens",
                     (json_int_t)n_tokens);
    if (!resp || !(out = json_dumps(resp, JSON_COMPACT | JSON_REAL_PRECISION(9)))) goto oom;
    *status = 200;
    goto done;
oom:
    free(out);
    out = error_body(status, 500, "out of memory", "server_error", NULL, NULL);
done:
    json_decref(resp);
    json_decref(data);
    free(v);
    oai_emb_request_free(&r);
    json_decref(root);
    return out;
}
