/* vmath.c — log-sum-exp, maximum, top k, temperature scaling and softmax of a logits row in SIMD lanes (see vmath.h).
 * Written with GCC vector extensions (8 floats), so every compiler target gets vector
 * code. On x86-64 with GCC the row loops (vmath_impl.h) are also compiled for AVX2 and for
 * AVX-512 and picked per call with __builtin_cpu_supports (no ifunc: resolvers run before
 * the sanitizers' runtimes start). Every variant does the same IEEE operations in the same
 * order (no contraction under -std=c11), so all give the same bits. exp(x) is 2^r e^f with
 * r = round(x log2 e) in the exponent bits and f = x - r ln 2 (Cody-Waite, two steps) through
 * a degree-7 Taylor polynomial of e^f (relative error below 2e-7 wherever the result is a
 * normal float); results below 2^-126 (and exp(-inf)) are 0. */
#include "core/vmath.h"

#include <math.h>
#include <string.h>

/* No vector crosses a call: the helpers take pointers or are macros, and the row loops
 * take and return scalars. The ABI notes about 32-byte vectors are moot. */
#pragma GCC diagnostic ignored "-Wpsabi"

#define VL 8
typedef float vf __attribute__((vector_size(VL * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VL * sizeof(int32_t))));
typedef double vd __attribute__((vector_size(VL * sizeof(double))));

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

/* *t = e^*t for lanes <= 0 (NaN lanes are the caller's to mask): 0 below e^-87.3 (2^-126).
 * e^t = 2^r e^f with r = round(t log2 e) and f = t - r ln 2 taken in two steps (Cody-Waite:
 * r times the high part of ln 2 is exact), so f is accurate whatever |t| is. */
static inline __attribute__((always_inline)) void vexp_nonpos(vf *t) {
    vf l2e, magic, lo, hi2, lo2, c[8];
    vsplat(&l2e, 1.44269504088896341f);
    vsplat(&magic, 12582912.0f); /* 1.5 * 2^23 */
    vsplat(&lo, -126.0f);
    vsplat(&hi2, 0.693145751953125f);      /* ln 2 to 16 bits: r * hi2 is exact */
    vsplat(&lo2, 1.428606765330187045e-6f); /* ln 2 - hi2 */
    /* e^f, f in [-0.35, 0.35]: degree-7 Taylor coefficients 1 / k!, highest first (the
     * truncation is below 1e-8; the float rounding of the steps dominates) */
    static const float k[8] = {1.9841269841269841e-4f, 1.3888888888888889e-3f, 8.3333333333333333e-3f, 4.1666666666666667e-2f,
                               1.6666666666666667e-1f, 0.5f, 1.0f, 1.0f};
    for (int j = 0; j < 8; j++) vsplat(&c[j], k[j]);
    vf u = *t * l2e;
    const vi tiny = u < lo;
    u = VSEL(tiny, lo, u);
    const vf r = (u + magic) - magic; /* nearest integer: |u| <= 126 */
    const vf f = (*t - r * hi2) - r * lo2;
    vf p = c[0];
    for (int j = 1; j < 8; j++) p = p * f + c[j];
    const vi scale = (__builtin_convertvector(r, vi) + 127) << 23;
    *t = (vf)((vi)(p * (vf)scale) & ~tiny);
}

/* Whether any lane of a comparison's mask is set. */
static inline __attribute__((always_inline)) int vany(vi m) {
    uint64_t w[VL / 2];
    memcpy(w, &m, sizeof w);
    uint64_t any = 0;
    for (int j = 0; j < VL / 2; j++) any |= w[j];
    return any != 0;
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
    return (double)mx + log(kipp_vec_exp_at(lv, x, NULL, n, mx));
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

float kipp_vec_scale_at(int lv, float *x, size_t n, float shift, float t) {
#ifdef VMATH_X86
    if (lv == 2) return scale_avx512(x, n, shift, t);
    if (lv == 1) return scale_avx2(x, n, shift, t);
#endif
    (void)lv;
    return scale_generic(x, n, shift, t);
}

double kipp_vec_exp_at(int lv, const float *x, float *e, size_t n, float mx) {
#ifdef VMATH_X86
    if (lv == 2) return exp_sum_avx512(x, e, n, mx);
    if (lv == 1) return exp_sum_avx2(x, e, n, mx);
#endif
    (void)lv;
    return exp_sum_generic(x, e, n, mx);
}

void kipp_vec_mul_at(int lv, float *x, size_t n, double s) {
#ifdef VMATH_X86
    if (lv == 2) { mul_d_avx512(x, n, s); return; }
    if (lv == 1) { mul_d_avx2(x, n, s); return; }
#endif
    (void)lv;
    mul_d_generic(x, n, s);
}

float kipp_vec_scale(float *x, size_t n, float shift, float t) {
    return kipp_vec_scale_at(kipp_vmath_level(), x, n, shift, t);
}

double kipp_vec_exp(const float *x, float *e, size_t n, float mx) {
    return kipp_vec_exp_at(kipp_vmath_level(), x, e, n, mx);
}

void kipp_vec_mul(float *x, size_t n, double s) { kipp_vec_mul_at(kipp_vmath_level(), x, n, s); }

float kipp_vec_max(const float *x, size_t n) { return vec_max_at(kipp_vmath_level(), x, n); }

double kipp_log_sum_exp(const float *x, size_t n) { return kipp_log_sum_exp_at(kipp_vmath_level(), x, n); }

uint32_t kipp_vec_top_k(const float *x, uint32_t n, uint32_t k, int32_t *ids) {
    return kipp_vec_top_k_at(kipp_vmath_level(), x, n, k, ids);
}
