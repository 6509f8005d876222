"""GatherOnGpu: the GPU path of the one-input copy layers (Slice, Permute, ShuffleChannel,
PixelShuffle here; Crop and Padding in ``borders``, Tile in ``shape_ops``). ``gather.comp``
copies over an index map that the layer's own numpy reference makes, run once per plan on an
input of element indexes, so the GPU path has exactly the reference's semantics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..gpu._memory import Buffer
from ._base import Layer
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    Shape,
    groups_1d,
    local_size_1d,
    pack_push,
)

_F32 = np.float32
_EXACT = 1 << 22  # float32 holds k + 0.5 exactly below 2^23


def _probe(
    layer: Layer, shape: Shape, base: float, others: Sequence[Shape] = ()
) -> list[np.ndarray]:
    """``layer.forward`` of an input holding its own element indexes plus ``base``, in float32
    (exact: every index is below 2^22); ``others``: the shapes of inputs read for their shape
    alone (zeros that take no memory)."""
    n = math.prod(shape)
    x = np.arange(n, dtype=_F32).reshape(shape)
    x += _F32(base)
    shaped = [np.broadcast_to(_F32(0), tuple(s)) for s in others]
    return [np.asarray(o, _F32) for o in layer.forward([x, *shaped])]


class GatherOnGpu(Layer):
    """A one-input copy layer whose GPU path is ``out[i] = in[map[i]]`` (or the fill value
    where ``map[i] < 0``), one ``gather.comp`` dispatch per output."""

    gpu = True

    def fill(self) -> float:
        return 0.0

    def supports(self, input_shapes: list[Shape]) -> bool:
        return len(input_shapes) == 1 and math.prod(input_shapes[0]) < _EXACT

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {"gather": PipelineSpec("gather", (), local_size_1d(target.info))}

    def index_maps(self, shape: Shape, others: Sequence[Shape] = ()) -> list[np.ndarray]:
        """Per output, the input index each element copies (-1: the fill value).

        The probe holds k + 0.5 at index k: an element that is not of that form is the fill.
        One probe tells them apart unless the fill value is itself of that form (a Padding
        value of 2.5); then a second probe, shifted by one, finds the elements that moved.
        A plan builds one map per such layer, on the first inference's path (nanodet_m has
        48), so the one probe counts.
        """
        fill = float(_F32(self.fill()))  # as the probe and the shader hold it
        ambiguous = math.isfinite(fill) and (fill * 2) % 2 == 1
        first = _probe(self, shape, 0.5, others)
        second = _probe(self, shape, 1.5, others) if ambiguous else [None] * len(first)
        maps = []
        for a, b in zip(first, second, strict=True):
            index = np.floor(a)
            moved = (a - index) == 0.5 if b is None else (b - a) == 1.0
            maps.append(np.where(moved, index, -1).astype(np.int32).reshape(-1))
        return maps

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        local = local_size_1d(ctx.info)
        maps = self.index_maps(inputs[0].shape, [i.shape for i in inputs[1:]])
        for out, index in zip(outputs, maps, strict=True):
            n = out.size
            bufs: list[Buffer | GpuBlob] = [inputs[0], out, ctx.constant(index)]
            push = pack_push("if", n, self.fill())
            ctx.dispatch("gather", bufs, push, groups_1d(n, local, ctx.info))
