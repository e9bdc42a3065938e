"""atomic_file.py — writing a file the user named without ever destroying it on failure
(the rule docs/testing.md and the C side, src/core/outfile.c, follow too): the bytes go
to a uniquely named temporary file beside the real target and are renamed over it only
when complete. A symlink is followed (its target is replaced, the link kept); an existing
target that is not a regular file (/dev/null, a FIFO) is written in place, never replaced
or unlinked; a failed write removes only the temporary file."""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


@contextlib.contextmanager
def replace_on_success(path):
    """Yields a Path to write; on a normal exit it becomes `path`, on an exception it is
    removed and `path` is untouched."""
    path = Path(path)
    real = Path(os.path.realpath(path))
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(f"{path}: is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        yield real  # a device or FIFO: written in place
        return
    fd, tmp_name = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        os.chmod(tmp, (st.st_mode & 0o7777) if st is not None else 0o666 & ~_umask())
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, real)
    finally:
        if tmp.exists():
            tmp.unlink()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def write_text(path, text: str) -> None:
    with replace_on_success(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
