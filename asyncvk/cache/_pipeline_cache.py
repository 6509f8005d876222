"""PipelineCache: live pipelines by digest, SPIR-V by key, and one driver VkPipelineCache.

One face over parts that each own their state and lock: the SPIR-V store
(``_spirv_store``), the driver-blob store, sole owner of the VkPipelineCache
(``_driver_blob``), the live pipelines with their single-flight and pool
(``_live_pipelines``), the build path from a spec to a pipeline (``_pipeline_builds``), and
the counters they share (``_counters``). Cache files go through ``_persist``.

Concurrency model (what ncnn does with one mutex held through every compile, done in parallel):

* A request's digest is looked up and, on a miss, its build is registered under a lock with no
  blocking work inside; the slow part runs in a bounded thread pool.
* Concurrent requests for one digest share one ``concurrent.futures.Future``, so waiters from
  any event loop or plain thread see the same result. Async waiters await it shielded:
  cancelling one waiter never cancels the shared build.
* SPIR-V compiles are deduplicated the same way, keyed by (shader, option bits, source hash,
  device-macro hash), so 50 pipelines of one shader cost one GLSL compile.
* A failure reaches every waiter and is not cached; the next request builds again.
* SPIR-V adopted from a cache file is checked against its shader's declared interface before
  its first use, and a creation that fails on cached content (a body, the driver blob) drops
  that content and builds from source: a cache file can cost time, never a run.
* Only ``vkCreateComputePipelines`` is serialised, and only on drivers flagged
  ``serialize_pipeline_creation``; a merge into the driver cache waits for creations with it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any, overload

from .._threads import run_sync
from ..gpu._device import VulkanDevice, get_gpu_device
from ..gpu._driver_cache import DriverPipelineCache
from ..gpu._pipeline import PipelineArtifact
from ..shader._options import ShaderOptions, device_macros
from ..shader._registry import ShaderRegistry, builtin_shaders
from . import _persist
from ._autosave import AutoSaver
from ._counters import CacheCounters
from ._driver_blob import DriverBlobStore
from ._file_format import CacheLoadResult
from ._keys import SpirvKey
from ._live_pipelines import LivePipelines
from ._persist import CacheSource, SaveResult
from ._pipeline_builds import PipelineBuilds
from ._safe_fs import expand_path
from ._single_flight import await_shared
from ._spec import PipelineSpec
from ._spirv_store import SpirvStore
from ._statistics import BuildRecord, CacheStatistics

__all__ = (
    "BuildRecord",
    "CacheStatistics",
    "Pipeline",
    "PipelineCache",
    "await_shared",
)

Pipeline = PipelineArtifact


class PipelineCache:
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

    def __init__(
        self,
        device: VulkanDevice | None = None,
        *,
        max_workers: int | None = None,
        read_only: bool = False,
        must_hit: bool = False,
        registry: ShaderRegistry | None = None,
        packaged_spirv: bool = True,
    ) -> None:
        self.device = device or get_gpu_device()
        self.max_workers = max_workers or os.cpu_count() or 1
        self.read_only = read_only
        self.must_hit = must_hit
        self.registry = registry or builtin_shaders()
        self.use_packaged = packaged_spirv
        self.broken = self.device.quirks.broken_pipeline_cache
        self.counters = CacheCounters()
        self.spirv = SpirvStore(
            self.registry,
            device_macros(self.device.info),
            self.counters,
            use_packaged=packaged_spirv,
            must_hit=must_hit,
        )
        self.driver = DriverBlobStore(self.device, self.counters, broken=self.broken)
        self.live = LivePipelines(
            self.counters, max_workers=self.max_workers, shared=not self.broken
        )
        self.builds = PipelineBuilds(
            self.device, self.spirv, self.driver, self.live, self.counters, must_hit=must_hit
        )
        self.saved_generation = 0
        self.last_load: CacheLoadResult | None = None

    # -- requests ---------------------------------------------------------------------------

    def request_many(
        self, specs: Iterable[PipelineSpec]
    ) -> dict[PipelineSpec, Future[PipelineArtifact]]:
        """Start (or join) the build of every distinct spec; a concurrent future for each.

        Equal specs share one entry, and specs that name one pipeline share one build, so a
        model's hundreds of requests cost one wake-up per distinct pipeline. Unknown shader
        names raise here, in the caller, before any build starts.
        """
        distinct = dict.fromkeys(specs)
        for spec in distinct:
            if spec.spirv is None:
                self.registry.get(spec.shader)
        return {spec: self.builds.start(spec) for spec in distinct}

    async def get_many(self, specs: Iterable[PipelineSpec]) -> dict[PipelineSpec, PipelineArtifact]:
        """The pipeline of every spec; cancelling this waiter never cancels a shared build."""
        futures = self.request_many(specs)
        done = {}
        for spec, future in futures.items():
            done[spec] = await await_shared(future)
        return done

    # -- what it holds ----------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """Bumps whenever the cache holds something new (autosave watches it)."""
        return self.counters.generation

    @property
    def closed(self) -> bool:
        """Whether ``close()`` ran: no request is taken any more."""
        return self.live.closed

    @property
    def vk_cache(self) -> DriverPipelineCache | None:
        """The live driver VkPipelineCache (None on drivers flagged broken, and once closed)."""
        return self.driver.vk_cache

    @property
    def driver_blob_loaded(self) -> bool:
        """Whether a merged driver blob held pipelines."""
        return self.driver.loaded

    @property
    def device_macro_hash(self) -> int:
        """The hash of this device's shader macros, part of every SPIR-V key it uses."""
        return self.spirv.macro_hash

    def statistics(self) -> CacheStatistics:
        """What the cache counted since it was made, and what it holds now."""
        values: dict[str, Any] = self.counters.values()
        values["entries"] = len(self.live)
        values["spirv_entries"] = len(self.spirv)
        values["in_flight"] = self.live.in_flight()
        typed: dict[str, Any] = {
            k: float(v) if k.endswith("_seconds") else int(v) for k, v in values.items()
        }
        return CacheStatistics(**typed)

    def build_log(self) -> list[BuildRecord]:
        """The most recent pipeline builds (up to 4096), oldest first."""
        return self.counters.build_log()

    def spirv_key(self, shader: str, options: ShaderOptions) -> SpirvKey:
        """The key a builtin shader's SPIR-V is stored under for ``options`` on this device."""
        return self.spirv.key(shader, options)

    def spirv_entries(self) -> dict[SpirvKey, bytes]:
        """A snapshot of the SPIR-V bodies this cache holds, by key."""
        return self.spirv.entries()

    def add_spirv_entries(self, entries: dict[SpirvKey, bytes]) -> list[str]:
        """Adopt SPIR-V entries from a file or a store (see ``SpirvStore.add_entries``)."""
        return self.spirv.add_entries(entries)

    def spirv_with(self, entries: Mapping[SpirvKey, bytes]) -> dict[SpirvKey, bytes]:
        """These entries and those of ``entries`` a save would keep; nothing is adopted."""
        return self.spirv.entries_with(entries)

    def check_spirv_entries(self) -> list[str]:
        """Check every adopted entry not used yet; drop the bad ones, one line for each."""
        return self.spirv.check_entries()

    def compiled_keys(self) -> set[SpirvKey]:
        """The SPIR-V entries this process compiled from GLSL (new to every store)."""
        return self.spirv.compiled_keys()

    def packaged_holds(self, key: SpirvKey) -> bool:
        """Whether the package's SPIR-V folder holds a good body for ``key``."""
        return self.spirv.packaged_holds(key)

    def driver_blob(self) -> bytes:
        """The live driver cache's data (empty when there is none)."""
        return self.driver.data()

    def merge_driver_blob(self, blob: bytes) -> bool:
        """Merge a validated blob into the live driver cache once; whether it is merged."""
        return self.driver.merge(blob)

    def blob_with(self, other: bytes) -> bytes:
        """The live driver cache's data merged with ``other`` in a scratch cache."""
        return self.driver.data_with(other)

    # -- the cache file ---------------------------------------------------------------------

    def load_cache(self, source: CacheSource) -> CacheLoadResult:
        """Load a cache file (path, bytes or binary file). Never raises for bad content:
        the result is falsy with a reason, and nothing was committed."""
        self.last_load = _persist.load_cache(self.spirv, self.driver, source)
        return self.last_load

    @overload
    def save_cache(self, path: None = None) -> bytes: ...

    @overload
    def save_cache(self, path: str | os.PathLike[str]) -> SaveResult: ...

    def save_cache(self, path: str | os.PathLike[str] | None = None) -> bytes | SaveResult:
        """To bytes (no path), or atomically to ``path`` merging what is already there."""
        if path is None:
            return self.merged_with(None)
        return self.save_to(path)

    def save_to(self, path: str | os.PathLike[str]) -> SaveResult:
        """``save_cache(path)``: write atomically, merging what the file holds."""
        if self.read_only:
            return SaveResult(False, "read-only cache: not writing", expand_path(path))
        generation = self.generation
        result = _persist.save_cache(self.spirv, self.driver, path)
        if result:
            self.saved_generation = generation
        return result

    def merged_with(self, existing: bytes | None) -> bytes:
        """What a save writes over ``existing`` (a cache file's bytes, or None): this cache's
        contents in union with what another process saved there."""
        return _persist.merge_with_saved(self.spirv, self.driver, existing)

    async def save_cache_async(self, path: str | os.PathLike[str]) -> SaveResult:
        """``save_cache(path)`` on a worker thread: the lock, merge and write never block the
        event loop. Never raises for a file problem; the SaveResult says what happened."""
        return await run_sync(self.save_to, path)

    def autosave(self, path: str | os.PathLike[str], *, interval: float = 2.0) -> AutoSaver:
        """Start saving to ``path`` in the background (call from a running event loop)."""
        return AutoSaver(self, path, interval=interval)

    # -- lifetime ---------------------------------------------------------------------------

    def clear(self) -> None:
        """Drop every live pipeline (SPIR-V entries stay: they hold no Vulkan handle).

        A pipeline is destroyed now unless a loaded model still holds it (``acquire``): then
        it goes when that model is released, so recorded plans keep running.
        """
        self.live.clear()

    def close(self) -> None:
        """Wait for running builds, drop every pipeline (as ``clear()``) and release the
        driver cache. Idempotent."""
        if self.closed:
            return
        self.live.close()
        self.driver.release()

    async def aclose(self) -> None:
        """``close()`` on a worker thread: waits for builds in flight, then releases every
        pipeline and the driver's pipeline cache."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __repr__(self) -> str:
        s = self.statistics()
        return (
            f"<{type(self).__name__} [entries: {s.entries}, in-flight: {s.in_flight} | "
            f"hits: {s.live_hits}, created: {s.pipelines_created}, "
            f"spirv compiled: {s.spirv_compiles}]>"
        )

    async def __aenter__(self) -> PipelineCache:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> PipelineCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
