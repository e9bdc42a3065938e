/* threadpool.h — a small persistent pthread pool: n-1 workers plus the calling thread run
 * one parallel_for at a time over [0, n) with static chunking, then meet at a barrier.
 * Does not queue work, nest, or steal: one caller at a time drives the pool. */
#ifndef KIPP_CORE_THREADPOOL_H
#define KIPP_CORE_THREADPOOL_H

#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kipp_threadpool kipp_threadpool;

/* fn runs on [begin, end) of the range; ith is the thread's index in 0..n_threads-1. */
typedef void (*kipp_parallel_fn)(void *ctx, uint64_t begin, uint64_t end, int ith);

/* Physical cores of this machine (one per SMT sibling group, from /sys topology), or the
 * online CPU count when the topology cannot be read; at least 1. */
int kipp_threadpool_default_threads(void);

/* Starts n_threads - 1 workers (n_threads <= 0: the default above). */
kipp_status kipp_threadpool_init(int n_threads, kipp_threadpool **out, char *err, size_t err_len);
void kipp_threadpool_free(kipp_threadpool *p);
int kipp_threadpool_n_threads(const kipp_threadpool *p);

/* Splits [0, n) into n_threads contiguous chunks whose starts are multiples of `align`
 * (except the range end) and runs fn on each, the caller taking chunk 0. Returns when all
 * chunks are done. Workers spin briefly for the next job, then sleep on a condvar. */
void kipp_threadpool_for(kipp_threadpool *p, uint64_t n, uint64_t align, kipp_parallel_fn fn,
                         void *ctx);

#endif
