/* mm.c — the vulkan backend's matrix products (the "weights" half of kernels.h): y = x W^T
 * straight from the GGUF block layout, and whole-row dequantization, for the 15 weight types
 * the cpu backend runs. Launchers only: they check the arguments against the contract, fold
 * the grids below the 65535 groups per dimension a device may stop at, and record one
 * dispatch of a per-type shader (shaders/matvec.comp, matmul.comp, dequant.comp, each
 * compiled once per type with quant.glsl's decoder of that type).
 *
 * Paths of kipp_vk_matmul: up to MV_TOK tokens, or any number with exact = 1, run the
 * matrix-vector kernel (passes of 8 tokens, each weight group decoded once per pass, tpr
 * threads per row, f32 accumulation in a fixed order that does not depend on the other
 * tokens); more run the tiled product (64 outputs x 32 tokens per workgroup, W dequantized a
 * 64 x 32 tile at a time into shared memory). Both use the weights' exact f32 values, so they
 * differ only in summation order.
 *
 * Addressing: the shaders index their views with 32-bit integers (bytes of W, elements of x,
 * x_rows and y), so every index a call can reach must stay below 2^32; a view is at most
 * max_range bytes anyway (forward.c splits larger matrices by rows). */
#include "backend/vulkan/kernels.h"
#include "core/types.h"

#include <stdint.h>

#define MV_TOK 8      /* matvec.comp's tokens per pass: the decode/tiled switch */
#define MV_WG 64      /* matvec.comp's threads per workgroup */
#define MV1_BLOCKS 8  /* matvec1.comp's row groups per workgroup (matvec_body.glsl) */
#define MM_BO 64      /* matmul.comp's output rows per tile */
#define MM_BT 32      /* matmul.comp's tokens per tile */
#define DQ_WG 64      /* dequant.comp's invocations per workgroup */
#define GRID_MAX 65535u

/* The shader name suffix of each supported type (backend.mk's VK_WTYPES). */
static const char *type_suffix(uint32_t type) {
    switch (type) {
    case KIPP_TYPE_F32: return "f32";
    case KIPP_TYPE_F16: return "f16";
    case KIPP_TYPE_BF16: return "bf16";
    case KIPP_TYPE_Q4_0: return "q4_0";
    case KIPP_TYPE_Q4_1: return "q4_1";
    case KIPP_TYPE_Q5_0: return "q5_0";
    case KIPP_TYPE_Q5_1: return "q5_1";
    case KIPP_TYPE_Q8_0: return "q8_0";
    case KIPP_TYPE_Q2_K: return "q2_k";
    case KIPP_TYPE_Q3_K: return "q3_k";
    case KIPP_TYPE_Q4_K: return "q4_k";
    case KIPP_TYPE_Q5_K: return "q5_k";
    case KIPP_TYPE_Q6_K: return "q6_k";
    case KIPP_TYPE_IQ4_NL: return "iq4_nl";
    case KIPP_TYPE_IQ4_XS: return "iq4_xs";
    default: return NULL;
    }
}

int kipp_vk_mm_type_supported(uint32_t type) { return type_suffix(type) != NULL; }

int kipp_vk_mm_shape_supported(uint32_t type, uint32_t n_in) {
    if (!kipp_vk_mm_type_supported(type) || n_in == 0) return 0;
    const uint32_t be = kipp_type_block_elems(type);
    return be != 0 && n_in % be == 0 && n_in % 8 == 0;
}

/* "matvec_q4_k" etc. into buf. */
static void shader_name(char *buf, size_t len, const char *kernel, uint32_t type) {
    const char *s = type_suffix(type);
    size_t n = 0;
    for (const char *c = kernel; *c && n + 1 < len; c++) buf[n++] = *c;
    if (n + 1 < len) buf[n++] = '_';
    for (const char *c = s; *c && n + 1 < len; c++) buf[n++] = *c;
    buf[n] = 0;
}

/* Folds `groups` workgroups into a grid of at most GRID_MAX per dimension: *a * *b >= groups
 * (the shader skips the ids past `groups`). 0 when even that does not fit. */
static int fold(uint64_t groups, uint32_t *a, uint32_t *b) {
    if (groups <= GRID_MAX) {
        *a = (uint32_t)groups, *b = 1;
        return 1;
    }
    const uint64_t nb = (groups + GRID_MAX - 1) / GRID_MAX;
    if (nb > GRID_MAX) return 0;
    *b = (uint32_t)nb;
    *a = (uint32_t)((groups + nb - 1) / nb);
    return 1;
}

/* The push constants matvec.comp and matmul.comp share. */
typedef struct {
    uint32_t w_byte0, row_bytes, n_in, n_out;
    uint32_t ldx, x_row0, has_rows;
    uint32_t n_tok, ldy, y_row0, y_col0;
    uint32_t groups;
    uint32_t tpr; /* matvec.comp: threads per row */
} mm_push;

/* matvec.comp's threads per output row (kernels.h): on a CPU device (lavapipe) one, so no
 * workgroup waits at a barrier (each costs lavapipe a switch between the workgroup's
 * invocations: a 64-thread tree made its matrix-vector products 2-3 times slower); elsewhere
 * a row's groups of 8 rounded up to a power of two, at most 32 (two rows a workgroup,
 * neighbouring threads reading neighbouring groups). */
static uint32_t g_force_tpr;

int kipp_vk_mm_force_tpr(uint32_t tpr) {
    if (tpr > MV_WG || (tpr & (tpr - 1)) != 0) return KIPP_VK_EINVAL;
    g_force_tpr = tpr;
    return 0;
}

uint32_t kipp_vk_matvec_threads_per_row(const kipp_vk *vk, uint32_t n_in) {
    if (g_force_tpr) return g_force_tpr;
    if (kipp_vk_info_get(vk)->type == VK_PHYSICAL_DEVICE_TYPE_CPU) return 1;
    uint32_t t = 1;
    while (t < 32 && t < n_in / 8) t <<= 1;
    return t;
}

int kipp_vk_matmul(kipp_vk *vk, uint32_t type, kipp_vk_view w, uint64_t w_byte0, uint32_t n_in,
                   uint32_t n_out, kipp_vk_view x, uint32_t ldx, kipp_vk_view x_rows,
                   uint32_t x_row0, uint32_t n_tok, kipp_vk_view y, uint32_t ldy, uint32_t y_row0,
                   uint32_t y_col0, int exact) {
    if (!vk || !kipp_vk_mm_shape_supported(type, n_in)) return KIPP_VK_EINVAL;
    if (n_tok == 0 || n_out == 0) return 0;
    if (w.buf == VK_NULL_HANDLE || x.buf == VK_NULL_HANDLE || y.buf == VK_NULL_HANDLE)
        return KIPP_VK_EINVAL;
    if (ldx < n_in || (uint64_t)y_col0 + n_out > ldy) return KIPP_VK_EINVAL;
    const uint64_t rb = kipp_type_row_bytes(type, n_in);
    /* every index the shaders form stays below 2^32 (and inside a sized W view) */
    const uint64_t w_end = w_byte0 + rb * n_out;
    if (w_end > UINT32_MAX || (w.size && w_end > w.size)) return KIPP_VK_EINVAL;
    if ((uint64_t)y_row0 + n_tok > UINT32_MAX ||
        ((uint64_t)y_row0 + n_tok) * ldy > UINT32_MAX || (uint64_t)x_row0 + n_tok > UINT32_MAX)
        return KIPP_VK_EINVAL;
    const int gather = x_rows.buf != VK_NULL_HANDLE;
    if (!gather && ((uint64_t)x_row0 + n_tok) * ldx > UINT32_MAX) return KIPP_VK_EINVAL;

    mm_push pc = {(uint32_t)w_byte0, (uint32_t)rb, n_in, n_out, ldx, x_row0,
                  (uint32_t)gather, n_tok, ldy, y_row0, y_col0, 0, 1};
    /* binding 2 must name a buffer even when no list is read: x stands in */
    const kipp_vk_view bind[4] = {w, x, gather ? x_rows : x, y};
    char name[32];
    uint32_t ga, gb;
    if (exact || n_tok <= MV_TOK) {
        pc.tpr = kipp_vk_matvec_threads_per_row(vk, n_in);
        const uint64_t rows = MV_WG / pc.tpr;
        const uint64_t groups = ((uint64_t)n_out + rows - 1) / rows;
        const uint64_t passes = ((uint64_t)n_tok + MV_TOK - 1) / MV_TOK;
        /* matvec1 runs MV1_BLOCKS row groups per workgroup (matvec_body.glsl) */
        const uint64_t wgs = pc.tpr == 1 ? (groups + MV1_BLOCKS - 1) / MV1_BLOCKS : groups;
        if (!fold(wgs, &ga, &gb) || passes > GRID_MAX) return KIPP_VK_EINVAL;
        pc.groups = (uint32_t)groups;
        /* one thread per row: the barrier-free build of the same code (matvec1.comp) */
        shader_name(name, sizeof name, pc.tpr == 1 ? "matvec1" : "matvec", type);
        return kipp_vk_dispatch(vk, name, bind, 4, &pc, sizeof pc, ga, gb, (uint32_t)passes);
    }
    const uint64_t tiles = ((uint64_t)n_out + MM_BO - 1) / MM_BO;
    const uint64_t ttiles = ((uint64_t)n_tok + MM_BT - 1) / MM_BT;
    if (!fold(tiles, &ga, &gb) || ttiles > GRID_MAX) return KIPP_VK_EINVAL;
    pc.groups = (uint32_t)tiles;
    shader_name(name, sizeof name, "matmul", type);
    return kipp_vk_dispatch(vk, name, bind, 4, &pc, sizeof pc, ga, (uint32_t)ttiles, gb);
}

int kipp_vk_dequantize(kipp_vk *vk, uint32_t type, kipp_vk_view w, uint64_t w_byte0,
                       uint32_t n_in, uint32_t n_rows, kipp_vk_view y) {
    if (!vk || !kipp_vk_mm_shape_supported(type, n_in)) return KIPP_VK_EINVAL;
    if (n_rows == 0) return 0;
    if (w.buf == VK_NULL_HANDLE || y.buf == VK_NULL_HANDLE) return KIPP_VK_EINVAL;
    const uint64_t rb = kipp_type_row_bytes(type, n_in);
    const uint64_t w_end = w_byte0 + rb * n_rows;
    if (w_end > UINT32_MAX || (w.size && w_end > w.size)) return KIPP_VK_EINVAL;
    if ((uint64_t)n_in * n_rows > UINT32_MAX) return KIPP_VK_EINVAL;
    const struct {
        uint32_t w_byte0, row_bytes, n_in, n_rows;
    } pc = {(uint32_t)w_byte0, (uint32_t)rb, n_in, n_rows};
    const uint64_t groups = ((uint64_t)n_in / 8 * n_rows + DQ_WG - 1) / DQ_WG;
    uint32_t ga, gb;
    if (!fold(groups, &ga, &gb)) return KIPP_VK_EINVAL;
    const kipp_vk_view bind[2] = {w, y};
    char name[32];
    shader_name(name, sizeof name, "dequant", type);
    return kipp_vk_dispatch(vk, name, bind, 2, &pc, sizeof pc, ga, gb, 1);
}
