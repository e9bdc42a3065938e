/* generate.c — see generate.h. */
#include "cli/generate.h"

#include "cli/cli_args.h"

#include <stdio.h>
#include <string.h>

/* Streams the text token id completes (end: what is held back) to on_text. */
static int stream(const kipp_gen_params *p, int32_t id, int end) {
    const char *s;
    size_t n;
    kipp_status st = end ? kipp_detokenizer_end(p->detok, &s, &n)
                         : kipp_detokenizer_next(p->detok, id, &s, &n);
    if (st != KIPP_OK) {
        fprintf(stderr, "\n%s: out of memory decoding token %d\n", p->prog, id);
        return 0;
    }
    return p->on_text(p->user, s, n);
}

int kipp_generate(const kipp_gen_params *p, kipp_gen_result *r) {
    char err[KIPP_ERR_LEN];
    const uint32_t n_ctx = kipp_ctx_n_ctx(p->ctx);
    memset(r, 0, sizeof *r);
    r->stop = "n_predict";
    double t0 = kipp_cli_now();
    while (r->n_gen < p->n_predict) {
        if (p->interrupted && *p->interrupted) { r->stop = "interrupted"; break; }
        int32_t tok = kipp_sampler_sample(p->sampler, p->logits);
        r->n_gen++;
        if (p->on_sampled) p->on_sampled(p->user, tok);
        if (!p->ignore_eos && kipp_token_is_eog(p->model, tok)) { r->stop = "eog"; break; }
        kipp_sampler_accept(p->sampler, tok);
        if (!stream(p, tok, 0)) return 0;
        if (r->n_gen == p->n_predict) break;
        if (kipp_ctx_n_past(p->ctx) >= n_ctx) { r->stop = "ctx_full"; break; }
        if (kipp_decode(p->ctx, &tok, 1, p->logits, err, sizeof err) != KIPP_OK) {
            stream(p, 0, 1);
            fprintf(stderr, "\n%s: %s\n", p->prog, err);
            return 0;
        }
        if (p->on_decoded) p->on_decoded(p->user, tok);
        r->n_decoded++;
    }
    r->t_decode = kipp_cli_now() - t0;
    return stream(p, 0, 1);
}
