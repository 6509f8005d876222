"""CumulativeSum and ArgMax: ncnn's running sum along an axis (src/layer/cumulativesum.cpp) and
its top-k indexes of a whole blob (argmax.cpp), which pnnx emits for ``torch.cumsum`` and
``torch.argmax``/``topk``.

CumulativeSum runs on the GPU, one invocation per line adding in ncnn's order
(``shaders/cumsum.comp``). ArgMax sorts the whole blob, a host step at a model's end: it runs
its numpy reference on the CPU.
"""

from __future__ import annotations

import math

import numpy as np

from ._base import BlobCount, Layer
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
from ._limits import MAX_EXTENT
from ._registry import register_layer
from ._schema import Param


@register_layer("CumulativeSum")
class CumulativeSum(Layer):
    """0 axis (0; negative from the end): running sums along it. A 1-D blob ignores the axis,
    as ncnn does."""

    axis = Param(0, int, 0)
    gpu = True

    def _axis(self, shape: Shape) -> int:
        dims = len(shape)
        if dims == 1:
            return 0
        axis = self.axis + dims if self.axis < 0 else self.axis
        if not 0 <= axis < dims:
            raise ValueError(f"CumulativeSum: param 0 axis {self.axis} out of range for {shape}")
        return axis

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        self._axis(shape)
        return [shape]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], dtype=np.float32)
        return [np.cumsum(x, axis=self._axis(x.shape), dtype=np.float32)]

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {"cumsum": PipelineSpec("cumsum", (), local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        shape = inputs[0].shape
        axis = self._axis(shape)
        outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
        local = local_size_1d(ctx.info)
        push = pack_push("iii", outer, n, inner)
        groups = groups_1d(outer * inner, local, ctx.info)
        ctx.dispatch("cumsum", [inputs[0], outputs[0]], push, groups)


@register_layer("ArgMax")
class ArgMax(Layer):
    """0 out_max_val (0): also the values; 1 topk (1). The indexes of the ``topk`` largest
    elements of the whole blob, as floats (ties: the larger index first, as ncnn's sort of
    (value, index) pairs); with out_max_val a (2, topk) blob, values over indexes."""

    out_max_val = Param(0, int, 0)
    topk = Param(1, int, 1, limit=MAX_EXTENT)

    def validate(self) -> None:
        if self.topk < 1:
            raise ValueError(f"ArgMax: param 1 topk = {self.topk} must be at least 1")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (1, 1), (1, 1)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        size = math.prod(input_shapes[0])
        if self.topk > size:
            raise ValueError(f"ArgMax: topk {self.topk} is more than the {size} elements")
        return [(2, self.topk) if self.out_max_val else (self.topk,)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], dtype=np.float32).reshape(-1)
        (shape,) = self.output_shapes([inputs[0].shape])
        # descending by value, then by index: the order of greater<pair<float, int>>
        order = np.lexsort((-np.arange(x.size), -x))[: self.topk]
        index = order.astype(np.float32)
        if self.out_max_val:
            return [np.stack([x[order], index]).reshape(shape)]
        return [index.reshape(shape)]
