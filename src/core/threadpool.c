/* threadpool.c — the persistent pthread pool of threadpool.h. A job is published by
 * bumping a generation counter under the mutex; workers spin on it for a short while
 * (decode steps arrive back to back), then sleep on a condvar, so an idle pool burns no CPU.
 * Completion is a counter the caller waits on the same way. Does not pin threads. */
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

struct kipp_threadpool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    atomic_uint gen;     /* bumped once per job */
    atomic_int pending;  /* workers still running the current job */
    int stop;
    /* the current job (written by the caller before gen is bumped) */
    kipp_parallel_fn fn;
    void *ctx;
    uint64_t n, align;
};

typedef struct { kipp_threadpool *p; int ith; } worker_arg;

static void run_chunk(kipp_threadpool *p, int ith) {
    const uint64_t nt = (uint64_t)p->n_threads, a = p->align ? p->align : 1;
    const uint64_t units = (p->n + a - 1) / a;
    uint64_t b = units * (uint64_t)ith / nt * a, e = units * (uint64_t)(ith + 1) / nt * a;
    if (e > p->n) e = p->n;
    if (b < e) p->fn(p->ctx, b, e, ith);
}

static void *worker_main(void *argp) {
    worker_arg *wa = argp;
    kipp_threadpool *p = wa->p;
    const int ith = wa->ith;
    free(wa);
    unsigned seen = 0; /* gen at init: a job published before this thread ran is still ours */
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && spins < SPIN_ITERS)
            spins++;
        if (atomic_load_explicit(&p->gen, memory_order_acquire) == seen) {
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !p->stop) pthread_cond_wait(&p->cv_job, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (p->stop) return NULL;
        seen = atomic_load(&p->gen);
        run_chunk(p, ith);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
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
    if (n_threads > 1024)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "thread count %d is above 1024", n_threads);
    kipp_threadpool *p = calloc(1, sizeof *p);
    if (!p) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "thread pool: out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_job, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
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
    p->stop = 1;
    atomic_fetch_add(&p->gen, 1);
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
    p->fn = fn;
    p->ctx = ctx;
    p->n = n;
    p->align = align;
    if (p->n_threads == 1) { run_chunk(p, 0); return; }
    atomic_store(&p->pending, p->n_threads - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_job);
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, 0);
    int spins = 0;
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0 && spins < SPIN_ITERS) spins++;
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->cv_done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
