/* gate_common.h — what the model gates (gates.c, gates_kv.c) share: the golden-vector
 * manifest, a model + cpu-ref context + two logits buffers, the comparison helpers, and
 * the oracle check of one position's logits. Does not decide what a gate runs. */
#ifndef KIPP_GATE_COMMON_H
#define KIPP_GATE_COMMON_H

#include "kipp.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define KT_EXACT_TOL 1e-6 /* cache layouts, batching, recomputation: same arithmetic */

typedef struct {
    json_t *root;
    double bound; /* the vectors' derived logit bound */
    size_t top_k;
    uint32_t n_vocab;
} kt_manifest;

/* The vectors, the model on cpu-ref, and two logits buffers. */
typedef struct {
    kt_manifest mf;
    kipp_model *m;
    kipp_ctx *c;
    kipp_model_info info;
    float *a, *b; /* n_vocab floats each */
    int failed0;  /* kt_failed when the gate opened */
} kt_gate;

/* Opens V/manifest.json, the model and a cpu-ref context (cp NULL: default params).
 * Returns 0 (after printing why) when the inputs are unusable. */
int kt_gate_open(kt_gate *g, const char *model_path, const char *vec_dir,
                 const kipp_ctx_params *cp);
void kt_gate_close(kt_gate *g);

/* Token ids of one manifest prompt, malloc'd; NULL when it has none. */
int32_t *kt_prompt_tokens(json_t *prompt, size_t *n);
uint32_t kt_argmax(const float *x, uint32_t n);
/* max_i |a_i - b_i|, with NaN counted as infinitely far */
double kt_max_abs_diff(const float *a, const float *b, uint32_t n);

/* Checks cpu-ref's logits at position pos of manifest prompt pi against the oracle: exact
 * argmax, every top-k logit within the bound, and the full vocabulary within the bound
 * where the vectors have it. Counts with KT_CHECK; returns the worst error seen. */
double kt_golden_check(const kt_gate *g, const char *vec_dir, size_t pi, size_t pos,
                       const float *logits, float *scratch);

#endif
