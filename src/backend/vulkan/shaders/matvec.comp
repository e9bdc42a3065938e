// matvec.comp — the matrix-vector product of kipp_vk_matmul (src/backend/vulkan/kernels.h) for
// up to 8 tokens per pass: y[y_row0 + t][y_col0 + o] = sum_i x[xr(t)][i] * W[o][i], W read in
// place from its GGUF blocks and dequantized in registers (quant.glsl), f32 accumulation.
//
// One workgroup of MV_WG threads computes MV_ROWS output rows for the pass's tokens (the
// group's third id picks the pass: tokens t0 = 8 * pass .. t0 + 7). Thread `tid` takes the
// groups of 8 elements k = tid, tid + MV_WG, ... of each row, decodes each once and multiplies
// it with every token's 8 inputs (one weight read serves up to 8 tokens), keeping one
// accumulator per (row, token); the MV_WG partial sums then meet in a fixed shared-memory tree.
// No subgroup operations: the same order on every device and subgroup size.
//
// Batch independence (exact = 1, the router): a token's sum is the same chain of operations
// (its groups in the same order, the same tree) whatever the other tokens of the pass are, so
// token t's y is bit for bit what a one-token call gives.
//
// Grid: x * y folds the row groups (ceil(n_out / MV_ROWS), at most 65535 per dimension), z the
// passes. Out-of-range rows and tokens are masked; nothing outside the n_tok x n_out block of
// y is written.
#version 450
#extension GL_GOOGLE_include_directive : require
// kipp: per weight type

#define MV_WG 64u
#define MV_ROWS 2u
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
    uint groups; // ceil(n_out / MV_ROWS)
} p;

#include "quant.glsl"

shared float red[MV_ROWS * MV_TOK][MV_WG];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint grp = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    if (grp >= p.groups) return; // a whole workgroup: uniform
    const uint o0 = grp * MV_ROWS;
    const uint t0 = gl_WorkGroupID.z * MV_TOK;
    const uint nt = min(MV_TOK, p.n_tok - t0);

    uint xb[MV_TOK]; // element index of each token's input row
    for (uint t = 0u; t < MV_TOK; t++) {
        const uint r = t < nt ? t0 + t : 0u;
        xb[t] = (p.has_rows != 0u ? xrows[p.x_row0 + r] : p.x_row0 + r) * p.ldx;
    }

    float acc[MV_ROWS][MV_TOK];
    for (uint r = 0u; r < MV_ROWS; r++)
        for (uint t = 0u; t < MV_TOK; t++) acc[r][t] = 0.0;

    const uint n_grp = p.n_in >> 3;
    const uint nr = min(MV_ROWS, p.n_out - o0);
    for (uint k = tid; k < n_grp; k += MV_WG) {
        const uint boff = (k / WGPB) * WBB, g = k % WGPB;
        float w[MV_ROWS][8];
        for (uint r = 0u; r < MV_ROWS; r++) {
            if (r < nr) {
                deq8(p.w_byte0 + (o0 + r) * p.row_bytes + boff, g, w[r]);
            } else {
                for (uint i = 0u; i < 8u; i++) w[r][i] = 0.0;
            }
        }
        for (uint t = 0u; t < MV_TOK; t++) {
            if (t < nt) {
                const uint xa = xb[t] + 8u * k;
                for (uint i = 0u; i < 8u; i++) {
                    const float xv = xs[xa + i];
                    for (uint r = 0u; r < MV_ROWS; r++) acc[r][t] += w[r][i] * xv;
                }
            }
        }
    }

    for (uint r = 0u; r < MV_ROWS; r++)
        for (uint t = 0u; t < MV_TOK; t++) red[r * MV_TOK + t][tid] = acc[r][t];
    barrier();
    for (uint s = MV_WG / 2u; s > 0u; s >>= 1) {
        if (tid < s) {
            for (uint j = 0u; j < MV_ROWS * MV_TOK; j++) red[j][tid] += red[j][tid + s];
        }
        barrier();
    }
    if (tid < MV_ROWS * MV_TOK) {
        const uint r = tid / MV_TOK, t = tid % MV_TOK;
        if (r < nr && t < nt)
            ys[(p.y_row0 + t0 + t) * p.ldy + p.y_col0 + o0 + r] = red[tid][0];
    }
}
