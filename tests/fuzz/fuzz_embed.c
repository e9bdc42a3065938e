/* fuzz_embed.c — libFuzzer target for the /v1/embeddings request parser
 * (src/server/embeddings_req.c) with a real embedding model's tokenizer and sizes
 * (KIPP_FUZZ_EMBED_MODEL, default models/tiny-embed/kipp-tiny-embed-bf16.gguf): any body is
 * refused with a message and a field, or accepted with inputs that are non-empty, in the
 * vocabulary, at most OAI_EMBED_MAX_INPUTS, and dimensions within the embedding size. */
#include "server/embeddings.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kipp_model *g_model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *path = getenv("KIPP_FUZZ_EMBED_MODEL");
    char err[KIPP_ERR_LEN];
    if (kipp_model_load(path ? path : "models/tiny-embed/kipp-tiny-embed-bf16.gguf", &g_model, err,
                        sizeof err) != KIPP_OK) {
        fprintf(stderr, "fuzz_embed: %s (set KIPP_FUZZ_EMBED_MODEL)\n", err);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t je;
    json_t *root = json_loadb((const char *)data, size, 0, &je);
    if (!root) return 0;
    kipp_model_info info;
    kipp_model_get_info(g_model, &info);
    oai_emb_request r;
    char msg[512] = "";
    const char *param = NULL;
    if (oai_emb_parse(g_model, root, &r, msg, sizeof msg, &param)) {
        if (!r.model || r.n_in == 0 || r.n_in > OAI_EMBED_MAX_INPUTS || r.dims > info.n_embd) abort();
        for (size_t i = 0; i < r.n_in; i++) {
            if (r.in[i].n == 0) abort();
            for (size_t k = 0; k < r.in[i].n; k++)
                if (r.in[i].ids[k] < 0 || (uint32_t)r.in[i].ids[k] >= info.n_vocab) abort();
        }
    } else if (!msg[0]) {
        abort(); /* every refusal says why */
    }
    oai_emb_request_free(&r);
    json_decref(root);
    return 0;
}
