#version 450
// get_rows.comp — kernels.h's kipp_vk_get_rows: dst[r][i] = src[rows[r]][i], copied as 32-bit
// words (bit for bit, NaNs and subnormals included). Elements over x (folded), rows over y
// (folded); a source row outside the buffer is skipped (its destination left as it was).
layout(local_size_x = 128) in;

layout(std430, set = 0, binding = 0) readonly buffer S { uint src[]; };
layout(std430, set = 0, binding = 1) readonly buffer R { uint rows[]; };
layout(std430, set = 0, binding = 2) writeonly buffer D { uint dst[]; };

layout(push_constant) uniform P {
    uint ld_src, ld_dst, n, n_rows;
} pc;

void main() {
    const uint stride = gl_NumWorkGroups.x * 128u;
    for (uint r = gl_WorkGroupID.y; r < pc.n_rows; r += gl_NumWorkGroups.y) {
        if (r >= rows.length()) break;
        const uint s0 = rows[r] * pc.ld_src, d0 = r * pc.ld_dst;
        for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += stride)
            if (s0 + i < src.length() && d0 + i < dst.length()) dst[d0 + i] = src[s0 + i];
    }
}
