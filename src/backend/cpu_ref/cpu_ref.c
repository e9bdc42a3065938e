/* cpu_ref.c — the scalar CPU reference backend ("cpu-ref"): the reference Qwen3 forward pass
 * (layers.c, one token at a time) driven by the plainest matvec there is,
 * single-threaded, weights read in their stored block format one row at a time, KV cache in
 * the shared host storage (host_kv.c, f32 by default). It is the oracle every optimized
 * backend is gated against, so it favours clarity over speed and contains no ISA-specific
 * code. */
#include "backend/backend.h"

#include "backend/cpu_ref/layers.h"
#include "backend/host_kv.h"
#include "core/types.h"

/* y[n] = sum_k W[n][k] * x[k] for the n_out rows of W (ne = [n_in, n_out]). Each row is
 * dequantized into `row` (block format → f32) and accumulated in f32, k ascending. */
static void matvec(void *ctx, const kipp_gguf_tensor *w, const float *x, float *y, float *row) {
    (void)ctx;
    const uint64_t n_in = (uint64_t)w->ne[0], n_out = (uint64_t)w->ne[1];
    const uint64_t row_bytes = kipp_type_row_bytes(w->type, n_in);
    const char *base = w->data;
    for (uint64_t n = 0; n < n_out; n++) {
        kipp_dequantize_row(w->type, base + n * row_bytes, row, n_in);
        float acc = 0.0f;
        for (uint64_t k = 0; k < n_in; k++) acc += row[k] * x[k];
        y[n] = acc;
    }
}

static void cpu_ref_caps(kipp_backend_caps *out) {
    *out = (kipp_backend_caps){
        .weight_types = kipp_type_mask(), /* every type kipp_dequantize_row decodes */
        .kv_types = 1u << KIPP_KV_TYPE_F32 | 1u << KIPP_KV_TYPE_F16 | 1u << KIPP_KV_TYPE_BF16 |
                    1u << KIPP_KV_TYPE_Q8_0 | 1u << KIPP_KV_TYPE_Q4_0,
        .kv_split = 1,
        .kv_default = KIPP_KV_TYPE_F32, /* the oracle: the 1e-6 phase-2 gate is on f32 */
        .max_batch = 0};
}

static kipp_status cpu_ref_init(const kipp_model *m, uint32_t n_ctx, const kipp_backend_options *o,
                                void **state, char *err, size_t err_len) {
    /* single-threaded by design; no ISA levels (o->isa is ignored) */
    kipp_fwd_state *s;
    kipp_status st = kipp_fwd_init(m, n_ctx, o->kv_type, o->kv_type_v, o->embeddings ? 0 : o->n_logits, matvec, NULL, &s, err, err_len);
    *state = st == KIPP_OK ? s : NULL;
    return st;
}

static void cpu_ref_free(void *state) { kipp_fwd_free(state); }

static void cpu_ref_describe(void *state, const char **isa, int *n_threads, uint64_t *weights_repacked) {
    (void)state;
    *isa = "scalar";
    *n_threads = 1;
    *weights_repacked = 0;
}

/* Token by token in batch order (each token's arithmetic is exactly that of a lone decode
 * step, so a batch equals the single steps bit for bit). */
static kipp_status cpu_ref_decode_batch(void *state, kipp_kv_pool *pool, const kipp_batch *b,
                                        float *logits, char *err, size_t err_len) {
    return kipp_fwd_decode_batch(state, pool, b, logits, err, err_len);
}

static kipp_status cpu_ref_forward_nocache(void *state, const int32_t *tokens, uint32_t n,
                                           float *logits, char *err, size_t err_len) {
    return kipp_fwd_forward_nocache(state, tokens, n, logits, err, err_len);
}

const kipp_backend_ops kipp_backend_cpu_ref = {
    .name = "cpu-ref",
    .caps = cpu_ref_caps,
    .memory = kipp_host_memory,
    .init = cpu_ref_init,
    .free = cpu_ref_free,
    .describe = cpu_ref_describe,
    .kv_alloc = kipp_host_kv_alloc,
    .kv_free = kipp_host_kv_free,
    .kv_copy_block = kipp_host_kv_copy_block,
    .decode_batch = cpu_ref_decode_batch,
    .forward_nocache = cpu_ref_forward_nocache,
};
