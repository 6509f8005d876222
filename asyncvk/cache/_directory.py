"""CacheDirectory: a folder of cache files keyed by graph key, with a JSON index per key.

The user names a folder and a key and forgets about files (Ascend's graph-compiler cache), and
asyncvk also does what that design leaves to the user: a model whose fingerprint changed is
rebuilt and replaces the stale entry, orphaned files are removed, a size cap evicts the least
recently used entries, and a bad index is rebuilt from the files present.

Crash safety: a save writes the new cache file under a fresh random name, then the index that
names it, then removes the old file; a kill at any instant loses at most the save in progress.
Concurrency: index changes happen under the key's advisory lock (``<stem>.lock``), and a save
merges what another process saved for the same device meanwhile, so nobody's work is lost.

Hostile folders (a folder may be shared): see ``_safe_fs``: nothing is created except under a
random name with ``O_EXCL | O_NOFOLLOW``, no symlink is followed, the index is parsed against a
schema (``_index``), and only files named by asyncvk's own scheme are ever removed.

A folder that can be read but not written (a read-only image, another user's 0555 folder, a full
disk) still serves its entries; only saving is skipped, with one warning saying why.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..gpu._identity import DeviceIdentity
from ._atomic_file import _fsync_dir, merge_contents
from ._file_entries import decode_cache
from ._file_format import CacheContents, encode_cache
from ._folder_files import (
    DEFAULT_MAX_BYTES,
    CacheDirectoryWarning,
    FolderFiles,
    PruneReport,
    device_entry,
    key_stem,
)
from ._index import (
    IndexEntry,
    read_index_file,
)
from ._safe_fs import (
    UnsafePathError,
    create_exclusive,
    expand_path,
    random_token,
)

__all__ = (
    "DEFAULT_MAX_BYTES",
    "CacheDirectory",
    "CacheDirectoryWarning",
    "IndexEntry",
    "Lookup",
    "key_stem",
    "model_fingerprint",
)

Build = Callable[[bytes | None], bytes]


#: A model's fingerprint, or a function that computes it when it is needed.
Fingerprint = str | Callable[[], str]


def _value(fingerprint: Fingerprint) -> str:
    return fingerprint() if callable(fingerprint) else fingerprint


@dataclass(frozen=True)
class Lookup:
    """What a lookup found: the cache file's bytes, or why there are none."""

    path: Path | None
    reason: str
    stale_removed: int = 0
    data: bytes | None = field(default=None, repr=False)


class CacheDirectory:
    """One cache folder: models' cache files by graph key, device and fingerprint, with an
    index a key. No method raises for a broken, hostile or read-only folder.

    Arguments:
        path: the folder (``~`` expanded); created with mode 0700 when absent.
        max_bytes: size cap over every key's files; the least recently used go first.
        read_only: never create, write or remove anything; lookups still serve.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        read_only: bool = False,
    ) -> None:
        #: the folder's files, index files and locks
        self.files = FolderFiles(path, max_bytes=max_bytes, read_only=read_only)

    @property
    def path(self) -> Path:
        return self.files.path

    @property
    def max_bytes(self) -> int:
        return self.files.max_bytes

    @property
    def read_only(self) -> bool:
        return self.files.read_only

    @property
    def usable(self) -> bool:
        """Whether lookups can be served (False once the folder proved unusable)."""
        return self.files.usable

    @property
    def writable(self) -> bool:
        """Whether saves can be written (False for a read-only or unwritable folder)."""
        return self.files.writable

    @property
    def problems(self) -> list[str]:
        """Bad indexes seen, for ``asyncvk cache ls`` and logs."""
        return self.files.problems

    # -- public --------------------------------------------------------------------------------

    def lookup(self, graph_key: str, identity: DeviceIdentity, fingerprint: Fingerprint) -> Lookup:
        """This key's cache file for this device and model, if there is a valid one.

        ``fingerprint``: the model's, or a function giving it, called only when a file of this
        device records one to compare (hashing the weights is not free; an empty folder, as a
        machine warm from a remote cache has, needs none)."""
        if not self.files.ensure():
            return Lookup(None, "cache folder not usable")
        stem = key_stem(graph_key)
        try:
            with self.files.lock(stem, for_write=False):
                return self._lookup_locked(graph_key, identity, fingerprint)
        except OSError as exc:
            return Lookup(None, f"cache folder not usable: {exc.strerror or exc}")

    def _lookup_locked(
        self, graph_key: str, identity: DeviceIdentity, fingerprint: Fingerprint
    ) -> Lookup:
        entries, ours = self.files.read_index(graph_key)
        write = self.writable and ours
        if write:
            entries = self.files.sweep(graph_key, entries)
        mine = [e for e in entries if identity.same_device(e.device)]
        if not mine:
            return Lookup(None, "no cache for this device and driver yet")
        entry = max(mine, key=lambda e: e.last_used)
        if entry.model_fingerprint not in (None, _value(fingerprint)):
            if not write:
                return Lookup(None, "the model changed since the cache was written")
            entries.remove(entry)
            self.files.write_index(graph_key, entries, ours)
            self.files.remove(entry.file)
            return Lookup(None, "the model changed since the cache was written", stale_removed=1)
        data = self.files.read_cache_file(entry.file)
        if data is None:
            return Lookup(
                None, f"{entry.file} cannot be read (not a regular file, or over the size limit)"
            )
        if write:
            entry.last_used = time.time()
            try:
                self.files.write_index(graph_key, entries, ours)
            except OSError as exc:
                self.files.no_saves(exc.strerror or str(exc))
        return Lookup(self.path / entry.file, "found", data=data)

    def store(
        self,
        graph_key: str,
        identity: DeviceIdentity,
        fingerprint: Fingerprint,
        data: bytes | Build,
    ) -> Path | None:
        """Save this key's file for this device; returns its path, or None when not saved.

        A save that adds nothing to the device's current file writes nothing.

        ``data`` is the new file, or ``build(current)`` which returns it given the device's
        current file for this model (None when there is none): either way the result is merged
        with what another process saved meanwhile, so concurrent savers lose nothing.
        """
        if not self.files.ensure() or not self.writable:
            return None
        try:  # the model's files are read now: one moved or deleted since the load is no save
            fingerprint = _value(fingerprint)
        except OSError as exc:
            self.problems.append(f"model fingerprint: {exc.strerror or exc}")
            return None
        stem = key_stem(graph_key)
        name = f"{stem}_{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}_{random_token()}.vkcache"
        written = False
        try:
            with self.files.lock(stem, for_write=True):
                entries, ours = self.files.read_index(graph_key)
                if not ours:  # refused before the new file exists: nothing to clean up
                    raise UnsafePathError(errno.EEXIST, self.problems[-1])
                entries = self.files.sweep(graph_key, entries)
                device = device_entry(identity)
                old = [e for e in entries if identity.same_device(e.device)]
                same = next((e for e in old if e.model_fingerprint in (None, fingerprint)), None)
                current = self.files.read_cache_file(same.file) if same is not None else None
                content = _merged(data, current, identity)
                if same is not None and content == current:
                    return self.path / same.file  # nothing new: no file written, none removed
                self._write_new(name, content)
                written = True
                now = time.time()
                entries = [e for e in entries if e not in old]
                entries.append(
                    IndexEntry(
                        name, graph_key, device, fingerprint, __version__, now, now, len(content)
                    )
                )
                evicted = self._evict(entries, keep=name)
                self.files.write_index(graph_key, entries, ours)  # the new file is now the entry
                for stale in old + evicted:  # and only then are the old ones removed
                    self.files.remove(stale.file)
                return self.path / name
        except OSError as exc:
            if written:
                self.files.remove(name)
            self.files.no_saves(exc.strerror or str(exc))
            return None

    def _write_new(self, name: str, content: bytes) -> None:
        fd = create_exclusive(self.path / name)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        _fsync_dir(str(self.path))  # the file's name is durable before an index names it

    def _evict(self, entries: list[IndexEntry], keep: str | None = None) -> list[IndexEntry]:
        """Take entries off (least recently used first) until the cap holds; returns them."""
        total = sum(e.size for e in entries)
        evicted = []
        for entry in sorted(entries, key=lambda e: e.last_used):
            if total <= self.max_bytes:
                break
            if entry.file == keep:
                continue
            entries.remove(entry)
            evicted.append(entry)
            total -= entry.size
        return evicted

    def keys(self) -> list[str]:
        """Every graph key with an index in the folder (a bad index: its file stem)."""
        keys = []
        for idx in sorted(self.path.glob("*.idx")):
            try:
                raw = json.loads(read_index_file(idx))
                key = raw["graph_key"]
                if not isinstance(key, str) or key_stem(key) != idx.stem:
                    raise ValueError("graph_key does not match the file name")
                keys.append(key)
            except (OSError, ValueError, KeyError, TypeError, RecursionError):
                keys.append(idx.stem)
        return keys

    def entries(self, graph_key: str) -> list[IndexEntry]:
        with self.files.lock(key_stem(graph_key), for_write=False):
            return self.files.read_index(graph_key)[0]

    def prune(self) -> dict[str, Any]:
        """Remove orphaned and outdated files and apply the size cap over every key.

        Only files named by asyncvk's scheme and unaccounted for by an index (or temp files of
        a dead writer, over ``STALE_TEMP_S`` old) are removed; every other file is left and listed.
        """
        report = PruneReport()
        if not self.path.is_dir():
            raise FileNotFoundError(f"{self.path} is not a cache folder")
        ours: set[str] = set()
        for graph_key in self.keys():
            stem = key_stem(graph_key)
            ours.update({f"{stem}.idx", f"{stem}.lock"})
            with self.files.lock(stem, for_write=True):
                before = {p.name for p in self.files.files_of(graph_key)}
                entries, index_ours = self.files.read_index(graph_key)
                if not index_ours:
                    report.problems.extend(self.problems[-1:])
                    ours.update(before)
                    continue
                entries = self.files.sweep(graph_key, entries)
                outdated = [e for e in entries if e.asyncvk_version not in ("", __version__)]
                entries = [e for e in entries if e not in outdated]
                evicted = self._evict(entries)
                self.files.write_index(graph_key, entries, index_ours)
                for gone in outdated + evicted:
                    self.files.remove(gone.file)
                after = {p.name for p in self.files.files_of(graph_key)}
                report.removed.extend(sorted(before - after))
                ours.update(after)
        report.problems.extend(p for p in self.problems if p not in report.problems)
        self.files.prune_temps(ours, report)
        return {
            "removed_files": len(report.removed),
            "removed": report.removed,
            "left": report.left,
            "problems": report.problems,
        }


def _merged(data: bytes | Build, current: bytes | None, identity: DeviceIdentity) -> bytes:
    """The new file: ``build(current)``, or ``data`` merged with ``current`` (same device)."""
    if callable(data):
        return data(current)
    if current is None:
        return data
    new_ok, new = decode_cache(data, expected=identity, source_hashes=None)
    old_ok, old = decode_cache(current, expected=identity, source_hashes=None)
    if not (new_ok and old_ok) or new is None or old is None:
        return data
    merged = merge_contents(new, old)
    return encode_cache(CacheContents(identity, merged.spirv, merged.driver_blob))


def model_fingerprint(*sources: object) -> str:
    """blake2b of the param and weights: paths are read in chunks, bytes hashed directly."""
    h = hashlib.blake2b(digest_size=16)
    for source in sources:
        if isinstance(source, (bytes, bytearray, memoryview)):
            h.update(b"B")
            h.update(source)
        elif isinstance(source, (str, os.PathLike)):
            h.update(b"F")
            with open(expand_path(source), "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        else:
            return ""
    return h.hexdigest()
