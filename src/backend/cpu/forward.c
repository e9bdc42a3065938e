/* forward.c — the cpu backend's batched forward pass (see forward.h): the operations of
 * src/backend/ops.h over all the rows of a batch, run layer by layer by the one driver of the
 * layer program (src/backend/program.c), plus a fused path for the per-token ops before the
 * K/V store (op_fused; KIPP_PLAIN_OPS=1 runs the plain operations instead).
 *
 * One batch runs layer by layer over all of its tokens: rows of activations X[n][H] go
 * through RMSNorm, are converted once into the activation format of the weight's kernel
 * (kernels.h) and multiplied by each weight matrix with one gemm call per thread (the
 * threads split the weight's output rows, so each weight byte is read once per batch, not
 * once per token). Q/K/V share one converted input and one parallel region, as do the MLP's
 * gate and up projections.
 *
 * Attention: the batch is cut into runs (consecutive tokens of one sequence at consecutive
 * positions: a prompt being prefilled, or one token of a decoding sequence). Each work item
 * is (run, KV head, chunk of at most ATT_CHUNK of the run's tokens): it gathers the K rows
 * 0..last position into a contiguous f32 tile and V transposed — every row through
 * kipp_host_kv_row(), the one addressing function, converted from the KV type — then
 * computes scores = K·q for all the chunk's query heads with the f32 gemm, a causal softmax,
 * and out = V^T·p with the gemm again. A lone decoding token reads the rows in place (f32)
 * or converts them a segment at a time into a small f32 tile (f16/bf16: half the memory
 * traffic). Items are pulled from an atomic counter so causal imbalance evens out over the
 * threads.
 *
 * The recomputation path (forward_nocache) is the same code with a private, contiguous f32
 * K/V store instead of the pool, holding K/V rounded through the KV type. No ISA-specific
 * code here: only kernels_*.c use intrinsics. */
#define _DEFAULT_SOURCE /* madvise */
#include "backend/cpu/forward.h"

#include "backend/host_kv.h"
#include "backend/moe.h"
#include "backend/ops.h"
#include "model/arch.h"
#include "model/rope.h"

#include "core/error.h"
#include "core/types.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ATT_CHUNK 64u   /* query tokens per attention work item */
#define VT_TILE 16u     /* V rows transposed together (att_item; at most ATT_CHUNK x group) */
#define PAR_MIN_TOKENS 4 /* below this, per-token elementwise work stays on the caller */
#define SEG_ROWS 64u     /* f16/bf16 decode: KV rows converted to f32 at a time */
#define SWIGLU_INLINE 16384u /* swiglu elements below which the caller does them (no thread wake-up) */

/* Where attention reads and writes K/V: the context's host KV storage, or (recomputation) a
 * private contiguous f32 store of the current layer for a single sequence. */
typedef struct {
    const kipp_host_kv *kv; /* NULL: private store */
    float *priv_k, *priv_v; /* [n][kv_dim], current layer (private store only) */
} kv_src;

/* The address of a K or V row: kv_dim elements of the storage's type (f32 in the private
 * store). The block table is turned into addresses here and only here. */
static void *kv_at(const kv_src *src, const kipp_kv_seq *seq, uint32_t layer, uint32_t pos,
                   kipp_kv_part part, kipp_kv_access access, uint32_t kv_dim) {
    if (!src->kv) return (part == KIPP_KV_K ? src->priv_k : src->priv_v) + (size_t)pos * kv_dim;
    return kipp_host_kv_row(src->kv, seq, layer, pos, part, access);
}

static kipp_kv_type src_type(const kv_src *src, kipp_kv_part part) {
    return src->kv ? kipp_host_kv_type(src->kv, part) : KIPP_KV_TYPE_F32;
}

/* Bytes from a row's start to head h's D values in a row of type ty (D is a multiple of
 * the quantized types' 32-value blocks: checked when the context is made). */
#define head_off(f, ty, h) ((size_t)kipp_kv_row_bytes((ty), (uint64_t)(h) * (f)->D))

typedef struct {
    const kipp_kv_seq *seq; /* NULL for the private store */
    uint32_t first;         /* batch index of the run's first token */
    uint32_t n;             /* tokens in the run */
    uint32_t pos0;          /* position of the first token */
} run_t;

typedef struct {
    const void *src; /* the tensor's GGUF data (the key); NULL: empty slot */
    void *data;      /* its packed form */
    size_t row_bytes; /* packed bytes per row (a group of 16 rows / 16) */
    const kipp_cpu_packer *p; /* the packer that wrote it */
    uint32_t type;
    uint64_t rows; /* rows packed (a head may be the first rows of a tied embedding table) */
} packed_w;

typedef struct {
    float *kc;   /* [max_kv][D]        gathered K rows */
    float *vt;   /* [D][max_kv]        V transposed (only where the level lacks pv_rows) */
    const void **vrows; /* [max_kv]     V rows where they lie (pv_rows) */
    float *qc;   /* [ATT_CHUNK*G][D]   the chunk's query rows */
    float *sc;   /* [ATT_CHUNK*G][max_kv] scores, then probabilities */
    float *oc;   /* [ATT_CHUNK*G][D]   outputs */
    uint32_t cap_kv;
} att_scratch;

struct kipp_cpu_fwd {
    const kipp_model *m;
    kipp_gguf_tensor head; /* the lm_head's first n_logits rows (kipp_model_head) */
    const kipp_cpu_kernels *k;
    kipp_threadpool *tp;
    int n_threads;
    /* H hidden size, F MLP size, D head dim, Nh query heads, Nkv KV heads, QD = Nh*D,
     * kv_dim = Nkv*D, group = Nh/Nkv query heads per KV head */
    uint32_t n_ctx, H, F, D, Nh, Nkv, QD, kv_dim, group;
    uint32_t Fmax;          /* the widest FFN: F, or one expert's (Fe) when wider */
    uint32_t E, Fe, K;      /* a mixture-of-experts FFN: experts, one expert's size, experts per token */
    kipp_kv_type kv_type, kv_type_v; /* the cache's K and V types; the private store rounds through them */
    /* norm weights (and qwen2's q/k/v biases) dequantized once to f32; NULL rows where the
     * architecture has no such tensor */
    float **attn_norm, **ffn_norm, **q_norm, **k_norm, *out_norm, **bq, **bk, **bv;
    double *inv_freq; /* [D/2] model/rope.c's, as cpu-ref uses them */
    double rope_mag;  /* cos/sin magnitude (YaRN's attention factor; 1 otherwise) */
    /* batch scratch for n <= cap tokens, grown to the largest batch seen; row t is token t */
    uint32_t cap;
    float *x;    /* [cap][H]  residual stream */
    float *xn;   /* [cap][H]  RMSNormed input of the current block */
    float *q;    /* [cap][QD] queries (normed, roped), heads concatenated */
    float *kx;   /* [cap][kv_dim] this layer's keys (normed, roped) before the cache write */
    float *vx;   /* [cap][kv_dim] this layer's values */
    float *att;  /* [cap][QD] attention output, heads concatenated */
    float *proj; /* [cap][H]  output of wo / w_down, added into x */
    float *gate; /* [cap][F]  gate projection, then silu(gate) * up */
    float *up;   /* [cap][F]  up projection */
    float *rcos, *rsin; /* [cap][D/2] */
    /* a mixture-of-experts FFN (NULL when dense) */
    float *router;     /* [cap][E] router logits, then probabilities */
    uint32_t *chosen;  /* [cap][K] each token's experts, best first */
    float *chosen_w;   /* [cap][K] their weights */
    uint32_t *by_exp;  /* [cap*K] (token * K + slot), grouped by expert, tokens ascending */
    uint32_t *exp_off; /* [E + 1] where each expert's group starts in by_exp (allocated at init) */
    const int32_t *nc_tokens; /* kipp_cpu_fwd_nocache's tokens while it runs (the routing trace's key) */
    float **router_w;  /* [n_layer][E][H] each layer's router in f32: the file's F32 rows, else dequantized */
    uint32_t *slot_at; /* [cap*K] token * K + slot -> its index in by_exp */
    float *xg;         /* [cap*K][H] the pairs' inputs in group order */
    float *ye;         /* [cap*K][H] every (token, slot)'s expert output, in by_exp order */
    unsigned char *act; /* converted activations */
    size_t act_cap;
    float *y2; /* [n_threads][2 cap][Y2_ROWS] each thread's two-plane gemm output */
    run_t *runs;
    uint32_t *wanted; /* batch indices of tokens whose logits are wanted */
    float *xw;        /* [cap][H] their final hidden rows */
    att_scratch *ts;  /* [n_threads] */
    /* weights repacked at load (kernels.h: kipp_cpu_packer), found by their data
     * pointer in an open-addressed table of n_packed_cap slots */
    packed_w *packed;
    uint32_t n_packed_cap;
    struct mm_job_s *mmj; /* the matmul job (matmul_group) */
    /* expert_mm's lists of one pass's weights (MM_GROUP_MAX each; NULL when dense) */
    const kipp_gguf_tensor **mm_ws;
    float **mm_ys;
    size_t *mm_ld;
    uint32_t *mm_x0, *mm_nx;
    uint64_t packed_bytes;
    /* the pass the operations run on (set by run_layers) */
    struct {
        const kipp_batch *b;    /* NULL: recomputation (token t at position t) */
        const void *src;        /* the kv_src */
        const run_t *runs;
        const uint32_t *run_of;
        uint32_t n, n_runs, n_items;
        uint32_t *item_run, *item_t0; /* attention items (run, first token), cheapest first */
    } pass;
};

/* ---- small numerics (identical formulas to cpu-ref) ------------------------------------ */

static void rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps) {
    double ss = 0.0;
    for (uint32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (uint32_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

static void rope_head(float *h, const float *c, const float *s, uint32_t half) {
    for (uint32_t i = 0; i < half; i++) {
        const float a = h[i], b = h[i + half];
        h[i] = a * c[i] - b * s[i];
        h[i + half] = a * s[i] + b * c[i];
    }
}

static float silu(float z) { return z / (1.0f + expf(-z)); }

/* ---- weights repacked at load ------------------------------------------------------------- */

static size_t packed_slot(const kipp_cpu_fwd *f, const void *src) {
    uintptr_t h = (uintptr_t)src;
    h ^= h >> 17;
    h *= (uintptr_t)0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 7) & (f->n_packed_cap - 1);
}

static const packed_w *packed_find(const kipp_cpu_fwd *f, const void *src) {
    if (!f->n_packed_cap) return NULL;
    for (size_t i = packed_slot(f, src);; i = (i + 1) & (f->n_packed_cap - 1)) {
        if (f->packed[i].src == src) return &f->packed[i];
        if (!f->packed[i].src) return NULL;
    }
}

typedef struct {
    const kipp_cpu_packer *p;
    const kipp_gguf_tensor *t;
    void *out;
    uint64_t g0; /* the first group of this slab */
} pack_job;

static void pack_groups(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const pack_job *j = ctx;
    const uint64_t rows = (uint64_t)j->t->ne[1], k = (uint64_t)j->t->ne[0];
    begin += j->g0;
    end += j->g0;
    const uint64_t r1 = 16 * end < rows ? 16 * end : rows;
    j->p->pack(j->t->type, j->t->data, (size_t)kipp_type_row_bytes(j->t->type, k), rows, 16 * begin, r1, k, j->out);
}

/* Drops the whole pages of [p, p + n) from this process (file pages of the read-only
 * mapping: a later read faults them back in; nothing is lost). */
static void release_pages(const void *p, size_t n) {
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !n) return;
    const uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    const uintptr_t e = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}

/* GGUF bytes packed per pass before their pages are released: the load's peak RSS holds
 * the packed weights so far plus one slab of file pages, not a whole tensor twice (a tied
 * 0.6B embedding table is 165 MB) */
#define PACK_SLAB_BYTES ((size_t)16 << 20)

/* Packs t when its type's kernels pack it (a tensor met twice, e.g. a tied head, once) and
 * releases the whole GGUF pages inside it from this process: they are file pages, so a
 * later read faults them back in (an embedding row of a tied lm_head beyond the rows the
 * head keeps; the others are read from the packed copy, embed_rows), and the resident
 * weights are the packed ones, not both. */
static int pack_tensor(kipp_cpu_fwd *f, const kipp_gguf_tensor *t) {
    if (!t || packed_find(f, t->data)) return 1;
    const uint64_t rows = (uint64_t)t->ne[1], k = (uint64_t)t->ne[0];
    const kipp_cpu_packer *p = kipp_cpu_kernels_mm(f->k, t->type).packer;
    const size_t bytes = p ? p->bytes(t->type, rows, k) : 0;
    if (!bytes) return 1;
    void *out = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!out) return 0;
    /* slab by slab, each slab's file pages released once it is packed */
    const size_t src_rb = (size_t)kipp_type_row_bytes(t->type, k);
    const uint64_t groups = (rows + 15) / 16;
    uint64_t slab = PACK_SLAB_BYTES / (16 * src_rb);
    if (slab == 0) slab = 1;
    for (uint64_t g0 = 0; g0 < groups; g0 += slab) {
        const uint64_t g1 = groups - g0 < slab ? groups : g0 + slab;
        pack_job j = {.p = p, .t = t, .out = out, .g0 = g0};
        kipp_threadpool_for(f->tp, g1 - g0, 1, pack_groups, &j);
        const uint64_t r1 = 16 * g1 < rows ? 16 * g1 : rows;
        release_pages((const char *)t->data + 16 * g0 * src_rb, (size_t)(r1 - 16 * g0) * src_rb);
    }
    size_t s = packed_slot(f, t->data);
    while (f->packed[s].src) s = (s + 1) & (f->n_packed_cap - 1);
    f->packed[s] = (packed_w){.src = t->data, .data = out, .row_bytes = p->bytes(t->type, 16, k) / 16, .p = p,
                              .type = t->type, .rows = rows};
    f->packed_bytes += bytes;
    release_pages(t->data, t->n_bytes); /* the pages that straddled two slabs */
    return 1;
}

/* Every matrix whose type's kernels pack it (kernels.h: kipp_cpu_packer): each layer's
 * seven (or its four and 3 E expert matrices; the router runs router_rows) and the head. */
static int pack_weights(kipp_cpu_fwd *f) {
    const uint32_t L = f->m->hp.n_layer;
    uint64_t cap = 1;
    while (cap < 2 * ((uint64_t)(8 + 3 * f->E) * L + 1)) cap *= 2;
    f->packed = calloc(cap, sizeof *f->packed);
    if (!f->packed) return 0;
    f->n_packed_cap = (uint32_t)cap;
    for (uint32_t l = 0; l < L; l++) {
        const kipp_layer_weights *w = &f->m->layers[l];
        const kipp_gguf_tensor *lt[] = {w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down};
        for (size_t i = 0; i < sizeof lt / sizeof lt[0]; i++)
            if (!pack_tensor(f, lt[i])) return 0;
        for (uint32_t e = 0; w->exp_gate && e < f->E; e++)
            if (!pack_tensor(f, &w->exp_gate[e]) || !pack_tensor(f, &w->exp_up[e]) || !pack_tensor(f, &w->exp_down[e]))
                return 0;
    }
    return pack_tensor(f, &f->head);
}

uint64_t kipp_cpu_fwd_packed_bytes(const kipp_cpu_fwd *f) { return f->packed_bytes; }

/* ---- matrix products ---------------------------------------------------------------------- */

/* weights one matmul job takes: a dense layer's q, k, v; a MoE layer's experts' gate and up
 * (2 E) or down (E) */
#define MM_MAX 3
#define MM_GROUP_MAX (2 * 1024) /* model.c's KIPP_MAX_EXPERTS */
#define Y2_ROWS 64 /* weight rows per two-plane gemm call (bounds its scratch) */

typedef struct mm_job_s {
    uint32_t count;
    const kipp_gguf_tensor *w[MM_GROUP_MAX];
    const void *wdata[MM_GROUP_MAX]; /* the weight's rows: its GGUF data, or its packed form */
    size_t wrb[MM_GROUP_MAX];        /* bytes per row of wdata */
    float *y[MM_GROUP_MAX];
    uint64_t rows[MM_GROUP_MAX];
    size_t ldy[MM_GROUP_MAX];
    uint32_t x0[MM_GROUP_MAX];    /* the first input row weight i multiplies */
    uint32_t n_tok[MM_GROUP_MAX]; /* its input rows */
    kipp_cpu_gemm_fn gemm; /* NULL: dequantize fallback */
    int planes;            /* 2: 8-bit activations in two planes, summed (see split_q8) */
    float *y2;             /* planes == 2: per thread [2 n_tok][Y2_ROWS], y2_stride apart */
    size_t y2_stride;
    const void *x;         /* every input row, converted once */
    size_t x_row_bytes;
    uint64_t k;
} mm_job;

static void mm_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    const mm_job *j = ctx;
    uint64_t base = 0;
    for (uint32_t i = 0; i < j->count && begin < end; i++) {
        const uint64_t lo = base, hi = base + j->rows[i];
        base = hi;
        if (begin >= hi) continue;
        const uint64_t b = begin - lo, e = (end < hi ? end : hi) - lo;
        const kipp_gguf_tensor *w = j->w[i];
        const size_t rb = j->wrb[i];
        const char *wp = (const char *)j->wdata[i] + b * rb;
        const uint32_t n_tok = j->n_tok[i];
        const char *x = (const char *)j->x + (size_t)j->x0[i] * j->planes * j->x_row_bytes;
        if (j->gemm && j->planes == 2) {
            /* Y2_ROWS rows at a time into this thread's scratch, then the planes summed */
            float *y2 = j->y2 + (size_t)ith * j->y2_stride;
            for (uint64_t c = b; c < e; c += Y2_ROWS) {
                const uint64_t nr = e - c < Y2_ROWS ? e - c : Y2_ROWS;
                j->gemm((const char *)j->wdata[i] + c * rb, rb, nr, x, j->x_row_bytes, 2 * (uint64_t)n_tok, y2, nr,
                        j->k);
                for (uint32_t t = 0; t < n_tok; t++) {
                    const float *yh = y2 + (size_t)2 * t * nr, *yl = yh + nr;
                    float *y = j->y[i] + (size_t)t * j->ldy[i] + c;
                    for (uint64_t r = 0; r < nr; r++) y[r] = yh[r] + yl[r];
                }
            }
        } else if (j->gemm)
            j->gemm(wp, rb, e - b, x, j->x_row_bytes, n_tok, j->y[i] + b, j->ldy[i], j->k);
        else
            kipp_cpu_gemm_dequant(w->type, wp, rb, e - b, x, j->x_row_bytes, n_tok, j->y[i] + b, j->ldy[i], j->k);
        begin = hi;
    }
}

typedef struct {
    kipp_cpu_quant_fn q;
    const float *x;
    size_t ldx;
    unsigned char *out;
    size_t out_bytes;
    uint64_t k;
} conv_job;

static void conv_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const conv_job *j = ctx;
    for (uint64_t t = begin; t < end; t++) j->q(j->x + t * j->ldx, j->out + t * j->out_bytes, j->k);
}

/* 8-bit activations alone (d = amax/127) cost ~5e-5 NMSE per matrix product, which over a
 * model's layers exceeds the gate's 1e-4 against cpu-ref. So each row is quantized to 14
 * bits, X = round(x / d) with d = amax / (127 * 128), and split into two 8-bit planes
 * X = 128 * hi + lo (hi in [-127, 127], lo in [0, 127]): plane rows 2t (scale 128 d) and
 * 2t + 1 (scale d) go through the same 8-bit kernels as two tokens — the weights are still
 * read once — and the two results are summed. Error: ~1/16256 of the block's amax. */
typedef struct {
    uint32_t act;
    kipp_cpu_quant2_fn q2; /* the level's converter, or the portable one */
    const float *x;
    size_t ldx;
    unsigned char *out;
    size_t out_bytes;
    uint64_t k;
} split_job;

static void split_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const split_job *j = ctx;
    for (uint64_t t = begin; t < end; t++) {
        unsigned char *hi = j->out + 2 * t * j->out_bytes;
        j->q2(j->x + t * j->ldx, hi, hi + j->out_bytes, j->k);
    }
}

/* Converts n rows of x (ldx floats apart) into f->act in format act and returns the row
 * stride in bytes; f32 kernels read x in place (returns 0). */
static size_t convert(kipp_cpu_fwd *f, uint32_t act, const float *x, size_t ldx, uint32_t n,
                      uint64_t k) {
    if (act == KIPP_ACT_F32) return 0;
    if (act == KIPP_ACT_Q8_0 || act == KIPP_ACT_Q8_K) {
        split_job sj = {.act = act, .q2 = f->k->quant2[act], .x = x, .ldx = ldx, .out = f->act, .k = k};
        if (!sj.q2) sj.q2 = act == KIPP_ACT_Q8_0 ? kipp_cpu_quant2_q8_0_scalar : kipp_cpu_quant2_q8_k_scalar;
        sj.out_bytes = kipp_cpu_act_row_bytes(act, k);
        if (n >= PAR_MIN_TOKENS)
            kipp_threadpool_for(f->tp, n, 1, split_rows, &sj);
        else
            split_rows(&sj, 0, n, 0);
        return sj.out_bytes;
    }
    conv_job j = {.q = f->k->quant[act], .x = x, .ldx = ldx, .out = f->act, .k = k};
    if (!j.q)
        j.q = act == KIPP_ACT_BF16     ? kipp_cpu_quant_bf16_scalar
              : act == KIPP_ACT_BF16X2 ? kipp_cpu_quant_bf16x2_scalar
              : act == KIPP_ACT_Q8_0   ? kipp_cpu_quant_q8_0_scalar
              : act == KIPP_ACT_Q16    ? kipp_cpu_quant_q16_scalar
                                       : kipp_cpu_quant_q8_k_scalar;
    j.out_bytes = kipp_cpu_act_row_bytes(act, k);
    if (n >= PAR_MIN_TOKENS)
        kipp_threadpool_for(f->tp, n, 1, conv_rows, &j);
    else
        conv_rows(&j, 0, n, 0);
    return j.out_bytes;
}

/* y_i[t][.] = W_i x_{x0_i + t} for t < n_i, for count weights of one type, input length and
 * packing (x: rows of k floats, ldx apart; x0 / nx NULL: every weight takes rows 0..n-1). The
 * input rows are converted once for all the weights, and the weights' rows are shared out
 * among the threads in one job: a dense layer's q, k and v, or every chosen expert's gate and
 * up in one pass and their downs in another. */
static void matmul_group(kipp_cpu_fwd *f, uint32_t count, const kipp_gguf_tensor *const *ws, float *const *ys,
                         const size_t *ldys, const uint32_t *x0, const uint32_t *nx, const float *x, size_t ldx,
                         uint32_t n) {
    kipp_cpu_mm mm = kipp_cpu_kernels_mm(f->k, ws[0]->type);
    const int packed = packed_find(f, ws[0]->data) != NULL;
    uint32_t n_max = 0; /* the most rows one weight takes: the kernel for that many tokens */
    for (uint32_t i = 0; i < count; i++)
        if ((nx ? nx[i] : n) > n_max) n_max = nx ? nx[i] : n;
    if (packed) { /* repacked at load: one kernel for every token count */
        mm.gemm = mm.packer->gemm;
        mm.act = mm.packer->act;
    } else { /* the kernel for n tokens (kernels.h) */
        mm.gemm = kipp_cpu_mm_for(&mm, n_max, &mm.act);
    }
    mm_job *j = f->mmj; /* too large for a stack: one per context, one matmul at a time */
    j->gemm = mm.gemm;
    j->k = (uint64_t)ws[0]->ne[0];
    uint64_t total = 0;
    for (uint32_t i = 0; i < count; i++) {
        const packed_w *pw = packed_find(f, ws[i]->data);
        j->wdata[i] = pw ? pw->data : ws[i]->data;
        j->wrb[i] = pw ? pw->row_bytes : (size_t)kipp_type_row_bytes(ws[i]->type, j->k);
        j->w[i] = ws[i];
        j->y[i] = ys[i];
        j->ldy[i] = ldys[i];
        j->rows[i] = (uint64_t)ws[i]->ne[1];
        j->x0[i] = x0 ? x0[i] : 0;
        j->n_tok[i] = nx ? nx[i] : n;
        total += j->rows[i];
    }
    j->count = count;
    const uint32_t act = mm.gemm ? mm.act : KIPP_ACT_F32;
    j->planes = act == KIPP_ACT_Q8_0 || act == KIPP_ACT_Q8_K ? 2 : 1;
    j->y2 = f->y2;
    j->y2_stride = (size_t)2 * n_max * Y2_ROWS;
    const size_t rb = convert(f, j->gemm ? act : KIPP_ACT_F32, x, ldx, n, j->k);
    j->x = rb ? (const void *)f->act : (const void *)x;
    j->x_row_bytes = rb ? rb : ldx * sizeof(float);
    kipp_threadpool_for(f->tp, total, 16, mm_rows, j);
}

/* y_i[t][.] = W_i x_t for up to MM_MAX weights sharing one input (n rows of k floats, ldx
 * apart). Weights whose kernels want different activation formats run one at a time. */
static void matmul(kipp_cpu_fwd *f, uint32_t count, const kipp_gguf_tensor *const *ws,
                   float *const *ys, const size_t *ldys, const float *x, size_t ldx, uint32_t n) {
    uint32_t done = 0;
    while (done < count) {
        /* group the following weights of the same type, input length and packing */
        const uint32_t first = done;
        const int packed = packed_find(f, ws[first]->data) != NULL;
        while (done < count && done - first < MM_MAX && ws[done]->type == ws[first]->type &&
               ws[done]->ne[0] == ws[first]->ne[0] && (packed_find(f, ws[done]->data) != NULL) == packed)
            done++;
        matmul_group(f, done - first, ws + first, ys + first, ldys + first, NULL, NULL, x, ldx, n);
    }
}

static void matmul1(kipp_cpu_fwd *f, const kipp_gguf_tensor *w, float *y, size_t ldy,
                    const float *x, size_t ldx, uint32_t n) {
    matmul(f, 1, &w, &y, &ldy, x, ldx, n);
}

/* ---- per-token elementwise stages (parallel over tokens for big batches) -------------------- */

typedef struct {
    kipp_cpu_fwd *f;
    const kipp_batch *b; /* NULL: recomputation (token t at position t) */
    const kv_src *src;
    const run_t *runs;
    const uint32_t *run_of; /* [n] run index of each token (pool only) */
    uint32_t layer;
    const float *w; /* norm weights for norm_rows, a bias for bias_rows */
    uint32_t per;   /* norm_rows: rows of dim per token (1, or a row's heads) */
    const float *in;
    float *out;
    uint32_t dim;
    /* qk_rows: the program's per-token ops before its KIPP_OP_KV_STORE (QKV_BIAS, QK_NORM, ROPE),
     * in program order */
    kipp_op head_ops[4];
    int n_head_ops;
} tok_job;

static void par_tokens(kipp_cpu_fwd *f, uint32_t n, kipp_parallel_fn fn, tok_job *j) {
    if (n >= PAR_MIN_TOKENS)
        kipp_threadpool_for(f->tp, n, 1, fn, j);
    else
        fn(j, 0, n, 0);
}

static void norm_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const tok_job *j = ctx;
    for (uint64_t r = begin * j->per; r < end * j->per; r++) /* per rows of dim in each token's */
        rmsnorm(j->out + r * j->dim, j->in + r * j->dim, j->w, j->dim, j->f->m->hp.rms_eps);
}

/* out[t] += w (a bias as wide as a row of dim), and RoPE on each D-wide head of out[t] */
static void bias_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const tok_job *j = ctx;
    for (uint64_t t = begin; t < end; t++)
        for (uint32_t i = 0; i < j->dim; i++) j->out[t * j->dim + i] += j->w[i];
}

static void rope_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const tok_job *j = ctx;
    const uint32_t D = j->f->D, half = D / 2;
    for (uint64_t t = begin; t < end; t++)
        for (uint32_t h = 0; h < j->dim / D; h++)
            rope_head(j->out + t * j->dim + h * D, j->f->rcos + t * half, j->f->rsin + t * half, half);
}

/* The per-token ops the program put before KIPP_OP_KV_STORE (j->head_ops: q/k/v biases, q/k
 * head norms, RoPE), fused with the K/V write of each token of the layer. */
static void qk_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const tok_job *j = ctx;
    kipp_cpu_fwd *f = j->f;
    const uint32_t D = f->D, half = D / 2, l = j->layer;
    const float eps = f->m->hp.rms_eps;
    for (uint64_t t = begin; t < end; t++) {
        const float *c = f->rcos + t * half, *s = f->rsin + t * half;
        float *q = f->q + t * f->QD, *k = f->kx + t * f->kv_dim, *v = f->vx + t * f->kv_dim;
        for (int o = 0; o < j->n_head_ops; o++) {
            switch (j->head_ops[o]) {
            case KIPP_OP_QKV_BIAS:
                for (uint32_t i = 0; i < f->QD; i++) q[i] += f->bq[l][i];
                for (uint32_t i = 0; i < f->kv_dim; i++) k[i] += f->bk[l][i];
                for (uint32_t i = 0; i < f->kv_dim; i++) v[i] += f->bv[l][i];
                break;
            case KIPP_OP_QK_NORM:
                for (uint32_t h = 0; h < f->Nh; h++) rmsnorm(q + h * D, q + h * D, f->q_norm[l], D, eps);
                for (uint32_t h = 0; h < f->Nkv; h++) rmsnorm(k + h * D, k + h * D, f->k_norm[l], D, eps);
                break;
            case KIPP_OP_ROPE:
                for (uint32_t h = 0; h < f->Nh; h++) rope_head(q + h * D, c, s, half);
                for (uint32_t h = 0; h < f->Nkv; h++) rope_head(k + h * D, c, s, half);
                break;
            default: break; /* layers() queues no other op here */
            }
        }
        const kipp_kv_seq *seq = j->run_of ? j->runs[j->run_of[t]].seq : NULL;
        const uint32_t pos = j->b ? j->b->positions[t] : (uint32_t)t;
        void *kd = kv_at(j->src, seq, l, pos, KIPP_KV_K, KIPP_KV_WRITE, f->kv_dim);
        void *vd = kv_at(j->src, seq, l, pos, KIPP_KV_V, KIPP_KV_WRITE, f->kv_dim);
        if (!j->src->kv) { /* private store: the values the cache would hold */
            kipp_kv_round(f->kv_type, k, f->kv_dim);
            kipp_kv_round(f->kv_type_v, v, f->kv_dim);
        }
        kipp_host_kv_put(src_type(j->src, KIPP_KV_K), kd, k, f->kv_dim);
        kipp_host_kv_put(src_type(j->src, KIPP_KV_V), vd, v, f->kv_dim);
    }
}

/* out[t] += in[t] (residual), dim floats per row */
static void add_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const tok_job *j = ctx;
    for (uint64_t t = begin; t < end; t++) {
        float *o = j->out + t * j->dim;
        const float *a = j->in + t * j->dim;
        for (uint32_t i = 0; i < j->dim; i++) o[i] += a[i];
    }
}

/* out[t] = silu(out[t]) * in[t], rows of j->dim (the FFN's width, F or one expert's Fe) */
static void swiglu_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const tok_job *j = ctx;
    kipp_cpu_fwd *f = j->f;
    for (uint64_t t = begin; t < end; t++) {
        float *g = j->out + t * j->dim;
        const float *u = j->in + t * j->dim;
        if (f->k->swiglu_f32)
            f->k->swiglu_f32(g, u, j->dim);
        else
            for (uint32_t i = 0; i < j->dim; i++) g[i] = silu(g[i]) * u[i];
    }
}

/* ---- a mixture-of-experts FFN ------------------------------------------------------------------ */

/* The router's logits, one dot product per (token, expert) in a fixed order -- 16 running sums
 * over k (lane i takes k = i mod 16), then the lanes added pairwise, then the tail -- so a token's
 * logits have the same bits whatever the batch around it: a prefill, a decode step and a reused
 * prefix route alike (a gemm kernel chosen by token count would not). GCC's vector extension
 * keeps the lanes' order on every ISA. */
typedef float router_v16 __attribute__((vector_size(64)));

typedef struct {
    const float *w; /* [E][H] f32 */
    const float *x; /* [n][H] */
    float *y;       /* [n][E] */
    uint32_t n, H, E;
} router_job;

static void router_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const router_job *j = ctx;
    const uint32_t H = j->H, H16 = H / 16 * 16;
    for (uint64_t e = begin; e < end; e++) {
        const float *w = j->w + e * H;
        for (uint32_t t = 0; t < j->n; t++) {
            const float *x = j->x + (size_t)t * H;
            router_v16 acc = {0};
            for (uint32_t i = 0; i < H16; i += 16) {
                router_v16 a, b;
                memcpy(&a, w + i, sizeof a);
                memcpy(&b, x + i, sizeof b);
                acc += a * b;
            }
            float l[16];
            memcpy(l, &acc, sizeof l);
            for (int h = 8; h >= 1; h /= 2)
                for (int i = 0; i < h; i++) l[i] += l[i + h];
            float sum = l[0];
            for (uint32_t i = H16; i < H; i++) sum += w[i] * x[i];
            j->y[(size_t)t * j->E + e] = sum;
        }
    }
}

static void route_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const tok_job *j = ctx;
    kipp_cpu_fwd *f = j->f;
    for (uint64_t t = begin; t < end; t++)
        kipp_moe_route(f->router + t * f->E, f->E, f->K, (int)f->m->hp.expert_norm, f->chosen + t * f->K,
                       f->chosen_w + t * f->K, j->layer, j->b ? j->b->positions[t] : (uint32_t)t,
                       j->b ? j->b->tokens[t] : f->nc_tokens[t]);
}

/* out[t] = sum over t's slots, best first, of its weight times its expert's output (ye) */
static void moe_sum_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)ith;
    const tok_job *j = ctx;
    kipp_cpu_fwd *f = j->f;
    for (uint64_t t = begin; t < end; t++) {
        float *acc = j->out + t * f->H;
        memset(acc, 0, f->H * sizeof *acc);
        for (uint32_t s = 0; s < f->K; s++) {
            const float wt = f->chosen_w[t * f->K + s];
            const float *y = j->in + (size_t)f->slot_at[t * f->K + s] * f->H;
            for (uint32_t i = 0; i < f->H; i++) acc[i] += wt * y[i];
        }
    }
}

/* One matmul pass over matrix m of every expert whose group is not empty, for m < n_mats
 * (mats[m][e]: expert e's), into ys[m] rows (ldy apart, in group order): expert e multiplies
 * input rows off[e] .. off[e+1] - 1 of x (n_rows rows, ldx apart), or with one_row set (a
 * lone token, every pair's input the same) row 0 of a one-row x. Run in jobs of one type and
 * packing (a layer's stack is one tensor: one job, unless its gate and up types differ). */
static void expert_mm(kipp_cpu_fwd *f, uint32_t n_mats, const kipp_gguf_tensor *const *mats, float *const *ys,
                      size_t ldy, const float *x, size_t ldx, uint32_t n_rows, int one_row) {
    const uint32_t *off = f->exp_off;
    const kipp_gguf_tensor **ws = f->mm_ws;
    float **yv = f->mm_ys;
    size_t *ld = f->mm_ld;
    uint32_t *x0 = f->mm_x0, *nx = f->mm_nx, c = 0;
    for (uint32_t m = 0; m < n_mats; m++) {
        for (uint32_t e = 0; e < f->E; e++) {
            if (off[e + 1] == off[e]) continue;
            const kipp_gguf_tensor *w = &mats[m][e];
            if (c && (w->type != ws[0]->type || w->ne[0] != ws[0]->ne[0] ||
                      (packed_find(f, w->data) != NULL) != (packed_find(f, ws[0]->data) != NULL))) {
                matmul_group(f, c, ws, yv, ld, x0, nx, x, ldx, n_rows);
                c = 0;
            }
            ws[c] = w;
            yv[c] = ys[m] + (size_t)off[e] * ldy;
            ld[c] = ldy;
            x0[c] = one_row ? 0 : off[e];
            nx[c] = off[e + 1] - off[e];
            c++;
        }
    }
    if (c) matmul_group(f, c, ws, yv, ld, x0, nx, x, ldx, n_rows);
}

/* ---- attention ------------------------------------------------------------------------------ */

typedef struct {
    kipp_cpu_fwd *f;
    const kv_src *src;
    const run_t *runs;
    uint32_t n_runs;
    uint32_t layer;
    uint32_t n_items;
    uint32_t *item_run, *item_t0; /* per item: run, first token offset in the run */
    atomic_uint next;
} att_job;

typedef void (*pv_rows_fn)(float *o, size_t ldo, const float *p, size_t p_stride, uint32_t nq,
                           const void *const *rows, uint32_t n, uint32_t d);

/* The level's p·V over V rows in place for KV type ty (kernels.h: pv_rows_*), or NULL. */
static pv_rows_fn pv_rows_for(const kipp_cpu_fwd *f, kipp_kv_type ty) {
    return ty == KIPP_KV_TYPE_F32 ? f->k->pv_rows_f32 : ty == KIPP_KV_TYPE_F16 ? f->k->pv_rows_f16
           : ty == KIPP_KV_TYPE_BF16 ? f->k->pv_rows_bf16 : NULL;
}

/* Thread scratch for attention over n_kv positions of a KV of type ty (vt only where V is
 * transposed: no pv_rows for ty). */
static int scratch_fit(kipp_cpu_fwd *f, att_scratch *a, uint32_t n_kv, kipp_kv_type ty) {
    const int transposed = pv_rows_for(f, ty) == NULL;
    if (n_kv <= a->cap_kv && (a->vt || !transposed)) return 1;
    if (n_kv < a->cap_kv) n_kv = a->cap_kv;
    uint32_t cap = a->cap_kv ? a->cap_kv : 64;
    while (cap < n_kv) cap *= 2;
    if (cap > f->n_ctx) cap = f->n_ctx > n_kv ? f->n_ctx : n_kv;
    const size_t D = f->D, rows = (size_t)ATT_CHUNK * f->group;
    float *kc = realloc(a->kc, (size_t)cap * D * sizeof(float));
    if (kc) a->kc = kc;
    float *vt = transposed ? realloc(a->vt, (size_t)cap * D * sizeof(float)) : NULL;
    if (vt) a->vt = vt;
    const void **vrows = realloc(a->vrows, (size_t)cap * sizeof *vrows);
    if (vrows) a->vrows = vrows;
    float *sc = realloc(a->sc, rows * cap * sizeof(float));
    if (sc) a->sc = sc;
    if (!kc || (transposed && !vt) || !vrows || !sc) return 0;
    a->cap_kv = cap;
    return 1;
}

static void gemm_f32(const kipp_cpu_fwd *f, const float *w, size_t w_row_bytes, uint64_t n_rows,
                     const float *x, size_t x_row_bytes, uint64_t n_tok, float *y, size_t ldy,
                     uint64_t k) {
    if (f->k->f32.gemm)
        f->k->f32.gemm(w, w_row_bytes, n_rows, x, x_row_bytes, n_tok, y, ldy, k);
    else
        kipp_cpu_gemm_dequant(KIPP_TYPE_F32, w, w_row_bytes, n_rows, x, x_row_bytes, n_tok, y, ldy, k);
}

/* Causal softmax of rows x n_kv scores in place (ld apart); query row q sees positions
 * 0..pos0 + q / G. Positions past that get probability 0. */
static void softmax_rows(const kipp_cpu_fwd *f, float *sc, size_t ld, uint32_t rows, uint32_t n_kv,
                         uint32_t pos0, uint32_t G, float scale) {
    for (uint32_t row = 0; row < rows; row++) {
        float *s = sc + (size_t)row * ld;
        const uint32_t valid = pos0 + row / G + 1;
        if (f->k->softmax_f32) {
            f->k->softmax_f32(s, valid, scale);
        } else {
            float mx = -INFINITY;
            for (uint32_t t = 0; t < valid; t++) {
                s[t] *= scale;
                if (s[t] > mx) mx = s[t];
            }
            float sum = 0.0f;
            for (uint32_t t = 0; t < valid; t++) {
                s[t] = expf(s[t] - mx);
                sum += s[t];
            }
            const float inv = 1.0f / sum;
            for (uint32_t t = 0; t < valid; t++) s[t] *= inv;
        }
        for (uint32_t t = valid; t < n_kv; t++) s[t] = 0.0f;
    }
}

/* n elements of a K/V row of type t at src into f32 dst. */
static void row_to_f32(const kipp_cpu_fwd *f, kipp_kv_type t, float *dst, const void *src,
                       uint32_t n) {
    if (t == KIPP_KV_TYPE_F16 && f->k->f16_to_f32) f->k->f16_to_f32(src, dst, n);
    else if (t == KIPP_KV_TYPE_BF16 && f->k->bf16_to_f32) f->k->bf16_to_f32(src, dst, n);
    else kipp_host_kv_get(t, dst, src, n);
}

/* Head h's D values of rows t..e-1 (a segment) of part at f32 tile dst (D floats apart). */
static void seg_to_f32(const kipp_cpu_fwd *f, const kv_src *src, const run_t *r, uint32_t l,
                       uint32_t h, kipp_kv_part part, uint32_t t, uint32_t e, float *dst) {
    const kipp_kv_type ty = src_type(src, part);
    const size_t off = head_off(f, ty, h);
    for (uint32_t u = t; u < e; u++)
        row_to_f32(f, ty, dst + (size_t)(u - t) * f->D,
                   (const char *)kv_at(src, r->seq, l, u, part, KIPP_KV_READ, f->kv_dim) + off, f->D);
}

/* The end of the run of positions t.. whose rows of part follow each other in memory (one
 * block's slots, or neighbouring blocks), at most t + max. With aligned set it also stops
 * at the end of t's block, so a kernel whose rounding depends on how many rows one call
 * gets sees the same calls whatever the block table (adversarial layouts, batches of
 * several sequences) and gives the same result as the identity layout. */
static uint32_t contiguous_end(const kipp_cpu_fwd *f, const kv_src *src, const run_t *r,
                               uint32_t l, kipp_kv_part part, uint32_t t, uint32_t n_kv,
                               uint32_t max, int aligned) {
    if (aligned) {
        const uint32_t bs = src->kv ? src->kv->block_size : KIPP_KV_DEFAULT_BLOCK_SIZE;
        const uint32_t to_end = bs - t % bs;
        if (to_end < max) max = to_end;
    }
    const size_t row = (size_t)kipp_kv_row_bytes(src_type(src, part), f->kv_dim);
    const char *p0 = kv_at(src, r->seq, l, t, part, KIPP_KV_READ, f->kv_dim);
    uint32_t e = t + 1;
    while (e < n_kv && e - t < max &&
           (const char *)kv_at(src, r->seq, l, e, part, KIPP_KV_READ, f->kv_dim) == p0 + (e - t) * row)
        e++;
    return e;
}

typedef void (*pv_kv_fn)(float *o, const float *p, size_t p_stride, uint32_t G, const void *v0,
                         size_t v_stride, uint32_t n, uint32_t d);

/* A single query token (decode): no gathering. Scores come straight from the K rows of each
 * run of positions contiguous in memory, through the gemm of the KV type (f32, or the f16 /
 * bf16 weight gemm, which takes f32 activations); p·V reads the V rows in place the same
 * way. A level without such a kernel converts a segment of at most SEG_ROWS rows into the
 * kc tile and uses the f32 kernels. */
static void att_single(kipp_cpu_fwd *f, att_scratch *a, const kv_src *src, const run_t *r,
                       uint32_t l, uint32_t h, uint32_t tok) {
    const uint32_t D = f->D, G = f->group, n_kv = r->pos0 + 1;
    const size_t ld = a->cap_kv, kvd = f->kv_dim;
    const kipp_kv_type ty = src_type(src, KIPP_KV_K), vty = src_type(src, KIPP_KV_V);
    const size_t esz = kipp_kv_type_size(ty), hoff = head_off(f, ty, h);
    const size_t vhoff = head_off(f, vty, h);
    kipp_cpu_gemm_fn kgemm = NULL; /* scores over rows of type ty; NULL: convert */
    pv_kv_fn pv = NULL;            /* p·V over rows of type vty (f16/bf16); NULL: convert */
    if (ty == KIPP_KV_TYPE_F32) {
        kgemm = f->k->f32.gemm;
    } else if (ty == KIPP_KV_TYPE_F16 || ty == KIPP_KV_TYPE_BF16) {
        const kipp_cpu_mm mm = kipp_cpu_kernels_mm(f->k, ty == KIPP_KV_TYPE_F16 ? KIPP_TYPE_F16 : KIPP_TYPE_BF16);
        if (mm.act == KIPP_ACT_F32) kgemm = mm.gemm;
    }
    if (vty == KIPP_KV_TYPE_F16 || vty == KIPP_KV_TYPE_BF16)
        pv = vty == KIPP_KV_TYPE_F16 ? f->k->pv_f16 : f->k->pv_bf16;
    const float *q = f->q + (size_t)tok * f->QD + (size_t)h * G * D; /* G heads, adjacent */
    for (uint32_t t = 0, e; t < n_kv; t = e) {
        /* the f16/bf16 gemm's rounding depends on the row count: block-aligned calls */
        e = contiguous_end(f, src, r, l, KIPP_KV_K, t, n_kv, kgemm ? UINT32_MAX : SEG_ROWS,
                           ty != KIPP_KV_TYPE_F32);
        const char *k0 = (const char *)kv_at(src, r->seq, l, t, KIPP_KV_K, KIPP_KV_READ, f->kv_dim) + hoff;
        if (kgemm) {
            kgemm(k0, kvd * esz, e - t, q, D * sizeof(float), G, a->sc + t, ld, D);
        } else {
            seg_to_f32(f, src, r, l, h, KIPP_KV_K, t, e, a->kc);
            gemm_f32(f, a->kc, D * sizeof(float), e - t, q, D * sizeof(float), G, a->sc + t, ld, D);
        }
    }
    softmax_rows(f, a->sc, ld, G, n_kv, r->pos0, G, 1.0f / sqrtf((float)D));
    float *o = f->att + (size_t)tok * f->QD + (size_t)h * G * D;
    memset(o, 0, (size_t)G * D * sizeof(float));
    const int in_place = vty == KIPP_KV_TYPE_F32 ? f->k->pv_f32 != NULL : pv != NULL;
    for (uint32_t t = 0, e; t < n_kv; t = e) {
        e = contiguous_end(f, src, r, l, KIPP_KV_V, t, n_kv, in_place ? UINT32_MAX : SEG_ROWS,
                           vty != KIPP_KV_TYPE_F32);
        const char *v0 = (const char *)kv_at(src, r->seq, l, t, KIPP_KV_V, KIPP_KV_READ, f->kv_dim) + vhoff;
        if (in_place && vty == KIPP_KV_TYPE_F32) {
            f->k->pv_f32(o, a->sc + t, ld, G, (const float *)v0, kvd, e - t, D);
            continue;
        }
        if (in_place) {
            pv(o, a->sc + t, ld, G, v0, kvd, e - t, D);
            continue;
        }
        const float *vf = (const float *)v0; /* f32 rows in place, or converted into kc */
        size_t stride = kvd;
        if (vty != KIPP_KV_TYPE_F32) {
            seg_to_f32(f, src, r, l, h, KIPP_KV_V, t, e, a->kc);
            vf = a->kc;
            stride = D;
        }
        if (f->k->pv_f32) {
            f->k->pv_f32(o, a->sc + t, ld, G, vf, stride, e - t, D);
        } else {
            for (uint32_t u = t; u < e; u++)
                for (uint32_t g = 0; g < G; g++)
                    f->k->axpy_f32(o + (size_t)g * D, a->sc[(size_t)g * ld + u], vf + (size_t)(u - t) * stride, D);
        }
    }
}

/* V rows 0..n_kv-1 of head slice off transposed into vt. V goes through a
 * tile of VT_TILE converted rows (in oc, written only after the gemms) and is transposed a
 * tile at a time: each vt row gets VT_TILE adjacent floats per write pass instead of one
 * scattered float per position (which cost ~0.3 s of a 16-token chunk's step at 2,000
 * positions on the 0.6B shape). For levels without pv_rows. */
static void att_transpose_v(kipp_cpu_fwd *f, att_scratch *a, const kv_src *src, const run_t *r, uint32_t l,
                            size_t off, uint32_t n_kv) {
    const uint32_t D = f->D;
    const size_t ld = a->cap_kv;
    const kipp_kv_type ty = src_type(src, KIPP_KV_V);
    float *tile = a->oc;
    for (uint32_t t0v = 0; t0v < n_kv; t0v += VT_TILE) {
        const uint32_t nt = n_kv - t0v < VT_TILE ? n_kv - t0v : VT_TILE;
        for (uint32_t j = 0; j < nt; j++) {
            const uint32_t t = t0v + j;
            const char *vr = (const char *)kv_at(src, r->seq, l, t, KIPP_KV_V, KIPP_KV_READ, f->kv_dim) + off;
            row_to_f32(f, ty, tile + (size_t)j * D, vr, D);
        }
        for (uint32_t d = 0; d < D; d++) {
            float *dst = a->vt + (size_t)d * ld + t0v;
            for (uint32_t j = 0; j < nt; j++) dst[j] = tile[(size_t)j * D + d];
        }
    }
}

static void att_item(kipp_cpu_fwd *f, att_scratch *a, const kv_src *src, const run_t *r,
                     uint32_t l, uint32_t h, uint32_t t0) {
    const uint32_t D = f->D, G = f->group;
    const uint32_t m = r->n - t0 < ATT_CHUNK ? r->n - t0 : ATT_CHUNK;
    if (m == 1 && r->n == 1) {
        att_single(f, a, src, r, l, h, r->first);
        return;
    }
    const uint32_t last = r->pos0 + t0 + m - 1, n_kv = last + 1;
    const size_t ld = a->cap_kv; /* row stride of vt and sc */
    /* gather K rows (as f32), and V: the rows' addresses where the level reads them in place
     * (pv_rows), else V transposed, for positions 0..last */
    const kipp_kv_type ty = src_type(src, KIPP_KV_K), vty = src_type(src, KIPP_KV_V);
    const size_t off = head_off(f, ty, h), voff = head_off(f, vty, h);
    const pv_rows_fn pv_rows = pv_rows_for(f, vty);
    for (uint32_t t = 0; t < n_kv; t++) {
        const char *kr = (const char *)kv_at(src, r->seq, l, t, KIPP_KV_K, KIPP_KV_READ, f->kv_dim) + off;
        row_to_f32(f, ty, a->kc + (size_t)t * D, kr, D);
        if (pv_rows) a->vrows[t] = (const char *)kv_at(src, r->seq, l, t, KIPP_KV_V, KIPP_KV_READ, f->kv_dim) + voff;
    }
    if (!pv_rows) att_transpose_v(f, a, src, r, l, voff, n_kv);

    /* query rows: token i of the chunk, head g of the group -> row i*G + g */
    for (uint32_t i = 0; i < m; i++)
        memcpy(a->qc + (size_t)i * G * D, f->q + (size_t)(r->first + t0 + i) * f->QD + (size_t)h * G * D,
               (size_t)G * D * sizeof(float));
    const uint32_t rows = m * G;
    gemm_f32(f, a->kc, D * sizeof(float), n_kv, a->qc, D * sizeof(float), rows, a->sc, ld, D);
    softmax_rows(f, a->sc, ld, rows, n_kv, r->pos0 + t0, G, 1.0f / sqrtf((float)D));
    if (pv_rows) pv_rows(a->oc, D, a->sc, ld, rows, a->vrows, n_kv, D);
    else gemm_f32(f, a->vt, ld * sizeof(float), D, a->sc, ld * sizeof(float), rows, a->oc, D, n_kv);
    for (uint32_t i = 0; i < m; i++)
        memcpy(f->att + (size_t)(r->first + t0 + i) * f->QD + (size_t)h * G * D, a->oc + (size_t)i * G * D,
               (size_t)G * D * sizeof(float));
}

static void att_worker(void *ctx, uint64_t begin, uint64_t end, int ith) {
    (void)begin; (void)end;
    att_job *j = ctx;
    kipp_cpu_fwd *f = j->f;
    att_scratch *a = &f->ts[ith];
    const uint32_t total = j->n_items * f->Nkv;
    for (;;) {
        const uint32_t it = atomic_fetch_add(&j->next, 1u);
        if (it >= total) break;
        /* items in decreasing cost order: the last chunks of long runs first */
        const uint32_t item = j->n_items - 1 - it / f->Nkv, h = it % f->Nkv;
        const run_t *r = &j->runs[j->item_run[item]];
        att_item(f, a, j->src, r, j->layer, h, j->item_t0[item]);
    }
}

/* ---- scratch ------------------------------------------------------------------------------- */

static void free_batch(kipp_cpu_fwd *f) {
    free(f->x); free(f->xn); free(f->q); free(f->kx); free(f->vx); free(f->att);
    free(f->proj); free(f->gate); free(f->up); free(f->rcos); free(f->rsin); free(f->act);
    free(f->runs); free(f->wanted); free(f->xw); free(f->y2);
    free(f->router); free(f->chosen); free(f->chosen_w); free(f->by_exp); free(f->slot_at); free(f->xg); free(f->ye);
    f->router = f->chosen_w = f->xg = f->ye = NULL;
    f->chosen = f->by_exp = f->slot_at = NULL;
    f->y2 = NULL;
    f->x = f->xn = f->q = f->kx = f->vx = f->att = f->proj = f->gate = f->up = NULL;
    f->rcos = f->rsin = f->xw = NULL;
    f->act = NULL;
    f->runs = NULL;
    f->wanted = NULL;
    f->cap = 0;
}

static kipp_status ensure_batch(kipp_cpu_fwd *f, uint32_t n, char *err, size_t err_len) {
    if (n <= f->cap) return KIPP_OK;
    free_batch(f);
    const size_t N = n;
    size_t max_in = f->H > f->Fmax ? f->H : f->Fmax;
    if (f->QD > max_in) max_in = f->QD;
    f->x = malloc(N * f->H * sizeof(float));
    f->xn = malloc(N * f->H * sizeof(float));
    f->q = malloc(N * f->QD * sizeof(float));
    f->kx = malloc(N * f->kv_dim * sizeof(float));
    f->vx = malloc(N * f->kv_dim * sizeof(float));
    f->att = malloc(N * f->QD * sizeof(float));
    f->proj = malloc(N * f->H * sizeof(float));
    /* gate / up: a dense FFN's [n][F], or every (token, slot) pair's expert rows [n K][Fe] */
    const size_t ffn_rows = f->E && (size_t)f->K * f->Fe > f->F ? (size_t)f->K * f->Fe : f->F;
    f->gate = malloc(N * ffn_rows * sizeof(float));
    f->up = malloc(N * ffn_rows * sizeof(float));
    int moe_ok = 1;
    if (f->E) {
        f->router = malloc(N * f->E * sizeof(float));
        f->chosen = malloc(N * f->K * sizeof(uint32_t));
        f->chosen_w = malloc(N * f->K * sizeof(float));
        f->by_exp = malloc(N * f->K * sizeof(uint32_t));
        f->slot_at = malloc(N * f->K * sizeof(uint32_t));
        f->xg = malloc(N * f->K * f->H * sizeof(float));
        f->ye = malloc(N * f->K * f->H * sizeof(float));
        moe_ok = f->router && f->chosen && f->chosen_w && f->by_exp && f->slot_at && f->xg && f->ye;
    }
    f->rcos = malloc(N * (f->D / 2) * sizeof(float));
    f->rsin = malloc(N * (f->D / 2) * sizeof(float));
    /* the largest activation row: f32 of the widest input (other formats are smaller) */
    f->act_cap = N * (f->E ? f->K : 1) * kipp_cpu_act_row_bytes(KIPP_ACT_F32, max_in); /* a MoE pass: n K rows */
    f->act = malloc(f->act_cap);
    f->runs = malloc(N * sizeof *f->runs);
    f->wanted = malloc(N * sizeof *f->wanted);
    f->xw = malloc(N * f->H * sizeof(float));
    f->y2 = malloc((size_t)f->n_threads * 2 * N * Y2_ROWS * sizeof(float));
    if (!moe_ok || !f->y2 || !f->x || !f->xn || !f->q || !f->kx || !f->vx || !f->att || !f->proj || !f->gate ||
        !f->up || !f->rcos || !f->rsin || !f->act || !f->runs || !f->wanted || !f->xw) {
        free_batch(f);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cpu: out of memory for a batch of %u tokens", n);
    }
    f->cap = n;
    return KIPP_OK;
}

/* ---- the pass -------------------------------------------------------------------------------- */

/* Embedding rows: from the packed copy when the table was repacked as a tied head (its file
 * pages were released and stay so), else from the file; the same values either way. */
static void embed_rows(kipp_cpu_fwd *f, const int32_t *tokens, uint32_t n) {
    const kipp_gguf_tensor *e = f->m->tok_embd;
    const uint64_t rb = kipp_type_row_bytes(e->type, f->H);
    const packed_w *pw = packed_find(f, e->data);
    for (uint32_t t = 0; t < n; t++) {
        float *x = f->x + (size_t)t * f->H;
        if (pw && pw->p->row && pw->type == e->type && (uint64_t)tokens[t] < pw->rows)
            pw->p->row(e->type, pw->data, (uint64_t)tokens[t], f->H, x);
        else
            kipp_dequantize_row(e->type, (const char *)e->data + (uint64_t)tokens[t] * rb, x, f->H);
    }
}

static void rope_tables(kipp_cpu_fwd *f, const uint32_t *positions, uint32_t n) {
    kipp_rope_tables(f->inv_freq, f->rope_mag, f->D / 2, positions, n, f->rcos, f->rsin);
}

/* ---- the operations (ops.h) over the pass's rows ----------------------------------------------- */

static float *buf_of(kipp_cpu_fwd *f, kipp_buf a) {
    switch (a) {
    case KIPP_BUF_X: return f->x;
    case KIPP_BUF_XN: return f->xn;
    case KIPP_BUF_Q: return f->q;
    case KIPP_BUF_K: return f->kx;
    case KIPP_BUF_V: return f->vx;
    case KIPP_BUF_ATT: return f->att;
    case KIPP_BUF_PROJ: return f->proj;
    case KIPP_BUF_GATE: case KIPP_BUF_EGATE: return f->gate; /* a layer has one FFN: dense or experts */
    case KIPP_BUF_UP: case KIPP_BUF_EUP: return f->up;
    case KIPP_BUF_EDOWN: return f->ye;
    case KIPP_BUF_COUNT: break;
    }
    return NULL;
}

static uint32_t width_of(const kipp_cpu_fwd *f, kipp_buf a) {
    switch (a) {
    case KIPP_BUF_X: case KIPP_BUF_XN: case KIPP_BUF_PROJ: case KIPP_BUF_EDOWN: return f->H;
    case KIPP_BUF_Q: case KIPP_BUF_ATT: return f->QD;
    case KIPP_BUF_K: case KIPP_BUF_V: return f->kv_dim;
    case KIPP_BUF_GATE: case KIPP_BUF_UP: return f->F;
    case KIPP_BUF_EGATE: case KIPP_BUF_EUP: return f->Fe;
    case KIPP_BUF_COUNT: break;
    }
    return 0;
}

/* rows of a in this pass: one per token, or per (token, slot) pair */
static uint32_t rows_of(const kipp_cpu_fwd *f, kipp_buf a) {
    return a >= KIPP_BUF_EGATE ? f->pass.n * f->K : f->pass.n;
}

/* a norm vector or bias (a kipp_layer_weights field) as the f32 copy made at init */
static const float *vec_of(const kipp_cpu_fwd *f, uint32_t l, size_t w) {
    return w == KIPP_W(attn_norm) ? f->attn_norm[l] : w == KIPP_W(ffn_norm) ? f->ffn_norm[l]
           : w == KIPP_W(q_norm)  ? f->q_norm[l]    : w == KIPP_W(k_norm)   ? f->k_norm[l]
           : w == KIPP_W(bq)      ? f->bq[l]        : w == KIPP_W(bk)       ? f->bk[l]
           : w == KIPP_W(bv)      ? f->bv[l]        : NULL;
}

static tok_job job_for(kipp_cpu_fwd *f, uint32_t l) {
    return (tok_job){.f = f, .b = f->pass.b, .src = f->pass.src, .runs = f->pass.runs,
                     .run_of = f->pass.run_of, .layer = l, .per = 1};
}

static int op_rmsnorm(void *st, uint32_t l, size_t w, kipp_buf src, kipp_buf dst, uint32_t width) {
    kipp_cpu_fwd *f = st;
    tok_job tj = job_for(f, l);
    tj.w = vec_of(f, l, w);
    tj.in = buf_of(f, src);
    tj.out = buf_of(f, dst);
    tj.dim = width;
    tj.per = width_of(f, src) / width;
    par_tokens(f, f->pass.n, norm_rows, &tj);
    return 0;
}

static int op_matmul(void *st, uint32_t l, uint32_t count, const size_t *w, kipp_buf src, const kipp_buf *dst) {
    kipp_cpu_fwd *f = st;
    const kipp_gguf_tensor *ws[4];
    float *ys[4];
    size_t ld[4];
    for (uint32_t i = 0; i < count && i < 4; i++) {
        ws[i] = kipp_layer_tensor(f->m, l, w[i]);
        ys[i] = buf_of(f, dst[i]);
        ld[i] = width_of(f, dst[i]);
    }
    matmul(f, count, ws, ys, ld, buf_of(f, src), width_of(f, src), f->pass.n);
    return 0;
}

static int op_add_bias(void *st, uint32_t l, size_t b, kipp_buf dst) {
    kipp_cpu_fwd *f = st;
    tok_job tj = job_for(f, l);
    tj.w = vec_of(f, l, b);
    tj.out = buf_of(f, dst);
    tj.dim = width_of(f, dst);
    par_tokens(f, f->pass.n, bias_rows, &tj);
    return 0;
}

static int op_rope(void *st, kipp_buf dst) {
    kipp_cpu_fwd *f = st;
    tok_job tj = job_for(f, 0);
    tj.out = buf_of(f, dst);
    tj.dim = width_of(f, dst);
    par_tokens(f, f->pass.n, rope_rows, &tj);
    return 0;
}

static int op_kv_store(void *st, uint32_t l) {
    kipp_cpu_fwd *f = st;
    tok_job tj = job_for(f, l); /* no queued per-token ops: the store alone */
    par_tokens(f, f->pass.n, qk_rows, &tj);
    return 0;
}

static int op_attention(void *st, uint32_t l) {
    kipp_cpu_fwd *f = st;
    att_job aj = {.f = f, .src = f->pass.src, .runs = f->pass.runs, .n_runs = f->pass.n_runs, .layer = l,
                  .n_items = f->pass.n_items, .item_run = f->pass.item_run, .item_t0 = f->pass.item_t0};
    atomic_init(&aj.next, 0u);
    if (f->pass.n_items * f->Nkv >= 2)
        kipp_threadpool_for(f->tp, (uint64_t)f->n_threads, 1, att_worker, &aj);
    else
        att_worker(&aj, 0, 1, 0);
    return 0;
}

static int op_swiglu(void *st, kipp_buf gate, kipp_buf up) {
    kipp_cpu_fwd *f = st;
    tok_job tj = job_for(f, 0);
    tj.out = buf_of(f, gate);
    tj.in = buf_of(f, up);
    tj.dim = width_of(f, gate);
    const uint32_t rows = rows_of(f, gate);
    if ((uint64_t)rows * tj.dim < SWIGLU_INLINE) /* a decode step's 8 expert rows: less than a wake-up costs */
        swiglu_rows(&tj, 0, rows, 0);
    else
        par_tokens(f, rows, swiglu_rows, &tj);
    return 0;
}

static int op_add(void *st, kipp_buf dst, kipp_buf src) {
    kipp_cpu_fwd *f = st;
    tok_job tj = job_for(f, 0);
    tj.in = buf_of(f, src);
    tj.out = buf_of(f, dst);
    tj.dim = width_of(f, dst);
    par_tokens(f, f->pass.n, add_rows, &tj);
    return 0;
}

/* The router for every token (kipp_moe_route: the choice every backend makes), then the
 * pass's (token, slot) pairs grouped by expert (a counting sort, tokens ascending within an
 * expert), so moe_matmul reads each chosen expert's matrices once for all the tokens routed to
 * it: a prefill or a batched decode reads each active expert once. */
static int op_moe_route(void *st, uint32_t l) {
    kipp_cpu_fwd *f = st;
    const uint32_t E = f->E, K = f->K, H = f->H, n = f->pass.n, P = n * K;
    router_job rj = {.w = f->router_w[l], .x = f->xn, .y = f->router, .n = n, .H = H, .E = E};
    kipp_threadpool_for(f->tp, E, 1, router_rows, &rj); /* xn[n][H] -> router[n][E] */
    tok_job tj = job_for(f, l);
    par_tokens(f, n, route_rows, &tj);
    uint32_t *off = f->exp_off;
    memset(off, 0, (E + 1) * sizeof *off);
    for (uint32_t p = 0; p < P; p++) off[f->chosen[p] + 1]++;
    for (uint32_t e = 0; e < E; e++) off[e + 1] += off[e];
    for (uint32_t p = 0; p < P; p++) {
        const uint32_t at = off[f->chosen[p]]++;
        f->by_exp[at] = p;
        f->slot_at[p] = at;
    }
    for (uint32_t e = E; e > 0; e--) off[e] = off[e - 1]; /* back to the groups' starts */
    off[0] = 0;
    /* the pairs' inputs in group order (a lone token: its row serves every pair) */
    if (n > 1)
        for (uint32_t at = 0; at < P; at++)
            memcpy(f->xg + (size_t)at * H, f->xn + (size_t)(f->by_exp[at] / K) * H, H * sizeof(float));
    return 0;
}

/* Each chosen expert's matrices of w (gate_exps / up_exps in one job, down_exps in another)
 * over its group's rows; the pair rows are in group order (by_exp) */
static int op_moe_matmul(void *st, uint32_t l, uint32_t count, const size_t *w, kipp_buf src, const kipp_buf *dst) {
    kipp_cpu_fwd *f = st;
    const kipp_layer_weights *lw = &f->m->layers[l];
    const kipp_gguf_tensor *mats[2];
    float *ys[2];
    const uint32_t n = f->pass.n, P = n * f->K;
    for (uint32_t i = 0; i < count && i < 2; i++) {
        mats[i] = w[i] == KIPP_W(gate_exps) ? lw->exp_gate : w[i] == KIPP_W(up_exps) ? lw->exp_up : lw->exp_down;
        ys[i] = buf_of(f, dst[i]);
    }
    if (src == KIPP_BUF_XN) /* token rows: the gathered copies, or a lone token's own row */
        expert_mm(f, count, mats, ys, width_of(f, dst[0]), n > 1 ? f->xg : f->xn, f->H, n > 1 ? P : 1, n == 1);
    else
        expert_mm(f, count, mats, ys, width_of(f, dst[0]), buf_of(f, src), width_of(f, src), P, 0);
    return 0;
}

static int op_moe_sum(void *st, kipp_buf src, kipp_buf dst) {
    kipp_cpu_fwd *f = st;
    tok_job tj = job_for(f, 0);
    tj.in = buf_of(f, src);
    tj.out = buf_of(f, dst);
    par_tokens(f, f->pass.n, moe_sum_rows, &tj);
    return 0;
}

/* The fast path: the per-token ops a program puts between its QKV matmul and the K/V store (q/k/v
 * biases, q/k head norms, RoPE) run fused with the store, one pass over each token's q and k
 * (qk_rows), when the remaining ops are such a run ending in the store; else the plain ops. */
static size_t op_fused(void *st, uint32_t l, const kipp_op *ops, size_t n_ops, int *rc) {
    kipp_cpu_fwd *f = st;
    *rc = 0;
    tok_job tj = job_for(f, l);
    for (size_t i = 0; i < n_ops; i++) {
        if (ops[i] == KIPP_OP_KV_STORE) {
            if (i == 0) return 0; /* nothing to fuse */
            par_tokens(f, f->pass.n, qk_rows, &tj);
            return i + 1;
        }
        if ((ops[i] != KIPP_OP_QKV_BIAS && ops[i] != KIPP_OP_QK_NORM && ops[i] != KIPP_OP_ROPE) ||
            tj.n_head_ops == 4)
            return 0;
        tj.head_ops[tj.n_head_ops++] = ops[i];
    }
    return 0;
}

static const kipp_backend_kernels cpu_kernels = {
    .rmsnorm = op_rmsnorm,
    .matmul = op_matmul,
    .add_bias = op_add_bias,
    .rope = op_rope,
    .kv_store = op_kv_store,
    .attention = op_attention,
    .swiglu = op_swiglu,
    .add = op_add,
    .moe_route = op_moe_route,
    .moe_matmul = op_moe_matmul,
    .moe_sum = op_moe_sum,
    .fused = op_fused,
};

/* Runs all layers over the n tokens in f->x through the program's driver (program.c).
 * runs/run_of describe the sequences (NULL for recomputation, where the private store holds one
 * sequence at positions 0..n-1). */
static kipp_status layers(kipp_cpu_fwd *f, const kipp_batch *b, const kv_src *src,
                          const run_t *runs, uint32_t n_runs, const uint32_t *run_of, uint32_t n,
                          char *err, size_t err_len) {
    /* attention items: every run cut into chunks of ATT_CHUNK tokens */
    uint32_t n_items = 0;
    for (uint32_t r = 0; r < n_runs; r++) n_items += (runs[r].n + ATT_CHUNK - 1) / ATT_CHUNK;
    uint32_t *item_run = malloc((size_t)n_items * sizeof *item_run);
    uint32_t *item_t0 = malloc((size_t)n_items * sizeof *item_t0);
    if (!item_run || !item_t0) {
        free(item_run); free(item_t0);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cpu: out of memory for attention items");
    }
    uint32_t max_kv = 0;
    for (uint32_t r = 0, it = 0; r < n_runs; r++) {
        for (uint32_t t0 = 0; t0 < runs[r].n; t0 += ATT_CHUNK, it++) {
            item_run[it] = r;
            item_t0[it] = t0;
        }
        const uint32_t last = runs[r].pos0 + runs[r].n;
        if (last > max_kv) max_kv = last;
    }
    /* sort items by cost (last position), cheapest first, so workers take the dear ones
     * first (att_worker walks the list backwards); insertion sort: few items */
    for (uint32_t i = 1; i < n_items; i++) {
        const uint32_t rr = item_run[i], tt = item_t0[i];
        const uint32_t key = runs[rr].pos0 + tt;
        uint32_t j = i;
        while (j > 0 && runs[item_run[j - 1]].pos0 + item_t0[j - 1] > key) {
            item_run[j] = item_run[j - 1];
            item_t0[j] = item_t0[j - 1];
            j--;
        }
        item_run[j] = rr;
        item_t0[j] = tt;
    }
    for (int i = 0; i < f->n_threads; i++) {
        if (!scratch_fit(f, &f->ts[i], max_kv, src_type(src, KIPP_KV_V))) {
            free(item_run); free(item_t0);
            return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cpu: out of memory for attention over %u positions", max_kv);
        }
    }

    f->pass.b = b;
    f->pass.src = src;
    f->pass.runs = runs;
    f->pass.run_of = run_of;
    f->pass.n = n;
    f->pass.n_runs = n_runs;
    f->pass.n_items = n_items;
    f->pass.item_run = item_run;
    f->pass.item_t0 = item_t0;
    kipp_program_run(f->m, &cpu_kernels, f); /* the host operations cannot fail */
    free(item_run);
    free(item_t0);
    return KIPP_OK;
}

/* Final norm + lm_head for the rows listed in f->wanted: x[wanted][H] -> xw[n_wanted][H]
 * -> logits[n_wanted][n_logits]; without a head (embeddings) x[wanted][H] -> logits[n_wanted][H]. */
static void logits_rows(kipp_cpu_fwd *f, uint32_t n_wanted, float *logits) {
    if (!f->head.data) { /* embeddings: the final-norm hidden states are the output rows */
        for (uint32_t i = 0; i < n_wanted; i++)
            rmsnorm(logits + (size_t)i * f->H, f->x + (size_t)f->wanted[i] * f->H, f->out_norm,
                    f->H, f->m->hp.rms_eps);
        return;
    }
    for (uint32_t i = 0; i < n_wanted; i++)
        rmsnorm(f->xw + (size_t)i * f->H, f->x + (size_t)f->wanted[i] * f->H, f->out_norm, f->H,
                f->m->hp.rms_eps);
    matmul1(f, &f->head, logits, (size_t)f->head.ne[1], f->xw, f->H, n_wanted);
}

kipp_status kipp_cpu_fwd_decode_batch(kipp_cpu_fwd *f, kipp_kv_pool *pool, const kipp_batch *b,
                                      float *logits, char *err, size_t err_len) {
    const uint32_t n = b->n;
    if (n == 0) return KIPP_OK;
    kipp_status st = ensure_batch(f, n, err, err_len);
    if (st != KIPP_OK) return st;
    uint32_t *run_of = malloc((size_t)n * sizeof *run_of);
    if (!run_of) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cpu: out of memory");
    uint32_t n_runs = 0;
    for (uint32_t i = 0; i < n; i++) {
        run_t *prev = n_runs ? &f->runs[n_runs - 1] : NULL;
        if (prev && b->seq_ids[i] == b->seq_ids[prev->first] &&
            b->positions[i] == prev->pos0 + prev->n) {
            prev->n++;
        } else {
            f->runs[n_runs] = (run_t){.seq = kipp_kv_seq_get(pool, b->seq_ids[i]), .first = i, .n = 1,
                                      .pos0 = b->positions[i]};
            n_runs++;
        }
        run_of[i] = n_runs - 1;
    }
    embed_rows(f, b->tokens, n);
    rope_tables(f, b->positions, n);
    const kv_src src = {.kv = pool->storage.store};
    st = layers(f, b, &src, f->runs, n_runs, run_of, n, err, err_len);
    free(run_of);
    if (st != KIPP_OK) return st;
    uint32_t n_wanted = 0;
    for (uint32_t i = 0; i < n; i++)
        if (b->want_logits[i]) f->wanted[n_wanted++] = i;
    if (n_wanted) logits_rows(f, n_wanted, logits);
    return KIPP_OK;
}

kipp_status kipp_cpu_fwd_nocache(kipp_cpu_fwd *f, const int32_t *tokens, uint32_t n,
                                 float *logits, char *err, size_t err_len) {
    if (n == 0) return KIPP_OK;
    kipp_status st = ensure_batch(f, n, err, err_len);
    if (st != KIPP_OK) return st;
    /* all layers' attention reads the current layer only: one layer of private K/V */
    kv_src src = {.kv = NULL};
    src.priv_k = malloc((size_t)n * f->kv_dim * sizeof(float));
    src.priv_v = malloc((size_t)n * f->kv_dim * sizeof(float));
    if (!src.priv_k || !src.priv_v) {
        free(src.priv_k); free(src.priv_v);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "forward pass: out of memory for %u tokens", n);
    }
    embed_rows(f, tokens, n);
    rope_tables(f, NULL, n);
    f->nc_tokens = tokens;
    f->runs[0] = (run_t){.seq = NULL, .first = 0, .n = n, .pos0 = 0};
    st = layers(f, NULL, &src, f->runs, 1, NULL, n, err, err_len);
    free(src.priv_k); free(src.priv_v);
    if (st != KIPP_OK) return st;
    if (logits) {
        f->wanted[0] = n - 1;
        logits_rows(f, 1, logits);
    }
    return KIPP_OK;
}

/* ---- init / free --------------------------------------------------------------------------- */

/* A small tensor as f32 (NULL for no tensor, or out of memory) */
static float *dequant_all(const kipp_gguf_tensor *t) {
    if (!t) return NULL;
    float *o = malloc((size_t)t->n_elems * sizeof(float));
    if (o) kipp_dequantize_row(t->type, t->data, o, (uint64_t)t->n_elems);
    return o;
}

void kipp_cpu_fwd_free(kipp_cpu_fwd *f) {
    if (!f) return;
    const uint32_t L = f->m->hp.n_layer;
    for (uint32_t l = 0; l < L; l++) {
        if (f->attn_norm) free(f->attn_norm[l]);
        if (f->ffn_norm) free(f->ffn_norm[l]);
        if (f->q_norm) free(f->q_norm[l]);
        if (f->k_norm) free(f->k_norm[l]);
        if (f->bq) free(f->bq[l]);
        if (f->bk) free(f->bk[l]);
        if (f->bv) free(f->bv[l]);
    }
    free(f->attn_norm); free(f->ffn_norm); free(f->q_norm); free(f->k_norm); free(f->out_norm);
    free(f->bq); free(f->bk); free(f->bv);
    for (uint32_t l = 0; f->router_w && l < L; l++)
        if (f->m->layers[l].gate_inp->type != KIPP_TYPE_F32) free(f->router_w[l]);
    free(f->router_w);
    free(f->exp_off); free(f->mmj);
    free(f->mm_ws); free(f->mm_ys); free(f->mm_ld); free(f->mm_x0); free(f->mm_nx);
    free(f->inv_freq);
    for (uint32_t i = 0; i < f->n_packed_cap; i++) free(f->packed[i].data);
    free(f->packed);
    free_batch(f);
    if (f->ts) {
        for (int i = 0; i < f->n_threads; i++) {
            free(f->ts[i].kc); free(f->ts[i].vt); free(f->ts[i].vrows); free(f->ts[i].qc); free(f->ts[i].sc);
            free(f->ts[i].oc);
        }
        free(f->ts);
    }
    free(f);
}

kipp_status kipp_cpu_fwd_init(const kipp_model *m, uint32_t n_ctx, kipp_kv_type kv_type,
                              kipp_kv_type kv_type_v,
                              uint32_t n_logits, const kipp_cpu_kernels *k, kipp_threadpool *tp, kipp_cpu_fwd **out,
                              char *err, size_t err_len) {
    *out = NULL;
    const kipp_model_info *hp = &m->hp;
    kipp_status st0 = kipp_program_check(m->arch, "cpu", &cpu_kernels, err, err_len);
    if (st0 != KIPP_OK) return st0;
    kipp_cpu_fwd *f = calloc(1, sizeof *f);
    if (!f) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cpu: out of memory");
    f->m = m;
    f->k = k;
    f->tp = tp;
    f->n_threads = kipp_threadpool_n_threads(tp);
    f->n_ctx = n_ctx;
    f->kv_type = kv_type;
    f->kv_type_v = kv_type_v ? kv_type_v : kv_type;
    f->head = kipp_model_head(m, n_logits);
    f->H = hp->n_embd;
    f->F = hp->n_ff;
    f->E = hp->n_expert;
    f->Fe = hp->n_ff_exp;
    f->K = hp->n_expert_used;
    f->Fmax = f->F > f->Fe ? f->F : f->Fe;
    f->D = hp->head_dim;
    f->Nh = hp->n_head;
    f->Nkv = hp->n_head_kv;
    f->QD = f->Nh * f->D;
    f->kv_dim = f->Nkv * f->D;
    f->group = f->Nh / f->Nkv;
    const uint32_t L = hp->n_layer;
    f->attn_norm = calloc(L, sizeof(float *));
    f->ffn_norm = calloc(L, sizeof(float *));
    f->q_norm = calloc(L, sizeof(float *));
    f->k_norm = calloc(L, sizeof(float *));
    f->bq = calloc(L, sizeof(float *));
    f->bk = calloc(L, sizeof(float *));
    f->bv = calloc(L, sizeof(float *));
    f->inv_freq = malloc((f->D / 2) * sizeof(double));
    f->ts = calloc((size_t)f->n_threads, sizeof *f->ts);
    if (f->E) {
        f->exp_off = malloc((f->E + 1) * sizeof *f->exp_off);
        f->mm_ws = malloc(2 * f->E * sizeof *f->mm_ws);
        f->mm_ys = malloc(2 * f->E * sizeof *f->mm_ys);
        f->mm_ld = malloc(2 * f->E * sizeof *f->mm_ld);
        f->mm_x0 = malloc(2 * f->E * sizeof *f->mm_x0);
        f->mm_nx = malloc(2 * f->E * sizeof *f->mm_nx);
        f->router_w = calloc(L, sizeof *f->router_w);
        for (uint32_t l = 0; f->router_w && l < L; l++) {
            const kipp_gguf_tensor *r = m->layers[l].gate_inp;
            f->router_w[l] = r->type == KIPP_TYPE_F32 ? (float *)(uintptr_t)r->data : dequant_all(r);
        }
    }
    int routers_ok = 1;
    for (uint32_t l = 0; f->E && l < L; l++) routers_ok &= f->router_w && f->router_w[l] != NULL;
    f->mmj = malloc(sizeof *f->mmj);
    int ok = f->mmj &&
             (!f->E || (f->exp_off && f->mm_ws && f->mm_ys && f->mm_ld && f->mm_x0 && f->mm_nx &&
                        routers_ok)) && f->attn_norm && f->ffn_norm && f->q_norm && f->k_norm && f->bq && f->bk && f->bv && f->inv_freq && f->ts;
    for (uint32_t l = 0; ok && l < L; l++) {
        const kipp_layer_weights *lw = &m->layers[l];
        f->attn_norm[l] = dequant_all(lw->attn_norm);
        f->ffn_norm[l] = dequant_all(lw->ffn_norm);
        f->q_norm[l] = dequant_all(lw->q_norm);
        f->k_norm[l] = dequant_all(lw->k_norm);
        f->bq[l] = dequant_all(lw->bq);
        f->bk[l] = dequant_all(lw->bk);
        f->bv[l] = dequant_all(lw->bv);
        ok = f->attn_norm[l] && f->ffn_norm[l] && !lw->q_norm == !f->q_norm[l] && !lw->k_norm == !f->k_norm[l] &&
             !lw->bq == !f->bq[l] && !lw->bk == !f->bk[l] && !lw->bv == !f->bv[l];
    }
    if (ok) ok = (f->out_norm = dequant_all(m->output_norm)) != NULL;
    if (ok) ok = pack_weights(f);
    for (int i = 0; ok && i < f->n_threads; i++) {
        f->ts[i].qc = malloc((size_t)ATT_CHUNK * f->group * f->D * sizeof(float));
        f->ts[i].oc = malloc((size_t)ATT_CHUNK * f->group * f->D * sizeof(float));
        ok = f->ts[i].qc && f->ts[i].oc;
    }
    if (!ok) {
        kipp_cpu_fwd_free(f);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cpu: out of memory for model scratch");
    }
    kipp_rope_inv_freq(hp, f->D, f->inv_freq);
    f->rope_mag = kipp_rope_attn_factor(hp);
    *out = f;
    return KIPP_OK;
}
