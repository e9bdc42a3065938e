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

#ifdef __cplusplus
extern "C" {
#endif

/* ---- weights (mm.cu) -------------------------------------------------------------------- */

/* 1 when mm.cu has kernels for this GGUF type (KIPP_TYPE_*): at least BF16, F16, F32, Q8_0,
 * Q4_0, Q4_K, Q6_K. The backend refuses a model holding a type without them. */
int kipp_cuda_mm_type_supported(uint32_t type);

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
