/* gates_spec.c — speculative decoding's exactness for sampling (kipp_test --spec-stat: the
 * rejection rule against plain sampling, chi-square) and its rollback (part of
 * --draft-spec: rejected drafts truncated from the cache leave it decoding exactly like a
 * recomputation, with block accounting exact). docs/speculative.md. */
#include "engine/spec.h"
#include "gate_common.h"
#include "gates.h"
#include "kt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the rejection rule's statistics ----------------------------------------------------- */

#define SV 6          /* synthetic vocabulary */
#define N_TRIALS 60000
#define Z_1E4 3.719   /* one-sided standard normal quantile for a false alarm of 1e-4 */

double kt_chi2_crit(int df, double z) {
    const double a = 2.0 / (9.0 * df);
    const double c = 1.0 - a + z * sqrt(a);
    return df * c * c * c;
}

/* Exact probabilities of the first two tokens of plain sampling: the sampler's own
 * processed distributions (kipp_sampler_dist) after the history [0] and [0, x1]. */
static void exact_pairs(const kipp_sampler_params *sp, const float *lp, double pr[SV][SV]) {
    kipp_sampler *s;
    kipp_sampler_init(sp, SV, &s, NULL, 0);
    float l[SV];
    const kipp_token_prob *d;
    double p1[SV] = {0};
    kipp_sampler_accept(s, 0);
    memcpy(l, lp, sizeof l);
    uint32_t n = kipp_sampler_dist(s, l, &d);
    for (uint32_t i = 0; i < n; i++) p1[d[i].id] = d[i].p;
    for (int x = 0; x < SV; x++) {
        for (int y = 0; y < SV; y++) pr[x][y] = 0.0;
        if (p1[x] == 0.0) continue;
        kipp_sampler_mark(s);
        kipp_sampler_accept(s, x);
        memcpy(l, lp, sizeof l);
        n = kipp_sampler_dist(s, l, &d);
        for (uint32_t i = 0; i < n; i++) pr[x][d[i].id] = p1[x] * d[i].p;
        kipp_sampler_rollback(s);
    }
    kipp_sampler_free(s);
}

/* The first two tokens of one speculative run: the draft (a sampler over lq with the same
 * parameters, or a point mass on argmax lq when point) proposes 2 tokens per step, the
 * target verifies them against lp with kipp_spec_verify, until two tokens are out. */
static void spec_pair(const kipp_sampler_params *sp, const float *lp, const float *lq, int point,
                      uint64_t seed, int out2[2]) {
    kipp_sampler_params tp = *sp, dp = *sp;
    tp.seed = seed;
    dp.seed = seed ^ 0xABCDEF12345ull;
    kipp_sampler *t, *d;
    kipp_sampler_init(&tp, SV, &t, NULL, 0);
    kipp_sampler_init(&dp, SV, &d, NULL, 0);
    kipp_sampler_accept(t, 0);
    kipp_sampler_accept(d, 0);
    int n_out = 0;
    kipp_token_prob q[2][SV];
    while (n_out < 2) {
        kipp_draft_job j = {.n_draft = 2};
        kipp_sampler_mark(d);
        for (int k = 0; k < 2; k++) {
            float l[SV];
            memcpy(l, lq, sizeof l);
            if (point) {
                j.draft[k] = (int32_t)kt_argmax(l, SV);
                j.q[k] = NULL;
                j.nq[k] = 0;
            } else {
                const kipp_token_prob *dist;
                uint32_t n = kipp_sampler_dist(d, l, &dist);
                memcpy(q[k], dist, n * sizeof *dist);
                j.draft[k] = kipp_sampler_draw(d, q[k], n);
                j.q[k] = q[k];
                j.nq[k] = n;
            }
            kipp_sampler_accept(d, j.draft[k]);
        }
        kipp_sampler_rollback(d);
        float rows[3][SV];
        for (int k = 0; k < 3; k++) memcpy(rows[k], lp, sizeof rows[k]);
        int32_t out[3];
        uint32_t m;
        const uint32_t n = kipp_spec_verify(t, &rows[0][0], SV, &j, out, &m);
        for (uint32_t i = 0; i < n && n_out < 2; i++) {
            out2[n_out++] = out[i];
            kipp_sampler_accept(d, out[i]); /* the draft's history follows the final tokens */
        }
    }
    kipp_sampler_free(t);
    kipp_sampler_free(d);
}

/* Goodness of fit of N_TRIALS speculative pairs to the exact pair distribution: cells with
 * an expected count under 10 are pooled. Returns chi2 / critical value (> 1: rejected). */
static double fit_ratio(const kipp_sampler_params *sp, const float *lp, const float *lq, int point,
                        double *accept_rate) {
    double pr[SV][SV];
    exact_pairs(sp, lp, pr);
    static long cnt[SV][SV];
    memset(cnt, 0, sizeof cnt);
    for (int t = 0; t < N_TRIALS; t++) {
        int o[2];
        spec_pair(sp, lp, lq, point, 1000003ull * (uint64_t)t + 17, o);
        cnt[o[0]][o[1]]++;
    }
    double chi2 = 0.0, pooled_e = 0.0, pooled_o = 0.0;
    int cells = 0;
    for (int x = 0; x < SV; x++)
        for (int y = 0; y < SV; y++) {
            const double e = pr[x][y] * N_TRIALS;
            if (e < 10.0) {
                pooled_e += e;
                pooled_o += (double)cnt[x][y];
                continue;
            }
            chi2 += (cnt[x][y] - e) * (cnt[x][y] - e) / e;
            cells++;
        }
    if (pooled_e >= 10.0) {
        chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
        cells++;
    } else if (pooled_o > 3.0 * pooled_e + 10.0) {
        chi2 += 1e9; /* mass where plain sampling has (almost) none */
    }
    (void)accept_rate;
    return chi2 / kt_chi2_crit(cells - 1, Z_1E4);
}

int kt_gate_spec_stat(const char *unused1, const char *unused2, const kt_opts *o) {
    (void)unused1;
    (void)unused2;
    (void)o;
    const int failed0 = kt_failed;
    /* a few dominant tokens; the draft prefers others */
    static const float lp[SV] = {2.0f, 1.6f, 1.1f, 0.3f, -1.0f, -2.5f};
    static const float lq[SV] = {0.4f, 2.2f, -0.5f, 1.4f, 0.8f, -1.0f};
    struct {
        const char *what;
        float temp, top_p, min_p, presence;
        int top_k, point;
        const float *q;
    } cases[] = {
        {"sampled draft, temperature 1, presence penalty 0.8", 1.0f, 1.0f, 0.0f, 0.8f, 0, 0, lq},
        {"sampled draft, top-k 3, top-p 0.9, min-p 0.1", 0.9f, 0.9f, 0.1f, 0.0f, 3, 0, lq},
        {"point-mass draft (greedy or n-gram), temperature 0.7", 0.7f, 1.0f, 0.0f, 0.5f, 0, 1, lq},
        {"draft = target (every draft kept)", 1.0f, 1.0f, 0.0f, 0.8f, 0, 0, lp},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kipp_sampler_params sp = kipp_sampler_default_params();
        sp.temperature = cases[c].temp;
        sp.top_k = cases[c].top_k;
        sp.top_p = cases[c].top_p;
        sp.min_p = cases[c].min_p;
        sp.presence_penalty = cases[c].presence;
        const double r = fit_ratio(&sp, lp, cases[c].q, cases[c].point, NULL);
        KT_CHECK(r <= 1.0, "%s: the first two tokens are not distributed as plain sampling's "
                 "(chi-square %.1f x its 1e-4 critical value)", cases[c].what, r);
        printf("  %-56s chi2 / critical(1e-4) = %.3f\n", cases[c].what, r);
    }
    /* greedy: the target's argmax (after penalties), whatever was drafted */
    kipp_sampler_params g = kipp_sampler_default_params();
    g.temperature = 0.0f;
    kipp_sampler *s;
    kipp_sampler_init(&g, SV, &s, NULL, 0);
    for (int32_t dtok = 0; dtok < SV; dtok++) {
        float l[SV];
        memcpy(l, lp, sizeof l);
        int acc;
        const int32_t t = kipp_sampler_verify(s, l, dtok, NULL, 0, &acc);
        KT_CHECK(t == 0 && acc == (dtok == 0), "greedy verify of draft %d gave %d (kept %d)", dtok,
                 t, acc);
    }
    kipp_sampler_free(s);
    printf("speculative sampling statistics: %d trials per case, false alarm 1e-4 per case\n",
           N_TRIALS);
    return kt_failed - failed0;
}

/* ---- rollback ------------------------------------------------------------------------------ */

void kt_spec_rollback(const kipp_model *mc, const kt_opts *o) {
    kipp_model *m = (kipp_model *)mc;
    char err[KIPP_ERR_LEN];
    kipp_ctx_params cp = kipp_ctx_default_params();
    cp.backend = "cpu-ref";
    cp.kv_type = KIPP_KV_TYPE_F32;
    cp.n_ctx = 96;
    cp.kv_block_size = 16;
    (void)o;
    kipp_ctx *c = NULL;
    if (kipp_ctx_init(m, &cp, &c, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "rollback: %s", err);
        return;
    }
    kipp_model_info mi;
    kipp_model_get_info(m, &mi);
    const uint32_t V = mi.n_vocab;
    float *rows = malloc((size_t)5 * V * sizeof *rows), *ref = malloc((size_t)V * sizeof *ref);
    int32_t seq[96];
    uint32_t n = 0;
    const char *text = "def parse(line):\n    return line.split(',')";
    size_t nt = 0;
    kipp_tokenize(m, text, strlen(text), 1, seq, 40, &nt, NULL, 0);
    n = (uint32_t)nt;
    kipp_status st = kipp_decode(c, seq, n - 1, NULL, err, sizeof err);
    KT_CHECK(st == KIPP_OK, "rollback: prefill: %s", err);
    int32_t pending = seq[n - 1];
    n--;
    double worst = 0.0;
    for (uint32_t round = 0; round < 8 && st == KIPP_OK; round++) {
        const uint32_t m_keep = round % 5; /* drafts kept of 4 */
        int32_t b[5] = {pending};
        for (int k = 1; k < 5; k++) b[k] = (int32_t)((round * 7919u + k * 104729u) % 4096u);
        const kipp_batch bt = {.n = 5, .tokens = b};
        if ((st = kipp_decode_batch(c, &bt, rows, err, sizeof err)) != KIPP_OK) break;
        const uint32_t keep = n + 1 + (m_keep < 4 ? m_keep : 4);
        if (m_keep < 4 && (st = kipp_ctx_truncate(c, keep, err, sizeof err)) != KIPP_OK) break;
        for (uint32_t k = 0; k < keep - n; k++) seq[n + k] = b[k];
        n = keep;
        kipp_kv_stats kv;
        kipp_ctx_kv_stats(c, &kv);
        KT_CHECK(kv.n_blocks_used == (n + 15) / 16 && kv.n_tokens == n,
                 "rollback round %u: %u tokens in %u blocks (want %u)", round,
                 (unsigned)kv.n_tokens, kv.n_blocks_used, (n + 15) / 16);
        /* the next token decoded on the rolled-back cache == recomputation of the whole */
        pending = (int32_t)(1000 + round);
        seq[n] = pending;
        float *got = rows; /* reuse */
        if ((st = kipp_decode(c, &pending, 1, got, err, sizeof err)) != KIPP_OK) break;
        if ((st = kipp_forward_nocache(c, seq, n + 1, ref, err, sizeof err)) != KIPP_OK) break;
        const double e = kt_max_abs_diff(got, ref, V);
        worst = e > worst ? e : worst;
        KT_CHECK(e <= 1e-6, "rollback round %u (kept %u of 4): cached decode differs from "
                 "recomputation by %.3g", round, m_keep, e);
        /* that token becomes part of the sequence; the next round drafts after it */
        n++;
        pending = seq[n - 1];
        if ((st = kipp_ctx_truncate(c, n - 1, err, sizeof err)) != KIPP_OK) break;
        n--;
    }
    KT_CHECK(st == KIPP_OK, "rollback: %s", err);
    printf("  rollback (cpu-ref, f32 KV): 8 rounds of 4 drafts, 0..4 kept; cached decode vs "
           "recomputation max |diff| %.3g\n", worst);
    free(rows);
    free(ref);
    kipp_ctx_free(c);
}
