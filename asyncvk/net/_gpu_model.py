"""GpuModel: everything one loaded model holds on one device, built and released as one unit.

``GpuModel.load`` binds each GPU layer of a Graph to the device, asks the PipelineCache for
every pipeline at once (shape-baked ones too, with ``Option.use_shape_hints``) and uploads the
weights while they build, so a cold start costs the slowest pipeline rather than the sum. The
model holds each pipeline it got, so ``cache.clear()`` cannot destroy one its plans record
with; it owns its weight buffers and its pool of plans. ``release()`` frees all of it.

A Net that loads again retires its GpuModel: extractions still running finish on it, then it is
released (:meth:`GpuModel.retire`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .._threads import outlive, run_sync
from ..cache._pipeline_cache import PipelineCache, await_shared
from ..cache._spec import PipelineSpec
from ..gpu._device import VulkanDevice
from ..gpu._pipeline import PipelineArtifact
from ..layers._gpu_api import GpuTarget
from ._bound_node import BoundNode
from ._compile_at_dispatch import compile_at_dispatch
from ._graph import Graph
from ._host_transfers import cast_specs
from ._lent_plan import LentPlan
from ._option import Option
from ._plan import Plan, PlanRequest
from ._plan_pool import PlanPool
from ._shape_hints import shape_baked_specs

log = logging.getLogger("asyncvk.net")

Progress = Callable[[int, int], None]
#: Called with every spec before any is requested: fills the cache from a remote tier.
Prefetch = Callable[[Sequence[PipelineSpec]], Awaitable[None]]
#: featmask bit 4: the layer runs on the CPU (ncnn's ``no_vulkan``)
_FEATMASK_NO_VULKAN = 1 << 4
#: A pipeline wanted: the node, its key (a name, or (name, push bytes) when shape-baked), spec.
_Wanted = tuple[BoundNode, str | tuple[str, bytes], PipelineSpec]
_Started = dict[PipelineSpec, Future[PipelineArtifact]]  # the builds a request started


@dataclass(frozen=True)
class GpuLoadTimes:
    """What building a GpuModel took: pipelines (all awaited), weights (uploaded) and counts."""

    pipelines_s: float = 0.0
    upload_s: float = 0.0
    pipelines_requested: int = 0
    shape_baked_pipelines: int = 0


class GpuModel:
    """``graph`` on ``device``: bound layers, held pipelines, weight buffers and plans."""

    def __init__(
        self,
        graph: Graph,
        device: VulkanDevice,
        target: GpuTarget,
        *,
        storage_fp16: bool,
        opt: Option,
    ) -> None:
        self.graph = graph
        self.device = device
        self.target = target
        #: Blobs are stored as float16 (else float32).
        self.storage_fp16 = storage_fp16
        #: node index -> its GPU half; nodes that run on the CPU are absent.
        self.bound: dict[int, BoundNode] = {}
        self.plans = PlanPool(
            self._make_plan,
            max_per_shape=opt.max_plans_per_shape,
            min_idle=opt.idle_plans_per_shape,
            min_idle_batched=opt.idle_batch_plans,
            idle_seconds=opt.plan_idle_seconds,
            max_waiting=opt.max_waiting_per_shape,
            version=lambda: self.pipelines_version,
            on_release=device.allocator.free_empty_blocks,
        )
        #: fp16 storage: a plan's inputs converted ("to_storage") and outputs ("to_f32") on the GPU
        self.io_casts: dict[str, PipelineArtifact] = {}
        #: Command buffers recorded by this model's plans (a replay records none).
        self.commands_recorded = 0
        self.load_times = GpuLoadTimes()
        self._held: list[PipelineArtifact] = []
        #: pipelines adopted since load; a plan recorded at an older count is re-recorded
        self.pipelines_version = 0
        #: the background builds (layers' ``background_pipelines``), adopted as they finish
        self.background: asyncio.Future[None] | None = None
        #: set once an extraction has ended or someone awaits the background builds: where the
        #: driver compiles a pipeline at its first dispatch (llvmpipe, on its one queue), the
        #: background pipelines are dispatched (compiled) only then, never before a first output
        self._queue_free = asyncio.Event()
        self._released = False
        self._recording = threading.Condition()
        self._recordings = 0  # plans being recorded on worker threads
        self._users = 0
        self._unused: asyncio.Event | None = None

    # -- building ----------------------------------------------------------------------------

    @classmethod
    async def load(
        cls,
        graph: Graph,
        cache: PipelineCache,
        opt: Option,
        *,
        progress: Progress | None = None,
        prefetch: Prefetch | None = None,
    ) -> GpuModel:
        """Bind, request every pipeline, upload weights meanwhile; released again on failure.

        ``prefetch`` (the remote cache tier) sees every spec before the first is requested.
        """
        device = cache.device
        info = device.info  # with the load's own shader choices, if it gives any
        if opt.shader_choices is not None:
            info = dataclasses.replace(info, choices=opt.shader_choices)
        options = opt.shader_options()
        model = cls(
            graph,
            device,
            GpuTarget(options.supported_on(info), info),
            storage_fp16=opt.use_fp16_storage and info.support_fp16_storage,
            opt=opt,
        )
        model._bind()
        wanted: list[_Wanted] = [
            (bound, key, dataclasses.replace(spec, options=options))
            for bound in model.bound.values()
            for key, spec in bound.specs.items()
        ]
        baked: list[_Wanted] = []
        if opt.use_shape_hints:
            requests = shape_baked_specs(
                graph, model.bound, info, cache.registry.shape_variant, options
            )
            baked = [(model.bound[i], key, spec) for i, key, spec in requests]
        casts = cast_specs(model.device.info, options) if model.storage_fp16 else {}
        if prefetch is not None:
            await prefetch([spec for _, _, spec in wanted + baked] + list(casts.values()))
        # background pipelines are requested behind the load's own (the pool takes requests in
        # order), so that their compiles never hold a compile thread the load waits for; _adopt
        # waits on these builds, never asks again (a CPU device's requests wait, in _adopt)
        now: list[_Wanted] = list(baked)
        later: list[_Wanted] = []
        for w in wanted:
            (later if w[1] in w[0].background else now).append(w)
        behind = [] if info.is_cpu else [spec for _, _, spec in later]
        started = cache.request_many([spec for _, _, spec in now] + list(casts.values()) + behind)
        try:
            await model._build([(b, key, started[spec]) for b, key, spec in now], progress)
            for direction, spec in casts.items():
                artifact = await await_shared(started[spec])
                model._held.append(artifact.acquire())
                model.io_casts[direction] = artifact
        except BaseException:
            model.release()
            raise
        model.background = asyncio.ensure_future(model._adopt(cache, later, started))
        model.load_times = dataclasses.replace(
            model.load_times,
            pipelines_requested=len(now) + len(later),
            shape_baked_pipelines=len(baked),
        )
        return model

    def _bind(self) -> None:
        """Pair each GPU-capable layer with the device (its params checked for the GPU too)."""
        for node in self.graph.nodes:
            if node.layer.featmask & _FEATMASK_NO_VULKAN:
                continue
            if not type(node.layer).gpu:
                continue
            try:
                self.bound[node.index] = BoundNode(node, self.target)
            except Exception as exc:  # a GPU layer reads the params too: same rule
                raise self.graph.layer_error(node, exc) from exc

    async def _build(
        self,
        futures: list[tuple[BoundNode, str | tuple[str, bytes], Future[PipelineArtifact]]],
        progress: Progress | None,
    ) -> None:
        """Await the pipelines (reporting nodes done) while the weights upload on a thread."""
        t0 = time.perf_counter()
        upload = asyncio.ensure_future(run_sync(self._upload_weights))
        try:
            pending: dict[int, int] = {}
            for bound, _key, _fut in futures:
                pending[bound.node.index] = pending.get(bound.node.index, 0) + 1
            total = len(self.graph.nodes)
            done = total - len(pending)
            if progress:
                progress(done, total)
            built: dict[Future[PipelineArtifact], PipelineArtifact] = {}
            for bound, key, fut in futures:
                artifact = built.get(fut)
                if artifact is None:
                    artifact = built[fut] = await await_shared(fut)
                    self._held.append(artifact.acquire())  # cache.clear() safe
                bound.attach(key, artifact)
                pending[bound.node.index] -= 1
                if pending[bound.node.index] == 0:
                    done += 1
                    if progress:
                        progress(done, total)
            pipelines_s = time.perf_counter() - t0
            await upload
        except BaseException:
            # the builds still running go on, owned by the cache; nobody awaits them
            if not upload.done():
                upload.cancel()
            await outlive(upload)
            raise
        self.load_times = GpuLoadTimes(pipelines_s, time.perf_counter() - t0)

    async def _adopt(self, cache: PipelineCache, wanted: list[_Wanted], started: _Started) -> None:
        """Build the background pipelines and hand each to its node as it is done; one that
        fails to build is left out (its layer records the pipelines it already has). On CPU
        devices, whose driver compiles at a pipeline's first dispatch, they are requested after
        the first extraction (see _queue_free) and handed over together once dispatched."""
        if not wanted:
            return
        compiles_at_dispatch = self.device.info.is_cpu
        if compiles_at_dispatch:  # nor do their SPIR-V compiles take a core from a first output
            await self._queue_free.wait()
            started = cache.request_many(spec for _, _, spec in wanted)
        # while they compile: the weights only they read (Winograd's), before any is handed over
        nodes = {bound.node.index: bound for bound, _, _ in wanted}.values()
        await run_sync(self._upload, nodes, BoundNode.background_weights)
        users: dict[PipelineSpec, list[tuple[BoundNode, str | tuple[str, bytes]]]] = {}
        for bound, key, spec in wanted:
            users.setdefault(spec, []).append((bound, key))
        # adopted as each is built, not in the order asked: one slow compile holds back none
        waits = {asyncio.ensure_future(await_shared(started[spec])): spec for spec in users}
        pending = set(waits)
        built: list[tuple[BoundNode, str | tuple[str, bytes], PipelineArtifact]] = []
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                attached = False
                for task in done:
                    spec = waits[task]
                    if task.exception() is not None:
                        log.info("background pipeline %s not built: %s", spec, task.exception())
                        continue
                    for bound, key in users[spec]:
                        self._held.append(task.result().acquire())
                        if compiles_at_dispatch:
                            built.append((bound, key, task.result()))
                        else:
                            bound.attach(key, task.result())
                            attached = True
                if attached:  # those built together, one new version
                    self._new_version(waits[t].shader for t in done if not t.exception())
        finally:
            for task in pending:
                task.cancel()  # the builds go on, owned by the cache
        if built:
            await compile_at_dispatch(self.device, {id(a): a for _, _, a in built}.values())
            for bound, key, artifact in built:
                bound.attach(key, artifact)
            self._new_version(a.name for _, _, a in built)

    def _new_version(self, adopted: Iterable[str]) -> None:
        """Pipelines were attached: plans recorded before are old (renewed off the request path)."""
        self.pipelines_version += 1
        log.debug("pipelines version %d: %s", self.pipelines_version, ", ".join(sorted(adopted)))
        self.plans.renew()

    def build_background_now(self) -> None:
        """Someone waits for the background pipelines: on CPU devices they need not wait for
        a first extraction to end."""
        self._queue_free.set()

    async def settled(self, *, now: bool = True) -> None:
        """Return once the background builds have ended and the plans have been recorded again
        with what they adopted (never raises their failure).

        ``now``: the caller waits for them, so on CPU devices they need not wait for a first
        extraction to end (False: they keep their turn)."""
        if now:
            self.build_background_now()
        if self.background is not None and not self.background.done():
            await asyncio.wait([self.background])
        await self.plans.renewed()  # the plans recorded again with what they adopted

    def _upload_weights(self) -> None:
        self._upload(self.bound.values(), BoundNode.gpu_weights)

    def _upload(
        self, bounds: Iterable[BoundNode], arrays: Callable[[BoundNode], dict[str, np.ndarray]]
    ) -> None:
        """Each node's ``arrays`` (its weights, or its background weights, made and uploaded
        before its background pipelines are handed over: a plan that records them reads
        these), in the storage type, beside any it has."""
        dtype = np.float16 if self.storage_fp16 else np.float32
        for bound in bounds:
            if self._released:  # released while the builds went on: nothing to hand over
                return
            try:
                weights = arrays(bound)
            except Exception as exc:
                raise self.graph.layer_error(bound.node, exc) from exc
            for name, array in weights.items():
                buffer = self.device.upload_sync(np.ascontiguousarray(array, dtype=dtype))
                if self._released:  # released meanwhile: its weights are already given back
                    buffer.release()
                    return
                bound.weights[name] = buffer

    def _make_plan(self, request: PlanRequest) -> Plan:
        """Record a plan on a worker thread; :meth:`release` waits for those under way."""
        with self._recording:
            if self._released:
                raise RuntimeError("the model was released while a plan was to be recorded")
            self._recordings += 1
        plan = None
        try:
            plan = Plan(self.graph, self, request)
            return plan
        finally:
            with self._recording:  # renewals and request-path builds count on threads
                self._recordings -= 1
                self._recording.notify_all()
                self.commands_recorded += plan.commands_recorded if plan else 0

    # -- use and release ---------------------------------------------------------------------

    @contextmanager
    def in_use(self) -> Iterator[None]:
        """An extraction runs on this model meanwhile: :meth:`retire` waits for it."""
        self._users += 1
        try:
            yield
        finally:
            self.use_ends()

    def use_begins(self) -> None:
        self._users += 1

    def use_ends(self) -> None:
        self._users -= 1
        self._queue_free.set()
        if self._users == 0 and self._unused is not None:
            self._unused.set()

    def lent_plan(self, request: PlanRequest) -> LentPlan:
        """A plan for ``request``, the extraction's alone until the ``async with`` block ends
        (then it goes back to the pool), with the model in use meanwhile."""
        return LentPlan(self, request)

    async def retire(self) -> None:
        """Wait until no extraction uses this model, then release it."""
        while self._users:
            self._unused = asyncio.Event()
            await self._unused.wait()
        await self.plans.renewed()
        self.release()

    def release(self) -> None:
        """Free plans and weight buffers and drop the pipeline holds. Idempotent."""
        with self._recording:  # a plan being recorded reads the weights and pipelines
            self._released = True
            self._recording.wait_for(lambda: self._recordings == 0)
        if self.background is not None:
            self.background.cancel()  # the builds go on, owned by the cache
        self.plans.release()
        for bound in self.bound.values():
            for buf in bound.weights.values():
                buf.release()
            bound.weights = {}
            bound.pipelines = {}
            bound.baked = {}
        self.io_casts = {}
        held, self._held = self._held, []
        for artifact in held:
            artifact.release()

    def __repr__(self) -> str:
        return (
            f"<GpuModel {self.graph.source!r} on {self.device.info.device_name!r} "
            f"[{len(self.bound)} GPU layers, {len(self.plans.plans)} plan shapes]>"
        )
