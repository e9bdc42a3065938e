/* kipp_perplexity.c — the `kipp-perplexity` command: perplexity of a model over a text file,
 * chunked the way llama.cpp's llama-perplexity does it, and with --kl-base the
 * KL-divergence and top-1 agreement of the model against a base model (a quantized file
 * against its bf16 source), as `llama-perplexity --kl-divergence` reports them.
 *
 * The text is tokenized whole (no special tokens, no BOS: Qwen3 adds none) and cut into
 * chunks of --ctx tokens; each chunk is decoded from position 0 in a fresh sequence and the
 * tokens of its second half are scored: position j (ctx/2 <= j < ctx-1) predicts token j+1.
 * A trailing piece shorter than --ctx is not used. PPL = exp(mean NLL); its uncertainty is
 * the standard error of the mean NLL, carried through exp. With --kl-base both models decode
 * the same chunk and every scored position adds KL(base || model) over the full vocabulary
 * (computed in double from the two log-softmaxes) and whether both argmaxes agree.
 *
 * Results go to stdout (text, or one JSON object with --json, which --per-token extends
 * with every scored token's log-probability: the reference the server's echo logprobs are
 * checked against); progress to stderr. */
#include "cli/cli_args.h"
#include "cli/cli_rope.h"
#include "kipp.h"

#include <jansson.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TEXT_BYTES (512u << 20)
#define LOGIT_ROWS 64 /* scored positions decoded per batch: bounds the logits buffer */

typedef struct {
    const char *model, *base, *file;
    kipp_kv_type base_kv; /* --kl-base-kv-type: the base's KV type (DEFAULT: the model's) */
    long n_ctx, n_chunks, n_threads;
    int json, quiet, per_token;
    kipp_cli_runtime rt;
} opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: kipp-perplexity --model FILE.gguf --file TEXT [options]\n"
            "\n"
            "Perplexity over a UTF-8 text file, chunked like llama.cpp's llama-perplexity: chunks\n"
            "of --ctx tokens, each decoded from position 0, the second half of each scored.\n"
            "\n"
            "  -m, --model FILE        the GGUF to measure\n"
            "  -f, --file FILE         the text (UTF-8; read whole, tokenized without special tokens)\n"
            "  -c, --ctx N             tokens per chunk (default 512; at least 16, at most the\n"
            "                          model's training context)\n"
            "      --chunks N          use at most N chunks (default: every whole chunk)\n"
            "      --kl-base FILE      also decode FILE (the base, e.g. the bf16 GGUF) on every chunk\n"
            "                          and report KL-divergence(base || model) and top-1 agreement\n"
            "                          (both files must share the vocabulary)\n"
            "      --kl-base-kv-type T the base's KV cache type (default: the model's): the same\n"
            "                          file as --model and --kl-base measures a KV type's cost,\n"
            "                          e.g. --kv-type q8_0 --kl-base-kv-type f16\n"
            "  -t, --threads N         threads (default: the backend's choice)\n"
            "      --json              print the results as one JSON object\n"
            "      --per-token         with --json: \"per_token\": [[position, token id, log-probability\n"
            "                          given the tokens before it], ...] for every scored token\n"
            "  -q, --quiet             no progress on stderr\n");
    kipp_cli_runtime_help(f, 24);
    fprintf(f, "  -h, --help              this help\n");
}

static int parse(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->n_ctx = 512;
    kipp_cli_runtime_init(&o->rt);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define IS(s) (strcmp(a, s) == 0)
#define NEXT() (i + 1 < argc ? argv[++i] : (fprintf(stderr, "kipp-perplexity: %s needs a value\n", a), (char *)NULL))
        int r = kipp_cli_runtime_flag("kipp-perplexity", argc, argv, &i, &o->rt);
        if (r == 2) return 2;
        if (r == 1) continue;
        if (IS("-h") || IS("--help")) { usage(stdout); return 1; }
        else if (IS("-m") || IS("--model")) { if (!(o->model = NEXT())) return 2; }
        else if (IS("-f") || IS("--file")) { if (!(o->file = NEXT())) return 2; }
        else if (IS("--kl-base")) { if (!(o->base = NEXT())) return 2; }
        else if (IS("--kl-base-kv-type")) {
            char err[KIPP_ERR_LEN];
            if (!(v = NEXT())) return 2;
            if (kipp_kv_type_parse(v, &o->base_kv, err, sizeof err) != KIPP_OK) {
                fprintf(stderr, "kipp-perplexity: --kl-base-kv-type: %s\n", err);
                return 2;
            }
        }
        else if (IS("-c") || IS("--ctx")) {
            if (!(v = NEXT()) || !kipp_cli_long("kipp-perplexity", a, v, 16, 1 << 20, &o->n_ctx)) return 2;
        } else if (IS("--chunks")) {
            if (!(v = NEXT()) || !kipp_cli_long("kipp-perplexity", a, v, 1, 1 << 30, &o->n_chunks)) return 2;
        } else if (IS("-t") || IS("--threads")) {
            if (!(v = NEXT()) || !kipp_cli_long("kipp-perplexity", a, v, 0, 1024, &o->n_threads)) return 2;
        } else if (IS("--json")) { o->json = 1; }
        else if (IS("--per-token")) { o->per_token = 1; }
        else if (IS("-q") || IS("--quiet")) { o->quiet = 1; }
        else {
            fprintf(stderr, "kipp-perplexity: unknown option '%s' (see --help)\n", a);
            return 2;
        }
#undef IS
#undef NEXT
    }
    if (o->per_token && !o->json) {
        fprintf(stderr, "kipp-perplexity: --per-token needs --json\n");
        return 2;
    }
    if (!o->model || !o->file) {
        fprintf(stderr, "kipp-perplexity: --model and --file are required (see --help)\n");
        return 2;
    }
    return kipp_cli_runtime_finish("kipp-perplexity", &o->rt) ? 0 : 2;
}

static char *read_text(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kipp-perplexity: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    int too_big;
    char *buf = kipp_cli_read_all(f, MAX_TEXT_BYTES, n, &too_big);
    const int bad = ferror(f);
    fclose(f);
    if (too_big) {
        fprintf(stderr, "kipp-perplexity: %s is larger than %u MiB\n", path, MAX_TEXT_BYTES >> 20);
    } else if (!buf || bad) {
        fprintf(stderr, "kipp-perplexity: cannot read %s%s\n", path, buf ? "" : ": out of memory");
        free(buf);
        return NULL;
    }
    return buf;
}

typedef struct {
    kipp_model *m;
    kipp_ctx *c;
    float *logits; /* [LOGIT_ROWS][n_vocab] */
} runner;

static int runner_open(runner *r, const char *path, const opts *o, uint32_t n_ctx, int base) {
    char err[512];
    memset(r, 0, sizeof *r);
    if (kipp_model_load(path, &r->m, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp-perplexity: %s\n", err);
        return 0;
    }
    if (!kipp_cli_rope_apply("kipp-perplexity", &o->rt.rope, r->m)) {
        kipp_model_free(r->m);
        r->m = NULL;
        return 0;
    }
    kipp_ctx_params cp = kipp_ctx_default_params();
    cp.backend = o->rt.backend;
    cp.isa = o->rt.isa;
    cp.device = o->rt.device;
    cp.kv_type = o->rt.kv_type;
    cp.kv_type_v = o->rt.kv_type_v;
    if (base && o->base_kv) cp.kv_type = o->base_kv, cp.kv_type_v = KIPP_KV_TYPE_DEFAULT;
    cp.n_ctx = n_ctx;
    cp.n_threads = (int)o->n_threads;
    if (kipp_ctx_init(r->m, &cp, &r->c, err, sizeof err) != KIPP_OK) {
        kipp_cli_ctx_error("kipp-perplexity", &o->rt, err);
        return 0;
    }
    kipp_model_info mi;
    kipp_model_get_info(r->m, &mi);
    r->logits = malloc((size_t)LOGIT_ROWS * mi.n_vocab * sizeof(float));
    if (!r->logits) {
        fprintf(stderr, "kipp-perplexity: out of memory for the logits of %s\n", path);
        return 0;
    }
    return 1;
}

static void runner_close(runner *r) {
    kipp_ctx_free(r->c);
    kipp_model_free(r->m);
    free(r->logits);
}

/* Decodes tokens[from..to) of the current chunk at positions from.., with logits wanted
 * for all of them when want is set. */
static int runner_decode(runner *r, const int32_t *tokens, uint32_t from, uint32_t to, int want,
                         uint8_t *want_buf, uint32_t *pos_buf) {
    char err[512];
    uint32_t n = to - from;
    for (uint32_t i = 0; i < n; i++) {
        want_buf[i] = (uint8_t)want;
        pos_buf[i] = from + i;
    }
    kipp_batch b = {.n = n, .tokens = tokens + from, .seq_ids = NULL, .positions = pos_buf,
                    .want_logits = want_buf};
    if (kipp_decode_batch(r->c, &b, want ? r->logits : NULL, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp-perplexity: decode failed: %s\n", err);
        return 0;
    }
    return 1;
}

/* log-sum-exp of a row, and its argmax */
static double row_lse(const float *x, uint32_t n, uint32_t *amax) {
    float mx = x[0];
    uint32_t am = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > mx) { mx = x[i]; am = i; }
    double s = 0;
    for (uint32_t i = 0; i < n; i++) s += exp((double)x[i] - mx);
    *amax = am;
    return mx + log(s);
}

typedef struct {
    double nll, nll2, nll_base, kld, kld2, kld_max;
    uint64_t n, same_top;
    double *klds; /* every position's KL, for the median and p99 */
    json_t *per_token; /* --per-token: [[position in the text, token id, log-probability]] */
} totals;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    opts o;
    int pr = parse(argc, argv, &o);
    if (pr) return pr == 1 ? 0 : 2;
    if (o.json && !kipp_cli_stdout_ready("kipp-perplexity")) return 1;

    size_t n_text = 0;
    char *text = read_text(o.file, &n_text);
    if (!text) return 1;
    runner rm, rb;
    int have_base = o.base != NULL, rc = 1;
    memset(&rb, 0, sizeof rb);
    int32_t *toks = NULL;
    uint8_t *want = NULL;
    uint32_t *pos = NULL;
    totals t;
    memset(&t, 0, sizeof t);
    if (!runner_open(&rm, o.model, &o, (uint32_t)o.n_ctx, 0)) goto out;
    if (have_base && !runner_open(&rb, o.base, &o, (uint32_t)o.n_ctx, 1)) goto out;
    kipp_model_info mi, bi;
    kipp_model_get_info(rm.m, &mi);
    if (have_base) {
        kipp_model_get_info(rb.m, &bi);
        if (bi.n_vocab != mi.n_vocab) {
            fprintf(stderr, "kipp-perplexity: %s has %u vocabulary entries, %s has %u: the "
                    "KL-divergence needs the same vocabulary\n", o.base, bi.n_vocab, o.model, mi.n_vocab);
            goto out;
        }
    }
    char err[512];
    size_t n_tok = 0;
    if (kipp_tokenize_alloc(rm.m, text, n_text, 0, &toks, &n_tok, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp-perplexity: tokenizing %s: %s\n", o.file, err);
        goto out;
    }
    const uint32_t ctx = (uint32_t)o.n_ctx, first = ctx / 2;
    uint64_t n_chunks = n_tok / ctx;
    if (o.n_chunks && (uint64_t)o.n_chunks < n_chunks) n_chunks = (uint64_t)o.n_chunks;
    if (n_chunks == 0) {
        fprintf(stderr, "kipp-perplexity: %s has %zu tokens, fewer than one chunk of --ctx %u\n",
                o.file, n_tok, ctx);
        goto out;
    }
    want = malloc(ctx);
    pos = malloc(ctx * sizeof *pos);
    t.klds = have_base ? malloc(n_chunks * (ctx - 1 - first) * sizeof(double)) : NULL;
    t.per_token = o.per_token ? json_array() : NULL;
    if (!want || !pos || (have_base && !t.klds) || (o.per_token && !t.per_token)) {
        fprintf(stderr, "kipp-perplexity: out of memory\n");
        goto out;
    }
    kipp_ctx_info ci;
    kipp_ctx_get_info(rm.c, &ci);
    if (!o.quiet) {
        fprintf(stderr, "kipp-perplexity: %s: %zu tokens, %llu chunks of %u (scoring %u per chunk); ",
                o.file, n_tok, (unsigned long long)n_chunks, ctx, ctx - 1 - first);
        kipp_cli_print_ctx_info(stderr, &ci);
        fputc('\n', stderr);
    }
    const double t0 = kipp_cli_now();
    for (uint64_t ch = 0; ch < n_chunks; ch++) {
        const int32_t *ct = toks + ch * ctx;
        runner *rs[2] = {&rm, &rb};
        for (int k = 0; k <= have_base; k++) {
            if (kipp_ctx_truncate(rs[k]->c, 0, err, sizeof err) != KIPP_OK) {
                fprintf(stderr, "kipp-perplexity: %s\n", err);
                goto out;
            }
            if (!runner_decode(rs[k], ct, 0, first, 0, want, pos)) goto out;
        }
        for (uint32_t j0 = first; j0 < ctx - 1; j0 += LOGIT_ROWS) {
            uint32_t j1 = j0 + LOGIT_ROWS < ctx - 1 ? j0 + LOGIT_ROWS : ctx - 1;
            for (int k = 0; k <= have_base; k++)
                if (!runner_decode(rs[k], ct, j0, j1, 1, want, pos)) goto out;
            for (uint32_t j = j0; j < j1; j++) {
                const float *lm = rm.logits + (size_t)(j - j0) * mi.n_vocab;
                uint32_t am, ab;
                const double lse = row_lse(lm, mi.n_vocab, &am);
                const double nll = lse - lm[ct[j + 1]];
                if (t.per_token)
                    json_array_append_new(t.per_token, json_pack("[I, i, f]", (json_int_t)(ch * ctx + j + 1),
                                                                 (int)ct[j + 1], -nll));
                t.nll += nll;
                t.nll2 += nll * nll;
                if (have_base) {
                    const float *lb = rb.logits + (size_t)(j - j0) * mi.n_vocab;
                    const double lseb = row_lse(lb, mi.n_vocab, &ab);
                    t.nll_base += lseb - lb[ct[j + 1]];
                    double kl = 0;
                    for (uint32_t v = 0; v < mi.n_vocab; v++) {
                        const double lpb = lb[v] - lseb, lpm = lm[v] - lse;
                        kl += exp(lpb) * (lpb - lpm);
                    }
                    if (kl < 0) kl = 0; /* rounding */
                    t.kld += kl;
                    t.kld2 += kl * kl;
                    if (kl > t.kld_max) t.kld_max = kl;
                    t.klds[t.n] = kl;
                    t.same_top += am == ab;
                }
                t.n++;
            }
        }
        if (!o.quiet) {
            const double el = kipp_cli_now() - t0, eta = el / (double)(ch + 1) * (double)(n_chunks - ch - 1);
            fprintf(stderr, "\r[%llu/%llu] ppl %.4f, %.1f s, ETA %.0f s   ", (unsigned long long)(ch + 1),
                    (unsigned long long)n_chunks, exp(t.nll / (double)t.n), el, eta);
        }
    }
    if (!o.quiet) fputc('\n', stderr);
    const double seconds = kipp_cli_now() - t0;
    const double n = (double)t.n, mean = t.nll / n;
    const double var = n > 1 ? (t.nll2 / n - mean * mean) * n / (n - 1) : 0;
    const double se = sqrt(var > 0 ? var / n : 0), ppl = exp(mean);
    double kmean = 0, kse = 0, kmed = 0, k99 = 0, same = 0, ppl_base = 0;
    if (have_base) {
        kmean = t.kld / n;
        const double kv = n > 1 ? (t.kld2 / n - kmean * kmean) * n / (n - 1) : 0;
        kse = sqrt(kv > 0 ? kv / n : 0);
        qsort(t.klds, t.n, sizeof(double), cmp_double);
        kmed = t.klds[t.n / 2];
        k99 = t.klds[(size_t)((n - 1) * 0.99)];
        same = (double)t.same_top / n;
        ppl_base = exp(t.nll_base / n);
    }
    if (o.json) {
        json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:s, s:s, s:i, s:s, s:f}",
                              "model", o.model, "file", o.file, "n_tokens", (json_int_t)n_tok,
                              "ctx", (json_int_t)ctx, "chunks", (json_int_t)n_chunks,
                              "scored_tokens", (json_int_t)t.n, "ppl", ppl, "ppl_stderr", ppl * se,
                              "mean_nll", mean, "backend", ci.backend, "isa", ci.isa,
                              "threads", ci.n_threads, "kv_type", kipp_kv_type_name(ci.kv_type),
                              "seconds", seconds);
        if (j) json_object_set_new(j, "kv_type_v", json_string(kipp_kv_type_name(ci.kv_type_v)));
        if (j && have_base) {
            kipp_ctx_info bci;
            kipp_ctx_get_info(rb.c, &bci);
            json_object_set_new(j, "kl_base", json_string(o.base));
            json_object_set_new(j, "kl_base_kv_type", json_string(kipp_kv_type_name(bci.kv_type)));
            json_object_set_new(j, "ppl_base", json_real(ppl_base));
            json_object_set_new(j, "ppl_ratio", json_real(ppl / ppl_base));
            json_object_set_new(j, "kld_mean", json_real(kmean));
            json_object_set_new(j, "kld_stderr", json_real(kse));
            json_object_set_new(j, "kld_median", json_real(kmed));
            json_object_set_new(j, "kld_p99", json_real(k99));
            json_object_set_new(j, "kld_max", json_real(t.kld_max));
            json_object_set_new(j, "same_top1", json_real(same));
        }
        if (j && t.per_token) json_object_set(j, "per_token", t.per_token);
        if (!j || json_dumpf(j, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(10)) != 0) {
            fprintf(stderr, "kipp-perplexity: cannot write the JSON result\n");
            json_decref(j);
            goto out;
        }
        json_decref(j);
        putchar('\n');
    } else {
        printf("PPL = %.4f +/- %.4f over %llu tokens (%llu chunks of %u)\n", ppl, ppl * se,
               (unsigned long long)t.n, (unsigned long long)n_chunks, ctx);
        if (have_base) {
            printf("PPL(base) = %.4f, PPL/PPL(base) = %.5f\n", ppl_base, ppl / ppl_base);
            printf("KLD mean = %.6f +/- %.6f, median = %.6f, p99 = %.6f, max = %.6f\n", kmean, kse,
                   kmed, k99, t.kld_max);
            printf("same top-1 = %.3f %%\n", 100.0 * same);
        }
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
    if (rc) fprintf(stderr, "kipp-perplexity: cannot write the results: %s\n", strerror(errno));
out:
    if (rm.m || rm.c) runner_close(&rm);
    if (rb.m || rb.c) runner_close(&rb);
    free(toks);
    free(want);
    free(pos);
    free(t.klds);
    json_decref(t.per_token);
    free(text);
    return rc;
}
