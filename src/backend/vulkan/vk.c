/* vk.c — the vulkan backend's runtime (see vk.h): the loader opened with dlopen and every
 * entry point fetched through vkGetInstanceProcAddr / vkGetDeviceProcAddr (no link-time
 * dependency on libvulkan), device choice, buffers, staging, pipelines, recording. */
#include "backend/vulkan/vk.h"

#include "core/error.h"

#include <dlfcn.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- entry points ---------------------------------------------------------------------------- */

// clang-format off
#define VK_GLOBAL_FNS(X) X(vkCreateInstance) X(vkEnumerateInstanceExtensionProperties)
#define VK_INSTANCE_FNS(X)                                                                     \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)        \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceQueueFamilyProperties)              \
    X(vkGetPhysicalDeviceMemoryProperties) X(vkEnumerateDeviceExtensionProperties)             \
    X(vkCreateDevice) X(vkGetDeviceProcAddr)
#define VK_DEVICE_FNS(X)                                                                       \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer)               \
    X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory) \
    X(vkMapMemory) X(vkUnmapMemory) X(vkCreateCommandPool) X(vkDestroyCommandPool)             \
    X(vkAllocateCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer)                 \
    X(vkResetCommandBuffer) X(vkCreateFence) X(vkDestroyFence) X(vkWaitForFences)             \
    X(vkResetFences) X(vkQueueSubmit) X(vkQueueWaitIdle) X(vkCreateShaderModule)              \
    X(vkDestroyShaderModule) X(vkCreateDescriptorSetLayout) X(vkDestroyDescriptorSetLayout)   \
    X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout) X(vkCreateComputePipelines)          \
    X(vkDestroyPipeline) X(vkCreateDescriptorPool) X(vkDestroyDescriptorPool)                 \
    X(vkResetDescriptorPool) X(vkAllocateDescriptorSets) X(vkUpdateDescriptorSets)            \
    X(vkCmdBindPipeline) X(vkCmdBindDescriptorSets) X(vkCmdPushConstants) X(vkCmdDispatch)    \
    X(vkCmdCopyBuffer) X(vkCmdFillBuffer) X(vkCmdPipelineBarrier)

typedef struct {
#define X(f) PFN_##f f;
    VK_GLOBAL_FNS(X) VK_INSTANCE_FNS(X) VK_DEVICE_FNS(X)
#undef X
    PFN_vkCmdPushDescriptorSetKHR vkCmdPushDescriptorSetKHR; /* NULL: not offered */
} vk_fns;
// clang-format on

/* A host-visible buffer (staging for writes, readback for reads), reused across recordings. */
typedef struct {
    VkBuffer buf;
    VkDeviceMemory mem;
    unsigned char *map;
    uint64_t size, used;
} host_buf;

typedef struct {
    void *dst;
    const unsigned char *src;
    uint64_t n;
} pending_read;

#define MAX_HOST_BUFS 64
#define STAGE_MIN (8u << 20)
#define DESC_SETS_PER_POOL 4096u
#define MAX_DESC_POOLS 64u

struct kipp_vk {
    void *lib;
    PFN_vkGetInstanceProcAddr gipa;
    vk_fns f;
    VkInstance inst;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfam;
    VkPhysicalDeviceMemoryProperties memprops;
    uint32_t mt_device, mt_upload, mt_readback; /* memory type indices */
    kipp_vk_info info;
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    VkDescriptorSetLayout dsl;
    VkPipelineLayout playout;
    /* without push descriptors: one set per dispatch from a chain of pools, all reset per
     * submit (a recording may hold any number of dispatches) */
    VkDescriptorPool dpool[MAX_DESC_POOLS];
    uint32_t n_dpool, dpool_cur, dsets_used;
    VkPipeline *pipes; /* [kipp_vk_shader_count], created on first use */
    int recording;
    int rec_err; /* the first recording error (0: none) */
    char rec_msg[256];
    host_buf up[MAX_HOST_BUFS], down[MAX_HOST_BUFS];
    uint32_t n_up, n_down;
    pending_read *reads;
    uint32_t n_reads, cap_reads;
    uint64_t allocated, dispatches;
    int profile;    /* KIPP_VK_PROFILE=1: each dispatch timed alone (slow; a tool) */
    double *prof_s; /* [kipp_vk_shader_count] seconds */
    uint64_t *prof_n;
};

/* ---- loader and instance --------------------------------------------------------------------- */

static const char *const k_loader_names[] = {
#ifdef __APPLE__
    "libvulkan.1.dylib", "libMoltenVK.dylib",
#endif
    "libvulkan.so.1", "libvulkan.so"};

static kipp_status vk_fail(char *err, size_t err_len, const char *what, VkResult r) {
    return kipp_errf(err, err_len,
                     r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                         ? KIPP_ERR_NOMEM
                         : KIPP_ERR_BACKEND,
                     "vulkan: %s failed (VkResult %d)", what, (int)r);
}

static int has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(e[i].extensionName, name) == 0) return 1;
    return 0;
}

/* dlopen + instance: the part kipp_vk_count and kipp_vk_open share. */
static kipp_status open_instance(kipp_vk *vk, char *err, size_t err_len) {
    /* KIPP_VULKAN_LOADER=PATH: that loader library and no other */
    const char *want = getenv("KIPP_VULKAN_LOADER");
    if (want && *want) {
        vk->lib = dlopen(want, RTLD_NOW | RTLD_LOCAL);
        if (!vk->lib)
            return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                             "vulkan: cannot open the Vulkan loader KIPP_VULKAN_LOADER=%s (%s); "
                             "Kipp does not fall back to another backend",
                             want, dlerror());
    }
    for (size_t i = 0; i < sizeof k_loader_names / sizeof k_loader_names[0] && !vk->lib; i++)
        vk->lib = dlopen(k_loader_names[i], RTLD_NOW | RTLD_LOCAL);
    if (!vk->lib)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "vulkan: no Vulkan loader on this machine (%s not found: %s); install "
                         "one (Debian: libvulkan1, with a driver such as mesa-vulkan-drivers or "
                         "the GPU vendor's); Kipp does not fall back to another backend",
                         k_loader_names[0], dlerror());
    vk->gipa = (PFN_vkGetInstanceProcAddr)dlsym(vk->lib, "vkGetInstanceProcAddr");
    if (!vk->gipa)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "vulkan: the Vulkan loader has no vkGetInstanceProcAddr");
#define X(fn)                                                                                      \
    if (!(vk->f.fn = (PFN_##fn)vk->gipa(NULL, #fn)))                                               \
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND, "vulkan: the loader lacks " #fn);
    VK_GLOBAL_FNS(X)
#undef X
    uint32_t n_ext = 0;
    vk->f.vkEnumerateInstanceExtensionProperties(NULL, &n_ext, NULL);
    VkExtensionProperties *ext = calloc(n_ext ? n_ext : 1, sizeof *ext);
    if (!ext) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
    vk->f.vkEnumerateInstanceExtensionProperties(NULL, &n_ext, ext);
    const char *names[2];
    uint32_t n_names = 0;
    VkInstanceCreateFlags flags = 0;
    /* MoltenVK (macOS) lists its devices only to instances that accept portability drivers */
    if (has_ext(ext, n_ext, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        names[n_names++] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
        flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    free(ext);
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                   .pApplicationName = "kipp",
                                   .pEngineName = "kipp",
                                   .apiVersion = VK_API_VERSION_1_2};
    const VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                     .flags = flags,
                                     .pApplicationInfo = &app,
                                     .enabledExtensionCount = n_names,
                                     .ppEnabledExtensionNames = names};
    VkResult r = vk->f.vkCreateInstance(&ci, NULL, &vk->inst);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "vulkan: the loader found no Vulkan driver (install one: Debian "
                         "mesa-vulkan-drivers for lavapipe, or the GPU vendor's driver)");
    if (r != VK_SUCCESS) return vk_fail(err, err_len, "vkCreateInstance", r);
#define X(fn)                                                                                      \
    if (!(vk->f.fn = (PFN_##fn)vk->gipa(vk->inst, #fn)))                                           \
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND, "vulkan: the loader lacks " #fn);
    VK_INSTANCE_FNS(X)
#undef X
    return KIPP_OK;
}

static void close_instance(kipp_vk *vk) {
    if (vk->inst && vk->f.vkDestroyInstance) vk->f.vkDestroyInstance(vk->inst, NULL);
    if (vk->lib) dlclose(vk->lib);
}

kipp_status kipp_vk_count(int *n, char *err, size_t err_len) {
    *n = 0;
    kipp_vk vk;
    memset(&vk, 0, sizeof vk);
    kipp_status st = open_instance(&vk, err, err_len);
    if (st == KIPP_OK) {
        uint32_t c = 0;
        const VkResult r = vk.f.vkEnumeratePhysicalDevices(vk.inst, &c, NULL);
        if (r != VK_SUCCESS) st = vk_fail(err, err_len, "vkEnumeratePhysicalDevices", r);
        *n = (int)c;
    }
    close_instance(&vk);
    return st;
}

/* ---- device ---------------------------------------------------------------------------------- */

/* The first memory type in `bits` with all of `want` (and, when avoid is set, none of it). */
static int mem_type(const VkPhysicalDeviceMemoryProperties *mp, uint32_t bits,
                    VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid) {
    for (uint32_t i = 0; i < mp->memoryTypeCount; i++)
        if ((bits >> i & 1) && (mp->memoryTypes[i].propertyFlags & want) == want &&
            !(mp->memoryTypes[i].propertyFlags & avoid))
            return (int)i;
    return -1;
}

static void fill_info(kipp_vk *vk, int index, int n_dev) {
    kipp_vk_info *in = &vk->info;
    VkPhysicalDeviceDriverProperties drv = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sg = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, .pNext = &m3};
    VkPhysicalDeviceProperties base;
    vk->f.vkGetPhysicalDeviceProperties(vk->phys, &base);
    /* driver properties are core in 1.2; on a 1.1 device they stay out of the chain */
    if (base.apiVersion >= VK_API_VERSION_1_2) m3.pNext = &drv;
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &sg};
    vk->f.vkGetPhysicalDeviceProperties2(vk->phys, &p2);
    const VkPhysicalDeviceProperties *p = &p2.properties;
    snprintf(in->name, sizeof in->name, "%s", p->deviceName);
    snprintf(in->driver, sizeof in->driver, "%s", drv.driverName[0] ? drv.driverName : "unknown");
    snprintf(in->driver_info, sizeof in->driver_info, "%s", drv.driverInfo);
    in->api_version = p->apiVersion;
    in->driver_version = p->driverVersion;
    in->vendor_id = p->vendorID;
    in->device_id = p->deviceID;
    in->type = p->deviceType;
    in->subgroup_size = sg.subgroupSize;
    in->subgroup_arith = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                         (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    in->max_range = p->limits.maxStorageBufferRange;
    /* KIPP_VK_MAX_VIEW=BYTES lowers the bound a weight matrix is split at (never raises it):
     * the gates split every matrix into parts on a device whose real bound no tiny model
     * reaches */
    in->split_view = in->max_range;
    const char *mv = getenv("KIPP_VK_MAX_VIEW");
    if (mv && strtoull(mv, NULL, 10) >= 4096 && strtoull(mv, NULL, 10) < in->max_range)
        in->split_view = strtoull(mv, NULL, 10);
    in->max_alloc = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : (1ull << 30);
    in->offset_align = (uint32_t)p->limits.minStorageBufferOffsetAlignment;
    in->max_shared = p->limits.maxComputeSharedMemorySize;
    in->max_invocations = p->limits.maxComputeWorkGroupInvocations;
    for (int i = 0; i < 3; i++) in->max_groups[i] = p->limits.maxComputeWorkGroupCount[i];
    in->max_push = p->limits.maxPushConstantsSize;
    in->index = index;
    in->n_devices = n_dev;
    uint64_t heap = 0;
    int unified = 1;
    for (uint32_t i = 0; i < vk->memprops.memoryHeapCount; i++)
        if ((vk->memprops.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            vk->memprops.memoryHeaps[i].size > heap)
            heap = vk->memprops.memoryHeaps[i].size;
    for (uint32_t i = 0; i < vk->memprops.memoryTypeCount; i++)
        if ((vk->memprops.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) &&
            !(vk->memprops.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT))
            unified = 0;
    in->device_bytes = heap;
    in->unified = unified;
}

kipp_status kipp_vk_open(int index, kipp_vk **out, char *err, size_t err_len) {
    *out = NULL;
    kipp_vk *vk = calloc(1, sizeof *vk);
    if (!vk) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
    kipp_status st = open_instance(vk, err, err_len);
    if (st != KIPP_OK) goto fail;
    uint32_t n_dev = 0;
    VkResult r = vk->f.vkEnumeratePhysicalDevices(vk->inst, &n_dev, NULL);
    if (r != VK_SUCCESS) {
        st = vk_fail(err, err_len, "vkEnumeratePhysicalDevices", r);
        goto fail;
    }
    if (n_dev == 0) {
        st = kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                       "vulkan: the Vulkan loader lists no device (install a driver: Debian "
                       "mesa-vulkan-drivers for lavapipe, or the GPU vendor's)");
        goto fail;
    }
    VkPhysicalDevice devs[64];
    if (n_dev > 64) n_dev = 64;
    vk->f.vkEnumeratePhysicalDevices(vk->inst, &n_dev, devs);
    if (index < 0 || (uint32_t)index >= n_dev) {
        char list[512] = "";
        for (uint32_t i = 0; i < n_dev; i++) {
            VkPhysicalDeviceProperties p;
            vk->f.vkGetPhysicalDeviceProperties(devs[i], &p);
            const size_t n = strlen(list);
            snprintf(list + n, sizeof list - n, "%s%u: %s", i ? ", " : "", i, p.deviceName);
        }
        st = kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                       "vulkan: --device %d is out of range: this machine has %u Vulkan "
                       "device%s (%s)",
                       index, n_dev, n_dev == 1 ? "" : "s", list);
        goto fail;
    }
    vk->phys = devs[index];
    VkPhysicalDeviceProperties bp;
    vk->f.vkGetPhysicalDeviceProperties(vk->phys, &bp);
    if (bp.apiVersion < VK_API_VERSION_1_1) {
        st = kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                       "vulkan: device %d (%s) offers Vulkan %u.%u; Kipp needs 1.1", index,
                       bp.deviceName, VK_API_VERSION_MAJOR(bp.apiVersion),
                       VK_API_VERSION_MINOR(bp.apiVersion));
        goto fail;
    }
    vk->f.vkGetPhysicalDeviceMemoryProperties(vk->phys, &vk->memprops);
    fill_info(vk, index, (int)n_dev);

    /* a compute queue: a compute-only family first (the async-compute queue of discrete GPUs) */
    uint32_t n_q = 0;
    vk->f.vkGetPhysicalDeviceQueueFamilyProperties(vk->phys, &n_q, NULL);
    VkQueueFamilyProperties qf[32];
    if (n_q > 32) n_q = 32;
    vk->f.vkGetPhysicalDeviceQueueFamilyProperties(vk->phys, &n_q, qf);
    int fam = -1;
    for (uint32_t i = 0; i < n_q && fam < 0; i++)
        if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) &&
            !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
            fam = (int)i;
    for (uint32_t i = 0; i < n_q && fam < 0; i++)
        if (qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) fam = (int)i;
    if (fam < 0) {
        st = kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                       "vulkan: device %d (%s) has no compute queue", index, vk->info.name);
        goto fail;
    }
    vk->qfam = (uint32_t)fam;

    uint32_t n_ext = 0;
    vk->f.vkEnumerateDeviceExtensionProperties(vk->phys, NULL, &n_ext, NULL);
    VkExtensionProperties *ext = calloc(n_ext ? n_ext : 1, sizeof *ext);
    if (!ext) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
        goto fail;
    }
    vk->f.vkEnumerateDeviceExtensionProperties(vk->phys, NULL, &n_ext, ext);
    const char *dext[4];
    uint32_t n_dext = 0;
    /* push descriptors only when asked (KIPP_VK_PUSH_DESCRIPTOR=1): lavapipe's (Mesa 22.3)
     * make a recording of a few hundred dispatches some 25 times slower than descriptor sets
     * from a pool, and the pool is what every Vulkan device has */
    const char *pd = getenv("KIPP_VK_PUSH_DESCRIPTOR");
    const int push =
        has_ext(ext, n_ext, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME) && pd && strcmp(pd, "1") == 0;
    if (push) dext[n_dext++] = VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME;
    /* a portability implementation (MoltenVK) must be told the app knows it is one */
    if (has_ext(ext, n_ext, "VK_KHR_portability_subset"))
        dext[n_dext++] = "VK_KHR_portability_subset";
    vk->info.coopmat = has_ext(ext, n_ext, "VK_KHR_cooperative_matrix");
    free(ext);

    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                         .queueFamilyIndex = vk->qfam,
                                         .queueCount = 1,
                                         .pQueuePriorities = &prio};
    const VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                                    .queueCreateInfoCount = 1,
                                    .pQueueCreateInfos = &qci,
                                    .enabledExtensionCount = n_dext,
                                    .ppEnabledExtensionNames = dext};
    if ((r = vk->f.vkCreateDevice(vk->phys, &dci, NULL, &vk->dev)) != VK_SUCCESS) {
        st = vk_fail(err, err_len, "vkCreateDevice", r);
        goto fail;
    }
#define X(fn)                                                                                      \
    if (!(vk->f.fn = (PFN_##fn)vk->f.vkGetDeviceProcAddr(vk->dev, #fn))) {                         \
        st = kipp_errf(err, err_len, KIPP_ERR_BACKEND, "vulkan: the driver lacks " #fn);           \
        goto fail;                                                                                 \
    }
    VK_DEVICE_FNS(X)
#undef X
    if (push)
        vk->f.vkCmdPushDescriptorSetKHR = (PFN_vkCmdPushDescriptorSetKHR)vk->f.vkGetDeviceProcAddr(
            vk->dev, "vkCmdPushDescriptorSetKHR");
    vk->info.push_descriptor = vk->f.vkCmdPushDescriptorSetKHR != NULL;
    vk->f.vkGetDeviceQueue(vk->dev, vk->qfam, 0, &vk->queue);

    const VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                         .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                         .queueFamilyIndex = vk->qfam};
    if ((r = vk->f.vkCreateCommandPool(vk->dev, &pci, NULL, &vk->pool)) != VK_SUCCESS) {
        st = vk_fail(err, err_len, "vkCreateCommandPool", r);
        goto fail;
    }
    const VkCommandBufferAllocateInfo cai = {.sType =
                                                 VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                             .commandPool = vk->pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                             .commandBufferCount = 1};
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = vk->f.vkAllocateCommandBuffers(vk->dev, &cai, &vk->cmd)) != VK_SUCCESS ||
        (r = vk->f.vkCreateFence(vk->dev, &fci, NULL, &vk->fence)) != VK_SUCCESS) {
        st = vk_fail(err, err_len, "command buffer set-up", r);
        goto fail;
    }

    /* one layout for every shader: KIPP_VK_MAX_BINDINGS storage buffers and 128 bytes of push
     * constants (a shader declares the bindings it uses) */
    VkDescriptorSetLayoutBinding b[KIPP_VK_MAX_BINDINGS];
    for (uint32_t i = 0; i < KIPP_VK_MAX_BINDINGS; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = 1,
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    const VkDescriptorSetLayoutCreateInfo dli = {
        .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
        .flags =
            vk->info.push_descriptor ? VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR : 0,
        .bindingCount = KIPP_VK_MAX_BINDINGS,
        .pBindings = b};
    const VkPushConstantRange pcr = {
        .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = 128};
    if ((r = vk->f.vkCreateDescriptorSetLayout(vk->dev, &dli, NULL, &vk->dsl)) != VK_SUCCESS) {
        st = vk_fail(err, err_len, "vkCreateDescriptorSetLayout", r);
        goto fail;
    }
    const VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                            .setLayoutCount = 1,
                                            .pSetLayouts = &vk->dsl,
                                            .pushConstantRangeCount = 1,
                                            .pPushConstantRanges = &pcr};
    if ((r = vk->f.vkCreatePipelineLayout(vk->dev, &pli, NULL, &vk->playout)) != VK_SUCCESS) {
        st = vk_fail(err, err_len, "vkCreatePipelineLayout", r);
        goto fail;
    }
    vk->pipes = calloc(kipp_vk_shader_count ? kipp_vk_shader_count : 1, sizeof *vk->pipes);
    const char *prof = getenv("KIPP_VK_PROFILE");
    if (prof && strcmp(prof, "1") == 0) {
        vk->prof_s = calloc(kipp_vk_shader_count + 1, sizeof *vk->prof_s);
        vk->prof_n = calloc(kipp_vk_shader_count + 1, sizeof *vk->prof_n);
        vk->profile = vk->prof_s && vk->prof_n;
    }
    if (!vk->pipes) {
        st = kipp_errf(err, err_len, KIPP_ERR_NOMEM, "vulkan: out of memory");
        goto fail;
    }
    /* memory types: device-local for kernels' buffers; host-visible coherent for staging;
     * host-cached where there is one for reading back */
    const VkMemoryPropertyFlags hv =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int mt = mem_type(&vk->memprops, ~0u, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    int mu = mem_type(&vk->memprops, ~0u, hv, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (mu < 0) mu = mem_type(&vk->memprops, ~0u, hv, 0);
    int md = mem_type(&vk->memprops, ~0u, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0);
    if (md < 0) md = mu;
    if (mt < 0) mt = mem_type(&vk->memprops, ~0u, 0, 0);
    if (mt < 0 || mu < 0) {
        st = kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                       "vulkan: device %d (%s) has no %s memory type", index, vk->info.name,
                       mu < 0 ? "host-visible coherent" : "usable");
        goto fail;
    }
    vk->mt_device = (uint32_t)mt;
    vk->mt_upload = (uint32_t)mu;
    vk->mt_readback = (uint32_t)md;
    *out = vk;
    return KIPP_OK;
fail:
    kipp_vk_close(vk);
    return st;
}

const kipp_vk_info *kipp_vk_info_get(const kipp_vk *vk) {
    return &vk->info;
}

static void free_host(kipp_vk *vk, host_buf *h) {
    if (h->map) vk->f.vkUnmapMemory(vk->dev, h->mem);
    if (h->buf) vk->f.vkDestroyBuffer(vk->dev, h->buf, NULL);
    if (h->mem) vk->f.vkFreeMemory(vk->dev, h->mem, NULL);
    memset(h, 0, sizeof *h);
}

void kipp_vk_close(kipp_vk *vk) {
    if (!vk) return;
    if (vk->profile && vk->dispatches) {
        fprintf(stderr, "vulkan profile (each dispatch alone, pipeline creation included):\n");
        for (uint32_t i = 0; i < kipp_vk_shader_count; i++)
            if (vk->prof_n[i])
                fprintf(stderr, "  %-22s %8llu dispatches %10.3f s %9.1f us each\n",
                        kipp_vk_shader_table[i].name, (unsigned long long)vk->prof_n[i],
                        vk->prof_s[i], 1e6 * vk->prof_s[i] / (double)vk->prof_n[i]);
    }
    free(vk->prof_s);
    free(vk->prof_n);
    if (vk->dev) {
        vk->f.vkQueueWaitIdle(vk->queue);
        for (uint32_t i = 0; i < vk->n_up; i++) free_host(vk, &vk->up[i]);
        for (uint32_t i = 0; i < vk->n_down; i++) free_host(vk, &vk->down[i]);
        if (vk->pipes)
            for (uint32_t i = 0; i < kipp_vk_shader_count; i++)
                if (vk->pipes[i]) vk->f.vkDestroyPipeline(vk->dev, vk->pipes[i], NULL);
        for (uint32_t i = 0; i < vk->n_dpool; i++)
            vk->f.vkDestroyDescriptorPool(vk->dev, vk->dpool[i], NULL);
        if (vk->playout) vk->f.vkDestroyPipelineLayout(vk->dev, vk->playout, NULL);
        if (vk->dsl) vk->f.vkDestroyDescriptorSetLayout(vk->dev, vk->dsl, NULL);
        if (vk->fence) vk->f.vkDestroyFence(vk->dev, vk->fence, NULL);
        if (vk->pool) vk->f.vkDestroyCommandPool(vk->dev, vk->pool, NULL);
        vk->f.vkDestroyDevice(vk->dev, NULL);
    }
    free(vk->pipes);
    free(vk->reads);
    close_instance(vk);
    free(vk);
}

/* ---- buffers --------------------------------------------------------------------------------- */

static VkResult make_buffer(kipp_vk *vk, uint64_t size, VkBufferUsageFlags usage, uint32_t mtype,
                            VkBuffer *buf, VkDeviceMemory *mem) {
    const VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                   .size = size,
                                   .usage = usage,
                                   .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vk->f.vkCreateBuffer(vk->dev, &bi, NULL, buf);
    if (r != VK_SUCCESS) return r;
    VkMemoryRequirements req;
    vk->f.vkGetBufferMemoryRequirements(vk->dev, *buf, &req);
    uint32_t t = mtype;
    if (!(req.memoryTypeBits >> t & 1)) {
        /* the buffer cannot live in the chosen type: the first allowed one with its flags */
        const int alt = mem_type(&vk->memprops, req.memoryTypeBits,
                                 vk->memprops.memoryTypes[mtype].propertyFlags, 0);
        if (alt < 0) {
            vk->f.vkDestroyBuffer(vk->dev, *buf, NULL);
            *buf = VK_NULL_HANDLE;
            return VK_ERROR_FEATURE_NOT_PRESENT;
        }
        t = (uint32_t)alt;
    }
    const VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                     .allocationSize = req.size,
                                     .memoryTypeIndex = t};
    if ((r = vk->f.vkAllocateMemory(vk->dev, &ai, NULL, mem)) != VK_SUCCESS ||
        (r = vk->f.vkBindBufferMemory(vk->dev, *buf, *mem, 0)) != VK_SUCCESS) {
        if (*mem) vk->f.vkFreeMemory(vk->dev, *mem, NULL);
        vk->f.vkDestroyBuffer(vk->dev, *buf, NULL);
        *buf = VK_NULL_HANDLE;
        *mem = VK_NULL_HANDLE;
    }
    return r;
}

kipp_status kipp_vk_alloc(kipp_vk *vk, uint64_t size, const char *what, kipp_vk_buf *out, char *err,
                          size_t err_len) {
    memset(out, 0, sizeof *out);
    if (size == 0) size = 4;
    size = (size + 3) & ~3ull;
    if (size > vk->info.max_alloc)
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM,
                         "vulkan: %s needs one buffer of %.1f MiB; device %s allows %.1f MiB", what,
                         size / 1048576.0, vk->info.name, vk->info.max_alloc / 1048576.0);
    const VkResult r =
        make_buffer(vk, size,
                    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                        VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                    vk->mt_device, &out->buf, &out->mem);
    if (r != VK_SUCCESS)
        return kipp_errf(err, err_len,
                         r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                             ? KIPP_ERR_NOMEM
                             : KIPP_ERR_BACKEND,
                         "vulkan: device memory for %s (%.1f MiB) on %s: VkResult %d "
                         "(%.1f MiB allocated before it)",
                         what, size / 1048576.0, vk->info.name, (int)r, vk->allocated / 1048576.0);
    out->size = size;
    vk->allocated += size;
    /* zero-filled: a stale NaN in a never-written slot must not reach a masked score */
    kipp_vk_begin(vk);
    kipp_vk_rec_fill(vk, kipp_vk_all(out), size, 0);
    const kipp_status st = kipp_vk_submit(vk, err, err_len);
    if (st != KIPP_OK) kipp_vk_free(vk, out);
    return st;
}

void kipp_vk_free(kipp_vk *vk, kipp_vk_buf *b) {
    if (!b->buf) return;
    vk->f.vkQueueWaitIdle(vk->queue);
    vk->f.vkDestroyBuffer(vk->dev, b->buf, NULL);
    vk->f.vkFreeMemory(vk->dev, b->mem, NULL);
    vk->allocated -= b->size;
    memset(b, 0, sizeof *b);
}

uint64_t kipp_vk_allocated(const kipp_vk *vk) {
    return vk->allocated;
}

/* ---- recording ------------------------------------------------------------------------------ */

static int rec_fail(kipp_vk *vk, int code, const char *fmt, const char *arg) {
    if (!vk->rec_err) {
        vk->rec_err = code ? code : -1;
        snprintf(vk->rec_msg, sizeof vk->rec_msg, fmt, arg);
    }
    return vk->rec_err;
}

int kipp_vk_begin(kipp_vk *vk) {
    if (vk->recording) return vk->rec_err;
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    vk->f.vkResetCommandBuffer(vk->cmd, 0);
    const VkResult r = vk->f.vkBeginCommandBuffer(vk->cmd, &bi);
    vk->recording = 1;
    vk->rec_err = 0;
    vk->rec_msg[0] = 0;
    if (r != VK_SUCCESS) return rec_fail(vk, (int)r, "vkBeginCommandBuffer failed%s", "");
    return 0;
}

/* After every command: its writes visible to every later command (compute or transfer). */
static void barrier(kipp_vk *vk) {
    const VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    const VkPipelineStageFlags s =
        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vk->f.vkCmdPipelineBarrier(vk->cmd, s, s, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* n bytes of a host buffer from the list (growing it), 16-byte aligned; NULL on failure. */
static host_buf *host_space(kipp_vk *vk, host_buf *list, uint32_t *count, int download, uint64_t n,
                            uint64_t *off) {
    for (uint32_t i = 0; i < *count; i++) {
        const uint64_t o = (list[i].used + 15) & ~15ull;
        if (o + n <= list[i].size) {
            list[i].used = o + n;
            *off = o;
            return &list[i];
        }
    }
    if (*count == MAX_HOST_BUFS) return NULL;
    host_buf *h = &list[*count];
    const uint64_t size = n > STAGE_MIN ? (n + 15) & ~15ull : STAGE_MIN;
    if (make_buffer(vk, size,
                    download ? VK_BUFFER_USAGE_TRANSFER_DST_BIT : VK_BUFFER_USAGE_TRANSFER_SRC_BIT,
                    download ? vk->mt_readback : vk->mt_upload, &h->buf, &h->mem) != VK_SUCCESS)
        return NULL;
    void *p = NULL;
    if (vk->f.vkMapMemory(vk->dev, h->mem, 0, VK_WHOLE_SIZE, 0, &p) != VK_SUCCESS) {
        free_host(vk, h);
        return NULL;
    }
    h->map = p;
    h->size = size;
    h->used = n;
    (*count)++;
    *off = 0;
    return h;
}

int kipp_vk_rec_write(kipp_vk *vk, kipp_vk_view dst, const void *src, uint64_t n) {
    if (kipp_vk_begin(vk)) return vk->rec_err;
    if (n == 0) return 0;
    uint64_t off;
    host_buf *h = host_space(vk, vk->up, &vk->n_up, 0, n, &off);
    if (!h)
        return rec_fail(vk, VK_ERROR_OUT_OF_HOST_MEMORY, "no staging memory for an upload%s", "");
    memcpy(h->map + off, src, n);
    const VkBufferCopy c = {.srcOffset = off, .dstOffset = dst.off, .size = n};
    vk->f.vkCmdCopyBuffer(vk->cmd, h->buf, dst.buf, 1, &c);
    barrier(vk);
    return 0;
}

int kipp_vk_rec_read(kipp_vk *vk, kipp_vk_view src, void *dst, uint64_t n) {
    if (kipp_vk_begin(vk)) return vk->rec_err;
    if (n == 0) return 0;
    uint64_t off;
    host_buf *h = host_space(vk, vk->down, &vk->n_down, 1, n, &off);
    if (!h) return rec_fail(vk, VK_ERROR_OUT_OF_HOST_MEMORY, "no readback memory for a read%s", "");
    if (vk->n_reads == vk->cap_reads) {
        const uint32_t cap = vk->cap_reads ? 2 * vk->cap_reads : 64;
        pending_read *p = realloc(vk->reads, cap * sizeof *p);
        if (!p) return rec_fail(vk, VK_ERROR_OUT_OF_HOST_MEMORY, "out of memory%s", "");
        vk->reads = p;
        vk->cap_reads = cap;
    }
    vk->reads[vk->n_reads++] = (pending_read){dst, h->map + off, n};
    const VkBufferCopy c = {.srcOffset = src.off, .dstOffset = off, .size = n};
    vk->f.vkCmdCopyBuffer(vk->cmd, src.buf, h->buf, 1, &c);
    barrier(vk);
    return 0;
}

int kipp_vk_rec_copy(kipp_vk *vk, kipp_vk_view dst, kipp_vk_view src, uint64_t n) {
    if (kipp_vk_begin(vk)) return vk->rec_err;
    if (n == 0) return 0;
    const VkBufferCopy c = {.srcOffset = src.off, .dstOffset = dst.off, .size = n};
    vk->f.vkCmdCopyBuffer(vk->cmd, src.buf, dst.buf, 1, &c);
    barrier(vk);
    return 0;
}

int kipp_vk_rec_fill(kipp_vk *vk, kipp_vk_view dst, uint64_t n, uint32_t word) {
    if (kipp_vk_begin(vk)) return vk->rec_err;
    if (n == 0) return 0;
    if (n % 4 || dst.off % 4)
        return rec_fail(vk, KIPP_ERR_INVALID_ARG, "a fill of an unaligned range%s", "");
    vk->f.vkCmdFillBuffer(vk->cmd, dst.buf, dst.off, n, word);
    barrier(vk);
    return 0;
}

static int shader_index(const char *name) {
    int lo = 0, hi = (int)kipp_vk_shader_count - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        const int c = strcmp(kipp_vk_shader_table[mid].name, name);
        if (c == 0) return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static VkPipeline pipeline(kipp_vk *vk, int i, VkResult *r) {
    if (vk->pipes[i]) return vk->pipes[i];
    const kipp_vk_spirv *s = &kipp_vk_shader_table[i];
    const VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                         .codeSize = (size_t)s->n_words * 4,
                                         .pCode = s->words};
    VkShaderModule mod;
    if ((*r = vk->f.vkCreateShaderModule(vk->dev, &mi, NULL, &mod)) != VK_SUCCESS)
        return VK_NULL_HANDLE;
    const VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = mod,
                  .pName = "main"},
        .layout = vk->playout};
    *r = vk->f.vkCreateComputePipelines(vk->dev, VK_NULL_HANDLE, 1, &ci, NULL, &vk->pipes[i]);
    vk->f.vkDestroyShaderModule(vk->dev, mod, NULL);
    return *r == VK_SUCCESS ? vk->pipes[i] : VK_NULL_HANDLE;
}

int kipp_vk_dispatch(kipp_vk *vk, const char *shader, const kipp_vk_view *bind, uint32_t n_bind,
                     const void *push, uint32_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz) {
    if (kipp_vk_begin(vk)) return vk->rec_err;
    if (gx == 0 || gy == 0 || gz == 0) return 0;
    const int i = shader_index(shader);
    if (i < 0)
        return rec_fail(vk, KIPP_ERR_INVALID_ARG, "no shader named %s in this build", shader);
    if (n_bind > KIPP_VK_MAX_BINDINGS || push_bytes > 128 || push_bytes % 4)
        return rec_fail(vk, KIPP_ERR_INVALID_ARG, "bad bindings or push constants for %s", shader);
    if (gx > vk->info.max_groups[0] || gy > vk->info.max_groups[1] || gz > vk->info.max_groups[2])
        return rec_fail(vk, KIPP_ERR_INVALID_ARG, "a grid beyond the device's limits for %s",
                        shader);
    VkResult r = VK_SUCCESS;
    struct timespec ts0;
    if (vk->profile) {
        char e[KIPP_ERR_LEN];
        kipp_vk_submit(vk, e, sizeof e); /* what came before, untimed */
        kipp_vk_begin(vk);
        clock_gettime(CLOCK_MONOTONIC, &ts0);
    }
    const VkPipeline p = pipeline(vk, i, &r);
    if (!p) return rec_fail(vk, (int)r, "could not create the pipeline of shader %s", shader);
    VkDescriptorBufferInfo bi[KIPP_VK_MAX_BINDINGS];
    VkWriteDescriptorSet w[KIPP_VK_MAX_BINDINGS];
    for (uint32_t b = 0; b < n_bind; b++) {
        uint64_t range = bind[b].size ? bind[b].size : VK_WHOLE_SIZE;
        if (range != VK_WHOLE_SIZE && range > vk->info.max_range) range = vk->info.max_range;
        bi[b] = (VkDescriptorBufferInfo){bind[b].buf, bind[b].off, range};
        if (!bind[b].buf)
            return rec_fail(vk, KIPP_ERR_INVALID_ARG, "an unbound buffer passed to %s", shader);
        w[b] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstBinding = b,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[b]};
    }
    vk->f.vkCmdBindPipeline(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    if (vk->info.push_descriptor) {
        if (n_bind)
            vk->f.vkCmdPushDescriptorSetKHR(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vk->playout, 0,
                                            n_bind, w);
    } else {
        if (vk->n_dpool == 0 || vk->dsets_used == DESC_SETS_PER_POOL) {
            /* the next pool of the chain, made the first time a recording reaches it */
            if (vk->n_dpool) vk->dpool_cur++;
            if (vk->dpool_cur == MAX_DESC_POOLS)
                return rec_fail(vk, KIPP_ERR_NOMEM, "more than %s dispatches in one recording",
                                "262144");
            if (vk->dpool_cur == vk->n_dpool) {
                const VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 DESC_SETS_PER_POOL * KIPP_VK_MAX_BINDINGS};
                const VkDescriptorPoolCreateInfo dpi = {
                    .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                    .maxSets = DESC_SETS_PER_POOL,
                    .poolSizeCount = 1,
                    .pPoolSizes = &ps};
                if ((r = vk->f.vkCreateDescriptorPool(vk->dev, &dpi, NULL,
                                                      &vk->dpool[vk->n_dpool])) != VK_SUCCESS)
                    return rec_fail(vk, (int)r, "vkCreateDescriptorPool failed for %s", shader);
                vk->n_dpool++;
            }
            vk->dsets_used = 0;
        }
        const VkDescriptorSetAllocateInfo ai = {.sType =
                                                    VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                                .descriptorPool = vk->dpool[vk->dpool_cur],
                                                .descriptorSetCount = 1,
                                                .pSetLayouts = &vk->dsl};
        VkDescriptorSet set;
        if ((r = vk->f.vkAllocateDescriptorSets(vk->dev, &ai, &set)) != VK_SUCCESS)
            return rec_fail(vk, (int)r, "vkAllocateDescriptorSets failed for %s", shader);
        vk->dsets_used++;
        for (uint32_t b = 0; b < n_bind; b++) w[b].dstSet = set;
        vk->f.vkUpdateDescriptorSets(vk->dev, n_bind, w, 0, NULL);
        vk->f.vkCmdBindDescriptorSets(vk->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, vk->playout, 0, 1,
                                      &set, 0, NULL);
    }
    if (push_bytes)
        vk->f.vkCmdPushConstants(vk->cmd, vk->playout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes,
                                 push);
    vk->f.vkCmdDispatch(vk->cmd, gx, gy, gz);
    barrier(vk);
    vk->dispatches++;
    if (vk->profile) {
        char e[KIPP_ERR_LEN];
        kipp_vk_submit(vk, e, sizeof e);
        kipp_vk_begin(vk);
        struct timespec ts1;
        clock_gettime(CLOCK_MONOTONIC, &ts1);
        vk->prof_s[i] +=
            (double)(ts1.tv_sec - ts0.tv_sec) + 1e-9 * (double)(ts1.tv_nsec - ts0.tv_nsec);
        vk->prof_n[i]++;
    }
    return 0;
}

static void end_recording(kipp_vk *vk) {
    vk->recording = 0;
    vk->n_reads = 0;
    for (uint32_t i = 0; i < vk->n_up; i++) vk->up[i].used = 0;
    for (uint32_t i = 0; i < vk->n_down; i++) vk->down[i].used = 0;
    for (uint32_t i = 0; i < vk->n_dpool && (i < vk->dpool_cur || vk->dsets_used); i++)
        vk->f.vkResetDescriptorPool(vk->dev, vk->dpool[i], 0);
    vk->dpool_cur = 0;
    vk->dsets_used = 0;
}

kipp_status kipp_vk_submit(kipp_vk *vk, char *err, size_t err_len) {
    if (!vk->recording) return KIPP_OK;
    if (vk->rec_err) {
        vk->f.vkEndCommandBuffer(vk->cmd);
        const int e = vk->rec_err;
        kipp_status st =
            kipp_errf(err, err_len, e == KIPP_ERR_NOMEM ? KIPP_ERR_NOMEM : KIPP_ERR_BACKEND,
                      "vulkan: %s (code %d)", vk->rec_msg, e);
        end_recording(vk);
        vk->rec_err = 0;
        return st;
    }
    /* the transfers' writes visible to the host once the fence has signalled */
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                .srcAccessMask =
                                    VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                                .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vk->f.vkCmdPipelineBarrier(
        vk->cmd, VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
        VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
    VkResult r = vk->f.vkEndCommandBuffer(vk->cmd);
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                             .commandBufferCount = 1,
                             .pCommandBuffers = &vk->cmd};
    if (r == VK_SUCCESS) r = vk->f.vkResetFences(vk->dev, 1, &vk->fence);
    if (r == VK_SUCCESS) r = vk->f.vkQueueSubmit(vk->queue, 1, &si, vk->fence);
    if (r == VK_SUCCESS) r = vk->f.vkWaitForFences(vk->dev, 1, &vk->fence, VK_TRUE, UINT64_MAX);
    if (r == VK_SUCCESS)
        for (uint32_t i = 0; i < vk->n_reads; i++)
            memcpy(vk->reads[i].dst, vk->reads[i].src, vk->reads[i].n);
    end_recording(vk);
    if (r == VK_ERROR_DEVICE_LOST)
        return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                         "vulkan: device lost on %s (a driver reset, a kernel fault or a "
                         "time-out)",
                         vk->info.name);
    if (r != VK_SUCCESS) return vk_fail(err, err_len, "the queue submission", r);
    return KIPP_OK;
}

/* ---- synchronous transfers ------------------------------------------------------------------- */

#define XFER_CHUNK (16u << 20)

kipp_status kipp_vk_write(kipp_vk *vk, const kipp_vk_buf *dst, uint64_t off, const void *src,
                          uint64_t n, char *err, size_t err_len) {
    if (off + n > dst->size)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "vulkan: a write past a buffer's end");
    for (uint64_t done = 0; done < n;) {
        const uint64_t c = n - done < XFER_CHUNK ? n - done : XFER_CHUNK;
        kipp_vk_begin(vk);
        kipp_vk_rec_write(vk, kipp_vk_sub(dst, off + done, c), (const unsigned char *)src + done,
                          c);
        const kipp_status st = kipp_vk_submit(vk, err, err_len);
        if (st != KIPP_OK) return st;
        done += c;
    }
    return KIPP_OK;
}

kipp_status kipp_vk_read(kipp_vk *vk, const kipp_vk_buf *src, uint64_t off, void *dst, uint64_t n,
                         char *err, size_t err_len) {
    if (off + n > src->size)
        return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "vulkan: a read past a buffer's end");
    for (uint64_t done = 0; done < n;) {
        const uint64_t c = n - done < XFER_CHUNK ? n - done : XFER_CHUNK;
        kipp_vk_begin(vk);
        kipp_vk_rec_read(vk, kipp_vk_sub(src, off + done, c), (unsigned char *)dst + done, c);
        const kipp_status st = kipp_vk_submit(vk, err, err_len);
        if (st != KIPP_OK) return st;
        done += c;
    }
    return KIPP_OK;
}

uint64_t kipp_vk_dispatches(const kipp_vk *vk) {
    return vk->dispatches;
}

void kipp_vk_pipelines(const kipp_vk *vk, char *buf, size_t len) {
    size_t n = 0;
    if (len) buf[0] = 0;
    for (uint32_t i = 0; i < kipp_vk_shader_count && n + 1 < len; i++) {
        if (!vk->pipes[i]) continue;
        const int w =
            snprintf(buf + n, len - n, "%s%s", n ? "," : "", kipp_vk_shader_table[i].name);
        if (w < 0) break;
        n += (size_t)w;
    }
}
