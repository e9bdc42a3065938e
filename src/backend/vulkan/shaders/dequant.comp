// dequant.comp — kipp_vk_dequantize (src/backend/vulkan/kernels.h): y[r][i] = element i of W's
// row r, bit-exact with kipp_dequantize_row (quant.glsl's decoders). One invocation decodes one
// group of 8 elements; the results are stored as their bit patterns (y is bound as words), so
// an F32 row's subnormals and NaN payloads are copied as they are.
//
// Grid: x * y folds ceil(n_rows * n_in / 8 / 64) workgroups of 64; invocations past the last
// group are masked.
#version 450
#extension GL_GOOGLE_include_directive : require
// kipp: per weight type

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer WBuf { uint wq[]; };
layout(std430, set = 0, binding = 1) writeonly buffer YBuf { uint ys[]; };

layout(push_constant) uniform Push {
    uint w_byte0;   // byte of row 0 in the W view
    uint row_bytes; // bytes of one W row
    uint n_in, n_rows;
} p;

#include "quant.glsl"

void main() {
    const uint n_grp = p.n_in >> 3;
    const uint gid = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
    if (gid >= n_grp * p.n_rows) return;
    const uint r = gid / n_grp, k = gid % n_grp;
    float o[8];
    deq8(p.w_byte0 + r * p.row_bytes + (k / WGPB) * WBB, k % WGPB, o);
    const uint y0 = r * p.n_in + 8u * k;
    for (uint i = 0u; i < 8u; i++) ys[y0 + i] = floatBitsToUint(o[i]);
}
