/* ops.cu — the cuda backend's kernels other than the weight products (kernels.h's
 * "everything else"): RMSNorm, NEOX RoPE, SwiGLU, the residual add, the q/k/v bias add, the
 * paged KV store and causal paged GQA attention, a mixture-of-experts layer's routing (the
 * router's choice, and the (token, slot) pairs grouped by expert) and weighted sum, plus the
 * fault-injection switch attention's reads obey.
 * Numbers follow cpu-ref (src/backend/cpu_ref/layers.c): RMSNorm's sum of squares in
 * double and its `x * scale * w` order, RoPE's and RMSNorm's products rounded one at a time
 * (__fmul_rn: no FMA contraction, so they match the host bit for bit), scores scaled by
 * 1/sqrtf(D), softmax with max subtraction and expf, f32 throughout. The scalar pieces the
 * host checks (conversions, silu, KV addressing, the router's choice) live in ops_math.h.
 * Weight products are mm.cu's. */
#include "backend/cuda/kernels.h"
#include "backend/cuda/ops_math.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

/* ---- launch helpers -------------------------------------------------------------------- */

/* Blocks for a grid-stride loop over `total` items of `per_block`: enough to fill a large
 * GPU, never more than the items need. */
static unsigned grid_for(size_t total, unsigned per_block) {
    const size_t want = (total + per_block - 1) / per_block;
    return (unsigned)(want < 8192 ? (want ? want : 1) : 8192);
}

static int launch_status(void) { return (int)cudaGetLastError(); }

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* ---- RMSNorm --------------------------------------------------------------------------- */

/* One block per row. The sum of squares is accumulated in double as cpu-ref does (each
 * square of a float is exact in double, so only the summation order differs, far below the
 * rounding to float that follows); then scale = 1/sqrtf((float)(ss/n) + eps) with IEEE
 * sqrt and division (this file is never built with fast math) and out = (x * scale) * w
 * with each product rounded. */
__global__ void rmsnorm_kernel(const float *x, size_t ld_x, const float *w, uint32_t n, float eps,
                               float *out, size_t ld_out) {
    __shared__ double warp_sums[32];
    const float *xr = x + (size_t)blockIdx.x * ld_x;
    float *orow = out + (size_t)blockIdx.x * ld_out;
    double ss = 0.0;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) ss += (double)xr[i] * (double)xr[i];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if ((threadIdx.x & 31u) == 0) warp_sums[threadIdx.x >> 5] = ss;
    __syncthreads();
    double total = 0.0;
    for (uint32_t i = 0; i < (blockDim.x + 31u) / 32u; i++) total += warp_sums[i];
    const float scale = 1.0f / sqrtf((float)(total / n) + eps);
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
        orow[i] = __fmul_rn(__fmul_rn(xr[i], scale), w[i]);
}

extern "C" int kipp_cuda_rmsnorm(const float *x, size_t ld_x, const float *w, uint32_t n,
                                 uint32_t n_rows, float eps, float *out, size_t ld_out,
                                 cudaStream_t stream) {
    if (n_rows == 0 || n == 0) return 0;
    /* a short row (q/k norm, n = head_dim) gets one thread per element, a long one 256 */
    const unsigned threads = n >= 256 ? 256u : (n + 31u) / 32u * 32u;
    rmsnorm_kernel<<<n_rows, threads, 0, stream>>>(x, ld_x, w, n, eps, out, ld_out);
    return launch_status();
}

/* ---- RoPE ------------------------------------------------------------------------------ */

/* One thread per rotated pair (t, head, i < half). a c - b s and a s + b c with each product
 * and the sum rounded separately, as cpu-ref's scalar code evaluates them. */
__global__ void rope_kernel(float *x, size_t ld, uint32_t n_tok, uint32_t n_head, uint32_t half,
                            const float *cos_t, const float *sin_t) {
    const size_t total = (size_t)n_tok * n_head * half;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const uint32_t i = (uint32_t)(idx % half);
        const size_t th = idx / half; /* token * n_head + head */
        const uint32_t h = (uint32_t)(th % n_head), t = (uint32_t)(th / n_head);
        float *hp = x + (size_t)t * ld + (size_t)h * 2 * half;
        const float c = cos_t[(size_t)t * half + i], s = sin_t[(size_t)t * half + i];
        const float a = hp[i], b = hp[i + half];
        hp[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        hp[i + half] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
    }
}

extern "C" int kipp_cuda_rope(float *x, size_t ld, uint32_t n_tok, uint32_t n_head,
                              uint32_t head_dim, const float *cos_t, const float *sin_t,
                              cudaStream_t stream) {
    const uint32_t half = head_dim / 2;
    const size_t total = (size_t)n_tok * n_head * half;
    if (total == 0) return 0;
    rope_kernel<<<grid_for(total, 256), 256, 0, stream>>>(x, ld, n_tok, n_head, half, cos_t,
                                                          sin_t);
    return launch_status();
}

/* ---- SwiGLU and the residual ------------------------------------------------------------ */

/* Elementwise over n_tok rows of n (stride ld). The float4 variants run when every row start
 * is 16-byte aligned (pointers aligned, ld and n multiples of 4); the math is the same. */
__global__ void swiglu_kernel(const float *gate, const float *up, size_t ld, uint32_t n,
                              uint32_t n_tok, float *out) {
    const size_t total = (size_t)n * n_tok;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t e = idx / n * ld + idx % n;
        out[e] = kipp_om_silu(gate[e]) * up[e];
    }
}

__global__ void swiglu4_kernel(const float4 *gate, const float4 *up, size_t ld4, uint32_t n4,
                               uint32_t n_tok, float4 *out) {
    const size_t total = (size_t)n4 * n_tok;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t e = idx / n4 * ld4 + idx % n4;
        const float4 g = gate[e], u = up[e];
        out[e] = make_float4(kipp_om_silu(g.x) * u.x, kipp_om_silu(g.y) * u.y,
                             kipp_om_silu(g.z) * u.z, kipp_om_silu(g.w) * u.w);
    }
}

extern "C" int kipp_cuda_swiglu(const float *gate, const float *up, size_t ld, uint32_t n,
                                uint32_t n_tok, float *out, cudaStream_t stream) {
    const size_t total = (size_t)n * n_tok;
    if (total == 0) return 0;
    if (ld % 4 == 0 && n % 4 == 0 && aligned16(gate) && aligned16(up) && aligned16(out))
        swiglu4_kernel<<<grid_for(total / 4, 256), 256, 0, stream>>>(
            (const float4 *)gate, (const float4 *)up, ld / 4, n / 4, n_tok, (float4 *)out);
    else
        swiglu_kernel<<<grid_for(total, 256), 256, 0, stream>>>(gate, up, ld, n, n_tok, out);
    return launch_status();
}

__global__ void add_kernel(float *x, const float *y, size_t ld, uint32_t n, uint32_t n_tok) {
    const size_t total = (size_t)n * n_tok;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t e = idx / n * ld + idx % n;
        x[e] = x[e] + y[e];
    }
}

__global__ void add4_kernel(float4 *x, const float4 *y, size_t ld4, uint32_t n4, uint32_t n_tok) {
    const size_t total = (size_t)n4 * n_tok;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t e = idx / n4 * ld4 + idx % n4;
        float4 a = x[e];
        const float4 b = y[e];
        a.x += b.x;
        a.y += b.y;
        a.z += b.z;
        a.w += b.w;
        x[e] = a;
    }
}

extern "C" int kipp_cuda_add(float *x, const float *y, size_t ld, uint32_t n, uint32_t n_tok,
                             cudaStream_t stream) {
    const size_t total = (size_t)n * n_tok;
    if (total == 0) return 0;
    if (ld % 4 == 0 && n % 4 == 0 && aligned16(x) && aligned16(y))
        add4_kernel<<<grid_for(total / 4, 256), 256, 0, stream>>>((float4 *)x, (const float4 *)y,
                                                                  ld / 4, n / 4, n_tok);
    else
        add_kernel<<<grid_for(total, 256), 256, 0, stream>>>(x, y, ld, n, n_tok);
    return launch_status();
}

/* ---- biases ---------------------------------------------------------------------------------- */

__global__ void bias_kernel(float *x, size_t ld, const float *b, uint32_t n, uint32_t n_tok) {
    const size_t total = (size_t)n * n_tok;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t e = idx / n * ld + idx % n;
        x[e] = x[e] + b[idx % n];
    }
}

extern "C" int kipp_cuda_add_bias(float *x, size_t ld, const float *b, uint32_t n, uint32_t n_tok,
                                  cudaStream_t stream) {
    const size_t total = (size_t)n * n_tok;
    if (total == 0) return 0;
    bias_kernel<<<grid_for(total, 256), 256, 0, stream>>>(x, ld, b, n, n_tok);
    return launch_status();
}

/* ---- mixture of experts: routing and the weighted sum ------------------------------------- */

#define ROUTE_THREADS 512u /* 16 warps: a warp routes a token */

/* One token's choice by one warp, ops_math.h's kipp_om_moe_route split over the lanes: lane l
 * owns experts l, l + 32, ...; the max and each top-k pick are butterfly reductions (the max
 * and kipp_om_moe_pick are order-independent), expf and the division run per element, the
 * softmax sum and the weights run in lane 0 in expert / slot order, so every number is the
 * sequential version's; a pin (the gates' trace: kipp_om_moe_trace_pin, the record's slot of
 * the same token with the nearest probabilities) goes between the choice and the weights, in
 * lane 0. taken: bit m set when expert lane + 32 m is chosen (n <= 1024). */
__device__ void route_token_warp(float *p, uint32_t n, uint32_t k, int norm, uint32_t *chosen,
                                 float *w, const kipp_cuda_moe_pin *pin, uint32_t layer,
                                 uint32_t pos, int32_t token) {
    const uint32_t lane = threadIdx.x & 31u;
    float mx = -INFINITY;
    for (uint32_t e = lane; e < n; e += 32)
        if (p[e] > mx) mx = p[e];
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, mx, o);
        if (other > mx) mx = other;
    }
    for (uint32_t e = lane; e < n; e += 32) p[e] = expf(p[e] - mx);
    __syncwarp();
    float sum = 0.0f;
    if (lane == 0)
        for (uint32_t e = 0; e < n; e++) sum += p[e];
    sum = __shfl_sync(0xffffffffu, sum, 0);
    for (uint32_t e = lane; e < n; e += 32) p[e] /= sum;
    __syncwarp();
    uint32_t taken = 0;
    for (uint32_t i = 0; i < k; i++) {
        float bv = 0.0f;
        uint32_t bi = UINT32_MAX;
        for (uint32_t e = lane, m = 0; e < n; e += 32, m++)
            if (!(taken >> m & 1u) && kipp_om_moe_pick(p[e], e, bv, bi)) bv = p[e], bi = e;
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const uint32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (kipp_om_moe_pick(ov, oi, bv, bi)) bv = ov, bi = oi;
        }
        if (bi != UINT32_MAX && lane == (bi & 31u)) taken |= 1u << (bi >> 5);
        if (lane == 0) chosen[i] = bi;
    }
    if (lane != 0) return;
    if (pin) { /* margins are >= 0: their bits order as the floats */
        float margin = 0.0f;
        const int r =
            kipp_om_moe_trace_pin(&pin->rec, p, n, k, layer, pos, token, chosen, &margin);
        if (r) atomicAdd(&pin->counts[r - 1], 1u);
        if (r == 1) atomicMax(&pin->counts[2], __float_as_uint(margin));
    }
    kipp_om_moe_weights(p, k, norm, chosen, w);
}

/* One block for the whole batch, in phases split by barriers (global memory written before a
 * __syncthreads is seen by the block's other threads after it):
 *   1. warp w routes tokens w, w + 16, ... (route_token_warp);
 *   2. thread e counts expert e's pairs (e, e + 512, ...), thread 0 turns the counts into
 *      the groups' bounds;
 *   3. thread e walks the pairs in order and places its expert's: tokens ascending within a
 *      group, the order cpu's counting sort gives.
 * Phase 3 reads n_tok * k pairs per expert: tens of microseconds for a 512-token prefill of
 * 128 experts top-8, nothing beside its expert products; a decode step's few pairs cost
 * nothing. Nothing returns to the host. */
__global__ void __launch_bounds__(ROUTE_THREADS)
    moe_route_kernel(float *logits, size_t ld, uint32_t n_tok, uint32_t n_expert, uint32_t k,
                     int norm, uint32_t layer, const uint32_t *pos, const int32_t *tok,
                     kipp_cuda_moe_pin pin, int pinned, uint32_t *chosen, float *weight,
                     uint32_t *grp_off, int32_t *pair_tok, uint32_t *slot_at) {
    const uint32_t tid = threadIdx.x, n_pairs = n_tok * k;
    for (uint32_t t = tid >> 5; t < n_tok; t += blockDim.x >> 5)
        route_token_warp(logits + (size_t)t * ld, n_expert, k, norm, chosen + (size_t)t * k,
                         weight + (size_t)t * k, pinned ? &pin : NULL, layer,
                         pinned ? pos[t] : 0, pinned ? tok[t] : -1);
    __syncthreads();
    for (uint32_t e = tid; e < n_expert; e += blockDim.x) {
        uint32_t cnt = 0;
        for (uint32_t p = 0; p < n_pairs; p++) cnt += chosen[p] == e;
        grp_off[e + 1] = cnt;
    }
    __syncthreads();
    if (tid == 0) {
        grp_off[0] = 0;
        for (uint32_t e = 0; e < n_expert; e++) grp_off[e + 1] += grp_off[e];
    }
    __syncthreads();
    for (uint32_t e = tid; e < n_expert; e += blockDim.x) {
        uint32_t at = grp_off[e];
        for (uint32_t p = 0; p < n_pairs; p++)
            if (chosen[p] == e) {
                pair_tok[at] = (int32_t)(p / k);
                slot_at[p] = at++;
            }
    }
}

extern "C" int kipp_cuda_moe_route(float *logits, size_t ld, uint32_t n_tok, uint32_t n_expert,
                                   uint32_t k, int norm, uint32_t layer, const uint32_t *pos,
                                   const int32_t *tok, const kipp_cuda_moe_pin *pin,
                                   uint32_t *chosen, float *weight, uint32_t *grp_off,
                                   int32_t *pair_tok, uint32_t *slot_at, cudaStream_t stream) {
    if (n_expert == 0 || n_expert > 1024 || k == 0 || k > n_expert || ld < n_expert)
        return (int)cudaErrorInvalidValue; /* 1024: route_token_warp's taken mask */
    if (n_tok == 0) return 0;
    kipp_cuda_moe_pin none;
    memset(&none, 0, sizeof none);
    moe_route_kernel<<<1, ROUTE_THREADS, 0, stream>>>(logits, ld, n_tok, n_expert, k, norm, layer,
                                                      pos, tok, pin ? *pin : none, pin != NULL,
                                                      chosen, weight, grp_off, pair_tok, slot_at);
    return launch_status();
}

/* One thread per (token, element): the token's slots in order from 0, products and sums
 * rounded one at a time as cpu-ref adds them (kipp_om_mul_add), stored (the residual add is
 * kipp_cuda_add's, as cpu-ref's moe_sum then add). */
__global__ void moe_sum_kernel(float *out, size_t ldo, const float *ye, size_t ldy,
                               const float *weight, const uint32_t *slot_at, uint32_t n,
                               uint32_t n_tok, uint32_t k) {
    const size_t total = (size_t)n * n_tok;
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t t = idx / n, i = idx % n;
        float acc = 0.0f;
        for (uint32_t s = 0; s < k; s++)
            acc = kipp_om_mul_add(acc, weight[t * k + s],
                                  ye[(size_t)slot_at[t * k + s] * ldy + i]);
        out[t * ldo + i] = acc;
    }
}

extern "C" int kipp_cuda_moe_sum(float *out, size_t ldo, const float *ye, size_t ldy,
                                 const float *weight, const uint32_t *slot_at, uint32_t n,
                                 uint32_t n_tok, uint32_t k, cudaStream_t stream) {
    const size_t total = (size_t)n * n_tok;
    if (total == 0 || k == 0) return 0;
    moe_sum_kernel<<<grid_for(total, 256), 256, 0, stream>>>(out, ldo, ye, ldy, weight, slot_at,
                                                             n, n_tok, k);
    return launch_status();
}

/* ---- the fault switch -------------------------------------------------------------------- */

/* KIPP_FAULT mode and the storage's block count, read by attention's address math (only on
 * reads, as kipp_host_kv_row applies them). Zero in every production run. */
__device__ int g_kv_fault_mode;
__device__ uint32_t g_kv_fault_blocks;

extern "C" void kipp_cuda_set_fault(int mode, uint32_t n_blocks) {
    /* synchronous copies: the next attention launch sees them. Errors surface on that
     * launch's status (the copy failing means the context is unusable anyway). */
    (void)cudaMemcpyToSymbol(g_kv_fault_mode, &mode, sizeof mode);
    (void)cudaMemcpyToSymbol(g_kv_fault_blocks, &n_blocks, sizeof n_blocks);
}

/* ---- KV store ---------------------------------------------------------------------------- */

/* One block per token, the K and V rows of `layer` rounded through kv_type (ops_math.h's
 * conversions, bit-exact with host_kv.c). Writes are never faulted. */
__global__ void kv_store_kernel(void *kv, uint32_t kv_type, kipp_om_kv_geom g, uint32_t layer,
                                const float *k, size_t ld_k, const float *v, size_t ld_v,
                                const uint32_t *seq_of, const uint32_t *pos,
                                const uint32_t *tables, uint32_t max_blocks) {
    const uint32_t t = blockIdx.x;
    const uint32_t *table = tables + (size_t)seq_of[t] * max_blocks;
    const size_t ko = kipp_om_kv_offset(&g, table, layer, pos[t], 0, 0);
    const size_t vo = kipp_om_kv_offset(&g, table, layer, pos[t], 1, 0);
    for (uint32_t d = threadIdx.x; d < g.kv_dim; d += blockDim.x) {
        kipp_om_kv_store(kv_type, kv, ko + d, k[(size_t)t * ld_k + d]);
        kipp_om_kv_store(kv_type, kv, vo + d, v[(size_t)t * ld_v + d]);
    }
}

extern "C" int kipp_cuda_kv_store(void *kv, uint32_t kv_type, uint32_t n_layer,
                                  uint32_t block_size, uint32_t kv_dim, uint32_t layer,
                                  const float *k, size_t ld_k, const float *v, size_t ld_v,
                                  uint32_t n_tok, const uint32_t *seq_of, const uint32_t *pos,
                                  const uint32_t *tables, uint32_t max_blocks,
                                  cudaStream_t stream) {
    if (n_tok == 0) return 0;
    if (kipp_om_kv_elt(kv_type) == 0 || block_size == 0 || kv_dim == 0 || layer >= n_layer)
        return (int)cudaErrorInvalidValue;
    const kipp_om_kv_geom g = {n_layer, block_size, kv_dim, 1, 0};
    const unsigned threads = kv_dim >= 256 ? 256u : (kv_dim + 31u) / 32u * 32u;
    kv_store_kernel<<<n_tok, threads, 0, stream>>>(kv, kv_type, g, layer, k, ld_k, v, ld_v,
                                                   seq_of, pos, tables, max_blocks);
    return launch_status();
}

/* ---- attention ----------------------------------------------------------------------------
 *
 * One kernel serves decode and prefill. A thread block owns a set of query ROWS — up to QT
 * consecutive query tokens x a chunk of GC query heads of one KV head (GQA: the heads sharing
 * a KV head sit in one block, so each K/V row is read once for all of them) — and one SPLIT
 * of the context. It walks its split in tiles of T = 32 positions: the tile's K rows are
 * converted to f32 in shared memory, scores for every (row, position) pair are formed, an
 * online softmax (running max m, running sum l, rescale factor alpha) updates each row, then
 * the V rows replace the K rows and the unnormalized output accumulates acc = acc * alpha +
 * sum_j p_j v_j. Causality is per row: a position counts when <= the row's token position.
 *
 * Tokens of one block must share a block table; the block walks its QT tokens in runs of
 * equal seq_of (the usual batch holds each sequence's tokens contiguously, so a prefill
 * tile is one run; decode uses QT = 1).
 *
 * Splits (flash-decoding): with several splits each block writes (m, l, acc) of its rows to
 * scratch and a merge kernel combines them: M = max m_s, out = sum acc_s e^(m_s - M) /
 * sum l_s e^(m_s - M). With one split the block writes acc / l directly. The last split
 * runs to the row's position whatever max_ctx says, so a position past max_ctx is still
 * attended (just unsplit).
 *
 * Numerics vs cpu-ref: the same scores (f32 dot then * 1/sqrtf(D); FMA contraction in the
 * dot is the one difference), one global max per row instead of per tile (rescaling by
 * alpha is exact up to expf's rounding), and sum e v / sum e instead of sum (e / sum) v:
 * agreement to a few f32 ulps times the context's log, ~1e-6 relative. */

#define ATT_T 32u        /* KV positions per tile (= the warp size: softmax is one warp/row) */
#define ATT_THREADS 128u /* 4 warps */
#define ATT_SMEM 49152u  /* the default dynamic shared memory limit: no opt-in attribute */

typedef struct {
    const float *q;
    size_t ld_q;
    const void *kv;
    uint32_t kv_type, layer;
    kipp_om_kv_geom geom;
    uint32_t n_head, n_kv_head, head_dim, n_tok;
    const uint32_t *seq_of, *pos, *tables;
    uint32_t max_blocks;
    uint32_t n_split, split_len, qt, gc, n_chunks;
    float scale;
    float *part_acc; /* [n_split][n_tok][n_head][head_dim] */
    float *part_ml;  /* [n_split][n_tok][n_head][2]: m, l */
    float *out;
    size_t ld_out;
} att_args;

typedef struct {
    uint32_t n_split, split_len;
} att_plan;

/* How a call splits its context. Decode (<= 16 query tokens) splits into chunks of >= 128
 * positions, at most 128 of them, so that one token's KV heads still fill the GPU; prefill
 * has query tiles enough to fill it and splits only long contexts, into at most 4. */
static att_plan att_plan_for(uint32_t n_tok, uint32_t max_ctx) {
    const uint32_t ctx = max_ctx ? max_ctx : 1;
    uint32_t len;
    if (n_tok <= 16) {
        len = (ctx + 127u) / 128u;
        len = (len + ATT_T - 1) / ATT_T * ATT_T;
        if (len < 128u) len = 128u;
    } else {
        len = (ctx + 3u) / 4u;
        len = (len + ATT_T - 1) / ATT_T * ATT_T;
        if (len < 2048u) len = 2048u;
    }
    const att_plan p = {(ctx + len - 1) / len, len};
    return p;
}

/* Shared memory of a block with R rows: 2 T offsets (size_t), q and acc [R][D], the K/V tile
 * [T][D + 1] (the +1 staggers banks: threads of a warp read different positions of one
 * dimension in the score loop), p [R][T], m, l, alpha, limit [R]. */
static size_t att_smem(uint32_t rows, uint32_t d) {
    return 2 * ATT_T * sizeof(size_t) +
           sizeof(float) * ((size_t)2 * rows * d + (size_t)ATT_T * (d + 1) +
                            (size_t)rows * ATT_T + 4 * (size_t)rows);
}

static uint32_t att_max_rows(uint32_t d) {
    const size_t fixed = att_smem(0, d);
    if (fixed >= ATT_SMEM) return 0;
    return (uint32_t)((ATT_SMEM - fixed) / (sizeof(float) * (2 * (size_t)d + ATT_T + 4)));
}

__global__ void __launch_bounds__(ATT_THREADS) attention_kernel(att_args a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const uint32_t D = a.head_dim, R = a.qt * a.gc, tid = threadIdx.x;
    size_t *koff = (size_t *)smem, *voff = koff + ATT_T;
    float *qs = (float *)(voff + ATT_T);
    float *acc = qs + (size_t)R * D;
    float *kvs = acc + (size_t)R * D;
    float *ps = kvs + (size_t)ATT_T * (D + 1);
    float *ms = ps + (size_t)R * ATT_T, *ls = ms + R, *als = ls + R;
    uint32_t *lim = (uint32_t *)(als + R); /* row's positions end (pos + 1); 0 = inactive */

    const uint32_t split = blockIdx.x, kvh = blockIdx.y / a.n_chunks;
    const uint32_t group = a.n_head / a.n_kv_head, chunk = blockIdx.y % a.n_chunks;
    const uint32_t h0 = kvh * group + chunk * a.gc;
    const uint32_t gcount = min(a.gc, group - chunk * a.gc);
    const uint32_t t_begin = blockIdx.z * a.qt, t_end = min(t_begin + a.qt, a.n_tok);
    kipp_om_kv_geom g = a.geom;
    g.fault = g_kv_fault_mode;
    g.n_blocks = g_kv_fault_blocks ? g_kv_fault_blocks : 1u;
    const size_t head_off = (size_t)kvh * D;

    for (uint32_t run = t_begin; run < t_end;) {
        const uint32_t seq = a.seq_of[run];
        uint32_t run_end = run + 1, maxpos = a.pos[run];
        while (run_end < t_end && a.seq_of[run_end] == seq) maxpos = max(maxpos, a.pos[run_end++]);
        const uint32_t *table = a.tables + (size_t)seq * a.max_blocks;
        const uint32_t lo = split * a.split_len;
        const uint32_t hi = split + 1 == a.n_split ? maxpos + 1 : min(lo + a.split_len, maxpos + 1);

        for (uint32_t r = tid; r < R; r += ATT_THREADS) {
            const uint32_t t = t_begin + r / a.gc, hh = r % a.gc;
            lim[r] = (t >= run && t < run_end && hh < gcount) ? a.pos[t] + 1 : 0;
            ms[r] = -INFINITY;
            ls[r] = 0.0f;
        }
        for (uint32_t i = tid; i < R * D; i += ATT_THREADS) {
            const uint32_t r = i / D, d = i % D, t = t_begin + r / a.gc, hh = r % a.gc;
            const bool on = t >= run && t < run_end && hh < gcount;
            qs[i] = on ? a.q[(size_t)t * a.ld_q + (size_t)(h0 + hh) * D + d] : 0.0f;
            acc[i] = 0.0f;
        }
        __syncthreads(); /* lim, m, l are read by other threads (and an empty split's rows) */
        for (uint32_t j0 = lo; j0 < hi; j0 += ATT_T) {
            const uint32_t nj = min(ATT_T, hi - j0);
            if (tid < nj) {
                koff[tid] = kipp_om_kv_offset(&g, table, a.layer, j0 + tid, 0, 1) + head_off;
                voff[tid] = kipp_om_kv_offset(&g, table, a.layer, j0 + tid, 1, 1) + head_off;
            }
            __syncthreads();
            for (uint32_t i = tid; i < nj * D; i += ATT_THREADS) {
                const uint32_t j = i / D, d = i % D;
                kvs[j * (D + 1) + d] = kipp_om_kv_load(a.kv_type, a.kv, koff[j] + d);
            }
            __syncthreads();
            for (uint32_t i = tid; i < R * ATT_T; i += ATT_THREADS) {
                const uint32_t r = i / ATT_T, j = i % ATT_T;
                float s = -INFINITY;
                if (j < nj && j0 + j < lim[r]) {
                    const float *qr = qs + (size_t)r * D, *kr = kvs + (size_t)j * (D + 1);
                    float dot = 0.0f;
                    for (uint32_t d = 0; d < D; d++) dot += qr[d] * kr[d];
                    s = dot * a.scale;
                }
                ps[i] = s;
            }
            __syncthreads();
            /* online softmax, one warp per row; meanwhile the other threads' V loads can
             * overwrite the K tile (nothing below reads it until the next barrier) */
            const uint32_t lane = tid & 31u;
            for (uint32_t r = tid >> 5; r < R; r += ATT_THREADS / 32u) {
                const float s = ps[r * ATT_T + lane];
                float mx = s;
                for (int o = 16; o > 0; o >>= 1)
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                const float m_old = ms[r], m_new = fmaxf(m_old, mx);
                float e = 0.0f, alpha = 1.0f;
                if (m_new != -INFINITY) { /* a row with no position yet stays empty */
                    e = expf(s - m_new);
                    alpha = expf(m_old - m_new);
                }
                float sum = e;
                for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
                ps[r * ATT_T + lane] = e;
                __syncwarp();
                if (lane == 0) {
                    ls[r] = ls[r] * alpha + sum;
                    ms[r] = m_new;
                    als[r] = alpha;
                }
            }
            for (uint32_t i = tid; i < nj * D; i += ATT_THREADS) {
                const uint32_t j = i / D, d = i % D;
                kvs[j * (D + 1) + d] = kipp_om_kv_load(a.kv_type, a.kv, voff[j] + d);
            }
            __syncthreads();
            for (uint32_t i = tid; i < R * D; i += ATT_THREADS) {
                const uint32_t r = i / D, d = i % D;
                const float *pr = ps + (size_t)r * ATT_T;
                float o = acc[i] * als[r];
                for (uint32_t j = 0; j < nj; j++) o += pr[j] * kvs[j * (D + 1) + d];
                acc[i] = o;
            }
            __syncthreads();
        }
        for (uint32_t i = tid; i < R * D; i += ATT_THREADS) {
            const uint32_t r = i / D, d = i % D;
            if (!lim[r]) continue;
            const uint32_t t = t_begin + r / a.gc, h = h0 + r % a.gc;
            if (a.n_split == 1) {
                a.out[(size_t)t * a.ld_out + (size_t)h * D + d] = acc[i] / ls[r];
            } else {
                const size_t row = ((size_t)split * a.n_tok + t) * a.n_head + h;
                a.part_acc[row * D + d] = acc[i];
                if (d == 0) {
                    a.part_ml[row * 2] = ms[r];
                    a.part_ml[row * 2 + 1] = ls[r];
                }
            }
        }
        __syncthreads(); /* the next run reuses every shared array */
        run = run_end;
    }
}

/* One block per (head, token): combines the splits' partial results. A split that saw no
 * position of the row (m = -inf, l = 0) weighs nothing. */
__global__ void attention_merge_kernel(const float *part_acc, const float *part_ml,
                                       uint32_t n_split, uint32_t n_tok, uint32_t n_head,
                                       uint32_t D, float *out, size_t ld_out) {
    const uint32_t h = blockIdx.x, t = blockIdx.y;
    const size_t stride = (size_t)n_tok * n_head, row0 = (size_t)t * n_head + h;
    float m = -INFINITY;
    for (uint32_t s = 0; s < n_split; s++) m = fmaxf(m, part_ml[(row0 + s * stride) * 2]);
    float l = 0.0f;
    for (uint32_t s = 0; s < n_split; s++) {
        const float ls = part_ml[(row0 + s * stride) * 2 + 1];
        if (ls > 0.0f) l += ls * expf(part_ml[(row0 + s * stride) * 2] - m);
    }
    for (uint32_t d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (uint32_t s = 0; s < n_split; s++) {
            const size_t row = row0 + s * stride;
            if (part_ml[row * 2 + 1] > 0.0f)
                o += part_acc[row * D + d] * expf(part_ml[row * 2] - m);
        }
        out[(size_t)t * ld_out + (size_t)h * D + d] = o / l;
    }
}

/* The scratch is sized for the worst plan of any call with at most n_tok tokens and
 * max_ctx context: decode's many splits of up to 16 tokens, or prefill's few of n_tok. */
extern "C" size_t kipp_cuda_attention_scratch_bytes(uint32_t n_tok, uint32_t n_head,
                                                    uint32_t head_dim, uint32_t max_ctx) {
    const att_plan dec = att_plan_for(1, max_ctx), pre = att_plan_for(17, max_ctx);
    size_t units = 0; /* split x token rows */
    if (dec.n_split > 1) units = (size_t)dec.n_split * (n_tok < 16 ? n_tok : 16);
    if (n_tok > 16 && pre.n_split > 1 && (size_t)pre.n_split * n_tok > units)
        units = (size_t)pre.n_split * n_tok;
    return units * n_head * ((size_t)head_dim + 2) * sizeof(float);
}

extern "C" int kipp_cuda_attention(const float *q, size_t ld_q, const void *kv, uint32_t kv_type,
                                   uint32_t n_layer, uint32_t block_size, uint32_t kv_dim,
                                   uint32_t layer, uint32_t n_head, uint32_t n_kv_head,
                                   uint32_t head_dim, uint32_t n_tok, const uint32_t *seq_of,
                                   const uint32_t *pos, const uint32_t *tables,
                                   uint32_t max_blocks, uint32_t max_ctx, void *scratch,
                                   float *out, size_t ld_out, cudaStream_t stream) {
    if (n_tok == 0) return 0;
    const uint32_t max_rows = att_max_rows(head_dim);
    if (kipp_om_kv_elt(kv_type) == 0 || n_kv_head == 0 || n_head % n_kv_head != 0 ||
        head_dim == 0 || (size_t)n_kv_head * head_dim > kv_dim || block_size == 0 ||
        layer >= n_layer || max_rows == 0)
        return (int)cudaErrorInvalidValue;
    const att_plan plan = att_plan_for(n_tok, max_ctx);
    if (plan.n_split > 1 && !scratch) return (int)cudaErrorInvalidValue;
    const uint32_t group = n_head / n_kv_head;
    att_args a;
    a.q = q;
    a.ld_q = ld_q;
    a.kv = kv;
    a.kv_type = kv_type;
    a.layer = layer;
    a.geom.n_layer = n_layer;
    a.geom.block_size = block_size;
    a.geom.kv_dim = kv_dim;
    a.geom.n_blocks = 1;
    a.geom.fault = 0;
    a.n_head = n_head;
    a.n_kv_head = n_kv_head;
    a.head_dim = head_dim;
    a.n_tok = n_tok;
    a.seq_of = seq_of;
    a.pos = pos;
    a.tables = tables;
    a.max_blocks = max_blocks;
    a.n_split = plan.n_split;
    a.split_len = plan.split_len;
    a.gc = group < max_rows ? group : max_rows;
    a.n_chunks = (group + a.gc - 1) / a.gc;
    a.qt = 1;
    if (n_tok > 16) { /* prefill: as many query tokens per block as shared memory holds */
        a.qt = max_rows / a.gc;
        if (a.qt > 16) a.qt = 16;
        if (a.qt == 0) a.qt = 1;
    }
    a.scale = 1.0f / sqrtf((float)head_dim);
    a.part_acc = (float *)scratch;
    a.part_ml = a.part_acc + (size_t)plan.n_split * n_tok * n_head * head_dim;
    a.out = out;
    a.ld_out = ld_out;
    const dim3 grid(plan.n_split, n_kv_head * a.n_chunks, (n_tok + a.qt - 1) / a.qt);
    attention_kernel<<<grid, ATT_THREADS, att_smem(a.qt * a.gc, head_dim), stream>>>(a);
    if (plan.n_split > 1) {
        const unsigned threads = head_dim >= 128 ? 128u : (head_dim + 31u) / 32u * 32u;
        attention_merge_kernel<<<dim3(n_head, n_tok), threads, 0, stream>>>(
            a.part_acc, a.part_ml, plan.n_split, n_tok, n_head, head_dim, out, ld_out);
    }
    return launch_status();
}
