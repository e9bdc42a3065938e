/* rerank.c — the pure part of POST /v1/rerank (no HTTP, no scheduler, so a fuzzer links
 * it with the tokenizer and the model loader only): whether the served model is a reranker
 * and its two label tokens, the request parsed (every rejection names its field; the
 * fields of Cohere's, Jina's, TEI's and vLLM's rerank APIs that Kipp does not implement are
 * 400s), each document's prompt as tokens in Qwen3-Reranker's published format, the score
 * and the response. Not here: running the prompts (rerank_http.c). */
#include "server/rerank.h"

#include "core/error.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Qwen3-Reranker's prompt, from its model card's scoring code: the prefix and suffix are
 * tokenized apart from the (instruction, query, document) text between them */
static const char rerank_prefix[] =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n";
static const char rerank_suffix[] = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
const char rerank_default_instruction[] =
    "Given a web search query, retrieve relevant passages that answer the query";

/* ---- the model ------------------------------------------------------------------------- */

/* The id of label (one token, special tokens not parsed), or -1 with msg set. */
static int32_t label_id(const kipp_model *m, const char *label, size_t len, char *msg, size_t msg_len) {
    int32_t *ids = NULL;
    size_t n = 0;
    char err[KIPP_ERR_LEN];
    int32_t id = -1;
    if (kipp_tokenize_alloc(m, label, len, 0, &ids, &n, err, sizeof err) != KIPP_OK)
        snprintf(msg, msg_len, "the reranker label '%.*s' does not tokenize: %s", (int)(len > 64 ? 64 : len),
                 label, err);
    else if (n != 1)
        snprintf(msg, msg_len, "the reranker label '%.*s' is %zu tokens, not one", (int)(len > 64 ? 64 : len),
                 label, n);
    else
        id = ids[0];
    free(ids);
    return id;
}

int rerank_labels(const kipp_model *m, int force, int32_t ids[2], char *msg, size_t msg_len) {
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    char key[128];
    snprintf(key, sizeof key, "%s.classifier.output_labels", info.architecture);
    kipp_gguf_vtype t;
    uint64_t n = 0;
    const void *data;
    const int has = kipp_gguf_find_key(m->gguf, key) >= 0;
    if (!has && !force) {
        snprintf(msg, msg_len, "the served model is not a reranker: its GGUF has no %s (convert a "
                 "Qwen3-Reranker checkpoint with tools/convert_to_gguf.py, or start kipp-server "
                 "with --reranking to score this model by its \"yes\" / \"no\" logits)", key);
        return -1;
    }
    if (!info.has_lm_head) {
        snprintf(msg, msg_len, "the served model has no lm_head (an embedding model): it cannot rerank");
        return -1;
    }
    if (!has) {
        ids[0] = label_id(m, "yes", 3, msg, msg_len);
        ids[1] = ids[0] < 0 ? -1 : label_id(m, "no", 2, msg, msg_len);
        return ids[1] < 0 ? -1 : 0;
    }
    char err[KIPP_ERR_LEN];
    if (kipp_gguf_get_arr(m->gguf, key, &t, &n, &data, err, sizeof err) != KIPP_OK || t != KIPP_GGUF_STRING ||
        n != 2) {
        snprintf(msg, msg_len, "the model's %s must be two strings (the relevant label first)", key);
        return -1;
    }
    for (int k = 0; k < 2; k++) {
        const kipp_gguf_str s = kipp_gguf_arr_str(m->gguf, key, (uint64_t)k);
        if ((ids[k] = label_id(m, s.ptr, (size_t)s.len, msg, msg_len)) < 0) return -1;
    }
    return 0;
}

/* ---- the request ------------------------------------------------------------------------ */

/* Fields of the rerank APIs clients speak that Kipp does not implement, and why. */
static const struct {
    const char *name, *why;
} unimplemented[] = {
    {"max_chunks_per_doc", "documents are not split into chunks (Cohere v1); a document too "
                           "long for the context is a 400"},
    {"max_tokens_per_doc", "documents are not truncated (Cohere v2); a document too long for the "
                           "context is a 400"},
    {"rank_fields", "documents are ranked by their 'text' only (Cohere v1)"},
    {"truncate_prompt_tokens", "prompts are not truncated (vLLM); a document too long for the "
                               "context is a 400"},
    {"texts", "the TEI request shape is not served; send 'query' and 'documents'"},
    {"raw_scores", "the TEI request shape is not served; scores are probabilities"},
    {"return_text", "the TEI request shape is not served; use 'return_documents'"},
    {"truncate", "the TEI request shape is not served; documents are not truncated"},
    {"truncation_direction", "the TEI request shape is not served; documents are not truncated"},
};
static const char *const known[] = {"model", "query", "documents", "top_n", "return_documents",
                                    "instruction"};

/* A 400: the field (NULL: the body as a whole) and what is wrong with it. */
static int bad(char *msg, size_t msg_len, const char **param, const char *field, const char *text) {
    *param = field;
    snprintf(msg, msg_len, "%s", text);
    return -1;
}

static int oom(char *msg, size_t msg_len) {
    snprintf(msg, msg_len, "out of memory");
    return -2;
}

/* A copy of a JSON string (its length: a string may hold any UTF-8). */
static int copy_str(const json_t *v, rerank_str *out) {
    out->len = json_string_length(v);
    if (!(out->text = malloc(out->len + 1))) return -1;
    memcpy(out->text, json_string_value(v), out->len + 1);
    return 0;
}

static void note_unknown(char *unknown, size_t unknown_len, const char *name) {
    if (unknown_len && !unknown[0]) snprintf(unknown, unknown_len, "%s", name);
}

/* The fields outside the two lists go into unknown; a defined, unimplemented one is a 400. */
static int check_fields(json_t *in, char *msg, size_t msg_len, const char **param, char *unknown,
                        size_t unknown_len) {
    const char *key;
    json_t *v;
    json_object_foreach(in, key, v) {
        size_t k, hit = 0;
        for (k = 0; k < sizeof unimplemented / sizeof *unimplemented; k++)
            if (!strcmp(key, unimplemented[k].name)) {
                if (json_is_null(v)) break; /* null: absent */
                *param = unimplemented[k].name;
                snprintf(msg, msg_len, "'%s' is not supported: %s", key, unimplemented[k].why);
                return -1;
            }
        hit = k < sizeof unimplemented / sizeof *unimplemented;
        for (k = 0; !hit && k < sizeof known / sizeof *known; k++) hit = !strcmp(key, known[k]);
        if (!hit) note_unknown(unknown, unknown_len, key);
    }
    return 0;
}

/* documents[i]: a string or a {"text": string} object (its other keys are noted as unknown). */
static int parse_document(const json_t *d, size_t i, rerank_request *r, char *msg, size_t msg_len,
                          const char **param, char *unknown, size_t unknown_len) {
    const json_t *text = d;
    snprintf(r->param, sizeof r->param, "documents[%zu]", i);
    if (json_is_object(d)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)d, key, v) {
            char name[64];
            snprintf(name, sizeof name, "documents[].%s", key);
            if (strcmp(key, "text")) note_unknown(unknown, unknown_len, name);
        }
        text = json_object_get(d, "text");
        snprintf(r->param, sizeof r->param, "documents[%zu].text", i);
    }
    if (!json_is_string(text)) {
        snprintf(msg, msg_len, "'%s' must be a string (a document is a string or an object with a "
                 "string 'text')", r->param);
        *param = r->param;
        return -1;
    }
    return copy_str(text, &r->docs[i]) ? oom(msg, msg_len) : 0;
}

/* documents: 1..RERANK_MAX_DOCUMENTS strings or {"text": string} objects. */
static int parse_documents(const json_t *a, rerank_request *r, char *msg, size_t msg_len,
                           const char **param, char *unknown, size_t unknown_len) {
    if (!json_is_array(a))
        return bad(msg, msg_len, param, "documents", "'documents' is required: an array of "
                    "strings or of {\"text\": string} objects");
    const size_t n = json_array_size(a);
    if (n == 0) return bad(msg, msg_len, param, "documents", "'documents' is an empty array");
    if (n > RERANK_MAX_DOCUMENTS) {
        snprintf(msg, msg_len, "'documents' has %zu documents; at most %d are allowed per request", n,
                 RERANK_MAX_DOCUMENTS);
        *param = "documents";
        return -1;
    }
    if (!(r->docs = calloc(n, sizeof *r->docs))) return oom(msg, msg_len);
    r->n_docs = n;
    for (size_t i = 0; i < n; i++) {
        const int rc = parse_document(json_array_get(a, i), i, r, msg, msg_len, param, unknown, unknown_len);
        if (rc) return rc;
    }
    return 0;
}

/* instruction, top_n and return_documents (absent or null: their defaults). */
static int parse_options(json_t *in, rerank_request *r, char *msg, size_t msg_len, const char **param) {
    const json_t *ins = json_object_get(in, "instruction");
    if (ins && !json_is_null(ins)) {
        if (!json_is_string(ins))
            return bad(msg, msg_len, param, "instruction", "'instruction' must be a string or null");
        if (copy_str(ins, &r->instruction)) return oom(msg, msg_len);
    }
    const json_t *top = json_object_get(in, "top_n");
    if (top && !json_is_null(top)) {
        if (!json_is_integer(top) || json_integer_value(top) < 1)
            return bad(msg, msg_len, param, "top_n", "'top_n' must be an integer of at least 1 "
                        "(or null: every document)");
        r->top_n = (size_t)json_integer_value(top);
    }
    const json_t *ret = json_object_get(in, "return_documents");
    if (ret && !json_is_null(ret)) {
        if (!json_is_boolean(ret))
            return bad(msg, msg_len, param, "return_documents", "'return_documents' must be a boolean");
        r->return_documents = json_is_true(ret);
    }
    return 0;
}

int rerank_parse(json_t *in, rerank_request *r, char *msg, size_t msg_len, const char **param,
                 char *unknown, size_t unknown_len) {
    memset(r, 0, sizeof *r);
    *param = NULL;
    if (!json_is_object(in)) return bad(msg, msg_len, param, NULL, "the body must be a JSON object");
    if (check_fields(in, msg, msg_len, param, unknown, unknown_len)) return -1;
    const json_t *model = json_object_get(in, "model");
    if (!json_is_string(model)) return bad(msg, msg_len, param, "model", "'model' is required (a string)");
    if (!(r->model = strdup(json_string_value(model)))) return oom(msg, msg_len);
    const json_t *q = json_object_get(in, "query");
    if (!json_is_string(q)) return bad(msg, msg_len, param, "query", "'query' is required (a string)");
    if (copy_str(q, &r->query)) return oom(msg, msg_len);
    const int rc = parse_options(in, r, msg, msg_len, param);
    return rc ? rc : parse_documents(json_object_get(in, "documents"), r, msg, msg_len, param, unknown, unknown_len);
}

void rerank_request_free(rerank_request *r) {
    for (size_t i = 0; i < r->n_docs; i++) free(r->docs[i].text);
    free(r->docs);
    free(r->model);
    free(r->query.text);
    free(r->instruction.text);
    memset(r, 0, sizeof *r);
}

/* ---- the prompt ------------------------------------------------------------------------- */

/* "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}" (malloc'd, *len bytes). */
static char *pair_text(const rerank_request *r, size_t i, size_t *len) {
    const char *ins = r->instruction.text ? r->instruction.text : rerank_default_instruction;
    const size_t ins_len = r->instruction.text ? r->instruction.len : strlen(rerank_default_instruction);
    const rerank_str parts[6] = {{"<Instruct>: ", 12}, {(char *)ins, ins_len}, {"\n<Query>: ", 10},
                                 r->query, {"\n<Document>: ", 13}, r->docs[i]};
    size_t n = 0;
    for (int k = 0; k < 6; k++) n += parts[k].len;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    n = 0;
    for (int k = 0; k < 6; k++) memcpy(s + n, parts[k].text, parts[k].len), n += parts[k].len;
    s[n] = 0;
    *len = n;
    return s;
}

/* Appends text's tokens to *ids (*n of them, *cap room). */
static kipp_status append_tokens(const kipp_model *m, const char *text, size_t len, int parse,
                                 int32_t **ids, size_t *n, size_t *cap, char *err, size_t err_len) {
    int32_t *t = NULL;
    size_t k = 0;
    kipp_status st = kipp_tokenize_alloc(m, text, len, parse, &t, &k, err, err_len);
    if (st == KIPP_OK && *n + k > *cap) {
        const size_t want = (*n + k) * 2;
        int32_t *p = realloc(*ids, want * sizeof *p);
        if (!p) st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory");
        else *ids = p, *cap = want;
    }
    if (st == KIPP_OK) memcpy(*ids + *n, t, k * sizeof *t), *n += k;
    free(t);
    return st;
}

kipp_status rerank_prompt(const kipp_model *m, const rerank_request *r, size_t i, int parse_special,
                          int32_t **ids, size_t *n, char *err, size_t err_len) {
    *ids = NULL;
    *n = 0;
    size_t cap = 0, len = 0;
    char *pair = pair_text(r, i, &len);
    if (!pair) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "out of memory");
    kipp_status st = append_tokens(m, rerank_prefix, sizeof rerank_prefix - 1, 1, ids, n, &cap, err, err_len);
    if (st == KIPP_OK) st = append_tokens(m, pair, len, parse_special, ids, n, &cap, err, err_len);
    if (st == KIPP_OK)
        st = append_tokens(m, rerank_suffix, sizeof rerank_suffix - 1, 1, ids, n, &cap, err, err_len);
    free(pair);
    if (st != KIPP_OK) free(*ids), *ids = NULL, *n = 0;
    return st;
}

/* ---- the answer ------------------------------------------------------------------------- */

double rerank_score(double logprob_yes, double logprob_no) {
    return 1.0 / (1.0 + exp(logprob_no - logprob_yes));
}

typedef struct {
    double score;
    size_t index;
} ranked;

static int by_score(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

char *rerank_response_json(const rerank_request *r, const char *id, const double *scores,
                           uint64_t n_prompt_tokens) {
    ranked *order = malloc(r->n_docs * sizeof *order);
    json_t *results = json_array(), *resp = NULL;
    char *out = NULL;
    if (!order || !results) goto done;
    for (size_t i = 0; i < r->n_docs; i++) order[i] = (ranked){scores[i], i};
    qsort(order, r->n_docs, sizeof *order, by_score);
    const size_t n = r->top_n && r->top_n < r->n_docs ? r->top_n : r->n_docs;
    for (size_t k = 0; k < n; k++) {
        const rerank_str *d = &r->docs[order[k].index];
        json_t *item = json_pack("{s:I, s:f}", "index", (json_int_t)order[k].index, "relevance_score",
                                 order[k].score);
        if (item && r->return_documents &&
            json_object_set_new(item, "document", json_pack("{s:s%}", "text", d->text, d->len)))
            json_decref(item), item = NULL;
        if (!item || json_array_append_new(results, item)) goto done;
    }
    resp = json_pack("{s:s, s:s, s:s, s:O, s:{s:I, s:I}}", "id", id, "object", "list", "model", r->model,
                     "results", results, "usage", "prompt_tokens", (json_int_t)n_prompt_tokens,
                     "total_tokens", (json_int_t)n_prompt_tokens);
    if (resp) out = json_dumps(resp, JSON_COMPACT | JSON_REAL_PRECISION(17));
done:
    json_decref(resp);
    json_decref(results);
    free(order);
    return out;
}
