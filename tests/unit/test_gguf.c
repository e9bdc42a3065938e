/* test_gguf.c — unit suite for src/gguf/gguf.c. Builds GGUF files in memory with a small
 * writer, checks every getter on a valid file (default and custom alignment, buffer and
 * mmap), then feeds malformed variants (one per failure class, every truncation, and
 * single-byte mutations) and checks the status, the message, and that nothing crashes.
 * Set KIPP_TEST_VERBOSE=1 to print every error message the reader produced. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* mmap, fstat, O_CLOEXEC, mkstemp */
#endif

#include "gguf/gguf.h"

#include "core/types.h"
#include "kt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a tiny GGUF writer ------------------------------------------------------------------ */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    uint64_t n_kv; /* kv records written, patched into the header by finish() */
} wbuf;

static void put(wbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) abort(); /* test harness: out of memory is not a test result */
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_le(wbuf *b, uint64_t v, int n_bytes) {
    uint8_t t[8];
    for (int i = 0; i < n_bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)n_bytes);
}
static void put_u8(wbuf *b, uint8_t v) { put_le(b, v, 1); }
static void put_u32(wbuf *b, uint32_t v) { put_le(b, v, 4); }
static void put_u64(wbuf *b, uint64_t v) { put_le(b, v, 8); }
static void put_strn(wbuf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}
static void put_str(wbuf *b, const char *s) { put_strn(b, s, strlen(s)); }
static void pad_to(wbuf *b, size_t a) {
    while (b->n % a) put_u8(b, 0);
}
static void patch_u64(wbuf *b, size_t at, uint64_t v) {
    for (int i = 0; i < 8; i++) b->p[at + i] = (uint8_t)(v >> (8 * i));
}

static void header(wbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}
/* key + value type; the caller writes the value */
static void kv(wbuf *b, const char *key, uint32_t type) {
    put_str(b, key);
    put_u32(b, type);
    b->n_kv++;
}
static void kv_u32(wbuf *b, const char *key, uint32_t v) {
    kv(b, key, KIPP_GGUF_UINT32);
    put_u32(b, v);
}
static void tinfo(wbuf *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type,
                  uint64_t offset) {
    put_str(b, name);
    put_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) put_u64(b, (uint64_t)ne[d]);
    put_u32(b, type);
    put_u64(b, offset);
}
static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* ---- the valid reference file ------------------------------------------------------------- */

#define N_TENSORS 4
static const char *const k_names[N_TENSORS] = {"token_embd.weight", "blk.0.attn_q.weight",
                                               "blk.0.ffn_down.weight", "output_norm.weight"};
static const int64_t k_ne[N_TENSORS][2] = {{8, 2}, {64, 2}, {256, 1}, {8, 1}};
static const uint32_t k_ndims[N_TENSORS] = {2, 2, 1, 1};
static const uint32_t k_types[N_TENSORS] = {KIPP_TYPE_F32, KIPP_TYPE_Q8_0, KIPP_TYPE_Q4_K,
                                            KIPP_TYPE_F16};

/* Metadata of every value type, four tensors, data laid out as gguf-py does. align = 0
 * leaves general.alignment out (default 32). The last tensor ends exactly at the end of
 * the file, so every strict prefix is invalid. */
static void build_valid(wbuf *b, uint32_t align) {
    const uint32_t a = align ? align : 32;
    memset(b, 0, sizeof *b);
    header(b, 3, N_TENSORS, 0);
    kv(b, "general.architecture", KIPP_GGUF_STRING), put_str(b, "qwen3");
    kv(b, "t.u8", KIPP_GGUF_UINT8), put_u8(b, 200);
    kv(b, "t.i8", KIPP_GGUF_INT8), put_u8(b, (uint8_t)-5);
    kv(b, "t.u16", KIPP_GGUF_UINT16), put_le(b, 60000, 2);
    kv(b, "t.i16", KIPP_GGUF_INT16), put_le(b, (uint16_t)-300, 2);
    kv_u32(b, "t.u32", 4000000000u);
    kv(b, "t.i32", KIPP_GGUF_INT32), put_u32(b, 123);
    kv(b, "t.i32neg", KIPP_GGUF_INT32), put_u32(b, (uint32_t)-7);
    kv(b, "t.f32", KIPP_GGUF_FLOAT32), put_u32(b, 0x3fc00000u); /* 1.5 */
    kv(b, "t.bool", KIPP_GGUF_BOOL), put_u8(b, 1);
    kv(b, "t.bool2", KIPP_GGUF_BOOL), put_u8(b, 2); /* non-zero reads as true */
    kv(b, "t.u64", KIPP_GGUF_UINT64), put_u64(b, 77);
    kv(b, "t.u64big", KIPP_GGUF_UINT64), put_u64(b, 1ull << 40);
    kv(b, "t.i64", KIPP_GGUF_INT64), put_u64(b, (uint64_t)-1);
    kv(b, "t.i64min", KIPP_GGUF_INT64), put_u64(b, 1ull << 63);
    kv(b, "t.f64", KIPP_GGUF_FLOAT64), put_u64(b, 0x3fd0000000000000ull); /* 0.25 */
    kv(b, "t.f64big", KIPP_GGUF_FLOAT64), put_u64(b, 0x7e37e43c8800759cull); /* 1e300 */
    kv(b, "t.empty", KIPP_GGUF_STRING), put_str(b, "");
    kv(b, "t.arr_i32", KIPP_GGUF_ARRAY), put_u32(b, KIPP_GGUF_INT32), put_u64(b, 3);
    put_u32(b, 1), put_u32(b, (uint32_t)-2), put_u32(b, 3);
    kv(b, "t.arr_str", KIPP_GGUF_ARRAY), put_u32(b, KIPP_GGUF_STRING), put_u64(b, 3);
    put_str(b, "a"), put_str(b, ""), put_str(b, "hello");
    kv(b, "t.arr_none", KIPP_GGUF_ARRAY), put_u32(b, KIPP_GGUF_STRING), put_u64(b, 0);
    if (align) kv_u32(b, "general.alignment", align);
    patch_u64(b, 16, b->n_kv);

    uint64_t off = 0, offs[N_TENSORS];
    for (int i = 0; i < N_TENSORS; i++) {
        offs[i] = off = align_up(off, a);
        tinfo(b, k_names[i], k_ndims[i], k_ne[i], k_types[i], off);
        off += kipp_type_row_bytes(k_types[i], (uint64_t)(k_ne[i][0] * k_ne[i][1]));
    }
    pad_to(b, a);
    const size_t data = b->n;
    for (int i = 0; i < N_TENSORS; i++) {
        while (b->n < data + offs[i]) put_u8(b, 0);
        const uint64_t n = (uint64_t)(k_ne[i][0] * k_ne[i][1]);
        if (k_types[i] == KIPP_TYPE_F32) {
            for (uint64_t j = 0; j < n; j++) {
                const float f = (float)j * 0.5f - 3.0f;
                uint32_t u;
                memcpy(&u, &f, 4);
                put_u32(b, u);
            }
        } else if (k_types[i] == KIPP_TYPE_F16) {
            for (uint64_t j = 0; j < n; j++) put_le(b, kipp_f32_to_f16((float)j * 0.25f), 2);
        } else {
            const uint64_t n_bytes = kipp_type_row_bytes(k_types[i], n);
            for (uint64_t j = 0; j < n_bytes; j++) put_u8(b, (uint8_t)(j * 37 + i));
        }
    }
}

/* ---- helpers ---------------------------------------------------------------------------- */

static int verbose(void) {
    const char *v = getenv("KIPP_TEST_VERBOSE");
    return v && v[0] && v[0] != '0';
}

/* Opens an exact-size copy (so ASan sees any over-read) and checks status and message. */
static void expect(const wbuf *b, size_t n, kipp_status want, const char *label,
                   const char *needle) {
    uint8_t *copy = malloc(n ? n : 1);
    char err[KIPP_ERR_LEN] = "";
    kipp_gguf *g = NULL;
    if (!copy) abort();
    if (n) memcpy(copy, b->p, n);
    const kipp_status st = kipp_gguf_open_buffer(copy, n, &g, err, sizeof err);
    KT_CHECK(st == want, "%s: got %s, want %s (%s)", label, kipp_status_str(st),
             kipp_status_str(want), err);
    if (want != KIPP_OK) {
        KT_CHECK(g == NULL, "%s", label);
        KT_CHECK(strncmp(err, "gguf: ", 6) == 0 && strlen(err) > 12, "%s: message '%s'", label,
                 err);
        if (needle) KT_CHECK(strstr(err, needle) != NULL, "%s: '%s' lacks '%s'", label, err, needle);
        if (verbose()) fprintf(stderr, "  [%s] %s\n", label, err);
    }
    kipp_gguf_free(g);
    free(copy);
}

/* Touches everything a handle exposes; used on whatever a mutated file opens to. */
static void walk(const kipp_gguf *g) {
    char err[KIPP_ERR_LEN];
    for (int64_t i = 0; (uint64_t)i < kipp_gguf_n_kv(g); i++) {
        const kipp_gguf_str k = kipp_gguf_key_name(g, i);
        char key[256];
        if (!k.ptr || k.len >= sizeof key) continue;
        memcpy(key, k.ptr, (size_t)k.len);
        key[k.len] = '\0';
        uint32_t u;
        float f;
        int bo;
        kipp_gguf_str s;
        kipp_gguf_vtype et;
        uint64_t n = 0;
        const void *data;
        (void)kipp_gguf_get_u32(g, key, &u, err, sizeof err);
        (void)kipp_gguf_get_f32(g, key, &f, err, sizeof err);
        (void)kipp_gguf_get_bool(g, key, &bo, err, sizeof err);
        if (kipp_gguf_get_str(g, key, &s, err, sizeof err) == KIPP_OK && s.len) (void)s.ptr[s.len - 1];
        if (kipp_gguf_get_arr(g, key, &et, &n, &data, err, sizeof err) == KIPP_OK)
            for (uint64_t j = 0; j < n && j < 64; j++) {
                const kipp_gguf_str e = kipp_gguf_arr_str(g, key, j);
                if (e.len) (void)e.ptr[e.len - 1];
            }
    }
    for (uint64_t i = 0; i < kipp_gguf_n_tensors(g); i++) {
        const kipp_gguf_tensor *t = kipp_gguf_tensor_at(g, i);
        KT_CHECK(kipp_gguf_find_tensor(g, t->name) == t, "%s", t->name);
        float y[256];
        const uint32_t blk = kipp_type_block_elems(t->type);
        kipp_dequantize_row(t->type, t->data, y, blk); /* first block is in bounds */
        (void)((const uint8_t *)t->data)[t->n_bytes - 1];
    }
}

/* ---- valid files -------------------------------------------------------------------------- */

static void check_valid(const kipp_gguf *g, const uint8_t *base, uint32_t align) {
    char err[KIPP_ERR_LEN];
    uint32_t u = 0;
    float f = 0;
    int bo = 0;
    kipp_gguf_str s = {0};
    kipp_gguf_vtype et;
    uint64_t n = 0;
    const void *data = NULL;

    KT_CHECK(kipp_gguf_version(g) == 3);
    KT_CHECK(kipp_gguf_n_kv(g) == (align ? 22u : 21u), "%llu", (unsigned long long)kipp_gguf_n_kv(g));
    KT_CHECK(kipp_gguf_n_tensors(g) == N_TENSORS);
    KT_CHECK(kipp_gguf_alignment(g) == (align ? align : 32u));
    KT_CHECK(kipp_gguf_data_offset(g) % kipp_gguf_alignment(g) == 0);

    const int64_t ia = kipp_gguf_find_key(g, "general.architecture");
    KT_CHECK(ia == 0);
    KT_CHECK(kipp_gguf_key_type(g, ia) == KIPP_GGUF_STRING);
    s = kipp_gguf_key_name(g, ia);
    KT_CHECK(s.len == 20 && memcmp(s.ptr, "general.architecture", 20) == 0);
    KT_CHECK(kipp_gguf_find_key(g, "general") < 0 && kipp_gguf_find_key(g, "nope") < 0);
    KT_CHECK(kipp_gguf_key_name(g, -1).ptr == NULL && kipp_gguf_key_name(g, 1000).ptr == NULL);
    KT_CHECK((int)kipp_gguf_key_type(g, 1000) < 0 || (unsigned)kipp_gguf_key_type(g, 1000) > 12);
    KT_CHECK(kipp_gguf_key_type(g, kipp_gguf_find_key(g, "t.f64")) == KIPP_GGUF_FLOAT64);

    KT_CHECK(kipp_gguf_get_str(g, "general.architecture", &s, err, sizeof err) == KIPP_OK &&
             s.len == 5 && memcmp(s.ptr, "qwen3", 5) == 0);
    KT_CHECK(kipp_gguf_get_str(g, "t.empty", &s, err, sizeof err) == KIPP_OK && s.len == 0);
    /* get_u32: every integer type whose value fits */
    KT_CHECK(kipp_gguf_get_u32(g, "t.u8", &u, err, sizeof err) == KIPP_OK && u == 200);
    KT_CHECK(kipp_gguf_get_u32(g, "t.u16", &u, err, sizeof err) == KIPP_OK && u == 60000);
    KT_CHECK(kipp_gguf_get_u32(g, "t.u32", &u, err, sizeof err) == KIPP_OK && u == 4000000000u);
    KT_CHECK(kipp_gguf_get_u32(g, "t.i32", &u, err, sizeof err) == KIPP_OK && u == 123);
    KT_CHECK(kipp_gguf_get_u32(g, "t.u64", &u, err, sizeof err) == KIPP_OK && u == 77);
    static const char *const no_fit[] = {"t.i8", "t.i16", "t.i32neg", "t.u64big", "t.i64",
                                         "t.i64min"};
    for (size_t i = 0; i < sizeof no_fit / sizeof no_fit[0]; i++) {
        err[0] = '\0';
        KT_CHECK(kipp_gguf_get_u32(g, no_fit[i], &u, err, sizeof err) == KIPP_ERR_FORMAT &&
                 strstr(err, no_fit[i]) && strstr(err, "uint32"), "%s: %s", no_fit[i], err);
    }
    KT_CHECK(kipp_gguf_get_u32(g, "t.i64min", &u, err, sizeof err) == KIPP_ERR_FORMAT &&
             strstr(err, "-9223372036854775808"), "%s", err);
    KT_CHECK(kipp_gguf_get_u32(g, "t.i8", &u, err, sizeof err) == KIPP_ERR_FORMAT &&
             strstr(err, "-5"), "%s", err);
    KT_CHECK(kipp_gguf_get_u32(g, "t.f32", &u, err, sizeof err) == KIPP_ERR_FORMAT &&
             strstr(err, "FLOAT32"), "%s", err);
    KT_CHECK(kipp_gguf_get_u32(g, "t.bool", &u, err, sizeof err) == KIPP_ERR_FORMAT);
    KT_CHECK(kipp_gguf_get_u32(g, "missing.key", &u, err, sizeof err) == KIPP_ERR_FORMAT &&
             strstr(err, "missing.key") && strstr(err, "not found"), "%s", err);
    /* floats */
    KT_CHECK(kipp_gguf_get_f32(g, "t.f32", &f, err, sizeof err) == KIPP_OK && f == 1.5f);
    KT_CHECK(kipp_gguf_get_f32(g, "t.f64", &f, err, sizeof err) == KIPP_OK && f == 0.25f);
    KT_CHECK(kipp_gguf_get_f32(g, "t.f64big", &f, err, sizeof err) == KIPP_ERR_FORMAT &&
             strstr(err, "range"), "%s", err);
    KT_CHECK(kipp_gguf_get_f32(g, "t.u32", &f, err, sizeof err) == KIPP_ERR_FORMAT);
    /* bools */
    KT_CHECK(kipp_gguf_get_bool(g, "t.bool", &bo, err, sizeof err) == KIPP_OK && bo == 1);
    bo = 0;
    KT_CHECK(kipp_gguf_get_bool(g, "t.bool2", &bo, err, sizeof err) == KIPP_OK && bo == 1);
    KT_CHECK(kipp_gguf_get_bool(g, "t.u8", &bo, err, sizeof err) == KIPP_ERR_FORMAT);
    KT_CHECK(kipp_gguf_get_str(g, "t.u8", &s, err, sizeof err) == KIPP_ERR_FORMAT &&
             strstr(err, "UINT8") && strstr(err, "STRING"), "%s", err);
    /* arrays */
    KT_CHECK(kipp_gguf_get_arr(g, "t.arr_i32", &et, &n, &data, err, sizeof err) == KIPP_OK &&
             et == KIPP_GGUF_INT32 && n == 3);
    int32_t v[3] = {0};
    if (data) memcpy(v, data, sizeof v);
    KT_CHECK(v[0] == 1 && v[1] == -2 && v[2] == 3);
    KT_CHECK(kipp_gguf_get_arr(g, "t.arr_str", &et, &n, &data, err, sizeof err) == KIPP_OK &&
             et == KIPP_GGUF_STRING && n == 3);
    KT_CHECK(kipp_gguf_get_arr(g, "t.u8", &et, &n, &data, err, sizeof err) == KIPP_ERR_FORMAT);
    s = kipp_gguf_arr_str(g, "t.arr_str", 0);
    KT_CHECK(s.len == 1 && s.ptr[0] == 'a');
    s = kipp_gguf_arr_str(g, "t.arr_str", 1);
    KT_CHECK(s.len == 0 && s.ptr != NULL);
    s = kipp_gguf_arr_str(g, "t.arr_str", 2);
    KT_CHECK(s.len == 5 && memcmp(s.ptr, "hello", 5) == 0);
    KT_CHECK(kipp_gguf_arr_str(g, "t.arr_str", 3).ptr == NULL);
    KT_CHECK(kipp_gguf_arr_str(g, "t.arr_none", 0).ptr == NULL);
    KT_CHECK(kipp_gguf_arr_str(g, "t.arr_i32", 0).ptr == NULL);
    KT_CHECK(kipp_gguf_arr_str(g, "general.architecture", 0).ptr == NULL);
    KT_CHECK(kipp_gguf_arr_str(g, "missing", 0).ptr == NULL);
    /* tensors */
    uint64_t prev_end = 0;
    for (int i = 0; i < N_TENSORS; i++) {
        const kipp_gguf_tensor *t = kipp_gguf_tensor_at(g, (uint64_t)i);
        KT_CHECK(t && kipp_gguf_find_tensor(g, k_names[i]) == t, "%s", k_names[i]);
        if (!t) continue;
        const uint64_t n_el = (uint64_t)(k_ne[i][0] * k_ne[i][1]);
        KT_CHECK(strcmp(t->name, k_names[i]) == 0 && t->n_dims == k_ndims[i]);
        KT_CHECK(t->ne[0] == k_ne[i][0] && t->ne[1] == k_ne[i][1] && t->ne[2] == 1 && t->ne[3] == 1);
        KT_CHECK(t->type == k_types[i] && t->n_elems == n_el);
        KT_CHECK(t->n_bytes == kipp_type_row_bytes(t->type, n_el));
        KT_CHECK(t->offset % kipp_gguf_alignment(g) == 0 && t->offset >= prev_end);
        KT_CHECK((const uint8_t *)t->data == base + kipp_gguf_data_offset(g) + t->offset);
        prev_end = t->offset + t->n_bytes;
    }
    KT_CHECK(kipp_gguf_tensor_at(g, N_TENSORS) == NULL);
    KT_CHECK(kipp_gguf_find_tensor(g, "blk.0") == NULL && kipp_gguf_find_tensor(g, "") == NULL);
    const kipp_gguf_tensor *te = kipp_gguf_find_tensor(g, "token_embd.weight");
    const kipp_gguf_tensor *tn = kipp_gguf_find_tensor(g, "output_norm.weight");
    float y[16];
    if (te) {
        kipp_dequantize_row(te->type, te->data, y, 16);
        int ok = 1;
        for (int j = 0; j < 16; j++) ok &= y[j] == (float)j * 0.5f - 3.0f;
        KT_CHECK(ok, "token_embd values");
    }
    if (tn) {
        kipp_dequantize_row(tn->type, tn->data, y, 8);
        int ok = 1;
        for (int j = 0; j < 8; j++) ok &= y[j] == (float)j * 0.25f;
        KT_CHECK(ok, "output_norm values");
    }
}

static void test_valid_buffers(void) {
    static const uint32_t aligns[] = {0, 32, 64, 8, 1, 4096};
    for (size_t k = 0; k < sizeof aligns / sizeof aligns[0]; k++) {
        wbuf b;
        kipp_gguf *g = NULL;
        char err[KIPP_ERR_LEN] = "";
        build_valid(&b, aligns[k]);
        const kipp_status st = kipp_gguf_open_buffer(b.p, b.n, &g, err, sizeof err);
        KT_CHECK(st == KIPP_OK && g, "alignment %u: %s", aligns[k], err);
        if (g) check_valid(g, b.p, aligns[k]);
        kipp_gguf_free(g);
        free(b.p);
    }
}

static void test_api_edges(void) {
    char err[KIPP_ERR_LEN];
    kipp_gguf *g = (kipp_gguf *)&err; /* must be reset to NULL on failure */
    uint32_t u;
    kipp_gguf_free(NULL);
    KT_CHECK(kipp_gguf_open_buffer(NULL, 10, &g, err, sizeof err) == KIPP_ERR_INVALID_ARG && !g);
    KT_CHECK(kipp_gguf_open_buffer("GGUF", 4, NULL, err, sizeof err) == KIPP_ERR_INVALID_ARG);
    KT_CHECK(kipp_gguf_open(NULL, &g, err, sizeof err) == KIPP_ERR_INVALID_ARG);
    KT_CHECK(kipp_gguf_open_buffer(NULL, 0, &g, NULL, 0) == KIPP_ERR_FORMAT); /* NULL err ok */
    KT_CHECK(kipp_gguf_find_key(NULL, "x") < 0 && kipp_gguf_n_kv(NULL) == 0);
    KT_CHECK(kipp_gguf_get_u32(NULL, "x", &u, err, sizeof err) == KIPP_ERR_INVALID_ARG);
    KT_CHECK(kipp_gguf_tensor_at(NULL, 0) == NULL && kipp_gguf_find_tensor(NULL, "x") == NULL);
    KT_CHECK(kipp_gguf_arr_str(NULL, "x", 0).ptr == NULL);
    /* the smallest valid file: header only, nothing else */
    wbuf b = {0};
    header(&b, 3, 0, 0);
    expect(&b, b.n, KIPP_OK, "header only", NULL);
    KT_CHECK(kipp_gguf_open_buffer(b.p, b.n, &g, err, sizeof err) == KIPP_OK);
    KT_CHECK(kipp_gguf_data_offset(g) == 24 && kipp_gguf_n_kv(g) == 0);
    kipp_gguf_free(g);
    /* no tensors and no padding after the kvs */
    kv_u32(&b, "a", 1);
    patch_u64(&b, 16, 1);
    expect(&b, b.n, KIPP_OK, "kvs without padding", NULL);
    /* trailing garbage after the last tensor is allowed */
    wbuf v;
    build_valid(&v, 0);
    put(&v, "junk", 4);
    expect(&v, v.n, KIPP_OK, "trailing bytes", NULL);
    free(v.p);
    free(b.p);
}

/* ---- files on disk ------------------------------------------------------------------------ */

static int write_tmp(char *path, const void *p, size_t n) {
    strcpy(path, "/tmp/kipp_gguf_test_XXXXXX");
    const int fd = mkstemp(path);
    if (fd < 0) return 0;
    const int ok = write(fd, p, n) == (ssize_t)n;
    close(fd);
    return ok;
}

static void test_files(void) {
    char path[64], err[KIPP_ERR_LEN] = "";
    kipp_gguf *g = NULL;
    wbuf b;
    build_valid(&b, 64);
    KT_CHECK(write_tmp(path, b.p, b.n));
    KT_CHECK(kipp_gguf_open(path, &g, err, sizeof err) == KIPP_OK && g, "%s", err);
    if (g) {
        const kipp_gguf_tensor *t = kipp_gguf_tensor_at(g, 0);
        check_valid(g, (const uint8_t *)t->data - kipp_gguf_data_offset(g) - t->offset, 64);
        KT_CHECK(memcmp(t->data, b.p + kipp_gguf_data_offset(g), (size_t)t->n_bytes) == 0);
        kipp_gguf_free(g);
    }
    unlink(path);

    b.p[0] = 'X'; /* the same file with a broken magic: the message names the path */
    KT_CHECK(write_tmp(path, b.p, b.n));
    KT_CHECK(kipp_gguf_open(path, &g, err, sizeof err) == KIPP_ERR_FORMAT && !g);
    KT_CHECK(strstr(err, path) && strstr(err, "magic"), "%s", err);
    unlink(path);

    KT_CHECK(write_tmp(path, b.p, 0));
    KT_CHECK(kipp_gguf_open(path, &g, err, sizeof err) == KIPP_ERR_FORMAT && strstr(err, "empty"),
             "%s", err);
    unlink(path);
    KT_CHECK(kipp_gguf_open("/nonexistent/kipp.gguf", &g, err, sizeof err) == KIPP_ERR_IO &&
             strstr(err, "/nonexistent/kipp.gguf"), "%s", err);
    KT_CHECK(kipp_gguf_open("/tmp", &g, err, sizeof err) == KIPP_ERR_IO && !g, "%s", err);
    free(b.p);
}

/* ---- malformed files ---------------------------------------------------------------------- */

/* Header + one tensor + 0 kvs; data_bytes of zeros after 32-byte padding. */
static void one_tensor(wbuf *b, const char *name, uint32_t n_dims, const int64_t *ne,
                       uint32_t type, uint64_t offset, size_t data_bytes) {
    memset(b, 0, sizeof *b);
    header(b, 3, 1, 0);
    tinfo(b, name, n_dims, ne, type, offset);
    pad_to(b, 32);
    for (size_t i = 0; i < data_bytes; i++) put_u8(b, 0);
}

/* Header with one kv whose key is given and whose type/value the caller appends. */
static void one_kv(wbuf *b, const char *key, uint32_t type) {
    memset(b, 0, sizeof *b);
    header(b, 3, 0, 1);
    put_str(b, key);
    put_u32(b, type);
}

static void test_header_errors(void) {
    wbuf b = {0};
    static const struct {
        uint32_t version;
        kipp_status st;
        const char *needle;
    } versions[] = {{0, KIPP_ERR_FORMAT, "version 0"},         {1, KIPP_ERR_UNSUPPORTED, "version 1"},
                    {2, KIPP_ERR_UNSUPPORTED, "version 2"},    {4, KIPP_ERR_UNSUPPORTED, "version 4"},
                    {0x03000000u, KIPP_ERR_UNSUPPORTED, "big-endian"}};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        b.n = 0;
        header(&b, versions[i].version, 0, 0);
        expect(&b, b.n, versions[i].st, "version", versions[i].needle);
    }
    b.n = 0;
    header(&b, 3, 0, 0);
    memcpy(b.p, "GGUX", 4);
    expect(&b, b.n, KIPP_ERR_FORMAT, "bad magic", "magic");
    expect(&b, 0, KIPP_ERR_FORMAT, "empty", "too small");
    expect(&b, 3, KIPP_ERR_FORMAT, "3 bytes", "too small");
    b.n = 0;
    header(&b, 3, UINT64_MAX, 0);
    expect(&b, b.n, KIPP_ERR_FORMAT, "huge tensor count", "tensor count");
    b.n = 0;
    header(&b, 3, 0, 1ull << 62);
    expect(&b, b.n, KIPP_ERR_FORMAT, "huge kv count", "kv count");
    b.n = 0;
    header(&b, 3, 0, 3); /* count fits the cap but not the bytes that follow */
    kv_u32(&b, "a", 1);
    expect(&b, b.n, KIPP_ERR_FORMAT, "kv count beyond file", "kv count");
    free(b.p);
}

static void test_kv_errors(void) {
    wbuf b = {0};
    header(&b, 3, 0, 1);
    put_u64(&b, UINT64_MAX), put(&b, "abcdefgh", 8);
    expect(&b, b.n, KIPP_ERR_FORMAT, "huge key length", "cap");
    b.n = 0;
    header(&b, 3, 0, 1);
    put_u64(&b, (1ull << 30) + 1), put(&b, "abcdefgh", 8);
    expect(&b, b.n, KIPP_ERR_FORMAT, "key length 2^30+1", "cap");
    b.n = 0;
    header(&b, 3, 0, 1);
    put_u64(&b, 100), put(&b, "abcdefgh", 8);
    expect(&b, b.n, KIPP_ERR_FORMAT, "key past end", "ends at byte");
    free(b.p);

    one_kv(&b, "", KIPP_GGUF_UINT8), put_u8(&b, 1);
    expect(&b, b.n, KIPP_ERR_FORMAT, "empty key", "empty");
    free(b.p);
    one_kv(&b, "k", KIPP_GGUF_STRING), put_u64(&b, UINT64_MAX), put_u64(&b, 0);
    expect(&b, b.n, KIPP_ERR_FORMAT, "huge string value", "cap");
    free(b.p);
    one_kv(&b, "k", 13), put_u64(&b, 0);
    expect(&b, b.n, KIPP_ERR_FORMAT, "value type 13", "not a GGUF type");
    free(b.p);
    one_kv(&b, "k", UINT32_MAX), put_u64(&b, 0);
    expect(&b, b.n, KIPP_ERR_FORMAT, "value type -1", "not a GGUF type");
    free(b.p);
    one_kv(&b, "k", KIPP_GGUF_ARRAY), put_u32(&b, KIPP_GGUF_ARRAY), put_u64(&b, 1);
    put_u32(&b, KIPP_GGUF_UINT8), put_u64(&b, 1), put_u8(&b, 0);
    expect(&b, b.n, KIPP_ERR_FORMAT, "nested array", "nested");
    free(b.p);
    one_kv(&b, "k", KIPP_GGUF_ARRAY), put_u32(&b, 99), put_u64(&b, 0);
    expect(&b, b.n, KIPP_ERR_FORMAT, "array element type 99", "not a GGUF type");
    free(b.p);
    one_kv(&b, "k", KIPP_GGUF_ARRAY), put_u32(&b, KIPP_GGUF_UINT8), put_u64(&b, (1ull << 30) + 1);
    expect(&b, b.n, KIPP_ERR_FORMAT, "array count 2^30+1", "cap");
    free(b.p);
    one_kv(&b, "k", KIPP_GGUF_ARRAY), put_u32(&b, KIPP_GGUF_STRING), put_u64(&b, 1000);
    put_str(&b, "x");
    expect(&b, b.n, KIPP_ERR_FORMAT, "string array count beyond file", "cannot fit");
    free(b.p);
    one_kv(&b, "k", KIPP_GGUF_ARRAY), put_u32(&b, KIPP_GGUF_UINT64), put_u64(&b, 1u << 20);
    put_u64(&b, 0);
    expect(&b, b.n, KIPP_ERR_FORMAT, "u64 array beyond file", "array data");
    free(b.p);
    one_kv(&b, "k", KIPP_GGUF_ARRAY), put_u32(&b, KIPP_GGUF_STRING), put_u64(&b, 2);
    put_str(&b, "x"), put_u64(&b, 1ull << 40);
    expect(&b, b.n, KIPP_ERR_FORMAT, "string element past end", "array string element");
    free(b.p);

    memset(&b, 0, sizeof b);
    header(&b, 3, 0, 2);
    kv_u32(&b, "dup", 1), kv_u32(&b, "dup", 2);
    expect(&b, b.n, KIPP_ERR_FORMAT, "duplicate key", "duplicate key");
    free(b.p);

    static const uint32_t bad_aligns[] = {0, 48, 3, 0x80000001u};
    for (size_t i = 0; i < sizeof bad_aligns / sizeof bad_aligns[0]; i++) {
        one_kv(&b, "general.alignment", KIPP_GGUF_UINT32), put_u32(&b, bad_aligns[i]);
        expect(&b, b.n, KIPP_ERR_FORMAT, "bad alignment", "power of two");
        free(b.p);
    }
    one_kv(&b, "general.alignment", KIPP_GGUF_UINT64), put_u64(&b, 32);
    expect(&b, b.n, KIPP_ERR_FORMAT, "alignment as UINT64", "UINT32");
    free(b.p);
    one_kv(&b, "general.alignment", KIPP_GGUF_INT32), put_u32(&b, 32);
    expect(&b, b.n, KIPP_ERR_FORMAT, "alignment as INT32", "UINT32");
    free(b.p);
}

static void test_tensor_errors(void) {
    wbuf b;
    const int64_t ne16[1] = {16}, ne33[1] = {33}, ne256[1] = {256};
    one_tensor(&b, "", 1, ne16, KIPP_TYPE_F32, 0, 64);
    expect(&b, b.n, KIPP_ERR_FORMAT, "empty name", "name is empty");
    free(b.p);
    char name[80];
    memset(name, 'n', sizeof name);
    name[64] = '\0';
    one_tensor(&b, name, 1, ne16, KIPP_TYPE_F32, 0, 64);
    expect(&b, b.n, KIPP_ERR_FORMAT, "name of 64 bytes", "under 64");
    free(b.p);
    name[63] = '\0';
    one_tensor(&b, name, 1, ne16, KIPP_TYPE_F32, 0, 64);
    expect(&b, b.n, KIPP_OK, "name of 63 bytes", NULL);
    free(b.p);
    memset(&b, 0, sizeof b);
    header(&b, 3, 1, 0);
    put_strn(&b, "a\0b", 3), put_u32(&b, 1), put_u64(&b, 16), put_u32(&b, 0), put_u64(&b, 0);
    pad_to(&b, 32);
    for (int i = 0; i < 64; i++) put_u8(&b, 0);
    expect(&b, b.n, KIPP_ERR_FORMAT, "NUL in name", "NUL");
    free(b.p);

    static const uint32_t bad_ndims[] = {0, 5, UINT32_MAX};
    for (size_t i = 0; i < 3; i++) {
        const int64_t ne[5] = {16, 1, 1, 1, 1};
        one_tensor(&b, "t", bad_ndims[i] > 5 ? 5 : bad_ndims[i], ne, KIPP_TYPE_F32, 0, 64);
        memcpy(b.p + 24 + 9, &bad_ndims[i], 4); /* n_dims follows the 9-byte name "t" */
        expect(&b, b.n, KIPP_ERR_FORMAT, "bad n_dims", "n_dims");
        free(b.p);
    }
    static const int64_t bad_dims[] = {0, -1, INT64_MIN, 1ll << 62, INT64_MAX};
    for (size_t i = 0; i < sizeof bad_dims / sizeof bad_dims[0]; i++) {
        const int64_t ne[2] = {16, bad_dims[i]};
        one_tensor(&b, "t", 2, ne, KIPP_TYPE_F32, 0, 64);
        expect(&b, b.n, KIPP_ERR_FORMAT, "bad dimension", "ne[1]");
        free(b.p);
    }
    const int64_t big4[4] = {1ll << 31, 1ll << 31, 1ll << 31, 1ll << 31};
    one_tensor(&b, "t", 4, big4, KIPP_TYPE_F32, 0, 64);
    expect(&b, b.n, KIPP_ERR_FORMAT, "dims product overflow", "overflows");
    free(b.p);
    const int64_t big2[2] = {1ll << 60, 7}; /* 7*2^60 elements fit, 28*2^60 bytes do not */
    one_tensor(&b, "t", 2, big2, KIPP_TYPE_F32, 0, 64);
    expect(&b, b.n, KIPP_ERR_FORMAT, "byte size overflow", "overflows");
    free(b.p);
    const int64_t huge[2] = {1ll << 40, 1ll << 20};
    one_tensor(&b, "t", 2, huge, KIPP_TYPE_F32, 0, 64);
    expect(&b, b.n, KIPP_ERR_FORMAT, "huge tensor", "past the end");
    free(b.p);

    one_tensor(&b, "blk.0.ffn_up.weight", 1, ne256, 16 /* IQ2_XXS */, 0, 66);
    expect(&b, b.n, KIPP_ERR_UNSUPPORTED, "IQ2_XXS tensor", "IQ2_XXS");
    expect(&b, b.n, KIPP_ERR_UNSUPPORTED, "IQ2_XXS tensor names it", "blk.0.ffn_up.weight");
    expect(&b, b.n, KIPP_ERR_UNSUPPORTED, "IQ2_XXS lists the supported", "Q5_K, Q6_K, IQ4_NL");
    free(b.p);
    { /* the issue-17 types: exactly their block bytes open, one byte fewer is past the end,
       * a row that is not a block multiple is refused */
        static const struct { uint32_t type, blk, bytes; } nt[] = {
            {KIPP_TYPE_Q4_1, 32, 20},  {KIPP_TYPE_Q5_0, 32, 22},    {KIPP_TYPE_Q5_1, 32, 24},
            {KIPP_TYPE_Q2_K, 256, 84}, {KIPP_TYPE_Q3_K, 256, 110},  {KIPP_TYPE_Q5_K, 256, 176},
            {KIPP_TYPE_IQ4_NL, 32, 18}, {KIPP_TYPE_IQ4_XS, 256, 136}};
        for (size_t i = 0; i < sizeof nt / sizeof nt[0]; i++) {
            const int64_t ne2[2] = {2 * (int64_t)nt[i].blk, 3}, bad[1] = {(int64_t)nt[i].blk / 2};
            one_tensor(&b, "t", 2, ne2, nt[i].type, 0, 6 * nt[i].bytes);
            expect(&b, b.n, KIPP_OK, kipp_type_name(nt[i].type), NULL);
            free(b.p);
            one_tensor(&b, "t", 2, ne2, nt[i].type, 0, 6 * nt[i].bytes - 1);
            expect(&b, b.n, KIPP_ERR_FORMAT, kipp_type_name(nt[i].type), "past the end");
            free(b.p);
            one_tensor(&b, "t", 1, bad, nt[i].type, 0, nt[i].bytes);
            expect(&b, b.n, KIPP_ERR_FORMAT, kipp_type_name(nt[i].type), "multiple");
            free(b.p);
        }
    }
    one_tensor(&b, "t", 1, ne256, 99, 0, 256);
    expect(&b, b.n, KIPP_ERR_UNSUPPORTED, "type 99", "type 99");
    free(b.p);
    one_tensor(&b, "t", 1, ne256, UINT32_MAX, 0, 256);
    expect(&b, b.n, KIPP_ERR_UNSUPPORTED, "type -1", "not supported");
    free(b.p);
    one_tensor(&b, "t", 1, ne33, KIPP_TYPE_Q8_0, 0, 64);
    expect(&b, b.n, KIPP_ERR_FORMAT, "ne0 not a block multiple", "multiple");
    free(b.p);
    one_tensor(&b, "t", 1, ne16, KIPP_TYPE_F32, 4, 128);
    expect(&b, b.n, KIPP_ERR_FORMAT, "misaligned offset", "alignment");
    free(b.p);
    one_tensor(&b, "t", 1, ne16, KIPP_TYPE_F32, 64, 64);
    expect(&b, b.n, KIPP_ERR_FORMAT, "data past end", "past the end");
    free(b.p);
    one_tensor(&b, "t", 1, ne16, KIPP_TYPE_F32, 0, 63);
    expect(&b, b.n, KIPP_ERR_FORMAT, "data one byte short", "past the end");
    free(b.p);
    one_tensor(&b, "t", 1, ne16, KIPP_TYPE_F32, UINT64_MAX - 31, 64);
    expect(&b, b.n, KIPP_ERR_FORMAT, "offset overflow", "overflows");
    free(b.p);
    one_tensor(&b, "t", 1, ne16, KIPP_TYPE_F32, 0, 0); /* infos end where the file ends */
    expect(&b, b.n, KIPP_ERR_FORMAT, "no data section", NULL);
    free(b.p);

    /* two tensors: duplicates and overlaps */
    static const struct {
        const char *n0, *n1;
        uint64_t o0, o1;
        const char *needle;
    } pairs[] = {{"a", "a", 0, 64, "duplicate tensor"},
                 {"a", "b", 0, 32, "overlaps"},
                 {"a", "b", 32, 0, "overlaps"},
                 {"a", "b", 0, 0, "overlaps"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        memset(&b, 0, sizeof b);
        header(&b, 3, 2, 0);
        tinfo(&b, pairs[i].n0, 1, ne16, KIPP_TYPE_F32, pairs[i].o0);
        tinfo(&b, pairs[i].n1, 1, ne16, KIPP_TYPE_F32, pairs[i].o1);
        pad_to(&b, 32);
        for (int j = 0; j < 128; j++) put_u8(&b, 0);
        expect(&b, b.n, KIPP_ERR_FORMAT, pairs[i].needle, pairs[i].needle);
        free(b.p);
    }

    /* an alignment so large that the data section starts past the end of the file */
    memset(&b, 0, sizeof b);
    header(&b, 3, 1, 1);
    kv_u32(&b, "general.alignment", 1u << 20);
    tinfo(&b, "t", 1, ne16, KIPP_TYPE_F32, 0);
    for (int j = 0; j < 64; j++) put_u8(&b, 0);
    expect(&b, b.n, KIPP_ERR_FORMAT, "data section past end", "data section");
    free(b.p);
}

/* Every strict prefix of a valid file is invalid; every single-byte mutation opens cleanly
 * or fails with a message, and whatever opens can be walked without going out of bounds. */
static void test_truncation_and_mutation(void) {
    wbuf b;
    char err[KIPP_ERR_LEN];
    build_valid(&b, 0);
    int n_bad = 0;
    for (size_t n = 0; n < b.n; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        kipp_gguf *g = NULL;
        if (!copy) abort();
        memcpy(copy, b.p, n);
        err[0] = '\0';
        const kipp_status st = kipp_gguf_open_buffer(copy, n, &g, err, sizeof err);
        if ((st != KIPP_ERR_FORMAT || g || strlen(err) < 12) && n_bad++ < 5)
            KT_CHECK(0, "prefix of %zu bytes: %s (%s)", n, kipp_status_str(st), err);
        kipp_gguf_free(g);
        free(copy);
    }
    KT_CHECK(n_bad == 0, "%d of %zu truncations misbehaved", n_bad, b.n);

    n_bad = 0;
    int n_ok = 0;
    uint8_t *copy = malloc(b.n);
    if (!copy) abort();
    for (size_t i = 0; i < b.n; i++) {
        const uint8_t vals[5] = {0x00, 0xff, 0x80, (uint8_t)(b.p[i] ^ 1), (uint8_t)(b.p[i] + 64)};
        for (int k = 0; k < 5; k++) {
            kipp_gguf *g = NULL;
            memcpy(copy, b.p, b.n);
            copy[i] = vals[k];
            err[0] = '\0';
            const kipp_status st = kipp_gguf_open_buffer(copy, b.n, &g, err, sizeof err);
            if (st == KIPP_OK) {
                n_ok++;
                walk(g);
            } else if ((g || strncmp(err, "gguf: ", 6) != 0) && n_bad++ < 5) {
                KT_CHECK(0, "mutation at byte %zu: %s (%s)", i, kipp_status_str(st), err);
            }
            kipp_gguf_free(g);
        }
    }
    KT_CHECK(n_bad == 0, "%d mutations misbehaved", n_bad);
    KT_CHECK(n_ok > 0); /* the tensor data bytes, at least, may change freely */
    free(copy);
    free(b.p);
}

void kt_suite_gguf(void) {
    test_valid_buffers();
    test_api_edges();
    test_files();
    test_header_errors();
    test_kv_errors();
    test_tensor_errors();
    test_truncation_and_mutation();
}
