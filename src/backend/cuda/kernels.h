/* kernels.h — the cuda backend's device kernels as host-callable C launchers (the contract
 * between the host side, cuda.c / forward.c, and the kernel files, mm.cu / ops.cu). Every
 * pointer argument is DEVICE memory unless its comment says host. Every launcher enqueues
 * on `stream` and returns without synchronizing; it returns 0 on success or the CUDA error
 * code of the launch (cudaGetLastError), never exits. Numbers follow cpu-ref's definitions
 * (src/backend/cpu_ref/layers.c): f32 accumulation, the same norm order, RoPE from
 * host-computed cos/sin tables, silu(z) = z / (1 + exp(-z)).
 *
 * Layout conventions (row-major, "rows" are tokens):
 *   activations  f32 [n_tok][ld]                   (ld = the row length unless named)
 *   weights      GGUF block layout, as in the file: n_out rows of n_in elements, each row
 *                kipp_type_row_bytes(type, n_in) bytes (src/core/types.h); uploaded once
 *   KV storage   one allocation: [n_blocks][2 (K, V)][n_layer][block_size][kv_dim] elements
 *                of kv_type (a kipp_kv_type value: KIPP_KV_TYPE_F32, _F16 or _BF16), exactly
 *                the host layout (backend/host_kv.h)
 *   block tables uint32 [n_seq][max_blocks]: sequence s's logical block b is physical block
 *                tables[s * max_blocks + b] */
#ifndef KIPP_CUDA_KERNELS_H
#define KIPP_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cuda/ops_math.h" /* kipp_om_moe_record */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- weights (mm.cu) -------------------------------------------------------------------- */

/* 1 when mm.cu has kernels for this GGUF type (KIPP_TYPE_*): at least BF16, F16, F32, Q8_0,
 * Q4_0, Q4_K, Q6_K. The backend refuses a model holding a type without them. */
int kipp_cuda_mm_type_supported(uint32_t type);

/* 1 when the kernels take rows of n_in elements of `type`: a supported type, n_in a multiple
 * of its block and of 8 (every other launcher here returns cudaErrorInvalidValue otherwise;
 * the backend refuses such a model at start-up, naming the tensor). */
int kipp_cuda_mm_shape_supported(uint32_t type, uint32_t n_in);

/* Device scratch bytes kipp_cuda_matmul needs for n_tok rows of n_in inputs (the converted
 * activation planes of the tensor-core path); 0 is a valid answer. */
size_t kipp_cuda_matmul_scratch_bytes(uint32_t type, uint32_t n_in, uint32_t n_tok);

/* y[t][o] = sum_i x[t][i] * W[o][i]  for t < n_tok, o < n_out.
 * x: f32 [n_tok][ldx]; y: f32 [n_tok][ldy]; W: n_out GGUF rows of `type`.
 * Small n_tok (decode) runs matrix-vector kernels that read the block layout directly,
 * dequantizing in registers with f32 accumulation; larger n_tok runs the tensor-core path
 * (weights dequantized a tile at a time). `scratch` holds
 * kipp_cuda_matmul_scratch_bytes(type, n_in, n_tok) bytes. */
int kipp_cuda_matmul(uint32_t type, const void *w, uint32_t n_in, uint32_t n_out, const float *x,
                     size_t ldx, uint32_t n_tok, float *y, size_t ldy, void *scratch,
                     cudaStream_t stream);

/* kipp_cuda_matmul's matrix-vector kernel at any n_tok (8 tokens per block row, the last
 * block row fewer): f32 products for every token whatever the batch, so a token's y does not
 * depend on how many tokens share the call. For a small product whose result picks a discrete
 * choice (the mixture-of-experts router: a top-k that a prefill's rounding would flip against
 * a decode step's). No scratch. */
int kipp_cuda_matmul_exact(uint32_t type, const void *w, uint32_t n_in, uint32_t n_out,
                           const float *x, size_t ldx, uint32_t n_tok, float *y, size_t ldy,
                           cudaStream_t stream);

/* A mixture-of-experts layer's expert matrices (the file's 3-D stack: n_expert matrices of
 * n_out GGUF rows of n_in, expert e's at w + e * expert_bytes) times rows grouped by expert:
 * rows grp_off[e] .. grp_off[e + 1] - 1 (grp_off: uint32 [n_expert + 1], grp_off[0] = 0,
 * grp_off[n_expert] = n_rows) are expert e's,
 *   y[r][o] = sum_i x[xr][i] * W_e[o][i],  xr = x_rows[r] (int32 [n_rows]) or r when NULL.
 * The groups' sizes stay on the device (nothing waits for the host): max_per_expert bounds
 * every group (the batch's token count: a token picks an expert at most once). At most
 * MV_MAX_TOK (8) rows per expert run the matrix-vector kernel, one block row per row of the
 * product (kipp_cuda_matmul's decode numbers); more run the tensor-core GEMM over every
 * expert's group in one launch (its prefill numbers), a grid of max_per_expert rows per
 * expert whose empty tiles return at once. `scratch`: at least
 * kipp_cuda_matmul_experts_scratch_bytes(...) bytes. */
size_t kipp_cuda_matmul_experts_scratch_bytes(uint32_t type, uint32_t n_in, uint32_t n_rows,
                                              uint32_t max_per_expert);
int kipp_cuda_matmul_experts(uint32_t type, const void *w, size_t expert_bytes,
                             uint32_t n_expert, uint32_t n_in, uint32_t n_out, const float *x,
                             size_t ldx, const int32_t *x_rows, uint32_t n_rows,
                             const uint32_t *grp_off, uint32_t max_per_expert, float *y,
                             size_t ldy, void *scratch, cudaStream_t stream);

/* out[t][0..n-1] = dequantized row ids[t] of W (the token embedding lookup). ids: int32
 * [n_tok], each < the matrix's row count (checked on the host before). */
int kipp_cuda_get_rows(uint32_t type, const void *w, uint32_t n, const int32_t *ids,
                       uint32_t n_tok, float *out, size_t ldo, cudaStream_t stream);

/* ---- everything else (ops.cu) ------------------------------------------------------------ */

/* out[t] = x[t] * (1 / sqrtf(mean(x[t]^2) + eps)) * w, for n_rows rows of n elements (row
 * stride ld_x / ld_out); the mean is accumulated in double as cpu-ref does. Used for the
 * layer norms (n = n_embd) and for q/k norm (n = head_dim, rows = tokens * heads, w shared).
 * out may equal x. */
int kipp_cuda_rmsnorm(const float *x, size_t ld_x, const float *w, uint32_t n, uint32_t n_rows,
                      float eps, float *out, size_t ld_out, cudaStream_t stream);

/* NEOX RoPE in place on n_tok rows of n_head heads of head_dim values each (row stride ld):
 * for i < head_dim/2: (a, b) = (h[i], h[i + half]) -> (a c - b s, a s + b c), with c, s =
 * cos_t[t][i], sin_t[t][i] (f32 [n_tok][head_dim/2], computed on the host in double as
 * cpu-ref does). */
int kipp_cuda_rope(float *x, size_t ld, uint32_t n_tok, uint32_t n_head, uint32_t head_dim,
                   const float *cos_t, const float *sin_t, cudaStream_t stream);

/* out[t][i] = silu(gate[t][i]) * up[t][i], i < n (strides ld). out may equal gate. */
int kipp_cuda_swiglu(const float *gate, const float *up, size_t ld, uint32_t n, uint32_t n_tok,
                     float *out, cudaStream_t stream);

/* x[t][i] += y[t][i] (the residual). */
int kipp_cuda_add(float *x, const float *y, size_t ld, uint32_t n, uint32_t n_tok,
                  cudaStream_t stream);

/* x[t][i] += b[i], i < n (qwen2's q, k, v biases: ops.h's add_bias). */
int kipp_cuda_add_bias(float *x, size_t ld, const float *b, uint32_t n, uint32_t n_tok,
                       cudaStream_t stream);

/* The gates' routing trace (src/backend/moe.h, PIN mode) copied to device memory, for
 * kipp_cuda_moe_route: rec (ops_math.h: kipp_om_moe_record) points at the device copies of
 * the record's token ids, chosen sets, margins and probabilities, n_slot slots per (layer,
 * position); counts (uint32 [3], device): near-ties pinned, differences at a margin >= delta,
 * the widest pinned margin's f32 bits. */
typedef struct {
    kipp_om_moe_record rec;
    uint32_t *counts;
} kipp_cuda_moe_pin;

/* A mixture-of-experts layer's routing for n_tok tokens (ops.h: moe_route), one
 * block (a warp per token), no host round trip; n_expert <= 1024. logits: f32 [n_tok][ld],
 * n_expert used, become each token's probabilities; token t's k experts chosen[t * k + s]
 * (uint32, best first) and their weights weight[t * k + s] are ops_math.h's
 * kipp_om_moe_route, src/backend/moe.c's arithmetic, so every backend routes alike. With pin
 * (a host struct of device pointers; NULL in every production run) the choice of token t of
 * `layer`, at position pos[t] (uint32 [n_tok]) with token id tok[t] (int32 [n_tok]), goes
 * through kipp_om_moe_trace_pin first (the record's slot of the same token with the nearest
 * probabilities, then the pin rule), as moe.c's trace does; pos and tok are read only then.
 * Then the n_tok * k (token, slot) pairs, pair p = t * k + s, sorted by expert (tokens
 * ascending within an expert), for
 * kipp_cuda_matmul_experts: grp_off uint32 [n_expert + 1] the groups' bounds, pair_tok int32
 * [n_tok * k] the token of the pair at each group position, slot_at uint32 [n_tok * k] pair
 * p's group position. */
int kipp_cuda_moe_route(float *logits, size_t ld, uint32_t n_tok, uint32_t n_expert,
                        uint32_t k, int norm, uint32_t layer, const uint32_t *pos,
                        const int32_t *tok, const kipp_cuda_moe_pin *pin, uint32_t *chosen,
                        float *weight, uint32_t *grp_off, int32_t *pair_tok, uint32_t *slot_at,
                        cudaStream_t stream);

/* out[t][i] = sum over s < k, in slot order from 0 (cpu-ref's moe_sum), of weight[t * k + s] *
 * ye[slot_at[t * k + s]][i], each product and sum rounded (kipp_om_mul_add); i < n. ye: f32
 * rows in group order (stride ldy), the experts' outputs. The residual add is
 * kipp_cuda_add's (ops.h: moe_sum into PROJ, then add). */
int kipp_cuda_moe_sum(float *out, size_t ldo, const float *ye, size_t ldy, const float *weight,
                      const uint32_t *slot_at, uint32_t n, uint32_t n_tok, uint32_t k,
                      cudaStream_t stream);

/* Stores n_tok tokens' K and V rows (f32 [n_tok][kv_dim], strides ld_k / ld_v) of `layer`
 * into the paged KV storage, rounding to kv_type (round to nearest even, as host_kv.c):
 * token t goes to sequence seq_of[t] at position pos[t] (both uint32 [n_tok]). */
int kipp_cuda_kv_store(void *kv, uint32_t kv_type, uint32_t n_layer, uint32_t block_size,
                       uint32_t kv_dim, uint32_t layer, const float *k, size_t ld_k,
                       const float *v, size_t ld_v, uint32_t n_tok, const uint32_t *seq_of,
                       const uint32_t *pos, const uint32_t *tables, uint32_t max_blocks,
                       cudaStream_t stream);

/* Causal paged attention with GQA for n_tok query tokens: token t (sequence seq_of[t], at
 * position pos[t]) attends over positions 0..pos[t] of its own sequence, read from the paged
 * storage through its block table. q: f32 [n_tok][ld_q], n_head heads of head_dim; query
 * head h reads KV head h / (n_head / n_kv_head). Scores scaled by 1/sqrt(head_dim),
 * softmax with max subtraction and expf, f32 throughout; out: f32 [n_tok][ld_out]. Long
 * contexts are split over the context and the partial results merged (scratch: at least
 * kipp_cuda_attention_scratch_bytes(...) bytes of device memory). */
size_t kipp_cuda_attention_scratch_bytes(uint32_t n_tok, uint32_t n_head, uint32_t head_dim,
                                         uint32_t max_ctx);
int kipp_cuda_attention(const float *q, size_t ld_q, const void *kv, uint32_t kv_type,
                        uint32_t n_layer, uint32_t block_size, uint32_t kv_dim, uint32_t layer,
                        uint32_t n_head, uint32_t n_kv_head, uint32_t head_dim, uint32_t n_tok,
                        const uint32_t *seq_of, const uint32_t *pos, const uint32_t *tables,
                        uint32_t max_blocks, uint32_t max_ctx, void *scratch, float *out,
                        size_t ld_out, cudaStream_t stream);

/* The KIPP_FAULT addressing bugs of the fault-injection build (docs/kv-cache.md), applied on
 * READS by kipp_cuda_attention exactly as kipp_host_kv_row() applies them (0 = none; the
 * production build never sets it). n_blocks: the storage's block count (modes 1 and 3). */
void kipp_cuda_set_fault(int mode, uint32_t n_blocks);

#ifdef __cplusplus
}
#endif

#endif
