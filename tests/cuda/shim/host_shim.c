/* host_shim.c — a host-memory stand-in for the CUDA runtime and for the launchers of
 * src/backend/cuda/kernels.h, so the cuda backend's host side (cuda.c, forward.c: weight
 * upload, batching and chunking, the pinned staging copy, block tables, the private store
 * of recomputation, CUDA-graph capture and replay) runs under the ordinary model gates on a
 * machine without a GPU (build/kipp_test_cuda_shim, tests/cuda/test_cuda_shim.sh).
 * "Device" memory is malloc'd and filled with 0xA5 so a read of a never-written byte shows;
 * each launcher is a plain C version of the kernel's definition (the numbers of cpu-ref);
 * a stream runs work at once unless it is capturing, and a graph replays what it captured.
 * It says nothing about the real kernels (tests/cuda/ops_*.c check those, on a GPU).
 * SHIM_DRIVER / SHIM_CC fake the driver version and compute capability; SHIM_REPORT=1
 * prints the captures and replays at exit. */
#include "backend/cuda/kernels.h"
#include "core/types.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    unsigned char args[256];
};
static struct CUgraph_st *g_cap; /* capturing into */
int shim_n_captures, shim_n_replays;

static int submit(exec_fn fn, const void *a, size_t n) {
    if (n > 256)
        abort();
    if (g_cap) {
        g_cap->calls = realloc(g_cap->calls, (g_cap->n + 1) * sizeof *g_cap->calls);
        g_cap->calls[g_cap->n].fn = fn;
        memcpy(g_cap->calls[g_cap->n].args, a, n);
        g_cap->n++;
    } else
        fn(a);
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
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
    *f = 100ull << 30;
    *t = 141ull << 30;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    memset(*p, 0xA5, n);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int fl) {
    *p = malloc(n);
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}
cudaError_t cudaHostUnregister(void *p) { return cudaSuccess; }
cudaError_t cudaHostRegister(void *p, size_t n, unsigned int f) { return cudaSuccess; }
cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned int f) {
    *d = h;
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k) {
    memcpy(d, s, n);
    return cudaSuccess;
}
struct cp {
    void *d;
    const void *s;
    size_t n;
};
static void cp_exec(const void *a) {
    const struct cp *c = a;
    memcpy(c->d, c->s, c->n);
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k,
                            cudaStream_t st) {
    if (g_cap)
        abort(); /* forward.c keeps copies outside graphs */
    struct cp c = {d, s, n};
    return submit(cp_exec, &c, sizeof c);
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f) {
    *s = calloc(1, sizeof **s);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    free(s);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return cudaSuccess; }
const char *cudaGetErrorString(cudaError_t e) { return "shim error"; }
const char *cudaGetErrorName(cudaError_t e) { return "shimError"; }
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
    for (int i = 0; i < e->n; i++)
        e->calls[i].fn(e->calls[i].args);
    return cudaSuccess;
}

/* ---- kernels ---- */
int kipp_cuda_mm_type_supported(uint32_t t) { return kipp_type_supported(t); }
size_t kipp_cuda_matmul_scratch_bytes(uint32_t a, uint32_t n_in, uint32_t n_tok) {
    return n_tok > 8 ? 4ull * n_in * n_tok : 0;
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
};
static void mm_exec(const void *p) {
    const struct mm *a = p;
    float *row = malloc(a->n_in * 4);
    const size_t rb = kipp_type_row_bytes(a->type, a->n_in);
    for (uint32_t o = 0; o < a->n_out; o++) {
        kipp_dequantize_row(a->type, (const char *)a->w + o * rb, row, a->n_in);
        for (uint32_t t = 0; t < a->n_tok; t++) {
            float acc = 0;
            const float *x = a->x + t * a->ldx;
            for (uint32_t k = 0; k < a->n_in; k++)
                acc += row[k] * x[k];
            a->y[t * a->ldy + o] = acc;
        }
    }
    free(row);
}
int kipp_cuda_matmul(uint32_t type, const void *w, uint32_t n_in, uint32_t n_out, const float *x,
                     size_t ldx, uint32_t n_tok, float *y, size_t ldy, void *scratch,
                     cudaStream_t stream) {
    struct mm a = {type, w, n_in, n_out, x, ldx, n_tok, y, ldy};
    return submit(mm_exec, &a, sizeof a);
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
    for (uint32_t t = 0; t < a->n_tok; t++)
        kipp_dequantize_row(a->type, (const char *)a->w + a->ids[t] * rb, a->out + t * a->ldo,
                            a->n);
}
int kipp_cuda_get_rows(uint32_t type, const void *w, uint32_t n, const int32_t *ids, uint32_t n_tok,
                       float *out, size_t ldo, cudaStream_t stream) {
    struct gr a = {type, w, n, ids, n_tok, out, ldo};
    return submit(gr_exec, &a, sizeof a);
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
    return submit(rn_exec, &a, sizeof a);
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
    return submit(rp_exec, &a, sizeof a);
}
struct sw {
    const float *g, *u;
    size_t ld;
    uint32_t n, n_tok;
    float *out;
};
static void sw_exec(const void *p) {
    const struct sw *a = p;
    for (uint32_t t = 0; t < a->n_tok; t++)
        for (uint32_t i = 0; i < a->n; i++) {
            const float z = a->g[t * a->ld + i];
            a->out[t * a->ld + i] = z / (1.0f + expf(-z)) * a->u[t * a->ld + i];
        }
}
int kipp_cuda_swiglu(const float *gate, const float *up, size_t ld, uint32_t n, uint32_t n_tok,
                     float *out, cudaStream_t stream) {
    struct sw a = {gate, up, ld, n, n_tok, out};
    return submit(sw_exec, &a, sizeof a);
}
struct ad {
    float *x;
    const float *y;
    size_t ld;
    uint32_t n, n_tok;
};
static void ad_exec(const void *p) {
    const struct ad *a = p;
    for (uint32_t t = 0; t < a->n_tok; t++)
        for (uint32_t i = 0; i < a->n; i++)
            a->x[t * a->ld + i] += a->y[t * a->ld + i];
}
int kipp_cuda_add(float *x, const float *y, size_t ld, uint32_t n, uint32_t n_tok,
                  cudaStream_t stream) {
    struct ad a = {x, y, ld, n, n_tok};
    return submit(ad_exec, &a, sizeof a);
}

static size_t elt_of(uint32_t t) { return t == 1 ? 4 : 2; }
static unsigned char *kv_addr(void *kv, uint32_t type, uint32_t L, uint32_t bs, uint32_t kvd,
                              uint32_t layer, const uint32_t *table, uint32_t pos, int part) {
    const size_t pb = (size_t)L * bs * kvd * elt_of(type);
    return (unsigned char *)kv + (size_t)table[pos / bs] * 2 * pb + part * pb +
           ((size_t)layer * bs + pos % bs) * kvd * elt_of(type);
}
static void put(uint32_t type, void *d, const float *s, uint32_t n) {
    uint16_t *h = d;
    if (type == 1)
        memcpy(d, s, n * 4);
    else
        for (uint32_t i = 0; i < n; i++)
            h[i] = type == 2 ? kipp_f32_to_f16(s[i]) : kipp_f32_to_bf16(s[i]);
}
static void get(uint32_t type, float *d, const void *s, uint32_t n) {
    const uint16_t *h = s;
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
    for (uint32_t t = 0; t < a->n_tok; t++) {
        const uint32_t *tb = a->tab + (size_t)a->seq[t] * a->mb;
        put(a->type, kv_addr(a->kv, a->type, a->L, a->bs, a->kvd, a->layer, tb, a->pos[t], 0),
            a->k + t * a->ldk, a->kvd);
        put(a->type, kv_addr(a->kv, a->type, a->L, a->bs, a->kvd, a->layer, tb, a->pos[t], 1),
            a->v + t * a->ldv, a->kvd);
    }
}
int kipp_cuda_kv_store(void *kv, uint32_t kv_type, uint32_t n_layer, uint32_t block_size,
                       uint32_t kv_dim, uint32_t layer, const float *k, size_t ld_k, const float *v,
                       size_t ld_v, uint32_t n_tok, const uint32_t *seq_of, const uint32_t *pos,
                       const uint32_t *tables, uint32_t max_blocks, cudaStream_t stream) {
    struct ks a = {kv, kv_type, n_layer, block_size, kv_dim, layer,  k,         ld_k,
                   v,  ld_v,    n_tok,   seq_of,     pos,    tables, max_blocks};
    return submit(ks_exec, &a, sizeof a);
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
    float *out;
    size_t ldo;
};
static void at_exec(const void *p) {
    const struct at *a = p;
    const uint32_t grp = a->Nh / a->Nkv;
    const float scale = 1.0f / sqrtf((float)a->D);
    float *kr = malloc(a->kvd * 4), *vr = malloc(a->kvd * 4);
    for (uint32_t t = 0; t < a->n_tok; t++) {
        const uint32_t *tb = a->tab + (size_t)a->seq[t] * a->mb;
        const uint32_t n = a->pos[t] + 1;
        if (n > a->max_ctx) {
            fprintf(stderr, "shim: pos %u >= max_ctx %u\n", a->pos[t], a->max_ctx);
            abort();
        }
        float *sc = malloc(n * 4);
        for (uint32_t h = 0; h < a->Nh; h++) {
            const float *q = a->q + t * a->ldq + h * a->D;
            const size_t off = (size_t)(h / grp) * a->D;
            float mx = -INFINITY;
            for (uint32_t j = 0; j < n; j++) {
                get(a->type, kr,
                    kv_addr((void *)a->kv, a->type, a->L, a->bs, a->kvd, a->layer, tb, j, 0),
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
                    kv_addr((void *)a->kv, a->type, a->L, a->bs, a->kvd, a->layer, tb, j, 1),
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
                   tables, max_blocks, max_ctx,   out,      ld_out};
    return submit(at_exec, &a, sizeof a);
}
void kipp_cuda_set_fault(int mode, uint32_t n_blocks) {}
__attribute__((destructor)) static void shim_report(void) {
    if (getenv("SHIM_REPORT"))
        fprintf(stderr, "shim: %d graph captures, %d replays\n", shim_n_captures, shim_n_replays);
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
