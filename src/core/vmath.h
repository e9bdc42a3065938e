/* vmath.h — vocabulary-row math the engine runs once per generated token on the host: the
 * log-sum-exp of a logits row (for log-probabilities) and the indices of its largest
 * entries. A Qwen row has 151,936 entries, so these run in SIMD lanes (GCC vector
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
 * one is +inf. Relative error of the sum within a few 1e-7 (a degree-6 polynomial for
 * 2^f, block sums in double), so the result is within ~1e-6 of the exact value. */
double kipp_log_sum_exp(const float *x, size_t n);

/* The indices of the k largest non-NaN entries of x[0..n), largest first (ties: the lower
 * index first), written to ids; returns how many (min(k, non-NaN entries)). k <= 64. */
uint32_t kipp_vec_top_k(const float *x, uint32_t n, uint32_t k, int32_t *ids);

/* The variants (for tests): kipp_vmath_level() is the best this CPU runs (2 AVX-512, 1 AVX2,
 * 0 generic vectors); the _at calls run variant lv <= that level. All give the same bits. */
int kipp_vmath_level(void);
double kipp_log_sum_exp_at(int lv, const float *x, size_t n);
uint32_t kipp_vec_top_k_at(int lv, const float *x, uint32_t n, uint32_t k, int32_t *ids);

#endif
