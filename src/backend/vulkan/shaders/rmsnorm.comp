#version 450
// rmsnorm.comp — kernels.h's kipp_vk_rmsnorm: out[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * w.
// One workgroup per row (rows folded over the groups). The sum of squares is f32: each
// invocation sums its strided elements, then a tree in shared memory (cpu-ref sums in double:
// ops_misc.c derives the difference's bound). The products are (x * scale) * w, each rounded
// (precise: no fused multiply-add), in cpu-ref's order. out may be x: an invocation reads
// only the elements it writes after the barrier that ends the sum.
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { float w[]; };
layout(std430, set = 0, binding = 2) writeonly buffer O { float o[]; };

layout(push_constant) uniform P {
    uint ld_x, ld_out, n, n_rows;
    float eps;
} pc;

shared float red[64];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.n_rows; r += gl_NumWorkGroups.x) {
        const uint xr = r * pc.ld_x, orow = r * pc.ld_out;
        float ss = 0.0;
        for (uint i = tid; i < pc.n; i += 64u) {
            const float v = xr + i < x.length() ? x[xr + i] : 0.0;
            ss += v * v;
        }
        red[tid] = ss;
        barrier();
        for (uint s = 32u; s > 0u; s >>= 1) {
            if (tid < s) red[tid] += red[tid + s];
            barrier();
        }
        const float scale = 1.0 / sqrt(red[0] / float(pc.n) + pc.eps);
        for (uint i = tid; i < pc.n; i += 64u) {
            if (xr + i >= x.length() || i >= w.length() || orow + i >= o.length()) continue;
            precise float y = x[xr + i] * scale;
            precise float z = y * w[i];
            o[orow + i] = z;
        }
        barrier(); // red is reused by the next row
    }
}
