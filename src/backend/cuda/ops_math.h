/* ops_math.h — the scalar math the cuda backend's ops.cu shares with the host: f32 <-> f16 /
 * bf16 conversions bit-exact with src/backend/host_kv.c (round to nearest even, NaN kept
 * quiet with its sign and top payload), silu as cpu-ref writes it, the paged KV
 * addressing of kernels.h with the KIPP_FAULT read modes of kipp_host_kv_row(), and a
 * mixture-of-experts router's choice as src/backend/moe.c makes it. Every helper
 * is `__host__ __device__` under nvcc and plain static inline C11 otherwise, so
 * tests/unit/test_cuda_ops_math.c checks the very code the kernels run, on a machine with
 * no GPU. No CUDA header is needed here. */
#ifndef KIPP_CUDA_OPS_MATH_H
#define KIPP_CUDA_OPS_MATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define KIPP_HD __host__ __device__
#else
#define KIPP_HD
#endif

/* KV element types as kernels.h's kv_type carries them: the values of include/kipp.h's
 * kipp_kv_type (the unit test checks they agree; this header does not include kipp.h so
 * that it stays free of the library's headers inside device code). */
#define KIPP_OM_KV_F32 1u
#define KIPP_OM_KV_F16 2u
#define KIPP_OM_KV_BF16 3u

/* Bytes per KV element of type t; 0 for a type the kernels do not store. */
static inline KIPP_HD uint32_t kipp_om_kv_elt(uint32_t t) {
    return t == KIPP_OM_KV_F32 ? 4u : (t == KIPP_OM_KV_F16 || t == KIPP_OM_KV_BF16) ? 2u : 0u;
}

/* ---- bit casts ----------------------------------------------------------------------- */

static inline KIPP_HD uint32_t kipp_om_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

static inline KIPP_HD float kipp_om_f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* ---- conversions (the rules of src/core/types.c, which host_kv.c calls) --------------- */

/* f32 -> f16, round to nearest even. Integer arithmetic on the bits rather than the
 * hardware's cvt so that NaN payloads, ties and subnormals come out exactly as on the host
 * (cvt.rn.f16.f32 returns a canonical NaN). */
static inline KIPP_HD uint16_t kipp_om_f32_to_f16(float f) {
    const uint32_t x = kipp_om_f32_bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: top payload bits kept, quiet bit forced */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* >= 65520, the tie above 65504 that rounds (to even) up: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) { /* f16 normal range: add just under half an ulp (+1 if odd) */
        const uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    const uint32_t exp_f = ax >> 23;
    if (exp_f < 102) /* below 2^-25 (2^-25 itself ties to even zero) */
        return sign;
    /* f16 subnormal, in units of 2^-24: the full mantissa shifted by 14..24 bits */
    const uint32_t man_full = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp_f;
    uint32_t q = man_full >> shift;
    const uint32_t rem = man_full & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++; /* may carry into the smallest normal */
    return (uint16_t)(sign | q);
}

/* f16 -> f32, exact. A subnormal man * 2^-24 is computed as a float product: man < 2^10 and
 * the factor is a power of two, so it is exact and needs no normalization loop. */
static inline KIPP_HD float kipp_om_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp_h = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp_h == 0x1f) return kipp_om_f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp_h == 0) {
        const float v = (float)man * 5.9604644775390625e-8f; /* 2^-24 */
        return sign ? -v : v;
    }
    return kipp_om_f32_from_bits(sign | ((exp_h + 127 - 15) << 23) | (man << 13));
}

/* f32 -> bf16, round to nearest even (a carry into the exponent is right, up to inf); a NaN
 * keeps its sign and top payload with the quiet bit set. */
static inline KIPP_HD uint16_t kipp_om_f32_to_bf16(float f) {
    const uint32_t u = kipp_om_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline KIPP_HD float kipp_om_bf16_to_f32(uint16_t b) {
    return kipp_om_f32_from_bits((uint32_t)b << 16);
}

/* Element i of a KV row of type t (F32, F16 or BF16) as f32. */
static inline KIPP_HD float kipp_om_kv_load(uint32_t t, const void *row, size_t i) {
    if (t == KIPP_OM_KV_F16) return kipp_om_f16_to_f32(((const uint16_t *)row)[i]);
    if (t == KIPP_OM_KV_BF16) return kipp_om_bf16_to_f32(((const uint16_t *)row)[i]);
    return ((const float *)row)[i];
}

/* Stores v as element i of a KV row of type t, rounding as kipp_host_kv_put() does. */
static inline KIPP_HD void kipp_om_kv_store(uint32_t t, void *row, size_t i, float v) {
    if (t == KIPP_OM_KV_F16)
        ((uint16_t *)row)[i] = kipp_om_f32_to_f16(v);
    else if (t == KIPP_OM_KV_BF16)
        ((uint16_t *)row)[i] = kipp_om_f32_to_bf16(v);
    else
        ((float *)row)[i] = v;
}

/* silu(z) = z / (1 + exp(-z)), cpu-ref's expression (layers.c). */
static inline KIPP_HD float kipp_om_silu(float z) { return z / (1.0f + expf(-z)); }

/* acc + w * y with the product and the sum rounded one at a time, as the host evaluates
 * cpu-ref's `moe_out[j] += w * proj[j]` (C11 mode: no contraction); nvcc would fuse them. */
static inline KIPP_HD float kipp_om_mul_add(float acc, float w, float y) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(acc, __fmul_rn(w, y));
#else
    return acc + w * y;
#endif
}

/* ---- mixture of experts (arch.h: KIPP_OP_FFN_MOE) ------------------------------------- */

/* kipp_om_moe_route (below): one token's router choice, the arithmetic of src/backend/moe.c's
 * kipp_moe_route written out for both compilers: p = softmax(p[0..n)) in place (the max
 * subtracted, expf, the sum taken in expert order, each divided by it); the k largest p into
 * chosen[0..k) best first, an exact tie going to the lower expert index (strict >); w[i] =
 * p[chosen[i]], divided by their sum (taken in slot order) when norm. The unit suite checks
 * it bit for bit against kipp_moe_route. ops.cu's routing kernel runs the same arithmetic a
 * warp per token (the elementwise steps spread over the lanes, the sum and the weights in one
 * lane in this order, each pick a reduction under kipp_om_moe_pick); the unit suite checks
 * that split on the host too. On the device expf is CUDA's (within 2 ulp of the host's), the
 * one difference, which can move a choice only where two probabilities are that close: where
 * the gates pin such near-ties to cpu-ref's choice (moe.h's trace), kipp_om_moe_trace_pin
 * finds the record's slot (kipp_om_moe_match) and kipp_om_moe_pin applies the pin between the
 * choice and the weights, as moe.c does. */

/* 1 when candidate (v, i) beats (bv, bi) in the top-k's order: a larger probability, or an
 * equal one at a lower expert index; UINT32_MAX is no candidate. A strict total order on
 * distinct indices (for non-NaN values), so any reduction tree over the lanes picks what
 * kipp_om_moe_route's ascending scan with a strict > picks. */
static inline KIPP_HD int kipp_om_moe_pick(float v, uint32_t i, float bv, uint32_t bi) {
    if (i == UINT32_MAX) return 0;
    if (bi == UINT32_MAX) return 1;
    return v > bv || (v == bv && i < bi);
}

/* p = softmax(p[0..n)) in place and the k best into chosen[0..k), best first (the first half
 * of kipp_om_moe_route). */
static inline KIPP_HD void kipp_om_moe_topk(float *p, uint32_t n, uint32_t k, uint32_t *chosen) {
    float mx = -INFINITY, sum = 0.0f;
    for (uint32_t e = 0; e < n; e++)
        if (p[e] > mx) mx = p[e];
    for (uint32_t e = 0; e < n; e++) {
        p[e] = expf(p[e] - mx);
        sum += p[e];
    }
    for (uint32_t e = 0; e < n; e++) p[e] /= sum;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t best = n;
        for (uint32_t e = 0; e < n; e++) {
            int taken = 0;
            for (uint32_t j = 0; j < i; j++) taken |= chosen[j] == e;
            if (!taken && (best == n || p[e] > p[best])) best = e;
        }
        chosen[i] = best;
    }
}

/* w[i] = p[chosen[i]], divided by their sum (taken in slot order) when norm (the second half). */
static inline KIPP_HD void kipp_om_moe_weights(const float *p, uint32_t k, int norm,
                                               const uint32_t *chosen, float *w) {
    float wsum = 0.0f;
    for (uint32_t i = 0; i < k; i++) {
        w[i] = p[chosen[i]];
        wsum += w[i];
    }
    if (norm)
        for (uint32_t i = 0; i < k; i++) w[i] /= wsum;
}

/* The gates' routing trace in PIN mode (src/backend/moe.h: kipp_moe_trace), between the two
 * halves, as moe.c applies it: rec the reference's experts in the slot this decision matched
 * (kipp_om_moe_match), ascending; when chosen (k <= 64) is another set and margin < delta (a
 * near-tie) chosen becomes rec, best first by p with ties to the lower index, and 1 is
 * returned; another set at a wider margin is kept and 2 returned; the same set 0 (k > 64: 0,
 * untraced, as moe.c). */
static inline KIPP_HD int kipp_om_moe_pin(const float *p, uint32_t k, uint32_t *chosen,
                                          const uint32_t *rec, float margin, float delta) {
    uint32_t mine[64];
    if (k > 64) return 0;
    for (uint32_t i = 0; i < k; i++) { /* chosen as a set, ascending */
        const uint32_t v = chosen[i];
        uint32_t j = i;
        while (j > 0 && mine[j - 1] > v) mine[j] = mine[j - 1], j--;
        mine[j] = v;
    }
    int same = 1;
    for (uint32_t i = 0; i < k; i++) same &= mine[i] == rec[i];
    if (same) return 0;
    if (!(margin < delta)) return 2;
    float q[64];
    for (uint32_t i = 0; i < k; i++) chosen[i] = rec[i], q[i] = p[rec[i]];
    for (uint32_t i = 0; i < k; i++) {
        uint32_t b = i;
        for (uint32_t j = i + 1; j < k; j++)
            if (q[j] > q[b] || (q[j] == q[b] && chosen[j] < chosen[b])) b = j;
        const float tq = q[i];
        const uint32_t tc = chosen[i];
        q[i] = q[b], chosen[i] = chosen[b];
        q[b] = tq, chosen[b] = tc;
    }
    return 1;
}

/* The gates' routing record (src/backend/moe.h: kipp_moe_trace's arrays in PIN mode, in that
 * layout: a cell per (layer, position) of n_slot slots), wherever it lives: the host's trace
 * itself, or forward.c's device copy of it (kernels.h: kipp_cuda_moe_pin). */
typedef struct {
    const int32_t *token;   /* [n_layer][n_pos][n_slot] the token a slot holds (-1: empty) */
    const uint32_t *chosen; /* [n_layer][n_pos][n_slot][k] the reference's experts, ascending */
    const float *margin;    /* [n_layer][n_pos][n_slot] its log p_k - log p_(k+1) */
    const float *probs;     /* [n_layer][n_pos][n_slot][n_exp] its router probabilities */
    uint32_t n_layer, n_pos, n_slot, k, n_exp;
    float delta; /* a differing choice is a near-tie below this margin */
} kipp_om_moe_record;

/* The slot of the record that a routing decision matches, as moe.c's traced() finds it in PIN
 * mode: in the cell of (layer, pos), the slot holding `token` whose probabilities are nearest
 * to p[0..n) (sum over experts, in expert order, of |p - q| in f32), below 0.1, the first of
 * equally near ones; *at its index in the record's slots (cell * n_slot + i). 0 when none
 * matches or the decision is outside the record (layer, pos, k, n or k > 64: untraced). */
static inline KIPP_HD int kipp_om_moe_match(const kipp_om_moe_record *r, const float *p,
                                            uint32_t n, uint32_t k, uint32_t layer, uint32_t pos,
                                            int32_t token, size_t *at) {
    if (layer >= r->n_layer || pos >= r->n_pos || k != r->k || n != r->n_exp || k > 64)
        return 0;
    const size_t cell = ((size_t)layer * r->n_pos + pos) * r->n_slot;
    size_t found = cell + r->n_slot;
    float best = 0.1f;
    for (size_t i = cell; i < cell + r->n_slot; i++) {
        if (r->token[i] != token) continue;
        float d = 0.0f;
        for (uint32_t e = 0; e < n; e++) d += fabsf(p[e] - r->probs[i * n + e]);
        if (d < best) best = d, found = i;
    }
    if (found == cell + r->n_slot) return 0;
    *at = found;
    return 1;
}

/* moe.c's PIN-mode trace for one decision, between the choice (kipp_om_moe_topk) and the
 * weights: the matching slot (kipp_om_moe_match), then kipp_om_moe_pin against it. Returns
 * kipp_om_moe_pin's 0 (no match, or the same set), 1 (pinned) or 2 (a difference at a wide
 * margin); *margin is the matched slot's margin (set whenever a slot matches). */
static inline KIPP_HD int kipp_om_moe_trace_pin(const kipp_om_moe_record *r, const float *p,
                                                uint32_t n, uint32_t k, uint32_t layer,
                                                uint32_t pos, int32_t token, uint32_t *chosen,
                                                float *margin) {
    size_t at = 0;
    if (!kipp_om_moe_match(r, p, n, k, layer, pos, token, &at)) return 0;
    *margin = r->margin[at];
    return kipp_om_moe_pin(p, k, chosen, r->chosen + at * k, r->margin[at], r->delta);
}

static inline KIPP_HD void kipp_om_moe_route(float *p, uint32_t n, uint32_t k, int norm,
                                             uint32_t *chosen, float *w) {
    kipp_om_moe_topk(p, n, k, chosen);
    kipp_om_moe_weights(p, k, norm, chosen, w);
}

/* ---- paged KV addressing -------------------------------------------------------------- */

/* The storage's shape (kernels.h: [n_blocks][2 (K, V)][n_layer][block_size][kv_dim]) and
 * the fault mode applied on reads (0 = none; n_blocks matters for modes 1 and 3 only). */
typedef struct {
    uint32_t n_layer, block_size, kv_dim, n_blocks;
    int fault;
} kipp_om_kv_geom;

/* Element offset (not bytes) of the K (part 0) or V (part 1) row of `layer` at logical
 * position pos of the sequence whose block table is `table`. With read != 0 the geometry's
 * fault mode is applied exactly as kipp_host_kv_row() applies KIPP_FAULT on KIPP_KV_READ:
 * 1 the table ignored (block = logical block mod n_blocks), 2 one slot early (slot 0 stays),
 * 3 the last slot of a block rolls over into slot 0 of physical block + 1, 4 K and V
 * swapped. Writes (read == 0) are never faulted. */
static inline KIPP_HD size_t kipp_om_kv_offset(const kipp_om_kv_geom *g, const uint32_t *table,
                                               uint32_t layer, uint32_t pos, uint32_t part,
                                               int read) {
    const uint32_t lblock = pos / g->block_size;
    uint32_t slot = pos % g->block_size;
    uint32_t block = table[lblock];
    if (read && g->fault) {
        switch (g->fault) {
        case 1: block = lblock % g->n_blocks; break;
        case 2: slot = slot ? slot - 1 : 0; break;
        case 3:
            if (slot == g->block_size - 1) {
                block = (block + 1) % g->n_blocks;
                slot = 0;
            }
            break;
        case 4: part = part ? 0u : 1u; break;
        default: break;
        }
    }
    return (((size_t)block * 2 + part) * g->n_layer + layer) * g->block_size * g->kv_dim +
           (size_t)slot * g->kv_dim;
}

#endif
