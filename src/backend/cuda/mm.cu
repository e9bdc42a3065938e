/* mm.cu — the cuda backend's weight kernels (the "weights" half of kernels.h): y = x W^T
 * straight from the GGUF block layout, and the embedding row lookup. Decode (n_tok <= 8)
 * runs a matrix-vector kernel, exact f32 math on weights dequantized in registers; larger
 * n_tok runs one templated tensor-core GEMM (wmma bf16 16x16x16, f32 accumulators) on tiles
 * of W dequantized to bf16 in shared memory. Every type's block decoding is quant_math.h's,
 * the code the host unit suite checks bit for bit against kipp_dequantize_row().
 * A mixture-of-experts layer's expert matrices run through the same two kernels
 * (kipp_cuda_matmul_experts): each row of the product finds its expert from the group bounds
 * the routing kernel left in device memory (the matrix-vector kernel), or each expert's group
 * is a layer of one GEMM grid, so no launch depends on the routing's outcome.
 * Does not: quantize activations (decode keeps x in f32), or use sm_90-only features.
 *
 * Precision of the GEMM: the same backend's decode (matvec) and recomputation (GEMM) must
 * agree to NMSE 1e-5 on logits after 28 layers, which plain bf16 inputs (2^-9 relative per
 * product) do not give. So x = xh + xl and W = wh + wl (two bf16 planes each, quant_math.h's
 * kq_bf16_split) and the accumulators sum xh*wh + xl*wh + xh*wl: the dropped xl*wl and the
 * two planes' rounding leave ~3 * 2^-18 relative per product, and each bf16 product is exact
 * in the f32 accumulator. BF16 weights are exact in one plane (wl = 0), so their xh*wl term
 * is not computed. */
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_math.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <stdint.h>

/* Every type with kernels here: one template instance per entry. */
#define KIPP_MM_TYPES(X)                                                                       \
    X(KQ_F32) X(KQ_F16) X(KQ_BF16) X(KQ_Q8_0) X(KQ_Q4_0) X(KQ_Q4_1) X(KQ_Q5_0) X(KQ_Q5_1)    \
    X(KQ_IQ4_NL) X(KQ_Q2_K) X(KQ_Q3_K) X(KQ_Q4_K) X(KQ_Q5_K) X(KQ_Q6_K) X(KQ_IQ4_XS)

/* n_tok at or below which kipp_cuda_matmul runs the matrix-vector kernel: each weight row is
 * read once for all tokens, and up to 8 accumulators per lane stay in registers. */
#define MV_MAX_TOK 8
#define MV_WARPS 4 /* output rows per 128-thread block */

/* GEMM tile: BM tokens x BN outputs per block, BK inputs per step; four warps, each a 32x32
 * quarter as 2x2 wmma fragments. LDS pads a shared row to 40 bf16 (80 bytes) so the
 * fragment loads of consecutive rows fall in different banks; wmma wants ld % 8 == 0 and
 * 32-byte aligned fragment pointers, which 16-row (1280-byte) and 16-column (32-byte)
 * offsets keep. BK = 32 divides every block size (8, 32, 256), so a step never splits a
 * group of 8. */
#define BM 64
#define BN 64
#define BK 32
#define LDS (BK + 8)

/* Group k of 8 elements of a row: block k / gpb, group k % gpb inside it (the templates fold
 * the layout per type). a16: the row starts 16-byte aligned and its blocks stay so (checked
 * at launch): then the float types and Q4_K/Q5_K read their group with vector loads into
 * quant_math.h's word decoders (the same functions the byte path ends in, so host-checked);
 * every other type, or an unaligned matrix, reads bytes. */
template <uint32_t T> __device__ __forceinline__ void deq_group(const uint8_t *row, uint32_t k,
                                                                 bool a16, float *o) {
    constexpr uint32_t gpb = T == KQ_F32 || T == KQ_F16 || T == KQ_BF16 ? 1
                             : T == KQ_Q2_K || T == KQ_Q3_K || T == KQ_Q4_K || T == KQ_Q5_K ||
                                       T == KQ_Q6_K || T == KQ_IQ4_XS
                                 ? 32
                                 : 4;
    const uint8_t *b = row + (size_t)(k / gpb) * (size_t)kq_block_bytes(T);
    const int g = (int)(k % gpb);
    if (T == KQ_F32 && a16) {
        const uint4 v0 = __ldg(reinterpret_cast<const uint4 *>(b));
        const uint4 v1 = __ldg(reinterpret_cast<const uint4 *>(b) + 1);
        const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
        kq_f32_8w(w, o);
    } else if ((T == KQ_F16 || T == KQ_BF16) && a16) {
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(b));
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        if (T == KQ_F16) kq_f16_8w(w, o);
        else kq_bf16_8w(w, o);
    } else if ((T == KQ_Q4_K || T == KQ_Q5_K) && a16) {
        const uint4 h = __ldg(reinterpret_cast<const uint4 *>(b));
        const uint32_t hdr[4] = {h.x, h.y, h.z, h.w};
        const int l0 = 8 * (g & 3);
        if (T == KQ_Q4_K) {
            const uint2 q = __ldg(reinterpret_cast<const uint2 *>(b + 16 + 32 * (g >> 3) + l0));
            kq_q4_k_8w(hdr, q.x, q.y, g, o);
        } else {
            const uint2 q = __ldg(reinterpret_cast<const uint2 *>(b + 48 + 32 * (g >> 3) + l0));
            const uint2 qh = __ldg(reinterpret_cast<const uint2 *>(b + 16 + l0));
            kq_q5_k_8w(hdr, qh.x, qh.y, q.x, q.y, g, o);
        }
    } else {
        kq_dequant8(T, b, g, o);
    }
}

__device__ __forceinline__ const __nv_bfloat16 *bf(const uint16_t *p) {
    return reinterpret_cast<const __nv_bfloat16 *>(p);
}

/* ---- decode: matrix-vector ------------------------------------------------------------------ */

/* One warp per output row o; lane l takes groups l, l + 32, ... of the row, so a warp's loads
 * cover one contiguous stretch of the row per iteration (one 256-element block, or 8 small
 * blocks). Each group is decoded once and multiplied into all NT tokens (x read through the
 * cache: it is shared by every row). Per lane an f32 FMA chain of 8 ceil(n_in / 256) terms,
 * then a 5-level butterfly: the error bound of tests/cuda/ops_mm.c. X4: x and ldx 16-byte aligned,
 * so a group's 8 inputs are two float4 loads. A token's result depends on its own x only (NT
 * accumulators side by side), never on NT. */
template <uint32_t T, int NT, bool X4>
__device__ __forceinline__ void matvec_rows(const uint8_t *__restrict__ w, size_t row_bytes,
                                            bool a16, uint32_t n_in, uint32_t n_out,
                                            const float *__restrict__ x, size_t ldx,
                                            float *__restrict__ y, size_t ldy) {
    const uint32_t lane = threadIdx.x & 31u;
    const uint32_t o = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (o >= n_out) return; /* whole warps leave together: the shuffles below stay full */
    const uint8_t *row = w + (size_t)o * row_bytes;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    const uint32_t n_groups = n_in / 8;
    for (uint32_t k = lane; k < n_groups; k += 32) {
        float wv[8];
        deq_group<T>(row, k, a16, wv);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const float *xp = x + (size_t)t * ldx + (size_t)k * 8;
            float xv[8];
            if (X4) {
                const float4 a = __ldg(reinterpret_cast<const float4 *>(xp));
                const float4 b = __ldg(reinterpret_cast<const float4 *>(xp) + 1);
                xv[0] = a.x, xv[1] = a.y, xv[2] = a.z, xv[3] = a.w;
                xv[4] = b.x, xv[5] = b.y, xv[6] = b.z, xv[7] = b.w;
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++) xv[i] = __ldg(xp + i);
            }
#pragma unroll
            for (int i = 0; i < 8; i++) acc[t] = fmaf(wv[i], xv[i], acc[t]);
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float v = acc[t];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) y[(size_t)t * ldy + o] = v;
    }
}

/* Block row blockIdx.y takes tokens NT * blockIdx.y .. + NT - 1. */
template <uint32_t T, int NT, bool X4>
__global__ void __launch_bounds__(32 * MV_WARPS)
    k_matvec(const uint8_t *__restrict__ w, size_t row_bytes, bool a16, uint32_t n_in,
             uint32_t n_out, const float *__restrict__ x, size_t ldx, float *__restrict__ y,
             size_t ldy) {
    const size_t t0 = (size_t)blockIdx.y * NT;
    matvec_rows<T, NT, X4>(w, row_bytes, a16, n_in, n_out, x + t0 * ldx, ldx, y + t0 * ldy, ldy);
}

/* Row blockIdx.y of an expert product (kipp_cuda_matmul_experts): its expert is the group
 * holding it, the last e with grp_off[e] <= r (a binary search: empty groups share their
 * bound with the next one); its input row x_rows[r] (or r). */
template <uint32_t T, bool X4>
__global__ void __launch_bounds__(32 * MV_WARPS)
    k_matvec_experts(const uint8_t *__restrict__ w, size_t expert_bytes, size_t row_bytes,
                     bool a16, uint32_t n_in, uint32_t n_out, const float *__restrict__ x,
                     size_t ldx, const int32_t *__restrict__ x_rows,
                     const uint32_t *__restrict__ grp_off, uint32_t n_expert,
                     float *__restrict__ y, size_t ldy) {
    const uint32_t r = blockIdx.y;
    uint32_t lo = 0, hi = n_expert; /* grp_off[lo] <= r < grp_off[hi] */
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (grp_off[mid] <= r) lo = mid;
        else hi = mid;
    }
    const size_t xr = x_rows ? (size_t)x_rows[r] : (size_t)r;
    matvec_rows<T, 1, X4>(w + (size_t)lo * expert_bytes, row_bytes, a16, n_in, n_out,
                          x + xr * ldx, ldx, y + (size_t)r * ldy, ldy);
}

/* n_tok tokens in block rows of MV_MAX_TOK (grid.y), then the rest in one launch of its own
 * token count; a decode call (n_tok <= MV_MAX_TOK) is one launch of one block row. */
template <uint32_t T, bool X4>
static void launch_matvec(const uint8_t *w, size_t row_bytes, bool a16, uint32_t n_in,
                          uint32_t n_out,
                          const float *x, size_t ldx, uint32_t n_tok, float *y, size_t ldy,
                          cudaStream_t s) {
    const uint32_t gx = (n_out + MV_WARPS - 1) / MV_WARPS, full = n_tok / MV_MAX_TOK;
    const dim3 block(32 * MV_WARPS);
    if (full)
        k_matvec<T, MV_MAX_TOK, X4><<<dim3(gx, full), block, 0, s>>>(w, row_bytes, a16, n_in,
                                                                      n_out, x, ldx, y, ldy);
    x += (size_t)full * MV_MAX_TOK * ldx;
    y += (size_t)full * MV_MAX_TOK * ldy;
    switch (n_tok % MV_MAX_TOK) {
#define MV_CASE(N)                                                                              \
    case N:                                                                                     \
        k_matvec<T, N, X4><<<gx, block, 0, s>>>(w, row_bytes, a16, n_in, n_out, x, ldx, y, ldy); \
        break;
        MV_CASE(1) MV_CASE(2) MV_CASE(3) MV_CASE(4) MV_CASE(5) MV_CASE(6) MV_CASE(7)
#undef MV_CASE
    default: break;
    }
}

/* ---- prefill: tensor-core GEMM ----------------------------------------------------------- */

/* The activation planes: xh[t][i] = bf16(x), xl[t][i] = bf16(x - xh), dense [n_tok][n_in];
 * row t of x is rows[t] when rows is given (the expert products' gathered inputs). */
__global__ void k_split_x(const float *__restrict__ x, size_t ldx, const int32_t *__restrict__ rows,
                          uint32_t n_in, uint32_t n_tok, uint16_t *__restrict__ xh,
                          uint16_t *__restrict__ xl) {
    const size_t n = (size_t)n_in * n_tok;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / n_in, c = i % n_in, src = rows ? (size_t)rows[t] : t;
        uint16_t h, l;
        kq_bf16_split(x[src * ldx + c], &h, &l);
        xh[i] = h;
        xl[i] = l;
    }
}

using namespace nvcuda;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> frag_b;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* y[t][o] for a BM x BN tile. Per BK step: the x planes' tile is copied (16-byte loads; rows
 * past n_tok are zeros), W's BN x BK tile is dequantized group by group and split into two
 * bf16 planes (rows past n_out are zeros: never read), then each warp runs 2 (or 3) wmma per
 * fragment pair and k-half. W [o][i] row-major is, read as BK x BN, col-major: matrix_b.
 * With grp_off (kipp_cuda_matmul_experts) the grid's z is the expert: its tile rows are
 * those of its group, grp_off[e] .. grp_off[e + 1] - 1 of the planes and of y, times the
 * matrix at w + e * w_stride; a tile past the group's end returns before any barrier. */
template <uint32_t T>
__global__ void __launch_bounds__(128)
    k_gemm(const uint8_t *__restrict__ w, size_t row_bytes, bool a16, uint32_t n_in, uint32_t n_out,
           const uint16_t *__restrict__ xh, const uint16_t *__restrict__ xl, uint32_t n_tok,
           float *__restrict__ y, size_t ldy, const uint32_t *__restrict__ grp_off,
           size_t w_stride) {
    constexpr bool split_w = T != KQ_BF16;
    __shared__ __align__(32) uint16_t s_xh[BM * LDS], s_xl[BM * LDS];
    __shared__ __align__(32) uint16_t s_wh[BN * LDS], s_wl[split_w ? BN * LDS : 8];
    __shared__ __align__(32) float s_c[4][16 * 16];
    const uint32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31u;
    const uint32_t t0 = blockIdx.y * BM, o0 = blockIdx.x * BN;
    if (grp_off) {
        const uint32_t r0 = grp_off[blockIdx.z], cnt = grp_off[blockIdx.z + 1] - r0;
        if (t0 >= cnt) return; /* the whole block: uniform */
        w += (size_t)blockIdx.z * w_stride;
        xh += (size_t)r0 * n_in;
        xl += (size_t)r0 * n_in;
        y += (size_t)r0 * ldy;
        n_tok = cnt;
    }
    const uint32_t wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
    frag_c acc[2][2];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 2; b++) wmma::fill_fragment(acc[a][b], 0.0f);

    for (uint32_t k0 = 0; k0 < n_in; k0 += BK) {
        /* x tile: BM rows x BK bf16 = 4 uint4 per row per plane, 256 per plane */
        for (uint32_t c = tid; c < BM * (BK / 8); c += 128) {
            const uint32_t r = c / (BK / 8), q = c % (BK / 8);
            uint4 vh = make_uint4(0, 0, 0, 0), vl = vh;
            if (t0 + r < n_tok && k0 + 8 * q < n_in) {
                const size_t off = (size_t)(t0 + r) * n_in + k0 + 8 * q;
                vh = *reinterpret_cast<const uint4 *>(xh + off);
                vl = *reinterpret_cast<const uint4 *>(xl + off);
            }
            *reinterpret_cast<uint4 *>(s_xh + r * LDS + 8 * q) = vh;
            *reinterpret_cast<uint4 *>(s_xl + r * LDS + 8 * q) = vl;
        }
        /* W tile: BN rows x BK/8 groups, each decoded once and split */
        for (uint32_t c = tid; c < BN * (BK / 8); c += 128) {
            const uint32_t r = c / (BK / 8), q = c % (BK / 8);
            uint32_t ph[4] = {0, 0, 0, 0}, pl[4] = {0, 0, 0, 0};
            if (o0 + r < n_out && k0 + 8 * q < n_in) {
                float v[8];
                deq_group<T>(w + (size_t)(o0 + r) * row_bytes, k0 / 8 + q, a16, v);
#pragma unroll
                for (int i = 0; i < 8; i += 2) {
                    uint16_t h0, l0, h1, l1;
                    kq_bf16_split(v[i], &h0, &l0);
                    kq_bf16_split(v[i + 1], &h1, &l1);
                    ph[i / 2] = (uint32_t)h0 | (uint32_t)h1 << 16;
                    pl[i / 2] = (uint32_t)l0 | (uint32_t)l1 << 16;
                }
            }
            *reinterpret_cast<uint4 *>(s_wh + r * LDS + 8 * q) =
                make_uint4(ph[0], ph[1], ph[2], ph[3]);
            if (split_w)
                *reinterpret_cast<uint4 *>(s_wl + r * LDS + 8 * q) =
                    make_uint4(pl[0], pl[1], pl[2], pl[3]);
        }
        __syncthreads();
        /* This step's products go to a fresh fragment, added to the running sums with IEEE
         * f32 additions: tensor cores may truncate when they add into an accumulator
         * (relative ~2^-23 per mma), which chained over n_in / 16 mma steps would bias a long
         * dot product (~2^-23 n_in / 16 relative, 1e-4 at n_in 16384); here only the 6 mma of
         * one step truncate, relative to the step's own partial sum. */
        frag_c part[2][2];
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int b = 0; b < 2; b++) wmma::fill_fragment(part[a][b], 0.0f);
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            frag_a ah[2], al[2];
            frag_b bh[2], bl[2];
#pragma unroll
            for (int a = 0; a < 2; a++) {
                const uint32_t off = (wm + 16 * a) * LDS + kk;
                wmma::load_matrix_sync(ah[a], bf(s_xh + off), LDS);
                wmma::load_matrix_sync(al[a], bf(s_xl + off), LDS);
            }
#pragma unroll
            for (int b = 0; b < 2; b++) {
                const uint32_t off = (wn + 16 * b) * LDS + kk;
                wmma::load_matrix_sync(bh[b], bf(s_wh + off), LDS);
                if (split_w) wmma::load_matrix_sync(bl[b], bf(s_wl + off), LDS);
            }
#pragma unroll
            for (int a = 0; a < 2; a++)
#pragma unroll
                for (int b = 0; b < 2; b++) {
                    /* small terms first, so the big one lands on the smallest sum */
                    if (split_w) wmma::mma_sync(part[a][b], ah[a], bl[b], part[a][b]);
                    wmma::mma_sync(part[a][b], al[a], bh[b], part[a][b]);
                    wmma::mma_sync(part[a][b], ah[a], bh[b], part[a][b]);
                }
        }
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int b = 0; b < 2; b++)
#pragma unroll
                for (int i = 0; i < acc[a][b].num_elements; i++) acc[a][b].x[i] += part[a][b].x[i];
        __syncthreads();
    }
    /* through shared memory, so rows past n_tok and columns past n_out are simply not written */
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 2; b++) {
            wmma::store_matrix_sync(s_c[warp], acc[a][b], 16, wmma::mem_row_major);
            __syncwarp();
            for (uint32_t e = lane; e < 256; e += 32) {
                const uint32_t t = t0 + wm + 16 * a + e / 16, o = o0 + wn + 16 * b + e % 16;
                if (t < n_tok && o < n_out) y[(size_t)t * ldy + o] = s_c[warp][e];
            }
            __syncwarp();
        }
}

/* ---- get_rows ------------------------------------------------------------------------------- */

/* out[t][8k .. 8k+7] = group k of row ids[t]: the very decoding of the host oracle, so the
 * rows are bit-exact. */
template <uint32_t T>
__global__ void k_get_rows(const uint8_t *__restrict__ w, size_t row_bytes, bool a16, uint32_t n,
                           const int32_t *__restrict__ ids, uint32_t n_tok,
                           float *__restrict__ out, size_t ldo) {
    const uint32_t k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n / 8) return;
    for (uint32_t t = blockIdx.y; t < n_tok; t += gridDim.y) { /* grid.y is capped at 65535 */
        float v[8];
        deq_group<T>(w + (size_t)ids[t] * row_bytes, k, a16, v);
        float *o = out + (size_t)t * ldo + (size_t)k * 8;
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] = v[i];
    }
}

/* ---- launchers ------------------------------------------------------------------------------ */

static size_t row_bytes_of(uint32_t type, uint32_t n) {
    return (size_t)(n / (uint32_t)kq_block_elems(type)) * (size_t)kq_block_bytes(type);
}

/* Every row (hence, for the float types and Q4_K/Q5_K, every block) starts 16-byte aligned:
 * true for cudaMalloc'd matrices and for tensors at GGUF's default 32-byte alignment. */
static bool aligned16(const uint8_t *w, size_t row_bytes) {
    return reinterpret_cast<uintptr_t>(w) % 16 == 0 && row_bytes % 16 == 0;
}

/* Shapes every kernel here handles: n a multiple of the type's block and of a group (8),
 * which every real model's matrix is (K-quants: 256, the 32-blocks: 32). A step of the GEMM
 * (BK = 32) that runs past n reads zeros for the groups beyond it, so the float types take
 * row lengths like 48 (a tiny expert) too. */
static int shape_ok(uint32_t type, uint32_t n) {
    const int be = kq_block_elems(type);
    return be != 0 && n % (uint32_t)be == 0 && n % 8 == 0;
}

/* The matrix-vector kernels for any n_tok (launch_matvec's block rows), by type. */
static int matvec_any(uint32_t type, const uint8_t *wb, size_t rb, bool a16, uint32_t n_in,
                      uint32_t n_out, const float *x, size_t ldx, uint32_t n_tok, float *y,
                      size_t ldy, cudaStream_t stream) {
    const bool x4 = reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
    switch (type) {
#define MV_TYPE(T)                                                                               \
    case T:                                                                                      \
        if (x4) launch_matvec<T, true>(wb, rb, a16, n_in, n_out, x, ldx, n_tok, y, ldy, stream); \
        else launch_matvec<T, false>(wb, rb, a16, n_in, n_out, x, ldx, n_tok, y, ldy, stream);  \
        break;
        KIPP_MM_TYPES(MV_TYPE)
#undef MV_TYPE
    default: break;
    }
    return (int)cudaGetLastError();
}

/* The tensor-core GEMM: x's n_rows rows (through `rows` when given) split into the scratch's
 * two bf16 planes, then one launch over tiles of up to `tile_rows` rows; with grp_off one
 * grid layer per expert (k_gemm), else one product of n_rows rows. */
static int gemm_any(uint32_t type, const uint8_t *wb, size_t rb, bool a16, uint32_t n_in,
                    uint32_t n_out, const float *x, size_t ldx, const int32_t *rows,
                    uint32_t n_rows, uint32_t tile_rows, const uint32_t *grp_off,
                    size_t w_stride, uint32_t n_layers, float *y, size_t ldy, void *scratch,
                    cudaStream_t stream) {
    uint16_t *xh = static_cast<uint16_t *>(scratch);
    uint16_t *xl = xh + (size_t)n_in * n_rows;
    {
        const size_t n = (size_t)n_in * n_rows;
        const size_t blocks = (n + 255) / 256;
        k_split_x<<<(unsigned)(blocks < 65535 ? blocks : 65535), 256, 0, stream>>>(
            x, ldx, rows, n_in, n_rows, xh, xl);
    }
    const dim3 grid((n_out + BN - 1) / BN, (tile_rows + BM - 1) / BM, n_layers);
    switch (type) {
#define GEMM_TYPE(T)                                                                             \
    case T:                                                                                      \
        k_gemm<T><<<grid, 128, 0, stream>>>(wb, rb, a16, n_in, n_out, xh, xl, n_rows, y, ldy,    \
                                            grp_off, w_stride);                                  \
        break;
        KIPP_MM_TYPES(GEMM_TYPE)
#undef GEMM_TYPE
    default: break;
    }
    return (int)cudaGetLastError();
}

extern "C" int kipp_cuda_mm_shape_supported(uint32_t type, uint32_t n_in) {
    return kipp_cuda_mm_type_supported(type) && shape_ok(type, n_in);
}

extern "C" int kipp_cuda_mm_type_supported(uint32_t type) {
    switch (type) {
#define SUP_CASE(T) case T:
        KIPP_MM_TYPES(SUP_CASE)
#undef SUP_CASE
        return 1;
    default: return 0;
    }
}

extern "C" size_t kipp_cuda_matmul_scratch_bytes(uint32_t type, uint32_t n_in, uint32_t n_tok) {
    (void)type;
    if (n_tok <= MV_MAX_TOK) return 0;
    return 2 * sizeof(uint16_t) * (size_t)n_in * n_tok; /* xh and xl planes */
}

extern "C" int kipp_cuda_matmul(uint32_t type, const void *w, uint32_t n_in, uint32_t n_out,
                                const float *x, size_t ldx, uint32_t n_tok, float *y, size_t ldy,
                                void *scratch, cudaStream_t stream) {
    if (!kipp_cuda_mm_type_supported(type) || !shape_ok(type, n_in)) return cudaErrorInvalidValue;
    if (n_tok == 0 || n_out == 0) return 0;
    const uint8_t *wb = static_cast<const uint8_t *>(w);
    const size_t rb = row_bytes_of(type, n_in);
    const bool a16 = aligned16(wb, rb);
    if (n_tok <= MV_MAX_TOK)
        return matvec_any(type, wb, rb, a16, n_in, n_out, x, ldx, n_tok, y, ldy, stream);
    if (!scratch) return cudaErrorInvalidValue;
    return gemm_any(type, wb, rb, a16, n_in, n_out, x, ldx, NULL, n_tok, n_tok, NULL, 0, 1, y,
                    ldy, scratch, stream);
}

extern "C" int kipp_cuda_matmul_exact(uint32_t type, const void *w, uint32_t n_in, uint32_t n_out,
                                      const float *x, size_t ldx, uint32_t n_tok, float *y,
                                      size_t ldy, cudaStream_t stream) {
    if (!kipp_cuda_mm_type_supported(type) || !shape_ok(type, n_in)) return cudaErrorInvalidValue;
    if (n_tok == 0 || n_out == 0) return 0;
    if (n_tok / MV_MAX_TOK > 65535u) return cudaErrorInvalidValue; /* grid.y */
    const uint8_t *wb = static_cast<const uint8_t *>(w);
    const size_t rb = row_bytes_of(type, n_in);
    return matvec_any(type, wb, rb, aligned16(wb, rb), n_in, n_out, x, ldx, n_tok, y, ldy,
                      stream);
}

extern "C" size_t kipp_cuda_matmul_experts_scratch_bytes(uint32_t type, uint32_t n_in,
                                                         uint32_t n_rows,
                                                         uint32_t max_per_expert) {
    (void)type;
    if (max_per_expert <= MV_MAX_TOK) return 0;
    return 2 * sizeof(uint16_t) * (size_t)n_in * n_rows; /* xh and xl planes, every row */
}

extern "C" int kipp_cuda_matmul_experts(uint32_t type, const void *w, size_t expert_bytes,
                                        uint32_t n_expert, uint32_t n_in, uint32_t n_out,
                                        const float *x, size_t ldx, const int32_t *x_rows,
                                        uint32_t n_rows, const uint32_t *grp_off,
                                        uint32_t max_per_expert, float *y, size_t ldy,
                                        void *scratch, cudaStream_t stream) {
    if (!kipp_cuda_mm_type_supported(type) || !shape_ok(type, n_in) || n_expert == 0 ||
        n_expert > 65535u || !grp_off)
        return cudaErrorInvalidValue;
    if (n_rows == 0 || n_out == 0) return 0;
    const uint8_t *wb = static_cast<const uint8_t *>(w);
    const size_t rb = row_bytes_of(type, n_in);
    if (expert_bytes < rb * n_out) return cudaErrorInvalidValue;
    /* every expert's rows start 16-byte aligned too */
    const bool a16 = aligned16(wb, rb) && expert_bytes % 16 == 0;
    if (max_per_expert <= MV_MAX_TOK) {
        if (n_rows > 65535u) return cudaErrorInvalidValue; /* grid.y */
        const bool x4 = reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
        const dim3 grid((n_out + MV_WARPS - 1) / MV_WARPS, n_rows), block(32 * MV_WARPS);
        switch (type) {
#define MVE_TYPE(T)                                                                              \
    case T:                                                                                      \
        if (x4)                                                                                  \
            k_matvec_experts<T, true><<<grid, block, 0, stream>>>(                               \
                wb, expert_bytes, rb, a16, n_in, n_out, x, ldx, x_rows, grp_off, n_expert, y, ldy); \
        else                                                                                     \
            k_matvec_experts<T, false><<<grid, block, 0, stream>>>(                              \
                wb, expert_bytes, rb, a16, n_in, n_out, x, ldx, x_rows, grp_off, n_expert, y, ldy); \
        break;
            KIPP_MM_TYPES(MVE_TYPE)
#undef MVE_TYPE
        default: break;
        }
        return (int)cudaGetLastError();
    }
    if (!scratch || (max_per_expert + BM - 1) / BM > 65535u) return cudaErrorInvalidValue;
    return gemm_any(type, wb, rb, a16, n_in, n_out, x, ldx, x_rows, n_rows, max_per_expert,
                    grp_off, expert_bytes, n_expert, y, ldy, scratch, stream);
}

extern "C" int kipp_cuda_get_rows(uint32_t type, const void *w, uint32_t n, const int32_t *ids,
                                  uint32_t n_tok, float *out, size_t ldo, cudaStream_t stream) {
    if (!kipp_cuda_mm_type_supported(type) || !shape_ok(type, n)) return cudaErrorInvalidValue;
    if (n_tok == 0) return 0;
    const uint8_t *wb = static_cast<const uint8_t *>(w);
    const size_t rb = row_bytes_of(type, n);
    const bool a16 = aligned16(wb, rb);
    const dim3 grid((n / 8 + 127) / 128, n_tok < 65535 ? n_tok : 65535);
    switch (type) {
#define GR_TYPE(T)                                                                               \
    case T: k_get_rows<T><<<grid, 128, 0, stream>>>(wb, rb, a16, n, ids, n_tok, out, ldo); break;
        KIPP_MM_TYPES(GR_TYPE)
#undef GR_TYPE
    default: break;
    }
    return (int)cudaGetLastError();
}
