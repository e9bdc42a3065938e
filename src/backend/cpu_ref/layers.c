/* layers.c — the reference (cpu-ref) forward pass: the model architecture's layer program
 * (arch.h) run op by op, plain C11, one token at a time, f32 activations and f32 accumulation
 * (sums of squares in double, as ggml does).
 * Every weight matrix goes through the caller's matvec (cpu-ref: scalar dequantize-and-dot). Contains
 * no ISA-specific code. K/V live in the context's host KV storage, f32/f16/bf16, and are
 * addressed through kipp_host_kv_row() only (src/backend/host_kv.h); the recomputation
 * oracle keeps private f32 buffers holding the same rounded values. */
#include "backend/cpu_ref/layers.h"

#include "backend/host_kv.h"
#include "backend/moe.h"
#include "model/arch.h"

#include "core/error.h"
#include "core/types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct kipp_fwd_state {
    const kipp_model *m;
    kipp_gguf_tensor head; /* the lm_head's first n_logits rows (kipp_model_head) */
    kipp_fwd_matvec_fn matvec; /* the one kernel a backend supplies */
    void *mv_ctx;
    uint32_t n_ctx;
    uint32_t kv_dim; /* Nkv * D */
    kipp_kv_type kv_type;
    const float **k_rows, **v_rows; /* [n_ctx] one layer's K/V rows of positions 0..pos */
    float *kbuf, *vbuf; /* [n_ctx][kv_dim] f32 copies of f16/bf16 rows (NULL for f32) */
    /* scratch, one token at a time */
    float *x;      /* [H]  residual stream */
    float *xb;     /* [H]  normed input */
    float *q;      /* [Nh*D] */
    float *k;      /* [Nkv*D] */
    float *v;      /* [Nkv*D] */
    float *att;    /* [Nh*D] attention output (heads concatenated) */
    float *proj;   /* [max(H, F)] projection output */
    float *gate;   /* [F] */
    float *up;     /* [F] */
    float *scores; /* [n_ctx] */
    float *row;    /* [max input dim] one dequantized weight row */
    float *rope_cos, *rope_sin; /* [D/2] for the current position */
    /* a mixture-of-experts FFN (NULL when dense) */
    float *router;   /* [E] router logits, then probabilities */
    float *moe_out;  /* [H] the weighted sum of the chosen experts' outputs */
    uint32_t *chosen; /* [k] the top-k experts, best first */
    int32_t token;    /* the token being run (the routing trace's key, moe.h) */
    float *chosen_w;  /* [k] their weights */
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

/* NEOX RoPE angles for position pos: theta_i = pos * base^(-2i/D), computed in double and
 * rounded once, so the reference sits as close to the float64 oracle as it can. */
static void rope_angles(cpu_ref_state *s, uint32_t pos) {
    const uint32_t D = s->m->hp.head_dim;
    const double base = s->m->hp.rope_theta;
    for (uint32_t i = 0; i < D / 2; i++) {
        double theta = (double)pos * pow(base, -2.0 * i / (double)D);
        s->rope_cos[i] = (float)cos(theta);
        s->rope_sin[i] = (float)sin(theta);
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


/* ---- the ops of a layer program (arch.h), one token at a time ------------------------------ */

/* Where KIPP_OP_KV_STORE puts this position's k and v (s->k, s->v), and where attention reads
 * positions 0..pos from: the paged cache (decode) or the recomputation oracle's private
 * buffers. Sets s->k_rows[0..pos] and s->v_rows[0..pos]. */
typedef struct {
    void (*store)(cpu_ref_state *s, void *ctx, uint32_t layer, uint32_t pos);
    void *ctx;
} kv_io;

/* Causal GQA attention of s->q over positions 0..n_kv-1 (s->k_rows, s->v_rows) into s->att. */
static void attention(cpu_ref_state *s, uint32_t n_kv) {
    const kipp_model_info *hp = &s->m->hp;
    const uint32_t D = hp->head_dim, group = hp->n_head / hp->n_head_kv;
    const float scale = 1.0f / sqrtf((float)D);
    for (uint32_t h = 0; h < hp->n_head; h++) {
        const float *qh = s->q + (size_t)h * D;
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
        float *oh = s->att + (size_t)h * D;
        memset(oh, 0, D * sizeof *oh);
        for (uint32_t t = 0; t < n_kv; t++) {
            const float *vt = s->v_rows[t] + kv_off;
            const float p = s->scores[t] / sum;
            for (uint32_t i = 0; i < D; i++) oh[i] += p * vt[i];
        }
    }
}

/* Per-head RMSNorm of n heads of D at h, with one D-vector of weights shared by all heads. */
static void head_norm(cpu_ref_state *s, float *h, uint32_t n, const kipp_gguf_tensor *w) {
    const uint32_t D = s->m->hp.head_dim;
    const float *wn = norm_weights(w, s->gate);
    for (uint32_t i = 0; i < n; i++) rmsnorm(h + (size_t)i * D, h + (size_t)i * D, wn, D, s->m->hp.rms_eps);
}

/* v[0..n) += bias b (a small tensor, dequantized on use like the norms) */
static void add_bias(cpu_ref_state *s, float *v, uint32_t n, const kipp_gguf_tensor *b) {
    const float *bf = norm_weights(b, s->gate);
    for (uint32_t j = 0; j < n; j++) v[j] += bf[j];
}

/* Layer l of the model's architecture program for the token at position pos, whose residual
 * stream is x (rope_angles(pos) already set). These op bodies are the definition every
 * backend is gated against. */
static void run_layer(cpu_ref_state *s, uint32_t l, float *x, uint32_t pos, const kv_io *io) {
    const kipp_model_info *hp = &s->m->hp;
    const kipp_layer_weights *w = &s->m->layers[l];
    const kipp_arch *a = s->m->arch;
    for (size_t i = 0; i < a->n_ops; i++) {
        switch (a->program[i]) {
        case KIPP_OP_ATTN_NORM:
            rmsnorm(s->xb, x, norm_weights(w->attn_norm, s->proj), hp->n_embd, hp->rms_eps);
            break;
        case KIPP_OP_QKV:
            s->matvec(s->mv_ctx, w->wq, s->xb, s->q, s->row);
            s->matvec(s->mv_ctx, w->wk, s->xb, s->k, s->row);
            s->matvec(s->mv_ctx, w->wv, s->xb, s->v, s->row);
            break;
        case KIPP_OP_QKV_BIAS:
            add_bias(s, s->q, hp->n_head * hp->head_dim, w->bq);
            add_bias(s, s->k, s->kv_dim, w->bk);
            add_bias(s, s->v, s->kv_dim, w->bv);
            break;
        case KIPP_OP_QK_NORM:
            head_norm(s, s->q, hp->n_head, w->q_norm);
            head_norm(s, s->k, hp->n_head_kv, w->k_norm);
            break;
        case KIPP_OP_ROPE:
            for (uint32_t h = 0; h < hp->n_head; h++) rope_head(s, s->q + (size_t)h * hp->head_dim);
            for (uint32_t h = 0; h < hp->n_head_kv; h++) rope_head(s, s->k + (size_t)h * hp->head_dim);
            break;
        case KIPP_OP_KV_STORE: io->store(s, io->ctx, l, pos); break;
        case KIPP_OP_ATTENTION: attention(s, pos + 1); break;
        case KIPP_OP_ATTN_OUT:
            s->matvec(s->mv_ctx, w->wo, s->att, s->proj, s->row);
            for (uint32_t j = 0; j < hp->n_embd; j++) x[j] += s->proj[j];
            break;
        case KIPP_OP_FFN_NORM:
            rmsnorm(s->xb, x, norm_weights(w->ffn_norm, s->proj), hp->n_embd, hp->rms_eps);
            break;
        case KIPP_OP_FFN_SWIGLU:
            s->matvec(s->mv_ctx, w->w_gate, s->xb, s->gate, s->row);
            s->matvec(s->mv_ctx, w->w_up, s->xb, s->up, s->row);
            for (uint32_t j = 0; j < hp->n_ff; j++) s->gate[j] = silu(s->gate[j]) * s->up[j];
            s->matvec(s->mv_ctx, w->w_down, s->gate, s->proj, s->row);
            for (uint32_t j = 0; j < hp->n_embd; j++) x[j] += s->proj[j];
            break;
        case KIPP_OP_FFN_MOE: {
            const uint32_t Fe = hp->n_ff_exp, k = hp->n_expert_used;
            s->matvec(s->mv_ctx, w->gate_inp, s->xb, s->router, s->row);
            kipp_moe_route(s->router, hp->n_expert, k, (int)hp->expert_norm, s->chosen, s->chosen_w, l, pos, s->token);
            memset(s->moe_out, 0, hp->n_embd * sizeof *s->moe_out);
            for (uint32_t slot = 0; slot < k; slot++) { /* best first; each expert a SwiGLU FFN */
                const uint32_t e = s->chosen[slot];
                s->matvec(s->mv_ctx, &w->exp_gate[e], s->xb, s->gate, s->row);
                s->matvec(s->mv_ctx, &w->exp_up[e], s->xb, s->up, s->row);
                for (uint32_t j = 0; j < Fe; j++) s->gate[j] = silu(s->gate[j]) * s->up[j];
                s->matvec(s->mv_ctx, &w->exp_down[e], s->gate, s->proj, s->row);
                for (uint32_t j = 0; j < hp->n_embd; j++) s->moe_out[j] += s->chosen_w[slot] * s->proj[j];
            }
            for (uint32_t j = 0; j < hp->n_embd; j++) x[j] += s->moe_out[j];
            break;
        }
        case KIPP_OP_COUNT: break; /* not an op: kipp_fwd_init refuses a program naming one */
        }
    }
}

static void embed(const cpu_ref_state *s, int32_t tok, float *x) {
    const kipp_gguf_tensor *e = s->m->tok_embd;
    const uint64_t H = (uint64_t)e->ne[0];
    kipp_dequantize_row(e->type, (const char *)e->data + (uint64_t)tok * kipp_type_row_bytes(e->type, H),
                        x, H);
}

static void final_logits(cpu_ref_state *s, const float *x, float *logits) {
    const kipp_model_info *hp = &s->m->hp;
    if (!s->head.data) { /* embeddings: the final-norm hidden state is the output row */
        rmsnorm(logits, x, norm_weights(s->m->output_norm, s->proj), hp->n_embd, hp->rms_eps);
        return;
    }
    rmsnorm(s->xb, x, norm_weights(s->m->output_norm, s->proj), hp->n_embd, hp->rms_eps);
    s->matvec(s->mv_ctx, &s->head, s->xb, logits, s->row);
}

/* ---- backend entry points ------------------------------------------------------------- */

void kipp_fwd_free(kipp_fwd_state *state) {
    cpu_ref_state *s = state;
    if (!s) return;
    free(s->k_rows); free(s->v_rows); free(s->kbuf); free(s->vbuf);
    free(s->x); free(s->xb); free(s->q); free(s->k); free(s->v); free(s->att);
    free(s->proj); free(s->gate); free(s->up); free(s->scores); free(s->row);
    free(s->rope_cos); free(s->rope_sin);
    free(s->router); free(s->moe_out); free(s->chosen); free(s->chosen_w);
    free(s);
}

kipp_status kipp_fwd_init(const kipp_model *m, uint32_t n_ctx, kipp_kv_type kv_type,
                          uint32_t n_logits, kipp_fwd_matvec_fn matvec, void *mv_ctx, kipp_fwd_state **state,
                          char *err, size_t err_len) {
    *state = NULL;
    const kipp_model_info *hp = &m->hp;
    kipp_status st = kipp_arch_check_ops(m->arch, "cpu-ref", KIPP_OPS_ALL, err, err_len);
    if (st != KIPP_OK) return st;
    cpu_ref_state *s = calloc(1, sizeof *s);
    if (!s) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "forward pass: out of memory");
    s->m = m;
    s->matvec = matvec;
    s->mv_ctx = mv_ctx;
    s->n_ctx = n_ctx;
    s->kv_dim = hp->n_head_kv * hp->head_dim;
    s->kv_type = kv_type;
    s->head = kipp_model_head(m, n_logits);
    if (kv_type != KIPP_KV_TYPE_F32) {
        s->kbuf = malloc((size_t)n_ctx * s->kv_dim * sizeof(float));
        s->vbuf = malloc((size_t)n_ctx * s->kv_dim * sizeof(float));
    }
    const size_t QD = (size_t)hp->n_head * hp->head_dim;
    const size_t F = hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp; /* the widest FFN */
    size_t max_in = hp->n_embd;
    if (F > max_in) max_in = F;
    if (QD > max_in) max_in = QD;
    if (hp->n_expert) {
        s->router = calloc(hp->n_expert, sizeof(float));
        s->moe_out = calloc(hp->n_embd, sizeof(float));
        s->chosen = calloc(hp->n_expert_used, sizeof(uint32_t));
        s->chosen_w = calloc(hp->n_expert_used, sizeof(float));
        if (!s->router || !s->moe_out || !s->chosen || !s->chosen_w) {
            kipp_fwd_free(s);
            return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "forward pass: out of memory for the router");
        }
    }
    s->k_rows = calloc(n_ctx, sizeof *s->k_rows);
    s->v_rows = calloc(n_ctx, sizeof *s->v_rows);
    s->x = calloc(hp->n_embd, sizeof(float));
    s->xb = calloc(hp->n_embd, sizeof(float));
    s->q = calloc(QD, sizeof(float));
    s->k = calloc(s->kv_dim, sizeof(float));
    s->v = calloc(s->kv_dim, sizeof(float));
    s->att = calloc(QD, sizeof(float));
    s->proj = calloc(max_in, sizeof(float));
    s->gate = calloc(max_in, sizeof(float));
    s->up = calloc(F, sizeof(float));
    s->scores = calloc(n_ctx, sizeof(float));
    s->row = calloc(max_in, sizeof(float));
    s->rope_cos = calloc(hp->head_dim / 2, sizeof(float));
    s->rope_sin = calloc(hp->head_dim / 2, sizeof(float));
    if (!s->k_rows || !s->v_rows || !s->x || !s->xb || !s->q || !s->k || !s->v || !s->att ||
        !s->proj || !s->gate || !s->up || !s->scores || !s->row || !s->rope_cos || !s->rope_sin ||
        (kv_type != KIPP_KV_TYPE_F32 && (!s->kbuf || !s->vbuf))) {
        kipp_fwd_free(s);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM,
                         "forward pass: out of memory allocating scratch for %u positions",
                         n_ctx);
    }
    *state = s;
    return KIPP_OK;
}

/* KIPP_OP_KV_STORE on the paged cache: k and v into the sequence's rows at pos, then the rows
 * of positions 0..pos as attention reads them (f16/bf16 widened into kbuf / vbuf). */
typedef struct {
    const kipp_host_kv *kv;
    const kipp_kv_seq *seq;
} cache_io;

static void cache_store(cpu_ref_state *s, void *ctx, uint32_t l, uint32_t p) {
    const cache_io *c = ctx;
    const kipp_host_kv *kv = c->kv;
    const size_t kvd = s->kv_dim;
    kipp_host_kv_put(kv->type, kipp_host_kv_row(kv, c->seq, l, p, KIPP_KV_K, KIPP_KV_WRITE), s->k, s->kv_dim);
    kipp_host_kv_put(kv->type, kipp_host_kv_row(kv, c->seq, l, p, KIPP_KV_V, KIPP_KV_WRITE), s->v, s->kv_dim);
    for (uint32_t t = 0; t <= p; t++) {
        const void *kr = kipp_host_kv_row(kv, c->seq, l, t, KIPP_KV_K, KIPP_KV_READ);
        const void *vr = kipp_host_kv_row(kv, c->seq, l, t, KIPP_KV_V, KIPP_KV_READ);
        if (kv->type == KIPP_KV_TYPE_F32) {
            s->k_rows[t] = kr;
            s->v_rows[t] = vr;
            continue;
        }
        kipp_host_kv_get(kv->type, s->kbuf + t * kvd, kr, s->kv_dim);
        kipp_host_kv_get(kv->type, s->vbuf + t * kvd, vr, s->kv_dim);
        s->k_rows[t] = s->kbuf + t * kvd;
        s->v_rows[t] = s->vbuf + t * kvd;
    }
}

/* KIPP_OP_KV_STORE for the recomputation oracle: k and v into its private per-position buffers,
 * rounded as the cache's type would store them (the rows of 0..pos-1 were set before). */
typedef struct {
    float *ks, *vs;
} private_io;

static void private_store(cpu_ref_state *s, void *ctx, uint32_t l, uint32_t p) {
    (void)l;
    const private_io *io = ctx;
    float *k = io->ks + (size_t)p * s->kv_dim, *v = io->vs + (size_t)p * s->kv_dim;
    memcpy(k, s->k, s->kv_dim * sizeof *k);
    memcpy(v, s->v, s->kv_dim * sizeof *v);
    kipp_kv_round(s->kv_type, k, s->kv_dim);
    kipp_kv_round(s->kv_type, v, s->kv_dim);
    s->k_rows[p] = k;
    s->v_rows[p] = v;
}

/* Token by token in batch order (each token's arithmetic is exactly that of a lone decode
 * step, so a batch equals the single steps bit for bit). The lm_head, by far the largest
 * matrix, runs only for the wanted tokens. */
kipp_status kipp_fwd_decode_batch(kipp_fwd_state *state, kipp_kv_pool *pool, const kipp_batch *b,
                                        float *logits, char *err, size_t err_len) {
    (void)err; (void)err_len;
    cpu_ref_state *s = state;
    const kipp_host_kv *kv = pool->storage.store;
    const size_t n_logits = s->head.data ? (size_t)s->head.ne[1] : s->m->hp.n_embd;
    for (uint32_t i = 0; i < b->n; i++) {
        cache_io c = {kv, kipp_kv_seq_get(pool, b->seq_ids[i])};
        const kv_io io = {cache_store, &c};
        const uint32_t p = b->positions[i];
        s->token = b->tokens[i];
        embed(s, b->tokens[i], s->x);
        rope_angles(s, p);
        for (uint32_t l = 0; l < s->m->hp.n_layer; l++) run_layer(s, l, s->x, p, &io);
        if (b->want_logits[i]) {
            final_logits(s, s->x, logits);
            logits += n_logits;
        }
    }
    return KIPP_OK;
}

/* The recomputation oracle: layer-major over the whole sequence, K/V kept in private
 * buffers, never in the cache. Same per-position arithmetic as decode, so a correct cache
 * gives identical logits; a mis-addressed cache does not. */
kipp_status kipp_fwd_forward_nocache(kipp_fwd_state *state, const int32_t *tokens, uint32_t n,
                                           float *logits, char *err, size_t err_len) {
    cpu_ref_state *s = state;
    const kipp_model_info *hp = &s->m->hp;
    if (n == 0) return KIPP_OK;
    float *xs = calloc((size_t)n * hp->n_embd, sizeof(float));
    float *ks = calloc((size_t)n * s->kv_dim, sizeof(float));
    float *vs = calloc((size_t)n * s->kv_dim, sizeof(float));
    if (!xs || !ks || !vs) {
        free(xs); free(ks); free(vs);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "forward pass: out of memory for %u tokens", n);
    }
    private_io pio = {ks, vs};
    const kv_io io = {private_store, &pio};
    for (uint32_t p = 0; p < n; p++) embed(s, tokens[p], xs + (size_t)p * hp->n_embd);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        /* every position's q must be recomputed at attention time: keep the order simple */
        for (uint32_t p = 0; p < n; p++) {
            rope_angles(s, p);
            s->token = tokens[p];
            run_layer(s, l, xs + (size_t)p * hp->n_embd, p, &io);
        }
    }
    if (logits) final_logits(s, xs + (size_t)(n - 1) * hp->n_embd, logits);
    free(xs); free(ks); free(vs);
    return KIPP_OK;
}

