/* registry.c — backend name → function table, from the list in backends.def (the only
 * place that names the backends). A backend whose objects are not linked into this binary
 * is a null weak reference: known, but missing. An unknown or missing backend is an
 * error, never a fallback. */
#include "backend/backend.h"

#include "core/error.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define KIPP_BACKEND(name, sym, how) extern const kipp_backend_ops sym __attribute__((weak));
#include "backend/backends.def"
#undef KIPP_BACKEND

static const struct {
    const char *name;
    const kipp_backend_ops *ops; /* NULL: known, but not part of this build */
    const char *how;             /* how to get it when it is missing */
} registry[] = {
#define KIPP_BACKEND(name, sym, how) {name, &sym, how},
#include "backend/backends.def"
#undef KIPP_BACKEND
};
#define N_REGISTRY (sizeof registry / sizeof registry[0])

static char built[256], known[256];
static pthread_once_t lists_once = PTHREAD_ONCE_INIT;

static void make_lists(void) {
    for (size_t i = 0; i < N_REGISTRY; i++) {
        const size_t n = strlen(known);
        snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "", registry[i].name);
        if (!registry[i].ops) continue;
        const size_t b = strlen(built);
        snprintf(built + b, sizeof built - b, "%s%s", b ? "," : "", registry[i].name);
    }
}

const char *kipp_backend_names(void) {
    pthread_once(&lists_once, make_lists);
    return built;
}

const char *kipp_backend_default(void) {
    for (size_t i = 0; i < N_REGISTRY; i++)
        if (registry[i].ops) return registry[i].name;
    return "none";
}

kipp_status kipp_backend_find(const char *name, const kipp_backend_ops **out, char *err,
                              size_t err_len) {
    *out = NULL;
    if (!name) name = kipp_backend_default();
    for (size_t i = 0; i < N_REGISTRY; i++) {
        if (strcmp(registry[i].name, name) != 0) continue;
        if (!registry[i].ops)
            return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                             "backend '%s' is not available in this binary (%s); Kipp does not "
                             "fall back to another backend",
                             name, registry[i].how);
        *out = registry[i].ops;
        return KIPP_OK;
    }
    pthread_once(&lists_once, make_lists);
    return kipp_errf(err, err_len, KIPP_ERR_BACKEND,
                     "unknown backend '%s' (known: %s; this binary has: %s)", name, known, built);
}
