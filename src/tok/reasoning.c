/* reasoning.c — the <think> ... </think> split of reasoning.h: a one-shot reference made of
 * plain string searches, and a byte-at-a-time streaming state machine that must agree with
 * it for every way of chunking the text (tests/unit/test_chat.c checks every split point).
 * Not here: tool-call extraction, anything token-based. */
#include "tok/reasoning.h"

#include "core/error.h"

#include <string.h>

enum { START, REASONING, CONTENT, DONE };

static const char open_tag[] = "<think>";
static const char close_tag[] = "</think>";
#define OPEN_LEN (sizeof open_tag - 1)
#define CLOSE_LEN (sizeof close_tag - 1)

/* ---- one-shot reference ---------------------------------------------------------------- */

static void strip_nl(const char **p, size_t *n) {
    while (*n && (*p)[0] == '\n') (*p)++, (*n)--;
    while (*n && (*p)[*n - 1] == '\n') (*n)--;
}

void kipp_reasoning_split(const char *text, size_t len, kipp_reasoning_mode mode,
                          const char **reasoning, size_t *reasoning_len, const char **content,
                          size_t *content_len) {
    const char *s = text;
    size_t n = len;
    while (n && s[0] == '\n') s++, n--;
    int in_reasoning = mode == KIPP_REASONING_OPEN_IN_PROMPT;
    if (mode != KIPP_REASONING_NONE && n >= OPEN_LEN && memcmp(s, open_tag, OPEN_LEN) == 0) {
        s += OPEN_LEN, n -= OPEN_LEN;
        in_reasoning = 1;
    }
    *reasoning = *content = s + n; /* empty slices at the end of the text */
    *reasoning_len = *content_len = 0;
    if (!in_reasoning) {
        *content = s, *content_len = n;
    } else {
        size_t e = 0;
        while (e + CLOSE_LEN <= n && memcmp(s + e, close_tag, CLOSE_LEN) != 0) e++;
        if (e + CLOSE_LEN > n) e = n; /* not closed: all reasoning */
        *reasoning = s, *reasoning_len = e;
        if (e < n) *content = s + e + CLOSE_LEN, *content_len = n - e - CLOSE_LEN;
    }
    strip_nl(reasoning, reasoning_len);
    strip_nl(content, content_len);
}

/* ---- streaming ----------------------------------------------------------------------------- */

void kipp_reasoning_init(kipp_reasoning *r, kipp_reasoning_mode mode,
                         kipp_reasoning_emit_fn emit, void *user) {
    memset(r, 0, sizeof *r);
    r->part = mode == KIPP_REASONING_NONE ? CONTENT : START; /* CONTENT looks for no tag */
    r->fallback = mode == KIPP_REASONING_OPEN_IN_PROMPT ? REASONING : CONTENT;
    r->emit = emit;
    r->user = user;
}

static void flush(kipp_reasoning *r) {
    if (r->n_out && r->emit) r->emit(r->user, r->out_reasoning, r->out, r->n_out);
    r->n_out = 0;
}

static void out_byte(kipp_reasoning *r, char c) {
    int is_reasoning = r->part == REASONING;
    if (r->n_out && (r->out_reasoning != is_reasoning || r->n_out == sizeof r->out)) flush(r);
    r->out_reasoning = is_reasoning;
    r->out[r->n_out++] = c;
}

/* A non-'\n' byte of the current part: the held '\n' run is interior unless nothing was
 * emitted yet (then it is leading and dropped). */
static void text_byte(kipp_reasoning *r, char c) {
    if (r->started)
        for (; r->n_nl; r->n_nl--) out_byte(r, '\n');
    r->n_nl = 0;
    out_byte(r, c);
    r->started = 1;
}

static void step(kipp_reasoning *r, char c);

/* Re-runs held bytes through the machine (after a state change or a broken tag). */
static void restep(kipp_reasoning *r, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++) step(r, bytes[i]);
}

static void enter(kipp_reasoning *r, int part) {
    flush(r);
    r->part = part;
    r->started = 0;
    r->n_nl = 0; /* a part's trailing '\n' run ends with it */
    r->n_tag = 0;
}

static void step(kipp_reasoning *r, char c) {
    if (r->part == CONTENT) {
        if (c == '\n') r->n_nl++;
        else text_byte(r, c);
        return;
    }
    const char *tag = r->part == START ? open_tag : close_tag;
    size_t tag_len = r->part == START ? OPEN_LEN : CLOSE_LEN;
    if (r->n_tag == 0 && c == '\n') {
        if (r->part == REASONING) r->n_nl++; /* in START a leading '\n' is dropped */
        return;
    }
    if (c == tag[r->n_tag]) {
        r->tag[r->n_tag++] = c;
        if (r->n_tag == tag_len) enter(r, r->part == START ? REASONING : CONTENT);
        return;
    }
    /* c breaks the partial tag (or starts none): decide what the held bytes are */
    char held[8];
    size_t n_held = r->n_tag;
    memcpy(held, r->tag, n_held);
    r->n_tag = 0;
    if (r->part == START) {
        r->part = r->fallback; /* nothing emitted yet: replay everything in the new part */
        restep(r, held, n_held);
    } else if (n_held == 0) {
        text_byte(r, c); /* no tag in progress and c does not start one */
        return;
    } else {
        /* held[0] began the failed match, so it is text; a later byte may begin another */
        text_byte(r, held[0]);
        restep(r, held + 1, n_held - 1);
    }
    step(r, c);
}

kipp_status kipp_reasoning_feed(kipp_reasoning *r, const char *text, size_t len, char *err,
                                size_t err_len) {
    if (r->part == DONE)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "reasoning split: text fed after finish");
    for (size_t i = 0; i < len; i++) step(r, text[i]);
    flush(r);
    return KIPP_OK;
}

kipp_status kipp_reasoning_finish(kipp_reasoning *r, char *err, size_t err_len) {
    if (r->part == DONE)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "reasoning split: finished twice");
    while (r->n_tag) { /* a partial tag that can no longer complete */
        char held[8];
        size_t n_held = r->n_tag;
        memcpy(held, r->tag, n_held);
        r->n_tag = 0;
        if (r->part == START) {
            r->part = r->fallback;
            restep(r, held, n_held);
        } else {
            text_byte(r, held[0]);
            restep(r, held + 1, n_held - 1);
        }
    }
    flush(r); /* trailing '\n' are never emitted */
    r->part = DONE;
    r->n_nl = 0;
    return KIPP_OK;
}

int kipp_reasoning_in_reasoning(const kipp_reasoning *r) {
    return r->part == REASONING || (r->part == START && r->fallback == REASONING);
}
