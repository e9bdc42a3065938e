/* responses.h — the OpenAI Responses API (POST /v1/responses), stateless, as a protocol
 * adapter (api.h) in two halves: responses_req.c turns a request into an OpenAI chat request
 * (and keeps the fields the Response object repeats; it links with openai_req.c alone, as a
 * fuzzer wants), responses.c turns the generated reasoning, text and tool calls into the
 * Response object or its typed SSE events, and errors into OpenAI's shape with the Responses
 * field names. Neither touches HTTP. Reference: docs/server.md, "OpenAI Responses API".
 * Nothing is stored: previous_response_id and the like are 400s. */
#ifndef KIPP_SERVER_RESPONSES_H
#define KIPP_SERVER_RESPONSES_H

#include "server/api.h"

/* The item being written while streaming (at most one is open at a time). */
typedef enum { RESP_ITEM_NONE = 0, RESP_ITEM_REASONING, RESP_ITEM_MESSAGE } resp_item_kind;

/* A request's state: made by resp_to_openai, freed by resp_state_free (api.h free_state). */
typedef struct {
    json_t *echo;          /* the request's fields the Response object repeats (instructions,
                              tools, tool_choice, text, temperature, ...) */
    char id[24];           /* "resp_" and 16 hex digits, random */
    json_t *output;        /* the output items finished so far, in order */
    resp_item_kind open;   /* the item being written, its id and its text so far */
    char open_id[40];
    kipp_buf open_text;
    uint32_t n_items;      /* items begun (their ids: msg_/rs_ + the response's hex + n) */
    uint32_t calls_done;   /* g->calls already made into items */
    uint64_t seq;          /* streaming: the next event's sequence_number */
    int started;           /* streaming: response.created and .in_progress were sent */
    uint64_t reasoning_tokens;
} resp_state;

/* srv_api_ops.to_openai: the Responses request in as the chat request that oai_parse_tree
 * checks (*ep OAI_CHAT). On failure *param points to thread-local storage valid until the
 * thread's next call. */
json_t *resp_to_openai(json_t *in, int endpoint, oai_endpoint *ep, void **state, char *msg,
                       size_t msg_len, const char **param, char *unknown, size_t unknown_len);
/* srv_api_ops.error_json (responses.c): OpenAI's error shape, the chat request's field names that reach it
 * (oai_parse_tree's, the template's) renamed to the Responses fields they came from. */
char *resp_error_json(int status, const char *message, const char *type, const char *param,
                      const char *code);
void resp_state_free(void *state);

#endif
