"""Data-movement GPU layers. Crop, Slice, Permute, PixelShuffle, ShuffleChannel and Padding
run ``gather.comp`` over an index map computed once per plan by running the layer's own CPU
reference on index arrays, so the GPU path has exactly the reference's semantics for every
parameter form. Concat copies up to eight inputs in one ``concat.comp`` dispatch (a 950-layer
RRDB has 240 Concats: one dispatch each instead of one per input), and falls back to
``scatter.comp`` with slabs of the output's index grid beyond that. Interp has its own shader."""

from __future__ import annotations

import math

import numpy as np

from ...gpu._memory import Buffer
from .._vulkan import GpuBlob, PipelineSpec, RecordContext, Shape, VulkanLayer, pack_push
from .._vulkan import vulkan_layer as register

_EXACT = 1 << 22  # float32 holds k + 0.5 exactly below 2^23
_CONCAT_MAX = 8  # input bindings of concat.comp


def _probe(layer: object, shapes: list[Shape], base: float) -> list[np.ndarray]:
    inputs = []
    offset = 0
    for shape in shapes:
        n = math.prod(shape)
        inputs.append(
            (np.arange(n, dtype=np.float64) + offset + base).astype(np.float32).reshape(shape)
        )
        offset += n
    return [np.asarray(o, np.float64) for o in layer.forward(inputs)]  # type: ignore[attr-defined]


class _Gather(VulkanLayer):
    """out[i] = in[map[i]] (or the fill value where map[i] < 0), one dispatch per output."""

    def fill(self) -> float:
        return 0.0

    def supports(self, input_shapes: list[Shape]) -> bool:  # type: ignore[override]
        return len(input_shapes) == 1 and math.prod(input_shapes[0]) < _EXACT

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        return {"gather": PipelineSpec("gather", (), self.local_size_1d())}

    def index_maps(self, shape: Shape) -> list[np.ndarray]:
        first = _probe(self.layer, [shape], 0.5)
        second = _probe(self.layer, [shape], 1.5)
        maps = []
        for a, b in zip(first, second, strict=True):
            moved = (b - a) == 1.0
            index = np.where(moved, np.floor(a), -1).astype(np.int32).reshape(-1)
            maps.append(index)
        return maps

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        for out, index in zip(outputs, self.index_maps(inputs[0].shape), strict=True):
            n = out.size
            ctx.dispatch(
                "gather",
                [inputs[0], out, ctx.constant(index)],
                pack_push("if", n, self.fill()),
                self.groups_1d(n, self.local_size_1d()),
            )


for _name in ("Crop", "Slice", "Permute", "PixelShuffle", "ShuffleChannel"):
    register(_name)(type(_name, (_Gather,), {}))


@register("Padding")
class Padding(_Gather):
    def setup(self) -> None:
        self.value = self.params.get_float(5, 0.0)
        self.per_channel = self.params.get_int(6, 0)

    def fill(self) -> float:
        return self.value

    def supports(self, input_shapes: list[Shape]) -> bool:  # type: ignore[override]
        return self.per_channel == 0 and super().supports(input_shapes)


@register("Concat")
class Concat(VulkanLayer):
    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        local = self.local_size_1d()
        if len(self.layer.bottoms) <= _CONCAT_MAX:
            return {"concat": PipelineSpec("concat", (), local)}
        return {"scatter": PipelineSpec("scatter", (), local)}

    def setup(self) -> None:
        self.axis = self.params.get_int(0, 0)

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        out_shape = outputs[0].shape
        axis = self.axis % len(out_shape)
        if len(inputs) <= _CONCAT_MAX:
            # rows = everything before the axis; each input owns a run of columns in every row
            rows = math.prod(out_shape[:axis])
            inner = math.prod(out_shape[axis + 1 :])
            cols = [0]
            for blob in inputs:
                cols.append(cols[-1] + blob.shape[axis] * inner)
            cols += [cols[-1]] * (_CONCAT_MAX + 1 - len(cols))
            bufs: list[Buffer | GpuBlob] = [*inputs]
            bufs += [inputs[0]] * (_CONCAT_MAX - len(inputs)) + [outputs[0]]
            push = pack_push("12i", rows, cols[len(inputs)], len(inputs), *cols)
            ctx.dispatch(
                "concat", bufs, push, self.groups_1d(outputs[0].size, self.local_size_1d())
            )
            return
        # More inputs than bindings: each input fills one slab of the output along the axis; its
        # destination indices are that slab of the output's index grid.
        grid = np.arange(outputs[0].size, dtype=np.int32).reshape(out_shape)
        offset = 0
        for blob in inputs:
            extent = blob.shape[axis]
            slab = [slice(None)] * len(out_shape)
            slab[axis] = slice(offset, offset + extent)
            dst = np.ascontiguousarray(grid[tuple(slab)]).reshape(-1)
            ctx.dispatch(
                "scatter",
                [blob, outputs[0], ctx.constant(dst)],
                pack_push("i", blob.size),
                self.groups_1d(blob.size, self.local_size_1d()),
            )
            offset += extent


@register("Interp")
class Interp(VulkanLayer):
    def setup(self) -> None:
        pd = self.params
        self.resize_type = pd.get_int(0, 0)
        self.height_scale = pd.get_float(1, 1.0)
        self.width_scale = pd.get_float(2, 1.0)
        self.output_height = pd.get_int(3, 0)
        self.output_width = pd.get_int(4, 0)
        self.dynamic = pd.get_int(5, 0)
        self.align_corner = pd.get_int(6, 0)

    def supports(self, input_shapes: list[Shape]) -> bool:  # type: ignore[override]
        return (
            len(input_shapes) == 1
            and len(input_shapes[0]) == 3
            and self.resize_type in (1, 2, 3)
            and not self.dynamic
        )

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        spec = (self.resize_type, self.align_corner)
        return {"interp": PipelineSpec("interp", spec, (8, 8, 1))}

    def _scales(self, w: int, h: int, ow: int, oh: int) -> tuple[float, float]:
        if self.resize_type == 1:
            sx = w / ow if self.output_width else 1.0 / self.width_scale
            sy = h / oh if self.output_height else 1.0 / self.height_scale
            return (sx, sy)
        if self.align_corner:
            return ((w - 1) / (ow - 1) if ow > 1 else 0.0, (h - 1) / (oh - 1) if oh > 1 else 0.0)
        return (w / ow, h / oh)

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, h, w = inputs[0].shape
        _, oh, ow = outputs[0].shape
        sx, sy = self._scales(w, h, ow, oh)
        push = pack_push("5i2f", w, h, c, ow, oh, sx, sy)
        ctx.dispatch(
            "interp", [inputs[0], outputs[0]], push, (math.ceil(ow / 8), math.ceil(oh / 8), c)
        )
