/* test_arch.c — the architecture table (src/model/arch.c) is consistent: names found and
 * refused, every hyper-parameter and tensor lands in its own field of the structs model.c
 * fills, tensor shapes use known symbols, and every op of a layer program has the tensors it
 * reads bound as required tensors of that architecture. */
#include "kt.h"

#include "backend/moe.h"
#include "model/arch.h"
#include "model/model.h"

#include <math.h>
#include <string.h>

/* kipp_moe_route, the router's choice every backend makes (arch.h: KIPP_OP_FFN_MOE) */
static void check_route(void) {
    uint32_t c[8];
    float w[8];
    /* softmax then the k largest, best first; weights renormalized to sum 1 */
    float l1[6] = {0.5f, 2.0f, -1.0f, 1.0f, 3.0f, 0.0f};
    kipp_moe_route(l1, 6, 3, 1, c, w, 0, 0, 0);
    KT_CHECK(c[0] == 4 && c[1] == 1 && c[2] == 3, "top-3 of a spread: %u %u %u", c[0], c[1], c[2]);
    const double z = exp(3.0) + exp(2.0) + exp(1.0);
    KT_CHECK(fabs(w[0] - exp(3.0) / z) < 1e-6 && fabs(w[1] - exp(2.0) / z) < 1e-6 && fabs(w[2] - exp(1.0) / z) < 1e-6,
             "renormalized weights %g %g %g", (double)w[0], (double)w[1], (double)w[2]);
    /* without norm_topk_prob the weights are the softmax over all experts */
    float l2[6] = {0.5f, 2.0f, -1.0f, 1.0f, 3.0f, 0.0f};
    kipp_moe_route(l2, 6, 2, 0, c, w, 0, 0, 0);
    double all = 0.0;
    for (int e = 0; e < 6; e++) all += exp((double)(float[]){0.5f, 2.0f, -1.0f, 1.0f, 3.0f, 0.0f}[e]);
    KT_CHECK(c[0] == 4 && fabs(w[0] - exp(3.0) / all) < 1e-6 && fabs(w[1] - exp(2.0) / all) < 1e-6,
             "unnormalized weights %g %g", (double)w[0], (double)w[1]);
    /* exact ties go to the lower index, however many tie and wherever they sit */
    float l3[8] = {1.0f, 2.0f, 0.0f, 2.0f, 2.0f, -3.0f, 2.0f, 1.0f};
    kipp_moe_route(l3, 8, 3, 1, c, w, 0, 0, 0);
    KT_CHECK(c[0] == 1 && c[1] == 3 && c[2] == 4, "ties: %u %u %u (want 1 3 4)", c[0], c[1], c[2]);
    KT_CHECK(w[0] == w[1] && w[1] == w[2] && fabs(w[0] - 1.0f / 3) < 1e-7, "tied weights %g %g %g", (double)w[0],
             (double)w[1], (double)w[2]);
    /* no tolerance band: one ulp apart is not a tie (a near-tie is decided by the last bit,
     * which is why the model gates check each vector's routing margin) */
    float l4[4] = {1.0f, nextafterf(1.0f, 2.0f), 0.0f, -1.0f};
    kipp_moe_route(l4, 4, 1, 1, c, w, 0, 0, 0);
    KT_CHECK(c[0] == 1 && w[0] == 1.0f, "one ulp above: chose %u", c[0]);
    /* k = n takes every expert; NaN logits never index out of range */
    float l5[3] = {NAN, NAN, NAN};
    kipp_moe_route(l5, 3, 3, 1, c, w, 0, 0, 0);
    KT_CHECK(c[0] < 3 && c[1] < 3 && c[2] < 3 && c[0] != c[1] && c[1] != c[2] && c[0] != c[2], "NaN: %u %u %u", c[0],
             c[1], c[2]);
}

static void check_one(const kipp_arch *a) {
    KT_CHECK(a->name && *a->name && a->hf_class && a->n_hparams && a->n_tensors && a->n_ops, "%s: empty entry",
             a->name ? a->name : "?");
    KT_CHECK(kipp_arch_find(a->name, strlen(a->name)) == a, "%s: not found by its name", a->name);
    for (size_t i = 0; i < a->n_hparams; i++) {
        const kipp_arch_hparam *p = &a->hparams[i];
        KT_CHECK(p->off + sizeof(uint32_t) <= sizeof(kipp_model_info) && p->off % 4 == 0, "%s.%s: field offset %zu",
                 a->name, p->key, p->off);
        KT_CHECK(p->kind != KIPP_HP_U32_EQUAL || !p->required, "%s.%s: an equality check must be optional", a->name,
                 p->key);
        KT_CHECK(!p->def_div || (p->def_off && p->kind == KIPP_HP_U32 && !p->required),
                 "%s.%s: a quotient default needs its dividend field, on an optional u32", a->name, p->key);
        for (size_t j = 0; j < i; j++) {
            KT_CHECK(strcmp(p->key, a->hparams[j].key) != 0, "%s.%s listed twice", a->name, p->key);
            /* two keys into one field only as an equality check of the first */
            KT_CHECK(p->off != a->hparams[j].off || p->kind == KIPP_HP_U32_EQUAL, "%s.%s and %s fill one field",
                     a->name, p->key, a->hparams[j].key);
        }
    }
    for (size_t i = 0; i < a->n_tensors; i++) {
        const kipp_arch_tensor *t = &a->tensors[i];
        KT_CHECK(t->off + sizeof(void *) <= sizeof(kipp_layer_weights) && t->off % sizeof(void *) == 0,
                 "%s %s: field offset %zu", a->name, t->name, t->off);
        KT_CHECK(t->ne[0] > KIPP_DIM_NONE && t->ne[0] <= KIPP_DIM_FE && t->ne[1] <= KIPP_DIM_FE &&
                     t->ne[2] <= KIPP_DIM_FE && (t->ne[1] != KIPP_DIM_NONE || t->ne[2] == KIPP_DIM_NONE),
                 "%s %s: unknown dimension symbols", a->name, t->name);
        /* a 3-D tensor is a stack of experts: model.c cuts it along ne[2] = E, and is required */
        KT_CHECK(t->ne[2] == KIPP_DIM_NONE || (t->ne[2] == KIPP_DIM_E && t->required),
                 "%s %s: a 3-D tensor must stack experts (ne[2] = E) and be required", a->name, t->name);
        for (size_t j = 0; j < i; j++)
            KT_CHECK(strcmp(t->name, a->tensors[j].name) != 0 && t->off != a->tensors[j].off,
                     "%s %s: name or field shared with %s", a->name, t->name, a->tensors[j].name);
    }
    int seen[KIPP_OP_COUNT] = {0};
    for (size_t i = 0; i < a->n_ops; i++) {
        const kipp_op op = a->program[i];
        KT_CHECK((unsigned)op < KIPP_OP_COUNT && strcmp(kipp_op_name(op), "?") != 0, "%s: op %d unknown", a->name,
                 (int)op);
        if ((unsigned)op >= KIPP_OP_COUNT) continue;
        seen[op]++;
        for (const char *const *n = kipp_op_tensors(op); *n; n++) {
            int bound = 0;
            for (size_t j = 0; j < a->n_tensors; j++) bound |= !strcmp(a->tensors[j].name, *n) && a->tensors[j].required;
            KT_CHECK(bound, "%s: op %s reads %s, which the table does not require", a->name, kipp_op_name(op), *n);
        }
    }
    /* a layer attends and feeds forward once, attention after the K/V it reads are stored */
    KT_CHECK(seen[KIPP_OP_ATTENTION] == 1 && seen[KIPP_OP_KV_STORE] == 1 && seen[KIPP_OP_ATTN_OUT] == 1,
             "%s: attention ops not once each", a->name);
    size_t store = 0, att = 0;
    for (size_t i = 0; i < a->n_ops; i++) {
        if (a->program[i] == KIPP_OP_KV_STORE) store = i;
        if (a->program[i] == KIPP_OP_ATTENTION) att = i;
    }
    KT_CHECK(store < att, "%s: attention before the K/V store", a->name);
    /* one feed-forward per layer, dense or mixture of experts; the experts' hyper-parameters
     * are read exactly when the program routes */
    KT_CHECK(seen[KIPP_OP_FFN_SWIGLU] + seen[KIPP_OP_FFN_MOE] == 1, "%s: not one feed-forward op", a->name);
    int moe_keys = 0;
    for (size_t i = 0; i < a->n_hparams; i++)
        moe_keys += a->hparams[i].off == offsetof(kipp_model_info, n_expert) && a->hparams[i].required;
    KT_CHECK(moe_keys == seen[KIPP_OP_FFN_MOE], "%s: expert_count required %d, ffn_moe ops %d", a->name, moe_keys,
             seen[KIPP_OP_FFN_MOE]);
}

void kt_suite_arch(void) {
    check_route();
    size_t n = 0;
    for (const kipp_arch *a; (a = kipp_arch_at(n)); n++) check_one(a);
    KT_CHECK(n >= 1 && kipp_arch_find("qwen3", 5), "qwen3 missing from the table");
    KT_CHECK(!kipp_arch_find("qwen", 4) && !kipp_arch_find("qwen3x", 6) && !kipp_arch_find("llama", 5),
             "a name that is not in the table found");
    char names[256];
    kipp_arch_names(names, sizeof names);
    KT_CHECK(strstr(names, "'qwen3'") != NULL && strstr(names, "'qwen2'") != NULL && strstr(names, "'qwen3moe'"),
             "names: %s", names);
    /* qwen2 is Qwen3 with biases for head norms: its program has qkv_bias and no qk_norm */
    const kipp_arch *q2 = kipp_arch_find("qwen2", 5);
    int bias = 0, qk = 0;
    for (size_t i = 0; q2 && i < q2->n_ops; i++) {
        bias += q2->program[i] == KIPP_OP_QKV_BIAS;
        qk += q2->program[i] == KIPP_OP_QK_NORM;
    }
    KT_CHECK(q2 && bias == 1 && qk == 0, "qwen2's program: %d bias ops, %d head norms", bias, qk);
    char key[64];
    KT_CHECK(!strcmp(kipp_arch_key(kipp_arch_find("qwen3", 5), "block_count", key, sizeof key), "qwen3.block_count"),
             "key: %s", key);
}
