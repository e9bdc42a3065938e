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

/* ---- the request -------------------------------------------------------------------------- */

typedef struct {
    int32_t *ids;
    size_t n;
} emb_input;

typedef struct {
    emb_input *in;
    size_t n_in;
    uint32_t dims;  /* 0: n_embd */
    int base64;
    const char *model;
} emb_request;

static void request_free(emb_request *r) {
    for (size_t i = 0; i < r->n_in; i++) free(r->in[i].ids);
    free(r->in);
}

/* An array of token ids into *out; 0 with msg set when one is not an id of the vocabulary. */
static int parse_ids(const json_t *a, uint32_t n_vocab, const char *where, emb_input *out,
                     char *msg, size_t msg_len) {
    const size_t n = json_array_size(a);
    out->ids = malloc((n ? n : 1) * sizeof *out->ids);
    if (!out->ids) return snprintf(msg, msg_len, "out of memory"), 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        const json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || id < 0 || id >= (json_int_t)n_vocab) {
            snprintf(msg, msg_len, "%s[%zu] is not a token id of this model (an integer 0..%u)",
                     where, i, n_vocab - 1);
            return 0;
        }
        out->ids[i] = (int32_t)id;
    }
    out->n = n;
    return 1;
}

/* Parses and validates the body; 0 with msg and *param set on a bad request. */
static int parse_request(const kipp_model *m, json_t *root, emb_request *r, char *msg,
                         size_t msg_len, const char **param) {
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    memset(r, 0, sizeof *r);
    *param = NULL;
    if (!json_is_object(root)) return snprintf(msg, msg_len, "the body must be a JSON object"), 0;
    const json_t *model = json_object_get(root, "model");
    *param = "model";
    if (!json_is_string(model)) return snprintf(msg, msg_len, "'model' is required (a string)"), 0;
    r->model = json_string_value(model);
    *param = "encoding_format";
    const json_t *fmt = json_object_get(root, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_is_string(fmt) ? json_string_value(fmt) : "";
        if (strcmp(f, "float") && strcmp(f, "base64"))
            return snprintf(msg, msg_len, "'encoding_format' must be \"float\" or \"base64\""), 0;
        r->base64 = !strcmp(f, "base64");
    }
    *param = "dimensions";
    const json_t *dims = json_object_get(root, "dimensions");
    if (dims && !json_is_null(dims)) {
        const json_int_t d = json_is_integer(dims) ? json_integer_value(dims) : 0;
        if (d < 1 || d > (json_int_t)info.n_embd)
            return snprintf(msg, msg_len, "'dimensions' must be an integer from 1 to %u (the "
                                          "model's embedding size)", info.n_embd), 0;
        r->dims = (uint32_t)d;
    }
    *param = "user";
    const json_t *user = json_object_get(root, "user");
    if (user && !json_is_null(user) && !json_is_string(user))
        return snprintf(msg, msg_len, "'user' must be a string"), 0;
    *param = "input";
    const json_t *in = json_object_get(root, "input");
    if (!in) return snprintf(msg, msg_len, "'input' is required"), 0;
    const int is_str = json_is_string(in);
    if (!is_str && !json_is_array(in))
        return snprintf(msg, msg_len, "'input' must be a string, an array of strings, an array "
                                      "of token ids or an array of arrays of token ids"), 0;
    const size_t n_arr = is_str ? 1 : json_array_size(in);
    if (n_arr == 0) return snprintf(msg, msg_len, "'input' is an empty array"), 0;
    const json_t *first = is_str ? in : json_array_get(in, 0);
    /* an array of integers is ONE input of token ids; other arrays hold one input each */
    const int one_tokens = !is_str && json_is_integer(first);
    const size_t n_in = is_str || one_tokens ? 1 : n_arr;
    if (n_in > OAI_EMBED_MAX_INPUTS)
        return snprintf(msg, msg_len, "'input' has %zu inputs; at most %d are allowed per request",
                        n_in, OAI_EMBED_MAX_INPUTS), 0;
    r->in = calloc(n_in, sizeof *r->in);
    if (!r->in) return snprintf(msg, msg_len, "out of memory"), 0;
    r->n_in = n_in; /* only now: request_free walks r->in[0..n_in) */
    if (one_tokens) return parse_ids(in, info.n_vocab, "input", &r->in[0], msg, msg_len);
    for (size_t i = 0; i < r->n_in; i++) {
        const json_t *v = is_str ? in : json_array_get(in, i);
        char where[48];
        snprintf(where, sizeof where, "input[%zu]", i);
        if (json_is_string(v) != json_is_string(first) || (!json_is_string(v) && !json_is_array(v)))
            return snprintf(msg, msg_len, "%s: an array of inputs must hold only strings or only "
                                          "arrays of token ids", is_str ? "input" : where), 0;
        if (json_is_array(v)) {
            if (!parse_ids(v, info.n_vocab, where, &r->in[i], msg, msg_len)) return 0;
        } else {
            char err[KIPP_ERR_LEN];
            size_t n_ids = 0;
            if (kipp_tokenize_alloc(m, json_string_value(v), json_string_length(v), 1,
                                    &r->in[i].ids, &n_ids, err, sizeof err) != KIPP_OK)
                return snprintf(msg, msg_len, "%s: %.400s", is_str ? "input" : where, err), 0;
            r->in[i].n = n_ids;
        }
        if (r->in[i].n == 0)
            return snprintf(msg, msg_len, "%s is empty (no tokens to embed)",
                            is_str ? "input" : where), 0;
        if (json_is_string(v) && info.add_eos) { /* as HF's tokenizer does for this model */
            int32_t *p = realloc(r->in[i].ids, (r->in[i].n + 1) * sizeof *p);
            if (!p) return snprintf(msg, msg_len, "out of memory"), 0;
            p[r->in[i].n++] = (int32_t)info.eos_id;
            r->in[i].ids = p;
        }
    }
    if (r->in[0].n == 0) return snprintf(msg, msg_len, "input is empty (no tokens to embed)"), 0;
    return 1;
}

/* ---- embedding and the response ----------------------------------------------------------- */

/* Runs one input; writes its n_embd-float final-norm hidden state of the last token. */
static kipp_status embed_one(oai_embedder *e, const emb_input *in, float *out, char *err,
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
                 "/v1/embeddings needs one with last-token pooling (qwen3.pooling_type = 3, e.g. "
                 "Qwen3-Embedding)",
                 kipp_pooling_name(info.pooling));
        return error_body(status, 400, msg, "invalid_request_error", "model", "model_not_embedding");
    }
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(msg, sizeof msg, "the body is not valid JSON: %s (line %d)", je.text, je.line);
        return error_body(status, 400, msg, "invalid_request_error", NULL, NULL);
    }
    emb_request r;
    const char *param = NULL;
    char *out = NULL;
    json_t *data = NULL, *resp = NULL;
    float *v = NULL;
    if (!parse_request(m, root, &r, msg, sizeof msg, &param)) {
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
    request_free(&r);
    json_decref(root);
    return out;
}
