#version 450
// selftest.comp — the runtime's own check (tests/vulkan/vk_ops.c): y[i] = x[i] * a + b over
// n words, the grid folded into two dimensions; proves bindings, push constants, views with
// offsets and a grid wider than one dimension reach the shader as vk.c records them.
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n; uint row; float a; float b; } p;
void main() {
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * p.row;
    if (i < p.n) y[i] = x[i] * p.a + p.b;
}
