/* test_cuda_ops_math.c — unit suite for src/backend/cuda/ops_math.h, the math the cuda
 * kernels of ops.cu share with the host: its f32 <-> f16 / bf16 conversions must be bit for
 * bit those of host_kv.c (kipp_host_kv_put / kipp_host_kv_get) over every exponent, the
 * rounding ties, subnormals, infinities and NaN payloads; its silu is cpu-ref's; its KV
 * offset must land on kipp_host_kv_row()'s row for adversarial block tables. The fault modes
 * are compared with kipp_host_kv_row() itself in a -DKIPP_FAULT_INJECT build (where its
 * fault branch exists) and with this file's own statement of them otherwise. Its router
 * choice must be kipp_moe_route's (src/backend/moe.c) bit for bit: the same experts, the same
 * weights and probabilities, ties included, and under the gates' routing trace the same slot
 * matched and the same pins. Runs with gcc, no GPU, no CUDA headers. */
#include "backend/cuda/ops_math.h"
#include "backend/host_kv.h"
#include "backend/moe.h"
#include "kt.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng_state = 0x2545f491u;
static uint32_t rng(void) { /* xorshift32: a fixed, portable sequence */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* One f32 pattern through both implementations of both narrowing conversions; returns the
 * number of mismatches (reported once per kind by the caller). */
static int check_narrow(uint32_t bits, int *bad_f16, int *bad_bf16) {
    const float f = from_bits(bits);
    uint16_t host16, host_b16;
    kipp_host_kv_put(KIPP_KV_TYPE_F16, &host16, &f, 1);
    kipp_host_kv_put(KIPP_KV_TYPE_BF16, &host_b16, &f, 1);
    const uint16_t om16 = kipp_om_f32_to_f16(f), om_b16 = kipp_om_f32_to_bf16(f);
    if (om16 != host16 && (*bad_f16)++ < 5)
        fprintf(stderr, "  f16: 0x%08x -> 0x%04x, host 0x%04x\n", bits, om16, host16);
    if (om_b16 != host_b16 && (*bad_bf16)++ < 5)
        fprintf(stderr, "  bf16: 0x%08x -> 0x%04x, host 0x%04x\n", bits, om_b16, host_b16);
    /* the store helper is the same rounding through a row pointer */
    uint16_t row16[3] = {0, 0, 0}, rowb[3] = {0, 0, 0};
    float row32[3] = {0, 0, 0};
    kipp_om_kv_store(KIPP_OM_KV_F16, row16, 1, f);
    kipp_om_kv_store(KIPP_OM_KV_BF16, rowb, 1, f);
    kipp_om_kv_store(KIPP_OM_KV_F32, row32, 1, f);
    return (row16[1] != host16) + (rowb[1] != host_b16) + (to_bits(row32[1]) != bits) +
           (row16[0] | row16[2] | rowb[0] | rowb[2]);
}

static void test_conversions(void) {
    KT_CHECK(KIPP_OM_KV_F32 == (uint32_t)KIPP_KV_TYPE_F32 &&
                 KIPP_OM_KV_F16 == (uint32_t)KIPP_KV_TYPE_F16 &&
                 KIPP_OM_KV_BF16 == (uint32_t)KIPP_KV_TYPE_BF16,
             "kernel KV type codes differ from kipp_kv_type");
    KT_CHECK(kipp_om_kv_elt(KIPP_OM_KV_F32) == 4 && kipp_om_kv_elt(KIPP_OM_KV_F16) == 2 &&
             kipp_om_kv_elt(KIPP_OM_KV_BF16) == 2 && kipp_om_kv_elt(0) == 0 &&
             kipp_om_kv_elt(4) == 0, "element sizes");

    /* widening: every one of the 65536 f16 and bf16 patterns, compared as bits (NaNs too) */
    int bad_w16 = 0, bad_wb16 = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const uint16_t v = (uint16_t)h;
        float host, hostb;
        kipp_host_kv_get(KIPP_KV_TYPE_F16, &host, &v, 1);
        kipp_host_kv_get(KIPP_KV_TYPE_BF16, &hostb, &v, 1);
        if (to_bits(kipp_om_f16_to_f32(v)) != to_bits(host) && bad_w16++ < 5)
            fprintf(stderr, "  f16 0x%04x -> %a, host %a\n", h, kipp_om_f16_to_f32(v), host);
        if (to_bits(kipp_om_bf16_to_f32(v)) != to_bits(hostb)) bad_wb16++;
        if (to_bits(kipp_om_kv_load(KIPP_OM_KV_F16, &v, 0)) != to_bits(host)) bad_w16++;
        if (to_bits(kipp_om_kv_load(KIPP_OM_KV_BF16, &v, 0)) != to_bits(hostb)) bad_wb16++;
    }
    KT_CHECK(bad_w16 == 0, "f16 -> f32: %d of 65536 patterns differ from host_kv.c", bad_w16);
    KT_CHECK(bad_wb16 == 0, "bf16 -> f32: %d of 65536 patterns differ", bad_wb16);

    /* narrowing: for both signs and all 256 exponents, the mantissas at and around each
     * rounding point (f16 normal: bit 12 is the half ulp; bf16: bit 15; f16 subnormals move
     * the half ulp up to bit 23, so every bit position's tie is tried), plus random ones */
    int bad16 = 0, badb16 = 0, bad_store = 0, n = 0;
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t e = 0; e < 256; e++) {
            const uint32_t base = sign << 31 | e << 23;
            uint32_t mans[80];
            int k = 0;
            mans[k++] = 0;
            mans[k++] = 1;
            mans[k++] = 0x7fffffu;
            mans[k++] = 0x400000u; /* quiet NaN / midpoint */
            for (uint32_t b = 0; b < 23; b++) {
                const uint32_t tie = 1u << b;
                mans[k++] = tie;                       /* a tie with even kept bits */
                mans[k++] = tie | (tie << 1 & 0x7fffffu); /* a tie with the kept lsb odd */
                mans[k++] = (tie - 1) | (tie << 1 & 0x7fffffu); /* just below a tie */
            }
            for (int r = 0; r < 7; r++) mans[k++] = rng() & 0x7fffffu;
            for (int i = 0; i < k; i++, n++)
                bad_store += check_narrow(base | mans[i], &bad16, &badb16);
        }
    for (int i = 0; i < 1000000; i++, n++) bad_store += check_narrow(rng(), &bad16, &badb16);
    /* the f16 overflow edge and the smallest subnormal edge, each side */
    const uint32_t edges[] = {0x477fefffu, 0x477ff000u, 0x477ff001u, 0x477fe000u, 0x33000000u,
                              0x33000001u, 0x32ffffffu, 0x387fffffu, 0x38800000u, 0x7f7fffffu,
                              0x7f800000u, 0x7f800001u, 0x7fc00000u, 0xffffffffu, 0x7fbfffffu};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++, n++)
        bad_store += check_narrow(edges[i], &bad16, &badb16) + check_narrow(edges[i] | 0x80000000u,
                                                                            &bad16, &badb16);
    KT_CHECK(bad16 == 0, "f32 -> f16: %d of %d patterns differ from host_kv.c", bad16, n);
    KT_CHECK(badb16 == 0, "f32 -> bf16: %d of %d patterns differ from host_kv.c", badb16, n);
    KT_CHECK(bad_store == 0, "kipp_om_kv_store: %d mismatches or writes outside the element",
             bad_store);
}

/* silu against cpu-ref's expression written out here (layers.c's static silu). */
static void test_silu(void) {
    int bad = 0;
    const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, 20.0f, -20.0f, 88.0f, -88.0f, -89.0f,
                             -104.0f, 1e-30f, -1e-30f, INFINITY};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) {
        const float z = special[i], want = z / (1.0f + expf(-z));
        if (to_bits(kipp_om_silu(z)) != to_bits(want)) bad++;
    }
    for (int i = 0; i < 100000; i++) {
        const float z = ((float)(rng() >> 8) / 16777216.0f - 0.5f) * 60.0f;
        if (to_bits(kipp_om_silu(z)) != to_bits(z / (1.0f + expf(-z)))) bad++;
    }
    KT_CHECK(bad == 0, "silu differs from cpu-ref's z / (1 + expf(-z)) on %d inputs", bad);
    KT_CHECK(kipp_om_silu(-INFINITY) == 0.0f || isnan(kipp_om_silu(-INFINITY)), "silu(-inf)");
    KT_CHECK(fabsf(kipp_om_silu(1.0f) - 0.7310585786f) < 1e-6f, "silu(1) = %g",
             (double)kipp_om_silu(1.0f));
}

/* This file's own statement of the KIPP_FAULT read modes (docs/kv-cache.md), used to check
 * the helper where host_kv.h's fault branch is not compiled: (block, slot, part) after the
 * planted bug. */
static void fault_expect(int mode, uint32_t n_blocks, uint32_t bs, uint32_t lblock,
                         uint32_t *block, uint32_t *slot, uint32_t *part) {
    if (mode == 1) *block = lblock % n_blocks;
    if (mode == 2 && *slot > 0) *slot -= 1;
    if (mode == 3 && *slot == bs - 1) {
        *block = (*block + 1) % n_blocks;
        *slot = 0;
    }
    if (mode == 4) *part ^= 1u;
}

enum { TBL_IDENTITY, TBL_REVERSED, TBL_INTERLEAVED, TBL_SHARED, TBL_RANDOM, TBL_N };

/* Block table of n logical blocks over a storage of n_blocks (n <= n_blocks). */
static void make_table(int kind, uint32_t *t, uint32_t n, uint32_t n_blocks) {
    for (uint32_t i = 0; i < n; i++) {
        switch (kind) {
        case TBL_REVERSED: t[i] = n_blocks - 1 - i; break;
        case TBL_INTERLEAVED: t[i] = (i * 2 + 1) % n_blocks; break; /* odd blocks, then even */
        case TBL_SHARED: t[i] = i < n / 2 ? i : n_blocks - 1 - (i - n / 2); break;
        default: t[i] = i; break;
        }
    }
    if (kind == TBL_RANDOM) /* a random injective table: a shuffled prefix of the blocks */
        for (uint32_t i = n; i-- > 1;) {
            const uint32_t j = rng() % (i + 1), x = t[i];
            t[i] = t[j];
            t[j] = x;
        }
}

static void test_addressing(void) {
    static const struct { uint32_t n_layer, bs, kv_dim, n_blocks; } geoms[] = {
        {1, 1, 1, 1}, {2, 16, 8, 12}, {3, 4, 24, 9}, {4, 7, 5, 11}, {28, 16, 1024, 40},
    };
    static const uint32_t types[] = {KIPP_OM_KV_F32, KIPP_OM_KV_F16, KIPP_OM_KV_BF16};
    int bad = 0, bad_fault = 0, n = 0;
    for (size_t gi = 0; gi < sizeof geoms / sizeof geoms[0]; gi++)
        for (size_t ti = 0; ti < 3; ti++)
            for (int kind = 0; kind < TBL_N; kind++)
                for (int mode = 0; mode <= 4; mode++) {
                    const uint32_t nb = geoms[gi].n_blocks, bs = geoms[gi].bs;
                    const uint32_t elt = kipp_om_kv_elt(types[ti]);
                    kipp_host_kv kv = {.type = (kipp_kv_type)types[ti],
                                       .type_v = (kipp_kv_type)types[ti],
                                       .n_layer = geoms[gi].n_layer, .kv_dim = geoms[gi].kv_dim,
                                       .block_size = bs, .n_blocks = nb, .fault = mode};
                    kv.row_bytes[0] = kv.row_bytes[1] = (size_t)kv.kv_dim * elt;
                    kv.part_bytes[0] = kv.part_bytes[1] = (size_t)kv.n_layer * bs * kv.kv_dim * elt;
                    kv.block_bytes = 2 * kv.part_bytes[0];
                    /* addresses only: a static byte array stands in for the storage, and
                     * offsets are compared as integers so no pointer leaves it */
                    static unsigned char base[1];
                    kv.data = base;
                    uint32_t table[64];
                    const uint32_t n_lb = nb < 64 ? nb : 64;
                    make_table(kind, table, n_lb, nb);
                    const kipp_kv_seq seq = {.blocks = table, .n_blocks = n_lb, .cap = n_lb,
                                             .n_tokens = n_lb * bs, .live = 1};
                    const kipp_om_kv_geom g = {kv.n_layer, bs, kv.kv_dim, nb, mode};
                    for (uint32_t pos = 0; pos < n_lb * bs; pos += 1 + pos / 97)
                        for (uint32_t layer = 0; layer < kv.n_layer; layer++)
                            for (uint32_t part = 0; part < 2; part++, n++) {
                                const size_t off =
                                    kipp_om_kv_offset(&g, table, layer, pos, part, 1);
                                const size_t woff =
                                    kipp_om_kv_offset(&g, table, layer, pos, part, 0);
                                /* writes: never faulted, always the host row */
                                const size_t hw = (size_t)((uintptr_t)kipp_host_kv_row(
                                    &kv, &seq, layer, pos, (kipp_kv_part)part, KIPP_KV_WRITE) -
                                                           (uintptr_t)base);
                                if (woff * elt != hw) bad++;
                                uint32_t block = table[pos / bs], slot = pos % bs, p = part;
                                fault_expect(mode, nb, bs, pos / bs, &block, &slot, &p);
                                const size_t want = (size_t)block * kv.block_bytes +
                                                    p * kv.part_bytes[0] +
                                                    ((size_t)layer * bs + slot) * kv.kv_dim * elt;
                                if (off * elt != want) bad_fault++;
#ifdef KIPP_FAULT_INJECT
                                const int check_host = 1; /* the host's fault branch exists */
#else
                                const int check_host = mode == 0;
#endif
                                if (check_host) {
                                    const size_t hr = (size_t)((uintptr_t)kipp_host_kv_row(
                                        &kv, &seq, layer, pos, (kipp_kv_part)part,
                                        KIPP_KV_READ) - (uintptr_t)base);
                                    if (off * elt != hr) bad_fault++;
                                }
                            }
                }
    KT_CHECK(bad == 0, "KV offset (write) differs from kipp_host_kv_row in %d of %d rows", bad, n);
    KT_CHECK(bad_fault == 0, "KV offset (read, fault modes 0-4) differs in %d of %d rows",
             bad_fault, n);
}

/* ops.cu's route_token_warp on the host: 32 lanes, lane l owning experts l, l + 32, ...;
 * the max and each pick a reduction over the lanes' own results (kipp_om_moe_pick), the
 * softmax sum and the weights in expert / slot order. */
static void warp_route(float *p, uint32_t n, uint32_t k, int norm, uint32_t *chosen, float *w) {
    float mx = -INFINITY;
    for (uint32_t lane = 0; lane < 32; lane++) {
        float lm = -INFINITY;
        for (uint32_t e = lane; e < n; e += 32)
            if (p[e] > lm) lm = p[e];
        if (lm > mx) mx = lm;
    }
    for (uint32_t e = 0; e < n; e++) p[e] = expf(p[e] - mx);
    float sum = 0.0f;
    for (uint32_t e = 0; e < n; e++) sum += p[e];
    for (uint32_t e = 0; e < n; e++) p[e] /= sum;
    uint32_t taken[32] = {0};
    float wsum = 0.0f;
    for (uint32_t i = 0; i < k; i++) {
        float bv = 0.0f;
        uint32_t bi = UINT32_MAX;
        for (uint32_t lane = 32; lane-- > 0;) { /* the lanes' bests, folded in reverse */
            float lv = 0.0f;
            uint32_t li = UINT32_MAX;
            for (uint32_t e = lane, m = 0; e < n; e += 32, m++)
                if (!(taken[lane] >> m & 1u) && kipp_om_moe_pick(p[e], e, lv, li)) lv = p[e], li = e;
            if (kipp_om_moe_pick(lv, li, bv, bi)) bv = lv, bi = li;
        }
        taken[bi & 31u] |= 1u << (bi >> 5);
        chosen[i] = bi;
        w[i] = bv;
        wsum += w[i];
    }
    if (norm)
        for (uint32_t i = 0; i < k; i++) w[i] /= wsum;
}

/* The router's choice against kipp_moe_route on random logits of many sizes, with exact ties
 * (repeated values: the lower index must win), all-equal rows, probabilities that underflow
 * to 0 (ties at zero past the first few), and both settings of norm. */
static void test_moe_route(void) {
    static const uint32_t ns[] = {1, 2, 3, 8, 16, 33, 64, 128, 160, 1024};
    int bad = 0, bad_warp = 0, n_cases = 0;
    static float a[1024], b[1024], c[1024];
    float wa[8], wb[8], wc[8];
    uint32_t ca[8], cb[8], cc[8];
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (uint32_t k = 1; k <= 8 && k <= ns[ni]; k++)
            for (int kind = 0; kind < 5; kind++)
                for (int rep = 0; rep < 20; rep++, n_cases++) {
                    const uint32_t n = ns[ni];
                    for (uint32_t e = 0; e < n; e++) {
                        const float u = (float)(rng() >> 8) / 16777216.0f - 0.5f; /* [-0.5, 0.5) */
                        switch (kind) {
                        case 0: a[e] = u * 12.0f; break;                          /* std ~3.5 */
                        case 1: a[e] = (float)(rng() % 4) * 0.25f; break;        /* many ties */
                        case 2: a[e] = 1.5f; break;                               /* all equal */
                        case 3: a[e] = u * 400.0f; break;            /* most p underflow to 0 */
                        default: a[e] = e % 3 ? a[e - e % 3] : u; break; /* triples of equal rows */
                        }
                    }
                    const int norm = (rep & 1) != 0;
                    memcpy(b, a, n * sizeof *a);
                    memcpy(c, a, n * sizeof *a);
                    kipp_moe_route(a, n, k, norm, ca, wa, 0, 0, 0);
                    kipp_om_moe_route(b, n, k, norm, cb, wb);
                    warp_route(c, n, k, norm, cc, wc);
                    int diff = memcmp(ca, cb, k * sizeof *ca) != 0, dw = memcmp(ca, cc, k * sizeof *ca) != 0;
                    for (uint32_t i = 0; i < k; i++) {
                        diff |= to_bits(wa[i]) != to_bits(wb[i]);
                        dw |= to_bits(wa[i]) != to_bits(wc[i]);
                    }
                    for (uint32_t e = 0; e < n; e++) {
                        diff |= to_bits(a[e]) != to_bits(b[e]);
                        dw |= to_bits(a[e]) != to_bits(c[e]);
                    }
                    if (diff && bad++ < 3)
                        fprintf(stderr, "  moe route n %u k %u kind %d norm %d: first %u vs %u\n", n, k,
                                kind, norm, ca[0], cb[0]);
                    if (dw && bad_warp++ < 3)
                        fprintf(stderr, "  moe route (warp split) n %u k %u kind %d norm %d: first %u vs %u\n",
                                n, k, kind, norm, ca[0], cc[0]);
                }
    KT_CHECK(bad == 0, "moe route differs from kipp_moe_route in %d of %d cases", bad, n_cases);
    KT_CHECK(bad_warp == 0, "the warp split of the moe route differs from kipp_moe_route in %d of %d cases",
             bad_warp, n_cases);
    /* the gates' pin (moe.h's trace in PIN mode) between the choice and the weights: moe.c's
     * kipp_moe_route under a trace against kipp_om_moe_topk + kipp_om_moe_trace_pin +
     * kipp_om_moe_weights, the record read through a kipp_om_moe_record over the trace's own
     * arrays. Each (layer, position) cell of S slots is one of eight cases, so that a wrong
     * match changes the outcome: the same token at a small L1 distance holding this decision's
     * own set, another set at a near-tie margin or at a wide one; the same token too far
     * (>= 0.1: no match); another token with this decision's exact probabilities beside the
     * same token farther off; two slots of the token, the nearer one differing; two slots at
     * exactly the same distance (the first wins); empty slots (-1) before the match. */
    {
        enum { NL = 2, NP = 24, S = 4, K = 4, N = 16 };
        static int32_t tok[NL * NP * S];
        static uint32_t rec[NL * NP * S * K];
        static float margin[NL * NP * S], probs[NL * NP * S * N];
        kipp_moe_trace tr = {.mode = KIPP_MOE_TRACE_PIN, .n_layer = NL, .n_pos = NP, .n_slot = S, .k = K,
                             .n_exp = N, .delta = 0.05f, .token = tok, .chosen = rec, .margin = margin,
                             .probs = probs};
        const kipp_om_moe_record om = {tok, rec, margin, probs, NL, NP, S, K, N, 0.05f};
        int bad_pin = 0, outcomes[3] = {0, 0, 0}, kinds[8][3] = {{0}};
        unsigned pinned = 0, mism = 0;
        float widest = 0.0f;
        for (uint32_t cell = 0; cell < NL * NP; cell++) {
            const uint32_t layer = cell / NP, pos = cell % NP, kind = cell % 8;
            const int32_t token = (int32_t)(rng() % 1000u);
            float l0[N], l1[N], w0[K], w1[K], p[N];
            uint32_t c0[K], c1[K], own[K], other[K];
            for (uint32_t e = 0; e < N; e++) l0[e] = ((float)(rng() >> 8) / 16777216.0f - 0.5f) * 8.0f;
            memcpy(l1, l0, sizeof l0);
            memcpy(p, l0, sizeof p);
            kipp_om_moe_topk(p, N, K, own); /* p: this decision's probabilities */
            /* own and other (own with its last choice swapped for the best one left out) as sets */
            uint32_t out = 0;
            for (uint32_t e = 0; e < N && !out; e++) {
                int taken = 0;
                for (uint32_t i = 0; i < K; i++) taken |= own[i] == e;
                if (!taken) out = e + 1;
            }
            memcpy(other, own, sizeof own);
            other[K - 1] = out - 1;
            for (uint32_t *set = own; set; set = set == own ? other : NULL)
                for (uint32_t i = 1; i < K; i++)
                    for (uint32_t j = i; j > 0 && set[j - 1] > set[j]; j--) {
                        const uint32_t x = set[j];
                        set[j] = set[j - 1], set[j - 1] = x;
                    }
            /* slot s of this cell: token, distance from p (moved from expert 0 to 1), set, margin */
            const size_t base = (size_t)cell * S;
            for (uint32_t s2 = 0; s2 < S; s2++) { /* empty unless a case below fills it */
                tok[base + s2] = -1;
                memcpy(probs + (base + s2) * N, p, sizeof p);
                memcpy(rec + (base + s2) * K, other, sizeof other);
                margin[base + s2] = 0.01f;
            }
#define SLOT(s_, t_, d_, set_, m_)                                                                 \
    do {                                                                                           \
        tok[base + (s_)] = (t_);                                                                   \
        float *q_ = probs + (base + (s_)) * N;                                                     \
        memcpy(q_, p, sizeof p);                                                                   \
        q_[0] += (d_) / 2, q_[1] -= (d_) / 2;                                                      \
        memcpy(rec + (base + (s_)) * K, (set_), sizeof own);                                       \
        margin[base + (s_)] = (m_);                                                                \
    } while (0)
            switch (kind) {
            case 0: SLOT(0, token, 0.01f, own, 0.01f); break;   /* same set: 0 */
            case 1: SLOT(0, token, 0.01f, other, 0.01f); break; /* near-tie: pinned */
            case 2: SLOT(0, token, 0.01f, other, 0.5f); break;  /* wide: mismatched */
            case 3: SLOT(0, token, 0.3f, other, 0.01f); break;  /* too far: no match */
            case 4: /* another token at distance 0, then this one's own set at 0.04 */
                SLOT(0, token + 1, 0.0f, other, 0.01f);
                SLOT(1, token, 0.04f, own, 0.01f);
                break;
            case 5: /* the nearer of two (the second) differs at a near-tie */
                SLOT(0, token, 0.04f, own, 0.5f);
                SLOT(2, token, 0.01f, other, 0.01f);
                break;
            case 6: /* equally near: the first, this decision's own set */
                SLOT(1, token, 0.02f, own, 0.5f);
                SLOT(3, token, 0.02f, other, 0.01f);
                break;
            default: SLOT(2, token, 0.05f, other, 0.5f); break; /* empty slots first; wide */
            }
#undef SLOT
            kipp_moe_trace_use(&tr);
            kipp_moe_route(l0, N, K, 1, c0, w0, layer, pos, token);
            kipp_moe_trace_use(NULL);
            kipp_om_moe_topk(l1, N, K, c1);
            float m = 0.0f;
            const int r = kipp_om_moe_trace_pin(&om, l1, N, K, layer, pos, token, c1, &m);
            kipp_om_moe_weights(l1, K, 1, c1, w1);
            outcomes[r]++, kinds[kind][r]++;
            pinned += r == 1, mism += r == 2;
            if (r == 1 && m > widest) widest = m;
            int d = memcmp(c0, c1, sizeof c0) != 0;
            for (uint32_t i = 0; i < K; i++) d |= to_bits(w0[i]) != to_bits(w1[i]);
            if (d && bad_pin++ < 3)
                fprintf(stderr, "  moe pin cell %u (case %u): %u vs %u\n", cell, kind, c0[K - 1], c1[K - 1]);
        }
        KT_CHECK(bad_pin == 0 && atomic_load(&tr.pinned) == pinned && atomic_load(&tr.mismatched) == mism &&
                     (!pinned || tr.worst_pinned == widest),
                 "moe pin: %d of %d cells differ from moe.c's trace; pinned %u vs %u, mismatched %u vs %u", bad_pin,
                 NL * NP, atomic_load(&tr.pinned), pinned, atomic_load(&tr.mismatched), mism);
        /* each case's own outcome (NL * NP / 8 cells of each): what the matching must give */
        static const int want[8] = {0, 1, 2, 0, 0, 1, 0, 2};
        int bad_kind = 0;
        for (int kd = 0; kd < 8; kd++) bad_kind += kinds[kd][want[kd]] != NL * NP / 8;
        KT_CHECK(bad_kind == 0 && outcomes[0] && outcomes[1] && outcomes[2],
                 "moe pin cases: %d of 8 kinds off their outcome; %d same or unmatched, %d pinned, %d mismatched",
                 bad_kind, outcomes[0], outcomes[1], outcomes[2]);
    }
    /* ties: equal logits choose in index order, the weights then equal */
    float t[4] = {2.0f, 5.0f, 5.0f, 5.0f}, w[2];
    uint32_t ch[2];
    kipp_om_moe_route(t, 4, 2, 1, ch, w);
    KT_CHECK(ch[0] == 1 && ch[1] == 2 && w[0] == 0.5f && w[1] == 0.5f, "moe route ties: %u %u %g %g", ch[0],
             ch[1], (double)w[0], (double)w[1]);
    /* the weighted sum's step, product and sum rounded apart */
    int bad_ma = 0;
    for (int i = 0; i < 100000; i++) {
        const float acc = from_bits(rng() & 0xbf7fffffu), wt = (float)(rng() >> 8) / 16777216.0f;
        const float y = from_bits(rng() & 0xbf7fffffu), prod = wt * y, want = acc + prod;
        if (to_bits(kipp_om_mul_add(acc, wt, y)) != to_bits(want)) bad_ma++;
    }
    KT_CHECK(bad_ma == 0, "mul_add differs from acc + w * y on %d inputs", bad_ma);
}

void kt_suite_cuda_ops_math(void) {
    test_conversions();
    test_silu();
    test_addressing();
    test_moe_route();
}
