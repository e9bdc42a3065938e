/* cpu.c — the optimized CPU backend ("cpu"): picks the best kernel level cpuid allows
 * (kernels_*.c: scalar, avx2, avx512, avx512vnni; neon on arm64) or the one the context
 * names (kipp_ctx_params.isa; a level the CPU lacks is an error, never a silent fallback),
 * starts the thread pool, keeps the KV cache in the shared host storage (host_kv.c) and
 * hands batches to the batched forward pass (forward.c). Gated against cpu-ref by the model
 * gates run with --backend cpu (tests/model). */
#define _DEFAULT_SOURCE /* syscall (the AMX permission) */
#include "backend/backend.h"

#include "backend/host_kv.h"

#include "backend/cpu/kernels.h"
#include "backend/cpu/forward.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "core/types.h"
#include "model/model.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- CPU features (the only place that asks cpuid) and level selection ------------------ */

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>

/* Linux hands a process the AMX tile state (8 KiB per thread) only on request; 1: granted
 * (asked once: the permission is the process's, for every thread) */
static int amx_permitted(void) {
    static int granted = -1;
    if (granted < 0) {
        enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
        granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    return granted;
}
#else
static int amx_permitted(void) { return 0; }
#endif

static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

void kipp_cpu_features_detect(kipp_cpu_features *out) {
    memset(out, 0, sizeof *out);
    uint32_t a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const int osxsave = c >> 27 & 1, avx = c >> 28 & 1;
    /* the OS saves the YMM state (XCR0 bits 1-2), the AVX-512 state (5-7), AMX tiles (17-18) */
    const uint64_t x = osxsave ? xcr0() : 0;
    const int ymm = avx && (x & 6) == 6, zmm = ymm && (x & 0xe0) == 0xe0, tiles = (x & 0x60000) == 0x60000;
    const uint32_t family = (a >> 8 & 0xf) == 0xf ? 0xf + (a >> 20 & 0xff) : a >> 8 & 0xf;
    out->fma = ymm && (c >> 12 & 1);
    out->f16c = ymm && (c >> 29 & 1);
    uint32_t max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    const uint32_t sub_leaves = a;
    out->avx2 = ymm && (b >> 5 & 1);
    out->avx512f = zmm && (b >> 16 & 1);
    out->avx512bw = zmm && (b >> 30 & 1);
    out->avx512vl = zmm && (b >> 31 & 1);
    out->avx512vnni = zmm && (c >> 11 & 1);
    out->avx512fp16 = zmm && (d >> 23 & 1);
    uint32_t v[4];
    __cpuid(0, v[0], v[1], v[3], v[2]); /* the vendor string is EBX EDX ECX */
    out->zen4 = out->avx512f && family == 0x19 && !memcmp(&v[1], "AuthenticAMD", 12);
    /* tiles usable: the CPU has them, the OS saves them, and it lets this process use them */
    const int amx = tiles && (d >> 24 & 1) && amx_permitted();
    out->amx_bf16 = amx && (d >> 22 & 1);
    out->amx_tile = amx;
    out->amx_int8 = amx && (d >> 25 & 1);
    if (sub_leaves >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        out->avxvnni = ymm && (a >> 4 & 1);
        out->avx512bf16 = zmm && (a >> 5 & 1);
    }
}
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

void kipp_cpu_features_detect(kipp_cpu_features *out) {
    memset(out, 0, sizeof *out);
    const unsigned long h = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
    out->neon = h >> 1 & 1;     /* HWCAP_ASIMD */
    out->dotprod = h >> 20 & 1; /* HWCAP_ASIMDDP */
    out->sve = h >> 22 & 1;     /* HWCAP_SVE */
    out->i8mm = h2 >> 13 & 1;   /* HWCAP2_I8MM */
    out->bf16 = h2 >> 14 & 1;   /* HWCAP2_BF16 */
}
#else
void kipp_cpu_features_detect(kipp_cpu_features *out) {
    memset(out, 0, sizeof *out);
#if defined(__aarch64__)
    out->neon = out->dotprod = 1; /* the build's -march (backend.mk) */
#endif
}
#endif

/* Each feature's name (as kipp_cpu_features_string writes it) and field. */
static const struct {
    const char *name;
    size_t off;
} feature_names[] = {
#define F(field, name) {name, offsetof(kipp_cpu_features, field)}
    F(avx2, "avx2"),         F(fma, "fma"),           F(f16c, "f16c"),           F(avx512f, "avx512f"),
    F(avx512bw, "avx512bw"), F(avx512vl, "avx512vl"), F(avx512vnni, "avx512vnni"), F(avxvnni, "avxvnni"),
    F(avx512bf16, "avx512bf16"), F(avx512fp16, "avx512fp16"), F(amx_tile, "amx-tile"), F(amx_int8, "amx-int8"),
    F(amx_bf16, "amx-bf16"), F(neon, "neon"),         F(dotprod, "dotprod"),     F(i8mm, "i8mm"),
    F(bf16, "bf16"),         F(sve, "sve"),           F(zen4, "zen4"),
#undef F
};
#define N_FEATURES (sizeof feature_names / sizeof feature_names[0])
_Static_assert(N_FEATURES == sizeof(kipp_cpu_features), "a name for every feature");

void kipp_cpu_features_string(const kipp_cpu_features *f, char *out, size_t cap) {
    size_t n = 0;
    if (cap) out[0] = '\0';
    for (size_t i = 0; i < N_FEATURES; i++) {
        if (!((const uint8_t *)f)[feature_names[i].off]) continue;
        const int w = snprintf(out + n, cap > n ? cap - n : 0, "%s%s", n ? " " : "", feature_names[i].name);
        if (w > 0) n += (size_t)w;
    }
    if (n == 0 && cap) snprintf(out, cap, "none");
}

/* The index in feature_names of the name p[0..len), N_FEATURES when none. */
static size_t feature_index(const char *p, size_t len) {
    size_t i = 0;
    while (i < N_FEATURES && !(strlen(feature_names[i].name) == len && !strncmp(p, feature_names[i].name, len))) i++;
    return i;
}

kipp_status kipp_cpu_features_parse(const char *list, kipp_cpu_features *out, char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    for (const char *p = list + strspn(list, " ,"); *p;) {
        const size_t len = strcspn(p, " ,");
        const size_t i = feature_index(p, len);
        if (i < N_FEATURES)
            ((uint8_t *)out)[feature_names[i].off] = 1;
        else if (!(len == 4 && !strncmp(p, "none", 4)))
            return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "unknown CPU feature '%.*s'", (int)len, p);
        p += len;
        p += strspn(p, " ,");
    }
    return KIPP_OK;
}

int kipp_cpu_feature_on(const kipp_cpu_features *f, const char *name) {
    const size_t i = feature_index(name, strlen(name));
    return i < N_FEATURES && ((const uint8_t *)f)[feature_names[i].off];
}

int kipp_cpu_level_runs(const kipp_cpu_features *f, const char *isa) {
    if (strcmp(isa, "scalar") == 0) return 1;
#if defined(__x86_64__) || defined(__i386__)
    const int avx2 = f->avx2 && f->fma && f->f16c;
    if (strcmp(isa, "avx2") == 0) return avx2;
    const int avx512 = avx2 && f->avx512f && f->avx512bw && f->avx512vl;
    if (strcmp(isa, "avx512") == 0) return avx512;
    /* VNNI only: the level uses no BF16 instruction (vdpbf16ps loses to widening + FMA, see
     * kernels_avx512.c), and Cascade Lake / Ice Lake have VNNI without BF16 */
    if (strcmp(isa, "avx512vnni") == 0) return avx512 && f->avx512vnni;
    /* avx512vnni's kernels, BF16 weights on AMX tiles (kernels_amx.c) */
    if (strcmp(isa, "amx") == 0) return avx512 && f->avx512vnni && f->amx_tile && f->amx_bf16;
    /* avx512vnni's kernels, BF16 weights on vdpbf16ps (kernels_avx512bf16.c) */
    if (strcmp(isa, "avx512bf16") == 0) return avx512 && f->avx512vnni && f->avx512bf16;
#elif defined(__aarch64__)
    if (strcmp(isa, "neon") == 0) return f->neon && f->dotprod;
#endif
    return 0;
}

int kipp_cpu_isa_available(const char *isa) {
    if (strcmp(isa, "auto") == 0) return 1; /* composed from the levels this CPU runs */
    kipp_cpu_features f;
    kipp_cpu_features_detect(&f);
    return kipp_cpu_level_runs(&f, isa);
}

#if defined(__x86_64__) || defined(__i386__)
static kipp_cpu_kernels amx_level;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_init(void) {
    amx_level = kipp_cpu_kernels_avx512vnni;
    amx_level.isa = "amx";
    amx_level.bf16.packer = &kipp_cpu_packer_amx_bf16;
    amx_level.quant[KIPP_ACT_BF16X2] = kipp_cpu_quant_amx_bf16x2;
}

/* AMX's packed BF16 layout and activations (its packer's bytes, pack and row, its hi/lo
 * converter), run by vdpbf16ps */
static kipp_cpu_kernels bf16_level;
static kipp_cpu_packer bf16_packer;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;

static void bf16_init(void) {
    bf16_packer = kipp_cpu_packer_amx_bf16;
    bf16_packer.gemm = kipp_cpu_gemm_dpbf16x2;
    bf16_packer.act = KIPP_ACT_BF16X2;
    bf16_level = kipp_cpu_kernels_avx512vnni;
    bf16_level.isa = "avx512bf16";
    bf16_level.bf16.packer = &bf16_packer;
    bf16_level.quant[KIPP_ACT_BF16X2] = kipp_cpu_quant_amx_bf16x2;
}
#endif

const kipp_cpu_kernels *kipp_cpu_level_table(const char *isa) {
#if defined(__x86_64__) || defined(__i386__)
    if (strcmp(isa, "amx") == 0) {
        pthread_once(&amx_once, amx_init);
        return &amx_level;
    }
    if (strcmp(isa, "avx512bf16") == 0) {
        pthread_once(&bf16_once, bf16_init);
        return &bf16_level;
    }
#endif
    static const kipp_cpu_kernels *const levels[] = {
#if defined(__x86_64__) || defined(__i386__)
        &kipp_cpu_kernels_avx512vnni, &kipp_cpu_kernels_avx512, &kipp_cpu_kernels_avx2,
#elif defined(__aarch64__)
        &kipp_cpu_kernels_neon,
#endif
        &kipp_cpu_kernels_scalar};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++)
        if (strcmp(isa, levels[i]->isa) == 0) return levels[i];
    return NULL;
}

static kipp_cpu_kernels auto_table;
static pthread_once_t auto_once = PTHREAD_ONCE_INIT;

static void auto_init(void) {
    kipp_cpu_features f;
    kipp_cpu_features_detect(&f);
    kipp_cpu_kernels_compose(&f, &auto_table, NULL);
}

kipp_status kipp_cpu_kernels_select(const char *isa, const kipp_cpu_kernels **out, char *err,
                                    size_t err_len) {
    *out = NULL;
    if (!isa || strcmp(isa, "auto") == 0) { /* per type, the kernels choice.c prefers */
        pthread_once(&auto_once, auto_init);
        *out = &auto_table;
        return KIPP_OK;
    }
    const kipp_cpu_kernels *lv = kipp_cpu_level_table(isa);
    if (!lv)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "cpu: unknown ISA level '%s' (known: auto, scalar, avx2, avx512, avx512vnni, "
                         "avx512bf16, amx, neon)",
                         isa);
    if (!kipp_cpu_isa_available(isa))
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "cpu: ISA level %s asks for an instruction set this CPU lacks "
                         "(avx2 needs AVX2+FMA+F16C; avx512 also AVX-512F/BW/VL; avx512vnni "
                         "also AVX512-VNNI; avx512bf16 also AVX512-BF16; amx also AMX-TILE and AMX-BF16, with the kernel's "
                         "permission; neon ARMv8.2 dotprod)",
                         isa);
    *out = lv;
    return KIPP_OK;
}

kipp_cpu_mm kipp_cpu_kernels_mm(const kipp_cpu_kernels *k, uint32_t type) {
    const kipp_cpu_mm none = {.act = KIPP_ACT_F32};
    switch (type) {
    case KIPP_TYPE_F32: return k->f32;
    case KIPP_TYPE_F16: return k->f16;
    case KIPP_TYPE_BF16: return k->bf16;
    case KIPP_TYPE_Q8_0: return k->q8_0;
    case KIPP_TYPE_Q4_0: return k->q4_0;
    case KIPP_TYPE_Q4_K: return k->q4_k;
    case KIPP_TYPE_Q6_K: return k->q6_k;
    case KIPP_TYPE_Q4_1: return k->q4_1;
    case KIPP_TYPE_Q5_0: return k->q5_0;
    case KIPP_TYPE_Q5_1: return k->q5_1;
    case KIPP_TYPE_Q2_K: return k->q2_k;
    case KIPP_TYPE_Q3_K: return k->q3_k;
    case KIPP_TYPE_Q5_K: return k->q5_k;
    case KIPP_TYPE_IQ4_NL: return k->iq4_nl;
    case KIPP_TYPE_IQ4_XS: return k->iq4_xs;
    default: return none;
    }
}

/* ---- backend entry points --------------------------------------------------------------- */

typedef struct {
    kipp_cpu_fwd *fwd;
    kipp_threadpool *pool;
    const kipp_cpu_kernels *k;
    char kernels[8192]; /* kipp_ctx_info.kernels */
} cpu_state;

/* The kernels of each weight type the model holds: the auto table's choices, or the forced
 * level's own entries. */
static void describe_kernels(cpu_state *s, const kipp_model *m, const char *forced) {
    kipp_cpu_choice ch[KIPP_CPU_N_CHOICE];
    kipp_cpu_features f;
    kipp_cpu_features_detect(&f);
    kipp_cpu_kernels composed;
    kipp_cpu_kernels_compose(&f, &composed, ch);
    uint64_t present = 0; /* bit per type id */
    const kipp_gguf_tensor *top[] = {m->tok_embd, m->output};
    for (size_t i = 0; i < 2; i++)
        if (top[i] && top[i]->type < 64) present |= 1ull << top[i]->type;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const kipp_layer_weights *w = &m->layers[l];
        const kipp_gguf_tensor *lt[] = {w->wq, w->wk, w->wv, w->wo, w->w_gate, w->w_up, w->w_down};
        for (size_t i = 0; i < sizeof lt / sizeof lt[0]; i++)
            if (lt[i] && lt[i]->type < 64) present |= 1ull << lt[i]->type;
    }
    size_t n = 0;
    const size_t cap = sizeof s->kernels;
    n += (size_t)snprintf(s->kernels, cap, "{");
    for (size_t i = 0; i < KIPP_CPU_N_CHOICE && n < cap; i++) {
        const uint32_t type = ch[i].type;
        if (!(present >> type & 1)) continue;
        kipp_cpu_choice c = ch[i];
        if (forced) { /* the level's own entry */
            kipp_cpu_level_choice(s->k, type, &c);
            c.why = "forced by --isa";
        }
        n += (size_t)snprintf(s->kernels + n, cap - n, "%s\"%s\": ", n > 1 ? ", " : "", kipp_type_name(type));
        if (n < cap) n += kipp_cpu_choice_json(&c, s->kernels + n, cap - n);
    }
    if (n < cap) n += (size_t)snprintf(s->kernels + n, cap - n, "}");
    if (n >= cap) snprintf(s->kernels, cap, "{}"); /* cannot happen: every type's record fits */
}

static const char *cpu_kernels(void *state) { return ((cpu_state *)state)->kernels; }

static void cpu_free(void *state) {
    cpu_state *s = state;
    if (!s) return;
    kipp_cpu_fwd_free(s->fwd);
    kipp_threadpool_free(s->pool);
    free(s);
}

static void cpu_caps(kipp_backend_caps *out) {
    *out = (kipp_backend_caps){
        /* every type: those without a kernel at a level go through kipp_cpu_gemm_dequant */
        .weight_types = kipp_type_mask(),
        .kv_types = 1u << KIPP_KV_TYPE_F32 | 1u << KIPP_KV_TYPE_F16 | 1u << KIPP_KV_TYPE_BF16 |
                    1u << KIPP_KV_TYPE_Q8_0 | 1u << KIPP_KV_TYPE_Q4_0,
        .kv_split = 1,
        /* f16: half the memory and KV traffic of f32 for an error far inside the gate
         * (measurements: docs/kv-cache.md, bench/results/kv-type-*.json) */
        .kv_default = KIPP_KV_TYPE_F16,
        .max_batch = 0};
}

static void cpu_describe(void *state, const char **isa, int *n_threads, uint64_t *weights_repacked) {
    const cpu_state *s = state;
    *isa = s->k->isa;
    *n_threads = kipp_threadpool_n_threads(s->pool);
    *weights_repacked = kipp_cpu_fwd_packed_bytes(s->fwd);
}

static kipp_status cpu_init(const kipp_model *m, uint32_t n_ctx, const kipp_backend_options *o,
                            void **state, char *err, size_t err_len) {
    *state = NULL;
    cpu_state *s = calloc(1, sizeof *s);
    if (!s) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cpu: out of memory");
    kipp_status st = kipp_cpu_kernels_select(o->isa && *o->isa ? o->isa : NULL, &s->k, err, err_len);
    if (st != KIPP_OK) goto fail;
    describe_kernels(s, m, o->isa && *o->isa && strcmp(o->isa, "auto") != 0 ? o->isa : NULL);
    st = kipp_threadpool_init(o->n_threads, &s->pool, err, err_len);
    if (st != KIPP_OK) goto fail;
    st = kipp_cpu_fwd_init(m, n_ctx, o->kv_type, o->kv_type_v, o->embeddings ? 0 : o->n_logits, s->k, s->pool, &s->fwd, err, err_len);
    if (st != KIPP_OK) goto fail;
    *state = s;
    return KIPP_OK;
fail:
    cpu_free(s);
    return st;
}

static kipp_status cpu_decode_batch(void *state, kipp_kv_pool *pool, const kipp_batch *b,
                                    float *logits, char *err, size_t err_len) {
    cpu_state *s = state;
    return kipp_cpu_fwd_decode_batch(s->fwd, pool, b, logits, err, err_len);
}

static kipp_status cpu_forward_nocache(void *state, const int32_t *tokens, uint32_t n,
                                       float *logits, char *err, size_t err_len) {
    cpu_state *s = state;
    return kipp_cpu_fwd_nocache(s->fwd, tokens, n, logits, err, err_len);
}

typedef struct {
    void (*fn)(void *arg, uint32_t i, int ith);
    void *arg;
} host_job;

static void host_rows(void *ctx, uint64_t begin, uint64_t end, int ith) {
    const host_job *j = ctx;
    for (uint64_t i = begin; i < end; i++) j->fn(j->arg, (uint32_t)i, ith);
}

static void cpu_host_for(void *state, uint32_t n, void (*fn)(void *arg, uint32_t i, int ith), void *arg) {
    cpu_state *s = state;
    host_job j = {fn, arg};
    kipp_threadpool_for(s->pool, n, 1, host_rows, &j);
}

static int cpu_host_threads(void *state) { return kipp_threadpool_n_threads(((cpu_state *)state)->pool); }

const kipp_backend_ops kipp_backend_cpu = {
    .name = "cpu",
    .caps = cpu_caps,
    .memory = kipp_host_memory,
    .init = cpu_init,
    .free = cpu_free,
    .describe = cpu_describe,
    .kernels = cpu_kernels,
    .kv_alloc = kipp_host_kv_alloc,
    .kv_free = kipp_host_kv_free,
    .kv_copy_block = kipp_host_kv_copy_block,
    .decode_batch = cpu_decode_batch,
    .forward_nocache = cpu_forward_nocache,
    .host_for = cpu_host_for,
    .host_threads = cpu_host_threads,
};
