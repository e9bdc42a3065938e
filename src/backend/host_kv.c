/* host_kv.c — host-memory KV storage shared by cpu-ref and cpu (host_kv.h): allocation,
 * block copy, f32 <-> f16/bf16/q8_0/q4_0 row conversion, and the host memory query. */
#include "backend/host_kv.h"

#include "core/error.h"
#include "core/quantize.h"
#include "core/types.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int kv_type_stored(kipp_kv_type t) {
    return t == KIPP_KV_TYPE_F32 || t == KIPP_KV_TYPE_F16 || t == KIPP_KV_TYPE_BF16 ||
           kipp_kv_type_quantized(t);
}

kipp_status kipp_kv_layout_size(const kipp_kv_layout *lay, uint32_t n_blocks, const char *who,
                                uint64_t *part_bytes, uint64_t *total_bytes, char *err,
                                size_t err_len) {
    const kipp_kv_type tv = lay->type_v ? lay->type_v : lay->type;
    for (int v = 0; v < 2; v++) {
        const kipp_kv_type t = v ? tv : lay->type;
        if (!kv_type_stored(t))
            return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED, "%s KV storage: no type %s", who,
                             kipp_kv_type_name(t));
        if (kipp_kv_type_quantized(t) && lay->kv_dim % KIPP_KV_QBLOCK)
            return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                             "%s KV storage: type %s needs rows of a multiple of %u values, not %u",
                             who, kipp_kv_type_name(t), KIPP_KV_QBLOCK, lay->kv_dim);
    }
    if (lay->n_layer == 0 || lay->kv_dim == 0 || lay->block_size == 0 || n_blocks == 0)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "KV storage: n_layer %u, kv_dim %u, block_size %u and n_blocks %u must "
                         "all be > 0",
                         lay->n_layer, lay->kv_dim, lay->block_size, n_blocks);
    uint64_t part, part_v, total;
    if (!kipp_mul_ok((uint64_t)lay->n_layer * lay->block_size, kipp_kv_row_bytes(lay->type, lay->kv_dim), &part) ||
        !kipp_mul_ok((uint64_t)lay->n_layer * lay->block_size, kipp_kv_row_bytes(tv, lay->kv_dim), &part_v) ||
        !kipp_mul_ok(part + part_v, n_blocks, &total) || total > SIZE_MAX)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM,
                         "KV storage: %u blocks of %u tokens x %u layers x %u %s/%s values is too "
                         "large",
                         n_blocks, lay->block_size, lay->n_layer, lay->kv_dim,
                         kipp_kv_type_name(lay->type), kipp_kv_type_name(tv));
    *part_bytes = part;
    *total_bytes = total;
    return KIPP_OK;
}

kipp_status kipp_host_kv_alloc(void *state, const kipp_kv_layout *lay, uint32_t n_blocks,
                               void **store, char *err, size_t err_len) {
    (void)state;
    *store = NULL;
    uint64_t part, total;
    const kipp_status st = kipp_kv_layout_size(lay, n_blocks, "host", &part, &total, err, err_len);
    if (st != KIPP_OK) return st;
    kipp_host_kv *kv = calloc(1, sizeof *kv);
    /* calloc of a large block maps fresh zero pages: memory is committed as blocks fill,
     * not here (an idle server does not hold a whole pool) */
    if (kv) kv->data = calloc(1, (size_t)total);
    if (!kv || !kv->data) {
        free(kv);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM,
                         "KV storage: out of memory for %u blocks (%llu bytes)", n_blocks,
                         (unsigned long long)total);
    }
    kv->type = lay->type;
    kv->type_v = lay->type_v ? lay->type_v : lay->type;
    kv->n_layer = lay->n_layer;
    kv->kv_dim = lay->kv_dim;
    kv->block_size = lay->block_size;
    kv->n_blocks = n_blocks;
    kv->row_bytes[0] = (size_t)kipp_kv_row_bytes(kv->type, kv->kv_dim);
    kv->row_bytes[1] = (size_t)kipp_kv_row_bytes(kv->type_v, kv->kv_dim);
    kv->part_bytes[0] = (size_t)part;
    kv->part_bytes[1] = (size_t)lay->n_layer * lay->block_size * kv->row_bytes[1];
    kv->block_bytes = kv->part_bytes[0] + kv->part_bytes[1];
#ifdef KIPP_FAULT_INJECT
    const char *mode = getenv("KIPP_FAULT"); /* read once; see kipp_host_kv_row() */
    kv->fault = mode ? atoi(mode) : 0;
#endif
    *store = kv;
    return KIPP_OK;
}

void kipp_host_kv_free(void *state, void *store) {
    (void)state;
    kipp_host_kv *kv = store;
    if (!kv) return;
    free(kv->data);
    free(kv);
}

void kipp_host_kv_copy_block(void *state, void *store, uint32_t dst, uint32_t src) {
    (void)state;
    kipp_host_kv *kv = store;
    memcpy(kv->data + (size_t)dst * kv->block_bytes, kv->data + (size_t)src * kv->block_bytes,
           kv->block_bytes);
}

kipp_status kipp_host_memory(const kipp_backend_options *o, kipp_backend_memory *out, char *err,
                             size_t err_len) {
    (void)o;
    const long page = sysconf(_SC_PAGESIZE), total = sysconf(_SC_PHYS_PAGES),
               avail = sysconf(_SC_AVPHYS_PAGES);
    if (page <= 0 || total <= 0)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND, "cannot read this machine's memory size");
    out->kind = "host";
    out->total = (uint64_t)total * (uint64_t)page;
    out->available = avail > 0 ? (uint64_t)avail * (uint64_t)page : 0;
    return KIPP_OK;
}

/* ---- conversions ------------------------------------------------------------------------- */

void kipp_host_kv_put(kipp_kv_type t, void *dst, const float *src, uint32_t n) {
    uint16_t *h = dst;
    switch (t) {
    case KIPP_KV_TYPE_F16:
        for (uint32_t i = 0; i < n; i++) h[i] = kipp_f32_to_f16(src[i]);
        break;
    case KIPP_KV_TYPE_BF16:
        for (uint32_t i = 0; i < n; i++) h[i] = kipp_f32_to_bf16(src[i]);
        break;
    case KIPP_KV_TYPE_Q8_0: kipp_quantize_row(KIPP_TYPE_Q8_0, src, dst, n); break;
    case KIPP_KV_TYPE_Q4_0: kipp_quantize_row(KIPP_TYPE_Q4_0, src, dst, n); break;
    default: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    }
}

void kipp_host_kv_get(kipp_kv_type t, float *dst, const void *src, uint32_t n) {
    const uint16_t *h = src;
    switch (t) {
    case KIPP_KV_TYPE_F16:
        for (uint32_t i = 0; i < n; i++) dst[i] = kipp_f16_to_f32(h[i]);
        break;
    case KIPP_KV_TYPE_BF16:
        for (uint32_t i = 0; i < n; i++) dst[i] = kipp_bf16_to_f32(h[i]);
        break;
    case KIPP_KV_TYPE_Q8_0: kipp_dequantize_row(KIPP_TYPE_Q8_0, src, dst, n); break;
    case KIPP_KV_TYPE_Q4_0: kipp_dequantize_row(KIPP_TYPE_Q4_0, src, dst, n); break;
    default: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    }
}

void kipp_kv_round(kipp_kv_type t, float *x, uint32_t n) {
    if (t == KIPP_KV_TYPE_F16)
        for (uint32_t i = 0; i < n; i++) x[i] = kipp_f16_to_f32(kipp_f32_to_f16(x[i]));
    else if (t == KIPP_KV_TYPE_BF16)
        for (uint32_t i = 0; i < n; i++) x[i] = kipp_bf16_to_f32(kipp_f32_to_bf16(x[i]));
    else if (kipp_kv_type_quantized(t)) {
        /* block by block: the quantizer and dequantizer work on 32 values at a time */
        unsigned char q[34];
        for (uint32_t i = 0; i + KIPP_KV_QBLOCK <= n; i += KIPP_KV_QBLOCK) {
            kipp_host_kv_put(t, q, x + i, KIPP_KV_QBLOCK);
            kipp_host_kv_get(t, x + i, q, KIPP_KV_QBLOCK);
        }
    }
}
