/* forward.c — the vulkan backend's batched forward pass (see forward.h): the operations of
 * src/backend/ops.h recorded as kernel dispatches (kernels.h), through which the one driver
 * (src/backend/program.c) runs the architecture's layer program (src/model/arch.h) over a
 * chunk of tokens.
 *
 * Weights: every matrix of the architecture's table (arch.c, walked per layer: nothing here
 * lists them; an expert stack whole) is uploaded through staging byte for byte in its GGUF
 * block layout, as one or more device buffers ("parts") of whole rows, each at most the
 * device's maxStorageBufferRange (128 MiB on lavapipe: kipp-tiny's lm_head is two parts;
 * KIPP_VK_MAX_VIEW=BYTES lowers the bound so the gates split every matrix); a product over a
 * split matrix is one dispatch per part, each writing its rows' columns of the output. The
 * lm_head uploads only the rows a context asks for (n_logits). 1-D tensors (norms, biases) are
 * dequantized on the host and uploaded as f32. The token embeddings stay in the mapped file:
 * a chunk's embedding rows are dequantized on the host (kipp_dequantize_row, so bit-exact)
 * and uploaded with the chunk's other inputs, as llama.cpp keeps its token embeddings on the
 * host.
 *
 * A batch runs in chunks of up to CHUNK tokens, layer by layer over all of a chunk's tokens,
 * all recorded into one command buffer: the chunk's inputs (embedding rows, each token's dense
 * sequence index and position, the RoPE cos/sin table computed on the host in double as
 * cpu/forward.c does, the block tables, the wanted rows) written through staging, the
 * program's ops, then the final norm and the lm_head for the wanted rows only, HEAD_ROWS rows
 * at a time, each product's logits read back into the caller's array; one submit and wait per
 * chunk. A mixture-of-experts layer routes on the host: the router's logits (the
 * matrix-vector kernel at any token count, so a prefill routes a token as its decode step
 * does) are read back (a submit and wait in the middle of the chunk), kipp_moe_route chooses
 * exactly as the cpu backends do (the gates' near-tie pins included), and the (token, slot)
 * pairs, grouped by expert, go back up with the next commands; each expert's product is its
 * own dispatch over its group. Chunks are exact: a later chunk's tokens read the K/V an
 * earlier one stored.
 *
 * KV storage (vulkan.c allocates it): one device buffer per layer, [n_blocks][2 (K, V)]
 * [block_size][kv_dim] of the KV type. Recomputation (forward_nocache) is the same code over a
 * private store with an identity block table and the context's KV type, so K/V are rounded as
 * the cache stores them. */
#include "backend/vulkan/forward.h"

#include "backend/moe.h"
#include "backend/ops.h"
#include "backend/vulkan/kernels.h"

#include "core/error.h"
#include "core/types.h"
#include "model/arch.h"
#include "model/rope.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 512u    /* tokens per pass over the layers (bounds the activation buffers) */
#define HEAD_ROWS 16u /* wanted rows per lm_head product (bounds the logits buffer) */

/* A matrix on the device: rows of row_bytes, split into parts of at most part_rows rows. */
typedef struct {
    uint32_t type, n_in;
    uint64_t rows, row_bytes, part_rows;
    uint32_t n_parts;
    kipp_vk_buf *part;
} dev_mat;

/* A layer's tensors, one slot per kipp_layer_weights field (the field's offset over a
 * pointer's size): a matrix (mat) or a 1-D tensor as f32 (vec). */
#define LW_SLOTS (sizeof(kipp_layer_weights) / sizeof(const kipp_gguf_tensor *))
#define SLOT_OF(off) ((off) / sizeof(const kipp_gguf_tensor *))
typedef struct {
    dev_mat mat[LW_SLOTS];
    kipp_vk_buf vec[LW_SLOTS];
} dev_layer;

/* The chunk inputs' device buffer: offsets of each array (fixed for CHUNK tokens). */
typedef struct {
    uint64_t seq, pos, want, cs, pair_tok, slot_at, cw, tab, end;
} meta_layout;

typedef struct {
    const kipp_vk_kv *kv;
    uint32_t n, n_seq, max_blocks, max_ctx, n_want;
    const uint32_t *pos; /* host: each token's position */
    const int32_t *ids;  /* host: each token's id */
} chunk_t;

struct kipp_vk_fwd {
    kipp_vk *vk;
    const kipp_model *m;
    kipp_gguf_tensor head;
    uint32_t n_ctx, H, F, D, Nh, Nkv, QD, kv_dim, NL, E, K, Fe, chunk;
    int expert_norm;
    float eps;
    kipp_kv_type kv_type;
    double *inv_freq; /* [D/2] model/rope.c's, as cpu-ref uses them */
    double rope_mag;  /* cos/sin magnitude (YaRN's attention factor; 1 otherwise) */
    dev_layer *L;
    dev_mat output;
    kipp_vk_buf out_norm;
    /* activations [chunk rows] (device); act[] / ld[] name them for the ops */
    kipp_vk_buf x, xn, q, k, v, att, proj, gate, up, xw, lg, router, ye, meta, att_scratch;
    kipp_vk_buf *act[KIPP_BUF_COUNT];
    uint32_t ld[KIPP_BUF_COUNT];
    meta_layout ml;
    uint64_t tab_cap; /* bytes of the meta buffer's table area */
    /* host staging of one chunk */
    float *emb; /* [chunk][H] */
    float *cs;  /* [2][chunk][D/2] */
    uint32_t *seq, *want, *dense;
    float *router_h;                                 /* [chunk][E] */
    uint32_t *chosen, *pair_tok, *slot_at, *grp_off; /* MoE, host copies */
    float *cw;
    const chunk_t *cur;
    int fault_mode;
    uint32_t fault_blocks;
    int rc; /* an op's error: the message */
    char msg[KIPP_ERR_LEN];
};

static uint32_t u32min(uint32_t a, uint32_t b) {
    return a < b ? a : b;
}

/* ---- matrices ------------------------------------------------------------------------------ */

static uint64_t view_limit(const kipp_vk *vk) {
    uint64_t lim = kipp_vk_info_get(vk)->max_range;
    const uint64_t alloc = kipp_vk_info_get(vk)->max_alloc;
    if (alloc < lim) lim = alloc;
    return lim;
}

/* The bound a matrix is split at (KIPP_VK_MAX_VIEW may lower it). */
static uint64_t split_limit(const kipp_vk *vk) {
    const uint64_t s = kipp_vk_info_get(vk)->split_view, v = view_limit(vk);
    return s < v ? s : v;
}

static void mat_free(kipp_vk *vk, dev_mat *d) {
    for (uint32_t i = 0; i < d->n_parts; i++) kipp_vk_free(vk, &d->part[i]);
    free(d->part);
    memset(d, 0, sizeof *d);
}

/* Uploads the first `rows` rows of t (all of an expert stack's experts' rows when rows is 0). */
static kipp_status mat_upload(kipp_vk *vk, const kipp_gguf_tensor *t, uint64_t rows, dev_mat *d,
                              char *err, size_t err_len) {
    memset(d, 0, sizeof *d);
    d->type = t->type;
    d->n_in = (uint32_t)t->ne[0];
    d->row_bytes = kipp_type_row_bytes(t->type, t->ne[0]);
    d->rows = rows ? rows : t->n_bytes / d->row_bytes;
    const uint64_t lim = split_limit(vk);
    d->part_rows = lim / d->row_bytes;
    if (d->part_rows == 0)
        return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                         "vulkan: one row of %s (%llu bytes) exceeds the device's storage "
                         "buffer range (%llu bytes)",
                         t->name, (unsigned long long)d->row_bytes, (unsigned long long)lim);
    d->n_parts = (uint32_t)((d->rows + d->part_rows - 1) / d->part_rows);
    d->part = calloc(d->n_parts, sizeof *d->part);
    if (!d->part) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
    for (uint32_t p = 0; p < d->n_parts; p++) {
        const uint64_t r0 = (uint64_t)p * d->part_rows;
        const uint64_t nr = d->rows - r0 < d->part_rows ? d->rows - r0 : d->part_rows;
        kipp_status st = kipp_vk_alloc(vk, nr * d->row_bytes, t->name, &d->part[p], err, err_len);
        if (st == KIPP_OK)
            st = kipp_vk_write(vk, &d->part[p], 0,
                               (const unsigned char *)t->data + r0 * d->row_bytes,
                               nr * d->row_bytes, err, err_len);
        if (st != KIPP_OK) return st;
    }
    return KIPP_OK;
}

/* y[y_row0 + t][y_col0 + o] = x rows times matrix rows [r0, r0 + n_out) of d, one dispatch per
 * part the range touches. */
static int mat_mul(kipp_vk_fwd *f, const dev_mat *d, uint64_t r0, uint32_t n_out, kipp_vk_view x,
                   uint32_t ldx, kipp_vk_view x_rows, uint32_t x_row0, uint32_t n_tok,
                   kipp_vk_view y, uint32_t ldy, uint32_t y_row0, uint32_t y_col0, int exact) {
    for (uint64_t r = r0; r < r0 + n_out;) {
        const uint32_t p = (uint32_t)(r / d->part_rows);
        const uint64_t pend = (uint64_t)(p + 1) * d->part_rows;
        const uint64_t end = r0 + n_out < pend ? r0 + n_out : pend;
        const int rc = kipp_vk_matmul(f->vk, d->type, kipp_vk_all(&d->part[p]),
                                      (r - (uint64_t)p * d->part_rows) * d->row_bytes, d->n_in,
                                      (uint32_t)(end - r), x, ldx, x_rows, x_row0, n_tok, y, ldy,
                                      y_row0, y_col0 + (uint32_t)(r - r0), exact);
        if (rc) return rc;
        r = end;
    }
    return 0;
}

/* ---- sizes ------------------------------------------------------------------------------- */

static int binds(const kipp_model *m, size_t w) {
    for (uint32_t l = 0; l < m->hp.n_layer; l++)
        if (kipp_layer_tensor(m, l, w)) return 1;
    return 0;
}

void kipp_vk_fwd_sizes(const kipp_model *m, uint32_t n_ctx, uint32_t n_logits,
                       uint64_t *weight_bytes, uint64_t *scratch_bytes) {
    const kipp_model_info *hp = &m->hp;
    uint64_t w = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++)
        for (size_t i = 0; i < m->arch->n_tensors; i++) {
            const kipp_arch_tensor *at = &m->arch->tensors[i];
            const kipp_gguf_tensor *t = kipp_layer_tensor(m, l, at->off);
            if (t) w += at->ne[1] == KIPP_DIM_NONE ? t->n_elems * 4 : t->n_bytes;
        }
    if (n_logits) {
        const kipp_gguf_tensor head = kipp_model_head(m, n_logits);
        w += kipp_type_row_bytes(head.type, head.ne[0]) * head.ne[1];
    }
    w += (uint64_t)hp->n_embd * 4;
    const uint64_t H = hp->n_embd, QD = (uint64_t)hp->n_head * hp->head_dim,
                   KV = (uint64_t)hp->n_head_kv * hp->head_dim;
    const uint64_t P = hp->n_expert ? (uint64_t)CHUNK * hp->n_expert_used : 0;
    uint64_t ffn = binds(m, KIPP_W(w_gate)) ? (uint64_t)CHUNK * hp->n_ff : 0;
    if (P * hp->n_ff_exp > ffn) ffn = P * hp->n_ff_exp;
    uint64_t s = (uint64_t)CHUNK * (4 * H + 2 * QD + 2 * KV) * 4 + 2 * ffn * 4 +
                 (uint64_t)HEAD_ROWS * (n_logits + H) * 4 + P * H * 4 +
                 (uint64_t)CHUNK * hp->n_expert * 4;
    s += kipp_vk_attention_scratch_bytes(CHUNK < n_ctx ? CHUNK : n_ctx, hp->n_head, hp->head_dim,
                                         n_ctx);
    *weight_bytes = w;
    *scratch_bytes = s;
}

kipp_status kipp_vk_fwd_check(const kipp_model *m, char *err, size_t err_len) {
    const kipp_model_info *hp = &m->hp;
    if (hp->head_dim > 256 || hp->head_dim % 2 || (hp->n_head_kv * hp->head_dim) % 2)
        return kipp_errf(
            err, err_len, KIPP_ERR_UNSUPPORTED,
            "vulkan: head_dim %u: the attention kernel takes even head sizes up to 256",
            hp->head_dim);
    for (uint32_t l = 0; l < hp->n_layer; l++)
        for (size_t i = 0; i < m->arch->n_tensors; i++) {
            const kipp_arch_tensor *at = &m->arch->tensors[i];
            const kipp_gguf_tensor *t = kipp_layer_tensor(m, l, at->off);
            if (!t) continue;
            if (at->ne[1] != KIPP_DIM_NONE &&
                !kipp_vk_mm_shape_supported(t->type, (uint32_t)t->ne[0]))
                return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                                 "vulkan: tensor %s (%s) has rows of %lld elements; the vulkan "
                                 "kernels need a multiple of 8 and of the type's block",
                                 t->name, kipp_type_name(t->type), (long long)t->ne[0]);
        }
    const kipp_gguf_tensor *o = m->output ? m->output : m->tok_embd;
    if (o && !kipp_vk_mm_shape_supported(o->type, (uint32_t)o->ne[0]))
        return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                         "vulkan: the lm_head %s (%s) has rows the vulkan kernels do not take",
                         o->name, kipp_type_name(o->type));
    return KIPP_OK;
}

/* ---- init / free --------------------------------------------------------------------------- */

void kipp_vk_fwd_free(kipp_vk_fwd *f) {
    if (!f) return;
    kipp_vk *vk = f->vk;
    if (f->L)
        for (uint32_t l = 0; l < f->m->hp.n_layer; l++)
            for (size_t s = 0; s < LW_SLOTS; s++) {
                mat_free(vk, &f->L[l].mat[s]);
                kipp_vk_free(vk, &f->L[l].vec[s]);
            }
    mat_free(vk, &f->output);
    kipp_vk_buf *bufs[] = {&f->out_norm, &f->x,    &f->xn,   &f->q,          &f->k,  &f->v,
                           &f->att,      &f->proj, &f->gate, &f->up,         &f->xw, &f->lg,
                           &f->router,   &f->ye,   &f->meta, &f->att_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) kipp_vk_free(vk, bufs[i]);
    free(f->L);
    free(f->inv_freq);
    free(f->emb);
    free(f->cs);
    free(f->seq);
    free(f->want);
    free(f->dense);
    free(f->router_h);
    free(f->chosen);
    free(f->pair_tok);
    free(f->slot_at);
    free(f->grp_off);
    free(f->cw);
    free(f);
}

static kipp_status upload_vector(kipp_vk_fwd *f, const kipp_gguf_tensor *t, kipp_vk_buf *out,
                                 char *err, size_t err_len) {
    float *tmp = malloc(t->n_elems * sizeof *tmp);
    if (!tmp) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
    kipp_dequantize_row(t->type, t->data, tmp, t->n_elems);
    kipp_status st = kipp_vk_alloc(f->vk, t->n_elems * 4, t->name, out, err, err_len);
    if (st == KIPP_OK) st = kipp_vk_write(f->vk, out, 0, tmp, t->n_elems * 4, err, err_len);
    free(tmp);
    return st;
}

static kipp_status upload_weights(kipp_vk_fwd *f, char *err, size_t err_len) {
    const kipp_model *m = f->m;
    kipp_status st = KIPP_OK;
    for (uint32_t l = 0; st == KIPP_OK && l < m->hp.n_layer; l++)
        for (size_t i = 0; st == KIPP_OK && i < m->arch->n_tensors; i++) {
            const kipp_arch_tensor *at = &m->arch->tensors[i];
            const kipp_gguf_tensor *t = kipp_layer_tensor(m, l, at->off);
            if (!t) continue;
            const size_t s = SLOT_OF(at->off);
            st = at->ne[1] == KIPP_DIM_NONE
                     ? upload_vector(f, t, &f->L[l].vec[s], err, err_len)
                     : mat_upload(f->vk, t, 0, &f->L[l].mat[s], err, err_len);
        }
    if (st == KIPP_OK) st = upload_vector(f, m->output_norm, &f->out_norm, err, err_len);
    if (st == KIPP_OK && f->NL) st = mat_upload(f->vk, &f->head, f->NL, &f->output, err, err_len);
    return st;
}

static kipp_status alloc_acts(kipp_vk_fwd *f, char *err, size_t err_len) {
    const kipp_model *m = f->m;
    const uint64_t C = f->chunk, P = f->E ? C * f->K : 0;
    uint64_t ffn = binds(m, KIPP_W(w_gate)) ? C * f->F : 0;
    if (P * f->Fe > ffn) ffn = P * f->Fe;
    const struct {
        kipp_vk_buf *b;
        uint64_t bytes;
        const char *what;
    } a[] = {
        {&f->x, C * f->H * 4, "the residual stream"},
        {&f->xn, C * f->H * 4, "the normed activations"},
        {&f->proj, C * f->H * 4, "the projections"},
        {&f->q, C * f->QD * 4, "the queries"},
        {&f->att, C * f->QD * 4, "the attention output"},
        {&f->k, C * f->kv_dim * 4, "the keys"},
        {&f->v, C * f->kv_dim * 4, "the values"},
        {&f->gate, ffn * 4, "the FFN gate"},
        {&f->up, ffn * 4, "the FFN up projection"},
        {&f->xw,
         (uint64_t)HEAD_ROWS * f->H * 4 > C * f->H * 4 ? (uint64_t)HEAD_ROWS * f->H * 4
                                                       : C * f->H * 4,
         "the wanted rows"},
        {&f->lg, (uint64_t)HEAD_ROWS * (f->NL ? f->NL : 1) * 4, "the logits"},
        {&f->router, C * (f->E ? f->E : 1) * 4, "the router logits"},
        {&f->ye, P * f->H * 4, "the experts' outputs"},
    };
    for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) {
        if (!a[i].bytes) continue;
        const kipp_status st = kipp_vk_alloc(f->vk, a[i].bytes, a[i].what, a[i].b, err, err_len);
        if (st != KIPP_OK) return st;
    }
    kipp_vk_buf *const act[KIPP_BUF_COUNT] = {
        [KIPP_BUF_X] = &f->x,        [KIPP_BUF_XN] = &f->xn,     [KIPP_BUF_Q] = &f->q,
        [KIPP_BUF_K] = &f->k,        [KIPP_BUF_V] = &f->v,       [KIPP_BUF_ATT] = &f->att,
        [KIPP_BUF_PROJ] = &f->proj,  [KIPP_BUF_GATE] = &f->gate, [KIPP_BUF_UP] = &f->up,
        [KIPP_BUF_EGATE] = &f->gate, [KIPP_BUF_EUP] = &f->up,    [KIPP_BUF_EDOWN] = &f->ye};
    const uint32_t ld[KIPP_BUF_COUNT] = {
        [KIPP_BUF_X] = f->H,      [KIPP_BUF_XN] = f->H,     [KIPP_BUF_Q] = f->QD,
        [KIPP_BUF_K] = f->kv_dim, [KIPP_BUF_V] = f->kv_dim, [KIPP_BUF_ATT] = f->QD,
        [KIPP_BUF_PROJ] = f->H,   [KIPP_BUF_GATE] = f->F,   [KIPP_BUF_UP] = f->F,
        [KIPP_BUF_EGATE] = f->Fe, [KIPP_BUF_EUP] = f->Fe,   [KIPP_BUF_EDOWN] = f->H};
    memcpy(f->act, act, sizeof act);
    memcpy(f->ld, ld, sizeof ld);
    /* the chunk inputs: every array 256-byte aligned (any device's offset alignment) */
    const uint64_t half = f->D / 2;
    uint64_t o = 0;
#define PLACE(field, bytes) (f->ml.field = o, o += ((bytes) + 255) / 256 * 256)
    PLACE(seq, C * 4);
    PLACE(pos, C * 4);
    PLACE(want, C * 4);
    PLACE(cs, 2 * C * half * 4);
    PLACE(pair_tok, (P ? P : 1) * 4);
    PLACE(slot_at, (P ? P : 1) * 4);
    PLACE(cw, (P ? P : 1) * 4);
#undef PLACE
    f->ml.tab = o;
    const uint32_t ctx_blocks = (f->n_ctx + 15) / 16; /* the smallest block size the pool takes */
    f->tab_cap = (uint64_t)ctx_blocks * 4 * 8;
    f->ml.end = o + f->tab_cap;
    return kipp_vk_alloc(f->vk, f->ml.end, "the chunk's inputs", &f->meta, err, err_len);
}

kipp_status kipp_vk_fwd_init(kipp_vk *vk, const kipp_model *m, uint32_t n_ctx, kipp_kv_type kv_type,
                             uint32_t n_logits, kipp_vk_fwd **out, char *err, size_t err_len) {
    *out = NULL;
    const kipp_model_info *hp = &m->hp;
    kipp_vk_fwd *f = calloc(1, sizeof *f);
    if (!f) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
    f->vk = vk;
    f->m = m;
    f->n_ctx = n_ctx;
    f->kv_type = kv_type;
    f->head = kipp_model_head(m, n_logits);
    f->NL = f->head.data ? (uint32_t)f->head.ne[1] : 0;
    f->H = hp->n_embd;
    f->F = hp->n_ff;
    f->D = hp->head_dim;
    f->Nh = hp->n_head;
    f->Nkv = hp->n_head_kv;
    f->QD = f->Nh * f->D;
    f->kv_dim = f->Nkv * f->D;
    f->eps = hp->rms_eps;
    if (hp->n_expert) {
        f->E = hp->n_expert;
        f->K = hp->n_expert_used;
        f->Fe = hp->n_ff_exp;
        f->expert_norm = hp->expert_norm != 0;
    }
    /* a chunk whose widest activation fits one view */
    const uint64_t lim = view_limit(vk);
    uint64_t widest = f->H > f->QD ? f->H : f->QD;
    if (f->F > widest) widest = f->F;
    if (f->E && (uint64_t)f->K * (f->Fe > f->H ? f->Fe : f->H) > widest)
        widest = (uint64_t)f->K * (f->Fe > f->H ? f->Fe : f->H);
    f->chunk = CHUNK;
    while (f->chunk > 1 && (uint64_t)f->chunk * widest * 4 > lim) f->chunk /= 2;
    const uint32_t C = f->chunk, half = f->D / 2, P = f->E ? C * f->K : 1;
    f->L = calloc(hp->n_layer, sizeof *f->L);
    f->inv_freq = malloc(half * sizeof(double));
    f->emb = malloc((size_t)C * f->H * sizeof(float));
    f->cs = malloc((size_t)2 * C * half * sizeof(float));
    f->seq = malloc(C * sizeof(uint32_t));
    f->want = malloc(C * sizeof(uint32_t));
    f->dense = malloc(C * sizeof(uint32_t));
    f->router_h = malloc((size_t)C * (f->E ? f->E : 1) * sizeof(float));
    f->chosen = malloc((size_t)P * sizeof(uint32_t));
    f->pair_tok = malloc((size_t)P * sizeof(uint32_t));
    f->slot_at = malloc((size_t)P * sizeof(uint32_t));
    f->grp_off = malloc(((size_t)f->E + 1) * sizeof(uint32_t));
    f->cw = malloc((size_t)P * sizeof(float));
    kipp_status st = KIPP_OK;
    if (!f->L || !f->inv_freq || !f->emb || !f->cs || !f->seq || !f->want || !f->dense ||
        !f->router_h || !f->chosen || !f->pair_tok || !f->slot_at || !f->grp_off || !f->cw) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
        goto fail;
    }
    kipp_rope_inv_freq(hp, f->D, f->inv_freq);
    f->rope_mag = kipp_rope_attn_factor(hp);
    if ((st = upload_weights(f, err, err_len)) != KIPP_OK) goto fail;
    if ((st = alloc_acts(f, err, err_len)) != KIPP_OK) goto fail;
    *out = f;
    return KIPP_OK;
fail:
    kipp_vk_fwd_free(f);
    return st;
}

void kipp_vk_fwd_set_fault(kipp_vk_fwd *f, int mode, uint32_t n_blocks) {
    f->fault_mode = mode;
    f->fault_blocks = n_blocks;
}

/* ---- the operations (ops.h) on the current chunk (f->cur) -----------------------------------
 * Each records one or a few dispatches over the chunk's n tokens (an expert activation: its
 * n * K pairs, in the routing's group order), with cpu-ref's definition
 * (src/backend/cpu_ref/layers.c). */

static kipp_vk_view A(const kipp_vk_fwd *f, kipp_buf b) {
    return kipp_vk_all(f->act[b]);
}
static kipp_vk_view META(const kipp_vk_fwd *f, uint64_t off, uint64_t bytes) {
    return kipp_vk_sub(&f->meta, off, bytes);
}

static uint32_t act_rows(const kipp_vk_fwd *f, kipp_buf b) {
    return b >= KIPP_BUF_EGATE ? f->cur->n * f->K : f->cur->n;
}

static int op_rmsnorm(void *st, uint32_t l, size_t w, kipp_buf src, kipp_buf dst, uint32_t width) {
    kipp_vk_fwd *f = st;
    const uint32_t per = f->ld[src] / width;
    return kipp_vk_rmsnorm(f->vk, A(f, src), width, kipp_vk_all(&f->L[l].vec[SLOT_OF(w)]), width,
                           act_rows(f, src) * per, f->eps, A(f, dst), width);
}

static int op_matmul(void *st, uint32_t l, uint32_t count, const size_t *w, kipp_buf src,
                     const kipp_buf *dst) {
    kipp_vk_fwd *f = st;
    for (uint32_t i = 0; i < count; i++) {
        const dev_mat *d = &f->L[l].mat[SLOT_OF(w[i])];
        const int rc = mat_mul(f, d, 0, (uint32_t)d->rows, A(f, src), f->ld[src], kipp_vk_none(), 0,
                               f->cur->n, A(f, dst[i]), f->ld[dst[i]], 0, 0, 0);
        if (rc) return rc;
    }
    return 0;
}

static int op_add_bias(void *st, uint32_t l, size_t b, kipp_buf dst) {
    kipp_vk_fwd *f = st;
    return kipp_vk_add_bias(f->vk, A(f, dst), f->ld[dst], kipp_vk_all(&f->L[l].vec[SLOT_OF(b)]),
                            f->ld[dst], f->cur->n);
}

static int op_rope(void *st, kipp_buf dst) {
    kipp_vk_fwd *f = st;
    const uint32_t n = f->cur->n, half = f->D / 2;
    return kipp_vk_rope(f->vk, A(f, dst), f->ld[dst], n, f->ld[dst] / f->D, f->D,
                        META(f, f->ml.cs, (uint64_t)2 * n * half * 4));
}

static int op_kv_store(void *st, uint32_t l) {
    kipp_vk_fwd *f = st;
    const chunk_t *c = f->cur;
    const kipp_vk_kv *kv = c->kv;
    return kipp_vk_kv_store(
        f->vk, kipp_vk_all(&kv->layer[l]), (uint32_t)kv->type, kv->block_size, kv->kv_dim,
        A(f, KIPP_BUF_K), f->kv_dim, A(f, KIPP_BUF_V), f->kv_dim, c->n,
        META(f, f->ml.seq, (uint64_t)c->n * 4), META(f, f->ml.pos, (uint64_t)c->n * 4),
        META(f, f->ml.tab, (uint64_t)c->n_seq * c->max_blocks * 4), c->max_blocks);
}

static int op_attention(void *st, uint32_t l) {
    kipp_vk_fwd *f = st;
    const chunk_t *c = f->cur;
    const kipp_vk_kv *kv = c->kv;
    return kipp_vk_attention(
        f->vk, A(f, KIPP_BUF_Q), f->QD, kipp_vk_all(&kv->layer[l]), (uint32_t)kv->type,
        kv->block_size, kv->kv_dim, f->Nh, f->Nkv, f->D, c->n,
        META(f, f->ml.seq, (uint64_t)c->n * 4), META(f, f->ml.pos, (uint64_t)c->n * 4),
        META(f, f->ml.tab, (uint64_t)c->n_seq * c->max_blocks * 4), c->max_blocks, c->max_ctx,
        kipp_vk_all(&f->att_scratch), A(f, KIPP_BUF_ATT), f->QD,
        kv->private_store ? 0 : f->fault_mode, kv->n_blocks);
}

static int op_swiglu(void *st, kipp_buf gate, kipp_buf up) {
    kipp_vk_fwd *f = st;
    return kipp_vk_swiglu(f->vk, A(f, gate), A(f, up), f->ld[gate], f->ld[gate], act_rows(f, gate),
                          A(f, gate));
}

static int op_add(void *st, kipp_buf dst, kipp_buf src) {
    kipp_vk_fwd *f = st;
    return kipp_vk_add(f->vk, A(f, dst), A(f, src), f->ld[dst], f->ld[dst], f->cur->n);
}

/* The router on the device, the choice on the host (kipp_moe_route, as the cpu backends), the
 * pairs grouped by expert back up. */
static int op_moe_route(void *st, uint32_t l) {
    kipp_vk_fwd *f = st;
    const chunk_t *c = f->cur;
    const uint32_t n = c->n, E = f->E, K = f->K;
    const dev_mat *gi = &f->L[l].mat[SLOT_OF(KIPP_W(gate_inp))];
    int rc = mat_mul(f, gi, 0, E, A(f, KIPP_BUF_XN), f->H, kipp_vk_none(), 0, n,
                     kipp_vk_all(&f->router), E, 0, 0, 1);
    if (!rc)
        rc = kipp_vk_rec_read(f->vk, kipp_vk_sub(&f->router, 0, (uint64_t)n * E * 4), f->router_h,
                              (uint64_t)n * E * 4);
    if (rc) return rc;
    if (kipp_vk_submit(f->vk, f->msg, sizeof f->msg) != KIPP_OK) return f->rc = -1;
    for (uint32_t t = 0; t < n; t++)
        kipp_moe_route(f->router_h + (size_t)t * E, E, K, f->expert_norm, f->chosen + (size_t)t * K,
                       f->cw + (size_t)t * K, l, c->pos[t], c->ids[t]);
    /* pairs p = t * K + s grouped by expert, tokens ascending within a group */
    memset(f->grp_off, 0, ((size_t)E + 1) * sizeof *f->grp_off);
    for (uint32_t p = 0; p < n * K; p++) f->grp_off[f->chosen[p] + 1]++;
    for (uint32_t e = 0; e < E; e++) f->grp_off[e + 1] += f->grp_off[e];
    for (uint32_t e = 0; e < E; e++) {
        uint32_t g = f->grp_off[e];
        for (uint32_t p = 0; p < n * K; p++)
            if (f->chosen[p] == e) {
                f->pair_tok[g] = p / K;
                f->slot_at[p] = g++;
            }
    }
    rc = kipp_vk_rec_write(f->vk, META(f, f->ml.pair_tok, (uint64_t)n * K * 4), f->pair_tok,
                           (uint64_t)n * K * 4);
    if (!rc)
        rc = kipp_vk_rec_write(f->vk, META(f, f->ml.slot_at, (uint64_t)n * K * 4), f->slot_at,
                               (uint64_t)n * K * 4);
    if (!rc)
        rc = kipp_vk_rec_write(f->vk, META(f, f->ml.cw, (uint64_t)n * K * 4), f->cw,
                               (uint64_t)n * K * 4);
    return rc;
}

/* Each expert's group of pairs, one product per (weight, expert): src XN read through each
 * pair's token, an expert activation in group order; dst rows in group order. */
static int op_moe_matmul(void *st, uint32_t l, uint32_t count, const size_t *w, kipp_buf src,
                         const kipp_buf *dst) {
    kipp_vk_fwd *f = st;
    const uint32_t n = f->cur->n;
    const int gather = src < KIPP_BUF_EGATE;
    const kipp_vk_view rows =
        gather ? META(f, f->ml.pair_tok, (uint64_t)n * f->K * 4) : kipp_vk_none();
    for (uint32_t i = 0; i < count; i++) {
        const kipp_gguf_tensor *t = kipp_layer_tensor(f->m, l, w[i]);
        const dev_mat *d = &f->L[l].mat[SLOT_OF(w[i])];
        const uint32_t n_out = (uint32_t)t->ne[1];
        for (uint32_t e = 0; e < f->E; e++) {
            const uint32_t g0 = f->grp_off[e], cnt = f->grp_off[e + 1] - g0;
            if (!cnt) continue;
            const int rc = mat_mul(f, d, (uint64_t)e * n_out, n_out, A(f, src), f->ld[src], rows,
                                   g0, cnt, A(f, dst[i]), f->ld[dst[i]], g0, 0, 0);
            if (rc) return rc;
        }
    }
    return 0;
}

static int op_moe_sum(void *st, kipp_buf src, kipp_buf dst) {
    kipp_vk_fwd *f = st;
    const uint32_t n = f->cur->n;
    return kipp_vk_moe_sum(f->vk, A(f, dst), f->ld[dst], A(f, src), f->ld[src],
                           META(f, f->ml.cw, (uint64_t)n * f->K * 4),
                           META(f, f->ml.slot_at, (uint64_t)n * f->K * 4), f->ld[dst], n, f->K);
}

static const kipp_backend_kernels vk_kernels = {
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
};

const kipp_backend_kernels *kipp_vk_fwd_kernels(void) {
    return &vk_kernels;
}

/* ---- the pass ------------------------------------------------------------------------------- */

static kipp_status vk_err(kipp_vk_fwd *f, int rc, char *err, size_t err_len) {
    if (f->rc && f->msg[0]) {
        f->rc = 0;
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND, "%s", f->msg);
    }
    /* a recording error: the runtime names it at submit */
    const kipp_status st = kipp_vk_submit(f->vk, err, err_len);
    if (st != KIPP_OK) return st;
    return kipp_errf(err, err_len, KIPP_ERR_BACKEND, "vulkan: a kernel launch failed (code %d)",
                     rc);
}

/* Makes the attention scratch hold what this chunk needs. */
static kipp_status ensure_att(kipp_vk_fwd *f, uint32_t n, uint32_t max_ctx, char *err,
                              size_t err_len) {
    const uint64_t need = kipp_vk_attention_scratch_bytes(n, f->Nh, f->D, max_ctx);
    if (need <= f->att_scratch.size) return KIPP_OK;
    if (need > view_limit(f->vk))
        return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                         "vulkan: attention over %u positions for %u tokens needs %.0f MiB of "
                         "scratch, more than one storage buffer view of this device (%.0f MiB)",
                         max_ctx, n, need / 1048576.0, view_limit(f->vk) / 1048576.0);
    kipp_vk_free(f->vk, &f->att_scratch);
    return kipp_vk_alloc(f->vk, need, "the attention scratch", &f->att_scratch, err, err_len);
}

/* One chunk: its inputs up, the layers, the head, the wait. */
static kipp_status run_chunk(kipp_vk_fwd *f, const chunk_t *c, const uint32_t *tab, float *out,
                             char *err, size_t err_len) {
    kipp_vk *vk = f->vk;
    const kipp_model *m = f->m;
    const uint32_t n = c->n, H = f->H, half = f->D / 2;
    const uint64_t tab_bytes = (uint64_t)c->n_seq * c->max_blocks * 4;
    kipp_status st = ensure_att(f, n, c->max_ctx, err, err_len);
    if (st != KIPP_OK) return st;
    if (tab_bytes > f->tab_cap) { /* a wider table than sized: grow the inputs' buffer */
        kipp_vk_free(vk, &f->meta);
        f->tab_cap = tab_bytes * 2;
        f->ml.end = f->ml.tab + f->tab_cap;
        if ((st = kipp_vk_alloc(vk, f->ml.end, "the chunk's inputs", &f->meta, err, err_len)) !=
            KIPP_OK)
            return st;
    }
    /* embedding rows on the host, from the mapped file */
    const uint64_t rb = kipp_type_row_bytes(m->tok_embd->type, H);
    for (uint32_t t = 0; t < n; t++)
        kipp_dequantize_row(m->tok_embd->type,
                            (const unsigned char *)m->tok_embd->data + (uint64_t)c->ids[t] * rb,
                            f->emb + (size_t)t * H, H);
    kipp_rope_tables(f->inv_freq, f->rope_mag, half, c->pos, n, f->cs, f->cs + (size_t)n * half);
    int rc = kipp_vk_begin(vk);
    if (!rc) rc = kipp_vk_rec_write(vk, kipp_vk_all(&f->x), f->emb, (uint64_t)n * H * 4);
    if (!rc) rc = kipp_vk_rec_write(vk, META(f, f->ml.seq, n * 4), f->seq, (uint64_t)n * 4);
    if (!rc) rc = kipp_vk_rec_write(vk, META(f, f->ml.pos, n * 4), c->pos, (uint64_t)n * 4);
    if (!rc && c->n_want)
        rc = kipp_vk_rec_write(vk, META(f, f->ml.want, c->n_want * 4), f->want,
                               (uint64_t)c->n_want * 4);
    if (!rc)
        rc = kipp_vk_rec_write(vk, META(f, f->ml.cs, 2ull * n * half * 4), f->cs,
                               2ull * n * half * 4);
    if (!rc) rc = kipp_vk_rec_write(vk, META(f, f->ml.tab, tab_bytes), tab, tab_bytes);
    if (!rc) {
        f->cur = c;
        rc = kipp_program_run(m, &vk_kernels, f);
        f->cur = NULL;
    }
    /* the head: the wanted rows gathered, final-normed, then the lm_head HEAD_ROWS at a time */
    const uint32_t NL = f->NL;
    for (uint32_t r0 = 0; !rc && r0 < c->n_want; r0 += HEAD_ROWS) {
        const uint32_t nr = u32min(HEAD_ROWS, c->n_want - r0);
        rc = kipp_vk_get_rows(vk, kipp_vk_all(&f->x), H,
                              META(f, f->ml.want + (uint64_t)r0 * 4, nr * 4), nr, H,
                              kipp_vk_all(&f->xw), H);
        if (!rc)
            rc = kipp_vk_rmsnorm(vk, kipp_vk_all(&f->xw), H, kipp_vk_all(&f->out_norm), H, nr,
                                 f->eps, kipp_vk_all(&f->xw), H);
        if (rc) break;
        if (!NL) {
            rc = kipp_vk_rec_read(vk, kipp_vk_all(&f->xw), out + (size_t)r0 * H,
                                  (uint64_t)nr * H * 4);
            continue;
        }
        rc = mat_mul(f, &f->output, 0, NL, kipp_vk_all(&f->xw), H, kipp_vk_none(), 0, nr,
                     kipp_vk_all(&f->lg), NL, 0, 0, 0);
        if (!rc)
            rc = kipp_vk_rec_read(vk, kipp_vk_all(&f->lg), out + (size_t)r0 * NL,
                                  (uint64_t)nr * NL * 4);
    }
    if (rc) return vk_err(f, rc, err, err_len);
    return kipp_vk_submit(vk, err, err_len);
}

kipp_status kipp_vk_fwd_decode_batch(kipp_vk_fwd *f, kipp_kv_pool *pool, const kipp_batch *b,
                                     float *logits, char *err, size_t err_len) {
    const kipp_vk_kv *kv = pool->storage.store;
    const uint32_t row = f->NL ? f->NL : f->H;
    uint32_t *tab = NULL;
    size_t tab_cap = 0;
    kipp_status st = KIPP_OK;
    for (uint32_t i0 = 0; i0 < b->n && st == KIPP_OK;) {
        chunk_t c = {.kv = kv, .n = u32min(f->chunk, b->n - i0)};
        c.pos = b->positions + i0;
        c.ids = b->tokens + i0;
        uint32_t need = 0, max_pos = 0, last = 0;
        for (uint32_t t = 0; t < c.n; t++) {
            const uint32_t id = b->seq_ids[i0 + t];
            if (b->positions[i0 + t] > max_pos) max_pos = b->positions[i0 + t];
            if (c.n_seq && f->dense[last] == id) {
                f->seq[t] = last;
                continue;
            }
            for (last = 0; last < c.n_seq && f->dense[last] != id; last++) {
            }
            if (last == c.n_seq) {
                const kipp_kv_seq *s = kipp_kv_seq_get(pool, id);
                if (!s) {
                    free(tab);
                    return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                                     "vulkan: sequence %u is not live", id);
                }
                if (s->n_blocks > need) need = s->n_blocks;
                f->dense[c.n_seq++] = id;
            }
            f->seq[t] = last;
        }
        for (uint32_t t = 0; t < c.n; t++)
            if (b->want_logits[i0 + t]) f->want[c.n_want++] = t;
        c.max_blocks = need ? need : 1;
        c.max_ctx = max_pos + 1;
        const size_t tn = (size_t)c.n_seq * c.max_blocks;
        if (tn > tab_cap) {
            uint32_t *p = realloc(tab, tn * sizeof *tab);
            if (!p) {
                free(tab);
                return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
            }
            tab = p;
            tab_cap = tn;
        }
        for (uint32_t j = 0; j < c.n_seq; j++) {
            const kipp_kv_seq *s = kipp_kv_seq_get(pool, f->dense[j]);
            uint32_t *r = tab + (size_t)j * c.max_blocks;
            memcpy(r, s->blocks, (size_t)s->n_blocks * sizeof *r);
            memset(r + s->n_blocks, 0, (size_t)(c.max_blocks - s->n_blocks) * sizeof *r);
        }
        st = run_chunk(f, &c, tab, logits, err, err_len);
        if (c.n_want && logits) logits += (size_t)c.n_want * row;
        i0 += c.n;
    }
    free(tab);
    return st;
}

kipp_status kipp_vk_fwd_nocache(kipp_vk_fwd *f, const int32_t *tokens, uint32_t n, float *logits,
                                char *err, size_t err_len) {
    if (n == 0) return KIPP_OK;
    const uint32_t bs = KIPP_KV_DEFAULT_BLOCK_SIZE, nb = (n + bs - 1) / bs;
    const kipp_kv_layout lay = {
        .n_layer = f->m->hp.n_layer, .kv_dim = f->kv_dim, .block_size = bs, .type = f->kv_type};
    kipp_vk_kv *kv = NULL;
    kipp_status st = kipp_vk_kv_create(f->vk, &lay, nb, &kv, err, err_len);
    if (st != KIPP_OK) return st;
    kv->private_store =
        1; /* the fault build's planted read bugs are the cache's, not this oracle's */
    uint32_t *tab = malloc(nb * sizeof *tab), *pos = malloc(f->chunk * sizeof *pos);
    if (!tab || !pos) st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
    for (uint32_t j = 0; tab && j < nb; j++) tab[j] = j;
    for (uint32_t p0 = 0; p0 < n && st == KIPP_OK;) {
        chunk_t c = {.kv = kv, .n = u32min(f->chunk, n - p0), .n_seq = 1, .max_blocks = nb};
        c.max_ctx = p0 + c.n;
        c.ids = tokens + p0;
        c.pos = pos;
        for (uint32_t t = 0; t < c.n; t++) {
            f->seq[t] = 0;
            pos[t] = p0 + t;
        }
        if (logits && p0 + c.n == n) { /* the last token's row only */
            f->want[0] = c.n - 1;
            c.n_want = 1;
        }
        st = run_chunk(f, &c, tab, logits, err, err_len);
        p0 += c.n;
    }
    free(tab);
    free(pos);
    kipp_vk_kv_destroy(f->vk, kv);
    return st;
}

/* ---- KV storage ------------------------------------------------------------------------------ */

kipp_status kipp_vk_kv_create(kipp_vk *vk, const kipp_kv_layout *lay, uint32_t n_blocks,
                              kipp_vk_kv **out, char *err, size_t err_len) {
    *out = NULL;
    const size_t elt = kipp_kv_type_size(lay->type);
    if (!elt || lay->kv_dim % 2)
        return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                         "vulkan: KV type or row size not supported");
    const uint64_t per_layer = (uint64_t)n_blocks * 2 * lay->block_size * lay->kv_dim * elt;
    if (per_layer > view_limit(vk))
        return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                         "vulkan: one layer's KV cache (%u blocks of %u tokens: %.0f MiB) exceeds "
                         "what one storage buffer view of %s may span (%.0f MiB); use a shorter "
                         "context (--ctx) or fewer KV blocks",
                         n_blocks, lay->block_size, per_layer / 1048576.0,
                         kipp_vk_info_get(vk)->name, view_limit(vk) / 1048576.0);
    kipp_vk_kv *kv = calloc(1, sizeof *kv);
    if (kv) kv->layer = calloc(lay->n_layer, sizeof *kv->layer);
    if (!kv || !kv->layer) {
        if (kv) free(kv);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
    }
    kv->type = lay->type;
    kv->n_layer = lay->n_layer;
    kv->kv_dim = lay->kv_dim;
    kv->block_size = lay->block_size;
    kv->n_blocks = n_blocks;
    kv->block_bytes = (uint64_t)2 * lay->block_size * lay->kv_dim * elt;
    for (uint32_t l = 0; l < lay->n_layer; l++) {
        const kipp_status st =
            kipp_vk_alloc(vk, per_layer, "the KV cache", &kv->layer[l], err, err_len);
        if (st != KIPP_OK) {
            kipp_vk_kv_destroy(vk, kv);
            return st;
        }
    }
    *out = kv;
    return KIPP_OK;
}

void kipp_vk_kv_destroy(kipp_vk *vk, kipp_vk_kv *kv) {
    if (!kv) return;
    for (uint32_t l = 0; kv->layer && l < kv->n_layer; l++) kipp_vk_free(vk, &kv->layer[l]);
    free(kv->layer);
    free(kv);
}

/* Copy-on-write: recorded into the open recording (or a new one), so it runs before the next
 * batch's commands, which the same recording carries. */
void kipp_vk_kv_copy(kipp_vk *vk, kipp_vk_kv *kv, uint32_t dst, uint32_t src) {
    for (uint32_t l = 0; l < kv->n_layer; l++)
        kipp_vk_rec_copy(
            vk, kipp_vk_sub(&kv->layer[l], (uint64_t)dst * kv->block_bytes, kv->block_bytes),
            kipp_vk_sub(&kv->layer[l], (uint64_t)src * kv->block_bytes, kv->block_bytes),
            kv->block_bytes);
}
