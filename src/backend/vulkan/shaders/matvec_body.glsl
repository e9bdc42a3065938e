// matvec_body.glsl — the body of matvec.comp and matvec1.comp (see matvec.comp's header).

#define MV_WG 64u
#define MV_TOK 8u

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer WBuf { uint wq[]; };
layout(std430, set = 0, binding = 1) readonly buffer XBuf { float xs[]; };
layout(std430, set = 0, binding = 2) readonly buffer RBuf { uint xrows[]; };
layout(std430, set = 0, binding = 3) buffer YBuf { float ys[]; };

layout(push_constant) uniform Push {
    uint w_byte0;   // byte of row 0 in the W view
    uint row_bytes; // bytes of one W row
    uint n_in, n_out;
    uint ldx, x_row0, has_rows; // has_rows: xr(t) = xrows[x_row0 + t], else x_row0 + t
    uint n_tok, ldy, y_row0, y_col0;
    uint groups; // workgroups with rows: ceil(n_out / (MV_WG / tpr))
    uint tpr;    // threads per row: a power of two, 1 .. MV_WG
} p;

#include "quant.glsl"

#ifndef MV_ONE_THREAD
shared float red[MV_TOK][MV_WG];
#endif

// One block of MV_WG / tpr output rows (row group grp).
void row_block(const uint grp) {
    const uint tid = gl_LocalInvocationID.x;
    if (grp >= p.groups) return; // a whole workgroup: uniform
#ifdef MV_ONE_THREAD
    const uint tpr = 1u, lane = 0u;
#else
    const uint tpr = p.tpr, lane = tid & (tpr - 1u);
#endif
    const uint o = grp * (MV_WG / tpr) + tid / tpr; // this thread's row
    const bool row_ok = o < p.n_out;
    const uint t0 = gl_WorkGroupID.z * MV_TOK;
    const uint nt = min(MV_TOK, p.n_tok - t0);

    uint xb[MV_TOK]; // element index of each token's input row
    [[unroll]] for (uint t = 0u; t < MV_TOK; t++) {
        const uint r = t < nt ? t0 + t : t0;
        xb[t] = (p.has_rows != 0u ? xrows[p.x_row0 + r] : p.x_row0 + r) * p.ldx;
    }

    // Every product is added with one fused multiply-add (precise: never split, never
    // re-associated), so a token's chain is the same operations in the one-token loop below
    // as in the general one: exact = 1 holds bit for bit whichever a pass runs.
    precise float acc[MV_TOK];
    [[unroll]] for (uint t = 0u; t < MV_TOK; t++) acc[t] = 0.0;
    const uint n_grp = row_ok ? p.n_in >> 3 : 0u;
    const uint wrow = p.w_byte0 + o * p.row_bytes;
    if (nt == 1u) {
        // one token (a decode step): one accumulator, no per-token arrays (lavapipe runs the
        // general loop's arrays through memory: this is twice as fast there)
        precise float a1 = 0.0;
        for (uint k = lane; k < n_grp; k += tpr) {
            float w[8];
            deq8(wrow + (k / WGPB) * WBB, k % WGPB, w);
            const uint xa = xb[0] + 8u * k;
            [[unroll]] for (uint i = 0u; i < 8u; i++) a1 = fma(w[i], xs[xa + i], a1);
        }
        acc[0] = a1;
    } else {
        for (uint k = lane; k < n_grp; k += tpr) {
            float w[8];
            deq8(wrow + (k / WGPB) * WBB, k % WGPB, w);
            [[unroll]] for (uint t = 0u; t < MV_TOK; t++) {
                if (t < nt) {
                    const uint xa = xb[t] + 8u * k;
                    [[unroll]] for (uint i = 0u; i < 8u; i++) acc[t] = fma(w[i], xs[xa + i], acc[t]);
                }
            }
        }
    }

    // the row's tpr partial sums: a tree over lanes (strides tpr / 2 .. 1), in place
#ifndef MV_ONE_THREAD
    if (tpr > 1u) {
        [[unroll]] for (uint t = 0u; t < MV_TOK; t++)
            if (t < nt) red[t][tid] = acc[t];
        for (uint s = tpr >> 1; s > 0u; s >>= 1) {
            barrier();
            if (lane < s) {
                [[unroll]] for (uint t = 0u; t < MV_TOK; t++)
                    if (t < nt) red[t][tid] += red[t][tid + s];
            }
        }
        barrier();
        if (row_ok) { // the row's first thread holds the sums; its lanes store them
            for (uint t = lane; t < nt; t += tpr)
                ys[(p.y_row0 + t0 + t) * p.ldy + p.y_col0 + o] = red[t][tid - lane];
        }
    } else
#endif
    if (row_ok) {
        [[unroll]] for (uint t = 0u; t < MV_TOK; t++)
            if (t < nt) ys[(p.y_row0 + t0 + t) * p.ldy + p.y_col0 + o] = acc[t];
    }
}

// The grid's workgroup g runs row groups g * MV_BLOCKS .. + MV_BLOCKS - 1: matvec1 (a CPU
// device) takes 8 per workgroup, as lavapipe's cost per workgroup outweighs a small row's
// work (kipp-tiny's lm_head: 151936 rows of 64); matvec one.
#ifdef MV_ONE_THREAD
#define MV_BLOCKS 8u
#else
#define MV_BLOCKS 1u
#endif
void main() {
    const uint g = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    for (uint j = 0u; j < MV_BLOCKS; j++) row_block(g * MV_BLOCKS + j);
}
