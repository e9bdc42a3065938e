/* test_cuda_probe.c — the cuda backend's fatal start-up decisions (src/backend/cuda/probe.c)
 * over fabricated probes: every refusal, in its order, with the facts its message must name
 * (found and needed), and the machines that must pass. Runs in the ordinary unit suite, no
 * GPU or CUDA headers needed; the real no-driver path is the shell test's. */
#include "backend/cuda/probe.h"

#include "kt.h"

#include <string.h>

/* An H200-like machine that passes every check (generic build, CUDA 13.0 both sides). */
static kipp_cuda_probe good(void) {
    return (kipp_cuda_probe){.driver_version = 13000, .runtime_version = 13000,
                             .device_count = 2, .device = 0, .cc_major = 9, .cc_minor = 0,
                             .name = "NVIDIA H200", .free_bytes = 140ull << 30,
                             .total_bytes = 141ull << 30, .weight_bytes = 8ull << 30,
                             .scratch_bytes = 1ull << 30, .spark = 0};
}

/* Runs the check; 1 when it returned `want` and (for a failure) err holds every needle. */
static int expect(const kipp_cuda_probe *p, kipp_status want, const char *const *needles,
                  size_t n_needles) {
    char err[512] = "";
    const kipp_status st = kipp_cuda_probe_check(p, err, sizeof err);
    if (st != want) {
        fprintf(stderr, "  status %d, want %d (%s)\n", (int)st, (int)want, err);
        return 0;
    }
    for (size_t i = 0; i < n_needles; i++) {
        if (!strstr(err, needles[i])) {
            fprintf(stderr, "  '%s' lacks '%s'\n", err, needles[i]);
            return 0;
        }
    }
    return 1;
}

#define EXPECT_OK(p) expect(&(p), KIPP_OK, NULL, 0)
#define EXPECT_ERR(p, ...)                                                                   \
    expect(&(p), KIPP_ERR_BACKEND, (const char *const[]){__VA_ARGS__},                       \
           sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

void kt_suite_cuda_probe(void) {
    char buf[16];
    KT_CHECK(strcmp(kipp_cuda_version_str(12020, buf, sizeof buf), "12.2") == 0, "%s", buf);
    KT_CHECK(strcmp(kipp_cuda_version_str(13000, buf, sizeof buf), "13.0") == 0, "%s", buf);
    KT_CHECK(strcmp(kipp_cuda_version_str(11080, buf, sizeof buf), "11.8") == 0, "%s", buf);

    kipp_cuda_probe p = good();
    KT_CHECK(EXPECT_OK(p));
    p.driver_version = 13010; /* a newer driver than the runtime is fine */
    KT_CHECK(EXPECT_OK(p));

    /* no driver: static cudart reports version 0 when libcuda.so.1 is absent; every later
     * field is garbage and must not be consulted */
    p = good();
    p.driver_version = 0;
    p.device_count = 0;
    p.cc_major = 3;
    KT_CHECK(EXPECT_ERR(p, "no NVIDIA driver found", "13.0", "--backend cpu"));

    p = good();
    p.driver_version = 12020;
    KT_CHECK(EXPECT_ERR(p, "driver supports CUDA 12.2", "built with CUDA 13.0"));
    p.driver_version = 12090; /* 12.9 < 13.0 too */
    KT_CHECK(EXPECT_ERR(p, "12.9", "13.0"));

    p = good();
    p.device_count = 0;
    KT_CHECK(EXPECT_ERR(p, "no CUDA device", "CUDA 13.0"));

    p = good();
    p.device = 2;
    KT_CHECK(EXPECT_ERR(p, "device 2 asked for", "2 CUDA devices", "0..1"));
    p.device = -1;
    KT_CHECK(EXPECT_ERR(p, "device -1 asked for"));
    p = good();
    p.device_count = 1;
    p.device = 1;
    KT_CHECK(EXPECT_ERR(p, "1 CUDA device (", "0..0"));
    p.device = 0;
    KT_CHECK(EXPECT_OK(p));

    /* generic build: 8.0 and newer (PTX covers later GPUs), older refused */
    p = good();
    p.cc_major = 7;
    p.cc_minor = 5;
    p.name = "Tesla T4";
    KT_CHECK(EXPECT_ERR(p, "Tesla T4", "compute capability 7.5", "8.0 (Ampere) and newer"));
    const int ok_cc[][2] = {{8, 0}, {8, 6}, {8, 9}, {9, 0}, {10, 0}, {12, 0}, {12, 1}};
    for (size_t i = 0; i < sizeof ok_cc / sizeof ok_cc[0]; i++) {
        p.cc_major = ok_cc[i][0];
        p.cc_minor = ok_cc[i][1];
        KT_CHECK(EXPECT_OK(p), "generic cc %d.%d", ok_cc[i][0], ok_cc[i][1]);
    }
    p.name = NULL;
    p.cc_major = 6;
    p.cc_minor = 1;
    KT_CHECK(EXPECT_ERR(p, "unnamed GPU", "6.1"));

    /* spark build: 12.1 only */
    p = good();
    p.spark = 1;
    p.cc_major = 12;
    p.cc_minor = 1;
    p.name = "NVIDIA GB10";
    KT_CHECK(EXPECT_OK(p));
    const int bad_spark[][2] = {{9, 0}, {12, 0}, {8, 0}, {10, 0}, {12, 2}};
    for (size_t i = 0; i < sizeof bad_spark / sizeof bad_spark[0]; i++) {
        p.cc_major = bad_spark[i][0];
        p.cc_minor = bad_spark[i][1];
        KT_CHECK(EXPECT_ERR(p, "spark build", "12.1", "kipp-cuda-generic"), "spark cc %d.%d",
                 bad_spark[i][0], bad_spark[i][1]);
    }

    /* memory: weights + scratch against free (not total) memory, sizes in MiB */
    p = good();
    p.free_bytes = 3000ull << 20;
    p.total_bytes = 81920ull << 20;
    p.weight_bytes = 2900ull << 20;
    p.scratch_bytes = 200ull << 20;
    KT_CHECK(EXPECT_ERR(p, "3000 MiB free of 81920 MiB", "needs 3100 MiB", "2900 MiB of weights",
                        "200 MiB of scratch", "NVIDIA H200"));
    p.scratch_bytes = 100ull << 20; /* exactly what is free: fits */
    KT_CHECK(EXPECT_OK(p));
    p.weight_bytes = p.scratch_bytes = 0; /* memory(): no need given, no check */
    p.free_bytes = 0;
    KT_CHECK(EXPECT_OK(p));

    /* order: with several problems, the first in line is the one reported */
    p = good();
    p.driver_version = 12000;
    p.device = 5;
    p.cc_major = 7;
    KT_CHECK(EXPECT_ERR(p, "driver supports CUDA 12.0"));
    p.driver_version = 13000;
    KT_CHECK(EXPECT_ERR(p, "device 5 asked for"));
    p.device = 0;
    p.free_bytes = 0;
    KT_CHECK(EXPECT_ERR(p, "compute capability 7.0"));
}
