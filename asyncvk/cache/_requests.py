"""Pipeline requests: each distinct spec built once on the worker pool, every waiter sharing
its future; a failure reaches every waiter and is not cached."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, TypeVar

from .._errors import CacheMissError
from ..gpu._driver_cache import DriverPipelineCache
from ..gpu._pipeline import PipelineArtifact, create_pipeline
from ..shader._interface import declared_interface
from ..shader._reflect import ShaderInfo, reflect_spirv
from ._digest import builtin_digest, spirv_digest
from ._driver_blob import DriverBlob
from ._single_flight import Role
from ._spec import PipelineSpec
from ._statistics import BuildRecord

_V = TypeVar("_V")


class PipelineRequests(DriverBlob):
    """``request_many``/``get_many``: the cache's one request API."""

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
            return self._create(spec, spirv, info, vk_cache, baked)

        def build() -> PipelineArtifact:
            started = time.perf_counter()
            spirv, info = self._builtin_spirv(shader, options)
            spirv_done = time.perf_counter()
            artifact = self._create_or_rebuild(shader, options, spirv, info, create)
            self._log_build(artifact, requested, started, spirv_done - started)
            return artifact

        return self._request(digest, build)

    def _create(
        self,
        spec: PipelineSpec,
        spirv: bytes,
        info: ShaderInfo,
        vk_cache: DriverPipelineCache | None,
        baked_push: bytes | None,
    ) -> PipelineArtifact:
        return create_pipeline(
            self.device,
            spirv,
            info,
            spec.specializations,
            spec.local_size,
            subgroup_size=spec.subgroup_size,
            pipeline_cache=vk_cache,
            name=spec.shader,
            baked_push=baked_push,
            read_only_bindings=self._read_only_bindings(spec),
        )

    def _read_only_bindings(self, spec: PipelineSpec) -> frozenset[int]:
        """The bindings a builtin shader's source declares ``readonly`` (none for SPIR-V a
        caller brought: every binding of it may be written)."""
        if spec.spirv is not None:
            return frozenset()
        return declared_interface(self.registry.get(spec.shader).source).read_only_bindings

    def _start_spirv(self, spec: PipelineSpec, spirv: bytes) -> Future[PipelineArtifact]:
        """A pipeline from raw SPIR-V (never stored in files)."""
        specs, local_size, subgroup_size = spec.specializations, spec.local_size, spec.subgroup_size
        digest = spirv_digest(spirv, local_size, subgroup_size, specs)
        requested = time.perf_counter()

        def build() -> PipelineArtifact:
            started = time.perf_counter()
            info = reflect_spirv(spirv)
            artifact = self._create(spec, spirv, info, self.vk_cache, None)
            self._log_build(artifact, requested, started, 0.0)
            return artifact

        return self._request(digest, build)


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
