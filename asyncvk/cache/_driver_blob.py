"""The driver blob: merged into the live VkPipelineCache, and dropped when it breaks creation.

A creation that fails on what a cache file gave (a SPIR-V body, the driver blob) drops that
content and builds from source: a cache file can cost time, never a run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from .._errors import PipelineError, SpirvError, VulkanError
from ..gpu._driver_cache import DriverPipelineCache, blob_holds_pipelines
from ..gpu._pipeline import PipelineArtifact
from ..shader._options import ShaderOptions
from ..shader._reflect import ShaderInfo
from ._cache_core import log
from ._spirv_entries import SpirvEntries

#: What creating a pipeline raises when the SPIR-V or the driver blob it was given is bad.
_CONTENT_ERRORS = (SpirvError, PipelineError, VulkanError)


class DriverBlob(SpirvEntries):
    """The live driver cache's blob, and creation that falls back from cached content."""

    def driver_blob(self) -> bytes:
        """The live driver cache's data (empty when there is none)."""
        vk_cache = self.vk_cache
        return b"" if vk_cache is None else vk_cache.data()

    def merge_driver_blob(self, blob: bytes) -> bool:
        """Merge a validated blob into the live driver cache; whether it was merged.

        A blob that already broke pipeline creation in this process is not merged again (the
        remote tier must then not count it as part of the blob it pushes).
        """
        if self.vk_cache is None or not blob:
            return False
        digest = hashlib.blake2b(blob, digest_size=16).digest()
        if digest in self._refused_blobs:
            log.info("not merging a driver blob that broke pipeline creation in this process")
            return False
        if digest in self._merged_blobs:
            return True  # merged before: the live cache holds it
        self._merged_blobs.add(digest)
        self.vk_cache.merge(blob)
        self.driver_blob_loaded = self.driver_blob_loaded or blob_holds_pipelines(blob)
        return True

    def blob_with(self, other: bytes) -> bytes:
        """The live driver cache's data merged with ``other`` (validated by the caller) in a
        scratch cache: what a save writes. The live cache is not touched."""
        live = self.driver_blob()
        digest = hashlib.blake2b(other, digest_size=16).digest()
        if self.vk_cache is None or not other or digest in self._refused_blobs | self._merged_blobs:
            return live
        scratch = DriverPipelineCache(self.device, live)
        try:
            scratch.merge(other)
            return scratch.data()
        finally:
            scratch.release()

    def _create_or_rebuild(
        self,
        shader: str,
        options: ShaderOptions,
        spirv: bytes,
        info: ShaderInfo,
        create: Callable[[bytes, ShaderInfo, DriverPipelineCache | None], PipelineArtifact],
    ) -> PipelineArtifact:
        """``create``, and when it fails on what a cache file gave, again without it.

        A cached body that fails is dropped and compiled from source; if creation still fails
        and a loaded driver blob may be to blame, it is tried without the driver cache, and if
        that works the driver cache is replaced by an empty one. An error that remains is real.
        """
        key = self.spirv_key(shader, options)
        try:
            return create(spirv, info, self.vk_cache)
        except _CONTENT_ERRORS as exc:
            with self._lock:
                adopted = self._spirv_compiled.get(key) != spirv
                if adopted:
                    self._drop_spirv_locked(key, spirv, f"creating a pipeline failed: {exc}")
            if not adopted and not self.driver_blob_loaded:
                raise
            error = exc
        if adopted:
            spirv, info = self._builtin_spirv(shader, options)
            try:
                return create(spirv, info, self.vk_cache)
            except _CONTENT_ERRORS as exc:
                if not self.driver_blob_loaded:
                    raise
                error = exc
        try:
            artifact = create(spirv, info, None)
        except _CONTENT_ERRORS:
            raise error from None
        self._reset_driver_cache(f"{shader!r} failed with it ({error}) and worked without")
        return artifact

    def _reset_driver_cache(self, reason: str) -> None:
        """Replace the live VkPipelineCache by an empty one and never merge its blobs again.

        The old cache may still be in use by another build, so it is destroyed only on close.
        """
        fresh = DriverPipelineCache(self.device)
        with self._lock:
            old, self.vk_cache = self.vk_cache, fresh
            if old is not None:
                self._retired_vk_caches.append(old)
            self._refused_blobs |= self._merged_blobs
            self.driver_blob_loaded = False
            self._stats["driver_cache_resets"] += 1
            self.generation += 1  # a save now writes the driver's new blob over the bad one
        log.warning("dropped the loaded driver pipeline cache: %s", reason)
