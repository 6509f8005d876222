"""The cache folder's files: naming, the key lock, reading and rebuilding an index, sweeping.

``CacheDirectory`` (``_directory``) builds lookup, store and prune on this layer. Only names of
asyncvk's own scheme are ever removed: ``<stem>_<time>_<token>.vkcache`` cache files, and the
temp files of a dead writer (``_atomic_file.remove_stale_temps``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..gpu._identity import MATCH_FIELDS, DeviceIdentity
from ._atomic_file import (
    LOCK_TIMEOUT_S,
    read_regular_cache_file,
    remove_stale_temps,
    temp_pattern,
    write_atomic,
)
from ._file_inspect import describe_cache
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
    ownership_refusal,
    random_token,
)

log = logging.getLogger("asyncvk.cache")

DEFAULT_MAX_BYTES = 1 << 30
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class CacheDirectoryWarning(UserWarning):
    """The cache folder cannot be used (or not written); the model runs uncached or unsaved."""


def key_stem(graph_key: str) -> str:
    """The file stem for a key: the key itself when plain, else ``hash_<sha256 prefix>``."""
    if _PLAIN_KEY.match(graph_key):
        return graph_key
    return "hash_" + hashlib.sha256(graph_key.encode()).hexdigest()[:32]


def _cache_file_pattern(stem: str) -> re.Pattern[str]:
    return re.compile(re.escape(stem) + r"_\d{8}T\d{6}_[0-9a-z_]+\.vkcache")


def device_entry(identity: DeviceIdentity) -> dict[str, Any]:
    """An index entry's device: its match key (``DeviceIdentity.same_device`` reads it) and
    its name, for ``cache ls``."""
    return {**identity.match_key(), "device_name": identity.device_name}


def _header_device(header: Mapping[str, Any]) -> dict[str, Any]:
    """The device of a described cache file's header, as an index entry stores it."""
    device = {name: header[name] for name in MATCH_FIELDS}
    for name in ("device_name_hash", "driver_name_hash"):
        device[name] = int(device[name], 16)
    return {**device, "device_name": ""}  # the file holds only the name's hash


@dataclass
class PruneReport:
    removed: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # files in the folder that are not asyncvk's
    problems: list[str] = field(default_factory=list)


class FolderFiles:
    """A cache folder's files and locks; never raises for a broken, hostile or read-only folder.

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

    def no_saves(self, why: str) -> None:
        if self.writable:
            self.writable = False
            self._warn("can be read but not written; not saving to it", why)

    def ensure(self) -> bool:
        """Whether lookups can be served; finds out once whether saves can be written."""
        if not self.usable:
            return False
        if not self.writable:
            if not self.path.is_dir():
                return self._disable_missing()
            untrusted = ownership_refusal(self.path, "cache folder")
            if untrusted is not None:
                self._disable(untrusted)
                return False
            return True
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            if not self.path.is_dir():
                self._disable(exc.strerror or str(exc))
                return False
        untrusted = ownership_refusal(self.path, "cache folder")
        if untrusted is not None:
            self._disable(untrusted)
            return False
        probe = self.path / f".probe.{random_token()}"
        try:
            os.close(create_exclusive(probe, 0o600))
            os.unlink(probe)
        except OSError as exc:
            self.no_saves(exc.strerror or str(exc))
        return True

    def _disable_missing(self) -> bool:
        self.usable = False
        return False

    @contextlib.contextmanager
    def lock(self, stem: str, *, for_write: bool) -> Iterator[None]:
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

    def files_of(self, graph_key: str) -> list[Path]:
        stem = key_stem(graph_key)
        pattern = _cache_file_pattern(stem)
        try:
            names = os.listdir(self.path)
        except OSError:
            return []
        return sorted(self.path / n for n in names if pattern.fullmatch(n))

    def read_index(self, graph_key: str) -> tuple[list[IndexEntry], bool]:
        """The index entries (rebuilt from the files when the index is bad), and whether the
        index file is asyncvk's to replace."""
        path = self.index_path(graph_key)
        pattern = _cache_file_pattern(key_stem(graph_key))
        try:
            data = read_index_file(path)
            return parse_index(data, graph_key, pattern), True
        except FileNotFoundError:
            return (self._rebuild(graph_key) if self.files_of(graph_key) else []), True
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

    def read_cache_file(self, name: str) -> bytes | None:
        return read_regular_cache_file(self.path / name)  # bounded: a folder may be hostile

    def _rebuild(self, graph_key: str) -> list[IndexEntry]:
        entries: dict[str, IndexEntry] = {}
        for path in self.files_of(graph_key):
            data = self.read_cache_file(path.name)
            if data is None:
                continue
            try:
                header = describe_cache(data)["header"]
            except Exception:  # a file that does not describe is an orphan: swept on a write
                continue
            device = _header_device(header)
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
            key = repr([device[name] for name in MATCH_FIELDS])
            if key not in entries or entries[key].created < entry.created:
                entries[key] = entry  # the newest file per device wins
        return list(entries.values())

    def write_index(self, graph_key: str, entries: list[IndexEntry], ours: bool) -> None:
        if not ours:
            raise UnsafePathError(
                errno.EEXIST, f"{self.index_path(graph_key)} is not an asyncvk index"
            )
        write_atomic(self.index_path(graph_key), encode_index(graph_key, entries))

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path / name)

    def sweep(self, graph_key: str, entries: list[IndexEntry]) -> list[IndexEntry]:
        """Drop entries whose file is gone, delete this key's files no entry names."""
        present = {p.name for p in self.files_of(graph_key)}
        live = [e for e in entries if e.file in present]
        named = {e.file for e in live}
        for name in present - named:
            self.remove(name)
        return live

    def prune_temps(self, ours: set[str], report: PruneReport) -> None:
        temps = [temp_pattern(name) for name in ours if name.endswith((".idx", ".vkcache"))]
        temps.append(re.compile(r"\.probe\.()[0-9a-f]{16}"))  # a probe of a killed process
        removed, unmatched = remove_stale_temps(str(self.path), temps, keep=ours)
        report.removed.extend(removed)
        report.left.extend(unmatched)
