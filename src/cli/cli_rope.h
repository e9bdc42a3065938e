/* The rope-scaling flags every binary takes (llama.cpp's spellings): --rope-scaling,
 * --rope-scale, --rope-freq-scale, --yarn-orig-ctx, --yarn-attn-factor, --yarn-beta-fast,
 * --yarn-beta-slow. They override the GGUF's <arch>.rope.scaling.* keys. */
#ifndef KIPP_CLI_ROPE_H
#define KIPP_CLI_ROPE_H

#include "kipp.h"

#include <stdio.h>

/* Sets every field to "keep the file's". */
void kipp_cli_rope_init(kipp_rope_params *rp);
/* argv[*i] one of the flags: 1 after consuming it (and its value), 2 on a bad value (after
 * printing why), 0 when argv[*i] is not one of them. */
int kipp_cli_rope_flag(const char *prog, int argc, char **argv, int *i, kipp_rope_params *rp);
/* The help lines of those flags, the flag column padded to width. */
void kipp_cli_rope_help(FILE *f, int width);
/* Applies the flags to a loaded model (before any context): 1, or 0 after printing what is
 * wrong. */
int kipp_cli_rope_apply(const char *prog, const kipp_rope_params *rp, kipp_model *m);

#endif
