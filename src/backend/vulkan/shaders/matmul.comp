// matmul.comp — the tiled matrix product of kipp_vk_matmul (src/backend/vulkan/kernels.h) for
// more than 8 tokens: y[y_row0 + t][y_col0 + o] = sum_i x[xr(t)][i] * W[o][i].
//
// A workgroup of 64 threads computes a tile of BO = 64 outputs x BT = 32 tokens. Each step
// over BK = 32 inputs dequantizes the W tile (64 rows x 4 groups of 8, four groups per thread,
// neighbouring threads on neighbouring groups of a row; quant.glsl, bit-exact values) and
// loads the X tile into shared memory, then every thread multiplies them into its 4 x 8
// outputs (o = to + 16 i, t = tt + 4 j): 12 shared loads per 32 multiply-adds. BK = 32
// divides every block size (8, 32, 256), so a step never splits a group of 8; a row length
// that is not a multiple of 32 (the float types) ends in a partial step whose missing inputs
// are zeros. 64 threads (not 256) with more outputs each: lavapipe switches between a
// workgroup's invocations at every barrier, and this layout ran its products 3 times faster.
//
// Numerics: each step's 32 products are summed in f32 into a fresh partial, which is then
// added to the output's accumulator: a chain of 32 + ceil(n_in / 32) roundings per output
// (the operator test's bound), shorter than one chain over n_in.
//
// Grid: x * z folds the row tiles (ceil(n_out / 64)), y the token tiles. Out-of-range rows
// and tokens are masked; nothing outside the n_tok x n_out block of y is written.
#version 450
#extension GL_GOOGLE_include_directive : require
// kipp: per weight type

#define BO 64u
#define BT 32u
#define BK 32u

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
    uint groups; // ceil(n_out / BO): the row tiles
} p;

#include "quant.glsl"

shared float ws[BK][BO + 1u];
shared float xt[BK][BT + 1u];
shared uint xbase[BT];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    const uint tile = gl_WorkGroupID.x + gl_WorkGroupID.z * gl_NumWorkGroups.x;
    if (tile >= p.groups) return; // a whole workgroup: uniform
    const uint o0 = tile * BO, t0 = gl_WorkGroupID.y * BT;
    const uint to = tid % 16u, tt = tid / 16u; // outputs to + 16 i, tokens tt + 4 j

    if (tid < BT) {
        const uint t = t0 + tid;
        uint r = 0u;
        if (t < p.n_tok) r = p.has_rows != 0u ? xrows[p.x_row0 + t] : p.x_row0 + t;
        xbase[tid] = r * p.ldx;
    }

    float acc[4][8], part[4][8];
    for (uint i = 0u; i < 4u; i++)
        for (uint j = 0u; j < 8u; j++) acc[i][j] = 0.0;

    for (uint k0 = 0u; k0 < p.n_in; k0 += BK) {
        barrier(); // the previous step's reads are done (and xbase is written)
        // the W tile: 64 rows x 4 groups of 8, four per thread (row wr, group wg: neighbouring
        // threads read neighbouring groups of a row)
        for (uint q = 0u; q < 4u; q++) {
            const uint wr = (tid + 64u * q) / 4u, wg = tid % 4u;
            const uint k = (k0 >> 3) + wg; // group index along the row
            float w[8];
            if (o0 + wr < p.n_out && 8u * k < p.n_in) {
                deq8(p.w_byte0 + (o0 + wr) * p.row_bytes + (k / WGPB) * WBB, k % WGPB, w);
            } else {
                for (uint i = 0u; i < 8u; i++) w[i] = 0.0;
            }
            for (uint i = 0u; i < 8u; i++) ws[8u * wg + i][wr] = w[i];
        }
        for (uint e = tid; e < BK * BT; e += 64u) {
            const uint kk = e % BK, tk = e / BK;
            float v = 0.0;
            if (t0 + tk < p.n_tok && k0 + kk < p.n_in) v = xs[xbase[tk] + k0 + kk];
            xt[kk][tk] = v;
        }
        barrier();
        for (uint i = 0u; i < 4u; i++)
            for (uint j = 0u; j < 8u; j++) part[i][j] = 0.0;
        for (uint kk = 0u; kk < BK; kk++) {
            float wv[4], xv[8];
            for (uint i = 0u; i < 4u; i++) wv[i] = ws[kk][to + 16u * i];
            for (uint j = 0u; j < 8u; j++) xv[j] = xt[kk][tt + 4u * j];
            for (uint i = 0u; i < 4u; i++)
                for (uint j = 0u; j < 8u; j++) part[i][j] += wv[i] * xv[j];
        }
        for (uint i = 0u; i < 4u; i++)
            for (uint j = 0u; j < 8u; j++) acc[i][j] += part[i][j];
    }

    for (uint j = 0u; j < 8u; j++) {
        const uint t = t0 + tt + 4u * j;
        if (t >= p.n_tok) continue;
        for (uint i = 0u; i < 4u; i++) {
            const uint o = o0 + to + 16u * i;
            if (o < p.n_out) ys[(p.y_row0 + t) * p.ldy + p.y_col0 + o] = acc[i][j];
        }
    }
}
