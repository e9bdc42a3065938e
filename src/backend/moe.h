/* moe.h — how a mixture-of-experts layer (arch.h: KIPP_OP_FFN_MOE) chooses its experts for one
 * token. The definition every backend follows, written once: cpu-ref's and cpu's forward passes
 * call it on their router logits, cuda's host side too. */
#ifndef KIPP_BACKEND_MOE_H
#define KIPP_BACKEND_MOE_H

#include <stdint.h>

/* p = softmax(logits) over n experts, in place, in f32 (max subtracted, exp, sum, divide, as
 * transformers' Qwen3MoeSparseMoeBlock); the k largest p into chosen[0..k) in descending order,
 * exact ties going to the lower expert index (torch.topk's order on the CPU); w[i] = p of
 * chosen[i], divided by their sum when norm is set (the config's norm_topk_prob). */
void kipp_moe_route(float *logits, uint32_t n, uint32_t k, int norm, uint32_t *chosen, float *w);

#endif
