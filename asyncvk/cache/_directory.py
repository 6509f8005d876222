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

import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..gpu._identity import DeviceIdentity
from ._atomic_file import _fsync_dir, _pid_alive, merge_contents, write_atomic
from ._file_format import CacheContents, decode_cache, describe_cache, encode_cache
from ._index import (
    IndexEntry,
    InvalidIndex,
    encode_index,
    parse_index,
    read_index_file,
)
from ._safe_fs import (
    UnsafePathError,
    create_exclusive,
    expand_path,
    locked,
    open_regular,
    random_token,
)

log = logging.getLogger("asyncvk.cache")

DEFAULT_MAX_BYTES = 1 << 30
LOCK_TIMEOUT_S = 60.0
STALE_TEMP_S = 3600.0  # a temp file this old whose writer is gone is an orphan of a crash
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

__all__ = (
    "CacheDirectory",
    "CacheDirectoryWarning",
    "IndexEntry",
    "Lookup",
    "key_stem",
    "model_fingerprint",
)

Build = Callable[[bytes | None], bytes]


class CacheDirectoryWarning(UserWarning):
    """The cache folder cannot be used (or not written); the model runs uncached or unsaved."""


def key_stem(graph_key: str) -> str:
    """The file stem for a key: the key itself when plain, else ``hash_<sha256 prefix>``."""
    if _PLAIN_KEY.match(graph_key):
        return graph_key
    return "hash_" + hashlib.sha256(graph_key.encode()).hexdigest()[:32]


def _cache_file_pattern(stem: str) -> re.Pattern[str]:
    return re.compile(re.escape(stem) + r"_\d{8}T\d{6}_[0-9a-z_]+\.vkcache")


def _temp_pattern(name: str) -> re.Pattern[str]:
    """``write_atomic``'s temp names for ``name``: ``.<name>.<pid>.<32 hex>.tmp``."""
    return re.compile(rf"\.{re.escape(name)}\.(\d+)\.[0-9a-f]{{32}}\.tmp")


def device_entry(identity: DeviceIdentity) -> dict[str, Any]:
    return {
        "vendor_id": identity.vendor_id,
        "device_id": identity.device_id,
        "driver_version": identity.driver_version,
        "pipeline_cache_uuid": identity.pipeline_cache_uuid.hex(),
        "device_name": identity.device_name,
    }


def _same_device(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("vendor_id", "device_id", "driver_version", "pipeline_cache_uuid")
    return all(a.get(k) == b.get(k) for k in keys)


@dataclass(frozen=True)
class Lookup:
    """What a lookup found: the cache file's bytes, or why there are none."""

    path: Path | None
    reason: str
    stale_removed: int = 0
    data: bytes | None = field(default=None, repr=False)


@dataclass
class PruneReport:
    removed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # files in the folder that are not asyncvk's
    problems: list[str] = field(default_factory=list)


class CacheDirectory:
    """One cache folder. No method raises for a broken, hostile or read-only folder.

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
        self.path = Path(expand_path(path))
        self.max_bytes = max_bytes
        self.read_only = read_only
        self.usable = True  # lookups can be served
        self.writable = not read_only
        self.problems: list[str] = []  # bad indexes seen, for `cache ls` and logs
        self._warned: set[str] = set()

    # -- plumbing -------------------------------------------------------------------------------

    def _warn(self, what: str, why: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(
                f"pipeline cache folder {self.path}: {what} ({why})",
                CacheDirectoryWarning,
                stacklevel=4,
            )

    def _disable(self, why: str) -> None:
        self.usable = self.writable = False
        self._warn("not usable; running uncached", why)

    def _no_saves(self, why: str) -> None:
        if self.writable:
            self.writable = False
            self._warn("can be read but not written; not saving to it", why)

    def _ensure(self) -> bool:
        """Whether lookups can be served; finds out once whether saves can be written."""
        if not self.usable:
            return False
        if not self.writable:
            return self.path.is_dir() or self._disable_missing()
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            if not self.path.is_dir():
                self._disable(exc.strerror or str(exc))
                return False
        probe = self.path / f".probe.{random_token()}"
        try:
            os.close(create_exclusive(probe, 0o600))
            os.unlink(probe)
        except OSError as exc:
            self._no_saves(exc.strerror or str(exc))
        return True

    def _disable_missing(self) -> bool:
        self.usable = False
        return False

    @contextlib.contextmanager
    def _lock(self, stem: str, *, for_write: bool) -> Iterator[None]:
        """The key's lock; a reader in a folder it cannot write goes on without one."""
        if self.read_only and not for_write:
            yield  # creates nothing: readers of an atomically replaced index need no lock
            return
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(locked(self.path / f"{stem}.lock", LOCK_TIMEOUT_S))
            except UnsafePathError:
                raise
            except OSError as exc:
                if for_write or exc.errno not in (errno.EACCES, errno.EROFS, errno.EPERM):
                    raise
                # read-only access: readers of an atomically replaced index need no lock
            yield

    def index_path(self, graph_key: str) -> Path:
        return self.path / f"{key_stem(graph_key)}.idx"

    def _files(self, graph_key: str) -> list[Path]:
        stem = key_stem(graph_key)
        pattern = _cache_file_pattern(stem)
        try:
            names = os.listdir(self.path)
        except OSError:
            return []
        return sorted(self.path / n for n in names if pattern.fullmatch(n))

    def _read_index(self, graph_key: str) -> tuple[list[IndexEntry], bool]:
        """The index entries (rebuilt from the files when the index is bad), and whether the
        index file is asyncvk's to replace."""
        path = self.index_path(graph_key)
        pattern = _cache_file_pattern(key_stem(graph_key))
        try:
            data = read_index_file(path)
            return parse_index(data, graph_key, pattern), True
        except FileNotFoundError:
            return (self._rebuild(graph_key) if self._files(graph_key) else []), True
        except (OSError, InvalidIndex) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            ours = isinstance(exc, InvalidIndex) and self._index_is_ours(path)
            action = "rebuilt from the files" if ours else "left alone; not asyncvk's to replace"
            problem = f"index {path} is invalid ({why}); {action}"
            self.problems.append(problem)
            log.warning("%s", problem)
            return self._rebuild(graph_key), ours

    @staticmethod
    def _index_is_ours(path: Path) -> bool:
        """A regular file at the index's name is a damaged index; a symlink or other node is
        somebody's plant and is never replaced."""
        try:
            os.close(open_regular(path))
        except OSError:
            return False
        return True

    def _read_cache_file(self, name: str) -> bytes | None:
        try:
            fd = open_regular(self.path / name)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read()

    def _rebuild(self, graph_key: str) -> list[IndexEntry]:
        entries: dict[str, IndexEntry] = {}
        for path in self._files(graph_key):
            data = self._read_cache_file(path.name)
            if data is None:
                continue
            try:
                header = describe_cache(data)["header"]
            except Exception:  # a file that does not describe is an orphan: swept on a write
                continue
            device = {
                "vendor_id": header["vendor_id"],
                "device_id": header["device_id"],
                "driver_version": header["driver_version"],
                "pipeline_cache_uuid": header["pipeline_cache_uuid"],
                "device_name": "",
            }
            mtime = path.lstat().st_mtime
            entry = IndexEntry(
                path.name,
                graph_key,
                device,
                None,
                str(header.get("asyncvk_version", "")),
                mtime,
                mtime,
                len(data),
            )
            key = repr(sorted((k, v) for k, v in device.items() if k != "device_name"))
            if key not in entries or entries[key].created < entry.created:
                entries[key] = entry  # the newest file per device wins
        return list(entries.values())

    def _write_index(self, graph_key: str, entries: list[IndexEntry], ours: bool) -> None:
        if not ours:
            raise UnsafePathError(
                errno.EEXIST, f"{self.index_path(graph_key)} is not an asyncvk index"
            )
        write_atomic(self.index_path(graph_key), encode_index(graph_key, entries))

    def _remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path / name)

    def _sweep(self, graph_key: str, entries: list[IndexEntry]) -> list[IndexEntry]:
        """Drop entries whose file is gone, delete this key's files no entry names."""
        present = {p.name for p in self._files(graph_key)}
        live = [e for e in entries if e.file in present]
        named = {e.file for e in live}
        for name in present - named:
            self._remove(name)
        return live

    # -- public --------------------------------------------------------------------------------

    def lookup(self, graph_key: str, identity: DeviceIdentity, fingerprint: str) -> Lookup:
        """This key's cache file for this device and model, if there is a valid one."""
        if not self._ensure():
            return Lookup(None, "cache folder not usable")
        stem = key_stem(graph_key)
        try:
            with self._lock(stem, for_write=False):
                return self._lookup_locked(graph_key, identity, fingerprint)
        except OSError as exc:
            return Lookup(None, f"cache folder not usable: {exc.strerror or exc}")

    def _lookup_locked(self, graph_key: str, identity: DeviceIdentity, fingerprint: str) -> Lookup:
        entries, ours = self._read_index(graph_key)
        write = self.writable and ours
        if write:
            entries = self._sweep(graph_key, entries)
        mine = [e for e in entries if _same_device(e.device, device_entry(identity))]
        if not mine:
            return Lookup(None, "no cache for this device and driver yet")
        entry = max(mine, key=lambda e: e.last_used)
        if entry.model_fingerprint not in (None, fingerprint):
            if not write:
                return Lookup(None, "the model changed since the cache was written")
            entries.remove(entry)
            self._write_index(graph_key, entries, ours)
            self._remove(entry.file)
            return Lookup(None, "the model changed since the cache was written", stale_removed=1)
        data = self._read_cache_file(entry.file)
        if data is None:
            return Lookup(None, f"{entry.file} cannot be read, or is not a regular file")
        if write:
            entry.last_used = time.time()
            try:
                self._write_index(graph_key, entries, ours)
            except OSError as exc:
                self._no_saves(exc.strerror or str(exc))
        return Lookup(self.path / entry.file, "found", data=data)

    def store(
        self,
        graph_key: str,
        identity: DeviceIdentity,
        fingerprint: str,
        data: bytes | Build,
    ) -> Path | None:
        """Save this key's file for this device; returns its path, or None when not saved.

        A save that adds nothing to the device's current file writes nothing.

        ``data`` is the new file, or ``build(current)`` which returns it given the device's
        current file for this model (None when there is none): either way the result is merged
        with what another process saved meanwhile, so concurrent savers lose nothing.
        """
        if not self._ensure() or not self.writable:
            return None
        stem = key_stem(graph_key)
        name = f"{stem}_{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}_{random_token()}.vkcache"
        written = False
        try:
            with self._lock(stem, for_write=True):
                entries, ours = self._read_index(graph_key)
                if not ours:  # refused before the new file exists: nothing to clean up
                    raise UnsafePathError(errno.EEXIST, self.problems[-1])
                entries = self._sweep(graph_key, entries)
                device = device_entry(identity)
                old = [e for e in entries if _same_device(e.device, device)]
                same = next((e for e in old if e.model_fingerprint in (None, fingerprint)), None)
                current = self._read_cache_file(same.file) if same is not None else None
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
                self._write_index(graph_key, entries, ours)  # the new file is now the entry
                for stale in old + evicted:  # and only then are the old ones removed
                    self._remove(stale.file)
                return self.path / name
        except OSError as exc:
            if written:
                self._remove(name)
            self._no_saves(exc.strerror or str(exc))
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
        with self._lock(key_stem(graph_key), for_write=False):
            return self._read_index(graph_key)[0]

    def prune(self) -> dict[str, Any]:
        """Remove orphaned and outdated files and apply the size cap over every key.

        Only files named by asyncvk's scheme and unaccounted for by an index (or temp files of
        a dead writer, over an hour old) are removed; every other file is left and listed.
        """
        report = PruneReport()
        if not self.path.is_dir():
            raise FileNotFoundError(f"{self.path} is not a cache folder")
        ours: set[str] = set()
        for graph_key in self.keys():
            stem = key_stem(graph_key)
            ours.update({f"{stem}.idx", f"{stem}.lock"})
            with self._lock(stem, for_write=True):
                before = {p.name for p in self._files(graph_key)}
                entries, index_ours = self._read_index(graph_key)
                if not index_ours:
                    report.problems.extend(self.problems[-1:])
                    ours.update(before)
                    continue
                entries = self._sweep(graph_key, entries)
                outdated = [e for e in entries if e.asyncvk_version not in ("", __version__)]
                entries = [e for e in entries if e not in outdated]
                evicted = self._evict(entries)
                self._write_index(graph_key, entries, index_ours)
                for gone in outdated + evicted:
                    self._remove(gone.file)
                after = {p.name for p in self._files(graph_key)}
                report.removed.extend(sorted(before - after))
                ours.update(after)
        report.problems.extend(p for p in self.problems if p not in report.problems)
        self._prune_temps(ours, report)
        return {
            "removed_files": len(report.removed),
            "removed": report.removed,
            "left": report.left,
            "problems": report.problems,
        }

    def _prune_temps(self, ours: set[str], report: PruneReport) -> None:
        now = time.time()
        temps = [_temp_pattern(name) for name in ours if name.endswith((".idx", ".vkcache"))]
        temps.append(re.compile(r"\.probe\.()[0-9a-f]{16}"))  # a probe of a killed process
        for entry in sorted(os.scandir(self.path), key=lambda e: e.name):
            if entry.name in ours:
                continue
            match = next((m for p in temps if (m := p.fullmatch(entry.name))), None)
            st = entry.stat(follow_symlinks=False)
            if (
                match is not None
                and entry.is_file(follow_symlinks=False)
                and not (match.group(1) and _pid_alive(int(match.group(1))))
                and now - st.st_mtime > STALE_TEMP_S
            ):
                self._remove(entry.name)
                report.removed.append(entry.name)
            elif match is None:
                report.left.append(entry.name)


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
