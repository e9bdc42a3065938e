/* api.h — the protocols kipp-server speaks besides OpenAI's, as adapters around the one
 * generation path (generate.c): an adapter turns its protocol's request into an OpenAI
 * request (a JSON tree that oai_parse_tree then checks like any other, so limits, sampling
 * ranges and the constraint rules are the same everywhere), and turns the generated text,
 * reasoning and tool calls (oai_gen) into its protocol's events and response. Errors are
 * answered in the protocol's own shape. Reference: docs/server.md, a section per protocol. */
#ifndef KIPP_SERVER_API_H
#define KIPP_SERVER_API_H

#include "core/buf.h"
#include "server/openai.h"

#include <jansson.h>

typedef enum { API_OPENAI = 0, API_ANTHROPIC, API_RESPONSES, API_OLLAMA, API_N } srv_api;

typedef struct {
    const char *name; /* "anthropic", ... (log lines) */
    /* The request. in: the body's tree (borrowed). Returns the OpenAI request (a new
     * reference; *ep chat or completions; endpoint is the route's M_EP_*) and sets *state (the adapter's, for the reply;
     * may stay NULL), or NULL with msg and *param (the protocol's field name) set: a 400.
     * A field outside the protocol goes into unknown (the server logs its name once); a
     * field the protocol defines that Kipp does not implement is a 400 naming it. */
    json_t *(*to_openai)(json_t *in, int endpoint, oai_endpoint *ep, void **state, char *msg,
                         size_t msg_len, const char **param, char *unknown, size_t unknown_len);
    /* The error body for status (malloc'd). type/param/code as OpenAI's (the adapter maps
     * them to its protocol's). */
    char *(*error_json)(int status, const char *message, const char *type, const char *param,
                        const char *code);
    const char *stream_ctype; /* "text/event-stream", "application/x-ndjson" */
    /* Bytes the stream may carry anywhere between events without changing what the client
     * reads (the write that tells a closed socket from a half-closed one); NULL: an SSE
     * comment. NDJSON has no comments: a space, which the next line's parser skips. */
    const char *probe;
    /* Streaming, one choice: called each time text was decided, with it in g->content and
     * g->reasoning (the adapter takes them: kipp_buf_take or len = 0) and g->calls (its
     * oai_call.head_sent / args_sent say what was sent); finish NULL while running, then
     * OpenAI's finish reason ("stop", "length", "tool_calls"; g->stop_index says which stop
     * string matched). Appends the protocol's bytes to out. */
    void (*stream_events)(void *state, oai_gen *g, const oai_meta *meta, const char *finish,
                          kipp_buf *out);
    /* The request failed after its stream began: an error event, then the stream's end.
     * type: OpenAI's error type, "server_error" or "server_shutdown" (cut by the shutdown
     * deadline: the adapter says so in its own shape). */
    void (*stream_error)(void *state, const oai_meta *meta, const char *message, const char *type,
                         kipp_buf *out);
    /* The whole response, not streamed (malloc'd JSON). */
    char *(*response_json)(void *state, oai_gen *g, const kipp_req *req, const oai_meta *meta,
                           const char *finish);
    void (*free_state)(void *state);
} srv_api_ops;

/* The adapter of api (NULL for API_OPENAI, which generate.c answers itself). */
const srv_api_ops *srv_api_get(srv_api api);

extern const srv_api_ops srv_api_anthropic; /* anthropic.c */
extern const srv_api_ops srv_api_responses; /* responses.c */
extern const srv_api_ops srv_api_ollama;    /* ollama.c */

#endif
