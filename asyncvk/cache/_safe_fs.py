"""File operations for folders that other people may write: never follow, never clobber.

A cache file or folder can sit where another user, container or buggy tool also writes. Every
file asyncvk creates there is therefore created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a
name with a random part, and every file it opens there (lock, index, cache file) is opened with
``O_NOFOLLOW`` and must be a regular file: a planted symlink, FIFO or device is refused with a
reason and never followed. A path is replaced only when it is absent, or a regular file that is
empty or already an asyncvk cache file (``replace_refusal``): a mistyped ``--cache model.bin``
must not destroy the model.

Ownership, as ssh's StrictModes has it (``ownership_refusal``): a cache file or folder that
another user owns, or that others can write (or whose folder others can write, without the
sticky bit), is not read and not written, unless ``ASYNCVK_TRUST_CACHE_OWNER=1`` says its owner
is trusted. Root's files are trusted, as root could change this user's anyway.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import threading
import time
from collections.abc import Iterator

__all__ = (
    "CACHE_MAGIC",
    "TRUST_OWNER_ENV",
    "UnsafePathError",
    "create_exclusive",
    "expand_path",
    "locked",
    "open_regular",
    "ownership_refusal",
    "random_token",
    "replace_refusal",
)

CACHE_MAGIC = b"AVKPCACH"  # the first bytes of every asyncvk cache file (_file_format.MAGIC)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


TRUST_OWNER_ENV = "ASYNCVK_TRUST_CACHE_OWNER"


class UnsafePathError(OSError):
    """A path where asyncvk expects its own regular file holds something else."""


def expand_path(path: str | os.PathLike[str]) -> str:
    """``~`` and ``~user`` expanded, as a shell would: ``Option(cache_dir="~/.cache/asyncvk")``."""
    return os.path.expanduser(os.fspath(path))


def random_token() -> str:
    """16 random hex digits: a name part nobody can predict (pids and counters can be)."""
    return os.urandom(8).hex()  # secrets.token_hex(8), without its imports (1.6 ms of a load's)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device node"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _check_regular(fd: int, path: str) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(errno.EINVAL, f"{path} is {_kind(st.st_mode)}, not a regular file")
    return st


def open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY) -> int:
    """Open an existing regular file without following a symlink; the fd is the caller's.

    :raises UnsafePathError: the path is a symlink, FIFO, device, directory or socket.
    :raises OSError: the file cannot be opened (``FileNotFoundError`` when absent).
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, flags | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(
                errno.ELOOP, f"{name} is a symbolic link; not following it"
            ) from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise UnsafePathError(exc.errno, f"{name} is not a regular file") from None
        raise
    try:
        _check_regular(fd, name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_exclusive(path: str | os.PathLike[str], mode: int = 0o644) -> int:
    """Create a new file for writing; fails if anything (a symlink included) has the name."""
    return os.open(
        os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode
    )


def _open_lock(path: str) -> int:
    """Open or create a lock file for writing, never through a symlink.

    The lock is a write lock, which needs a descriptor opened for writing: a user who can only
    read the folder cannot hold it and stall every run. The file is this user's and 0600, so
    nobody else can open it at all (a read lock by someone else would block the write lock too);
    one that another user owns is refused.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError:
        if os.path.islink(path):  # ELOOP, or EACCES where the kernel protects sticky folders
            raise UnsafePathError(errno.ELOOP, f"lock file {path} is a symbolic link") from None
        raise
    try:
        st = _check_regular(fd, f"lock file {path}")
        if st.st_uid not in (os.geteuid(), 0):
            raise UnsafePathError(
                errno.EPERM, f"lock file {path} belongs to uid {st.st_uid}, not to this user"
            )
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o600)  # an older lock file: others could open it and hold a lock
    except BaseException:
        os.close(fd)
        raise
    return fd


_thread_locks_guard = threading.Lock()
_thread_locks: dict[str, threading.Lock] = {}


def _thread_lock(path: str) -> threading.Lock:
    """One lock per lock file within this process: POSIX record locks belong to the process,
    so they exclude other processes but not this one's threads (and closing any descriptor of
    the file drops them), hence threads take turns here before they touch the file."""
    key = os.path.abspath(path)
    with _thread_locks_guard:
        return _thread_locks.setdefault(key, threading.Lock())


@contextlib.contextmanager
def locked(lock_path: str | os.PathLike[str], timeout: float) -> Iterator[None]:
    """Hold an exclusive write lock (``fcntl.lockf``) on ``lock_path``; the kernel drops it if
    we are killed. Waits at most ``timeout`` seconds in all.

    :raises TimeoutError: another holder kept it for over ``timeout`` seconds.
    :raises UnsafePathError: the lock path is a symlink, not a regular file, or another user's.
    """
    name = os.fspath(lock_path)
    deadline = time.monotonic() + timeout
    turn = _thread_lock(name)
    if not turn.acquire(timeout=max(timeout, 0.0)):
        raise TimeoutError(
            errno.ETIMEDOUT, f"lock {name} held by this process for over {timeout} s"
        )
    try:
        fd = _open_lock(name)
        try:
            _wait_for_write_lock(fd, name, deadline, timeout)
            try:
                yield
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    finally:
        turn.release()


def _wait_for_write_lock(fd: int, name: str, deadline: float, timeout: float) -> None:
    delay = 0.001
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            raise TimeoutError(
                errno.ETIMEDOUT, f"lock {name} held by another process for over {timeout} s"
            ) from None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def replace_refusal(path: str | os.PathLike[str]) -> str | None:
    """Why asyncvk must not replace ``path`` with a cache file, or None when it may.

    It may when the path is absent, or a regular file that is empty or starts with the cache
    magic. Anything else (a model, a symlink, a device node, a directory) is the user's.
    """
    name = os.fspath(path)
    try:
        st = os.lstat(name)
    except OSError:
        return None  # absent, or unreachable: the write itself then fails and says why
    if not stat.S_ISREG(st.st_mode):
        return f"{name} is {_kind(st.st_mode)}, not a cache file; asyncvk will not replace it"
    if st.st_size == 0:
        return None
    try:
        fd = open_regular(name)
    except OSError as exc:
        return f"{name} cannot be read to check it is a cache file ({exc.strerror or exc})"
    try:
        head = os.read(fd, len(CACHE_MAGIC))
    finally:
        os.close(fd)
    if head == CACHE_MAGIC:
        return None
    return (
        f"{name} is not an asyncvk cache file (it starts with {head[:8]!r}, "
        f"not {CACHE_MAGIC!r}); asyncvk will not replace it"
    )


def owner_trusted() -> bool:
    """Whether ``ASYNCVK_TRUST_CACHE_OWNER`` turns the ownership checks off."""
    return os.environ.get(TRUST_OWNER_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def ownership_refusal(path: str | os.PathLike[str], what: str = "cache file") -> str | None:
    """Why asyncvk must not trust ``path`` (a cache file or folder), or None when it may.

    Refused: owned by another user (root excepted); writable by group or others (a sticky
    folder excepted); in a folder that another user owns or that others can write without the
    sticky bit, since whoever can do that can replace what is in it. An absent path is fine.
    """
    if owner_trusted():
        return None
    name = os.path.abspath(os.fspath(path))
    try:
        st = os.lstat(name)
    except OSError:
        return None
    fix = f"remove it, or set {TRUST_OWNER_ENV}=1 to trust its owner"
    problem = _mode_problem(st, name)
    if problem is None:
        parent = os.path.dirname(name)
        try:
            problem = _mode_problem(os.stat(parent), parent)
        except OSError:
            problem = None
        if problem is not None:
            problem = f"it is in {problem}, so others can replace it"
    if problem is None:
        return None
    return f"{what} {name} is not trusted: {problem}; not read or written ({fix})"


def _mode_problem(st: os.stat_result, name: str) -> str | None:
    euid = os.geteuid()
    if st.st_uid not in (euid, 0):
        return f"{name}, which belongs to uid {st.st_uid}, not to this user (uid {euid})"
    sticky = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
    if st.st_mode & 0o022 and not sticky:
        return f"{name}, which others can write (mode {stat.S_IMODE(st.st_mode):04o})"
    return None
