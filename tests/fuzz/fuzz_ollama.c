/* fuzz_ollama.c — libFuzzer target for the Ollama /api/chat and /api/generate adapter
 * (fuzz_api.h). */
#include "server/metrics.h"
#define FUZZ_API srv_api_ollama
#define FUZZ_ENDPOINTS M_EP_OLLAMA_CHAT, M_EP_OLLAMA_GENERATE
#include "fuzz_api.h"
