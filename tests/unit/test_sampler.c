/* test_sampler.c — unit suite for src/engine/sampler.c: greedy, each filter on a small vocab
 * where the outcome is certain, penalties, seeding, a chi-square check of the draw against
 * softmax, and parameter validation. Does not test with real model logits. */
#include "kipp.h"
#include "kt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Samples once from a copy of logits (sample modifies its input). */
static int32_t sample_copy(kipp_sampler *s, const float *logits, uint32_t n) {
    float buf[64];
    if (n > 64)
        return -2;
    memcpy(buf, logits, n * sizeof *buf);
    return kipp_sampler_sample(s, buf);
}

static kipp_sampler *make(const kipp_sampler_params *p, uint32_t n_vocab) {
    char err[KIPP_ERR_LEN] = "";
    kipp_sampler *s = NULL;
    kipp_status st = kipp_sampler_init(p, n_vocab, &s, err, sizeof err);
    KT_CHECK(st == KIPP_OK && s != NULL, "init failed: %s", err);
    return s;
}

/* Params with every filter off and the given temperature. */
static kipp_sampler_params plain(float temperature, uint64_t seed) {
    kipp_sampler_params p = kipp_sampler_default_params();
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

static void test_defaults(void) {
    kipp_sampler_params p = kipp_sampler_default_params();
    KT_CHECK(p.temperature == 0.8f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f);
    KT_CHECK(p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
             p.frequency_penalty == 0.0f && p.penalty_last_n == 64 && p.seed == 0xC0FFEE);
    kipp_sampler_free(NULL); /* no-op */
}

static void test_greedy(void) {
    const float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, NAN};
    kipp_sampler_params p = plain(0.0f, 1);
    kipp_sampler *s = make(&p, 6);
    KT_CHECK(sample_copy(s, l, 6) == 1, "tie between 1 and 3 must pick the lowest id");
    kipp_sampler_free(s);
    p.temperature = -2.0f; /* negative is greedy too */
    s = make(&p, 6);
    for (int i = 0; i < 10; i++)
        KT_CHECK(sample_copy(s, l, 6) == 1);
    kipp_sampler_free(s);
    /* all -inf / NaN: greedy and sampling both return a valid id (the lowest) */
    const float dead[6] = {-INFINITY, NAN, -INFINITY, -INFINITY, NAN, -INFINITY};
    s = make(&p, 6);
    KT_CHECK(sample_copy(s, dead, 6) == 0);
    kipp_sampler_free(s);
    p.temperature = 1.0f;
    s = make(&p, 6);
    KT_CHECK(sample_copy(s, dead, 6) == 0);
    kipp_sampler_free(s);
}

/* top_k = 1 always picks the argmax even at a high temperature. */
static void test_top_k(void) {
    const float l[8] = {1.0f, 1.1f, 0.9f, 1.05f, 1.2f, 0.0f, 1.19f, -3.0f};
    kipp_sampler_params p = plain(5.0f, 7);
    p.top_k = 1;
    kipp_sampler *s = make(&p, 8);
    for (int i = 0; i < 200; i++)
        KT_CHECK(sample_copy(s, l, 8) == 4);
    kipp_sampler_free(s);
    /* top_k = 2 only ever yields the two best ids. */
    p.top_k = 2;
    s = make(&p, 8);
    int seen4 = 0, seen6 = 0, other = 0;
    for (int i = 0; i < 400; i++) {
        int32_t t = sample_copy(s, l, 8);
        seen4 += t == 4;
        seen6 += t == 6;
        other += t != 4 && t != 6;
    }
    KT_CHECK(other == 0 && seen4 > 100 && seen6 > 100, "4:%d 6:%d other:%d", seen4, seen6, other);
    kipp_sampler_free(s);
}

/* A tiny top_p keeps only the most probable token; a moderate one keeps a certain prefix. */
static void test_top_p(void) {
    const float l[5] = {0.0f, 2.0f, 1.0f, 0.5f, 1.9f};
    kipp_sampler_params p = plain(1.0f, 11);
    p.top_p = 1e-6f;
    kipp_sampler *s = make(&p, 5);
    for (int i = 0; i < 200; i++)
        KT_CHECK(sample_copy(s, l, 5) == 1);
    kipp_sampler_free(s);
    /* softmax of l: p1 ~ .36, p4 ~ .33, p2 ~ .13, ...: top_p 0.6 keeps exactly {1, 4}. Run
     * both with top_k off (the unsorted pre-filter path) and with top_k = 5 (sorted path). */
    for (int k = 0; k <= 5; k += 5) {
        p.top_p = 0.6f;
        p.top_k = k;
        s = make(&p, 5);
        int bad = 0, n1 = 0;
        for (int i = 0; i < 400; i++) {
            int32_t t = sample_copy(s, l, 5);
            bad += t != 1 && t != 4;
            n1 += t == 1;
        }
        KT_CHECK(bad == 0 && n1 > 100 && n1 < 300, "top_k %d: bad %d n1 %d", k, bad, n1);
        kipp_sampler_free(s);
    }
}

/* min_p drops tokens with p < min_p * p_max: here exactly ids 0 and 2 survive. */
static void test_min_p(void) {
    const float l[6] = {3.0f, 0.0f, 2.8f, -1.0f, 0.5f, 1.0f};
    kipp_sampler_params p = plain(1.0f, 5);
    p.min_p = 0.5f; /* e^(2.8-3) = 0.82 passes, e^(1-3) = 0.14 does not */
    kipp_sampler *s = make(&p, 6);
    int bad = 0, n0 = 0;
    for (int i = 0; i < 400; i++) {
        int32_t t = sample_copy(s, l, 6);
        bad += t != 0 && t != 2;
        n0 += t == 0;
    }
    KT_CHECK(bad == 0 && n0 > 150 && n0 < 300, "bad %d n0 %d", bad, n0);
    kipp_sampler_free(s);
    p.min_p = 1.0f; /* only the max survives */
    s = make(&p, 6);
    for (int i = 0; i < 100; i++)
        KT_CHECK(sample_copy(s, l, 6) == 0);
    kipp_sampler_free(s);
}

static void test_penalties(void) {
    /* repetition: positive logit divided, negative multiplied */
    const float l[4] = {2.0f, 1.9f, -1.0f, -1.2f};
    kipp_sampler_params p = plain(0.0f, 1);
    p.repetition_penalty = 1.5f;
    kipp_sampler *s = make(&p, 4);
    KT_CHECK(sample_copy(s, l, 4) == 0, "no history: argmax");
    kipp_sampler_accept(s, 0);
    kipp_sampler_accept(s, 0); /* counted once by the repetition penalty */
    float buf[4];
    memcpy(buf, l, sizeof buf);
    KT_CHECK(kipp_sampler_sample(s, buf) == 1);
    KT_CHECK(fabsf(buf[0] - 2.0f / 1.5f) < 1e-6f, "penalized logit %g", (double)buf[0]);
    kipp_sampler_accept(s, 2);
    memcpy(buf, l, sizeof buf);
    kipp_sampler_sample(s, buf);
    KT_CHECK(fabsf(buf[2] - -1.5f) < 1e-6f && buf[3] == -1.2f, "negative logit %g",
             (double)buf[2]);
    kipp_sampler_accept(s, -5);   /* out of range: ignored */
    kipp_sampler_accept(s, 1000); /* out of range: ignored */
    kipp_sampler_free(s);

    /* presence: a flat cost; frequency: per occurrence */
    p = plain(0.0f, 1);
    p.presence_penalty = 0.05f;
    s = make(&p, 4);
    kipp_sampler_accept(s, 0);
    KT_CHECK(sample_copy(s, l, 4) == 0, "presence 0.05 does not overturn a 0.1 lead");
    kipp_sampler_free(s);
    p.presence_penalty = 0.2f;
    s = make(&p, 4);
    kipp_sampler_accept(s, 0);
    KT_CHECK(sample_copy(s, l, 4) == 1, "presence 0.2 overturns a 0.1 lead");
    kipp_sampler_free(s);
    p = plain(0.0f, 1);
    p.frequency_penalty = 0.04f;
    s = make(&p, 4);
    kipp_sampler_accept(s, 0);
    kipp_sampler_accept(s, 0);
    KT_CHECK(sample_copy(s, l, 4) == 0, "2 x 0.04 < 0.1");
    kipp_sampler_accept(s, 0);
    KT_CHECK(sample_copy(s, l, 4) == 1, "3 x 0.04 > 0.1");
    kipp_sampler_free(s);

    /* window: with penalty_last_n = 2, token 0 leaves the window after two more tokens */
    p = plain(0.0f, 1);
    p.repetition_penalty = 2.0f;
    p.penalty_last_n = 2;
    s = make(&p, 4);
    kipp_sampler_accept(s, 0);
    kipp_sampler_accept(s, 3);
    KT_CHECK(sample_copy(s, l, 4) == 1, "0 still in window");
    kipp_sampler_accept(s, 3);
    KT_CHECK(sample_copy(s, l, 4) == 0, "0 left the window");
    kipp_sampler_free(s);
    /* penalty_last_n = 0: off; -1: the whole history */
    p.penalty_last_n = 0;
    s = make(&p, 4);
    kipp_sampler_accept(s, 0);
    KT_CHECK(sample_copy(s, l, 4) == 0);
    kipp_sampler_free(s);
    p.penalty_last_n = -1;
    s = make(&p, 4);
    kipp_sampler_accept(s, 0);
    for (int i = 0; i < 500; i++)
        kipp_sampler_accept(s, 3);
    KT_CHECK(sample_copy(s, l, 4) == 1);
    kipp_sampler_free(s);
    /* a window larger than the first ring allocation (64) still evicts correctly */
    p.penalty_last_n = 100;
    s = make(&p, 4);
    kipp_sampler_accept(s, 0);
    for (int i = 0; i < 99; i++)
        kipp_sampler_accept(s, 3);
    KT_CHECK(sample_copy(s, l, 4) == 1, "0 is the 100th most recent");
    kipp_sampler_accept(s, 3);
    KT_CHECK(sample_copy(s, l, 4) == 0, "0 evicted");
    kipp_sampler_free(s);

    /* penalties apply before the filters: with top_k = 1 at T > 0 the penalized argmax wins */
    p = plain(1.0f, 3);
    p.top_k = 1;
    p.repetition_penalty = 1.5f;
    s = make(&p, 4);
    kipp_sampler_accept(s, 0);
    for (int i = 0; i < 20; i++)
        KT_CHECK(sample_copy(s, l, 4) == 1);
    kipp_sampler_free(s);
}

static void draw_seq(uint64_t seed, int32_t *out, int n, uint32_t n_vocab, const float *l) {
    kipp_sampler_params p = kipp_sampler_default_params();
    p.seed = seed;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.temperature = 1.0f;
    kipp_sampler *s = make(&p, n_vocab);
    float *buf = malloc(n_vocab * sizeof *buf);
    for (int i = 0; i < n && s && buf; i++) {
        memcpy(buf, l, n_vocab * sizeof *buf);
        out[i] = kipp_sampler_sample(s, buf);
    }
    free(buf);
    kipp_sampler_free(s);
}

static void test_determinism(void) {
    enum { V = 1000, N = 64 };
    float *l = calloc(V, sizeof *l); /* flat */
    int32_t a[N], b[N], c[N];
    draw_seq(42, a, N, V, l);
    draw_seq(42, b, N, V, l);
    draw_seq(43, c, N, V, l);
    KT_CHECK(memcmp(a, b, sizeof a) == 0, "same seed, same tokens");
    int same = 0;
    for (int i = 0; i < N; i++)
        same += a[i] == c[i];
    KT_CHECK(same < 8, "different seeds agree on %d of %d draws from 1000 tokens", same, N);
    /* Pinned values: the PRNG is ours, so this sequence must hold on every platform. A flat
     * distribution makes the draw index = floor(u * 1000) with no expf sensitivity. */
    int32_t first[4];
    draw_seq(0xC0FFEE, first, 4, V, l);
    KT_CHECK(first[0] == 70 && first[1] == 560 && first[2] == 939 && first[3] == 315,
             "seed 0xC0FFEE drew %d %d %d %d", first[0], first[1], first[2], first[3]);
    free(l);
}

/* 20000 draws at T = 1 (all filters off) and at T = 0.7 with top_k = 3, against the exact
 * softmax. Chi-square with 4 resp. 2 degrees of freedom; the bounds are the 99.99%
 * quantiles (23.5, 18.4). The seed is fixed, so the test is deterministic, not flaky. */
static double chi_square(const kipp_sampler_params *p, const float *l, uint32_t n,
                         const double *expect_p) {
    enum { DRAWS = 20000 };
    kipp_sampler *s = make(p, n);
    int counts[8] = {0};
    for (int i = 0; i < DRAWS && s; i++) {
        int32_t t = sample_copy(s, l, n);
        if (t >= 0 && t < 8)
            counts[t]++;
    }
    kipp_sampler_free(s);
    double chi = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        double e = expect_p[i] * DRAWS;
        if (e == 0.0) {
            chi += counts[i] > 0 ? 1e9 : 0.0; /* a filtered token was drawn */
            continue;
        }
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi;
}

static void test_distribution(void) {
    const float l[5] = {1.0f, 2.0f, 0.5f, -0.5f, 1.5f};
    double e[5], z = 0.0;
    for (int i = 0; i < 5; i++)
        z += exp(l[i]);
    for (int i = 0; i < 5; i++)
        e[i] = exp(l[i]) / z;
    kipp_sampler_params p = plain(1.0f, 2024);
    double chi = chi_square(&p, l, 5, e);
    KT_CHECK(chi < 23.5, "chi-square %g (4 dof) at T=1", chi);

    /* T = 0.7, top_k = 3 keeps ids 1, 4, 0 renormalized */
    z = 0.0;
    for (int i = 0; i < 5; i++)
        e[i] = (i == 1 || i == 4 || i == 0) ? exp(l[i] / 0.7) : 0.0;
    for (int i = 0; i < 5; i++)
        z += e[i];
    for (int i = 0; i < 5; i++)
        e[i] /= z;
    p = plain(0.7f, 99);
    p.top_k = 3;
    chi = chi_square(&p, l, 5, e);
    KT_CHECK(chi < 18.4, "chi-square %g (2 dof) at T=0.7 top_k=3", chi);
}

/* A large vocab exercises quickselect and the unsorted top-p pre-filter: compare against
 * the certain outcome (top_k = 1 / tiny top_p / min_p = 1 must all return the argmax). */
static void test_large_vocab(void) {
    enum { V = 151936 };
    float *l = malloc(V * sizeof *l), *buf = malloc(V * sizeof *buf);
    uint64_t x = 12345;
    for (int i = 0; i < V; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        l[i] = (float)((x >> 40) % 2000) / 100.0f - 10.0f; /* many ties */
    }
    l[77777] = 30.0f;
    kipp_sampler_params variants[3];
    for (int i = 0; i < 3; i++)
        variants[i] = plain(1.0f, (uint64_t)i);
    variants[0].top_k = 1;
    variants[1].top_p = 1e-7f;
    variants[2].min_p = 1.0f;
    for (int v = 0; v < 3; v++) {
        kipp_sampler *s = make(&variants[v], V);
        memcpy(buf, l, V * sizeof *buf);
        KT_CHECK(s && kipp_sampler_sample(s, buf) == 77777, "variant %d", v);
        kipp_sampler_free(s);
    }
    /* default params on a near-flat vocab: result must be one of the 40 best ids */
    l[77777] = 9.99f;
    kipp_sampler_params d = kipp_sampler_default_params();
    kipp_sampler *s = make(&d, V);
    int ok = 1;
    for (int r = 0; r < 20 && s; r++) {
        memcpy(buf, l, V * sizeof *buf);
        int32_t t = kipp_sampler_sample(s, buf);
        int better = 0; /* how many ids come strictly before t in (logit desc, id asc) */
        for (int i = 0; i < V && better < 41; i++)
            better += l[i] > l[t] || (l[i] == l[t] && i < t);
        ok &= t >= 0 && better < 40;
    }
    KT_CHECK(ok, "default params returned a token outside the top 40");
    kipp_sampler_free(s);
    /* top_k off + top_p < 1 on a flat distribution forces the full-sort fallback */
    kipp_sampler_params fp = plain(1.0f, 8);
    fp.top_p = 0.5f;
    memset(l, 0, V * sizeof *l);
    s = make(&fp, V);
    memcpy(buf, l, V * sizeof *buf);
    int32_t t = s ? kipp_sampler_sample(s, buf) : -1;
    KT_CHECK(t >= 0 && t < V / 2 + 2, "flat top_p 0.5 keeps the lowest ids, got %d", t);
    kipp_sampler_free(s);
    free(l);
    free(buf);
}

static void test_invalid(void) {
    char err[KIPP_ERR_LEN];
    kipp_sampler *s = (kipp_sampler *)&s; /* must be reset to NULL on failure */
    struct {
        const char *field;
        kipp_sampler_params p;
    } cases[9];
    for (int i = 0; i < 9; i++)
        cases[i].p = kipp_sampler_default_params();
    cases[0].field = "temperature", cases[0].p.temperature = NAN;
    cases[1].field = "top_p", cases[1].p.top_p = 0.0f;
    cases[2].field = "top_p", cases[2].p.top_p = 1.5f;
    cases[3].field = "min_p", cases[3].p.min_p = -0.1f;
    cases[4].field = "min_p", cases[4].p.min_p = NAN;
    cases[5].field = "repetition_penalty", cases[5].p.repetition_penalty = 0.0f;
    cases[6].field = "presence_penalty", cases[6].p.presence_penalty = INFINITY;
    cases[7].field = "frequency_penalty", cases[7].p.frequency_penalty = NAN;
    cases[8].field = "penalty_last_n", cases[8].p.penalty_last_n = -2;
    for (int i = 0; i < 9; i++) {
        err[0] = 0;
        kipp_status st = kipp_sampler_init(&cases[i].p, 10, &s, err, sizeof err);
        KT_CHECK(st == KIPP_ERR_INVALID_ARG && s == NULL && strstr(err, cases[i].field),
                 "case %d: st %d err '%s'", i, (int)st, err);
    }
    kipp_sampler_params ok = kipp_sampler_default_params();
    KT_CHECK(kipp_sampler_init(&ok, 0, &s, err, sizeof err) == KIPP_ERR_INVALID_ARG &&
             strstr(err, "n_vocab"));
    KT_CHECK(kipp_sampler_init(&ok, 10, NULL, err, sizeof err) == KIPP_ERR_INVALID_ARG);
    /* NULL params mean the defaults; negative temperature is valid (greedy) */
    KT_CHECK(kipp_sampler_init(NULL, 10, &s, err, sizeof err) == KIPP_OK && s);
    kipp_sampler_free(s);
    ok.temperature = -1.0f;
    KT_CHECK(kipp_sampler_init(&ok, 10, &s, err, sizeof err) == KIPP_OK && s);
    KT_CHECK(kipp_sampler_sample(s, NULL) == -1);
    kipp_sampler_free(s);
}

/* Every accepted temperature is well defined: below ~1e-37 logits / T overflows to +inf
 * for every positive logit, and the old sampler then took the lowest such id. The limit
 * T -> 0 is greedy, also when every logit is negative (l / T -> -inf for all). */
/* logit_bias: added to the logits first (before penalties), repeated ids add up, ids
 * outside the vocabulary are ignored, the sampler keeps its own copy, a NaN bias or a count
 * without an array is refused; sampled runs never pick a -100 token. */
static void test_logit_bias(void) {
    const float l[4] = {2.0f, 1.9f, -1.0f, -1.2f};
    kipp_logit_bias b[4] = {{0, -0.5f}, {3, 2.0f}, {3, 1.5f}, {99, 50.0f}};
    kipp_sampler_params p = plain(0.0f, 1);
    p.logit_bias = b;
    p.n_logit_bias = 4;
    kipp_sampler *s = make(&p, 4);
    b[1].bias = -50.0f; /* the sampler has its own copy */
    float buf[4];
    memcpy(buf, l, sizeof buf);
    KT_CHECK(kipp_sampler_sample(s, buf) == 3, "-1.2 + 2 + 1.5 = 2.3 beats 1.9");
    KT_CHECK(fabsf(buf[0] - 1.5f) < 1e-6f && fabsf(buf[3] - 2.3f) < 1e-6f,
             "biased logits %g %g", (double)buf[0], (double)buf[3]);
    kipp_sampler_free(s);
    /* before the repetition penalty: 2 - 1 = 1 is then divided by 2 */
    kipp_logit_bias one = {0, -1.0f};
    p = plain(0.0f, 1);
    p.logit_bias = &one;
    p.n_logit_bias = 1;
    p.repetition_penalty = 2.0f;
    s = make(&p, 4);
    kipp_sampler_accept(s, 0);
    memcpy(buf, l, sizeof buf);
    kipp_sampler_sample(s, buf);
    KT_CHECK(fabsf(buf[0] - 0.5f) < 1e-6f, "bias then penalty: %g", (double)buf[0]);
    kipp_sampler_free(s);
    /* sampled: a banned token never comes */
    kipp_logit_bias ban = {0, -100.0f};
    p = plain(1.0f, 7);
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    s = make(&p, 4);
    int hit = 0;
    for (int i = 0; i < 2000; i++) hit |= sample_copy(s, l, 4) == 0;
    KT_CHECK(!hit, "a token biased by -100 was sampled");
    kipp_sampler_free(s);
    /* refused */
    char err[KIPP_ERR_LEN];
    kipp_sampler *bad = NULL;
    kipp_logit_bias nan_b = {1, NAN};
    p = plain(1.0f, 1);
    p.logit_bias = &nan_b;
    p.n_logit_bias = 1;
    KT_CHECK(kipp_sampler_init(&p, 4, &bad, err, sizeof err) == KIPP_ERR_INVALID_ARG && !bad &&
             strstr(err, "logit bias"), "NaN bias: %s", err);
    p.logit_bias = NULL;
    KT_CHECK(kipp_sampler_init(&p, 4, &bad, err, sizeof err) == KIPP_ERR_INVALID_ARG && !bad,
             "a count without an array was accepted");
}

static void test_tiny_temperature(void) {
    const float base[2][8] = {{0.5f, 1.0f, -2.0f, 3.0f, 7.25f, 2.0f, 7.0f, 0.1f},
                              {-9.0f, -3.0f, -8.0f, -7.0f, -0.5f, -2.0f, -6.0f, -1.0f}};
    const float temps[] = {1e-38f, 1e-45f, 1e-30f, 1e-20f};
    for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++)
        for (int b = 0; b < 2; b++) {
            kipp_sampler_params sp = kipp_sampler_default_params();
            sp.temperature = temps[t];
            sp.top_k = b ? 3 : 0;
            kipp_sampler *smp = NULL;
            char err[KIPP_ERR_LEN];
            KT_CHECK(kipp_sampler_init(&sp, 8, &smp, err, sizeof err) == KIPP_OK, "%s", err);
            for (int r = 0; smp && r < 8; r++) {
                float l[8];
                memcpy(l, base[b], sizeof l);
                int32_t id = kipp_sampler_sample(smp, l);
                KT_CHECK(id == 4, "temperature %g, logits set %d: sampled id %d, argmax is 4",
                         (double)temps[t], b, id);
            }
            kipp_sampler_free(smp);
        }
}

/* Samplers sharing one scratch (the scheduler's engine thread) draw exactly what samplers
 * with their own draw, interleaved call by call, with filters and penalties on; a scratch
 * smaller than the sampler's vocabulary is not taken. */
static void test_shared_scratch(void) {
    enum { NV = 40, NS = 3, STEPS = 200 };
    char err[KIPP_ERR_LEN] = "";
    kipp_sampler_scratch *sc = NULL, *small = NULL;
    KT_CHECK(kipp_sampler_scratch_init(NV, &sc, err, sizeof err) == KIPP_OK && sc, "%s", err);
    KT_CHECK(kipp_sampler_scratch_init(0, &small, err, sizeof err) == KIPP_ERR_INVALID_ARG && !small);
    KT_CHECK(kipp_sampler_scratch_init(NV - 1, &small, err, sizeof err) == KIPP_OK && small, "%s", err);
    kipp_sampler *own[NS], *shared[NS];
    for (int k = 0; k < NS; k++) {
        kipp_sampler_params p = kipp_sampler_default_params();
        p.seed = 100 + (uint64_t)k;
        p.top_k = k == 0 ? 0 : 8 * k; /* k 0: the whole vocabulary through top-p */
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.2f;
        own[k] = make(&p, NV);
        shared[k] = make(&p, NV);
        kipp_sampler_share_scratch(shared[k], small); /* too small: not taken */
        kipp_sampler_share_scratch(shared[k], sc);
    }
    int same = 1;
    uint64_t x = 7;
    for (int t = 0; t < STEPS && same; t++)
        for (int k = 0; k < NS; k++) {
            float l[NV], l2[NV];
            for (int i = 0; i < NV; i++) { /* the same pseudo-random logits for both */
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                l[i] = l2[i] = (float)((x >> 40) % 1000) / 250.0f;
            }
            const int32_t a = kipp_sampler_sample(own[k], l), b = kipp_sampler_sample(shared[k], l2);
            kipp_sampler_accept(own[k], a);
            kipp_sampler_accept(shared[k], b);
            if (a != b) same = 0;
        }
    KT_CHECK(same, "a sampler on the shared scratch drew differently from one on its own");
    for (int k = 0; k < NS; k++) {
        kipp_sampler_free(own[k]);
        kipp_sampler_free(shared[k]);
    }
    kipp_sampler_scratch_free(sc);
    kipp_sampler_scratch_free(small);
    kipp_sampler_scratch_free(NULL);
}

/* The fast forms give what the general forms give, draw for draw with one seed: a plain
 * draw over the dense exponentials (no filter: kipp_sampler_sample) against the candidate
 * list (kipp_sampler_dist + kipp_sampler_draw); the SIMD top k (k <= 64) against the
 * histogram's (k > 64) on a row where only 40 logits are finite, so k 40 and k 100 keep
 * the same mass; greedy's SIMD argmax against a scalar one on a Qwen-sized row. */
static void test_fast_forms(void) {
    enum { V = 151936, DRAWS = 300 };
    float *l = malloc(V * sizeof *l), *w = malloc(V * sizeof *w);
    if (!l || !w) { KT_CHECK(0, "out of memory"); free(l), free(w); return; }
    uint64_t x = 12345;
    for (uint32_t i = 0; i < V; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        l[i] = (float)((x >> 40) % 4000) / 400.0f; /* [0, 10): many ties */
    }
    kipp_sampler_params p = plain(1.0f, 77);
    kipp_sampler *a = make(&p, V), *b = make(&p, V);
    int diff = 0;
    for (int d = 0; d < DRAWS && a && b; d++) {
        memcpy(w, l, V * sizeof *l);
        const int32_t ta = kipp_sampler_sample(a, w);
        memcpy(w, l, V * sizeof *l);
        const kipp_token_prob *dist = NULL;
        const uint32_t nd = kipp_sampler_dist(b, w, &dist);
        const int32_t tb = kipp_sampler_draw(b, dist, nd);
        diff += ta != tb;
        kipp_sampler_accept(a, ta), kipp_sampler_accept(b, tb);
    }
    KT_CHECK(diff == 0, "dense draw vs candidate draw: %d of %d differ", diff, DRAWS);
    kipp_sampler_free(a), kipp_sampler_free(b);

    for (uint32_t i = 0; i < V; i++) w[i] = (i % 3797 == 11 && i / 3797 < 40) ? l[i] : -INFINITY;
    memcpy(l, w, V * sizeof *l);
    kipp_sampler_params pk = plain(0.9f, 5);
    pk.top_k = 40;
    a = make(&pk, V);
    pk.top_k = 100;
    b = make(&pk, V);
    diff = 0;
    int finite = 0;
    for (int d = 0; d < DRAWS && a && b; d++) {
        memcpy(w, l, V * sizeof *l);
        const int32_t ta = kipp_sampler_sample(a, w);
        memcpy(w, l, V * sizeof *l);
        const int32_t tb = kipp_sampler_sample(b, w);
        diff += ta != tb;
        finite += ta >= 0 && isfinite(l[ta]);
    }
    KT_CHECK(diff == 0 && finite == DRAWS, "top k 40 (SIMD) vs 100 (histogram): %d of %d differ, %d finite",
             diff, DRAWS, finite);
    kipp_sampler_free(a), kipp_sampler_free(b);

    p = plain(0.0f, 1);
    a = make(&p, V);
    int bad = 0;
    for (int t = 0; t < 20 && a; t++) {
        for (uint32_t i = 0; i < V; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            w[i] = (x >> 60) == 0 ? NAN : (float)((x >> 40) % 50);
        }
        int32_t want = 0;
        float best = -INFINITY;
        for (uint32_t i = 0; i < V; i++)
            if (w[i] > best) best = w[i], want = (int32_t)i;
        bad += kipp_sampler_sample(a, w) != want;
    }
    KT_CHECK(bad == 0, "greedy: %d of 20 rows not the lowest id of the maximum", bad);
    kipp_sampler_free(a);
    free(l), free(w);
}

void kt_suite_sampler(void) {
    test_fast_forms();
    test_shared_scratch();
    test_tiny_temperature();
    test_logit_bias();
    test_defaults();
    test_greedy();
    test_top_k();
    test_top_p();
    test_min_p();
    test_penalties();
    test_determinism();
    test_distribution();
    test_large_vocab();
    test_invalid();
}
