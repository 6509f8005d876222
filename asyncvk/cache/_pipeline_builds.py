"""How a requested spec becomes a live pipeline, one step a function.

A builtin shader's request: its digest names the pipeline (:func:`builtin_digest`); on a miss
a pool thread gets the SPIR-V (:class:`SpirvStore`), creates the pipeline with the live driver
cache (:class:`DriverBlobStore`), and falls back from cached content that breaks creation: an
adopted SPIR-V body is dropped and compiled from source, then a loaded driver blob is dropped.
An error that remains is real. Raw SPIR-V brought by a caller is never cached in files.
"""

from __future__ import annotations

import time
from concurrent.futures import Future

from .._errors import CacheMissError, PipelineError, SpirvError, VulkanError
from ..gpu._device import VulkanDevice
from ..gpu._driver_cache import DriverPipelineCache
from ..gpu._pipeline import PipelineArtifact, create_pipeline
from ..shader._interface import declared_interface
from ..shader._options import ShaderOptions
from ..shader._reflect import ShaderInfo, reflect_spirv
from ._counters import CacheCounters
from ._digest import builtin_digest, spirv_digest
from ._driver_blob import DriverBlobStore
from ._live_pipelines import LivePipelines
from ._spec import PipelineSpec
from ._spirv_store import SpirvStore
from ._statistics import BuildRecord

#: What creating a pipeline raises when the SPIR-V or the driver blob it was given is bad.
_CONTENT_ERRORS = (SpirvError, PipelineError, VulkanError)


class PipelineBuilds:
    """Starts the build of a spec in ``live``, from the SPIR-V and driver stores.

    Arguments:
        device: the device pipelines are created on.
        spirv: where a builtin shader's SPIR-V comes from.
        driver: the live VkPipelineCache creations use.
        live: the live pipelines and their pool.
        counters: where builds are logged.
        must_hit: refuse a pipeline the driver compiled cold although a blob was loaded.
    """

    def __init__(
        self,
        device: VulkanDevice,
        spirv: SpirvStore,
        driver: DriverBlobStore,
        live: LivePipelines,
        counters: CacheCounters,
        *,
        must_hit: bool,
    ) -> None:
        self.device = device
        self.spirv = spirv
        self.driver = driver
        self.live = live
        self._counters = counters
        self._must_hit = must_hit

    def start(self, spec: PipelineSpec) -> Future[PipelineArtifact]:
        """The live pipeline of ``spec``, or the (shared) future of its build."""
        requested = time.perf_counter()
        if spec.spirv is not None:
            digest = spirv_digest(
                spec.spirv, spec.local_size, spec.subgroup_size, spec.specializations
            )
            return self.live.request(digest, lambda: self._build_raw(spec, requested))
        options = spec.options.supported_on(self.device.info)
        digest = builtin_digest(
            spec.shader,
            options.bits,
            spec.local_size,
            spec.subgroup_size,
            spec.specializations,
            spec.baked_push,
        )
        return self.live.request(digest, lambda: self._build_builtin(spec, options, requested))

    def _build_builtin(
        self, spec: PipelineSpec, options: ShaderOptions, requested: float
    ) -> PipelineArtifact:
        started = time.perf_counter()
        spirv, info = self.spirv.builtin(spec.shader, options)
        spirv_seconds = time.perf_counter() - started
        artifact = self._create_or_rebuild(spec, options, spirv, info)
        self._log(artifact, requested, started, spirv_seconds)
        self._refuse_cold(artifact)
        return artifact

    def _build_raw(self, spec: PipelineSpec, requested: float) -> PipelineArtifact:
        assert spec.spirv is not None
        started = time.perf_counter()
        info = reflect_spirv(spec.spirv)
        artifact = self._create(spec, spec.spirv, info, self.driver.vk_cache)
        self._log(artifact, requested, started, 0.0)
        self._refuse_cold(artifact)
        return artifact

    def _create_or_rebuild(
        self, spec: PipelineSpec, options: ShaderOptions, spirv: bytes, info: ShaderInfo
    ) -> PipelineArtifact:
        """Create the pipeline, and when that fails on what a cache gave, again without it."""
        try:
            return self._create(spec, spirv, info, self.driver.vk_cache)
        except _CONTENT_ERRORS as exc:
            key = self.spirv.key(spec.shader, options)
            reason = f"creating a pipeline failed: {exc}"
            adopted = self.spirv.drop_adopted(key, spirv, reason)
            if not adopted and not self.driver.loaded:
                raise
            error = exc
        if adopted:
            spirv, info = self.spirv.builtin(spec.shader, options)  # compiled from source now
            try:
                return self._create(spec, spirv, info, self.driver.vk_cache)
            except _CONTENT_ERRORS as exc:
                if not self.driver.loaded:
                    raise
                error = exc
        return self._create_without_driver_blob(spec, spirv, info, error)

    def _create_without_driver_blob(
        self, spec: PipelineSpec, spirv: bytes, info: ShaderInfo, error: Exception
    ) -> PipelineArtifact:
        """Create with no driver cache; if that works, the loaded blob was to blame and the live
        driver cache is replaced by an empty one. If not, ``error`` was real."""
        try:
            artifact = self._create(spec, spirv, info, None)
        except _CONTENT_ERRORS:
            raise error from None
        self.driver.reset(f"{spec.shader!r} failed with it ({error}) and worked without")
        return artifact

    def _create(
        self,
        spec: PipelineSpec,
        spirv: bytes,
        info: ShaderInfo,
        vk_cache: DriverPipelineCache | None,
    ) -> PipelineArtifact:
        builtin = spec.spirv is None
        read_only = (
            declared_interface(self.spirv.registry.get(spec.shader).source).read_only_bindings
            if builtin
            else frozenset()  # SPIR-V a caller brought may write every binding
        )
        return create_pipeline(
            self.device,
            spirv,
            info,
            spec.specializations,
            spec.local_size,
            subgroup_size=spec.subgroup_size,
            pipeline_cache=vk_cache,
            name=spec.shader,
            baked_push=spec.baked_push if builtin else None,
            read_only_bindings=read_only,
        )

    def _refuse_cold(self, artifact: PipelineArtifact) -> None:
        """Under must-hit, a pipeline the driver compiled cold although a blob was loaded is
        destroyed, not kept: a retry must fail the same way, not be served it."""
        if self._must_hit and artifact.driver_cache_hit is False and self.driver.loaded:
            artifact.destroy()
            raise CacheMissError(
                f"must-hit: the driver compiled a {artifact.name!r} pipeline cold although "
                "a driver cache was loaded"
            )

    def _log(
        self, artifact: PipelineArtifact, requested: float, started: float, spirv_seconds: float
    ) -> None:
        self._counters.log_build(
            BuildRecord(
                artifact.name,
                requested,
                started,
                time.perf_counter(),
                spirv_seconds,
                artifact.create_seconds,
                artifact.driver_cache_hit,
            )
        )
