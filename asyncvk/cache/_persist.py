"""Loading and saving a PipelineCache's file: the bridge between the live cache and the format.

A load checks everything before it commits anything: the file must decode for this device,
the driver blob must be accepted by the driver, and only then are SPIR-V entries adopted and the
blob merged. Any failure is a cache miss with a reason, never an exception.

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
from ._file_entries import decode_cache
from ._file_format import CacheContents, CacheLoadResult, encode_cache, validate_driver_blob
from ._file_inspect import read_cache_source
from ._keys import split_by_macros
from ._requests import PipelineRequests
from ._safe_fs import UnsafePathError, expand_path, ownership_refusal

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


def load_cache(cache: PipelineRequests, source: CacheSource) -> CacheLoadResult:
    """Load ``source`` into ``cache``; all or nothing for the header and the driver blob."""
    if isinstance(source, (str, os.PathLike)):
        source = expand_path(source)
        untrusted = ownership_refusal(source)
        if untrusted is not None:
            return _note(cache, CacheLoadResult(False, untrusted))
    try:
        data = read_cache_source(source)
        if isinstance(data, CacheLoadResult):
            return _note(cache, data)
        identity = cache.device.info.identity
        result, contents = decode_cache(
            data, expected=identity, source_hashes=cache.registry.source_hash_view()
        )
        if not result or contents is None:
            return _note(cache, result)
        blob = contents.driver_blob
        skipped = list(result.skipped)
        if blob and cache.vk_cache is None:
            skipped.append("driver blob ignored: this device's pipeline cache is flagged broken")
            blob = b""
        if blob:  # decode_cache validated it against this device's identity
            try:
                cache.merge_driver_blob(blob)
            except AsyncVkError as exc:
                return _note(cache, CacheLoadResult(False, f"the driver refused the blob: {exc}"))
        entries, others = split_by_macros(contents.spirv, cache.device_macro_hash)
        foreign = len(others)
        if foreign:
            skipped.append(f"{foreign} entries compiled for other device macros")
        refused = cache.add_spirv_entries(entries)
        skipped += refused
        loaded = CacheLoadResult(
            True,
            result.reason or "loaded",
            entries_used=len(entries) - len(refused),
            entries_skipped=result.entries_skipped + foreign + len(refused),
            skipped=tuple(skipped),
        )
        return _note(cache, loaded)
    except Exception as exc:  # a cache can only miss: nothing unexpected may escape
        log.exception("unexpected error while loading a pipeline cache")
        return _note(cache, CacheLoadResult(False, f"unexpected error: {exc!r}"))


def _note(cache: PipelineRequests, result: CacheLoadResult) -> CacheLoadResult:
    cache.last_load = result
    if not result:
        log.info("pipeline cache not loaded: %s", result.reason)
    return result


def current_contents(cache: PipelineRequests, saved: CacheContents | None = None) -> CacheContents:
    """What this cache would write now, with what ``saved`` holds beside it (merged into a
    snapshot: the live cache is not changed); a blob the driver returns malformed is
    dropped."""
    identity = cache.device.info.identity
    blob = cache.driver_blob()
    spirv = cache.spirv_entries()
    if saved is not None:
        spirv = cache.spirv_with(saved.spirv)
        if saved.driver_blob:
            try:
                blob = cache.blob_with(saved.driver_blob)
            except AsyncVkError as exc:
                log.info("not merging the blob on disk: %s", exc)
    if blob and validate_driver_blob(blob, identity) is not None:
        log.warning("dropping a malformed driver blob from the save")
        blob = b""
    return CacheContents(identity=identity, spirv=spirv, driver_blob=blob)


def encode_current(cache: PipelineRequests) -> bytes:
    return encode_cache(current_contents(cache))


def merge_with_saved(cache: PipelineRequests, existing: bytes | None) -> bytes:
    """Union with what another process saved meanwhile, so nobody's work is thrown away."""
    if existing:
        result, old = decode_cache(
            existing,
            expected=cache.device.info.identity,
            source_hashes=cache.registry.source_hash_view(),
        )
        if result and old is not None:
            foreign = split_by_macros(old.spirv, cache.device_macro_hash)[1]
            merged = current_contents(cache, old)
            # Keep entries for other device macros that share this identity. This device's
            # entries that the live cache lacks were dropped as bad: they stay dropped.
            if foreign:
                merged = CacheContents(
                    merged.identity, {**foreign, **merged.spirv}, merged.driver_blob
                )
            return encode_cache(merged)
    return encode_current(cache)


def save_cache(cache: PipelineRequests, path: str | os.PathLike[str]) -> SaveResult:
    """Write the cache to ``path`` atomically under an advisory lock, merging what is there."""
    target = expand_path(path)
    if cache.read_only:
        return SaveResult(False, "read-only cache: not writing", target)
    untrusted = ownership_refusal(target)
    if untrusted is not None:
        log.warning("pipeline cache not saved: %s", untrusted)
        return SaveResult(False, untrusted, target)
    written: dict[str, Any] = {}

    def build(existing: bytes | None) -> bytes:
        data = merge_with_saved(cache, existing)
        written["nbytes"] = len(data)
        return data

    generation = cache.generation
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
    cache.saved_generation = generation
    return SaveResult(
        True,
        "saved",
        target,
        nbytes=written.get("nbytes", 0),
        spirv_entries=len(cache.spirv_entries()),
        driver_blob_bytes=len(cache.driver_blob()),
    )


async def save_cache_async(cache: PipelineRequests, path: str | os.PathLike[str]) -> SaveResult:
    """``save_cache`` off the event loop; the lock and merge run in a worker thread."""
    from .._threads import run_sync

    return await run_sync(save_cache, cache, path)


__all__ = (
    "SaveResult",
    "encode_current",
    "merge_with_saved",
    "load_cache",
    "save_cache",
    "save_cache_async",
)
