/* kernels.h — the CPU backend's kernel table: one struct of function pointers per ISA level
 * (kernels_scalar.c, kernels_avx2.c, kernels_avx512.c, kernels_avx512vnni.c, kernels_neon.c),
 * chosen once at start-up by cpuid in cpu.c. Only the ISA files may use intrinsics. Kernels
 * do not thread: the caller (cpu.c / forward.c) splits weight rows over the pool.
 *
 * A matrix product runs in two steps. First each activation row (f32, k elements) is
 * converted once into the "activation format" its weight type's kernel consumes at this
 * level (f32 as is, bf16, or 8-bit blocks — what ggml calls the vec-dot type). Then the
 * gemm kernel computes y = W x for a range of weight rows against n_tok activation rows,
 * reading each weight row once per tile of tokens (the batched prefill / multi-sequence
 * decode path; n_tok = 1 is the decode matvec). */
#ifndef KIPP_CPU_KERNELS_H
#define KIPP_CPU_KERNELS_H

#include "kipp.h"
#include "core/types.h" /* kipp_cpu_bf16x2_one */

#include <stddef.h>
#include <stdint.h>

/* ---- activation formats ----------------------------------------------------------------
 * k (the row length) is always a multiple of 32 for Q8_0 and of 256 for Q8_K (the weight
 * type's block size guarantees it). Rows are packed, act_row_bytes apart. */
enum {
    KIPP_ACT_F32 = 0,  /* float[k], unchanged */
    KIPP_ACT_BF16 = 1, /* uint16_t[k]: round-to-nearest-even bf16 of x (NaN kept NaN) */
    KIPP_ACT_Q8_0 = 2, /* kipp_act_q8_0[k/32] */
    KIPP_ACT_Q8_K = 3, /* kipp_act_q8_k[k/256] */
    KIPP_ACT_Q16 = 4,  /* kipp_act_q16[k/32] (the many-token gemms of some levels) */
    /* uint16_t[2k]: hi[k] = the bf16 of x (round to nearest even), then lo[k] = the bf16 of
     * x - hi: hi + lo carries x to about 2^-17 of its size (16 bits of mantissa), so a bf16
     * matrix unit (AMX) multiplies both planes and loses almost nothing to the conversion */
    KIPP_ACT_BF16X2 = 5,
    KIPP_ACT_COUNT
};

/* 32 values: x[i] ≈ d * qs[i], d = amax/127 (d = 0 for an all-zero block), qs rounded to
 * nearest; s = d * sum(qs) (lets Q4_0-style kernels fold the weight offset). f32 scale
 * (ggml stores f16; ours is private and keeps more precision). */
typedef struct {
    float d;
    float s;
    int8_t qs[32];
} kipp_act_q8_0;

/* 256 values: x[i] ≈ d * qs[i], d = amax/127 (0 for all zero), qs rounded to nearest
 * (clamped to [-127, 127]); bsums[j] = sum of qs[16j .. 16j+15] (for the K-quant mins). */
typedef struct {
    float d;
    int8_t qs[256];
    int16_t bsums[16];
} kipp_act_q8_k;

/* 32 values at 16 bits: x[i] ≈ d * qs[i], d = amax/32767 (0 for all zero), qs rounded to
 * nearest, ties to even (clamped to [-32767, 32767]); sum = sum of qs. One plane carries
 * ~1/65534 of the block's amax as error, below the two-plane 8-bit scheme's 1/32512. */
typedef struct {
    float d;
    int32_t sum;
    int16_t qs[32];
} kipp_act_q16;

/* Bytes of one activation row of k elements in format act. */
size_t kipp_cpu_act_row_bytes(uint32_t act, uint64_t k);
/* The activation row a kernel sees, as floats (d * q for the 8/16-bit formats); tests and
 * benches check kernels against it. */
void kipp_cpu_act_to_f32(uint32_t act, const void *a, float *out, uint64_t k);

/* ---- kernel signatures -------------------------------------------------------------- */

/* Converts one f32 row of k elements into activation format (out: act_row_bytes bytes). */
typedef void (*kipp_cpu_quant_fn)(const float *x, void *out, uint64_t k);

/* For r < n_rows, t < n_tok:
 *   y[t * ldy + r] = sum_i W[r][i] * X[t][i]   over i < k
 * W row r starts at (const char *)w + r * w_row_bytes in the weight type's GGUF block
 * layout; X row t starts at (const char *)x + t * x_row_bytes in the kernel's activation
 * format. Callers pass row ranges of any size (multiples of 16 except the last). */
typedef void (*kipp_cpu_gemm_fn)(const void *w, size_t w_row_bytes, uint64_t n_rows,
                                 const void *x, size_t x_row_bytes, uint64_t n_tok, float *y,
                                 size_t ldy, uint64_t k);

/* Weights of a type repacked once at load (kernels_packed.h: Q8_0, Q4_K, Q5_K, Q6_K). bytes is
 * the packed size of a rows x k tensor (0: this tensor stays as stored); pack writes rows [r0, r1) (r0 a
 * multiple of 16) of a tensor of n_rows rows from its GGUF rows (w, w_row_bytes apart) into
 * the tensor's packed buffer out; gemm runs over act rows (KIPP_ACT_Q16 for the integer
 * packers, KIPP_ACT_BF16X2 for AMX's bf16 tiles) for every token count,
 * its w the packed buffer advanced to row r (a multiple of 16), its w_row_bytes
 * bytes(type, 16, k) / 16. row dequantizes row r of a packed tensor (p: its buffer) into
 * out[k], bit-identical to kipp_dequantize_row of the GGUF row (a tied embedding table is
 * read from the packed copy, so its file pages stay released). */
typedef struct {
    size_t (*bytes)(uint32_t type, uint64_t rows, uint64_t k);
    void (*pack)(uint32_t type, const void *w, size_t w_row_bytes, uint64_t n_rows, uint64_t r0, uint64_t r1,
                 uint64_t k, void *out);
    kipp_cpu_gemm_fn gemm;
    void (*row)(uint32_t type, const void *p, uint64_t r, uint64_t k, float *out);
    uint32_t act; /* the activation format gemm consumes (KIPP_ACT_Q16, KIPP_ACT_BF16X2) */
} kipp_cpu_packer;

#define KIPP_CPU_MAX_RANGE 8 /* token-count ranges of one auto table entry */
#define KIPP_CPU_MANY_NAMED UINT32_MAX

typedef struct {
    uint32_t act;          /* the activation format gemm consumes (KIPP_ACT_*) */
    kipp_cpu_gemm_fn gemm; /* NULL: this level has no kernel for the type (see below) */
    /* Many tokens (prefill, big decode batches): from many_min_tok tokens on, gemm_many on
     * act_many rows replaces gemm (NULL: gemm for every count). gemm_many is correct for
     * any n_tok; the threshold is where it starts to pay (measured). */
    uint32_t act_many;
    kipp_cpu_gemm_fn gemm_many;
    uint32_t many_min_tok; /* KIPP_CPU_MANY_NAMED: the level never switches to gemm_many itself;
                            * only an auto table rule that names it ("LEVEL:many") runs it */
    /* non-NULL: weights of this type are repacked at load (when packer->bytes says so for
     * the tensor) and packer->gemm replaces gemm and gemm_many at every token count */
    const kipp_cpu_packer *packer;
    /* The auto table's entries (choice.c): from range[i].min_tok tokens on (ascending,
     * range[0].min_tok = 1), range[i]'s kernel, in place of gemm / gemm_many; gemm and act
     * are then the kernel for two tokens (attention's f16/bf16/f32 K.q calls it directly).
     * n_range 0: the level tables. */
    uint32_t n_range;
    struct {
        uint32_t min_tok, act;
        kipp_cpu_gemm_fn gemm;
    } range[KIPP_CPU_MAX_RANGE];
} kipp_cpu_mm;

/* The token count from which a level table's entry switches to gemm_many by itself:
 * many_min_tok (0 counts as 1), or UINT32_MAX when it never does (no gemm_many, or
 * KIPP_CPU_MANY_NAMED). */
static inline uint32_t kipp_cpu_mm_many_from(const kipp_cpu_mm *mm) {
    if (!mm->gemm_many || mm->many_min_tok == KIPP_CPU_MANY_NAMED) return UINT32_MAX;
    return mm->many_min_tok ? mm->many_min_tok : 1;
}

/* The kernel an entry runs for n tokens (n >= 1) of mmapped weights, and its activation
 * format (packed weights run mm->packer->gemm on KIPP_ACT_Q16 rows instead). NULL: the
 * dequantize fallback on KIPP_ACT_F32 rows. */
static inline kipp_cpu_gemm_fn kipp_cpu_mm_for(const kipp_cpu_mm *mm, uint64_t n, uint32_t *act) {
    if (mm->n_range) {
        uint32_t i = 0;
        while (i + 1 < mm->n_range && n >= mm->range[i + 1].min_tok) i++;
        *act = mm->range[i].act;
        return mm->range[i].gemm;
    }
    const uint32_t many_from = kipp_cpu_mm_many_from(mm);
    if (many_from != UINT32_MAX && n >= many_from) {
        *act = mm->act_many;
        return mm->gemm_many;
    }
    *act = mm->gemm ? mm->act : 0u;
    return mm->gemm;
}

/* Two-plane 8-bit conversion (forward.c explains why): per block (32 values for
 * KIPP_ACT_Q8_0, 256 for KIPP_ACT_Q8_K) d = amax / (127 * 128), X = round-to-nearest-even
 * (x / d) clamped to +-16256, hi = floor(X / 128) and lo = X - 128 * hi (0..127); the hi row
 * gets scale 128 * d, the lo row d, each with its own s / bsums. */
typedef void (*kipp_cpu_quant2_fn)(const float *x, void *hi, void *lo, uint64_t k);

typedef struct {
    const char *isa; /* "scalar", "avx2", "avx512", "avx512vnni", "amx", "neon" */
    /* one entry per weight type: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, and the types of
     * ready-made Hub files; an entry a level leaves out ({0}: gemm NULL) runs through
     * kipp_cpu_gemm_dequant */
    kipp_cpu_mm f32, f16, bf16, q8_0, q4_0, q4_k, q6_k;
    kipp_cpu_mm q4_1, q5_0, q5_1, q2_k, q3_k, q5_k, iq4_nl, iq4_xs;
    /* activation converters, indexed by KIPP_ACT_* (the F32 entry may be NULL: memcpy) */
    kipp_cpu_quant_fn quant[KIPP_ACT_COUNT];
    /* attention helpers over f32 vectors of any length n */
    float (*dot_f32)(const float *a, const float *b, uint64_t n);
    void (*axpy_f32)(float *y, float a, const float *x, uint64_t n); /* y += a * x */
    /* elementwise stages; NULL: forward.c's portable loop (expf). exp must be within a few
     * ulp-scale relative error (1e-6) of expf. */
    /* s[i] = exp(s[i] * scale - max_j s[j] * scale) / sum, in place, n >= 1 */
    void (*softmax_f32)(float *s, uint64_t n, float scale);
    /* g[i] = silu(g[i]) * u[i] = g[i] / (1 + exp(-g[i])) * u[i] */
    void (*swiglu_f32)(float *g, const float *u, uint64_t n);
    /* attention's p·V for one KV head over n rows v0 + t * v_stride (t < n):
     * o[g * d + i] += sum_t p[g * p_stride + t] * v[t][i] for g < G, i < d; NULL: axpy_f32
     * per row */
    void (*pv_f32)(float *o, const float *p, size_t p_stride, uint32_t G, const float *v0,
                   size_t v_stride, uint32_t n, uint32_t d);
    /* two-plane converters, indexed by KIPP_ACT_Q8_0 / KIPP_ACT_Q8_K; NULL: forward.c's
     * portable one (same results) */
    kipp_cpu_quant2_fn quant2[KIPP_ACT_COUNT];
    /* KV rows to f32 (f16 / bf16 caches): dst[i] = src[i] exactly, n >= 1; NULL: the
     * scalar conversion (src/backend/host_kv.c) */
    void (*f16_to_f32)(const void *src, float *dst, uint64_t n);
    void (*bf16_to_f32)(const void *src, float *dst, uint64_t n);
    /* pv_f32 over f16 / bf16 rows (v_stride in elements); NULL: rows converted to f32 */
    void (*pv_f16)(float *o, const float *p, size_t p_stride, uint32_t G, const void *v0,
                   size_t v_stride, uint32_t n, uint32_t d);
    void (*pv_bf16)(float *o, const float *p, size_t p_stride, uint32_t G, const void *v0,
                    size_t v_stride, uint32_t n, uint32_t d);
    /* attention's p·V for many query rows (a prompt chunk), the V rows read where they lie:
     * o[q * ldo + i] = sum_t p[q * p_stride + t] * rows[t][i] for q < nq, i < d, t < n
     * (n >= 1), rows[t] of the type (f32 / f16 / bf16). The sum runs in chunks of 256 rows
     * from t = 0 whatever the rows' addresses, so the result does not depend on where the
     * rows lie. NULL: forward.c copies V transposed and uses the f32 gemm. */
    void (*pv_rows_f32)(float *o, size_t ldo, const float *p, size_t p_stride, uint32_t nq,
                        const void *const *rows, uint32_t n, uint32_t d);
    void (*pv_rows_f16)(float *o, size_t ldo, const float *p, size_t p_stride, uint32_t nq,
                        const void *const *rows, uint32_t n, uint32_t d);
    void (*pv_rows_bf16)(float *o, size_t ldo, const float *p, size_t p_stride, uint32_t nq,
                         const void *const *rows, uint32_t n, uint32_t d);
} kipp_cpu_kernels;

extern const kipp_cpu_kernels kipp_cpu_kernels_scalar;
extern const kipp_cpu_kernels kipp_cpu_kernels_avx2;       /* AVX2 + FMA + F16C */
extern const kipp_cpu_kernels kipp_cpu_kernels_avx512;     /* AVX-512F/BW/VL + FMA + F16C */
extern const kipp_cpu_kernels kipp_cpu_kernels_avx512vnni; /* + AVX512-VNNI */
#if defined(__x86_64__) || defined(__i386__)
/* kernels_amx.c: BF16 weights repacked into AMX tiles, and their activation converter; the
 * level "amx" is avx512vnni's table with these (cpu.c) */
extern const kipp_cpu_packer kipp_cpu_packer_amx_bf16;
extern const kipp_cpu_quant_fn kipp_cpu_quant_amx_bf16x2;
/* kernels_avx512bf16.c: the gemm over AMX's packed BF16 layout with vdpbf16ps on
 * KIPP_ACT_BF16X2 rows; the level "avx512bf16" is avx512vnni's table with AMX's packer (and
 * activation converter) running this gemm for BF16 (cpu.c) */
extern const kipp_cpu_gemm_fn kipp_cpu_gemm_dpbf16x2;
#endif
#if defined(__aarch64__)
extern const kipp_cpu_kernels kipp_cpu_kernels_neon; /* ARMv8.2 NEON + dotprod */
#endif

/* Portable scalar converters and the dequantize-then-dot gemm every level may fall back to
 * (kernels_scalar.c). kipp_cpu_gemm_dequant takes KIPP_ACT_F32 rows. */
void kipp_cpu_quant_bf16_scalar(const float *x, void *out, uint64_t k);
void kipp_cpu_quant_bf16x2_scalar(const float *x, void *out, uint64_t k);
/* One element of KIPP_ACT_BF16X2: hi the bf16 of x, lo the bf16 of x - hi (exact in f32);
 * an infinite or NaN x stays in hi, lo 0. */
static inline void kipp_cpu_bf16x2_one(float x, uint16_t *hi, uint16_t *lo) {
    *hi = kipp_f32_to_bf16(x);
    const float h = kipp_bf16_to_f32(*hi);
    *lo = h - h == 0.0f ? kipp_f32_to_bf16(x - h) : 0;
}
void kipp_cpu_quant_q8_0_scalar(const float *x, void *out, uint64_t k);
void kipp_cpu_quant_q8_k_scalar(const float *x, void *out, uint64_t k);
void kipp_cpu_quant_q16_scalar(const float *x, void *out, uint64_t k);
void kipp_cpu_quant2_q8_0_scalar(const float *x, void *hi, void *lo, uint64_t k);
void kipp_cpu_quant2_q8_k_scalar(const float *x, void *hi, void *lo, uint64_t k);
void kipp_cpu_gemm_dequant(uint32_t wtype, const void *w, size_t w_row_bytes, uint64_t n_rows,
                           const void *x, size_t x_row_bytes, uint64_t n_tok, float *y,
                           size_t ldy, uint64_t k);

/* ---- CPU features and the kernels chosen from them ----------------------------------------
 * Each feature on its own, from cpuid (and XCR0: the OS must save the registers) on x86-64,
 * from the auxiliary vector on arm64 (cpu.c, the only place that asks). */
typedef struct {
    uint8_t avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, avxvnni, avx512bf16, avx512fp16;
    uint8_t amx_tile, amx_int8, amx_bf16;
    uint8_t neon, dotprod, i8mm, bf16, sve;
    /* not an instruction set: an AMD Zen 4 (family 19h with AVX-512), whose 512-bit
     * instructions run as two 256-bit halves; its one-token float kernels stream faster at
     * 256 bits (choice.c's rules name it "LEVEL@zen4") */
    uint8_t zen4;
} kipp_cpu_features;

void kipp_cpu_features_detect(kipp_cpu_features *out);
/* The features present, space-separated ("avx2 fma f16c avx512f ..."; "none"). */
void kipp_cpu_features_string(const kipp_cpu_features *f, char *out, size_t cap);
/* Parses a space- or comma-separated feature list (the names kipp_cpu_features_string
 * writes; "none" for no feature) into out; KIPP_ERR_INVALID_ARG naming an unknown name. */
kipp_status kipp_cpu_features_parse(const char *list, kipp_cpu_features *out, char *err, size_t err_len);
/* 1 when a CPU with features f runs the named level (scalar, avx2, avx512, avx512vnni, neon). */
int kipp_cpu_level_runs(const kipp_cpu_features *f, const char *isa);
/* 1: f has the feature named as kipp_cpu_features_string writes it (0 for an unknown name) */
int kipp_cpu_feature_on(const kipp_cpu_features *f, const char *name);

/* What a table runs for one weight type: repacked at load (packed: one kernel, the packing
 * level's, for every token count), or from range[i].min_tok tokens on (ascending, the first
 * 1) the kernel level:variant ("avx512vnni:gemm", "avx2:many"; "dequantize" for the
 * fallback); why: the measurement behind the choice. Strings are static. */
typedef struct {
    uint32_t type;
    int packed;
    const char *packed_level;
    uint32_t n_range;
    struct {
        uint32_t min_tok;
        const char *level, *variant;
    } range[KIPP_CPU_MAX_RANGE];
    const char *why;
} kipp_cpu_choice;

#define KIPP_CPU_N_CHOICE 15 /* the weight types with kernels (kipp_cpu_kernels' entries) */

/* Composes out, the "auto" table for a CPU with features f: per weight type the kernels
 * src/backend/cpu/choice.c's table prefers among the levels f runs, the elementwise and KV
 * helpers of the highest level f runs (each falling back to a lower level's where that
 * leaves one out). choices (may be NULL) receives the per-type record, in the order of
 * kipp_cpu_kernels' entries. out->isa is the highest level f runs. */
void kipp_cpu_kernels_compose(const kipp_cpu_features *f, kipp_cpu_kernels *out,
                              kipp_cpu_choice choices[KIPP_CPU_N_CHOICE]);
/* The choice record of a level table's own entry for type (a forced --isa). */
void kipp_cpu_level_choice(const kipp_cpu_kernels *lv, uint32_t type, kipp_cpu_choice *out);
/* c as a JSON object, {"packed": .., "from": {"1": "level:variant", ..}, "why": ".."}, into
 * out (cap bytes, always terminated); returns the length it needed. */
size_t kipp_cpu_choice_json(const kipp_cpu_choice *c, char *out, size_t cap);
/* The level table by name, whether or not this CPU runs it (NULL: unknown name). */
const kipp_cpu_kernels *kipp_cpu_level_table(const char *isa);

/* The table for an ISA level by name (NULL: the best this CPU runs). A level this CPU lacks,
 * or an unknown name, is an error naming what is missing. Implemented in cpu.c (the only
 * place that asks cpuid). */
kipp_status kipp_cpu_kernels_select(const char *isa, const kipp_cpu_kernels **out, char *err,
                                    size_t err_len);
/* 1 when this CPU can run the named level ("auto", the composed table: always). */
int kipp_cpu_isa_available(const char *isa);
/* The table's entry for a weight type; {KIPP_ACT_F32, NULL} for types it lacks (callers
 * then use kipp_cpu_gemm_dequant with f32 activations). */
kipp_cpu_mm kipp_cpu_kernels_mm(const kipp_cpu_kernels *k, uint32_t type);

/* Q8_0 block layout as stored in GGUF: an f16 scale then 32 int8 quants (34 bytes). */
#define KIPP_Q8_0_BLOCK 32
#define KIPP_Q8_0_BYTES 34

#endif
