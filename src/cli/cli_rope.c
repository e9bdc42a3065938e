/* The rope-scaling flags (cli/cli_rope.h). */
#include "cli/cli_rope.h"

#include "cli/cli_args.h"

#include <string.h>

void kipp_cli_rope_init(kipp_rope_params *rp) {
    memset(rp, 0, sizeof *rp);
    rp->type = -1;
}

int kipp_cli_rope_flag(const char *prog, int argc, char **argv, int *i, kipp_rope_params *rp) {
    static const char *const flags[] = {"--rope-scaling",    "--rope-scale",     "--rope-freq-scale",
                                        "--yarn-orig-ctx",   "--yarn-attn-factor", "--yarn-beta-fast",
                                        "--yarn-beta-slow"};
    const char *a = argv[*i];
    size_t k = 0;
    while (k < sizeof flags / sizeof flags[0] && strcmp(a, flags[k])) k++;
    if (k == sizeof flags / sizeof flags[0]) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s needs a value (see --help)\n", prog, a);
        return 2;
    }
    const char *v = argv[++*i];
    float f;
    long n;
    switch (k) {
    case 0:
        if (!strcmp(v, "none")) rp->type = KIPP_ROPE_SCALING_NONE;
        else if (!strcmp(v, "linear")) rp->type = KIPP_ROPE_SCALING_LINEAR;
        else if (!strcmp(v, "yarn")) rp->type = KIPP_ROPE_SCALING_YARN;
        else {
            fprintf(stderr, "%s: --rope-scaling '%s' is not supported; Kipp runs none, linear and yarn\n", prog,
                    v);
            return 2;
        }
        return 1;
    case 1:
        if (!kipp_cli_float(prog, a, v, 1.0f, 1024.0f, &f)) return 2;
        rp->factor = f;
        return 1;
    case 2: /* llama.cpp's --rope-freq-scale: 1 / factor */
        if (!kipp_cli_float(prog, a, v, 1.0f / 1024.0f, 1.0f, &f)) return 2;
        rp->factor = 1.0f / f;
        return 1;
    case 3:
        if (!kipp_cli_long(prog, a, v, 1, 1L << 22, &n)) return 2;
        rp->orig_ctx = (uint32_t)n;
        return 1;
    case 4:
        if (!kipp_cli_float(prog, a, v, 1e-3f, 16.0f, &f)) return 2;
        rp->attn_factor = f;
        return 1;
    default:
        if (!kipp_cli_float(prog, a, v, 1e-3f, 1024.0f, &f)) return 2;
        if (k == 5) rp->beta_fast = f;
        else rp->beta_slow = f;
        return 1;
    }
}

static void entry(FILE *f, int width, const char *flag, const char *const *lines) {
    fprintf(f, "      %-*s%s\n", width - 6, flag, lines[0]);
    for (int k = 1; lines[k]; k++) fprintf(f, "%*s%s\n", width, "", lines[k]);
}

void kipp_cli_rope_help(FILE *f, int width) {
    const char *t[] = {"RoPE scaling: none, linear or yarn (default: the",
                       "model file's rope.scaling.type; the start-up line",
                       "says which). Others are refused by name", NULL};
    const char *s[] = {"RoPE scaling factor (context = original x N)", NULL};
    const char *fs[] = {"llama.cpp's spelling of 1 / --rope-scale", NULL};
    const char *o[] = {"YaRN: the original (pre-training) context length", "(default: the file's)", NULL};
    const char *af[] = {"YaRN: multiplies the attention factor",
                        "0.1 ln(factor) + 1 (default 1, or the file's)", NULL};
    const char *b[] = {"YaRN: the ramp's bounds in rotations (32, 1)", NULL};
    entry(f, width, "--rope-scaling TYPE", t);
    entry(f, width, "--rope-scale N", s);
    entry(f, width, "--rope-freq-scale N", fs);
    entry(f, width, "--yarn-orig-ctx N", o);
    entry(f, width, "--yarn-attn-factor N", af);
    fprintf(f, "      --yarn-beta-fast N, --yarn-beta-slow N\n");
    entry(f, width, "", b);
}

int kipp_cli_rope_apply(const char *prog, const kipp_rope_params *rp, kipp_model *m) {
    char err[KIPP_ERR_LEN];
    if (kipp_model_set_rope(m, rp, err, sizeof err) == KIPP_OK) return 1;
    fprintf(stderr, "%s: %s\n", prog, err);
    return 0;
}
