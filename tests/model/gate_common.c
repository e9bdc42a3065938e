/* gate_common.c — shared helpers of the model gates: manifest loading (jansson), opening a
 * model + a context on the gate's backend and KV type (and the cpu-ref reference), logits
 * comparison (max |a-b|, NMSE), and the golden check of one position. Runs no gate by
 * itself. */
#include "gate_common.h"

#include "kt.h"
#include "kv/kv.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int load_manifest(const char *dir, kt_manifest *mf) {
    char path[4096];
    json_error_t je;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    mf->root = json_load_file(path, 0, &je);
    if (!mf->root) {
        fprintf(stderr, "gate: cannot read %s: %s (line %d)\n", path, je.text, je.line);
        return 0;
    }
    json_t *b = json_object_get(mf->root, "bound"), *k = json_object_get(mf->root, "top_k"),
           *nv = json_object_get(mf->root, "n_vocab"), *pr = json_object_get(mf->root, "prompts");
    if (!json_is_number(b) || !json_is_integer(k) || !json_is_integer(nv) || !json_is_array(pr) ||
        json_array_size(pr) == 0) {
        fprintf(stderr, "gate: %s lacks bound/top_k/n_vocab/prompts\n", path);
        json_decref(mf->root);
        mf->root = NULL;
        return 0;
    }
    mf->bound = json_number_value(b);
    mf->top_k = (size_t)json_integer_value(k);
    mf->n_vocab = (uint32_t)json_integer_value(nv);
    return 1;
}

int32_t *kt_prompt_tokens(json_t *p, size_t *n) {
    json_t *t = json_object_get(p, "tokens");
    *n = json_array_size(t);
    if (!json_is_array(t) || *n == 0) return NULL;
    int32_t *ids = malloc(*n * sizeof *ids);
    if (!ids) return NULL;
    for (size_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(t, i));
    return ids;
}

uint32_t kt_argmax(const float *x, uint32_t n) {
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

double kt_max_abs_diff(const float *a, const float *b, uint32_t n) {
    double e = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (isnan(d)) return INFINITY;
        if (d > e) e = d;
    }
    return e;
}

int kt_same_ok(const kt_gate *g, const float *got, const float *ref, uint32_t n, double *e,
               double *tol, const char **what) {
    if (g->cp.backend && strcmp(g->cp.backend, KT_REF_BACKEND) == 0) {
        *what = "max |a-b|";
        *tol = KT_EXACT_TOL;
        *e = kt_max_abs_diff(got, ref, n);
    } else {
        *what = "NMSE";
        *tol = g->cp.kv_type == KIPP_KV_TYPE_Q4_0 ? KT_Q4K_NMSE_TOL : KT_SAME_NMSE_TOL;
        *e = kt_nmse(got, ref, n);
    }
    return *e <= *tol;
}

int kt_same_argmax(const kt_gate *g, const float *got, const float *ref, uint32_t n) {
    const uint32_t ga = kt_argmax(got, n), ra = kt_argmax(ref, n);
    if (ga == ra) return 1;
    if (g->cp.backend && strcmp(g->cp.backend, KT_REF_BACKEND) == 0) return 0;
    const double d = 2.0 * kt_max_abs_diff(got, ref, n);
    return (double)ref[ra] - ref[ga] <= d && (double)got[ga] - got[ra] <= d;
}

double kt_nmse(const float *a, const float *b, uint32_t n) {
    double num = 0.0, den = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        const double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (num != num) return 1e30; /* NaN: as far as it gets */
    return den > 0.0 ? num / den : num;
}

int kt_matches_ref(const float *got, const float *ref, uint32_t n, double *nmse) {
    *nmse = kt_nmse(got, ref, n);
    return kt_argmax(got, n) == kt_argmax(ref, n) && *nmse <= KT_NMSE_TOL;
}

int kt_scaled(int n) {
    const char *e = getenv("KIPP_TEST_TIMEOUT_SCALE");
    const double f = e ? strtod(e, NULL) : 1.0;
    return f >= 1.0 && f <= 100.0 ? (int)(n * f) : n;
}

const char *kt_backend(const kt_opts *o, const char *dflt) {
    return o && o->backend ? o->backend : dflt;
}

kipp_ctx_params kt_ctx_params(const kt_opts *o, const char *dflt) {
    kipp_ctx_params p = kipp_ctx_default_params();
    p.backend = kt_backend(o, dflt);
    p.kv_type = o ? o->kv_type : KIPP_KV_TYPE_DEFAULT;
    p.kv_type_v = o ? o->kv_type_v : KIPP_KV_TYPE_DEFAULT;
    return p;
}

int kt_params_are_ref(const kipp_ctx_params *p) {
    return p->backend && strcmp(p->backend, KT_REF_BACKEND) == 0 &&
           (p->kv_type == KIPP_KV_TYPE_DEFAULT || p->kv_type == KIPP_KV_TYPE_F32) &&
           (p->kv_type_v == KIPP_KV_TYPE_DEFAULT || p->kv_type_v == KIPP_KV_TYPE_F32);
}

const char *kt_label(const kipp_ctx_params *p, char *buf, size_t len) {
    if (p->kv_type == KIPP_KV_TYPE_DEFAULT) snprintf(buf, len, "%s", p->backend);
    else if (p->kv_type_v && p->kv_type_v != p->kv_type)
        snprintf(buf, len, "%s/%s/%s", p->backend, kipp_kv_type_name(p->kv_type),
                 kipp_kv_type_name(p->kv_type_v));
    else snprintf(buf, len, "%s/%s", p->backend, kipp_kv_type_name(p->kv_type));
    return buf;
}

void kt_gate_close(kt_gate *g) {
    kt_moe_unpin(g->moe_pin, g->label);
    g->moe_pin = NULL;
    free(g->a);
    free(g->b);
    kipp_ctx_free(g->c);
    kipp_ctx_free(g->ref);
    kipp_model_free(g->m);
    if (g->mf.root) json_decref(g->mf.root);
    g->a = g->b = NULL;
    g->c = g->ref = NULL;
    g->m = NULL;
    g->mf.root = NULL;
}

static kipp_moe_trace *gate_pin(kt_gate *g);

int kt_gate_open(kt_gate *g, const char *model_path, const char *vec_dir, const kt_opts *o,
                 const kipp_ctx_params *cp) {
    char err[KIPP_ERR_LEN];
    memset(g, 0, sizeof *g);
    g->failed0 = kt_failed;
    g->model_path = model_path;
    if (vec_dir && !load_manifest(vec_dir, &g->mf)) return 0;
    if (kipp_model_load(model_path, &g->m, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "gate: %s\n", err);
        kt_gate_close(g);
        return 0;
    }
    g->cp = cp ? *cp : kipp_ctx_default_params();
    g->cp.backend = kt_backend(o, KT_REF_BACKEND);
    g->cp.kv_type = o ? o->kv_type : KIPP_KV_TYPE_DEFAULT;
    g->cp.kv_type_v = o ? o->kv_type_v : KIPP_KV_TYPE_DEFAULT;
    g->is_ref = kt_params_are_ref(&g->cp);
    kt_label(&g->cp, g->label, sizeof g->label);
    if (kipp_ctx_init(g->m, &g->cp, &g->c, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "gate: %s: %s\n", g->label, err);
        kt_gate_close(g);
        return 0;
    }
    kipp_model_get_info(g->m, &g->info);
    g->a = malloc((size_t)g->info.n_vocab * sizeof *g->a);
    g->b = malloc((size_t)g->info.n_vocab * sizeof *g->b);
    if (!g->a || !g->b) {
        fprintf(stderr, "gate: out of memory\n");
        kt_gate_close(g);
        return 0;
    }
    /* a MoE model: cpu-ref's routing of every prompt pinned where it is a near-tie (gate_common.h) */
    if (g->info.n_expert && g->mf.root) g->moe_pin = gate_pin(g);
    return 1;
}

kipp_ctx *kt_gate_ref(kt_gate *g) {
    if (g->ref) return g->ref;
    char err[KIPP_ERR_LEN];
    kipp_ctx_params p = kipp_ctx_default_params();
    p.backend = KT_REF_BACKEND;
    p.kv_type = KIPP_KV_TYPE_F32;
    /* a quantized KV type is no rounding of f32 a 1e-4 NMSE bound holds (q4_0 moves the
     * logits by ~1e-2): its reference is cpu-ref storing K and V in the same types */
    const kipp_kv_type tv = g->cp.kv_type_v ? g->cp.kv_type_v : g->cp.kv_type;
    g->ref_kvq = kipp_kv_type_quantized(g->cp.kv_type) || kipp_kv_type_quantized(tv);
    if (g->ref_kvq) {
        p.kv_type = g->cp.kv_type;
        p.kv_type_v = tv;
    }
    p.n_ctx = g->cp.n_ctx;
    const kipp_status st = kipp_ctx_init(g->m, &p, &g->ref, err, sizeof err);
    KT_CHECK(st == KIPP_OK, "reference context (cpu-ref, %s KV): %s",
             kipp_kv_type_name(p.kv_type), err);
    return g->ref;
}

/* ---- the reference cache (kt_recompute) --------------------------------------------------- */

typedef struct {
    uint64_t h1, h2; /* two FNV-1a streams with different offsets: a 128-bit key */
} ref_key;

static void key_add(ref_key *k, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        k->h1 = (k->h1 ^ p[i]) * 0x100000001b3ULL;
        k->h2 = (k->h2 ^ p[i]) * 0x100000001b3ULL;
        k->h2 ^= k->h2 >> 29;
    }
}

/* The identity of a file: its path and what stat says of it; 0 if it cannot be read. */
static int key_add_file(ref_key *k, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    const uint64_t f[] = {(uint64_t)st.st_dev, (uint64_t)st.st_ino, (uint64_t)st.st_size,
                          (uint64_t)st.st_mtim.tv_sec, (uint64_t)st.st_mtim.tv_nsec};
    key_add(k, path, strlen(path) + 1);
    key_add(k, f, sizeof f);
    return 1;
}

static int ref_cache_path(const kt_gate *g, const int32_t *ids, uint32_t n, char *path, size_t len) {
    const char *dir = getenv("KIPP_REF_CACHE");
    if (!dir || !*dir || !g->model_path) return 0;
    ref_key k = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL};
    static const char tag[] = "kipp-ref-nocache-v1";
    key_add(&k, tag, sizeof tag);
    char exe[4096];
    const ssize_t r = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (r <= 0) return 0;
    exe[r] = 0;
    if (!key_add_file(&k, exe) || !key_add_file(&k, g->model_path)) return 0;
#ifdef KIPP_FAULT_INJECT /* only there does the fault variable exist (and its name appear) */
    const char *fault = getenv("KIPP_FAULT");
    key_add(&k, fault ? fault : "", fault ? strlen(fault) + 1 : 1);
#endif
    key_add(&k, &g->info.n_vocab, sizeof g->info.n_vocab);
    key_add(&k, &n, sizeof n);
    key_add(&k, ids, (size_t)n * sizeof *ids);
    if (mkdir(dir, 0755) != 0 && access(dir, W_OK) != 0) return 0;
    return snprintf(path, len, "%s/%016llx%016llx.f32", dir, (unsigned long long)k.h1,
                    (unsigned long long)k.h2) < (int)len;
}

kipp_status kt_recompute(kt_gate *g, kipp_ctx *c, const int32_t *ids, uint32_t n, float *out,
                         char *err, size_t err_len) {
    const uint32_t V = g->info.n_vocab;
    char path[4200];
    const int is_ref = (c == g->ref && !g->ref_kvq) || (c == g->c && g->is_ref);
    const int cached = is_ref && ref_cache_path(g, ids, n, path, sizeof path);
    if (cached) {
        FILE *f = fopen(path, "rb");
        if (f) {
            const size_t got = fread(out, sizeof *out, V, f);
            const int extra = fgetc(f) != EOF;
            fclose(f);
            if (got == V && !extra) return KIPP_OK;
        }
    }
    const kipp_status st = kipp_forward_nocache(c, ids, n, out, err, err_len);
    if (st != KIPP_OK || !cached) return st;
    /* written whole under a private name, then renamed: a concurrent reader sees all or none */
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return st;
    const int ok = fwrite(out, sizeof *out, V, f) == V;
    if (fclose(f) == 0 && ok) rename(tmp, path);
    else remove(tmp);
    return st;
}

/* Reads row r of n floats from a little-endian f32 file. */
static int read_logits_row(const char *dir, const char *file, size_t r, uint32_t n, float *out) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "gate: cannot open %s\n", path); return 0; }
    int ok = fseek(f, (long)(r * n * sizeof(float)), SEEK_SET) == 0 &&
             fread(out, sizeof(float), n, f) == n;
    fclose(f);
    if (!ok) fprintf(stderr, "gate: %s is too short for row %zu\n", path, r);
    return ok;
}

/* Exact argmax of logits vs the oracle's at position pos of prompt pi. */
static void golden_argmax(const kt_gate *g, size_t pi, size_t pos, const float *logits) {
    json_t *p = json_array_get(json_object_get(g->mf.root, "prompts"), pi);
    json_t *am = json_object_get(p, "argmax");
    uint32_t want = (uint32_t)json_integer_value(json_array_get(am, pos));
    uint32_t got = kt_argmax(logits, g->info.n_vocab);
    KT_CHECK(got == want, "%s prompt %zu position %zu: argmax %u, oracle %u", g->label, pi, pos,
             got, want);
}

double kt_golden_check(const kt_gate *g, const char *vec_dir, size_t pi, size_t pos,
                       const float *logits, float *ref) {
    const kt_manifest *mf = &g->mf;
    const uint32_t n_vocab = g->info.n_vocab;
    json_t *p = json_array_get(json_object_get(mf->root, "prompts"), pi);
    json_t *tki = json_object_get(p, "topk_ids"),
           *tkl = json_object_get(p, "topk_logits"),
           *flp = json_object_get(p, "full_logits_positions"),
           *flf = json_object_get(p, "full_logits_file");
    golden_argmax(g, pi, pos, logits);
    json_t *ids_k = json_array_get(tki, pos), *lg_k = json_array_get(tkl, pos);
    double worst = 0.0;
    for (size_t j = 0; j < json_array_size(ids_k); j++) {
        uint32_t id = (uint32_t)json_integer_value(json_array_get(ids_k, j));
        if (id >= n_vocab) continue;
        double e = fabs((double)logits[id] - json_number_value(json_array_get(lg_k, j)));
        if (isnan(e)) e = INFINITY;
        if (e > worst) worst = e;
    }
    KT_CHECK(json_array_size(ids_k) == mf->top_k && worst <= mf->bound,
             "prompt %zu position %zu: top-%zu logit error %.3g > bound %.3g", pi, pos, mf->top_k,
             worst, mf->bound);
    for (size_t r = 0; r < json_array_size(flp); r++) {
        if ((size_t)json_integer_value(json_array_get(flp, r)) != pos) continue;
        if (!read_logits_row(vec_dir, json_string_value(flf), r, n_vocab, ref)) {
            KT_CHECK(0, "missing full logits for prompt %zu", pi);
            continue;
        }
        double e_full = kt_max_abs_diff(logits, ref, n_vocab);
        KT_CHECK(e_full <= mf->bound,
                 "prompt %zu position %zu: full-vocab logit error %.3g > bound %.3g", pi, pos,
                 e_full, mf->bound);
        if (e_full > worst) worst = e_full;
    }
    return worst;
}

double kt_golden_position(kt_gate *g, const char *vec_dir, size_t pi, const int32_t *ids,
                          size_t pos, const float *logits) {
    if (g->is_ref) return kt_golden_check(g, vec_dir, pi, pos, logits, g->b);
    char err[KIPP_ERR_LEN];
    kipp_ctx *ref = kt_gate_ref(g);
    if (!ref) return 1e30;
    /* a quantized KV cache moves the logits by more than the vectors' near-ties: its argmax
     * is held to cpu-ref's with the same KV types (below), not to the f32 vectors */
    if (!g->ref_kvq) golden_argmax(g, pi, pos, logits);
    if (kt_recompute(g, ref, ids, (uint32_t)pos + 1, g->b, err, sizeof err) != KIPP_OK) {
        KT_CHECK(0, "cpu-ref recomputation, prompt %zu position %zu: %s", pi, pos, err);
        return 1e30;
    }
    double e;
    const int q4k = g->cp.kv_type == KIPP_KV_TYPE_Q4_0 && strcmp(g->cp.backend, KT_REF_BACKEND) != 0;
    const double tol = q4k ? KT_Q4K_NMSE_TOL : KT_NMSE_TOL;
    const int ok = q4k ? (e = kt_nmse(logits, g->b, g->info.n_vocab)) <= tol &&
                             kt_same_argmax(g, logits, g->b, g->info.n_vocab)
                       : kt_matches_ref(logits, g->b, g->info.n_vocab, &e);
    KT_CHECK(ok, "%s prompt %zu position %zu: argmax %u vs cpu-ref %u, NMSE %.3g > %g", g->label, pi,
             pos, kt_argmax(logits, g->info.n_vocab), kt_argmax(g->b, g->info.n_vocab), e, tol);
    return e;
}

/* ---- MoE routing near-ties (backend/moe.h's trace) ------------------------------------------ */

kipp_moe_trace *kt_moe_pin_on(kipp_ctx *ref, const kipp_model_info *info, const int32_t *const *ids,
                              const size_t *n, size_t n_prompts, float *scratch) {
    size_t n_pos = 0;
    for (size_t i = 0; i < n_prompts; i++)
        if (n[i] > n_pos) n_pos = n[i];
    if (!info->n_expert || !ref || !n_pos) return NULL;
    kipp_moe_trace *t = calloc(1, sizeof *t);
    const size_t slots = (size_t)info->n_layer * n_pos * n_prompts;
    if (t) {
        t->token = malloc(slots * sizeof *t->token);
        t->chosen = malloc(slots * info->n_expert_used * sizeof *t->chosen);
        t->margin = malloc(slots * sizeof *t->margin);
        t->probs = malloc(slots * info->n_expert * sizeof *t->probs);
    }
    if (!t || !t->token || !t->chosen || !t->margin || !t->probs) {
        KT_CHECK(0, "out of memory for a routing trace");
        kt_moe_unpin(t, NULL);
        return NULL;
    }
    for (size_t i = 0; i < slots; i++) t->token[i] = -1;
    t->mode = KIPP_MOE_TRACE_RECORD;
    t->n_layer = info->n_layer;
    t->n_pos = (uint32_t)n_pos;
    t->n_slot = (uint32_t)n_prompts;
    t->k = info->n_expert_used;
    t->n_exp = info->n_expert;
    t->delta = KT_MOE_NEAR_TIE;
    char err[KIPP_ERR_LEN];
    kipp_moe_trace_use(t);
    for (size_t i = 0; i < n_prompts; i++) {
        /* never from the reference cache: the point is to watch cpu-ref route */
        const kipp_status st = kipp_forward_nocache(ref, ids[i], (uint32_t)n[i], scratch, err, sizeof err);
        KT_CHECK(st == KIPP_OK, "cpu-ref routing trace: %s", err);
    }
    kipp_moe_trace_use(NULL);
    t->mode = KIPP_MOE_TRACE_PIN;
    kipp_moe_trace_use(t);
    return t;
}

/* every manifest prompt's routing on cpu-ref, pinned for the rest of the gate (kt_gate_open) */
static kipp_moe_trace *gate_pin(kt_gate *g) {
    json_t *prompts = json_object_get(g->mf.root, "prompts");
    int32_t *ids[KT_MAX_PROMPTS];
    size_t n[KT_MAX_PROMPTS], np = 0;
    for (size_t pi = 0; pi < json_array_size(prompts) && np < KT_MAX_PROMPTS; pi++)
        if ((ids[np] = kt_prompt_tokens(json_array_get(prompts, pi), &n[np]))) np++;
    kipp_moe_trace *t =
        np ? kt_moe_pin_on(g->is_ref ? g->c : kt_gate_ref(g), &g->info, (const int32_t *const *)ids, n, np, g->b)
           : NULL;
    for (size_t i = 0; i < np; i++) free(ids[i]);
    return t;
}

void kt_moe_unpin(kipp_moe_trace *t, const char *what) {
    kipp_moe_trace_use(NULL);
    if (!t) return;
    if (what) {
        const unsigned pinned = atomic_load(&t->pinned), mism = atomic_load(&t->mismatched);
        KT_CHECK(mism == 0, "%s: %u routing choices differ from cpu-ref's where its margin is >= %g (not a near-tie)",
                 what, mism, (double)t->delta);
        if (pinned)
            printf("   %s: %u near-tie routing choice(s) (margin < %g; widest %.3g) took cpu-ref's experts\n", what,
                   pinned, (double)t->delta, (double)t->worst_pinned);
    }
    free(t->token);
    free(t->chosen);
    free(t->margin);
    free(t->probs);
    free(t);
}
