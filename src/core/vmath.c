/* vmath.c — log-sum-exp, maximum and top k of a logits row in SIMD lanes (see vmath.h).
 * Written with GCC vector extensions (8 floats), so every compiler target gets vector
 * code. On x86-64 with GCC the row loops (vmath_impl.h) are also compiled for AVX2 and for
 * AVX-512 and picked per call with __builtin_cpu_supports (no ifunc: resolvers run before
 * the sanitizers' runtimes start). Every variant does the same IEEE operations in the same
 * order (no contraction under -std=c11), so all give the same bits. exp is 2^(x log2 e):
 * the integer part goes into the exponent bits, the fraction f in [-1/2, 1/2] through a
 * degree-6 Taylor polynomial of 2^f (relative error below 1.3e-7); arguments below -126
 * (and -inf) give 0. */
#include "core/vmath.h"

#include <math.h>
#include <string.h>

/* No vector crosses a call: the helpers take pointers or are macros, and the row loops
 * take and return scalars. The ABI notes about 32-byte vectors are moot. */
#pragma GCC diagnostic ignored "-Wpsabi"

#define VL 8
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VL * sizeof(int32_t))));

/* mask ? a : b, lane by lane (mask lanes are all ones or all zeros) */
#define VSEL(m, a, b) ((vf)(((vi)(a) & (m)) | ((vi)(b) & ~(m))))

static inline __attribute__((always_inline)) void vload(vf *v, const float *p) { memcpy(v, p, sizeof *v); }

static inline __attribute__((always_inline)) void vsplat(vf *v, float x) {
    const vf zero = {0};
    *v = zero + x; /* GCC: the scalar is broadcast; 0 + x is x for every x but -0 */
}

/* The tail of a row, padded: lanes past n read as `fill`. */
static inline __attribute__((always_inline)) void vtail(vf *v, const float *p, size_t n, float fill) {
    vsplat(v, fill);
    for (size_t i = 0; i < n; i++) (*v)[i] = p[i];
}

/* *t = e^*t for lanes <= 0 (NaN lanes are the caller's to mask): 0 below 2^-126. */
static inline __attribute__((always_inline)) void vexp_nonpos(vf *t) {
    vf l2e, magic, lo, c[7];
    vsplat(&l2e, 1.44269504088896341f);
    vsplat(&magic, 12582912.0f); /* 1.5 * 2^23 */
    vsplat(&lo, -126.0f);
    /* 2^f = e^(f ln 2): Taylor coefficients ln2^k / k!, highest first */
    static const float k[7] = {1.5403530393381609e-4f, 1.3333558146428443e-3f, 9.6181291076284772e-3f,
                               5.5504108664821580e-2f, 2.4022650695910071e-1f, 6.9314718055994531e-1f,
                               1.0f};
    for (int j = 0; j < 7; j++) vsplat(&c[j], k[j]);
    vf u = *t * l2e;
    const vi tiny = u < lo;
    u = VSEL(tiny, lo, u);
    const vf r = (u + magic) - magic; /* nearest integer: |u| <= 126 */
    const vf f = u - r;               /* [-1/2, 1/2] */
    vf p = c[0];
    for (int j = 1; j < 7; j++) p = p * f + c[j];
    const vi scale = (__builtin_convertvector(r, vi) + 127) << 23;
    *t = (vf)((vi)(p * (vf)scale) & ~tiny);
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

#define VN3(n, s) n##_##s
#define VN2(n, s) VN3(n, s)
#define VN(n) VN2(n, VMATH_SUF)

#define VMATH_SUF generic
#include "core/vmath_impl.h"
#undef VMATH_SUF

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VMATH_X86 1
#pragma GCC push_options
#pragma GCC target("avx2")
#define VMATH_SUF avx2
#include "core/vmath_impl.h"
#undef VMATH_SUF
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f")
#define VMATH_SUF avx512
#include "core/vmath_impl.h"
#undef VMATH_SUF
#pragma GCC pop_options
#endif

/* The best variant this CPU runs: 2 AVX-512, 1 AVX2, 0 the generic vectors. */
int kipp_vmath_level(void) {
#ifdef VMATH_X86
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2")) return 1;
#endif
    return 0;
}

static float vec_max_at(int lv, const float *x, size_t n) {
#ifdef VMATH_X86
    if (lv == 2) return vec_max_avx512(x, n);
    if (lv == 1) return vec_max_avx2(x, n);
#endif
    (void)lv;
    return vec_max_generic(x, n);
}

double kipp_log_sum_exp_at(int lv, const float *x, size_t n) {
    const float mx = vec_max_at(lv, x, n);
    if (!isfinite(mx)) return mx; /* all -inf / NaN (or empty): -inf; one +inf: +inf */
#ifdef VMATH_X86
    if (lv == 2) return (double)mx + log(sum_exp_avx512(x, n, mx));
    if (lv == 1) return (double)mx + log(sum_exp_avx2(x, n, mx));
#endif
    (void)lv;
    return (double)mx + log(sum_exp_generic(x, n, mx));
}

uint32_t kipp_vec_top_k_at(int lv, const float *x, uint32_t n, uint32_t k, int32_t *ids) {
    if (k == 0) return 0;
    if (k > 64) k = 64;
#ifdef VMATH_X86
    if (lv == 2) return top_k_avx512(x, n, k, ids);
    if (lv == 1) return top_k_avx2(x, n, k, ids);
#endif
    (void)lv;
    return top_k_generic(x, n, k, ids);
}

float kipp_vec_max(const float *x, size_t n) { return vec_max_at(kipp_vmath_level(), x, n); }

double kipp_log_sum_exp(const float *x, size_t n) { return kipp_log_sum_exp_at(kipp_vmath_level(), x, n); }

uint32_t kipp_vec_top_k(const float *x, uint32_t n, uint32_t k, int32_t *ids) {
    return kipp_vec_top_k_at(kipp_vmath_level(), x, n, k, ids);
}
