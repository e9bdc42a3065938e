/* threadpool.h — a small persistent pthread pool: n-1 workers plus the calling thread run
 * one parallel_for at a time over [0, n), cut into fixed chunks that the threads claim as
 * they come (so a thread the OS has descheduled does not hold the others up), then meet
 * when the last chunk is done. Does not queue work or nest: one caller at a time drives
 * the pool. */
#ifndef KIPP_CORE_THREADPOOL_H
#define KIPP_CORE_THREADPOOL_H

#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kipp_threadpool kipp_threadpool;

#define KIPP_TP_MAX_THREADS 1024
#define KIPP_TP_CHUNKS_PER_THREAD 4 /* chunks a job is cut into, per thread (at most the units) */

/* fn runs on [begin, end) of the range; ith is the thread's index in 0..n_threads-1. */
typedef void (*kipp_parallel_fn)(void *ctx, uint64_t begin, uint64_t end, int ith);

/* Physical cores of this machine (one per SMT sibling group, from /sys topology), or the
 * online CPU count when the topology cannot be read; at least 1. */
int kipp_threadpool_default_threads(void);

/* Starts n_threads - 1 workers (n_threads <= 0: the default above). */
kipp_status kipp_threadpool_init(int n_threads, kipp_threadpool **out, char *err, size_t err_len);
void kipp_threadpool_free(kipp_threadpool *p);
int kipp_threadpool_n_threads(const kipp_threadpool *p);

/* Splits [0, n) into min(units, n_threads x KIPP_TP_CHUNKS_PER_THREAD) contiguous chunks
 * of whole units of `align` (the last may end at n; align 0 counts as 1) and runs fn once
 * per chunk, on whichever thread claims it first (the caller claims too); ith is that
 * thread's index, so per-thread scratch indexed by ith is safe, but one thread may run
 * several chunks and another none. The chunks depend only on (n, align, n_threads).
 * Returns when every chunk is done. Workers spin briefly for the next job, then sleep on a
 * condvar. */
void kipp_threadpool_for(kipp_threadpool *p, uint64_t n, uint64_t align, kipp_parallel_fn fn,
                         void *ctx);

#endif
