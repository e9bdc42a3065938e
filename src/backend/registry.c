/* registry.c — backend name → function table. The only place that knows which backends a
 * build contains; an unknown or missing backend is an error, never a fallback. */
#include "backend/backend.h"

#include "core/error.h"

#include <string.h>

static const struct {
    const char *name;
    const kipp_backend_ops *ops; /* NULL: known, but not part of this build */
    const char *how;             /* how to get it when it is missing */
} registry[] = {
    {"cpu-ref", &kipp_backend_cpu_ref, ""},
    {"cpu", &kipp_backend_cpu, ""},
    {"cuda", NULL, "build with `make cuda-generic` on a machine with the CUDA toolkit"},
    {"metal", NULL, "build with `make metal` on macOS"},
};

kipp_status kipp_backend_find(const char *name, const kipp_backend_ops **out, char *err,
                              size_t err_len) {
    *out = NULL;
    if (!name) name = kipp_backend_default();
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++) {
        if (strcmp(registry[i].name, name) != 0) continue;
        if (!registry[i].ops)
            return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                             "backend '%s' is not available in this binary (%s); Kipp does not "
                             "fall back to another backend",
                             name, registry[i].how);
        *out = registry[i].ops;
        return KIPP_OK;
    }
    return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                     "unknown backend '%s' (known: cpu-ref, cpu, cuda, metal; this binary has: "
                     "%s)",
                     name, kipp_backend_list());
}

const char *kipp_backend_list(void) { return "cpu,cpu-ref"; }
const char *kipp_backend_names(void) { return kipp_backend_list(); }
const char *kipp_backend_default(void) { return "cpu"; }
