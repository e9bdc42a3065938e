/* fuzz_oai.c — libFuzzer target for the OpenAI request parser (src/server/openai_req.c):
 * any body, for either endpoint, is accepted or refused with a message; an accepted one
 * has a model, at most 4 stop strings and sampling values in range. */
#include "server/openai.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const oai_endpoint ep = data[0] & 1 ? OAI_COMPLETIONS : OAI_CHAT;
    char msg[512];
    const char *param = NULL;
    oai_request r;
    const int rc = oai_parse((const char *)data + 1, size - 1, ep, 151936, &r, msg, sizeof msg, &param);
    if (rc == 0) {
        if (!r.model || r.n_stop > OAI_MAX_STOP || r.sp.temperature < 0 || r.sp.temperature > 2 ||
            !(r.sp.top_p > 0 && r.sp.top_p <= 1) || r.top_logprobs > KIPP_MAX_TOP_LOGPROBS)
            abort();
        if (ep == OAI_CHAT && !r.chat_body) abort();
        if (ep == OAI_COMPLETIONS && !r.prompt_text && !r.n_prompt_ids) abort();
        for (size_t i = 0; i < r.n_prompt_ids; i++)
            if (r.prompt_ids[i] < 0 || r.prompt_ids[i] >= 151936) abort();
    } else if (strlen(msg) == 0) {
        abort(); /* every refusal says why */
    }
    oai_request_free(&r);
    return 0;
}
