#version 450
// add_bias.comp — kernels.h's kipp_vk_add_bias: x[t][i] += b[i] (qwen2's q, k, v biases), one
// IEEE add per element. Elements over x (folded), tokens over y (folded).
layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 0) buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };

layout(push_constant) uniform P {
    uint ld, n, n_tok;
} pc;

void main() {
    const uint stride = gl_NumWorkGroups.x * 128u;
    for (uint t = gl_WorkGroupID.y; t < pc.n_tok; t += gl_NumWorkGroups.y)
        for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
            const uint e = t * pc.ld + i;
            if (e >= x.length() || i >= b.length()) continue;
            x[e] = x[e] + b[i];
        }
}
