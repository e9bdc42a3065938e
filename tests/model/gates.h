/* gates.h — model gates of build/kipp_test; each returns the number of failed checks. Every
 * gate runs on the backend and KV type named by its trailing flags (kt_opts). */
#ifndef KIPP_GATES_H
#define KIPP_GATES_H

#include "kipp.h"

#include <stdint.h>

/* The trailing flags of a model gate: --backend NAME, --kv-type T (or K/V), and (--longctx only)
 * --ctx N. */
typedef struct {
    const char *backend;  /* NULL: the gate's default (cpu-ref; cpu for --sched, --cpu-vs-ref*) */
    kipp_kv_type kv_type; /* KIPP_KV_TYPE_DEFAULT: the backend's default */
    kipp_kv_type kv_type_v; /* V's (--kv-type K/V); KIPP_KV_TYPE_DEFAULT: kv_type */
    uint32_t ctx;         /* --longctx: positions to reach; 0 = the model's n_ctx_train */
} kt_opts;

/* Golden vectors: on the reference (cpu-ref, f32 KV) the vectors' bound and exact argmax;
 * on anything else exact argmax vs the vectors and NMSE <= 1e-4 vs cpu-ref (f32 KV). */
int kt_gate_golden(const char *model_path, const char *vec_dir, const kt_opts *o);
/* Cached decode vs kipp_forward_nocache on the same backend and KV type (1e-6). */
int kt_gate_phase2(const char *model_path, const char *vec_dir, const kt_opts *o);

/* Paged-KV gates (tests/model/gates_kv.c), all within 1e-6 on one backend and KV type. */
int kt_gate_multilogit(const char *model_path, const char *vec_dir, const kt_opts *o); /* N-token == N steps */
int kt_gate_paged(const char *model_path, const char *vec_dir, const kt_opts *o);      /* adversarial tables */
int kt_gate_pooled(const char *model_path, const char *vec_dir, const kt_opts *o);     /* interleaved seqs */
/* The golden gate's checks, explicitly on the identity layout (the fault matrix). */
int kt_gate_fault_reference(const char *model_path, const char *vec_dir, const kt_opts *o);

/* Long context (tests/model/gates_long.c): decodes to near the model's trained context and
 * compares cached decode with recomputation at several far positions (1e-6), and on a
 * non-reference backend with cpu-ref (argmax, NMSE 1e-4). vec_dir may be NULL (fixed ids). */
int kt_gate_longctx(const char *model_path, const char *vec_dir, const kt_opts *o);

/* A backend (default cpu: every ISA level, 1/2 threads) vs cpu-ref (tests/model/gates_cpu.c). */
int kt_gate_cpu_vs_ref(const char *model_path, const char *vec_dir, const kt_opts *o);
/* The same on a model without golden vectors (random-weight real shapes): fixed token ids,
 * token by token, one batch, two interleaved sequences. */
int kt_gate_cpu_vs_ref_shape(const char *model_path, const char *unused, const kt_opts *o);

/* The scheduler and prefix cache (tests/model/gates_sched.c, default backend cpu): solo ==
 * batch of 8 == prefix cache == KV pressure with preemption; cancellation, busy queue,
 * logprobs, prefix reuse vs recomputation. */
int kt_gate_sched(const char *model_path, const char *unused, const kt_opts *o);

/* Speculative decoding (tests/model/gates_sched.c, gates_spec.c): greedy output with each
 * drafter (the target itself, the comma-separated draft models, prompt lookup) identical to
 * plain decoding in the scheduler, alone and batched, no leaked blocks; rollback: truncating
 * rejected drafts leaves a cache that decodes like recomputation (1e-6, on o's backend). */
int kt_gate_draft_spec(const char *model_path, const char *drafts, const kt_opts *o);
void kt_spec_rollback(const kipp_model *m, const kt_opts *o);
/* The rejection rule's statistics on synthetic distributions (no model): the tokens
 * speculation emits are distributed as plain sampling's (chi-square, false alarm 1e-4). */
int kt_gate_spec_stat(const char *unused1, const char *unused2, const kt_opts *o);
/* Chi-square critical value (Wilson-Hilferty) for df degrees of freedom at the one-sided
 * standard normal quantile z (3.719: a false alarm of 1e-4). */
double kt_chi2_crit(int df, double z);

/* Embeddings (tests/model/gates_embed.c): an embedding model's last-token embeddings vs the
 * golden ones of tools/make_embed_vectors.py (cosine and max |a-b| from the manifest), one
 * input at a time and batched; a logits context on it is refused. */
int kt_gate_embed_golden(const char *model_path, const char *vec_dir, const kt_opts *o);

#endif
