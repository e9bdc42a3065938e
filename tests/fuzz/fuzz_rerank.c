/* fuzz_rerank.c — libFuzzer target for the /v1/rerank request parser and prompt builder
 * (src/server/rerank.c) with the tiny reranker's tokenizer (KIPP_FUZZ_RERANK_MODEL, default
 * models/tiny-rerank/kipp-tiny-rerank-bf16.gguf): any body is refused with a message, or
 * accepted with a model, 1..RERANK_MAX_DOCUMENTS documents that each have text, and each
 * document's prompt tokenizes (both ways of reading special-token text) into in-vocabulary
 * ids that begin with the reranker's prefix; the response over made-up scores is JSON with
 * top_n (or every) result, sorted. */
#include "server/rerank.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kipp_model *g_model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *path = getenv("KIPP_FUZZ_RERANK_MODEL");
    char err[KIPP_ERR_LEN];
    if (kipp_model_load(path ? path : "models/tiny-rerank/kipp-tiny-rerank-bf16.gguf", &g_model, err,
                        sizeof err) != KIPP_OK) {
        fprintf(stderr, "fuzz_rerank: %s (set KIPP_FUZZ_RERANK_MODEL)\n", err);
        abort();
    }
    return 0;
}

static void check_prompts(const rerank_request *r, uint32_t n_vocab) {
    int32_t *first = NULL;
    size_t n_first = 0;
    for (size_t i = 0; i < r->n_docs && i < 4; i++)
        for (int parse = 0; parse < 2; parse++) {
            int32_t *ids = NULL;
            size_t n = 0;
            char err[KIPP_ERR_LEN] = "";
            if (rerank_prompt(g_model, r, i, parse, &ids, &n, err, sizeof err) != KIPP_OK) {
                if (!err[0]) abort(); /* a refusal says why */
                free(ids);
                continue;
            }
            for (size_t k = 0; k < n; k++)
                if (ids[k] < 0 || (uint32_t)ids[k] >= n_vocab) abort();
            if (!first) first = ids, n_first = n; /* every prompt opens with the same prefix */
            else {
                if (n < 8 || n_first < 8 || memcmp(ids, first, 8 * sizeof *ids) != 0) abort();
                free(ids);
            }
        }
    free(first);
}

static void check_response(const rerank_request *r) {
    double *scores = malloc((r->n_docs ? r->n_docs : 1) * sizeof *scores);
    if (!scores) return;
    for (size_t i = 0; i < r->n_docs; i++) scores[i] = (double)((i * 7919) % 101) / 100.0;
    char *js = rerank_response_json(r, "rerank-1", scores, 42);
    free(scores);
    if (!js) return; /* out of memory */
    json_t *o = json_loads(js, 0, NULL);
    json_t *res = json_object_get(o, "results");
    const size_t want = r->top_n && r->top_n < r->n_docs ? r->top_n : r->n_docs;
    if (!json_is_array(res) || json_array_size(res) != want) abort();
    for (size_t i = 1; i < json_array_size(res); i++)
        if (json_real_value(json_object_get(json_array_get(res, i), "relevance_score")) >
            json_real_value(json_object_get(json_array_get(res, i - 1), "relevance_score")))
            abort();
    json_decref(o);
    free(js);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *root = json_loadb((const char *)data, size, 0, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return 0; /* the handler refuses these before the parser sees them */
    }
    kipp_model_info info;
    kipp_model_get_info(g_model, &info);
    rerank_request r;
    char msg[512] = "", unknown[64] = "";
    const char *param = NULL;
    const int rc = rerank_parse(root, &r, msg, sizeof msg, &param, unknown, sizeof unknown);
    if (rc == 0) {
        if (!r.model || r.n_docs == 0 || r.n_docs > RERANK_MAX_DOCUMENTS || !r.query.text) abort();
        for (size_t i = 0; i < r.n_docs; i++)
            if (!r.docs[i].text) abort();
        check_prompts(&r, info.n_vocab);
        check_response(&r);
    } else if (rc == -1 && !msg[0]) {
        abort(); /* every refusal says why */
    }
    if (!memchr(unknown, 0, sizeof unknown)) abort();
    rerank_request_free(&r);
    json_decref(root);
    return 0;
}
