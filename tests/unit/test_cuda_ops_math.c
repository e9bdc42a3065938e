/* test_cuda_ops_math.c — unit suite for src/backend/cuda/ops_math.h, the math the cuda
 * kernels of ops.cu share with the host: its f32 <-> f16 / bf16 conversions must be bit for
 * bit those of host_kv.c (kipp_host_kv_put / kipp_host_kv_get) over every exponent, the
 * rounding ties, subnormals, infinities and NaN payloads; its silu is cpu-ref's; its KV
 * offset must land on kipp_host_kv_row()'s row for adversarial block tables. The fault modes
 * are compared with kipp_host_kv_row() itself in a -DKIPP_FAULT_INJECT build (where its
 * fault branch exists) and with this file's own statement of them otherwise. Runs with gcc,
 * no GPU, no CUDA headers. */
#include "backend/cuda/ops_math.h"
#include "backend/host_kv.h"
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
                                       .n_layer = geoms[gi].n_layer, .kv_dim = geoms[gi].kv_dim,
                                       .block_size = bs, .n_blocks = nb, .elt = elt,
                                       .fault = mode};
                    kv.part_bytes = (size_t)kv.n_layer * bs * kv.kv_dim * elt;
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
                                const size_t want = (size_t)block * 2 * kv.part_bytes +
                                                    p * kv.part_bytes +
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

void kt_suite_cuda_ops_math(void) {
    test_conversions();
    test_silu();
    test_addressing();
}
