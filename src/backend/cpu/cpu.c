/* cpu.c — the optimized CPU backend ("cpu"): the shared Qwen3 forward skeleton
 * (cpu_ref/qwen3_forward.c) with a matvec that splits output rows over a persistent thread
 * pool and dots each row with the best kernel level cpuid allows (kernels_*.c). Norms, RoPE
 * and attention stay scalar in this step; it is gated against cpu-ref
 * (tests/model/gates_cpu.c). KIPP_CPU_ISA=scalar|avx2|avx512 forces a level (for testing);
 * forcing one the CPU lacks is an error. Does not batch weight reads across tokens yet. */
#include "backend/backend.h"

#include "backend/cpu/kernels.h"
#include "backend/cpu_ref/qwen3_forward.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "core/types.h"

#include <stdlib.h>
#include <string.h>

/* ---- kernel level selection (the only place that asks cpuid) -------------------------- */

int kipp_cpu_isa_available(const char *isa) {
    __builtin_cpu_init();
    if (strcmp(isa, "scalar") == 0) return 1;
    /* F16C is not asked: every AVX2 CPU has it (Haswell, Zen), and clang's builtin does not
     * know the name */
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (strcmp(isa, "avx2") == 0) return avx2;
    if (strcmp(isa, "avx512") == 0)
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    return 0;
}

kipp_status kipp_cpu_kernels_select(const char *isa, const kipp_cpu_kernels **out, char *err,
                                    size_t err_len) {
    static const kipp_cpu_kernels *const levels[] = {
        &kipp_cpu_kernels_avx512, &kipp_cpu_kernels_avx2, &kipp_cpu_kernels_scalar};
    *out = NULL;
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        if (isa && strcmp(isa, levels[i]->isa) != 0) continue;
        if (!kipp_cpu_isa_available(levels[i]->isa)) {
            if (!isa) continue;
            return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                             "cpu: KIPP_CPU_ISA=%s asks for an instruction set this CPU lacks "
                             "(avx2 needs AVX2+FMA+F16C; avx512 also AVX-512F/BW/VL)",
                             isa);
        }
        *out = levels[i];
        return KIPP_OK;
    }
    return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                     "cpu: unknown KIPP_CPU_ISA '%s' (known: scalar, avx2, avx512)", isa);
}

kipp_cpu_dot_fn kipp_cpu_kernels_dot(const kipp_cpu_kernels *k, uint32_t type) {
    switch (type) {
    case KIPP_TYPE_F32: return k->dot_f32;
    case KIPP_TYPE_F16: return k->dot_f16;
    case KIPP_TYPE_BF16: return k->dot_bf16;
    case KIPP_TYPE_Q8_0: return k->dot_q8_0;
    default: return NULL;
    }
}

/* ---- the threaded matvec ---------------------------------------------------------------- */

typedef struct {
    kipp_fwd_state *fwd;
    kipp_threadpool *pool;
    const kipp_cpu_kernels *k;
} cpu_state;

typedef struct {
    const char *base;
    uint64_t row_bytes, n_in;
    uint32_t type;
    kipp_cpu_dot_fn dot; /* NULL: dequantize-and-dot fallback */
    const float *x;
    float *y;
} matvec_job;

static void matvec_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const matvec_job *j = ctx;
    for (uint64_t n = begin; n < end; n++) {
        const void *row = j->base + n * j->row_bytes;
        j->y[n] = j->dot ? j->dot(row, j->x, j->n_in) : kipp_cpu_dot_dequant(j->type, row, j->x, j->n_in);
    }
}

/* Rows in chunks aligned to 16 so threads never share a cache line of y. */
static void matvec(void *ctx, const kipp_gguf_tensor *w, const float *x, float *y, float *row) {
    (void)row;
    cpu_state *s = ctx;
    matvec_job j = {
        .base = w->data,
        .n_in = (uint64_t)w->ne[0],
        .type = w->type,
        .dot = kipp_cpu_kernels_dot(s->k, w->type),
        .x = x,
        .y = y,
    };
    j.row_bytes = kipp_type_row_bytes(w->type, j.n_in);
    kipp_threadpool_for(s->pool, (uint64_t)w->ne[1], 16, matvec_rows, &j);
}

/* ---- backend entry points --------------------------------------------------------------- */

static void cpu_free(void *state) {
    cpu_state *s = state;
    if (!s) return;
    kipp_fwd_free(s->fwd);
    kipp_threadpool_free(s->pool);
    free(s);
}

static kipp_status cpu_init(const kipp_model *m, uint32_t n_ctx, int n_threads, void **state,
                            char *err, size_t err_len) {
    *state = NULL;
    cpu_state *s = calloc(1, sizeof *s);
    if (!s) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cpu: out of memory");
    const char *isa = getenv("KIPP_CPU_ISA");
    kipp_status st = kipp_cpu_kernels_select(isa && *isa ? isa : NULL, &s->k, err, err_len);
    if (st != KIPP_OK) goto fail;
    st = kipp_threadpool_init(n_threads, &s->pool, err, err_len);
    if (st != KIPP_OK) goto fail;
    st = kipp_fwd_init(m, n_ctx, matvec, s, &s->fwd, err, err_len);
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
    return kipp_fwd_decode_batch(s->fwd, pool, b, logits, err, err_len);
}

static kipp_status cpu_forward_nocache(void *state, const int32_t *tokens, uint32_t n,
                                       float *logits, char *err, size_t err_len) {
    cpu_state *s = state;
    return kipp_fwd_forward_nocache(s->fwd, tokens, n, logits, err, err_len);
}

const kipp_backend_ops kipp_backend_cpu = {
    .name = "cpu",
    .init = cpu_init,
    .free = cpu_free,
    .decode_batch = cpu_decode_batch,
    .forward_nocache = cpu_forward_nocache,
};
