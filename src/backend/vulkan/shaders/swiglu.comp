#version 450
// swiglu.comp — kernels.h's kipp_vk_swiglu: out = silu(gate) * up, silu(z) = z / (1 + exp(-z))
// as cpu-ref writes it. Elements over x (folded), tokens over y (folded). out may be gate:
// each invocation reads then writes its own element.
layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 0) readonly buffer G { float g[]; };
layout(std430, set = 0, binding = 1) readonly buffer U { float u[]; };
layout(std430, set = 0, binding = 2) writeonly buffer O { float o[]; };

layout(push_constant) uniform P {
    uint ld, n, n_tok;
} pc;

void main() {
    const uint stride = gl_NumWorkGroups.x * 128u;
    for (uint t = gl_WorkGroupID.y; t < pc.n_tok; t += gl_NumWorkGroups.y)
        for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride) {
            const uint e = t * pc.ld + i;
            if (e >= g.length() || e >= u.length() || e >= o.length()) continue;
            const float z = g[e];
            precise float s = z / (1.0 + exp(-z));
            precise float r = s * u[e];
            o[e] = r;
        }
}
