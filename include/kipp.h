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
    KIPP_ERR_NUMERIC,       /* NaN/Inf in weights or activations */
    KIPP_ERR_KV_FULL,       /* the KV block pool has no free block left for the request */
    KIPP_ERR_BUSY           /* a bounded queue is full: try again later (the server's 503) */
} kipp_status;

/* Human-readable name of a status code ("ok", "format error", ...). Static storage. */
const char *kipp_status_str(kipp_status s);

#define KIPP_ERR_LEN 512 /* a comfortable size for error buffers */

/* ---- model + context ---------------------------------------------------------------- */

typedef struct kipp_model kipp_model; /* weights (mmapped GGUF) + hyper-parameters + vocab */
typedef struct kipp_ctx kipp_ctx;     /* sequences in one KV block pool, scratch, backend */

/* Element type of the KV cache. Each context chooses one for K and one for V (the same
 * unless kv_type_v says otherwise); the backend stores the rows in it and attention reads
 * them back (docs/kv-cache.md, "KV types"). */
typedef enum {
    KIPP_KV_TYPE_DEFAULT = 0, /* the backend's default: f32 on cpu-ref, f16 on cpu */
    KIPP_KV_TYPE_F32 = 1,
    KIPP_KV_TYPE_F16 = 2,     /* IEEE half, round to nearest even */
    KIPP_KV_TYPE_BF16 = 3,    /* bfloat16, round to nearest even */
    KIPP_KV_TYPE_Q8_0 = 4,    /* ggml's Q8_0 blocks: 32 int8 + an f16 scale (34 bytes) */
    KIPP_KV_TYPE_Q4_0 = 5     /* ggml's Q4_0 blocks: 32 4-bit (offset 8) + an f16 scale (18) */
} kipp_kv_type;
#define KIPP_KV_TYPE_LAST KIPP_KV_TYPE_Q4_0

/* "default", "f32", "f16", "bf16", "q8_0", "q4_0" (static storage; "?" out of range). */
const char *kipp_kv_type_name(kipp_kv_type t);
/* Parses "f32", "f16", "bf16", "q8_0" or "q4_0" (also "default"); anything else is
 * KIPP_ERR_INVALID_ARG with a message listing the choices. */
kipp_status kipp_kv_type_parse(const char *s, kipp_kv_type *out, char *err, size_t err_len);

typedef struct {
    const char *backend;    /* "cpu-ref", "cpu", "cuda", "metal"; NULL = kipp_backend_default() */
    uint32_t n_ctx;         /* longest sequence; 0 = the model's context length, capped at 4096 */
    int n_threads;          /* backends with threads; 0 = default */
    uint32_t kv_block_size; /* tokens per KV block; 0 = 16 */
    uint32_t n_kv_blocks;   /* blocks in the KV pool; 0 = enough for one sequence of n_ctx */
    kipp_kv_type kv_type;   /* K (and V unless kv_type_v): 0 = the backend's default */
    kipp_kv_type kv_type_v; /* V when it differs from K (llama.cpp's --cache-type-v); 0 = kv_type */
    const char *isa;        /* cpu: kernel level (scalar, avx2, avx512, avx512vnni, neon);
                               NULL = the best this CPU runs. A level the CPU lacks is an
                               error. Ignored by backends without levels. */
    int device;             /* device index for GPU backends; 0 = the first */
    uint32_t n_logits;      /* logits rows cover token ids 0..n_logits-1 only: the lm_head
                               runs over those rows of the output matrix (BPE ids are ranked
                               by merge order, roughly by frequency). A smaller head for a
                               draft model; 0 = n_vocab (every token) */
    int embeddings;         /* 1: kipp_decode_batch writes, per wanted token, the final-norm
                               hidden state ([n_embd] floats) instead of logits, and the
                               lm_head never runs (n_logits is ignored). The only mode a model
                               without an lm_head (an embedding model) accepts. */
} kipp_ctx_params;

/* Comma-separated names of the backends built into this binary, fastest first (static). */
const char *kipp_backend_names(void);
/* The backend a binary uses when none is named: the fastest one built in ("cpu" here). */
const char *kipp_backend_default(void);

kipp_ctx_params kipp_ctx_default_params(void);

/* Loads and validates a Qwen3 GGUF. On failure *out is NULL and err names the problem. */
kipp_status kipp_model_load(const char *path, kipp_model **out, char *err, size_t err_len);
void kipp_model_free(kipp_model *m);

/* Scans every weight for NaN/Inf (slow: reads the whole file). Load already checks the
 * small norm vectors; decode checks every logits vector. */
kipp_status kipp_model_check_weights(const kipp_model *m, char *err, size_t err_len);

/* How an embedding model pools its per-token hidden states into one vector: llama.cpp's
 * enum, as GGUF key qwen3.pooling_type carries it. Kipp runs NONE (a generative model) and
 * LAST (Qwen3-Embedding: the last token's final-norm hidden state); a file naming another
 * type is refused at load. */
typedef enum {
    KIPP_POOLING_NONE = 0,
    KIPP_POOLING_MEAN = 1,
    KIPP_POOLING_CLS = 2,
    KIPP_POOLING_LAST = 3,
    KIPP_POOLING_RANK = 4
} kipp_pooling;

/* "none", "mean", "cls", "last", "rank" (static storage; "?" for a value out of range). */
const char *kipp_pooling_name(kipp_pooling p);

/* RoPE scaling (llama.cpp's <arch>.rope.scaling.type): none, linear (positions / factor) or
 * YaRN as HF transformers computes it (blended inverse frequencies, cos and sin multiplied
 * by the attention factor). Any other type in a file is refused at load, by name. */
typedef enum { KIPP_ROPE_SCALING_NONE = 0, KIPP_ROPE_SCALING_LINEAR = 1, KIPP_ROPE_SCALING_YARN = 2 } kipp_rope_scaling;

/* "none", "linear", "yarn" (static storage; "?" out of range). */
const char *kipp_rope_scaling_name(kipp_rope_scaling t);

typedef struct {
    const char *architecture; /* general.architecture ("qwen3"; static storage) */
    uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    uint32_t n_ctx_train; /* the longest context the model runs: the file's context_length, or
                             rope_orig_ctx * rope_factor where rope scaling makes it longer */
    float rope_theta, rms_eps;
    kipp_rope_scaling rope_scaling;
    float rope_factor;        /* 1 without scaling */
    uint32_t rope_orig_ctx;   /* YaRN's original (pre-training) context; linear: 0 or the same */
    float yarn_attn_factor;   /* multiplies YaRN's magnitude 0.1 ln(factor) + 1 (llama.cpp's
                                 --yarn-attn-factor; 1 by default) */
    float yarn_beta_fast, yarn_beta_slow; /* YaRN's ramp bounds in rotations (32, 1) */
    uint32_t n_ctx_file;      /* <arch>.context_length as the file says */
    /* a mixture-of-experts FFN (qwen3moe); all 0 for a dense model */
    uint32_t n_expert;      /* experts per layer */
    uint32_t n_expert_used; /* experts each token is routed to (top-k) */
    uint32_t n_ff_exp;      /* one expert's FFN size */
    uint32_t expert_norm;   /* 1: the top-k router weights are renormalized to sum 1 */
    int tied_embeddings;
    uint32_t bos_id, eos_id;
    kipp_pooling pooling; /* KIPP_POOLING_NONE unless the file declares an embedding model */
    int has_lm_head;      /* 0: an embedding model without output.weight; contexts must be
                             created with embeddings = 1 */
    int add_eos;          /* tokenizer.ggml.add_eos_token: the tokenizer appends eos_id to
                             every input (Qwen3-Embedding's <|endoftext|>, the pooled token);
                             kipp_tokenize does not, the embeddings endpoint does */
} kipp_model_info;

void kipp_model_get_info(const kipp_model *m, kipp_model_info *out);

/* Overrides the file's rope scaling (the --rope-scaling, --rope-scale, --yarn-* flags):
 * a field left at its "keep" value (type -1, numbers 0) keeps the file's. Call it after
 * kipp_model_load and before any context is created on the model; it checks the result
 * and recomputes n_ctx_train. */
typedef struct {
    int type;            /* kipp_rope_scaling, or -1: keep */
    float factor;        /* > 0; 0: keep */
    uint32_t orig_ctx;   /* 0: keep (YaRN without one uses the file's context_length) */
    float attn_factor;   /* > 0; 0: keep */
    float beta_fast, beta_slow; /* > 0; 0: keep */
} kipp_rope_params;
kipp_status kipp_model_set_rope(kipp_model *m, const kipp_rope_params *p, char *err, size_t err_len);
/* One line such as "yarn x4 (original context 32768, attention factor 1.1386)" or "none". */
void kipp_rope_describe(const kipp_model_info *hp, char *buf, size_t len);

/* Creates a context on the named backend. An unknown or unavailable backend is an error
 * (KIPP_ERR_BACKEND); Kipp never falls back to another backend. */
kipp_status kipp_ctx_init(kipp_model *m, const kipp_ctx_params *p, kipp_ctx **out,
                          char *err, size_t err_len);
void kipp_ctx_free(kipp_ctx *c);

/* The single-sequence API works on sequence 0, which every context has from the start. */

/* Number of tokens already in sequence 0's KV cache. */
uint32_t kipp_ctx_n_past(const kipp_ctx *c);
uint32_t kipp_ctx_n_ctx(const kipp_ctx *c);
/* Forgets everything in sequence 0 after position n_keep (n_keep <= n_past). */
kipp_status kipp_ctx_truncate(kipp_ctx *c, uint32_t n_keep, char *err, size_t err_len);

/* Appends n tokens to sequence 0 at positions n_past..n_past+n-1 and writes the logits of
 * the LAST token into logits (n_vocab floats; n_logits for a context created with n_logits)
 * if logits is not NULL. */
kipp_status kipp_decode(kipp_ctx *c, const int32_t *tokens, uint32_t n, float *logits,
                        char *err, size_t err_len);

/* ---- several sequences in one KV block pool ------------------------------------------- */

/* Sequences are small integer ids; 0 always exists (it cannot be freed, only truncated). A
 * fork shares the source's KV blocks (copy-on-write), so a common prefix is stored once. */
kipp_status kipp_ctx_seq_new(kipp_ctx *c, uint32_t *seq_id, char *err, size_t err_len);
kipp_status kipp_ctx_seq_fork(kipp_ctx *c, uint32_t src, uint32_t *dst, char *err,
                              size_t err_len);
kipp_status kipp_ctx_seq_free(kipp_ctx *c, uint32_t seq_id, char *err, size_t err_len);
/* Keeps positions 0..n_keep-1 of a sequence (rollback, e.g. rejected draft tokens). */
kipp_status kipp_ctx_seq_truncate(kipp_ctx *c, uint32_t seq_id, uint32_t n_keep, char *err,
                                  size_t err_len);
/* Tokens in the sequence's KV cache; 0 for an id that is not live. */
uint32_t kipp_ctx_seq_n_past(const kipp_ctx *c, uint32_t seq_id);

/* n tokens of one or more sequences, decoded in one call. Within each sequence the tokens
 * appear in position order and continue it: the first at the sequence's n_past, the next
 * at n_past + 1, ...; tokens of different sequences may interleave. */
typedef struct {
    uint32_t n;                 /* tokens in the batch */
    const int32_t *tokens;      /* [n] token ids */
    const uint32_t *seq_ids;    /* [n] sequence of each token; NULL = all in sequence 0 */
    const uint32_t *positions;  /* [n] position of each token; NULL = continue each sequence */
    const uint8_t *want_logits; /* [n] nonzero = return this token's logits; NULL = every token */
} kipp_batch;

/* Decodes a batch and writes one row of n_vocab logits per wanted token, in batch order,
 * into logits ([n_wanted][n_vocab], or [n_wanted][n_logits] for a context created with
 * n_logits; may be NULL when no token is wanted). Everything (ids,
 * positions, context and pool room) is validated before any state changes: on an error no
 * sequence has moved. KIPP_ERR_KV_FULL: the pool is short of blocks (free or truncate
 * sequences and retry). */
kipp_status kipp_decode_batch(kipp_ctx *c, const kipp_batch *batch, float *logits, char *err,
                              size_t err_len);

/* KV memory accounting for the context's block pool. */
typedef struct {
    uint32_t block_size;        /* tokens per block */
    uint32_t n_blocks;          /* blocks in the pool */
    uint32_t n_blocks_used;     /* referenced by at least one sequence */
    uint32_t n_blocks_free;
    uint32_t n_blocks_shared;   /* referenced by two or more sequences (a forked prefix) */
    uint32_t n_seqs;            /* live sequences */
    uint64_t n_tokens;          /* sum of the live sequences' lengths (shared prefixes count
                                   once per sequence) */
    uint64_t n_slots_filled;    /* token slots holding K/V in used blocks (shared: once) */
    uint64_t n_bytes_per_token; /* K + V of one token, all layers */
    uint64_t n_bytes_per_block;
    uint64_t n_bytes_total;     /* the whole pool */
    uint64_t n_bytes_used;      /* n_blocks_used * n_bytes_per_block */
} kipp_kv_stats;

void kipp_ctx_kv_stats(const kipp_ctx *c, kipp_kv_stats *out);

/* What a context runs on, for start-up lines and `kipp --info`. Strings are static or live
 * as long as the context. */
typedef struct {
    const char *backend;        /* backend name */
    const char *isa;            /* kernel level in use ("scalar" for cpu-ref) */
    int n_threads;              /* compute threads in use */
    uint64_t weights_repacked;  /* bytes of weights the backend repacked at load into its
                                   kernels' layout (resident beside the file's pages; the
                                   cpu backend releases the packed tensors' file pages) */
    kipp_kv_type kv_type;       /* K's, resolved: never KIPP_KV_TYPE_DEFAULT */
    kipp_kv_type kv_type_v;     /* V's, resolved (kv_type unless the context asked otherwise) */
    uint32_t n_ctx;             /* longest sequence */
    uint32_t kv_block_size, kv_blocks;
    uint64_t kv_bytes_per_token; /* K + V of one token, all layers, in their types */
    uint64_t kv_bytes;           /* the whole pool (reserved; pages are touched on use) */
    uint32_t n_logits;           /* floats in one logits row (n_vocab unless limited; n_embd
                                    for an embeddings context) */
    int embeddings;              /* rows are final-norm hidden states, not logits */
    const char *rope;            /* the model's rope scaling as kipp_rope_describe writes it
                                    (lives as long as the context) */
    const char *kernels;         /* JSON object: per weight type of the model, the kernels in
                                    use ({"decode", "many": levels, "packed", "why"}); NULL
                                    where the backend has one kernel per type */
} kipp_ctx_info;

void kipp_ctx_get_info(const kipp_ctx *c, kipp_ctx_info *out);

/* Recomputes the whole sequence tokens[0..n-1] from scratch, without reading any KV cache,
 * and writes the logits of the last token. The oracle for the cached-decode gate. */
kipp_status kipp_forward_nocache(kipp_ctx *c, const int32_t *tokens, uint32_t n,
                                 float *logits, char *err, size_t err_len);

/* ---- tokenizer ------------------------------------------------------------------------ */

/* Encodes UTF-8 text to token ids exactly as HF `tokenizers` does (NFC, the Qwen2 split,
 * byte-level BPE; invalid UTF-8 is first repaired like Python's decode(errors="replace")).
 * parse_special = 1 matches every added token (<|im_start|>, <think>, ...) as HF's encode
 * does; 0 is HF's split_special_tokens=True: special tokens are plain text, non-special
 * added tokens such as <think> are still matched. *n_out receives the number of ids; if it exceeds cap nothing is
 * written and KIPP_ERR_INVALID_ARG is returned (call again with a larger buffer). */
kipp_status kipp_tokenize(const kipp_model *m, const char *text, size_t len, int parse_special,
                          int32_t *ids, size_t cap, size_t *n_out, char *err, size_t err_len);

/* The same, into a malloc'd array of exactly the ids the text encodes to (*ids, *n_out;
 * free()): no buffer to size. Text can encode to more tokens than it has bytes — NFC may
 * grow it (U+FB2C: 3 bytes -> 6), repaired invalid bytes become U+FFFD — so a caller that
 * sizes a buffer from the byte length must use 3 x len, or this function. */
kipp_status kipp_tokenize_alloc(const kipp_model *m, const char *text, size_t len,
                                int parse_special, int32_t **ids, size_t *n_out, char *err,
                                size_t err_len);

/* kipp_tokenize_alloc with special tokens parsed except where they begin inside one of
 * the n_plain ranges plain[2i] .. plain[2i+1] (byte offsets into text): there they are
 * plain text, as HF's split_special_tokens=True reads them (non-special added tokens such
 * as <think> are still matched). Used to keep user content from injecting <|im_end|>.
 * If text is not valid UTF-8 the whole of it is read that way. */
kipp_status kipp_tokenize_spans(const kipp_model *m, const char *text, size_t len,
                                const size_t *plain, size_t n_plain, int32_t **ids,
                                size_t *n_out, char *err, size_t err_len);

/* Raw bytes of one token (byte-level BPE decoded; control tokens give ""), valid as long
 * as the model lives. */
const char *kipp_token_bytes(const kipp_model *m, int32_t id, size_t *len);
int kipp_token_is_eog(const kipp_model *m, int32_t id);

/* Streaming detokenizer — the one every front end (kipp, kipp-chat, kipp-server) streams
 * generated text through: never emits part of a UTF-8 character; a token that is a byte
 * fragment is held until its character completes; kipp_detokenizer_end emits what is left
 * with invalid bytes replaced by U+FFFD (HF's decode). skip_special follows HF's
 * skip_special_tokens=True: tokens the tokenizer marks special (<|im_end|>, <|endoftext|>,
 * ...; GGUF token type CONTROL) are dropped; added tokens that are not special (<think>,
 * <tool_call>, <|fim_prefix|>, ...) are kept as their text. Streamed output concatenated
 * equals kipp_detokenize of the whole sequence. Tokens of any length are accepted. */
typedef struct kipp_detokenizer kipp_detokenizer;
kipp_status kipp_detokenizer_init(const kipp_model *m, int skip_special, kipp_detokenizer **out,
                                  char *err, size_t err_len);
void kipp_detokenizer_free(kipp_detokenizer *d);
/* Feeds token id. *text points to the text it completes (whole characters, possibly none),
 * in the detokenizer's own buffer, valid until the next call; *n_text is its length.
 * Fails (KIPP_ERR_NOMEM, nothing consumed) only when the buffer cannot grow. */
kipp_status kipp_detokenizer_next(kipp_detokenizer *d, int32_t id, const char **text,
                                  size_t *n_text);
/* End of the stream: the held-back bytes (as one U+FFFD), same contract as _next; the
 * detokenizer is then ready for a new stream. */
kipp_status kipp_detokenizer_end(kipp_detokenizer *d, const char **text, size_t *n_text);
/* Whole-sequence decode into a malloc'd string (free()). */
kipp_status kipp_detokenize(const kipp_model *m, const int32_t *ids, size_t n, int skip_special,
                            char **out, size_t *out_len, char *err, size_t err_len);

/* ---- chat template -------------------------------------------------------------------- */

/* Renders an OpenAI-style chat request body with the model's chat template:
 * {"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": ...,
 *   "reasoning_content"?, "tool_calls"?}, ...], "tools"?: [...],
 *  "add_generation_prompt"?: bool (default true),
 *  "chat_template_kwargs"?: {"enable_thinking": bool (default true)}}.
 * The template carried in the GGUF must be one Kipp implements (the Qwen3 hybrid-thinking
 * template, the Qwen3 Instruct-2507 or Thinking-2507 one, the Qwen2.5 Instruct one, or none:
 * plain ChatML); any other is KIPP_ERR_UNSUPPORTED. The 2507 and Qwen2.5 templates ignore
 * enable_thinking. Output is byte for byte what HF apply_chat_template gives; *out is
 * malloc'd (free()), *out_len its length. Tokenize it with parse_special = 1. */
kipp_status kipp_chat_apply(const kipp_model *m, const char *request_json, size_t len,
                            char **out, size_t *out_len, char *err, size_t err_len);
/* The same, plus where the request's own text landed: *spans (malloc'd, free()) holds
 * *n_spans ranges as 2 * *n_spans byte offsets [begin, end) into *out, covering message
 * content and reasoning, tool-call names and arguments and tool schemas — everything but
 * the template's own markup. Tokenize with kipp_tokenize_spans to read special-token text
 * there as plain text. spans and n_spans may be NULL: then this is kipp_chat_apply. */
kipp_status kipp_chat_apply_spans(const kipp_model *m, const char *request_json, size_t len,
                                  char **out, size_t *out_len, size_t **spans, size_t *n_spans,
                                  char *err, size_t err_len);

/* What the reply to a chat request starts with, given the model's template and the
 * request's enable_thinking. */
typedef enum {
    KIPP_CHAT_THINK_OFF = 0,       /* no reasoning: Instruct-2507, plain ChatML, or the hybrid
                                      template with enable_thinking false (its prompt ends in
                                      an empty think block); a reply that opens with <think>
                                      anyway is still split as reasoning */
    KIPP_CHAT_THINK_BY_TAG = 1,    /* the reply may open with <think> (hybrid, thinking on) */
    KIPP_CHAT_THINK_IN_PROMPT = 2, /* the prompt ends in "<think>\n": the reply starts inside
                                      the reasoning and closes it with </think>
                                      (Thinking-2507, whatever enable_thinking says) */
    KIPP_CHAT_THINK_NEVER = 3,     /* the template knows no reasoning (Qwen2.5, whatever
                                      enable_thinking says): the reply is all content, and a
                                      <think> in it is plain text, never split off */
} kipp_chat_thinking;

/* The model's template: its name ("qwen3-hybrid", "qwen3-instruct-2507",
 * "qwen3-thinking-2507", "qwen2.5-instruct" or "chatml"; static storage; name may be NULL)
 * and what it does with thinking for enable_thinking (0 or 1). An unsupported template is the
 * error kipp_chat_apply gives. */
kipp_status kipp_chat_template_info(const kipp_model *m, int enable_thinking, const char **name,
                                    kipp_chat_thinking *thinking, char *err, size_t err_len);

/* ---- sampling ------------------------------------------------------------------------- */

/* A bias added to one token's logit before anything else (OpenAI's logit_bias: -100 in
 * practice bans the token, +100 forces it). */
typedef struct {
    int32_t id;
    float bias;
} kipp_logit_bias;

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
    const kipp_logit_bias *logit_bias; /* n_logit_bias entries (copied by kipp_sampler_init;
                                          an id repeated: the biases add up; an id outside
                                          the sampler's vocabulary is ignored) */
    uint32_t n_logit_bias;
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
/* Scratch several samplers may share: the vocabulary-sized candidate arrays and histograms
 * a sampling call works in (about 22 bytes per vocabulary entry plus 512 KiB: 3.7 MB for
 * Qwen3's vocabulary, which each sampler otherwise holds, and touches, for itself). Sharing
 * is for samplers that are never called at the same time (one thread samples them in turn,
 * as the scheduler's engine thread does): the scratch holds nothing between calls. */
typedef struct kipp_sampler_scratch kipp_sampler_scratch;
kipp_status kipp_sampler_scratch_init(uint32_t n_vocab, kipp_sampler_scratch **out, char *err,
                                      size_t err_len);
void kipp_sampler_scratch_free(kipp_sampler_scratch *sc); /* NULL is a no-op */
/* s works in sc from now on (its own scratch is freed); sc must outlive s. A scratch made
 * for fewer vocabulary entries than s has is not taken (s keeps its own). */
void kipp_sampler_share_scratch(kipp_sampler *s, kipp_sampler_scratch *sc);

/* ---- speculative decoding (docs/speculative.md) --------------------------------------- */

typedef struct {
    int32_t id;
    float p;
} kipp_token_prob;

/* The processed distribution kipp_sampler_sample draws from: penalties, temperature, top-k,
 * top-p and min-p applied exactly as it applies them, renormalized, as *out[0..n) (the
 * sampler's buffer, valid until the next call). Greedy gives one entry with p = 1. logits
 * are modified in place as by kipp_sampler_sample; nothing is drawn or accepted. */
uint32_t kipp_sampler_dist(kipp_sampler *s, float *logits, const kipp_token_prob **out);
/* Draws one id from dist[0..n) (weights need not sum to 1) with the sampler's generator. */
int32_t kipp_sampler_draw(kipp_sampler *s, const kipp_token_prob *dist, uint32_t n);
/* Verifies a drafted token against the target's logits (modified in place): with p the
 * processed distribution and q[0..nq) the one the draft was drawn from (NULL: a point mass
 * on draft, as for greedy or n-gram drafts), the draft is kept with probability
 * min(1, p(draft) / q(draft)) and *accepted = 1; otherwise *accepted = 0 and the returned
 * token is drawn from normalize(max(0, p - q)). Either way the returned token is
 * distributed exactly as kipp_sampler_sample's; with greedy params it is the argmax. The
 * caller accepts (kipp_sampler_accept) the returned token. */
int32_t kipp_sampler_verify(kipp_sampler *s, float *logits, int32_t draft,
                            const kipp_token_prob *q, uint32_t nq, int *accepted);
/* Starts recording accepts so that kipp_sampler_rollback can undo them (a mark replaces an
 * earlier one). */
void kipp_sampler_mark(kipp_sampler *s);
/* Undoes every accept since kipp_sampler_mark, restoring the penalty history exactly, and
 * ends the recording. 0 if more than 256 accepts were made (only the newest 256 were
 * undone: the history is then not what it was), else 1. */
int kipp_sampler_rollback(kipp_sampler *s);

#ifdef __cplusplus
}
#endif
#endif /* KIPP_H */
