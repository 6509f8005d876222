"""Live pipelines by digest, each built once on a thread pool however many ask for it.

A digest's lookup and, on a miss, the registration of its build happen under one lock with
no blocking work inside; the build runs on the pool, and every waiter (from any event loop or
plain thread) shares its ``concurrent.futures.Future``. A failure reaches every waiter and is
not kept: the next request builds again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ..gpu._pipeline import PipelineArtifact
from ._counters import CacheCounters
from ._single_flight import Role, SingleFlight

#: what makes one pipeline (on a pool thread); it raises when the pipeline must not be kept
Build = Callable[[], PipelineArtifact]


class LivePipelines:
    """The pipelines a cache holds, the builds in flight, and the pool they run on.

    Arguments:
        counters: where requests, hits, joins, creations and failures are counted.
        max_workers: threads that build pipelines.
        shared: False on drivers that cannot share pipelines: every request builds its own,
            which this object still owns and destroys.
    """

    def __init__(self, counters: CacheCounters, *, max_workers: int, shared: bool) -> None:
        self._counters = counters
        self._shared = shared
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="asyncvk-pipeline")
        self._lock = threading.Lock()
        self._entries: dict[bytes, PipelineArtifact] = {}
        self._unshared: list[PipelineArtifact] = []
        self._flight: SingleFlight[PipelineArtifact] = SingleFlight()
        self.closed = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def in_flight(self) -> int:
        return len(self._flight)

    def request(self, digest: bytes, build: Build) -> Future[PipelineArtifact]:
        """The live pipeline of ``digest``, the build already running for it, or a new build
        of it on the pool."""
        if self.closed:
            raise RuntimeError("PipelineCache is closed")
        self._counters.add("requests")
        if not self._shared:
            future: Future[PipelineArtifact] = Future()
            self._pool.submit(self._settle, future, None, build)
            return future
        future, role = self._flight.join_or_start(digest, lambda: self._hit(digest))
        if role is Role.JOINED:
            self._counters.add("inflight_joins")
        elif role is Role.MINE:
            self._pool.submit(
                self._flight.produce, digest, future, lambda: self._keep(digest, build)
            )
        return future

    def _hit(self, digest: bytes) -> PipelineArtifact | None:
        with self._lock:
            found = self._entries.get(digest)
        if found is not None:
            self._counters.add("live_hits")
        return found

    def _settle(self, future: Future[PipelineArtifact], digest: bytes | None, build: Build) -> None:
        try:
            future.set_result(self._keep(digest, build))
        except BaseException as exc:
            future.set_exception(exc)

    def _keep(self, digest: bytes | None, build: Build) -> PipelineArtifact:
        """Run ``build`` and hold what it made (by digest, or unshared)."""
        try:
            artifact = build()
        except BaseException:
            self._counters.add("failures")
            raise
        with self._lock:
            if self.closed:
                artifact.destroy()
                raise RuntimeError("PipelineCache was closed while a pipeline was being built")
            if digest is None:
                self._unshared.append(artifact)
            else:
                self._entries[digest] = artifact
        self._count_created(artifact)
        return artifact

    def _count_created(self, artifact: PipelineArtifact) -> None:
        deltas = {"pipelines_created": 1, "create_seconds": artifact.create_seconds}
        if artifact.driver_cache_hit is True:
            deltas["driver_cache_hits"] = 1
        elif artifact.driver_cache_hit is False:
            deltas["driver_cache_misses"] = 1
        self._counters.add_all(deltas, changed=True)

    def clear(self) -> None:
        """Drop every live pipeline; one a loaded model still holds goes with that model."""
        with self._lock:
            artifacts = [*self._entries.values(), *self._unshared]
            self._entries.clear()
            self._unshared = []
        for artifact in artifacts:
            artifact.destroy()

    def close(self) -> None:
        """Wait for running builds, refuse new ones, and drop every live pipeline."""
        self._pool.shutdown(wait=True)
        with self._lock:
            self.closed = True
        self.clear()
