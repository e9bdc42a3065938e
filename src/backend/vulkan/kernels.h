/* kernels.h — the vulkan backend's kernels as C launchers over the runtime of vk.h: the
 * contract between the host side (vulkan.c, forward.c) and the kernel files (mm.c with
 * shaders/matvec.comp, matmul.comp, dequant.comp, quant.glsl; ops.c with the other shaders).
 * Every launcher RECORDS its dispatches into vk's open recording (kipp_vk_begin) and returns
 * 0, or a non-zero code (the runtime's, or KIPP_VK_EINVAL for arguments outside this
 * contract); nothing runs before kipp_vk_submit. Numbers follow cpu-ref's definitions
 * (src/backend/cpu_ref/layers.c): f32 accumulation, the same norm order, RoPE from
 * host-computed cos/sin tables, silu(z) = z / (1 + exp(-z)). No shader needs float64 or
 * 8/16-bit storage (Apple's GPUs through MoltenVK have no float64): packed data is read from
 * 32-bit words. Every shader is written for any subgroup size (lavapipe 8, NVIDIA 32, AMD 32
 * or 64, Apple 32): reductions go through shared memory.
 *
 * Layout conventions (row-major, "rows" are tokens; ld = a row's stride in elements):
 *   activations  f32 [rows][ld]
 *   weights      GGUF block layout, as in the file: n_out rows of n_in elements, row o at
 *                byte w_byte0 + o * kipp_type_row_bytes(type, n_in) of the view (no alignment
 *                guarantee: a Q8_0 row is 34 * n_in / 32 bytes); a view never exceeds the
 *                device's max_range (forward.c splits larger matrices by rows)
 *   KV storage   one buffer per layer: [n_blocks][2 (K, V)][block_size][kv_dim] elements of
 *                kv_type (a kipp_kv_type value: F32, F16 or BF16; 16-bit ones two per 32-bit
 *                word, element 2i in the low half; kv_dim is even)
 *   block tables uint32 [n_seq][max_blocks]: sequence s's logical block b is physical block
 *                tables[s * max_blocks + b]
 *   index lists  uint32 / int32 buffers, one entry per row */
#ifndef KIPP_VK_KERNELS_H
#define KIPP_VK_KERNELS_H

#include "backend/vulkan/vk.h"

#include <stddef.h>
#include <stdint.h>

#define KIPP_VK_EINVAL (-22)

/* A view with no buffer: an absent optional argument. */
static inline kipp_vk_view kipp_vk_none(void) {
    kipp_vk_view v = {VK_NULL_HANDLE, 0, 0};
    return v;
}

/* ---- matrix products (mm.c) ------------------------------------------------------------------ */

/* 1 when mm.c has kernels for this GGUF type (all 15 the cpu backend runs: F32, F16, BF16, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS). */
int kipp_vk_mm_type_supported(uint32_t type);
/* 1 when the kernels take rows of n_in elements of `type` (a supported type; n_in a multiple
 * of its block and of 8). The backend refuses other models at start-up, naming the tensor. */
int kipp_vk_mm_shape_supported(uint32_t type, uint32_t n_in);

/* y[y_row0 + t][y_col0 + o] = sum_i x[xr(t)][i] * W[o][i]  for t < n_tok, o < n_out, where
 * xr(t) = x_rows[x_row0 + t] when x_rows has a buffer (a gather: the experts' inputs), else
 * x_row0 + t. x: f32 rows of stride ldx; y: f32 rows of stride ldy; W: n_out GGUF rows of
 * `type` from byte w_byte0 of w. Up to 8 tokens (decode) run the matrix-vector kernel, which
 * reads the blocks in place, dequantizing in registers with f32 accumulation; more run the
 * tiled matrix product (weights dequantized a tile at a time into shared memory). exact = 1:
 * the matrix-vector kernel at any n_tok, so token t's y does not depend on the batch (the
 * mixture-of-experts router, whose top-k a prefill's rounding would flip against a decode
 * step's). */
int kipp_vk_matmul(kipp_vk *vk, uint32_t type, kipp_vk_view w, uint64_t w_byte0, uint32_t n_in,
                   uint32_t n_out, kipp_vk_view x, uint32_t ldx, kipp_vk_view x_rows,
                   uint32_t x_row0, uint32_t n_tok, kipp_vk_view y, uint32_t ldy, uint32_t y_row0,
                   uint32_t y_col0, int exact);

/* The matrix-vector kernel's threads per output row for rows of n_in elements on vk's device
 * (a power of two, 1 .. 64): a token's sum is each thread's chain over every tpr-th group of
 * 8, then a tree over the tpr threads, so its rounding (and the operator test's error bound)
 * depends on it, never on the batch. kipp_vk_mm_force_tpr(t) sets it for every later call
 * (0: the device's choice again): the operator test runs the GPUs' tree on lavapipe too.
 * KIPP_VK_EINVAL for t not a power of two up to 64. */
uint32_t kipp_vk_matvec_threads_per_row(const kipp_vk *vk, uint32_t n_in);
int kipp_vk_mm_force_tpr(uint32_t tpr);

/* y[r][i] = element i of W's row r, dequantized, for r < n_rows, i < n_in (y: f32 rows of
 * n_in): bit-exact with kipp_dequantize_row (src/core/types.c). */
int kipp_vk_dequantize(kipp_vk *vk, uint32_t type, kipp_vk_view w, uint64_t w_byte0,
                       uint32_t n_in, uint32_t n_rows, kipp_vk_view y);

/* ---- everything else (ops.c) ----------------------------------------------------------------- */

/* out[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * w, for n_rows rows of n elements (row
 * strides ld_x / ld_out). Used for the layer norms (n = n_embd) and for q/k norm (n =
 * head_dim, rows = tokens * heads, w shared). out may equal x. */
int kipp_vk_rmsnorm(kipp_vk *vk, kipp_vk_view x, uint32_t ld_x, kipp_vk_view w, uint32_t n,
                    uint32_t n_rows, float eps, kipp_vk_view out, uint32_t ld_out);

/* NEOX RoPE in place on n_tok rows of n_head heads of head_dim values (row stride ld): for
 * i < head_dim/2: (a, b) = (h[i], h[i + half]) -> (a c - b s, a s + b c), with c = cs[t][i],
 * s = cs[n_tok * half + t * half + i] (cs: f32, the cos table [n_tok][half] then the sin table,
 * computed on the host in double as cpu-ref does). */
int kipp_vk_rope(kipp_vk *vk, kipp_vk_view x, uint32_t ld, uint32_t n_tok, uint32_t n_head,
                 uint32_t head_dim, kipp_vk_view cs);

/* out[t][i] = silu(gate[t][i]) * up[t][i], i < n (stride ld). out may equal gate. */
int kipp_vk_swiglu(kipp_vk *vk, kipp_vk_view gate, kipp_vk_view up, uint32_t ld, uint32_t n,
                   uint32_t n_tok, kipp_vk_view out);

/* x[t][i] += y[t][i] (the residual), i < n. */
int kipp_vk_add(kipp_vk *vk, kipp_vk_view x, kipp_vk_view y, uint32_t ld, uint32_t n,
                uint32_t n_tok);

/* x[t][i] += b[i], i < n (qwen2's q, k, v biases). */
int kipp_vk_add_bias(kipp_vk *vk, kipp_vk_view x, uint32_t ld, kipp_vk_view b, uint32_t n,
                     uint32_t n_tok);

/* dst[r][i] = src[rows[r]][i] for r < n_rows, i < n (rows: uint32; strides ld_dst, ld_src):
 * the wanted rows before the final norm and the lm_head. */
int kipp_vk_get_rows(kipp_vk *vk, kipp_vk_view src, uint32_t ld_src, kipp_vk_view rows,
                     uint32_t n_rows, uint32_t n, kipp_vk_view dst, uint32_t ld_dst);

/* out[t][i] = sum over s < k, in slot order from 0, of weight[t * k + s] *
 * ye[slot_at[t * k + s]][i] (f32 products and sums in that order, as cpu-ref's moe_sum); i < n.
 * ye: f32 rows (stride ldy), the experts' outputs in group order; weight f32, slot_at uint32. */
int kipp_vk_moe_sum(kipp_vk *vk, kipp_vk_view out, uint32_t ldo, kipp_vk_view ye, uint32_t ldy,
                    kipp_vk_view weight, kipp_vk_view slot_at, uint32_t n, uint32_t n_tok,
                    uint32_t k);

/* Stores n_tok tokens' K and V rows (f32, strides ld_k / ld_v) into one layer's paged KV
 * storage `kv`, rounding to kv_type (round to nearest even, as host_kv.c's kipp_host_kv_put;
 * integer arithmetic, not the device's conversion instructions): token t goes to sequence
 * seq_of[t] at position pos[t] (both uint32 [n_tok]). */
int kipp_vk_kv_store(kipp_vk *vk, kipp_vk_view kv, uint32_t kv_type, uint32_t block_size,
                     uint32_t kv_dim, kipp_vk_view k, uint32_t ld_k, kipp_vk_view v,
                     uint32_t ld_v, uint32_t n_tok, kipp_vk_view seq_of, kipp_vk_view pos,
                     kipp_vk_view tables, uint32_t max_blocks);

/* Causal paged attention with GQA for n_tok query tokens: token t (sequence seq_of[t], at
 * position pos[t]) attends over positions 0..pos[t] of its own sequence, read from the layer's
 * paged storage kv through its block table. q: f32 [n_tok][ld_q], n_head heads of head_dim
 * (<= 256); query head h reads KV head h / (n_head / n_kv_head). Scores scaled by
 * 1/sqrt(head_dim), softmax with max subtraction and exp, f32 throughout; out: f32
 * [n_tok][ld_out]. Flash-decoding: the positions are split into chunks (their number grows
 * with max_ctx, the largest pos + 1 of the call), each chunk's partial softmax goes to scratch
 * and a second kernel merges them. scratch: at least
 * kipp_vk_attention_scratch_bytes(n_tok, n_head, head_dim, max_ctx) bytes.
 * fault / n_blocks: the KIPP_FAULT addressing bugs of the fault-injection build
 * (docs/kv-cache.md), applied on these reads exactly as kipp_host_kv_row() applies them
 * (0 = none, what every production call passes; n_blocks: the storage's block count). */
size_t kipp_vk_attention_scratch_bytes(uint32_t n_tok, uint32_t n_head, uint32_t head_dim,
                                       uint32_t max_ctx);
int kipp_vk_attention(kipp_vk *vk, kipp_vk_view q, uint32_t ld_q, kipp_vk_view kv,
                      uint32_t kv_type, uint32_t block_size, uint32_t kv_dim, uint32_t n_head,
                      uint32_t n_kv_head, uint32_t head_dim, uint32_t n_tok, kipp_vk_view seq_of,
                      kipp_vk_view pos, kipp_vk_view tables, uint32_t max_blocks,
                      uint32_t max_ctx, kipp_vk_view scratch, kipp_vk_view out, uint32_t ld_out,
                      int fault, uint32_t n_blocks);

#endif
