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
// kipp: per weight type

#define MV_WG 64u
#define MV_TOK 8u

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer WBuf { uint wq[]; };
layout(std430, set = 0, binding = 1) readonly buffer XBuf { float xs[]; };
layout(std430, set = 0, binding = 2) readonly buffer RBuf { uint xrows[]; };
layout(std430, set = 0, binding = 3) buffer YBuf { float ys[]; };

layout(push_constant) uniform Push {
    uint w_byte0;   // byte of row 0 in the W view
    uint row_bytes; // bytes of one W row
    uint n_in, n_out;
    uint ldx, x_row0, has_rows; // has_rows: xr(t) = xrows[x_row0 + t], else x_row0 + t
    uint n_tok, ldy, y_row0, y_col0;
    uint groups; // workgroups with rows: ceil(n_out / (MV_WG / tpr))
    uint tpr;    // threads per row: a power of two, 1 .. MV_WG
} p;

#include "quant.glsl"

shared float red[MV_TOK][MV_WG];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint grp = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (grp >= p.groups) return; // a whole workgroup: uniform
    const uint tpr = p.tpr, lane = tid & (tpr - 1u);
    const uint o = grp * (MV_WG / tpr) + tid / tpr; // this thread's row
    const bool row_ok = o < p.n_out;
    const uint t0 = gl_WorkGroupID.z * MV_TOK;
    const uint nt = min(MV_TOK, p.n_tok - t0);

    uint xb[MV_TOK]; // element index of each token's input row
    for (uint t = 0u; t < MV_TOK; t++) {
        const uint r = t < nt ? t0 + t : t0;
        xb[t] = (p.has_rows != 0u ? xrows[p.x_row0 + r] : p.x_row0 + r) * p.ldx;
    }

    float acc[MV_TOK];
    for (uint t = 0u; t < MV_TOK; t++) acc[t] = 0.0;
    const uint n_grp = row_ok ? p.n_in >> 3 : 0u;
    const uint wrow = p.w_byte0 + o * p.row_bytes;
    for (uint k = lane; k < n_grp; k += tpr) {
        float w[8];
        deq8(wrow + (k / WGPB) * WBB, k % WGPB, w);
        for (uint t = 0u; t < MV_TOK; t++) {
            if (t < nt) {
                const uint xa = xb[t] + 8u * k;
                for (uint i = 0u; i < 8u; i++) acc[t] += w[i] * xs[xa + i];
            }
        }
    }

    // the row's tpr partial sums: a tree over lanes (strides tpr / 2 .. 1), in place
    if (tpr > 1u) {
        for (uint t = 0u; t < MV_TOK; t++)
            if (t < nt) red[t][tid] = acc[t];
        for (uint s = tpr >> 1; s > 0u; s >>= 1) {
            barrier();
            if (lane < s) {
                for (uint t = 0u; t < MV_TOK; t++)
                    if (t < nt) red[t][tid] += red[t][tid + s];
            }
        }
        barrier();
        if (row_ok) { // the row's first thread holds the sums; its lanes store them
            for (uint t = lane; t < nt; t += tpr)
                ys[(p.y_row0 + t0 + t) * p.ldy + p.y_col0 + o] = red[t][tid - lane];
        }
    } else if (row_ok) {
        for (uint t = 0u; t < MV_TOK; t++)
            if (t < nt) ys[(p.y_row0 + t0 + t) * p.ldy + p.y_col0 + o] = acc[t];
    }
}
