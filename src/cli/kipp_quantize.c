/* kipp_quantize.c — the `kipp-quantize` command: an f32/f16/bf16 GGUF to any of the 16 file
 * types of tools/quantize.py (q8_0 ... q2_k, QTYPES below), its C port (the Python tool stays
 * as the reference it is tested against: both write the same bytes, see
 * tests/cli/test_quantize.sh).
 *
 * Same rules as the Python tool: every metadata record is copied verbatim, except
 * general.file_type (set to the llama ftype, appended when absent) and general.alignment
 * (written first, only when not 32); tensor types follow llama.cpp's llama_tensor_get_type
 * for these ftypes (1-D tensors and non-weights copied, output.weight or a tied
 * token_embd.weight Q6_K, the per-layer attn_v/ffn_down/attn_output rules with gqa from the
 * head counts, a row that does not fit the block falls back as quantize.py's FALLBACK, then
 * to the input type).
 * The input is read through the hardened GGUF reader (src/gguf/gguf.c), memory-mapped;
 * tensors are converted in chunks of rows on a thread pool and streamed to a temporary file
 * beside OUT that is fsync'd and renamed over OUT only when complete, so a failure (bad
 * input, disk full, Ctrl-C) never touches OUT or IN.
 *
 * Not here: importance matrices, other ftypes, requantizing a quantized input (refused:
 * quantize from the f32/f16/bf16 file), per-tensor overrides. */
#define _XOPEN_SOURCE 700 /* realpath, mkstemp, fchmod */
#include "core/buf.h"
#include "core/outfile.h"
#include "core/quantize.h"
#include "core/threadpool.h"
#include "core/types.h"
#include "gguf/gguf.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROG "kipp-quantize"
#define CHUNK_VALUES (1u << 22) /* values per parallel step (whole rows), as quantize.py */

typedef struct {
    const char *name;
    uint32_t base;  /* ggml type of the 2-D weights */
    uint32_t ftype; /* llama ftype, general.file_type */
} qtype_def;

/* tools/quantize.py's FTYPES, in its order */
static const qtype_def QTYPES[] = {
    {"q8_0", KIPP_TYPE_Q8_0, 7},     {"q6_k", KIPP_TYPE_Q6_K, 18},
    {"q5_k_m", KIPP_TYPE_Q5_K, 17},  {"q5_k_s", KIPP_TYPE_Q5_K, 16},
    {"q5_1", KIPP_TYPE_Q5_1, 9},     {"q5_0", KIPP_TYPE_Q5_0, 8},
    {"q4_k_m", KIPP_TYPE_Q4_K, 15},  {"q4_k_s", KIPP_TYPE_Q4_K, 14},
    {"q4_1", KIPP_TYPE_Q4_1, 3},     {"q4_0", KIPP_TYPE_Q4_0, 2},
    {"iq4_nl", KIPP_TYPE_IQ4_NL, 25}, {"iq4_xs", KIPP_TYPE_IQ4_XS, 30},
    {"q3_k_l", KIPP_TYPE_Q3_K, 13},  {"q3_k_m", KIPP_TYPE_Q3_K, 12},
    {"q3_k_s", KIPP_TYPE_Q3_K, 11},  {"q2_k", KIPP_TYPE_Q2_K, 10},
};
#define N_QTYPES (sizeof QTYPES / sizeof QTYPES[0])

static void usage(FILE *f) {
    fprintf(f,
            "usage: " PROG " [options] IN.gguf OUT.gguf TYPE\n"
            "\n"
            "Quantizes an f32/f16/bf16 GGUF. TYPE is one of q8_0, q6_k, q5_k_m, q5_k_s,\n"
            "q5_1, q5_0, q4_k_m, q4_k_s, q4_1, q4_0, iq4_nl, iq4_xs, q3_k_l, q3_k_m, q3_k_s,\n"
            "q2_k; tensor types follow llama-quantize's rules for that type (no importance\n"
            "matrix), metadata is copied with general.file_type set.\n"
            "OUT is written to a temporary file and renamed into place only when complete, so it\n"
            "is never left half-written; OUT must not be IN. The output is byte-identical with\n"
            "tools/quantize.py's, the reference this tool is tested against.\n"
            "\n"
            "  -t, --threads N     worker threads (default: the number of cores)\n"
            "      --no-progress   no progress on stderr (default: a bar on a terminal, one line\n"
            "                      per tensor otherwise)\n"
            "  -h, --help          this help\n");
}

/* ---- the temporary output file: removed on failure and on SIGINT/SIGTERM/SIGHUP --------- */

static char g_tmp[PATH_MAX + 32];
static volatile sig_atomic_t g_tmp_live;

static void on_signal(int sig) {
    if (g_tmp_live) unlink(g_tmp);
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ---- the header, built in memory --------------------------------------------------------- */

/* The header is a kipp_buf: its failure is sticky, so build_header checks oom once. */
static void put(kipp_buf *b, const void *data, size_t n) { (void)kipp_buf_put(b, data, n); }
static void put_u32(kipp_buf *b, uint32_t v) {
    uint8_t t[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, t, 4);
}
static void put_u64(kipp_buf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}
static void put_str(kipp_buf *b, const char *s, uint64_t n) {
    put_u64(b, n);
    put(b, s, (size_t)n);
}

static uint32_t scalar_size(kipp_gguf_vtype t) {
    switch (t) {
    case KIPP_GGUF_UINT8: case KIPP_GGUF_INT8: case KIPP_GGUF_BOOL: return 1;
    case KIPP_GGUF_UINT16: case KIPP_GGUF_INT16: return 2;
    case KIPP_GGUF_UINT32: case KIPP_GGUF_INT32: case KIPP_GGUF_FLOAT32: return 4;
    case KIPP_GGUF_UINT64: case KIPP_GGUF_INT64: case KIPP_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* The bytes of KV record idx after its type id, as they are in the file (validated by the
 * reader, so every pointer below is in bounds). */
static int kv_payload(const kipp_gguf *g, int64_t idx, const char *key, const uint8_t **p,
                      uint64_t *n) {
    const kipp_gguf_str k = kipp_gguf_key_name(g, idx);
    const uint8_t *start = (const uint8_t *)k.ptr + k.len + 4;
    const kipp_gguf_vtype t = kipp_gguf_key_type(g, idx);
    const uint8_t *end;
    if (t == KIPP_GGUF_STRING) {
        kipp_gguf_str s;
        if (kipp_gguf_get_str(g, key, &s, NULL, 0) != KIPP_OK) return -1;
        end = (const uint8_t *)s.ptr + s.len;
    } else if (t == KIPP_GGUF_ARRAY) {
        kipp_gguf_vtype et;
        uint64_t count;
        const void *data;
        if (kipp_gguf_get_arr(g, key, &et, &count, &data, NULL, 0) != KIPP_OK) return -1;
        end = data;
        if (et == KIPP_GGUF_STRING) {
            if (count) {
                const kipp_gguf_str last = kipp_gguf_arr_str(g, key, count - 1);
                end = (const uint8_t *)last.ptr + last.len;
            }
        } else {
            end += count * scalar_size(et);
        }
    } else {
        end = start + scalar_size(t);
    }
    *p = start;
    *n = (uint64_t)(end - start);
    return 0;
}

/* ---- the type plan (tools/quantize.py target_type) --------------------------------------- */

static int use_more_bits(uint64_t i, uint64_t n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* "blk.<digits>.<rest>": the layer index and a pointer to rest, or NULL. */
static const char *blk_layer(const char *name, uint64_t *layer) {
    if (strncmp(name, "blk.", 4) != 0) return NULL;
    const char *p = name + 4;
    uint64_t v = 0;
    if (*p < '0' || *p > '9') return NULL;
    while (*p >= '0' && *p <= '9') {
        v = v > (UINT64_MAX - 9) / 10 ? UINT64_MAX / 2 : v * 10 + (uint64_t)(*p - '0');
        p++;
    }
    if (*p != '.') return NULL;
    *layer = v;
    return p + 1;
}

static int ends_with(const char *s, const char *suf) {
    const size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

/* llama_tensor_get_type's per-layer rules (quantize.py _layer_type) for blk.i.<kind>.weight;
 * 0: the base type. kind: 0 attn_v, 1 ffn_down, 2 attn_output. */
static uint32_t layer_type(const char *q, int kind, uint64_t i, uint64_t n, uint64_t gqa) {
    const int more = use_more_bits(i, n);
    if (kind == 0) {
        if (!strcmp(q, "q2_k")) return gqa >= 4 ? KIPP_TYPE_Q4_K : KIPP_TYPE_Q3_K;
        if (!strcmp(q, "q3_k_m")) return i < 2 ? KIPP_TYPE_Q5_K : KIPP_TYPE_Q4_K;
        if (!strcmp(q, "q3_k_l")) return KIPP_TYPE_Q5_K;
        if (!strcmp(q, "iq4_nl") || !strcmp(q, "iq4_xs")) return gqa >= 4 ? KIPP_TYPE_Q5_K : 0;
        if (!strcmp(q, "q4_k_m") || !strcmp(q, "q5_k_m")) return more ? KIPP_TYPE_Q6_K : 0;
        if (!strcmp(q, "q4_k_s")) return i < 4 ? KIPP_TYPE_Q5_K : 0;
    } else if (kind == 1) {
        if (!strcmp(q, "q2_k")) return KIPP_TYPE_Q3_K;
        if (!strcmp(q, "q3_k_m")) return i < n / 16 ? KIPP_TYPE_Q5_K : KIPP_TYPE_Q4_K;
        if (!strcmp(q, "q3_k_l")) return KIPP_TYPE_Q5_K;
        if (!strcmp(q, "q4_k_m") || !strcmp(q, "q5_k_m")) return more ? KIPP_TYPE_Q6_K : 0;
        if (!strcmp(q, "iq4_nl") || !strcmp(q, "iq4_xs") || !strcmp(q, "q4_k_s"))
            return i < n / 8 ? KIPP_TYPE_Q5_K : 0;
    } else {
        if (!strcmp(q, "q2_k")) return KIPP_TYPE_Q3_K;
        if (!strcmp(q, "q3_k_m")) return KIPP_TYPE_Q4_K;
        if (!strcmp(q, "q3_k_l")) return KIPP_TYPE_Q5_K;
    }
    return 0;
}

/* quantize.py's FALLBACK: the type used when a row does not fit the chosen type's block. */
static uint32_t fallback(uint32_t t) {
    switch (t) {
    case KIPP_TYPE_Q2_K: case KIPP_TYPE_Q3_K: case KIPP_TYPE_IQ4_XS: return KIPP_TYPE_IQ4_NL;
    case KIPP_TYPE_Q5_K: return KIPP_TYPE_Q5_1;
    default: return KIPP_TYPE_Q8_0; /* Q4_K, Q6_K and the rest */
    }
}

/* llama_tensor_get_type's rules for an 8-expert model (Mixtral's), after the others: attn_v and
 * attn_k Q8_0, attn_output Q5_K in the low-bit mixes. 0: no rule. kind as layer_type, 3 attn_k. */
static uint32_t eight_expert_type(const char *q, int kind) {
    if (kind == 0 || kind == 3) return KIPP_TYPE_Q8_0;
    if (kind == 2 && (!strcmp(q, "q2_k") || !strcmp(q, "q3_k_s") || !strcmp(q, "q3_k_m") || !strcmp(q, "iq4_nl") ||
                      !strcmp(q, "q4_k_s") || !strcmp(q, "q4_k_m") || !strcmp(q, "iq4_xs")))
        return KIPP_TYPE_Q5_K;
    return 0;
}

/* A layer tensor's kind for the rules: 0 attn_v, 1 ffn_down (and a MoE layer's stacked
 * ffn_down_exps, as llama.cpp matches "ffn_down" in the name), 2 attn_output, 3 attn_k, -1 other */
static int tensor_kind(const char *rest) {
    return !strcmp(rest, "attn_v.weight")                                               ? 0
           : !strcmp(rest, "ffn_down.weight") || !strcmp(rest, "ffn_down_exps.weight") ? 1
           : !strcmp(rest, "attn_output.weight")                                         ? 2
           : !strcmp(rest, "attn_k.weight")                                              ? 3
                                                                                         : -1;
}

static uint32_t target_type(const kipp_gguf_tensor *t, const qtype_def *q, uint64_t n_layers,
                            int has_output, uint64_t gqa, uint64_t n_expert) {
    if (t->n_dims < 2 || !ends_with(t->name, ".weight") || ends_with(t->name, "_norm.weight"))
        return t->type;
    /* a MoE layer's router stays in the converter's type (llama-quantize never quantizes it) */
    if (ends_with(t->name, "ffn_gate_inp.weight")) return t->type;
    const uint64_t row = (uint64_t)t->ne[0];
    uint32_t nt = q->base;
    uint64_t layer;
    const char *rest;
    if (strcmp(t->name, "output.weight") == 0 ||
        (strcmp(t->name, "token_embd.weight") == 0 && !has_output)) {
        if (row % kipp_type_block_elems(nt)) nt = KIPP_TYPE_Q8_0;
        else if (nt != KIPP_TYPE_Q8_0) nt = KIPP_TYPE_Q6_K;
    } else if ((rest = blk_layer(t->name, &layer))) {
        const int kind = tensor_kind(rest);
        uint32_t lt = kind >= 0 && kind <= 2 ? layer_type(q->name, kind, layer, n_layers, gqa) : 0;
        if (n_expert == 8 && kind >= 0) {
            const uint32_t e8 = eight_expert_type(q->name, kind);
            if (e8 || kind == 2) lt = e8; /* attn_output: the 8-expert rule replaces the dense one */
        }
        if (lt) nt = lt;
    }
    if (row % kipp_type_block_elems(nt)) {
        nt = fallback(nt);
        if (row % kipp_type_block_elems(nt)) nt = t->type;
    }
    return nt;
}

/* head_count / head_count_kv (quantize.py's n_gqa), 1 when either is missing or kv is 0. */
static uint64_t gqa_ratio(const kipp_gguf *g) {
    kipp_gguf_str arch;
    if (kipp_gguf_get_str(g, "general.architecture", &arch, NULL, 0) != KIPP_OK || arch.len >= 200)
        return 1;
    char key[256];
    uint32_t h, kv;
    snprintf(key, sizeof key, "%.*s.attention.head_count", (int)arch.len, arch.ptr);
    if (kipp_gguf_get_u32(g, key, &h, NULL, 0) != KIPP_OK) return 1;
    snprintf(key, sizeof key, "%.*s.attention.head_count_kv", (int)arch.len, arch.ptr);
    if (kipp_gguf_get_u32(g, key, &kv, NULL, 0) != KIPP_OK || kv == 0) return 1;
    return h / kv;
}

/* <arch>.expert_count (llama.cpp's n_expert), 0 for a dense model */
static uint64_t expert_count(const kipp_gguf *g) {
    kipp_gguf_str arch;
    if (kipp_gguf_get_str(g, "general.architecture", &arch, NULL, 0) != KIPP_OK || arch.len >= 200) return 0;
    char key[256];
    uint32_t n;
    snprintf(key, sizeof key, "%.*s.expert_count", (int)arch.len, arch.ptr);
    return kipp_gguf_get_u32(g, key, &n, NULL, 0) == KIPP_OK ? n : 0;
}

static uint64_t layer_count(const kipp_gguf *g) {
    kipp_gguf_str arch;
    if (kipp_gguf_get_str(g, "general.architecture", &arch, NULL, 0) == KIPP_OK &&
        arch.len < 200) {
        char key[256];
        snprintf(key, sizeof key, "%.*s.block_count", (int)arch.len, arch.ptr);
        uint32_t n;
        if (kipp_gguf_get_u32(g, key, &n, NULL, 0) == KIPP_OK) return n;
    }
    uint64_t n = 0, layer; /* fall back to counting blocks */
    for (uint64_t i = 0; i < kipp_gguf_n_tensors(g); i++)
        if (blk_layer(kipp_gguf_tensor_at(g, i)->name, &layer) && layer + 1 > n) n = layer + 1;
    return n;
}

/* ---- conversion -------------------------------------------------------------------------- */

typedef struct {
    const kipp_gguf_tensor *t;
    uint32_t out_type;
    uint64_t row_in, row_out; /* bytes per row */
    uint64_t r0;              /* first row of this chunk */
    uint8_t *dst;
    float **scratch;          /* one row of floats per thread */
} job;

static void to_f32(uint32_t type, const uint8_t *src, float *dst, uint64_t n) {
    if (type == KIPP_TYPE_F32) {
        memcpy(dst, src, (size_t)n * 4);
    } else if (type == KIPP_TYPE_F16) {
        for (uint64_t i = 0; i < n; i++)
            dst[i] = kipp_f16_to_f32((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
    } else {
        for (uint64_t i = 0; i < n; i++)
            dst[i] = kipp_bf16_to_f32((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
    }
}

static void run_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    const job *j = ctx;
    float *f = j->scratch[ith];
    const uint64_t ne0 = (uint64_t)j->t->ne[0];
    for (uint64_t r = begin; r < end; r++) {
        to_f32(j->t->type, (const uint8_t *)j->t->data + (j->r0 + r) * j->row_in, f, ne0);
        kipp_quantize_row(j->out_type, f, j->dst + r * j->row_out, ne0);
    }
}

/* ---- progress ---------------------------------------------------------------------------- */

typedef struct {
    int bar, lines; /* a redrawn bar (stderr is a terminal) or one line per tensor */
    const char *label;
    uint64_t done, total;
    double t0, last;
} progress;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_size(char *out, size_t n, double v) {
    static const char *unit[] = {"", "k", "M", "G", "T"};
    int u = 0;
    while (v >= 999.5 && u < 4) { v /= 1024; u++; }
    snprintf(out, n, v < 9.995 ? "%.2f%s" : v < 99.95 ? "%.1f%s" : "%.0f%s", v, unit[u]);
}

static void fmt_time(char *out, size_t n, double s) {
    const long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(out, n, "%02ld:%02ld", t / 60, t % 60);
}

/* tqdm's look (as convert_to_gguf.py and quantize.py show it):
 *   out.gguf:  42%|████▏     | 120M/286M [00:03<00:04, 40.1MB/s] */
static void bar_draw(progress *p, int force) {
    const double t = now_s();
    if (!force && t - p->last < 0.1) return;
    p->last = t;
    const double frac = p->total ? (double)p->done / (double)p->total : 1.0;
    const double el = t - p->t0, rate = el > 0 ? (double)p->done / el : 0;
    char done[16], total[16], rs[16], els[32], rem[32], cells[64] = "";
    fmt_size(done, sizeof done, (double)p->done);
    fmt_size(total, sizeof total, (double)p->total);
    fmt_size(rs, sizeof rs, rate);
    fmt_time(els, sizeof els, el);
    if (rate > 0) fmt_time(rem, sizeof rem, (double)(p->total - p->done) / rate);
    else snprintf(rem, sizeof rem, "?");
    static const char *part[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    const int width = 10, eighths = (int)(frac * width * 8);
    size_t k = 0;
    for (int i = 0; i < width; i++) {
        const int e = eighths - 8 * i;
        const char *c = e >= 8 ? "█" : e > 0 ? part[e] : " ";
        k += (size_t)snprintf(cells + k, sizeof cells - k, "%s", c);
    }
    fprintf(stderr, "\r%s: %3.0f%%|%s| %sB/%sB [%s<%s, %sB/s]\033[K", p->label, frac * 100, cells,
            done, total, els, rem, rs);
    fflush(stderr);
}

/* ---- main -------------------------------------------------------------------------------- */

typedef struct {
    const char *in, *out, *type;
    long threads;
    int progress;
} opts;

static int parse(int argc, char **argv, opts *o) {
    const char *pos[3];
    int n_pos = 0;
    memset(o, 0, sizeof *o);
    o->progress = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            char *end;
            if (i + 1 >= argc) {
                fprintf(stderr, PROG ": %s needs a value\n", a);
                return 2;
            }
            errno = 0;
            o->threads = strtol(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || o->threads < 1 || o->threads > 1024) {
                fprintf(stderr, PROG ": %s: '%s' is not a thread count (1..1024)\n", a, argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--no-progress")) {
            o->progress = 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, PROG ": unknown option '%s' (see --help)\n", a);
            return 2;
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, PROG ": too many arguments: '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (n_pos != 3) {
        fprintf(stderr, PROG ": expected IN.gguf OUT.gguf TYPE (see --help)\n");
        return 2;
    }
    o->in = pos[0];
    o->out = pos[1];
    o->type = pos[2];
    return 0;
}

static const qtype_def *find_qtype(const char *name) {
    for (size_t i = 0; i < N_QTYPES; i++)
        if (!strcmp(QTYPES[i].name, name)) return &QTYPES[i];
    return NULL;
}

static int fail(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, PROG ": error: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return 1;
}

typedef struct {
    const kipp_gguf *g;
    uint32_t *types;
    uint64_t *nbytes;
    kipp_buf head;
} plan;

static int build_header(plan *pl, const qtype_def *q) {
    const kipp_gguf *g = pl->g;
    const uint64_t n_t = kipp_gguf_n_tensors(g), n_kv = kipp_gguf_n_kv(g);
    const uint32_t align = kipp_gguf_alignment(g);
    const int has_align = kipp_gguf_find_key(g, "general.alignment") >= 0;
    const int has_ftype = kipp_gguf_find_key(g, "general.file_type") >= 0;
    kipp_buf *b = &pl->head;
    put(b, "GGUF", 4);
    put_u32(b, 3);
    put_u64(b, n_t);
    put_u64(b, n_kv - (uint64_t)has_align + (align != 32) + !has_ftype);
    if (align != 32) {
        put_str(b, "general.alignment", 17);
        put_u32(b, KIPP_GGUF_UINT32);
        put_u32(b, align);
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        const kipp_gguf_str k = kipp_gguf_key_name(g, (int64_t)i);
        char key[1024];
        if (memchr(k.ptr, 0, k.len) || k.len >= sizeof key) {
            fprintf(stderr, PROG ": error: metadata key %llu is %s\n", (unsigned long long)i,
                    k.len >= sizeof key ? "longer than 1023 bytes" : "not text (it holds a NUL byte)");
            return -1;
        }
        memcpy(key, k.ptr, k.len);
        key[k.len] = 0;
        if (!strcmp(key, "general.alignment")) continue;
        put_str(b, k.ptr, k.len);
        if (!strcmp(key, "general.file_type")) {
            put_u32(b, KIPP_GGUF_UINT32);
            put_u32(b, q->ftype);
            continue;
        }
        const uint8_t *p;
        uint64_t n;
        if (kv_payload(g, (int64_t)i, key, &p, &n)) {
            fprintf(stderr, PROG ": error: cannot read metadata record '%s'\n", key);
            return -1;
        }
        put_u32(b, kipp_gguf_key_type(g, (int64_t)i));
        put(b, p, (size_t)n);
    }
    if (!has_ftype) {
        put_str(b, "general.file_type", 17);
        put_u32(b, KIPP_GGUF_UINT32);
        put_u32(b, q->ftype);
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < n_t; i++) {
        const kipp_gguf_tensor *t = kipp_gguf_tensor_at(g, i);
        put_str(b, t->name, strlen(t->name));
        put_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(b, (uint64_t)t->ne[d]);
        put_u32(b, pl->types[i]);
        put_u64(b, off);
        off += pl->nbytes[i] + (align - pl->nbytes[i] % align) % align;
    }
    static const uint8_t zeros[4096];
    if (n_t) put(b, zeros, (align - b->len % align) % align);
    if (b->oom) {
        fprintf(stderr, PROG ": error: out of memory for the header\n");
        return -1;
    }
    return 0;
}

/* Asks the kernel to start reading a tensor's pages (the input is memory-mapped), so the
 * disk reads the next tensor while the threads convert this one. Advice only: errors ignored. */
static void prefetch(const kipp_gguf_tensor *t) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = (uintptr_t)t->data & ~(page - 1);
    (void)posix_madvise((void *)a, (size_t)((uintptr_t)t->data + t->n_bytes - a), POSIX_MADV_WILLNEED);
}

/* Streams the tensors to fd. Returns 0, or -1 with errno set by the failed write. */
static int write_tensors(int fd, plan *pl, kipp_threadpool *pool, progress *pr) {
    const kipp_gguf *g = pl->g;
    const uint64_t n_t = kipp_gguf_n_tensors(g);
    const uint32_t align = kipp_gguf_alignment(g);
    static const uint8_t zeros[4096];
    const int nth = kipp_threadpool_n_threads(pool);
    uint64_t max_ne0 = 1, max_chunk = 1;
    for (uint64_t i = 0; i < n_t; i++) {
        const kipp_gguf_tensor *t = kipp_gguf_tensor_at(g, i);
        if (pl->types[i] == t->type) continue;
        const uint64_t ne0 = (uint64_t)t->ne[0], rows = t->n_elems / ne0;
        const uint64_t step = CHUNK_VALUES / ne0 ? CHUNK_VALUES / ne0 : 1;
        const uint64_t chunk = (step < rows ? step : rows) * kipp_type_row_bytes(pl->types[i], ne0);
        if (ne0 > max_ne0) max_ne0 = ne0;
        if (chunk > max_chunk) max_chunk = chunk;
    }
    float **scratch = calloc((size_t)nth, sizeof *scratch);
    uint8_t *dst = malloc((size_t)max_chunk);
    int rc = 0;
    if (!scratch || !dst) {
        errno = ENOMEM;
        rc = -1;
    }
    for (int i = 0; !rc && i < nth; i++)
        if (!(scratch[i] = malloc((size_t)max_ne0 * sizeof(float)))) {
            errno = ENOMEM;
            rc = -1;
        }
    for (uint64_t i = 0; !rc && i < n_t; i++) {
        const kipp_gguf_tensor *t = kipp_gguf_tensor_at(g, i);
        const double t_start = now_s();
        if (i + 1 < n_t) prefetch(kipp_gguf_tensor_at(g, i + 1)); /* read ahead while this one runs */
        if (pl->types[i] == t->type) {
            rc = kipp_write_all(fd, t->data, (size_t)t->n_bytes);
            if (pr->bar) {
                pr->done += t->n_bytes;
                bar_draw(pr, 0);
            }
        } else {
            const uint64_t ne0 = (uint64_t)t->ne[0], rows = t->n_elems / ne0;
            const uint64_t step = CHUNK_VALUES / ne0 ? CHUNK_VALUES / ne0 : 1;
            job j = {t, pl->types[i], kipp_type_row_bytes(t->type, ne0),
                     kipp_type_row_bytes(pl->types[i], ne0), 0, dst, scratch};
            for (uint64_t r0 = 0; !rc && r0 < rows; r0 += step) {
                const uint64_t n = rows - r0 < step ? rows - r0 : step;
                j.r0 = r0;
                kipp_threadpool_for(pool, n, 1, run_rows, &j);
                rc = kipp_write_all(fd, dst, (size_t)(n * j.row_out));
                if (pr->bar) {
                    pr->done += n * j.row_out;
                    bar_draw(pr, 0);
                }
            }
        }
        if (!rc) rc = kipp_write_all(fd, zeros, (align - pl->nbytes[i] % align) % align);
        if (!rc && pr->lines) {
            char shape[96];
            int k = snprintf(shape, sizeof shape, "%lld", (long long)t->ne[0]);
            for (uint32_t d = 1; d < t->n_dims && k < (int)sizeof shape; d++)
                k += snprintf(shape + k, sizeof shape - (size_t)k, " x %lld", (long long)t->ne[d]);
            fprintf(stderr, "[%*llu/%llu] %-28s %-5s -> %-5s [%s] %.2f s\n",
                    n_t >= 100 ? 3 : 2, (unsigned long long)i + 1, (unsigned long long)n_t,
                    t->name, kipp_type_name(t->type), kipp_type_name(pl->types[i]), shape,
                    now_s() - t_start);
        }
    }
    if (scratch)
        for (int i = 0; i < nth; i++) free(scratch[i]);
    free(scratch);
    free(dst);
    return rc;
}

int main(int argc, char **argv) {
    opts o;
    const int pr_rc = parse(argc, argv, &o);
    if (pr_rc) return pr_rc == 1 ? 0 : 2;
    const double t0 = now_s();
    const qtype_def *q = find_qtype(o.type);
    if (!q) {
        fprintf(stderr, PROG ": error: unknown type '%s' (valid types:", o.type);
        for (size_t i = 0; i < N_QTYPES; i++) fprintf(stderr, " %s", QTYPES[i].name);
        fprintf(stderr, ")\n");
        return 2;
    }
    struct stat st_in, st_out;
    if (stat(o.in, &st_in) != 0)
        return fail("cannot open input %s: %s", o.in, strerror(errno));
    if (!S_ISREG(st_in.st_mode)) return fail("input %s is not a regular file%s", o.in, "");
    const int out_exists = stat(o.out, &st_out) == 0;
    if (out_exists && st_out.st_dev == st_in.st_dev && st_out.st_ino == st_in.st_ino)
        return fail("output %s is the input file %s: choose another output", o.out, o.in);
    if (out_exists && !S_ISREG(st_out.st_mode))
        return fail("output %s exists and is not a regular file%s", o.out, "");

    char err[512];
    kipp_gguf *g = NULL;
    if (kipp_gguf_open(o.in, &g, err, sizeof err) != KIPP_OK)
        return fail("%s: %s", o.in, err);

    const uint64_t n_t = kipp_gguf_n_tensors(g);
    plan pl = {g, calloc(n_t + 1, sizeof(uint32_t)), calloc(n_t + 1, sizeof(uint64_t)), {0}};
    int rc = 1;
    kipp_threadpool *pool = NULL;
    char *target = NULL;
    int fd = -1;
    progress pr = {0};
    if (!pl.types || !pl.nbytes) {
        fprintf(stderr, PROG ": error: out of memory\n");
        goto done;
    }
    const uint64_t n_layers = layer_count(g);
    const int has_output = kipp_gguf_find_tensor(g, "output.weight") != NULL;
    const uint64_t gqa = gqa_ratio(g), n_expert = expert_count(g);
    uint64_t total = 0;
    for (uint64_t i = 0; i < n_t; i++) {
        const kipp_gguf_tensor *t = kipp_gguf_tensor_at(g, i);
        if (t->n_dims >= 2 && t->type != KIPP_TYPE_F32 && t->type != KIPP_TYPE_F16 &&
            t->type != KIPP_TYPE_BF16) {
            fprintf(stderr,
                    PROG ": error: %s: tensor '%s' is already %s; the input must be an "
                    "f32/f16/bf16 GGUF (quantize from the original file: requantizing "
                    "compounds the rounding errors)\n",
                    o.in, t->name, kipp_type_name(t->type));
            goto done;
        }
        pl.types[i] = target_type(t, q, n_layers, has_output, gqa, n_expert);
        pl.nbytes[i] = pl.types[i] == t->type
                           ? t->n_bytes
                           : t->n_elems / (uint64_t)t->ne[0] *
                                 kipp_type_row_bytes(pl.types[i], (uint64_t)t->ne[0]);
        total += pl.nbytes[i];
    }
    if (build_header(&pl, q)) goto done;

    /* the temporary file beside the real target (a symlink's target is replaced) */
    target = realpath(o.out, NULL);
    if (!target) target = strdup(o.out);
    if (!target || strlen(target) > PATH_MAX) {
        fprintf(stderr, PROG ": error: output path too long or out of memory\n");
        goto done;
    }
    snprintf(g_tmp, sizeof g_tmp, "%s.tmp.XXXXXX", target);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    signal(SIGXFSZ, SIG_IGN); /* a file-size limit is a write error, reported below */
    fd = mkstemp(g_tmp);
    if (fd < 0) {
        fprintf(stderr, PROG ": error: cannot create a temporary file beside %s: %s\n", o.out,
                strerror(errno));
        goto done;
    }
    g_tmp_live = 1;
    const mode_t um = umask(0);
    umask(um);
    if (fchmod(fd, 0666 & ~um) != 0) { /* mkstemp's 0600 -> what creat() would give */
        fprintf(stderr, PROG ": error: %s: %s\n", g_tmp, strerror(errno));
        goto done;
    }
    if (kipp_threadpool_init((int)o.threads, &pool, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, PROG ": error: %s\n", err);
        goto done;
    }
    pr.bar = o.progress && isatty(STDERR_FILENO);
    pr.lines = o.progress && !pr.bar;
    const char *slash = strrchr(o.out, '/');
    pr.label = slash ? slash + 1 : o.out;
    pr.total = total;
    pr.t0 = now_s();
    if (kipp_write_all(fd, pl.head.data, pl.head.len) || write_tensors(fd, &pl, pool, &pr) ||
        fsync(fd) != 0) {
        const int e = errno;
        if (pr.bar) fprintf(stderr, "\r\033[K");
        fprintf(stderr, PROG ": error: writing %s failed: %s%s\n", o.out, strerror(e),
                e == ENOSPC || e == EFBIG || e == EDQUOT ? " (disk full or file size limit)"
                                                         : "");
        goto done;
    }
    if (pr.bar) {
        bar_draw(&pr, 1); /* the last frame, then cleared (tqdm's leave=False) */
        fprintf(stderr, "\r\033[K");
    }
    if (close(fd) != 0) {
        fd = -1;
        fprintf(stderr, PROG ": error: writing %s failed: %s\n", o.out, strerror(errno));
        goto done;
    }
    fd = -1;
    if (rename(g_tmp, target) != 0) {
        fprintf(stderr, PROG ": error: cannot rename the temporary file to %s: %s\n", o.out,
                strerror(errno));
        goto done;
    }
    g_tmp_live = 0;
    struct stat st;
    printf("wrote %s (%llu bytes, %s, %.1f s)\n", o.out,
           stat(o.out, &st) == 0 ? (unsigned long long)st.st_size : 0ull, q->name, now_s() - t0);
    rc = 0;
done:
    if (fd >= 0) close(fd);
    if (g_tmp_live) {
        unlink(g_tmp);
        g_tmp_live = 0;
    }
    kipp_threadpool_free(pool);
    free(target);
    kipp_buf_free(&pl.head);
    free(pl.types);
    free(pl.nbytes);
    kipp_gguf_free(g);
    return rc;
}
