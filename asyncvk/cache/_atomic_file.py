"""Crash-safe file replacement, and saving under an advisory lock with a merge.

``write_atomic`` writes a uniquely named temp file in the target's folder, flushes and fsyncs
it, ``os.replace``s it over the target and fsyncs the folder: a crash at any point leaves the
old file or the new one, never a torn one. ``save_merged`` takes ``<path>.lock`` (fcntl) so
concurrent savers run one at a time, each merging what the previous one wrote.
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from collections.abc import Callable

import aiofiles
import anyio

LOCK_TIMEOUT_S = 60.0


def _temp_path(path: str) -> str:
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically; raises OSError, leaving the old file."""
    target = os.fspath(path)
    tmp = _temp_path(target)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(os.path.dirname(os.path.abspath(target)))


async def write_atomic_async(path: str | os.PathLike[str], data: bytes) -> None:
    """``write_atomic`` with the write through aiofiles and the syncs in a worker thread."""
    target = os.fspath(path)
    tmp = _temp_path(target)
    folder = os.path.dirname(tmp)
    try:
        async with aiofiles.open(tmp, "xb") as f:
            await f.write(data)
            await f.flush()
            await anyio.to_thread.run_sync(os.fsync, f.fileno())
        await anyio.to_thread.run_sync(os.replace, tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    await anyio.to_thread.run_sync(_fsync_dir, folder)


def save_merged(path: str | os.PathLike[str], build: Callable[[bytes | None], bytes]) -> None:
    """Under ``<path>.lock``: read the current file, ``build(current)``, write atomically."""
    target = os.fspath(path)
    lock_fd = os.open(target + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{target}.lock held for over {LOCK_TIMEOUT_S} s") from None
                time.sleep(0.01)
        try:
            try:
                with open(target, "rb") as f:
                    existing: bytes | None = f.read()
            except (FileNotFoundError, IsADirectoryError):
                existing = None
            write_atomic(target, build(existing))
        finally:
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
    finally:
        os.close(lock_fd)
