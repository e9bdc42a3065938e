/* cpu.c — the optimized CPU backend ("cpu"): picks the best kernel level cpuid allows
 * (kernels_*.c: scalar, avx2, avx512, avx512vnni; neon on arm64) or the one the context
 * names (kipp_ctx_params.isa; a level the CPU lacks is an error, never a silent fallback),
 * starts the thread pool, keeps the KV cache in the shared host storage (host_kv.c) and
 * hands batches to the batched forward pass (forward.c). Gated against cpu-ref by the model
 * gates run with --backend cpu (tests/model). */
#include "backend/backend.h"

#include "backend/host_kv.h"

#include "backend/cpu/kernels.h"
#include "backend/cpu/forward.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "core/types.h"

#include <stdlib.h>
#include <string.h>

/* ---- kernel level selection (the only place that asks cpuid) -------------------------- */

int kipp_cpu_isa_available(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (strcmp(isa, "scalar") == 0) return 1;
    /* F16C is not asked: every AVX2 CPU has it (Haswell, Zen), and clang's builtin does not
     * know the name */
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (strcmp(isa, "avx2") == 0) return avx2;
    const int avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    if (strcmp(isa, "avx512") == 0) return avx512;
    /* VNNI only: the level uses no BF16 instruction (vdpbf16ps loses to widening + FMA, see
     * kernels_avx512.c), and Cascade Lake / Ice Lake have VNNI without BF16 */
    if (strcmp(isa, "avx512vnni") == 0) return avx512 && __builtin_cpu_supports("avx512vnni");
    return 0;
#elif defined(__aarch64__)
    return strcmp(isa, "scalar") == 0 || strcmp(isa, "neon") == 0;
#else
    return strcmp(isa, "scalar") == 0;
#endif
}

kipp_status kipp_cpu_kernels_select(const char *isa, const kipp_cpu_kernels **out, char *err,
                                    size_t err_len) {
    static const kipp_cpu_kernels *const levels[] = {
#if defined(__x86_64__) || defined(__i386__)
        &kipp_cpu_kernels_avx512vnni, &kipp_cpu_kernels_avx512, &kipp_cpu_kernels_avx2,
#elif defined(__aarch64__)
        &kipp_cpu_kernels_neon,
#endif
        &kipp_cpu_kernels_scalar};
    *out = NULL;
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        if (isa && strcmp(isa, levels[i]->isa) != 0) continue;
        if (!kipp_cpu_isa_available(levels[i]->isa)) {
            if (!isa) continue;
            return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                             "cpu: ISA level %s asks for an instruction set this CPU lacks "
                             "(avx2 needs AVX2+FMA+F16C; avx512 also AVX-512F/BW/VL; avx512vnni "
                             "also AVX512-VNNI)",
                             isa);
        }
        *out = levels[i];
        return KIPP_OK;
    }
    return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                     "cpu: unknown ISA level '%s' (known: scalar, avx2, avx512, avx512vnni, "
                     "neon)",
                     isa);
}

kipp_cpu_mm kipp_cpu_kernels_mm(const kipp_cpu_kernels *k, uint32_t type) {
    const kipp_cpu_mm none = {KIPP_ACT_F32, NULL, 0, NULL, 0};
    switch (type) {
    case KIPP_TYPE_F32: return k->f32;
    case KIPP_TYPE_F16: return k->f16;
    case KIPP_TYPE_BF16: return k->bf16;
    case KIPP_TYPE_Q8_0: return k->q8_0;
    case KIPP_TYPE_Q4_0: return k->q4_0;
    case KIPP_TYPE_Q4_K: return k->q4_k;
    case KIPP_TYPE_Q6_K: return k->q6_k;
    case KIPP_TYPE_Q4_1: return k->q4_1;
    case KIPP_TYPE_Q5_0: return k->q5_0;
    case KIPP_TYPE_Q5_1: return k->q5_1;
    case KIPP_TYPE_Q2_K: return k->q2_k;
    case KIPP_TYPE_Q3_K: return k->q3_k;
    case KIPP_TYPE_Q5_K: return k->q5_k;
    case KIPP_TYPE_IQ4_NL: return k->iq4_nl;
    case KIPP_TYPE_IQ4_XS: return k->iq4_xs;
    default: return none;
    }
}

/* ---- backend entry points --------------------------------------------------------------- */

typedef struct {
    kipp_cpu_fwd *fwd;
    kipp_threadpool *pool;
    const kipp_cpu_kernels *k;
} cpu_state;

static void cpu_free(void *state) {
    cpu_state *s = state;
    if (!s) return;
    kipp_cpu_fwd_free(s->fwd);
    kipp_threadpool_free(s->pool);
    free(s);
}

static void cpu_caps(kipp_backend_caps *out) {
    *out = (kipp_backend_caps){
        /* every type: those without a kernel at a level go through kipp_cpu_gemm_dequant */
        .weight_types = kipp_type_mask(),
        .kv_types = 1u << KIPP_KV_TYPE_F32 | 1u << KIPP_KV_TYPE_F16 | 1u << KIPP_KV_TYPE_BF16,
        /* f16: half the memory and KV traffic of f32 for an error far inside the gate
         * (measurements: docs/kv-cache.md, bench/results/kv-type-*.json) */
        .kv_default = KIPP_KV_TYPE_F16,
        .max_batch = 0};
}

static void cpu_describe(void *state, const char **isa, int *n_threads, uint64_t *weights_repacked) {
    const cpu_state *s = state;
    *isa = s->k->isa;
    *n_threads = kipp_threadpool_n_threads(s->pool);
    *weights_repacked = kipp_cpu_fwd_packed_bytes(s->fwd);
}

static kipp_status cpu_init(const kipp_model *m, uint32_t n_ctx, const kipp_backend_options *o,
                            void **state, char *err, size_t err_len) {
    *state = NULL;
    cpu_state *s = calloc(1, sizeof *s);
    if (!s) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cpu: out of memory");
    kipp_status st = kipp_cpu_kernels_select(o->isa && *o->isa ? o->isa : NULL, &s->k, err, err_len);
    if (st != KIPP_OK) goto fail;
    st = kipp_threadpool_init(o->n_threads, &s->pool, err, err_len);
    if (st != KIPP_OK) goto fail;
    st = kipp_cpu_fwd_init(m, n_ctx, o->kv_type, o->embeddings ? 0 : o->n_logits, s->k, s->pool, &s->fwd, err, err_len);
    if (st != KIPP_OK) goto fail;
    *state = s;
    return KIPP_OK;
fail:
    cpu_free(s);
    return st;
}

static kipp_status cpu_decode_batch(void *state, kipp_kv_pool *pool, const kipp_batch *b,
                                    float *logits, char *err, size_t err_len) {
    cpu_state *s = state;
    return kipp_cpu_fwd_decode_batch(s->fwd, pool, b, logits, err, err_len);
}

static kipp_status cpu_forward_nocache(void *state, const int32_t *tokens, uint32_t n,
                                       float *logits, char *err, size_t err_len) {
    cpu_state *s = state;
    return kipp_cpu_fwd_nocache(s->fwd, tokens, n, logits, err, err_len);
}

typedef struct {
    void (*fn)(void *arg, uint32_t i, int ith);
    void *arg;
} host_job;

static void host_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    const host_job *j = ctx;
    for (uint64_t i = begin; i < end; i++) j->fn(j->arg, (uint32_t)i, ith);
}

static void cpu_host_for(void *state, uint32_t n, void (*fn)(void *arg, uint32_t i, int ith), void *arg) {
    cpu_state *s = state;
    host_job j = {fn, arg};
    kipp_threadpool_for(s->pool, n, 1, host_rows, &j);
}

static int cpu_host_threads(void *state) { return kipp_threadpool_n_threads(((cpu_state *)state)->pool); }

const kipp_backend_ops kipp_backend_cpu = {
    .name = "cpu",
    .caps = cpu_caps,
    .memory = kipp_host_memory,
    .init = cpu_init,
    .free = cpu_free,
    .describe = cpu_describe,
    .kv_alloc = kipp_host_kv_alloc,
    .kv_free = kipp_host_kv_free,
    .kv_copy_block = kipp_host_kv_copy_block,
    .decode_batch = cpu_decode_batch,
    .forward_nocache = cpu_forward_nocache,
    .host_for = cpu_host_for,
    .host_threads = cpu_host_threads,
};
