/* fair.c — fair steps (see fair.h). */
#include "engine/fair.h"

#include <math.h>

void kipp_step_fit_add(kipp_step_fit *f, uint32_t n, double kv, double dt) {
    if (n == 0 || !(dt > 0) || !(kv >= 0)) return;
    const double x = n, D = KIPP_FIT_DECAY;
    f->w = D * f->w + 1.0;
    f->n = D * f->n + x;
    f->nn = D * f->nn + x * x;
    f->t = D * f->t + dt;
    f->nt = D * f->nt + x * dt;
    f->d = D * f->d + kv;
    f->dd = D * f->dd + kv * kv;
    f->nd = D * f->nd + x * kv;
    f->dt = D * f->dt + kv * dt;
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

int kipp_step_fit_plane(const kipp_step_fit *f, double fallback_b, double *a, double *b, double *c) {
    *c = 0;
    if (!kipp_step_fit_line(f, fallback_b, a, b)) {
        if (f->w < 2.0) return 0;
        *a = *b = 0; /* the KV term alone may still be measured */
    }
    const double w = f->w, mn = f->n / w, md = f->d / w, mt = f->t / w;
    const double vn = f->nn / w - mn * mn, vd = f->dd / w - md * md, cnd = f->nd / w - mn * md;
    const double cnt = f->nt / w - mn * mt, cdt = f->dt / w - md * mt;
    if (!(vd > KIPP_FIT_MIN_KV_VAR)) return *a > 0 || *b > 0;
    double bb, cc;
    const double det = vn * vd - cnd * cnd;
    if (vn > 0.25 && det > 0.1 * vn * vd) { /* both vary, and apart */
        bb = (cnt * vd - cdt * cnd) / det;
        cc = (cdt * vn - cnt * cnd) / det;
    } else if (vn <= 0.25) { /* only the KV positions vary */
        bb = fallback_b > 0 ? fallback_b : 0;
        cc = (cdt - bb * cnd) / vd;
    } else {
        return *a > 0 || *b > 0;
    }
    const double aa = mt - bb * mn - cc * md;
    if (!(bb >= 0 && cc > 0 && aa >= 0)) return *a > 0 || *b > 0; /* NaN too: the line */
    *a = aa, *b = bb, *c = cc;
    return 1;
}

uint32_t kipp_fair_select(uint32_t n, const uint32_t *grp, const uint8_t *kind, const uint8_t *bulk,
                          const uint32_t *progress, const double *cost, const double *inc, double share, double a,
                          double ghost, kipp_fair_state *st, uint8_t *keep) {
    uint32_t n_cand = 0, heavy = 0, light = 0;
    double fixed = 0;
    int bad = 0; /* a cost that is no price: no cap */
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
        const int is_bulk = bulk && bulk[g], is_heavy = dec > 1 || (dec && is_bulk);
        heavy += is_heavy;
        light += dec + pre == 1 && !is_bulk;
        for (uint32_t i = g; i < n; i++) {
            if (grp[i] != g || !keep[i]) continue;
            if (is_heavy) keep[i] = 2; /* a heavy request's: the pool */
            else fixed += cost[i];
            bad |= !(cost[i] >= 0 && cost[i] < INFINITY); /* NaN too */
        }
    }
    for (uint32_t k = 0; inc && k < n; k++) bad |= !(inc[k] >= 0 && inc[k] < INFINITY);
    const int ghosted = ghost > 0 && heavy && !light;
    double left = ghosted ? (1 + share) * (a + ghost) - a : share * (a + fixed);
    left += st->credit;
    /* a heavy request beside a light one is two requests; a ghost makes the second */
    if (!(share >= 0 && heavy && (light || ghosted)) || !isfinite(left) || bad) {
        for (uint32_t i = 0; i < n; i++) keep[i] = keep[i] != 0;
        st->credit = 0, st->waited = 0;
        return n_cand;
    }
    uint32_t kept = 0, took = 0, cut = 0;
    for (uint32_t i = 0; i < n; i++) {
        kept += keep[i] == 1;
        keep[i] = keep[i] == 2 ? 2 : keep[i] == 1 ? 3 : 0; /* 3: kept; 2: the pool */
    }
    const int force = ghosted || st->waited >= KIPP_FAIR_MAX_WAIT;
    for (;;) { /* the pool: least advanced first */
        uint32_t best = n;
        for (uint32_t i = 0; i < n; i++)
            if (keep[i] == 2 && (best == n || progress[i] < progress[best])) best = i;
        if (best == n) break;
        const double price = cost[best] + (inc ? inc[took] : 0);
        if (!(price <= left * (1 + 1e-12) + 1e-15) && !(force && took == 0)) { /* exact fits stay in */
            cut = 1;
            break;
        }
        left -= price;
        keep[best] = 3;
        kept++, took++;
    }
    st->credit = cut && left > 0 ? left : 0;
    st->waited = took ? 0 : st->waited + 1;
    for (uint32_t i = 0; i < n; i++) keep[i] = keep[i] == 3;
    return kept;
}

void kipp_fair_rows_add(kipp_fair_rows *r, uint32_t n, double dt) {
    if (n == 0 || n > r->n_max || !(dt > 0) || !isfinite(dt)) return;
    if (!(r->speed > 0)) r->speed = 1;
    if (r->seen[n]) {
        r->speed += KIPP_FAIR_ROWS_ALPHA_S * (dt / r->g[n] - r->speed);
        r->g[n] += KIPP_FAIR_ROWS_ALPHA_G * (dt / r->speed - r->g[n]);
    } else {
        r->g[n] = dt / r->speed;
        r->seen[n] = 1;
    }
}

double kipp_fair_rows_at(const kipp_fair_rows *r, uint32_t n, double slope) {
    if (n == 0) return 0;
    uint32_t lo = 0, hi = 0; /* nearest measured below and above (0: none) */
    for (uint32_t k = 1; k <= r->n_max; k++) {
        if (!r->seen[k]) continue;
        if (k == n) return r->speed * r->g[k];
        if (k < n) lo = k;
        else if (!hi) hi = k;
    }
    const double s = r->speed;
    if (lo && hi) return s * (r->g[lo] + (r->g[hi] - r->g[lo]) * (double)(n - lo) / (double)(hi - lo));
    if (lo) return s * r->g[lo] + slope * (double)(n - lo);
    if (hi) {
        const double v = s * r->g[hi] - slope * (double)(hi - n);
        return v > 0 ? v : 0;
    }
    return -1;
}

double kipp_fair_draw_cost(double draw_s, int n_host) {
    if (!(draw_s > 0)) return 0;
    return draw_s / (n_host > 1 ? n_host : 1);
}
