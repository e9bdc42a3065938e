/* outfile.c — see outfile.h. The temporary file is created with mkstemp in the target's
 * real directory (so rename is atomic, same file system), fsync'd, then renamed. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "core/outfile.h"

#include "core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The path to write: symlinks resolved when the target exists; the name itself when it
 * does not (a dangling link is written through to where it points). malloc'd. */
static char *real_target(const char *path) {
    char *r = realpath(path, NULL);
    if (r) return r;
    char buf[PATH_MAX];
    ssize_t k = readlink(path, buf, sizeof buf - 1);
    if (k > 0) { /* a dangling symlink: write where it points, relative to its directory */
        buf[k] = 0;
        if (buf[0] == '/') return strdup(buf);
        const char *slash = strrchr(path, '/');
        size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
        char *out = malloc(dl + (size_t)k + 1);
        if (!out) return NULL;
        memcpy(out, path, dl);
        memcpy(out + dl, buf, (size_t)k + 1);
        return out;
    }
    return strdup(path);
}

/* dir of p ("." when none) into d (size PATH_MAX). */
static void dir_of(const char *p, char *d) {
    const char *slash = strrchr(p, '/');
    if (!slash) { strcpy(d, "."); return; }
    size_t n = slash == p ? 1 : (size_t)(slash - p);
    if (n >= PATH_MAX) n = PATH_MAX - 1;
    memcpy(d, p, n);
    d[n] = 0;
}

kipp_status kipp_outfile_check(const char *path, char *err, size_t err_len) {
    if (!path || !*path) return kipp_errf(err, err_len, KIPP_ERR_INVALID_ARG, "output file name is empty");
    char *t = real_target(path);
    if (!t) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "%s: out of memory", path);
    struct stat st;
    kipp_status rc = KIPP_OK;
    if (stat(t, &st) == 0 && S_ISDIR(st.st_mode)) {
        rc = kipp_errf(err, err_len, KIPP_ERR_IO, "%s: is a directory", path);
    } else if (stat(t, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (access(t, W_OK) != 0)
            rc = kipp_errf(err, err_len, KIPP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    } else {
        char d[PATH_MAX];
        dir_of(t, d);
        if (access(d, W_OK | X_OK) != 0)
            rc = kipp_errf(err, err_len, KIPP_ERR_IO, "%s: cannot write in directory %s: %s", path,
                           d, strerror(errno));
    }
    free(t);
    return rc;
}

int kipp_write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

kipp_status kipp_outfile_write(const char *path, const void *data, size_t n, char *err,
                               size_t err_len) {
    kipp_status rc = kipp_outfile_check(path, err, err_len);
    if (rc != KIPP_OK) return rc;
    char *t = real_target(path);
    if (!t) return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "%s: out of memory", path);
    struct stat st;
    if (stat(t, &st) == 0 && !S_ISREG(st.st_mode)) { /* a device or FIFO: write in place */
        int fd = open(t, O_WRONLY | O_APPEND);
        if (fd < 0 || kipp_write_all(fd, data, n) != 0)
            rc = kipp_errf(err, err_len, KIPP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        if (fd >= 0 && close(fd) != 0 && rc == KIPP_OK)
            rc = kipp_errf(err, err_len, KIPP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        free(t);
        return rc;
    }
    size_t tl = strlen(t);
    char *tmp = malloc(tl + 16);
    if (!tmp) {
        free(t);
        return kipp_errf(err, err_len, KIPP_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(tmp, t, tl);
    memcpy(tmp + tl, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        rc = kipp_errf(err, err_len, KIPP_ERR_IO, "%s: cannot create a temporary file beside it: %s",
                       path, strerror(errno));
    } else {
        /* keep the mode an existing file had; a new one gets 0666 minus the umask */
        mode_t mode = 0666;
        if (stat(t, &st) == 0) mode = st.st_mode & 07777;
        else { mode_t um = umask(0); umask(um); mode &= ~um; }
        if (fchmod(fd, mode) != 0 || kipp_write_all(fd, data, n) != 0 || fsync(fd) != 0) {
            rc = kipp_errf(err, err_len, KIPP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
            close(fd);
        } else if (close(fd) != 0) {
            rc = kipp_errf(err, err_len, KIPP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        } else if (rename(tmp, t) != 0) {
            rc = kipp_errf(err, err_len, KIPP_ERR_IO, "%s: cannot replace it: %s", path,
                           strerror(errno));
        }
        if (rc != KIPP_OK) unlink(tmp);
    }
    free(tmp);
    free(t);
    return rc;
}
