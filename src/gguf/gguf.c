/* gguf.c — GGUF v3 reader: maps (or borrows) the file, validates the header, metadata and
 * tensor infos against hostile input, indexes names and string arrays, and hands out
 * pointers into the mapping. Container layout: docs/qwen3-gguf-reference.md section 1.
 * Does not write GGUF, does not copy tensor data, does not read v1/v2 or big-endian files,
 * and does not check that padding bytes are zero (llama.cpp does not either). */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* mmap, fstat, O_CLOEXEC, mkstemp */
#endif

#include "gguf/gguf.h"

#include "core/error.h"
#include "core/types.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_CAP (1ull << 30)      /* cap on string bytes, array elements, kv/tensor counts */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_NAME 64           /* tensor names are < 64 bytes (llama.cpp's GGML_MAX_NAME) */
#define GGUF_MAX_DIM (1ll << 62)   /* dimensions must be below this (sanity cap) */
/* Smallest possible records, used to bound counts by the bytes left before allocating:
 * kv = key length + value type + 1 value byte; tensor info = name length + n_dims + one
 * int64 dim + type + offset. (Empty names count as possible here so that they get their
 * own message later.) */
#define KV_MIN_BYTES 13u
#define TENSOR_INFO_MIN_BYTES 32u

typedef unsigned long long ull; /* for printf: uint64_t is not always unsigned long long */

/* ---- the handle ------------------------------------------------------------------------ */

typedef struct {
    kipp_gguf_str key;   /* first member: the name index reads it through a stride */
    uint64_t rec_off;    /* absolute byte offset of the record (its key length field) */
    uint32_t type;       /* kipp_gguf_vtype */
    uint32_t elem_type;  /* arrays only */
    uint64_t n;          /* arrays: element count; strings: byte length */
    const uint8_t *val;  /* scalar bytes, string bytes, or the first array element */
    kipp_gguf_str *strs; /* string arrays: one {ptr,len} per element (NULL when n == 0) */
} gguf_kv;

typedef struct {
    kipp_gguf_str name;  /* first member, see gguf_kv; points at t.name */
    kipp_gguf_tensor t;
    uint64_t info_off;   /* absolute byte offset of the tensor-info record */
} gguf_tinfo;

/* Open-addressing hash of names -> index, so duplicate checks and lookups stay O(1) even
 * for hostile files with a million keys. Slot value 0 = empty, else index + 1. */
typedef struct {
    uint32_t *slots;
    uint64_t mask;
    const uint8_t *items; /* array whose elements start with a kipp_gguf_str */
    size_t stride;
} name_index;

struct kipp_gguf {
    const uint8_t *base;
    uint64_t size;
    int mapped;
    uint32_t version, alignment;
    uint64_t n_kv, n_tensors, data_off;
    gguf_kv *kvs;
    gguf_tinfo *tensors;
    name_index kv_ix, tensor_ix;
};

/* ---- names: hashing and messages ----------------------------------------------------------- */

static uint64_t fnv1a(const char *s, uint64_t len) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static kipp_gguf_str ix_name(const name_index *ix, uint64_t i) {
    kipp_gguf_str s;
    memcpy(&s, ix->items + i * ix->stride, sizeof s);
    return s;
}

static int ix_init(name_index *ix, uint64_t n, const void *items, size_t stride) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap <<= 1; /* n <= 2^30, so cap <= 2^31 */
    ix->slots = calloc((size_t)cap, sizeof *ix->slots);
    ix->mask = cap - 1;
    ix->items = items;
    ix->stride = stride;
    return ix->slots != NULL;
}

/* Index of the name equal to (s, len), or -1. */
static int64_t ix_find(const name_index *ix, const char *s, uint64_t len) {
    if (!ix->slots) return -1;
    for (uint64_t h = fnv1a(s, len) & ix->mask;; h = (h + 1) & ix->mask) {
        const uint32_t v = ix->slots[h];
        if (v == 0) return -1;
        const kipp_gguf_str n = ix_name(ix, v - 1);
        if (n.len == len && memcmp(n.ptr, s, (size_t)len) == 0) return (int64_t)v - 1;
    }
}

/* Inserts item i; returns -1, or the index of an earlier item with the same name. */
static int64_t ix_insert(name_index *ix, uint64_t i) {
    const kipp_gguf_str s = ix_name(ix, i);
    uint64_t h = fnv1a(s.ptr, s.len) & ix->mask;
    for (; ix->slots[h] != 0; h = (h + 1) & ix->mask) {
        const kipp_gguf_str n = ix_name(ix, ix->slots[h] - 1);
        if (n.len == s.len && memcmp(n.ptr, s.ptr, (size_t)s.len) == 0)
            return (int64_t)ix->slots[h] - 1;
    }
    ix->slots[h] = (uint32_t)(i + 1);
    return -1;
}

/* Names come from the file: print at most 64 bytes, with anything that is not printable
 * ASCII (or a quote) shown as '?', so a message is always one readable line. */
static const char *printable(const char *s, uint64_t len, char *buf, size_t cap) {
    size_t k = 0;
    for (uint64_t i = 0; i < len && i < 64 && k + 4 < cap; i++) {
        const unsigned char c = (unsigned char)s[i];
        buf[k++] = (c < 0x20 || c >= 0x7f || c == '\'') ? '?' : (char)c;
    }
    if (len > 64 && k + 4 < cap) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

static const char *vtype_name(uint32_t t) {
    static const char *const names[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32",
                                        "INT32", "FLOAT32", "BOOL",  "STRING", "ARRAY",
                                        "UINT64", "INT64", "FLOAT64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "invalid";
}

/* Bytes of one value of a fixed-size type; 0 for STRING, ARRAY and invalid ids. */
static uint32_t scalar_bytes(uint32_t t) {
    switch (t) {
    case KIPP_GGUF_UINT8: case KIPP_GGUF_INT8: case KIPP_GGUF_BOOL: return 1;
    case KIPP_GGUF_UINT16: case KIPP_GGUF_INT16: return 2;
    case KIPP_GGUF_UINT32: case KIPP_GGUF_INT32: case KIPP_GGUF_FLOAT32: return 4;
    case KIPP_GGUF_UINT64: case KIPP_GGUF_INT64: case KIPP_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static uint64_t le_u64(const uint8_t *p, unsigned n_bytes) {
    uint64_t v = 0;
    for (unsigned i = 0; i < n_bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* ---- the bounds-checked cursor ------------------------------------------------------------ */

typedef struct {
    const uint8_t *b;
    uint64_t size, pos; /* invariant: pos <= size */
    const char *path;   /* NULL for buffers */
    char where[200];    /* the record being parsed, e.g. "kv 3 'general.name' (record at byte 120)" */
    char *err;
    size_t err_len;
} parser;

/* Every parse error goes through here: "gguf: [path: ][where: ]message". */
static kipp_status perr(parser *p, kipp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kipp_status perr(parser *p, kipp_status st, const char *fmt, ...) {
    char msg[KIPP_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kipp_errf(p->err, p->err_len, st, "gguf: %s%s%s%s%s", p->path ? p->path : "",
                     p->path ? ": " : "", p->where, p->where[0] ? ": " : "", msg);
}

/* Takes n bytes at the cursor; what+what2 name the field for the message. */
static kipp_status take(parser *p, uint64_t n, const char *what, const char *what2,
                        const uint8_t **out) {
    if (n > p->size - p->pos)
        return perr(p, KIPP_ERR_FORMAT,
                    "%s%s at byte %llu needs %llu bytes but the file ends at byte %llu", what,
                    what2, (ull)p->pos, (ull)n, (ull)p->size);
    *out = p->b + p->pos;
    p->pos += n;
    return KIPP_OK;
}

static kipp_status rd_u32(parser *p, const char *what, uint32_t *v) {
    const uint8_t *q = NULL;
    kipp_status st = take(p, 4, what, "", &q);
    if (st == KIPP_OK) *v = (uint32_t)le_u64(q, 4);
    return st;
}

static kipp_status rd_u64(parser *p, const char *what, const char *what2, uint64_t *v) {
    const uint8_t *q = NULL;
    kipp_status st = take(p, 8, what, what2, &q);
    if (st == KIPP_OK) *v = le_u64(q, 8);
    return st;
}

/* A GGUF string: uint64 length (capped at 2^30), then that many bytes, no NUL. */
static kipp_status rd_str(parser *p, const char *what, kipp_gguf_str *s) {
    const uint64_t at = p->pos;
    uint64_t len;
    const uint8_t *q = NULL;
    kipp_status st = rd_u64(p, what, " length", &len);
    if (st != KIPP_OK) return st;
    if (len > GGUF_CAP)
        return perr(p, KIPP_ERR_FORMAT, "%s length %llu at byte %llu exceeds the 2^30-byte cap",
                    what, (ull)len, (ull)at);
    if ((st = take(p, len, what, " bytes", &q)) != KIPP_OK) return st;
    s->ptr = (const char *)q;
    s->len = len;
    return KIPP_OK;
}

/* ---- header and metadata ----------------------------------------------------------------- */

static kipp_status parse_header(parser *p, kipp_gguf *g) {
    const uint8_t *m = NULL;
    kipp_status st;
    if (p->size < 4)
        return perr(p, KIPP_ERR_FORMAT, "file is %llu bytes, too small to hold the GGUF magic",
                    (ull)p->size);
    if ((st = take(p, 4, "magic", "", &m)) != KIPP_OK) return st;
    if (memcmp(m, "GGUF", 4) != 0)
        return perr(p, KIPP_ERR_FORMAT,
                    "bad magic at byte 0: expected 47 47 55 46 (\"GGUF\"), found %02x %02x "
                    "%02x %02x; this is not a GGUF file", m[0], m[1], m[2], m[3]);
    if ((st = rd_u32(p, "version", &g->version)) != KIPP_OK) return st;
    /* A big-endian writer stores 3 as 00 00 00 03: the low 16 bits read here are zero. */
    if (g->version != 0 && (g->version & 0xffffu) == 0)
        return perr(p, KIPP_ERR_UNSUPPORTED,
                    "version field at byte 4 reads 0x%08x: this is a big-endian GGUF, which "
                    "Kipp does not read; convert it to little-endian", (unsigned)g->version);
    if (g->version == 1 || g->version == 2)
        return perr(p, KIPP_ERR_UNSUPPORTED,
                    "GGUF version %u (at byte 4) is not supported: Kipp reads version 3 only; "
                    "re-convert the model with a current gguf-py", (unsigned)g->version);
    if (g->version == 0)
        return perr(p, KIPP_ERR_FORMAT, "version 0 at byte 4 is not a GGUF version");
    if (g->version > 3)
        return perr(p, KIPP_ERR_UNSUPPORTED,
                    "GGUF version %u (at byte 4) is newer than the version 3 Kipp reads",
                    (unsigned)g->version);
    if ((st = rd_u64(p, "tensor count", "", &g->n_tensors)) != KIPP_OK) return st;
    if ((st = rd_u64(p, "kv count", "", &g->n_kv)) != KIPP_OK) return st;
    /* Bound both counts by what the remaining bytes can hold before allocating for them. */
    const uint64_t left = p->size - p->pos;
    if (g->n_tensors > GGUF_CAP || g->n_tensors > left / TENSOR_INFO_MIN_BYTES)
        return perr(p, KIPP_ERR_FORMAT,
                    "tensor count %llu at byte 8 cannot fit: %llu bytes follow the header and "
                    "each tensor info takes at least %u", (ull)g->n_tensors, (ull)left,
                    TENSOR_INFO_MIN_BYTES);
    if (g->n_kv > GGUF_CAP || g->n_kv > left / KV_MIN_BYTES)
        return perr(p, KIPP_ERR_FORMAT,
                    "kv count %llu at byte 16 cannot fit: %llu bytes follow the header and each "
                    "kv record takes at least %u", (ull)g->n_kv, (ull)left, KV_MIN_BYTES);
    return KIPP_OK;
}

static kipp_status parse_array(parser *p, gguf_kv *kv) {
    const uint64_t et_at = p->pos;
    uint64_t n_at, n_bytes;
    kipp_status st;
    if ((st = rd_u32(p, "array element type", &kv->elem_type)) != KIPP_OK) return st;
    if (kv->elem_type == KIPP_GGUF_ARRAY)
        return perr(p, KIPP_ERR_FORMAT,
                    "array element type ARRAY at byte %llu: nested arrays are not supported",
                    (ull)et_at);
    if (kv->elem_type > KIPP_GGUF_FLOAT64)
        return perr(p, KIPP_ERR_FORMAT, "array element type %u at byte %llu is not a GGUF type",
                    (unsigned)kv->elem_type, (ull)et_at);
    n_at = p->pos;
    if ((st = rd_u64(p, "array count", "", &kv->n)) != KIPP_OK) return st;
    if (kv->n > GGUF_CAP)
        return perr(p, KIPP_ERR_FORMAT, "array count %llu at byte %llu exceeds the 2^30 cap",
                    (ull)kv->n, (ull)n_at);
    kv->val = p->b + p->pos;
    if (kv->elem_type != KIPP_GGUF_STRING) {
        const uint8_t *q = NULL;
        n_bytes = kv->n * scalar_bytes(kv->elem_type); /* <= 2^33: cannot overflow */
        return take(p, n_bytes, "array data", "", &q);
    }
    /* String arrays are indexed now so that kipp_gguf_arr_str is O(1). Each string takes
     * at least its 8-byte length: check the count against the bytes left first. */
    if (kv->n > (p->size - p->pos) / 8)
        return perr(p, KIPP_ERR_FORMAT,
                    "array of %llu strings (count at byte %llu) cannot fit in the %llu bytes "
                    "left", (ull)kv->n, (ull)n_at, (ull)(p->size - p->pos));
    if (kv->n == 0) return KIPP_OK;
    kv->strs = malloc((size_t)kv->n * sizeof *kv->strs);
    if (!kv->strs)
        return perr(p, KIPP_ERR_NOMEM, "cannot allocate the index of %llu strings", (ull)kv->n);
    for (uint64_t i = 0; i < kv->n; i++)
        if ((st = rd_str(p, "array string element", &kv->strs[i])) != KIPP_OK) return st;
    return KIPP_OK;
}

static kipp_status parse_kv(parser *p, kipp_gguf *g, uint64_t i) {
    gguf_kv *kv = &g->kvs[i];
    char name[80];
    kipp_status st;
    kv->rec_off = p->pos;
    snprintf(p->where, sizeof p->where, "kv %llu (record at byte %llu)", (ull)i,
             (ull)kv->rec_off);
    if ((st = rd_str(p, "key", &kv->key)) != KIPP_OK) return st;
    if (kv->key.len == 0) return perr(p, KIPP_ERR_FORMAT, "key is empty");
    snprintf(p->where, sizeof p->where, "kv %llu '%s' (record at byte %llu)", (ull)i,
             printable(kv->key.ptr, kv->key.len, name, sizeof name), (ull)kv->rec_off);
    const int64_t prev = ix_insert(&g->kv_ix, i);
    if (prev >= 0)
        return perr(p, KIPP_ERR_FORMAT, "duplicate key (first defined at byte %llu)",
                    (ull)g->kvs[prev].rec_off);

    const uint64_t type_at = p->pos;
    if ((st = rd_u32(p, "value type", &kv->type)) != KIPP_OK) return st;
    if (kv->type > KIPP_GGUF_FLOAT64)
        return perr(p, KIPP_ERR_FORMAT, "value type %u at byte %llu is not a GGUF type (0..12)",
                    (unsigned)kv->type, (ull)type_at);
    if (kv->type == KIPP_GGUF_STRING) {
        kipp_gguf_str s;
        if ((st = rd_str(p, "string value", &s)) != KIPP_OK) return st;
        kv->val = (const uint8_t *)s.ptr;
        kv->n = s.len;
    } else if (kv->type == KIPP_GGUF_ARRAY) {
        if ((st = parse_array(p, kv)) != KIPP_OK) return st;
    } else {
        if ((st = take(p, scalar_bytes(kv->type), "value", "", &kv->val)) != KIPP_OK) return st;
    }

    static const char k_align[] = "general.alignment";
    if (kv->key.len == sizeof k_align - 1 && memcmp(kv->key.ptr, k_align, kv->key.len) == 0) {
        if (kv->type != KIPP_GGUF_UINT32)
            return perr(p, KIPP_ERR_FORMAT, "has type %s (at byte %llu); it must be UINT32",
                        vtype_name(kv->type), (ull)type_at);
        const uint32_t a = (uint32_t)le_u64(kv->val, 4);
        if (a == 0 || (a & (a - 1)) != 0)
            return perr(p, KIPP_ERR_FORMAT, "value %u at byte %llu is not a power of two",
                        (unsigned)a, (ull)(type_at + 4));
        g->alignment = a;
    }
    return KIPP_OK;
}

/* ---- tensor infos ------------------------------------------------------------------------ */

static kipp_status parse_tensor_info(parser *p, kipp_gguf *g, uint64_t i) {
    gguf_tinfo *ti = &g->tensors[i];
    kipp_gguf_tensor *t = &ti->t;
    kipp_gguf_str name;
    char pname[80];
    uint64_t at;
    kipp_status st;
    ti->info_off = p->pos;
    snprintf(p->where, sizeof p->where, "tensor %llu (info at byte %llu)", (ull)i,
             (ull)ti->info_off);
    if ((st = rd_str(p, "name", &name)) != KIPP_OK) return st;
    if (name.len == 0) return perr(p, KIPP_ERR_FORMAT, "name is empty");
    if (name.len >= GGUF_MAX_NAME)
        return perr(p, KIPP_ERR_FORMAT, "name '%s' is %llu bytes; names must be under %d",
                    printable(name.ptr, name.len, pname, sizeof pname), (ull)name.len,
                    GGUF_MAX_NAME);
    /* The name is handed out as a C string: an embedded NUL would make two different
     * names look equal to kipp_gguf_find_tensor. */
    if (memchr(name.ptr, 0, (size_t)name.len))
        return perr(p, KIPP_ERR_FORMAT, "name '%s' contains a NUL byte",
                    printable(name.ptr, name.len, pname, sizeof pname));
    memcpy(t->name, name.ptr, (size_t)name.len);
    t->name[name.len] = '\0';
    ti->name.ptr = t->name;
    ti->name.len = name.len;
    snprintf(p->where, sizeof p->where, "tensor '%s' (info at byte %llu)",
             printable(name.ptr, name.len, pname, sizeof pname), (ull)ti->info_off);
    const int64_t prev = ix_insert(&g->tensor_ix, i);
    if (prev >= 0)
        return perr(p, KIPP_ERR_FORMAT, "duplicate tensor name (first info at byte %llu)",
                    (ull)g->tensors[prev].info_off);

    at = p->pos;
    if ((st = rd_u32(p, "n_dims", &t->n_dims)) != KIPP_OK) return st;
    if (t->n_dims < 1 || t->n_dims > 4)
        return perr(p, KIPP_ERR_FORMAT, "n_dims %u at byte %llu must be 1..4",
                    (unsigned)t->n_dims, (ull)at);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t raw;
        at = p->pos;
        if ((st = rd_u64(p, "dimension", "", &raw)) != KIPP_OK) return st;
        const int64_t ne = (int64_t)raw; /* stored as int64 */
        if (ne < 1 || ne >= GGUF_MAX_DIM)
            return perr(p, KIPP_ERR_FORMAT, "ne[%u] = %lld at byte %llu must be in 1..2^62-1",
                        (unsigned)d, (long long)ne, (ull)at);
        if (!kipp_mul_ok(n_elems, (uint64_t)ne, &n_elems) || n_elems > (uint64_t)INT64_MAX)
            return perr(p, KIPP_ERR_FORMAT,
                        "element count overflows int64 at ne[%u] = %lld (byte %llu)",
                        (unsigned)d, (long long)ne, (ull)at);
        t->ne[d] = ne;
    }
    t->n_elems = n_elems;

    at = p->pos;
    if ((st = rd_u32(p, "type", &t->type)) != KIPP_OK) return st;
    if (!kipp_type_supported(t->type)) {
        const char *tn = kipp_type_name(t->type); /* "type N" for ids ggml never had */
        return perr(p, KIPP_ERR_UNSUPPORTED,
                    "%s%s (type id %u at byte %llu) is not supported by Kipp (supported: F32, "
                    "F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, "
                    "IQ4_NL, IQ4_XS)",
                    strncmp(tn, "type ", 5) == 0 ? "unknown " : "type ", tn, (unsigned)t->type,
                    (ull)at);
    }
    const uint32_t blk = kipp_type_block_elems(t->type);
    if ((uint64_t)t->ne[0] % blk != 0)
        return perr(p, KIPP_ERR_FORMAT, "ne[0] = %lld is not a multiple of the %s block size %u",
                    (long long)t->ne[0], kipp_type_name(t->type), (unsigned)blk);
    /* ne[0] % blk == 0 makes n_elems a multiple of blk, so this is exact. */
    if (!kipp_mul_ok(n_elems / blk, kipp_type_block_bytes(t->type), &t->n_bytes))
        return perr(p, KIPP_ERR_FORMAT, "data size of %llu %s elements overflows",
                    (ull)n_elems, kipp_type_name(t->type));

    at = p->pos;
    if ((st = rd_u64(p, "data offset", "", &t->offset)) != KIPP_OK) return st;
    if (t->offset % g->alignment != 0)
        return perr(p, KIPP_ERR_FORMAT,
                    "data offset %llu at byte %llu is not a multiple of the alignment %u",
                    (ull)t->offset, (ull)at, (unsigned)g->alignment);
    return KIPP_OK;
}

typedef struct {
    uint64_t begin, end; /* absolute file offsets */
    uint64_t idx;
} extent;

static int extent_cmp(const void *a, const void *b) {
    const extent *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Places the data section, then checks every tensor lies inside the file and that no two
 * tensors share bytes. Needs all infos first: the data start depends on where they end. */
static kipp_status place_tensors(parser *p, kipp_gguf *g) {
    extent *ext = NULL;
    kipp_status st = KIPP_OK;
    const uint64_t end_infos = p->pos, a = g->alignment;
    uint64_t data_off;
    p->where[0] = '\0';
    if (!kipp_add_ok(end_infos, a - 1, &data_off)) data_off = UINT64_MAX; /* past any file */
    data_off -= data_off % a;
    if (data_off > p->size) {
        if (g->n_tensors == 0) {
            g->data_off = p->size; /* no tensors: the padding may be missing entirely */
            return KIPP_OK;
        }
        return perr(p, KIPP_ERR_FORMAT,
                    "data section would start at byte %llu (infos end at byte %llu, alignment "
                    "%llu), past the end of the file (size %llu)",
                    (ull)data_off, (ull)end_infos, (ull)a, (ull)p->size);
    }
    g->data_off = data_off;
    if (g->n_tensors == 0) return KIPP_OK;

    ext = malloc((size_t)g->n_tensors * sizeof *ext);
    if (!ext) return perr(p, KIPP_ERR_NOMEM, "cannot allocate %llu extents", (ull)g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tinfo *ti = &g->tensors[i];
        char pn[80];
        const char *name = printable(ti->name.ptr, ti->name.len, pn, sizeof pn);
        uint64_t begin, end;
        if (!kipp_add_ok(data_off, ti->t.offset, &begin) ||
            !kipp_add_ok(begin, ti->t.n_bytes, &end)) {
            st = perr(p, KIPP_ERR_FORMAT,
                      "tensor '%s' (info at byte %llu): data offset %llu + %llu bytes overflows "
                      "64 bits (data section at byte %llu)", name, (ull)ti->info_off,
                      (ull)ti->t.offset, (ull)ti->t.n_bytes, (ull)data_off);
            goto done;
        }
        if (end > p->size) {
            st = perr(p, KIPP_ERR_FORMAT,
                      "tensor '%s' (info at byte %llu): data [%llu, %llu) extends past the end "
                      "of the file (size %llu)", name, (ull)ti->info_off, (ull)begin,
                      (ull)end, (ull)p->size);
            goto done;
        }
        ti->t.data = p->b + begin;
        ext[i] = (extent){begin, end, i};
    }
    qsort(ext, (size_t)g->n_tensors, sizeof *ext, extent_cmp);
    for (uint64_t k = 1; k < g->n_tensors; k++) {
        if (ext[k - 1].end > ext[k].begin) {
            const gguf_tinfo *x = &g->tensors[ext[k - 1].idx], *y = &g->tensors[ext[k].idx];
            char xn[80], yn[80];
            st = perr(p, KIPP_ERR_FORMAT,
                      "tensor '%s' (info at byte %llu): data [%llu, %llu) overlaps tensor '%s' "
                      "(info at byte %llu) data [%llu, %llu)",
                      printable(y->name.ptr, y->name.len, yn, sizeof yn), (ull)y->info_off,
                      (ull)ext[k].begin, (ull)ext[k].end,
                      printable(x->name.ptr, x->name.len, xn, sizeof xn),
                      (ull)x->info_off, (ull)ext[k - 1].begin, (ull)ext[k - 1].end);
            goto done;
        }
    }
done:
    free(ext);
    return st;
}

/* ---- open / free ------------------------------------------------------------------------- */

static kipp_status parse(const uint8_t *base, uint64_t size, int mapped, const char *path,
                         kipp_gguf **out, char *err, size_t err_len) {
    parser p = {.b = base, .size = size, .pos = 0, .path = path, .err = err, .err_len = err_len};
    kipp_status st;
    kipp_gguf *g = calloc(1, sizeof *g);
    if (!g) return perr(&p, KIPP_ERR_NOMEM, "cannot allocate the reader");
    g->base = base;
    g->size = size;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if ((st = parse_header(&p, g)) != KIPP_OK) goto fail;

    if (g->n_kv) {
        g->kvs = calloc((size_t)g->n_kv, sizeof *g->kvs);
        if (!g->kvs) {
            st = perr(&p, KIPP_ERR_NOMEM, "cannot allocate %llu kv records", (ull)g->n_kv);
            goto fail;
        }
    }
    if (!ix_init(&g->kv_ix, g->n_kv, g->kvs, sizeof *g->kvs)) {
        st = perr(&p, KIPP_ERR_NOMEM, "cannot allocate the key index");
        goto fail;
    }
    for (uint64_t i = 0; i < g->n_kv; i++)
        if ((st = parse_kv(&p, g, i)) != KIPP_OK) goto fail;

    if (g->n_tensors) {
        g->tensors = calloc((size_t)g->n_tensors, sizeof *g->tensors);
        if (!g->tensors) {
            st = perr(&p, KIPP_ERR_NOMEM, "cannot allocate %llu tensor infos", (ull)g->n_tensors);
            goto fail;
        }
    }
    if (!ix_init(&g->tensor_ix, g->n_tensors, g->tensors, sizeof *g->tensors)) {
        st = perr(&p, KIPP_ERR_NOMEM, "cannot allocate the tensor index");
        goto fail;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((st = parse_tensor_info(&p, g, i)) != KIPP_OK) goto fail;
    if ((st = place_tensors(&p, g)) != KIPP_OK) goto fail;

    g->mapped = mapped; /* only now: on failure the caller still owns the mapping */
    *out = g;
    return KIPP_OK;
fail:
    kipp_gguf_free(g);
    return st;
}

kipp_status kipp_gguf_open_buffer(const void *buf, size_t n_bytes, kipp_gguf **out, char *err,
                                  size_t err_len) {
    if (!out) return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "gguf: out is NULL");
    *out = NULL;
    if (!buf && n_bytes)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "gguf: buffer is NULL");
    return parse(buf, n_bytes, 0, NULL, out, err, err_len);
}

kipp_status kipp_gguf_open(const char *path, kipp_gguf **out, char *err, size_t err_len) {
    struct stat sb;
    if (!out) return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "gguf: out is NULL");
    *out = NULL;
    if (!path) return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "gguf: path is NULL");
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kipp_errf(err, err_len, KIPP_ERR_IO, "gguf: cannot open '%s': %s", path,
                         strerror(errno));
    if (fstat(fd, &sb) != 0) {
        const int e = errno;
        close(fd);
        return kipp_errf(err, err_len, KIPP_ERR_IO, "gguf: cannot stat '%s': %s", path,
                         strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return kipp_errf(err, err_len, KIPP_ERR_IO, "gguf: '%s' is not a regular file", path);
    }
    if (sb.st_size == 0) { /* mmap of 0 bytes fails with a confusing EINVAL */
        close(fd);
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT, "gguf: '%s' is empty (0 bytes)", path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return kipp_errf(err, err_len, KIPP_ERR_IO, "gguf: '%s' (%llu bytes) is too large to map",
                         path, (ull)sb.st_size);
    }
    const size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    const int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED)
        return kipp_errf(err, err_len, KIPP_ERR_IO, "gguf: cannot mmap '%s' (%llu bytes): %s",
                         path, (ull)size, strerror(e));
    const kipp_status st = parse(map, size, 1, path, out, err, err_len);
    if (st != KIPP_OK) munmap(map, size);
    return st;
}

void kipp_gguf_free(kipp_gguf *g) {
    if (!g) return;
    for (uint64_t i = 0; g->kvs && i < g->n_kv; i++) free(g->kvs[i].strs);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_ix.slots);
    free(g->tensor_ix.slots);
    if (g->mapped) munmap((void *)g->base, (size_t)g->size);
    free(g);
}

/* ---- accessors --------------------------------------------------------------------------- */

uint32_t kipp_gguf_version(const kipp_gguf *g) { return g ? g->version : 0; }
uint64_t kipp_gguf_n_kv(const kipp_gguf *g) { return g ? g->n_kv : 0; }
uint64_t kipp_gguf_n_tensors(const kipp_gguf *g) { return g ? g->n_tensors : 0; }
uint32_t kipp_gguf_alignment(const kipp_gguf *g) { return g ? g->alignment : 0; }
uint64_t kipp_gguf_data_offset(const kipp_gguf *g) { return g ? g->data_off : 0; }

int64_t kipp_gguf_find_key(const kipp_gguf *g, const char *key) {
    if (!g || !key) return -1;
    return ix_find(&g->kv_ix, key, strlen(key));
}

kipp_gguf_str kipp_gguf_key_name(const kipp_gguf *g, int64_t idx) {
    if (!g || idx < 0 || (uint64_t)idx >= g->n_kv) return (kipp_gguf_str){NULL, 0};
    return g->kvs[idx].key;
}

/* Out of range: (kipp_gguf_vtype)-1, which is no valid type. */
kipp_gguf_vtype kipp_gguf_key_type(const kipp_gguf *g, int64_t idx) {
    if (!g || idx < 0 || (uint64_t)idx >= g->n_kv) return (kipp_gguf_vtype)-1;
    return (kipp_gguf_vtype)g->kvs[idx].type;
}

/* The record for key, or NULL with a "not found" error. */
static const gguf_kv *need_kv(const kipp_gguf *g, const char *key, char *err, size_t err_len) {
    if (!g || !key) {
        kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "gguf: NULL reader or key");
        return NULL;
    }
    const int64_t i = kipp_gguf_find_key(g, key);
    if (i < 0) kipp_errf(err, err_len, KIPP_ERR_FORMAT, "gguf: key '%s' not found", key);
    return i < 0 ? NULL : &g->kvs[i];
}

static kipp_status wrong_type(const gguf_kv *kv, const char *key, const char *expected,
                              char *err, size_t err_len) {
    return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                     "gguf: key '%s' (record at byte %llu) has type %s; expected %s", key,
                     (ull)kv->rec_off, vtype_name(kv->type), expected);
}

static kipp_status no_kv(const kipp_gguf *g, const char *key) {
    return (!g || !key) ? KIPP_ERR_INVALID_ARG : KIPP_ERR_FORMAT;
}

kipp_status kipp_gguf_get_u32(const kipp_gguf *g, const char *key, uint32_t *out, char *err,
                              size_t err_len) {
    const gguf_kv *kv = need_kv(g, key, err, err_len);
    if (!kv) return no_kv(g, key);
    const unsigned n_bytes = scalar_bytes(kv->type);
    int is_signed;
    switch (kv->type) {
    case KIPP_GGUF_UINT8: case KIPP_GGUF_UINT16: case KIPP_GGUF_UINT32: case KIPP_GGUF_UINT64:
        is_signed = 0;
        break;
    case KIPP_GGUF_INT8: case KIPP_GGUF_INT16: case KIPP_GGUF_INT32: case KIPP_GGUF_INT64:
        is_signed = 1;
        break;
    default:
        return wrong_type(kv, key, "an integer", err, err_len);
    }
    const uint64_t raw = le_u64(kv->val, n_bytes);
    const uint64_t sign_bit = 1ull << (8 * n_bytes - 1);
    if (is_signed && (raw & sign_bit)) {
        /* sign-extend to 64 bits, then reinterpret (memcpy: no implementation-defined cast) */
        const uint64_t ext = n_bytes == 8 ? raw : raw | ~((sign_bit << 1) - 1);
        long long v;
        memcpy(&v, &ext, sizeof v);
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "gguf: key '%s' (record at byte %llu) holds %s value %lld, which does "
                         "not fit in uint32", key, (ull)kv->rec_off, vtype_name(kv->type), v);
    }
    if (raw > UINT32_MAX)
        return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                         "gguf: key '%s' (record at byte %llu) holds %s value %llu, which does "
                         "not fit in uint32", key, (ull)kv->rec_off, vtype_name(kv->type),
                         (ull)raw);
    if (out) *out = (uint32_t)raw;
    return KIPP_OK;
}

kipp_status kipp_gguf_get_f32(const kipp_gguf *g, const char *key, float *out, char *err,
                              size_t err_len) {
    const gguf_kv *kv = need_kv(g, key, err, err_len);
    if (!kv) return no_kv(g, key);
    float f;
    if (kv->type == KIPP_GGUF_FLOAT32) {
        const uint32_t u = (uint32_t)le_u64(kv->val, 4);
        memcpy(&f, &u, sizeof f);
    } else if (kv->type == KIPP_GGUF_FLOAT64) {
        const uint64_t u = le_u64(kv->val, 8);
        double d;
        memcpy(&d, &u, sizeof d);
        if (isfinite(d) && fabs(d) > FLT_MAX) /* the conversion would be undefined */
            return kipp_errf(err, err_len, KIPP_ERR_FORMAT,
                             "gguf: key '%s' (record at byte %llu) holds FLOAT64 value %g, out "
                             "of float range", key, (ull)kv->rec_off, d);
        f = (float)d;
    } else {
        return wrong_type(kv, key, "FLOAT32 or FLOAT64", err, err_len);
    }
    if (out) *out = f;
    return KIPP_OK;
}

kipp_status kipp_gguf_get_bool(const kipp_gguf *g, const char *key, int *out, char *err,
                               size_t err_len) {
    const gguf_kv *kv = need_kv(g, key, err, err_len);
    if (!kv) return no_kv(g, key);
    if (kv->type != KIPP_GGUF_BOOL) return wrong_type(kv, key, "BOOL", err, err_len);
    if (out) *out = kv->val[0] != 0; /* any non-zero byte is true, as llama.cpp reads it */
    return KIPP_OK;
}

kipp_status kipp_gguf_get_str(const kipp_gguf *g, const char *key, kipp_gguf_str *out,
                              char *err, size_t err_len) {
    const gguf_kv *kv = need_kv(g, key, err, err_len);
    if (!kv) return no_kv(g, key);
    if (kv->type != KIPP_GGUF_STRING) return wrong_type(kv, key, "STRING", err, err_len);
    if (out) *out = (kipp_gguf_str){(const char *)kv->val, kv->n};
    return KIPP_OK;
}

kipp_status kipp_gguf_get_arr(const kipp_gguf *g, const char *key, kipp_gguf_vtype *elem_type,
                              uint64_t *n, const void **data, char *err, size_t err_len) {
    const gguf_kv *kv = need_kv(g, key, err, err_len);
    if (!kv) return no_kv(g, key);
    if (kv->type != KIPP_GGUF_ARRAY) return wrong_type(kv, key, "ARRAY", err, err_len);
    if (elem_type) *elem_type = (kipp_gguf_vtype)kv->elem_type;
    if (n) *n = kv->n;
    if (data) *data = kv->val;
    return KIPP_OK;
}

kipp_gguf_str kipp_gguf_arr_str(const kipp_gguf *g, const char *key, uint64_t i) {
    const int64_t k = kipp_gguf_find_key(g, key);
    if (k < 0) return (kipp_gguf_str){NULL, 0};
    const gguf_kv *kv = &g->kvs[k];
    if (kv->type != KIPP_GGUF_ARRAY || kv->elem_type != KIPP_GGUF_STRING || i >= kv->n)
        return (kipp_gguf_str){NULL, 0};
    return kv->strs[i];
}

const kipp_gguf_tensor *kipp_gguf_tensor_at(const kipp_gguf *g, uint64_t i) {
    if (!g || i >= g->n_tensors) return NULL;
    return &g->tensors[i].t;
}

const kipp_gguf_tensor *kipp_gguf_find_tensor(const kipp_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    const int64_t i = ix_find(&g->tensor_ix, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i].t;
}
