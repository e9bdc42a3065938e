/* sampler.c — next-token sampling: penalties, temperature, top-k, top-p, min-p and a seeded
 * draw from our own PRNG (splitmix64-seeded xoshiro256**), so a seed means the same thing
 * everywhere, and OpenAI's logit biases. Does not implement mirostat, DRY or typical-p
 * (grammars constrain the logits before the sampler: matcher.c).
 *
 * Pipeline (temperature > 0): repetition penalty -> presence/frequency penalties ->
 * temperature -> top-k -> softmax -> top-p -> min-p -> renormalize -> draw.
 * With temperature <= 0 the penalties still apply (llama.cpp does the same with --temp 0),
 * then the argmax is taken with the lowest id winning ties; with default penalty params
 * that is the plain argmax of the logits.
 *
 * Determinism: the candidate order is a total order (value descending, id ascending), so
 * top-k keeps a unique set whatever the selection algorithm did; top-p's running sum and
 * the draw walk candidates in an order fixed by the code, never by memory or threads. The
 * row-wide passes (temperature, top-k up to 64, the exponentials) run in SIMD lanes
 * (src/core/vmath.c) whose every variant gives the same bits, and the exponential is our
 * own polynomial, not libm's expf (which differs between libms in the last ulp). So the
 * same seed, logits and history give the same tokens on every platform. */
#include "core/error.h"
#include "core/vmath.h"
#include "kipp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float v;    /* logit, later probability */
    int32_t id;
} cand;

/* Top-k and top-p find their cutoff with a histogram over the top 16 bits of an
 * order-preserving float key (sign, exponent, 7 mantissa bits: buckets 1/128 of an octave
 * wide), so only the one bucket holding the cutoff is selected or sorted. */
#define N_BUCKETS 65536
#define TOP_K_VEC 64 /* top_k up to this goes through kipp_vec_top_k, larger the histogram */
#define KIPP_SAMPLER_UNDO 256 /* accepts kipp_sampler_rollback can undo */

struct kipp_sampler {
    kipp_sampler_params p;
    uint32_t n_vocab;
    uint64_t rng[4]; /* xoshiro256** state */

    /* Penalty history: a ring of the last penalty_last_n accepted ids (grown on demand up
     * to that bound, so a huge window costs nothing until used), per-token counts within
     * the window, and the set of distinct ids with count > 0 so that applying penalties is
     * O(distinct) instead of O(window) or O(n_vocab). */
    int32_t *ring;
    uint32_t ring_cap, ring_len, ring_head; /* head = index of the oldest entry */
    uint32_t *count;     /* [n_vocab] */
    int32_t *distinct;   /* [n_vocab] ids with count > 0, unordered */
    uint32_t *where;     /* [n_vocab] index of id in distinct, valid while count > 0 */
    uint32_t n_distinct;

    kipp_logit_bias *bias; /* [p.n_logit_bias] the sampler's copy (p.logit_bias points here) */
    cand *c, *c2;  /* [n_vocab] scratch (its own, or a shared kipp_sampler_scratch's) */
    float *ex;     /* [n_vocab] scratch: the softmax's exponentials */
    int shared;    /* c, c2, ex, hist, mass, qdense belong to a kipp_sampler_scratch */
    kipp_token_prob *dist; /* [n_vocab] kipp_sampler_dist's output */
    float *qdense;         /* [n_vocab] zero between kipp_sampler_verify calls */
    /* undo log of the accepts since kipp_sampler_mark (speculative rollback) */
    struct { int32_t id, evicted; } undo[KIPP_SAMPLER_UNDO];
    uint32_t n_undo;
    int marked, undo_lost;
    uint32_t *hist; /* [N_BUCKETS] counts per logit bucket (top-k) */
    double *mass;   /* [N_BUCKETS / 2] probability mass per bucket (top-p) */
};

/* ---- PRNG ------------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform double in [0, 1) from the top 53 bits: exact, no platform-dependent rounding. */
static double rng_uniform(uint64_t s[4]) {
    return (double)(xoshiro_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- params ---------------------------------------------------------------------------- */

kipp_sampler_params kipp_sampler_default_params(void) {
    kipp_sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repetition_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.penalty_last_n = 64;
    p.seed = 0xC0FFEE;
    return p;
}

static kipp_status check_params(const kipp_sampler_params *p, char *err, size_t err_len) {
    /* isfinite also rejects NaN; temperature <= 0 (including -0) simply means greedy. */
    if (!isfinite(p->temperature))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "sampler: temperature must be a finite number (got %g)",
                         (double)p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "sampler: top_p must be in (0, 1] (got %g)", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "sampler: min_p must be in [0, 1] (got %g)", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f) || !isfinite(p->repetition_penalty))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "sampler: repetition_penalty must be a finite number > 0 (got %g)",
                         (double)p->repetition_penalty);
    if (!isfinite(p->presence_penalty))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "sampler: presence_penalty must be a finite number (got %g)",
                         (double)p->presence_penalty);
    if (!isfinite(p->frequency_penalty))
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "sampler: frequency_penalty must be a finite number (got %g)",
                         (double)p->frequency_penalty);
    if (p->penalty_last_n < -1)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "sampler: penalty_last_n must be -1 (all), 0 (off) or positive "
                         "(got %d)", (int)p->penalty_last_n);
    if (p->n_logit_bias && !p->logit_bias)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "sampler: %u logit biases but no array", p->n_logit_bias);
    for (uint32_t i = 0; i < p->n_logit_bias; i++)
        if (!isfinite(p->logit_bias[i].bias))
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                             "sampler: the logit bias of token %d is not a finite number",
                             (int)p->logit_bias[i].id);
    return KIPP_OK;
}

kipp_status kipp_sampler_init(const kipp_sampler_params *p, uint32_t n_vocab, kipp_sampler **out,
                              char *err, size_t err_len) {
    if (!out)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "sampler: out is NULL");
    *out = NULL;
    if (n_vocab == 0 || n_vocab > (uint32_t)INT32_MAX)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "sampler: n_vocab must be in 1..%d (got %u)", INT32_MAX, n_vocab);
    kipp_sampler_params params = p ? *p : kipp_sampler_default_params();
    kipp_status st = check_params(&params, err, err_len);
    if (st != KIPP_OK)
        return st;

    kipp_sampler *s = calloc(1, sizeof *s);
    if (!s)
        goto nomem;
    s->p = params;
    s->n_vocab = n_vocab;
    s->count = calloc(n_vocab, sizeof *s->count);
    s->distinct = malloc((size_t)n_vocab * sizeof *s->distinct);
    s->where = malloc((size_t)n_vocab * sizeof *s->where);
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->c2 = malloc((size_t)n_vocab * sizeof *s->c2);
    s->ex = malloc((size_t)n_vocab * sizeof *s->ex);
    s->hist = malloc(N_BUCKETS * sizeof *s->hist);
    s->mass = malloc(N_BUCKETS / 2 * sizeof *s->mass);
    s->dist = malloc((size_t)n_vocab * sizeof *s->dist);
    s->qdense = calloc(n_vocab, sizeof *s->qdense);
    if (params.n_logit_bias) {
        if (!(s->bias = malloc((size_t)params.n_logit_bias * sizeof *s->bias))) goto nomem;
        memcpy(s->bias, params.logit_bias, (size_t)params.n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    if (!s->count || !s->distinct || !s->where || !s->c || !s->c2 || !s->ex || !s->hist || !s->mass ||
        !s->dist || !s->qdense)
        goto nomem;
    uint64_t x = params.seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x); /* never all zero: splitmix64 is a bijection of a counter */
    *out = s;
    return KIPP_OK;
nomem:
    kipp_sampler_free(s);
    return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "sampler: out of memory for n_vocab %u",
                     n_vocab);
}

static void free_scratch(kipp_sampler *s) {
    if (s->shared)
        return;
    free(s->c);
    free(s->c2);
    free(s->ex);
    free(s->hist);
    free(s->mass);
    free(s->qdense);
}

void kipp_sampler_free(kipp_sampler *s) {
    if (!s)
        return;
    free(s->ring);
    free(s->count);
    free(s->distinct);
    free(s->where);
    free_scratch(s);
    free(s->dist);
    free(s->bias);
    free(s);
}

/* ---- shared scratch -------------------------------------------------------------------- */

struct kipp_sampler_scratch {
    uint32_t n_vocab;
    cand *c, *c2;   /* [n_vocab] */
    float *ex;      /* [n_vocab] */
    uint32_t *hist; /* [N_BUCKETS] */
    double *mass;   /* [N_BUCKETS / 2] */
    float *qdense;  /* [n_vocab] zero between calls */
};

void kipp_sampler_scratch_free(kipp_sampler_scratch *sc) {
    if (!sc)
        return;
    free(sc->c);
    free(sc->c2);
    free(sc->ex);
    free(sc->hist);
    free(sc->mass);
    free(sc->qdense);
    free(sc);
}

kipp_status kipp_sampler_scratch_init(uint32_t n_vocab, kipp_sampler_scratch **out, char *err,
                                      size_t err_len) {
    *out = NULL;
    if (n_vocab == 0 || n_vocab > (uint32_t)INT32_MAX)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                         "sampler scratch: n_vocab must be in 1..%d (got %u)", INT32_MAX, n_vocab);
    kipp_sampler_scratch *sc = calloc(1, sizeof *sc);
    if (sc) {
        sc->n_vocab = n_vocab;
        sc->c = malloc((size_t)n_vocab * sizeof *sc->c);
        sc->c2 = malloc((size_t)n_vocab * sizeof *sc->c2);
        sc->ex = malloc((size_t)n_vocab * sizeof *sc->ex);
        sc->hist = malloc(N_BUCKETS * sizeof *sc->hist);
        sc->mass = malloc(N_BUCKETS / 2 * sizeof *sc->mass);
        sc->qdense = calloc(n_vocab, sizeof *sc->qdense);
    }
    if (!sc || !sc->c || !sc->c2 || !sc->ex || !sc->hist || !sc->mass || !sc->qdense) {
        kipp_sampler_scratch_free(sc);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM,
                         "sampler scratch: out of memory for n_vocab %u", n_vocab);
    }
    *out = sc;
    return KIPP_OK;
}

void kipp_sampler_share_scratch(kipp_sampler *s, kipp_sampler_scratch *sc) {
    if (!s || !sc || sc->n_vocab < s->n_vocab)
        return;
    free_scratch(s);
    s->c = sc->c, s->c2 = sc->c2, s->ex = sc->ex, s->hist = sc->hist, s->mass = sc->mass, s->qdense = sc->qdense;
    s->shared = 1;
}

/* ---- history --------------------------------------------------------------------------- */

static void count_add(kipp_sampler *s, int32_t id) {
    if (s->count[id]++ == 0) {
        s->where[id] = s->n_distinct;
        s->distinct[s->n_distinct++] = id;
    }
}

static void count_remove(kipp_sampler *s, int32_t id) {
    if (--s->count[id] == 0) { /* swap-remove from the distinct set */
        uint32_t i = s->where[id];
        int32_t last = s->distinct[--s->n_distinct];
        s->distinct[i] = last;
        s->where[last] = i;
    }
}

/* Grows the ring (doubling, capped at the window) and linearizes it so head = 0.
 * Returns 0 when memory is short; the caller then evicts early (a smaller window is a
 * graceful degradation for a void API, not a crash). */
static int ring_grow(kipp_sampler *s, uint32_t window) {
    uint32_t cap = s->ring_cap ? s->ring_cap : 64;
    while (cap <= s->ring_len && cap < window)
        cap = cap > window / 2 ? window : cap * 2;
    if (cap > window)
        cap = window;
    if (cap <= s->ring_cap)
        return 0;
    int32_t *r = malloc((size_t)cap * sizeof *r);
    if (!r)
        return 0;
    for (uint32_t i = 0; i < s->ring_len; i++)
        r[i] = s->ring[(s->ring_head + i) % s->ring_cap];
    free(s->ring);
    s->ring = r;
    s->ring_cap = cap;
    s->ring_head = 0;
    return 1;
}

/* Notes an accept for kipp_sampler_rollback (evicted: the id that left the window, -1 none). */
static void undo_push(kipp_sampler *s, int32_t id, int32_t evicted) {
    if (!s->marked)
        return;
    if (s->n_undo == KIPP_SAMPLER_UNDO) {
        s->undo_lost = 1;
        return;
    }
    s->undo[s->n_undo].id = id;
    s->undo[s->n_undo++].evicted = evicted;
}

void kipp_sampler_accept(kipp_sampler *s, int32_t id) {
    /* Out-of-range ids cannot be penalized; ignoring them keeps this API void and safe. */
    if (!s || id < 0 || (uint32_t)id >= s->n_vocab || s->p.penalty_last_n == 0)
        return;
    if (s->p.penalty_last_n < 0) { /* whole history: counts only, nothing ever leaves */
        if (s->count[id] < UINT32_MAX) {
            count_add(s, id);
            undo_push(s, id, -1);
        }
        return;
    }
    uint32_t window = (uint32_t)s->p.penalty_last_n;
    if (s->ring_len == s->ring_cap && s->ring_len < window)
        ring_grow(s, window);
    if (s->ring_cap == 0)
        return; /* no memory for any history */
    if (s->ring_len == s->ring_cap) { /* full: evict the oldest */
        int32_t old = s->ring[s->ring_head];
        count_remove(s, old);
        s->ring[s->ring_head] = id;
        s->ring_head = (s->ring_head + 1) % s->ring_cap;
        undo_push(s, id, old);
    } else {
        s->ring[(s->ring_head + s->ring_len) % s->ring_cap] = id;
        s->ring_len++;
        undo_push(s, id, -1);
    }
    count_add(s, id);
}

void kipp_sampler_mark(kipp_sampler *s) {
    if (!s)
        return;
    s->marked = 1;
    s->n_undo = 0;
    s->undo_lost = 0;
}

int kipp_sampler_rollback(kipp_sampler *s) {
    if (!s)
        return 0;
    const int ok = !s->undo_lost;
    while (s->n_undo > 0) { /* newest first: each step is the exact inverse of an accept */
        const int32_t id = s->undo[--s->n_undo].id, old = s->undo[s->n_undo].evicted;
        count_remove(s, id);
        if (s->p.penalty_last_n < 0)
            continue;
        s->ring_len--; /* the newest entry is the tail */
        if (old >= 0) { /* the evicted id comes back as the oldest */
            s->ring_head = (s->ring_head + s->ring_cap - 1) % s->ring_cap;
            s->ring[s->ring_head] = old;
            s->ring_len++;
            count_add(s, old);
        }
    }
    s->marked = 0;
    s->undo_lost = 0;
    return ok;
}

/* Each distinct token in the window once: repetition (HF/llama.cpp form), then OpenAI
 * presence/frequency. Order within the set does not matter: each touches its own logit. */
static void apply_penalties(const kipp_sampler *s, float *logits) {
    const kipp_sampler_params *p = &s->p;
    if (p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f &&
        p->frequency_penalty == 0.0f)
        return;
    for (uint32_t i = 0; i < s->n_distinct; i++) {
        int32_t id = s->distinct[i];
        float l = logits[id];
        if (p->repetition_penalty != 1.0f)
            l = l > 0.0f ? l / p->repetition_penalty : l * p->repetition_penalty;
        l -= p->presence_penalty + p->frequency_penalty * (float)s->count[id];
        logits[id] = l;
    }
}

/* ---- candidate ordering and selection -------------------------------------------------- */

/* a before b: larger value first, then smaller id. NaN never reaches here (mapped to -inf). */
static int cand_before(const cand *a, const cand *b) {
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

static void cand_swap(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Moves the k first elements in cand order into c[0..k) (unordered), expected O(n):
 * quickselect with a median-of-three pivot; after 64 rounds without converging it falls
 * back to sorting the remaining range, which bounds the worst case at O(n log n).
 * The key order is total, so the selected set is unique. */
static void select_top(cand *c, size_t n, size_t k) {
    size_t lo = 0, hi = n; /* the k-th boundary lies in [lo, hi) */
    int budget = 64;
    while (hi - lo > 1) {
        if (budget-- == 0) {
            qsort(c + lo, hi - lo, sizeof *c, cand_cmp);
            return;
        }
        size_t mid = lo + (hi - lo) / 2;
        /* median of three into c[lo] */
        if (cand_before(&c[mid], &c[lo]))
            cand_swap(&c[mid], &c[lo]);
        if (cand_before(&c[hi - 1], &c[lo]))
            cand_swap(&c[hi - 1], &c[lo]);
        if (cand_before(&c[hi - 1], &c[mid]))
            cand_swap(&c[hi - 1], &c[mid]);
        cand_swap(&c[lo], &c[mid]); /* pivot = median, parked at lo */
        cand pivot = c[lo];
        size_t store = lo + 1;
        for (size_t i = lo + 1; i < hi; i++)
            if (cand_before(&c[i], &pivot))
                cand_swap(&c[i], &c[store++]);
        cand_swap(&c[lo], &c[store - 1]); /* pivot to its final rank store-1 */
        size_t rank = store - 1;
        if (rank == k || rank + 1 == k)
            return;
        if (rank > k)
            hi = rank;
        else
            lo = rank + 1;
    }
}

/* Sum of c[0..n).v in double with four interleaved partial sums: the fixed association
 * keeps the result deterministic while breaking the add-latency chain (n = 151936).
 * fsum is the same over a float array, so the two give the same bits on the same values. */
#define SUM4(n, at)                                                                              \
    do {                                                                                         \
        size_t i_ = 0;                                                                           \
        for (; i_ + 4 <= (n); i_ += 4) {                                                         \
            acc[0] += at(i_);                                                                    \
            acc[1] += at(i_ + 1);                                                                \
            acc[2] += at(i_ + 2);                                                                \
            acc[3] += at(i_ + 3);                                                                \
        }                                                                                        \
        for (; i_ < (n); i_++)                                                                   \
            acc[i_ & 3] += at(i_);                                                               \
    } while (0)

static double cand_sum(const cand *c, size_t n) {
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
#define CAND_AT(i) c[i].v
    SUM4(n, CAND_AT);
#undef CAND_AT
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

static double fsum(const float *x, size_t n) {
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
#define F_AT(i) x[i]
    SUM4(n, F_AT);
#undef F_AT
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

/* Softmax of the n values x[0..n) with maximum vmax (finite) into p[0..n) (p may be x):
 * p = exp(x - vmax) / sum in SIMD lanes (src/core/vmath.c: our own exp, the same bits on
 * every platform), the scale in double. Returns p_max: the maximum's exponential is
 * exactly 1, so p_max = 1 / sum. */
static float softmax(const float *x, float *p, size_t n, float vmax) {
    const double inv = 1.0 / kipp_vec_exp(x, p, n, vmax);
    kipp_vec_mul(p, n, inv);
    return (float)inv;
}

/* Length of the top-p prefix of sorted c[0..n): the smallest j with cum(0..j) >= top_p,
 * or 0 if the prefix sum never gets there (rounding). */
static size_t top_p_prefix(const cand *c, size_t n, float top_p) {
    double cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        cum += c[i].v;
        if (cum >= top_p)
            return i + 1;
    }
    return 0;
}

/* Keeps the p >= t elements (t > 0) of c[0..n), order preserved; returns how many. */
static size_t keep_at_least(cand *c, size_t n, float t) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) { /* branchless: the keep pattern is unpredictable */
        c[m] = c[i];
        m += c[i].v >= t;
    }
    return m;
}

/* Order-preserving key: larger float -> larger uint32 (NaN never gets here). */
static uint32_t fkey(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* Top-k: moves the k first candidates in cand order to c[0..k), unordered. One counting
 * pass finds the bucket B holding the k-th; everything above B is kept in id order and
 * only B's members go through quickselect. O(n + |B|). */
static void top_k_hist(kipp_sampler *s, cand *c, size_t n, size_t k) {
    uint32_t *h = s->hist;
    memset(h, 0, N_BUCKETS * sizeof *h);
    for (size_t i = 0; i < n; i++)
        h[fkey(c[i].v) >> 16]++;
    size_t above = 0;
    uint32_t bucket = N_BUCKETS - 1;
    while (above + h[bucket] < k) /* terminates: all n > k candidates are counted */
        above += h[bucket--];
    size_t m = 0, nb = 0;
    for (size_t i = 0; i < n; i++) { /* stable in-place compaction: m <= i */
        uint32_t b = fkey(c[i].v) >> 16;
        if (b > bucket)
            c[m++] = c[i];
        else if (b == bucket)
            s->c2[nb++] = c[i];
    }
    select_top(s->c2, nb, k - above);
    memcpy(c + m, s->c2, (k - above) * sizeof *c);
}

/* Top-p over n unsorted probabilities: bucket masses (double) locate the bucket B where the
 * cumulative mass crosses top_p; buckets above B are kept whole (id order), B's members
 * are sorted and taken until the running sum (recomputed over the kept elements) reaches
 * top_p. A full sort happens only when everything shares one bucket. Returns the count. */
static size_t top_p_hist(kipp_sampler *s, cand *c, size_t n, float top_p) {
    double *mass = s->mass;
    memset(mass, 0, N_BUCKETS / 2 * sizeof *mass);
    for (size_t i = 0; i < n; i++) /* p >= 0: the key's top bit is set, drop it */
        mass[(fkey(c[i].v) >> 16) & (N_BUCKETS / 2 - 1)] += c[i].v;
    double cum = 0.0;
    int bucket = N_BUCKETS / 2 - 1;
    while (bucket >= 0 && cum + mass[bucket] < top_p)
        cum += mass[bucket--];
    if (bucket < 0)
        return n; /* the rounded total fell short of top_p: keep everything */
    size_t m = 0, nb = 0;
    for (size_t i = 0; i < n; i++) {
        int b = (int)((fkey(c[i].v) >> 16) & (N_BUCKETS / 2 - 1));
        if (b > bucket)
            c[m++] = c[i];
        else if (b == bucket)
            s->c2[nb++] = c[i];
    }
    qsort(s->c2, nb, sizeof *s->c2, cand_cmp);
    cum = 0.0;
    for (size_t i = 0; i < m; i++)
        cum += c[i].v;
    for (size_t j = 0; j < nb; j++) {
        c[m++] = s->c2[j];
        cum += s->c2[j].v;
        if (cum >= top_p)
            break;
    }
    return m;
}

/* ---- sampling -------------------------------------------------------------------------- */

/* The largest logit's id, the lowest id winning ties; NaN is never chosen (0 when every
 * logit is NaN). */
static int32_t argmax(const float *logits, uint32_t n) {
    int32_t best = 0;
    kipp_vec_top_k(logits, n, 1, &best);
    return best;
}

/* The processed distribution: the candidates that survive penalties, temperature, top-k,
 * top-p and min-p, with their probabilities (not yet renormalized: *total is their sum), in
 * the order the draw walks them. Greedy (temperature <= 0, or +inf logits) and degenerate
 * cases give one candidate with probability 1 and *certain = 1: no draw follows (a filter
 * that leaves one candidate still draws, as the sampler always has). Returns the count.
 * With dense non-NULL, a distribution that no filter cut (every id, in id order) may come
 * back as *dense[0..n) instead of in the candidates (the cheaper form for a plain draw). */
static size_t processed(kipp_sampler *s, float *logits, double *total, int *certain,
                        const float **dense) {
    const kipp_sampler_params *p = &s->p;
    cand *c = s->c;
    for (uint32_t i = 0; i < p->n_logit_bias; i++) /* first, as OpenAI adds it to the logits */
        if (p->logit_bias[i].id >= 0 && (uint32_t)p->logit_bias[i].id < s->n_vocab)
            logits[p->logit_bias[i].id] += p->logit_bias[i].bias;
    apply_penalties(s, logits);
    *total = 1.0;
    *certain = 1;
    if (p->temperature <= 0.0f) {
        c[0] = (cand){1.0f, argmax(logits, s->n_vocab)};
        return 1;
    }
    size_t n = s->n_vocab;
    /* A tiny temperature (the server accepts any T > 0) can overflow l / T to +inf for
     * every positive logit, which would make them all "the maximum". Then the logits are
     * shifted by their maximum first: (l - max) / T <= 0 never overflows, the softmax is
     * the same (it is shift-invariant) and the limit T -> 0 is greedy, ties included.
     * Divided, not multiplied by 1/T, to match llama.cpp bits; l - 0 is l, so the shift
     * costs nothing when it is 0. */
    const float lmax = p->temperature >= 1.0f ? 0.0f : kipp_vec_max(logits, n); /* T >= 1: no overflow */
    const float shift = isfinite(lmax) && !isfinite(lmax / p->temperature) ? lmax : 0.0f;
    const float vmax = kipp_vec_scale(logits, n, shift, p->temperature); /* NaN -> -inf */
    if (vmax == -INFINITY) { /* every logit is -inf or NaN: nothing to normalize, lowest id */
        c[0] = (cand){1.0f, 0};
        return 1;
    }
    if (vmax == INFINITY) { /* +inf dominates; softmax would give NaN */
        c[0] = (cand){1.0f, argmax(logits, s->n_vocab)};
        return 1;
    }

    *certain = 0;
    int sorted = 0;
    float pmax;
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        const size_t k = (size_t)p->top_k;
        if (k <= TOP_K_VEC) { /* SIMD top k: already in cand order, largest first */
            int32_t ids[TOP_K_VEC];
            kipp_vec_top_k(logits, (uint32_t)n, (uint32_t)k, ids);
            for (size_t i = 0; i < k; i++)
                c[i] = (cand){logits[ids[i]], ids[i]};
        } else {
            for (size_t i = 0; i < n; i++)
                c[i] = (cand){logits[i], (int32_t)i};
            top_k_hist(s, c, n, k);
            qsort(c, k, sizeof *c, cand_cmp); /* k log k; the max survives top-k */
        }
        n = k;
        sorted = 1;
        float *e = s->ex;
        for (size_t i = 0; i < n; i++)
            e[i] = c[i].v;
        pmax = softmax(e, e, n, vmax);
        for (size_t i = 0; i < n; i++)
            c[i].v = e[i];
    } else {
        pmax = softmax(logits, s->ex, n, vmax);
        if (dense && p->top_p >= 1.0f && !(p->min_p > 0.0f)) {
            *dense = s->ex;
            *total = fsum(s->ex, n);
            return n;
        }
        for (size_t i = 0; i < n; i++)
            c[i] = (cand){s->ex[i], (int32_t)i};
    }
    /* Both top-p and min-p keep the most probable tokens; renormalizing between them would
     * only rescale, which min-p's ratio test (p >= min_p * p_max) ignores. */
    float t_minp = p->min_p > 0.0f ? p->min_p * pmax : 0.0f;
    if (p->top_p < 1.0f) {
        if (sorted) {
            size_t j = top_p_prefix(c, n, p->top_p);
            if (j > 0)
                n = j;
        } else {
            n = top_p_hist(s, c, n, p->top_p);
        }
    }
    if (t_minp > 0.0f) {
        n = keep_at_least(c, n, t_minp);
        if (n == 0) { /* cannot happen (p_max passes: min_p <= 1); c is clobbered if it did */
            c[0] = (cand){1.0f, argmax(logits, s->n_vocab)};
            *certain = 1;
            return 1;
        }
    }
    *total = cand_sum(c, n);
    return n;
}

/* Draws from c[0..n) with weights summing to total: u in [0, total), walked in order.
 * draw_dense walks the weights of ids 0..n) the same way (the same bits as draw over the
 * candidates {p[i], i}). */
#define DRAW_WALK(n, at, id_at)                                                                  \
    do {                                                                                         \
        double target = rng_uniform(s->rng) * total, cum = 0.0;                                  \
        for (size_t i_ = 0; i_ < (n); i_++) {                                                    \
            cum += at(i_);                                                                       \
            if (target < cum)                                                                    \
                return id_at(i_);                                                                \
        }                                                                                        \
        return id_at((n) - 1); /* target landed on the rounding edge */                          \
    } while (0)

static int32_t draw(kipp_sampler *s, const cand *c, size_t n, double total) {
#define C_V(i) c[i].v
#define C_ID(i) c[i].id
    DRAW_WALK(n, C_V, C_ID);
#undef C_V
#undef C_ID
}

static int32_t draw_dense(kipp_sampler *s, const float *p, size_t n, double total) {
#define P_V(i) p[i]
#define P_ID(i) (int32_t)(i)
    DRAW_WALK(n, P_V, P_ID);
#undef P_V
#undef P_ID
}

int32_t kipp_sampler_sample(kipp_sampler *s, float *logits) {
    if (!s || !logits)
        return -1;
    double total;
    int certain;
    const float *dense = NULL;
    size_t n = processed(s, logits, &total, &certain, &dense);
    if (certain)
        return s->c[0].id;
    return dense ? draw_dense(s, dense, n, total) : draw(s, s->c, n, total);
}

/* ---- speculative decoding -------------------------------------------------------------- */

uint32_t kipp_sampler_dist(kipp_sampler *s, float *logits, const kipp_token_prob **out) {
    if (!s || !logits || !out)
        return 0;
    double total;
    int certain;
    size_t n = processed(s, logits, &total, &certain, NULL);
    kipp_token_prob *d = s->dist;
    const double inv = 1.0 / total;
    for (size_t i = 0; i < n; i++)
        d[i] = (kipp_token_prob){s->c[i].id, (float)(s->c[i].v * inv)};
    *out = d;
    return (uint32_t)n;
}

int32_t kipp_sampler_draw(kipp_sampler *s, const kipp_token_prob *dist, uint32_t n) {
    if (!s || !dist || n == 0)
        return -1;
    if (n == 1)
        return dist[0].id;
    double total = 0.0, cum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        total += dist[i].p;
    double target = rng_uniform(s->rng) * total;
    for (uint32_t i = 0; i < n; i++) {
        cum += dist[i].p;
        if (target < cum)
            return dist[i].id;
    }
    return dist[n - 1].id;
}

/* The speculative rule (Leviathan et al. 2023; Chen et al. 2023): with p the target's
 * processed distribution and q the draft's, the drafted token x ~ q is kept with
 * probability min(1, p(x) / q(x)); otherwise the token is drawn from
 * normalize(max(0, p - q)). Whatever q is, the token that comes out is distributed
 * exactly as p. q = NULL (nq 0) is a point mass on the draft (n-gram or greedy drafts). */
int32_t kipp_sampler_verify(kipp_sampler *s, float *logits, int32_t draft,
                            const kipp_token_prob *q, uint32_t nq, int *accepted) {
    *accepted = 0;
    if (!s || !logits)
        return -1;
    double total;
    int certain;
    size_t n = processed(s, logits, &total, &certain, NULL);
    cand *c = s->c;
    if (n == 1) { /* greedy or degenerate: the target's token is certain */
        *accepted = c[0].id == draft;
        return c[0].id;
    }
    double px = 0.0, qx = 1.0;
    for (size_t i = 0; i < n; i++)
        if (c[i].id == draft) {
            px = c[i].v / total;
            break;
        }
    if (q) {
        qx = 0.0;
        for (uint32_t i = 0; i < nq; i++)
            if (q[i].id == draft) {
                qx = q[i].p;
                break;
            }
    }
    if (px > 0.0 && (qx <= px || rng_uniform(s->rng) * qx < px)) {
        *accepted = 1;
        return draft;
    }
    /* rejected: residual r(x) = max(0, p(x) - q(x)) over the target's candidates (tokens
     * outside them have p = 0, so their residual is 0) */
    float *qd = s->qdense;
    if (q)
        for (uint32_t i = 0; i < nq; i++)
            if (q[i].id >= 0 && (uint32_t)q[i].id < s->n_vocab)
                qd[q[i].id] = q[i].p;
    double rtotal = 0.0;
    const double inv = 1.0 / total;
    for (size_t i = 0; i < n; i++) {
        double pi = c[i].v * inv;
        double qi = q ? (double)qd[c[i].id] : (c[i].id == draft ? 1.0 : 0.0);
        double r = pi > qi ? pi - qi : 0.0;
        c[i].v = (float)r;
        rtotal += r;
    }
    if (q)
        for (uint32_t i = 0; i < nq; i++)
            if (q[i].id >= 0 && (uint32_t)q[i].id < s->n_vocab)
                qd[q[i].id] = 0.0f;
    if (!(rtotal > 0.0)) /* p <= q everywhere but x rejected: only rounding gets here */
        return draw(s, c, n, total);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (c[i].v > 0.0f)
            c[m++] = c[i];
    return draw(s, c, m, cand_sum(c, m));
}
