/* fuzz_gguf.c — libFuzzer target for the GGUF reader: opens the input as a buffer and, when
 * it opens, walks every key through every typed getter and every tensor through lookup and a
 * one-row dequantization, so out-of-bounds pointers the reader hands out are caught too.
 * Build and corpus: see tests/fuzz/make_gguf_corpus.py. */
#include "core/types.h"
#include "gguf/gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Reads the last byte of [p, p+n) so ASan flags a range that is not inside the input. */
static volatile uint8_t g_sink;
static void touch(const void *p, uint64_t n) {
    if (n) g_sink ^= ((const uint8_t *)p)[n - 1] ^ ((const uint8_t *)p)[0];
}

static void walk_key(const kipp_gguf *g, int64_t i) {
    char err[KIPP_ERR_LEN], key[1024];
    const kipp_gguf_str k = kipp_gguf_key_name(g, i);
    if (!k.ptr || k.len == 0) abort(); /* open() rejects empty keys */
    touch(k.ptr, k.len);
    if (k.len >= sizeof key || memchr(k.ptr, 0, (size_t)k.len)) return; /* not a C string */
    memcpy(key, k.ptr, (size_t)k.len);
    key[k.len] = '\0';
    if (kipp_gguf_find_key(g, key) != i) abort(); /* keys are unique */
    if ((unsigned)kipp_gguf_key_type(g, i) > KIPP_GGUF_FLOAT64) abort();

    uint32_t u;
    float f;
    int b;
    kipp_gguf_str s;
    kipp_gguf_vtype et;
    uint64_t n;
    const void *data;
    (void)kipp_gguf_get_u32(g, key, &u, err, sizeof err);
    (void)kipp_gguf_get_f32(g, key, &f, err, sizeof err);
    (void)kipp_gguf_get_bool(g, key, &b, err, sizeof err);
    if (kipp_gguf_get_str(g, key, &s, err, sizeof err) == KIPP_OK) touch(s.ptr, s.len);
    if (kipp_gguf_get_arr(g, key, &et, &n, &data, err, sizeof err) == KIPP_OK) {
        if (et == KIPP_GGUF_STRING) {
            for (uint64_t j = 0; j < n; j++) {
                const kipp_gguf_str e = kipp_gguf_arr_str(g, key, j);
                if (!e.ptr) abort(); /* in range: must be present */
                touch(e.ptr, e.len);
            }
            if (kipp_gguf_arr_str(g, key, n).ptr) abort();
        } else if (et == KIPP_GGUF_UINT8 || et == KIPP_GGUF_INT8 || et == KIPP_GGUF_BOOL) {
            touch(data, n);
        } else if (et == KIPP_GGUF_UINT16 || et == KIPP_GGUF_INT16) {
            touch(data, 2 * n);
        } else if (et == KIPP_GGUF_UINT32 || et == KIPP_GGUF_INT32 || et == KIPP_GGUF_FLOAT32) {
            touch(data, 4 * n);
        } else {
            touch(data, 8 * n);
        }
    }
}

/* Checks the promises gguf.h makes about a tensor, then reads its first and last byte. */
static void walk_tensor(const kipp_gguf *g, const uint8_t *base, size_t size, uint64_t i) {
    const kipp_gguf_tensor *t = kipp_gguf_tensor_at(g, i);
    if (!t || kipp_gguf_find_tensor(g, t->name) != t) abort();
    if (!kipp_type_supported(t->type) || t->n_dims < 1 || t->n_dims > 4) abort();
    if (kipp_type_row_bytes(t->type, (uint64_t)t->ne[0]) == 0) abort();
    if (t->offset % kipp_gguf_alignment(g) != 0) abort();
    if ((const uint8_t *)t->data != base + kipp_gguf_data_offset(g) + t->offset) abort();
    if (t->n_bytes > size - kipp_gguf_data_offset(g) - t->offset) abort();
    touch(t->data, t->n_bytes);
    /* dequantize the first row, or its first 4096 elements */
    float y[4096];
    const uint64_t blk = kipp_type_block_elems(t->type);
    uint64_t n = (uint64_t)t->ne[0] < 4096 ? (uint64_t)t->ne[0] : 4096 / blk * blk;
    kipp_dequantize_row(t->type, t->data, y, n);
    g_sink ^= (uint8_t)(y[0] != y[0]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[KIPP_ERR_LEN];
    kipp_gguf *g = NULL;
    err[0] = '\0';
    const kipp_status st = kipp_gguf_open_buffer(data, size, &g, err, sizeof err);
    if (st != KIPP_OK) {
        if (g || err[0] == '\0') abort(); /* failures must explain themselves */
        return 0;
    }
    const uint32_t align = kipp_gguf_alignment(g);
    if (kipp_gguf_version(g) != 3 || align == 0 || (align & (align - 1)) != 0) abort();
    if (kipp_gguf_data_offset(g) > size) abort();
    for (int64_t i = 0; (uint64_t)i < kipp_gguf_n_kv(g); i++) walk_key(g, i);
    for (uint64_t i = 0; i < kipp_gguf_n_tensors(g); i++) walk_tensor(g, data, size, i);
    kipp_gguf_free(g);
    return 0;
}
