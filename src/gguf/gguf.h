/* gguf.h — GGUF v3 reader that treats every file as hostile.
 * Every length, count, offset, dimension and type read from the file is validated with
 * overflow-checked arithmetic before use; errors name the field and its byte offset.
 * The file is mmapped (or a caller buffer is borrowed); tensor data is never copied. */
#ifndef KIPP_GGUF_H
#define KIPP_GGUF_H

#include "kipp.h"
#include <stddef.h>
#include <stdint.h>

typedef enum {
    KIPP_GGUF_UINT8 = 0, KIPP_GGUF_INT8 = 1, KIPP_GGUF_UINT16 = 2, KIPP_GGUF_INT16 = 3,
    KIPP_GGUF_UINT32 = 4, KIPP_GGUF_INT32 = 5, KIPP_GGUF_FLOAT32 = 6, KIPP_GGUF_BOOL = 7,
    KIPP_GGUF_STRING = 8, KIPP_GGUF_ARRAY = 9, KIPP_GGUF_UINT64 = 10, KIPP_GGUF_INT64 = 11,
    KIPP_GGUF_FLOAT64 = 12,
} kipp_gguf_vtype;

typedef struct {
    const char *ptr; /* NOT NUL-terminated: points into the file */
    uint64_t len;
} kipp_gguf_str;

typedef struct {
    char name[64];        /* NUL-terminated copy (names are < 64 bytes, checked) */
    uint32_t n_dims;      /* 1..4 */
    int64_t ne[4];        /* ggml order: ne[0] contiguous; missing dims are 1 */
    uint32_t type;        /* ggml type id (kipp_type); always a supported type */
    uint64_t offset;      /* relative to the data section */
    uint64_t n_elems;
    uint64_t n_bytes;
    const void *data;     /* points into the mapping; n_bytes are in bounds */
} kipp_gguf_tensor;

typedef struct kipp_gguf kipp_gguf;

/* Opens and fully validates a file (mmap). */
kipp_status kipp_gguf_open(const char *path, kipp_gguf **out, char *err, size_t err_len);
/* Same over a caller buffer that must outlive the handle (used by the fuzzer and tests). */
kipp_status kipp_gguf_open_buffer(const void *buf, size_t n_bytes, kipp_gguf **out, char *err,
                                  size_t err_len);
void kipp_gguf_free(kipp_gguf *g);

uint32_t kipp_gguf_version(const kipp_gguf *g);
uint64_t kipp_gguf_n_kv(const kipp_gguf *g);
uint64_t kipp_gguf_n_tensors(const kipp_gguf *g);
uint32_t kipp_gguf_alignment(const kipp_gguf *g);
uint64_t kipp_gguf_data_offset(const kipp_gguf *g); /* absolute file offset of data section */

/* Metadata lookup. Index < 0 when absent. */
int64_t kipp_gguf_find_key(const kipp_gguf *g, const char *key);
kipp_gguf_str kipp_gguf_key_name(const kipp_gguf *g, int64_t idx);
kipp_gguf_vtype kipp_gguf_key_type(const kipp_gguf *g, int64_t idx);

/* Typed getters. They return KIPP_ERR_FORMAT (with a message naming the key) when the key
 * is absent or holds an incompatible type. get_u32 accepts any integer type whose value
 * fits in uint32; get_f32 accepts FLOAT32 and FLOAT64; get_bool accepts BOOL. */
kipp_status kipp_gguf_get_u32(const kipp_gguf *g, const char *key, uint32_t *out, char *err,
                              size_t err_len);
kipp_status kipp_gguf_get_f32(const kipp_gguf *g, const char *key, float *out, char *err,
                              size_t err_len);
kipp_status kipp_gguf_get_bool(const kipp_gguf *g, const char *key, int *out, char *err,
                               size_t err_len);
kipp_status kipp_gguf_get_str(const kipp_gguf *g, const char *key, kipp_gguf_str *out,
                              char *err, size_t err_len);

/* Arrays: element type and count. For scalar element types *data points at the packed,
 * little-endian elements in the file (may be unaligned: read with memcpy). For string
 * arrays use kipp_gguf_arr_str. */
kipp_status kipp_gguf_get_arr(const kipp_gguf *g, const char *key, kipp_gguf_vtype *elem_type,
                              uint64_t *n, const void **data, char *err, size_t err_len);
/* i-th element of a string array (bounds-checked; returns {NULL,0} when out of range or
 * not a string array). O(1): the reader indexes string arrays at open time. */
kipp_gguf_str kipp_gguf_arr_str(const kipp_gguf *g, const char *key, uint64_t i);

const kipp_gguf_tensor *kipp_gguf_tensor_at(const kipp_gguf *g, uint64_t i);
const kipp_gguf_tensor *kipp_gguf_find_tensor(const kipp_gguf *g, const char *name);

#endif
