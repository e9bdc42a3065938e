/* cli_spec.h — the speculative-decoding flags kipp, kipp-chat and kipp-server share
 * (llama.cpp's names: --draft-model/-md, --draft-max, --draft-min, --draft-p-min; Kipp's
 * --spec-ngram and --draft-fixed), their help, and starting the drafter they ask for. */
#ifndef KIPP_CLI_SPEC_H
#define KIPP_CLI_SPEC_H

#include "engine/spec.h"
#include "kipp.h"

#include <stdio.h>

typedef struct {
    const char *draft_model; /* --draft-model FILE */
    long draft_max, draft_min, ngram, draft_threads; /* draft_threads 0: the target's */
    long draft_vocab;        /* --draft-vocab N: draft from token ids < N; 0 = all */
    float p_min;
    int fixed;
    const char *first_flag;  /* the first speculation flag given (for messages) */
    const kipp_rope_params *rope; /* the rope-scaling flags, applied to the draft model too
                                     (as llama.cpp does); NULL: the draft file's own */
} kipp_cli_spec;

void kipp_cli_spec_init(kipp_cli_spec *o);
/* As kipp_cli_sampling_flag: 1 consumed, 2 bad value (printed), 0 not a speculation flag. */
int kipp_cli_spec_flag(const char *prog, int argc, char **argv, int *i, kipp_cli_spec *o);
/* After the last flag: 1, or 0 after printing what is inconsistent. */
int kipp_cli_spec_finish(const char *prog, const kipp_cli_spec *o);
void kipp_cli_spec_help(FILE *f, int width);
/* Loads the draft model (if any) and starts the drafter for a target whose context runs
 * with cp (the draft model runs on the same backend, ISA, threads and KV type), n_ctx
 * tokens long, n_slots sequences at once. No speculation asked: 1 with *d = NULL. 0 after
 * printing why it cannot start. */
int kipp_cli_spec_start(const char *prog, const kipp_cli_spec *o, const kipp_model *target,
                        const kipp_ctx_params *cp, uint32_t n_ctx, uint32_t n_slots,
                        kipp_model **dm, kipp_drafter **d);
/* Fills a drafter's parameters from the flags (model: the loaded draft model or NULL). */
kipp_spec_params kipp_cli_spec_params(const kipp_cli_spec *o, kipp_model *model,
                                      const kipp_ctx_params *cp, uint32_t n_ctx, uint32_t n_slots);

#endif
