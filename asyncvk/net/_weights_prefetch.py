"""A model's weights read before the load asks for them.

The CLI knows the ``.bin`` path at its first lines, 0.25-0.4 s before ``load_model`` runs:
that long goes on imports, which hold the GIL, while a file read releases it. Read on a thread
there, a large model's weights (vgg16's 553 MB, ViT's 353 MB) are in memory by the time the
load wants them. Standard library only: the CLI imports this before numpy.

An early read is used only if the file is still the one read (same device, inode, size,
modification and change times); otherwise the load reads the file again, as it would have
without. Only regular files are read early: a pipe read early would be empty for the load.
"""

from __future__ import annotations

import os
import stat
import threading

_Identity = tuple[int, int, int, int, int]


def _identity(st: os.stat_result) -> _Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _EarlyRead:
    def __init__(self, path: str) -> None:
        self.path = path
        self.done = threading.Event()
        self.data: bytes | None = None
        self.identity: _Identity | None = None

    def run(self) -> None:
        try:
            # a pipe is never opened: opening it would count as its reader (releasing a waiting
            # writer, which then dies on a closed pipe); the fstat below re-checks the file
            if not stat.S_ISREG(os.stat(self.path).st_mode):
                return
            # non-blocking: should the path become a pipe in between, open does not wait
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with open(fd, "rb") as f:
                before = os.fstat(fd)
                if not stat.S_ISREG(before.st_mode):
                    return
                data = f.read()
                if _identity(os.fstat(fd)) == _identity(before):
                    self.data, self.identity = data, _identity(before)
        except OSError:  # the load's own read reports it
            pass
        finally:
            self.done.set()


_lock = threading.Lock()
_reads: dict[str, _EarlyRead] = {}


def start_reading(path: str | os.PathLike[str]) -> None:
    """Read ``path`` on a thread now, for the load's :func:`take_early_read`."""
    key = os.path.abspath(path)
    with _lock:
        if key in _reads:
            return
        read = _reads[key] = _EarlyRead(key)
    threading.Thread(target=read.run, name="asyncvk-read-weights", daemon=True).start()


def take_early_read(path: str | os.PathLike[str]) -> bytes | None:
    """The bytes read early for ``path`` (waiting for the read to end), if the file is
    unchanged since; None otherwise. Each early read is given out once."""
    with _lock:
        read = _reads.pop(os.path.abspath(path), None)
    if read is None:
        return None
    read.done.wait()
    if read.data is None:
        return None
    try:
        unchanged = _identity(os.stat(read.path)) == read.identity
    except OSError:
        return None
    return read.data if unchanged else None


__all__ = ("start_reading", "take_early_read")
