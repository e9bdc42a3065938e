/* embeddings.h — POST /v1/embeddings (the OpenAI embeddings API) for an embedding model
 * (<architecture>.pooling_type = last, e.g. Qwen3-Embedding): request parsing with every rejection
 * naming its field, and an embedder that owns one embeddings context (kipp_ctx_params.
 * embeddings) guarded by a mutex: inputs run one at a time, each as one batch in sequence 0,
 * outside the generation scheduler (which an embedding model, having no lm_head, never
 * starts). Does not touch sockets (http.c) and does not pool other than by the last token. */
#ifndef KIPP_SERVER_EMBEDDINGS_H
#define KIPP_SERVER_EMBEDDINGS_H

#include "kipp.h"

#include <jansson.h>
#include <stddef.h>

#define OAI_EMBED_MAX_INPUTS 2048 /* inputs per request, as OpenAI allows */

typedef struct oai_embedder oai_embedder;

/* An embeddings context on m with p's backend, threads, ISA and n_ctx (p->embeddings is
 * set here). m must be an embedding model (pooling last); it must outlive the embedder. */
kipp_status oai_embedder_init(kipp_model *m, const kipp_ctx_params *p, oai_embedder **out,
                              char *err, size_t err_len);
void oai_embedder_free(oai_embedder *e);
/* The context's longest input, in tokens. */
uint32_t oai_embedder_n_ctx(const oai_embedder *e);

/* Whether a request's "model" names what the server serves (its name or an alias). */
typedef int (*oai_model_check_fn)(const void *ctx, const char *model);

/* Answers one request to /v1/embeddings (is_embeddings = 1), or to a generation endpoint on a
 * server that runs an embedding model (is_embeddings = 0: a 400 saying so). e is NULL when
 * the loaded model is generative: then /v1/embeddings is a 400 naming the model's pooling.
 * Returns the JSON body (malloc'd; NULL when out of memory) and sets *status (200, 400, 404
 * or 500). */
char *oai_embeddings_answer(oai_embedder *e, const kipp_model *m, int is_embeddings,
                            const char *body, size_t len, const char *served_name,
                            oai_model_check_fn served, const void *served_ctx, int *status);

/* ---- the request (embeddings_req.c) ------------------------------------------------------ */

/* One input as token ids. */
typedef struct {
    int32_t *ids;
    size_t n;
} oai_emb_input;

typedef struct {
    oai_emb_input *in;
    size_t n_in;
    uint32_t dims;  /* 0: n_embd */
    int base64;
    const char *model;
} oai_emb_request;

/* Parses and validates a request body (strings are tokenized with m; the model's EOS is
 * appended when it asks for one). 0 with msg and *param (the field) set on a bad request;
 * free r with oai_emb_request_free either way. */
int oai_emb_parse(const kipp_model *m, json_t *root, oai_emb_request *r, char *msg,
                  size_t msg_len, const char **param);
void oai_emb_request_free(oai_emb_request *r);

#endif
