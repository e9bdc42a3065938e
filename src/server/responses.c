/* responses.c — STUB being written (issue 33): every request is a 501. */
#include "server/http_int.h"

#include <stdio.h>
#include <string.h>

static json_t *to_openai(json_t *in, int endpoint, oai_endpoint *ep, void **state, char *msg, size_t msg_len,
                         const char **param, char *unknown, size_t unknown_len) {
    (void)in, (void)endpoint, (void)ep, (void)state, (void)param, (void)unknown, (void)unknown_len;
    snprintf(msg, msg_len, "not implemented yet");
    return NULL;
}
static char *error_json(int status, const char *message, const char *type, const char *param, const char *code) {
    (void)status;
    return oai_error_json(message, type, param, code);
}
const srv_api_ops srv_api_responses = {.name = "responses", .to_openai = to_openai, .error_json = error_json,
                                .stream_ctype = "text/event-stream"};
