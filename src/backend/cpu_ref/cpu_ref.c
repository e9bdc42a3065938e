/* cpu_ref.c — the scalar CPU reference backend ("cpu-ref"): the shared Qwen3 forward pass
 * (qwen3_forward.c) driven by the plainest matvec there is, single-threaded, weights read in
 * their stored block format one row at a time. It is the oracle every optimized backend is
 * gated against, so it favours clarity over speed and contains no ISA-specific code. */
#include "backend/backend.h"

#include "backend/cpu_ref/qwen3_forward.h"
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

static kipp_status cpu_ref_init(const kipp_model *m, uint32_t n_ctx, int n_threads, void **state,
                                char *err, size_t err_len) {
    (void)n_threads; /* the reference is single-threaded by design */
    kipp_fwd_state *s;
    kipp_status st = kipp_fwd_init(m, n_ctx, matvec, NULL, &s, err, err_len);
    *state = st == KIPP_OK ? s : NULL;
    return st;
}

static void cpu_ref_free(void *state) { kipp_fwd_free(state); }

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
    .init = cpu_ref_init,
    .free = cpu_ref_free,
    .decode_batch = cpu_ref_decode_batch,
    .forward_nocache = cpu_ref_forward_nocache,
};
