"""Loading and saving a cache file: the bridge between a cache's two stores and the format.

A load checks everything before it commits anything: the file must decode for this device,
the driver blob must be accepted by the driver, and only then are SPIR-V entries adopted and the
blob merged. Any failure is a cache miss with a reason, never an exception. A save reads
snapshots of the stores and merges bytes; it never changes them.

A save never raises into the caller: an OSError (read-only folder, disk full) is logged and
returned as a failed SaveResult, and the old file stays whole.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, BinaryIO

from .._errors import AsyncVkError
from ._atomic_file import save_merged
from ._driver_blob import DriverBlobStore
from ._file_entries import decode_cache
from ._file_format import CacheContents, CacheLoadResult, encode_cache, validate_driver_blob
from ._file_inspect import read_cache_source
from ._keys import split_by_macros
from ._safe_fs import UnsafePathError, expand_path, ownership_refusal
from ._spirv_store import SpirvStore

log = logging.getLogger("asyncvk.cache")

CacheSource = str | os.PathLike[str] | bytes | BinaryIO


@dataclass(frozen=True)
class SaveResult:
    """What a save did: truthy on success, else ``reason`` says why nothing was written."""

    ok: bool
    reason: str = ""
    path: str | None = None
    nbytes: int = 0
    spirv_entries: int = 0
    driver_blob_bytes: int = 0

    def __bool__(self) -> bool:
        return self.ok


def load_cache(spirv: SpirvStore, driver: DriverBlobStore, source: CacheSource) -> CacheLoadResult:
    """Load ``source`` into the two stores; all or nothing for the header and the driver
    blob."""
    result = _load(spirv, driver, source)
    if not result:
        log.info("pipeline cache not loaded: %s", result.reason)
    return result


def _load(spirv: SpirvStore, driver: DriverBlobStore, source: CacheSource) -> CacheLoadResult:
    if isinstance(source, (str, os.PathLike)):
        source = expand_path(source)
        untrusted = ownership_refusal(source)
        if untrusted is not None:
            return CacheLoadResult(False, untrusted)
    try:
        data = read_cache_source(source)
        if isinstance(data, CacheLoadResult):
            return data
        result, contents = decode_cache(
            data,
            expected=driver.device.info.identity,
            source_hashes=spirv.registry.source_hash_view(),
        )
        if not result or contents is None:
            return result
        blob = contents.driver_blob
        skipped = list(result.skipped)
        if blob and driver.vk_cache is None:
            skipped.append("driver blob ignored: this device's pipeline cache is flagged broken")
            blob = b""
        if blob:  # decode_cache validated it against this device's identity
            try:
                driver.merge(blob)
            except AsyncVkError as exc:
                return CacheLoadResult(False, f"the driver refused the blob: {exc}")
        entries, others = split_by_macros(contents.spirv, spirv.macro_hash)
        foreign = len(others)
        if foreign:
            skipped.append(f"{foreign} entries compiled for other device macros")
        refused = spirv.add_entries(entries)
        skipped += refused
        return CacheLoadResult(
            True,
            result.reason or "loaded",
            entries_used=len(entries) - len(refused),
            entries_skipped=result.entries_skipped + foreign + len(refused),
            skipped=tuple(skipped),
        )
    except Exception as exc:  # a cache can only miss: nothing unexpected may escape
        log.exception("unexpected error while loading a pipeline cache")
        return CacheLoadResult(False, f"unexpected error: {exc!r}")


def current_contents(
    spirv: SpirvStore, driver: DriverBlobStore, saved: CacheContents | None = None
) -> CacheContents:
    """What the stores would write now, with what ``saved`` holds beside them (merged into
    snapshots: the stores are not changed); a blob the driver returns malformed is dropped."""
    identity = driver.device.info.identity
    blob = driver.data()
    entries = spirv.entries()
    if saved is not None:
        entries = spirv.entries_with(saved.spirv)
        if saved.driver_blob:
            try:
                blob = driver.data_with(saved.driver_blob)
            except AsyncVkError as exc:
                log.info("not merging the blob on disk: %s", exc)
    if blob and validate_driver_blob(blob, identity) is not None:
        log.warning("dropping a malformed driver blob from the save")
        blob = b""
    return CacheContents(identity=identity, spirv=entries, driver_blob=blob)


def merge_with_saved(spirv: SpirvStore, driver: DriverBlobStore, existing: bytes | None) -> bytes:
    """The stores' contents in union with what another process saved meanwhile (``existing``,
    a cache file's bytes), so nobody's work is thrown away."""
    if existing:
        result, old = decode_cache(
            existing,
            expected=driver.device.info.identity,
            source_hashes=spirv.registry.source_hash_view(),
        )
        if result and old is not None:
            foreign = split_by_macros(old.spirv, spirv.macro_hash)[1]
            merged = current_contents(spirv, driver, old)
            # Keep entries for other device macros that share this identity. This device's
            # entries that the live cache lacks were dropped as bad: they stay dropped.
            if foreign:
                merged = CacheContents(
                    merged.identity, {**foreign, **merged.spirv}, merged.driver_blob
                )
            return encode_cache(merged)
    return encode_cache(current_contents(spirv, driver))


def save_cache(
    spirv: SpirvStore, driver: DriverBlobStore, path: str | os.PathLike[str]
) -> SaveResult:
    """Write the stores to ``path`` atomically under an advisory lock, merging what is there."""
    target = expand_path(path)
    untrusted = ownership_refusal(target)
    if untrusted is not None:
        log.warning("pipeline cache not saved: %s", untrusted)
        return SaveResult(False, untrusted, target)
    written: dict[str, Any] = {}

    def build(existing: bytes | None) -> bytes:
        data = merge_with_saved(spirv, driver, existing)
        written["nbytes"] = len(data)
        return data

    try:
        save_merged(target, build)
    except UnsafePathError as exc:
        log.warning("pipeline cache not saved: %s", exc.strerror)
        return SaveResult(False, str(exc.strerror), target)
    except OSError as exc:
        log.warning("pipeline cache not saved to %s: %s", target, exc)
        return SaveResult(False, f"cannot write {target}: {exc.strerror or exc}", target)
    except Exception as exc:
        log.exception("unexpected error while saving a pipeline cache")
        return SaveResult(False, f"unexpected error: {exc!r}", target)
    return SaveResult(
        True,
        "saved",
        target,
        nbytes=written.get("nbytes", 0),
        spirv_entries=len(spirv),
        driver_blob_bytes=len(driver.data()),
    )


__all__ = (
    "CacheSource",
    "SaveResult",
    "current_contents",
    "load_cache",
    "merge_with_saved",
    "save_cache",
)
