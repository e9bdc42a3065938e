/* membw.c — multi-threaded memory read bandwidth, the ceiling for memory-bound decode.
 * Allocates a buffer (default 1 GiB), touches it, then T threads each sum their contiguous
 * slice (64-byte vector loads, four independent accumulators); the pass time is from the
 * first thread's start to the last thread's end. Prints one JSON object on stdout with every
 * pass and the best (highest) GB/s (1 GB = 1e9 bytes). tools/bench.py records it next to
 * the effective decode bandwidth. Build: make build/kipp-membw.
 *
 *   kipp-membw [--size-mib N] [--threads T] [--runs R] */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef uint64_t v8u64 __attribute__((vector_size(64)));

typedef struct {
    const v8u64 *p;
    size_t n; /* vectors */
    pthread_barrier_t *bar;
    double t_end;
    uint64_t sum;
} job;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *reader(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    v8u64 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    size_t i = 0;
    for (; i + 4 <= j->n; i += 4) {
        a0 += j->p[i];
        a1 += j->p[i + 1];
        a2 += j->p[i + 2];
        a3 += j->p[i + 3];
    }
    for (; i < j->n; i++) a0 += j->p[i];
    v8u64 a = a0 + a1 + a2 + a3;
    uint64_t s = 0;
    for (int k = 0; k < 8; k++) s += a[k];
    j->sum = s;
    j->t_end = now_s();
    return NULL;
}

static long arg_long(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "kipp-membw: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo,
                hi, v ? v : "");
        exit(2);
    }
    return x;
}

int main(int argc, char **argv) {
    long size_mib = 1024, runs = 5;
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--size-mib")) size_mib = arg_long(a, v, 1, 1 << 20), i++;
        else if (!strcmp(a, "--threads")) threads = arg_long(a, v, 1, 1024), i++;
        else if (!strcmp(a, "--runs")) runs = arg_long(a, v, 1, 1000), i++;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: kipp-membw [--size-mib N (1024)] [--threads T (online CPUs)] "
                   "[--runs R (5)]\nPrints the best multi-threaded read bandwidth as JSON.\n");
            return 0;
        } else {
            fprintf(stderr, "kipp-membw: unknown option '%s'\n", a);
            return 2;
        }
    }
    size_t bytes = (size_t)size_mib << 20, nvec = bytes / sizeof(v8u64);
    v8u64 *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, bytes) != 0) {
        fprintf(stderr, "kipp-membw: cannot allocate %ld MiB\n", size_mib);
        return 1;
    }
    for (size_t i = 0; i < bytes / 8; i++) ((uint64_t *)buf)[i] = i; /* touch every page */

    double *gbps = calloc((size_t)runs, sizeof *gbps), best = 0;
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    job *jobs = calloc((size_t)threads, sizeof *jobs);
    if (!gbps || !tid || !jobs) return 1;
    uint64_t check = 0;
    for (long r = 0; r < runs; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)threads + 1);
        size_t per = nvec / (size_t)threads;
        for (long t = 0; t < threads; t++) {
            jobs[t].p = buf + per * (size_t)t;
            jobs[t].n = t == threads - 1 ? nvec - per * (size_t)t : per;
            jobs[t].bar = &bar;
            if (pthread_create(&tid[t], NULL, reader, &jobs[t]) != 0) {
                fprintf(stderr, "kipp-membw: pthread_create failed\n");
                return 1;
            }
        }
        double t0 = now_s();
        pthread_barrier_wait(&bar);
        double t_end = t0;
        for (long t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            if (jobs[t].t_end > t_end) t_end = jobs[t].t_end;
            check += jobs[t].sum;
        }
        pthread_barrier_destroy(&bar);
        gbps[r] = (double)bytes / (t_end - t0) / 1e9;
        if (gbps[r] > best) best = gbps[r];
    }
    printf("{\"tool\": \"kipp-membw\", \"bytes\": %zu, \"threads\": %ld, \"runs\": %ld, "
           "\"best_gbps\": %.3f, \"gbps\": [", bytes, threads, runs, best);
    for (long r = 0; r < runs; r++) printf(r ? ", %.3f" : "%.3f", gbps[r]);
    printf("], \"checksum\": %llu}\n", (unsigned long long)check);
    free(gbps);
    free(tid);
    free(jobs);
    free(buf);
    return 0;
}
