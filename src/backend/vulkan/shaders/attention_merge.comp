#version 450
// attention_merge.comp — kernels.h's kipp_vk_attention, the merge of attention.comp's splits:
// one workgroup per (query head, token) (tokens folded over the y groups). With M the largest
// m of the splits that saw a position (l > 0): out[d] = sum_s acc_s[d] e^(m_s - M) /
// sum_s l_s e^(m_s - M), both sums in split order; an empty split (l = 0) weighs nothing.
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer SC { float scratch[]; };
layout(std430, set = 0, binding = 1) writeonly buffer OU { float o[]; };

layout(push_constant) uniform P {
    uint n_split, n_tok, n_head, head_dim, ld_out;
} pc;

void main() {
    const uint h = gl_WorkGroupID.x, D = pc.head_dim;
    const uint stride = pc.n_tok * pc.n_head, ml_base = pc.n_split * stride * D;
    if (ml_base + pc.n_split * stride * 2u > scratch.length()) return;
    for (uint t = gl_WorkGroupID.y; t < pc.n_tok; t += gl_NumWorkGroups.y) {
        const uint row0 = t * pc.n_head + h;
        float mx = 0.0, l = 0.0;
        bool any = false;
        for (uint s = 0u; s < pc.n_split; s++) {
            const uint r = row0 + s * stride;
            if (scratch[ml_base + r * 2u + 1u] > 0.0) {
                const float ms = scratch[ml_base + r * 2u];
                mx = any ? max(mx, ms) : ms;
                any = true;
            }
        }
        for (uint s = 0u; s < pc.n_split; s++) {
            const uint r = row0 + s * stride;
            const float ls = scratch[ml_base + r * 2u + 1u];
            if (ls > 0.0) l += ls * exp(scratch[ml_base + r * 2u] - mx);
        }
        for (uint d = gl_LocalInvocationID.x; d < D; d += 64u) {
            float acc = 0.0;
            for (uint s = 0u; s < pc.n_split; s++) {
                const uint r = row0 + s * stride;
                if (scratch[ml_base + r * 2u + 1u] > 0.0)
                    acc += scratch[r * D + d] * exp(scratch[ml_base + r * 2u] - mx);
            }
            const uint oi = t * pc.ld_out + h * D + d;
            if (oi < o.length()) o[oi] = acc / l;
        }
    }
}
