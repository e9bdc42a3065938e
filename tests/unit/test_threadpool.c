/* test_threadpool.c — unit suite for src/core/threadpool.c: every index of a range runs
 * exactly once, in chunks with aligned starts that depend only on (n, align, threads),
 * over thousands of back-to-back jobs of random sizes (a late thread must never run a
 * chunk of a job that is over, nor miss one of the current job); and a thread that is held
 * up does not hold the job: the other threads take the chunks it has not claimed. */
#include "core/threadpool.h"
#include "kt.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t urand(uint32_t n) { /* xorshift64*: [0, n) */
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (uint32_t)(((rng * 2685821657736338717ull) >> 33) % n);
}

#define MAX_N 5000
#define MAX_CALLS 4096

typedef struct {
    atomic_uint hits[MAX_N];
    atomic_uint n_calls;
    uint64_t call_b[MAX_CALLS], call_e[MAX_CALLS];
    atomic_int bad_ith, bad_align;
    int n_threads;
    uint64_t align, n, job; /* job: this job's number, stamped by every call */
    atomic_ullong stale;    /* calls that saw another job's number */
    atomic_ullong units_by[8];
    int hold_ith;           /* this thread's first call sleeps (-1: none) */
    atomic_int held;
} cover;

static void touch(void *ctx, uint64_t b, uint64_t e, int ith) {
    cover *c = ctx;
    const uint64_t job = c->job;
    if (ith < 0 || ith >= c->n_threads) atomic_fetch_add(&c->bad_ith, 1);
    if (b % c->align != 0 || (e % c->align != 0 && e != c->n) || b >= e || e > c->n)
        atomic_fetch_add(&c->bad_align, 1);
    if (ith == c->hold_ith && atomic_exchange(&c->held, 1) == 0) {
        const struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    for (uint64_t i = b; i < e && i < MAX_N; i++) atomic_fetch_add(&c->hits[i], 1u);
    const unsigned k = atomic_fetch_add(&c->n_calls, 1u);
    if (k < MAX_CALLS) c->call_b[k] = b, c->call_e[k] = e;
    if (ith >= 0 && ith < 8) atomic_fetch_add(&c->units_by[ith], e - b);
    if (c->job != job) atomic_fetch_add(&c->stale, 1);
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Runs one job and checks coverage; the sorted chunk starts go to starts (n_calls of them). */
static int run_one(kipp_threadpool *p, cover *c, uint64_t n, uint64_t align, uint64_t *starts, unsigned *n_starts) {
    for (uint64_t i = 0; i < n; i++) atomic_store(&c->hits[i], 0u);
    atomic_store(&c->n_calls, 0u);
    c->n = n;
    c->align = align ? align : 1;
    c->job++;
    kipp_threadpool_for(p, n, align, touch, c);
    int bad = 0;
    for (uint64_t i = 0; i < n; i++) bad += atomic_load(&c->hits[i]) != 1u;
    const unsigned k = atomic_load(&c->n_calls);
    if (starts) {
        for (unsigned i = 0; i < k && i < MAX_CALLS; i++) starts[i] = c->call_b[i];
        qsort(starts, k < MAX_CALLS ? k : MAX_CALLS, sizeof *starts, cmp_u64);
        *n_starts = k;
    }
    return bad;
}

static void test_cover(void) {
    static cover c;
    static uint64_t s1[MAX_CALLS], s2[MAX_CALLS];
    for (int nt = 1; nt <= 6; nt++) {
        kipp_threadpool *p = NULL;
        char err[256];
        KT_CHECK(kipp_threadpool_init(nt, &p, err, sizeof err) == KIPP_OK, "init %d threads: %s", nt, err);
        if (!p) continue;
        KT_CHECK(kipp_threadpool_n_threads(p) == nt, "n_threads %d, wanted %d", kipp_threadpool_n_threads(p), nt);
        memset(&c, 0, sizeof c);
        c.n_threads = nt;
        c.hold_ith = -1;
        int bad = 0, bad_calls = 0, differs = 0;
        for (int r = 0; r < 3000; r++) {
            const uint64_t n = urand(4) == 0 ? urand(8) : 1 + urand(MAX_N);
            const uint64_t align = (uint64_t[]){0, 1, 16, 7, 256}[urand(5)];
            unsigned k1 = 0, k2 = 0;
            bad += run_one(p, &c, n, align, s1, &k1);
            const uint64_t a = align ? align : 1, units = (n + a - 1) / a;
            uint64_t want = units < (uint64_t)nt * KIPP_TP_CHUNKS_PER_THREAD ? units
                                                                          : (uint64_t)nt * KIPP_TP_CHUNKS_PER_THREAD;
            if (nt == 1 || units == 1) want = units ? 1 : 0;
            bad_calls += k1 != want;
            if (r % 10 == 0) { /* the same job again: the same chunks, whoever ran them */
                bad += run_one(p, &c, n, align, s2, &k2);
                differs += k1 != k2 || memcmp(s1, s2, (k1 < MAX_CALLS ? k1 : MAX_CALLS) * sizeof *s1) != 0;
            }
        }
        KT_CHECK(bad == 0, "%d threads: %d indices run other than once over 3000 jobs", nt, bad);
        KT_CHECK(bad_calls == 0, "%d threads: %d jobs cut into an unexpected number of chunks", nt, bad_calls);
        KT_CHECK(differs == 0, "%d threads: %d repeated jobs cut differently", nt, differs);
        KT_CHECK(atomic_load(&c.bad_ith) == 0 && atomic_load(&c.bad_align) == 0,
                 "%d threads: %d calls with a bad thread index, %d with an unaligned or empty range", nt,
                 atomic_load(&c.bad_ith), atomic_load(&c.bad_align));
        KT_CHECK(atomic_load(&c.stale) == 0, "%d threads: %llu calls ran while another job was current", nt,
                 (unsigned long long)atomic_load(&c.stale));
        kipp_threadpool_free(p);
    }
}

/* Thread 1's first chunk sleeps 300 ms: meanwhile the caller (thread 0) takes every other
 * chunk, so it covers all but one chunk's units. With a fixed share per thread (the old
 * static split) thread 0 would have covered exactly half. */
static void test_held_thread(void) {
    static cover c;
    kipp_threadpool *p = NULL;
    char err[256];
    KT_CHECK(kipp_threadpool_init(2, &p, err, sizeof err) == KIPP_OK, "init: %s", err);
    if (!p) return;
    /* warm: thread 1 awake and spinning, so it claims a chunk early in the held job */
    memset(&c, 0, sizeof c);
    c.n_threads = 2;
    c.hold_ith = -1;
    for (int r = 0; r < 50; r++) run_one(p, &c, 4096, 16, NULL, NULL);
    memset(&c, 0, sizeof c);
    c.n_threads = 2;
    c.hold_ith = 1;
    const uint64_t n = 4096;
    const int bad = run_one(p, &c, n, 16, NULL, NULL);
    const uint64_t by0 = atomic_load(&c.units_by[0]), by1 = atomic_load(&c.units_by[1]);
    const uint64_t chunk = n / (2 * KIPP_TP_CHUNKS_PER_THREAD);
    KT_CHECK(bad == 0, "held job: %d indices run other than once", bad);
    KT_CHECK(by0 + by1 == n && by1 <= chunk,
             "thread 1 held for 300 ms in its first chunk still ran %llu of %llu indices (thread 0: %llu); "
             "the others should have taken all but its one chunk (%llu)",
             (unsigned long long)by1, (unsigned long long)n, (unsigned long long)by0, (unsigned long long)chunk);
    kipp_threadpool_free(p);
}

static void test_refuse(void) {
    kipp_threadpool *p = NULL;
    char err[256] = "";
    KT_CHECK(kipp_threadpool_init(KIPP_TP_MAX_THREADS + 1, &p, err, sizeof err) == KIPP_ERR_INVALID_ARG && !p &&
                 strstr(err, "thread count"),
             "%d threads accepted or unclear error '%s'", KIPP_TP_MAX_THREADS + 1, err);
}

void kt_suite_threadpool(void) {
    test_cover();
    test_held_thread();
    test_refuse();
}
