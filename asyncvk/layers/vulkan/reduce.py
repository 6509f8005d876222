"""Softmax and Reduction on the GPU: the blob is viewed as (outer, len, inner) around the
reduced axes, which must be contiguous; other axis sets run on the CPU reference."""

from __future__ import annotations

import math

from .._vulkan import GpuBlob, PipelineSpec, RecordContext, Shape, VulkanLayer, pack_push
from .._vulkan import vulkan_layer as register


def _split(shape: Shape, first: int, last: int) -> tuple[int, int, int]:
    """(outer, len, inner) for reducing axes first..last (inclusive) of ``shape``."""
    return (
        math.prod(shape[:first]),
        math.prod(shape[first : last + 1]),
        math.prod(shape[last + 1 :]),
    )


@register("Softmax")
class Softmax(VulkanLayer):
    def setup(self) -> None:
        self.axis = self.params.get_int(0, 0)

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        return {"softmax": PipelineSpec("softmax", (), self.local_size_1d())}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        shape = inputs[0].shape
        axis = self.axis % len(shape)
        outer, n, inner = _split(shape, axis, axis)
        ctx.dispatch(
            "softmax",
            [inputs[0], outputs[0]],
            pack_push("3i", outer, n, inner),
            self.groups_1d(outer * inner, self.local_size_1d()),
        )


@register("Reduction")
class Reduction(VulkanLayer):
    def setup(self) -> None:
        pd = self.params
        self.operation = pd.get_int(0, 0)
        self.reduce_all = pd.get_int(1, 1)
        self.coeff = pd.get_float(2, 1.0)
        self.axes = pd.get_ints(3, ())
        self.keepdims = pd.get_int(4, 0)

    def _range(self, shape: Shape) -> tuple[int, int] | None:
        dims = len(shape)
        if self.reduce_all or not self.axes:
            return (0, dims - 1)
        axes = sorted({a % dims for a in self.axes})
        if axes != list(range(axes[0], axes[-1] + 1)):
            return None
        return (axes[0], axes[-1])

    def supports(self, input_shapes: list[Shape]) -> bool:  # type: ignore[override]
        return 0 <= self.operation <= 10 and self._range(input_shapes[0]) is not None

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        spec = (self.operation, float(self.coeff))
        return {"reduce": PipelineSpec("reduction", spec, self.local_size_1d())}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        shape = inputs[0].shape
        span = self._range(shape)
        assert span is not None
        outer, n, inner = _split(shape, *span)
        ctx.dispatch(
            "reduce",
            [inputs[0], outputs[0]],
            pack_push("3i", outer, n, inner),
            self.groups_1d(outer * inner, self.local_size_1d()),
        )
