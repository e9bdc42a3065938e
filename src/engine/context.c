/* context.c — one sequence on one backend: validates every request (token ids, context
 * room) before the backend sees it and checks that logits come back finite. Does not
 * schedule or batch several sequences (the server's scheduler will). */
#include "backend/backend.h"
#include "core/error.h"

#include <math.h>
#include <stdlib.h>

#define KIPP_DEFAULT_CTX_CAP 4096u

struct kipp_ctx {
    kipp_model *m;
    const kipp_backend_ops *ops;
    void *state;
    uint32_t n_ctx;
    uint32_t n_past;
};

kipp_ctx_params kipp_ctx_default_params(void) {
    kipp_ctx_params p = {.backend = "cpu-ref", .n_ctx = 0, .n_threads = 0};
    return p;
}

kipp_status kipp_ctx_init(kipp_model *m, const kipp_ctx_params *p, kipp_ctx **out, char *err,
                          size_t err_len) {
    *out = NULL;
    const kipp_backend_ops *ops;
    kipp_status st = kipp_backend_find(p->backend, &ops, err, err_len);
    if (st != KIPP_OK) return st;
    uint32_t n_ctx = p->n_ctx;
    if (n_ctx == 0) n_ctx = m->hp.n_ctx_train < KIPP_DEFAULT_CTX_CAP ? m->hp.n_ctx_train
                                                                      : KIPP_DEFAULT_CTX_CAP;
    if (n_ctx > m->hp.n_ctx_train)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "context size %u exceeds the model's trained context length %u", n_ctx,
                         m->hp.n_ctx_train);
    kipp_ctx *c = calloc(1, sizeof *c);
    if (!c) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "context: out of memory");
    c->m = m;
    c->ops = ops;
    c->n_ctx = n_ctx;
    st = ops->init(m, n_ctx, p->n_threads, &c->state, err, err_len);
    if (st != KIPP_OK) {
        free(c);
        return st; /* fatal for the caller: never retried on another backend */
    }
    *out = c;
    return KIPP_OK;
}

void kipp_ctx_free(kipp_ctx *c) {
    if (!c) return;
    c->ops->free(c->state);
    free(c);
}

uint32_t kipp_ctx_n_past(const kipp_ctx *c) { return c->n_past; }
uint32_t kipp_ctx_n_ctx(const kipp_ctx *c) { return c->n_ctx; }

kipp_status kipp_ctx_truncate(kipp_ctx *c, uint32_t n_keep, char *err, size_t err_len) {
    if (n_keep > c->n_past)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "truncate: n_keep %u is beyond the %u tokens in the context", n_keep,
                         c->n_past);
    c->n_past = n_keep; /* positions >= n_keep are overwritten by the next decode */
    return KIPP_OK;
}

static kipp_status check_tokens(const kipp_ctx *c, const int32_t *tokens, uint32_t n,
                                uint32_t start, char *err, size_t err_len) {
    if (n > 0 && !tokens)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "decode: tokens is NULL");
    if ((uint64_t)start + n > c->n_ctx)
        return kipp_errf(err, err_len, KIPP_ERR_CONTEXT_FULL,
                         "decode: %u + %u tokens exceed the context size %u", start, n, c->n_ctx);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= c->m->hp.n_vocab)
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "decode: token %d at index %u is outside the vocabulary (0..%u)",
                             tokens[i], i, c->m->hp.n_vocab - 1);
    return KIPP_OK;
}

static kipp_status check_logits(const kipp_ctx *c, const float *logits, uint32_t pos, char *err,
                                size_t err_len) {
    if (!logits) return KIPP_OK;
    for (uint32_t i = 0; i < c->m->hp.n_vocab; i++)
        if (!isfinite(logits[i]))
            return kipp_errf(err, err_len, KIPP_ERR_NUMERIC,
                             "decode: logit %u at position %u is %s; the model file may contain "
                             "NaN/Inf weights (check with `kipp --check-weights`)",
                             i, pos, isnan(logits[i]) ? "NaN" : "Inf");
    return KIPP_OK;
}

kipp_status kipp_decode(kipp_ctx *c, const int32_t *tokens, uint32_t n, float *logits,
                        char *err, size_t err_len) {
    kipp_status st = check_tokens(c, tokens, n, c->n_past, err, err_len);
    if (st != KIPP_OK) return st;
    if (n == 0) return KIPP_OK;
    st = c->ops->decode(c->state, tokens, n, c->n_past, logits, err, err_len);
    if (st != KIPP_OK) return st;
    c->n_past += n;
    return check_logits(c, logits, c->n_past - 1, err, err_len);
}

kipp_status kipp_forward_nocache(kipp_ctx *c, const int32_t *tokens, uint32_t n, float *logits,
                                 char *err, size_t err_len) {
    kipp_status st = check_tokens(c, tokens, n, 0, err, err_len);
    if (st != KIPP_OK) return st;
    if (n == 0) return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "forward: no tokens");
    st = c->ops->forward_nocache(c->state, tokens, n, logits, err, err_len);
    if (st != KIPP_OK) return st;
    return check_logits(c, logits, n - 1, err, err_len);
}
