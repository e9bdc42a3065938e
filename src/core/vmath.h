/* vmath.h — vocabulary-row math the engine runs once per generated token on the host: the
 * log-sum-exp of a logits row (for log-probabilities), the indices of its largest entries,
 * and the sampler's temperature scaling and exponentials. A Qwen row has 151,936 entries, so these run in SIMD lanes (GCC vector
 * extensions; AVX-512 and AVX2 variants picked at run time on x86-64) instead of a scalar
 * libm exp() per entry. Every variant gives the same bits for the same input. */
#ifndef KIPP_CORE_VMATH_H
#define KIPP_CORE_VMATH_H

#include <stddef.h>
#include <stdint.h>

/* The largest entry of x[0..n) that is not NaN (-INFINITY when there is none or n is 0). */
float kipp_vec_max(const float *x, size_t n);

/* log(sum_i exp(x[i])) over the non-NaN entries, computed as mx + log(sum exp(x[i] - mx))
 * with mx = kipp_vec_max(x, n); -INFINITY when every entry is -inf or NaN, +INFINITY when
 * one is +inf. Relative error of the sum within a few 1e-7 (kipp_vec_exp's polynomial,
 * block sums in double), so the result is within ~1e-6 of the exact value. */
double kipp_log_sum_exp(const float *x, size_t n);

/* The indices of the k largest non-NaN entries of x[0..n), largest first (ties: the lower
 * index first), written to ids; returns how many (min(k, non-NaN entries)). k <= 64. */
uint32_t kipp_vec_top_k(const float *x, uint32_t n, uint32_t k, int32_t *ids);

/* x[i] = (x[i] - shift) / t in place (the IEEE operations a scalar loop does, so the same
 * bits), NaN entries become -inf; returns the largest result (-inf when n is 0). */
float kipp_vec_scale(float *x, size_t n, float shift, float t);

/* e[i] = exp(x[i] - mx) for x[i] <= mx, 0 for NaN entries (the log-sum-exp's polynomial:
 * relative error below 2e-7, exactly 1 at x[i] == mx, 0 at -inf and below e^-87.3); returns
 * their sum in double with a fixed association (the log-sum-exp's). e may be x, or NULL
 * for the sum alone. */
double kipp_vec_exp(const float *x, float *e, size_t n, float mx);

/* x[i] = (float)((double)x[i] * s) in place. */
void kipp_vec_mul(float *x, size_t n, double s);

/* The variants (for tests): kipp_vmath_level() is the best this CPU runs (2 AVX-512, 1 AVX2,
 * 0 generic vectors); the _at calls run variant lv <= that level. All give the same bits. */
int kipp_vmath_level(void);
double kipp_log_sum_exp_at(int lv, const float *x, size_t n);
uint32_t kipp_vec_top_k_at(int lv, const float *x, uint32_t n, uint32_t k, int32_t *ids);
float kipp_vec_scale_at(int lv, float *x, size_t n, float shift, float t);
double kipp_vec_exp_at(int lv, const float *x, float *e, size_t n, float mx);
void kipp_vec_mul_at(int lv, float *x, size_t n, double s);

#endif
