/* layers.c — the reference (cpu-ref) forward pass: the operations of ops.h, plain C11, row by
 * row, f32 activations and f32 accumulation (sums of squares in double, as ggml does), run
 * through the one driver of the layer program (program.c). These operation bodies are the
 * definition every backend is gated against. Each row's arithmetic is exactly that of a lone
 * decode step of its token, so a batch equals the single steps bit for bit.
 * Every weight matrix goes through the caller's matvec (cpu-ref: scalar dequantize-and-dot). Contains
 * no ISA-specific code. K/V live in the context's host KV storage, f32/f16/bf16, and are
 * addressed through kipp_host_kv_row() only (src/backend/host_kv.h); the recomputation
 * oracle keeps private f32 buffers holding the same rounded values. */
#include "backend/cpu_ref/layers.h"

#include "backend/host_kv.h"
#include "backend/moe.h"
#include "backend/ops.h"
#include "model/arch.h"
#include "model/rope.h"

#include "core/error.h"
#include "core/types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows one pass takes: a longer batch runs as consecutive passes (a token's K/V are in the
 * cache before a later pass's attention reads them). */
#define PASS_ROWS 64u

struct kipp_fwd_state {
    const kipp_model *m;
    kipp_gguf_tensor head; /* the lm_head's first n_logits rows (kipp_model_head) */
    kipp_fwd_matvec_fn matvec; /* the one kernel a backend supplies */
    void *mv_ctx;
    uint32_t n_ctx;
    uint32_t kv_dim; /* Nkv * D */
    kipp_kv_type kv_type, kv_type_v; /* K's and V's */
    const float **k_rows, **v_rows; /* [n_ctx] one row's K/V rows of positions 0..pos */
    float *kbuf, *vbuf; /* [n_ctx][kv_dim] f32 copies of f16/bf16 rows (NULL for f32) */
    float *scores; /* [n_ctx] */
    float *row;    /* [max input dim] one dequantized weight row */
    float *wbuf;   /* [max(H, QD)] a norm or bias vector, dequantized */
    float *rope_cos, *rope_sin; /* [D/2] for one position */
    double *inv_freq;           /* [D/2] model/rope.c's, for the model's rope scaling */
    double rope_mag;            /* cos/sin magnitude: YaRN's attention factor, else 1 */
    float *router; /* [E] one row's router logits, then probabilities */
    /* the pass: rows 0..n-1 */
    uint32_t n;
    const int32_t *tokens;     /* [n] */
    const uint32_t *positions; /* [n] */
    const kipp_host_kv *kv;    /* the cache (NULL: the recomputation's private rows) */
    const kipp_kv_seq *seqs[PASS_ROWS];
    float *priv_k, *priv_v;    /* [n_ctx][kv_dim] the recomputation's K/V, one layer */
    uint32_t cap;                 /* rows the buffers below hold (PASS_ROWS, or a recomputation's n) */
    float *act[KIPP_BUF_COUNT];   /* cap rows each (expert ones: cap * k) */
    uint32_t width[KIPP_BUF_COUNT];
    uint32_t *chosen; /* [cap * k] each row's experts, best first (pair p = t * k + slot) */
    float *chosen_w;  /* [cap * k] their weights */
};
typedef kipp_fwd_state cpu_ref_state; /* the name the layer code grew up with */

/* ---- numerics ------------------------------------------------------------------------- */

/* out = x / sqrt(mean(x^2) + eps) * w; the sum of squares in double (as ggml). */
static void rmsnorm(float *out, const float *x, const float *w, uint32_t n, float eps) {
    double ss = 0.0;
    for (uint32_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    for (uint32_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

/* Norm weights are tiny; dequantize them on use into the caller's buffer. */
static const float *norm_weights(const kipp_gguf_tensor *t, float *buf) {
    kipp_dequantize_row(t->type, t->data, buf, (uint64_t)t->n_elems);
    return buf;
}

/* NEOX RoPE angles for position pos: theta_i = pos * inv_freq_i (base^(-2i/D) unscaled;
 * model/rope.c's linear or YaRN blend otherwise, the one function every backend shares,
 * written in double and checked against HF's goldens), cos and sin times the YaRN attention
 * factor, computed in double and rounded once, so the reference sits as close to the
 * float64 oracle as it can. */
static void rope_angles(cpu_ref_state *s, uint32_t pos) {
    const uint32_t D = s->m->hp.head_dim;
    for (uint32_t i = 0; i < D / 2; i++) {
        double theta = (double)pos * s->inv_freq[i];
        s->rope_cos[i] = (float)(cos(theta) * s->rope_mag);
        s->rope_sin[i] = (float)(sin(theta) * s->rope_mag);
    }
}

/* Rotates one head in place: element i pairs with element i + D/2 (rotate-half). */
static void rope_head(const cpu_ref_state *s, float *h) {
    const uint32_t half = s->m->hp.head_dim / 2;
    for (uint32_t i = 0; i < half; i++) {
        const float a = h[i], b = h[i + half];
        h[i] = a * s->rope_cos[i] - b * s->rope_sin[i];
        h[i + half] = a * s->rope_sin[i] + b * s->rope_cos[i];
    }
}

static float silu(float z) { return z / (1.0f + expf(-z)); }


/* Causal GQA attention of one row's q over positions 0..n_kv-1 (s->k_rows, s->v_rows) into att. */
static void attention(cpu_ref_state *s, const float *q, float *att, uint32_t n_kv) {
    const kipp_model_info *hp = &s->m->hp;
    const uint32_t D = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const float scale = 1.0f / sqrtf((float)D);
    for (uint32_t h = 0; h < hp->n_head; h++) {
        const float *qh = q + (size_t)h * D;
        const size_t kv_off = (size_t)(h / group) * D; /* consecutive q heads share a kv head */
        float mx = -INFINITY;
        for (uint32_t t = 0; t < n_kv; t++) {
            const float *kt = s->k_rows[t] + kv_off;
            float dot = 0.0f;
            for (uint32_t i = 0; i < D; i++) dot += qh[i] * kt[i];
            s->scores[t] = dot * scale;
            if (s->scores[t] > mx) mx = s->scores[t];
        }
        float sum = 0.0f;
        for (uint32_t t = 0; t < n_kv; t++) {
            s->scores[t] = expf(s->scores[t] - mx);
            sum += s->scores[t];
        }
        float *oh = att + (size_t)h * D;
        memset(oh, 0, D * sizeof *oh);
        for (uint32_t t = 0; t < n_kv; t++) {
            const float *vt = s->v_rows[t] + kv_off;
            const float p = s->scores[t] / sum;
            for (uint32_t i = 0; i < D; i++) oh[i] += p * vt[i];
        }
    }
}

/* ---- the operations (ops.h), row by row ---------------------------------------------------- */

static float *act_row(cpu_ref_state *s, kipp_buf a, uint32_t r) { return s->act[a] + (size_t)r * s->width[a]; }
/* rows of an activation in this pass: a row per token, or per (token, slot) pair */
static uint32_t act_rows(const cpu_ref_state *s, kipp_buf a) {
    return a >= KIPP_BUF_EGATE ? s->n * s->m->hp.n_expert_used : s->n;
}

static int op_rmsnorm(void *st, uint32_t l, size_t w, kipp_buf src, kipp_buf dst, uint32_t width) {
    cpu_ref_state *s = st;
    const float *wn = norm_weights(kipp_layer_tensor(s->m, l, w), s->wbuf);
    const uint32_t per = s->width[src] / width;
    for (uint32_t t = 0; t < s->n; t++)
        for (uint32_t i = 0; i < per; i++)
            rmsnorm(act_row(s, dst, t) + (size_t)i * width, act_row(s, src, t) + (size_t)i * width, wn, width,
                    s->m->hp.rms_eps);
    return 0;
}

static int op_matmul(void *st, uint32_t l, uint32_t count, const size_t *w, kipp_buf src, const kipp_buf *dst) {
    cpu_ref_state *s = st;
    for (uint32_t t = 0; t < s->n; t++)
        for (uint32_t i = 0; i < count; i++)
            s->matvec(s->mv_ctx, kipp_layer_tensor(s->m, l, w[i]), act_row(s, src, t), act_row(s, dst[i], t), s->row);
    return 0;
}

static int op_add_bias(void *st, uint32_t l, size_t b, kipp_buf dst) {
    cpu_ref_state *s = st;
    const float *bf = norm_weights(kipp_layer_tensor(s->m, l, b), s->wbuf);
    for (uint32_t t = 0; t < s->n; t++) {
        float *v = act_row(s, dst, t);
        for (uint32_t j = 0; j < s->width[dst]; j++) v[j] += bf[j];
    }
    return 0;
}

static int op_rope(void *st, kipp_buf dst) {
    cpu_ref_state *s = st;
    const uint32_t D = s->m->hp.head_dim;
    for (uint32_t t = 0; t < s->n; t++) {
        rope_angles(s, s->positions[t]);
        for (uint32_t h = 0; h < s->width[dst] / D; h++) rope_head(s, act_row(s, dst, t) + (size_t)h * D);
    }
    return 0;
}

/* K and V rows into the cache at (sequence, layer, position), or into the recomputation's
 * private rows rounded as the cache's type would store them. */
static int op_kv_store(void *st, uint32_t l) {
    cpu_ref_state *s = st;
    for (uint32_t t = 0; t < s->n; t++) {
        const float *k = act_row(s, KIPP_BUF_K, t), *v = act_row(s, KIPP_BUF_V, t);
        const uint32_t p = s->positions[t];
        if (s->kv) {
            kipp_host_kv_put(s->kv->type, kipp_host_kv_row(s->kv, s->seqs[t], l, p, KIPP_KV_K, KIPP_KV_WRITE), k, s->kv_dim);
            kipp_host_kv_put(s->kv->type_v, kipp_host_kv_row(s->kv, s->seqs[t], l, p, KIPP_KV_V, KIPP_KV_WRITE), v, s->kv_dim);
            continue;
        }
        float *pk = s->priv_k + (size_t)p * s->kv_dim, *pv = s->priv_v + (size_t)p * s->kv_dim;
        memcpy(pk, k, s->kv_dim * sizeof *pk);
        memcpy(pv, v, s->kv_dim * sizeof *pv);
        kipp_kv_round(s->kv_type, pk, s->kv_dim);
        kipp_kv_round(s->kv_type_v, pv, s->kv_dim);
    }
    return 0;
}

/* Row t's K/V rows of positions 0..pos (f16/bf16 cache rows widened into kbuf / vbuf). */
static void kv_rows(cpu_ref_state *s, uint32_t t, uint32_t l, uint32_t pos) {
    const size_t kvd = s->kv_dim;
    for (uint32_t p = 0; p <= pos; p++) {
        if (!s->kv) {
            s->k_rows[p] = s->priv_k + p * kvd;
            s->v_rows[p] = s->priv_v + p * kvd;
            continue;
        }
        const void *kr = kipp_host_kv_row(s->kv, s->seqs[t], l, p, KIPP_KV_K, KIPP_KV_READ);
        const void *vr = kipp_host_kv_row(s->kv, s->seqs[t], l, p, KIPP_KV_V, KIPP_KV_READ);
        if (s->kv->type == KIPP_KV_TYPE_F32) {
            s->k_rows[p] = kr;
        } else {
            kipp_host_kv_get(s->kv->type, s->kbuf + p * kvd, kr, s->kv_dim);
            s->k_rows[p] = s->kbuf + p * kvd;
        }
        if (s->kv->type_v == KIPP_KV_TYPE_F32) {
            s->v_rows[p] = vr;
        } else {
            kipp_host_kv_get(s->kv->type_v, s->vbuf + p * kvd, vr, s->kv_dim);
            s->v_rows[p] = s->vbuf + p * kvd;
        }
    }
}

static int op_attention(void *st, uint32_t l) {
    cpu_ref_state *s = st;
    for (uint32_t t = 0; t < s->n; t++) {
        kv_rows(s, t, l, s->positions[t]);
        attention(s, act_row(s, KIPP_BUF_Q, t), act_row(s, KIPP_BUF_ATT, t), s->positions[t] + 1);
    }
    return 0;
}

static int op_swiglu(void *st, kipp_buf gate, kipp_buf up) {
    cpu_ref_state *s = st;
    for (uint32_t r = 0; r < act_rows(s, gate); r++) {
        float *g = act_row(s, gate, r);
        const float *u = act_row(s, up, r);
        for (uint32_t j = 0; j < s->width[gate]; j++) g[j] = silu(g[j]) * u[j];
    }
    return 0;
}

static int op_add(void *st, kipp_buf dst, kipp_buf src) {
    cpu_ref_state *s = st;
    for (uint32_t t = 0; t < s->n; t++) {
        float *x = act_row(s, dst, t);
        const float *a = act_row(s, src, t);
        for (uint32_t j = 0; j < s->width[dst]; j++) x[j] += a[j];
    }
    return 0;
}

static int op_moe_route(void *st, uint32_t l) {
    cpu_ref_state *s = st;
    const kipp_model_info *hp = &s->m->hp;
    const uint32_t k = hp->n_expert_used;
    for (uint32_t t = 0; t < s->n; t++) {
        s->matvec(s->mv_ctx, s->m->layers[l].gate_inp, act_row(s, KIPP_BUF_XN, t), s->router, s->row);
        kipp_moe_route(s->router, hp->n_expert, k, (int)hp->expert_norm, s->chosen + (size_t)t * k,
                       s->chosen_w + (size_t)t * k, l, s->positions[t], s->tokens[t]);
    }
    return 0;
}

/* pair p = t * k + slot: token t's slot-th expert; its input is token t's XN row or its own row */
static int op_moe_matmul(void *st, uint32_t l, uint32_t count, const size_t *w, kipp_buf src, const kipp_buf *dst) {
    cpu_ref_state *s = st;
    const uint32_t k = s->m->hp.n_expert_used;
    for (uint32_t p = 0; p < s->n * k; p++)
        for (uint32_t i = 0; i < count; i++)
            s->matvec(s->mv_ctx, kipp_expert_tensor(s->m, l, w[i], s->chosen[p]),
                      act_row(s, src, src == KIPP_BUF_XN ? p / k : p), act_row(s, dst[i], p), s->row);
    return 0;
}

static int op_moe_sum(void *st, kipp_buf src, kipp_buf dst) {
    cpu_ref_state *s = st;
    const uint32_t k = s->m->hp.n_expert_used;
    for (uint32_t t = 0; t < s->n; t++) {
        float *y = act_row(s, dst, t);
        memset(y, 0, s->width[dst] * sizeof *y);
        for (uint32_t slot = 0; slot < k; slot++) { /* best first */
            const float wt = s->chosen_w[(size_t)t * k + slot];
            const float *e = act_row(s, src, t * k + slot);
            for (uint32_t j = 0; j < s->width[dst]; j++) y[j] += wt * e[j];
        }
    }
    return 0;
}

static const kipp_backend_kernels cpu_ref_kernels = {
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

static void embed(const cpu_ref_state *s, int32_t tok, float *x) {
    const kipp_gguf_tensor *e = s->m->tok_embd;
    const uint64_t H = (uint64_t)e->ne[0];
    kipp_dequantize_row(e->type, (const char *)e->data + (uint64_t)tok * kipp_type_row_bytes(e->type, H),
                        x, H);
}

static void final_logits(cpu_ref_state *s, const float *x, float *logits) {
    const kipp_model_info *hp = &s->m->hp;
    if (!s->head.data) { /* embeddings: the final-norm hidden state is the output row */
        rmsnorm(logits, x, norm_weights(s->m->output_norm, s->wbuf), hp->n_embd, hp->rms_eps);
        return;
    }
    float *xn = act_row(s, KIPP_BUF_XN, 0);
    rmsnorm(xn, x, norm_weights(s->m->output_norm, s->wbuf), hp->n_embd, hp->rms_eps);
    s->matvec(s->mv_ctx, &s->head, xn, logits, s->row);
}

/* Grows the pass buffers to `rows` rows; 0 when out of memory (the old buffers stay). */
static int ensure_rows(cpu_ref_state *s, uint32_t rows) {
    if (rows <= s->cap) return 1;
    const size_t K = s->m->hp.n_expert_used;
    for (int a = 0; a < KIPP_BUF_COUNT; a++) {
        if (!s->width[a]) continue;
        const size_t n = (a >= KIPP_BUF_EGATE ? rows * K : rows) * s->width[a];
        if (!n) continue;
        float *p = realloc(s->act[a], n * sizeof *p);
        if (!p) return 0;
        s->act[a] = p;
    }
    if (K) {
        uint32_t *c = realloc(s->chosen, rows * K * sizeof *c);
        if (!c) return 0;
        s->chosen = c;
        float *w = realloc(s->chosen_w, rows * K * sizeof *w);
        if (!w) return 0;
        s->chosen_w = w;
    }
    s->cap = rows;
    return 1;
}

/* ---- backend entry points ------------------------------------------------------------- */

void kipp_fwd_free(kipp_fwd_state *state) {
    cpu_ref_state *s = state;
    if (!s) return;
    free(s->k_rows); free(s->v_rows); free(s->kbuf); free(s->vbuf);
    free(s->scores); free(s->row); free(s->wbuf); free(s->rope_cos); free(s->rope_sin); free(s->inv_freq);
    free(s->router); free(s->chosen); free(s->chosen_w);
    for (int a = 0; a < KIPP_BUF_COUNT; a++) free(s->act[a]);
    free(s);
}

kipp_status kipp_fwd_init(const kipp_model *m, uint32_t n_ctx, kipp_kv_type kv_type,
                          kipp_kv_type kv_type_v,
                          uint32_t n_logits, kipp_fwd_matvec_fn matvec, void *mv_ctx, kipp_fwd_state **state,
                          char *err, size_t err_len) {
    *state = NULL;
    const kipp_model_info *hp = &m->hp;
    kipp_status st = kipp_program_check(m->arch, "cpu-ref", &cpu_ref_kernels, err, err_len);
    if (st != KIPP_OK) return st;
    cpu_ref_state *s = calloc(1, sizeof *s);
    if (!s) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "forward pass: out of memory");
    s->m = m;
    s->matvec = matvec;
    s->mv_ctx = mv_ctx;
    s->n_ctx = n_ctx;
    s->kv_dim = hp->n_head_kv * hp->head_dim;
    s->kv_type = kv_type;
    s->kv_type_v = kv_type_v ? kv_type_v : kv_type;
    s->head = kipp_model_head(m, n_logits);
    if (kv_type != KIPP_KV_TYPE_F32 || s->kv_type_v != KIPP_KV_TYPE_F32) {
        s->kbuf = malloc((size_t)n_ctx * s->kv_dim * sizeof(float));
        s->vbuf = malloc((size_t)n_ctx * s->kv_dim * sizeof(float));
    }
    const uint32_t H = hp->n_embd, QD = hp->n_head * hp->head_dim;
    size_t max_in = H;
    if (hp->n_ff > max_in) max_in = hp->n_ff;
    if (hp->n_ff_exp > max_in) max_in = hp->n_ff_exp;
    if (QD > max_in) max_in = QD;
    const uint32_t widths[KIPP_BUF_COUNT] = {
        [KIPP_BUF_X] = H, [KIPP_BUF_XN] = H, [KIPP_BUF_Q] = QD, [KIPP_BUF_K] = s->kv_dim,
        [KIPP_BUF_V] = s->kv_dim, [KIPP_BUF_ATT] = QD, [KIPP_BUF_PROJ] = H,
        [KIPP_BUF_GATE] = hp->n_ff, [KIPP_BUF_UP] = hp->n_ff, [KIPP_BUF_EGATE] = hp->n_ff_exp,
        [KIPP_BUF_EUP] = hp->n_ff_exp, [KIPP_BUF_EDOWN] = hp->n_expert ? H : 0};
    for (int a = 0; a < KIPP_BUF_COUNT; a++) s->width[a] = widths[a];
    int ok = ensure_rows(s, PASS_ROWS);
    if (hp->n_expert) ok &= (s->router = calloc(hp->n_expert, sizeof(float))) != NULL;
    s->k_rows = calloc(n_ctx, sizeof *s->k_rows);
    s->v_rows = calloc(n_ctx, sizeof *s->v_rows);
    s->scores = calloc(n_ctx, sizeof(float));
    s->row = calloc(max_in, sizeof(float));
    s->wbuf = calloc(H > QD ? H : QD, sizeof(float));
    s->rope_cos = calloc(hp->head_dim / 2, sizeof(float));
    s->rope_sin = calloc(hp->head_dim / 2, sizeof(float));
    s->inv_freq = calloc(hp->head_dim / 2, sizeof(double));
    if (s->inv_freq) kipp_rope_inv_freq(hp, hp->head_dim, s->inv_freq);
    s->rope_mag = kipp_rope_attn_factor(hp);
    if (!ok || !s->k_rows || !s->v_rows || !s->scores || !s->row || !s->wbuf || !s->rope_cos || !s->rope_sin ||
        !s->inv_freq ||
        ((kv_type != KIPP_KV_TYPE_F32 || s->kv_type_v != KIPP_KV_TYPE_F32) && (!s->kbuf || !s->vbuf))) {
        kipp_fwd_free(s);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM,
                         "forward pass: out of memory allocating scratch for %u positions",
                         n_ctx);
    }
    *state = s;
    return KIPP_OK;
}

/* Passes of up to PASS_ROWS rows in batch order, each the layer program over its rows (the
 * driver, program.c); the lm_head, by far the largest matrix, runs only for the wanted rows. */
kipp_status kipp_fwd_decode_batch(kipp_fwd_state *state, kipp_kv_pool *pool, const kipp_batch *b,
                                  float *logits, char *err, size_t err_len) {
    (void)err; (void)err_len;
    cpu_ref_state *s = state;
    const size_t n_logits = s->head.data ? (size_t)s->head.ne[1] : s->m->hp.n_embd;
    s->kv = pool->storage.store;
    for (uint32_t i0 = 0; i0 < b->n; i0 += PASS_ROWS) {
        s->n = b->n - i0 < PASS_ROWS ? b->n - i0 : PASS_ROWS;
        s->tokens = b->tokens + i0;
        s->positions = b->positions + i0;
        for (uint32_t t = 0; t < s->n; t++) {
            s->seqs[t] = kipp_kv_seq_get(pool, b->seq_ids[i0 + t]);
            embed(s, s->tokens[t], act_row(s, KIPP_BUF_X, t));
        }
        kipp_program_run(s->m, &cpu_ref_kernels, s); /* the host operations cannot fail */
        for (uint32_t t = 0; t < s->n; t++) {
            if (!b->want_logits[i0 + t]) continue;
            final_logits(s, act_row(s, KIPP_BUF_X, t), logits);
            logits += n_logits;
        }
    }
    return KIPP_OK;
}

/* The recomputation oracle: one pass over positions 0..n-1 of one sequence (layer-major), K/V
 * kept in private buffers of one layer, never in the cache. Same per-row arithmetic as decode,
 * so a correct cache gives identical logits; a mis-addressed cache does not. */
kipp_status kipp_fwd_forward_nocache(kipp_fwd_state *state, const int32_t *tokens, uint32_t n,
                                     float *logits, char *err, size_t err_len) {
    cpu_ref_state *s = state;
    if (n == 0) return KIPP_OK;
    uint32_t *pos = malloc((size_t)n * sizeof *pos);
    s->priv_k = malloc((size_t)n * s->kv_dim * sizeof(float));
    s->priv_v = malloc((size_t)n * s->kv_dim * sizeof(float));
    const int ok = pos && s->priv_k && s->priv_v && ensure_rows(s, n);
    if (ok) {
        for (uint32_t p = 0; p < n; p++) {
            pos[p] = p;
            embed(s, tokens[p], act_row(s, KIPP_BUF_X, p));
        }
        s->kv = NULL;
        s->n = n;
        s->tokens = tokens;
        s->positions = pos;
        kipp_program_run(s->m, &cpu_ref_kernels, s);
        if (logits) final_logits(s, act_row(s, KIPP_BUF_X, n - 1), logits);
    }
    free(pos); free(s->priv_k); free(s->priv_v);
    s->priv_k = s->priv_v = NULL;
    if (!ok) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "forward pass: out of memory for %u tokens", n);
    return KIPP_OK;
}
