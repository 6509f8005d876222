"""Elementwise GPU layers: activations, UnaryOp (``unary.comp``), BinaryOp and Eltwise
(``binary.comp``), and the layers that only rename a blob (aliases, no dispatch)."""

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


class _Unary(VulkanLayer):
    """One ``unary.comp`` dispatch; subclasses pick (op, a, b) from their params."""

    def op(self) -> tuple[int, float, float]:
        raise NotImplementedError

    def setup(self) -> None:
        self._op = self.op()

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        op, a, b = self._op
        return {"unary": PipelineSpec("unary", (op, float(a), float(b)), self.local_size_1d())}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        n = inputs[0].size
        local = self.local_size_1d()
        ctx.dispatch("unary", [inputs[0], outputs[0]], pack_push("i", n), self.groups_1d(n, local))


@register("ReLU")
class ReLU(_Unary):
    def op(self) -> tuple[int, float, float]:
        return (1, self.params.get_float(0, 0.0), 0.0)


@register("Clip")
class Clip(_Unary):
    def op(self) -> tuple[int, float, float]:
        return (
            2,
            self.params.get_float(0, -3.402823466e38),
            self.params.get_float(1, 3.402823466e38),
        )


@register("Sigmoid")
class Sigmoid(_Unary):
    def op(self) -> tuple[int, float, float]:
        return (3, 0.0, 0.0)


@register("TanH")
class TanH(_Unary):
    def op(self) -> tuple[int, float, float]:
        return (4, 0.0, 0.0)


@register("Swish")
class Swish(_Unary):
    def op(self) -> tuple[int, float, float]:
        return (5, 0.0, 0.0)


@register("HardSigmoid")
class HardSigmoid(_Unary):
    def op(self) -> tuple[int, float, float]:
        return (6, self.params.get_float(0, 0.2), self.params.get_float(1, 0.5))


@register("HardSwish")
class HardSwish(_Unary):
    def op(self) -> tuple[int, float, float]:
        return (7, self.params.get_float(0, 0.2), self.params.get_float(1, 0.5))


@register("Mish")
class Mish(_Unary):
    def op(self) -> tuple[int, float, float]:
        return (8, 0.0, 0.0)


@register("ELU")
class ELU(_Unary):
    def op(self) -> tuple[int, float, float]:
        return (9, self.params.get_float(0, 0.1), 0.0)


@register("GELU")
class GELU(_Unary):
    def op(self) -> tuple[int, float, float]:
        return (11 if self.params.get_int(0, 0) else 10, 0.0, 0.0)


# ncnn UnaryOp types 0..19 -> unary.comp ops
_UNARY_OPS = {
    0: 12,
    1: 13,
    2: 14,
    3: 15,
    4: 16,
    5: 17,
    6: 18,
    7: 19,
    8: 20,
    9: 21,
    10: 22,
    11: 23,
    12: 24,
    13: 25,
    14: 26,
    15: 27,
    16: 4,
    17: 28,
    18: 29,
    19: 30,
}


@register("UnaryOp")
class UnaryOp(_Unary):
    def op(self) -> tuple[int, float, float]:
        kind = self.params.get_int(0, 0)
        if kind not in _UNARY_OPS:
            raise ValueError(f"UnaryOp type {kind} is not supported")
        return (_UNARY_OPS[kind], 0.0, 0.0)


@register("Dropout")
class Dropout(_Unary):
    def op(self) -> tuple[int, float, float]:
        return (31, self.params.get_float(0, 1.0), 0.0)

    def setup(self) -> None:
        super().setup()
        self.alias = self._op[1] == 1.0  # type: ignore[misc]


class _Alias(VulkanLayer):
    """Outputs share the input's bytes: contiguous layouts make these free."""

    alias = True

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        return {}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        raise AssertionError("alias layers are never recorded")


for _name in ("Split", "Noop", "Reshape", "Flatten"):
    register(_name)(type(_name, (_Alias,), {}))


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
