"""PipelineCache: live pipelines by digest, SPIR-V by key, and one driver VkPipelineCache.

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
  ``serialize_pipeline_creation``.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from .._errors import CacheMissError, PipelineError, SpirvError, VulkanError
from ..gpu._device import VulkanDevice, get_gpu_device
from ..gpu._driver_cache import DriverPipelineCache, blob_holds_pipelines
from ..gpu._pipeline import PipelineArtifact, create_pipeline
from ..shader._compiler import TargetEnv, compile_glsl
from ..shader._interface import declared_interface, interface_mismatch
from ..shader._options import (
    ShaderOptions,
    device_macros,
    macro_hash,
    option_prelude,
    splice_prelude,
)
from ..shader._reflect import ShaderInfo, reflect_spirv
from ..shader._registry import ShaderRegistry, builtin_shaders
from . import _persist
from ._autosave import AutoSaver
from ._digest import builtin_digest, spirv_digest
from ._file_format import CacheLoadResult
from ._keys import SpirvKey, split_by_macros
from ._persist import CacheSource, SaveResult
from ._single_flight import Role, SingleFlight
from ._spec import PipelineSpec

log = logging.getLogger("asyncvk.cache")

_K = TypeVar("_K")
_V = TypeVar("_V")

Pipeline = PipelineArtifact
#: What creating a pipeline raises when the SPIR-V or the driver blob it was given is bad.
_CONTENT_ERRORS = (SpirvError, PipelineError, VulkanError)


@dataclass(frozen=True)
class CacheStatistics:
    """Counters since the cache was made (ncnn reports none of these)."""

    requests: int = 0
    live_hits: int = 0
    inflight_joins: int = 0
    spirv_compiles: int = 0
    spirv_hits: int = 0
    pipelines_created: int = 0
    glsl_seconds: float = 0.0
    create_seconds: float = 0.0
    driver_cache_hits: int = 0
    driver_cache_misses: int = 0
    failures: int = 0
    #: Cached SPIR-V entries dropped because they failed a check or pipeline creation.
    spirv_rejected: int = 0
    #: Times a loaded driver blob made pipeline creation fail, and was replaced by an empty one.
    driver_cache_resets: int = 0
    entries: int = 0
    spirv_entries: int = 0
    in_flight: int = 0


@dataclass(frozen=True)
class BuildRecord:
    """When one pipeline build ran, on the ``time.perf_counter`` clock: where a cold load goes.

    ``requested`` is when a caller asked, ``started`` when a worker thread took it (the gap
    is queueing), ``spirv_seconds`` getting the SPIR-V (its GLSL compile, or waiting for
    another build compiling the same shader; about 0 when cached), and ``create_seconds`` the
    driver's ``vkCreateComputePipelines`` plus module and layout creation.
    """

    name: str
    requested: float
    started: float
    finished: float
    spirv_seconds: float
    create_seconds: float
    driver_cache_hit: bool | None


class PipelineCache:
    """The in-process pipeline cache of one device.

    Arguments:
        device: the VulkanDevice (default: the default GPU).
        max_workers: threads that compile GLSL and create pipelines (default: CPU count).
        read_only: never write a cache file (``save_cache`` to a path does nothing).
        must_hit: raise CacheMissError instead of compiling GLSL cold.
    """

    def __init__(
        self,
        device: VulkanDevice | None = None,
        *,
        max_workers: int | None = None,
        read_only: bool = False,
        must_hit: bool = False,
        registry: ShaderRegistry | None = None,
    ) -> None:
        self.device = device or get_gpu_device()
        self.max_workers = max_workers or os.cpu_count() or 1
        self.read_only = read_only
        self.must_hit = must_hit
        self.registry = registry or builtin_shaders()
        self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="asyncvk-pipeline")
        self._lock = threading.Lock()
        self._entries: dict[bytes, PipelineArtifact] = {}
        self._owned_uncached: list[PipelineArtifact] = []
        self._pipelines: SingleFlight[PipelineArtifact] = SingleFlight()
        self._spirv_flight: SingleFlight[tuple[bytes, ShaderInfo]] = SingleFlight()
        self._spirv: dict[SpirvKey, bytes] = {}
        self._spirv_info: dict[SpirvKey, ShaderInfo] = {}  # only entries checked or compiled
        self._spirv_compiled: dict[SpirvKey, bytes] = {}  # compiled by this process
        self._rejected_spirv: set[tuple[SpirvKey, bytes]] = set()  # never adopted again
        self._merged_blobs: set[bytes] = set()  # blake2b of each driver blob merged
        self._refused_blobs: set[bytes] = set()  # blobs that broke pipeline creation
        self._retired_vk_caches: list[DriverPipelineCache] = []  # replaced, released on close
        self._stats: dict[str, float] = dict.fromkeys(CacheStatistics.__dataclass_fields__, 0)
        self._macros = device_macros(self.device.info)
        self._macro_hash = macro_hash(self._macros)
        self.broken = self.device.quirks.broken_pipeline_cache
        self.vk_cache = None if self.broken else DriverPipelineCache(self.device)
        self.driver_blob_loaded = False
        self.generation = 0  # bumps whenever something new is built (autosave watches it)
        self.saved_generation = 0
        self.last_load: CacheLoadResult | None = None
        self.closed = False
        self._builds: deque[BuildRecord] = deque(maxlen=4096)

    # -- driver VkPipelineCache -------------------------------------------------------------

    def driver_blob(self) -> bytes:
        """The live driver cache's data (empty when there is none)."""
        vk_cache = self.vk_cache
        return b"" if vk_cache is None else vk_cache.data()

    def merge_driver_blob(self, blob: bytes) -> None:
        """Merge a validated blob into the live driver cache.

        A blob that already broke pipeline creation in this process is not merged again.
        """
        if self.vk_cache is None or not blob:
            return
        digest = hashlib.blake2b(blob, digest_size=16).digest()
        if digest in self._refused_blobs:
            log.info("not merging a driver blob that broke pipeline creation in this process")
            return
        self._merged_blobs.add(digest)
        self.vk_cache.merge(blob)
        self.driver_blob_loaded = self.driver_blob_loaded or blob_holds_pipelines(blob)

    # -- statistics ----------------------------------------------------------------------------

    def _count(self, name: str, delta: float = 1) -> None:
        with self._lock:
            self._stats[name] += delta

    def statistics(self) -> CacheStatistics:
        with self._lock:
            values = dict(self._stats)
            values["entries"] = len(self._entries)
            values["spirv_entries"] = len(self._spirv)
        values["in_flight"] = len(self._pipelines)
        typed: dict[str, Any] = {
            k: float(v) if k.endswith("_seconds") else int(v) for k, v in values.items()
        }
        return CacheStatistics(**typed)

    def build_log(self) -> list[BuildRecord]:
        """The most recent pipeline builds (up to 4096), oldest first."""
        with self._lock:
            return list(self._builds)

    def __repr__(self) -> str:
        s = self.statistics()
        return (
            f"<PipelineCache [entries: {s.entries}, in-flight: {s.in_flight} | "
            f"hits: {s.live_hits}, created: {s.pipelines_created}, "
            f"spirv compiled: {s.spirv_compiles}]>"
        )

    # -- SPIR-V ----------------------------------------------------------------------------

    def spirv_key(self, shader: str, options: ShaderOptions) -> SpirvKey:
        source = self.registry.get(shader)
        return SpirvKey(shader, options.bits, source.source_hash, self._macro_hash)

    def _builtin_spirv(self, shader: str, options: ShaderOptions) -> tuple[bytes, ShaderInfo]:
        """SPIR-V and reflection for a builtin shader: cache hit, shared compile, or compile."""
        key = self.spirv_key(shader, options)

        def lookup() -> tuple[bytes, ShaderInfo] | None:
            spirv = self._spirv.get(key)
            if spirv is None:
                return None
            info = self._spirv_info.get(key)
            if info is None:  # adopted from a file: checked once, before its first use
                checked = self._check_adopted(key, spirv)
                if isinstance(checked, str):
                    return None
                info = checked
            self._stats["spirv_hits"] += 1
            return spirv, info

        def build() -> tuple[bytes, ShaderInfo]:
            if self.must_hit:
                raise CacheMissError(
                    f"must-hit: shader {shader!r} (option bits {options.bits}) is not in the "
                    "cache and would be compiled"
                )
            source = self.registry.get(shader)
            text = splice_prelude(source.source, option_prelude(options))
            start = time.perf_counter()
            spirv = compile_glsl(
                text, f"{shader}.comp", defines=self._macros, target_env=TargetEnv.VULKAN_1_1
            )
            seconds = time.perf_counter() - start
            info = reflect_spirv(spirv)
            with self._lock:
                self._spirv[key] = spirv
                self._spirv_info[key] = info
                self._spirv_compiled[key] = spirv
                self.generation += 1
                self._stats["spirv_compiles"] += 1
                self._stats["glsl_seconds"] += seconds
            return spirv, info

        with self._lock:
            found = lookup()
        if found is not None:
            return found

        def locked_lookup() -> tuple[bytes, ShaderInfo] | None:
            with self._lock:
                return lookup()

        # Compile inline on this worker thread; concurrent workers wanting the same key wait.
        future, role = self._spirv_flight.join_or_start(key, locked_lookup)
        if role is Role.MINE:
            self._spirv_flight.produce(key, future, build)
        return future.result()

    def _check_adopted(self, key: SpirvKey, spirv: bytes) -> ShaderInfo | str:
        """Reflect an adopted entry and check it against its shader's declared interface.

        Returns its ShaderInfo, or why it was dropped (the caller then compiles). Holds _lock.
        """
        try:
            info = reflect_spirv(spirv)
        except SpirvError as exc:
            problem = str(exc)
        else:
            declared = declared_interface(self.registry.get(key.shader).source)
            mismatch = interface_mismatch(info, declared)
            if mismatch is None:
                self._spirv_info[key] = info
                return info
            problem = f"not the shader its key names: {mismatch}"
        self._drop_spirv_locked(key, spirv, problem)
        return problem

    def _drop_spirv_locked(self, key: SpirvKey, spirv: bytes, reason: str) -> None:
        """Forget a bad cached body, so nothing uses or saves it again. Holds ``_lock``."""
        self._rejected_spirv.add((key, spirv))
        if self._spirv.get(key) != spirv:
            return  # another thread already dropped it (and maybe compiled a good one)
        del self._spirv[key]
        self._spirv_info.pop(key, None)
        self._stats["spirv_rejected"] += 1
        self.generation += 1  # a save now writes the file without it
        log.warning(
            "cached SPIR-V of shader %r [option bits 0x%x] rejected, compiling it from source: %s",
            key.shader,
            key.option_bits,
            reason,
        )

    def check_spirv_entries(self) -> list[str]:
        """Check every adopted entry not used yet, as its first use would; drop the bad ones.

        Returns one line per dropped entry (``asyncvk cache verify`` reports them).
        """
        problems = []
        with self._lock:
            for key, spirv in list(self._spirv.items()):
                if key in self._spirv_info or key.shader not in self.registry:
                    continue
                checked = self._check_adopted(key, spirv)
                if isinstance(checked, str):
                    problems.append(
                        f"SPIR-V of {key.shader!r} [option bits 0x{key.option_bits:x}]: {checked}"
                    )
        return problems

    # -- pipelines ---------------------------------------------------------------------------

    def _log_build(
        self, artifact: PipelineArtifact, requested: float, started: float, spirv_seconds: float
    ) -> None:
        record = BuildRecord(
            artifact.name,
            requested,
            started,
            time.perf_counter(),
            spirv_seconds,
            artifact.create_seconds,
            artifact.driver_cache_hit,
        )
        with self._lock:
            self._builds.append(record)

    def _finish(self, digest: bytes | None, artifact: PipelineArtifact) -> PipelineArtifact:
        cold = artifact.driver_cache_hit is False and self.driver_blob_loaded
        with self._lock:
            if self.closed:
                artifact.destroy()
                raise RuntimeError("PipelineCache was closed while a pipeline was being built")
            if self.must_hit and cold:
                # Not kept: a retry must fail the same way, not be served this cold pipeline.
                artifact.destroy()
                raise CacheMissError(
                    f"must-hit: the driver compiled a {artifact.name!r} pipeline cold although "
                    "a driver cache was loaded"
                )
            if digest is None:
                self._owned_uncached.append(artifact)
            else:
                self._entries[digest] = artifact
            self._stats["pipelines_created"] += 1
            self._stats["create_seconds"] += artifact.create_seconds
            if artifact.driver_cache_hit is True:
                self._stats["driver_cache_hits"] += 1
            elif artifact.driver_cache_hit is False:
                self._stats["driver_cache_misses"] += 1
            self.generation += 1
        return artifact

    def _request(
        self,
        digest: bytes,
        build: Callable[[], PipelineArtifact],
    ) -> Future[PipelineArtifact]:
        if self.closed:
            raise RuntimeError("PipelineCache is closed")
        self._count("requests")
        if self.broken:
            # No in-memory reuse on drivers that cannot share pipelines; still owned by us.
            future: Future[PipelineArtifact] = Future()

            def run() -> None:
                try:
                    future.set_result(self._finish(None, build()))
                except BaseException as exc:
                    self._count("failures")
                    future.set_exception(exc)

            self._pool.submit(run)
            return future

        def lookup() -> PipelineArtifact | None:
            with self._lock:
                found = self._entries.get(digest)
                if found is not None:
                    self._stats["live_hits"] += 1
                return found

        def build_and_store() -> PipelineArtifact:
            try:
                return self._finish(digest, build())
            except BaseException:
                self._count("failures")
                raise

        future, role = self._pipelines.join_or_start(digest, lookup)
        if role is Role.JOINED:
            self._count("inflight_joins")
        elif role is Role.MINE:
            self._pool.submit(self._pipelines.produce, digest, future, build_and_store)
        return future

    # -- the request API -----------------------------------------------------------------------

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
        return {spec: self._start(spec) for spec in distinct}

    async def get_many(self, specs: Iterable[PipelineSpec]) -> dict[PipelineSpec, PipelineArtifact]:
        """The pipeline of every spec; cancelling this waiter never cancels a shared build."""
        futures = self.request_many(specs)
        done = {}
        for spec, future in futures.items():
            done[spec] = await await_shared(future)
        return done

    def _start(self, spec: PipelineSpec) -> Future[PipelineArtifact]:
        if spec.spirv is not None:
            return self._start_spirv(spec, spec.spirv)
        return self._start_builtin(spec)

    def _start_builtin(self, spec: PipelineSpec) -> Future[PipelineArtifact]:
        """A builtin-shader pipeline; ``baked_push`` (a ``<name>@shapes`` variant) gives the
        values of its push-constant specialization ids, each distinct value its own pipeline."""
        shader, specs, local_size = spec.shader, spec.specializations, spec.local_size
        options = spec.options.supported_on(self.device.info)
        subgroup_size, baked = spec.subgroup_size, spec.baked_push
        digest = builtin_digest(shader, options.bits, local_size, subgroup_size, specs, baked)
        requested = time.perf_counter()

        def create(
            spirv: bytes, info: ShaderInfo, vk_cache: DriverPipelineCache | None
        ) -> PipelineArtifact:
            return create_pipeline(
                self.device,
                spirv,
                info,
                specs,
                local_size,
                subgroup_size=subgroup_size,
                pipeline_cache=vk_cache,
                name=shader,
                baked_push=baked,
            )

        def build() -> PipelineArtifact:
            started = time.perf_counter()
            spirv, info = self._builtin_spirv(shader, options)
            spirv_done = time.perf_counter()
            artifact = self._create_or_rebuild(shader, options, spirv, info, create)
            self._log_build(artifact, requested, started, spirv_done - started)
            return artifact

        return self._request(digest, build)

    def _start_spirv(self, spec: PipelineSpec, spirv: bytes) -> Future[PipelineArtifact]:
        """A pipeline from raw SPIR-V (never stored in files)."""
        specs, local_size, subgroup_size = spec.specializations, spec.local_size, spec.subgroup_size
        digest = spirv_digest(spirv, local_size, subgroup_size, specs)
        requested = time.perf_counter()

        def build() -> PipelineArtifact:
            started = time.perf_counter()
            info = reflect_spirv(spirv)
            artifact = create_pipeline(
                self.device,
                spirv,
                info,
                specs,
                local_size,
                subgroup_size=subgroup_size,
                pipeline_cache=self.vk_cache,
                name=spec.shader,
            )
            self._log_build(artifact, requested, started, 0.0)
            return artifact

        return self._request(digest, build)

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

    # -- SPIR-V entries for the file layer ----------------------------------------------------

    def spirv_entries(self) -> dict[SpirvKey, bytes]:
        with self._lock:
            return dict(self._spirv)

    def add_spirv_entries(self, entries: dict[SpirvKey, bytes]) -> int:
        """Adopt SPIR-V entries loaded from a file; only those for this device's macros."""
        added = 0
        with self._lock:
            for key, spirv in split_by_macros(entries, self._macro_hash)[0].items():
                if key in self._spirv:
                    continue
                if (key, spirv) in self._rejected_spirv:
                    continue  # dropped as bad in this process: the file still holds it
                self._spirv[key] = spirv
                added += 1
        return added

    @property
    def device_macro_hash(self) -> int:
        return self._macro_hash

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
        """Wait for running builds, drop every pipeline (as :meth:`clear`) and release the
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
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    async def __aenter__(self) -> PipelineCache:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> PipelineCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def await_shared(future: Future[_V]) -> _V:
    """Await a shared build; cancelling this waiter leaves the build running for the others.

    The inner future's outcome is always retrieved, so a build that fails after its waiter was
    cancelled is not logged as "exception was never retrieved".
    """
    wrapped = asyncio.wrap_future(future)
    wrapped.add_done_callback(_retrieve)
    return await asyncio.shield(wrapped)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
