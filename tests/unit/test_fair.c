/* test_fair.c — unit suite for src/engine/fair.c (fair steps in continuous batching): the
 * step-time line recovered from exact and noisy steps, its fallback slope and clamps; the
 * choice of a step's decoding sequences on fixed cases (heavy beside light, prefilling
 * light, heavy beside heavy, singles only, heavy requests sharing their rows, cap off), siblings advancing together with none
 * starved, and random configurations against the properties fair.h states. */
#include "engine/fair.h"
#include "kt.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t urand(uint32_t n) { /* xorshift64*: [0, n) */
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (uint32_t)(((rng * 2685821657736338717ull) >> 33) % n);
}

/* kipp_fair_select with every row costing b, no light request expected and nothing carried
 * from a step before */
static uint32_t sel(uint32_t n, const uint32_t *grp, const uint8_t *kind, const uint32_t *progress, double share,
                    double a, double b, uint8_t *keep) {
    double cost[64];
    for (uint32_t i = 0; i < n && i < 64; i++) cost[i] = b;
    kipp_fair_state st = {0};
    return kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, share, a, 0, &st, keep);
}

static void test_fit(void) {
    kipp_step_fit f = {0};
    double a = -1, b = -1;
    KT_CHECK(!kipp_step_fit_line(&f, 0.01, &a, &b), "nothing measured gave a line");
    kipp_step_fit_add(&f, 3, 0, 0.07);
    KT_CHECK(!kipp_step_fit_line(&f, 0.01, &a, &b), "one step gave a line");
    for (int k = 0; k < 200; k++) kipp_step_fit_add(&f, 1 + (uint32_t)(k % 8), 0, 0.04 + 0.01 * (1 + k % 8));
    KT_CHECK(kipp_step_fit_line(&f, 0, &a, &b) && fabs(a - 0.04) < 1e-9 && fabs(b - 0.01) < 1e-9,
             "exact line: a %.12f b %.12f", a, b);
    kipp_step_fit_add(&f, 0, 0, 5.0); /* ignored */
    kipp_step_fit_add(&f, 4, 0, -1.0);
    KT_CHECK(kipp_step_fit_line(&f, 0, &a, &b) && fabs(b - 0.01) < 1e-9, "ignored steps moved b to %.12f", b);
    /* noisy: +-10% */
    kipp_step_fit g = {0};
    for (int k = 0; k < 400; k++) {
        const uint32_t n = 1 + urand(16);
        kipp_step_fit_add(&g, n, 0, (0.03 + 0.005 * n) * (0.9 + 0.2 * urand(1000) / 1000.0));
    }
    KT_CHECK(kipp_step_fit_line(&g, 0, &a, &b) && fabs(b - 0.005) < 0.002 && fabs(a - 0.03) < 0.015,
             "noisy line: a %.4f b %.4f", a, b);
    /* one size only: the fallback slope, or nothing */
    kipp_step_fit c = {0};
    for (int k = 0; k < 50; k++) kipp_step_fit_add(&c, 8, 0, 0.12);
    KT_CHECK(!kipp_step_fit_line(&c, 0, &a, &b), "no spread and no fallback gave a line");
    KT_CHECK(kipp_step_fit_line(&c, 0.01, &a, &b) && fabs(b - 0.01) < 1e-12 && fabs(a - 0.04) < 1e-9,
             "fallback: a %.6f b %.6f", a, b);
    KT_CHECK(kipp_step_fit_line(&c, 1.0, &a, &b) && fabs(b - 0.015) < 1e-12 && fabs(a) < 1e-12,
             "a fallback above mean/n is clamped: a %.6f b %.6f", a, b);
    /* slower with fewer rows (noise): slope 0, never negative */
    kipp_step_fit d = {0};
    for (int k = 0; k < 50; k++) kipp_step_fit_add(&d, 1 + (uint32_t)(k % 2) * 7, 0, k % 2 ? 0.05 : 0.09);
    KT_CHECK(kipp_step_fit_line(&d, 0, &a, &b) && b == 0 && a > 0.05, "negative slope: a %.4f b %.4f", a, b);
    /* steeper than proportional (a would be negative): clamped to a = 0 */
    kipp_step_fit e = {0};
    for (int k = 0; k < 50; k++) kipp_step_fit_add(&e, 1 + (uint32_t)(k % 2) * 7, 0, k % 2 ? 0.8 : 0.05);
    KT_CHECK(kipp_step_fit_line(&e, 0, &a, &b) && a >= -1e-12 && b > 0, "a %.4f b %.4f", a, b);
}

/* n sequences: groups as runs given by sizes[], all decoding unless kinds says */
static uint32_t layout(uint32_t *grp, uint8_t *kind, const uint32_t *sizes, uint32_t n_groups) {
    uint32_t n = 0;
    for (uint32_t g = 0; g < n_groups; g++)
        for (uint32_t k = 0; k < sizes[g]; k++) grp[n] = n - k, kind[n++] = KIPP_FAIR_DECODE;
    return n;
}

static uint32_t count(const uint8_t *keep, uint32_t from, uint32_t to) {
    uint32_t k = 0;
    for (uint32_t i = from; i < to; i++) k += keep[i];
    return k;
}

static void test_cases(void) {
    uint32_t grp[64], progress[64] = {0};
    uint8_t kind[64], keep[64];
    /* n 7 beside a plain request: the pool may spend 0.5 x (0.04 + 0.01) = 0.025: two rows */
    uint32_t n = layout(grp, kind, (const uint32_t[]){7, 1}, 2);
    uint32_t k = sel(n, grp, kind, progress, 0.5, 0.04, 0.01, keep);
    KT_CHECK(k == 3 && keep[7] && count(keep, 0, 7) == 2, "heavy + light: kept %u, light %u, heavy %u", k, keep[7],
             count(keep, 0, 7));
    KT_CHECK(keep[0] && keep[1], "equal progress: the lower indices first");
    /* the light request prefilling (no row of its own): 0.5 x 0.04 = 0.02, two rows */
    kind[7] = KIPP_FAIR_PREFILL;
    k = sel(n, grp, kind, progress, 0.5, 0.04, 0.01, keep);
    KT_CHECK(k == 2 && !keep[7] && count(keep, 0, 7) == 2, "prefilling light: kept %u", k);
    /* held out (paused / with the mask thread): the light one is not there */
    kind[7] = KIPP_FAIR_OUT;
    k = sel(n, grp, kind, progress, 0.5, 0.04, 0.01, keep);
    KT_CHECK(k == 7 && !keep[7], "no light request present: kept %u of 7", k);
    /* share 0: the pool waits while the light request runs */
    kind[7] = KIPP_FAIR_DECODE;
    k = sel(n, grp, kind, progress, 0.0, 0.04, 0.01, keep);
    KT_CHECK(k == 1 && keep[7] && count(keep, 0, 7) == 0, "share 0: kept %u", k);
    /* cap off, flat line, a line that allows all */
    KT_CHECK(sel(n, grp, kind, progress, -1, 0.04, 0.01, keep) == 8 && count(keep, 0, 8) == 8, "share < 0");
    KT_CHECK(sel(n, grp, kind, progress, 0.5, 0.04, 0.0, keep) == 8, "b = 0 (rows free)");
    KT_CHECK(sel(n, grp, kind, progress, 0.5, 0.04, NAN, keep) == 8, "b NaN");
    KT_CHECK(sel(n, grp, kind, progress, 0.5, 1.0, 0.01, keep) == 8, "rows cheap next to a");
    /* two heavy requests and no light one: no cap */
    n = layout(grp, kind, (const uint32_t[]){4, 4}, 2);
    KT_CHECK(sel(n, grp, kind, progress, 0.5, 0.0, 1.0, keep) == 8, "heavy + heavy");
    /* singles only: no cap */
    n = layout(grp, kind, (const uint32_t[]){1, 1, 1, 1, 1, 1, 1, 1}, 8);
    KT_CHECK(sel(n, grp, kind, progress, 0.0, 0.0, 1.0, keep) == 8, "singles");
    /* two n 4 beside a plain one, siblings interleaved in the running order: 0.5 x 0.04 */
    const uint32_t g3[] = {0, 1, 0, 1, 0, 1, 0, 1, 8};
    memcpy(grp, g3, sizeof g3);
    for (uint32_t i = 0; i < 9; i++) kind[i] = KIPP_FAIR_DECODE;
    k = sel(9, grp, kind, progress, 0.5, 0.03, 0.01, keep);
    KT_CHECK(k == 3 && keep[8] && keep[0] && keep[1], "interleaved: kept %u", k);
    /* the heavy requests share their rows: the least advanced of both go first */
    for (uint32_t i = 0; i < 8; i++) progress[i] = i == 5 ? 2 : i == 7 ? 3 : 10;
    k = sel(9, grp, kind, progress, 0.5, 0.03, 0.01, keep);
    KT_CHECK(k == 3 && keep[8] && keep[5] && keep[7], "pooled by progress: kept %u", k);
    for (uint32_t i = 0; i < 9; i++) progress[i] = 0;
    /* two light requests (one prefilling), a group with one decoding sequence and one
     * prefilling (neither light nor heavy: its row is kept), n 5 */
    const uint32_t g4[] = {0, 1, 2, 2, 4, 4, 4, 4, 4};
    const uint8_t k4[] = {KIPP_FAIR_DECODE, KIPP_FAIR_PREFILL, KIPP_FAIR_DECODE, KIPP_FAIR_PREFILL,
                          KIPP_FAIR_DECODE, KIPP_FAIR_DECODE, KIPP_FAIR_DECODE, KIPP_FAIR_DECODE, KIPP_FAIR_DECODE};
    memcpy(grp, g4, sizeof g4);
    memcpy(kind, k4, sizeof k4);
    k = sel(9, grp, kind, progress, 0.0, 0.03, 0.01, keep); /* 2 fixed, the pool waits */
    KT_CHECK(k == 2 && keep[0] && keep[2] && !keep[4] && !keep[1] && !keep[3], "mixed: kept %u", k);
    /* progress decides: the least advanced heavy sequences go first */
    n = layout(grp, kind, (const uint32_t[]){7, 1}, 2);
    for (uint32_t i = 0; i < 7; i++) progress[i] = i == 5 ? 1 : i == 6 ? 4 : 9;
    k = sel(n, grp, kind, progress, 0.2, 0.04, 0.01, keep); /* 0.2 x 0.05 = 0.01: one, exactly */
    KT_CHECK(k == 2 && keep[5] && keep[7], "the least advanced sibling (5) first");
    k = sel(n, grp, kind, progress, 0.4, 0.04, 0.01, keep); /* 0.02: two */
    KT_CHECK(k == 3 && keep[5] && keep[6] && keep[7], "then the next (6)");
}

/* Steps of one heavy request beside a light one, progress counted as sched.c's n_gen and
 * the pool's carry kept from step to step: every sibling runs, none waits longer than the
 * rotation needs, they advance together, and the pool spends its share on average. */
static void test_rotation(void) {
    enum { N = 13 };
    uint32_t grp[N + 1], progress[N + 1] = {0}, runs[N + 1] = {0}, wait[N + 1] = {0}, worst = 0, rows = 0;
    uint8_t kind[N + 1], keep[N + 1];
    double cost[N + 1];
    for (uint32_t i = 0; i <= N; i++) cost[i] = 0.01;
    kipp_fair_state st = {0};
    const uint32_t n = layout(grp, kind, (const uint32_t[]){N, 1}, 2);
    for (int step = 0; step < 1200; step++) {
        const uint32_t k = kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, 0.5, 0.04, 0, &st, keep);
        KT_CHECK(k == 3 || k == 4, "step %d kept %u (0.025 a step: two rows, three with the carry)", step, k);
        rows += k - 1;
        for (uint32_t i = 0; i < n; i++) {
            if (keep[i]) runs[i]++, progress[i]++, wait[i] = 0;
            else if (++wait[i] > worst) worst = wait[i];
        }
    }
    uint32_t lo = UINT32_MAX, hi = 0;
    for (uint32_t i = 0; i < N; i++) lo = runs[i] < lo ? runs[i] : lo, hi = runs[i] > hi ? runs[i] : hi;
    KT_CHECK(runs[N] == 1200, "the light request ran %u of 1200 steps", runs[N]);
    KT_CHECK(rows >= 2999 && rows <= 3000, "the pool ran %u rows in 1200 steps (2.5 a step)", rows);
    KT_CHECK(hi - lo <= 1 && worst <= 5, "siblings ran %u..%u times, longest wait %u steps (13 over 2.5 rows)", lo,
             hi, worst);
}

/* A row dearer than a step's allowance waits for the carry: beside a light request of
 * 0.005 s (a = 0.03, share 0.25: 0.00875 a step) rows of 0.02 run one in every two or three
 * steps, never two in one; with share 0 the pool still gets a row every
 * KIPP_FAIR_MAX_WAIT + 1 steps. */
static void test_carry(void) {
    uint32_t grp[8], progress[8] = {0};
    uint8_t kind[8], keep[8];
    double cost[8] = {0.02, 0.02, 0.02, 0.02, 0.005};
    const uint32_t n = layout(grp, kind, (const uint32_t[]){4, 1}, 2);
    kipp_fair_state st = {0};
    uint32_t rows = 0, gap = 0, worst_gap = 0, most = 0;
    for (int step = 0; step < 320; step++) {
        const uint32_t k = kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, 0.25, 0.03, 0, &st, keep);
        const uint32_t pool = k - keep[4];
        KT_CHECK(keep[4], "step %d: the light request lost its row", step);
        most = pool > most ? pool : most;
        rows += pool;
        gap = pool ? 0 : gap + 1;
        worst_gap = gap > worst_gap ? gap : worst_gap;
        for (uint32_t i = 0; i < 4; i++) progress[i] += keep[i];
    }
    KT_CHECK(rows >= 139 && rows <= 140 && most == 1 && worst_gap == 2, "dear rows: %u in 320 steps (0.4375 a step), at most %u "
             "a step, longest gap %u", rows, most, worst_gap);
    st = (kipp_fair_state){0};
    rows = 0;
    for (int step = 0; step < 90; step++) {
        const uint32_t k = kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, 0.0, 0.03, 0, &st, keep);
        const uint32_t pool = k - keep[4];
        KT_CHECK(pool == ((step + 1) % (KIPP_FAIR_MAX_WAIT + 1) == 0), "share 0, step %d: %u rows", step, pool);
        rows += pool;
    }
    KT_CHECK(rows == 90 / (KIPP_FAIR_MAX_WAIT + 1), "share 0: %u rows in 90 steps", rows);
    /* the light request gone, none expected: uncapped, and the carry is dropped */
    kind[4] = KIPP_FAIR_OUT;
    st.credit = 1.0, st.waited = 3;
    KT_CHECK(kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, 0.25, 0.03, 0, &st, keep) == 4 && st.credit == 0 &&
                 st.waited == 0, "uncapped: carry %g, waited %u", st.credit, st.waited);
}

/* Random configurations against fair.h's statement: rows of random costs (a deep row costs
 * more), a light request expected or not, a random carry. */
static void test_random(void) {
    uint32_t grp[40], progress[40];
    uint8_t kind[40], keep[40];
    double cost[40];
    int bad = 0, capped = 0, ghosted = 0, carried = 0;
    for (int t = 0; t < 20000; t++) {
        const uint32_t n = 1 + urand(40);
        const double b = urand(3) * 0.005, c = urand(3) * 1e-5;
        for (uint32_t i = 0; i < n; i++) {
            grp[i] = urand(3) == 0 ? i : grp[urand(i + 1)]; /* a new request or an earlier one's */
            if (grp[i] > i || grp[grp[i]] != grp[i]) grp[i] = i;
            kind[i] = (uint8_t)(urand(5) == 0 ? urand(3) : KIPP_FAIR_DECODE);
            progress[i] = urand(4);
            cost[i] = b + c * urand(4096);
        }
        const double share = urand(4) * 0.25, a = urand(10) * 0.01, ghost = urand(2) ? b + c : 0;
        kipp_fair_state st = {urand(3) * 0.01, urand(KIPP_FAIR_MAX_WAIT + 2)};
        const kipp_fair_state st0 = st;
        const uint32_t k = kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, share, a, ghost, &st, keep);
        uint32_t n_cand = 0, kept = 0, heavy = 0, light = 0, n_req = 0, pool_kept = 0, pool = 0;
        double fixed = 0, spent = 0;
        uint8_t hv[40] = {0}; /* by request: heavy */
        for (uint32_t g = 0; g < n; g++) {
            if (grp[g] != g) continue;
            uint32_t dec = 0, pre = 0, kg = 0;
            for (uint32_t i = g; i < n; i++)
                if (grp[i] == g) dec += kind[i] == KIPP_FAIR_DECODE, pre += kind[i] == KIPP_FAIR_PREFILL, kg += keep[i];
            bad += dec == 1 && kg != 1; /* a request of one decoding sequence always has its row */
            if (dec > 1) pool_kept += kg, pool += dec, hv[g] = 1;
            for (uint32_t i = g; i < n && dec == 1; i++)
                if (grp[i] == g && kind[i] == KIPP_FAIR_DECODE) fixed += cost[i];
            heavy += dec > 1, light += dec + pre == 1, n_req += dec + pre > 0;
        }
        for (uint32_t i = 0; i < n; i++) {
            n_cand += kind[i] == KIPP_FAIR_DECODE;
            kept += keep[i];
            spent += keep[i] && hv[grp[i]] ? cost[i] : 0;
            bad += keep[i] && kind[i] != KIPP_FAIR_DECODE;
        }
        bad += kept != k;
        const int gh = ghost > 0 && heavy && !light;
        if (!(heavy && (light || gh) && n_req + gh >= 2)) {
            bad += k != n_cand || st.credit != 0 || st.waited != 0;
            continue;
        }
        const double allow = (gh ? (1 + share) * (a + ghost) - a : share * (a + fixed)) + st0.credit;
        const int force = gh || st0.waited >= KIPP_FAIR_MAX_WAIT;
        capped += pool_kept < pool;
        ghosted += gh && pool_kept < pool;
        carried += st.credit > 0;
        bad += force && pool_kept == 0;                                          /* forced: a row */
        bad += !(pool_kept == 1 && force) && spent > allow * (1 + 1e-9) + 1e-15; /* within the allowance */
        /* not short of it: the next in line (least advanced not kept) would not fit */
        uint32_t next = n;
        for (uint32_t i = 0; i < n; i++)
            if (hv[grp[i]] && kind[i] == KIPP_FAIR_DECODE && !keep[i] && (next == n || progress[i] < progress[next]))
                next = i;
        bad += next < n && spent + cost[next] <= allow * (1 - 1e-9) - 1e-15;
        /* the carry: what was left when a row did not fit, else nothing; the wait count */
        const double left = allow - spent;
        bad += fabs(st.credit - (next < n && left > 0 ? left : 0)) > 1e-12;
        bad += st.waited != (pool_kept ? 0 : st0.waited + 1);
        /* of the heavy requests' sequences, none kept while a less advanced one was dropped */
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < n; j++)
                bad += hv[grp[i]] && hv[grp[j]] && keep[i] && !keep[j] && kind[j] == KIPP_FAIR_DECODE &&
                       progress[j] < progress[i];
    }
    KT_CHECK(bad == 0, "%d violations over 20000 random configurations", bad);
    KT_CHECK(capped > 1000 && ghosted > 300 && carried > 1000, "only %d configurations were capped, %d by a ghost, "
             "%d carried (the generator misses the case)", capped, ghosted, carried);
}

/* Rows priced by depth: a heavy request deep in its context gets fewer rows beside a light
 * one than a shallow one; an expected light request caps a heavy-only step the same way as
 * a present one would, its row going to the heavy request. */
static void test_depth_and_ghost(void) {
    uint32_t grp[64], progress[64] = {0};
    uint8_t kind[64], keep[64];
    double cost[64];
    kipp_fair_state st = {0};
    const double a = 0.03, b = 0.001, c = 2e-5; /* a row 1000 positions deep: 0.021 s */
    const uint32_t n = layout(grp, kind, (const uint32_t[]){8, 1}, 2);
    for (uint32_t i = 0; i < 8; i++) cost[i] = b + c * 100;
    cost[8] = b + c * 20;
    /* the pool may spend 0.25 x (0.03 + 0.0014) = 0.00785: two rows of 0.003 */
    uint32_t k = kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, 0.25, a, 0, &st, keep);
    KT_CHECK(k == 3 && keep[8] && count(keep, 0, 8) == 2, "shallow heavy rows: kept %u", k);
    for (uint32_t i = 0; i < 8; i++) cost[i] = b + c * 1000;
    st = (kipp_fair_state){0};
    k = kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, 0.25, a, 0, &st, keep);
    KT_CHECK(k == 1 && keep[8] && fabs(st.credit - 0.00785) < 1e-12, "deep heavy rows: kept %u, carry %g", k,
             st.credit);
    /* the light request gone: with none expected, the heavy one fills the batch */
    kind[8] = KIPP_FAIR_OUT;
    k = kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, 0.25, a, 0, &st, keep);
    KT_CHECK(k == 8, "nothing expected: kept %u of 8", k);
    /* one expected (ghost b + c = 0.00102): 1.25 x (0.03 + 0.00102) - 0.03 = 0.007775 and
     * the first row regardless (nothing else would run): one deep row, two shallow ones */
    k = kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, 0.25, a, b + c, &st, keep);
    KT_CHECK(k == 1 && count(keep, 0, 8) == 1 && !keep[8], "deep, one expected: kept %u", k);
    for (uint32_t i = 0; i < 8; i++) cost[i] = b + c * 100;
    st = (kipp_fair_state){0};
    k = kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, 0.25, a, b + c, &st, keep);
    KT_CHECK(k == 2 && count(keep, 0, 8) == 2, "shallow, one expected: kept %u", k);
    /* heavy beside heavy with one expected: both pooled */
    const uint32_t m = layout(grp, kind, (const uint32_t[]){4, 4}, 2);
    st = (kipp_fair_state){0};
    KT_CHECK(kipp_fair_select(m, grp, kind, NULL, progress, cost, NULL, 0.25, a, b + c, &st, keep) == 2,
             "heavy + heavy, one expected");
    KT_CHECK(kipp_fair_select(m, grp, kind, NULL, progress, cost, NULL, 0.25, a, 0, &st, keep) == 8, "heavy + heavy, none expected");
}

/* The step model over KV positions: recovered exactly where rows and depth vary apart;
 * depth alone (rows fixed) gives its slope beside the fallback b; rows and depth moving
 * together give the line (c = 0). */
static void test_plane(void) {
    double a = -1, b = -1, c = -1;
    kipp_step_fit f = {0};
    for (int k = 0; k < 300; k++) {
        const uint32_t n = 1 + (uint32_t)(k % 5);
        const double kv = 300.0 * (k % 7) + 50.0 * n;
        kipp_step_fit_add(&f, n, kv, 0.03 + 0.002 * n + 2e-5 * kv);
    }
    KT_CHECK(kipp_step_fit_plane(&f, 0, &a, &b, &c) && fabs(a - 0.03) < 1e-6 && fabs(b - 0.002) < 1e-6 &&
                 fabs(c - 2e-5) < 1e-9, "exact plane: a %.6f b %.6f c %.3e", a, b, c);
    kipp_step_fit g = {0}; /* two rows always, growing deeper */
    for (int k = 0; k < 300; k++) kipp_step_fit_add(&g, 2, 2.0 * (100 + k), 0.03 + 0.002 * 2 + 2e-5 * 2.0 * (100 + k));
    KT_CHECK(kipp_step_fit_plane(&g, 0.002, &a, &b, &c) && fabs(b - 0.002) < 1e-12 && fabs(c - 2e-5) < 1e-9 &&
                 fabs(a - 0.03) < 1e-6, "depth alone: a %.6f b %.6f c %.3e", a, b, c);
    kipp_step_fit h = {0}; /* depth proportional to rows: no telling them apart */
    for (int k = 0; k < 300; k++) {
        const uint32_t n = 1 + (uint32_t)(k % 8);
        kipp_step_fit_add(&h, n, 500.0 * n, 0.03 + 0.012 * n);
    }
    KT_CHECK(kipp_step_fit_plane(&h, 0, &a, &b, &c) && c == 0 && fabs(b - 0.012) < 1e-9, "collinear: b %.6f c %.3e",
             b, c);
    kipp_step_fit e = {0};
    KT_CHECK(!kipp_step_fit_plane(&e, 0.01, &a, &b, &c), "nothing measured gave a model");
    for (int k = 0; k < 300; k++) /* faster when deeper (noise): never a negative c */
        kipp_step_fit_add(&e, 1 + (uint32_t)(k % 3), 100.0 * (k % 11), 0.05 - 1e-5 * (k % 11) + 0.001 * (k % 3));
    KT_CHECK(kipp_step_fit_plane(&e, 0, &a, &b, &c) && c == 0 && b > 0, "negative depth slope: b %.6f c %.3e", b, c);
}

/* A row's draw is priced as its seconds over the host threads that draw rows in parallel;
 * nothing measured costs nothing; and a dear draw makes the pool's row wait: with the
 * forward's rows at 0.1 ms and a fixed 1 ms, share 0.25 buys a 0.1 ms row every step, but
 * a row whose draw took 1 ms on 2 threads (0.6 ms priced) not in the first step. */
static void test_draw_cost(void) {
    KT_CHECK(fabs(kipp_fair_draw_cost(0.002, 2) - 0.001) < 1e-15, "2 ms over 2 threads");
    KT_CHECK(kipp_fair_draw_cost(0.002, 1) == 0.002 && kipp_fair_draw_cost(0.002, 0) == 0.002,
             "one thread, or none said");
    KT_CHECK(kipp_fair_draw_cost(0, 2) == 0 && kipp_fair_draw_cost(-1, 2) == 0 &&
             kipp_fair_draw_cost(NAN, 2) == 0, "nothing measured costs nothing");
    for (int dear = 0; dear <= 1; dear++) {
        /* sequence 0: a light request; 1 and 2: a heavy request's two decoding sequences,
         * each 0.1 ms of forward, plus (dear) a 1 ms draw on 2 threads */
        const double row = 1e-4 + (dear ? kipp_fair_draw_cost(1e-3, 2) : 0);
        uint32_t gg[3] = {0, 1, 1}, pp[3] = {0, 0, 0};
        uint8_t kk[3] = {KIPP_FAIR_DECODE, KIPP_FAIR_DECODE, KIPP_FAIR_DECODE}, kp[3];
        double cc[3] = {1e-4, row, row};
        kipp_fair_state st = {0};
        kipp_fair_select(3, gg, kk, NULL, pp, cc, NULL, 0.25, 1e-3, 0, &st, kp);
        KT_CHECK(kp[0] == 1, "the light row always runs");
        KT_CHECK(kp[1] + kp[2] == (dear ? 0 : 2), "%s: %d of the heavy request's rows in the first step",
                 dear ? "dear draws" : "cheap draws", kp[1] + kp[2]);
    }
}

/* The last sequence of a bulk request (n > 1; its siblings parked, queued or done) is still
 * bulk work: beside a light request it is priced against the share like a pool of one
 * (a = 0.03, share 0.25: 0.00875 a step, a 0.02 row runs every third step), where counting
 * sequences alone made it a second light request that ran every step. Two such lone bulk
 * sequences with no light request beside them: uncapped. A bulk request's prefilling
 * sequence is no light request either. */
static void test_lone_bulk(void) {
    uint32_t grp[4], progress[4] = {0};
    uint8_t kind[4], keep[4];
    const double cost[4] = {0.02, 0.005, 0.02};
    const uint8_t bulk[4] = {1, 0, 1};
    const uint32_t n = layout(grp, kind, (const uint32_t[]){1, 1}, 2);
    kipp_fair_state st = {0};
    uint32_t with = 0, without = 0;
    for (int step = 0; step < 320; step++) {
        kipp_fair_select(n, grp, kind, bulk, progress, cost, NULL, 0.25, 0.03, 0, &st, keep);
        KT_CHECK(keep[1], "step %d: the light request lost its row", step);
        with += keep[0];
        progress[0] += keep[0];
    }
    kipp_fair_state st2 = {0};
    for (int step = 0; step < 320; step++) {
        kipp_fair_select(n, grp, kind, NULL, progress, cost, NULL, 0.25, 0.03, 0, &st2, keep);
        without += keep[0];
    }
    KT_CHECK(with >= 106 && with <= 107 && without == 320, "lone bulk row: %u of 320 steps (every third); "
             "counted as light: %u", with, without);
    uint32_t g2[3] = {0, 1}, lone = 0;
    uint8_t k2[3] = {KIPP_FAIR_DECODE, KIPP_FAIR_DECODE};
    st = (kipp_fair_state){0};
    lone = kipp_fair_select(2, g2, k2, (const uint8_t[]){1, 1}, progress, cost, NULL, 0.25, 0.03, 0, &st, keep);
    KT_CHECK(lone == 2, "two lone bulk sequences, no light request: %u of 2 kept", lone);
    k2[1] = KIPP_FAIR_PREFILL; /* a bulk request's sibling prefilling: no light request */
    lone = kipp_fair_select(2, g2, k2, (const uint8_t[]){1, 1}, progress, cost, NULL, 0.25, 0.03, 0, &st, keep);
    KT_CHECK(lone == 1 && keep[0], "beside a bulk prefill the lone bulk row was held out (%u kept)", lone);
}

/* Step seconds by rows: measured counts answer as measured, the others linearly between
 * measured neighbours or at the slope past them (not under 0); nothing measured: -1; bad
 * steps are ignored; a slower step slows every count's price, steps at the old speed
 * bring it back. Then the choice with the table's prices: a light
 * step of 33 ms whose second row adds 12 ms and the rows after 6 ms each (the 2-core 0.6B
 * case in fair.h) spends 0.25 of the light steps' time on pool rows (8.25 ms a step, the
 * carry buying a row when it reaches its step), under one row a step; the plane's line
 * (a = 0.055, 4 ms a row) had bought three or four a step. */
static void test_rows_table(void) {
    double t[9] = {0};
    uint8_t seen[9] = {0};
    kipp_fair_rows r = {t, seen, 8, 0};
    KT_CHECK(kipp_fair_rows_at(&r, 3, 0.004) == -1 && kipp_fair_rows_at(&r, 0, 0.004) == 0, "empty table");
    kipp_fair_rows_add(&r, 1, 0.033);
    kipp_fair_rows_add(&r, 2, 0.045);
    kipp_fair_rows_add(&r, 5, 0.063);
    kipp_fair_rows_add(&r, 9, 0.2), kipp_fair_rows_add(&r, 0, 0.2), kipp_fair_rows_add(&r, 3, -1),
        kipp_fair_rows_add(&r, 3, NAN); /* ignored */
    KT_CHECK(fabs(kipp_fair_rows_at(&r, 1, 0.004) - 0.033) < 1e-12 && fabs(kipp_fair_rows_at(&r, 3, 0.004) - 0.051) < 1e-12 &&
                 fabs(kipp_fair_rows_at(&r, 7, 0.004) - 0.071) < 1e-12 && !seen[3],
             "table: %.4f %.4f %.4f", kipp_fair_rows_at(&r, 1, 0.004), kipp_fair_rows_at(&r, 3, 0.004),
             kipp_fair_rows_at(&r, 7, 0.004));
    /* a slower one-row step moves the speed, and with it the counts not measured again */
    kipp_fair_rows_add(&r, 1, 0.043);
    const double sp = 1 + KIPP_FAIR_ROWS_ALPHA_S * (0.043 / 0.033 - 1);
    const double g1 = 0.033 + KIPP_FAIR_ROWS_ALPHA_G * (0.043 / sp - 0.033);
    KT_CHECK(fabs(kipp_fair_rows_at(&r, 1, 0) - sp * g1) < 1e-12 && fabs(kipp_fair_rows_at(&r, 2, 0) - sp * 0.045) < 1e-12 &&
                 kipp_fair_rows_at(&r, 2, 0) > 0.047,
             "after a slow step: %.6f %.6f", kipp_fair_rows_at(&r, 1, 0), kipp_fair_rows_at(&r, 2, 0));
    for (int k = 0; k < 60; k++) kipp_fair_rows_add(&r, 5, 0.063); /* back to speed: every count follows */
    KT_CHECK(fabs(kipp_fair_rows_at(&r, 5, 0) - 0.063) < 1e-4 && fabs(kipp_fair_rows_at(&r, 2, 0) - 0.045) < 2e-3,
             "back to speed: %.6f %.6f", kipp_fair_rows_at(&r, 5, 0), kipp_fair_rows_at(&r, 2, 0));
    double t2[9] = {0};
    uint8_t seen2[9] = {0};
    kipp_fair_rows only = {t2, seen2, 8, 0};
    kipp_fair_rows_add(&only, 4, 0.01);
    KT_CHECK(kipp_fair_rows_at(&only, 1, 0.004) == 0 && fabs(kipp_fair_rows_at(&only, 2, 0.004) - 0.002) < 1e-12,
             "below the first measured: %.4f %.4f", kipp_fair_rows_at(&only, 1, 0.004), kipp_fair_rows_at(&only, 2, 0.004));
    /* the choice: one light row (index 5) beside a pool of 5 */
    uint32_t grp[6], progress[6] = {0};
    uint8_t kind[6], keep[6];
    const double cost[6] = {0}, inc[6] = {0.012, 0.006, 0.006, 0.006, 0.006, 0.006};
    const uint32_t n = layout(grp, kind, (const uint32_t[]){5, 1}, 2);
    kipp_fair_state st = {0};
    uint32_t rows = 0, most = 0, with_line = 0;
    double spent = 0;
    for (int step = 0; step < 100; step++) {
        const uint32_t k = kipp_fair_select(n, grp, kind, NULL, progress, cost, inc, 0.25, 0.033, 0, &st, keep) - 1;
        rows += k, most = k > most ? k : most;
        for (uint32_t j = 0; j < k; j++) spent += inc[j];
        for (uint32_t i = 0; i < 5; i++) progress[i] += keep[i];
    }
    st = (kipp_fair_state){0};
    const double line[6] = {0.004, 0.004, 0.004, 0.004, 0.004, 0.004};
    for (int step = 0; step < 100; step++)
        with_line += kipp_fair_select(n, grp, kind, NULL, progress, line, NULL, 0.25, 0.055, 0, &st, keep) - 1;
    KT_CHECK(fabs(spent - 0.825) <= 0.012 && rows < 80 && most <= 2 && with_line >= 300,
             "table: %u pool rows in 100 steps (at most %u a step), %.4f s of the light steps' 3.3 s; line: %u rows",
             rows, most, spent, with_line);
    double bad[6] = {0.012, NAN};
    st = (kipp_fair_state){0};
    KT_CHECK(kipp_fair_select(n, grp, kind, NULL, progress, cost, bad, 0.25, 0.033, 0, &st, keep) == 6,
             "a NaN increment capped the step");
}

void kt_suite_fair(void) {
    test_draw_cost();
    test_fit();
    test_cases();
    test_rotation();
    test_carry();
    test_lone_bulk();
    test_rows_table();
    test_random();
    test_depth_and_ghost();
    test_plane();
}
