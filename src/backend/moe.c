/* moe.c — a mixture-of-experts router's choice (moe.h), shared by every backend's host side so
 * that all of them route alike, and the gates' routing trace. */
#include "backend/moe.h"

#include <math.h>
#include <stddef.h>

static kipp_moe_trace *_Atomic trace;

void kipp_moe_trace_use(kipp_moe_trace *t) { atomic_store(&trace, t); }

kipp_moe_trace *kipp_moe_trace_current(void) { return atomic_load(&trace); }

/* the k best of p (n of them) into chosen, best first; exact ties to the lower index */
static void top_k(const float *p, uint32_t n, uint32_t k, uint32_t *chosen) {
    for (uint32_t i = 0; i < k; i++) {
        uint32_t best = n;
        for (uint32_t e = 0; e < n; e++) {
            int taken = 0;
            for (uint32_t j = 0; j < i; j++) taken |= chosen[j] == e;
            if (!taken && (best == n || p[e] > p[best])) best = e; /* strict: ties to the lower index */
        }
        chosen[i] = best;
    }
}

/* log p_k - log p_(k+1): how far the k-th choice is from the first one left out */
static float margin_of(const float *p, uint32_t n, uint32_t k, const uint32_t *chosen) {
    if (k >= n) return INFINITY;
    float out = -INFINITY;
    for (uint32_t e = 0; e < n; e++) {
        int taken = 0;
        for (uint32_t j = 0; j < k; j++) taken |= chosen[j] == e;
        if (!taken && p[e] > out) out = p[e];
    }
    return logf(p[chosen[k - 1]]) - logf(out);
}

static void sorted_set(const uint32_t *c, uint32_t k, uint32_t *out) {
    for (uint32_t i = 0; i < k; i++) {
        uint32_t v = c[i], j = i;
        while (j > 0 && out[j - 1] > v) out[j] = out[j - 1], j--;
        out[j] = v;
    }
}

/* the trace's part of a routing decision (moe.h) */
static void traced(kipp_moe_trace *t, const float *p, uint32_t n, uint32_t k, uint32_t *chosen, uint32_t layer,
                   uint32_t pos, int32_t token) {
    if (layer >= t->n_layer || pos >= t->n_pos || k != t->k || n != t->n_exp || k > 64) return;
    const size_t cell = ((size_t)layer * t->n_pos + pos) * t->n_slot;
    size_t at = cell + t->n_slot; /* RECORD: the first free slot; PIN: the nearest record */
    float best = 0.1f;
    for (size_t i = cell; i < cell + t->n_slot; i++) {
        if (t->mode == KIPP_MOE_TRACE_RECORD) {
            if (t->token[i] == -1) {
                at = i;
                break;
            }
            continue;
        }
        if (t->token[i] != token) continue;
        float d = 0.0f;
        for (uint32_t e = 0; e < n; e++) d += fabsf(p[e] - t->probs[i * n + e]);
        if (d < best) best = d, at = i;
    }
    if (at == cell + t->n_slot) return; /* no match (PIN), or the cell is full (RECORD) */
    uint32_t *rec = t->chosen + at * k, mine[64];
    if (t->mode == KIPP_MOE_TRACE_RECORD) {
        t->token[at] = token;
        sorted_set(chosen, k, rec);
        t->margin[at] = margin_of(p, n, k, chosen);
        for (uint32_t e = 0; e < n; e++) t->probs[at * n + e] = p[e];
        return;
    }
    sorted_set(chosen, k, mine);
    int same = 1;
    for (uint32_t i = 0; i < k; i++) same &= mine[i] == rec[i];
    if (same) return;
    if (!(t->margin[at] < t->delta)) {
        atomic_fetch_add(&t->mismatched, 1u);
        return;
    }
    /* a near-tie: the record's experts, best first by this backend's probabilities */
    atomic_fetch_add(&t->pinned, 1u);
    if (t->margin[at] > t->worst_pinned) t->worst_pinned = t->margin[at];
    /* their order: this run's probabilities, best first, ties to the lower expert (rec is sorted) */
    float q[64];
    uint32_t order[64];
    for (uint32_t i = 0; i < k; i++) q[i] = p[rec[i]];
    top_k(q, k, k, order);
    for (uint32_t i = 0; i < k; i++) chosen[i] = rec[order[i]];
}

void kipp_moe_route(float *logits, uint32_t n, uint32_t k, int norm, uint32_t *chosen, float *w, uint32_t layer,
                    uint32_t pos, int32_t token) {
    float mx = -INFINITY, sum = 0.0f;
    for (uint32_t e = 0; e < n; e++)
        if (logits[e] > mx) mx = logits[e];
    for (uint32_t e = 0; e < n; e++) {
        logits[e] = expf(logits[e] - mx);
        sum += logits[e];
    }
    for (uint32_t e = 0; e < n; e++) logits[e] /= sum;
    top_k(logits, n, k, chosen);
    kipp_moe_trace *t = atomic_load_explicit(&trace, memory_order_relaxed);
    if (t) traced(t, logits, n, k, chosen, layer, pos, token);
    float wsum = 0.0f;
    for (uint32_t i = 0; i < k; i++) {
        w[i] = logits[chosen[i]];
        wsum += w[i];
    }
    if (norm)
        for (uint32_t i = 0; i < k; i++) w[i] /= wsum;
}
