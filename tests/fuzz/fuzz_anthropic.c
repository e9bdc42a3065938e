/* fuzz_anthropic.c — libFuzzer target for the Anthropic Messages adapter (fuzz_api.h). */
#include "server/metrics.h"
#define FUZZ_API srv_api_anthropic
#define FUZZ_ENDPOINTS M_EP_MESSAGES, M_EP_COUNT_TOKENS
#include "fuzz_api.h"
