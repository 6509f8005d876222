"""OS errors in the words a user reads: the path, then what went wrong, never ``[Errno N]``.

Python's own text (``[Errno 21] Is a directory: '/tmp'``) puts a number first and the path
last, quoted; the command line says ``/tmp: is a folder, not a file``, and where the fix is
not obvious, names it.
"""

from __future__ import annotations

import errno

_WORDS = {
    errno.ENOENT: "no such file or folder",
    errno.EACCES: "permission denied: this user may not open it",
    errno.EPERM: "not permitted for this user",
    errno.EISDIR: "is a folder, not a file",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "over this user's disk quota",
    errno.EROFS: "the file system is read-only",
    errno.ENAMETOOLONG: "the name is too long",
    errno.ELOOP: "too many symbolic links in the path",
    errno.EMFILE: "too many files open in this process (raise the limit: ulimit -n)",
    errno.EIO: "input/output error: the disk or the file system failed",
    errno.EADDRINUSE: "the address is in use: another process listens there (try another --port)",
    errno.EADDRNOTAVAIL: "the address is not one of this machine's (check --host)",
}


def describe_os_error(exc: OSError) -> str:
    """``exc`` as one line: ``PATH: what went wrong`` (an OSError made with a message of its
    own, as asyncvk raises them, is that message)."""
    if exc.strerror is None:
        return str(exc)
    words = _WORDS.get(exc.errno or 0) or exc.strerror[:1].lower() + exc.strerror[1:]
    where = exc.filename
    if where is None:
        return words
    if exc.filename2 is not None:
        where = f"{where} -> {exc.filename2}"
    return f"{where}: {words}"
