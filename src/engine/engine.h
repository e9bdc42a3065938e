/* engine.h — engine internals shared inside the library and with its own tests and
 * benchmarks (never installed): borrowing a context's KV block pool to inspect block tables
 * and accounting. Applications use the kipp_ctx_* API in kipp.h instead. */
#ifndef KIPP_ENGINE_H
#define KIPP_ENGINE_H

#include "kipp.h"
#include "kv/kv.h"

/* The context's block pool, valid as long as the context lives. Read it; change it only
 * through the kipp_ctx_* calls, which keep the context's own bookkeeping in step. */
kipp_kv_pool *kipp_ctx_kv_pool(kipp_ctx *c);

#endif
