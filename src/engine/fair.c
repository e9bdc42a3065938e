/* fair.c — fair steps (see fair.h). */
#include "engine/fair.h"

void kipp_step_fit_add(kipp_step_fit *f, uint32_t n, double dt) {
    if (n == 0 || !(dt > 0)) return;
    const double x = n;
    f->w = KIPP_FIT_DECAY * f->w + 1.0;
    f->n = KIPP_FIT_DECAY * f->n + x;
    f->nn = KIPP_FIT_DECAY * f->nn + x * x;
    f->t = KIPP_FIT_DECAY * f->t + dt;
    f->nt = KIPP_FIT_DECAY * f->nt + x * dt;
}

int kipp_step_fit_line(const kipp_step_fit *f, double fallback_b, double *a, double *b) {
    if (f->w < 2.0) return 0;
    const double mn = f->n / f->w, mt = f->t / f->w, var = f->nn / f->w - mn * mn;
    double slope;
    if (var > 0.25) slope = (f->nt / f->w - mn * mt) / var;
    else if (fallback_b > 0) slope = fallback_b;
    else return 0;
    if (!(slope > 0)) slope = 0; /* NaN too */
    if (slope > mt / mn) slope = mt / mn;
    *b = slope;
    *a = mt - slope * mn;
    return 1;
}

uint32_t kipp_fair_select(uint32_t n, const uint32_t *grp, const uint8_t *kind, const uint32_t *progress,
                          double share, double a, double b, uint8_t *keep) {
    uint32_t n_cand = 0, n_req = 0, heavy = 0, light = 0, n_fixed = 0;
    for (uint32_t i = 0; i < n; i++) {
        keep[i] = kind[i] == KIPP_FAIR_DECODE;
        n_cand += keep[i];
    }
    for (uint32_t g = 0; g < n; g++) { /* g: a request's first sequence */
        if (grp[g] != g) continue;
        uint32_t dec = 0, pre = 0;
        for (uint32_t i = g; i < n; i++) {
            if (grp[i] != g) continue;
            dec += kind[i] == KIPP_FAIR_DECODE;
            pre += kind[i] == KIPP_FAIR_PREFILL;
        }
        if (dec + pre == 0) continue;
        n_req++;
        heavy += dec > 1;
        light += dec + pre == 1;
        n_fixed += dec <= 1 ? dec : 0;
        for (uint32_t i = g; i < n && dec > 1; i++) /* a heavy request's: the pool (2) */
            if (grp[i] == g && keep[i]) keep[i] = 2;
    }
    const int cap = share >= 0 && b > 0 && heavy && light && n_req >= 2;
    const double extra = cap ? share * (a + b * (n_fixed + 1)) / b : 0;
    if (!cap || !(extra < (double)(n_cand - n_fixed - 1))) { /* NaN, inf: no cap either */
        for (uint32_t i = 0; i < n; i++) keep[i] = keep[i] != 0;
        return n_cand;
    }
    const uint32_t n_max = n_fixed + 1 + (uint32_t)extra;
    uint32_t kept = n_fixed; /* the others keep their row; the pool starts empty */
    for (uint32_t i = 0; i < n; i++) keep[i] = keep[i] == 1;
    while (kept < n_max) { /* the pool: least advanced first */
        uint32_t best = n;
        for (uint32_t i = 0; i < n; i++)
            if (kind[i] == KIPP_FAIR_DECODE && !keep[i] && (best == n || progress[i] < progress[best])) best = i;
        if (best == n) break;
        keep[best] = 1;
        kept++;
    }
    return kept;
}
