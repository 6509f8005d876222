"""Per-dispatch GPU time: a plan that writes a timestamp around every dispatch, and its report.

``ProfilingExtractor(net)`` is an Extractor whose plans are its own :class:`ProfiledPlan`: each
of their command buffers writes a GPU timestamp before and after every dispatch, and one at each
end. After every ``extract``, ``profile`` says what each dispatch took on the GPU, labelled by
layer name, layer type, pipeline and shader, with the barrier count and the whole command
buffers' GPU time. A buffer copy a layer records instead of a dispatch (Concat on CPU devices)
is timed too, as pipeline ``copy``, shader ``vkCmdCopyBuffer``, groups ``(0, 0, 0)``. The Net's
own plans never carry a query, so profiling costs nothing when off.

Both stamps of a dispatch wait for all earlier work (``BOTTOM_OF_PIPE``), so the intervals never
overlap and sum to at most the command buffers' GPU time; what is left over is barriers, copies
and idle. Timestamps also serialise dispatches that could have overlapped: profiled runs can be
a little slower than plain ones, which is why ``benchmarks/dispatch_profile.py`` times both.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import ProfilingUnsupportedError
from .._threads import run_sync
from ..gpu._command import CommandRecorder
from ..gpu._memory import Buffer
from ..gpu._timestamps import TimestampQueries
from ._extractor import Extractor
from ._item_batch import ItemBatch
from ._plan import Plan, PlanRequest, _Segment
from ._plan_context import PlanContext

if TYPE_CHECKING:
    from ..gpu._pipeline import PipelineArtifact
    from ._bound_node import BoundNode
    from ._gpu_model import GpuModel
    from ._graph import Graph
    from ._net import Net


@dataclass(frozen=True)
class DispatchTiming:
    """One vkCmdDispatch (or a layer's vkCmdCopyBuffer) of one run: where it came from and its
    GPU time."""

    layer: str
    layer_type: str
    #: the layer's name for the pipeline (``conv``, ``reduce``...)
    pipeline: str
    #: the shader the pipeline was built from
    shader: str
    groups: tuple[int, int, int]
    #: which command buffer of the plan (CPU layers split a plan into several)
    segment: int
    gpu_ms: float


@dataclass(frozen=True)
class DispatchProfile:
    """Every dispatch of one run, in recording order, and the command buffers' totals."""

    dispatches: tuple[DispatchTiming, ...]
    barriers: int
    segments: int
    #: each command buffer from its first command to its last, summed (copies and barriers in)
    command_buffer_ms: float

    @property
    def dispatch_ms(self) -> float:
        """The dispatches' GPU time, summed."""
        return sum(d.gpu_ms for d in self.dispatches)

    def by_layer_type(self) -> dict[str, float]:
        """GPU ms per layer type, largest first."""
        totals: dict[str, float] = {}
        for d in self.dispatches:
            totals[d.layer_type] = totals.get(d.layer_type, 0.0) + d.gpu_ms
        return dict(sorted(totals.items(), key=lambda kv: -kv[1]))

    def top(self, n: int) -> list[DispatchTiming]:
        """The ``n`` slowest dispatches, slowest first."""
        return sorted(self.dispatches, key=lambda d: -d.gpu_ms)[:n]


@dataclass
class _SegmentStamps:
    """The queries one segment's command buffer writes, and what each dispatch's pair means."""

    queries: TimestampQueries
    #: (layer node, pipeline key, shader, groups, begin query, end query) per dispatch
    dispatches: list[tuple[BoundNode, str, str, tuple[int, int, int], int, int]] = field(
        default_factory=list
    )
    first: int = -1
    last: int = -1
    barriers: int = 0


class _TimedContext(PlanContext):
    """A RecordContext that writes a timestamp before and after each dispatch."""

    def __init__(
        self, plan: Plan, node: BoundNode, recorder: CommandRecorder, stamps: _SegmentStamps
    ) -> None:
        super().__init__(plan, node, recorder)
        self._stamps = stamps

    def _dispatch_into(
        self,
        key: str,
        artifact: PipelineArtifact,
        buffers: list[Buffer],
        push: bytes,
        groups: tuple[int, int, int],
    ) -> None:
        queries = self._stamps.queries
        begin = queries.write(self._rec)
        super()._dispatch_into(key, artifact, buffers, push, groups)
        end = queries.write(self._rec)
        shape = (int(groups[0]), int(groups[1]), int(groups[2]))
        self._stamps.dispatches.append((self._node, key, artifact.name, shape, begin, end))

    def _copy_into(self, src: Buffer, dst: Buffer) -> None:
        queries = self._stamps.queries
        begin = queries.write(self._rec)
        super()._copy_into(src, dst)
        end = queries.write(self._rec)
        self._stamps.dispatches.append(
            (self._node, "copy", "vkCmdCopyBuffer", (0, 0, 0), begin, end)
        )


class ProfiledPlan(Plan):
    """A Plan whose command buffers time every dispatch; :attr:`profile` after each run."""

    #: a barrier after every layer, as before plans ordered layers by memory: each dispatch's
    #: timestamps then hold its own work, not an overlapping neighbour's
    barriers_on_hazards = False

    def __init__(self, graph: Graph, gpu_model: GpuModel, request: PlanRequest) -> None:
        self._segment_stamps: list[_SegmentStamps] = []
        self._recording: _SegmentStamps | None = None
        #: The last run's timings (None before the first run).
        self.profile: DispatchProfile | None = None
        super().__init__(graph, gpu_model, request)

    def _record(self, segment: _Segment, host_visible: bool) -> CommandRecorder:
        stamps = _SegmentStamps(TimestampQueries(self.device))
        self._segment_stamps.append(stamps)
        self._recording = stamps
        try:
            return super()._record(segment, host_visible)
        finally:
            self._recording = None

    def _record_into(self, rec: CommandRecorder, segment: _Segment, host_visible: bool) -> None:
        stamps = self._recording
        assert stamps is not None
        stamps.first = stamps.queries.write(rec)
        super()._record_into(rec, segment, host_visible)
        stamps.last = stamps.queries.write(rec)
        stamps.barriers = rec.barrier_count

    def _context(self, node: BoundNode, recorder: CommandRecorder) -> PlanContext:
        assert self._recording is not None
        return _TimedContext(self, node, recorder, self._recording)

    async def run(
        self, inputs: Mapping[int, np.ndarray | ItemBatch], *, written: int | None = None
    ) -> dict[int, np.ndarray]:
        out = await super().run(inputs, written=written)
        self.profile = self._read_profile()  # every segment's fence has signalled
        return out

    def _read_profile(self) -> DispatchProfile:
        """The timings of the run just completed, from every segment's queries (never before
        a run: a query never written would be waited for forever)."""
        timings: list[DispatchTiming] = []
        whole_ms = 0.0
        for index, stamps in enumerate(self._segment_stamps):
            queries = stamps.queries
            ticks = queries.read()
            whole_ms += queries.nanoseconds(ticks[stamps.first], ticks[stamps.last]) / 1e6
            for bound, key, shader, groups, begin, end in stamps.dispatches:
                layer = bound.node.layer
                ms = queries.nanoseconds(ticks[begin], ticks[end]) / 1e6
                timing = DispatchTiming(layer.name, layer.type_name, key, shader, groups, index, ms)
                timings.append(timing)
        return DispatchProfile(
            tuple(timings),
            barriers=sum(s.barriers for s in self._segment_stamps),
            segments=len(self._segment_stamps),
            command_buffer_ms=whole_ms,
        )

    def release(self) -> None:
        super().release()  # the recorders go first: they are what the query pools are used by
        stamps, self._segment_stamps = self._segment_stamps, []
        for s in stamps:
            s.queries.release()


class ProfilingExtractor(Extractor):
    """An Extractor that times every dispatch on the GPU: ``profile`` after each ``extract``.

    It keeps one :class:`ProfiledPlan` per input shapes and output, recorded at the first
    ``extract`` and replayed after, as the Net's own plans are; ``release()`` (or ``async
    with``) frees them. Raises ProfilingUnsupportedError when the model runs on the CPU or the
    device's queue writes no timestamps.
    """

    def __init__(self, net: Net) -> None:
        super().__init__(net)
        self._plans: dict[PlanRequest, ProfiledPlan] = {}
        #: The last extraction's timings.
        self.profile: DispatchProfile | None = None

    async def extract(self, name: str) -> np.ndarray:
        """Run what blob ``name`` needs, timing every dispatch (:attr:`profile`), and return
        it; nothing is kept from one extraction to the next, so each one is timed whole."""
        graph = self._graph()
        target = self._output_index(name)
        gpu_model = self.net.gpu_model
        if gpu_model is None:
            raise ProfilingUnsupportedError(
                "this Net runs on the CPU (no Vulkan device, or use_vulkan_compute=False): "
                "there are no dispatches to profile"
            )
        with gpu_model.in_use():
            shapes = {b: a.shape[1:] for b, a in self._inputs.items()}
            key = PlanRequest.of(shapes, [target], self.batch)
            plan = self._plans.get(key)
            if plan is None:
                await gpu_model.settled()  # profile what the model settles on
                plan = await run_sync(ProfiledPlan, graph, gpu_model, key)
                self._plans[key] = plan
            out = await plan.run(self._inputs)
            self.profile = plan.profile
            return self._unbatched(out[target])

    def release(self) -> None:
        """Free the plans (their arenas, command buffers and query pools). Idempotent."""
        plans, self._plans = self._plans, {}
        for plan in plans.values():
            plan.release()

    async def __aenter__(self) -> ProfilingExtractor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


def profile_summary(profile: DispatchProfile, *, top: int = 15) -> dict[str, Any]:
    """A JSON-ready view: totals, ms and share per layer type, the ``top`` slowest dispatches."""
    busy = profile.dispatch_ms
    return {
        "dispatches": len(profile.dispatches),
        "barriers": profile.barriers,
        "segments": profile.segments,
        "dispatch_gpu_ms": round(busy, 4),
        "command_buffer_gpu_ms": round(profile.command_buffer_ms, 4),
        "by_layer_type": {
            kind: {"ms": round(ms, 4), "percent": round(100 * ms / busy, 1) if busy else 0.0}
            for kind, ms in profile.by_layer_type().items()
        },
        "top": [_timing_dict(d) for d in profile.top(top)],
    }


def _timing_dict(d: DispatchTiming) -> dict[str, Any]:
    return {
        "layer": d.layer,
        "type": d.layer_type,
        "pipeline": d.pipeline,
        "shader": d.shader,
        "groups": list(d.groups),
        "gpu_ms": round(d.gpu_ms, 4),
    }


def median_profile(profiles: Sequence[DispatchProfile]) -> DispatchProfile:
    """One profile from several runs of the same plan: each dispatch's median GPU time (the
    command buffers' time too), so one slow run does not move the picture."""
    if not profiles:
        raise ValueError("median_profile needs at least one profile")
    first = profiles[0]
    if any(len(p.dispatches) != len(first.dispatches) for p in profiles):
        raise ValueError("median_profile: the profiles are of different plans")
    dispatches = tuple(
        DispatchTiming(
            d.layer,
            d.layer_type,
            d.pipeline,
            d.shader,
            d.groups,
            d.segment,
            statistics.median(p.dispatches[i].gpu_ms for p in profiles),
        )
        for i, d in enumerate(first.dispatches)
    )
    whole = statistics.median(p.command_buffer_ms for p in profiles)
    return DispatchProfile(dispatches, first.barriers, first.segments, whole)
