/* gates.h — model gates of build/kipp_test; each returns the number of failed checks. */
#ifndef KIPP_GATES_H
#define KIPP_GATES_H

#include "kipp.h"

int kt_gate_golden(const char *model_path, const char *vec_dir);
int kt_gate_phase2(const char *model_path, const char *vec_dir);

/* Paged-KV gates (tests/model/gates_kv.c). */
int kt_gate_multilogit(const char *model_path, const char *vec_dir);      /* N-token == N steps */
int kt_gate_paged(const char *model_path, const char *vec_dir);           /* adversarial tables */
int kt_gate_pooled(const char *model_path, const char *vec_dir);          /* interleaved seqs */
int kt_gate_fault_reference(const char *model_path, const char *vec_dir); /* identity layout vs vectors */

/* cpu backend vs cpu-ref, every ISA level and 1/2 threads (tests/model/gates_cpu.c). */
int kt_gate_cpu_vs_ref(const char *model_path, const char *vec_dir);
/* The same on a model without golden vectors (random-weight real shapes): fixed token ids,
 * token by token, one batch, two interleaved sequences. */
int kt_gate_cpu_vs_ref_shape(const char *model_path, const char *unused);

/* The scheduler and prefix cache (tests/model/gates_sched.c): solo == batch of 8 == prefix
 * cache == KV pressure with preemption; cancellation, busy queue, logprobs, prefix reuse vs
 * recomputation. */
int kt_gate_sched(const char *model_path, const char *unused);

#endif
