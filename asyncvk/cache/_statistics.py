"""What a pipeline cache counts, and when each build ran: where a cold load goes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CacheStatistics:
    """Counters since the cache was made (ncnn reports none of these)."""

    requests: int = 0
    live_hits: int = 0
    inflight_joins: int = 0
    spirv_compiles: int = 0
    spirv_hits: int = 0
    #: SPIR-V taken from the package's folder (built at install) instead of compiled.
    spirv_packaged: int = 0
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
