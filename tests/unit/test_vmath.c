/* test_vmath.c — unit suite for src/core/vmath.c (the log-probabilities' row math): the
 * log-sum-exp against a double-precision reference on rows of every length 0..300, the
 * 151,936-entry Qwen row, wide and narrow value ranges, -inf entries, NaN entries (left out),
 * a +inf entry, all -inf; the maximum; the top k against a brute-force selection that breaks
 * ties by the lower index, on rows with many ties and NaNs; the sampler's temperature scaling
 * (the scalar loop's bits), exponentials (against double exp, exactly 1 at the maximum) and
 * scaling in double; every variant against the best. */
#include "core/vmath.h"
#include "kt.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* xorshift64*: [0, 1) */
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (double)((rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static double ref_lse(const float *x, size_t n) {
    double mx = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i]) && x[i] > mx) mx = x[i];
    if (!isfinite(mx)) return mx;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i])) s += exp((double)x[i] - mx);
    return mx + log(s);
}

static void fill(float *x, size_t n, double lo, double hi, int specials) {
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(lo + (hi - lo) * urand());
        if (specials && urand() < 0.05) x[i] = urand() < 0.5 ? -INFINITY : NAN;
    }
}

static void test_lse(void) {
    enum { N = 151936 };
    float *x = malloc(N * sizeof *x);
    if (!x) { KT_CHECK(0, "out of memory"); return; }
    const double ranges[][2] = {{-1, 1}, {-20, 20}, {-200, 50}, {1e3, 1e3 + 5}, {-1e4, -1e4 + 30}};
    double worst = 0;
    int bad = 0;
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++)
        for (size_t n = 0; n <= 300; n++) {
            fill(x, n, ranges[r][0], ranges[r][1], (int)(n % 3 == 0));
            const double want = ref_lse(x, n), got = kipp_log_sum_exp(x, n);
            if (!isfinite(want)) { bad += !(got == want); continue; }
            const double e = fabs(got - want) / fmax(1.0, fabs(want));
            worst = fmax(worst, e);
        }
    KT_CHECK(bad == 0, "%d rows of no finite entry gave something else than the reference's infinity", bad);
    KT_CHECK(worst < 2e-6, "short rows: worst relative error %.3g", worst);
    for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
        fill(x, N, ranges[r][0], ranges[r][1], (int)r & 1);
        const double want = ref_lse(x, N), got = kipp_log_sum_exp(x, N);
        KT_CHECK(fabs(got - want) <= 2e-6 * fmax(1.0, fabs(want)), "Qwen row, range %zu: %.9f vs %.9f", r,
                 got, want);
    }
    /* two entries {0, t}: log(1 + e^t) exposes each exp value (no averaging over a row) */
    double worst2 = 0;
    for (int i = 0; i <= 4000; i++) {
        const float y[2] = {0.0f, (float)(-i * 0.005)};
        worst2 = fmax(worst2, fabs(kipp_log_sum_exp(y, 2) - log1p(exp((double)y[1]))));
    }
    KT_CHECK(worst2 < 2e-7, "log(1 + e^t), t in [-20, 0]: worst error %.3g", worst2);
    /* one dominant entry: the sum is 1 plus tiny terms */
    fill(x, N, -120, -100, 0);
    x[777] = 10;
    KT_CHECK(fabs(kipp_log_sum_exp(x, N) - ref_lse(x, N)) < 1e-6, "one dominant entry");
    /* specials */
    for (size_t i = 0; i < 40; i++) x[i] = -INFINITY;
    KT_CHECK(kipp_log_sum_exp(x, 40) == -INFINITY, "all -inf: -inf");
    x[3] = NAN;
    KT_CHECK(kipp_log_sum_exp(x, 40) == -INFINITY && kipp_vec_max(x, 40) == -INFINITY, "-inf and NaN only");
    x[17] = 2.5f;
    KT_CHECK(fabs(kipp_log_sum_exp(x, 40) - 2.5) < 1e-7, "one finite entry among -inf and NaN: %.9f",
             kipp_log_sum_exp(x, 40));
    x[30] = INFINITY;
    KT_CHECK(kipp_log_sum_exp(x, 40) == INFINITY && kipp_vec_max(x, 40) == INFINITY, "+inf entry: +inf");
    KT_CHECK(kipp_log_sum_exp(x, 0) == -INFINITY && kipp_vec_max(x, 0) == -INFINITY, "empty row");
    /* the maximum ignores NaN at every position of a vector and its tail */
    int ok = 1;
    for (size_t n = 1; n <= 40 && ok; n++)
        for (size_t p = 0; p < n; p++) {
            fill(x, n, -5, 5, 0);
            float mx = -INFINITY;
            for (size_t i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
            x[p] = NAN;
            float m2 = -INFINITY;
            for (size_t i = 0; i < n; i++) m2 = x[i] > m2 ? x[i] : m2;
            if (kipp_vec_max(x, n) != m2) ok = 0;
            (void)mx;
        }
    KT_CHECK(ok, "kipp_vec_max with a NaN at each position");
    free(x);
}

/* brute force: k times the largest entry not taken yet, the lower index on ties */
static uint32_t ref_top(const float *x, uint32_t n, uint32_t k, int32_t *ids) {
    uint32_t m = 0;
    while (m < k) {
        int32_t best = -1;
        for (uint32_t i = 0; i < n; i++) {
            if (isnan(x[i])) continue;
            int taken = 0;
            for (uint32_t j = 0; j < m; j++) taken |= ids[j] == (int32_t)i;
            if (!taken && (best < 0 || x[i] > x[best])) best = (int32_t)i;
        }
        if (best < 0) break;
        ids[m++] = best;
    }
    return m;
}

static void test_top(void) {
    float x[2000];
    int32_t a[64], b[64];
    int bad = 0, cases = 0;
    for (int t = 0; t < 400; t++) { /* k up to 64, rows of many 64-entry blocks */
        const uint32_t n = (uint32_t)(urand() * (t < 300 ? 700 : 2000));
        const uint32_t k = 1 + (uint32_t)(urand() * (t % 3 ? 25 : 64));
        const int ties = t % 2; /* few distinct values: many ties across and inside blocks */
        for (uint32_t i = 0; i < n; i++) {
            x[i] = ties ? (float)(int)(urand() * 6) : (float)(urand() * 100 - 50);
            if (t % 5 == 0 && urand() < 0.1) x[i] = NAN;
            if (t % 7 == 0 && urand() < 0.1) x[i] = -INFINITY;
        }
        const uint32_t mg = kipp_vec_top_k(x, n, k, a), mr = ref_top(x, n, k, b);
        int same = mg == mr;
        for (uint32_t j = 0; same && j < mr; j++) same = a[j] == b[j];
        bad += !same;
        cases++;
    }
    KT_CHECK(bad == 0, "top k differs from brute force in %d of %d rows", bad, cases);
    for (uint32_t i = 0; i < 100; i++) x[i] = 1.0f;
    KT_CHECK(kipp_vec_top_k(x, 100, 0, a) == 0, "k 0");
    KT_CHECK(kipp_vec_top_k(x, 100, 3, a) == 3 && a[0] == 0 && a[1] == 1 && a[2] == 2, "all equal: lowest ids");
    x[99] = 2.0f;
    KT_CHECK(kipp_vec_top_k(x, 100, 2, a) == 2 && a[0] == 99 && a[1] == 0, "the last entry largest");
}

/* the sampler's row passes: scaling by the temperature, exponentials, scaling in double */
static void test_softmax_rows(void) {
    enum { N = 151936 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *e = malloc(N * sizeof *e);
    if (!x || !y || !e) { KT_CHECK(0, "out of memory"); free(x), free(y), free(e); return; }
    const float ts[] = {1.0f, 0.7f, 1.3f, 1e-30f}, shifts[] = {0.0f, 3.25f};
    int bad_bits = 0, bad_max = 0;
    for (int t = 0; t < 120; t++) {
        const size_t n = t < 100 ? (size_t)(urand() * 300) : N;
        fill(x, n, -30, 30, t & 1);
        if (t % 9 == 0 && n > 2) x[n / 2] = INFINITY;
        const float tt = ts[t % 4], sh = shifts[(t / 4) % 2];
        memcpy(y, x, n * sizeof *x);
        const float got = kipp_vec_scale(y, n, sh, tt);
        float want = -INFINITY;
        for (size_t i = 0; i < n; i++) {
            const float r = isnan(x[i]) ? -INFINITY : (x[i] - sh) / tt;
            bad_bits += memcmp(&r, &y[i], sizeof r) != 0;
            want = r > want ? r : want;
        }
        bad_max += memcmp(&got, &want, sizeof got) != 0;
    }
    KT_CHECK(bad_bits == 0, "kipp_vec_scale: %d entries differ from (x - shift) / t", bad_bits);
    KT_CHECK(bad_max == 0, "kipp_vec_scale: %d rows returned another maximum", bad_max);

    /* exponentials: relative error against exp in double, the maximum exactly 1, -inf 0 */
    double worst = 0, worst_sum = 0;
    int bad_one = 0, bad_zero = 0;
    for (int t = 0; t < 60; t++) {
        const size_t n = t < 50 ? 1 + (size_t)(urand() * 300) : N;
        fill(x, n, t % 2 ? -80 : -10, 5, 0);
        if (t % 3 == 0) x[(size_t)(urand() * n)] = -INFINITY;
        const float mx = kipp_vec_max(x, n);
        const double sum = kipp_vec_exp(x, e, n, mx);
        double ref = 0;
        for (size_t i = 0; i < n; i++) {
            const double r = exp((double)x[i] - (double)mx), d = (double)(x[i] - mx);
            ref += r;
            if (x[i] == mx) bad_one += e[i] != 1.0f;
            else if (x[i] == -INFINITY) bad_zero += e[i] != 0.0f;
            else if (d > -86) worst = fmax(worst, fabs(e[i] - exp(d)) / exp(d)); /* normal results */
        }
        worst_sum = fmax(worst_sum, fabs(sum - ref) / ref);
    }
    KT_CHECK(worst < 2e-7, "kipp_vec_exp: worst relative error %.3g", worst);
    KT_CHECK(worst_sum < 1e-6, "kipp_vec_exp: the sum's worst relative error %.3g", worst_sum);
    KT_CHECK(bad_one == 0 && bad_zero == 0, "kipp_vec_exp: %d maxima not 1, %d -inf entries not 0",
             bad_one, bad_zero);
    /* in place, e == x */
    fill(x, 1000, -5, 5, 0);
    memcpy(y, x, 1000 * sizeof *x);
    const float m5 = kipp_vec_max(x, 1000);
    const double s1 = kipp_vec_exp(x, e, 1000, m5), s2 = kipp_vec_exp(y, y, 1000, m5);
    KT_CHECK(s1 == s2 && memcmp(e, y, 1000 * sizeof *e) == 0, "kipp_vec_exp in place differs");

    int bad_mul = 0;
    for (size_t n = 0; n <= 300; n += 7) {
        fill(x, n, 0, 1, 0);
        memcpy(y, x, n * sizeof *x);
        const double sc = 1.0 / (1.0 + urand() * 1000);
        kipp_vec_mul(y, n, sc);
        for (size_t i = 0; i < n; i++) {
            const float r = (float)(x[i] * sc);
            bad_mul += memcmp(&r, &y[i], sizeof r) != 0;
        }
    }
    KT_CHECK(bad_mul == 0, "kipp_vec_mul: %d entries differ from (float)(x * s)", bad_mul);
    free(x), free(y), free(e);
}

/* every variant this CPU runs gives the bits the best one gives */
static void test_variants(void) {
    enum { N = 151936 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *z = malloc(N * sizeof *z);
    int32_t a[20], b[20];
    if (!x || !y || !z) { KT_CHECK(0, "out of memory"); free(x), free(y), free(z); return; }
    const int best = kipp_vmath_level();
    int diff = 0, rows = 0;
    for (int t = 0; t < 60; t++) {
        const size_t n = t < 50 ? (size_t)t * 7 + (size_t)(urand() * 7) : N;
        fill(x, n, -30, 10, t & 1);
        const double want = kipp_log_sum_exp_at(best, x, n);
        const uint32_t mw = kipp_vec_top_k_at(best, x, (uint32_t)n, 20, a);
        for (int lv = 0; lv < best; lv++) {
            const double got = kipp_log_sum_exp_at(lv, x, n);
            const uint32_t mg = kipp_vec_top_k_at(lv, x, (uint32_t)n, 20, b);
            int same = memcmp(&got, &want, sizeof got) == 0 && mg == mw;
            for (uint32_t j = 0; same && j < mw; j++) same = a[j] == b[j];
            /* the sampler's passes: scale, exponentials, scale in double */
            memcpy(y, x, n * sizeof *x);
            memcpy(z, x, n * sizeof *x);
            const float m1 = kipp_vec_scale_at(best, y, n, 0.5f, 0.7f), m2 = kipp_vec_scale_at(lv, z, n, 0.5f, 0.7f);
            same = same && memcmp(&m1, &m2, sizeof m1) == 0 && memcmp(y, z, n * sizeof *y) == 0;
            if (same && n && isfinite(m1)) {
                const double s1 = kipp_vec_exp_at(best, y, y, n, m1), s2 = kipp_vec_exp_at(lv, z, z, n, m1);
                kipp_vec_mul_at(best, y, n, 1.0 / 3.0);
                kipp_vec_mul_at(lv, z, n, 1.0 / 3.0);
                same = memcmp(&s1, &s2, sizeof s1) == 0 && memcmp(y, z, n * sizeof *y) == 0;
            }
            diff += !same;
            rows++;
        }
    }
    KT_CHECK(diff == 0, "%d of %d rows differ between variants (best level %d)", diff, rows, best);
    free(x), free(y), free(z);
}

void kt_suite_vmath(void) {
    test_lse();
    test_top();
    test_softmax_rows();
    test_variants();
}
