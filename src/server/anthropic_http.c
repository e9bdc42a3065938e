/* anthropic_http.c — POST /v1/messages/count_tokens: {"input_tokens": N}, the prompt of the
 * same request to /v1/messages rendered and tokenized by the generation path (generate.c),
 * so N is that request's usage.input_tokens + cache_read_input_tokens. Generates nothing;
 * the request's translation is anthropic.c's. */
#include "server/http_int.h"

#include <stdio.h>
#include <stdlib.h>

enum MHD_Result srv_handle_count_tokens(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    size_t n = 0;
    enum MHD_Result res;
    if (srv_count_prompt_tokens(sv, c, cs, &n, &res) != 0) return res;
    char *body = malloc(48);
    if (!body) return srv_send_error(sv, c, cs, 500, "out of memory", "server_error", NULL, NULL);
    snprintf(body, 48, "{\"input_tokens\":%zu}", n);
    return srv_send_json(sv, c, cs, 200, body);
}
