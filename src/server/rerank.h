/* rerank.h — POST /v1/rerank (and /rerank, /v1/reranking, /reranking) for Qwen3-Reranker
 * checkpoints, in the request and response shape llama-server, Jina and Cohere clients use:
 * the pure part (rerank.c): which model is a reranker and which two tokens score it, the
 * request parsed with every rejection naming its field, each document's prompt as tokens
 * (Qwen3-Reranker's published format), the score from the two log-probabilities and the
 * response. The HTTP handler that runs the prompts through the scheduler is rerank_http.c.
 * Reference: docs/server.md ("Reranking"). */
#ifndef KIPP_SERVER_RERANK_H
#define KIPP_SERVER_RERANK_H

#include "kipp.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define RERANK_MAX_DOCUMENTS 1000 /* documents per request (Cohere's limit) */

/* The instruction a request without one gets (Qwen3-Reranker's default). */
extern const char rerank_default_instruction[];

/* The two tokens a reranker is scored by: ids[0] the relevant one ("yes"), ids[1] the other
 * ("no"). A model is a reranker when its GGUF has <arch>.classifier.output_labels (two
 * labels, each one token: what tools/convert_to_gguf.py writes for a Qwen3-Reranker), or
 * when force is set (kipp-server --reranking: labels "yes" and "no"). Returns 0, or -1 with
 * msg saying why the model is not one. */
int rerank_labels(const kipp_model *m, int force, int32_t ids[2], char *msg, size_t msg_len);

typedef struct {
    char *text;
    size_t len;
} rerank_str;

typedef struct {
    char *model;
    rerank_str query, instruction; /* instruction.text NULL: the default */
    rerank_str *docs;              /* [n_docs] */
    size_t n_docs;
    size_t top_n;                  /* results returned: 0 = all */
    int return_documents;
    char param[48];                /* a rejected field with an index ("documents[3]") */
} rerank_request;

/* Parses and validates a body (the tree is borrowed). 0; -1 with msg and *param (the field;
 * NULL: the body as a whole) set: a 400; -2: out of memory. A field outside the API goes into unknown (the server logs it once);
 * a field the API defines that Kipp does not implement is a 400 naming it. Free r with
 * rerank_request_free either way. */
int rerank_parse(json_t *in, rerank_request *r, char *msg, size_t msg_len, const char **param,
                 char *unknown, size_t unknown_len);
void rerank_request_free(rerank_request *r);

/* Document i's prompt as token ids (malloc'd into *ids): the reranker's prefix, then
 * "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}" tokenized on its own
 * (special-token text in it parsed when parse_special, else plain text), then the suffix,
 * as the published scoring code tokenizes the three. */
kipp_status rerank_prompt(const kipp_model *m, const rerank_request *r, size_t i, int parse_special,
                          int32_t **ids, size_t *n, char *err, size_t err_len);

/* The relevance score from the log-probabilities of the two label tokens: the softmax of
 * the pair, the relevant label's share (exp(yes) / (exp(yes) + exp(no))). */
double rerank_score(double logprob_yes, double logprob_no);

/* The response (malloc'd JSON; NULL when out of memory): {id, object "list", model, results
 * (sorted by score, highest first, ties by index; top_n of them; each {index,
 * relevance_score} and, with return_documents, document {text}), usage {prompt_tokens,
 * total_tokens}}. scores[i] is document i's. */
char *rerank_response_json(const rerank_request *r, const char *id, const double *scores,
                           uint64_t n_prompt_tokens);

#endif
