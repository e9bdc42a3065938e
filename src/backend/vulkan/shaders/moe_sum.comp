#version 450
// moe_sum.comp — kernels.h's kipp_vk_moe_sum: out[t][i] = sum over slots s < k, in order from
// 0, of weight[t k + s] * ye[slot_at[t k + s]][i], each product and each sum rounded one at a
// time (precise: no fused multiply-add) from 0, as cpu-ref's moe_sum adds them: bit for bit.
// Elements over x (folded), tokens over y (folded).
layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 0) writeonly buffer O { float o[]; };
layout(std430, set = 0, binding = 1) readonly buffer Y { float ye[]; };
layout(std430, set = 0, binding = 2) readonly buffer W { float wt[]; };
layout(std430, set = 0, binding = 3) readonly buffer S { uint slot_at[]; };

layout(push_constant) uniform P {
    uint ldo, ldy, n, n_tok, k;
} pc;

void main() {
    const uint stride = gl_NumWorkGroups.x * 128u;
    for (uint t = gl_WorkGroupID.y; t < pc.n_tok; t += gl_NumWorkGroups.y)
        for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
            precise float acc = 0.0;
            for (uint s = 0u; s < pc.k; s++) {
                const uint p = t * pc.k + s;
                if (p >= slot_at.length() || p >= wt.length()) break;
                const uint e = slot_at[p] * pc.ldy + i;
                const float y = e < ye.length() ? ye[e] : 0.0;
                precise float prod = wt[p] * y;
                acc = acc + prod;
            }
            if (t * pc.ldo + i < o.length()) o[t * pc.ldo + i] = acc;
        }
}
