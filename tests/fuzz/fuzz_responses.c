/* fuzz_responses.c — libFuzzer target for the OpenAI Responses adapter (fuzz_api.h). */
#include "server/metrics.h"
#define FUZZ_API srv_api_responses
#define FUZZ_ENDPOINTS M_EP_RESPONSES
#include "fuzz_api.h"
