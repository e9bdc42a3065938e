/* kipp.c — the `kipp` command: load a GGUF, encode a prompt (plain text, a synthetic
 * benchmark prompt, or a chat rendered with the model's template: --chat, --system,
 * --messages), generate text on the default or the named backend and stream it to stdout;
 * the start-up line, timings and KV use go to stderr, --stats-json writes them as JSON.
 * Also --info (hyper-parameters and what a context runs on), --tokenize, --detokenize and
 * --print-prompt. Multi-turn chat is kipp-chat; the generation loop both share is in
 * generate.c. The only layer allowed to print and exit. */
#include "cli/cli_args.h"
#include "cli/cli_rope.h"
#include "cli/cli_grammar.h"
#include "cli/cli_spec.h"
#include "cli/generate.h"
#include "core/outfile.h"
#include "kipp.h"

#include <jansson.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIPP_VERSION "0.1.0"
#define MAX_PROMPT_BYTES (64u << 20)

typedef struct {
    const char *model, *prompt;
    const char *system, *messages_file; /* chat mode */
    const char *detokenize;             /* ids to decode */
    const char *stats_json;             /* --stats-json FILE */
    long n_predict, n_ctx, n_threads;
    long prompt_tokens;                 /* --prompt-tokens N: synthetic prompt; 0 = off */
    int info, tokenize, check_weights, parse_special, stats, ignore_eos;
    int chat, no_think, print_prompt;
    kipp_sampler_params sp;
    kipp_cli_runtime rt; /* --backend, --isa, --kv-type */
    kipp_cli_spec spec;  /* --draft-model, --spec-ngram, ... */
    kipp_cli_grammar gr; /* --grammar-file, --json-schema, --json */
} cli_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: kipp --model FILE.gguf [options]\n"
            "\n"
            "Generates text from a prompt with a Qwen3 GGUF model and streams it to stdout.\n"
            "A start-up line (backend, ISA level, threads, KV type and pool, load time),\n"
            "prefill and decode speed are printed on stderr.\n"
            "\n"
            "  -m, --model FILE        GGUF model file (required)\n"
            "  -p, --prompt TEXT       prompt text; without it the prompt is read from stdin\n"
            "      --prompt-tokens N   instead of a prompt: a synthetic one of exactly N ordinary\n"
            "                          token ids, the same for every model with this vocabulary\n"
            "                          (benchmarks; --tokenize prints them)\n"
            "  -n, --n-predict N       tokens to generate (default 64; stops early at end-of-text)\n"
            "      --ignore-eos        do not stop at end-of-text: generate exactly N tokens\n"
            "  -c, --ctx-size N        context size in tokens (default: model's, capped at 4096)\n"
            "  -t, --threads N         threads for backends that use them (default 0 = physical\n"
            "                          cores)\n");
    kipp_cli_runtime_help(f, 26);
    fprintf(f,
            "\n"
            "\n"
            "speculative decoding (the output is what it would be without it; docs/speculative.md):\n");
    kipp_cli_spec_help(f, 26);
    fprintf(f,
            "\n"
            "constrained output (every token drawn from those the grammar allows; docs/grammar.md):\n");
    kipp_cli_grammar_help(f, 26);
    fprintf(f,
            "\n"
            "sampling (defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, seed 12648430):\n"
            "      --temp F            temperature; 0 = greedy\n"
            "      --greedy            same as --temp 0\n"
            "      --top-k N           keep the N most likely tokens (0 = off)\n"
            "      --top-p F           nucleus sampling threshold (1 = off)\n"
            "      --min-p F           drop tokens below F x the top probability (0 = off)\n"
            "      --repeat-penalty F  repetition penalty (1 = off)\n"
            "      --repeat-last-n N   tokens the penalties look back over (-1 = all, default 64)\n"
            "      --presence-penalty F, --frequency-penalty F   OpenAI-style penalties (0 = off)\n"
            "  -s, --seed N            random seed (same seed and inputs give the same tokens)\n"
            "\n"
            "chat (renders the prompt with the model's Qwen3 or Qwen2.5 chat template):\n"
            "      --chat              wrap the prompt as a user message, add the generation prompt\n"
            "      --system TEXT       system message (implies --chat)\n"
            "      --no-think          enable_thinking=false: the template adds an empty think block\n"
            "                          (Instruct-2507 and Qwen2.5 never think: a no-op;\n"
            "                          Thinking-2507 always does: an error)\n"
            "      --messages FILE     render an OpenAI-style request body (JSON: messages, tools,\n"
            "                          chat_template_kwargs) instead of --prompt (implies --chat)\n"
            "      --print-prompt      print the rendered prompt and exit\n"
            "\n"
            "other:\n"
            "      --no-special        treat special-token text like <|im_start|> as plain text\n"
            "      --tokenize          print the prompt's token ids and exit\n"
            "      --detokenize \"IDS\"  print the text of space-separated token ids and exit\n"
            "      --info              print the model's hyper-parameters and what a context with\n"
            "                          these flags runs on (backend, ISA level, threads, KV type\n"
            "                          and pool) and the load time, as JSON, and exit\n"
            "      --check-weights     scan every weight for NaN/Inf before running (slow)\n"
            "      --no-stats          do not print the start-up line and timings on stderr\n"
            "      --stats-json FILE   write the timings (prefill and decode tokens, ms, tok/s),\n"
            "                          backend, ISA level, threads, KV type and use to FILE as JSON\n"
            "  -h, --help              this help\n"
            "      --version           print the version\n");
}

/* Returns 0 to continue, 1 to exit successfully (help/version), 2 on a usage error. */
static int parse_args(int argc, char **argv, cli_opts *o) {
    memset(o, 0, sizeof *o);
    kipp_cli_runtime_init(&o->rt);
    kipp_cli_spec_init(&o->spec);
    o->n_predict = 64;
    o->parse_special = 1;
    o->stats = 1;
    o->sp = kipp_sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define IS(s) (strcmp(a, s) == 0)
#define NEXT()                                                                               \
    (i + 1 < argc ? argv[++i]                                                                \
                  : (fprintf(stderr, "kipp: %s needs a value (see --help)\n", a), (char *)NULL))
        const char *v = NULL;
        int r;
        if (IS("-h") || IS("--help")) { usage(stdout); return 1; }
        else if (IS("--version")) {
            printf("kipp %s\n", KIPP_VERSION);
#if defined(__clang__)
            printf("compiler: %s\n", __VERSION__); /* "Clang 16.0.6 ..." */
#elif defined(__GNUC__)
            printf("compiler: gcc %s\n", __VERSION__);
#endif
#ifdef KIPP_BUILD_CFLAGS
            printf("cflags: %s\n", KIPP_BUILD_CFLAGS);
#endif
            return 1;
        }
        else if (IS("-m") || IS("--model")) { if (!(o->model = NEXT())) return 2; }
        else if (IS("-p") || IS("--prompt")) { if (!(o->prompt = NEXT())) return 2; }
        else if (IS("-n") || IS("--n-predict")) {
            if (!(v = NEXT()) || !kipp_cli_long("kipp", a, v, 0, 1 << 24, &o->n_predict)) return 2;
        } else if (IS("--prompt-tokens")) {
            if (!(v = NEXT()) || !kipp_cli_long("kipp", a, v, 1, 1 << 24, &o->prompt_tokens)) return 2;
        } else if (IS("--ignore-eos")) { o->ignore_eos = 1; }
        else if (IS("--stats-json")) {
            if (!(o->stats_json = NEXT())) return 2;
            if (!*o->stats_json) {
                fprintf(stderr, "kipp: --stats-json expects a file name, got ''\n");
                return 2;
            }
        } else if (IS("-c") || IS("--ctx-size")) {
            if (!(v = NEXT()) || !kipp_cli_long("kipp", a, v, 1, 1 << 24, &o->n_ctx)) return 2;
        } else if (IS("-t") || IS("--threads")) {
            if (!(v = NEXT()) || !kipp_cli_long("kipp", a, v, 0, 1024, &o->n_threads)) return 2;
        } else if ((r = kipp_cli_sampling_flag("kipp", argc, argv, &i, &o->sp)) != 0 ||
                   (r = kipp_cli_runtime_flag("kipp", argc, argv, &i, &o->rt)) != 0 ||
                   (r = kipp_cli_spec_flag("kipp", argc, argv, &i, &o->spec)) != 0 ||
                   (r = kipp_cli_grammar_flag("kipp", argc, argv, &i, &o->gr)) != 0) {
            if (r == 2) return 2;
        } else if (IS("--chat")) { o->chat = 1; }
        else if (IS("--system")) { if (!(o->system = NEXT())) return 2; o->chat = 1; }
        else if (IS("--messages")) { if (!(o->messages_file = NEXT())) return 2; o->chat = 1; }
        else if (IS("--no-think")) { o->no_think = 1; }
        else if (IS("--print-prompt")) { o->print_prompt = 1; }
        else if (IS("--no-special")) { o->parse_special = 0; }
        else if (IS("--tokenize")) { o->tokenize = 1; }
        else if (IS("--detokenize")) { if (!(o->detokenize = NEXT())) return 2; }
        else if (IS("--info")) { o->info = 1; }
        else if (IS("--check-weights")) { o->check_weights = 1; }
        else if (IS("--no-stats")) { o->stats = 0; }
        else {
            fprintf(stderr, "kipp: unknown option '%s' (see --help)\n", a);
            return 2;
        }
#undef IS
#undef NEXT
    }
    if (!o->model) {
        fprintf(stderr, "kipp: --model FILE is required (see --help)\n");
        return 2;
    }
    if (!kipp_cli_runtime_finish("kipp", &o->rt)) return 2;
    if (!kipp_cli_spec_finish("kipp", &o->spec)) return 2;
    if (o->gr.first_flag && (o->spec.draft_model || o->spec.ngram)) {
        fprintf(stderr, "kipp: %s cannot be combined with speculative decoding (%s): a draft would "
                        "need a mask per drafted token\n", o->gr.first_flag, o->spec.first_flag);
        return 2;
    }
    if (o->messages_file && (o->prompt || o->system)) {
        fprintf(stderr, "kipp: --messages FILE replaces --prompt and --system; give one or the other\n");
        return 2;
    }
    if (o->prompt_tokens && (o->prompt || o->chat)) {
        fprintf(stderr, "kipp: --prompt-tokens N replaces the prompt; it cannot be combined with "
                        "--prompt, --chat, --system or --messages\n");
        return 2;
    }
    if ((o->no_think || o->print_prompt) && !o->chat) {
        fprintf(stderr, "kipp: --no-think and --print-prompt need --chat (or --system/--messages)\n");
        return 2;
    }
    return 0;
}

static char *read_stdin(size_t *len) {
    int too_big;
    char *buf = kipp_cli_read_all(stdin, MAX_PROMPT_BYTES, len, &too_big);
    if (too_big) fprintf(stderr, "kipp: prompt on stdin exceeds %u bytes\n", MAX_PROMPT_BYTES);
    return buf;
}

/* Builds the chat request body for --chat/--system, or reads --messages FILE, and renders it
 * with the model's template. Returns a malloc'd prompt, or NULL after printing why. */
static char *render_chat(const kipp_model *m, const cli_opts *o, const char *prompt,
                         size_t prompt_len, size_t *out_len) {
    char err[KIPP_ERR_LEN];
    json_t *req;
    const char *tname = NULL;
    kipp_chat_thinking think;
    if (o->no_think && kipp_chat_template_info(m, 0, &tname, &think, err, sizeof err) == KIPP_OK &&
        think == KIPP_CHAT_THINK_IN_PROMPT) {
        fprintf(stderr, "kipp: --no-think: the model's chat template (%s) always thinks; it has "
                        "no switch to turn thinking off\n", tname);
        return NULL;
    }
    if (o->messages_file) {
        json_error_t je;
        req = json_load_file(o->messages_file, 0, &je);
        if (!req) {
            fprintf(stderr, "kipp: --messages %s: %s (line %d, column %d)\n", o->messages_file,
                    je.text, je.line, je.column);
            return NULL;
        }
        if (!json_is_object(req)) {
            fprintf(stderr, "kipp: --messages %s: expected a JSON object with \"messages\"\n",
                    o->messages_file);
            json_decref(req);
            return NULL;
        }
    } else {
        json_t *msgs = json_array();
        if (o->system) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", o->system));
        json_t *user = json_stringn(prompt, prompt_len);
        if (!user) {
            fprintf(stderr, "kipp: --chat needs a valid UTF-8 prompt\n");
            json_decref(msgs);
            return NULL;
        }
        json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "user", "content", user));
        req = json_pack("{s:o}", "messages", msgs);
    }
    if (o->no_think) {
        json_t *kw = json_object_get(req, "chat_template_kwargs");
        if (!json_is_object(kw)) json_object_set_new(req, "chat_template_kwargs", kw = json_object());
        json_object_set_new(kw, "enable_thinking", json_false());
    }
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    char *out = NULL;
    kipp_status st = body ? kipp_chat_apply(m, body, strlen(body), &out, out_len, err, sizeof err)
                          : KIPP_ERR_NOMEM;
    free(body);
    if (st != KIPP_OK) {
        fprintf(stderr, "kipp: chat template: %s\n", body ? err : "out of memory");
        return NULL;
    }
    return out;
}

/* Writes text to stdout now (streaming). 0, with a message, when stdout cannot take it
 * (a full disk, a closed pipe): the caller stops and exits non-zero. */
static int out_write(const char *s, size_t n) {
    if ((n && fwrite(s, 1, n, stdout) != n) || fflush(stdout) != 0) {
        fprintf(stderr, "\nkipp: cannot write to stdout: %s\n", strerror(errno));
        return 0;
    }
    return 1;
}

/* Streams the text token id completes (or, with end, what is held back) through the
 * detokenizer every front end shares; unfinished characters are held back. */
static int emit(kipp_detokenizer *dt, int32_t id, int end) {
    const char *s;
    size_t n;
    kipp_status st = end ? kipp_detokenizer_end(dt, &s, &n) : kipp_detokenizer_next(dt, id, &s, &n);
    if (st != KIPP_OK) {
        fprintf(stderr, "\nkipp: out of memory decoding token %d\n", id);
        return 0;
    }
    return out_write(s, n);
}

/* --detokenize "1 2 3": the ids streamed one by one through the detokenizer generation
 * uses (special tokens kept, as their text). */
static int detokenize_ids(const kipp_model *m, const char *list) {
    size_t cap = strlen(list) / 2 + 1, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return 1;
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "kipp: --detokenize: '%.20s' is not a token id\n", p);
            free(ids);
            return 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    kipp_detokenizer *dt = NULL;
    char err[KIPP_ERR_LEN];
    int rc = 0;
    if (kipp_detokenizer_init(m, 0, &dt, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp: %s\n", err);
        rc = 1;
    }
    for (size_t i = 0; i < n && !rc; i++)
        if (!emit(dt, ids[i], 0)) rc = 1;
    if (!rc && (!emit(dt, 0, 1) || !out_write("\n", 1))) rc = 1;
    kipp_detokenizer_free(dt);
    free(ids);
    return rc;
}

/* --prompt-tokens N: the synthetic benchmark prompt. Ordinary (non-special) ids spread over
 * the vocabulary by a fixed stride, so every model with the same vocabulary gets the same
 * ids: id[i] = 1000 + (i * 7919) % span, span = min(n_vocab, 151643) - 1000 (151643 is where
 * Qwen's special tokens start). bench/peer_bench.py reads them back with --tokenize. */
static void synthetic_prompt(const kipp_model *m, uint32_t n_vocab, int32_t *ids, size_t n) {
    uint32_t base = 1000, top = n_vocab < 151643u ? n_vocab : 151643u;
    if (top <= 2 * base) base = 0;
    uint64_t span = top - base, step = 0;
    for (size_t i = 0; i < n; i++, step++) {
        int32_t id;
        do { /* never an end-of-generation token (a vocabulary with specials below 151643) */
            id = (int32_t)(base + (step * 7919u) % span);
        } while (kipp_token_is_eog(m, id) && ++step);
        ids[i] = id;
    }
}

/* --stats-json FILE: one JSON object with the run's figures. */
static int write_stats_json(const char *path, const cli_opts *o, const kipp_ctx *c,
                            size_t n_prompt, double t_prefill, const kipp_gen_result *g) {
    kipp_kv_stats kv;
    kipp_ctx_kv_stats(c, &kv);
    kipp_ctx_info ci;
    kipp_ctx_get_info(c, &ci);
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:b, s:s, s:s,"
        " s:{s:I, s:f, s:f},"
        " s:{s:I, s:I, s:f, s:f},"
        " s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I},"
        " s:{s:s, s:I, s:I, s:I, s:f, s:f}}",
        "kipp_version", KIPP_VERSION, "model", o->model, "backend", ci.backend, "isa", ci.isa,
        "kv_type", kipp_kv_type_name(ci.kv_type),
        "threads", (json_int_t)ci.n_threads, "n_ctx", (json_int_t)kipp_ctx_n_ctx(c),
        "ignore_eos", o->ignore_eos,
        "prompt_source", o->prompt_tokens ? "synthetic" : (o->chat ? "chat" : "text"),
        "stop", g->stop,
        "prefill", "tokens", (json_int_t)n_prompt, "ms", t_prefill * 1e3,
        "tok_s", t_prefill > 0 ? n_prompt / t_prefill : 0.0,
        "decode", "tokens", (json_int_t)g->n_decoded, "generated", (json_int_t)g->n_gen,
        "ms", g->t_decode * 1e3, "tok_s", g->t_decode > 0 ? g->n_decoded / g->t_decode : 0.0,
        "kv", "block_size", (json_int_t)kv.block_size, "n_blocks", (json_int_t)kv.n_blocks,
        "n_blocks_used", (json_int_t)kv.n_blocks_used, "n_tokens", (json_int_t)kv.n_tokens,
        "bytes_per_token", (json_int_t)kv.n_bytes_per_token,
        "bytes_per_block", (json_int_t)kv.n_bytes_per_block,
        "bytes_total", (json_int_t)kv.n_bytes_total, "bytes_used", (json_int_t)kv.n_bytes_used,
        "spec", "drafter", o->spec.draft_model ? "model" : o->spec.ngram ? "ngram" : "none",
        "steps", (json_int_t)g->n_steps, "drafted", (json_int_t)g->n_drafted,
        "accepted", (json_int_t)g->n_accepted,
        "acceptance", g->n_drafted ? (double)g->n_accepted / (double)g->n_drafted : 0.0,
        "draft_ms", g->t_draft * 1e3);
    if (!j) {
        fprintf(stderr, "kipp: --stats-json: out of memory\n");
        return 0;
    }
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
    if (!text) {
        fprintf(stderr, "kipp: --stats-json: out of memory\n");
        return 0;
    }
    size_t len = strlen(text);
    text[len] = '\n'; /* json_dumps' NUL becomes the final newline */
    char err[KIPP_ERR_LEN];
    int ok = kipp_outfile_write(path, text, len + 1, err, sizeof err) == KIPP_OK;
    free(text);
    if (!ok) fprintf(stderr, "kipp: --stats-json %s\n", err);
    return ok;
}

/* Creates the context the flags ask for (backend, ISA level, KV type, threads, size);
 * *load_s grows by the time it took. NULL after printing why not. */
static kipp_ctx *start_ctx(kipp_model *m, const cli_opts *o, double *load_s) {
    char err[KIPP_ERR_LEN];
    kipp_ctx_params cp = kipp_ctx_default_params();
    cp.backend = o->rt.backend;
    cp.isa = o->rt.isa;
    cp.device = o->rt.device;
    cp.kv_type = o->rt.kv_type;
    cp.kv_type_v = o->rt.kv_type_v;
    cp.n_ctx = (uint32_t)o->n_ctx;
    cp.n_threads = (int)o->n_threads;
    kipp_ctx *c = NULL;
    double t0 = kipp_cli_now();
    if (kipp_ctx_init(m, &cp, &c, err, sizeof err) != KIPP_OK) {
        kipp_cli_ctx_error("kipp", &o->rt, err);
        return NULL;
    }
    *load_s += kipp_cli_now() - t0;
    return c;
}

/* --info: one JSON object, the hyper-parameters first, then what the context runs on. */
static void print_info(const kipp_model *m, const kipp_ctx *c, double load_s) {
    kipp_model_info i;
    kipp_model_get_info(m, &i);
    kipp_ctx_info ci;
    kipp_ctx_get_info(c, &ci);
    printf("{\"architecture\": \"%s\", \"n_layer\": %u, \"n_embd\": %u, \"n_head\": %u, "
           "\"n_head_kv\": %u, \"head_dim\": %u, \"n_ff\": %u, \"n_vocab\": %u, "
           "\"n_ctx_train\": %u, \"rope_theta\": %g, \"rms_eps\": %g, \"tied_embeddings\": %s, "
           "\"bos_id\": %u, \"eos_id\": %u, ",
           i.architecture, i.n_layer, i.n_embd, i.n_head, i.n_head_kv, i.head_dim, i.n_ff, i.n_vocab,
           i.n_ctx_train, (double)i.rope_theta, (double)i.rms_eps,
           i.tied_embeddings ? "true" : "false", i.bos_id, i.eos_id);
    printf("\"rope_scaling\": \"%s\", \"rope_factor\": %g, \"rope_orig_ctx\": %u, \"n_ctx_file\": %u, ",
           kipp_rope_scaling_name(i.rope_scaling), (double)i.rope_factor, i.rope_orig_ctx, i.n_ctx_file);
    if (i.rope_scaling == KIPP_ROPE_SCALING_YARN)
        printf("\"yarn_attn_factor\": %g, \"yarn_beta_fast\": %g, \"yarn_beta_slow\": %g, \"rope\": \"%s\", ",
               (double)i.yarn_attn_factor, (double)i.yarn_beta_fast, (double)i.yarn_beta_slow, ci.rope);
    if (i.n_expert)
        printf("\"n_expert\": %u, \"n_expert_used\": %u, \"n_ff_exp\": %u, \"expert_norm\": %s, ", i.n_expert,
               i.n_expert_used, i.n_ff_exp, i.expert_norm ? "true" : "false");
    printf("\"backend\": \"%s\", \"isa\": \"%s\", \"threads\": %d, \"kv_type\": \"%s\", "
           "\"kv_type_v\": \"%s\", \"n_ctx\": %u, \"kv_pool\": {\"blocks\": %u, \"block_size\": %u, \"tokens\": %llu, "
           "\"bytes\": %llu, \"bytes_per_token\": %llu}, \"weights_repacked_bytes\": %llu, "
           "\"kernels\": %s, \"load_ms\": %.1f}\n",
           ci.backend, ci.isa, ci.n_threads, kipp_kv_type_name(ci.kv_type),
           kipp_kv_type_name(ci.kv_type_v), ci.n_ctx,
           ci.kv_blocks, ci.kv_block_size, (unsigned long long)ci.kv_blocks * ci.kv_block_size,
           (unsigned long long)ci.kv_bytes, (unsigned long long)ci.kv_bytes_per_token,
           (unsigned long long)ci.weights_repacked, ci.kernels ? ci.kernels : "null", load_s * 1e3);
}

static int text_out(void *user, const char *s, size_t n) {
    (void)user;
    return out_write(s, n);
}

int main(int argc, char **argv) {
    cli_opts o;
    int pr = parse_args(argc, argv, &o);
    if (pr == 1) return 0;
    if (pr == 2) return 2;

    char err[KIPP_ERR_LEN];
    int rc = 1;
    if (!kipp_cli_stdout_ready("kipp")) return 1;
    /* fail before the (slow) model load when FILE cannot be written; FILE itself is not
     * touched until the record is complete (written beside it, then renamed over it) */
    if (o.stats_json && kipp_outfile_check(o.stats_json, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp: --stats-json %s\n", err);
        return 1;
    }
    kipp_model *m = NULL, *dm = NULL;
    kipp_ctx *c = NULL;
    kipp_drafter *drafter = NULL;
    kipp_matcher *matcher = NULL;
    kipp_token_trie *trie = NULL;
    kipp_sampler *smp = NULL;
    kipp_detokenizer *dt = NULL;
    char *stdin_buf = NULL, *chat_buf = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;

    double load_s = kipp_cli_now(); /* model load + context creation */
    kipp_status st = kipp_model_load(o.model, &m, err, sizeof err);
    load_s = kipp_cli_now() - load_s;
    if (st != KIPP_OK) {
        fprintf(stderr, "kipp: %s\n", err);
        if (st == KIPP_ERR_IO && strstr(o.model, "models/"))
            fprintf(stderr, "kipp: model not found? get weights with tools/download_model.sh "
                            "NAME and convert them with tools/convert_to_gguf.py\n");
        goto done;
    }
    if (!kipp_cli_rope_apply("kipp", &o.rt.rope, m)) goto done;
    if (o.info) {
        if (!(c = start_ctx(m, &o, &load_s))) goto done;
        print_info(m, c, load_s);
        rc = 0;
        goto done;
    }
    if (o.detokenize) {
        rc = detokenize_ids(m, o.detokenize);
        goto done;
    }
    if (o.check_weights && (st = kipp_model_check_weights(m, err, sizeof err)) != KIPP_OK) {
        fprintf(stderr, "kipp: %s\n", err);
        goto done;
    }

    size_t prompt_len = 0;
    const char *prompt = o.prompt;
    if (o.messages_file || o.prompt_tokens) {
        prompt = "";
    } else if (prompt) {
        prompt_len = strlen(prompt);
    } else {
        if (!(stdin_buf = read_stdin(&prompt_len))) {
            fprintf(stderr, "kipp: could not read the prompt from stdin\n");
            goto done;
        }
        prompt = stdin_buf;
    }
    if (prompt_len == 0 && !o.messages_file && !o.prompt_tokens) {
        fprintf(stderr, "kipp: empty prompt: give --prompt TEXT or pipe text on stdin\n");
        goto done;
    }
    if (o.chat) {
        if (!(chat_buf = render_chat(m, &o, prompt, prompt_len, &prompt_len))) goto done;
        prompt = chat_buf;
        if (o.print_prompt) {
            fwrite(prompt, 1, prompt_len, stdout);
            rc = 0;
            goto done;
        }
    }

    kipp_model_info info;
    kipp_model_get_info(m, &info);
    size_t n_prompt = 0;
    if (o.prompt_tokens) {
        n_prompt = (size_t)o.prompt_tokens;
        if (!(ids = malloc(n_prompt * sizeof *ids))) {
            fprintf(stderr, "kipp: out of memory\n");
            goto done;
        }
        synthetic_prompt(m, info.n_vocab, ids, n_prompt);
    } else { /* may give more tokens than the prompt has bytes (NFC can grow text) */
        st = kipp_tokenize_alloc(m, prompt, prompt_len, o.parse_special, &ids, &n_prompt, err,
                                 sizeof err);
        if (st != KIPP_OK) { fprintf(stderr, "kipp: %s\n", err); goto done; }
    }
    if (o.tokenize) {
        for (size_t i = 0; i < n_prompt; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        rc = 0;
        goto done;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "kipp: the prompt encodes to zero tokens\n");
        goto done;
    }

    if (!(c = start_ctx(m, &o, &load_s))) goto done;
    kipp_ctx_info ci;
    kipp_ctx_get_info(c, &ci);
    if (o.stats) {
        fputs("kipp: ", stderr);
        kipp_cli_print_ctx_info(stderr, &ci);
        fprintf(stderr, "; loaded in %.1f ms\n", load_s * 1e3);
    }
    const uint32_t n_ctx = kipp_ctx_n_ctx(c);
    if (n_prompt >= n_ctx) {
        fprintf(stderr,
                "kipp: the prompt has %zu tokens but the context holds %u (raise --ctx-size, at "
                "most %u for this model, or shorten the prompt)\n",
                n_prompt, n_ctx, info.n_ctx_train);
        goto done;
    }
    if ((st = kipp_sampler_init(&o.sp, info.n_vocab, &smp, err, sizeof err)) != KIPP_OK) {
        fprintf(stderr, "kipp: %s\n", err);
        goto done;
    }
    if (!(logits = malloc((size_t)info.n_vocab * sizeof *logits))) {
        fprintf(stderr, "kipp: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < n_prompt; i++) kipp_sampler_accept(smp, ids[i]);

    double t0 = kipp_cli_now();
    if ((st = kipp_decode(c, ids, (uint32_t)n_prompt, logits, err, sizeof err)) != KIPP_OK) {
        fprintf(stderr, "kipp: %s\n", err);
        goto done;
    }
    double t_prefill = kipp_cli_now() - t0;
    if ((st = kipp_detokenizer_init(m, 1, &dt, err, sizeof err)) != KIPP_OK) {
        fprintf(stderr, "kipp: %s\n", err);
        goto done;
    }
    {
        kipp_ctx_params cp = kipp_ctx_default_params();
        cp.backend = o.rt.backend;
        cp.isa = o.rt.isa;
        cp.device = o.rt.device;
        cp.kv_type = o.rt.kv_type;
        cp.kv_type_v = o.rt.kv_type_v;
        cp.n_threads = (int)o.n_threads;
        o.spec.rope = &o.rt.rope;
        if (!kipp_cli_spec_start("kipp", &o.spec, m, &cp, n_ctx, 1, &dm, &drafter)) goto done;
        if (drafter && (st = kipp_drafter_open(drafter, 0, &o.sp, err, sizeof err)) != KIPP_OK) {
            fprintf(stderr, "kipp: %s\n", err);
            goto done;
        }
        if (drafter && o.stats)
            fprintf(stderr, "kipp: speculative decoding: %s\n", kipp_drafter_describe(drafter));
    }
    if (!kipp_cli_grammar_start("kipp", &o.gr, m, &trie, &matcher)) goto done;
    /* with thinking on, an optional reasoning (at most half of -n) comes before the grammar */
    kipp_think_params think = {0};
    kipp_chat_thinking thinks = KIPP_CHAT_THINK_OFF;
    if (matcher && o.chat &&
        kipp_chat_template_info(m, !o.no_think, NULL, &thinks, NULL, 0) == KIPP_OK &&
        (thinks == KIPP_CHAT_THINK_BY_TAG || thinks == KIPP_CHAT_THINK_IN_PROMPT))
        think = (kipp_think_params){.on = 1, .in_prompt = thinks == KIPP_CHAT_THINK_IN_PROMPT,
                                    .max_reasoning_tokens = (uint32_t)(o.n_predict / 2)};
    kipp_gen_params gp = {.prog = "kipp", .ctx = c, .model = m, .sampler = smp, .detok = dt,
                          .matcher = matcher, .think = think,
                          .logits = logits, .n_predict = o.n_predict,
                          .ignore_eos = o.ignore_eos, .on_text = text_out,
                          .drafter = drafter, .k_max = (uint32_t)o.spec.draft_max,
                          .k_min = (uint32_t)o.spec.draft_min, .fixed_k = o.spec.fixed,
                          .hist = ids, .n_hist = (uint32_t)n_prompt};
    kipp_gen_result g;
    if (!kipp_generate(&gp, &g) || !out_write("\n", 1)) goto done;
    if (!strcmp(g.stop, "ctx_full"))
        fprintf(stderr, "kipp: stopped: the context (%u tokens) is full\n", n_ctx);
    if (o.stats) {
        kipp_kv_stats kv;
        kipp_ctx_kv_stats(c, &kv);
        fprintf(stderr,
                "kipp: KV cache %.2f of %.2f MiB used (%u of %u blocks of %u tokens, %llu "
                "bytes/token)\n",
                kv.n_bytes_used / 1048576.0, kv.n_bytes_total / 1048576.0, kv.n_blocks_used,
                kv.n_blocks, kv.block_size, (unsigned long long)kv.n_bytes_per_token);
        fprintf(stderr,
                "kipp: backend %s; prefill %zu tokens in %.1f ms (%.2f tok/s); generated %ld "
                "tokens, %ld decode steps in %.1f ms (%.2f tok/s)\n",
                ci.backend, n_prompt, t_prefill * 1e3,
                n_prompt / (t_prefill > 0 ? t_prefill : 1e-9), g.n_gen, g.n_decoded,
                g.t_decode * 1e3, g.n_decoded / (g.t_decode > 0 ? g.t_decode : 1e-9));
        if (drafter)
            fprintf(stderr,
                    "kipp: speculative: %ld target steps, %ld drafted, %ld accepted (%.1f %%), "
                    "%.2f tokens per step, drafting %.1f ms\n",
                    g.n_steps, g.n_drafted, g.n_accepted,
                    g.n_drafted ? 100.0 * g.n_accepted / g.n_drafted : 0.0,
                    g.n_steps ? (double)g.n_decoded / g.n_steps : 0.0, g.t_draft * 1e3);
    }
    if (o.stats_json && !write_stats_json(o.stats_json, &o, c, n_prompt, t_prefill, &g))
        goto done;
    rc = 0;
done:
    if (fflush(stdout) != 0 || ferror(stdout)) { /* --tokenize, --info, ... */
        if (rc == 0) fprintf(stderr, "kipp: cannot write to stdout: %s\n", strerror(errno));
        rc = 1;
    }
    free(logits);
    free(ids);
    free(stdin_buf);
    free(chat_buf);
    kipp_sampler_free(smp);
    kipp_detokenizer_free(dt);
    kipp_matcher_free(matcher);
    kipp_token_trie_free(trie);
    kipp_drafter_free(drafter);
    kipp_model_free(dm);
    kipp_ctx_free(c);
    kipp_model_free(m);
    return rc;
}
