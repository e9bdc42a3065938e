/* vulkan.c — the Vulkan backend ("vulkan"): the start-up checks (no loader, no driver, no
 * device, --device out of range, a model whose shapes the kernels do not take, too little
 * device memory: each fatal, never a fallback to another backend), the context's device
 * (vk.c), the KV cache in device memory (forward.h: one buffer per layer, block ids as the
 * pool's) and the forward pass (forward.c: the operations of ops.h, through which program.c
 * runs the architecture's layer program), which records the kernels of kernels.h. Gated
 * against cpu-ref by the model gates run with --backend vulkan on Mesa's lavapipe in make
 * test (tests/vulkan/run_vulkan_gates.sh), and on a GPU when one is lent (docs/vulkan.md). */
#include "backend/backend.h"

#include "backend/host_kv.h"
#include "backend/ops.h"
#include "backend/vulkan/forward.h"
#include "backend/vulkan/kernels.h"
#include "backend/vulkan/vk.h"

#include "core/error.h"
#include "core/types.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    kipp_vk *vk;
    kipp_vk_fwd *fwd;
    char isa[1024];
    char kernels[4096];
} vk_state;

static const char *type_word(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU (software)";
    default: return "other";
    }
}

static void vk_caps(kipp_backend_caps *out) {
    uint64_t types = 0;
    for (uint32_t t = 0; t < 64; t++)
        if (kipp_type_supported(t) && kipp_vk_mm_type_supported(t)) types |= 1ull << t;
    *out = (kipp_backend_caps){
        .weight_types = types,
        .kv_types = 1u << KIPP_KV_TYPE_F32 | 1u << KIPP_KV_TYPE_F16 | 1u << KIPP_KV_TYPE_BF16,
        /* f16: half of f32's KV memory and bandwidth, well inside the gate (as cpu and cuda) */
        .kv_default = KIPP_KV_TYPE_F16,
        .max_batch = 0}; /* any size: forward.c runs a batch in chunks */
}

static kipp_status vk_memory(const kipp_backend_options *o, kipp_backend_memory *out, char *err,
                             size_t err_len) {
    static char names[16][VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    kipp_vk *vk = NULL;
    const kipp_status st = kipp_vk_open(o->device, &vk, err, err_len);
    if (st != KIPP_OK) return st;
    const kipp_vk_info *in = kipp_vk_info_get(vk);
    if (o->device >= 0 && o->device < 16) {
        snprintf(names[o->device], sizeof names[o->device], "%s", in->name);
        out->kind = names[o->device];
    } else {
        out->kind = "Vulkan device";
    }
    out->total = in->device_bytes;
    out->available = in->device_bytes; /* no budget query: the heap's size is the estimate */
    kipp_vk_close(vk);
    return KIPP_OK;
}

static void vk_free_state(void *state) {
    vk_state *s = state;
    if (!s) return;
    kipp_vk_fwd_free(s->fwd);
    kipp_vk_close(s->vk);
    free(s);
}

/* The --info "kernels" object: the device, driver, API and the features in use. */
static void describe_kernels(vk_state *s) {
    const kipp_vk_info *in = kipp_vk_info_get(s->vk);
    snprintf(s->kernels, sizeof s->kernels,
             "{\"device\": \"%s\", \"device_index\": %d, \"devices\": %d, \"type\": \"%s\", "
             "\"driver\": \"%s\", \"driver_info\": \"%s\", \"api_version\": \"%u.%u.%u\", "
             "\"subgroup_size\": %u, \"max_storage_view_bytes\": %llu, \"push_descriptors\": %s, "
             "\"unified_memory\": %s, \"cooperative_matrix\": \"%s\", \"matrix_vector_tokens\": 8, "
             "\"weights\": \"GGUF blocks read in place (matvec_<type>, matmul_<type>)\", "
             "\"token_embeddings\": \"host\", \"moe_routing\": \"host\"}",
             in->name, in->index, in->n_devices, type_word(in->type), in->driver, in->driver_info,
             VK_API_VERSION_MAJOR(in->api_version), VK_API_VERSION_MINOR(in->api_version),
             VK_API_VERSION_PATCH(in->api_version), in->subgroup_size,
             (unsigned long long)in->max_range, in->push_descriptor ? "true" : "false",
             in->unified ? "true" : "false", in->coopmat ? "offered, not used" : "not offered");
}

static kipp_status vk_init(const kipp_model *m, uint32_t n_ctx, const kipp_backend_options *o,
                           void **state, char *err, size_t err_len) {
    *state = NULL;
    /* a program calling an operation forward.c lacks, or a shape the kernels do not take, is
     * refused before any device work */
    kipp_status st = kipp_program_check(m->arch, "vulkan", kipp_vk_fwd_kernels(), err, err_len);
    if (st == KIPP_OK) st = kipp_vk_fwd_check(m, err, err_len);
    if (st != KIPP_OK) return st;
    vk_state *s = calloc(1, sizeof *s);
    if (!s) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
    if ((st = kipp_vk_open(o->device, &s->vk, err, err_len)) != KIPP_OK) goto fail;
    const kipp_vk_info *in = kipp_vk_info_get(s->vk);
    const uint32_t n_logits = o->embeddings ? 0 : o->n_logits;
    uint64_t wb = 0, sb = 0;
    kipp_vk_fwd_sizes(m, n_ctx, n_logits, &wb, &sb);
    if (in->device_bytes && wb + sb > in->device_bytes) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM,
                       "vulkan: the model needs %.0f MiB of device memory (%.0f MiB of weights, "
                       "%.0f MiB of activations) and %s has %.0f MiB",
                       (wb + sb) / 1048576.0, wb / 1048576.0, sb / 1048576.0, in->name,
                       in->device_bytes / 1048576.0);
        goto fail;
    }
    if ((st = kipp_vk_fwd_init(s->vk, m, n_ctx, o->kv_type, n_logits, &s->fwd, err, err_len)) !=
        KIPP_OK)
        goto fail;
    snprintf(s->isa, sizeof s->isa, "vulkan %s (%s, %s %s, Vulkan %u.%u, subgroup %u)", in->name,
             type_word(in->type), in->driver, in->driver_info,
             VK_API_VERSION_MAJOR(in->api_version), VK_API_VERSION_MINOR(in->api_version),
             in->subgroup_size);
    describe_kernels(s);
    *state = s;
    return KIPP_OK;
fail:
    vk_free_state(s);
    return st;
}

static void vk_describe(void *state, const char **isa, int *n_threads, uint64_t *weights_repacked) {
    vk_state *s = state;
    *isa = s->isa;
    *n_threads = 1;        /* one queue */
    *weights_repacked = 0; /* the device holds the GGUF blocks as they are in the file */
}

static const char *vk_kernels_json(void *state) {
    return ((vk_state *)state)->kernels;
}

static kipp_status vk_kv_alloc(void *state, const kipp_kv_layout *lay, uint32_t n_blocks,
                               void **store, char *err, size_t err_len) {
    vk_state *s = state;
    *store = NULL;
    uint64_t part, total;
    kipp_status st = kipp_kv_layout_size(lay, n_blocks, "vulkan", &part, &total, err, err_len);
    if (st != KIPP_OK) return st;
    kipp_vk_kv *kv = NULL;
    if ((st = kipp_vk_kv_create(s->vk, lay, n_blocks, &kv, err, err_len)) != KIPP_OK) return st;
#ifdef KIPP_FAULT_INJECT
    const char *mode = getenv("KIPP_FAULT"); /* read once, as host_kv.c does */
    kipp_vk_fwd_set_fault(s->fwd, mode ? atoi(mode) : 0, n_blocks);
#endif
    *store = kv;
    return KIPP_OK;
}

static void vk_kv_free(void *state, void *store) {
    vk_state *s = state;
    kipp_vk_kv_destroy(s->vk, store);
}

static void vk_kv_copy_block(void *state, void *store, uint32_t dst, uint32_t src) {
    vk_state *s = state;
    kipp_vk_kv_copy(s->vk, store, dst, src);
}

static kipp_status vk_decode_batch(void *state, kipp_kv_pool *pool, const kipp_batch *b,
                                   float *logits, char *err, size_t err_len) {
    vk_state *s = state;
    return kipp_vk_fwd_decode_batch(s->fwd, pool, b, logits, err, err_len);
}

static kipp_status vk_forward_nocache(void *state, const int32_t *tokens, uint32_t n, float *logits,
                                      char *err, size_t err_len) {
    vk_state *s = state;
    return kipp_vk_fwd_nocache(s->fwd, tokens, n, logits, err, err_len);
}

const kipp_backend_ops kipp_backend_vulkan = {
    .name = "vulkan",
    .caps = vk_caps,
    .memory = vk_memory,
    .init = vk_init,
    .free = vk_free_state,
    .describe = vk_describe,
    .kernels = vk_kernels_json,
    .kv_alloc = vk_kv_alloc,
    .kv_free = vk_kv_free,
    .kv_copy_block = vk_kv_copy_block,
    .decode_batch = vk_decode_batch,
    .forward_nocache = vk_forward_nocache,
};
