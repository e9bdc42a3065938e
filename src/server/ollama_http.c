/* ollama_http.c — Ollama's routes that need the server: the checks made before an /api/chat or
 * /api/generate request goes to the generation path (the "load the model" call answered at
 * once, options.num_ctx against the server's context), /api/version, /api/tags, /api/show,
 * /api/ps, /api/embed and the old /api/embeddings (on the embeddings path of embeddings.c), and
 * the model-management routes, each answered with an error that says what Kipp does instead.
 * The translation of a generation request and its answer is ollama.c's. Reference:
 * docs/server.md, "Ollama API". */
#include "server/http_int.h"

#include "core/types.h"
#include "model/model.h"
#include "server/ollama.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The body as a JSON object, or NULL (the caller answers 400 with msg). */
static json_t *body_object(conn_state *cs, char *msg, size_t cap) {
    json_error_t je;
    json_t *in = json_loadb(cs->body.data ? cs->body.data : "", cs->body.len, 0, &je);
    if (!in) snprintf(msg, cap, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    else if (!json_is_object(in)) snprintf(msg, cap, "the body must be a JSON object"), json_decref(in), in = NULL;
    return in;
}

static enum MHD_Result send_400(kipp_server *sv, struct MHD_Connection *c, conn_state *cs, const char *msg) {
    return srv_send_error(sv, c, cs, 400, msg, "invalid_request_error", NULL, NULL);
}

/* 404 unless name is served (its ":latest" spelling too: srv_model_served) */
static int model_missing(kipp_server *sv, struct MHD_Connection *c, conn_state *cs, json_t *name,
                         enum MHD_Result *res) {
    char msg[512];
    if (!json_is_string(name) || !json_string_length(name)) {
        *res = send_400(sv, c, cs, "'model' is required (a string)");
        return 1;
    }
    if (srv_model_served(sv, json_string_value(name))) return 0;
    snprintf(msg, sizeof msg, "model '%.200s' not found; this server serves '%.200s' (GET /api/tags lists its names)",
             json_string_value(name), sv->model_name);
    *res = srv_send_error(sv, c, cs, 404, msg, "invalid_request_error", "model", "model_not_found");
    return 1;
}

/* ---- /api/chat and /api/generate: what is decided before the generation path --------------- */

static enum MHD_Result generation(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    char msg[256];
    /* this look is a parse like the generation path's: it takes a parsing slot too */
    if (srv_parse_enter(sv) != 0)
        return srv_send_error(sv, c, cs, 503, "too many requests are being parsed; retry", "server_error", NULL,
                              "overloaded");
    json_t *in = body_object(cs, msg, sizeof msg);
    enum MHD_Result res = MHD_YES;
    long long n_ctx = 0;
    int answered = 1;
    if (!sv->sched) {
        res = srv_send_error(sv, c, cs, 400, "this server runs an embedding model: it cannot generate text; "
                             "use /api/embed", "invalid_request_error", "model", "model_not_generative");
    } else if (!in) {
        answered = 0; /* the generation path answers the parse error */
    } else if (ollama_is_load_call(in, cs->endpoint)) {
        if (!model_missing(sv, c, cs, json_object_get(in, "model"), &res))
            res = srv_send_json(sv, c, cs, 200,
                                ollama_load_json(json_string_value(json_object_get(in, "model")), cs->endpoint));
    } else if (ollama_num_ctx(in, &n_ctx) > 0 && n_ctx > sv->n_ctx) {
        snprintf(msg, sizeof msg, "'options.num_ctx' is %lld; this server's context is %u tokens (kipp-server "
                 "-c sets it)", n_ctx, sv->n_ctx);
        res = send_400(sv, c, cs, msg);
    } else {
        answered = 0;
    }
    json_decref(in);
    srv_parse_leave(sv);
    return answered ? res : srv_handle_generate(sv, c, cs, OAI_CHAT);
}

/* ---- what the model is ------------------------------------------------------------------------- */

typedef struct {
    char family[32];
    char parameter_size[16]; /* "596.05M", "4.0B" */
    char quantization[16];   /* "Q4_K_M", "BF16" */
    char digest[17];         /* hex of a 64-bit hash of the tensor table */
    uint64_t n_params, n_bytes;
} model_facts;

/* llama.cpp's general.file_type names (the index is the value) */
static const char *const file_types[] = {
    "F32", "F16", "Q4_0", "Q4_1", NULL, NULL, NULL, "Q8_0", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S", "Q3_K_M",
    "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ2_XXS", "IQ2_XS", "Q2_K_S", "IQ3_XS",
    "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ3_M", "IQ2_S", "IQ2_M", "IQ4_XS", "IQ1_M", "BF16"};

static void human_count(uint64_t n, char *out, size_t cap) {
    if (n >= 1000000000ull) snprintf(out, cap, "%.1fB", n / 1e9);
    else if (n >= 1000000ull) snprintf(out, cap, "%.2fM", n / 1e6);
    else snprintf(out, cap, "%.2fK", n / 1e3);
}

static void fnv(uint64_t *h, const void *p, size_t n) {
    for (size_t i = 0; i < n; i++) *h = (*h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
}

/* The quantization is general.file_type when the file names one, else the type that holds most
 * of the weights' bytes. The digest hashes the tensors' names, types, shapes and offsets: it
 * tells two files apart without reading gigabytes (it is not the file's sha256). */
static void get_facts(const kipp_model *m, model_facts *f) {
    memset(f, 0, sizeof *f);
    kipp_model_info info;
    kipp_model_get_info(m, &info);
    snprintf(f->family, sizeof f->family, "%s", info.architecture);
    uint64_t h = 0xcbf29ce484222325ull, by_type[64] = {0};
    for (uint64_t i = 0; i < kipp_gguf_n_tensors(m->gguf); i++) {
        const kipp_gguf_tensor *t = kipp_gguf_tensor_at(m->gguf, i);
        f->n_params += t->n_elems;
        f->n_bytes += t->n_bytes;
        by_type[t->type % 64] += t->n_bytes;
        fnv(&h, t->name, strlen(t->name));
        fnv(&h, &t->type, sizeof t->type);
        fnv(&h, t->ne, sizeof t->ne);
        fnv(&h, &t->offset, sizeof t->offset);
    }
    snprintf(f->digest, sizeof f->digest, "%016llx", (unsigned long long)h);
    human_count(f->n_params, f->parameter_size, sizeof f->parameter_size);
    uint32_t ft = 0;
    if (kipp_gguf_get_u32(m->gguf, "general.file_type", &ft, NULL, 0) == KIPP_OK &&
        ft < sizeof file_types / sizeof *file_types && file_types[ft]) {
        snprintf(f->quantization, sizeof f->quantization, "%s", file_types[ft]);
        return;
    }
    uint32_t best = 0;
    for (uint32_t k = 1; k < 64; k++)
        if (by_type[k] > by_type[best]) best = k;
    snprintf(f->quantization, sizeof f->quantization, "%s", kipp_type_name(best));
    for (char *p = f->quantization; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
}

/* The time the server first described its model to an Ollama client: Kipp reads the GGUF, not
 * its file's dates, and the model stays the same for the server's life. */
static time_t t_listed;
static pthread_once_t listed_once = PTHREAD_ONCE_INIT;
static void note_listed(void) { t_listed = time(NULL); }

static void modified_at(char *out, size_t cap) {
    pthread_once(&listed_once, note_listed);
    struct tm tm;
    gmtime_r(&t_listed, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *details_json(const model_facts *f) {
    return json_pack("{s:s, s:s, s:s, s:[s], s:s, s:s}", "parent_model", "", "format", "gguf", "family",
                     f->family, "families", f->family, "parameter_size", f->parameter_size,
                     "quantization_level", f->quantization);
}

/* Ollama's spelling of a name: with its tag (":latest" when it has none) */
static json_t *tagged(const char *name) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s%s", name, strchr(name, ':') ? "" : ":latest");
    return json_string(buf);
}

/* One entry of /api/tags (ps: of /api/ps) for a name the server answers to. */
static json_t *model_entry(const kipp_server *sv, const model_facts *f, const char *name, int ps) {
    char t[40];
    json_t *n = tagged(name);
    json_t *e = json_pack("{s:O, s:o, s:I, s:s, s:o}", "name", n, "model", n, "size", (json_int_t)f->n_bytes,
                          "digest", f->digest, "details", details_json(f));
    if (ps) {
        json_object_set_new(e, "expires_at", json_string("9999-12-31T23:59:59Z")); /* never unloaded */
        json_object_set_new(e, "size_vram", json_integer(0));
        json_object_set_new(e, "context_length", json_integer(sv->n_ctx));
    } else {
        modified_at(t, sizeof t);
        json_object_set_new(e, "modified_at", json_string(t));
    }
    return e;
}

/* /api/tags and /api/ps: the served name, then each alias but "*" */
static char *models_json(const kipp_server *sv, int ps) {
    model_facts f;
    get_facts(sv->m, &f);
    json_t *a = json_array();
    json_array_append_new(a, model_entry(sv, &f, sv->model_name, ps));
    for (size_t i = 0; i < sv->p.n_model_aliases; i++)
        if (strcmp(sv->p.model_aliases[i], "*"))
            json_array_append_new(a, model_entry(sv, &f, sv->p.model_aliases[i], ps));
    json_t *o = json_pack("{s:o}", "models", a);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* The GGUF's scalar metadata (arrays, the vocabulary's among them, are left out; the chat
 * template is /api/show's "template"), as Ollama's model_info shows it. */
static json_t *model_info_json(const kipp_model *m, const model_facts *f) {
    json_t *o = json_object();
    for (uint64_t i = 0; o && i < kipp_gguf_n_kv(m->gguf); i++) {
        const kipp_gguf_str ks = kipp_gguf_key_name(m->gguf, (int64_t)i);
        char key[128];
        if (ks.len >= sizeof key) continue;
        memcpy(key, ks.ptr, ks.len);
        key[ks.len] = 0;
        const kipp_gguf_vtype t = kipp_gguf_key_type(m->gguf, (int64_t)i);
        uint32_t u;
        float x;
        int b;
        kipp_gguf_str s;
        json_t *v = NULL;
        if (t == KIPP_GGUF_STRING && strcmp(key, "tokenizer.chat_template") &&
            kipp_gguf_get_str(m->gguf, key, &s, NULL, 0) == KIPP_OK)
            v = json_stringn(s.ptr, (size_t)s.len); /* NULL when not UTF-8: left out */
        else if ((t == KIPP_GGUF_FLOAT32 || t == KIPP_GGUF_FLOAT64) &&
                 kipp_gguf_get_f32(m->gguf, key, &x, NULL, 0) == KIPP_OK)
            v = json_real(x);
        else if (t == KIPP_GGUF_BOOL && kipp_gguf_get_bool(m->gguf, key, &b, NULL, 0) == KIPP_OK)
            v = json_boolean(b);
        else if (t != KIPP_GGUF_STRING && t != KIPP_GGUF_ARRAY && kipp_gguf_get_u32(m->gguf, key, &u, NULL, 0) == KIPP_OK)
            v = json_integer(u);
        if (v) json_object_set_new(o, key, v);
    }
    if (!json_object_get(o, "general.parameter_count"))
        json_object_set_new(o, "general.parameter_count", json_integer((json_int_t)f->n_params));
    return o;
}

/* What the model can do, in Ollama's words. */
static json_t *capabilities_json(const kipp_server *sv) {
    if (!sv->sched) return json_pack("[s]", "embedding");
    json_t *a = json_pack("[s]", "completion");
    const char *name = NULL;
    kipp_chat_thinking th = KIPP_CHAT_THINK_OFF;
    if (kipp_chat_template_info(sv->m, 1, &name, &th, NULL, 0) == KIPP_OK) {
        if (name && strcmp(name, "chatml")) json_array_append_new(a, json_string("tools"));
        if (th == KIPP_CHAT_THINK_BY_TAG || th == KIPP_CHAT_THINK_IN_PROMPT)
            json_array_append_new(a, json_string("thinking"));
    }
    return a;
}

static enum MHD_Result show(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    char msg[256], t[40];
    json_t *in = body_object(cs, msg, sizeof msg);
    if (!in) return send_400(sv, c, cs, msg);
    json_t *name = json_object_get(in, "model");
    if (!name || json_is_null(name)) name = json_object_get(in, "name"); /* Ollama's older field */
    enum MHD_Result res;
    if (model_missing(sv, c, cs, name, &res)) return json_decref(in), res;
    model_facts f;
    get_facts(sv->m, &f);
    kipp_gguf_str tmpl = {"", 0};
    if (kipp_gguf_find_key(sv->m->gguf, "tokenizer.chat_template") >= 0)
        (void)kipp_gguf_get_str(sv->m->gguf, "tokenizer.chat_template", &tmpl, NULL, 0);
    char params[64], modelfile[768];
    snprintf(params, sizeof params, "num_ctx %u", sv->n_ctx);
    snprintf(modelfile, sizeof modelfile,
             "# kipp-server serves one GGUF file (its --model); this is not an Ollama Modelfile\n"
             "FROM %.300s\nPARAMETER num_ctx %u\n", sv->model_name, sv->n_ctx);
    modified_at(t, sizeof t);
    json_t *o = json_pack("{s:s, s:s, s:s%, s:o, s:o, s:o, s:s}", "modelfile", modelfile, "parameters", params,
                          "template", tmpl.ptr ? tmpl.ptr : "", (size_t)tmpl.len, "details", details_json(&f),
                          "model_info", model_info_json(sv->m, &f), "capabilities", capabilities_json(sv),
                          "modified_at", t);
    json_decref(in);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return srv_send_json(sv, c, cs, 200, s);
}

/* ---- /api/embed and /api/embeddings --------------------------------------------------------- */

static int served_cb(const void *sv, const char *name) { return srv_model_served(sv, name); }

/* truncate (Ollama's default): an input longer than the context is cut to its first tokens
 * (the EOS the model pools on, when it appends one, kept last), so every input becomes token
 * ids; otherwise a long input is the embedder's 400. 0, or -1 with msg set. */
static int truncate_inputs(const kipp_server *sv, json_t *inputs, char *msg, size_t cap) {
    kipp_model_info info;
    kipp_model_get_info(sv->m, &info);
    for (size_t i = 0; i < json_array_size(inputs); i++) {
        json_t *s = json_array_get(inputs, i);
        int32_t *ids = NULL;
        size_t n = 0;
        char err[KIPP_ERR_LEN];
        if (kipp_tokenize_alloc(sv->m, json_string_value(s), json_string_length(s), 1, &ids, &n, err,
                                sizeof err) != KIPP_OK) {
            free(ids);
            snprintf(msg, cap, "input[%zu]: %.400s", i, err);
            return -1;
        }
        const size_t keep = n + (size_t)info.add_eos > sv->n_ctx ? sv->n_ctx - (size_t)info.add_eos : n;
        json_t *a = json_array();
        for (size_t k = 0; k < keep; k++) json_array_append_new(a, json_integer(ids[k]));
        if (info.add_eos) json_array_append_new(a, json_integer(info.eos_id));
        free(ids);
        json_array_set_new(inputs, i, a);
    }
    return 0;
}

/* The OpenAI embeddings request for an Ollama one: input (a string or strings; /api/embeddings:
 * prompt), dimensions, truncate. NULL with msg set: a 400. An empty input (Ollama's load call)
 * sets *empty. */
static json_t *embed_request(const kipp_server *sv, json_t *in, int legacy, int *empty, char *msg, size_t cap) {
    json_t *v = json_object_get(in, legacy ? "prompt" : "input");
    json_t *inputs = json_array();
    if (json_is_string(v)) {
        if (json_string_length(v)) json_array_append(inputs, v);
    } else if (json_is_array(v) && !legacy) {
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (!json_is_string(json_array_get(v, i))) {
                snprintf(msg, cap, "'input' must be a string or an array of strings");
                return json_decref(inputs), NULL;
            }
            json_array_append(inputs, json_array_get(v, i));
        }
    } else if (v && !json_is_null(v)) {
        snprintf(msg, cap, "'%s' must be a string%s", legacy ? "prompt" : "input", legacy ? "" : " or an array of strings");
        return json_decref(inputs), NULL;
    }
    json_t *tr = json_object_get(in, "truncate");
    if (tr && !json_is_null(tr) && !json_is_boolean(tr)) {
        snprintf(msg, cap, "'truncate' must be true or false");
        return json_decref(inputs), NULL;
    }
    json_t *opts = json_object_get(in, "options"); /* nothing in them applies to an embedding */
    if (opts && !json_is_null(opts) && !json_is_object(opts)) {
        snprintf(msg, cap, "'options' must be an object");
        return json_decref(inputs), NULL;
    }
    *empty = json_array_size(inputs) == 0;
    if (!*empty && !json_is_false(tr) && truncate_inputs(sv, inputs, msg, cap)) return json_decref(inputs), NULL;
    json_t *o = json_pack("{s:O, s:o}", "model", json_object_get(in, "model"), "input", inputs);
    json_t *dims = json_object_get(in, "dimensions");
    if (dims && !json_is_null(dims) && !legacy) json_object_set(o, "dimensions", dims);
    return o;
}

/* The embedder's OpenAI answer (status 200) as Ollama's: {model, embeddings, durations, count}
 * or, legacy, {embedding}. */
static char *embed_answer(json_t *oai, const char *model, int legacy, double t0) {
    json_t *vecs = json_array();
    json_t *data = json_object_get(oai, "data");
    for (size_t i = 0; i < json_array_size(data); i++)
        json_array_append(vecs, json_object_get(json_array_get(data, i), "embedding"));
    json_t *o;
    if (legacy) {
        o = json_pack("{s:o}", "embedding",
                      json_array_size(vecs) ? json_incref(json_array_get(vecs, 0)) : json_array());
        json_decref(vecs);
    } else {
        const json_int_t n = json_integer_value(json_object_get(json_object_get(oai, "usage"), "prompt_tokens"));
        o = json_pack("{s:s, s:o, s:I, s:i, s:I}", "model", model, "embeddings", vecs, "total_duration",
                      (json_int_t)((srv_now() - t0) * 1e9), "load_duration", 0, "prompt_eval_count", n);
    }
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    return s;
}

static enum MHD_Result embed(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    char msg[512];
    const int legacy = !strcmp(cs->path, "/api/embeddings");
    json_t *in = body_object(cs, msg, sizeof msg);
    if (!in) return send_400(sv, c, cs, msg);
    enum MHD_Result res;
    if (model_missing(sv, c, cs, json_object_get(in, "model"), &res)) return json_decref(in), res;
    if (!sv->emb) {
        snprintf(msg, sizeof msg, "this server runs a generative model ('%.200s'); %s needs an embedding model "
                 "(e.g. Qwen3-Embedding) served by its own kipp-server", sv->model_name, cs->path);
        json_decref(in);
        return srv_send_error(sv, c, cs, 400, msg, "invalid_request_error", "model", "model_not_embedding");
    }
    static const char *const known[] = {"model", "input", "prompt", "truncate", "dimensions", "options",
                                        "keep_alive", NULL};
    const char *key;
    json_t *v;
    json_object_foreach(in, key, v) { /* a field outside the API: ignored, and said once */
        int k = 0;
        while (known[k] && strcmp(known[k], key)) k++;
        if (!known[k]) {
            srv_note_ignored_field(sv, key);
            break;
        }
    }
    int empty = 0;
    json_t *req = embed_request(sv, in, legacy, &empty, msg, sizeof msg);
    if (!req) return json_decref(in), send_400(sv, c, cs, msg);
    srv_hold_active(sv, cs); /* the drain waits for it */
    int status = 200;
    json_t *oai = NULL;
    if (!empty) {
        char *body = json_dumps(req, JSON_COMPACT);
        char *js = body ? oai_embeddings_answer(sv->emb, sv->m, 1, body, strlen(body), sv->model_name, served_cb,
                                                sv, &status)
                        : NULL;
        free(body);
        oai = js ? json_loads(js, 0, NULL) : NULL;
        free(js);
        if (!oai) status = 500;
    }
    char *out = NULL;
    if (status == 200) {
        out = embed_answer(oai, json_string_value(json_object_get(in, "model")), legacy, cs->t_start);
    } else { /* the embedder's OpenAI error, in Ollama's shape */
        const char *m = json_string_value(json_object_get(json_object_get(oai, "error"), "message"));
        out = ollama_error_json(m ? m : "out of memory");
    }
    json_decref(oai);
    json_decref(req);
    json_decref(in);
    return srv_send_json(sv, c, cs, status, out);
}

/* ---- model management: what Kipp does instead ------------------------------------------------- */

static const char *const instead[][2] = {
    {"/api/pull", "kipp-server does not download models: it serves the one GGUF file given with --model. "
                  "Download a GGUF (or convert a checkpoint with tools/convert_to_gguf.py and quantize it with "
                  "kipp-quantize), then start kipp-server --model FILE"},
    {"/api/push", "kipp-server does not upload models: it serves the one GGUF file given with --model; "
                  "share that file"},
    {"/api/create", "kipp-server does not create models from a Modelfile: convert a checkpoint with "
                    "tools/convert_to_gguf.py (kipp-quantize quantizes it), then start kipp-server --model "
                    "FILE; sampling settings are request options"},
    {"/api/copy", "kipp-server does not copy models: give the served model more names with kipp-server "
                  "--model-alias NAME (or rename it with --model-name)"},
    {"/api/delete", "kipp-server does not delete models: it serves the one GGUF file given with --model "
                    "until it stops"},
};

static enum MHD_Result manage(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    for (size_t i = 0; i < sizeof instead / sizeof *instead; i++)
        if (!strcmp(cs->path, instead[i][0]))
            return srv_send_error(sv, c, cs, 501, instead[i][1], "invalid_request_error", NULL, "not_implemented");
    return srv_send_error(sv, c, cs, 404, "no such endpoint", "not_found_error", NULL, NULL);
}

enum MHD_Result srv_handle_ollama(kipp_server *sv, struct MHD_Connection *c, conn_state *cs) {
    switch (cs->endpoint) {
    case M_EP_OLLAMA_CHAT:
    case M_EP_OLLAMA_GENERATE: return generation(sv, c, cs);
    case M_EP_OLLAMA_EMBED: return embed(sv, c, cs);
    case M_EP_OLLAMA_MANAGE: return manage(sv, c, cs);
    default: break;
    }
    if (!strcmp(cs->path, "/api/version")) {
        json_t *o = json_pack("{s:s}", "version", OLLAMA_API_VERSION);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        return srv_send_json(sv, c, cs, 200, s);
    }
    if (!strcmp(cs->path, "/api/show")) return show(sv, c, cs);
    return srv_send_json(sv, c, cs, 200, models_json(sv, !strcmp(cs->path, "/api/ps")));
}
