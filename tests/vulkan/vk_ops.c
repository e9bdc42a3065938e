/* vk_ops.c — `kipp_test --vulkan-operators`: the vulkan backend's runtime (vk.c: staging writes
 * and reads, fills, copies, dispatches with offsets and two-dimensional grids, errors) and
 * every kernel of src/backend/vulkan/kernels.h against a CPU reference on random inputs over
 * many shapes (ops_mm.c: the matrix products and dequantization of every weight type;
 * ops_misc.c: norms, RoPE, SwiGLU, residuals, biases, row gathers, the experts' sum, KV stores,
 * paged attention with the fault modes), as llama.cpp's test-backend-ops checks its backends.
 * Runs on the first Vulkan device (KIPP_VK_DEVICE=N picks another): lavapipe in make test.
 * Without a Vulkan device it fails, naming what is missing. */
#include "backend/vulkan/vk.h"

#include "kt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int kt_vk_ops_mm(kipp_vk *vk) __attribute__((weak));
int kt_vk_ops_misc(kipp_vk *vk) __attribute__((weak));
int kt_vulkan_operators(const char *unused1, const char *unused2);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The runtime itself: what every kernel test below relies on. */
static void runtime_checks(kipp_vk *vk) {
    char err[KIPP_ERR_LEN];
    enum { N = 100003 }; /* not a multiple of the workgroup, and more than 65535 groups' worth */
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    kipp_vk_buf bx, by;
    KT_CHECK(x && y, "out of memory");
    if (!x || !y) goto done;
    for (int i = 0; i < N; i++) x[i] = (float)i * 0.5f - 7.0f;
    KT_CHECK(kipp_vk_alloc(vk, N * 4, "test x", &bx, err, sizeof err) == KIPP_OK, "%s", err);
    KT_CHECK(kipp_vk_alloc(vk, N * 4 + 64, "test y", &by, err, sizeof err) == KIPP_OK, "%s", err);
    /* a fresh buffer reads back as zeros */
    memset(y, 0xff, N * 4);
    KT_CHECK(kipp_vk_read(vk, &by, 0, y, N * 4, err, sizeof err) == KIPP_OK, "%s", err);
    int zeros = 1;
    for (int i = 0; i < N; i++) zeros &= y[i] == 0.0f;
    KT_CHECK(zeros, "a new buffer is not zero-filled");
    /* staging write then read: the same bytes */
    KT_CHECK(kipp_vk_write(vk, &bx, 0, x, N * 4, err, sizeof err) == KIPP_OK, "%s", err);
    memset(y, 0, N * 4);
    KT_CHECK(kipp_vk_read(vk, &bx, 0, y, N * 4, err, sizeof err) == KIPP_OK, "%s", err);
    KT_CHECK(memcmp(x, y, N * 4) == 0, "write + read did not round-trip");
    /* a dispatch over a folded grid into a view at an offset, then copy and fill in one
     * recording, read back at the end */
    struct {
        uint32_t n, row;
        float a, b;
    } p = {N, 64 * 1024, 2.0f, 1.0f};
    const kipp_vk_view b2[2] = {kipp_vk_all(&bx), kipp_vk_sub(&by, 64, N * 4)};
    kipp_vk_begin(vk);
    int rc = kipp_vk_dispatch(vk, "selftest", b2, 2, &p, sizeof p, 1024, (N + 65535) / 65536, 1);
    KT_CHECK(rc == 0, "dispatch: %d", rc);
    kipp_vk_rec_fill(vk, kipp_vk_sub(&by, 0, 64), 64, 0x3f800000u); /* 1.0f */
    static float head[16], tail[N];
    kipp_vk_rec_read(vk, kipp_vk_sub(&by, 0, 64), head, 64);
    kipp_vk_rec_copy(vk, kipp_vk_sub(&bx, 0, N * 4), kipp_vk_sub(&by, 64, N * 4), N * 4);
    kipp_vk_rec_read(vk, kipp_vk_sub(&bx, 0, N * 4), tail, N * 4);
    KT_CHECK(kipp_vk_submit(vk, err, sizeof err) == KIPP_OK, "%s", err);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= tail[i] == x[i] * 2.0f + 1.0f;
    KT_CHECK(ok, "selftest kernel or copy wrong (tail[1] = %g, want %g)", tail[1], x[1] * 2 + 1);
    ok = 1;
    for (int i = 0; i < 16; i++) ok &= head[i] == 1.0f;
    KT_CHECK(ok, "fill wrong");
    /* more dispatches in one recording than one descriptor pool holds (4096 sets): the chain
     * of pools, each dispatch adding 1 to 16 words */
    {
        static float acc[16];
        struct {
            uint32_t n, row;
            float a, b;
        } q = {16, 64, 1.0f, 1.0f};
        const kipp_vk_view b3[2] = {kipp_vk_sub(&by, 0, 64), kipp_vk_sub(&by, 0, 64)};
        kipp_vk_begin(vk);
        kipp_vk_rec_fill(vk, kipp_vk_sub(&by, 0, 64), 64, 0);
        for (int d = 0; d < 9000; d++)
            kipp_vk_dispatch(vk, "selftest", b3, 2, &q, sizeof q, 1, 1, 1);
        kipp_vk_rec_read(vk, kipp_vk_sub(&by, 0, 64), acc, 64);
        KT_CHECK(kipp_vk_submit(vk, err, sizeof err) == KIPP_OK, "%s", err);
        KT_CHECK(acc[0] == 9000.0f && acc[15] == 9000.0f, "9000 dispatches in one recording: %g",
                 acc[0]);
    }
    /* an unknown shader is an error at submit that names it; nothing runs */
    kipp_vk_begin(vk);
    kipp_vk_dispatch(vk, "no_such_shader", b2, 2, &p, sizeof p, 1, 1, 1);
    const kipp_status st = kipp_vk_submit(vk, err, sizeof err);
    KT_CHECK(st != KIPP_OK && strstr(err, "no_such_shader"), "unknown shader: %d %s", st, err);
    /* and the runtime recovers for the next recording */
    KT_CHECK(kipp_vk_read(vk, &bx, 0, y, 16, err, sizeof err) == KIPP_OK, "%s", err);
    kipp_vk_free(vk, &bx);
    kipp_vk_free(vk, &by);
done:
    free(x);
    free(y);
}

int kt_vulkan_operators(const char *unused1, const char *unused2) {
    (void)unused1;
    (void)unused2;
    char err[KIPP_ERR_LEN];
    const char *d = getenv("KIPP_VK_DEVICE");
    kipp_vk *vk = NULL;
    if (kipp_vk_open(d ? atoi(d) : 0, &vk, err, sizeof err) != KIPP_OK) {
        fprintf(stderr, "kipp_test: --vulkan-operators: %s\n", err);
        return -1;
    }
    const kipp_vk_info *in = kipp_vk_info_get(vk);
    printf("vulkan operators on %s (driver %s, %s; Vulkan %u.%u; subgroup %u; max view %.0f MiB)\n",
           in->name, in->driver, in->driver_info, VK_API_VERSION_MAJOR(in->api_version),
           VK_API_VERSION_MINOR(in->api_version), in->subgroup_size, in->max_range / 1048576.0);
    const int f0 = kt_failed;
    int bad = 0;
    double t = now();
    runtime_checks(vk);
    printf("  runtime: %.1f s\n", now() - t);
    if (kt_vk_ops_mm) {
        t = now();
        bad += kt_vk_ops_mm(vk);
        printf("  matrix products: %.1f s\n", now() - t);
    }
    if (kt_vk_ops_misc) {
        t = now();
        bad += kt_vk_ops_misc(vk);
        printf("  other kernels: %.1f s\n", now() - t);
    }
    kipp_vk_close(vk);
    return bad > kt_failed - f0 ? bad : kt_failed - f0;
}
