/* gate_common.h — what the model gates (gates.c, gates_kv.c, gates_long.c, gates_cpu.c)
 * share: the golden-vector manifest, a model + a context on the gate's backend and KV type +
 * two logits buffers, the cpu-ref reference context, the comparison helpers (max |a-b|,
 * NMSE) and the golden check of one position. Does not decide what a gate runs. */
#ifndef KIPP_GATE_COMMON_H
#define KIPP_GATE_COMMON_H

#include "gates.h"
#include "kipp.h"
#include "backend/moe.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define KT_EXACT_TOL 1e-6 /* cache layouts, batching, recomputation on cpu-ref: max |a-b| */
/* The same comparisons on an optimized backend, whose batched, single-token and
 * recomputation paths sum in different orders (gemm tiles, 8-bit activations grouped per
 * call) and whose f16/bf16 KV can round a last-bit difference to the neighbouring value:
 * NMSE, plus the exact argmax. Measured: <= 2.3e-6 (q4_k_m, bf16 KV); a mis-addressed row
 * is >= 1e-3 on these checkpoints (docs/testing.md). */
#define KT_SAME_NMSE_TOL 1e-5
#define KT_NMSE_TOL 1e-4  /* another backend or KV type vs cpu-ref: sum (a-b)^2 / sum b^2 */
/* The two bounds above on an optimized backend whose K is q4_0: a K value computed in a
 * different order (a batched vs a single-token gemm, or cpu vs cpu-ref) differs by ~1e-7,
 * which can cross one of q4_0's 16 levels (a step of |max|/8) or flip which element sets
 * the block's scale, and then moves the scores by far more than 1e-5. Seen: NMSE up to
 * 6.6e-4 on tiny-untied (cpu); q8_0 K (steps of |max|/127) and q4_0 V stay within the
 * ordinary bounds, and cpu-ref (one order) keeps its exact bound on every type. */
#define KT_Q4K_NMSE_TOL 2e-3
#define KT_REF_BACKEND "cpu-ref"
#define KT_MAX_PROMPTS 16 /* manifest prompts a gate reads */

typedef struct {
    json_t *root;
    double bound; /* the vectors' derived logit bound */
    size_t top_k;
    uint32_t n_vocab;
} kt_manifest;

/* The vectors, the model, a context on the gate's backend, and two logits buffers. */
typedef struct {
    kt_manifest mf;
    kipp_model *m;
    kipp_ctx *c;        /* the backend and KV type under test */
    kipp_ctx *ref;      /* cpu-ref with f32 KV, opened by kt_gate_ref (NULL until then);
                           with the gate's KV types where one is quantized (ref_kvq) */
    int ref_kvq;        /* ref stores q8_0/q4_0 K or V (never in the reference cache) */
    kipp_model_info info;
    kipp_ctx_params cp; /* c's parameters (backend and kv_type filled in) */
    int is_ref;         /* c is the reference itself: cpu-ref with f32 KV */
    char label[48];     /* "cpu-ref", "cpu/f16", ... for messages */
    kipp_moe_trace *moe_pin; /* a MoE model's routing pins (kt_gate_open), else NULL */
    float *a, *b;       /* n_vocab floats each */
    int failed0;        /* kt_failed when the gate opened */
    const char *model_path; /* as opened (the reference cache's key) */
} kt_gate;

/* n (a count of polls or a wait) times KIPP_TEST_TIMEOUT_SCALE (make test-sanitize and
 * test-tsan set 6; unset or invalid: 1), so a wait sized for a plain build is long enough
 * under a sanitizer. */
int kt_scaled(int n);
/* The backend a gate runs on: o->backend, else dflt. */
const char *kt_backend(const kt_opts *o, const char *dflt);
/* Default context params with o's backend (else dflt) and KV type. */
kipp_ctx_params kt_ctx_params(const kt_opts *o, const char *dflt);
/* Whether these params are the reference configuration (cpu-ref, f32 KV). */
int kt_params_are_ref(const kipp_ctx_params *p);
/* "backend" or "backend/kv-type" into buf. */
const char *kt_label(const kipp_ctx_params *p, char *buf, size_t len);

/* Opens V/manifest.json (vec_dir NULL: none), the model and a context on o's backend
 * (default cpu-ref) and KV type; cp (NULL: defaults) gives the other params. Returns 0
 * (after printing why) when the inputs are unusable. */
int kt_gate_open(kt_gate *g, const char *model_path, const char *vec_dir, const kt_opts *o,
                 const kipp_ctx_params *cp);
void kt_gate_close(kt_gate *g);
/* The cpu-ref, f32-KV context on the gate's model with n_ctx = g->cp.n_ctx, opened on first
 * use; NULL (a counted failure) if it cannot be made. When the gate's K or V type is q8_0 /
 * q4_0, cpu-ref with those KV types instead: the cross-backend check of a quantized cache. */
kipp_ctx *kt_gate_ref(kt_gate *g);
/* kipp_forward_nocache of ids[0..n) on c (g->c or kt_gate_ref(g)), the last position's
 * logits into out. When c is the reference configuration (cpu-ref with f32 KV: kt_gate_ref's
 * context, or g->c when g->is_ref) and KIPP_REF_CACHE is set (the test runner sets
 * $BUILD/ref-cache), the row is kept in that directory under a 128-bit key of the model
 * file's identity (path, device, inode, size, mtime), this binary's identity (the same of
 * /proc/self/exe), KIPP_FAULT (in the fault build) and the ids: gates that need the same
 * cpu-ref recomputation (golden off the reference at each KV type, phase-2 and long-context
 * on cpu-ref) compute it once per build. A rebuilt binary or a rewritten model is a new key;
 * any other context is recomputed every time. */
kipp_status kt_recompute(kt_gate *g, kipp_ctx *c, const int32_t *ids, uint32_t n, float *out,
                         char *err, size_t err_len);

/* A MoE model's routing near-ties (src/backend/moe.h). Two correct runs may route a token
 * differently where the router's k-th and (k+1)-th experts are nearly tied -- two backends, or
 * one backend's prefill and decode paths, whose last bits differ -- and from there on their
 * logits differ by a whole expert's output, which no NMSE bound should absorb. So kt_gate_open,
 * on a MoE model with vectors, records cpu-ref's routing of every manifest prompt (a
 * recomputation, never cached) and pins every run of the gate to it where a run's choice differs
 * and cpu-ref's margin (log p_k - log p_(k+1)) is below KT_MOE_NEAR_TIE; a difference at a wider
 * margin is left alone, so the logits show it, and kt_gate_close fails the gate on it and
 * reports the pins. Routing of other token sequences is not pinned (the long-context gate
 * records its own sequence instead). */
#define KT_MOE_NEAR_TIE 0.05f
/* the smallest routing margin a MoE model's golden vectors may have (kt_gate_golden) */
#define KT_MOE_GOLDEN_MARGIN 1e-4
/* The recording and pinning on the reference context ref (cpu-ref, f32 KV) for n_prompts
 * prompts ids[i][0..n[i]); scratch: one logits row. NULL for a dense model. */
kipp_moe_trace *kt_moe_pin_on(kipp_ctx *ref, const kipp_model_info *info, const int32_t *const *ids,
                              const size_t *n, size_t n_prompts, float *scratch);
/* Stops pinning; with what (a label) set, fails on mismatches and reports the pins. Frees t. */
void kt_moe_unpin(kipp_moe_trace *t, const char *what);

/* Token ids of one manifest prompt, malloc'd; NULL when it has none. */
int32_t *kt_prompt_tokens(json_t *prompt, size_t *n);
uint32_t kt_argmax(const float *x, uint32_t n);
/* max_i |a_i - b_i|, with NaN counted as infinitely far */
double kt_max_abs_diff(const float *a, const float *b, uint32_t n);
/* sum (a-b)^2 / sum b^2 against the reference b; NaN counts as 1e30 */
double kt_nmse(const float *a, const float *b, uint32_t n);
/* The same-backend comparison of got with ref (cache layouts, batching, recomputation):
 * on cpu-ref max |a-b| <= KT_EXACT_TOL, elsewhere NMSE <= KT_SAME_NMSE_TOL; *e receives the
 * measure, *tol its bound and what it is ("max |a-b|" or "NMSE") goes to *what. */
int kt_same_ok(const kt_gate *g, const float *got, const float *ref, uint32_t n, double *e,
               double *tol, const char **what);
/* The same-backend argmax check: on cpu-ref the argmax of got is ref's. On an optimized
 * backend it may differ only at a near-tie that the two runs' own difference explains: ref's
 * two candidates closer than 2 max |got - ref|, and got's too (random-weight models have
 * such ties; a wrong row moves logits far more). */
int kt_same_argmax(const kt_gate *g, const float *got, const float *ref, uint32_t n);
/* Same argmax as ref and NMSE <= KT_NMSE_TOL; *nmse receives the NMSE. */
int kt_matches_ref(const float *got, const float *ref, uint32_t n, double *nmse);

/* Checks logits at position pos of manifest prompt pi against the oracle: exact argmax,
 * every top-k logit within the bound, and the full vocabulary within the bound where the
 * vectors have it. Counts with KT_CHECK; returns the worst error seen. */
double kt_golden_check(const kt_gate *g, const char *vec_dir, size_t pi, size_t pos,
                       const float *logits, float *scratch);
/* The golden gate's check of one position of g->c: on the reference kt_golden_check; on
 * any other backend or KV type exact argmax vs the oracle and NMSE vs cpu-ref, recomputed
 * by kipp_forward_nocache on ids[0..pos] (never reads a KV cache, so a KV fault cannot
 * reach the reference). Uses g->b as scratch. Returns the worst error (abs or NMSE). */
double kt_golden_position(kt_gate *g, const char *vec_dir, size_t pi, const int32_t *ids,
                          size_t pos, const float *logits);

#endif
