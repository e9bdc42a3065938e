/* engine.h — engine internals shared inside the library and with its own tests and
 * benchmarks (never installed): borrowing a context's KV block pool to inspect block tables
 * and accounting, and sizing a pool before its context exists. Applications use the kipp_ctx_* API in kipp.h instead. */
#ifndef KIPP_ENGINE_H
#define KIPP_ENGINE_H

#include "kipp.h"
#include "kv/kv.h"

/* The context's block pool, valid as long as the context lives. Read it; change it only
 * through the kipp_ctx_* calls, which keep the context's own bookkeeping in step. */
kipp_kv_pool *kipp_ctx_kv_pool(kipp_ctx *c);

/* Bytes of K + V per token a context with params p would store (its KV type resolved on its
 * backend, into *type unless NULL), before creating it: for sizing pools. Errors as kipp_ctx_init's for an unknown
 * backend or a KV type the backend lacks. */
kipp_status kipp_ctx_kv_bytes_per_token(const kipp_model *m, const kipp_ctx_params *p,
                                        uint64_t *out, kipp_kv_type *type, char *err,
                                        size_t err_len);

/* Per-row host work between batches on the backend's host threads (the cpu backend's pool;
 * elsewhere the calling thread alone): fn(arg, i, ith) for each i in [0, n), ith below
 * kipp_ctx_host_threads(c). Never while a batch runs: the caller is the one driving c. */
typedef void (*kipp_host_fn)(void *arg, uint32_t i, int ith);
void kipp_ctx_host_for(kipp_ctx *c, uint32_t n, kipp_host_fn fn, void *arg);
int kipp_ctx_host_threads(kipp_ctx *c);

#endif
