/* kipp_chat.c — the `kipp-chat` command: an interactive (or piped) multi-turn chat with a
 * Qwen3 GGUF model. Keeps the conversation as OpenAI-style messages, renders all of it with
 * the model's chat template every turn and reuses the KV cache of the longest common token
 * prefix, so only the new part is prefilled; replies stream through the generation loop
 * it shares with kipp (generate.c). Design and user doc: docs/chat.md. Reading input
 * (line editing, history, multi-line rules) is chat_input.c; /save and /load's file format
 * is chat_file.c. Not here: tools, several sequences. */
#include "cli/chat_file.h"
#include "cli/chat_input.h"
#include "cli/cli_args.h"
#include "cli/cli_rope.h"
#include "cli/cli_spec.h"
#include "cli/generate.h"
#include "core/buf.h"
#include "kipp.h"
#include "tok/reasoning.h"
#include "tok/unicode.h"

#include <jansson.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KIPP_VERSION "0.1.0"
#define PROG "kipp-chat"

typedef struct {
    const char *model, *system;
    const char *history;   /* --history FILE, or NULL for the default location */
    int no_history;
    long n_predict, n_ctx, n_threads;
    int no_think, show_reasoning, stats, print_prompt, print_tokens;
    kipp_sampler_params sp;
    kipp_cli_runtime rt; /* --backend, --isa, --kv-type */
    kipp_cli_spec spec;  /* --draft-model, --spec-ngram, ... */
} chat_opts;

/* ---- flags ----------------------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: kipp-chat --model FILE.gguf [options]\n"
            "\n"
            "Multi-turn chat with a Qwen3 GGUF model. Each line read from stdin is one user\n"
            "message; the reply streams to stdout, followed by a newline. The start-up line\n"
            "(backend, ISA level, threads, KV type and pool, load time) and per-turn timings\n"
            "go to stderr only. The KV cache of the common prefix of the conversation is\n"
            "reused between turns. End the session with /quit or end-of-file (Ctrl-D).\n"
            "\n"
            "When stdin and stdout are terminals, lines are edited with libedit: arrows,\n"
            "Home/End, Up/Down for the history, Ctrl-R to search it (~/.editrc applies).\n"
            "The history is kept in $XDG_STATE_HOME/kipp/chat_history (default\n"
            "~/.local/state/kipp/chat_history). With stdin a terminal but not stdout, a\n"
            "plain \"> \" prompt is shown on stderr; piped, there is no prompt.\n"
            "\n"
            "multi-line messages (piped input too; the continuation prompt is \"... \"):\n"
            "  a line ending in '\\'   continues: the '\\' becomes a newline and the next\n"
            "                          line is part of the same message\n"
            "  a line that is \"\"\"     opens a block sent verbatim up to the next \"\"\" line\n"
            "\n"
            "  -m, --model FILE        GGUF model file (required)\n"
            "  -t, --threads N         threads for backends that use them (default 0 = physical\n"
            "                          cores)\n");
    kipp_cli_runtime_help(f, 26);
    kipp_cli_spec_help(f, 26);
    fprintf(f,
            "  -c, --ctx-size N        context size in tokens (default: model's, capped at 4096);\n"
            "                          the oldest exchanges are dropped when it is full\n"
            "  -n, --n-predict N       most tokens per reply (default 1024)\n"
            "      --system TEXT       system message (kept by /reset and when turns are dropped)\n"
            "      --no-think          start with thinking off (same as typing /think off;\n"
            "                          Instruct-2507 and Qwen2.5 never think, Thinking-2507\n"
            "                          always does: there it is an error)\n"
            "      --show-reasoning    print the model's <think> part (default); on a terminal it\n"
            "                          is dimmed, when piped it is printed exactly as generated\n"
            "      --hide-reasoning    print only the reply's content (reasoning still generated\n"
            "                          unless thinking is off)\n"
            "      --history FILE      the line-editing history file (default above)\n"
            "      --no-history        keep no history file (Up still recalls this session's\n"
            "                          lines)\n"
            "\n"
            "sampling (defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, seed 12648430;\n"
            "turn k of a session, counted from 0 and restarted by /reset, samples with seed+k):\n"
            "      --temp F            temperature; 0 = greedy\n"
            "      --greedy            same as --temp 0\n"
            "      --top-k N           keep the N most likely tokens (0 = off)\n"
            "      --top-p F           nucleus sampling threshold (1 = off)\n"
            "      --min-p F           drop tokens below F x the top probability (0 = off)\n"
            "      --repeat-penalty F  repetition penalty (1 = off)\n"
            "      --repeat-last-n N   tokens the penalties look back over (-1 = all, default 64)\n"
            "      --presence-penalty F, --frequency-penalty F   OpenAI-style penalties (0 = off)\n"
            "  -s, --seed N            random seed\n"
            "\n"
            "commands (a line starting with '/'; start a message with \"//\" to send a literal '/'):\n"
            "  /reset                  forget the conversation (the system message stays)\n"
            "  /think on|off           thinking for the next turns (the template's enable_thinking)\n"
            "  /history                print the conversation so far (stdout)\n"
            "  /save FILE              write the conversation to FILE as OpenAI-style JSON,\n"
            "                          {\"messages\": [...]} (replaced atomically)\n"
            "  /load FILE              replace the conversation (system message included) with\n"
            "                          FILE's; a bad file changes nothing\n"
            "  /help                   list the commands\n"
            "  /quit, /exit            end the session\n"
            "\n"
            "other:\n"
            "      --no-stats          do not print per-turn timings on stderr\n"
            "      --print-prompt      print each turn's rendered prompt on stderr (debugging)\n"
            "      --print-tokens      print each turn's prompt and sampled token ids on stderr\n"
            "  -h, --help              this help\n"
            "      --version           print the version\n"
            "\n"
            "Ctrl-C stops the reply being generated (the partial reply stays in the history);\n"
            "at the prompt it ends the session (exit status 130).\n");
}

static void commands_help(FILE *f) {
    fprintf(f, "commands: /reset, /think on|off, /history, /save FILE, /load FILE, /help, "
               "/quit (or /exit)\n"
               "  /reset          forget the conversation (the system message stays)\n"
               "  /think on|off   thinking for the next turns\n"
               "  /history        print the conversation so far\n"
               "  /save FILE      write the conversation as OpenAI-style JSON\n"
               "  /load FILE      replace the conversation with FILE's\n"
               "start a message with // to send a literal '/'; end a line with \\ to continue\n"
               "the message on the next line, or put it between two lines of \"\"\"\n");
}

/* Returns 0 to continue, 1 to exit successfully (help/version), 2 on a usage error. */
static int parse_args(int argc, char **argv, chat_opts *o) {
    memset(o, 0, sizeof *o);
    kipp_cli_runtime_init(&o->rt);
    kipp_cli_spec_init(&o->spec);
    o->n_predict = 1024;
    o->show_reasoning = 1;
    o->stats = 1;
    o->sp = kipp_sampler_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define IS(s) (strcmp(a, s) == 0)
#define NEXT()                                                                               \
    (i + 1 < argc ? argv[++i]                                                                \
                  : (fprintf(stderr, PROG ": %s needs a value (see --help)\n", a), (char *)NULL))
        const char *v = NULL;
        int r;
        if (IS("-h") || IS("--help")) { usage(stdout); return 1; }
        else if (IS("--version")) { printf(PROG " %s\n", KIPP_VERSION); return 1; }
        else if (IS("-m") || IS("--model")) { if (!(o->model = NEXT())) return 2; }
        else if (IS("--system")) { if (!(o->system = NEXT())) return 2; }
        else if (IS("-n") || IS("--n-predict")) {
            if (!(v = NEXT()) || !kipp_cli_long(PROG, a, v, 1, 1 << 24, &o->n_predict)) return 2;
        } else if (IS("-c") || IS("--ctx-size")) {
            if (!(v = NEXT()) || !kipp_cli_long(PROG, a, v, 1, 1 << 24, &o->n_ctx)) return 2;
        } else if (IS("-t") || IS("--threads")) {
            if (!(v = NEXT()) || !kipp_cli_long(PROG, a, v, 0, 1024, &o->n_threads)) return 2;
        } else if ((r = kipp_cli_sampling_flag(PROG, argc, argv, &i, &o->sp)) != 0 ||
                   (r = kipp_cli_runtime_flag(PROG, argc, argv, &i, &o->rt)) != 0 ||
                   (r = kipp_cli_spec_flag(PROG, argc, argv, &i, &o->spec)) != 0) {
            if (r == 2) return 2;
        } else if (IS("--no-think")) { o->no_think = 1; }
        else if (IS("--show-reasoning")) { o->show_reasoning = 1; }
        else if (IS("--hide-reasoning")) { o->show_reasoning = 0; }
        else if (IS("--no-stats")) { o->stats = 0; }
        else if (IS("--history")) { if (!(o->history = NEXT())) return 2; }
        else if (IS("--no-history")) { o->no_history = 1; }
        else if (IS("--print-prompt")) { o->print_prompt = 1; }
        else if (IS("--print-tokens")) { o->print_tokens = 1; }
        else {
            fprintf(stderr, PROG ": unknown option '%s' (see --help)\n", a);
            return 2;
        }
#undef IS
#undef NEXT
    }
    if (!o->model) {
        fprintf(stderr, PROG ": --model FILE is required (see --help)\n");
        return 2;
    }
    if (!kipp_cli_runtime_finish(PROG, &o->rt)) return 2;
    if (!kipp_cli_spec_finish(PROG, &o->spec)) return 2;
    if (o->system && kipp_tok_utf8_valid_prefix((const uint8_t *)o->system,
                                                strlen(o->system)) != strlen(o->system)) {
        fprintf(stderr, PROG ": --system: the text is not valid UTF-8\n");
        return 2;
    }
    return 0;
}

/* ---- Ctrl-C ------------------------------------------------------------------------------ */

/* Set by SIGINT, read by the generation loop and the line reader; a second Ctrl-C before
 * the first is handled (e.g. during a long prefill) ends the process at once. */
static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    if (g_interrupted) _exit(130);
    g_interrupted = 1;
}

/* ---- session ----------------------------------------------------------------------------- */

typedef struct {
    const chat_opts *o;
    kipp_model *m;
    kipp_ctx *c;
    uint32_t n_vocab, n_ctx;
    json_t *msgs;          /* [system?, user, assistant, user, ...] OpenAI-style */
    size_t n_sys;          /* 1 when msgs[0] is the system message */
    int think;             /* enable_thinking for the next render */
    const char *tmpl;      /* the chat template's name */
    int think_fixed;       /* the template has no switch (2507, Qwen2.5): think stays */
    long turn;             /* turns since start or /reset: sampler seed offset */
    int32_t *kv;           /* [n_ctx] tokens in sequence 0's KV cache, kv[0..n_kv) */
    uint32_t n_kv;
    int32_t *ids;          /* [n_ids] the current rendering's tokens */
    size_t n_ids;
    float *logits;         /* [n_vocab] */
    char *reply;           /* [reply_cap] the reply's text as generated (skip_special) */
    size_t reply_len, reply_cap;
    int tty_in, tty_out, color;
    /* display state of one reply */
    int shown_reasoning;   /* the dim reasoning part was opened on the terminal */
    int shown_content;
    kipp_model *dm;          /* --draft-model */
    kipp_drafter *drafter;   /* speculative decoding, or NULL */
} chat_session;

/* Renders system + msgs[start..] with the template and tokenizes the result into s->ids.
 * Returns 0 after printing why it failed (a template error names the message at fault). */
static int render_tokens(chat_session *s, size_t start) {
    char err[KIPP_ERR_LEN];
    json_t *view = json_array(), *req = NULL;
    char *body = NULL, *text = NULL;
    size_t text_len = 0;
    int ok = 0;
    if (!view) goto oom;
    for (size_t i = 0; i < json_array_size(s->msgs); i++)
        if ((i < s->n_sys || i >= start) && json_array_append(view, json_array_get(s->msgs, i)))
            goto oom;
    req = json_pack("{s:O, s:{s:b}}", "messages", view, "chat_template_kwargs",
                    "enable_thinking", s->think);
    if (!req || !(body = json_dumps(req, JSON_COMPACT))) goto oom;
    kipp_status st = kipp_chat_apply(s->m, body, strlen(body), &text, &text_len, err, sizeof err);
    if (st != KIPP_OK) {
        fprintf(stderr, PROG ": chat template: %s\n", err);
        goto done;
    }
    if (s->o->print_prompt) {
        fprintf(stderr, "--- prompt ---\n");
        fwrite(text, 1, text_len, stderr);
        fprintf(stderr, "\n--- end of prompt ---\n");
    }
    /* the exact count (NFC can make more tokens than the text has bytes) */
    int32_t *ids = NULL;
    size_t n_ids = 0;
    st = kipp_tokenize_alloc(s->m, text, text_len, 1, &ids, &n_ids, err, sizeof err);
    if (st != KIPP_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        goto done;
    }
    free(s->ids);
    s->ids = ids;
    s->n_ids = n_ids;
    ok = 1;
    goto done;
oom:
    fprintf(stderr, PROG ": out of memory rendering the conversation\n");
done:
    free(text);
    free(body);
    json_decref(req);
    json_decref(view);
    return ok;
}

static size_t count_role(const json_t *msgs, size_t from, const char *role) {
    size_t n = 0;
    for (size_t i = from; i < json_array_size(msgs); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(msgs, i), "role")), role) == 0)
            n++;
    return n;
}

/* Index of the first message of the second exchange at or after start: the exchange that
 * starts at start (a user message and its replies) is what dropping one exchange removes. */
static size_t next_exchange(const json_t *msgs, size_t start) {
    size_t i = start + 1;
    while (i < json_array_size(msgs) &&
           strcmp(json_string_value(json_object_get(json_array_get(msgs, i), "role")), "user"))
        i++;
    return i;
}

/* Renders the conversation whose last message is the new user turn so that the prompt
 * leaves room for a reply of min(-n, n_ctx/4) tokens, dropping the oldest exchanges (never
 * the system message) as needed; those are removed from the history only on success.
 * Returns 0 after printing why not (the caller removes the new user message). */
static int fit_context(chat_session *s) {
    uint32_t reserve = s->o->n_predict < (long)(s->n_ctx / 4) ? (uint32_t)s->o->n_predict
                                                               : s->n_ctx / 4;
    if (reserve == 0) reserve = 1;
    size_t start = s->n_sys;
    for (;;) {
        if (!render_tokens(s, start)) return 0;
        if (s->n_ids + reserve <= s->n_ctx) break;
        if (count_role(s->msgs, start, "user") < 2) {
            fprintf(stderr,
                    PROG ": this message does not fit: the prompt would be %zu tokens (system "
                    "message and this turn alone) and the context holds %u, with %u kept for "
                    "the reply; message ignored (shorten it, or raise -c)\n",
                    s->n_ids, s->n_ctx, reserve);
            return 0;
        }
        start = next_exchange(s->msgs, start);
    }
    if (start > s->n_sys) {
        size_t n_drop = start - s->n_sys,
               n_ex = count_role(s->msgs, s->n_sys, "user") - count_role(s->msgs, start, "user");
        for (size_t k = 0; k < n_drop; k++) json_array_remove(s->msgs, s->n_sys);
        fprintf(stderr,
                PROG ": context full: dropped the oldest %zu exchange%s (%zu message%s) to fit "
                "%zu prompt tokens into the context of %u\n",
                n_ex, n_ex == 1 ? "" : "s", n_drop, n_drop == 1 ? "" : "s", s->n_ids, s->n_ctx);
    }
    return 1;
}

/* ---- streaming a reply --------------------------------------------------------------------- */

#define DIM "\033[2m"
#define RESET "\033[0m"

/* Receives the parts of the reply from the streaming <think> splitter: the terminal view
 * (reasoning dimmed, or between [thinking] markers with NO_COLOR) and the piped
 * --hide-reasoning view (content only). */
static void show_part(void *user, int is_reasoning, const char *bytes, size_t n) {
    chat_session *s = user;
    if (is_reasoning) {
        if (!s->o->show_reasoning) return;
        if (!s->shown_reasoning) fputs(s->color ? DIM : "[thinking]\n", stdout);
        s->shown_reasoning = 1;
    } else if (!s->shown_content) {
        if (s->shown_reasoning) fputs(s->color ? RESET "\n\n" : "\n[/thinking]\n", stdout);
        s->shown_content = 1;
    }
    fwrite(bytes, 1, n, stdout);
    fflush(stdout);
}

static int reply_append(chat_session *s, const char *bytes, size_t n) {
    if (n >= SIZE_MAX - s->reply_len ||
        kipp_grow((void **)&s->reply, &s->reply_cap, s->reply_len + n + 1, 1) != KIPP_OK)
        return 0;
    memcpy(s->reply + s->reply_len, bytes, n);
    s->reply_len += n;
    s->reply[s->reply_len] = '\0';
    return 1;
}

/* Text the detokenizer released: kept for the history, shown raw when piped with reasoning
 * shown, else through the splitter. */
static int stream_text(chat_session *s, kipp_reasoning *rs, const char *bytes, size_t n) {
    if (!n) return 1;
    if (!reply_append(s, bytes, n)) return 0;
    if (!s->tty_out && s->o->show_reasoning) {
        fwrite(bytes, 1, n, stdout);
        fflush(stdout);
        return 1;
    }
    char err[KIPP_ERR_LEN];
    return kipp_reasoning_feed(rs, bytes, n, err, sizeof err) == KIPP_OK;
}

/* What the generation loop calls back during one reply. */
typedef struct {
    chat_session *s;
    kipp_reasoning *rs;
} turn_io;

static int turn_text(void *user, const char *bytes, size_t n) {
    turn_io *t = user;
    if (!stream_text(t->s, t->rs, bytes, n)) {
        fprintf(stderr, "\n" PROG ": out of memory streaming the reply\n");
        return 0;
    }
    if (ferror(stdout)) { /* a full disk or a closed pipe: no point in going on */
        fprintf(stderr, "\n" PROG ": cannot write to stdout: %s\n", strerror(errno));
        return 0;
    }
    return 1;
}

static void turn_sampled(void *user, int32_t id) {
    turn_io *t = user;
    if (t->s->o->print_tokens) fprintf(stderr, " %d", id);
}

static void turn_decoded(void *user, int32_t id) {
    turn_io *t = user;
    t->s->kv[t->s->n_kv++] = id;
}

/* Where the reply starts: inside the reasoning when the prompt ends in <think>
 * (Thinking-2507), else as content unless it opens <think> itself; a template without
 * reasoning (Qwen2.5) makes it all content. */
static kipp_reasoning_mode reply_mode(const chat_session *s) {
    kipp_chat_thinking th = KIPP_CHAT_THINK_OFF;
    (void)kipp_chat_template_info(s->m, s->think, NULL, &th, NULL, 0);
    return th == KIPP_CHAT_THINK_IN_PROMPT ? KIPP_REASONING_OPEN_IN_PROMPT
           : th == KIPP_CHAT_THINK_NEVER   ? KIPP_REASONING_NONE
                                           : KIPP_REASONING_OPEN_BY_TAG;
}

/* Adds the reply to the history: content and reasoning_content split as the template
 * expects them back. */
static int store_reply(chat_session *s) {
    const char *r, *c;
    size_t r_len, c_len;
    kipp_reasoning_split(s->reply ? s->reply : "", s->reply_len, reply_mode(s), &r, &r_len, &c,
                         &c_len);
    json_t *msg = json_pack("{s:s, s:s%, s:s%}", "role", "assistant", "content", c, c_len,
                            "reasoning_content", r, r_len);
    if (!msg || json_array_append_new(s->msgs, msg)) {
        fprintf(stderr, PROG ": out of memory storing the reply\n");
        return 0;
    }
    return 1;
}

/* ---- one turn ------------------------------------------------------------------------------ */

/* Runs one user turn. Returns 0 on a fatal error (decode failure), 1 otherwise. */
static int chat_turn(chat_session *s, const char *line, size_t len) {
    char err[KIPP_ERR_LEN];
    size_t bad = kipp_tok_utf8_valid_prefix((const uint8_t *)line, len);
    if (bad != len) {
        fprintf(stderr, PROG ": the line is not valid UTF-8 (bad byte 0x%02x at offset %zu); "
                        "ignored\n", (unsigned char)line[bad], bad);
        return 1;
    }
    json_t *user = json_pack("{s:s, s:s%}", "role", "user", "content", line, len);
    if (!user || json_array_append_new(s->msgs, user)) {
        fprintf(stderr, PROG ": out of memory\n");
        return 0;
    }
    if (!fit_context(s)) {
        json_array_remove(s->msgs, json_array_size(s->msgs) - 1);
        return 1;
    }

    /* KV reuse: keep the longest common prefix of what sequence 0 holds and the new
     * rendering, but always decode at least one token to get logits. The prefix can be
     * shorter than last turn's sequence: the template drops earlier turns' reasoning, and
     * the reply's text may re-tokenize differently than it was generated. */
    uint32_t lcp = 0, n_prompt = (uint32_t)s->n_ids;
    while (lcp < s->n_kv && lcp + 1 < n_prompt && s->kv[lcp] == s->ids[lcp]) lcp++;
    kipp_status st = kipp_ctx_truncate(s->c, lcp, err, sizeof err);
    if (st != KIPP_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        return 0;
    }
    s->n_kv = lcp;

    kipp_sampler_params sp = s->o->sp;
    sp.seed += (uint64_t)s->turn++;
    kipp_sampler *smp = NULL;
    kipp_detokenizer *dt = NULL;
    int ok = 0;
    if ((st = kipp_sampler_init(&sp, s->n_vocab, &smp, err, sizeof err)) != KIPP_OK ||
        (st = kipp_detokenizer_init(s->m, 1, &dt, err, sizeof err)) != KIPP_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        goto done;
    }
    for (uint32_t i = 0; i < n_prompt; i++) kipp_sampler_accept(smp, s->ids[i]);
    if (s->o->print_tokens) {
        fprintf(stderr, PROG ": turn %ld prompt ids:", s->turn);
        for (uint32_t i = 0; i < n_prompt; i++) fprintf(stderr, " %d", s->ids[i]);
        fprintf(stderr, "\n" PROG ": turn %ld sampled ids:", s->turn);
    }

    double t0 = kipp_cli_now();
    st = kipp_decode(s->c, s->ids + lcp, n_prompt - lcp, s->logits, err, sizeof err);
    if (st != KIPP_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        goto done;
    }
    memcpy(s->kv + lcp, s->ids + lcp, (n_prompt - lcp) * sizeof *s->kv);
    s->n_kv = n_prompt;
    double t_prefill = kipp_cli_now() - t0;

    kipp_reasoning rs;
    kipp_reasoning_init(&rs, reply_mode(s), show_part, s);
    s->reply_len = 0;
    s->shown_reasoning = s->shown_content = 0;
    turn_io io = {s, &rs};
    kipp_gen_params gp = {.prog = PROG, .ctx = s->c, .model = s->m, .sampler = smp,
                          .detok = dt, .logits = s->logits, .n_predict = s->o->n_predict,
                          .interrupted = &g_interrupted, .on_text = turn_text,
                          .on_sampled = turn_sampled, .on_decoded = turn_decoded, .user = &io,
                          .drafter = s->drafter, .k_max = (uint32_t)s->o->spec.draft_max,
                          .k_min = (uint32_t)s->o->spec.draft_min, .fixed_k = s->o->spec.fixed,
                          .hist = s->ids, .n_hist = n_prompt};
    if (s->drafter && (st = kipp_drafter_open(s->drafter, 0, &sp, err, sizeof err)) != KIPP_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        goto done;
    }
    kipp_gen_result g;
    if (!kipp_generate(&gp, &g)) goto done;
    if (s->o->print_tokens) fprintf(stderr, "\n");
    if (!(!s->tty_out && s->o->show_reasoning) &&
        kipp_reasoning_finish(&rs, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "\n" PROG ": out of memory streaming the reply\n");
        goto done;
    }
    if (s->color && s->shown_reasoning && !s->shown_content) fputs(RESET, stdout);
    fputs("\n", stdout);
    if (fflush(stdout) != 0 || ferror(stdout)) goto write_error;
    if (!strcmp(g.stop, "interrupted")) fprintf(stderr, PROG ": [reply interrupted]\n");
    if (!strcmp(g.stop, "ctx_full"))
        fprintf(stderr, PROG ": reply stopped: the context (%u tokens) is full\n", s->n_ctx);
    if (!store_reply(s)) goto done;
    if (s->o->stats)
        fprintf(stderr,
                PROG ": turn %ld: prompt %u tokens (reused %u, prefilled %u) in %.1f ms; "
                "generated %ld tokens in %.1f ms (%.2f tok/s); context %u of %u; stop %s\n",
                s->turn, n_prompt, lcp, n_prompt - lcp, t_prefill * 1e3, g.n_gen,
                g.t_decode * 1e3, g.n_decoded / (g.t_decode > 0 ? g.t_decode : 1e-9), s->n_kv,
                s->n_ctx, g.stop);
    ok = 1;
    goto done;
write_error: /* a full disk or a closed pipe: no point in going on */
    fprintf(stderr, "\n" PROG ": cannot write to stdout: %s\n", strerror(errno));
done:
    kipp_sampler_free(smp);
    kipp_detokenizer_free(dt);
    return ok;
}

/* ---- commands ------------------------------------------------------------------------------ */

static void print_history(const chat_session *s) {
    size_t n = json_array_size(s->msgs);
    if (n == 0) printf("(the conversation is empty)\n");
    for (size_t i = 0; i < n; i++) {
        const json_t *msg = json_array_get(s->msgs, i);
        const char *role = json_string_value(json_object_get(msg, "role"));
        const json_t *rc = json_object_get(msg, "reasoning_content");
        if (json_string_length(rc)) {
            printf("[%s reasoning] ", role);
            fwrite(json_string_value(rc), 1, json_string_length(rc), stdout);
            printf("\n");
        }
        const json_t *content = json_object_get(msg, "content");
        printf("[%s] ", role);
        fwrite(json_string_value(content), 1, json_string_length(content), stdout);
        printf("\n");
    }
    fflush(stdout);
}

/* /save FILE */
static void save_conversation(const chat_session *s, const char *path) {
    char err[KIPP_ERR_LEN];
    if (!*path) {
        fprintf(stderr, PROG ": /save needs a file name: /save FILE\n");
        return;
    }
    if (kipp_chat_save(s->msgs, path, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, PROG ": /save: %s; nothing was written\n", err);
        return;
    }
    size_t n = json_array_size(s->msgs);
    fprintf(stderr, PROG ": saved %zu message%s to %s\n", n, n == 1 ? "" : "s", path);
}

/* /load FILE: the loaded conversation replaces the current one (its system message too).
 * The KV cache is left as it is: the next turn reuses whatever prefix still matches. The
 * turn count becomes the number of user messages, so a reloaded session samples its next
 * turn with the seed an uninterrupted one would have used. */
static void load_conversation(chat_session *s, const char *path) {
    char err[KIPP_ERR_LEN];
    json_t *msgs = NULL;
    if (!*path) {
        fprintf(stderr, PROG ": /load needs a file name: /load FILE\n");
        return;
    }
    if (kipp_chat_load(path, &msgs, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, PROG ": /load: %s; the conversation is unchanged\n", err);
        return;
    }
    json_decref(s->msgs);
    s->msgs = msgs;
    size_t n = json_array_size(msgs);
    s->n_sys = n && !strcmp(json_string_value(json_object_get(json_array_get(msgs, 0), "role")),
                            "system");
    s->turn = (long)count_role(msgs, 0, "user");
    fprintf(stderr, PROG ": loaded %zu message%s from %s%s\n", n, n == 1 ? "" : "s", path,
            s->n_sys ? " (with its system message)" : "");
}

typedef enum { CMD_CONTINUE, CMD_QUIT, CMD_FATAL } cmd_result;

static cmd_result run_command(chat_session *s, char *line) {
    char err[KIPP_ERR_LEN];
    char *arg = line + strcspn(line, " \t");
    size_t name_len = (size_t)(arg - line);
    while (*arg == ' ' || *arg == '\t') arg++;
    size_t arg_len = strlen(arg);
    while (arg_len && (arg[arg_len - 1] == ' ' || arg[arg_len - 1] == '\t')) arg[--arg_len] = 0;
#define CMD(str) (name_len == strlen(str) && strncmp(line, str, name_len) == 0)
    if (CMD("/quit") || CMD("/exit")) return CMD_QUIT;
    if (CMD("/help")) {
        commands_help(stderr);
    } else if (CMD("/reset")) {
        while (json_array_size(s->msgs) > s->n_sys) json_array_remove(s->msgs, s->n_sys);
        if (kipp_ctx_truncate(s->c, 0, err, sizeof err) != KIPP_OK) {
            fprintf(stderr, PROG ": %s\n", err);
            return CMD_FATAL;
        }
        s->n_kv = 0;
        s->turn = 0;
        fprintf(stderr, PROG ": conversation reset\n");
    } else if (CMD("/think")) {
        int want = s->think;
        if (!strcmp(arg, "on")) want = 1;
        else if (!strcmp(arg, "off")) want = 0;
        else if (*arg) {
            fprintf(stderr, PROG ": /think expects 'on' or 'off', got '%s'\n", arg);
            return CMD_CONTINUE;
        }
        if (s->think_fixed && want != s->think)
            fprintf(stderr, PROG ": the model's chat template (%s) %s thinks\n", s->tmpl,
                    s->think ? "always" : "never");
        else
            s->think = want;
        fprintf(stderr, PROG ": thinking is %s\n", s->think ? "on" : "off");
    } else if (CMD("/history")) {
        print_history(s);
    } else if (CMD("/save")) {
        save_conversation(s, arg);
    } else if (CMD("/load")) {
        load_conversation(s, arg);
    } else {
        fprintf(stderr, PROG ": unknown command '%.*s' (try /help)\n", (int)name_len, line);
    }
#undef CMD
    return CMD_CONTINUE;
}

/* ---- main ---------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    chat_opts o;
    int pr = parse_args(argc, argv, &o);
    if (pr == 1) return 0;
    if (pr == 2) return 2;

    char err[KIPP_ERR_LEN];
    int rc = 1;
    if (!kipp_cli_stdout_ready(PROG)) return 1;
    chat_session s;
    memset(&s, 0, sizeof s);
    s.o = &o;
    s.think = !o.no_think;
    s.tty_in = isatty(STDIN_FILENO);
    s.tty_out = isatty(STDOUT_FILENO);
    s.color = s.tty_out && !getenv("NO_COLOR");
    kipp_chat_input *in = NULL;
    char *history_path = NULL;

    double load_s = kipp_cli_now(); /* model load + context creation */
    kipp_status st = kipp_model_load(o.model, &s.m, err, sizeof err);
    if (st != KIPP_OK) {
        fprintf(stderr, PROG ": %s\n", err);
        goto done;
    }
    if (!kipp_cli_rope_apply(PROG, &o.rt.rope, s.m)) goto done;
    kipp_model_info info;
    kipp_model_get_info(s.m, &info);
    s.n_vocab = info.n_vocab;
    /* the 2507 and Qwen2.5 templates have no thinking switch: Instruct-2507 and Qwen2.5 never
     * think, Thinking-2507 always does */
    /* (an unsupported template is reported by the first turn's rendering) */
    kipp_chat_thinking on, off;
    s.think_fixed = kipp_chat_template_info(s.m, 1, &s.tmpl, &on, NULL, 0) == KIPP_OK &&
                    kipp_chat_template_info(s.m, 0, NULL, &off, NULL, 0) == KIPP_OK &&
                    on == off && strcmp(s.tmpl, "chatml") != 0;
    int fixed_on = on == KIPP_CHAT_THINK_BY_TAG || on == KIPP_CHAT_THINK_IN_PROMPT;
    if (s.think_fixed && o.no_think && fixed_on) {
        fprintf(stderr, PROG ": --no-think: the model's chat template (%s) always thinks; it has "
                        "no switch to turn thinking off\n", s.tmpl);
        rc = 2;
        goto done;
    }
    if (s.think_fixed) s.think = fixed_on;
    kipp_ctx_params cp = kipp_ctx_default_params();
    cp.backend = o.rt.backend;
    cp.isa = o.rt.isa;
    cp.device = o.rt.device;
    cp.kv_type = o.rt.kv_type;
    cp.kv_type_v = o.rt.kv_type_v;
    cp.n_ctx = (uint32_t)o.n_ctx;
    cp.n_threads = (int)o.n_threads;
    if ((st = kipp_ctx_init(s.m, &cp, &s.c, err, sizeof err)) != KIPP_OK) {
        kipp_cli_ctx_error(PROG, &o.rt, err);
        goto done;
    }
    s.n_ctx = kipp_ctx_n_ctx(s.c);
    o.spec.rope = &o.rt.rope;
    if (!kipp_cli_spec_start(PROG, &o.spec, s.m, &cp, s.n_ctx, 1, &s.dm, &s.drafter)) goto done;
    load_s = kipp_cli_now() - load_s;
    s.kv = malloc((size_t)s.n_ctx * sizeof *s.kv);
    s.logits = malloc((size_t)s.n_vocab * sizeof *s.logits);
    s.msgs = json_array();
    if (!s.kv || !s.logits || !s.msgs) {
        fprintf(stderr, PROG ": out of memory\n");
        goto done;
    }
    if (o.system) {
        if (json_array_append_new(s.msgs, json_pack("{s:s, s:s}", "role", "system", "content",
                                                     o.system))) {
            fprintf(stderr, PROG ": out of memory\n");
            goto done;
        }
        s.n_sys = 1;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: Ctrl-C at the prompt interrupts the read */
    sigaction(SIGINT, &sa, NULL);

    kipp_ctx_info ci;
    kipp_ctx_get_info(s.c, &ci);
    fprintf(stderr, PROG ": %s, context %u tokens, thinking %s; ", o.model, s.n_ctx,
            s.think ? "on" : "off");
    kipp_cli_print_ctx_info(stderr, &ci);
    fprintf(stderr, "; loaded in %.1f ms%s\n", load_s * 1e3,
            s.tty_in ? "; /help lists the commands, /quit or Ctrl-D ends" : "");
    /* line editing only when both ends are a terminal: piped input and output stay bytes */
    kipp_chat_input_params ip = {.prog = PROG, .edit = s.tty_in && s.tty_out,
                                 .prompt = s.tty_in, .interrupted = &g_interrupted};
    if (ip.edit && !o.no_history) {
        history_path = o.history ? strdup(o.history) : kipp_chat_input_default_history();
        if (!o.history && !history_path)
            fprintf(stderr, PROG ": warning: neither XDG_STATE_HOME nor HOME is set; history "
                            "is not saved (use --history FILE)\n");
        ip.history_path = history_path;
    }
    if (!(in = kipp_chat_input_open(&ip))) goto done;
    for (;;) {
        g_interrupted = 0;
        char *text;
        size_t len;
        kipp_chat_in_kind kind = kipp_chat_input_read(in, &text, &len);
        if (kind == KIPP_CHAT_IN_INTERRUPTED) {
            fprintf(stderr, "\n");
            rc = 130;
            break;
        }
        if (kind == KIPP_CHAT_IN_EOF) {
            if (s.tty_in) fprintf(stderr, "\n");
            rc = 0;
            break;
        }
        if (kind == KIPP_CHAT_IN_ERROR) break;
        if (kind == KIPP_CHAT_IN_COMMAND) {
            cmd_result r = run_command(&s, text);
            if (r == CMD_QUIT) { rc = 0; break; }
            if (r == CMD_FATAL) break;
            continue;
        }
        if (!chat_turn(&s, text, len)) break;
    }
done:
    kipp_chat_input_free(in);
    free(history_path);
    free(s.kv);
    free(s.ids);
    free(s.logits);
    free(s.reply);
    json_decref(s.msgs);
    kipp_drafter_free(s.drafter);
    kipp_model_free(s.dm);
    kipp_ctx_free(s.c);
    kipp_model_free(s.m);
    return rc;
}
