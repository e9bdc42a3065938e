/* outfile.h — writing a file the user named without ever destroying it on failure: the
 * bytes go to a temporary file beside the target and are renamed over it only once they
 * are all on disk. A symlink is followed (its target is replaced, the link kept); a target
 * that exists and is not a regular file (a device, a FIFO, /dev/stdout) is written in place,
 * never unlinked or replaced. Not here: locking against concurrent writers. */
#ifndef KIPP_CORE_OUTFILE_H
#define KIPP_CORE_OUTFILE_H

#include "kipp.h"

#include <stddef.h>

/* Checks, without creating or changing anything, that path could be written later: its
 * directory is writable (or, for an existing non-regular file, the file itself). */
kipp_status kipp_outfile_check(const char *path, char *err, size_t err_len);

/* Writes data[0..n) to path as described above. On failure path is untouched (a partial
 * temporary file is removed) and err names the file and the reason. */
kipp_status kipp_outfile_write(const char *path, const void *data, size_t n, char *err,
                               size_t err_len);

/* Writes all n bytes to fd, retrying short writes and EINTR; 0, or -1 with errno set. */
int kipp_write_all(int fd, const void *data, size_t n);

#endif
