"""What a GPU layer records through while a plan records it: its pipelines (shape-baked ones
where the push constants match), weights, scratch buffers and barriers. A profiling plan
subclasses it to time each dispatch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..gpu._command import CommandRecorder
from ..gpu._device import VulkanDevice
from ..gpu._info import GpuInfo
from ..gpu._memory import Buffer
from ..layers._gpu_api import GpuBlob, PipelineSpec
from ._bound_node import BoundNode

if TYPE_CHECKING:
    from ..gpu._pipeline import PipelineArtifact


class RecordingPlan(Protocol):
    """The Plan a context records for: its device, the buffers it owns and its storage type."""

    device: VulkanDevice
    info: GpuInfo
    owned: list[Buffer]
    dtype: np.dtype[Any]


class PlanContext:
    """The RecordContext a GPU layer records through, for the plan recording it."""

    def __init__(self, plan: RecordingPlan, node: BoundNode, recorder: CommandRecorder) -> None:
        self.info = plan.info
        self._plan = plan
        self._node = node
        self._rec = recorder
        #: dispatches recorded through a shape-baked pipeline (the plan adds them up)
        self.baked_dispatches = 0

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
            self._dispatch_into(pipeline, baked, bufs, b"", groups)
            self.baked_dispatches += 1
            return
        self._dispatch_into(pipeline, self._node.pipelines[pipeline], bufs, push, groups)

    def _dispatch_into(
        self,
        key: str,
        artifact: PipelineArtifact,
        buffers: list[Buffer],
        push: bytes,
        groups: tuple[int, int, int],
    ) -> None:
        """Record one dispatch of the layer's pipeline ``key`` (a profiling plan times it)."""
        self._rec.dispatch(artifact, buffers, push, groups)

    def weight(self, name: str) -> Buffer:
        return self._node.weights[name]

    def has_pipeline(self, key: str) -> bool:
        return key in self._node.pipelines

    def spec(self, key: str) -> PipelineSpec:
        return self._node.specs[key]

    def scratch(self, nbytes: int) -> Buffer:
        buf = self._plan.device.allocate(max(nbytes, 4))
        self._plan.owned.append(buf)
        return buf

    def constant(self, array: np.ndarray) -> Buffer:
        buf = self._plan.device.upload_sync(np.ascontiguousarray(array))
        self._plan.owned.append(buf)
        return buf

    def barrier(self) -> None:
        self._rec.barrier()

    def copy(self, src: GpuBlob, src_start: int, dst: GpuBlob, dst_start: int, count: int) -> None:
        size = self._plan.dtype.itemsize
        source = src.buffer.sub(src_start * size, count * size)
        self._copy_into(source, dst.buffer.sub(dst_start * size, count * size))

    def _copy_into(self, src: Buffer, dst: Buffer) -> None:
        """Record one buffer copy for the layer (a profiling plan times it)."""
        self._rec.copy(src, dst)
