/* test_cpu_kernels.c — the cpu backend's kernel table against double-precision references,
 * for every ISA level this machine runs (scalar, avx2, avx512, avx512vnni):
 *   - the activation converters: bf16 round-to-nearest-even on hand-picked values (ties,
 *     carries, inf, NaN) and bit-exact with the scalar formula on random values; Q8_0 / Q8_K
 *     round trip within d/2 per element, d = amax/127, s and bsums consistent with qs, an
 *     all-zero block giving d = 0;
 *   - the gemm of every weight type (F32 F16 BF16 Q8_0 Q4_0 Q4_K Q6_K, and Q4_1 Q5_0 Q5_1 Q2_K
 *     Q3_K Q5_K IQ4_NL IQ4_XS: a level's kernel or the dequantize fallback) over several k (odd
 *     lengths for the float types, 32/256 multiples up to 2560 for the block types),
 *     n_rows in {1,3,16,37}, n_tok in {1,2,3,5,8,17}, ldy > n_rows, padded row strides:
 *     each y against sum_i W[r][i] * X[t][i] in double, with W from kipp_dequantize_row and X
 *     the activation the kernel actually sees (bf16-rounded, or d * qs for 8-bit blocks),
 *     within 1e-5 * sum|w x|; the entries past n_rows must stay untouched;
 *   - dot_f32 / axpy_f32 at odd lengths; kipp_cpu_gemm_dequant on every type;
 *   - kipp_cpu_kernels_mm's mapping, and select's errors for unknown / unavailable levels.
 * Does not time the kernels. */
#include "kt.h"

#include "backend/cpu/kernels.h"
#include "core/types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng = 12345u;
static uint32_t urand(void) {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}
static float frand(void) { /* [-1, 1) */
    return (float)(urand() & 0xffffff) / 8388608.0f - 1.0f;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* every weight type Kipp runs: the first seven have kernels at every level */
#define ALL_TYPES                                                                                      \
    KIPP_TYPE_F32, KIPP_TYPE_F16, KIPP_TYPE_BF16, KIPP_TYPE_Q8_0, KIPP_TYPE_Q4_0, KIPP_TYPE_Q4_K,      \
        KIPP_TYPE_Q6_K, KIPP_TYPE_Q4_1, KIPP_TYPE_Q5_0, KIPP_TYPE_Q5_1, KIPP_TYPE_Q2_K, KIPP_TYPE_Q3_K, \
        KIPP_TYPE_Q5_K, KIPP_TYPE_IQ4_NL, KIPP_TYPE_IQ4_XS

/* A random row of n elements in type's storage, with sane scales for the block types. */
static void fill_row(uint32_t type, unsigned char *row, uint64_t n) {
    const uint64_t nbytes = kipp_type_row_bytes(type, n);
    if (type == KIPP_TYPE_F32) {
        for (uint64_t i = 0; i < n; i++) {
            float v = frand();
            memcpy(row + 4 * i, &v, 4);
        }
        return;
    }
    if (type == KIPP_TYPE_F16 || type == KIPP_TYPE_BF16) {
        for (uint64_t i = 0; i < n; i++) {
            float v = frand();
            uint16_t h = type == KIPP_TYPE_F16 ? kipp_f32_to_f16(v) : (uint16_t)(bits_of(v) >> 16);
            memcpy(row + 2 * i, &h, 2);
        }
        return;
    }
    for (uint64_t i = 0; i < nbytes; i++) row[i] = (unsigned char)urand();
    const uint32_t bb = kipp_type_block_bytes(type);
    for (uint64_t b = 0; b < nbytes / bb; b++) {
        unsigned char *blk = row + b * bb;
        uint16_t d = kipp_f32_to_f16(0.002f + 0.02f * fabsf(frand()));
        switch (type) {
        case KIPP_TYPE_Q8_0:
        case KIPP_TYPE_Q4_0: memcpy(blk, &d, 2); break;
        case KIPP_TYPE_Q4_K: {
            uint16_t dmin = kipp_f32_to_f16(0.001f + 0.01f * fabsf(frand()));
            d = kipp_f32_to_f16(0.0005f + 0.002f * fabsf(frand()));
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &dmin, 2);
            break; /* the 12 scale bytes stay random: any 6-bit scales/mins */
        }
        case KIPP_TYPE_Q6_K:
            d = kipp_f32_to_f16(0.0005f + 0.002f * fabsf(frand()));
            memcpy(blk + 208, &d, 2);
            for (int s = 0; s < 16; s++) blk[192 + s] = (unsigned char)(int8_t)((int)(urand() % 128) - 64);
            break;
        case KIPP_TYPE_Q5_0:
        case KIPP_TYPE_IQ4_NL: memcpy(blk, &d, 2); break;
        case KIPP_TYPE_Q4_1:
        case KIPP_TYPE_Q5_1: { /* d and a signed min m */
            uint16_t m = kipp_f32_to_f16(0.05f * frand());
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &m, 2);
            break;
        }
        case KIPP_TYPE_Q5_K:
        case KIPP_TYPE_Q2_K: {
            uint16_t dmin = kipp_f32_to_f16(0.001f + 0.01f * fabsf(frand()));
            d = kipp_f32_to_f16(0.0005f + 0.002f * fabsf(frand()));
            const int at = type == KIPP_TYPE_Q5_K ? 0 : 80;
            memcpy(blk + at, &d, 2);
            memcpy(blk + at + 2, &dmin, 2);
            break;
        }
        case KIPP_TYPE_Q3_K:
            d = kipp_f32_to_f16(0.0005f + 0.002f * fabsf(frand()));
            memcpy(blk + 108, &d, 2);
            break;
        case KIPP_TYPE_IQ4_XS:
            d = kipp_f32_to_f16(0.0001f + 0.001f * fabsf(frand()));
            memcpy(blk, &d, 2);
            break;
        }
    }
}

/* ---- activation converters ---------------------------------------------------------- */

/* The bf16 conversion kernels.h defines, written independently of kernels_scalar.c. */
static uint16_t ref_bf16(float f) {
    const uint32_t u = bits_of(f);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
    const uint32_t lower = u & 0xffffu, upper = u >> 16;
    if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) return (uint16_t)(upper + 1);
    return (uint16_t)upper;
}

static void check_quant_bf16(const kipp_cpu_kernels *lv) {
    kipp_cpu_quant_fn q = lv->quant[KIPP_ACT_BF16];
    if (!q) return; /* a level need not convert to bf16 if no kernel consumes it */
    /* hand-picked: exact, below/at/above ties with even and odd kept lsb, carry into the
     * exponent, FLT_MAX to inf, inf, -0, NaN (one whose payload is only in the low bits) */
    static const uint32_t in[] = {0x3f800000u, 0x3f807fffu, 0x3f808000u, 0x3f808001u, 0x3f818000u,
                                  0xbf818000u, 0x3f7fffffu, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
                                  0x80000000u, 0x00000000u, 0x7fc00000u, 0x7f800001u, 0x00008000u,
                                  0x00018000u};
    static const uint16_t want[] = {0x3f80, 0x3f80, 0x3f80, 0x3f81, 0x3f82, 0xbf82, 0x3f80, 0x7f80,
                                    0x7f80, 0xff80, 0x8000, 0x0000, 0x7fc0, 0, 0x0000, 0x0002};
    enum { N = 16, LEN = 67 };
    float x[LEN];
    uint16_t out[LEN];
    for (int i = 0; i < LEN; i++) x[i] = float_of(in[(i * 7) % N]); /* each value in many lanes */
    q(x, out, LEN);
    int bad = -1;
    for (int i = 0; i < LEN && bad < 0; i++) {
        const int j = (i * 7) % N;
        if (in[j] == 0x7f800001u) { /* a NaN must stay a NaN */
            if ((out[i] & 0x7f80) != 0x7f80 || (out[i] & 0x7f) == 0) bad = i;
        } else if (out[i] != want[j]) {
            bad = i;
        }
    }
    KT_CHECK(bad < 0, "%s bf16 of 0x%08x at %d: 0x%04x", lv->isa, bad < 0 ? 0 : bits_of(x[bad]), bad,
             bad < 0 ? 0 : out[bad]);
    /* random values of many magnitudes: bit-exact with the reference formula */
    static const uint64_t lens[] = {1, 5, 16, 31, 33, 1000};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        float *xs = malloc(lens[li] * sizeof *xs);
        uint16_t *o = malloc(lens[li] * sizeof *o);
        for (uint64_t i = 0; i < lens[li]; i++) xs[i] = float_of(urand() << 8 ^ urand());
        for (uint64_t i = 0; i < lens[li]; i++)
            if (isnan(xs[i])) xs[i] = 1.0f;
        q(xs, o, lens[li]);
        uint64_t nbad = 0;
        for (uint64_t i = 0; i < lens[li]; i++) nbad += o[i] != ref_bf16(xs[i]);
        KT_CHECK(nbad == 0, "%s bf16 random n=%llu: %llu wrong", lv->isa, (unsigned long long)lens[li],
                 (unsigned long long)nbad);
        free(xs);
        free(o);
    }
}

/* A random activation row: mixed magnitudes, an outlier, and (when long enough) the second
 * 32-block and, if k >= 512, the second 256-block all zero. */
static void fill_act(float *x, uint64_t k, float scale) {
    for (uint64_t i = 0; i < k; i++) x[i] = frand() * scale;
    if (k >= 8) x[urand() % k] = 40.0f * scale;
    if (k >= 64)
        for (int i = 32; i < 64; i++) x[i] = 0.0f;
    if (k >= 512)
        for (int i = 256; i < 512; i++) x[i] = 0.0f;
}

static void check_quant_q8(const kipp_cpu_kernels *lv) {
    static const uint64_t ks[] = {256, 512, 2560};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const uint64_t k = ks[ki];
        float *x = malloc(k * sizeof *x);
        fill_act(x, k, ki == 1 ? 1e-3f : 3.0f);
        /* Q8_0 */
        if (lv->quant[KIPP_ACT_Q8_0]) {
            kipp_act_q8_0 *b = malloc(kipp_cpu_act_row_bytes(KIPP_ACT_Q8_0, k));
            lv->quant[KIPP_ACT_Q8_0](x, b, k);
            int bad = 0, zero_ok = 1;
            for (uint64_t j = 0; j < k / 32 && !bad; j++) {
                float amax = 0.0f;
                int sum = 0;
                for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * j + i]));
                if (fabsf(b[j].d - amax / 127.0f) > 1e-6f * amax / 127.0f) bad = 1;
                for (int i = 0; i < 32; i++) {
                    sum += b[j].qs[i];
                    if (fabs((double)x[32 * j + i] - (double)b[j].d * b[j].qs[i]) >
                        0.5 * b[j].d * (1 + 1e-5) + 1e-30)
                        bad = 2;
                }
                if (fabs((double)b[j].s - (double)b[j].d * sum) > 1e-6 * fabs((double)b[j].d * sum)) bad = 3;
                if (amax == 0.0f && !(b[j].d == 0.0f && b[j].s == 0.0f && sum == 0)) zero_ok = 0;
            }
            KT_CHECK(!bad, "%s q8_0 k=%llu: check %d failed", lv->isa, (unsigned long long)k, bad);
            KT_CHECK(zero_ok && k >= 64 && b[1].d == 0.0f, "%s q8_0 all-zero block", lv->isa);
            free(b);
        }
        /* Q8_K */
        if (lv->quant[KIPP_ACT_Q8_K]) {
            kipp_act_q8_k *b = malloc(kipp_cpu_act_row_bytes(KIPP_ACT_Q8_K, k));
            lv->quant[KIPP_ACT_Q8_K](x, b, k);
            int bad = 0, zero_ok = 1;
            for (uint64_t j = 0; j < k / 256 && !bad; j++) {
                float amax = 0.0f;
                for (int i = 0; i < 256; i++) amax = fmaxf(amax, fabsf(x[256 * j + i]));
                if (fabsf(b[j].d - amax / 127.0f) > 1e-6f * amax / 127.0f) bad = 1;
                for (int i = 0; i < 256; i++)
                    if (b[j].qs[i] < -127 ||
                        fabs((double)x[256 * j + i] - (double)b[j].d * b[j].qs[i]) >
                            0.5 * b[j].d * (1 + 1e-5) + 1e-30)
                        bad = 2;
                for (int s = 0; s < 16; s++) {
                    int sum = 0;
                    for (int i = 0; i < 16; i++) sum += b[j].qs[256 * 0 + 16 * s + i];
                    if (sum != b[j].bsums[s]) bad = 3;
                }
                if (amax == 0.0f) {
                    int nz = 0;
                    for (int i = 0; i < 256; i++) nz |= b[j].qs[i];
                    if (b[j].d != 0.0f || nz) zero_ok = 0;
                }
            }
            KT_CHECK(!bad, "%s q8_k k=%llu: check %d failed", lv->isa, (unsigned long long)k, bad);
            KT_CHECK(zero_ok && (k < 512 || b[1].d == 0.0f), "%s q8_k all-zero block", lv->isa);
            free(b);
        }
        /* Q16: bit-identical to the portable converter, within d/2, sums exact */
        if (lv->quant[KIPP_ACT_Q16]) {
            const size_t nb = kipp_cpu_act_row_bytes(KIPP_ACT_Q16, k);
            kipp_act_q16 *b = malloc(nb), *r = malloc(nb);
            memset(b, 0, nb);
            memset(r, 0, nb);
            lv->quant[KIPP_ACT_Q16](x, b, k);
            kipp_cpu_quant_q16_scalar(x, r, k);
            int bad = memcmp(b, r, nb) != 0;
            for (uint64_t j = 0; j < k / 32 && !bad; j++) {
                float amax = 0.0f;
                int32_t sum = 0;
                for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * j + i]));
                if (fabsf(b[j].d - amax / 32767.0f) > 1e-6f * amax / 32767.0f) bad = 2;
                for (int i = 0; i < 32; i++) {
                    sum += b[j].qs[i];
                    if (b[j].qs[i] < -32767 ||
                        fabs((double)x[32 * j + i] - (double)b[j].d * b[j].qs[i]) > 0.51 * b[j].d + 1e-30)
                        bad = 3; /* x * id carries ~32767 ulp: 0.5 + 0.004 steps */
                }
                if (sum != b[j].sum) bad = 4;
                if (amax == 0.0f && (b[j].d != 0.0f || b[j].sum != 0)) bad = 5;
            }
            KT_CHECK(!bad, "%s q16 k=%llu: check %d failed", lv->isa, (unsigned long long)k, bad);
            free(b);
            free(r);
        }
        free(x);
    }
}

/* ---- gemms ---------------------------------------------------------------------------- */

enum { MAX_ROWS = 37, MAX_TOK = 17 };
#define SENTINEL 0x7fc0bad1u

/* Runs gemm over W (MAX_ROWS rows of type, stride ws) and X (MAX_TOK rows in act, stride xs)
 * for every n_rows / n_tok combination; checks against ref / mag (MAX_ROWS x MAX_TOK). */
static void run_gemm_grid(const char *label, uint32_t type, uint32_t act, kipp_cpu_gemm_fn gemm,
                          int dequant, const unsigned char *w, size_t ws, const unsigned char *xa,
                          size_t xs, const double *ref, const double *mag, uint64_t k) {
    static const uint64_t rows[] = {1, 3, 16, 37};
    static const uint64_t toks[] = {1, 2, 3, 5, 8, 17};
    int nfail = 0; /* print the first failing combination only; count the rest */
    for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
            const uint64_t nr = rows[ri], nt = toks[ti], r0 = (MAX_ROWS - nr) / 2;
            const size_t ldy = nr + 3;
            float *y = malloc(ldy * nt * sizeof *y);
            for (size_t i = 0; i < ldy * nt; i++) y[i] = float_of(SENTINEL);
            if (dequant)
                kipp_cpu_gemm_dequant(type, w + r0 * ws, ws, nr, xa, xs, nt, y, ldy, k);
            else
                gemm(w + r0 * ws, ws, nr, xa, xs, nt, y, ldy, k);
            int ok = 1;
            uint64_t bt = 0, br = 0;
            for (uint64_t t = 0; t < nt && ok; t++) {
                for (uint64_t r = 0; r < ldy && ok; r++) {
                    const float got = y[t * ldy + r];
                    if (r >= nr)
                        ok = bits_of(got) == SENTINEL;
                    else
                        ok = fabs((double)got - ref[(r0 + r) * MAX_TOK + t]) <=
                             1e-5 * mag[(r0 + r) * MAX_TOK + t] + 1e-30;
                    bt = t;
                    br = r;
                }
            }
            if (ok) {
                KT_CHECK(1, "");
            } else if (nfail++ == 0) {
                const double want = br < nr ? ref[(r0 + br) * MAX_TOK + bt] : 0.0;
                const double m = br < nr ? mag[(r0 + br) * MAX_TOK + bt] : 0.0;
                KT_CHECK(0, "%s %s (act %u) k=%llu rows=%llu tok=%llu y[%llu][%llu]: %.9g vs %.9g (mag %.3g)%s",
                         label, kipp_type_name(type), act, (unsigned long long)k, (unsigned long long)nr,
                         (unsigned long long)nt, (unsigned long long)bt, (unsigned long long)br,
                         y[bt * ldy + br], want, m, br >= nr ? " (past n_rows: written)" : "");
            } else {
                kt_failed++;
            }
            free(y);
        }
    }
    if (nfail > 1)
        fprintf(stderr, "  ... %s %s k=%llu: %d of 24 row/token combinations failed\n", label,
                kipp_type_name(type), (unsigned long long)k, nfail);
}

/* One weight type on one level: its table entry (or, dequant = 1, kipp_cpu_gemm_dequant on
 * f32 activations). */
static void check_gemm_entry(const kipp_cpu_kernels *lv, uint32_t type, int dequant, kipp_cpu_mm mm,
                             const char *label);

/* One weight type on one level: its table entry, and its many-token kernel where it has one
 * (tested at every token count, below its threshold too); a lacking entry tests the
 * dequantize fallback the caller then uses. */
static void check_gemm_type(const kipp_cpu_kernels *lv, uint32_t type, int dequant) {
    const kipp_cpu_mm mm = dequant ? (kipp_cpu_mm){.act = KIPP_ACT_F32} : kipp_cpu_kernels_mm(lv, type);
    if (!dequant && !mm.gemm) { /* the caller falls back to gemm_dequant: test that instead */
        check_gemm_type(lv, type, 1);
        return;
    }
    check_gemm_entry(lv, type, dequant, mm, dequant ? "gemm_dequant" : lv->isa);
    for (uint32_t r = 0; r < mm.n_range; r++) { /* the auto table's kernels per token range */
        char label[64];
        snprintf(label, sizeof label, "%s range %u", lv->isa, r);
        check_gemm_entry(lv, type, 0, (kipp_cpu_mm){.act = mm.range[r].act, .gemm = mm.range[r].gemm}, label);
    }
    if (mm.gemm_many) {
        char label[64];
        snprintf(label, sizeof label, "%s many", lv->isa);
        check_gemm_entry(lv, type, 0, (kipp_cpu_mm){.act = mm.act_many, .gemm = mm.gemm_many}, label);
    }
}

static void check_gemm_entry(const kipp_cpu_kernels *lv, uint32_t type, int dequant, kipp_cpu_mm mm,
                             const char *label) {
    static const uint64_t k_float[] = {1, 7, 33, 256, 1023, 2560};
    static const uint64_t k_32[] = {32, 96, 256, 1024, 2560};
    static const uint64_t k_256[] = {256, 512, 2560};
    const uint32_t be = kipp_type_block_elems(type);
    const uint64_t *ks = be == 1 ? k_float : be == 32 ? k_32 : k_256;
    const size_t nk = be == 1 ? 6 : be == 32 ? 5 : 3;
    kipp_cpu_quant_fn quant = mm.act == KIPP_ACT_F32 ? NULL : lv->quant[mm.act];
    KT_CHECK(mm.act == KIPP_ACT_F32 || quant != NULL, "%s %s: no converter for act %u", lv->isa,
             kipp_type_name(type), mm.act);
    if (mm.act != KIPP_ACT_F32 && !quant) return;
    for (size_t ki = 0; ki < nk; ki++) {
        const uint64_t k = ks[ki];
        const size_t pad = (ki & 1) ? 64 : 0; /* padded strides on every other k */
        const size_t rb = kipp_type_row_bytes(type, k), ws = rb + pad;
        const size_t ab = kipp_cpu_act_row_bytes(mm.act, k), xs = ab + pad;
        unsigned char *w = calloc(MAX_ROWS, ws), *xa = calloc(MAX_TOK, xs);
        float *wd = malloc(MAX_ROWS * k * sizeof *wd), *xf = malloc(MAX_TOK * k * sizeof *xf);
        float *xd = malloc(MAX_TOK * k * sizeof *xd);
        double *ref = malloc(MAX_ROWS * MAX_TOK * sizeof *ref), *mag = malloc(MAX_ROWS * MAX_TOK * sizeof *mag);
        for (int r = 0; r < MAX_ROWS; r++) {
            fill_row(type, w + r * ws, k);
            kipp_dequantize_row(type, w + r * ws, wd + r * k, k);
        }
        static const float scales[] = {1.0f, 0.01f, 30.0f};
        for (int t = 0; t < MAX_TOK; t++) {
            float *xt = xf + t * k;
            fill_act(xt, k, scales[t % 3]);
            if (t == 4)
                for (uint64_t i = 0; i < k; i++) xt[i] = 0.0f; /* an all-zero row */
            if (quant)
                quant(xt, xa + t * xs, k);
            else
                memcpy(xa + t * xs, xt, k * sizeof *xt);
            kipp_cpu_act_to_f32(mm.act, xa + t * xs, xd + t * k, k);
        }
        for (int r = 0; r < MAX_ROWS; r++)
            for (int t = 0; t < MAX_TOK; t++) {
                double s = 0.0, m = 0.0;
                for (uint64_t i = 0; i < k; i++) {
                    const double p = (double)wd[r * k + i] * xd[t * k + i];
                    s += p;
                    m += fabs(p);
                }
                ref[r * MAX_TOK + t] = s;
                mag[r * MAX_TOK + t] = m;
            }
        run_gemm_grid(label, type, mm.act, mm.gemm, dequant, w, ws, xa, xs, ref, mag, k);
        free(w);
        free(xa);
        free(wd);
        free(xf);
        free(xd);
        free(ref);
        free(mag);
    }
}

static void check_vec(const kipp_cpu_kernels *lv) {
    static const uint64_t lens[] = {0, 1, 7, 15, 16, 17, 33, 100, 1023};
    float a[1023], b[1023], y[1023], y0[1023];
    KT_CHECK(lv->dot_f32 && lv->axpy_f32, "%s lacks dot_f32/axpy_f32", lv->isa);
    if (!lv->dot_f32 || !lv->axpy_f32) return;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const uint64_t n = lens[li];
        double s = 0.0, m = 0.0;
        for (uint64_t i = 0; i < n; i++) {
            a[i] = frand();
            b[i] = frand();
            y[i] = y0[i] = frand();
            s += (double)a[i] * b[i];
            m += fabs((double)a[i] * b[i]);
        }
        const float got = lv->dot_f32(a, b, n);
        KT_CHECK(fabs(got - s) <= 1e-5 * m + 1e-30, "%s dot_f32 n=%llu: %.9g vs %.9g", lv->isa,
                 (unsigned long long)n, got, s);
        const float alpha = frand();
        lv->axpy_f32(y, alpha, a, n);
        int bad = 0;
        for (uint64_t i = 0; i < n; i++) {
            const double want = (double)y0[i] + (double)alpha * a[i];
            if (fabs(y[i] - want) > 1.2e-7 * (fabs(y0[i]) + fabs(alpha * a[i])) + 1e-30) bad = 1;
        }
        KT_CHECK(!bad, "%s axpy_f32 n=%llu", lv->isa, (unsigned long long)n);
    }
}

static void check_mm_map(const kipp_cpu_kernels *lv) {
    const struct {
        uint32_t type;
        kipp_cpu_mm mm;
    } map[] = {{KIPP_TYPE_F32, lv->f32},   {KIPP_TYPE_F16, lv->f16},   {KIPP_TYPE_BF16, lv->bf16},
               {KIPP_TYPE_Q8_0, lv->q8_0}, {KIPP_TYPE_Q4_0, lv->q4_0}, {KIPP_TYPE_Q4_K, lv->q4_k},
               {KIPP_TYPE_Q6_K, lv->q6_k}, {KIPP_TYPE_Q4_1, lv->q4_1}, {KIPP_TYPE_Q5_0, lv->q5_0},
               {KIPP_TYPE_Q5_1, lv->q5_1}, {KIPP_TYPE_Q2_K, lv->q2_k}, {KIPP_TYPE_Q3_K, lv->q3_k},
               {KIPP_TYPE_Q5_K, lv->q5_k}, {KIPP_TYPE_IQ4_NL, lv->iq4_nl}, {KIPP_TYPE_IQ4_XS, lv->iq4_xs}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        const kipp_cpu_mm mm = kipp_cpu_kernels_mm(lv, map[i].type);
        KT_CHECK(mm.gemm == map[i].mm.gemm && (mm.gemm == NULL || mm.act == map[i].mm.act),
                 "%s mm(%s) is not the table entry", lv->isa, kipp_type_name(map[i].type));
        if (!mm.gemm)
            KT_CHECK(mm.act == KIPP_ACT_F32, "%s mm(%s): lacking entry not f32", lv->isa,
                     kipp_type_name(map[i].type));
    }
    /* a type Kipp does not run (IQ2_XXS), and a bogus id */
    kipp_cpu_mm none = kipp_cpu_kernels_mm(lv, 16);
    KT_CHECK(none.gemm == NULL && none.act == KIPP_ACT_F32, "%s mm(IQ2_XXS) not empty", lv->isa);
    none = kipp_cpu_kernels_mm(lv, 999);
    KT_CHECK(none.gemm == NULL && none.act == KIPP_ACT_F32, "%s mm(999) not empty", lv->isa);
    /* the scalar level carries the first seven types (the rest: the dequantize fallback) */
    if (strcmp(lv->isa, "scalar") == 0)
        for (size_t i = 0; i < 7; i++)
            KT_CHECK(map[i].mm.gemm != NULL, "scalar lacks %s", kipp_type_name(map[i].type));
}

/* Weights repacked at load (types whose entry has a packer): each such type packed whole
 * (70 rows: four full groups of 16 and a padded one), then the packer's gemm over row ranges
 * that start at a group (0, 16, 32; 64 rows and more reach the 4-group tiles of avx512bf16) for every token count, against double dots of the
 * dequantized weights and the Q16 activations. */
static void check_packed(const kipp_cpu_kernels *lv) {
    static const uint32_t types[] = {ALL_TYPES};
    static const uint64_t ks[] = {32, 96, 1024, 2560};
    static const uint64_t toks[] = {1, 2, 3, 4, 8, 17, 32, 40}; /* 32, 40: AMX's two token tiles, and a tail */
    enum { PK_TOK = 40, PK_ROWS = 70, PK_LDY = 72 };
    static const uint64_t ranges[][2] = {{0, 1}, {0, 16}, {0, 37}, {16, 21}, {32, 5}, {16, 3}, {0, 70}, {16, 54}, {0, 64}};
    int packs = 0, packers = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        const kipp_cpu_packer *pp = kipp_cpu_kernels_mm(lv, type).packer;
        if (!pp) continue;
        packers++;
        /* the activations the packed gemm reads (Q16 for the integer packers, hi/lo bf16 for AMX) */
        const uint32_t act = pp->act;
        const kipp_cpu_quant_fn quant = lv->quant[act];
        KT_CHECK(pp->bytes && pp->pack && pp->gemm && quant && (act == KIPP_ACT_Q16 || act == KIPP_ACT_BF16X2),
                 "%s %s: packer incomplete, or no converter for its activations (%u)", lv->isa, kipp_type_name(type),
                 act);
        if (!quant) continue;
        if (!pp->bytes || !pp->pack || !pp->gemm || !pp->bytes(type, PK_ROWS, 256)) continue;
        packs++;
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const uint64_t k = ks[ki];
            if (k % kipp_type_block_elems(type) != 0) continue; /* not a row length of this type */
            const size_t rb = kipp_type_row_bytes(type, k), ab = kipp_cpu_act_row_bytes(act, k);
            const size_t pb = pp->bytes(type, PK_ROWS, k), grb = pp->bytes(type, 16, k) / 16;
            unsigned char *w = calloc(PK_ROWS, rb), *xa = calloc(PK_TOK, ab);
            void *pk = aligned_alloc(64, (pb + 63) / 64 * 64);
            float *wd = malloc(PK_ROWS * k * sizeof *wd), *xf = malloc(k * sizeof *xf);
            float *xd = malloc(PK_TOK * k * sizeof *xd), *y = malloc(PK_TOK * PK_LDY * sizeof *y);
            for (int r = 0; r < PK_ROWS; r++) {
                fill_row(type, w + r * rb, k);
                kipp_dequantize_row(type, w + r * rb, wd + r * k, k);
            }
            for (int t = 0; t < PK_TOK; t++) {
                fill_act(xf, k, t % 3 ? 1.0f : 25.0f);
                quant(xf, xa + t * ab, k);
                kipp_cpu_act_to_f32(act, xa + t * ab, xd + t * k, k);
            }
            memset(pk, 0xa5, pb);
            pp->pack(type, w, rb, PK_ROWS, 0, 16, k, pk); /* in two calls, as threads do */
            pp->pack(type, w, rb, PK_ROWS, 16, PK_ROWS, k, pk);
            /* each row back from the packed form, bit for bit (embedding lookups) */
            KT_CHECK(pp->row != NULL, "%s %s: packer has no row", lv->isa, kipp_type_name(type));
            int row_bad = 0;
            for (int r = 0; r < PK_ROWS && pp->row && !row_bad; r++) {
                pp->row(type, pk, (uint64_t)r, k, xf);
                for (uint64_t i = 0; i < k && !row_bad; i++)
                    if (bits_of(xf[i]) != bits_of(wd[(uint64_t)r * k + i])) {
                        row_bad = 1;
                        KT_CHECK(0, "%s packed %s k=%llu row %d [%llu]: %.9g vs %.9g", lv->isa, kipp_type_name(type),
                                 (unsigned long long)k, r, (unsigned long long)i, xf[i], wd[(uint64_t)r * k + i]);
                    }
            }
            KT_CHECK(!row_bad, "%s packed %s k=%llu: rows read back", lv->isa, kipp_type_name(type), (unsigned long long)k);
            int bad = 0;
            for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0] && !bad; ri++)
                for (size_t tj = 0; tj < sizeof toks / sizeof toks[0] && !bad; tj++) {
                    const uint64_t r0 = ranges[ri][0], nr = ranges[ri][1], nt = toks[tj], ldy = PK_LDY;
                    for (size_t i = 0; i < PK_TOK * PK_LDY; i++) y[i] = float_of(SENTINEL);
                    pp->gemm((const char *)pk + r0 * grb, grb, nr, xa, ab, nt, y, ldy, k);
                    for (uint64_t t = 0; t < nt && !bad; t++)
                        for (uint64_t r = 0; r < ldy && !bad; r++) {
                            const float got = y[t * ldy + r];
                            if (r >= nr) {
                                if (bits_of(got) != SENTINEL) bad = 1;
                                continue;
                            }
                            double ref = 0.0, mag = 0.0;
                            for (uint64_t i = 0; i < k; i++) {
                                const double pr = (double)wd[(r0 + r) * k + i] * xd[t * k + i];
                                ref += pr;
                                mag += fabs(pr);
                            }
                            if (fabs(got - ref) > 1e-5 * mag + 1e-30) {
                                bad = 2;
                                KT_CHECK(0, "%s packed %s k=%llu rows %llu+%llu tok %llu y[%llu][%llu]: %.9g vs %.9g",
                                         lv->isa, kipp_type_name(type), (unsigned long long)k, (unsigned long long)r0,
                                         (unsigned long long)nr, (unsigned long long)nt, (unsigned long long)t,
                                         (unsigned long long)r, got, ref);
                            }
                        }
                }
            KT_CHECK(bad != 1, "%s packed %s k=%llu: wrote past n_rows", lv->isa, kipp_type_name(type),
                     (unsigned long long)k);
            KT_CHECK(!bad, "%s packed %s k=%llu", lv->isa, kipp_type_name(type), (unsigned long long)k);
            free(w); free(xa); free(pk); free(wd); free(xf); free(xd); free(y);
        }
    }
    KT_CHECK(packs == packers, "%s: %d packers, %d pack a 70 x 256 tensor", lv->isa, packers, packs);
}

static void check_level(const kipp_cpu_kernels *lv) {
    static const uint32_t types[] = {ALL_TYPES};
    check_mm_map(lv);
    check_quant_bf16(lv);
    check_quant_q8(lv);
    check_vec(lv);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) check_gemm_type(lv, types[i], 0);
    check_packed(lv);
}

/* Two-plane converters: the level's must equal the portable one byte for byte, and the
 * planes must reconstruct x within d/2 (d = amax / 16256). */
static void check_quant2(const kipp_cpu_kernels *k) {
    enum { K = 512 };
    static float x[K];
    static unsigned char a_hi[K * 2], a_lo[K * 2], b_hi[K * 2], b_lo[K * 2];
    for (int acti = 0; acti < 2; acti++) {
        const uint32_t act = acti ? KIPP_ACT_Q8_K : KIPP_ACT_Q8_0;
        const size_t rb = kipp_cpu_act_row_bytes(act, K);
        for (int i = 0; i < K; i++) x[i] = (i % 97 == 0 ? 40.0f : 1.0f) * frand() * (i < 32 ? 0.0f : 1.0f);
        kipp_cpu_quant2_fn q2 = k->quant2[act];
        kipp_cpu_quant2_fn ref = acti ? kipp_cpu_quant2_q8_k_scalar : kipp_cpu_quant2_q8_0_scalar;
        if (!q2) continue;
        memset(a_hi, 0, sizeof a_hi); memset(a_lo, 0, sizeof a_lo);
        memset(b_hi, 0, sizeof b_hi); memset(b_lo, 0, sizeof b_lo);
        q2(x, a_hi, a_lo, K);
        ref(x, b_hi, b_lo, K);
        KT_CHECK(memcmp(a_hi, b_hi, rb) == 0 && memcmp(a_lo, b_lo, rb) == 0, "%s quant2 act %u differs from scalar",
                 k->isa, act);
        double worst = 0.0;
        const int be = acti ? 256 : 32;
        for (int i = 0; i < K; i++) {
            float dh, dl;
            int hq, lq;
            if (acti) {
                const kipp_act_q8_k *h = (const kipp_act_q8_k *)a_hi + i / be, *l = (const kipp_act_q8_k *)a_lo + i / be;
                dh = h->d; dl = l->d; hq = h->qs[i % be]; lq = l->qs[i % be];
            } else {
                const kipp_act_q8_0 *h = (const kipp_act_q8_0 *)a_hi + i / be, *l = (const kipp_act_q8_0 *)a_lo + i / be;
                dh = h->d; dl = l->d; hq = h->qs[i % be]; lq = l->qs[i % be];
            }
            /* half a step of the low plane, plus the f32 rounding of the residual x - dh*hq
             * it quantizes (an ulp of x and of dh*hq each, in low-plane steps): with x up to
             * 40 that is ~1e-3 steps, which a 0.5001 bound alone missed (seen on avx512vnni) */
            const double dlv = dl > 0 ? dl : 1.0;
            const double slack = (fabs((double)x[i]) + fabs((double)dh * hq)) * 0x1p-23 / dlv;
            const double err = fabs((double)dh * hq + (double)dl * lq - x[i]) / dlv - slack;
            if (err > worst) worst = err;
        }
        KT_CHECK(worst <= 0.5001, "%s quant2 act %u: error %.3g d beyond the f32 slack", k->isa, act, worst);
    }
}

/* Attention's p·V kernels against double precision: G heads, n rows of stride vs, over f32
 * rows and (where the level has them) f16 / bf16 rows, the reference from the rounded rows. */
static void check_pv(const kipp_cpu_kernels *k) {
    static const uint32_t Gs[] = {1, 2, 3}, ds[] = {64, 100, 128, 200}, ns[] = {1, 5, 16};
    static float o[3 * 200], p[3 * 20], v[16 * 260];
    static uint16_t vh[16 * 260];
    static double ref[3 * 200];
    for (int ty = 0; ty < 3; ty++) {
        if (ty == 0 ? !k->pv_f32 : ty == 1 ? !k->pv_f16 : !k->pv_bf16) continue;
        for (size_t gi = 0; gi < 3; gi++)
            for (size_t di = 0; di < 4; di++)
                for (size_t ni = 0; ni < 3; ni++) {
                    const uint32_t G = Gs[gi], d = ds[di], n = ns[ni];
                    const size_t ps = 20, vs = 260;
                    for (uint32_t i = 0; i < G * d; i++) ref[i] = o[i] = frand();
                    for (uint32_t i = 0; i < G * ps; i++) p[i] = frand();
                    for (uint32_t i = 0; i < 16 * vs; i++) {
                        v[i] = frand();
                        if (ty == 1) v[i] = kipp_f16_to_f32(vh[i] = kipp_f32_to_f16(v[i]));
                        if (ty == 2) v[i] = kipp_bf16_to_f32(vh[i] = kipp_f32_to_bf16(v[i]));
                    }
                    for (uint32_t g = 0; g < G; g++)
                        for (uint32_t t = 0; t < n; t++)
                            for (uint32_t i = 0; i < d; i++) ref[g * d + i] += (double)p[g * ps + t] * v[t * vs + i];
                    if (ty == 0) k->pv_f32(o, p, ps, G, v, vs, n, d);
                    else if (ty == 1) k->pv_f16(o, p, ps, G, vh, vs, n, d);
                    else k->pv_bf16(o, p, ps, G, vh, vs, n, d);
                    double worst = 0.0;
                    for (uint32_t i = 0; i < G * d; i++) worst = fmax(worst, fabs(o[i] - ref[i]));
                    KT_CHECK(worst < 1e-5, "%s pv (%s rows) G=%u d=%u n=%u: err %.3g", k->isa,
                             ty == 0 ? "f32" : ty == 1 ? "f16" : "bf16", G, d, n, worst);
                }
    }
}

/* Attention's p·V over V rows by pointer (pv_rows_*) against double precision, with the
 * rows scattered in memory in a shuffled order and o full of NaN beforehand (it is written,
 * not read); over 256 rows (the sum's chunk); and the same rows at other addresses give the
 * same bits (a result must not depend on where the KV blocks lie). */
typedef void (*pv_rows_fn_t)(float *, size_t, const float *, size_t, uint32_t, const void *const *, uint32_t,
                             uint32_t);
static void check_pv_rows(const kipp_cpu_kernels *k) {
    static const uint32_t nqs[] = {1, 5, 13, 40}, ds[] = {64, 100, 128}, ns[] = {1, 17, 300, 600};
    enum { NMAX = 600, DMAX = 128, QMAX = 40, VS = 136 };
    static float o[QMAX * DMAX], o2[QMAX * DMAX], p[QMAX * NMAX], v[NMAX * VS], v2[NMAX * VS];
    static uint16_t vh[NMAX * VS], vh2[NMAX * VS];
    static const void *rows[NMAX], *rows2[NMAX];
    static uint32_t slot[NMAX];
    for (int ty = 0; ty < 3; ty++) {
        const pv_rows_fn_t fn = ty == 0 ? k->pv_rows_f32 : ty == 1 ? k->pv_rows_f16 : k->pv_rows_bf16;
        if (!fn) continue;
        for (size_t qi = 0; qi < 4; qi++)
            for (size_t di = 0; di < 3; di++)
                for (size_t ni = 0; ni < 4; ni++) {
                    const uint32_t nq = nqs[qi], d = ds[di], n = ns[ni];
                    for (uint32_t t = 0; t < n; t++) slot[t] = t;
                    for (uint32_t t = n; t > 1; t--) { /* row t lives at slot[t] */
                        const uint32_t j = (uint32_t)(urand() % t), x = slot[t - 1];
                        slot[t - 1] = slot[j];
                        slot[j] = x;
                    }
                    for (uint32_t i = 0; i < n * VS; i++) {
                        v[i] = frand();
                        if (ty == 1) v[i] = kipp_f16_to_f32(vh[i] = kipp_f32_to_f16(v[i]));
                        if (ty == 2) v[i] = kipp_bf16_to_f32(vh[i] = kipp_f32_to_bf16(v[i]));
                        v2[i] = v[i];
                        vh2[i] = vh[i];
                    }
                    for (uint32_t t = 0; t < n; t++) {
                        const size_t at = (size_t)slot[t] * VS, at2 = (size_t)(n - 1 - t) * VS;
                        rows[t] = ty == 0 ? (const void *)(v + at) : (const void *)(vh + at);
                        rows2[t] = ty == 0 ? (const void *)(v2 + at2) : (const void *)(vh2 + at2);
                    }
                    for (uint32_t t = 0; t < n; t++) /* rows2: the same values, other places */
                        for (uint32_t i = 0; i < VS; i++) {
                            v2[(size_t)(n - 1 - t) * VS + i] = v[(size_t)slot[t] * VS + i];
                            vh2[(size_t)(n - 1 - t) * VS + i] = vh[(size_t)slot[t] * VS + i];
                        }
                    for (uint32_t i = 0; i < nq * NMAX; i++) p[i] = frand();
                    for (uint32_t i = 0; i < QMAX * DMAX; i++) o[i] = o2[i] = NAN;
                    fn(o, DMAX, p, NMAX, nq, rows, n, d);
                    fn(o2, DMAX, p, NMAX, nq, rows2, n, d);
                    double worst = 0.0;
                    int same = 1;
                    for (uint32_t q = 0; q < nq; q++)
                        for (uint32_t i = 0; i < d; i++) {
                            double ref = 0.0, mag = 0.0;
                            for (uint32_t t = 0; t < n; t++) {
                                const double term = (double)p[q * NMAX + t] * v[(size_t)slot[t] * VS + i];
                                ref += term;
                                mag += fabs(term);
                            }
                            const float got = o[q * DMAX + i];
                            worst = fmax(worst, isfinite(got) ? fabs(got - ref) / (mag + 1e-3) : INFINITY);
                            same &= memcmp(&got, &o2[q * DMAX + i], sizeof got) == 0;
                        }
                    KT_CHECK(worst < 1e-6, "%s pv_rows (%s rows) nq=%u d=%u n=%u: rel err %.3g", k->isa,
                             ty == 0 ? "f32" : ty == 1 ? "f16" : "bf16", nq, d, n, worst);
                    KT_CHECK(same, "%s pv_rows (%s rows) nq=%u d=%u n=%u: other addresses, other bits", k->isa,
                             ty == 0 ? "f32" : ty == 1 ? "f16" : "bf16", nq, d, n);
                }
    }
}

/* The optional elementwise kernels (softmax, SwiGLU) against double precision. */
static void check_elementwise(const kipp_cpu_kernels *k) {
    static const uint64_t lens[] = {1, 5, 16, 17, 100, 1000};
    float s[1000], g[1000], u[1000];
    double ref[1000];
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const uint64_t n = lens[li];
        if (k->softmax_f32) {
            const float scale = 0.088f; /* 1/sqrt(128) */
            for (uint64_t i = 0; i < n; i++) s[i] = 300.0f * frand() - (i % 7 == 0 ? 2000.0f : 0.0f);
            double mx = -1e300, sum = 0.0;
            for (uint64_t i = 0; i < n; i++) mx = fmax(mx, (double)s[i] * scale);
            for (uint64_t i = 0; i < n; i++) sum += ref[i] = exp((double)s[i] * scale - mx);
            k->softmax_f32(s, n, scale);
            double worst = 0.0, total = 0.0;
            for (uint64_t i = 0; i < n; i++) {
                worst = fmax(worst, fabs(s[i] - ref[i] / sum) / (ref[i] / sum + 1e-30));
                total += s[i];
            }
            KT_CHECK(worst < 1e-5 && fabs(total - 1.0) < 1e-5, "%s softmax n=%llu: rel err %.3g, sum %.9g",
                     k->isa, (unsigned long long)n, worst, total);
        }
        if (k->swiglu_f32) {
            for (uint64_t i = 0; i < n; i++) {
                g[i] = 40.0f * frand();
                u[i] = 3.0f * frand();
                ref[i] = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            }
            k->swiglu_f32(g, u, n);
            double worst = 0.0;
            for (uint64_t i = 0; i < n; i++) worst = fmax(worst, fabs(g[i] - ref[i]) / (fabs(ref[i]) + 1e-6));
            KT_CHECK(worst < 1e-5, "%s swiglu n=%llu: rel err %.3g", k->isa, (unsigned long long)n, worst);
        }
    }
}

/* The auto table composed for CPU classes by feature set (whether or not this CPU has them:
 * composing runs no kernel): each type's kernels come from a level the class runs, a type
 * that some such level has a kernel for never falls back to dequantizing, the packed path
 * only where its level runs, and the helpers exist. The classes: no SIMD, AVX2 desktops and
 * EPYC, AVX-512 without VNNI (Skylake-SP), with VNNI (Cascade Lake), with BF16 too, with
 * AMX (Sapphire Rapids: BF16 weights on the tiles). */
static void check_compose(void) {
    static const char *const levels[] = {"amx", "avx512bf16", "avx512vnni", "avx512", "avx2", "neon", "scalar"};
    enum { NC = 6 };
    kipp_cpu_features cls[NC];
    memset(cls, 0, sizeof cls);
    cls[1].avx2 = cls[1].fma = cls[1].f16c = 1;
    cls[2] = cls[1];
    cls[2].avx512f = cls[2].avx512bw = cls[2].avx512vl = 1;
    cls[3] = cls[2];
    cls[3].avx512vnni = 1;
    cls[4] = cls[3];
    cls[4].avx512bf16 = 1;
    cls[5] = cls[4]; /* Sapphire Rapids and later: AMX tiles */
    cls[5].amx_tile = cls[5].amx_bf16 = cls[5].amx_int8 = cls[5].avx512fp16 = 1;
#if defined(__aarch64__)
    for (int c = 1; c < NC; c++) memset(&cls[c], 0, sizeof cls[c]);
    cls[1].neon = cls[1].dotprod = 1;
#endif
    /* feature lists round-trip through their names; an unknown name is an error naming it */
    char err[128];
    for (int c = 0; c < NC; c++) {
        char fs[256];
        kipp_cpu_features back;
        kipp_cpu_features_string(&cls[c], fs, sizeof fs);
        KT_CHECK(kipp_cpu_features_parse(fs, &back, err, sizeof err) == KIPP_OK && !memcmp(&back, &cls[c], sizeof back),
                 "features '%s' do not round-trip: %s", fs, err);
    }
    kipp_cpu_features junk;
    KT_CHECK(kipp_cpu_features_parse("avx2, avx513f", &junk, err, sizeof err) != KIPP_OK && strstr(err, "avx513f"),
             "unknown feature accepted: %s", err);
    for (int c = 0; c < NC; c++) {
        const kipp_cpu_features *f = &cls[c];
        char fs[256];
        kipp_cpu_features_string(f, fs, sizeof fs);
        kipp_cpu_kernels k;
        kipp_cpu_choice ch[KIPP_CPU_N_CHOICE];
        memset(ch, 0, sizeof ch);
        kipp_cpu_kernels_compose(f, &k, ch);
        KT_CHECK(k.isa && kipp_cpu_level_runs(f, k.isa), "[%s] auto isa %s", fs, k.isa ? k.isa : "(null)");
        KT_CHECK(k.dot_f32 && k.axpy_f32 && k.quant[KIPP_ACT_Q8_0] && k.quant[KIPP_ACT_Q8_K],
                 "[%s] auto helpers missing", fs);
        for (size_t i = 0; i < KIPP_CPU_N_CHOICE; i++) {
            const uint32_t type = ch[i].type;
            const kipp_cpu_mm mm = kipp_cpu_kernels_mm(&k, type);
            int some = 0; /* does any level this class runs have a kernel for the type? */
            for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
                const kipp_cpu_kernels *lv = kipp_cpu_level_table(levels[l]);
                if (lv && kipp_cpu_level_runs(f, levels[l]) && kipp_cpu_kernels_mm(lv, type).gemm) some = 1;
            }
            KT_CHECK(!some || mm.gemm, "[%s] %s falls back to dequantizing though a level has a kernel", fs,
                     kipp_type_name(type));
            KT_CHECK(ch[i].why && *ch[i].why && ch[i].n_range >= 1 && ch[i].range[0].min_tok == 1,
                     "[%s] %s: no reason or no range from 1 token", fs, kipp_type_name(type));
            if (!mm.gemm) {
                KT_CHECK(ch[i].n_range == 1 && !strcmp(ch[i].range[0].level, "dequantize"),
                         "[%s] %s: a kernel named without one", fs, kipp_type_name(type));
                continue;
            }
            if (ch[i].packed) {
                const kipp_cpu_kernels *pl = kipp_cpu_level_table(ch[i].packed_level);
                KT_CHECK(pl && kipp_cpu_level_runs(f, ch[i].packed_level) && mm.packer &&
                             mm.packer == kipp_cpu_kernels_mm(pl, type).packer,
                         "[%s] %s: packed but not by a level it runs", fs, kipp_type_name(type));
                continue;
            }
            KT_CHECK(!mm.packer && mm.n_range == ch[i].n_range, "[%s] %s: ranges %u vs record %u", fs,
                     kipp_type_name(type), mm.n_range, ch[i].n_range);
            /* each range: a kernel of the level it names, which the class runs, ascending */
            for (uint32_t r = 0; r < mm.n_range && r < ch[i].n_range; r++) {
                const kipp_cpu_kernels *lv = kipp_cpu_level_table(ch[i].range[r].level);
                const int many = !strcmp(ch[i].range[r].variant, "many");
                const kipp_cpu_mm lm = lv ? kipp_cpu_kernels_mm(lv, type) : (kipp_cpu_mm){.act = 0};
                KT_CHECK(lv && kipp_cpu_level_runs(f, ch[i].range[r].level) &&
                             mm.range[r].gemm == (many ? lm.gemm_many : lm.gemm) &&
                             mm.range[r].act == (many ? lm.act_many : lm.act) &&
                             mm.range[r].min_tok == ch[i].range[r].min_tok &&
                             (r == 0 || mm.range[r].min_tok > mm.range[r - 1].min_tok),
                         "[%s] %s range %u: not %s:%s from %u", fs, kipp_type_name(type), r, ch[i].range[r].level,
                         ch[i].range[r].variant, ch[i].range[r].min_tok);
            }
            uint32_t act2;
            KT_CHECK(mm.gemm == kipp_cpu_mm_for(&mm, 2, &act2) && mm.act == act2, "[%s] %s: gemm is not the 2-token kernel",
                     fs, kipp_type_name(type));
        }
    }
#if defined(__x86_64__)
    {
        kipp_cpu_kernels ka;
        kipp_cpu_kernels_compose(&cls[5], &ka, NULL);
        KT_CHECK(!strcmp(ka.isa, "amx") && ka.bf16.packer == &kipp_cpu_packer_amx_bf16 &&
                     ka.quant[KIPP_ACT_BF16X2] == kipp_cpu_quant_amx_bf16x2 &&
                     ka.q8_0.packer == kipp_cpu_kernels_avx512vnni.q8_0.packer,
                 "AMX class: isa %s, BF16 not on the tiles or Q8_0 not avx512vnni's", ka.isa);
        kipp_cpu_kernels_compose(&cls[4], &ka, NULL);
        KT_CHECK(!strcmp(ka.isa, "avx512bf16") && !ka.bf16.packer,
                 "BF16 without AMX, not a Zen 4: isa %s, or BF16 packed (vdpbf16ps measured only on Zen 4)", ka.isa);
        kipp_cpu_features z4 = cls[4];
        z4.zen4 = 1;
        kipp_cpu_kernels_compose(&z4, &ka, NULL);
        KT_CHECK(ka.bf16.packer && ka.bf16.packer->act == KIPP_ACT_BF16X2 &&
                     ka.bf16.packer == kipp_cpu_level_table("avx512bf16")->bf16.packer && ka.quant[KIPP_ACT_BF16X2] &&
                     ka.q8_0.packer == kipp_cpu_kernels_avx512vnni.q8_0.packer,
                 "Zen 4 with AVX512-BF16: BF16 not on vdpbf16ps's packed layout, or Q8_0 not avx512vnni's");
    }
    /* the case issue 31 measured: AVX-512 without VNNI takes avx2's repacked Q8_0, Q4_K and
     * (since its tiles prefetch whole super-blocks) Q6_K */
    kipp_cpu_kernels k;
    kipp_cpu_kernels_compose(&cls[2], &k, NULL);
    uint32_t act;
    KT_CHECK(k.q8_0.packer == kipp_cpu_kernels_avx2.q8_0.packer && k.q4_k.packer == kipp_cpu_kernels_avx2.q4_k.packer &&
                 k.q6_k.packer == kipp_cpu_kernels_avx2.q6_k.packer &&
                 k.q5_k.packer == kipp_cpu_kernels_avx2.q5_k.packer && kipp_cpu_mm_for(&k.q4_1, 1, &act) == kipp_cpu_kernels_avx2.q4_1.gemm &&
                 kipp_cpu_mm_for(&k.q4_0, 64, &act) == kipp_cpu_kernels_avx2.q4_0.gemm_many &&
                 kipp_cpu_mm_for(&k.q4_0, 1, &act) == kipp_cpu_kernels_avx512.q4_0.gemm,
             "avx512 class: Q8_0 / Q4_K / Q5_K / Q6_K not repacked by avx2, or Q4_1 / Q4_0 not the measured kernels");
#endif
}

/* The packed gemms give the same bits whatever the token count and whichever level runs
 * them (the layout is level-independent): a token alone, in a batch of 17 and in batches of
 * 1-9 (every tile width), on every level this CPU runs that packs the type. The
 * cached-decode and prefix-reuse gates compare a token computed alone with the same token in a prompt chunk,
 * and a machine's levels must agree so that records of one class stand for another. */
static void check_packed_same_bits(void) {
    static const char *const isas[] = {"avx2", "avx512", "avx512vnni", "avx512bf16", "amx", "neon", "auto"};
    /* per type and the activations its packers read: the int packers' Q16, the hi/lo bf16
     * planes of AMX's tiles and of avx512bf16's vdpbf16ps (one layout) */
    static const struct {
        uint32_t type, act;
        const char *level; /* a level that packs it, where the CPU runs it */
    } cases[] = {{KIPP_TYPE_Q8_0, KIPP_ACT_Q16, "avx2"},       {KIPP_TYPE_Q4_K, KIPP_ACT_Q16, "avx2"},
                 {KIPP_TYPE_Q5_K, KIPP_ACT_Q16, "avx2"},       {KIPP_TYPE_Q6_K, KIPP_ACT_Q16, "avx2"},
                 {KIPP_TYPE_BF16, KIPP_ACT_BF16X2, "avx512bf16"}};
    enum { R = 70, NT = 17, LDY = 72 }; /* 70 rows: avx512bf16's 64-row tiles and a padded group */
    const uint64_t k = 1024;
    for (size_t ti = 0; ti < sizeof cases / sizeof cases[0]; ti++) {
        const uint32_t type = cases[ti].type, act = cases[ti].act;
        const size_t rb = kipp_type_row_bytes(type, k), ab = kipp_cpu_act_row_bytes(act, k);
        unsigned char *w = calloc(R, rb), *xa = calloc(NT, ab);
        float *xf = malloc(k * sizeof *xf), *ref = malloc(NT * LDY * sizeof *ref), *y = malloc(NT * LDY * sizeof *y);
        for (int r = 0; r < R; r++) fill_row(type, w + r * rb, k);
        for (int t = 0; t < NT; t++) {
            fill_act(xf, k, t % 3 ? 1.0f : 25.0f);
            (act == KIPP_ACT_Q16 ? kipp_cpu_quant_q16_scalar : kipp_cpu_quant_bf16x2_scalar)(xf, xa + t * ab, k);
        }
        int have_ref = 0, levels = 0;
        for (size_t li = 0; li < sizeof isas / sizeof isas[0]; li++) {
            const kipp_cpu_kernels *lv = NULL;
            char err[128];
            if (!kipp_cpu_isa_available(isas[li]) || kipp_cpu_kernels_select(isas[li], &lv, err, sizeof err) != KIPP_OK)
                continue;
            const kipp_cpu_packer *pp = kipp_cpu_kernels_mm(lv, type).packer;
            if (!pp || !pp->bytes(type, R, k)) continue;
            KT_CHECK(pp->act == act, "%s packed %s: activations %u, not %u", lv->isa, kipp_type_name(type), pp->act, act);
            if (pp->act != act) continue;
            levels++;
            const size_t pb = pp->bytes(type, R, k), grb = pp->bytes(type, 16, k) / 16;
            void *pk = aligned_alloc(64, (pb + 63) / 64 * 64);
            pp->pack(type, w, rb, R, 0, R, k, pk);
            /* all 17 at once, then 9 + 8, then one at a time */
            pp->gemm(pk, grb, R, xa, ab, NT, y, LDY, k);
            if (!have_ref) {
                memcpy(ref, y, NT * LDY * sizeof *y);
                have_ref = 1;
            }
            /* then in batches of other sizes (every tile width up to 9), then one at a time */
            static const int splits[][6] = {{9, 8}, {2, 3, 4, 5, 3}, {6, 7, 4}, {1}};
            static const char *const split_names[] = {"batch of 17", "batches 9 + 8", "batches 2 + 3 + 4 + 5 + 3",
                                                      "batches 6 + 7 + 4", "alone"};
            int bad = 0;
            for (int pass = 0; pass < 5 && !bad; pass++) {
                if (pass > 0)
                    for (int i = 0; i < NT * LDY; i++) y[i] = float_of(SENTINEL); /* a token not written shows */
                for (int t = 0, i = 0; pass > 0 && t < NT; i++) {
                    const int *sp = splits[pass - 1];
                    const int nb = sp[pass == 4 ? 0 : i]; /* "alone": its one size, repeated */
                    pp->gemm(pk, grb, R, xa + t * ab, ab, (uint64_t)nb, y + t * LDY, LDY, k);
                    t += nb;
                }
                for (int t = 0; t < NT && !bad; t++)
                    for (int r = 0; r < R && !bad; r++)
                        if (bits_of(y[t * LDY + r]) != bits_of(ref[t * LDY + r])) {
                            bad = 1;
                            KT_CHECK(0, "%s packed %s: token %d row %d (%s) %.9g, first level's 17-token batch %.9g",
                                     lv->isa, kipp_type_name(type), t, r, split_names[pass], y[t * LDY + r],
                                     ref[t * LDY + r]);
                        }
            }
            free(pk);
        }
#if defined(__x86_64__)
        KT_CHECK(levels > 0 || !kipp_cpu_isa_available(cases[ti].level), "%s on activations %u: no level packs it",
                 kipp_type_name(type), act);
#endif
        free(w); free(xa); free(xf); free(ref); free(y);
    }
}

void kt_suite_cpu_kernels(void) {
    static const char *const isas[] = {"scalar", "avx2", "avx512", "avx512vnni", "avx512bf16", "amx", "neon"};
    static const uint32_t types[] = {ALL_TYPES};
    char err[256];
    KT_CHECK(kipp_cpu_act_row_bytes(KIPP_ACT_F32, 7) == 28 && kipp_cpu_act_row_bytes(KIPP_ACT_BF16, 7) == 14 &&
                 kipp_cpu_act_row_bytes(KIPP_ACT_Q8_0, 64) == 2 * sizeof(kipp_act_q8_0) &&
                 kipp_cpu_act_row_bytes(KIPP_ACT_Q8_K, 512) == 2 * sizeof(kipp_act_q8_k),
             "act_row_bytes");
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++) {
        const kipp_cpu_kernels *k = NULL;
        err[0] = '\0';
        kipp_status st = kipp_cpu_kernels_select(isas[i], &k, err, sizeof err);
        if (!kipp_cpu_isa_available(isas[i])) {
            KT_CHECK(st != KIPP_OK && strstr(err, isas[i]), "forcing missing %s: %s", isas[i], err);
            continue;
        }
        KT_CHECK(st == KIPP_OK && k && strcmp(k->isa, isas[i]) == 0, "select %s: %s", isas[i], err);
        if (st == KIPP_OK && k) {
            check_level(k);
            check_elementwise(k);
            check_quant2(k);
            check_pv(k);
            check_pv_rows(k);
        }
    }
    /* the auto table this CPU runs, every kernel of it, and the composition for other classes */
    const kipp_cpu_kernels *ak = NULL;
    KT_CHECK(kipp_cpu_kernels_select("auto", &ak, err, sizeof err) == KIPP_OK && ak, "select auto: %s", err);
    if (ak) {
        check_level(ak);
        check_elementwise(ak);
        check_pv(ak);
        check_pv_rows(ak);
        KT_CHECK((ak->pv_rows_f16 && ak->pv_rows_bf16 && ak->pv_rows_f32) || strncmp(ak->isa, "avx", 3) != 0,
                 "%s: no pv_rows (V would be transposed on every prompt chunk; the x86 levels have them, NEON not yet)", ak->isa);
    }
    check_compose();
    check_packed_same_bits();
    /* the level-independent fallback, on every type */
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        check_gemm_type(&kipp_cpu_kernels_scalar, types[i], 1);
    const kipp_cpu_kernels *k;
    err[0] = '\0';
    KT_CHECK(kipp_cpu_kernels_select("avx9", &k, err, sizeof err) != KIPP_OK && strstr(err, "avx9"),
             "unknown level accepted: %s", err);
    KT_CHECK(kipp_cpu_kernels_select(NULL, &k, err, sizeof err) == KIPP_OK && k, "best level: %s", err);
}
