/* ops.c — the vulkan backend's kernels other than the weight products (kernels.h's "everything
 * else"): RMSNorm, NEOX RoPE, SwiGLU, the residual add, the bias add, the row gather, the
 * mixture-of-experts weighted sum, the paged KV store and causal paged GQA attention (a split
 * pass and a merge). Each launcher checks its arguments against kernels.h's contract, packs
 * the push constants its shader (shaders/NAME.comp) declares, in that order, and records one
 * or two dispatches; the numerics are the shaders' (their headers say what is bit-exact with
 * cpu-ref and what is not). Weight products are mm.c's. */
#include "backend/vulkan/kernels.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_GROUPS 65535u  /* Vulkan's guaranteed maxComputeWorkGroupCount per dimension */
#define EW_WG 128u         /* elementwise shaders' local size */

#define KV_F32 1u /* include/kipp.h's kipp_kv_type values */
#define KV_F16 2u
#define KV_BF16 3u

/* Attention's plan: ATT_TILE positions per tile (attention.comp's TILE), splits of a multiple
 * of it, at least ATT_MIN_SPLIT positions each. */
#define ATT_TILE 256u
#define ATT_MIN_SPLIT 256u
#define ATT_MAX_D 256u

static uint32_t fold(uint64_t groups) {
    return groups == 0 ? 0 : groups > MAX_GROUPS ? MAX_GROUPS : (uint32_t)groups;
}

static int has(kipp_vk_view v) { return v.buf != VK_NULL_HANDLE; }

/* An elementwise shader over n_rows rows of n elements: x groups cover a row (folded: the
 * shaders loop), y groups the rows (folded likewise). */
static int dispatch_rows(kipp_vk *vk, const char *shader, const kipp_vk_view *bind,
                         uint32_t n_bind, const void *push, uint32_t push_bytes, uint32_t n,
                         uint32_t n_rows) {
    if (n == 0 || n_rows == 0) return 0;
    return kipp_vk_dispatch(vk, shader, bind, n_bind, push, push_bytes,
                            fold((n + (uint64_t)EW_WG - 1) / EW_WG), fold(n_rows), 1);
}

/* ---- norms, RoPE, elementwise -------------------------------------------------------------- */

int kipp_vk_rmsnorm(kipp_vk *vk, kipp_vk_view x, uint32_t ld_x, kipp_vk_view w, uint32_t n,
                    uint32_t n_rows, float eps, kipp_vk_view out, uint32_t ld_out) {
    if (n == 0 || n_rows == 0) return 0;
    if (!has(x) || !has(w) || !has(out) || (n_rows > 1 && (ld_x < n || ld_out < n)))
        return KIPP_VK_EINVAL;
    const struct {
        uint32_t ld_x, ld_out, n, n_rows;
        float eps;
    } pc = {ld_x, ld_out, n, n_rows, eps};
    const kipp_vk_view b[3] = {x, w, out};
    return kipp_vk_dispatch(vk, "rmsnorm", b, 3, &pc, sizeof pc, fold(n_rows), 1, 1);
}

int kipp_vk_rope(kipp_vk *vk, kipp_vk_view x, uint32_t ld, uint32_t n_tok, uint32_t n_head,
                 uint32_t head_dim, kipp_vk_view cs) {
    if (n_tok == 0 || n_head == 0 || head_dim < 2) return 0;
    if (!has(x) || !has(cs) || head_dim % 2 || (n_tok > 1 && ld < (uint64_t)n_head * head_dim))
        return KIPP_VK_EINVAL;
    const struct {
        uint32_t ld, n_tok, n_head, head_dim;
    } pc = {ld, n_tok, n_head, head_dim};
    const kipp_vk_view b[2] = {x, cs};
    return dispatch_rows(vk, "rope", b, 2, &pc, sizeof pc, n_head * (head_dim / 2), n_tok);
}

int kipp_vk_swiglu(kipp_vk *vk, kipp_vk_view gate, kipp_vk_view up, uint32_t ld, uint32_t n,
                   uint32_t n_tok, kipp_vk_view out) {
    if (n == 0 || n_tok == 0) return 0;
    if (!has(gate) || !has(up) || !has(out) || (n_tok > 1 && ld < n)) return KIPP_VK_EINVAL;
    const struct {
        uint32_t ld, n, n_tok;
    } pc = {ld, n, n_tok};
    const kipp_vk_view b[3] = {gate, up, out};
    return dispatch_rows(vk, "swiglu", b, 3, &pc, sizeof pc, n, n_tok);
}

int kipp_vk_add(kipp_vk *vk, kipp_vk_view x, kipp_vk_view y, uint32_t ld, uint32_t n,
                uint32_t n_tok) {
    if (n == 0 || n_tok == 0) return 0;
    if (!has(x) || !has(y) || (n_tok > 1 && ld < n)) return KIPP_VK_EINVAL;
    const struct {
        uint32_t ld, n, n_tok;
    } pc = {ld, n, n_tok};
    const kipp_vk_view b[2] = {x, y};
    return dispatch_rows(vk, "add", b, 2, &pc, sizeof pc, n, n_tok);
}

int kipp_vk_add_bias(kipp_vk *vk, kipp_vk_view x, uint32_t ld, kipp_vk_view b, uint32_t n,
                     uint32_t n_tok) {
    if (n == 0 || n_tok == 0) return 0;
    if (!has(x) || !has(b) || (n_tok > 1 && ld < n)) return KIPP_VK_EINVAL;
    const struct {
        uint32_t ld, n, n_tok;
    } pc = {ld, n, n_tok};
    const kipp_vk_view bind[2] = {x, b};
    return dispatch_rows(vk, "add_bias", bind, 2, &pc, sizeof pc, n, n_tok);
}

int kipp_vk_get_rows(kipp_vk *vk, kipp_vk_view src, uint32_t ld_src, kipp_vk_view rows,
                     uint32_t n_rows, uint32_t n, kipp_vk_view dst, uint32_t ld_dst) {
    if (n == 0 || n_rows == 0) return 0;
    if (!has(src) || !has(rows) || !has(dst) || ld_src < n || (n_rows > 1 && ld_dst < n))
        return KIPP_VK_EINVAL;
    const struct {
        uint32_t ld_src, ld_dst, n, n_rows;
    } pc = {ld_src, ld_dst, n, n_rows};
    const kipp_vk_view b[3] = {src, rows, dst};
    return dispatch_rows(vk, "get_rows", b, 3, &pc, sizeof pc, n, n_rows);
}

int kipp_vk_moe_sum(kipp_vk *vk, kipp_vk_view out, uint32_t ldo, kipp_vk_view ye, uint32_t ldy,
                    kipp_vk_view weight, kipp_vk_view slot_at, uint32_t n, uint32_t n_tok,
                    uint32_t k) {
    if (n == 0 || n_tok == 0) return 0;
    if (!has(out) || (k > 0 && (!has(ye) || !has(weight) || !has(slot_at) || ldy < n)) ||
        (n_tok > 1 && ldo < n))
        return KIPP_VK_EINVAL;
    const struct {
        uint32_t ldo, ldy, n, n_tok, k;
    } pc = {ldo, ldy, n, n_tok, k};
    /* k = 0 stores zeros: the shader never reads the other bindings, which stand in for them */
    const kipp_vk_view b[4] = {out, k ? ye : out, k ? weight : out, k ? slot_at : out};
    return dispatch_rows(vk, "moe_sum", b, 4, &pc, sizeof pc, n, n_tok);
}

/* ---- paged KV ------------------------------------------------------------------------------ */

int kipp_vk_kv_store(kipp_vk *vk, kipp_vk_view kv, uint32_t kv_type, uint32_t block_size,
                     uint32_t kv_dim, kipp_vk_view k, uint32_t ld_k, kipp_vk_view v,
                     uint32_t ld_v, uint32_t n_tok, kipp_vk_view seq_of, kipp_vk_view pos,
                     kipp_vk_view tables, uint32_t max_blocks) {
    if (n_tok == 0) return 0;
    if ((kv_type != KV_F32 && kv_type != KV_F16 && kv_type != KV_BF16) || block_size == 0 ||
        kv_dim == 0 || (kv_type != KV_F32 && kv_dim % 2) || max_blocks == 0 || !has(kv) ||
        !has(k) || !has(v) || !has(seq_of) || !has(pos) || !has(tables) ||
        (n_tok > 1 && (ld_k < kv_dim || ld_v < kv_dim)))
        return KIPP_VK_EINVAL;
    const struct {
        uint32_t kv_type, block_size, kv_dim, ld_k, ld_v, n_tok, max_blocks;
    } pc = {kv_type, block_size, kv_dim, ld_k, ld_v, n_tok, max_blocks};
    const kipp_vk_view b[6] = {kv, k, v, seq_of, pos, tables};
    return kipp_vk_dispatch(vk, "kv_store", b, 6, &pc, sizeof pc, fold(n_tok), 1, 1);
}

/* ---- attention ------------------------------------------------------------------------------
 *
 * The split plan: a call of n_tok tokens whose longest context is max_ctx splits it into
 * chunks of split_len positions (a multiple of ATT_TILE, at least ATT_MIN_SPLIT), at most
 * att_cap(n_tok) of them: up to 64 for decode-sized calls (<= 16 tokens), so that one token's
 * heads still give a GPU hundreds of workgroups over a long context, fewer as the batch grows
 * (a prefill's tokens fill the device by themselves), keeping n_split * n_tok <= 1024 — the
 * scratch's rows. One split writes the output directly; several write (acc, m, l) to scratch
 * and attention_merge combines them. The split pass (attention.comp) is written for clarity
 * and any subgroup size first: an invocation forms a whole K row's dot product (uncoalesced on
 * a GPU), and each query head of a GQA group reads its KV rows itself; a tuned version would
 * share K/V tiles between a group's heads and a prefill's tokens, as the cuda kernel does. */

static uint32_t att_cap(uint32_t n_tok) {
    if (n_tok <= 16) return 64;
    return n_tok >= 1024 ? 1 : 1024 / n_tok;
}

static void att_plan(uint32_t n_tok, uint32_t max_ctx, uint32_t *n_split, uint32_t *split_len) {
    const uint64_t ctx = max_ctx ? max_ctx : 1, cap = att_cap(n_tok);
    uint64_t len = (ctx + cap - 1) / cap;
    len = (len + ATT_TILE - 1) / ATT_TILE * ATT_TILE;
    if (len < ATT_MIN_SPLIT) len = ATT_MIN_SPLIT;
    *n_split = (uint32_t)((ctx + len - 1) / len);
    *split_len = (uint32_t)len;
}

/* Sized for every call of at most n_tok tokens and at most max_ctx context: the plan's split
 * count is at most min(att_cap(n), ceil(max_ctx / ATT_MIN_SPLIT)) for n tokens, a bound that
 * only grows with max_ctx (the split count itself need not: a context one position longer can
 * round split_len up). Zero when no such call splits. */
size_t kipp_vk_attention_scratch_bytes(uint32_t n_tok, uint32_t n_head, uint32_t head_dim,
                                       uint32_t max_ctx) {
    const uint64_t by_ctx = ((uint64_t)(max_ctx ? max_ctx : 1) + ATT_MIN_SPLIT - 1) /
                            ATT_MIN_SPLIT;
    uint64_t units = 0; /* split x token rows */
    const uint32_t top = n_tok < 1024 ? n_tok : 1024; /* from 1024 tokens on: one split */
    for (uint32_t n = 1; n <= top; n++) {
        const uint64_t s = att_cap(n) < by_ctx ? att_cap(n) : by_ctx;
        if (s > 1 && s * n > units) units = s * n;
    }
    return (size_t)(units * n_head * ((uint64_t)head_dim + 2) * sizeof(float));
}

int kipp_vk_attention(kipp_vk *vk, kipp_vk_view q, uint32_t ld_q, kipp_vk_view kv,
                      uint32_t kv_type, uint32_t block_size, uint32_t kv_dim, uint32_t n_head,
                      uint32_t n_kv_head, uint32_t head_dim, uint32_t n_tok, kipp_vk_view seq_of,
                      kipp_vk_view pos, kipp_vk_view tables, uint32_t max_blocks,
                      uint32_t max_ctx, kipp_vk_view scratch, kipp_vk_view out, uint32_t ld_out,
                      int fault, uint32_t n_blocks) {
    if (n_tok == 0 || n_head == 0) return 0;
    if ((kv_type != KV_F32 && kv_type != KV_F16 && kv_type != KV_BF16) || n_kv_head == 0 ||
        n_head % n_kv_head || n_head > MAX_GROUPS || head_dim == 0 || head_dim > ATT_MAX_D ||
        (uint64_t)n_kv_head * head_dim > kv_dim || block_size == 0 || max_blocks == 0 ||
        (kv_type != KV_F32 && kv_dim % 2) || !has(q) || !has(kv) || !has(seq_of) ||
        !has(pos) || !has(tables) || !has(out) || fault < 0 || fault > 4 ||
        (n_tok > 1 && ((uint64_t)ld_q < (uint64_t)n_head * head_dim ||
                       (uint64_t)ld_out < (uint64_t)n_head * head_dim)))
        return KIPP_VK_EINVAL;
    uint32_t n_split, split_len;
    att_plan(n_tok, max_ctx, &n_split, &split_len);
    const uint64_t need = (uint64_t)n_split * n_tok * n_head * ((uint64_t)head_dim + 2) * 4;
    if (n_split > 1 && (!has(scratch) || (scratch.size && scratch.size < need)))
        return KIPP_VK_EINVAL;
    const struct {
        uint32_t ld_q, kv_type, block_size, kv_dim, n_head, group, head_dim, n_tok;
        uint32_t max_blocks, n_split, split_len, ld_out, fault, n_blocks;
        float scale;
    } pc = {ld_q,      kv_type,  block_size, kv_dim,         n_head,
            n_head / n_kv_head,  head_dim,   n_tok,          max_blocks,
            n_split,   split_len, ld_out,    (uint32_t)fault, n_blocks ? n_blocks : 1,
            1.0f / sqrtf((float)head_dim)}; /* cpu-ref's scale */
    /* with one split the scratch binding is never touched: out stands in for it */
    const kipp_vk_view b[7] = {q, kv, seq_of, pos, tables, n_split > 1 ? scratch : out, out};
    int rc = kipp_vk_dispatch(vk, "attention", b, 7, &pc, sizeof pc, n_split, n_head,
                              fold(n_tok));
    if (rc || n_split == 1) return rc;
    const struct {
        uint32_t n_split, n_tok, n_head, head_dim, ld_out;
    } mc = {n_split, n_tok, n_head, head_dim, ld_out};
    const kipp_vk_view mb[2] = {scratch, out};
    return kipp_vk_dispatch(vk, "attention_merge", mb, 2, &mc, sizeof mc, n_head, fold(n_tok),
                            1);
}
