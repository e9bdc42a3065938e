/* cli_spec.c — see cli_spec.h. */
#include "cli/cli_spec.h"

#include "cli/cli_args.h"

#include <stdint.h>
#include <string.h>

void kipp_cli_spec_init(kipp_cli_spec *o) {
    memset(o, 0, sizeof *o);
    o->draft_max = 16; /* llama.cpp's defaults */
    o->draft_min = 0;
    o->p_min = 0.75f;
}

int kipp_cli_spec_flag(const char *prog, int argc, char **argv, int *i, kipp_cli_spec *o) {
    const char *a = argv[*i];
    const int fixed = !strcmp(a, "--draft-fixed");
    if (strcmp(a, "--draft-model") && strcmp(a, "-md") && strcmp(a, "--draft-max") &&
        strcmp(a, "--draft-min") && strcmp(a, "--draft-p-min") && strcmp(a, "--spec-ngram") &&
        strcmp(a, "--draft-threads") && strcmp(a, "-td") && strcmp(a, "--draft-vocab") &&
        !fixed)
        return 0;
    if (!o->first_flag) o->first_flag = a;
    if (fixed) {
        o->fixed = 1;
        return 1;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, a);
        return 2;
    }
    const char *v = argv[++*i];
    int ok = 1;
    if (!strcmp(a, "--draft-model") || !strcmp(a, "-md")) {
        if (!*v) {
            fprintf(stderr, "%s: %s expects a GGUF file, got ''\n", prog, a);
            return 2;
        }
        o->draft_model = v;
    } else if (!strcmp(a, "--draft-max")) ok = kipp_cli_long(prog, a, v, 1, KIPP_SPEC_MAX_K, &o->draft_max);
    else if (!strcmp(a, "--draft-min")) ok = kipp_cli_long(prog, a, v, 0, KIPP_SPEC_MAX_K, &o->draft_min);
    else if (!strcmp(a, "--spec-ngram")) ok = kipp_cli_long(prog, a, v, 1, 8, &o->ngram);
    else if (!strcmp(a, "--draft-threads") || !strcmp(a, "-td"))
        ok = kipp_cli_long(prog, a, v, 1, 1024, &o->draft_threads);
    else if (!strcmp(a, "--draft-vocab")) ok = kipp_cli_long(prog, a, v, 1, UINT32_MAX, &o->draft_vocab);
    else ok = kipp_cli_float(prog, a, v, 0.0f, 1.0f, &o->p_min);
    return ok ? 1 : 2;
}

int kipp_cli_spec_finish(const char *prog, const kipp_cli_spec *o) {
    if (o->draft_model && o->ngram) {
        fprintf(stderr, "%s: --draft-model and --spec-ngram both ask for a drafter; give one\n",
                prog);
        return 0;
    }
    if (o->first_flag && !o->draft_model && !o->ngram) {
        fprintf(stderr,
                "%s: %s tunes speculative decoding, which needs --draft-model FILE or "
                "--spec-ngram N\n",
                prog, o->first_flag);
        return 0;
    }
    if (o->draft_vocab && !o->draft_model) {
        fprintf(stderr, "%s: --draft-vocab limits a draft model's head; it needs --draft-model\n",
                prog);
        return 0;
    }
    if (o->draft_min > o->draft_max) {
        fprintf(stderr, "%s: --draft-min %ld is above --draft-max %ld\n", prog, o->draft_min,
                o->draft_max);
        return 0;
    }
    return 1;
}

void kipp_cli_spec_help(FILE *f, int width) {
    static const char *const e[][2] = {
        {"-md, --draft-model FILE", "speculative decoding with a small draft model of the same"},
        {"", "tokenizer; the target verifies its drafts in one batch"},
        {"--spec-ngram N", "speculative decoding by prompt lookup: drafts continue the"},
        {"", "latest earlier match of the last N..1 tokens (1..8)"},
        {"--draft-max N", "tokens drafted per step at most (1..32, default 16); fewer"},
        {"", "when acceptance or timing says more do not pay"},
        {"--draft-min N", "fewer drafted tokens are not verified (default 0)"},
        {"--draft-p-min P", "a draft model stops drafting at a token it gives less than"},
        {"", "P (default 0.75)"},
        {"--draft-fixed", "always draft --draft-max tokens (no adaptation)"},
        {"--draft-vocab N", "the draft model drafts only tokens 0..N-1: its lm_head runs"},
        {"", "over N rows (BPE ids follow merge rank, roughly frequency);"},
        {"", "default: the whole vocabulary"},
        {"-td, --draft-threads N", "the draft model's threads (default: the target's)"},
    };
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
        const int pad = e[i][0][0] == '-' && e[i][0][1] != '-' ? 2 : 6; /* -md, -td: short */
        if (pad + (int)strlen(e[i][0]) >= width - 1) /* too long for the column: own line */
            fprintf(f, "%*s%s\n%*s%s\n", pad, "", e[i][0], width, "", e[i][1]);
        else
            fprintf(f, "%*s%-*s%s\n", pad, "", width - pad, e[i][0], e[i][1]);
    }
}

kipp_spec_params kipp_cli_spec_params(const kipp_cli_spec *o, kipp_model *model,
                                      const kipp_ctx_params *cp, uint32_t n_ctx, uint32_t n_slots) {
    kipp_spec_params sp = {.model = model,
                           .ngram = model ? 0 : (uint32_t)o->ngram,
                           .k_max = (uint32_t)o->draft_max,
                           .k_min = (uint32_t)o->draft_min,
                           .p_min = model ? o->p_min : 0.0f,
                           .fixed_k = o->fixed,
                           .ctx = *cp,
                           .n_ctx = n_ctx,
                           .n_slots = n_slots};
    sp.ctx.n_kv_blocks = 0;
    sp.ctx.n_logits = (uint32_t)o->draft_vocab;
    if (o->draft_threads) sp.ctx.n_threads = (int)o->draft_threads;
    return sp;
}

int kipp_cli_spec_start(const char *prog, const kipp_cli_spec *o, const kipp_model *target,
                        const kipp_ctx_params *cp, uint32_t n_ctx, uint32_t n_slots,
                        kipp_model **dm, kipp_drafter **d) {
    char err[KIPP_ERR_LEN];
    *dm = NULL;
    *d = NULL;
    if (!o->draft_model && !o->ngram) return 1;
    if (o->draft_model && kipp_model_load(o->draft_model, dm, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "%s: --draft-model: %s\n", prog, err);
        return 0;
    }
    if (*dm && o->rope && kipp_model_set_rope(*dm, o->rope, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "%s: --draft-model: %s\n", prog, err);
        kipp_model_free(*dm);
        *dm = NULL;
        return 0;
    }
    kipp_spec_params sp = kipp_cli_spec_params(o, *dm, cp, n_ctx, n_slots);
    if (kipp_drafter_init(target, &sp, d, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "%s: %s%s\n", prog, o->draft_model ? "--draft-model: " : "", err);
        kipp_model_free(*dm);
        *dm = NULL;
        return 0;
    }
    return 1;
}
