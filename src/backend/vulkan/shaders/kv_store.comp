#version 450
#extension GL_GOOGLE_include_directive : require
// kv_store.comp — kernels.h's kipp_vk_kv_store: token t's K and V rows (f32) into its
// sequence's slot of the paged storage [n_blocks][2 (K, V)][block_size][kv_dim], rounded to
// kv_type by kv.glsl's integer code (bit for bit host_kv.c's kipp_host_kv_put). The f32
// sources are read as bits (no float operation touches them: subnormals and NaN payloads
// survive). One workgroup per token (folded); 16-bit types are written a word (two
// elements, kv_dim even) per invocation, so no two invocations share a word. Writes are
// never faulted (KIPP_FAULT perturbs reads only). A row outside its buffer is skipped.
layout(local_size_x = 64) in;

#include "kv.glsl"

layout(std430, set = 0, binding = 0) buffer KV { uint kv[]; };
layout(std430, set = 0, binding = 1) readonly buffer K { uint kin[]; };
layout(std430, set = 0, binding = 2) readonly buffer V { uint vin[]; };
layout(std430, set = 0, binding = 3) readonly buffer SQ { uint seq_of[]; };
layout(std430, set = 0, binding = 4) readonly buffer PS { uint pos[]; };
layout(std430, set = 0, binding = 5) readonly buffer TB { uint tables[]; };

layout(push_constant) uniform P {
    uint kv_type, block_size, kv_dim, ld_k, ld_v, n_tok, max_blocks;
} pc;

uint conv(uint x) { return pc.kv_type == KV_F16 ? kv_f32_to_f16(x) : kv_f32_to_bf16(x); }

void main() {
    const uint tid = gl_LocalInvocationID.x;
    for (uint t = gl_WorkGroupID.x; t < pc.n_tok; t += gl_NumWorkGroups.x) {
        if (t >= seq_of.length() || t >= pos.length()) break;
        const uint p = pos[t], lblock = p / pc.block_size, slot = p % pc.block_size;
        const uint ti = seq_of[t] * pc.max_blocks + lblock;
        if (lblock >= pc.max_blocks || ti >= tables.length()) continue;
        const uint ke = (tables[ti] * 2u * pc.block_size + slot) * pc.kv_dim;
        const uint ve = ke + pc.block_size * pc.kv_dim; // elements
        const uint ks = t * pc.ld_k, vs = t * pc.ld_v;
        if (ks + pc.kv_dim > kin.length() || vs + pc.kv_dim > vin.length()) continue;
        if (pc.kv_type == KV_F32) {
            if (ve + pc.kv_dim > kv.length()) continue;
            for (uint i = tid; i < pc.kv_dim; i += 64u) {
                kv[ke + i] = kin[ks + i];
                kv[ve + i] = vin[vs + i];
            }
        } else {
            const uint half_dim = pc.kv_dim / 2u, kw = ke / 2u, vw = ve / 2u;
            if (vw + half_dim > kv.length()) continue;
            for (uint i = tid; i < half_dim; i += 64u) {
                kv[kw + i] = conv(kin[ks + 2u * i]) | (conv(kin[ks + 2u * i + 1u]) << 16);
                kv[vw + i] = conv(vin[vs + 2u * i]) | (conv(vin[vs + 2u * i + 1u]) << 16);
            }
        }
    }
}
