"""The pipeline cache's state and counters, and its concurrency model.

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

import logging
import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..gpu._device import VulkanDevice, get_gpu_device
from ..gpu._driver_cache import DriverPipelineCache
from ..gpu._pipeline import PipelineArtifact
from ..shader._options import device_macros, macro_hash
from ..shader._reflect import ShaderInfo
from ..shader._registry import ShaderRegistry, builtin_shaders
from ._file_format import CacheLoadResult
from ._keys import SpirvKey
from ._single_flight import SingleFlight
from ._statistics import BuildRecord, CacheStatistics

log = logging.getLogger("asyncvk.cache")


class CacheCore:
    """A pipeline cache's state and counters; the layers above add SPIR-V entries, the driver
    blob, requests, and files (``PipelineCache`` is the whole).

    Arguments:
        device: the VulkanDevice (default: the default GPU).
        max_workers: threads that compile GLSL and create pipelines (default: CPU count).
        read_only: never write a cache file (``save_cache`` to a path does nothing).
        must_hit: raise CacheMissError instead of compiling GLSL cold.
        packaged_spirv: take a shader's SPIR-V from the package's folder, built at install,
            before compiling it (``shader/_packaged``; ``ASYNCVK_PACKAGED_SPIRV=0`` turns it off
            for the whole process).
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
            f"<{type(self).__name__} [entries: {s.entries}, in-flight: {s.in_flight} | "
            f"hits: {s.live_hits}, created: {s.pipelines_created}, "
            f"spirv compiled: {s.spirv_compiles}]>"
        )
