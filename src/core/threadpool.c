/* threadpool.c — the persistent pthread pool of threadpool.h.
 *
 * A job's range is cut into chunks (KIPP_TP_CHUNKS_PER_THREAD per thread, aligned starts)
 * that the threads claim one at a time, the caller included. The job is done when every
 * chunk is done, not when every thread has checked in: a thread the OS has not scheduled
 * yet (another process, the server's HTTP or grammar-mask thread on the same cores) simply
 * finds nothing left, so a parallel region costs what the running threads can do instead
 * of waiting for the slowest thread's fixed share. Chunk boundaries depend only on (n,
 * align, n_threads), so every call sees the same rows whichever thread runs it: results
 * are the same bits whoever does the work.
 *
 * Claims go through one 64-bit word: the job's generation (high 32 bits), the next chunk
 * and the chunk count (16 bits each). A claim is a compare-and-swap that bumps the next
 * chunk of the current generation, so a thread that read a job and was then descheduled
 * cannot claim a chunk of a later job by mistake: its swap fails and it reads the word
 * again. A job's fields are written before its generation is published (release) and are
 * not rewritten until all its chunks are done, which a claimed chunk prevents.
 *
 * Workers spin on the word for a short while (decode steps arrive back to back), then
 * sleep on a condvar, so an idle pool burns no CPU. The caller waits for the last chunk the
 * same way. Does not pin threads. */
#include "core/threadpool.h"

#include "core/error.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPIN_ITERS 200000 /* ~0.2 ms before a thread goes to sleep: decode steps have serial
                            * gaps longer than tens of microseconds (measured: 20000 spins let the
                            * workers sleep mid-step; Q4_K_M decode 25 -> 32 tok/s with 200000) */

#define GEN(w) ((uint32_t)((w) >> 32))
#define NEXT(w) ((uint32_t)(((w) >> 16) & 0xffffu))
#define NCH(w) ((uint32_t)((w) & 0xffffu))
#define WORD(g, next, nch) (((uint64_t)(g) << 32) | ((uint64_t)(next) << 16) | (uint64_t)(nch))

struct kipp_threadpool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    _Atomic uint64_t word; /* generation | next chunk | chunks (see above) */
    atomic_uint done;      /* chunks of the current job finished */
    atomic_int stop;
    /* the current job (written by the caller before its generation is published) */
    kipp_parallel_fn fn;
    void *ctx;
    uint64_t n, align, units;
    uint32_t nch;
};

typedef struct { kipp_threadpool *p; int ith; } worker_arg;

/* Chunk c of nch over units of `align` (the last may be short; starts aligned). */
static void chunk_range(const kipp_threadpool *p, uint32_t c, uint64_t *b, uint64_t *e) {
    const uint64_t a = p->align;
    *b = p->units * c / p->nch * a;
    *e = p->units * (c + 1) / p->nch * a;
    if (*e > p->n) *e = p->n;
}

/* Claims and runs chunks of generation g until none is left (or g is no longer current). */
static void run_chunks(kipp_threadpool *p, uint32_t g, int ith) {
    uint64_t w = atomic_load_explicit(&p->word, memory_order_acquire);
    for (;;) {
        if (GEN(w) != g || NEXT(w) >= NCH(w)) return;
        const uint64_t claimed = w + ((uint64_t)1 << 16);
        if (!atomic_compare_exchange_weak_explicit(&p->word, &w, claimed, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* w now holds the word as it is */
        uint64_t b, e;
        chunk_range(p, NEXT(w), &b, &e);
        if (b < e) p->fn(p->ctx, b, e, ith);
        if (atomic_fetch_add_explicit(&p->done, 1u, memory_order_acq_rel) + 1 == NCH(w)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
        w = claimed;
    }
}

static void *worker_main(void *argp) {
    worker_arg *wa = argp;
    kipp_threadpool *p = wa->p;
    const int ith = wa->ith;
    free(wa);
    uint32_t seen = 0; /* generation at init: a job published before this thread ran is ours */
    for (;;) {
        int spins = 0;
        while (GEN(atomic_load_explicit(&p->word, memory_order_acquire)) == seen && spins < SPIN_ITERS)
            spins++;
        if (GEN(atomic_load_explicit(&p->word, memory_order_acquire)) == seen) {
            pthread_mutex_lock(&p->mu);
            while (GEN(atomic_load(&p->word)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_job, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = GEN(atomic_load_explicit(&p->word, memory_order_acquire));
        run_chunks(p, seen, ith);
    }
}

int kipp_threadpool_default_threads(void) {
    long n_online = sysconf(_SC_NPROCESSORS_ONLN);
    if (n_online < 1) n_online = 1;
    /* a CPU is the first of its core when it is the first entry of its sibling list */
    int n_cores = 0;
    for (long c = 0; c < n_online; c++) {
        char path[128];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/thread_siblings_list", c);
        FILE *f = fopen(path, "r");
        if (!f) return (int)n_online;
        long first = -1;
        if (fscanf(f, "%ld", &first) != 1) first = -1;
        fclose(f);
        if (first < 0) return (int)n_online;
        if (first == c) n_cores++;
    }
    return n_cores > 0 ? n_cores : (int)n_online;
}

kipp_status kipp_threadpool_init(int n_threads, kipp_threadpool **out, char *err, size_t err_len) {
    *out = NULL;
    if (n_threads <= 0) n_threads = kipp_threadpool_default_threads();
    if (n_threads > KIPP_TP_MAX_THREADS)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "thread count %d is above %d", n_threads,
                         KIPP_TP_MAX_THREADS);
    kipp_threadpool *p = calloc(1, sizeof *p);
    if (!p) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_job, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->word, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->stop, 0);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) goto fail_nomem;
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) goto fail_nomem;
        wa->p = p;
        wa->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i; /* join only what started */
            kipp_threadpool_free(p);
            return kipp_errf(err, err_len, KIPP_ERR_BACKEND, "thread pool: could not start thread %d of %d",
                             i, n_threads);
        }
    }
    *out = p;
    return KIPP_OK;
fail_nomem:
    kipp_threadpool_free(p);
    return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "thread pool: out of memory");
}

void kipp_threadpool_free(kipp_threadpool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    const uint64_t w = atomic_load(&p->word);
    atomic_store(&p->word, WORD(GEN(w) + 1, 0, 0)); /* wakes the spinners: nothing to claim */
    pthread_cond_broadcast(&p->cv_job);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads && p->threads; i++)
        if (p->threads[i]) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_job);
    pthread_cond_destroy(&p->cv_done);
    free(p->threads);
    free(p);
}

int kipp_threadpool_n_threads(const kipp_threadpool *p) { return p->n_threads; }

void kipp_threadpool_for(kipp_threadpool *p, uint64_t n, uint64_t align, kipp_parallel_fn fn,
                         void *ctx) {
    if (n == 0) return;
    const uint64_t a = align ? align : 1, units = (n + a - 1) / a;
    if (p->n_threads == 1 || units == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    uint64_t nch = (uint64_t)p->n_threads * KIPP_TP_CHUNKS_PER_THREAD;
    if (nch > units) nch = units;
    /* no claim of the last job can be in flight: all its chunks are done */
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->align = a;
    p->units = units;
    p->nch = (uint32_t)nch;
    atomic_store_explicit(&p->done, 0u, memory_order_relaxed);
    const uint32_t g = GEN(atomic_load_explicit(&p->word, memory_order_relaxed)) + 1;
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->word, WORD(g, 0, nch), memory_order_release);
    pthread_cond_broadcast(&p->cv_job);
    pthread_mutex_unlock(&p->mu);
    run_chunks(p, g, 0);
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < nch && spins < SPIN_ITERS) spins++;
    if (atomic_load_explicit(&p->done, memory_order_acquire) < nch) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->done) < nch) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
