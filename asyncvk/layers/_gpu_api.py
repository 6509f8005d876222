"""What a layer's GPU side speaks: the device it targets, blobs, the record context.

A layer never creates a Vulkan object. It *declares* the pipelines it needs
(``Layer.pipeline_specs(target)``, which must not depend on blob shapes: shapes travel in push
constants, so one pipeline serves every input size) and the weights to upload
(``Layer.gpu_weights(target)``), and then *records* dispatches through a :class:`RecordContext`
that the runtime provides. Nothing here depends on Layer, so ``_base`` can use these types.

Blobs on the GPU are contiguous float32 buffers in the CPU layout (see ``_base``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..cache._spec import PipelineSpec as PipelineSpec  # declared below the layers
from ..gpu._info import GpuInfo
from ..gpu._memory import Buffer
from ..shader._options import ShaderOptions

Shape = tuple[int, ...]


@dataclass(frozen=True)
class GpuTarget:
    """The device a layer's GPU methods declare for: shader options and the device's facts.

    Passed in, never stored on a layer, so a parsed model stays device-free."""

    options: ShaderOptions
    info: GpuInfo


def local_size_1d(info: GpuInfo) -> tuple[int, int, int]:
    """A 1-D local size that fits the device (64, or less on small devices)."""
    return (min(64, info.limits.max_compute_workgroup_invocations), 1, 1)


def fold_groups(count: int, info: GpuInfo) -> tuple[int, int, int]:
    """``count`` workgroups as rows of at most the device's x limit (maxComputeWorkGroupCount).

    A shader reads its place back with ``workgroup_index_1d()`` / ``global_index_1d()``
    (``shaders/index.h``) and bounds-checks it: the last row may run past ``count``."""
    count = max(1, count)
    max_x = info.limits.max_compute_workgroup_count[0]
    return (min(count, max_x), -(-count // max_x), 1)


def groups_1d(n: int, local: tuple[int, int, int], info: GpuInfo) -> tuple[int, int, int]:
    """Workgroups that cover ``n`` invocations of ``local``, folded to fit ``info``'s device
    (see :func:`fold_groups`: the shader must index with ``global_index_1d()``)."""
    return fold_groups(-(-n // local[0]), info)


def capped_groups(groups: tuple[int, int, int], info: GpuInfo) -> tuple[int, int, int]:
    """A 2-D or 3-D dispatch with each axis capped at the device's limit.

    For shaders that loop over each axis in strides of ``grid_stride()`` (``shaders/index.h``),
    so a capped axis still covers all its work."""
    limit = info.limits.max_compute_workgroup_count
    return (
        max(1, min(groups[0], limit[0])),
        max(1, min(groups[1], limit[1])),
        max(1, min(groups[2], limit[2])),
    )


@dataclass
class GpuBlob:
    """A blob on the device: a float32 buffer and its (CPU-layout) shape."""

    buffer: Buffer
    shape: Shape

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class RecordContext(Protocol):
    """What the runtime gives a layer while recording."""

    info: GpuInfo

    def dispatch(
        self,
        pipeline: str,
        buffers: Sequence[Buffer | GpuBlob],
        push: bytes,
        groups: tuple[int, int, int],
    ) -> None:
        """Dispatch the layer's pipeline ``pipeline`` (a key of its pipeline_specs)."""
        ...

    def weight(self, name: str) -> Buffer:
        """The uploaded weight ``name`` (a key of the layer's weights())."""
        ...

    def has_pipeline(self, key: str) -> bool:
        """Whether pipeline ``key`` is built (a background one may not be yet)."""
        ...

    def spec(self, key: str) -> PipelineSpec:
        """The spec pipeline ``key`` was chosen with at load (its shader and constants). A
        layer reads its layout choices from it, not from module settings that may have
        changed since, so a dispatch always matches its pipeline and weights."""
        ...

    def scratch(self, nbytes: int) -> Buffer:
        """A temporary buffer that lives as long as the recorded plan."""
        ...

    def constant(self, array: np.ndarray) -> Buffer:
        """Upload plan-time data (index maps, per-shape tables); lives as long as the plan."""
        ...

    def barrier(self) -> None:
        """Make earlier writes of this layer visible to its later dispatches."""
        ...

    def copy(self, src: GpuBlob, src_start: int, dst: GpuBlob, dst_start: int, count: int) -> None:
        """Copy ``count`` values from ``src[src_start:]`` to ``dst[dst_start:]`` (flat element
        indexes) with a transfer command, not a dispatch."""
        ...


def blobs_and_weights(
    ctx: RecordContext,
    inputs: Sequence[GpuBlob],
    outputs: Sequence[GpuBlob],
    weights: Sequence[str] = ("weight", "bias"),
) -> list[Buffer | GpuBlob]:
    """The bindings of a one-in, one-out layer with weights: input, output, then each weight."""
    return [inputs[0], outputs[0], *(ctx.weight(name) for name in weights)]


def pack_push(fmt: str, *values: Any) -> bytes:
    """Little-endian push constants (``i`` int, ``f`` float), e.g. ``pack_push("iif", w, h, s)``."""
    return struct.pack("<" + fmt, *values)
