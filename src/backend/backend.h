/* backend.h — the one backend interface: a table of functions each backend implements.
 * The registry (registry.c) maps names to tables; it is the only file allowed to know which
 * backends a build contains. Backends never fall back to each other. */
#ifndef KIPP_BACKEND_H
#define KIPP_BACKEND_H

#include "kipp.h"
#include "model/model.h"

typedef struct kipp_backend_ops {
    const char *name;
    /* Allocates the backend's per-context state: KV cache for n_ctx positions + scratch. */
    kipp_status (*init)(const kipp_model *m, uint32_t n_ctx, int n_threads, void **state,
                        char *err, size_t err_len);
    void (*free)(void *state);
    /* Runs tokens[0..n-1] at positions pos..pos+n-1, appending to the KV cache; writes the
     * last token's logits (n_vocab floats) when logits != NULL. The caller has checked
     * pos + n <= n_ctx and every token id < n_vocab. */
    kipp_status (*decode)(void *state, const int32_t *tokens, uint32_t n, uint32_t pos,
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

#endif
