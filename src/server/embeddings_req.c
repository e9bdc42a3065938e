/* embeddings_req.c — parsing and validating a POST /v1/embeddings body (every rejection
 * names its field); kept apart from the embedder so that the fuzzer links only the
 * tokenizer and the model loader. The embedding itself is embeddings.c. */
#include "server/embeddings.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void oai_emb_request_free(oai_emb_request *r) {
    for (size_t i = 0; i < r->n_in; i++) free(r->in[i].ids);
    free(r->in);
}

/* An array of token ids into *out; 0 with msg set when one is not an id of the vocabulary. */
static int parse_ids(const json_t *a, uint32_t n_vocab, const char *where, oai_emb_input *out,
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
int oai_emb_parse(const kipp_model *m, json_t *root, oai_emb_request *r, char *msg,
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
    r->n_in = n_in; /* only now: oai_emb_request_free walks r->in[0..n_in) */
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

