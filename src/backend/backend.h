/* backend.h — the one backend interface: a table of functions each backend implements.
 * The registry (registry.c) maps names to tables; it is the only file allowed to know which
 * backends a build contains. Backends never fall back to each other. */
#ifndef KIPP_BACKEND_H
#define KIPP_BACKEND_H

#include "kipp.h"
#include "kv/kv.h"
#include "model/model.h"

typedef struct kipp_backend_ops {
    const char *name;
    /* Allocates the backend's per-context scratch for sequences of up to n_ctx positions.
     * The KV cache is not the backend's: it is the context's block pool (src/kv). */
    kipp_status (*init)(const kipp_model *m, uint32_t n_ctx, int n_threads, void **state,
                        char *err, size_t err_len);
    void (*free)(void *state);
    /* Runs a validated batch (every array of b filled, no NULL defaults): token i at
     * position positions[i] of sequence seq_ids[i]. kipp_kv_grow has made room for every
     * token, so each token writes its K/V rows and its attention reads positions 0..pos of
     * its own sequence, all through kipp_kv_row(). Writes one row of n_vocab logits per
     * wanted token, in batch order. */
    kipp_status (*decode_batch)(void *state, kipp_kv_pool *pool, const kipp_batch *b,
                                float *logits, char *err, size_t err_len);
    /* Recomputes tokens[0..n-1] from scratch without touching the KV cache. */
    kipp_status (*forward_nocache)(void *state, const int32_t *tokens, uint32_t n,
                                   float *logits, char *err, size_t err_len);
} kipp_backend_ops;

/* Looks a backend up by name. Unknown names and backends not built into this binary are
 * errors (KIPP_ERR_BACKEND) whose message says what to do. */
kipp_status kipp_backend_find(const char *name, const kipp_backend_ops **out, char *err,
                              size_t err_len);
/* Comma-separated list of the backends this binary contains (static storage). */
const char *kipp_backend_list(void);

extern const kipp_backend_ops kipp_backend_cpu_ref;
extern const kipp_backend_ops kipp_backend_cpu; /* src/backend/cpu */

#endif
