"""Plan: one request's execution, worked out once and replayed (MNN's ``resize``).

Planning does shape inference over the layers the requested blobs need, places each layer on
the GPU or its CPU reference, gives every GPU blob an offset in one arena by liveness (a blob's
bytes return to the arena after its last reader), and records one command buffer per run of
consecutive GPU layers. Running a plan only copies inputs in, submits, and copies outputs out.

A batch of N items is one plan: the arena holds N copies of one item's blobs, and each layer is
recorded N times in a row, one per item, into the same command buffer. The items touch
disjoint memory, so their dispatches of one layer need no barrier between them and the GPU
runs them side by side; one submission serves all N.

A plan is used by one extraction at a time (its arena holds that inference's blobs); its
GpuModel keeps a small pool per request for concurrent extractions. A plan sees the graph and
the GpuModel it records with, never the Net.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from .._errors import InputError
from .._threads import run_sync
from ..gpu._command import CommandRecorder
from ..gpu._memory import Buffer
from ..layers._gpu_api import GpuBlob
from ._bound_node import BoundNode
from ._forward import needed_nodes
from ._graph import Graph, GraphNode
from ._host_transfers import HostTransfers
from ._input_limits import check_plan_fits
from ._item_batch import ItemBatch, stacked
from ._plan_context import PlanContext
from ._plan_memory import assign_offsets, live_ranges
from ._plan_placement import _SHAPE_ERRORS, _cannot_take, place_layers, share_storage
from ._plan_renewal import yields_to_requests
from ._plan_request import PlanRequest
from ._plan_source import PlanSource

Shape = tuple[int, ...]


@dataclass
class _Segment:
    """A run of GPU layers recorded into one command buffer."""

    nodes: list[GraphNode]
    upload: list[int] = field(default_factory=list)  # blobs written by the host before it
    download: list[int] = field(default_factory=list)  # blobs read by the host after it
    recorder: CommandRecorder | None = None


#: A CPU layer whose last run took at most this long runs on the event loop's thread: the hop
#: to a worker and back cost 0.1-0.25 ms on the H100 (``results/fence_poll_h100.json``), and
#: 0.3-0.5 ms for the 1-1.6 ms detection layers of yolov4-tiny and mobilenetv2_yolov3 on an
#: H200 (``results/detection_steps_h200.jsonl``), where a 1 ms bound split their
#: processes into two groups by which side of it their first runs fell. Longer ones go to a
#: worker, so the loop is not held longer. One that runs inline stays inline up to twice the
#: bound, so a layer near it does not switch from run to run.
INLINE_CPU_MAX_S = 0.002


@dataclass
class _CpuStep:
    node: GraphNode
    #: Seconds the layer's last run took (None before one).
    last_run_s: float | None = None
    #: Whether its last run was on the event loop's thread.
    inline: bool = False

    def choose_inline(self, items: int = 1) -> bool:
        """Whether the next run, of ``items`` items, goes on the event loop's thread (see
        INLINE_CPU_MAX_S)."""
        limit = 2 * INLINE_CPU_MAX_S if self.inline else INLINE_CPU_MAX_S
        self.inline = self.last_run_s is not None and self.last_run_s * items <= limit
        return self.inline

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        start = time.perf_counter()
        outs = run_cpu_layer(self.node, inputs)
        self.last_run_s = time.perf_counter() - start
        return outs


class Plan:
    """Everything needed to run the graph for one :class:`PlanRequest`.

    ``gpu_model`` is what ``graph`` was loaded as on a device: its layers' pipelines and
    weights, the device, the storage type; recording counts on it."""

    #: Order layers by the memory they read and write (a barrier only before a layer that
    #: touches what one since the last barrier wrote, or writes what one read), rather than a
    #: barrier after every layer. A profiling plan keeps the barriers, to time each layer alone.
    barriers_on_hazards = True

    def __init__(self, graph: Graph, gpu_model: PlanSource, request: PlanRequest) -> None:
        self.graph = graph
        self.gpu_model = gpu_model
        self.device = gpu_model.device
        #: the device as the model's layers declared for it: what they record with
        self.info = gpu_model.target.info
        self.request = request
        self.targets = request.targets
        self.batch = request.batch
        #: the model's pipelines_version when recorded (``PlanPool`` drops older plans); read
        #: before recording, so one adopted meanwhile is not counted in
        self.pipelines_version = gpu_model.pipelines_version
        self.input_shapes = request.input_shapes
        self.owned: list[Buffer] = []
        #: Dispatches recorded with a shape-baked pipeline (``Option.use_shape_hints``).
        self.baked_dispatches = 0
        #: Command buffers this plan recorded (its GpuModel counts them in when it is made).
        self.commands_recorded = 0
        self.arena: Buffer | None = None
        #: one item's blob bytes at their peak (the arena holds ``batch`` of them)
        self.peak_bytes = 0
        self.sum_blob_bytes = 0
        self.steps: list[_Segment | _CpuStep] = []
        self.shapes: dict[int, Shape] = {}
        #: per item: storage blob -> its bytes in the arena
        self._views: list[dict[int, Buffer]] = [{} for _ in range(request.batch)]
        self.dtype = np.dtype(np.float16 if gpu_model.storage_fp16 else np.float32)
        #: the host's staging and readback buffers (converting fp16 storage on the GPU)
        self.io = HostTransfers(self.device, request.batch, self.dtype, gpu_model.io_casts)
        start = time.perf_counter()
        try:
            self._build()
        except BaseException:
            self.release()
            raise
        #: Shape inference, memory planning and command recording: the first run's extra cost.
        self.build_seconds = time.perf_counter() - start

    # -- planning ----------------------------------------------------------------------------

    def _build(self) -> None:
        nodes = needed_nodes(self.graph, set(self.input_shapes), self.targets)
        bound = self.gpu_model.bound
        self.shapes, on_gpu = place_layers(nodes, self.input_shapes, bound)
        run = [n for n in nodes if n.index in on_gpu]
        self.steps = _group_steps(run, on_gpu)
        #: each aliasing top (Split, Noop) -> the blob whose storage it shares
        self.root, device_blobs = share_storage(run, on_gpu, bound)
        self._plan_transfers(run, on_gpu)
        position = {node.index: p for p, node in enumerate(run)}
        spans = [
            (
                position[step.nodes[0].index],
                position[step.nodes[-1].index],
                step.upload,
                [self.root.get(t, t) for t in step.download],
            )
            for step in self.steps
            if isinstance(step, _Segment)
        ]
        sizes = {b: self._nbytes(self.shapes[b]) for b in device_blobs}
        targets = [self.root.get(t, t) for t in self.targets]
        storages = live_ranges(run, self.root, sizes, spans, targets)
        self.sum_blob_bytes = sum(st.nbytes for st in storages.values())
        alignment = self.device.allocator.alignment
        self.peak_bytes = assign_offsets(list(storages.values()), alignment)
        if storages:
            stride = -(-self.peak_bytes // alignment) * alignment
            self._check_fits(stride * self.batch)
            self.arena = self.device.allocate(max(stride * self.batch, 4))
            for item, views in enumerate(self._views):
                for b, st in storages.items():
                    views[b] = self.arena.sub(item * stride + st.offset, st.nbytes)
        host_visible = self.arena is not None and self.arena.host_visible
        for step in self.steps:
            if isinstance(step, _Segment):
                step.recorder = self._record(step, host_visible)

    def _plan_transfers(self, run: list[GraphNode], on_gpu: dict[int, bool]) -> None:
        """What each segment needs written by the host before it and read back after it."""
        root = self.root
        produced_on_gpu = {t for n in run if on_gpu[n.index] for t in n.tops}
        for i, step in enumerate(self.steps):
            if not isinstance(step, _Segment):
                continue
            inside = {t for n in step.nodes for t in n.tops}
            for n in step.nodes:
                for b in n.bottoms:
                    if b not in produced_on_gpu and root.get(b, b) not in step.upload:
                        step.upload.append(root.get(b, b))
            later_cpu = {
                b for s in self.steps[i + 1 :] if isinstance(s, _CpuStep) for b in s.node.bottoms
            }
            step.download = sorted(t for t in inside if t in self.targets or t in later_cpu)

    def _check_fits(self, nbytes: int) -> None:
        info = self.device.info
        check_plan_fits(
            nbytes,
            device_heap=info.device_local_heap_bytes,
            unified_memory=info.unified_memory,
            inputs=self.describe_inputs(),
        )

    def describe_inputs(self) -> str:
        """The inputs by name and shape, with the batch: for messages."""
        shapes = {self.graph.blob_names[b]: s for b, s in self.input_shapes.items()}
        return f"{shapes} x {self.batch} items" if self.batch > 1 else str(shapes)

    def _nbytes(self, shape: Shape) -> int:
        return max(4, math.prod(shape) * self.dtype.itemsize)

    def _record(self, segment: _Segment, host_visible: bool) -> CommandRecorder:
        rec = CommandRecorder(self.device)
        try:
            self._record_into(rec, segment, host_visible)
        except BaseException:
            rec.release()  # a refused dispatch must not leak the recorder's pools
            raise
        self.commands_recorded += 1
        return rec.finish()

    def _record_into(self, rec: CommandRecorder, segment: _Segment, host_visible: bool) -> None:
        # layers are ordered by the memory they touch, not a barrier after each (a layer's
        # own barriers between its dispatches stay; so do the ones around host transfers)
        rec.barriers_on_hazards = self.barriers_on_hazards
        polite = yields_to_requests()
        if self.io.staged(host_visible):
            for item, views in enumerate(self._views):
                for b in segment.upload:
                    self.io.record_upload(rec, item, b, views[b])
            if segment.upload:
                rec.barrier()
        for node in segment.nodes:
            if polite:
                time.sleep(0)  # the GIL to the event loop's inferences, one layer a turn
            gpu = self.gpu_model.bound[node.index]
            if gpu.alias:
                continue
            for item in range(self.batch):  # one layer for every item, then the next layer
                inputs = [self._blob(item, b) for b in node.bottoms]
                outputs = [self._blob(item, t) for t in node.tops]
                ctx = self._context(gpu, rec)
                gpu.record(ctx, inputs, outputs)
                self.baked_dispatches += ctx.baked_dispatches
                if not self.barriers_on_hazards:
                    rec.barrier()
        copies = self.io.read_back(host_visible)
        if copies:
            if self.io.casts and segment.download:
                rec.barrier()  # the conversions read what the layers wrote last
            for item, views in enumerate(self._views):
                for t in segment.download:
                    view = views[self.root.get(t, t)]
                    self.io.record_download(rec, item, t, view, self.shapes[t])
        if copies or self.barriers_on_hazards:
            rec.barrier()  # the last writes made visible to the host (and to the next run)

    def _context(self, node: BoundNode, recorder: CommandRecorder) -> PlanContext:
        """What ``node``'s layer records through (a profiling plan gives its own)."""
        return PlanContext(self, node, recorder)

    def _blob(self, item: int, blob: int) -> GpuBlob:
        return GpuBlob(self._views[item][self.root.get(blob, blob)], self.shapes[blob])

    # -- running ------------------------------------------------------------------------------

    def _read(self, item: int, blob: int) -> np.ndarray:
        """Item ``item``'s ``blob`` as the host gets it (a view)."""
        view = self._views[item][self.root.get(blob, blob)]
        return self.io.read(item, blob, view, self.shapes[blob])

    async def run(
        self, inputs: Mapping[int, np.ndarray | ItemBatch], *, written: int | None = None
    ) -> dict[int, np.ndarray]:
        """Run once with ``inputs`` (blob id -> array with a leading axis of ``batch`` items);
        returns every target the same way, as float32.

        Only the first ``written`` items (None: all) are written, run on the host and read
        back: the others are padding (see ``_item_batch``), their rows of the results unset."""
        count = self.batch if written is None else written
        hosts: list[dict[int, np.ndarray]] = [
            {b: a[item] for b, a in inputs.items()} for item in range(count)
        ]
        results: dict[int, np.ndarray] = {}
        for step in self.steps:
            if isinstance(step, _Segment):
                self.io.write_all(
                    [
                        (item, storage, host[storage], self._views[item][storage])
                        for item, host in enumerate(hosts)
                        for storage in step.upload
                    ]
                )
                assert step.recorder is not None
                await self.device.run(step.recorder)
                for t in step.download:
                    self._download(t, hosts, results)
            else:
                if step.choose_inline(len(hosts)):
                    _run_items(step, hosts)
                else:
                    await run_sync(_run_items, step, hosts)
        for t in self.targets:
            if t not in results:
                if t not in hosts[0]:
                    raise InputError(f"blob {self.graph.blob_names[t]!r} was not produced")
                results[t] = stacked(hosts, t, self.batch)
        return results

    def _download(
        self, blob: int, hosts: list[dict[int, np.ndarray]], results: dict[int, np.ndarray]
    ) -> None:
        """Read ``blob`` of every item written: a target straight into its float32 result
        (one copy), a blob a CPU layer reads next into each item's host blobs."""
        if blob in self.targets:
            out = results[blob] = np.empty((self.batch, *self.shapes[blob]), np.float32)
            for item, host in enumerate(hosts):
                out[item] = self._read(item, blob)
                host[blob] = out[item]
        else:
            for item, host in enumerate(hosts):
                host[blob] = self._read(item, blob).astype(np.float32)

    def release(self) -> None:
        for step in self.steps:
            if isinstance(step, _Segment) and step.recorder is not None:
                step.recorder.release()
                step.recorder = None
        for buf in self.owned:
            buf.release()
        self.owned.clear()
        self.io.release()
        if self.arena is not None:
            self.arena.release()
            self.arena = None

    @property
    def gpu_layer_count(self) -> int:
        return sum(len(s.nodes) for s in self.steps if isinstance(s, _Segment))

    @property
    def cpu_layer_count(self) -> int:
        return sum(1 for s in self.steps if isinstance(s, _CpuStep))

    def describe(self) -> dict[str, int]:
        return {
            "segments": sum(1 for s in self.steps if isinstance(s, _Segment)),
            "gpu_layers": self.gpu_layer_count,
            "cpu_layers": self.cpu_layer_count,
            "peak_blob_bytes": self.peak_bytes,
            "sum_blob_bytes": self.sum_blob_bytes,
            "baked_dispatches": self.baked_dispatches,
            "batch": self.batch,
        }


def _run_items(step: _CpuStep, hosts: list[dict[int, np.ndarray]]) -> None:
    """A CPU layer over every item's host blobs."""
    node = step.node
    for host in hosts:
        outs = step.run([host[b] for b in node.bottoms])
        for t, value in zip(node.tops, outs, strict=True):
            host[t] = value


def _group_steps(run: list[GraphNode], on_gpu: dict[int, bool]) -> list[_Segment | _CpuStep]:
    """Consecutive GPU layers form one segment; each CPU layer is a step of its own."""
    steps: list[_Segment | _CpuStep] = []
    for node in run:
        if not on_gpu[node.index]:
            steps.append(_CpuStep(node))
        elif steps and isinstance(steps[-1], _Segment):
            steps[-1].nodes.append(node)
        else:
            steps.append(_Segment([node]))
    return steps


def run_cpu_layer(node: GraphNode, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """A layer's numpy forward, its output shapes checked against the limits first, so a
    blob too large is an InputError before anything is allocated. Arithmetic is IEEE, as in
    ncnn: an inf or NaN from the weights is a value, not a warning."""
    in_shapes = [tuple(x.shape) for x in inputs]
    try:
        node.layer.checked_output_shapes(in_shapes)
        with np.errstate(all="ignore"):
            return node.layer.forward(inputs)
    except _SHAPE_ERRORS as exc:
        raise _cannot_take(node, in_shapes, exc) from exc
