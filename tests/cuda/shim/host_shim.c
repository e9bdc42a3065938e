/* host_shim.c — a host-memory stand-in for the CUDA runtime and for the launchers of
 * src/backend/cuda/kernels.h, so the cuda backend's host side (cuda.c, forward.c: weight
 * upload, the layer program's launches, batching and chunking, the pinned staging copy,
 * block tables, the private store of recomputation, CUDA-graph capture and replay) runs under
 * the ordinary model gates on a machine without a GPU (build/kipp_test_cuda_shim,
 * tests/cuda/test_cuda_shim.sh).
 * "Device" memory is malloc'd, filled with 0xA5 and registered with a shadow of the bytes
 * written so far (by a copy, a memset or a launch). Every launcher checks, when it runs (a
 * graph's replay included), that each span it reads or writes lies inside one live device
 * allocation and that each span it reads was written before (the weights were uploaded, the
 * activations computed), plus its own contract (block-table columns inside the table,
 * expert groups that fit the launch's bound, scratch as large as the scratch function said);
 * a violation prints what and where and aborts. Each launcher is then a plain C version of
 * the kernel's definition (the numbers of cpu-ref; the router is moe.c's kipp_moe_route, the
 * gates' near-tie pins applied from the record forward.c copied to the "device", with the
 * kernel's kipp_om_moe_trace_pin: the slot of the same token with the nearest probabilities,
 * then the pin rule).
 * A stream runs work at once unless it is capturing, and a graph replays what it captured.
 * It says nothing about the real kernels (tests/cuda/ops_*.c check those, on a GPU).
 * SHIM_DRIVER / SHIM_CC fake the driver version and compute capability; SHIM_FREE_MIB the
 * free device memory (cudaMemGetInfo; an allocation past it fails); SHIM_REPORT=1 prints the
 * captures, replays and peak device bytes at exit; SHIM_SEQ=1 prints the launches of the
 * first step (every launch up to the first stream synchronization) as one line. */
#include "backend/cuda/kernels.h"
#include "backend/cuda/ops_math.h"
#include "backend/moe.h"
#include "core/types.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- device memory and its shadow -------------------------------------------------------- */

typedef struct {
    unsigned char *base;
    size_t n;
    unsigned char *init; /* [n] 1: written (NULL: host memory, always readable) */
} shim_alloc;
static shim_alloc *g_allocs;
static size_t g_n_allocs, g_cap_allocs;
static size_t g_live, g_peak;

static void shim_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "shim: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

static void track(void *p, size_t n, int device) {
    if (g_n_allocs == g_cap_allocs) {
        g_cap_allocs = g_cap_allocs ? 2 * g_cap_allocs : 64;
        g_allocs = realloc(g_allocs, g_cap_allocs * sizeof *g_allocs);
        if (!g_allocs) abort();
    }
    shim_alloc a = {p, n, NULL};
    if (device && !(a.init = calloc(n ? n : 1, 1))) abort();
    g_allocs[g_n_allocs++] = a;
}

static void untrack(const void *p) {
    for (size_t i = 0; i < g_n_allocs; i++)
        if (g_allocs[i].base == p) {
            free(g_allocs[i].init);
            g_allocs[i] = g_allocs[--g_n_allocs];
            return;
        }
}

/* The allocation holding [p, p + n), or NULL. */
static shim_alloc *holder(const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < g_n_allocs; i++) {
        shim_alloc *a = &g_allocs[i];
        if (c >= a->base && c <= a->base + a->n && n <= (size_t)(a->base + a->n - c)) return a;
    }
    return NULL;
}

static const char *g_launch; /* the launcher running, for messages */

/* n bytes at p read by the current launch: inside one device allocation, all written. */
static void dev_read(const void *p, size_t n, const char *what) {
    if (!n) return;
    shim_alloc *a = holder(p, n);
    if (!a || !a->init)
        shim_fail("%s: reads %s, %zu bytes at %p, outside every device allocation", g_launch, what,
                  n, p);
    const unsigned char *z = memchr(a->init + ((const unsigned char *)p - a->base), 0, n);
    if (z)
        shim_fail("%s: reads %s, %zu bytes at %p: byte %zu was never written (uploaded or computed)",
                  g_launch, what, n, p, (size_t)(z - (a->init + ((const unsigned char *)p - a->base))));
}

static void dev_write(void *p, size_t n, const char *what) {
    if (!n) return;
    shim_alloc *a = holder(p, n);
    if (!a || !a->init)
        shim_fail("%s: writes %s, %zu bytes at %p, outside every device allocation", g_launch, what,
                  n, p);
    memset(a->init + ((unsigned char *)p - a->base), 1, n);
}

/* rows of n floats, ld apart */
static void rows_read(const float *p, size_t ld, size_t rows, size_t n, const char *what) {
    if (rows && n > ld) shim_fail("%s: %s rows of %zu floats at a stride of %zu", g_launch, what, n, ld);
    for (size_t r = 0; r < rows; r++) dev_read(p + r * ld, n * 4, what);
}
static void rows_write(float *p, size_t ld, size_t rows, size_t n, const char *what) {
    if (rows && n > ld) shim_fail("%s: %s rows of %zu floats at a stride of %zu", g_launch, what, n, ld);
    for (size_t r = 0; r < rows; r++) dev_write(p + r * ld, n * 4, what);
}

/* ---- launches: run now, or recorded into the graph being captured ------------------------ */

struct CUstream_st {
    int x;
};
struct CUgraph_st {
    int n;
    struct call *calls;
};
struct CUgraphExec_st {
    int n;
    struct call *calls;
};
typedef void (*exec_fn)(const void *);
struct call {
    exec_fn fn;
    const char *name;
    unsigned char args[256];
};
static struct CUgraph_st *g_cap; /* capturing into */
int shim_n_captures, shim_n_replays;

/* SHIM_SEQ: the first step's launches, in order */
static char g_seq[1 << 16];
static size_t g_seq_len;
static int g_seq_state; /* 0 not started, 1 recording, 2 printed */

static void exec_call(const struct call *c) {
    g_launch = c->name;
    c->fn(c->args);
    g_launch = NULL;
}

static int submit(const char *name, exec_fn fn, const void *a, size_t n) {
    if (n > 256) abort();
    if (g_seq_state < 2 && getenv("SHIM_SEQ")) {
        g_seq_state = 1;
        const int w = snprintf(g_seq + g_seq_len, sizeof g_seq - g_seq_len, "%s%s",
                               g_seq_len ? " " : "", name);
        if (w > 0 && (size_t)w < sizeof g_seq - g_seq_len) g_seq_len += (size_t)w;
    }
    struct call c = {fn, name, {0}};
    memcpy(c.args, a, n);
    if (g_cap) {
        g_cap->calls = realloc(g_cap->calls, (g_cap->n + 1) * sizeof *g_cap->calls);
        g_cap->calls[g_cap->n++] = c;
    } else {
        exec_call(&c);
    }
    return 0;
}

cudaError_t cudaDriverGetVersion(int *v) {
    const char *e = getenv("SHIM_DRIVER");
    *v = e ? atoi(e) : 13000;
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d) {
    memset(p, 0, sizeof *p);
    strcpy(p->name, "Shim H200");
    p->major = getenv("SHIM_CC") ? atoi(getenv("SHIM_CC")) / 10 : 9;
    p->minor = getenv("SHIM_CC") ? atoi(getenv("SHIM_CC")) % 10 : 0;
    p->multiProcessorCount = 132;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return cudaSuccess; }
static size_t free_bytes(void) {
    const char *e = getenv("SHIM_FREE_MIB");
    return e ? (size_t)atoll(e) << 20 : 100ull << 30;
}
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
    *f = free_bytes();
    *t = 141ull << 30;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) {
    *p = NULL;
    if (g_live + n > free_bytes()) return cudaErrorMemoryAllocation;
    *p = malloc(n ? n : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    memset(*p, 0xA5, n);
    track(*p, n, 1);
    g_live += n;
    if (g_live > g_peak) g_peak = g_live;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    shim_alloc *a = holder(p, 0);
    if (!a || a->base != p || !a->init) shim_fail("cudaFree(%p): not a device allocation", p);
    g_live -= a->n;
    untrack(p);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int fl) {
    *p = malloc(n ? n : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    track(*p, n, 0);
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    untrack(p);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaHostUnregister(void *p) {
    untrack(p);
    return cudaSuccess;
}
cudaError_t cudaHostRegister(void *p, size_t n, unsigned int f) {
    /* a registered mapping (spark): device-readable, written by the file */
    track(p, n, 1);
    memset(holder(p, n)->init, 1, n);
    return cudaSuccess;
}
cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned int f) {
    *d = h;
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    g_launch = "cudaMemset";
    dev_write(p, n, "its target");
    g_launch = NULL;
    memset(p, v, n);
    return cudaSuccess;
}
/* A copy's device side(s) checked like a launch's: the source read (written before), the
 * destination written. */
static void copy_check(void *d, const void *s, size_t n, enum cudaMemcpyKind k) {
    g_launch = "cudaMemcpy";
    if (k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice) dev_read(s, n, "its source");
    if (k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice) dev_write(d, n, "its target");
    g_launch = NULL;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) {
    copy_check(d, s, n, k);
    memcpy(d, s, n);
    return cudaSuccess;
}
struct cp {
    void *d;
    const void *s;
    size_t n;
    enum cudaMemcpyKind k;
};
static void cp_exec(const void *a) {
    const struct cp *c = a;
    copy_check(c->d, c->s, c->n, c->k);
    memcpy(c->d, c->s, c->n);
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t st) {
    if (g_cap) abort(); /* forward.c keeps copies outside graphs */
    struct cp c = {d, s, n, k};
    struct call call = {cp_exec, "copy", {0}};
    memcpy(call.args, &c, sizeof c);
    exec_call(&call);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f) {
    *s = calloc(1, sizeof **s);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    free(s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (g_seq_state == 1) {
        fprintf(stderr, "shim: first step: %s\n", g_seq);
        g_seq_state = 2;
    }
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaErrorMemoryAllocation ? "shim: out of memory" : "shim error";
}
const char *cudaGetErrorName(cudaError_t e) {
    return e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation" : "shimError";
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m) {
    g_cap = calloc(1, sizeof *g_cap);
    shim_n_captures++;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    *g = g_cap;
    g_cap = NULL;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long f) {
    *e = calloc(1, sizeof **e);
    (*e)->n = g->n;
    (*e)->calls = malloc(g->n * sizeof *g->calls + 1);
    memcpy((*e)->calls, g->calls, g->n * sizeof *g->calls);
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    free(g->calls);
    free(g);
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    free(e->calls);
    free(e);
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    shim_n_replays++;
    for (int i = 0; i < e->n; i++) exec_call(&e->calls[i]);
    return cudaSuccess;
}

/* ---- kernels ---- */
static int shim_shape_ok(uint32_t t, uint32_t n) {
    const uint32_t be = kipp_type_block_elems(t);
    return kipp_type_supported(t) && be && n % be == 0 && n % 8 == 0;
}
int kipp_cuda_mm_type_supported(uint32_t t) { return kipp_type_supported(t); }
int kipp_cuda_mm_shape_supported(uint32_t t, uint32_t n_in) { return shim_shape_ok(t, n_in); }
size_t kipp_cuda_matmul_scratch_bytes(uint32_t a, uint32_t n_in, uint32_t n_tok) {
    return n_tok > 8 ? 4ull * n_in * n_tok : 0;
}
/* y[t] = x[t] W^T, one row of W dequantized at a time, f32 dot products in order */
static void plain_mm(uint32_t type, const void *w, uint32_t n_in, uint32_t n_out, const float *x,
                     uint32_t n_tok, const size_t *xoff, float *y, size_t ldy) {
    float *row = malloc(n_in * sizeof *row);
    const size_t rb = kipp_type_row_bytes(type, n_in);
    for (uint32_t o = 0; o < n_out; o++) {
        kipp_dequantize_row(type, (const char *)w + o * rb, row, n_in);
        for (uint32_t t = 0; t < n_tok; t++) {
            float acc = 0;
            const float *xr = x + xoff[t];
            for (uint32_t k = 0; k < n_in; k++) acc += row[k] * xr[k];
            y[t * ldy + o] = acc;
        }
    }
    free(row);
}
struct mm {
    uint32_t type;
    const void *w;
    uint32_t n_in, n_out;
    const float *x;
    size_t ldx;
    uint32_t n_tok;
    float *y;
    size_t ldy;
    void *scratch;
    size_t scratch_bytes;
};
static void mm_exec(const void *p) {
    const struct mm *a = p;
    if (!shim_shape_ok(a->type, a->n_in))
        shim_fail("%s: type %u with rows of %u: the kernels refuse it", g_launch, a->type, a->n_in);
    dev_read(a->w, kipp_type_row_bytes(a->type, a->n_in) * a->n_out, "the weights");
    rows_read(a->x, a->ldx, a->n_tok, a->n_in, "x");
    dev_write(a->scratch, a->scratch_bytes, "the scratch");
    rows_write(a->y, a->ldy, a->n_tok, a->n_out, "y");
    size_t *xoff = malloc((a->n_tok + 1) * sizeof *xoff);
    for (uint32_t t = 0; t < a->n_tok; t++) xoff[t] = t * a->ldx;
    plain_mm(a->type, a->w, a->n_in, a->n_out, a->x, a->n_tok, xoff, a->y, a->ldy);
    free(xoff);
}
int kipp_cuda_matmul(uint32_t type, const void *w, uint32_t n_in, uint32_t n_out, const float *x,
                     size_t ldx, uint32_t n_tok, float *y, size_t ldy, void *scratch,
                     cudaStream_t stream) {
    struct mm a = {type, w, n_in, n_out, x, ldx, n_tok, y, ldy, scratch,
                   kipp_cuda_matmul_scratch_bytes(type, n_in, n_tok)};
    return submit("matmul", mm_exec, &a, sizeof a);
}
int kipp_cuda_matmul_exact(uint32_t type, const void *w, uint32_t n_in, uint32_t n_out,
                           const float *x, size_t ldx, uint32_t n_tok, float *y, size_t ldy,
                           cudaStream_t stream) {
    struct mm a = {type, w, n_in, n_out, x, ldx, n_tok, y, ldy, NULL, 0};
    return submit("matmul_exact", mm_exec, &a, sizeof a);
}
size_t kipp_cuda_matmul_experts_scratch_bytes(uint32_t type, uint32_t n_in, uint32_t n_rows,
                                              uint32_t max_per_expert) {
    return max_per_expert > 8 ? 4ull * n_in * n_rows : 0;
}
struct me {
    uint32_t type;
    const void *w;
    size_t expert_bytes;
    uint32_t n_expert, n_in, n_out;
    const float *x;
    size_t ldx;
    const int32_t *x_rows;
    uint32_t n_rows;
    const uint32_t *grp_off;
    uint32_t max_per;
    float *y;
    size_t ldy;
    void *scratch;
};
/* the groups must partition the rows and fit the launch's bound (the GEMM's grid covers
 * max_per rows of each expert: a larger group would lose rows on a GPU) */
static void me_exec(const void *p) {
    const struct me *a = p;
    if (!shim_shape_ok(a->type, a->n_in))
        shim_fail("%s: type %u with rows of %u: the kernels refuse it", g_launch, a->type, a->n_in);
    const size_t rb = kipp_type_row_bytes(a->type, a->n_in);
    if (a->expert_bytes < rb * a->n_out) shim_fail("%s: experts %zu bytes apart, each %zu", g_launch, a->expert_bytes, rb * a->n_out);
    dev_read(a->grp_off, ((size_t)a->n_expert + 1) * 4, "the expert groups");
    if (a->grp_off[0] != 0 || a->grp_off[a->n_expert] != a->n_rows)
        shim_fail("%s: groups span %u .. %u, not the %u rows", g_launch, a->grp_off[0],
                  a->grp_off[a->n_expert], a->n_rows);
    if (a->x_rows) dev_read(a->x_rows, (size_t)a->n_rows * 4, "the input rows");
    dev_write(a->scratch, kipp_cuda_matmul_experts_scratch_bytes(a->type, a->n_in, a->n_rows, a->max_per),
              "the scratch");
    size_t *xoff = malloc(((size_t)a->n_rows + 1) * sizeof *xoff);
    for (uint32_t r = 0; r < a->n_rows; r++) {
        xoff[r] = (a->x_rows ? (size_t)a->x_rows[r] : r) * a->ldx;
        dev_read(a->x + xoff[r], (size_t)a->n_in * 4, "an input row");
    }
    for (uint32_t e = 0; e < a->n_expert; e++) {
        const uint32_t r0 = a->grp_off[e], r1 = a->grp_off[e + 1];
        if (r1 < r0 || r1 - r0 > a->max_per)
            shim_fail("%s: expert %u's group holds rows %u .. %u, the launch's bound is %u rows",
                      g_launch, e, r0, r1, a->max_per);
        if (r1 == r0) continue;
        const void *we = (const char *)a->w + (size_t)e * a->expert_bytes;
        dev_read(we, rb * a->n_out, "an expert's weights");
        rows_write(a->y + (size_t)r0 * a->ldy, a->ldy, r1 - r0, a->n_out, "y");
        plain_mm(a->type, we, a->n_in, a->n_out, a->x, r1 - r0, xoff + r0, a->y + (size_t)r0 * a->ldy,
                 a->ldy);
    }
    free(xoff);
}
int kipp_cuda_matmul_experts(uint32_t type, const void *w, size_t expert_bytes,
                             uint32_t n_expert, uint32_t n_in, uint32_t n_out, const float *x,
                             size_t ldx, const int32_t *x_rows, uint32_t n_rows,
                             const uint32_t *grp_off, uint32_t max_per_expert, float *y,
                             size_t ldy, void *scratch, cudaStream_t stream) {
    struct me a = {type, w, expert_bytes, n_expert, n_in, n_out, x, ldx, x_rows, n_rows,
                   grp_off, max_per_expert, y, ldy, scratch};
    return submit("matmul_experts", me_exec, &a, sizeof a);
}
struct gr {
    uint32_t type;
    const void *w;
    uint32_t n;
    const int32_t *ids;
    uint32_t n_tok;
    float *out;
    size_t ldo;
};
static void gr_exec(const void *p) {
    const struct gr *a = p;
    const size_t rb = kipp_type_row_bytes(a->type, a->n);
    dev_read(a->ids, (size_t)a->n_tok * 4, "the row ids");
    rows_write(a->out, a->ldo, a->n_tok, a->n, "the rows");
    for (uint32_t t = 0; t < a->n_tok; t++) {
        if (a->ids[t] < 0) shim_fail("%s: row id %d", g_launch, a->ids[t]);
        dev_read((const char *)a->w + a->ids[t] * rb, rb, "a row");
        kipp_dequantize_row(a->type, (const char *)a->w + a->ids[t] * rb, a->out + t * a->ldo,
                            a->n);
    }
}
int kipp_cuda_get_rows(uint32_t type, const void *w, uint32_t n, const int32_t *ids, uint32_t n_tok,
                       float *out, size_t ldo, cudaStream_t stream) {
    struct gr a = {type, w, n, ids, n_tok, out, ldo};
    return submit("get_rows", gr_exec, &a, sizeof a);
}
struct rn {
    const float *x;
    size_t ldx;
    const float *w;
    uint32_t n, rows;
    float eps;
    float *out;
    size_t ldo;
};
static void rn_exec(const void *p) {
    const struct rn *a = p;
    rows_read(a->x, a->ldx, a->rows, a->n, "x");
    dev_read(a->w, (size_t)a->n * 4, "the norm's weights");
    rows_write(a->out, a->ldo, a->rows, a->n, "out");
    for (uint32_t r = 0; r < a->rows; r++) {
        const float *x = a->x + r * a->ldx;
        float *o = a->out + r * a->ldo;
        double ss = 0;
        for (uint32_t i = 0; i < a->n; i++)
            ss += (double)x[i] * x[i];
        const float sc = 1.0f / sqrtf((float)(ss / a->n) + a->eps);
        for (uint32_t i = 0; i < a->n; i++)
            o[i] = x[i] * sc * a->w[i];
    }
}
int kipp_cuda_rmsnorm(const float *x, size_t ld_x, const float *w, uint32_t n, uint32_t n_rows,
                      float eps, float *out, size_t ld_out, cudaStream_t stream) {
    struct rn a = {x, ld_x, w, n, n_rows, eps, out, ld_out};
    return submit(n_rows ? "rmsnorm" : "rmsnorm", rn_exec, &a, sizeof a);
}
struct rp {
    float *x;
    size_t ld;
    uint32_t n_tok, n_head, D;
    const float *c, *s;
};
static void rp_exec(const void *p) {
    const struct rp *a = p;
    const uint32_t half = a->D / 2;
    rows_read(a->x, a->ld, a->n_tok, (size_t)a->n_head * a->D, "x");
    dev_read(a->c, (size_t)a->n_tok * half * 4, "the cos table");
    dev_read(a->s, (size_t)a->n_tok * half * 4, "the sin table");
    for (uint32_t t = 0; t < a->n_tok; t++)
        for (uint32_t h = 0; h < a->n_head; h++) {
            float *x = a->x + t * a->ld + h * a->D;
            const float *c = a->c + t * half, *s = a->s + t * half;
            for (uint32_t i = 0; i < half; i++) {
                const float u = x[i], v = x[i + half];
                x[i] = u * c[i] - v * s[i];
                x[i + half] = u * s[i] + v * c[i];
            }
        }
}
int kipp_cuda_rope(float *x, size_t ld, uint32_t n_tok, uint32_t n_head, uint32_t head_dim,
                   const float *cos_t, const float *sin_t, cudaStream_t stream) {
    struct rp a = {x, ld, n_tok, n_head, head_dim, cos_t, sin_t};
    return submit("rope", rp_exec, &a, sizeof a);
}
struct sw {
    const float *g, *u;
    size_t ld;
    uint32_t n, n_tok;
    float *out;
};
static void sw_exec(const void *p) {
    const struct sw *a = p;
    rows_read(a->g, a->ld, a->n_tok, a->n, "gate");
    rows_read(a->u, a->ld, a->n_tok, a->n, "up");
    rows_write(a->out, a->ld, a->n_tok, a->n, "out");
    for (uint32_t t = 0; t < a->n_tok; t++)
        for (uint32_t i = 0; i < a->n; i++) {
            const float z = a->g[t * a->ld + i];
            a->out[t * a->ld + i] = z / (1.0f + expf(-z)) * a->u[t * a->ld + i];
        }
}
int kipp_cuda_swiglu(const float *gate, const float *up, size_t ld, uint32_t n, uint32_t n_tok,
                     float *out, cudaStream_t stream) {
    struct sw a = {gate, up, ld, n, n_tok, out};
    return submit("swiglu", sw_exec, &a, sizeof a);
}
struct ad {
    float *x;
    const float *y;
    size_t ld;
    uint32_t n, n_tok;
};
static void ad_exec(const void *p) {
    const struct ad *a = p;
    rows_read(a->x, a->ld, a->n_tok, a->n, "x");
    rows_read(a->y, a->ld, a->n_tok, a->n, "y");
    for (uint32_t t = 0; t < a->n_tok; t++)
        for (uint32_t i = 0; i < a->n; i++)
            a->x[t * a->ld + i] += a->y[t * a->ld + i];
}
int kipp_cuda_add(float *x, const float *y, size_t ld, uint32_t n, uint32_t n_tok,
                  cudaStream_t stream) {
    struct ad a = {x, y, ld, n, n_tok};
    return submit("add", ad_exec, &a, sizeof a);
}
static void bias_exec(const void *p) { /* struct ad with y the bias (one row) */
    const struct ad *a = p;
    rows_read(a->x, a->ld, a->n_tok, a->n, "x");
    dev_read(a->y, (size_t)a->n * 4, "the bias");
    for (uint32_t t = 0; t < a->n_tok; t++)
        for (uint32_t i = 0; i < a->n; i++)
            a->x[t * a->ld + i] += a->y[i];
}
int kipp_cuda_add_bias(float *x, size_t ld, const float *b, uint32_t n, uint32_t n_tok,
                       cudaStream_t stream) {
    struct ad a = {x, b, ld, n, n_tok};
    return submit("add_bias", bias_exec, &a, sizeof a);
}
struct rt {
    float *logits;
    size_t ld;
    uint32_t n_tok, E, k;
    int norm;
    uint32_t layer;
    const uint32_t *pos;
    const int32_t *tok;
    kipp_cuda_moe_pin pin;
    int pinned;
    uint32_t *chosen;
    float *weight;
    uint32_t *grp_off;
    int32_t *pair_tok;
    uint32_t *slot_at;
};
/* moe.c's kipp_moe_route per token (the definition; the host's trace off, as on a GPU), the pin
 * from the device copy of the record by the kernel's own code (ops_math.h:
 * kipp_om_moe_trace_pin: the slot of the same token with the nearest probabilities, then the pin
 * rule), then the pairs grouped by expert, tokens ascending within a group */
static void rt_exec(const void *p) {
    const struct rt *a = p;
    const size_t P = (size_t)a->n_tok * a->k;
    if (!a->E || a->E > 1024 || !a->k || a->k > a->E || a->ld < a->E)
        shim_fail("%s: %u of %u experts (at most 1024), rows %zu apart", g_launch, a->k, a->E, a->ld);
    rows_read(a->logits, a->ld, a->n_tok, a->E, "the router logits");
    dev_write(a->chosen, P * 4, "chosen");
    dev_write(a->weight, P * 4, "the weights");
    dev_write(a->grp_off, ((size_t)a->E + 1) * 4, "the groups");
    dev_write(a->pair_tok, P * 4, "the pairs' tokens");
    dev_write(a->slot_at, P * 4, "the pairs' places");
    const kipp_cuda_moe_pin *pin = a->pinned ? &a->pin : NULL;
    const kipp_om_moe_record *rec = pin ? &pin->rec : NULL;
    if (pin) {
        dev_read(a->pos, (size_t)a->n_tok * 4, "the tokens' positions");
        dev_read(a->tok, (size_t)a->n_tok * 4, "the tokens' ids");
        dev_read(pin->counts, 12, "the pin counts");
        dev_write(pin->counts, 12, "the pin counts");
    }
    kipp_moe_trace *host_trace = kipp_moe_trace_current();
    kipp_moe_trace_use(NULL);
    for (uint32_t t = 0; t < a->n_tok; t++) {
        float *row = a->logits + t * a->ld, *w = a->weight + (size_t)t * a->k;
        uint32_t *ch = a->chosen + (size_t)t * a->k;
        kipp_moe_route(row, a->E, a->k, a->norm, ch, w, a->layer, 0, -1);
        if (!pin) continue;
        if (a->layer < rec->n_layer && a->pos[t] < rec->n_pos) { /* the cell the kernel may read */
            const size_t cell = ((size_t)a->layer * rec->n_pos + a->pos[t]) * rec->n_slot, ns = rec->n_slot;
            dev_read(rec->token + cell, ns * 4, "the trace's tokens");
            dev_read(rec->chosen + cell * rec->k, ns * rec->k * 4, "the trace's record");
            dev_read(rec->margin + cell, ns * 4, "the trace's margins");
            dev_read(rec->probs + cell * rec->n_exp, ns * rec->n_exp * 4, "the trace's probabilities");
        }
        float margin = 0.0f;
        const int r = kipp_om_moe_trace_pin(rec, row, a->E, a->k, a->layer, a->pos[t], a->tok[t], ch, &margin);
        if (r) pin->counts[r - 1]++;
        if (r == 1) {
            float widest;
            memcpy(&widest, &pin->counts[2], 4);
            if (margin > widest) memcpy(&pin->counts[2], &margin, 4);
            kipp_om_moe_weights(row, a->k, a->norm, ch, w);
        }
    }
    kipp_moe_trace_use(host_trace);
    memset(a->grp_off, 0, ((size_t)a->E + 1) * 4);
    for (size_t i = 0; i < P; i++) a->grp_off[a->chosen[i] + 1]++;
    for (uint32_t e = 0; e < a->E; e++) a->grp_off[e + 1] += a->grp_off[e];
    uint32_t *at = malloc(((size_t)a->E + 1) * 4);
    memcpy(at, a->grp_off, ((size_t)a->E + 1) * 4);
    for (size_t i = 0; i < P; i++) {
        const uint32_t g = at[a->chosen[i]]++;
        a->pair_tok[g] = (int32_t)(i / a->k);
        a->slot_at[i] = g;
    }
    free(at);
}
int kipp_cuda_moe_route(float *logits, size_t ld, uint32_t n_tok, uint32_t n_expert,
                        uint32_t k, int norm, uint32_t layer, const uint32_t *pos,
                        const int32_t *tok, const kipp_cuda_moe_pin *pin, uint32_t *chosen,
                        float *weight, uint32_t *grp_off, int32_t *pair_tok, uint32_t *slot_at,
                        cudaStream_t stream) {
    struct rt a = {.logits = logits, .ld = ld, .n_tok = n_tok, .E = n_expert, .k = k, .norm = norm,
                   .layer = layer, .pos = pos, .tok = tok, .pinned = pin != NULL, .chosen = chosen,
                   .weight = weight, .grp_off = grp_off, .pair_tok = pair_tok, .slot_at = slot_at};
    if (pin) a.pin = *pin;
    return submit("moe_route", rt_exec, &a, sizeof a);
}
struct ms {
    float *out;
    size_t ldo;
    const float *ye;
    size_t ldy;
    const float *weight;
    const uint32_t *slot_at;
    uint32_t n, n_tok, k;
};
static void ms_exec(const void *p) {
    const struct ms *a = p;
    const size_t P = (size_t)a->n_tok * a->k;
    dev_read(a->weight, P * 4, "the weights");
    dev_read(a->slot_at, P * 4, "the pairs' places");
    for (size_t i = 0; i < P; i++) dev_read(a->ye + (size_t)a->slot_at[i] * a->ldy, (size_t)a->n * 4, "an expert's output row");
    rows_write(a->out, a->ldo, a->n_tok, a->n, "the sums");
    for (uint32_t t = 0; t < a->n_tok; t++)
        for (uint32_t i = 0; i < a->n; i++) {
            float acc = 0.0f;
            for (uint32_t s = 0; s < a->k; s++)
                acc += a->weight[t * a->k + s] * a->ye[(size_t)a->slot_at[t * a->k + s] * a->ldy + i];
            a->out[t * a->ldo + i] = acc;
        }
}
int kipp_cuda_moe_sum(float *out, size_t ldo, const float *ye, size_t ldy, const float *weight,
                      const uint32_t *slot_at, uint32_t n, uint32_t n_tok, uint32_t k,
                      cudaStream_t stream) {
    struct ms a = {out, ldo, ye, ldy, weight, slot_at, n, n_tok, k};
    return submit("moe_sum", ms_exec, &a, sizeof a);
}

static size_t elt_of(uint32_t t) { return t == 1 ? 4 : 2; }
/* the block of pos through the sequence's table row, whose width is max_blocks */
static uint32_t table_block(const uint32_t *table, uint32_t mb, uint32_t bs, uint32_t pos) {
    if (pos / bs >= mb)
        shim_fail("%s: position %u is past the block table's %u columns of %u", g_launch, pos, mb, bs);
    dev_read(table + pos / bs, 4, "a block table entry");
    return table[pos / bs];
}
static unsigned char *kv_addr(void *kv, uint32_t type, uint32_t L, uint32_t bs, uint32_t kvd,
                              uint32_t layer, const uint32_t *table, uint32_t mb, uint32_t pos,
                              int part) {
    const size_t pb = (size_t)L * bs * kvd * elt_of(type);
    return (unsigned char *)kv + (size_t)table_block(table, mb, bs, pos) * 2 * pb + part * pb +
           ((size_t)layer * bs + pos % bs) * kvd * elt_of(type);
}
static void put(uint32_t type, void *d, const float *s, uint32_t n) {
    uint16_t *h = d;
    dev_write(d, n * elt_of(type), "a K/V row");
    if (type == 1)
        memcpy(d, s, n * 4);
    else
        for (uint32_t i = 0; i < n; i++)
            h[i] = type == 2 ? kipp_f32_to_f16(s[i]) : kipp_f32_to_bf16(s[i]);
}
static void get(uint32_t type, float *d, const void *s, uint32_t n) {
    const uint16_t *h = s;
    dev_read(s, n * elt_of(type), "a K/V row");
    if (type == 1)
        memcpy(d, s, n * 4);
    else
        for (uint32_t i = 0; i < n; i++)
            d[i] = type == 2 ? kipp_f16_to_f32(h[i]) : kipp_bf16_to_f32(h[i]);
}
struct ks {
    void *kv;
    uint32_t type, L, bs, kvd, layer;
    const float *k;
    size_t ldk;
    const float *v;
    size_t ldv;
    uint32_t n_tok;
    const uint32_t *seq, *pos, *tab;
    uint32_t mb;
};
static void ks_exec(const void *p) {
    const struct ks *a = p;
    if (a->layer >= a->L) shim_fail("%s: layer %u of %u", g_launch, a->layer, a->L);
    dev_read(a->seq, (size_t)a->n_tok * 4, "the tokens' sequences");
    dev_read(a->pos, (size_t)a->n_tok * 4, "the tokens' positions");
    rows_read(a->k, a->ldk, a->n_tok, a->kvd, "k");
    rows_read(a->v, a->ldv, a->n_tok, a->kvd, "v");
    for (uint32_t t = 0; t < a->n_tok; t++) {
        const uint32_t *tb = a->tab + (size_t)a->seq[t] * a->mb;
        put(a->type, kv_addr(a->kv, a->type, a->L, a->bs, a->kvd, a->layer, tb, a->mb, a->pos[t], 0),
            a->k + t * a->ldk, a->kvd);
        put(a->type, kv_addr(a->kv, a->type, a->L, a->bs, a->kvd, a->layer, tb, a->mb, a->pos[t], 1),
            a->v + t * a->ldv, a->kvd);
    }
}
int kipp_cuda_kv_store(void *kv, uint32_t kv_type, uint32_t n_layer, uint32_t block_size,
                       uint32_t kv_dim, uint32_t layer, const float *k, size_t ld_k, const float *v,
                       size_t ld_v, uint32_t n_tok, const uint32_t *seq_of, const uint32_t *pos,
                       const uint32_t *tables, uint32_t max_blocks, cudaStream_t stream) {
    struct ks a = {kv, kv_type, n_layer, block_size, kv_dim, layer,  k,         ld_k,
                   v,  ld_v,    n_tok,   seq_of,     pos,    tables, max_blocks};
    return submit("kv_store", ks_exec, &a, sizeof a);
}
size_t kipp_cuda_attention_scratch_bytes(uint32_t n_tok, uint32_t n_head, uint32_t head_dim,
                                         uint32_t max_ctx) {
    return (size_t)n_tok * max_ctx;
}
struct at {
    const float *q;
    size_t ldq;
    const void *kv;
    uint32_t type, L, bs, kvd, layer, Nh, Nkv, D, n_tok;
    const uint32_t *seq, *pos, *tab;
    uint32_t mb, max_ctx;
    void *scratch;
    float *out;
    size_t ldo;
};
static void at_exec(const void *p) {
    const struct at *a = p;
    const uint32_t grp = a->Nh / a->Nkv;
    const float scale = 1.0f / sqrtf((float)a->D);
    if (a->layer >= a->L || a->Nh % a->Nkv || (size_t)a->Nkv * a->D > a->kvd)
        shim_fail("%s: layer %u of %u, heads %u / %u of %u, kv_dim %u", g_launch, a->layer, a->L,
                  a->Nh, a->Nkv, a->D, a->kvd);
    dev_read(a->seq, (size_t)a->n_tok * 4, "the tokens' sequences");
    dev_read(a->pos, (size_t)a->n_tok * 4, "the tokens' positions");
    rows_read(a->q, a->ldq, a->n_tok, (size_t)a->Nh * a->D, "q");
    dev_write(a->scratch, kipp_cuda_attention_scratch_bytes(a->n_tok, a->Nh, a->D, a->max_ctx),
              "the scratch");
    rows_write(a->out, a->ldo, a->n_tok, (size_t)a->Nh * a->D, "out");
    float *kr = malloc(a->kvd * 4), *vr = malloc(a->kvd * 4);
    for (uint32_t t = 0; t < a->n_tok; t++) {
        const uint32_t *tb = a->tab + (size_t)a->seq[t] * a->mb;
        const uint32_t n = a->pos[t] + 1;
        if (n > a->max_ctx) shim_fail("%s: pos %u >= max_ctx %u", g_launch, a->pos[t], a->max_ctx);
        float *sc = malloc(n * 4);
        for (uint32_t h = 0; h < a->Nh; h++) {
            const float *q = a->q + t * a->ldq + h * a->D;
            const size_t off = (size_t)(h / grp) * a->D;
            float mx = -INFINITY;
            for (uint32_t j = 0; j < n; j++) {
                get(a->type, kr,
                    kv_addr((void *)a->kv, a->type, a->L, a->bs, a->kvd, a->layer, tb, a->mb, j, 0),
                    a->kvd);
                float d = 0;
                for (uint32_t i = 0; i < a->D; i++)
                    d += q[i] * kr[off + i];
                sc[j] = d * scale;
                if (sc[j] > mx)
                    mx = sc[j];
            }
            float sum = 0;
            for (uint32_t j = 0; j < n; j++) {
                sc[j] = expf(sc[j] - mx);
                sum += sc[j];
            }
            float *o = a->out + t * a->ldo + h * a->D;
            memset(o, 0, a->D * 4);
            for (uint32_t j = 0; j < n; j++) {
                get(a->type, vr,
                    kv_addr((void *)a->kv, a->type, a->L, a->bs, a->kvd, a->layer, tb, a->mb, j, 1),
                    a->kvd);
                const float pr = sc[j] / sum;
                for (uint32_t i = 0; i < a->D; i++)
                    o[i] += pr * vr[off + i];
            }
        }
        free(sc);
    }
    free(kr);
    free(vr);
}
int kipp_cuda_attention(const float *q, size_t ld_q, const void *kv, uint32_t kv_type,
                        uint32_t n_layer, uint32_t block_size, uint32_t kv_dim, uint32_t layer,
                        uint32_t n_head, uint32_t n_kv_head, uint32_t head_dim, uint32_t n_tok,
                        const uint32_t *seq_of, const uint32_t *pos, const uint32_t *tables,
                        uint32_t max_blocks, uint32_t max_ctx, void *scratch, float *out,
                        size_t ld_out, cudaStream_t stream) {
    struct at a = {q,      ld_q,       kv,        kv_type,  n_layer, block_size, kv_dim,
                   layer,  n_head,     n_kv_head, head_dim, n_tok,   seq_of,     pos,
                   tables, max_blocks, max_ctx,   scratch,  out,     ld_out};
    return submit("attention", at_exec, &a, sizeof a);
}
void kipp_cuda_set_fault(int mode, uint32_t n_blocks) {}
__attribute__((destructor)) static void shim_report(void) {
    if (getenv("SHIM_REPORT")) {
        fprintf(stderr, "shim: %d graph captures, %d replays\n", shim_n_captures, shim_n_replays);
        fprintf(stderr, "shim: device memory peak %zu bytes\n", g_peak);
    }
}
cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr a, int d) {
    *v = 1;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
