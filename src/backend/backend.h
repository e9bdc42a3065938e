/* backend.h — the one backend interface: a table of functions each backend implements, and
 * the registry that maps names to tables (registry.c, whose list of backends is
 * backends.def). A backend owns its compute state and its KV storage; the engine keeps only
 * the KV pool's bookkeeping (src/kv) and never touches K/V bytes. Backends never fall back
 * to each other. How to add one: docs/backends.md. */
#ifndef KIPP_BACKEND_H
#define KIPP_BACKEND_H

#include "kipp.h"
#include "kv/kv.h"
#include "model/model.h"

/* What a context asks of its backend (kipp_ctx_params, resolved). */
typedef struct {
    int n_threads;        /* 0 = the backend's default */
    const char *isa;      /* kernel level by name; NULL = the best this machine runs */
    int device;           /* device index (device backends) */
    kipp_kv_type kv_type; /* K's, resolved: one of the backend's kv_types, never DEFAULT */
    kipp_kv_type kv_type_v; /* V's, resolved; differs from kv_type only where kv_split */
    uint32_t n_logits;    /* resolved (1..n_vocab): a logits row is token ids 0..n_logits-1,
                             the first n_logits rows of the output matrix; 0 when
                             embeddings is set */
    int embeddings;       /* rows are the final-norm hidden state [n_embd]; no lm_head runs */
} kipp_backend_options;

/* What a backend can do (static: the same on every machine the binary runs on). */
typedef struct {
    uint64_t weight_types;   /* bit (1 << KIPP_TYPE_x) for each weight type it runs */
    uint32_t kv_types;       /* bit (1 << kipp_kv_type) for each KV type it stores */
    kipp_kv_type kv_default; /* the type a context gets when it names none */
    int kv_split;            /* K and V may have different types (else one type for both) */
    uint32_t max_batch;      /* tokens one decode_batch call takes; 0 = no limit */
} kipp_backend_caps;

typedef struct {
    const char *kind;   /* "host" or the device's name */
    uint64_t total;     /* bytes */
    uint64_t available; /* bytes free now (an estimate) */
} kipp_backend_memory;

/* The shape of the KV storage a pool needs: per block, for each layer, block_size K rows
 * of kv_dim elements of `type` and block_size V rows of `type_v` (0 = `type`). */
typedef struct {
    uint32_t n_layer, kv_dim, block_size;
    kipp_kv_type type, type_v;
} kipp_kv_layout;

typedef struct kipp_backend_ops {
    const char *name;
    void (*caps)(kipp_backend_caps *out);
    /* The memory KV storage would come out of (host RAM, or the device's). */
    kipp_status (*memory)(const kipp_backend_options *o, kipp_backend_memory *out, char *err,
                          size_t err_len);
    /* Allocates the backend's per-context compute state for sequences of up to n_ctx
     * positions. A failure is fatal for the caller: never retried on another backend. */
    kipp_status (*init)(const kipp_model *m, uint32_t n_ctx, const kipp_backend_options *o,
                        void **state, char *err, size_t err_len);
    void (*free)(void *state);
    /* The kernel level and threads in use, and the bytes of weights the backend repacked
     * at load beside the mapped file (0: none) (kipp_ctx_info). */
    void (*describe)(void *state, const char **isa, int *n_threads, uint64_t *weights_repacked);
    /* Optional: a JSON object naming, per weight type of the model, the kernels in use and
     * why (kipp_ctx_info.kernels; lives as long as state). NULL op: one kernel per type. */
    const char *(*kernels)(void *state);

    /* KV storage: n_blocks blocks of the layout, in the backend's memory. The pool (src/kv)
     * holds the returned handle and calls copy_block when a shared block is about to be
     * written (copy-on-write); only the backend reads or writes the bytes. */
    kipp_status (*kv_alloc)(void *state, const kipp_kv_layout *lay, uint32_t n_blocks,
                            void **store, char *err, size_t err_len);
    void (*kv_free)(void *state, void *store);
    void (*kv_copy_block)(void *state, void *store, uint32_t dst, uint32_t src);

    /* Runs a validated batch (every array of b filled, no NULL defaults): token i at
     * position positions[i] of sequence seq_ids[i]. kipp_kv_grow has made room for every
     * token, so each token writes its K/V rows into pool->storage.store and its attention
     * reads positions 0..pos of its own sequence, through the sequence's block table. Writes
     * one row of n_logits logits per wanted token, in batch order (for an embeddings context:
     * one row of n_embd floats, the final-norm hidden state). */
    kipp_status (*decode_batch)(void *state, kipp_kv_pool *pool, const kipp_batch *b,
                                float *logits, char *err, size_t err_len);
    /* Recomputes tokens[0..n-1] from scratch without touching the KV cache; K and V are
     * rounded through the context's KV type as the cache would store them. */
    kipp_status (*forward_nocache)(void *state, const int32_t *tokens, uint32_t n,
                                   float *logits, char *err, size_t err_len);

    /* Optional (NULL: the engine runs such work on its own thread): runs fn(arg, i, ith) for
     * every i in [0, n) on the backend's host threads, ith the thread's index below
     * host_threads(), and returns when all are done. For the engine's per-row host work
     * between batches (sampling, log-probabilities); never called during decode_batch. */
    void (*host_for)(void *state, uint32_t n, void (*fn)(void *arg, uint32_t i, int ith), void *arg);
    int (*host_threads)(void *state);
} kipp_backend_ops;

/* Looks a backend up by name (NULL: kipp_backend_default()). Unknown names and backends not
 * built into this binary are errors (KIPP_ERR_BACKEND) whose message says what to do. */
kipp_status kipp_backend_find(const char *name, const kipp_backend_ops **out, char *err,
                              size_t err_len);

#endif
