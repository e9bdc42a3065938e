#version 450
// rope.comp — kernels.h's kipp_vk_rope: NEOX RoPE in place, one invocation per rotated pair
// (head, i < half) of a token row; tokens folded over the y groups. (a, b) -> (a c - b s,
// a s + b c) with each product and the difference / sum rounded one at a time (precise), as
// cpu-ref's scalar code evaluates them: the results are cpu-ref's bit for bit.
layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 0) buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer CS { float cs[]; };

layout(push_constant) uniform P {
    uint ld, n_tok, n_head, head_dim;
} pc;

void main() {
    const uint half_d = pc.head_dim / 2u, pairs = pc.n_head * half_d;
    const uint stride = gl_NumWorkGroups.x * 128u;
    for (uint t = gl_WorkGroupID.y; t < pc.n_tok; t += gl_NumWorkGroups.y)
        for (uint idx = gl_GlobalInvocationID.x; idx < pairs; idx += stride) {
            const uint h = idx / half_d, i = idx % half_d;
            const uint ia = t * pc.ld + h * pc.head_dim + i, ib = ia + half_d;
            const uint ic = t * half_d + i, is = pc.n_tok * half_d + ic;
            if (ib >= x.length() || is >= cs.length()) continue;
            const float a = x[ia], b = x[ib], c = cs[ic], s = cs[is];
            precise float ac = a * c, bs = b * s, as_ = a * s, bc = b * c;
            precise float ra = ac - bs, rb = as_ + bc;
            x[ia] = ra;
            x[ib] = rb;
        }
}
