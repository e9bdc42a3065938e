/* ollama.h — what ollama.c (the pure translation of Ollama's /api/chat and /api/generate,
 * in srv_api_ollama) shares with ollama_http.c (the routes that need the server: the info,
 * embedding and model-management routes, and the checks made before a generation). No
 * libmicrohttpd here. Reference: docs/server.md, "Ollama API". */
#ifndef KIPP_SERVER_OLLAMA_H
#define KIPP_SERVER_OLLAMA_H

#include <jansson.h>
#include <stddef.h>

/* The Ollama API version /api/version reports (docs/server.md says why this one). */
#define OLLAMA_API_VERSION "0.12.0"

/* now as RFC 3339 in UTC with nanoseconds ("2026-12-07T18:16:14.123456789Z"); cap >= 40 */
void ollama_now(char *out, size_t cap);

/* Whether a body (an object) is Ollama's "load the model" call: /api/generate without a
 * prompt or a system text, /api/chat without messages (chat: endpoint is M_EP_OLLAMA_CHAT). */
int ollama_is_load_call(json_t *in, int endpoint);

/* The answer to a load call (malloc'd JSON): done, done_reason "load", nothing generated. */
char *ollama_load_json(const char *model, int endpoint);

/* options.num_ctx when the body gives one (1 and *out set), 0 when not, -1 when it is not a
 * positive integer (the adapter's 400 then names it). */
int ollama_num_ctx(json_t *in, long long *out);

/* {"error": message} (malloc'd). */
char *ollama_error_json(const char *message);

#endif
