/* api.c — the protocol adapters by protocol (api.h). */
#include "server/api.h"

const srv_api_ops *srv_api_get(srv_api api) {
    switch (api) {
    case API_ANTHROPIC: return &srv_api_anthropic;
    case API_RESPONSES: return &srv_api_responses;
    case API_OLLAMA: return &srv_api_ollama;
    default: return NULL;
    }
}
