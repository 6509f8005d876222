"""Crash-safe file replacement, and saving under an advisory lock with a merge.

``write_atomic`` writes a uniquely named temp file in the target's folder, fsyncs it,
``os.replace``s it over the target and fsyncs the folder: a crash at any point leaves the old
file or the new one, never a torn one. ``save_merged`` holds a write lock on ``<path>.lock``
(``fcntl.lockf``, which needs write access) around read-merge-write, so concurrent savers run
one at a time and none loses another's work; a lock not had within ``LOCK_TIMEOUT_S`` costs
the save, never the run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import time
from collections.abc import Callable, Collection, Sequence

from ._file_format import CacheContents
from ._file_inspect import read_cache_source
from ._safe_fs import UnsafePathError, create_exclusive, locked, open_regular, replace_refusal

LOCK_TIMEOUT_S = 10.0  # a save holds it for well under a second; past this, no cache
#: The one age for temp files: one this old whose writer is gone is an orphan of a crash.
#: (Every save finishes its temp file within seconds; a minute leaves a wide margin.)
STALE_TEMP_S = 60.0

__all__ = (
    "merge_contents",
    "save_merged",
    "write_atomic",
)


def _temp_path(target: str) -> str:
    # 32 random hex digits, as uuid4().hex gave: without uuid's import (1.6 ms of a load's)
    folder, name = os.path.split(os.path.abspath(target))
    return os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(16).hex()}.tmp")


def _fsync_dir(folder: str) -> None:
    """Make the rename durable; filesystems that cannot fsync a folder are let off."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view) :]


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` so that readers see the old file or the new, never a mix.

    :raises OSError: the target is still the old file (or, when only the final folder fsync
        failed, the whole new one); the temp file is already removed.
    """
    target = os.fspath(path)
    tmp = _temp_path(target)
    mode = _kept_mode(target)
    try:
        fd = create_exclusive(tmp)
        try:
            if mode is not None:
                os.fchmod(fd, mode)  # the file keeps its mode: a 0600 cache stays 0600
            _write_all(fd, data)
            os.fsync(fd)  # the data must be on disk before the name points at it
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        _remove(tmp)
        raise
    _fsync_dir(os.path.dirname(tmp))


def _kept_mode(target: str) -> int | None:
    """The permission bits of the file being replaced, when it is a regular file of ours."""
    try:
        st = os.lstat(target)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return None
    return stat.S_IMODE(st.st_mode)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: existence check only (EPERM still means it exists)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def temp_pattern(name: str) -> re.Pattern[str]:
    """``write_atomic``'s temp names for ``name``: ``.<name>.<pid>.<32 hex>.tmp`` (group 1: pid)."""
    return re.compile(rf"\.{re.escape(name)}\.(\d+)\.[0-9a-f]{{32}}\.tmp")


def remove_stale_temps(
    folder: str, patterns: Sequence[re.Pattern[str]], *, keep: Collection[str] = ()
) -> tuple[list[str], list[str]]:
    """Delete the temp files that killed writers left in ``folder``; the one temp-file sweeper.

    A file goes when its name matches one of ``patterns`` (group 1: the writer's pid, empty
    when the name holds none), it is a regular file, that pid is gone, and it is over
    ``STALE_TEMP_S`` old. Names in ``keep`` are passed over. Returns the names removed, and
    the names that match no pattern (``prune`` lists them as not asyncvk's).
    """
    removed: list[str] = []
    unmatched: list[str] = []
    now = time.time()
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return removed, unmatched
    for entry in entries:
        if entry.name in keep:
            continue
        match = next((m for p in patterns if (m := p.fullmatch(entry.name))), None)
        if match is None:
            unmatched.append(entry.name)
            continue
        with contextlib.suppress(OSError):
            if _stale(entry, match.group(1), now):
                os.unlink(entry.path)
                removed.append(entry.name)
    return removed, unmatched


def _stale(entry: os.DirEntry[str], pid: str, now: float) -> bool:
    return (
        entry.is_file(follow_symlinks=False)
        and not (pid and _pid_alive(int(pid)))
        and now - entry.stat(follow_symlinks=False).st_mtime > STALE_TEMP_S
    )


def save_merged(
    path: str | os.PathLike[str],
    build: Callable[[bytes | None], bytes],
    *,
    lock_timeout: float = LOCK_TIMEOUT_S,
) -> None:
    """Under ``<path>.lock``: read the current file, ``build(current)``, write it atomically.

    ``build`` receives the current bytes (None when absent, unreadable or over the size limit)
    and returns the new file; it merges, since another process may have saved meanwhile. A
    result equal to the current bytes is not rewritten.

    :raises OSError: nothing was written (``TimeoutError`` when the lock was not had in time).
    """
    target = os.fspath(path)
    _refuse_to_replace(target)  # before the lock file appears beside something not ours
    with locked(target + ".lock", lock_timeout):
        _refuse_to_replace(target)  # and again, now that nobody else can be saving
        existing = read_regular_cache_file(target)
        data = build(existing)
        if data != existing:
            write_atomic(target, data)
        folder, name = os.path.split(os.path.abspath(target))
        remove_stale_temps(folder, [temp_pattern(name)])


def _refuse_to_replace(target: str) -> None:
    why = replace_refusal(target)
    if why is not None:
        raise UnsafePathError(errno.EEXIST, why)


def read_regular_cache_file(target: str | os.PathLike[str]) -> bytes | None:
    """A cache file's bytes if it is a readable regular file within the size limit, read
    without following a symlink; None otherwise (absent, planted, unreadable, too big)."""
    try:
        fd = open_regular(target)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        current = read_cache_source(f)
    return current if isinstance(current, bytes) else None


def merge_contents(new: CacheContents, old: CacheContents | None) -> CacheContents:
    """The union of two saves of one device: new entries win, a non-empty new blob wins.

    Old contents of another identity are dropped entirely: they are of no use on this device.
    """
    if old is None or old.identity != new.identity:
        return new
    spirv = {**old.spirv, **new.spirv}
    return CacheContents(new.identity, spirv, new.driver_blob or old.driver_blob)
