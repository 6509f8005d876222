"""Plan: one input shape's execution, worked out once and replayed (MNN's ``resize``).

Planning does shape inference over the layers the requested output needs, places each layer on
the GPU or its CPU reference, gives every GPU blob an offset in one arena by liveness (a blob's
bytes return to the arena after its last reader), and records one command buffer per run of
consecutive GPU layers. Running a plan only copies inputs in, submits, and copies outputs out.

A plan is used by one extraction at a time (its arena holds that inference's blobs); the Net
keeps a small pool per shape for concurrent extractions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

from .._errors import AsyncVkError
from .._input_limits import check_plan_fits
from ..gpu._command import CommandRecorder
from ..gpu._memory import Buffer, MemoryKind
from ..layers._gpu_api import GpuBlob

if TYPE_CHECKING:
    from ._net import Net, _Node

Shape = tuple[int, ...]


class PlanError(AsyncVkError):
    """The graph cannot run with these inputs (missing input, bad shape)."""


@dataclass
class _Storage:
    """Bytes in the arena shared by a blob and its aliases."""

    nbytes: int
    first: int  # step index of the definition
    last: int  # step index of the last use
    offset: int = -1


@dataclass
class _Segment:
    """A run of GPU layers recorded into one command buffer."""

    nodes: list[_Node]
    upload: list[int] = field(default_factory=list)  # blobs written by the host before it
    download: list[int] = field(default_factory=list)  # blobs read by the host after it
    recorder: CommandRecorder | None = None


@dataclass
class _CpuStep:
    node: _Node


class _Context:
    """The RecordContext a GPU layer records through."""

    def __init__(self, plan: Plan, node: _Node, recorder: CommandRecorder) -> None:
        self.info = plan.net.device.info
        self._plan = plan
        self._node = node
        self._rec = recorder

    def dispatch(
        self,
        pipeline: str,
        buffers: Sequence[Buffer | GpuBlob],
        push: bytes,
        groups: tuple[int, int, int],
    ) -> None:
        bufs = [b.buffer if isinstance(b, GpuBlob) else b for b in buffers]
        baked = self._node.baked.get((pipeline, bytes(push))) if self._node.baked else None
        if baked is not None:  # these exact push constants are the pipeline's constants
            self._rec.dispatch(baked, bufs, b"", groups)
            self._plan.baked_dispatches += 1
            return
        self._rec.dispatch(self._node.pipelines[pipeline], bufs, push, groups)

    def weight(self, name: str) -> Buffer:
        return self._node.weight_buffers[name]

    def scratch(self, nbytes: int) -> Buffer:
        buf = self._plan.net.device.allocate(max(nbytes, 4))
        self._plan.owned.append(buf)
        return buf

    def constant(self, array: np.ndarray) -> Buffer:
        buf = self._plan.net.device.upload_sync(np.ascontiguousarray(array))
        self._plan.owned.append(buf)
        return buf

    def barrier(self) -> None:
        self._rec.barrier()


class Plan:
    """Everything needed to run the graph for one set of input shapes and one output."""

    def __init__(self, net: Net, input_shapes: dict[int, Shape], target: int) -> None:
        self.net = net
        self.target = target
        self.input_shapes = dict(input_shapes)
        self.owned: list[Buffer] = []
        #: Dispatches recorded with a shape-baked pipeline (``Option.use_shape_hints``).
        self.baked_dispatches = 0
        self.arena: Buffer | None = None
        self.peak_bytes = 0
        self.sum_blob_bytes = 0
        self.steps: list[_Segment | _CpuStep] = []
        self.shapes: dict[int, Shape] = {}
        self._views: dict[int, Buffer] = {}
        self._staging: dict[int, Buffer] = {}
        self._readback: dict[int, Buffer] = {}
        self.dtype = np.dtype(np.float16 if net.storage_fp16 else np.float32)
        start = time.perf_counter()
        try:
            self._build()
        except BaseException:
            self.release()
            raise
        #: Shape inference, memory planning and command recording: the first run's extra cost.
        self.build_seconds = time.perf_counter() - start

    # -- planning ----------------------------------------------------------------------------

    def _needed_nodes(self) -> list[_Node]:
        return needed_nodes(self.net, set(self.input_shapes), self.target)

    def _build(self) -> None:
        net = self.net
        nodes = self._needed_nodes()
        shapes: dict[int, Shape] = dict(self.input_shapes)
        on_gpu: dict[int, bool] = {}
        for node in nodes:
            if node.layer.type_name == "Input" and all(t in shapes for t in node.tops):
                continue
            in_shapes = [shapes[b] for b in node.bottoms]
            try:
                out_shapes = node.layer.checked_output_shapes(in_shapes)
            except _SHAPE_ERRORS as exc:
                raise _cannot_take(node, in_shapes, exc) from exc
            for t, s in zip(node.tops, out_shapes, strict=True):
                shapes[t] = tuple(map(int, s))
            on_gpu[node.index] = node.vulkan is not None and node.vulkan.supports(in_shapes)
        self.shapes = shapes
        run = [n for n in nodes if n.index in on_gpu]

        # Steps: consecutive GPU layers form one segment.
        steps: list[_Segment | _CpuStep] = []
        for node in run:
            if on_gpu[node.index]:
                if not steps or not isinstance(steps[-1], _Segment):
                    steps.append(_Segment([]))
                steps[-1].nodes.append(node)  # type: ignore[union-attr]
            else:
                steps.append(_CpuStep(node))
        self.steps = steps

        # Which blobs live on the device, and the storage (alias root) of each.
        root: dict[int, int] = {}
        device_blobs: set[int] = set()
        for node in run:
            if not on_gpu[node.index]:
                continue
            alias = getattr(node.vulkan, "alias", False)
            for b in node.bottoms:
                device_blobs.add(root.get(b, b))
            for i, t in enumerate(node.tops):
                if alias:  # Split: every top is bottom 0; Noop: top i is bottom i
                    b = node.bottoms[min(i, len(node.bottoms) - 1)]
                    root[t] = root.get(b, b)
                else:
                    root[t] = t
                device_blobs.add(root[t])
        self.root = root

        def storage_of(blob: int) -> int:
            return root.get(blob, blob)

        # Host transfers around segments.
        produced_on_gpu = {t for n in run if on_gpu[n.index] for t in n.tops}
        for i, step in enumerate(steps):
            if not isinstance(step, _Segment):
                continue
            inside = {t for n in step.nodes for t in n.tops}
            for n in step.nodes:
                for b in n.bottoms:
                    if b not in produced_on_gpu and storage_of(b) not in step.upload:
                        step.upload.append(storage_of(b))
            later_cpu = {
                b for s in steps[i + 1 :] if isinstance(s, _CpuStep) for b in s.node.bottoms
            }
            step.download = sorted(t for t in inside if t == self.target or t in later_cpu)

        # Liveness per storage, in layer positions: barriers separate every layer, so a blob's
        # bytes can be reused by any layer after its last reader, even inside one segment.
        position = {node.index: p for p, node in enumerate(run)}
        storages: dict[int, _Storage] = {
            b: _Storage(self._nbytes(shapes[b]), first=len(run), last=-1) for b in device_blobs
        }
        for node in run:
            p = position[node.index]
            for b in node.bottoms + node.tops:
                st = storages.get(root.get(b, b))
                if st is not None:
                    if p < st.first:
                        st.first = p
                    if p > st.last:
                        st.last = p
        for step in steps:
            if not isinstance(step, _Segment):
                continue
            seg_start = position[step.nodes[0].index]
            seg_end = position[step.nodes[-1].index]
            for b in step.upload:  # written by the host before the segment starts
                storages[b].first = min(storages[b].first, seg_start)
            for t in step.download:  # read back after the segment ends
                storages[storage_of(t)].last = max(storages[storage_of(t)].last, seg_end)
        target_storage = storages.get(storage_of(self.target))
        if target_storage is not None:
            target_storage.last = len(run)
        self.sum_blob_bytes = sum(st.nbytes for st in storages.values())
        self.peak_bytes = _assign_offsets(list(storages.values()), net.device.allocator.alignment)
        if storages:
            self._check_fits(self.peak_bytes)
            self.arena = net.device.allocate(max(self.peak_bytes, 4))
            for b, st in storages.items():
                self._views[b] = self.arena.sub(st.offset, st.nbytes)

        host_visible = self.arena is not None and self.arena.host_visible
        for step in steps:
            if isinstance(step, _Segment):
                step.recorder = self._record(step, host_visible)

    def _check_fits(self, nbytes: int) -> None:
        info = self.net.device.info
        check_plan_fits(
            nbytes,
            device_heap=info.device_local_heap_bytes,
            unified_memory=info.unified_memory,
            inputs=str({self.net.blob_names[b]: s for b, s in self.input_shapes.items()}),
        )

    def _nbytes(self, shape: Shape) -> int:
        return max(4, math.prod(shape) * self.dtype.itemsize)

    def _record(self, segment: _Segment, host_visible: bool) -> CommandRecorder:
        device = self.net.device
        rec = CommandRecorder(device)
        if not host_visible:
            for b in segment.upload:
                staging = device.allocate(self._views[b].size, MemoryKind.STAGING)
                self.owned.append(staging)
                self._staging[b] = staging
                rec.copy(staging, self._views[b])
            if segment.upload:
                rec.barrier()
        for node in segment.nodes:
            vl = node.vulkan
            assert vl is not None
            if getattr(vl, "alias", False):
                continue
            inputs = [self._blob(b) for b in node.bottoms]
            outputs = [self._blob(t) for t in node.tops]
            vl.record(_Context(self, node, rec), inputs, outputs)
            rec.barrier()
        if not host_visible:
            for t in segment.download:
                view = self._views[self.root.get(t, t)]
                readback = device.allocate(view.size, MemoryKind.READBACK)
                self.owned.append(readback)
                self._readback[t] = readback
                rec.copy(view, readback)
            rec.barrier()
        self.net.commands_recorded += 1
        return rec.finish()

    def _blob(self, blob: int) -> GpuBlob:
        return GpuBlob(self._views[self.root.get(blob, blob)], self.shapes[blob])

    # -- running ------------------------------------------------------------------------------

    def _write(self, storage: int, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array, dtype=self.dtype).reshape(-1).view(np.uint8)
        target = self._staging.get(storage) or self._views[storage]
        target.view()[: data.nbytes] = data.data

    def _read(self, blob: int) -> np.ndarray:
        shape = self.shapes[blob]
        source = self._readback.get(blob) or self._views[self.root.get(blob, blob)]
        n = int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize
        raw = np.frombuffer(source.view()[:n], dtype=self.dtype).reshape(shape)
        return raw.astype(np.float32)

    async def run(self, inputs: dict[int, np.ndarray]) -> np.ndarray:
        """Run once with ``inputs`` (blob id -> array); returns the target as float32."""
        host: dict[int, np.ndarray] = dict(inputs)
        for step in self.steps:
            if isinstance(step, _Segment):
                for storage in step.upload:
                    self._write(storage, host[storage])
                assert step.recorder is not None
                await self.net.device.run(step.recorder)
                for t in step.download:
                    host[t] = self._read(t)
            else:
                node = step.node
                args = [host[b] for b in node.bottoms]
                outs = await anyio.to_thread.run_sync(run_cpu_layer, node, args)
                for t, value in zip(node.tops, outs, strict=True):
                    host[t] = value
        if self.target in host:
            return np.asarray(host[self.target], dtype=np.float32)
        raise PlanError(f"blob {self.net.blob_names[self.target]!r} was not produced")

    def release(self) -> None:
        for step in self.steps:
            if isinstance(step, _Segment) and step.recorder is not None:
                step.recorder.release()
                step.recorder = None
        for buf in self.owned:
            buf.release()
        self.owned.clear()
        if self.arena is not None:
            self.arena.release()
            self.arena = None

    @property
    def gpu_layer_count(self) -> int:
        return sum(len(s.nodes) for s in self.steps if isinstance(s, _Segment))

    @property
    def cpu_layer_count(self) -> int:
        return sum(1 for s in self.steps if isinstance(s, _CpuStep))

    def describe(self) -> dict[str, Any]:
        return {
            "segments": sum(1 for s in self.steps if isinstance(s, _Segment)),
            "gpu_layers": self.gpu_layer_count,
            "cpu_layers": self.cpu_layer_count,
            "peak_blob_bytes": self.peak_bytes,
            "sum_blob_bytes": self.sum_blob_bytes,
            "baked_dispatches": self.baked_dispatches,
        }


#: What a layer's shape rule or numpy forward raises for inputs it cannot take.
_SHAPE_ERRORS = (ValueError, IndexError, KeyError, ArithmeticError)


def _cannot_take(node: _Node, in_shapes: list[Shape], exc: Exception) -> PlanError:
    layer = f"layer {node.layer.name!r} ({node.layer.type_name})"
    return PlanError(f"{layer} cannot take inputs {in_shapes}: {exc}")


def run_cpu_layer(node: _Node, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """A layer's numpy forward, its output shapes checked against the limits first, so a
    blob too large is a PlanError before anything is allocated. Arithmetic is IEEE, as in
    ncnn: an inf or NaN from the weights is a value, not a warning."""
    in_shapes = [tuple(x.shape) for x in inputs]
    try:
        node.layer.checked_output_shapes(in_shapes)
        with np.errstate(all="ignore"):
            return node.layer.forward(inputs)
    except _SHAPE_ERRORS as exc:
        raise _cannot_take(node, in_shapes, exc) from exc


def needed_nodes(net: Net, given: set[int], target: int) -> list[_Node]:
    """The layers ``target`` depends on, in file order; Input layers must have been fed."""
    wanted = {target}
    needed: set[int] = set()
    missing: list[str] = []
    for node in reversed(net.nodes):
        if not any(t in wanted for t in node.tops) or all(t in given for t in node.tops):
            continue
        if node.layer.type_name == "Input":
            missing += [net.blob_names[t] for t in node.tops if t in wanted and t not in given]
            continue
        needed.add(node.index)
        wanted.update(node.bottoms)
    if missing:
        raise PlanError(f"input blob(s) {sorted(missing)} were not set")
    return [n for n in net.nodes if n.index in needed]


def _assign_offsets(storages: list[_Storage], alignment: int) -> int:
    """Greedy first-fit by definition order; returns the arena size (peak bytes)."""
    live: list[_Storage] = []
    peak = 0
    for s in sorted(storages, key=lambda s: (s.first, -s.nbytes)):
        live = [x for x in live if x.last >= s.first]
        size = -(-s.nbytes // alignment) * alignment
        offset = 0
        for x in sorted(live, key=lambda x: x.offset):
            end = x.offset + -(-x.nbytes // alignment) * alignment
            if offset + size <= x.offset:
                break
            offset = max(offset, end)
        s.offset = offset
        live.append(s)
        peak = max(peak, offset + size)
    return peak
