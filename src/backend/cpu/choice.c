/* choice.c — the "auto" kernel table: per weight type, the kernels that measured fastest,
 * among the levels this CPU runs (kernels.h: kipp_cpu_kernels_compose).
 *
 * A level (kernels_avx2.c, kernels_avx512.c, ...) is a set of kernels compiled for one
 * instruction set; a higher level is not faster for every type and token count (the avx512
 * level has no many-token or repacked path for most types, and falls back to dequantizing
 * eight of them). So each weight type has its own row below: the level whose repacked path
 * it takes when the CPU runs that level, else the levels for its few-token kernel (decode,
 * small batches) and for its many-token kernel (prefill, big batches), best first. Every
 * preference is a measurement: `kipp-kernbench --json` records each level's kernels per
 * token count on a CPU class (bench/results/kernels-*.json), and tests/tools/
 * test_kernel_choice.py fails when a committed record shows the chosen kernel slower than
 * another level's on that CPU. The activation converters of all levels produce the same
 * formats, so one type's kernels may come from one level and the next type's from another. */
#include "backend/cpu/kernels.h"

#include "core/types.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* From token count `from` on (up to the next rule's), the first of `prefer` (space-separated
 * kernel ids, best first) that the CPU runs: "LEVEL" (the level's own choice between its
 * few- and many-token kernels at that count), "LEVEL:gemm" or "LEVEL:many"; "@FEATURE" after
 * an id limits it to CPUs with that feature (kipp_cpu_features_string's name). */
typedef struct {
    uint32_t from;
    const char *prefer;
} choice_rule;

typedef struct {
    uint32_t type;
    const char *packed; /* levels whose repacked path the type takes, best first, the first the
                         * CPU runs (NULL: none) */
    choice_rule rule[4];
    const char *why;
} choice_row;

/* The measurements: bench/results/kernels-epyc-avx512bf16.json, one thread of a 2-core AMD
 * EPYC (Zen 4) with AVX-512, VNNI and BF16, and bench/results/kernels-xeon-amx.json, one
 * thread of a 2-core Intel Xeon with AVX-512, VNNI, BF16, FP16 and AMX (levels timed
 * interleaved); k = 1024 x 3072 rows, GFLOP/s per token count 1 / 2 / 4 / 8 / 16 / 64 / 512.
 * The two disagree where 512-bit instructions run as two 256-bit halves (Zen 4): there the
 * one-token float kernels stream faster at 256 bits, so those preferences are "LEVEL@zen4"
 * first. Each level's figures stand in for the classes without the higher levels (an
 * AVX-512 CPU without VNNI runs the avx512 and avx2 rows; an AVX2 desktop the avx2 rows). */
static const choice_row rows[] = {
    {KIPP_TYPE_F32, NULL,
     {{1, "avx2:gemm@zen4 avx512 avx2"}, {4, "avx512 avx2"}, {12, "avx512:many@zen4 avx512 avx2"}},
     "EPYC: 1-2 tokens avx2 10.3 and 37.0 vs avx512 7.7 and 33.4; 4-8: avx512 75-78 vs 22-26; 16-512: "
     "avx512's tiles 84-91 vs its panel 29-89 and avx2's 43-89. Xeon: avx512 at every count (1: 7.2 vs "
     "5.3; 16-512: 70-130 vs 40-69)"},
    {KIPP_TYPE_F16, NULL, {{1, "avx2:gemm@zen4 avx512 avx2"}, {2, "avx512 avx2"}, {12, "avx512:many@zen4 avx512 avx2"}},
     "1 token: EPYC avx2 23.9 vs avx512 12.0 (decode streams faster at 256 bits there), Xeon avx512 13.7 vs "
     "avx2 8.4; 2-8: avx512 87-108 vs 23-56 (Xeon 52-85 vs 25-36); 16-512: EPYC avx512's tiles 96-102 vs "
     "its panel 52-92, Xeon its panel 83-138"},
    {KIPP_TYPE_BF16, "amx avx512bf16@zen4", {{1, "avx2:gemm@zen4 avx512 avx2"}, {2, "avx512 avx2"}, {12, "avx512:many@zen4 avx512 avx2"}},
     "AMX tiles where the CPU has them (0.6B, 2 threads: prefill 276 tok/s against avx512vnni's 130, decode "
     "11.1 against 11.3, isa-choice-xeon-amx-0.6b-bf16-*.json); on Zen 4 vdpbf16ps on the same packed layout "
     "(hi and lo bf16 planes of the activations, as AMX's): 26.9 GB/s at 1 token against avx2's 26.3, 114-116 "
     "GFLOP/s at 2+ against avx512's 86-108 (its rate on Intel not measured: not taken there); else 1 token: "
     "EPYC avx2 24.4 vs avx512 12.1 (decode streams faster at 256 bits there), Xeon avx512 13.5 vs avx2 7.8; "
     "2-8: avx512 86-108 vs 29-54; 16-512: EPYC avx512's tiles 97-108 vs its panel 60-95, Xeon its panel "
     "107-145"},
    {KIPP_TYPE_Q8_0, "avx512vnni avx2", {{1, "avx512vnni avx512 avx2"}},
     "repacked int16 panels (one stream per 16 rows), EPYC: avx512vnni's 512-bit tile (vpdpwssd) 182-200 at "
     "2+ tokens and 47.5 at 1, avx2's 123-138 and 52.0 (within the 10 % margin at 1 token; a type takes one "
     "level's packer); the mmapped kernels' best 45-130 and 18.8"},
    {KIPP_TYPE_Q4_0, NULL,
     {{1, "avx512vnni avx512 avx2"}, {2, "avx512vnni@zen4 avx512 avx2"}, {4, "avx512vnni avx512 avx2"},
      {8, "avx512vnni avx2:many avx512"}},
     "EPYC: avx512vnni fastest at every count (32-128); without VNNI: avx512 to 4 tokens, avx2's "
     "int16 panels from 8 (64-125 vs 52-62). Xeon: the same but at 2-3 tokens, where avx512 runs 52.6 "
     "against avx512vnni's 39.8"},
    {KIPP_TYPE_Q4_K, "avx512vnni avx2", {{1, "avx512vnni avx512 avx2"}, {8, "avx512vnni avx2:many avx512"}},
     "repacked nibble panels (one stream per 16 rows), EPYC: avx512vnni's 91.2 at 1 token and 165-186 at 2+, "
     "avx2's 78.7 and 109-128; the mmapped kernels' best 42.2 and 52-122"},
    {KIPP_TYPE_Q6_K, "avx512vnni avx2", {{1, "avx512vnni avx512 avx2"}},
     "repacked panels (one stream per 16 rows), EPYC: avx512vnni's 55.3 at 1 token and 96-168 at 2+, avx2's "
     "46.3 and 70-84; the mmapped kernels' best 25.6 and 42-120 (1 token was 17 before the tile prefetched "
     "each next super-block whole)"},
    {KIPP_TYPE_Q4_1, NULL, {{1, "avx2:gemm"}, {2, "avx2:many"}}, "avx2 only; its panels from 2 tokens (22.8 vs 19.9)"},
    {KIPP_TYPE_Q5_0, NULL, {{1, "avx2:gemm"}, {2, "avx2:many"}}, "avx2 only; its panels from 2 tokens (20.7 vs 19.5)"},
    {KIPP_TYPE_Q5_1, NULL, {{1, "avx2:gemm"}, {2, "avx2:many"}}, "avx2 only; its panels from 2 tokens (19.8 vs 17.5)"},
    {KIPP_TYPE_Q2_K, NULL, {{1, "avx2"}}, "avx2 only: its one kernel (int8 maddubs on Q8_K activations)"},
    {KIPP_TYPE_Q3_K, NULL, {{1, "avx2:gemm"}, {2, "avx2:many"}}, "avx2 only; its panels from 2 tokens (16.4 vs 15.3)"},
    {KIPP_TYPE_Q5_K, "avx512vnni avx2", {{1, "avx2:gemm"}, {4, "avx2:many"}},
     "repacked panels (Q4_K's with the fifth bit beside the nibbles), EPYC: avx512vnni's 64.8 at 1 token and "
     "116-174 at 2+, avx2's 51.8 and 78-98; the mmapped kernels' best (avx2 only) 23.5 and 24-121 (avx2's int16 "
     "panel beats its packed tiles from 64 tokens, 110-121 against 98: an AVX2-only CPU trades that for 2.2x decode)"},
    {KIPP_TYPE_IQ4_NL, NULL, {{1, "avx2:gemm"}, {2, "avx2:many"}}, "avx2 only; its panels from 2 tokens (23.6 vs 22.1)"},
    {KIPP_TYPE_IQ4_XS, NULL, {{1, "avx2:gemm"}, {2, "avx2:many"}}, "avx2 only; its panels from 2 tokens (20.6 vs 19.4)"},
};

_Static_assert(sizeof rows / sizeof rows[0] == KIPP_CPU_N_CHOICE, "one row per kernel table entry");

/* The levels from the highest down; the first one f runs supplies the helpers. */
static const char *const order[] = {"amx", "avx512bf16", "avx512vnni", "avx512", "avx2", "neon", "scalar"};

static kipp_cpu_mm *entry(kipp_cpu_kernels *k, uint32_t type) {
    switch (type) {
    case KIPP_TYPE_F32: return &k->f32;
    case KIPP_TYPE_F16: return &k->f16;
    case KIPP_TYPE_BF16: return &k->bf16;
    case KIPP_TYPE_Q8_0: return &k->q8_0;
    case KIPP_TYPE_Q4_0: return &k->q4_0;
    case KIPP_TYPE_Q4_K: return &k->q4_k;
    case KIPP_TYPE_Q6_K: return &k->q6_k;
    case KIPP_TYPE_Q4_1: return &k->q4_1;
    case KIPP_TYPE_Q5_0: return &k->q5_0;
    case KIPP_TYPE_Q5_1: return &k->q5_1;
    case KIPP_TYPE_Q2_K: return &k->q2_k;
    case KIPP_TYPE_Q3_K: return &k->q3_k;
    case KIPP_TYPE_Q5_K: return &k->q5_k;
    case KIPP_TYPE_IQ4_NL: return &k->iq4_nl;
    case KIPP_TYPE_IQ4_XS: return &k->iq4_xs;
    default: return NULL;
    }
}

#define FILL(field)                                                                                    \
    do {                                                                                               \
        for (size_t i = 0; i < sizeof order / sizeof order[0] && !out->field; i++) {                   \
            const kipp_cpu_kernels *lv = kipp_cpu_level_table(order[i]);                               \
            if (lv && kipp_cpu_level_runs(f, order[i])) out->field = lv->field;                        \
        }                                                                                              \
    } while (0)

/* One kernel of a level for type: variant 0 its few-token gemm, 1 its many-token one. */
static int level_kernel(const kipp_cpu_kernels *lv, uint32_t type, int variant, uint32_t *act, kipp_cpu_gemm_fn *g) {
    const kipp_cpu_mm mm = kipp_cpu_kernels_mm(lv, type);
    *act = variant ? mm.act_many : mm.act;
    *g = variant ? mm.gemm_many : mm.gemm;
    return *g != NULL;
}

typedef struct {
    kipp_cpu_mm *e;
    kipp_cpu_choice *c;
} builder;

/* Appends [min_tok, ..) -> (level, variant), merging with an equal predecessor. */
static void add_range(builder *b, uint32_t min_tok, const kipp_cpu_kernels *lv, int variant, uint32_t type) {
    uint32_t act;
    kipp_cpu_gemm_fn g;
    if (!level_kernel(lv, type, variant, &act, &g)) return;
    kipp_cpu_mm *e = b->e;
    if (e->n_range && e->range[e->n_range - 1].gemm == g) return;
    if (e->n_range == KIPP_CPU_MAX_RANGE) return; /* the rows below stay far inside */
    e->range[e->n_range].min_tok = min_tok;
    e->range[e->n_range].act = act;
    e->range[e->n_range].gemm = g;
    b->c->range[e->n_range].min_tok = min_tok;
    b->c->range[e->n_range].level = lv->isa;
    b->c->range[e->n_range].variant = variant ? "many" : "gemm";
    e->n_range++;
    b->c->n_range = e->n_range;
}

/* The next id of a space-separated list at *p into id (advancing *p): its level's table when f
 * runs that level and has the id's "@FEATURE" (if any), else NULL; *variant the text after
 * ':' (NULL: none). Returns 0 at the end of the list. */
static int next_id(const char **p, const kipp_cpu_features *f, char id[32], const kipp_cpu_kernels **lv,
                   const char **variant) {
    if (!*p || !**p) return 0;
    const size_t len = strcspn(*p, " ");
    snprintf(id, 32, "%.*s", (int)(len < 32 ? len : 31), *p);
    *p += len + strspn(*p + len, " ");
    char *at = strchr(id, '@'), *colon = strchr(id, ':');
    if (at) *at = '\0';
    if (colon) *colon = '\0';
    *variant = colon ? colon + 1 : NULL;
    *lv = NULL;
    if (at && !kipp_cpu_feature_on(f, at + 1)) return 1; /* "LEVEL@FEATURE": only with it */
    const kipp_cpu_kernels *t = kipp_cpu_level_table(id);
    if (t && kipp_cpu_level_runs(f, id)) *lv = t;
    return 1;
}

/* Tokens [from, to) (to 0: no end) on the first id of prefer that f runs; 0: none does. */
static int add_rule(builder *b, const kipp_cpu_features *f, uint32_t type, uint32_t from, uint32_t to,
                    const char *prefer) {
    char id[32];
    const kipp_cpu_kernels *lv;
    const char *colon;
    for (const char *p = prefer; next_id(&p, f, id, &lv, &colon);) {
        if (!lv) continue;
        const kipp_cpu_mm mm = kipp_cpu_kernels_mm(lv, type);
        if (colon) {
            const int variant = strcmp(colon, "many") == 0;
            if (variant ? !mm.gemm_many : !mm.gemm) continue;
            add_range(b, from, lv, variant, type);
            return 1;
        }
        if (!mm.gemm) continue;
        /* the level's own switch to its many-token kernel, where it falls in the range */
        const uint32_t mmt = kipp_cpu_mm_many_from(&mm);
        if (mmt > from) add_range(b, from, lv, 0, type);
        if (mmt != UINT32_MAX && (to == 0 || mmt < to)) add_range(b, mmt > from ? mmt : from, lv, 1, type);
        return 1;
    }
    return 0;
}

/* The first level of ids (space-separated, "LEVEL@FEATURE" as in the rules) that f runs and
 * that repacks type; NULL: none. */
static const kipp_cpu_kernels *packed_level(const kipp_cpu_features *f, const char *ids, uint32_t type) {
    char id[32];
    const kipp_cpu_kernels *lv;
    const char *variant;
    for (const char *p = ids; next_id(&p, f, id, &lv, &variant);)
        if (lv && kipp_cpu_kernels_mm(lv, type).packer) return lv;
    return NULL;
}

/* The entry of a row from its rules (the kernels for mmapped weights), and its choice c */
static void compose_rules(const kipp_cpu_features *f, const choice_row *row, kipp_cpu_mm *e, kipp_cpu_choice *c) {
    memset(e, 0, sizeof *e);
    builder b = {e, c};
    size_t nr = 0;
    while (nr < 4 && row->rule[nr].prefer) nr++;
    for (size_t i = 0; i < nr; i++) {
        const uint32_t from = row->rule[i].from, to = i + 1 < nr ? row->rule[i + 1].from : 0;
        if (!add_rule(&b, f, row->type, from, to, row->rule[i].prefer)) {
            /* none listed runs here: the highest level with a kernel for the type */
            for (size_t l = 0; l < sizeof order / sizeof order[0]; l++)
                if (add_rule(&b, f, row->type, from, to, order[l])) break;
        }
    }
    if (e->n_range) {
        uint32_t act;
        e->gemm = kipp_cpu_mm_for(e, 2, &act);
        e->act = act;
    } else {
        c->n_range = 1;
        c->range[0].min_tok = 1;
        c->range[0].level = "dequantize";
        c->range[0].variant = "gemm";
    }
}

void kipp_cpu_kernels_compose(const kipp_cpu_features *f, kipp_cpu_kernels *out,
                              kipp_cpu_choice choices[KIPP_CPU_N_CHOICE]) {
    memset(out, 0, sizeof *out);
    const char *top = NULL;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (kipp_cpu_level_table(order[i]) && kipp_cpu_level_runs(f, order[i])) {
            top = order[i];
            break;
        }
    out->isa = top ? top : "scalar";
    /* the helpers: the highest level's, a lower level's where it leaves one out */
    for (int a = 0; a < KIPP_ACT_COUNT; a++) {
        FILL(quant[a]);
        FILL(quant2[a]);
    }
    FILL(dot_f32);
    FILL(axpy_f32);
    FILL(softmax_f32);
    FILL(swiglu_f32);
    FILL(pv_f32);
    FILL(f16_to_f32);
    FILL(bf16_to_f32);
    FILL(pv_f16);
    FILL(pv_bf16);
    FILL(pv_rows_f32);
    FILL(pv_rows_f16);
    FILL(pv_rows_bf16);
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const choice_row *row = &rows[r];
        kipp_cpu_mm *e = entry(out, row->type);
        kipp_cpu_choice c = {.type = row->type, .why = row->why};
        const kipp_cpu_kernels *pl = packed_level(f, row->packed, row->type);
        if (pl) {
            *e = kipp_cpu_kernels_mm(pl, row->type); /* the packer serves every token count */
            kipp_cpu_level_choice(pl, row->type, &c);
            c.why = row->why;
            if (!e->gemm) { /* a level that only packs the type (avx512vnni's Q5_K): a tensor
                             * the packer leaves as stored runs the rules' kernels */
                kipp_cpu_choice unused = c;
                const kipp_cpu_packer *pk = e->packer;
                compose_rules(f, row, e, &unused);
                e->packer = pk;
            }
        } else {
            compose_rules(f, row, e, &c);
        }
        if (choices) choices[r] = c;
    }
}

void kipp_cpu_level_choice(const kipp_cpu_kernels *lv, uint32_t type, kipp_cpu_choice *out) {
    const kipp_cpu_mm mm = kipp_cpu_kernels_mm(lv, type);
    memset(out, 0, sizeof *out);
    out->type = type;
    out->n_range = 1;
    out->range[0].min_tok = 1;
    out->range[0].level = mm.gemm || mm.packer ? lv->isa : "dequantize"; /* a packing-only entry: its level */
    out->range[0].variant = "gemm";
    const uint32_t mmt = kipp_cpu_mm_many_from(&mm); /* 1: many at every count */
    if (mm.packer) {
        out->packed = 1;
        out->packed_level = lv->isa;
        out->range[0].variant = "packed";
    } else if (mmt != UINT32_MAX) {
        out->range[mmt > 1].min_tok = mmt;
        out->range[mmt > 1].level = lv->isa;
        out->range[mmt > 1].variant = "many";
        out->n_range = mmt > 1 ? 2 : 1;
    }
}

size_t kipp_cpu_choice_json(const kipp_cpu_choice *c, char *out, size_t cap) {
    size_t n = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        const int w_ = snprintf(out + (n < cap ? n : cap), n < cap ? cap - n : 0, __VA_ARGS__);    \
        if (w_ > 0) n += (size_t)w_;                                                               \
    } while (0)
    if (cap) out[0] = '\0';
    PUT("{\"packed\": %s, \"from\": {", c->packed ? "true" : "false");
    for (uint32_t i = 0; i < c->n_range; i++)
        PUT("%s\"%u\": \"%s:%s\"", i ? ", " : "", c->range[i].min_tok, c->range[i].level, c->range[i].variant);
    PUT("}, \"why\": \"%s\"}", c->why ? c->why : "");
#undef PUT
    if (cap && n >= cap) out[cap - 1] = '\0';
    return n;
}
