"""BinaryOp and Eltwise on the GPU (``binary.comp``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._paramdict import ParamDict
from .._vulkan import (
    GpuBlob,
    PipelineSpec,
    RecordContext,
    Shape,
    VulkanLayer,
    pack_push,
    shape4,
)
from .._vulkan import vulkan_layer as register


@functools.lru_cache(maxsize=1024)
def _strides_by_probe(
    layer_cls: Any, shapes: tuple[Shape, ...], out_shape: Shape
) -> tuple[tuple[int, int, int, int], ...] | None:
    """Element strides of each input over the output's (w, h, d, c), found by running the CPU
    reference of an add on index arrays; None when the map is not affine (or too large).

    Cached per process: the answer depends only on the shapes and the CPU class's broadcasting
    rules, and networks repeat shapes (RRDB's 161 binary layers have a handful).
    """
    total = math.prod(out_shape)
    if total >= 1 << 24:
        return None
    probe = layer_cls()
    probe.load_param(ParamDict({0: 0}))  # op 0 = add, no scalar
    result = []
    for k, shape in enumerate(shapes):
        arrays = [np.zeros(s, np.float32) for s in shapes]
        arrays[k] = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
        index = np.asarray(probe.forward(arrays)[0], np.float64)
        if tuple(index.shape) != tuple(out_shape):
            return None
        grid = index.reshape(shape4(out_shape)[::-1])  # (c, d, h, w)
        strides = []
        for axis in (3, 2, 1, 0):  # w, h, d, c
            n = grid.shape[axis]
            if n == 1:
                strides.append(0)
                continue
            step = np.take(grid, 1, axis=axis) - np.take(grid, 0, axis=axis)
            strides.append(int(step.flat[0]))
        expect = sum(
            np.arange(n).reshape([-1 if i == ax else 1 for i in range(4)]) * st
            for ax, n, st in zip((3, 2, 1, 0), grid.shape[::-1], strides, strict=True)
        )
        if not np.array_equal(grid - grid.flat[0], expect) or grid.flat[0] != 0:
            return None
        result.append((strides[0], strides[1], strides[2], strides[3]))
    return tuple(result)


@register("BinaryOp")
class BinaryOp(VulkanLayer):
    def setup(self) -> None:
        self.op_type = self.params.get_int(0, 0)
        self.with_scalar = self.params.get_int(1, 0)
        self.b = self.params.get_float(2, 0.0)

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        spec = (self.op_type, self.with_scalar, float(self.b), 1.0, 1.0)
        return {"binary": PipelineSpec("binary", spec, self.local_size_1d())}

    def _probe(self, shapes: list[Shape]) -> tuple[tuple[int, int, int, int], ...] | None:
        out = tuple(self.layer.output_shapes(shapes)[0])
        layer_cls: Any = type(self.layer)  # a class hashes by identity (mypy cannot tell)
        return _strides_by_probe(layer_cls, tuple(map(tuple, shapes)), out)

    def supports(self, input_shapes: list[Shape]) -> bool:  # type: ignore[override]
        return self.with_scalar == 1 or self._probe(list(input_shapes)) is not None

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        out = outputs[0]
        dims = shape4(out.shape)
        if self.with_scalar:
            strides: Sequence[tuple[int, int, int, int]] = [_contiguous(out.shape), (0, 0, 0, 0)]
            b = inputs[0]
        else:
            probed = self._probe([i.shape for i in inputs])
            assert probed is not None
            strides = probed
            b = inputs[1]
        push = pack_push("12i", *dims, *strides[0], *strides[1])
        local = self.local_size_1d()
        ctx.dispatch("binary", [inputs[0], b, out], push, self.groups_1d(out.size, local))


def _contiguous(shape: Shape) -> tuple[int, int, int, int]:
    w, h, d, _c = shape4(shape)
    return (1, w, w * h, w * h * d)


@register("Eltwise")
class Eltwise(VulkanLayer):
    """N inputs folded pairwise with ``binary.comp``: prod (op 2), sum (op 0) or max (op 4)."""

    def setup(self) -> None:
        kind = self.params.get_int(0, 0)
        self.op_type = {0: 2, 1: 0, 2: 4}[kind]
        coeffs = self.params.get_floats(1, ())
        self.coeffs = coeffs if kind == 1 and coeffs else ()

    def _coeff(self, i: int) -> float:
        return float(self.coeffs[i]) if self.coeffs else 1.0

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        n = max(len(self.layer.bottoms), 2)
        specs = {
            "first": PipelineSpec(
                "binary",
                (self.op_type, 0, 0.0, self._coeff(0), self._coeff(1)),
                self.local_size_1d(),
            )
        }
        for i in range(2, n):
            specs[f"step{i}"] = PipelineSpec(
                "binary", (self.op_type, 0, 0.0, 1.0, self._coeff(i)), self.local_size_1d()
            )
        return specs

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        out = outputs[0]
        flat = _contiguous(out.shape)
        push = pack_push("12i", *shape4(out.shape), *flat, *flat)
        groups = self.groups_1d(out.size, self.local_size_1d())
        ctx.dispatch("first", [inputs[0], inputs[1], out], push, groups)
        for i in range(2, len(inputs)):
            ctx.barrier()
            ctx.dispatch(f"step{i}", [out, inputs[i], out], push, groups)
