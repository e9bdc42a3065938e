// matvec.comp — the matrix-vector product of kipp_vk_matmul (src/backend/vulkan/kernels.h) for
// up to 8 tokens per pass: y[y_row0 + t][y_col0 + o] = sum_i x[xr(t)][i] * W[o][i], W read in
// place from its GGUF blocks and dequantized in registers (quant.glsl), f32 accumulation.
//
// A workgroup of 64 threads computes 64 / tpr output rows (tpr, threads per row, a power of
// two chosen per device by mm.c: 32 on GPUs, 1 on lavapipe) for the pass's tokens (the third
// group id picks the pass: tokens 8 * pass .. + 7). The tpr threads of a row take its groups
// of 8 elements k = lane, lane + tpr, ..., decode each once and multiply it with every token's
// 8 inputs (one weight read serves up to 8 tokens: neighbouring threads read neighbouring
// groups), one accumulator per token; the tpr partial sums then meet in a fixed shared-memory
// tree (strides tpr / 2 .. 1). tpr = 1 needs no tree and no barrier (each barrier costs
// lavapipe a switch between the workgroup's invocations). No subgroup operations: the same
// order on every device and subgroup size for a given tpr.
//
// Batch independence (exact = 1, the router): a token's sum is the same chain of operations
// (its groups in the same order, the same tree) whatever the other tokens of the pass are, so
// token t's y is bit for bit what a one-token call gives.
//
// Grid: x * y folds the row groups (ceil(n_out / (64 / tpr)), at most 65535 per dimension),
// z the passes. Out-of-range rows and tokens are masked; nothing outside the n_tok x n_out
// block of y is written.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
// kipp: per weight type
#include "matvec_body.glsl"
