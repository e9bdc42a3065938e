/* vmath.c — log-sum-exp, maximum and top-k of a logits row in SIMD lanes (see vmath.h).
 * Written with GCC vector extensions (8 floats), so every compiler target gets vector
 * code; on x86-64 Linux each entry point is also cloned for AVX-512 and AVX2 and picked at
 * load time. exp is 2^(x log2 e): the integer part goes into the exponent bits, the
 * fraction f in [-1/2, 1/2] through a degree-6 Taylor polynomial of 2^f (relative error
 * below 1.3e-7); arguments below -126 (and -inf) give 0. */
#include "core/vmath.h"

#include <math.h>
#include <string.h>

/* every helper taking or returning a vector is always inlined, so no 32-byte vector ever
 * crosses a call between code built for different targets: the ABI note is moot */
#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__x86_64__) && defined(__linux__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define KIPP_VCLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef KIPP_VCLONES
#define KIPP_VCLONES
#endif

#define VL 8
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VL * sizeof(int32_t))));

static inline __attribute__((always_inline)) vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) vf vsplat(float x) {
    vf v;
    for (int i = 0; i < VL; i++) v[i] = x;
    return v;
}

/* mask ? a : b, lane by lane (mask lanes are all ones or all zeros) */
static inline __attribute__((always_inline)) vf vsel(vi mask, vf a, vf b) { return (vf)(((vi)a & mask) | ((vi)b & ~mask)); }

/* The tail of a row, padded: lanes past n read as `fill`. */
static inline __attribute__((always_inline)) vf vtail(const float *p, size_t n, float fill) {
    vf v = vsplat(fill);
    for (size_t i = 0; i < n; i++) v[i] = p[i];
    return v;
}

/* e^t for t <= 0 (NaN lanes are the caller's to mask): 0 below 2^-126. */
static inline __attribute__((always_inline)) vf vexp_nonpos(vf t) {
    const vf l2e = vsplat(1.44269504088896341f), magic = vsplat(12582912.0f); /* 1.5 * 2^23 */
    vf u = t * l2e;
    const vi tiny = u < vsplat(-126.0f);
    u = vsel(tiny, vsplat(-126.0f), u);
    const vf r = (u + magic) - magic; /* nearest integer: |u| <= 126 */
    const vf f = u - r;               /* [-1/2, 1/2] */
    /* 2^f = e^(f ln 2): Taylor coefficients ln2^k / k! */
    vf p = vsplat(1.5403530393381609e-4f);
    p = p * f + vsplat(1.3333558146428443e-3f);
    p = p * f + vsplat(9.6181291076284772e-3f);
    p = p * f + vsplat(5.5504108664821580e-2f);
    p = p * f + vsplat(2.4022650695910071e-1f);
    p = p * f + vsplat(6.9314718055994531e-1f);
    p = p * f + vsplat(1.0f);
    const vi scale = (__builtin_convertvector(r, vi) + 127) << 23;
    return (vf)((vi)(p * (vf)scale) & ~tiny);
}

KIPP_VCLONES float kipp_vec_max(const float *x, size_t n) {
    vf m = vsplat(-INFINITY);
    size_t i = 0;
    for (; i + VL <= n; i += VL) {
        const vf v = vload(x + i);
        m = vsel(v > m, v, m); /* NaN compares false: never taken */
    }
    if (i < n) {
        const vf v = vtail(x + i, n - i, -INFINITY);
        m = vsel(v > m, v, m);
    }
    float best = -INFINITY;
    for (int k = 0; k < VL; k++) best = m[k] > best ? m[k] : best;
    return best;
}

/* sum of exp(x[i] - mx) over [0, n), NaN lanes left out; blocks of 32 vectors summed in
 * float lanes, then in double */
KIPP_VCLONES static double sum_exp(const float *x, size_t n, float mx) {
    const vf vmx = vsplat(mx);
    double total = 0.0;
    size_t i = 0;
    while (i < n) {
        vf acc = vsplat(0.0f);
        const size_t end = n - i > 32 * VL ? i + 32 * VL : n;
        for (; i + VL <= end; i += VL) {
            const vf v = vload(x + i);
            acc += vsel(v == v, vexp_nonpos(v - vmx), vsplat(0.0f));
        }
        if (i < end) {
            const vf v = vtail(x + i, end - i, -INFINITY);
            acc += vsel(v == v, vexp_nonpos(v - vmx), vsplat(0.0f));
            i = end;
        }
        double s = 0.0;
        for (int k = 0; k < VL; k++) s += acc[k];
        total += s;
    }
    return total;
}

double kipp_log_sum_exp(const float *x, size_t n) {
    const float mx = kipp_vec_max(x, n);
    if (!isfinite(mx)) return mx; /* all -inf / NaN (or empty): -inf; one +inf: +inf */
    return (double)mx + log(sum_exp(x, n, mx));
}

/* Inserts index i into the sorted list ids[0..*m) (capacity k), larger first, ties by
 * index (i is larger than every index there). */
static void top_insert(const float *x, int32_t *ids, uint32_t *m, uint32_t k, uint32_t i) {
    if (*m == k && x[i] <= x[ids[k - 1]]) return;
    uint32_t j = *m < k ? (*m)++ : k - 1;
    while (j > 0 && x[ids[j - 1]] < x[i]) {
        ids[j] = ids[j - 1];
        j--;
    }
    ids[j] = (int32_t)i;
}

KIPP_VCLONES uint32_t kipp_vec_top_k(const float *x, uint32_t n, uint32_t k, int32_t *ids) {
    uint32_t m = 0;
    if (k == 0) return 0;
    if (k > 64) k = 64;
    uint32_t i = 0;
    /* a block of 2 vectors is skipped whole while the list is full and nothing in it beats
     * the list's last entry (ties lose to the lower index already there) */
    for (; i + 2 * VL <= n; i += 2 * VL) {
        if (m == k) {
            const vf thr = vsplat(x[ids[k - 1]]);
            const vi gt = (vload(x + i) > thr) | (vload(x + i + VL) > thr);
            int any = 0;
            for (int l = 0; l < VL; l++) any |= gt[l];
            if (!any) continue;
        }
        for (uint32_t j = i; j < i + 2 * VL; j++)
            if (x[j] == x[j]) top_insert(x, ids, &m, k, j);
    }
    for (; i < n; i++)
        if (x[i] == x[i]) top_insert(x, ids, &m, k, i);
    return m;
}
