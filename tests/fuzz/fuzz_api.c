/* fuzz_api.c — libFuzzer target for kipp-server's protocol adapters (src/server/api.h):
 * Anthropic Messages, OpenAI Responses and Ollama, one binary over their three corpora
 * (tests/fuzz/corpus/{anthropic,responses,ollama}). Any body, on each route of each adapter,
 * is either turned into an OpenAI request that oai_parse_tree then accepts or refuses, or
 * refused by the adapter itself — every refusal with a message — and an error body in the
 * protocol's shape can be made for it (always JSON). An accepted request has a model and a
 * chat body or a prompt. */
#include "server/api.h"
#include "server/metrics.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* openai_gen.c reads a generated (or echoed prompt) token's logprobs through the scheduler,
 * which the adapters' request side never reaches: the scheduler is not linked, and these
 * stand in for it. */
const kipp_gen_token *kipp_req_token(const kipp_req *r, uint32_t i) {
    (void)r, (void)i;
    abort();
}
const kipp_gen_token *kipp_req_prompt_token(const kipp_req *r, uint32_t i) {
    (void)r, (void)i;
    abort();
}

static const struct {
    const srv_api_ops *api;
    int endpoint;
} routes[] = {
    {&srv_api_anthropic, M_EP_MESSAGES},     {&srv_api_anthropic, M_EP_COUNT_TOKENS},
    {&srv_api_responses, M_EP_RESPONSES},    {&srv_api_ollama, M_EP_OLLAMA_CHAT},
    {&srv_api_ollama, M_EP_OLLAMA_GENERATE},
};

static void check_error_json(const srv_api_ops *api, const char *msg) {
    static const int statuses[] = {400, 401, 404, 413, 500, 503};
    for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++) {
        char *e = api->error_json(statuses[i], msg, "invalid_request_error", "x", NULL);
        json_t *o = e ? json_loads(e, 0, NULL) : NULL;
        if (!o) abort(); /* an error body is always JSON */
        json_decref(o);
        free(e);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_t *in = json_loadb((const char *)data, size, 0, NULL);
    if (!json_is_object(in)) {
        json_decref(in);
        return 0; /* generate.c refuses these before any adapter sees them */
    }
    for (size_t k = 0; k < sizeof routes / sizeof *routes; k++) {
        const srv_api_ops *api = routes[k].api;
        char msg[512] = "", unknown[64] = "";
        const char *param = NULL;
        void *state = NULL;
        oai_endpoint ep = OAI_CHAT;
        json_t *o = api->to_openai(in, routes[k].endpoint, &ep, &state, msg, sizeof msg, &param, unknown,
                                   sizeof unknown);
        if (!o) {
            if (!msg[0]) abort(); /* every refusal says why */
            check_error_json(api, msg);
        } else {
            oai_request r;
            msg[0] = 0;
            if (oai_parse_tree(o, ep, 151936, &r, msg, sizeof msg, &param) == 0) {
                if (!r.model) abort();
                if (ep == OAI_CHAT && !r.chat_body) abort();
                if (ep == OAI_COMPLETIONS && !r.prompt_text && !r.n_prompt_ids) abort();
            } else if (!msg[0]) {
                abort();
            }
            oai_request_free(&r);
            json_decref(o);
        }
        if (state && api->free_state) api->free_state(state);
        if (memchr(unknown, 0, sizeof unknown) == NULL) abort(); /* a NUL-terminated name */
    }
    json_decref(in);
    return 0;
}
