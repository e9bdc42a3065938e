/* generate.c — see generate.h. */
#include "cli/generate.h"

#include "cli/cli_args.h"

#include <stdio.h>
#include <stdlib.h>
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

static int generate_spec(const kipp_gen_params *p, kipp_gen_result *r);

int kipp_generate(const kipp_gen_params *p, kipp_gen_result *r) {
    if (p->drafter) return generate_spec(p, r);
    char err[KIPP_ERR_LEN];
    const uint32_t n_ctx = kipp_ctx_n_ctx(p->ctx);
    memset(r, 0, sizeof *r);
    r->stop = "n_predict";
    kipp_model_info info;
    kipp_model_get_info(p->model, &info);
    kipp_think think;
    kipp_think_init(&think, p->matcher ? &p->think : NULL, p->model);
    double t0 = kipp_cli_now();
    while (r->n_gen < p->n_predict) {
        if (p->interrupted && *p->interrupted) { r->stop = "interrupted"; break; }
        kipp_think_apply(&think, p->matcher, p->logits, info.n_vocab);
        int32_t tok = kipp_sampler_sample(p->sampler, p->logits);
        if (!kipp_think_accept(&think, p->matcher, tok)) {
            stream(p, 0, 1);
            const char *why = kipp_matcher_error(p->matcher); /* the time limit, or unsatisfiable */
            fprintf(stderr, "\n%s: %s\n", p->prog, why ? why : "the grammar allows no token here (is it satisfiable?)");
            return 0;
        }
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
        r->n_steps++;
    }
    r->t_decode = kipp_cli_now() - t0;
    return stream(p, 0, 1);
}

/* Emits one final token: 1 to go on, 0 when it ended the generation (r->stop set), -1 on
 * a failure. The sampler has already accepted it. */
static int emit(const kipp_gen_params *p, kipp_gen_result *r, int32_t tok) {
    r->n_gen++;
    if (p->on_sampled) p->on_sampled(p->user, tok);
    if (!p->ignore_eos && kipp_token_is_eog(p->model, tok)) { r->stop = "eog"; return 0; }
    if (!stream(p, tok, 0)) return -1;
    if (r->n_gen == p->n_predict) { r->stop = "n_predict"; return 0; }
    return 1;
}

/* The loop with speculation: the pending token (sampled, not yet in the KV cache) and the
 * drafts after it are decoded as one batch of 1 + n rows; kipp_spec_verify keeps a prefix
 * of the drafts and adds the target's own token; the rejected drafts leave the KV cache. */
static int generate_spec(const kipp_gen_params *p, kipp_gen_result *r) {
    char err[KIPP_ERR_LEN];
    const uint32_t n_ctx = kipp_ctx_n_ctx(p->ctx);
    kipp_model_info info;
    kipp_model_get_info(p->model, &info);
    const uint32_t V = info.n_vocab;
    memset(r, 0, sizeof *r);
    r->stop = "n_predict";
    int32_t *hist = malloc(((size_t)n_ctx + KIPP_SPEC_MAX_K + 2) * sizeof *hist);
    float *rows = malloc(((size_t)p->k_max + 1) * V * sizeof *rows);
    if (!hist || !rows || p->n_hist > n_ctx) {
        free(hist);
        free(rows);
        fprintf(stderr, "\n%s: out of memory for speculative decoding\n", p->prog);
        return 0;
    }
    memcpy(hist, p->hist, p->n_hist * sizeof *hist);
    uint32_t n_hist = p->n_hist;
    kipp_spec_seq seq;
    kipp_spec_seq_init(&seq);
    kipp_spec_timing tm;
    kipp_spec_timing_init(&tm);
    kipp_spec_seq *seqp = &seq;
    int ok = 1, go = 1;
    double t0 = kipp_cli_now();
    if (p->interrupted && *p->interrupted) { r->stop = "interrupted"; go = 0; }
    int32_t tok = 0;
    if (go) {
        tok = kipp_sampler_sample(p->sampler, p->logits);
        kipp_sampler_accept(p->sampler, tok);
        hist[n_hist++] = tok;
        go = emit(p, r, tok);
        ok = go >= 0;
    }
    while (go > 0) {
        if (p->interrupted && *p->interrupted) { r->stop = "interrupted"; break; }
        const uint32_t n_past = kipp_ctx_n_past(p->ctx);
        if (n_past >= n_ctx) { r->stop = "ctx_full"; break; }
        uint32_t cap = p->k_max, k = 0;
        if (cap > n_ctx - n_past - 1) cap = n_ctx - n_past - 1;
        if ((long)cap > p->n_predict - r->n_gen) cap = (uint32_t)(p->n_predict - r->n_gen);
        kipp_spec_choose_k(&tm, &seqp, &cap, 1, 0, p->k_min, p->fixed_k, &k);
        kipp_draft_job job = {.slot = 0, .hist = hist, .n_hist = n_hist, .k = k};
        const double td = kipp_cli_now();
        if (k > 0 && kipp_drafter_run(p->drafter, &job, 1, &tm, err, sizeof err) != KIPP_OK) {
            stream(p, 0, 1);
            fprintf(stderr, "\n%s: drafting: %s\n", p->prog, err);
            ok = 0;
            break;
        }
        r->t_draft += kipp_cli_now() - td;
        if (job.n_draft < p->k_min) job.n_draft = 0;
        if (k > 0 && job.n_draft == 0) kipp_spec_seq_declined(&seq);
        int32_t btok[KIPP_SPEC_MAX_K + 1];
        btok[0] = tok;
        memcpy(btok + 1, job.draft, job.n_draft * sizeof *btok);
        const kipp_batch b = {.n = 1 + job.n_draft, .tokens = btok};
        const double tt = kipp_cli_now();
        if (kipp_decode_batch(p->ctx, &b, rows, err, sizeof err) != KIPP_OK) {
            stream(p, 0, 1);
            fprintf(stderr, "\n%s: %s\n", p->prog, err);
            ok = 0;
            break;
        }
        kipp_spec_timing_target(&tm, b.n, kipp_cli_now() - tt);
        int32_t out[KIPP_SPEC_MAX_K + 1];
        uint32_t m = 0;
        const uint32_t n_out = kipp_spec_verify(p->sampler, rows, V, &job, out, &m);
        if (m < job.n_draft &&
            kipp_ctx_truncate(p->ctx, n_past + 1 + m, err, sizeof err) != KIPP_OK) {
            stream(p, 0, 1);
            fprintf(stderr, "\n%s: %s\n", p->prog, err);
            ok = 0;
            break;
        }
        kipp_spec_seq_update(&seq, job.n_draft, m);
        r->n_steps++;
        r->n_drafted += job.n_draft;
        r->n_accepted += m;
        r->n_decoded += 1 + m;
        if (p->on_decoded)
            for (uint32_t i = 0; i <= m; i++) p->on_decoded(p->user, btok[i]);
        for (uint32_t i = 0; i < n_out && go > 0; i++) {
            hist[n_hist++] = out[i];
            go = emit(p, r, out[i]);
        }
        if (go < 0) ok = 0;
        tok = out[n_out - 1];
    }
    r->t_decode = kipp_cli_now() - t0;
    free(hist);
    free(rows);
    if (!ok) return 0;
    return stream(p, 0, 1);
}
