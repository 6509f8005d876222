"""PipelineCache: live pipelines by digest, SPIR-V by key, and one driver VkPipelineCache.

Built in layers, one concept a module: ``_cache_core`` (state, counters, the concurrency model),
``_spirv_entries``, ``_driver_blob``, ``_requests``; this module adds cache files and lifetime.
"""

from __future__ import annotations

import asyncio
import os
from typing import overload

from ..gpu._pipeline import PipelineArtifact
from . import _persist
from ._autosave import AutoSaver
from ._file_format import CacheLoadResult
from ._persist import CacheSource, SaveResult
from ._requests import PipelineRequests, await_shared
from ._statistics import BuildRecord, CacheStatistics

__all__ = (
    "BuildRecord",
    "CacheStatistics",
    "Pipeline",
    "PipelineCache",
    "await_shared",
)

Pipeline = PipelineArtifact


class PipelineCache(PipelineRequests):
    """The in-process pipeline cache of one device.

    Arguments:
        device: the VulkanDevice (default: the default GPU).
        max_workers: threads that compile GLSL and create pipelines (default: CPU count).
        read_only: never write a cache file (``save_cache`` to a path does nothing).
        must_hit: raise CacheMissError instead of compiling GLSL cold.
        packaged_spirv: take a shader's SPIR-V from the folder the install compiled before
            compiling it (``ASYNCVK_PACKAGED_SPIRV=0`` turns it off for the whole process).

    Raises:
        NoDeviceError: no ``device`` was given and there is no Vulkan device.

    Example::

        cache = asyncvk.PipelineCache()
        cache.load_cache("model.vkcache")  # a missing or bad file is a miss, never an error
        net = asyncvk.Net(asyncvk.Option(pipeline_cache=cache))
        ...
        cache.save_cache("model.vkcache")
    """

    # -- the cache file ---------------------------------------------------------------------

    def load_cache(self, source: CacheSource) -> CacheLoadResult:
        """Load a cache file (path, bytes or binary file). Never raises for bad content:
        the result is falsy with a reason, and nothing was committed."""
        return _persist.load_cache(self, source)

    @overload
    def save_cache(self, path: None = None) -> bytes: ...

    @overload
    def save_cache(self, path: str | os.PathLike[str]) -> SaveResult: ...

    def save_cache(self, path: str | os.PathLike[str] | None = None) -> bytes | SaveResult:
        """To bytes (no path), or atomically to ``path`` merging what is already there."""
        if path is None:
            return _persist.encode_current(self)
        return _persist.save_cache(self, path)

    async def save_cache_async(self, path: str | os.PathLike[str]) -> SaveResult:
        """``save_cache(path)`` on a worker thread: the lock, merge and write never block the
        event loop. Never raises for a file problem; the SaveResult says what happened."""
        return await _persist.save_cache_async(self, path)

    def autosave(self, path: str | os.PathLike[str], *, interval: float = 2.0) -> AutoSaver:
        """Start saving to ``path`` in the background (call from a running event loop)."""
        return AutoSaver(self, path, interval=interval)

    # -- lifetime ---------------------------------------------------------------------------

    def clear(self) -> None:
        """Drop every live pipeline (SPIR-V entries stay: they hold no Vulkan handle).

        A pipeline is destroyed now unless a loaded model still holds it (``acquire``): then
        it goes when that model is released, so recorded plans keep running.
        """
        with self._lock:
            artifacts = list(self._entries.values()) + self._owned_uncached
            self._entries.clear()
            self._owned_uncached = []
        for artifact in artifacts:
            artifact.destroy()

    def close(self) -> None:
        """Wait for running builds, drop every pipeline (as ``clear()``) and release the
        driver cache. Idempotent."""
        if self.closed:
            return
        self._pool.shutdown(wait=True)
        self.clear()
        with self._lock:
            self.closed = True
        for retired in self._retired_vk_caches:
            retired.release()
        self._retired_vk_caches = []
        if self.vk_cache is not None:
            self.vk_cache.release()
            self.vk_cache = None

    async def aclose(self) -> None:
        """``close()`` on a worker thread: waits for builds in flight, then releases every
        pipeline and the driver's pipeline cache."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    async def __aenter__(self) -> PipelineCache:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> PipelineCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
