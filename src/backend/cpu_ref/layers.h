/* layers.h — the cpu-ref forward pass: the operations of ops.h row by row, run by the layer
 * program's driver (program.c), parameterized by one matvec function (cpu-ref's scalar
 * dequantize-and-dot). The optimized cpu backend implements the same operations batched
 * (src/backend/cpu/forward.c) and is gated against this one. */
#ifndef KIPP_CPU_REF_LAYERS_H
#define KIPP_CPU_REF_LAYERS_H

#include "backend/backend.h"

/* y[n_out] = W x for w (ne = [n_in, n_out], stored block format). row is scratch of
 * max-input-dim floats the skeleton owns (a matvec may ignore it). */
typedef void (*kipp_fwd_matvec_fn)(void *ctx, const kipp_gguf_tensor *w, const float *x, float *y,
                                   float *row);

typedef struct kipp_fwd_state kipp_fwd_state;

/* kv_type, kv_type_v: the types the KV cache stores K and V in (host storage,
 * src/backend/host_kv.h); K and V are rounded through them on both paths. n_logits: floats per logits row (the lm_head's first
 * rows); 0: no lm_head, each output row is the final-norm hidden state (n_embd floats). */
kipp_status kipp_fwd_init(const kipp_model *m, uint32_t n_ctx, kipp_kv_type kv_type,
                          kipp_kv_type kv_type_v,
                          uint32_t n_logits,
                          kipp_fwd_matvec_fn matvec, void *mv_ctx, kipp_fwd_state **state,
                          char *err, size_t err_len);
void kipp_fwd_free(kipp_fwd_state *s);
/* The decode_batch / forward_nocache contracts of backend.h. */
kipp_status kipp_fwd_decode_batch(kipp_fwd_state *s, kipp_kv_pool *pool, const kipp_batch *b,
                                  float *logits, char *err, size_t err_len);
kipp_status kipp_fwd_forward_nocache(kipp_fwd_state *s, const int32_t *tokens, uint32_t n,
                                     float *logits, char *err, size_t err_len);

#endif
