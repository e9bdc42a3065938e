/* sampler_bench.c — time of one sampled token on a vocabulary-sized logits row: the sampler
 * (src/engine/sampler.c) under the OpenAI defaults (temperature 1, no truncation), Kipp's
 * CLI defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), top-p 0.9 alone and
 * greedy, and the log-probabilities a request with top_logprobs 20 adds (log-sum-exp and
 * the top 20, src/core/vmath.c). Uses only the public sampler API and vmath.h, so
 * bench/sampler_bench.py can build the same source against an older commit's library.
 *
 *   kipp-samplerbench [n_vocab (151936)] [seconds per config (1.0)]
 *
 * Prints one JSON object: per config the median milliseconds per token over 7 batches. The
 * logits are seeded, roughly normal (sd ~2.3) with a few dozen strong candidates, as a
 * language model's are; each call gets a fresh copy (the sampler scales in place). */
#include "core/vmath.h"
#include "kipp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float urand(void) { /* [0, 1) */
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (float)((rng * 2685821657736338717ull) >> 40) / 16777216.0f;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { BATCHES = 7 };

/* the median over BATCHES of the mean ms per call of fn over ~seconds / BATCHES each */
static double time_ms(double seconds, void (*fn)(void *), void *arg) {
    double ms[BATCHES];
    fn(arg); /* warm */
    for (int b = 0; b < BATCHES; b++) {
        const double t0 = now_s();
        long n = 0;
        do {
            fn(arg);
            n++;
        } while (now_s() - t0 < seconds / BATCHES);
        ms[b] = (now_s() - t0) / (double)n * 1e3;
    }
    qsort(ms, BATCHES, sizeof ms[0], cmp_d);
    return ms[BATCHES / 2];
}

typedef struct {
    kipp_sampler *s;
    const float *logits;
    float *work;
    uint32_t n;
    long sink;
} job;

static void sample_once(void *arg) {
    job *j = arg;
    memcpy(j->work, j->logits, (size_t)j->n * sizeof *j->work);
    const int32_t t = kipp_sampler_sample(j->s, j->work);
    kipp_sampler_accept(j->s, t);
    j->sink += t;
}

static void logprobs_once(void *arg) {
    job *j = arg;
    int32_t ids[20];
    const double lse = kipp_log_sum_exp(j->logits, j->n);
    j->sink += (long)kipp_vec_top_k(j->logits, j->n, 20, ids) + (long)(lse > 0);
}

int main(int argc, char **argv) {
    const uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 151936;
    const double secs = argc > 2 ? strtod(argv[2], NULL) : 1.0;
    if (n < 64 || !(secs > 0)) {
        fprintf(stderr, "usage: kipp-samplerbench [n_vocab >= 64] [seconds > 0]\n");
        return 2;
    }
    float *logits = malloc((size_t)n * sizeof *logits), *work = malloc((size_t)n * sizeof *work);
    if (!logits || !work) {
        fprintf(stderr, "kipp-samplerbench: out of memory\n");
        return 1;
    }
    for (uint32_t i = 0; i < n; i++)
        logits[i] = (urand() + urand() + urand() - 1.5f) * 4.0f;
    for (int i = 0; i < 40; i++)
        logits[(uint32_t)(urand() * (float)n) % n] = 12.0f + urand() * 6.0f;

    struct { const char *name; float t; int32_t k; float p, minp; } cf[] = {
        {"openai_defaults", 1.0f, 0, 1.0f, 0.0f},
        {"kipp_defaults", 0.8f, 40, 0.95f, 0.05f},
        {"top_p_0.9", 0.7f, 0, 0.9f, 0.0f},
        {"greedy", 0.0f, 0, 1.0f, 0.0f},
    };
    printf("{\"n_vocab\": %u, \"seconds_per_config\": %g, \"batches\": %d, \"ms_per_token\": {", n, secs, BATCHES);
    long sink = 0;
    for (size_t c = 0; c < sizeof cf / sizeof cf[0]; c++) {
        kipp_sampler_params p = kipp_sampler_default_params();
        p.temperature = cf[c].t, p.top_k = cf[c].k, p.top_p = cf[c].p, p.min_p = cf[c].minp;
        p.seed = 42;
        char err[256];
        kipp_sampler *s = NULL;
        if (kipp_sampler_init(&p, n, &s, err, sizeof err) != KIPP_OK) {
            fprintf(stderr, "kipp-samplerbench: %s\n", err);
            return 1;
        }
        job j = {s, logits, work, n, 0};
        printf("%s\"%s\": %.5f", c ? ", " : "", cf[c].name, time_ms(secs, sample_once, &j));
        sink += j.sink;
        kipp_sampler_free(s);
    }
    job j = {NULL, logits, work, n, 0};
    printf(", \"logprobs_top20\": %.5f}, \"sink\": %ld}\n", time_ms(secs, logprobs_once, &j), sink + j.sink);
    free(logits);
    free(work);
    return 0;
}
