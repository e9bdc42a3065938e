/* vk.h — the vulkan backend's runtime (vk.c): the Vulkan loader opened at run time (dlopen of
 * libvulkan.so.1: a machine without it gets an error naming what is missing, and the
 * ordinary binaries need no Vulkan library to start), one logical device with one compute
 * queue, device buffers, the compute pipelines of the shaders the build compiled and embedded
 * (shaders/, SPIR-V made by glslc; created on first use and cached), and one command buffer
 * that a pass records into and submits.
 *
 * Memory: every buffer a kernel reads or writes is a device buffer (kipp_vk_alloc: the
 * device-local memory type); the host never maps one. Host data goes in and out through
 * host-visible staging buffers only, even where the device's memory is host-visible (lavapipe,
 * unified-memory GPUs), so the staging path is the one every device runs and the one the gates
 * test. A kernel binds at most info.max_range bytes per buffer view (maxStorageBufferRange:
 * 128 MiB on lavapipe); larger tensors are split by their owners (forward.c) into several
 * buffers.
 *
 * Recording: kipp_vk_begin, then any number of kipp_vk_dispatch / kipp_vk_rec_write /
 * kipp_vk_rec_read / kipp_vk_rec_copy / kipp_vk_rec_fill calls, then kipp_vk_submit, which
 * ends the command buffer, submits it, waits for it and copies the recorded reads to their
 * host destinations. Commands run in recording order: every command is separated from the
 * next by a full memory barrier (compute and transfer), so a kernel always sees what an
 * earlier command wrote. A failure while recording (an unknown shader, too many bindings, no
 * memory for staging) is remembered and returned by kipp_vk_submit, which then submits
 * nothing; recording calls return it too (0: fine). One kipp_vk is used by one thread at a
 * time. */
#ifndef KIPP_VK_H
#define KIPP_VK_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "kipp.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kipp_vk kipp_vk;

/* What the chosen device is and offers (filled by kipp_vk_open). */
typedef struct {
    char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
    char driver[VK_MAX_DRIVER_NAME_SIZE];      /* "llvmpipe", "NVIDIA", ... (Vulkan 1.2 drivers) */
    char driver_info[VK_MAX_DRIVER_INFO_SIZE]; /* "Mesa 22.3.6 (LLVM 15.0.6)", ... */
    uint32_t api_version, driver_version, vendor_id, device_id;
    VkPhysicalDeviceType type;
    uint32_t subgroup_size;        /* the device's (8 on lavapipe, 32 NVIDIA, 32/64 AMD) */
    int subgroup_arith;            /* subgroup arithmetic in compute shaders */
    uint64_t max_range;            /* maxStorageBufferRange: bytes one bound view may span */
    uint64_t split_view;           /* the bytes a weight matrix's part may hold: max_range, or
                                      less with KIPP_VK_MAX_VIEW (the gates split every matrix) */
    uint64_t max_alloc;            /* the most one allocation may hold (maintenance3) */
    uint64_t device_bytes;         /* the device-local heap's size */
    uint32_t offset_align;         /* minStorageBufferOffsetAlignment */
    uint32_t max_shared;           /* maxComputeSharedMemorySize */
    uint32_t max_invocations;      /* maxComputeWorkGroupInvocations */
    uint32_t max_groups[3];        /* maxComputeWorkGroupCount */
    uint32_t max_push;             /* maxPushConstantsSize */
    int unified;                   /* device-local memory is also host-visible */
    int coopmat;                   /* VK_KHR_cooperative_matrix offered (not used by the gated path) */
    int push_descriptor;           /* VK_KHR_push_descriptor in use (else a descriptor pool) */
    int index;                     /* the device's index (--device) */
    int n_devices;                 /* physical devices the loader lists */
} kipp_vk_info;

/* A device buffer. */
typedef struct {
    VkBuffer buf;
    VkDeviceMemory mem;
    uint64_t size;
} kipp_vk_buf;

/* A range of a device buffer as one kernel binding sees it (off a multiple of
 * info.offset_align, size at most info.max_range; size 0 = the rest of the buffer, but at
 * most max_range). */
typedef struct {
    VkBuffer buf;
    uint64_t off, size;
} kipp_vk_view;

static inline kipp_vk_view kipp_vk_all(const kipp_vk_buf *b) {
    kipp_vk_view v = {b->buf, 0, b->size};
    return v;
}
static inline kipp_vk_view kipp_vk_sub(const kipp_vk_buf *b, uint64_t off, uint64_t size) {
    kipp_vk_view v = {b->buf, off, size};
    return v;
}

/* The physical devices the loader lists (0 when it lists none); KIPP_ERR_BACKEND naming what
 * is missing when there is no loader or no instance can be made. */
kipp_status kipp_vk_count(int *n, char *err, size_t err_len);

/* Opens device `index` (--device N): loader, instance, device, queue, command buffer, staging.
 * Fatal errors (KIPP_ERR_BACKEND) name what is missing: the loader library, a Vulkan 1.1
 * device, a compute queue, the index out of range (with the devices there are). */
kipp_status kipp_vk_open(int index, kipp_vk **out, char *err, size_t err_len);
void kipp_vk_close(kipp_vk *vk);
const kipp_vk_info *kipp_vk_info_get(const kipp_vk *vk);

/* A device buffer of `size` bytes (> 0), zero-filled. KIPP_ERR_NOMEM when the device has no
 * room (the message names `what` and the size). */
kipp_status kipp_vk_alloc(kipp_vk *vk, uint64_t size, const char *what, kipp_vk_buf *out,
                          char *err, size_t err_len);
void kipp_vk_free(kipp_vk *vk, kipp_vk_buf *b); /* waits for the queue; b zeroed */
/* Device-local bytes allocated through this kipp_vk now. */
uint64_t kipp_vk_allocated(const kipp_vk *vk);

/* Synchronous transfers through staging (no recording may be open): n bytes at off. */
kipp_status kipp_vk_write(kipp_vk *vk, const kipp_vk_buf *dst, uint64_t off, const void *src,
                          uint64_t n, char *err, size_t err_len);
kipp_status kipp_vk_read(kipp_vk *vk, const kipp_vk_buf *src, uint64_t off, void *dst,
                         uint64_t n, char *err, size_t err_len);

/* ---- recording ---------------------------------------------------------------------------- */

/* Starts a recording (a no-op while one is open). */
int kipp_vk_begin(kipp_vk *vk);
/* n host bytes into dst (the bytes are copied into staging now; src may be reused at once). */
int kipp_vk_rec_write(kipp_vk *vk, kipp_vk_view dst, const void *src, uint64_t n);
/* n bytes of src to host memory dst, which is filled by kipp_vk_submit. */
int kipp_vk_rec_read(kipp_vk *vk, kipp_vk_view src, void *dst, uint64_t n);
/* n bytes from src to dst (device to device; views of any offset, 4-byte multiples). */
int kipp_vk_rec_copy(kipp_vk *vk, kipp_vk_view dst, kipp_vk_view src, uint64_t n);
/* n bytes of dst set to the 32-bit word `word` (n a multiple of 4). */
int kipp_vk_rec_fill(kipp_vk *vk, kipp_vk_view dst, uint64_t n, uint32_t word);

/* Records shader `shader` (a name of the build's shader table, e.g. "rmsnorm",
 * "matvec_q4_k") over groups gx * gy * gz workgroups, with storage buffer bindings 0..n_bind-1
 * = bind[0..n_bind-1] (at most KIPP_VK_MAX_BINDINGS, set 0) and push constants push[0..push_bytes)
 * (at most 128 bytes, a multiple of 4). A group count of 0 records nothing. Group counts above
 * the device's maximum are an error: kernels fold large grids themselves. */
#define KIPP_VK_MAX_BINDINGS 8
int kipp_vk_dispatch(kipp_vk *vk, const char *shader, const kipp_vk_view *bind, uint32_t n_bind,
                     const void *push, uint32_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz);

/* Ends, submits and waits for the recording, then fills the recorded reads; returns the first
 * error of the recording or of the submission (nothing submitted after a recording error).
 * With no recording open: KIPP_OK. */
kipp_status kipp_vk_submit(kipp_vk *vk, char *err, size_t err_len);

/* Dispatches recorded since kipp_vk_open (the operator tests' and --info's count) and the
 * names of the shaders whose pipelines exist now, comma-separated (into buf). */
uint64_t kipp_vk_dispatches(const kipp_vk *vk);
void kipp_vk_pipelines(const kipp_vk *vk, char *buf, size_t len);

/* The embedded shader table (the build's shaders.c, made by tools/embed_spirv.py). */
typedef struct {
    const char *name;
    const uint32_t *words;
    uint32_t n_words;
} kipp_vk_spirv;
extern const kipp_vk_spirv kipp_vk_shader_table[];
extern const uint32_t kipp_vk_shader_count;

#endif
