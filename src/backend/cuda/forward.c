/* forward.c — the cuda backend's batched forward pass (see forward.h): the operations of
 * src/backend/ops.h on the device (cuda_kernels), through which the one driver
 * (src/backend/program.c) runs the model architecture's layer program (src/model/arch.h)
 * over a chunk of tokens.
 *
 * Weights: the architecture's tensors (arch.c's table, walked per layer: nothing here lists
 * them) go to one device arena. Every matrix (an expert stack whole) is uploaded once, byte
 * for byte in its GGUF block layout (the kernels of mm.cu read the blocks directly); every
 * 1-D tensor (norms, biases) is dequantized on the host and uploaded as f32. The spark build
 * (-DKIPP_CUDA_SPARK, DGX Spark's GB10, whose GPU shares the host's memory) copies no
 * matrix: the mmapped file range holding them is registered with the driver (read-only,
 * mapped) and the kernels read the page cache through its device alias; only the 1-D tensors
 * go to the arena. A layer's device addresses sit in the slots of kipp_layer_weights' fields.
 *
 * A batch runs in chunks of up to CHUNK tokens, layer by layer over all of a chunk's tokens:
 * embedding rows, then per layer the program's ops as the driver's operations, each one or a
 * few kernel launches with cpu-ref's definition (src/backend/cpu_ref/layers.c), e.g. qwen3's
 * RMSNorm -> q, k, v -> per-head q/k RMSNorm -> NEOX RoPE -> K/V stored in the paged cache ->
 * causal paged attention -> wo -> residual -> RMSNorm -> gate, up -> SwiGLU -> down ->
 * residual; qwen2's q/k/v biases in place of the head norms; qwen3moe's mixture of experts in
 * place of the SwiGLU (op_moe_route and below: routed and grouped on the device, no host
 * round trip); then the final norm and the lm_head for the wanted tokens only, HEAD_ROWS rows
 * at a time. Chunks are exact: a later chunk's tokens read the K/V an earlier one stored.
 *
 * Per chunk, everything that varies (token ids, each token's dense sequence index and
 * position, the wanted rows, the RoPE cos/sin tables computed on the host in double exactly
 * as cpu/forward.c does, and the chunk's block tables) is packed into a pinned staging
 * buffer and goes to the device in ONE copy. Decode steps of 1..GRAPH_MAX tokens run from a
 * CUDA graph per token count, keyed by a power-of-two bucket of the block-table width (the
 * context-length bucket; and, while the gates' routing trace is on, the place of its device
 * copy: pin_begin): every kernel argument is then a fixed device address or a value of the
 * key, so replaying the graph after the staging copy is the step; a new bucket recaptures. The head runs outside the graph (its row count varies).
 *
 * Recomputation (forward_nocache) is the same code over a private device store with an
 * identity block table and the context's KV type, so K/V are rounded as the cache stores
 * them. */
#include "backend/cuda/forward.h"

#include "backend/cuda/kernels.h"
#include "backend/moe.h"
#include "backend/ops.h"

#include "core/error.h"
#include "core/types.h"
#include "model/arch.h"
#include "model/rope.h"
#include "model/model.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK 512u     /* tokens per pass over the layers (bounds the activation buffers) */
#define HEAD_ROWS 16u  /* wanted rows per lm_head product (bounds the logits buffer) */
#define GRAPH_MAX 8u   /* decode steps of up to this many tokens replay a CUDA graph */
#define ALIGN 256u     /* device sub-buffer alignment */
#define SCRATCH_SHORT -1 /* a launcher's scratch would exceed what init sized (contract bug) */

#ifdef KIPP_CUDA_SPARK
static const int k_mapped = 1; /* GB10: unified memory, the weights stay in the mapping */
#else
static const int k_mapped = 0;
#endif

/* A layer's device addresses, one slot per kipp_layer_weights field (model.h; the slot is the
 * field's offset over a pointer's size): a matrix's GGUF blocks (an expert stack: all its
 * experts, expert e at e * n_bytes / E), a 1-D tensor's f32 values; NULL where the layer
 * binds nothing. DW / DV read a field's slot. */
#define LW_SLOTS (sizeof(kipp_layer_weights) / sizeof(const kipp_gguf_tensor *))
_Static_assert(sizeof(kipp_layer_weights) % sizeof(const kipp_gguf_tensor *) == 0,
               "kipp_layer_weights holds tensor pointers only");
typedef struct {
    const void *p[LW_SLOTS];
} dev_layer;
#define SLOT_OF(off) ((off) / sizeof(const kipp_gguf_tensor *))
#define DW(d, field) ((d)->p[SLOT_OF(offsetof(kipp_layer_weights, field))])
#define DV(d, field) ((const float *)DW(d, field))

typedef struct {
    cudaGraphExec_t exec;  /* NULL: none captured */
    uint32_t max_blocks;   /* the key besides the token count */
    const void *kv;        /* the storage it was captured over */
    kipp_cuda_moe_pin pin; /* the routing record its kernels read (all zero: none) */
} graph_slot;

typedef struct chunk chunk_t; /* the pass section's: one chunk of tokens */

/* Byte offsets of one chunk's staging area (same on host and device). Fixed for a given
 * (n tokens, table width), which is what lets a graph replay over it. */
typedef struct {
    size_t ids, seq, pos, want, cos, sin, tab, end_fixed;
} stage_layout;

struct kipp_cuda_fwd {
    const kipp_model *m;
    kipp_gguf_tensor head; /* the lm_head's first NL rows; data NULL for embeddings */
    /* H hidden, F MLP, D head dim, Nh / Nkv heads, QD = Nh*D, kv_dim = Nkv*D, NL logits per
     * row (0: embeddings); a mixture of experts: E experts, K chosen per token, Fe an expert's
     * FFN size (0 when dense) */
    uint32_t n_ctx, H, F, D, Nh, Nkv, QD, kv_dim, NL, E, K, Fe;
    int expert_norm;
    float eps;
    kipp_kv_type kv_type;
    cudaStream_t stream;
    double *inv_freq; /* [D/2] model/rope.c's, as cpu-ref uses them */
    double rope_mag;  /* cos/sin magnitude (YaRN's attention factor; 1 otherwise) */
    /* weights */
    unsigned char *warena;  /* device: the matrices (copied build) and the f32 norms */
    void *map_base;         /* spark: the registered host range (page-aligned), else NULL */
    size_t map_len;
    unsigned char *map_dev; /* its device alias */
    int map_registered;     /* 0: read through the host's page tables, nothing registered */
    dev_layer *L;           /* [n_layer] */
    const void *tok_embd, *output;
    const float *out_norm;
    /* activations (device, CHUNK rows; row t is token t of the chunk) */
    unsigned char *aarena;
    float *x;    /* [CHUNK][H]  residual stream */
    float *xn;   /* [CHUNK][H]  normed input of the current block */
    float *q;    /* [CHUNK][QD] queries, heads concatenated */
    float *k;    /* [CHUNK][kv_dim] */
    float *v;    /* [CHUNK][kv_dim] */
    float *att;  /* [CHUNK][QD] attention output */
    float *proj; /* [CHUNK][H]  wo / w_down output */
    float *gate; /* [CHUNK][F]  gate, then silu(gate) * up; MoE: [CHUNK * K][Fe] per pair */
    float *up;   /* [CHUNK][F]  (MoE: [CHUNK * K][Fe]) */
    float *xw;   /* [CHUNK][H]  the wanted rows, final-normed */
    float *lg;   /* [HEAD_ROWS][NL] logits of one head product */
    /* a mixture-of-experts layer (NULL when dense): kernels.h's kipp_cuda_moe_route */
    float *router;      /* [CHUNK][E] router logits, then probabilities */
    float *cw;          /* [CHUNK * K] the chosen experts' weights */
    uint32_t *chosen;   /* [CHUNK * K] the chosen experts, best first */
    uint32_t *slot_at;  /* [CHUNK * K] each (token, slot) pair's group position */
    int32_t *pair_tok;  /* [CHUNK * K] the token of the pair at each group position */
    uint32_t *grp_off;  /* [E + 1] the expert groups' bounds */
    float *ye;          /* [CHUNK * K][H] each pair's expert output, in group order */
    /* ops.h's activations: where each lives (X x, XN xn, Q q, K k, V v, ATT att, PROJ proj,
     * GATE / UP gate / up, the pairs' EGATE / EUP gate / up again and EDOWN ye) and its row
     * length (F for GATE / UP, Fe for EGATE / EUP); NULL where the model has no use for it */
    float *act[KIPP_BUF_COUNT];
    uint32_t ld[KIPP_BUF_COUNT];
    const chunk_t *cur; /* the chunk the operations run on (run_layers) */
    /* the gates' routing trace (moe.h) while one is on in PIN mode, its record in device
     * memory (pin_begin; test runs only) */
    kipp_moe_trace *pin_trace;
    kipp_cuda_moe_pin pin;
    unsigned char *pin_d;
    size_t pin_cap;
    void *mm_scratch, *att_scratch;
    size_t mm_cap, att_cap;
    /* staging: pinned host + device twin, stage_cap bytes each */
    unsigned char *stage_h, *stage_d;
    size_t stage_cap;
    uint32_t *dense; /* [CHUNK] host: the batch sequence id of each dense index */
    graph_slot graphs[GRAPH_MAX + 1]; /* by token count */
    int graphs_on;
    int fault_mode;
    uint32_t fault_blocks;
};

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static uint32_t u32min(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* ---- sizes ---------------------------------------------------------------------------------- */

/* 1 when some layer binds the kipp_layer_weights field at w (KIPP_W): the activations a
 * model needs follow from its weights (a dense FFN binds w_gate; a mixture of experts has
 * n_expert, as cpu-ref sizes them), not from naming its program's ops. */
static int binds(const kipp_model *m, size_t w) {
    for (uint32_t l = 0; l < m->hp.n_layer; l++)
        if (kipp_layer_tensor(m, l, w)) return 1;
    return 0;
}

/* Layer l's tensor of architecture table entry at (NULL: an optional one the file lacks). */
static const kipp_gguf_tensor *layer_tensor(const kipp_model *m, uint32_t l,
                                            const kipp_arch_tensor *at) {
    return *(const kipp_gguf_tensor *const *)((const char *)&m->layers[l] + at->off);
}

/* The weights in upload order, by index i < n_weights: 0 the embeddings, 1 the lm_head (NULL
 * when tied to the embeddings or absent: the embedding's upload serves), 2 the final norm,
 * then per layer the architecture's tensors in its table's order (NULL: an optional tensor
 * the file lacks). *vec: a 1-D tensor (uploaded as f32); *layer, *slot: where it goes
 * (layer UINT32_MAX: a model-level tensor). */
static size_t n_weights(const kipp_model *m) {
    return 3 + (size_t)m->hp.n_layer * m->arch->n_tensors;
}

static const kipp_gguf_tensor *weight_at(const kipp_model *m, size_t i, int *vec,
                                         uint32_t *layer, size_t *slot) {
    *layer = UINT32_MAX;
    *slot = 0;
    *vec = i == 2;
    if (i == 0) return m->tok_embd;
    if (i == 1) {
        if (!m->output || m->output == m->tok_embd || m->output->data == m->tok_embd->data)
            return NULL;
        return m->output;
    }
    if (i == 2) return m->output_norm;
    const size_t nt = m->arch->n_tensors;
    const kipp_arch_tensor *at = &m->arch->tensors[(i - 3) % nt];
    *layer = (uint32_t)((i - 3) / nt);
    *slot = SLOT_OF(at->off);
    *vec = at->ne[1] == KIPP_DIM_NONE;
    return layer_tensor(m, *layer, at);
}

/* Device bytes of the 1-D tensors (f32) and, unless mapped, of the matrices. */
static uint64_t weight_bytes_of(const kipp_model *m, int mapped) {
    uint64_t w = 0;
    for (size_t i = 0; i < n_weights(m); i++) {
        int vec;
        uint32_t l;
        size_t slot;
        const kipp_gguf_tensor *t = weight_at(m, i, &vec, &l, &slot);
        if (t && vec) w += align_up((size_t)t->n_elems * 4);
        else if (t && !mapped) w += align_up(t->n_bytes);
    }
    return w;
}

/* Token counts the scratch is sized for: every decode size up to GRAPH_MAX, then powers of
 * two up to CHUNK (the kernels' scratch grows with n_tok; the list covers their steps). */
static const uint32_t k_ntok[] = {1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256, 512};

/* The matrix-product scratch for any chunk: every layer matrix at every token count (an
 * expert stack (ne[2] set) as kipp_cuda_matmul_experts multiplies it: n_tok * K rows, at
 * most n_tok per expert), and the lm_head's HEAD_ROWS rows. */
static size_t mm_need(const kipp_model *m, uint32_t NL) {
    const kipp_model_info *hp = &m->hp;
    const kipp_arch *a = m->arch;
    size_t cap = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++)
        for (size_t i = 0; i < a->n_tensors; i++) {
            const kipp_arch_tensor *at = &a->tensors[i];
            const kipp_gguf_tensor *t = layer_tensor(m, l, at);
            if (!t || at->ne[1] == KIPP_DIM_NONE) continue;
            const uint32_t n_in = (uint32_t)t->ne[0];
            for (size_t j = 0; j < sizeof k_ntok / sizeof k_ntok[0]; j++) {
                const size_t s = at->ne[2] != KIPP_DIM_NONE
                                     ? kipp_cuda_matmul_experts_scratch_bytes(
                                           t->type, n_in, k_ntok[j] * hp->n_expert_used, k_ntok[j])
                                     : kipp_cuda_matmul_scratch_bytes(t->type, n_in, k_ntok[j]);
                if (s > cap) cap = s;
            }
        }
    if (NL && m->output)
        for (uint32_t r = 1; r <= HEAD_ROWS; r++) {
            const size_t s = kipp_cuda_matmul_scratch_bytes(m->output->type, hp->n_embd, r);
            if (s > cap) cap = s;
        }
    return cap;
}

static size_t att_need(const kipp_model *m, uint32_t n_ctx) {
    size_t cap = 0;
    for (size_t j = 0; j < sizeof k_ntok / sizeof k_ntok[0]; j++) {
        const size_t s = kipp_cuda_attention_scratch_bytes(k_ntok[j], m->hp.n_head,
                                                           m->hp.head_dim, n_ctx);
        if (s > cap) cap = s;
    }
    return cap;
}

/* The activation buffers, in arena order, and their bytes for the model: the dense FFN's
 * only when its layers bind one, the experts' only for a mixture of experts (their per-pair
 * gate / up share the dense buffers' place). alloc_scratch and the start-up size
 * both read this one list. */
enum { B_X, B_XN, B_PROJ, B_XW, B_Q, B_ATT, B_K, B_V, B_GATE, B_UP, B_LG, B_ROUTER, B_CW,
       B_CHOSEN, B_SLOT, B_PAIR, B_GRP, B_YE, B_COUNT };

static void act_sizes(const kipp_model *m, uint32_t NL, size_t *bytes) {
    const kipp_model_info *hp = &m->hp;
    const size_t H = hp->n_embd, QD = (size_t)hp->n_head * hp->head_dim,
                 KV = (size_t)hp->n_head_kv * hp->head_dim;
    const int moe = hp->n_expert != 0;
    const size_t P = moe ? (size_t)CHUNK * hp->n_expert_used : 0; /* (token, slot) pairs */
    size_t ffn = binds(m, KIPP_W(w_gate)) ? (size_t)CHUNK * hp->n_ff : 0;
    if (P * hp->n_ff_exp > ffn) ffn = P * hp->n_ff_exp;
    bytes[B_X] = bytes[B_XN] = bytes[B_PROJ] = bytes[B_XW] = CHUNK * H * 4;
    bytes[B_Q] = bytes[B_ATT] = CHUNK * QD * 4;
    bytes[B_K] = bytes[B_V] = CHUNK * KV * 4;
    bytes[B_GATE] = bytes[B_UP] = ffn * 4;
    bytes[B_LG] = (size_t)HEAD_ROWS * NL * 4;
    bytes[B_ROUTER] = moe ? (size_t)CHUNK * hp->n_expert * 4 : 0;
    bytes[B_CW] = bytes[B_CHOSEN] = bytes[B_SLOT] = bytes[B_PAIR] = P * 4;
    bytes[B_GRP] = moe ? ((size_t)hp->n_expert + 1) * 4 : 0;
    bytes[B_YE] = P * H * 4;
}

static size_t act_bytes(const kipp_model *m, uint32_t NL) {
    size_t bytes[B_COUNT], total = 0;
    act_sizes(m, NL, bytes);
    for (size_t i = 0; i < B_COUNT; i++) total += align_up(bytes[i]);
    return total;
}

static stage_layout layout_for(uint32_t n, uint32_t half) {
    stage_layout s;
    size_t o = 0;
    s.ids = o;  o += align_up((size_t)n * 4);
    s.seq = o;  o += align_up((size_t)n * 4);
    s.pos = o;  o += align_up((size_t)n * 4);
    s.want = o; o += align_up((size_t)n * 4);
    s.cos = o;  o += align_up((size_t)n * half * 4);
    s.sin = o;  o += align_up((size_t)n * half * 4);
    s.tab = o;
    s.end_fixed = o;
    return s;
}

void kipp_cuda_fwd_sizes(const kipp_model *m, uint32_t n_ctx, uint32_t n_logits, int mapped,
                         uint64_t *weight_bytes, uint64_t *scratch_bytes) {
    const uint64_t w = weight_bytes_of(m, mapped);
    /* staging: a full chunk with tables as wide as the context at the default block size */
    const uint32_t mb = (n_ctx + KIPP_KV_DEFAULT_BLOCK_SIZE - 1) / KIPP_KV_DEFAULT_BLOCK_SIZE;
    const uint64_t stage =
        layout_for(CHUNK, m->hp.head_dim / 2).end_fixed + (uint64_t)CHUNK * mb * 4;
    *weight_bytes = w;
    *scratch_bytes = act_bytes(m, n_logits) + align_up(mm_need(m, n_logits)) +
                     align_up(att_need(m, n_ctx)) + stage;
}

/* Every matrix's row length is one the kernels take (kipp_cuda_mm_shape_supported). */
kipp_status kipp_cuda_fwd_check(const kipp_model *m, char *err, size_t err_len) {
    for (size_t i = 0; i < n_weights(m); i++) {
        int vec;
        uint32_t l;
        size_t slot;
        const kipp_gguf_tensor *t = weight_at(m, i, &vec, &l, &slot);
        if (t && !vec && !kipp_cuda_mm_shape_supported(t->type, (uint32_t)t->ne[0]))
            return kipp_errf(err, err_len, KIPP_ERR_UNSUPPORTED,
                             "cuda: tensor %s (%s) has rows of %lld elements; the cuda kernels "
                             "need a multiple of 8 and of the type's block",
                             t->name, kipp_type_name(t->type), (long long)t->ne[0]);
    }
    return KIPP_OK;
}

/* ---- init / free ---------------------------------------------------------------------------- */

static void destroy_graphs(kipp_cuda_fwd *f) {
    for (uint32_t i = 0; i <= GRAPH_MAX; i++) {
        if (f->graphs[i].exec) cudaGraphExecDestroy(f->graphs[i].exec);
        f->graphs[i] = (graph_slot){0};
    }
}

void kipp_cuda_fwd_free(kipp_cuda_fwd *f) {
    if (!f) return;
    if (f->stream) cudaStreamSynchronize(f->stream);
    destroy_graphs(f);
    cudaFree(f->warena);
    cudaFree(f->aarena);
    cudaFree(f->mm_scratch);
    cudaFree(f->att_scratch);
    cudaFree(f->stage_d);
    cudaFree(f->pin_d);
    if (f->stage_h) cudaFreeHost(f->stage_h);
    if (f->map_registered) cudaHostUnregister(f->map_base);
    if (f->stream) cudaStreamDestroy(f->stream);
    free(f->L);
    free(f->inv_freq);
    free(f->dense);
    free(f);
}

static kipp_status cuda_err(char *err, size_t err_len, const char *what, cudaError_t e) {
    return kipp_errf(err, err_len,
                     e == cudaErrorMemoryAllocation ? KIPP_ERR_NOMEM : KIPP_ERR_BACKEND,
                     "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Registers the page range holding every matrix (spark): one registration, the matrices'
 * device addresses are the alias plus their offset in it. The file is mapped read-only, so
 * the registration must be too. */
static kipp_status map_weights(kipp_cuda_fwd *f, char *err, size_t err_len) {
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (size_t i = 0; i < n_weights(f->m); i++) {
        int vec;
        uint32_t l;
        size_t slot;
        const kipp_gguf_tensor *t = weight_at(f->m, i, &vec, &l, &slot);
        if (!t || vec) continue;
        if ((uintptr_t)t->data < lo) lo = (uintptr_t)t->data;
        if ((uintptr_t)t->data + t->n_bytes > hi) hi = (uintptr_t)t->data + t->n_bytes;
    }
    const long page = sysconf(_SC_PAGESIZE);
    const uintptr_t pg = page > 0 ? (uintptr_t)page : 4096;
    lo &= ~(pg - 1);
    hi = (hi + pg - 1) & ~(pg - 1);
    cudaError_t e = cudaHostRegister((void *)lo, hi - lo,
                                     cudaHostRegisterMapped | cudaHostRegisterReadOnly);
    if (e != cudaSuccess) {
        /* a GPU that reads pageable memory through the host's page tables (GB10 over
         * NVLink-C2C) takes the mapping's own addresses; without that, there is no way to
         * run from the mapping and the error is fatal */
        int dev = 0, pageable = 0;
        cudaGetLastError(); /* the failed registration is handled here */
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccessUsesHostPageTables,
                                   dev) != cudaSuccess ||
            !pageable)
            return cuda_err(err, err_len, "registering the mapped weights with the GPU (spark)",
                            e);
        f->map_base = (void *)lo;
        f->map_len = hi - lo;
        f->map_dev = (unsigned char *)lo;
        f->map_registered = 0;
        return KIPP_OK;
    }
    f->map_registered = 1;
    f->map_base = (void *)lo;
    f->map_len = hi - lo;
    void *dev = NULL;
    e = cudaHostGetDevicePointer(&dev, f->map_base, 0);
    if (e != cudaSuccess)
        return cuda_err(err, err_len, "device address of the mapped weights (spark)", e);
    f->map_dev = dev;
    return KIPP_OK;
}

/* The device address of matrix t: its alias in the mapping (spark) or its upload. */
static kipp_status place_matrix(kipp_cuda_fwd *f, const kipp_gguf_tensor *t, size_t *off,
                                const void **out, char *err, size_t err_len) {
    if (f->map_base) {
        *out = f->map_dev + ((uintptr_t)t->data - (uintptr_t)f->map_base);
        return KIPP_OK;
    }
    const cudaError_t e = cudaMemcpy(f->warena + *off, t->data, t->n_bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return cuda_err(err, err_len, "uploading the weights", e);
    *out = f->warena + *off;
    *off += align_up(t->n_bytes);
    return KIPP_OK;
}

/* Dequantizes a 1-D tensor (a norm's weights, a bias) on the host and uploads it as f32. */
static kipp_status place_vector(kipp_cuda_fwd *f, const kipp_gguf_tensor *t, float *tmp,
                                size_t *off, const void **out, char *err, size_t err_len) {
    kipp_dequantize_row(t->type, t->data, tmp, t->n_elems);
    const cudaError_t e = cudaMemcpy(f->warena + *off, tmp, t->n_elems * 4, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return cuda_err(err, err_len, "uploading the norm and bias vectors", e);
    *out = f->warena + *off;
    *off += align_up(t->n_elems * 4);
    return KIPP_OK;
}

static kipp_status upload_weights(kipp_cuda_fwd *f, char *err, size_t err_len) {
    const kipp_model *m = f->m;
    const uint64_t wbytes = weight_bytes_of(m, k_mapped);
    kipp_status st;
    if (k_mapped && (st = map_weights(f, err, err_len)) != KIPP_OK) return st;
    cudaError_t e = cudaMalloc((void **)&f->warena, wbytes);
    if (e != cudaSuccess)
        return cuda_err(err, err_len, "allocating device memory for the weights", e);
    uint64_t vmax = 1; /* the longest 1-D tensor: the host buffer it is dequantized into */
    for (size_t i = 0; i < n_weights(m); i++) {
        int vec;
        uint32_t l;
        size_t slot;
        const kipp_gguf_tensor *t = weight_at(m, i, &vec, &l, &slot);
        if (t && vec && t->n_elems > vmax) vmax = t->n_elems;
    }
    float *tmp = malloc(vmax * sizeof(float));
    if (!tmp) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cuda: out of memory");
    size_t off = 0;
    st = KIPP_OK;
    for (size_t i = 0; st == KIPP_OK && i < n_weights(m); i++) {
        int vec;
        uint32_t l;
        size_t slot;
        const kipp_gguf_tensor *t = weight_at(m, i, &vec, &l, &slot);
        const void *dev = NULL;
        if (!t) continue;
        if (vec) st = place_vector(f, t, tmp, &off, &dev, err, err_len);
        else st = place_matrix(f, t, &off, &dev, err, err_len);
        if (i == 0) f->tok_embd = dev;
        else if (i == 1) f->output = dev;
        else if (i == 2) f->out_norm = dev;
        else f->L[l].p[slot] = dev;
    }
    if (!f->output) f->output = f->tok_embd; /* tied (or no lm_head: never read) */
    free(tmp);
    return st;
}

static kipp_status alloc_scratch(kipp_cuda_fwd *f, char *err, size_t err_len) {
    size_t bytes[B_COUNT];
    act_sizes(f->m, f->NL, bytes);
    cudaError_t e = cudaMalloc((void **)&f->aarena, act_bytes(f->m, f->NL));
    if (e != cudaSuccess) return cuda_err(err, err_len, "allocating the activation buffers", e);
    void *at[B_COUNT];
    unsigned char *p = f->aarena;
    for (size_t i = 0; i < B_COUNT; i++) {
        at[i] = bytes[i] ? p : NULL; /* a buffer the program has no use for stays NULL */
        p += align_up(bytes[i]);
    }
    f->x = at[B_X], f->xn = at[B_XN], f->proj = at[B_PROJ], f->xw = at[B_XW];
    f->q = at[B_Q], f->att = at[B_ATT], f->k = at[B_K], f->v = at[B_V];
    f->gate = at[B_GATE], f->up = at[B_UP], f->lg = at[B_LG];
    f->router = at[B_ROUTER], f->cw = at[B_CW], f->chosen = at[B_CHOSEN];
    f->slot_at = at[B_SLOT], f->pair_tok = at[B_PAIR], f->grp_off = at[B_GRP], f->ye = at[B_YE];
    float *const act[KIPP_BUF_COUNT] = {
        [KIPP_BUF_X] = f->x,       [KIPP_BUF_XN] = f->xn,     [KIPP_BUF_Q] = f->q,
        [KIPP_BUF_K] = f->k,       [KIPP_BUF_V] = f->v,       [KIPP_BUF_ATT] = f->att,
        [KIPP_BUF_PROJ] = f->proj, [KIPP_BUF_GATE] = f->gate, [KIPP_BUF_UP] = f->up,
        [KIPP_BUF_EGATE] = f->gate, [KIPP_BUF_EUP] = f->up,   [KIPP_BUF_EDOWN] = f->ye};
    const uint32_t ld[KIPP_BUF_COUNT] = {
        [KIPP_BUF_X] = f->H,     [KIPP_BUF_XN] = f->H,    [KIPP_BUF_Q] = f->QD,
        [KIPP_BUF_K] = f->kv_dim, [KIPP_BUF_V] = f->kv_dim, [KIPP_BUF_ATT] = f->QD,
        [KIPP_BUF_PROJ] = f->H,  [KIPP_BUF_GATE] = f->F,  [KIPP_BUF_UP] = f->F,
        [KIPP_BUF_EGATE] = f->Fe, [KIPP_BUF_EUP] = f->Fe, [KIPP_BUF_EDOWN] = f->H};
    memcpy(f->act, act, sizeof act);
    memcpy(f->ld, ld, sizeof ld);
    f->mm_cap = mm_need(f->m, f->NL);
    f->att_cap = att_need(f->m, f->n_ctx);
    if (f->mm_cap && (e = cudaMalloc(&f->mm_scratch, f->mm_cap)) != cudaSuccess)
        return cuda_err(err, err_len, "allocating the matrix-product scratch", e);
    if (f->att_cap && (e = cudaMalloc(&f->att_scratch, f->att_cap)) != cudaSuccess)
        return cuda_err(err, err_len, "allocating the attention scratch", e);
    return KIPP_OK;
}

kipp_status kipp_cuda_fwd_init(const kipp_model *m, uint32_t n_ctx, kipp_kv_type kv_type,
                               uint32_t n_logits, kipp_cuda_fwd **out, char *err,
                               size_t err_len) {
    *out = NULL;
    const kipp_model_info *hp = &m->hp;
    kipp_cuda_fwd *f = calloc(1, sizeof *f);
    if (!f) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cuda: out of memory");
    f->m = m;
    f->n_ctx = n_ctx;
    f->kv_type = kv_type;
    f->head = kipp_model_head(m, n_logits);
    f->NL = f->head.data ? (uint32_t)f->head.ne[1] : 0;
    f->H = hp->n_embd;
    f->F = hp->n_ff;
    f->D = hp->head_dim;
    f->Nh = hp->n_head;
    f->Nkv = hp->n_head_kv;
    f->QD = f->Nh * f->D;
    f->kv_dim = f->Nkv * f->D;
    f->eps = hp->rms_eps;
    if (hp->n_expert) {
        f->E = hp->n_expert;
        f->K = hp->n_expert_used;
        f->Fe = hp->n_ff_exp;
        f->expert_norm = hp->expert_norm != 0;
    }
    /* KIPP_CUDA_GRAPHS=0 runs every step by direct launches (a debugging switch: the gates
     * run with graphs, as users do) */
    const char *g = getenv("KIPP_CUDA_GRAPHS");
    f->graphs_on = !(g && strcmp(g, "0") == 0);
    f->L = calloc(hp->n_layer, sizeof *f->L);
    f->inv_freq = malloc((f->D / 2) * sizeof(double));
    f->dense = malloc(CHUNK * sizeof *f->dense);
    kipp_status st = KIPP_OK;
    if (!f->L || !f->inv_freq || !f->dense) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "cuda: out of memory");
        goto fail;
    }
    kipp_rope_inv_freq(hp, f->D, f->inv_freq);
    f->rope_mag = kipp_rope_attn_factor(hp);
    cudaError_t e = cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        st = cuda_err(err, err_len, "creating a stream", e);
        goto fail;
    }
    if ((st = upload_weights(f, err, err_len)) != KIPP_OK) goto fail;
    if ((st = alloc_scratch(f, err, err_len)) != KIPP_OK) goto fail;
    *out = f;
    return KIPP_OK;
fail:
    kipp_cuda_fwd_free(f);
    return st;
}

const char *kipp_cuda_fwd_weights_mode(const kipp_cuda_fwd *f) {
    return f->map_base ? "mapped" : "copied";
}

void *kipp_cuda_fwd_stream(const kipp_cuda_fwd *f) { return f->stream; }

void kipp_cuda_fwd_set_fault(kipp_cuda_fwd *f, int mode, uint32_t n_blocks) {
    f->fault_mode = mode;
    f->fault_blocks = n_blocks;
    kipp_cuda_set_fault(mode, n_blocks);
}

/* ---- the pass ------------------------------------------------------------------------------- */

/* One chunk of tokens over one KV storage, its staging already written on the host. */
struct chunk {
    const kipp_cuda_kv *kv;
    uint32_t n;          /* tokens */
    uint32_t n_seq;      /* rows of the chunk's block tables */
    uint32_t max_blocks; /* their width */
    uint32_t max_ctx;    /* > every position in the chunk */
    uint32_t n_want;     /* rows through the head */
    stage_layout sl;
};

/* Makes the staging buffers hold `bytes`; moving them invalidates every graph (they baked
 * the old device addresses in). */
static kipp_status ensure_stage(kipp_cuda_fwd *f, size_t bytes, char *err, size_t err_len) {
    if (bytes <= f->stage_cap) return KIPP_OK;
    bytes = (bytes + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
    cudaStreamSynchronize(f->stream);
    destroy_graphs(f);
    cudaFree(f->stage_d);
    if (f->stage_h) cudaFreeHost(f->stage_h);
    f->stage_d = f->stage_h = NULL;
    f->stage_cap = 0;
    cudaError_t e = cudaHostAlloc((void **)&f->stage_h, bytes, cudaHostAllocDefault);
    if (e == cudaSuccess) e = cudaMalloc((void **)&f->stage_d, bytes);
    if (e != cudaSuccess) return cuda_err(err, err_len, "allocating the staging buffers", e);
    f->stage_cap = bytes;
    return KIPP_OK;
}

/* RoPE tables for n positions: model/rope.c's, as the cpu and vulkan backends build them. */
static void fill_rope(const kipp_cuda_fwd *f, float *cs, float *sn, const uint32_t *pos,
                      uint32_t n) {
    kipp_rope_tables(f->inv_freq, f->rope_mag, f->D / 2, pos, n, cs, sn);
}

#define RUN(call)                                                                              \
    do {                                                                                       \
        if (!rc) rc = (int)(call);                                                             \
    } while (0)

static int mm(const kipp_cuda_fwd *f, uint32_t type, const void *w, uint32_t n_in,
              uint32_t n_out, const float *x, size_t ldx, uint32_t n_tok, float *y, size_t ldy) {
    if (kipp_cuda_matmul_scratch_bytes(type, n_in, n_tok) > f->mm_cap) return SCRATCH_SHORT;
    return kipp_cuda_matmul(type, w, n_in, n_out, x, ldx, n_tok, y, ldy, f->mm_scratch,
                            f->stream);
}

/* One expert matrix stack (kernels.h: kipp_cuda_matmul_experts) over the n * K (token, slot)
 * pairs of a chunk of n tokens, grouped by the routing (f->grp_off): y rows in group order. */
static int experts(const kipp_cuda_fwd *f, const kipp_gguf_tensor *t, const void *w,
                   const float *x, size_t ldx, const int32_t *x_rows, uint32_t n, float *y,
                   size_t ldy) {
    const uint32_t n_in = (uint32_t)t->ne[0], n_out = (uint32_t)t->ne[1], E = (uint32_t)t->ne[2];
    const uint32_t P = n * f->K;
    if (kipp_cuda_matmul_experts_scratch_bytes(t->type, n_in, P, n) > f->mm_cap)
        return SCRATCH_SHORT;
    return kipp_cuda_matmul_experts(t->type, w, t->n_bytes / E, E, n_in, n_out, x, ldx, x_rows,
                                    P, f->grp_off, n, y, ldy, f->mm_scratch, f->stream);
}

/* ---- the operations (ops.h) on the current chunk (f->cur) ------------------------------------
 * Each is one or a few launches on f->stream over the chunk's n tokens (an expert activation:
 * its n * K pairs, in the routing's group order), with cpu-ref's definition
 * (src/backend/cpu_ref/layers.c); the driver (src/backend/program.c) turns each op of the
 * architecture's program into these calls. Only launches: no copies, no syncs, nothing that
 * waits for the device, so graph_layers captures the whole pass. The staging buffer's device
 * copy gives each token's sequence, position, RoPE table row and token id. Weights: the
 * layer's device slot of the kipp_layer_weights field (d->p[SLOT_OF(w)]), its type that of
 * the model's tensor. */

static const void *dev_w(const kipp_cuda_fwd *f, uint32_t l, size_t w) {
    return f->L[l].p[SLOT_OF(w)];
}

/* rows of activation b in this chunk: one per token, or per (token, slot) pair */
static uint32_t act_rows(const kipp_cuda_fwd *f, kipp_buf b) {
    return b >= KIPP_BUF_EGATE ? f->cur->n * f->K : f->cur->n;
}

/* dst = RMSNorm(src) * w over rows of `width` (a token's row, or each head of it) */
static int op_rmsnorm(void *st, uint32_t l, size_t w, kipp_buf src, kipp_buf dst, uint32_t width) {
    kipp_cuda_fwd *f = st;
    const uint32_t per = f->ld[src] / width;
    return kipp_cuda_rmsnorm(f->act[src], width, dev_w(f, l, w), width, act_rows(f, src) * per,
                             f->eps, f->act[dst], width, f->stream);
}

/* dst[i] = src times w[i], one product per weight (q, k, v: three launches over the same xn) */
static int op_matmul(void *st, uint32_t l, uint32_t count, const size_t *w, kipp_buf src,
                     const kipp_buf *dst) {
    kipp_cuda_fwd *f = st;
    for (uint32_t i = 0; i < count; i++) {
        const kipp_gguf_tensor *t = kipp_layer_tensor(f->m, l, w[i]);
        const int rc = mm(f, t->type, dev_w(f, l, w[i]), (uint32_t)t->ne[0], (uint32_t)t->ne[1],
                          f->act[src], f->ld[src], f->cur->n, f->act[dst[i]], f->ld[dst[i]]);
        if (rc) return rc;
    }
    return 0;
}

static int op_add_bias(void *st, uint32_t l, size_t b, kipp_buf dst) {
    kipp_cuda_fwd *f = st;
    return kipp_cuda_add_bias(f->act[dst], f->ld[dst], dev_w(f, l, b), f->ld[dst], f->cur->n,
                              f->stream);
}

static int op_rope(void *st, kipp_buf dst) {
    kipp_cuda_fwd *f = st;
    const chunk_t *c = f->cur;
    const unsigned char *sd = f->stage_d;
    return kipp_cuda_rope(f->act[dst], f->ld[dst], c->n, f->ld[dst] / f->D, f->D,
                          (const float *)(sd + c->sl.cos), (const float *)(sd + c->sl.sin),
                          f->stream);
}

/* before attention, which reads positions 0..pos from the storage only */
static int op_kv_store(void *st, uint32_t l) {
    kipp_cuda_fwd *f = st;
    const chunk_t *c = f->cur;
    const kipp_cuda_kv *kv = c->kv;
    const unsigned char *sd = f->stage_d;
    return kipp_cuda_kv_store(kv->data, (uint32_t)kv->type, kv->n_layer, kv->block_size,
                              kv->kv_dim, l, f->k, f->kv_dim, f->v, f->kv_dim, c->n,
                              (const uint32_t *)(sd + c->sl.seq),
                              (const uint32_t *)(sd + c->sl.pos),
                              (const uint32_t *)(sd + c->sl.tab), c->max_blocks, f->stream);
}

/* q and the storage -> att */
static int op_attention(void *st, uint32_t l) {
    kipp_cuda_fwd *f = st;
    const chunk_t *c = f->cur;
    const kipp_cuda_kv *kv = c->kv;
    const unsigned char *sd = f->stage_d;
    return kipp_cuda_attention(f->q, f->QD, kv->data, (uint32_t)kv->type, kv->n_layer,
                               kv->block_size, kv->kv_dim, l, f->Nh, f->Nkv, f->D, c->n,
                               (const uint32_t *)(sd + c->sl.seq),
                               (const uint32_t *)(sd + c->sl.pos),
                               (const uint32_t *)(sd + c->sl.tab), c->max_blocks, c->max_ctx,
                               f->att_scratch, f->att, f->QD, f->stream);
}

/* gate = silu(gate) * up, a token's or a pair's rows */
static int op_swiglu(void *st, kipp_buf gate, kipp_buf up) {
    kipp_cuda_fwd *f = st;
    return kipp_cuda_swiglu(f->act[gate], f->act[up], f->ld[gate], f->ld[gate],
                            act_rows(f, gate), f->act[gate], f->stream);
}

static int op_add(void *st, kipp_buf dst, kipp_buf src) {
    kipp_cuda_fwd *f = st;
    return kipp_cuda_add(f->act[dst], f->act[src], f->ld[dst], f->ld[dst], f->cur->n, f->stream);
}

/* A mixture of experts on the device, no host round trip (nothing waits for the routing's
 * outcome): the router's logits in f32 at every token count (kipp_cuda_matmul_exact: a
 * prefill routes a token as its decode step does), then the routing kernel
 * (kipp_om_moe_route: softmax, top-k with ties to the lower index, renormalized when
 * expert_norm; the gates' near-tie pin from the record's device copy, read only while one is
 * on, with each row's position and token id; then the n * K (token, slot) pairs grouped by
 * expert: grp_off, pair_tok, slot_at). */
static int op_moe_route(void *st, uint32_t l) {
    kipp_cuda_fwd *f = st;
    const chunk_t *c = f->cur;
    const kipp_gguf_tensor *gi = kipp_layer_tensor(f->m, l, KIPP_W(gate_inp));
    const unsigned char *sd = f->stage_d;
    int rc = kipp_cuda_matmul_exact(gi->type, dev_w(f, l, KIPP_W(gate_inp)), f->H, f->E, f->xn,
                                    f->H, c->n, f->router, f->E, f->stream);
    if (rc) return rc;
    return kipp_cuda_moe_route(f->router, f->E, c->n, f->E, f->K, f->expert_norm, l,
                               (const uint32_t *)(sd + c->sl.pos),
                               (const int32_t *)(sd + c->sl.ids),
                               f->pin_trace ? &f->pin : NULL, f->chosen, f->cw, f->grp_off,
                               f->pair_tok, f->slot_at, f->stream);
}

/* Each expert's group of pairs in one product per weight (per pair matrix-vector rows for a
 * decode step, a GEMM per group for a prefill): src XN read through each pair's token
 * (pair_tok), an expert activation row by row; dst rows in group order. */
static int op_moe_matmul(void *st, uint32_t l, uint32_t count, const size_t *w, kipp_buf src,
                         const kipp_buf *dst) {
    kipp_cuda_fwd *f = st;
    const int32_t *x_rows = src >= KIPP_BUF_EGATE ? NULL : f->pair_tok;
    for (uint32_t i = 0; i < count; i++) {
        const int rc = experts(f, kipp_layer_tensor(f->m, l, w[i]), dev_w(f, l, w[i]), f->act[src],
                               f->ld[src], x_rows, f->cur->n, f->act[dst[i]], f->ld[dst[i]]);
        if (rc) return rc;
    }
    return 0;
}

/* dst[t] = token t's slots summed in slot order (each pair's row found through slot_at) */
static int op_moe_sum(void *st, kipp_buf src, kipp_buf dst) {
    kipp_cuda_fwd *f = st;
    return kipp_cuda_moe_sum(f->act[dst], f->ld[dst], f->act[src], f->ld[src], f->cw, f->slot_at,
                             f->ld[dst], f->cur->n, f->K, f->stream);
}

/* No fused path: every program op runs as the driver's plain calls (KIPP_PLAIN_OPS=1 changes
 * nothing here). */
static const kipp_backend_kernels cuda_kernels = {
    .rmsnorm = op_rmsnorm,
    .matmul = op_matmul,
    .add_bias = op_add_bias,
    .rope = op_rope,
    .kv_store = op_kv_store,
    .attention = op_attention,
    .swiglu = op_swiglu,
    .add = op_add,
    .moe_route = op_moe_route,
    .moe_matmul = op_moe_matmul,
    .moe_sum = op_moe_sum,
};

const kipp_backend_kernels *kipp_cuda_fwd_kernels(void) { return &cuda_kernels; }

/* Embedding rows, then every layer's program through the driver (program.c) over the chunk's
 * tokens: x[n][H] holds the last layer's residual stream afterwards. Only launches
 * (graph-capturable): no copies, no syncs. */
static int run_layers(kipp_cuda_fwd *f, const chunk_t *c) {
    const kipp_model *m = f->m;
    const int32_t *ids = (const int32_t *)(f->stage_d + c->sl.ids);
    if (kipp_cuda_attention_scratch_bytes(c->n, f->Nh, f->D, c->max_ctx) > f->att_cap)
        return SCRATCH_SHORT;
    int rc = kipp_cuda_get_rows(m->tok_embd->type, f->tok_embd, f->H, ids, c->n, f->x, f->H,
                                f->stream);
    if (rc) return rc;
    f->cur = c;
    rc = kipp_program_run(m, &cuda_kernels, f);
    f->cur = NULL;
    return rc;
}

/* The wanted rows: gathered (get_rows over x as an f32 matrix), final-normed, then the
 * lm_head HEAD_ROWS rows at a time, each product's logits copied to the host (an
 * embeddings context copies the normed rows themselves). */
static int run_head(kipp_cuda_fwd *f, const chunk_t *c, float *out) {
    const cudaStream_t st = f->stream;
    const uint32_t H = f->H, NL = f->NL;
    const int32_t *want = (const int32_t *)(f->stage_d + c->sl.want);
    int rc = 0;
    RUN(kipp_cuda_get_rows(KIPP_TYPE_F32, f->x, H, want, c->n_want, f->xw, H, st));
    RUN(kipp_cuda_rmsnorm(f->xw, H, f->out_norm, H, c->n_want, f->eps, f->xw, H, st));
    if (!NL) {
        RUN(cudaMemcpyAsync(out, f->xw, (size_t)c->n_want * H * sizeof(float),
                            cudaMemcpyDeviceToHost, st));
        return rc;
    }
    for (uint32_t r0 = 0; r0 < c->n_want; r0 += HEAD_ROWS) {
        const uint32_t nr = u32min(HEAD_ROWS, c->n_want - r0);
        RUN(mm(f, f->head.type, f->output, H, NL, f->xw + (size_t)r0 * H, H, nr, f->lg, NL));
        RUN(cudaMemcpyAsync(out + (size_t)r0 * NL, f->lg, (size_t)nr * NL * sizeof(float),
                            cudaMemcpyDeviceToHost, st));
    }
    return rc;
}

/* 1 when two routing records (kipp_cuda_moe_pin, as a graph's kernels hold them) are the same */
static int same_pin(const kipp_cuda_moe_pin *a, const kipp_cuda_moe_pin *b) {
    const kipp_om_moe_record *x = &a->rec, *y = &b->rec;
    return a->counts == b->counts && x->token == y->token && x->chosen == y->chosen &&
           x->margin == y->margin && x->probs == y->probs && x->n_layer == y->n_layer &&
           x->n_pos == y->n_pos && x->n_slot == y->n_slot && x->k == y->k &&
           x->n_exp == y->n_exp && x->delta == y->delta;
}

/* The layers from the graph for this token count, captured first when there is none or its
 * key (table width, storage, the routing record read while the gates' trace is on) differs.
 * A record's contents are uploaded before each pass (pin_begin), into the same device
 * addresses while its size holds, so a graph captured over it replays over the next one. */
static int graph_layers(kipp_cuda_fwd *f, const chunk_t *c) {
    graph_slot *g = &f->graphs[c->n];
    static const kipp_cuda_moe_pin none;
    const kipp_cuda_moe_pin *pin = f->pin_trace ? &f->pin : &none;
    if (!g->exec || g->max_blocks != c->max_blocks || g->kv != c->kv->data ||
        !same_pin(&g->pin, pin)) {
        if (g->exec) cudaGraphExecDestroy(g->exec);
        *g = (graph_slot){0};
        cudaGraph_t graph = NULL;
        int rc = cudaStreamBeginCapture(f->stream, cudaStreamCaptureModeThreadLocal);
        if (rc) return rc;
        rc = run_layers(f, c);
        const cudaError_t e = cudaStreamEndCapture(f->stream, &graph);
        if (!rc) rc = e;
        if (!rc) rc = cudaGraphInstantiate(&g->exec, graph, 0);
        if (graph) cudaGraphDestroy(graph);
        if (rc) {
            g->exec = NULL;
            return rc;
        }
        g->max_blocks = c->max_blocks;
        g->kv = c->kv->data;
        g->pin = *pin;
    }
    return cudaGraphLaunch(g->exec, f->stream);
}

/* One chunk: the staging copy, the layers (graph or direct), the head, and the wait. */
static kipp_status run_chunk(kipp_cuda_fwd *f, const chunk_t *c, int use_graph, float *out,
                             char *err, size_t err_len) {
    const size_t bytes = c->sl.end_fixed + (size_t)c->n_seq * c->max_blocks * sizeof(uint32_t);
    int rc = cudaMemcpyAsync(f->stage_d, f->stage_h, bytes, cudaMemcpyHostToDevice, f->stream);
    RUN(use_graph ? graph_layers(f, c) : run_layers(f, c));
    if (c->n_want) RUN(run_head(f, c, out));
    const cudaError_t e = cudaStreamSynchronize(f->stream);
    if (rc == SCRATCH_SHORT)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "cuda: a kernel asks for more scratch than the context sized at start-up "
                         "(%u tokens over %u positions)", c->n, c->max_ctx);
    if (rc)
        return cuda_err(err, err_len,
                        use_graph ? "the forward pass (CUDA graph; KIPP_CUDA_GRAPHS=0 runs it "
                                    "without)"
                                  : "the forward pass",
                        (cudaError_t)rc);
    if (e != cudaSuccess) return cuda_err(err, err_len, "the forward pass", e);
    return KIPP_OK;
}

/* The gates' routing trace (src/backend/moe.h) while one is on in PIN mode and the model has
 * experts: its record (every slot's token id, chosen set, margin and router probabilities)
 * copied to the device and the counters zeroed, so the routing kernel matches each token's
 * decision to the record's slot of the same token with the nearest probabilities and pins
 * near-ties to the reference's choice, as kipp_moe_route does on the host. A decode step's
 * graph is keyed by the record's device addresses and shape (graph_layers): one captured over
 * the record replays over each later upload to the same place, and a production run (no
 * record) never replays one. Test runs only: production never sets a trace. pin_end adds the
 * kernel's counts to the trace. */
static kipp_status pin_begin(kipp_cuda_fwd *f, char *err, size_t err_len) {
    kipp_moe_trace *t = f->E ? kipp_moe_trace_current() : NULL;
    f->pin_trace = NULL;
    if (!t || t->mode != KIPP_MOE_TRACE_PIN) return KIPP_OK;
    const size_t slots = (size_t)t->n_layer * t->n_pos * t->n_slot;
    const size_t tb = align_up(slots * 4), cb = align_up(slots * t->k * 4),
                 mb = align_up(slots * 4), pb = align_up(slots * t->n_exp * 4),
                 need = tb + cb + mb + pb + 16;
    cudaError_t e = cudaSuccess;
    if (need > f->pin_cap) { /* moving the record invalidates the graphs over it */
        cudaStreamSynchronize(f->stream);
        destroy_graphs(f);
        cudaFree(f->pin_d);
        f->pin_d = NULL;
        f->pin_cap = 0;
        if ((e = cudaMalloc((void **)&f->pin_d, need)) != cudaSuccess)
            return cuda_err(err, err_len, "allocating the routing trace", e);
        f->pin_cap = need;
    }
    unsigned char *d = f->pin_d;
    const kipp_cuda_moe_pin pin = {
        .rec = {.token = (const int32_t *)d, .chosen = (const uint32_t *)(d + tb),
                .margin = (const float *)(d + tb + cb),
                .probs = (const float *)(d + tb + cb + mb), .n_layer = t->n_layer,
                .n_pos = t->n_pos, .n_slot = t->n_slot, .k = t->k, .n_exp = t->n_exp,
                .delta = t->delta},
        .counts = (uint32_t *)(d + tb + cb + mb + pb)};
    cudaStreamSynchronize(f->stream); /* nothing queued still reads the last record */
    if ((e = cudaMemcpy(d, t->token, slots * 4, cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(d + tb, t->chosen, slots * t->k * 4, cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(d + tb + cb, t->margin, slots * 4, cudaMemcpyHostToDevice)) ||
        (e = cudaMemcpy(d + tb + cb + mb, t->probs, slots * t->n_exp * 4,
                        cudaMemcpyHostToDevice)) ||
        (e = cudaMemset(pin.counts, 0, 3 * sizeof(uint32_t))))
        return cuda_err(err, err_len, "uploading the routing trace", e);
    f->pin = pin;
    f->pin_trace = t;
    return KIPP_OK;
}

static kipp_status pin_end(kipp_cuda_fwd *f, char *err, size_t err_len) {
    kipp_moe_trace *t = f->pin_trace;
    if (!t) return KIPP_OK;
    f->pin_trace = NULL;
    uint32_t c[3];
    const cudaError_t e = cudaMemcpy(c, f->pin.counts, sizeof c, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return cuda_err(err, err_len, "reading the routing trace's counts", e);
    atomic_fetch_add(&t->pinned, c[0]);
    atomic_fetch_add(&t->mismatched, c[1]);
    float widest;
    memcpy(&widest, &c[2], sizeof widest);
    if (c[0] && widest > t->worst_pinned) t->worst_pinned = widest;
    return KIPP_OK;
}

/* Table width for a chunk whose longest sequence holds `need` blocks: the graph path rounds
 * it up to a power of two (the context-length bucket, so a decoding sequence recaptures
 * only when it doubles), never past the context's own width. */
static uint32_t width_bucket(uint32_t need, uint32_t ctx_blocks) {
    uint32_t w = 4;
    while (w < need) w *= 2;
    if (w > ctx_blocks) w = ctx_blocks > need ? ctx_blocks : need;
    return w;
}

kipp_status kipp_cuda_fwd_decode_batch(kipp_cuda_fwd *f, kipp_kv_pool *pool,
                                       const kipp_batch *b, float *logits, char *err,
                                       size_t err_len) {
    const kipp_cuda_kv *kv = pool->storage.store;
    const uint32_t half = f->D / 2, row = f->NL ? f->NL : f->H;
    const uint32_t ctx_blocks = kipp_kv_blocks_for(pool, f->n_ctx);
    kipp_status pst = pin_begin(f, err, err_len);
    if (pst != KIPP_OK) return pst;
    for (uint32_t i0 = 0; i0 < b->n;) {
        chunk_t c = {.kv = kv, .n = u32min(CHUNK, b->n - i0)};
        /* the chunk's sequences, densely numbered in order of appearance */
        uint32_t need = 0, max_pos = 0, last = 0;
        for (uint32_t t = 0; t < c.n; t++) {
            const uint32_t id = b->seq_ids[i0 + t];
            if (b->positions[i0 + t] > max_pos) max_pos = b->positions[i0 + t];
            if (c.n_seq && f->dense[last] == id) continue;
            for (last = 0; last < c.n_seq && f->dense[last] != id; last++) {}
            if (last < c.n_seq) continue;
            const kipp_kv_seq *s = kipp_kv_seq_get(pool, id);
            if (!s)
                return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG,
                                 "cuda: sequence %u is not live", id);
            if (s->n_blocks > need) need = s->n_blocks;
            f->dense[c.n_seq++] = id;
        }
        const int use_graph = f->graphs_on && c.n <= GRAPH_MAX && c.n == b->n;
        c.max_blocks = use_graph ? width_bucket(need, ctx_blocks) : (need ? need : 1);
        c.max_ctx = use_graph ? u32min(c.max_blocks * pool->block_size, f->n_ctx) : max_pos + 1;
        if (c.max_ctx < max_pos + 1) c.max_ctx = max_pos + 1;
        c.sl = layout_for(c.n, half);
        kipp_status st = ensure_stage(
            f, c.sl.end_fixed + (size_t)c.n_seq * c.max_blocks * sizeof(uint32_t), err, err_len);
        if (st != KIPP_OK) return st;
        unsigned char *h = f->stage_h;
        int32_t *ids = (int32_t *)(h + c.sl.ids), *want = (int32_t *)(h + c.sl.want);
        uint32_t *seq = (uint32_t *)(h + c.sl.seq), *pos = (uint32_t *)(h + c.sl.pos);
        uint32_t *tab = (uint32_t *)(h + c.sl.tab);
        memcpy(ids, b->tokens + i0, (size_t)c.n * sizeof *ids);
        memcpy(pos, b->positions + i0, (size_t)c.n * sizeof *pos);
        last = 0;
        for (uint32_t t = 0; t < c.n; t++) {
            const uint32_t id = b->seq_ids[i0 + t];
            if (f->dense[last] != id)
                for (last = 0; f->dense[last] != id; last++) {}
            seq[t] = last;
            if (b->want_logits[i0 + t]) want[c.n_want++] = (int32_t)t;
        }
        fill_rope(f, (float *)(h + c.sl.cos), (float *)(h + c.sl.sin), pos, c.n);
        for (uint32_t j = 0; j < c.n_seq; j++) {
            const kipp_kv_seq *s = kipp_kv_seq_get(pool, f->dense[j]);
            uint32_t *r = tab + (size_t)j * c.max_blocks;
            memcpy(r, s->blocks, (size_t)s->n_blocks * sizeof *r);
            memset(r + s->n_blocks, 0, (size_t)(c.max_blocks - s->n_blocks) * sizeof *r);
        }
        if ((st = run_chunk(f, &c, use_graph, logits, err, err_len)) != KIPP_OK) return st;
        if (c.n_want) logits += (size_t)c.n_want * row;
        i0 += c.n;
    }
    return pin_end(f, err, err_len);
}

kipp_status kipp_cuda_fwd_nocache(kipp_cuda_fwd *f, const int32_t *tokens, uint32_t n,
                                  float *logits, char *err, size_t err_len) {
    if (n == 0) return KIPP_OK;
    /* a private store of the context's KV type, one sequence, identity block table */
    const uint32_t bs = KIPP_KV_DEFAULT_BLOCK_SIZE, nb = (n + bs - 1) / bs;
    kipp_cuda_kv kv = {.type = f->kv_type, .n_layer = f->m->hp.n_layer, .kv_dim = f->kv_dim,
                       .block_size = bs, .n_blocks = nb};
    kv.block_bytes = 2 * (size_t)kv.n_layer * bs * kv.kv_dim * kipp_kv_type_size(kv.type);
    const uint32_t half = f->D / 2;
    kipp_status st = ensure_stage(f, layout_for(CHUNK, half).end_fixed + (size_t)nb * 4, err,
                                  err_len);
    if (st == KIPP_OK) st = pin_begin(f, err, err_len);
    if (st != KIPP_OK) return st;
    cudaError_t e = cudaMalloc(&kv.data, (size_t)nb * kv.block_bytes);
    if (e != cudaSuccess) return cuda_err(err, err_len, "allocating the recomputation's K/V", e);
    /* the fault build's planted read bugs are the cache's, not this oracle's */
    if (f->fault_mode) {
        cudaStreamSynchronize(f->stream);
        kipp_cuda_set_fault(0, 0);
    }
    for (uint32_t p0 = 0; p0 < n && st == KIPP_OK;) {
        chunk_t c = {.kv = &kv, .n = u32min(CHUNK, n - p0), .n_seq = 1, .max_blocks = nb};
        c.max_ctx = p0 + c.n;
        c.sl = layout_for(c.n, half);
        unsigned char *h = f->stage_h;
        uint32_t *seq = (uint32_t *)(h + c.sl.seq), *pos = (uint32_t *)(h + c.sl.pos);
        uint32_t *tab = (uint32_t *)(h + c.sl.tab);
        memcpy(h + c.sl.ids, tokens + p0, (size_t)c.n * sizeof *tokens);
        for (uint32_t t = 0; t < c.n; t++) {
            seq[t] = 0;
            pos[t] = p0 + t;
        }
        for (uint32_t j = 0; j < nb; j++) tab[j] = j;
        if (logits && p0 + c.n == n) { /* the last token's row only */
            ((int32_t *)(h + c.sl.want))[0] = (int32_t)(c.n - 1);
            c.n_want = 1;
        }
        fill_rope(f, (float *)(h + c.sl.cos), (float *)(h + c.sl.sin), pos, c.n);
        st = run_chunk(f, &c, 0, logits, err, err_len);
        p0 += c.n;
    }
    if (f->fault_mode) kipp_cuda_set_fault(f->fault_mode, f->fault_blocks);
    cudaFree(kv.data);
    if (st == KIPP_OK) st = pin_end(f, err, err_len);
    f->pin_trace = NULL;
    return st;
}
