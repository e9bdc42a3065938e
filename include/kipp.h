/* kipp.h — the public C API of Kipp, an inference engine for Qwen3 models.
 * Opaque handles, a status code on everything that can fail, and a caller-given error
 * buffer that receives a human sentence naming what is wrong. The library never prints
 * and never exits. */
#ifndef KIPP_H
#define KIPP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KIPP_OK = 0,
    KIPP_ERR_IO,            /* file missing, unreadable, mmap failed */
    KIPP_ERR_FORMAT,        /* malformed or hostile file contents */
    KIPP_ERR_UNSUPPORTED,   /* valid but not supported: architecture, tensor type, ... */
    KIPP_ERR_NOMEM,         /* allocation failed */
    KIPP_ERR_INVALID_ARG,   /* bad parameter from the caller */
    KIPP_ERR_BACKEND,       /* backend unknown, not built, or failed to start */
    KIPP_ERR_CONTEXT_FULL,  /* sequence would exceed the context length */
    KIPP_ERR_NUMERIC        /* NaN/Inf in weights or activations */
} kipp_status;

/* Human-readable name of a status code ("ok", "format error", ...). Static storage. */
const char *kipp_status_str(kipp_status s);

#define KIPP_ERR_LEN 512 /* a comfortable size for error buffers */

/* ---- model + context ---------------------------------------------------------------- */

typedef struct kipp_model kipp_model; /* weights (mmapped GGUF) + hyper-parameters + vocab */
typedef struct kipp_ctx kipp_ctx;     /* one sequence: KV cache, scratch, backend state   */

typedef struct {
    const char *backend; /* "cpu-ref", "cpu", "cuda", "metal"; NULL means "cpu-ref" */
    uint32_t n_ctx;      /* 0 = the model's context length, capped at 4096 */
    int n_threads;       /* backends with threads; 0 = default */
} kipp_ctx_params;

kipp_ctx_params kipp_ctx_default_params(void);

/* Loads and validates a Qwen3 GGUF. On failure *out is NULL and err names the problem. */
kipp_status kipp_model_load(const char *path, kipp_model **out, char *err, size_t err_len);
void kipp_model_free(kipp_model *m);

/* Scans every weight for NaN/Inf (slow: reads the whole file). Load already checks the
 * small norm vectors; decode checks every logits vector. */
kipp_status kipp_model_check_weights(const kipp_model *m, char *err, size_t err_len);

typedef struct {
    uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx_train;
    float rope_theta, rms_eps;
    int tied_embeddings;
    uint32_t bos_id, eos_id;
} kipp_model_info;

void kipp_model_get_info(const kipp_model *m, kipp_model_info *out);

/* Creates a context on the named backend. An unknown or unavailable backend is an error
 * (KIPP_ERR_BACKEND); Kipp never falls back to another backend. */
kipp_status kipp_ctx_init(kipp_model *m, const kipp_ctx_params *p, kipp_ctx **out,
                          char *err, size_t err_len);
void kipp_ctx_free(kipp_ctx *c);

/* Number of tokens already in the context's KV cache. */
uint32_t kipp_ctx_n_past(const kipp_ctx *c);
uint32_t kipp_ctx_n_ctx(const kipp_ctx *c);
/* Forgets everything after position n_keep (n_keep <= n_past). */
kipp_status kipp_ctx_truncate(kipp_ctx *c, uint32_t n_keep, char *err, size_t err_len);

/* Appends n tokens at positions n_past..n_past+n-1 and writes the logits of the LAST
 * token into logits (n_vocab floats) if logits is not NULL. */
kipp_status kipp_decode(kipp_ctx *c, const int32_t *tokens, uint32_t n, float *logits,
                        char *err, size_t err_len);

/* Recomputes the whole sequence tokens[0..n-1] from scratch, without reading any KV cache,
 * and writes the logits of the last token. The oracle for the cached-decode gate. */
kipp_status kipp_forward_nocache(kipp_ctx *c, const int32_t *tokens, uint32_t n,
                                 float *logits, char *err, size_t err_len);

/* ---- tokenizer ------------------------------------------------------------------------ */

/* Encodes UTF-8 text to token ids. parse_special: match control tokens such as
 * <|im_start|> in the text. *n_out receives the number of ids; if it exceeds cap nothing is
 * written and KIPP_ERR_INVALID_ARG is returned (call again with a larger buffer). */
kipp_status kipp_tokenize(const kipp_model *m, const char *text, size_t len, int parse_special,
                          int32_t *ids, size_t cap, size_t *n_out, char *err, size_t err_len);

/* Raw bytes of one token (byte-level BPE decoded; control tokens give ""), valid as long
 * as the model lives. */
const char *kipp_token_bytes(const kipp_model *m, int32_t id, size_t *len);
int kipp_token_is_eog(const kipp_model *m, int32_t id);

/* ---- sampling ------------------------------------------------------------------------- */

typedef struct {
    float temperature;        /* <= 0: greedy (penalties still apply) */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* in (0, 1]; 1: off */
    float min_p;              /* in [0, 1]; 0: off */
    float repetition_penalty; /* 1: off; HF/llama.cpp style divide-positive/multiply-negative */
    float presence_penalty;   /* 0: off; OpenAI style */
    float frequency_penalty;  /* 0: off; OpenAI style */
    int32_t penalty_last_n;   /* how many recent tokens the penalties look at; -1 = all */
    uint64_t seed;
} kipp_sampler_params;

typedef struct kipp_sampler kipp_sampler;

kipp_sampler_params kipp_sampler_default_params(void);
kipp_status kipp_sampler_init(const kipp_sampler_params *p, uint32_t n_vocab, kipp_sampler **out,
                              char *err, size_t err_len);
void kipp_sampler_free(kipp_sampler *s);
/* Records a token as part of the history the penalties see (prompt and generated). */
void kipp_sampler_accept(kipp_sampler *s, int32_t id);
/* Picks the next token. logits are modified in place (penalties, temperature). */
int32_t kipp_sampler_sample(kipp_sampler *s, float *logits);

#ifdef __cplusplus
}
#endif
#endif /* KIPP_H */
