/* fuzz_chat.c — libFuzzer target for the chat path: the renderer on arbitrary request
 * bodies (every template kind), template recognition on arbitrary text, and the streaming
 * reasoning splitter with a data-derived cut. Invariants: a successful render returns a
 * string, a failed one returns none; nothing crashes or leaks. */
#include "tok/chat.h"
#include "tok/reasoning.h"
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
static void sink(void *u, int r, const char *b, size_t n) { (void)u; (void)r; (void)b; if (!n) abort(); }
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[KIPP_ERR_LEN], *out = NULL; size_t n;
    for (int k = 1; k <= 5; k++) { /* QWEN3, CHATML, QWEN3_INSTRUCT_2507, QWEN3_THINKING_2507, QWEN25_INSTRUCT */
        if (kipp_chat_render_json((kipp_chat_template_kind)k, (const char *)data, size, &out, &n, err, sizeof err) == KIPP_OK) {
            if (!out || strlen(out) > n) abort();
            free(out);
        } else if (out) abort();
    }
    kipp_chat_template_kind kind; kipp_chat_template_check_text((const char *)data, size, &kind, err, sizeof err);
    /* streaming == one-shot with a data-derived cut */
    for (int mode = 0; mode < 3; mode++) { /* OPEN_BY_TAG, OPEN_IN_PROMPT, NONE */
        kipp_reasoning r; kipp_reasoning_init(&r, (kipp_reasoning_mode)mode, sink, NULL);
        size_t cut = size ? data[0] % (size + 1) : 0;
        kipp_reasoning_feed(&r, (const char *)data, cut, NULL, 0);
        kipp_reasoning_feed(&r, (const char *)data + cut, size - cut, NULL, 0);
        kipp_reasoning_finish(&r, NULL, 0);
    }
    return 0;
}
