/* RoPE frequencies in one place: every backend (cpu-ref included) takes its inverse
 * frequencies and the cos/sin magnitude from here, so that none, linear and YaRN scaling
 * mean the same on all of them. Written in double; checked against HF transformers'
 * goldens (the tiny-yarn vectors). */
#ifndef KIPP_MODEL_ROPE_H
#define KIPP_MODEL_ROPE_H

#include "kipp.h"

#include <stdint.h>

/* out[i], i < D/2: the angle per position of rotary pair i (theta = pos * out[i]).
 * none: base^(-2i/D); linear: that / factor; YaRN: HF's _compute_yarn_parameters blend of
 * the two (ramp over the correction range of beta_fast..beta_slow rotations within the
 * original context, floor/ceil-truncated as transformers does by default). */
void kipp_rope_inv_freq(const kipp_model_info *hp, uint32_t D, double *out);

/* What cos and sin are multiplied by: 1 except for YaRN, where it is
 * yarn_attn_factor * (0.1 ln(factor) + 1) (HF's attention_factor; 1 for factor <= 1). */
double kipp_rope_attn_factor(const kipp_model_info *hp);

/* The host rope tables of the cpu, cuda and vulkan backends for n positions (pos NULL: 0..n-1):
 * cs[t*half + i] = cos(pos[t] * inv_freq[i]) * mag and sn likewise with sin, computed in
 * double and rounded once (cpu-ref's rope_angles computes the same values itself). */
void kipp_rope_tables(const double *inv_freq, double mag, uint32_t half, const uint32_t *pos,
                      uint32_t n, float *cs, float *sn);

/* Reads <arch>.rope.scaling.* from the file's keys into hp (defaults when absent) and
 * checks them; a scaling type other than none/linear/yarn is refused by name. */
struct kipp_gguf;
struct kipp_arch;
kipp_status kipp_rope_read(const struct kipp_gguf *g, const struct kipp_arch *a, kipp_model_info *hp, char *err,
                           size_t err_len);

/* Checks hp's rope fields and sets n_ctx_train from n_ctx_file and the scaling. */
kipp_status kipp_rope_finish(kipp_model_info *hp, char *err, size_t err_len);

#endif
