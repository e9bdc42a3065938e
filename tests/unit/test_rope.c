/* test_rope.c — model/rope.c's inverse frequencies and attention factor against HF
 * transformers 5's ROPE_INIT_FUNCTIONS (_compute_yarn_parameters, linear), values printed by
 * transformers in float32 for four configurations: Qwen3's 128k YaRN (head 128, base 1e6,
 * factor 4 over 32768), a small one with beta_fast 16 / beta_slow 2, one with an explicit
 * attention_factor 0.9 (the converter's multiplier), and linear factor 2. */
#include "kt.h"

#include "model/rope.h"

#include <math.h>
#include <string.h>

static const double hf_qwen3_128k[] = {1, 0.805842221, 0.649381638, 0.523299158, 0.421696514, 0.339820832, 0.273841977, 0.220673397, 0.177827939, 0.143301263, 0.115478203, 0.0930572003, 0.0749894157, 0.0604296438, 0.0486967526, 0.0392418988, 0.0316227786, 0.0254829675, 0.0205352511, 0.0165481716, 0.0133352149, 0.0107460786, 0.00865964312, 0.00697830599, 0.00537532149, 0.0041317381, 0.00316842273, 0.00242342241, 0.00184827659, 0.00140511245, 0.00106436096, 0.000802959781, 0.000602941145, 0.000450323569, 0.000334240554, 0.000246258394, 0.000179841154, 0.00012993149, 9.26230132e-05, 6.4903943e-05, 4.44569851e-05, 3.58253164e-05, 2.88695483e-05, 2.32643015e-05, 1.87473561e-05, 1.51074091e-05, 1.21741887e-05, 9.81047469e-06, 7.90569356e-06, 6.37074163e-06, 5.13381246e-06, 4.13704265e-06, 3.33380353e-06, 2.68651957e-06, 2.16491094e-06, 1.74457659e-06, 1.40585337e-06, 1.13289593e-06, 9.1293532e-07, 7.35681795e-07, 5.92843435e-07, 4.7773824e-07, 3.84981632e-07, 3.10234441e-07};
static const double hf_qwen3_128k_af = 1.13862944;
static const double hf_small_betas[] = {1, 0.140585333, 0.079056941, 0.0444569848, 0.0250000004, 0.0140585322, 0.00790569466, 0.00444569858, 0.00249999994, 0.00140585331, 0.000790569466, 0.000444569858, 0.000250000012, 0.000140585325, 7.90569466e-05, 4.44569851e-05};
static const double hf_small_betas_af = 1.13862944;
static const double hf_attn[] = {1, 0.46393159, 0.205548048, 0.0844682679, 0.0300000012, 0.0070292661, 0.00395284733, 0.00222284929, 0.00124999997, 0.000702926656, 0.000395284733, 0.000222284929, 0.000125000006, 7.02926627e-05, 3.95284733e-05, 2.22284925e-05};
static const double hf_attn_af = 0.9;
static const double hf_linear[] = {0.5, 0.374947101, 0.281170666, 0.210848257, 0.158113882, 0.118568681, 0.0889139697, 0.0666760728, 0.0500000007, 0.0374947079, 0.0281170644, 0.0210848246, 0.0158113893, 0.0118568679, 0.00889139716, 0.00666760746, 0.00499999989, 0.00374947116, 0.00281170662, 0.00210848241, 0.00158113893, 0.00118568691, 0.000889139716, 0.000666760723, 0.000500000024, 0.000374947092, 0.000281170651, 0.000210848244, 0.000158113893, 0.000118568692, 8.89139701e-05, 6.66760752e-05};
static const double hf_linear_af = 1.0;

static void check(const char *what, const kipp_model_info *hp, uint32_t D, const double *want, double want_af) {
    double got[64];
    kipp_rope_inv_freq(hp, D, got);
    double worst = 0.0;
    for (uint32_t i = 0; i < D / 2; i++) {
        const double r = fabs(got[i] - want[i]) / want[i];
        if (r > worst) worst = r;
    }
    /* HF's values are float32: 2^-23 relative, a few roundings deep */
    KT_CHECK(worst < 1e-6, "%s: inv_freq worst relative error %g", what, worst);
    const double af = kipp_rope_attn_factor(hp);
    KT_CHECK(fabs(af - want_af) < 1e-7, "%s: attention factor %.9g, HF %.9g", what, af, want_af);
}

static kipp_model_info hp_of(float base, kipp_rope_scaling t, float factor, uint32_t orig) {
    kipp_model_info hp;
    memset(&hp, 0, sizeof hp);
    hp.rope_theta = base;
    hp.rope_scaling = t;
    hp.rope_factor = factor;
    hp.rope_orig_ctx = orig;
    hp.yarn_attn_factor = 1.0f;
    hp.yarn_beta_fast = 32.0f;
    hp.yarn_beta_slow = 1.0f;
    hp.n_ctx_file = 40960;
    return hp;
}

void kt_suite_rope(void) {
    kipp_model_info hp = hp_of(1e6f, KIPP_ROPE_SCALING_YARN, 4.0f, 32768);
    check("yarn qwen3 128k", &hp, 128, hf_qwen3_128k, hf_qwen3_128k_af);
    hp = hp_of(1e4f, KIPP_ROPE_SCALING_YARN, 4.0f, 16);
    hp.yarn_beta_fast = 16.0f;
    hp.yarn_beta_slow = 2.0f;
    check("yarn betas 16/2", &hp, 32, hf_small_betas, hf_small_betas_af);
    hp = hp_of(1e4f, KIPP_ROPE_SCALING_YARN, 8.0f, 64);
    hp.yarn_attn_factor = (float)(0.9 / (0.1 * log(8.0) + 1.0)); /* as the converter writes it */
    check("yarn attention_factor 0.9", &hp, 32, hf_attn, hf_attn_af);
    hp = hp_of(1e4f, KIPP_ROPE_SCALING_LINEAR, 2.0f, 0);
    check("linear 2", &hp, 64, hf_linear, hf_linear_af);
    /* the context limits kipp_rope_finish derives */
    hp = hp_of(1e6f, KIPP_ROPE_SCALING_YARN, 4.0f, 32768);
    char err[256];
    KT_CHECK(kipp_rope_finish(&hp, err, sizeof err) == KIPP_OK && hp.n_ctx_train == 131072, "128k: %u", hp.n_ctx_train);
    hp = hp_of(1e6f, KIPP_ROPE_SCALING_NONE, 4.0f, 32768);
    KT_CHECK(kipp_rope_finish(&hp, err, sizeof err) == KIPP_OK && hp.n_ctx_train == 40960, "none: %u", hp.n_ctx_train);
    hp = hp_of(1e6f, KIPP_ROPE_SCALING_YARN, 0.5f, 32768);
    KT_CHECK(kipp_rope_finish(&hp, err, sizeof err) != KIPP_OK && strstr(err, "factor 0.5 is out of range"), "%s", err);
    hp = hp_of(1e6f, KIPP_ROPE_SCALING_YARN, 1024.0f, 32768);
    KT_CHECK(kipp_rope_finish(&hp, err, sizeof err) != KIPP_OK && strstr(err, "exceeds Kipp's limit"), "%s", err);
}
