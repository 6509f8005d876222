"""CacheDirectory: a folder of cache files keyed by graph key, with a JSON index per key.

The user names a folder and a key and forgets about files (Ascend's graph-compiler cache), and
asyncvk also does what that design leaves to the user: a model whose fingerprint changed is
rebuilt and replaces the stale entry, stale and orphaned files are removed, a size cap evicts the
least recently used entries, and a corrupt index is rebuilt from the files present.

Concurrency: every index change happens under an advisory lock (``<name>.lock``) and the index
is written by temp-file-and-replace, so readers never see a torn index and no writer's entry is
lost. A folder that cannot be written gives one warning and the model runs uncached.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import logging
import os
import re
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._version import __version__
from ..gpu._identity import DeviceIdentity
from ._atomic_file import write_atomic
from ._file_format import describe_cache

log = logging.getLogger("asyncvk.cache")

DEFAULT_MAX_BYTES = 1 << 30
INDEX_VERSION = 1
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_counter = itertools.count()


class CacheDirectoryWarning(UserWarning):
    """The cache folder cannot be used; the model runs uncached."""


def key_stem(graph_key: str) -> str:
    """The file stem for a key: the key itself when plain, else ``hash_<sha256 prefix>``."""
    if _PLAIN_KEY.match(graph_key):
        return graph_key
    return "hash_" + hashlib.sha256(graph_key.encode()).hexdigest()[:32]


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


@dataclass
class IndexEntry:
    file: str
    graph_key: str
    device: dict[str, Any]
    model_fingerprint: str | None
    asyncvk_version: str
    created: float
    last_used: float
    size: int


@dataclass(frozen=True)
class Lookup:
    """What a lookup found: a file to load, or why there is none."""

    path: Path | None
    reason: str
    stale_removed: int = 0


class CacheDirectory:
    """One cache folder. Methods take the key's lock; none raises for a broken folder."""

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_BYTES):
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.usable = True
        self._warned = False

    # -- plumbing -------------------------------------------------------------------------------

    def _disable(self, why: str) -> None:
        self.usable = False
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"pipeline cache folder {self.path} is not usable ({why}); running uncached",
                CacheDirectoryWarning,
                stacklevel=3,
            )

    def _ensure(self) -> bool:
        if not self.usable:
            return False
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / f".probe.{os.getpid()}.{next(_counter)}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            self._disable(exc.strerror or str(exc))
            return False
        return True

    @contextmanager
    def _locked(self, stem: str) -> Iterator[None]:
        fd = os.open(self.path / f"{stem}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def index_path(self, graph_key: str) -> Path:
        return self.path / f"{key_stem(graph_key)}.idx"

    def _read_index(self, graph_key: str) -> list[IndexEntry]:
        """The index entries, or a rebuild from the files present when it is bad."""
        path = self.index_path(graph_key)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if raw.get("version") != INDEX_VERSION or not isinstance(raw.get("entries"), list):
                raise ValueError("unknown index layout")
            entries = [IndexEntry(**e) for e in raw["entries"]]
            for e in entries:
                if not isinstance(e.file, str) or "/" in e.file or not e.file.endswith(".vkcache"):
                    raise ValueError(f"bad file name {e.file!r}")
            return entries
        except FileNotFoundError:
            return self._rebuild(graph_key) if self._files(graph_key) else []
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning(
                "cache index %s is unreadable (%s); rebuilding it from the files", path, exc
            )
            return self._rebuild(graph_key)

    def _files(self, graph_key: str) -> list[Path]:
        stem = key_stem(graph_key)
        pattern = re.compile(re.escape(stem) + r"_\d{8}T\d{6}_[0-9a-z_]+\.vkcache$")
        return sorted(p for p in self.path.glob(f"{stem}_*.vkcache") if pattern.match(p.name))

    def _rebuild(self, graph_key: str) -> list[IndexEntry]:
        entries: dict[str, IndexEntry] = {}
        for path in self._files(graph_key):
            try:
                data = path.read_bytes()
                header = describe_cache(data)["header"]
                stat = path.stat()
            except Exception:  # an unreadable file is an orphan: removed on the next write
                continue
            device = {
                "vendor_id": header["vendor_id"],
                "device_id": header["device_id"],
                "driver_version": header["driver_version"],
                "pipeline_cache_uuid": header["pipeline_cache_uuid"],
                "device_name": "",
            }
            entry = IndexEntry(
                path.name,
                graph_key,
                device,
                None,
                str(header.get("asyncvk_version", "")),
                stat.st_mtime,
                stat.st_mtime,
                stat.st_size,
            )
            # newest file per device wins
            key = json.dumps({k: device[k] for k in sorted(device) if k != "device_name"})
            if key not in entries or entries[key].created < entry.created:
                entries[key] = entry
        return list(entries.values())

    def _write_index(self, graph_key: str, entries: list[IndexEntry]) -> None:
        data = {
            "version": INDEX_VERSION,
            "graph_key": graph_key,
            "entries": [asdict(e) for e in entries],
        }
        write_atomic(self.index_path(graph_key), json.dumps(data, indent=1).encode())

    def _remove(self, name: str) -> None:
        try:
            (self.path / name).unlink()
        except FileNotFoundError:
            pass

    def _sweep(self, graph_key: str, entries: list[IndexEntry]) -> list[IndexEntry]:
        """Drop entries whose file is gone, delete files no entry names."""
        live = [e for e in entries if (self.path / e.file).is_file()]
        named = {e.file for e in live}
        for path in self._files(graph_key):
            if path.name not in named:
                self._remove(path.name)
        return live

    # -- public --------------------------------------------------------------------------------

    def lookup(self, graph_key: str, identity: DeviceIdentity, fingerprint: str) -> Lookup:
        """The file to load for this key, device and model, if there is a valid one."""
        if not self._ensure():
            return Lookup(None, "cache folder not usable")
        stem = key_stem(graph_key)
        try:
            with self._locked(stem):
                entries = self._sweep(graph_key, self._read_index(graph_key))
                device = device_entry(identity)
                mine = [e for e in entries if _same_device(e.device, device)]
                if not mine:
                    self._write_index(graph_key, entries)
                    return Lookup(None, "no cache for this device and driver yet")
                entry = max(mine, key=lambda e: e.last_used)
                if entry.model_fingerprint not in (None, fingerprint):
                    entries.remove(entry)
                    self._remove(entry.file)
                    self._write_index(graph_key, entries)
                    return Lookup(
                        None, "the model changed since the cache was written", stale_removed=1
                    )
                entry.last_used = time.time()
                self._write_index(graph_key, entries)
                return Lookup(self.path / entry.file, "found")
        except OSError as exc:
            self._disable(exc.strerror or str(exc))
            return Lookup(None, f"cache folder not usable: {exc}")

    def store(
        self, graph_key: str, identity: DeviceIdentity, fingerprint: str, data: bytes
    ) -> Path | None:
        """Write ``data`` as this key's file for this device, replacing the device's old one."""
        if not self._ensure():
            return None
        stem = key_stem(graph_key)
        now = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
        unique = f"{time.time_ns() % 10**9:09d}_{os.getpid()}_{next(_counter)}"
        name = f"{stem}_{stamp}_{unique}.vkcache"
        try:
            with self._locked(stem):
                entries = self._read_index(graph_key)  # before the new file exists
                write_atomic(self.path / name, data)
                device = device_entry(identity)
                for old in [e for e in entries if _same_device(e.device, device)]:
                    entries.remove(old)
                    self._remove(old.file)
                entries.append(
                    IndexEntry(
                        name, graph_key, device, fingerprint, __version__, now, now, len(data)
                    )
                )
                entries = self._sweep(graph_key, entries)
                entries = self._apply_cap(entries, keep=name)
                self._write_index(graph_key, entries)
                return self.path / name
        except OSError as exc:
            self._disable(exc.strerror or str(exc))
            self._remove(name)
            return None

    def _apply_cap(self, entries: list[IndexEntry], keep: str | None = None) -> list[IndexEntry]:
        total = sum(e.size for e in entries)
        for entry in sorted(entries, key=lambda e: e.last_used):
            if total <= self.max_bytes:
                break
            if entry.file == keep:
                continue
            entries.remove(entry)
            self._remove(entry.file)
            total -= entry.size
        return entries

    def keys(self) -> list[str]:
        """Every graph key with an index in the folder."""
        keys = []
        for idx in sorted(self.path.glob("*.idx")):
            try:
                keys.append(json.loads(idx.read_text(encoding="utf-8"))["graph_key"])
            except (OSError, ValueError, KeyError, TypeError):
                keys.append(idx.stem)
        return keys

    def entries(self, graph_key: str) -> list[IndexEntry]:
        with self._locked(key_stem(graph_key)):
            return self._read_index(graph_key)

    def prune(self) -> dict[str, int]:
        """Remove stale and orphaned files and apply the size cap over every key."""
        removed = 0
        for graph_key in self.keys():
            stem = key_stem(graph_key)
            with self._locked(stem):
                before = {p.name for p in self._files(graph_key)}
                entries = self._sweep(graph_key, self._read_index(graph_key))
                entries = [e for e in entries if e.asyncvk_version in ("", __version__)]
                entries = self._apply_cap(entries)
                self._write_index(graph_key, entries)
                entries = self._sweep(graph_key, entries)
                after = {p.name for p in self._files(graph_key)}
                removed += len(before - after)
        for tmp in self.path.glob(".*.tmp"):
            if time.time() - tmp.stat().st_mtime > 3600:
                tmp.unlink(missing_ok=True)
                removed += 1
        return {"removed_files": removed}


def model_fingerprint(*sources: object) -> str:
    """blake2b of the param and weights: paths are read in chunks, bytes hashed directly."""
    h = hashlib.blake2b(digest_size=16)
    for source in sources:
        if isinstance(source, (bytes, bytearray, memoryview)):
            h.update(b"B")
            h.update(source)
        elif isinstance(source, (str, os.PathLike)):
            h.update(b"F")
            with open(source, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        else:
            return ""
    return h.hexdigest()
