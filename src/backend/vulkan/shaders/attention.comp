#version 450
#extension GL_GOOGLE_include_directive : require
// attention.comp — kernels.h's kipp_vk_attention, the split pass (attention_merge.comp merges).
// One workgroup per (split, query head, token) (tokens folded over the z groups). Token t
// attends over positions [lo, hi) of its sequence: split s covers [s L, (s + 1) L) clipped
// to pos[t] + 1, the last split runs to pos[t] + 1 whatever max_ctx said; a split past the
// token's position is empty (l = 0: the merge skips it).
// The split is walked in tiles of TILE positions: invocation j computes the scores of
// positions j, j + 64, ... (f32 dot of q and the K row, times scale) into shared memory with
// the V rows' addresses, a tree gives the tile's max, p = exp(s - m) replaces the scores, a
// tree gives their sum, and an online softmax carries (m, l, acc) across tiles (old parts
// rescaled by exp(m_old - m_new)); invocation d owns output dims d, d + 64, ... (head_dim <=
// 256) and accumulates acc[d] = sum p_j V[j][d] in position order. With one split the
// output is acc / l; with several, (acc, m, l) go to scratch: part_acc [n_split][n_tok]
// [n_head][D] then part_ml [n_split][n_tok][n_head][2].
// KV addressing: storage [n_blocks][2 (K, V)][block_size][kv_dim], physical block
// tables[seq * max_blocks + pos / block_size], slot pos % block_size, and the KIPP_FAULT read
// modes exactly as src/backend/host_kv.h's kipp_host_kv_row applies them: 1 the table
// ignored (block = logical block mod n_blocks), 2 one slot early (slot 0 stays), 3 the last
// slot of a block rolls over into slot 0 of physical block + 1 (mod n_blocks), 4 K and V
// swapped. A row outside the KV buffer (a bad table entry) reads as zeros.
layout(local_size_x = 64) in;

#include "kv.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(std430, set = 0, binding = 1) readonly buffer KV { uint kv[]; };
layout(std430, set = 0, binding = 2) readonly buffer SQ { uint seq_of[]; };
layout(std430, set = 0, binding = 3) readonly buffer PS { uint pos[]; };
layout(std430, set = 0, binding = 4) readonly buffer TB { uint tables[]; };
layout(std430, set = 0, binding = 5) writeonly buffer SC { float scratch[]; };
layout(std430, set = 0, binding = 6) writeonly buffer OU { float o[]; };

layout(push_constant) uniform P {
    uint ld_q, kv_type, block_size, kv_dim, n_head, group, head_dim, n_tok;
    uint max_blocks, n_split, split_len, ld_out, fault, n_blocks;
    float scale;
} pc;

const uint WG = 64u;
const uint TILE = 256u; // ops.c's ATT_TILE
const uint DPT = 4u;    // output dims per invocation: head_dim <= WG * DPT
const uint NONE = 0xffffffffu;

shared float qs[WG * DPT];
shared float sc[TILE];
shared uint vrow[TILE];
shared float red[WG];

// The element offset of the K (part 0) or V (part 1) row of position p of sequence seq, its
// KV head's slice (head_off) included; NONE when the row lies outside the storage.
uint kv_row(uint seq, uint p, uint part, uint head_off) {
    const uint lblock = p / pc.block_size;
    uint slot = p % pc.block_size;
    const uint ti = seq * pc.max_blocks + lblock;
    if (lblock >= pc.max_blocks || ti >= tables.length()) return NONE;
    uint block = tables[ti];
    if (pc.fault == 1u) {
        block = lblock % pc.n_blocks;
    } else if (pc.fault == 2u) {
        slot = slot > 0u ? slot - 1u : 0u;
    } else if (pc.fault == 3u) {
        if (slot == pc.block_size - 1u) {
            block = (block + 1u) % pc.n_blocks;
            slot = 0u;
        }
    } else if (pc.fault == 4u) {
        part = 1u - part;
    }
    const uint e = ((block * 2u + part) * pc.block_size + slot) * pc.kv_dim + head_off;
    const uint last = e + pc.head_dim - 1u; // its last element
    const uint words = pc.kv_type == KV_F32 ? last + 1u : last / 2u + 1u;
    if (block >= pc.n_blocks || words > kv.length()) return NONE;
    return e;
}

// Element e of the storage as f32.
float kv_at(uint e) {
    if (pc.kv_type == KV_F32) return uintBitsToFloat(kv[e]);
    return kv_16_to_f32(pc.kv_type, (kv[e >> 1] >> ((e & 1u) * 16u)) & 0xffffu);
}

void main() {
    const uint tid = gl_LocalInvocationID.x, D = pc.head_dim;
    const uint split = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    const uint head_off = (h / pc.group) * D;
    const uint ml_base = pc.n_split * pc.n_tok * pc.n_head * D;
    for (uint t = gl_WorkGroupID.z; t < pc.n_tok; t += gl_NumWorkGroups.z) {
        const uint seq = seq_of[t], n = pos[t] + 1u;
        const uint lo = split * pc.split_len;
        const uint hi = split + 1u == pc.n_split ? n : min(lo + pc.split_len, n);
        for (uint d = tid; d < D; d += WG) {
            const uint qi = t * pc.ld_q + h * D + d;
            qs[d] = qi < q.length() ? q[qi] : 0.0;
        }
        barrier();
        float m = 0.0, l = 0.0; // running max (valid once l > 0) and sum
        float acc[DPT];
        for (uint k = 0u; k < DPT; k++) acc[k] = 0.0;
        for (uint j0 = lo; j0 < hi; j0 += TILE) {
            const uint nj = min(TILE, hi - j0);
            float mx = -3.0e38;
            for (uint j = tid; j < nj; j += WG) {
                const uint kr = kv_row(seq, j0 + j, 0u, head_off);
                float dot = 0.0;
                if (kr != NONE)
                    for (uint d = 0u; d < D; d++) dot += qs[d] * kv_at(kr + d);
                const float s = dot * pc.scale;
                sc[j] = s;
                vrow[j] = kv_row(seq, j0 + j, 1u, head_off);
                mx = max(mx, s);
            }
            red[tid] = mx;
            barrier();
            for (uint s = WG / 2u; s > 0u; s >>= 1) {
                if (tid < s) red[tid] = max(red[tid], red[tid + s]);
                barrier();
            }
            const float m_new = l > 0.0 ? max(m, red[0]) : red[0];
            const float alpha = l > 0.0 ? exp(m - m_new) : 0.0;
            barrier(); // everyone has read red[0]
            float ps = 0.0;
            for (uint j = tid; j < nj; j += WG) {
                const float e = exp(sc[j] - m_new);
                sc[j] = e;
                ps += e;
            }
            red[tid] = ps;
            barrier();
            for (uint s = WG / 2u; s > 0u; s >>= 1) {
                if (tid < s) red[tid] += red[tid + s];
                barrier();
            }
            l = l * alpha + red[0];
            m = m_new;
            for (uint k = 0u; k < DPT; k++) {
                const uint d = tid + k * WG;
                if (d >= D) break;
                float a = acc[k] * alpha;
                for (uint j = 0u; j < nj; j++)
                    if (vrow[j] != NONE) a += sc[j] * kv_at(vrow[j] + d);
                acc[k] = a;
            }
            barrier(); // sc, vrow and red are rewritten by the next tile
        }
        if (pc.n_split == 1u) {
            for (uint k = 0u; k < DPT; k++) {
                const uint d = tid + k * WG, oi = t * pc.ld_out + h * D + d;
                if (d < D && oi < o.length()) o[oi] = acc[k] / l;
            }
        } else {
            const uint row = (split * pc.n_tok + t) * pc.n_head + h;
            for (uint k = 0u; k < DPT; k++) {
                const uint d = tid + k * WG;
                if (d < D && row * D + d < ml_base) scratch[row * D + d] = acc[k];
            }
            if (tid == 0u && ml_base + row * 2u + 1u < scratch.length()) {
                scratch[ml_base + row * 2u] = m;
                scratch[ml_base + row * 2u + 1u] = l;
            }
        }
        barrier(); // qs is rewritten by the next token
    }
}
