/* kipp_server.c — the `kipp-server` command: parses flags (the runtime and size flags
 * through cli_args.c, shared with kipp and kipp-chat), starts listening (so /health can say
 * "loading"), loads the model, checks its chat template, starts the scheduler, prints the
 * start-up line (backend, ISA level, threads, KV type and pool, load time) and serves until
 * SIGINT or SIGTERM, then drains. The only server code that prints or exits. Reference:
 * docs/server.md. */
#include "cli/cli_args.h"
#include "cli/cli_rope.h"
#include "cli/cli_spec.h"
#include "engine/sched.h"
#include "kipp.h"
#include "server/embeddings.h"
#include "server/kv_events.h"
#include "server/rerank.h"
#include "server/server.h"

#include <errno.h>
#include <limits.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KIPP_VERSION "0.1.0"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kipp-server --model FILE.gguf [options]\n"
            "\n"
            "Serves a Qwen3 GGUF model over HTTP: OpenAI's API (POST /v1/chat/completions,\n"
            "/v1/completions, /v1/embeddings, /v1/responses; GET /v1/models), Anthropic's\n"
            "Messages API (POST /v1/messages, /v1/messages/count_tokens), Ollama's API (/api/chat,\n"
            "/api/generate, /api/embed, /api/tags, /api/show, ...), POST /v1/rerank, /tokenize,\n"
            "/detokenize, /apply-template, GET /props, GET /health, GET /metrics (Prometheus),\n"
            "and GET / a chat page for a browser. Many clients at once: continuous batching over\n"
            "one paged KV pool with automatic prefix caching. See docs/server.md.\n"
            "\n"
            "  -m, --model FILE          GGUF model file (required)\n"
            "      --host H              address to bind (default 127.0.0.1: this machine only)\n"
            "      --port P              TCP port (default 8080; 0 = any free port, printed)\n"
            "  -t, --threads N           compute threads (default 0 = physical cores)\n");
    kipp_cli_runtime_help(f, 28);
    kipp_cli_spec_help(f, 28);
    fprintf(f,
            "      --model-name NAME     the model id clients send (default: file name without .gguf)\n"
            "      --served-model-name NAME  the same as --model-name; '*' keeps the name and\n"
            "                            accepts any id clients send\n"
            "      --model-alias NAME    another id clients may send (repeatable; '*' = any)\n"
            "      --log-format F        a line per request on stderr: text (default), json or\n"
            "                            none\n"
            "  -c, --ctx-size N          longest sequence, prompt + completion (default: model's,\n"
            "                            capped at 4096)\n"
            "      --parallel N          sequences decoded together (default 8)\n"
            "      --kv-tokens N         shared KV pool size in tokens (default: ctx-size x\n"
            "                            parallel, capped by --kv-memory; at least one context)\n"
            "      --kv-memory BYTES     the most K/V bytes the pool may take when --kv-tokens is\n"
            "                            not given (default %llu GiB; suffixes K, M, G, KiB, MiB,\n"
            "                            GiB are powers of 1024): e.g. 512M\n"
            "      --queue N             requests that may wait; beyond: 503 + Retry-After (default 64)\n"
            "      --batch-tokens N      prompt tokens prefilled per step (default 256; fewer\n"
            "                            while other sequences decode)\n"
            "      --prefill-step-ms N   fewer prompt tokens per step when they would take longer\n"
            "                            (measured; at least 16): a request arriving meanwhile\n"
            "                            waits about this at most (default 250; off = no bound)\n"
            "      --prefill-busy-ms N   the same bound while requests keep arriving (two within\n"
            "                            2 s), when lower (default 100; off = --prefill-step-ms)\n"
            "      --fair-share X        while an n > 1 request shares a step with one-sequence\n"
            "                            requests (or one arrived within 2 s), its sequences add\n"
            "                            about X of the step's time on average, rows priced by\n"
            "                            depth (default 0.25; 0 = they wait, a row every 9\n"
            "                            steps; off = no cap)\n"
            "      --max-body BYTES      request body limit, 413 beyond (default 1048576)\n"
            "      --max-prompt-tokens N longest prompt accepted (default ctx-size - 1)\n"
            "      --max-tokens N        completion length when a request gives none\n"
            "                            (default: the rest of the context)\n"
            "      --no-prefix-cache     do not keep finished sequences for prefix reuse\n"
            "      --prefix-cache-entries N  sequences the prefix cache keeps (default 64)\n"
            "      --kv-events ENDPOINT  publish KV-cache events (blocks stored and removed) as\n"
            "                            vLLM does: a ZeroMQ PUB socket, bound when ENDPOINT has\n"
            "                            '*' (tcp://*:5557) or is ipc://, else connected\n"
            "      --kv-events-replay ENDPOINT  a ZeroMQ ROUTER socket (bound) that resends\n"
            "                            buffered event batches from a sequence number\n"
            "      --kv-events-topic T   the topic frame of each message (default empty, vLLM's)\n"
            "      --kv-events-hash-seed S  the block-hash chain's seed, as vLLM's\n"
            "                            PYTHONHASHSEED (default 0)\n"
            "      --kv-events-hash int|bytes  block hashes on the wire: the sha256's last 8\n"
            "                            bytes as an integer (default, vLLM's) or all 32 bytes\n"
            "      --api-key KEY         require 'Authorization: Bearer KEY' (401 otherwise)\n"
            "      --api-key-file FILE   the same, key read from the first line of FILE (--api-key\n"
            "                            shows in ps; the file does not)\n"
            "      --max-connections N   open connections at most (default 2048)\n"
            "      --max-connections-per-ip N  open connections per client address (default 64;\n"
            "                            0 = no limit: behind a load balancer every connection\n"
            "                            comes from its address)\n"
            "      --read-timeout SECONDS  a whole request, headers and body, must arrive within\n"
            "                            this (not reset by each byte; default 30)\n"
            "      --write-timeout SECONDS  a response the client accepts no byte of for this\n"
            "                            long is closed and its request cancelled (default 30)\n"
            "      --max-parsing N       requests parsed and tokenized at once; others wait up\n"
            "                            to 10 s, then 503 (default 4)\n"
            "      --shutdown-timeout SECONDS  on SIGTERM/SIGINT, how long requests in flight may\n"
            "                            still run before they are cut with an error (default 30)\n"
            "      --drain-delay SECONDS on SIGTERM/SIGINT, /health says 503 \"draining\" at once\n"
            "                            but new requests are still served this long (so a\n"
            "                            balancer's health check sees it first), then the drain\n"
            "                            (default 0; a second signal ends the delay)\n"
            "      --metrics-compat vllm  /metrics also gives the load figures under vLLM's\n"
            "                            names (vllm:num_requests_waiting, vllm:kv_cache_usage_perc,\n"
            "                            ...) for routers that read those\n"
            "      --allowed-host H      also accept this Host header name (repeatable; '*' =\n"
            "                            any); loopback names, the --host address and the IP\n"
            "                            address a connection arrived on always\n"
            "      --cors-origin ORIGIN  allow browser requests from this Origin (repeatable;\n"
            "                            '*' = any); same-origin requests always\n"
            "      --content-special-tokens parse|text  special-token text (<|im_end|>, ...)\n"
            "                            in prompts and message content: parsed as the tokens\n"
            "                            (default, as HF and llama.cpp) or plain text; a request\n"
            "                            may override it with \"content_special_tokens\"\n"
            "      --reranking           serve POST /v1/rerank on a model whose GGUF does not say\n"
            "                            it is a reranker, scoring by its \"yes\" / \"no\" logits\n"
            "                            (a Qwen3-Reranker converted by tools/convert_to_gguf.py\n"
            "                            needs no flag)\n"
            "  -h, --help                this text\n"
            "      --version             print the version\n",
            (unsigned long long)(KIPP_SCHED_DEFAULT_KV_BYTES >> 30));
}

/* Each connection is a descriptor (and a thread): the soft limit on open files is raised
 * toward the hard one so that --max-connections can be reached (Debian's default soft
 * limit is 1024). Says so when the hard limit is too low. */
static void raise_nofile(uint32_t max_connections) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    const rlim_t want = (rlim_t)max_connections + 256; /* model, logs, listen socket, ... */
    if (rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < want)
        fprintf(stderr,
                "kipp-server: warning: the open-file limit (%llu) is below --max-connections %u "
                "+ 256; raise it (ulimit -n) or lower --max-connections\n",
                (unsigned long long)rl.rlim_cur, max_connections);
}

/* Parses a whole decimal in [lo, hi]. */
static int parse_ulong(const char *flag, const char *s, unsigned long long lo,
                       unsigned long long hi, unsigned long long *out) {
    char *end;
    errno = 0;
    if (!s || *s == '-' || *s == 0) goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v < lo || v > hi) goto bad;
    *out = v;
    return 0;
bad:
    fprintf(stderr, "kipp-server: %s needs a whole number in [%llu, %llu], got '%s'\n", flag, lo,
            hi, s ? s : "");
    return -1;
}

/* A flag's number in [lo, hi], or "off" (-1). 0: the message is printed. */
static int number_or_off(const char *flag, const char *s, float lo, float hi, double *out) {
    if (strcmp(s, "off") == 0) {
        *out = -1;
        return 1;
    }
    float f = 0;
    if (!kipp_cli_float("kipp-server", flag, s, lo, hi, &f)) {
        fprintf(stderr, "kipp-server: %s also takes 'off'\n", flag);
        return 0;
    }
    *out = f;
    return 1;
}

static char *read_key_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kipp-server: --api-key-file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char line[1024];
    char *key = NULL;
    if (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0]) key = strdup(line);
    }
    fclose(f);
    if (!key) fprintf(stderr, "kipp-server: --api-key-file %s: the first line is empty\n", path);
    return key;
}

static char *default_name(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    char *n = strdup(b);
    if (!n) return NULL;
    const size_t l = strlen(n);
    if (l > 5 && !strcmp(n + l - 5, ".gguf")) n[l - 5] = 0;
    return n;
}

#define MAX_LIST 64

/* A dry render of a trivial chat: a template the renderer does not support fails here, at
 * start, rather than at the first chat request. */
static int check_template(kipp_model *m) {
    static const char req[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    char err[KIPP_ERR_LEN], *out = NULL;
    size_t n = 0;
    const kipp_status st = kipp_chat_apply(m, req, sizeof req - 1, &out, &n, err, sizeof err);
    free(out);
    if (st == KIPP_OK) return 0;
    fprintf(stderr, "kipp-server: the model's chat template cannot be rendered: %s\n", err);
    return -1;
}

int main(int argc, char **argv) {
#ifdef __GLIBC__
    /* Request bodies and their parses are megabytes and short-lived, on many connection
     * threads: glibc would raise its mmap threshold after the first one and keep them in
     * per-thread arenas, so RSS would grow with every client that ever sent a big body.
     * A fixed threshold keeps them mmap'd, returned to the system when freed; few arenas
     * keep the small leftovers of many threads from piling up. */
    mallopt(M_MMAP_THRESHOLD, 256 << 10);
    mallopt(M_ARENA_MAX, 4);
#endif
    const char *model = NULL, *api_key = NULL, *key_file = NULL, *name = NULL;
    const char *hosts[MAX_LIST], *origins[MAX_LIST], *aliases[MAX_LIST];
    size_t n_hosts = 0, n_origins = 0, n_aliases = 0;
    unsigned shutdown_timeout = 30, drain_delay = 0;
    /* the limits left 0 get kipp_server_start's defaults (server.h) */
    kipp_server_params sp = {.host = "127.0.0.1", .port = 8080, .log_format = 1};
    kipp_sched_params kp = {.max_running = 8, .max_queue = 64, .batch_tokens = 256,
                            .prefix_cache_entries = 64};
    kipp_cli_runtime rt;
    kipp_cli_spec spec;
    kipp_cli_spec_init(&spec);
    kipp_cli_runtime_init(&rt);
    int no_prefix = 0;
    kipp_kv_pub_params kvp = {0};
    kipp_kv_pub *kvpub = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        unsigned long long v;
        int r;
#define IS(s) (!strcmp(a, s))
#define VAL() (i + 1 < argc ? argv[++i] : NULL)
#define NEED(x)                                                                   \
    do {                                                                          \
        if (!(x)) {                                                               \
            fprintf(stderr, "kipp-server: %s needs a value (see --help)\n", a);   \
            return 2;                                                             \
        }                                                                         \
    } while (0)
#define NUM(lo, hi) do { if (parse_ulong(a, VAL(), lo, hi, &v)) return 2; } while (0)
        if (IS("-h") || IS("--help")) { usage(stdout); return 0; }
        else if (IS("--version")) { printf("kipp-server %s\n", KIPP_VERSION); return 0; }
        else if (IS("-m") || IS("--model")) { NEED(model = VAL()); }
        else if (IS("--host")) { NEED(sp.host = VAL()); }
        else if (IS("--port")) { NUM(0, 65535); sp.port = (uint16_t)v; }
        else if (IS("-t") || IS("--threads")) { NUM(0, 1024); kp.n_threads = (int)v; }
        else if (IS("--model-name")) { NEED(name = VAL()); }
        else if (IS("--log-format")) {
            const char *f = VAL();
            NEED(f);
            if (!strcmp(f, "text")) sp.log_format = 1;
            else if (!strcmp(f, "json")) sp.log_format = 2;
            else if (!strcmp(f, "none")) sp.log_format = 0;
            else {
                fprintf(stderr, "kipp-server: --log-format must be text, json or none (got '%s')\n", f);
                return 2;
            }
        }
        else if (IS("--served-model-name") || IS("--model-alias")) {
            const char *id = VAL();
            NEED(id && *id);
            if (IS("--served-model-name") && strcmp(id, "*") != 0) name = id;
            else if (n_aliases == MAX_LIST) {
                fprintf(stderr, "kipp-server: at most %d model aliases\n", MAX_LIST);
                return 2;
            } else aliases[n_aliases++] = id;
        }
        else if (IS("-c") || IS("--ctx-size")) { NUM(16, 1u << 20); kp.n_ctx = (uint32_t)v; }
        else if (IS("--parallel")) { NUM(1, 256); kp.max_running = (uint32_t)v; }
        else if (IS("--kv-tokens")) { NUM(16, 1u << 24); kp.n_kv_tokens = (uint32_t)v; }
        else if (IS("--kv-memory")) {
            const char *b = VAL();
            NEED(b);
            if (!kipp_cli_bytes("kipp-server", a, b, 1, UINT64_MAX, &kp.kv_memory)) return 2;
        }
        else if (IS("--queue")) { NUM(1, 1u << 16); kp.max_queue = (uint32_t)v; }
        else if (IS("--batch-tokens")) { NUM(1, 1u << 16); kp.batch_tokens = (uint32_t)v; }
        else if (IS("--prefill-step-ms")) {
            const char *x = VAL();
            NEED(x);
            if (!number_or_off(a, x, 1.0f, 3600000.0f, &kp.prefill_step_s)) return 2;
            if (kp.prefill_step_s > 0) kp.prefill_step_s /= 1000.0;
        }
        else if (IS("--prefill-busy-ms")) {
            const char *x = VAL();
            NEED(x);
            if (!number_or_off(a, x, 1.0f, 3600000.0f, &kp.prefill_busy_s)) return 2;
            if (kp.prefill_busy_s > 0) kp.prefill_busy_s /= 1000.0;
        }
        else if (IS("--fair-share")) {
            const char *x = VAL();
            NEED(x);
            if (!number_or_off(a, x, 0.0f, 100.0f, &kp.fair_share)) return 2;
            if (kp.fair_share == 0) kp.fair_share = 1e-9; /* 0 here: the bulk rows wait (fair.h) */
        }
        else if (IS("--max-body")) { NUM(1024, 1ull << 32); sp.max_body = (size_t)v; }
        else if (IS("--max-prompt-tokens")) { NUM(1, 1u << 24); sp.max_prompt_tokens = (uint32_t)v; }
        else if (IS("--max-tokens")) { NUM(1, 1u << 24); sp.default_max_tokens = (uint32_t)v; }
        else if (IS("--no-prefix-cache")) { no_prefix = 1; }
        else if (IS("--reranking")) { sp.reranking = 1; }
        else if (IS("--prefix-cache-entries")) { NUM(1, 4096); kp.prefix_cache_entries = (uint32_t)v; }
        else if (IS("--kv-events")) { NEED((kvp.endpoint = VAL()) && *kvp.endpoint); }
        else if (IS("--kv-events-replay")) { NEED((kvp.replay = VAL()) && *kvp.replay); }
        else if (IS("--kv-events-topic")) { NEED(kvp.topic = VAL()); }
        else if (IS("--kv-events-hash-seed")) { NEED(kvp.hash_seed = VAL()); }
        else if (IS("--kv-events-hash")) {
            const char *f = VAL();
            NEED(f);
            if (strcmp(f, "int") && strcmp(f, "bytes")) {
                fprintf(stderr, "kipp-server: --kv-events-hash expects int or bytes, got '%s'\n", f);
                return 2;
            }
            kvp.hash_bytes = !strcmp(f, "bytes");
        }
        else if (IS("--api-key")) { NEED(api_key = VAL()); }
        else if (IS("--api-key-file")) { NEED(key_file = VAL()); }
        else if (IS("--max-connections")) { NUM(1, 65536); sp.max_connections = (uint32_t)v; }
        else if (IS("--max-connections-per-ip")) {
            NUM(0, 65536);
            sp.max_connections_per_ip = v ? (uint32_t)v : KIPP_SERVER_NO_PER_IP_LIMIT;
        }
        else if (IS("--read-timeout")) { NUM(1, 86400); sp.read_timeout_s = (uint32_t)v; }
        else if (IS("--write-timeout")) { NUM(1, 86400); sp.write_timeout_s = (uint32_t)v; }
        else if (IS("--max-parsing")) { NUM(1, 1024); sp.max_parsing = (uint32_t)v; }
        else if (IS("--shutdown-timeout")) { NUM(0, 86400); shutdown_timeout = (unsigned)v; }
        else if (IS("--drain-delay")) { NUM(0, 86400); drain_delay = (unsigned)v; }
        else if (IS("--metrics-compat")) {
            const char *m = VAL();
            NEED(m);
            if (strcmp(m, "vllm") != 0) {
                fprintf(stderr, "kipp-server: --metrics-compat accepts vllm (got '%s')\n", m);
                return 2;
            }
            sp.metrics_vllm = 1;
        }
        else if (IS("--content-special-tokens")) {
            const char *m = VAL();
            NEED(m);
            if (strcmp(m, "parse") && strcmp(m, "text")) {
                fprintf(stderr, "kipp-server: --content-special-tokens expects parse or text, got '%s'\n", m);
                return 2;
            }
            sp.content_text = strcmp(m, "text") == 0;
        }
        else if (IS("--allowed-host") || IS("--cors-origin")) {
            const int is_host = IS("--allowed-host");
            const char *h = VAL();
            NEED(h && *h);
            if ((is_host ? n_hosts : n_origins) == MAX_LIST) {
                fprintf(stderr, "kipp-server: at most %d %s flags\n", MAX_LIST, a);
                return 2;
            }
            if (is_host) hosts[n_hosts++] = h;
            else origins[n_origins++] = h;
        }
        else if ((r = kipp_cli_runtime_flag("kipp-server", argc, argv, &i, &rt)) != 0 ||
                 (r = kipp_cli_spec_flag("kipp-server", argc, argv, &i, &spec)) != 0) {
            if (r == 2) return 2;
        }
        else {
            fprintf(stderr, "kipp-server: unknown option '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "kipp-server: --model FILE.gguf is required (see --help)\n");
        return 2;
    }
    if (!kipp_cli_runtime_finish("kipp-server", &rt)) return 2;
    if (!kipp_cli_spec_finish("kipp-server", &spec)) return 2;
    if (kp.n_kv_tokens && kp.kv_memory) {
        fprintf(stderr, "kipp-server: give --kv-tokens (the pool in tokens) or --kv-memory (a "
                        "cap in bytes), not both\n");
        return 2;
    }
    kp.backend = rt.backend;
    kp.isa = rt.isa;
    kp.device = rt.device;
    kp.kv_type = rt.kv_type;
    kp.kv_type_v = rt.kv_type_v;
    if (api_key && key_file) {
        fprintf(stderr, "kipp-server: give --api-key or --api-key-file, not both\n");
        return 2;
    }
    if (api_key && !*api_key) {
        fprintf(stderr, "kipp-server: --api-key must not be empty\n");
        return 2;
    }
    if (!kvp.endpoint && (kvp.replay || kvp.topic || kvp.hash_seed || kvp.hash_bytes)) {
        fprintf(stderr, "kipp-server: the --kv-events-* options need --kv-events ENDPOINT\n");
        return 2;
    }
    if (no_prefix) kp.prefix_cache_entries = 0;
    sp.prefix_caching = kp.prefix_cache_entries > 0;
    char *key = key_file ? read_key_file(key_file) : NULL;
    if (key_file && !key) return 2;
    char *model_name = name ? strdup(name) : default_name(model);
    sp.api_key = key ? key : api_key;
    sp.model_name = model_name;
    sp.allowed_hosts = hosts;
    sp.n_allowed_hosts = n_hosts;
    sp.model_aliases = aliases;
    sp.n_model_aliases = n_aliases;
    sp.cors_origins = origins;
    sp.n_cors_origins = n_origins;

    /* SIGINT/SIGTERM are taken by sigwait below; every thread inherits the mask */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[KIPP_ERR_LEN];
    int rc = 1;
    kipp_server *sv = NULL;
    kipp_model *m = NULL, *dm = NULL;
    kipp_sched *sched = NULL;
    oai_embedder *emb = NULL;
    raise_nofile(sp.max_connections ? sp.max_connections : KIPP_SERVER_DEFAULT_MAX_CONNECTIONS);
    if (kipp_server_start(&sp, &sv, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp-server: %s\n", err);
        goto done;
    }
    printf("kipp-server: listening on http://%s%s%s:%u\n", strchr(sp.host, ':') ? "[" : "",
           sp.host, strchr(sp.host, ':') ? "]" : "", kipp_server_port(sv));
    fflush(stdout);
    if (kvp.endpoint && kipp_kv_pub_start(&kvp, &kvpub, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp-server: %s\n", err); /* "KV events: cannot bind ..." */
        goto done;
    }
    double load_s = kipp_cli_now(); /* model load, template check, scheduler start */
    if (kipp_model_load(model, &m, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp-server: %s\n", err);
        goto done;
    }
    if (!kipp_cli_rope_apply("kipp-server", &rt.rope, m)) goto done;
    kipp_model_info mi;
    kipp_model_get_info(m, &mi);
    int32_t labels[2];
    char rmsg[KIPP_ERR_LEN];
    const int reranker = rerank_labels(m, sp.reranking, labels, rmsg, sizeof rmsg) == 0;
    if (sp.reranking && !reranker) {
        fprintf(stderr, "kipp-server: --reranking: %s\n", rmsg);
        goto done;
    }
    if (mi.pooling == KIPP_POOLING_LAST) { /* an embedding model: /v1/embeddings only */
        if (spec.draft_model || spec.ngram) {
            fprintf(stderr, "kipp-server: speculative decoding needs a generative model; %s is an "
                            "embedding model\n", model);
            goto done;
        }
        kipp_ctx_params ecp = kipp_ctx_default_params();
        ecp.backend = kp.backend;
        ecp.isa = kp.isa;
        ecp.device = kp.device;
        ecp.kv_type = kp.kv_type;
        ecp.kv_type_v = kp.kv_type_v;
        ecp.n_threads = kp.n_threads;
        ecp.n_ctx = kp.n_ctx;
        if (oai_embedder_init(m, &ecp, &emb, err, sizeof err) != KIPP_OK) {
            kipp_cli_ctx_error("kipp-server", &rt, err);
            goto done;
        }
        fprintf(stderr, "kipp-server: embedding model %s as '%s' (pooling last, %u dimensions, "
                        "inputs up to %u tokens); POST /v1/embeddings; loaded in %.1f ms\n",
                model, model_name, mi.n_embd, oai_embedder_n_ctx(emb),
                (kipp_cli_now() - load_s) * 1e3);
        kipp_server_attach_embedder(sv, m, emb);
        goto serve;
    }
    if (check_template(m) != 0) goto done;
    kipp_spec_params spp;
    if (spec.draft_model || spec.ngram) {
        if (spec.draft_model && kipp_model_load(spec.draft_model, &dm, err, sizeof err) != KIPP_OK) {
            fprintf(stderr, "kipp-server: --draft-model: %s\n", err);
            goto done;
        }
        if (dm && kipp_model_set_rope(dm, &rt.rope, err, sizeof err) != KIPP_OK) {
            fprintf(stderr, "kipp-server: --draft-model: %s\n", err);
            goto done;
        }
        kipp_ctx_params dcp = kipp_ctx_default_params();
        dcp.backend = kp.backend;
        dcp.isa = kp.isa;
        dcp.device = kp.device;
        dcp.kv_type = kp.kv_type;
        dcp.kv_type_v = kp.kv_type_v;
        dcp.n_threads = kp.n_threads;
        spp = kipp_cli_spec_params(&spec, dm, &dcp, 0, 0);
        kp.spec = &spp;
    }
    if (kvpub) kp.kv_events = kipp_kv_pub_sink(kvpub);
    if (kipp_sched_start(m, &kp, &sched, err, sizeof err) != KIPP_OK) {
        kipp_cli_ctx_error("kipp-server", &rt, err);
        goto done;
    }
    load_s = kipp_cli_now() - load_s;
    if (sp.max_prompt_tokens && sp.max_prompt_tokens >= kipp_sched_n_ctx(sched)) {
        fprintf(stderr, "kipp-server: --max-prompt-tokens %u must be below the context size %u\n",
                sp.max_prompt_tokens, kipp_sched_n_ctx(sched));
        goto done;
    }
    kipp_ctx_info ci; /* the start-up line comes before /health says 200 */
    kipp_sched_ctx_info(sched, &ci);
    /* one line though printed in parts: the HTTP threads already log /health requests, and
     * stdio's lock keeps their lines out of it (a fresh-clone make test once saw one inside) */
    flockfile(stderr);
    fprintf(stderr, "kipp-server: model %s as '%s'", model, model_name);
    for (size_t k = 0; k < n_aliases; k++) {
        if (!strcmp(aliases[k], "*")) fprintf(stderr, "%s any name", k == 0 ? " (also" : ",");
        else fprintf(stderr, "%s '%s'", k == 0 ? " (also" : ",", aliases[k]);
    }
    fprintf(stderr, "%s, context %u, %u parallel; ", n_aliases ? ")" : "", kipp_sched_n_ctx(sched),
            kp.max_running);
    kipp_cli_print_ctx_info(stderr, &ci);
    fprintf(stderr, "; loaded in %.1f ms\n", load_s * 1e3);
    funlockfile(stderr);
    if (reranker)
        fprintf(stderr, "kipp-server: a reranker, scored by tokens %d and %d: POST /v1/rerank\n", labels[0],
                labels[1]);
    if (kvpub)
        fprintf(stderr, "kipp-server: KV-cache events on %s%s%s (topic '%s', blocks of %u tokens, "
                        "sha256_cbor hashes seeded '%s', as %s)\n",
                kvp.endpoint, kvp.replay ? ", replay on " : "", kvp.replay ? kvp.replay : "",
                kvp.topic ? kvp.topic : "", ci.kv_block_size, kvp.hash_seed ? kvp.hash_seed : "0",
                kvp.hash_bytes ? "32 bytes" : "integers");
    if (kp.spec)
        fprintf(stderr, "kipp-server: speculative decoding: %s, draft-max %ld%s\n",
                spec.draft_model ? spec.draft_model : "prompt lookup", spec.draft_max,
                spec.fixed ? " (fixed)" : " (adaptive per request)");
    kipp_server_attach(sv, m, sched);
serve:
    printf("kipp-server: ready\n");
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    const char *sig_name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (drain_delay > 0) {
        /* --drain-delay: /health says "draining" while requests are still served, so a
         * balancer's health check takes this replica out before anything is refused */
        kipp_server_announce_drain(sv);
        fprintf(stderr, "kipp-server: %s: /health says draining; still serving new requests for "
                        "%u s (--drain-delay; a second signal ends the delay)\n",
                sig_name, drain_delay);
        const double t_delay = kipp_cli_now() + drain_delay;
        for (double left; (left = t_delay - kipp_cli_now()) > 0;) {
            const double slice = left < 0.2 ? left : 0.2;
            struct timespec ts = {0, (long)(slice * 1e9)};
            if (sigtimedwait(&sigs, NULL, &ts) > 0) {
                fprintf(stderr, "kipp-server: second signal: the drain delay ends %.1f s early\n", left);
                break;
            }
        }
    }
    /* drain: no new connections or requests; those in flight run on until they are done or
     * --shutdown-timeout passes, then are cut with an error. A further signal: now. */
    fprintf(stderr, "kipp-server: %s, draining (%d requests in flight, at most %u s; a%s "
                    "signal exits at once)\n",
            sig_name, kipp_server_active(sv), shutdown_timeout, drain_delay > 0 ? "nother" : " second");
    kipp_server_drain(sv);
    const double t_end = kipp_cli_now() + shutdown_timeout;
    int cut = 0;
    for (;;) {
        const double t = kipp_cli_now();
        if (kipp_server_active(sv) == 0) break;
        if (!cut && t >= t_end) {
            fprintf(stderr, "kipp-server: shutdown timeout: cutting %d requests now (their "
                            "clients get a server_shutdown error)\n",
                    kipp_server_active(sv));
            kipp_server_shutdown(sv);
            cut = 1;
        }
        if (cut && t >= t_end + 10) break; /* endings not taken by stalled clients: give up */
        struct timespec ts = {0, 50 * 1000000L};
        if (sigtimedwait(&sigs, NULL, &ts) > 0) {
            fprintf(stderr, "kipp-server: another signal, exiting now\n");
            fflush(stderr);
            _exit(1);
        }
    }
    fprintf(stderr, "kipp-server: drained, stopping\n");
    rc = 0;
done:
    kipp_server_shutdown(sv);
    kipp_sched_stop(sched);   /* waiting handlers wake up with "cancelled" */
    kipp_server_free(sv);     /* joins the connection threads */
    kipp_sched_free(sched);
    kipp_kv_pub_free(kvpub);  /* after the scheduler: its engine thread publishes */
    oai_embedder_free(emb);
    kipp_model_free(m);
    kipp_model_free(dm);
    free(model_name);
    free(key);
    return rc;
}
