"""BinaryOp and Eltwise: elementwise arithmetic on two or more blobs, as ncnn computes it, and
their GPU path on ``binary.comp``.

BinaryOp follows ncnn's own broadcasting (BinaryOp::forward): the lower-rank blob is first
reshaped to the higher rank by ncnn's fixed rules (a 1-D blob lines up with ``c`` when its
length equals the other blob's ``c``, else with ``w``; a 2-D ``(h, w)`` blob against 3-D
becomes ``(c=h, h=w, w=1)``), then size-1 dims broadcast. That is not numpy's right-aligned
rule, so the expansion is spelled out here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ..gpu._info import GpuInfo
from ._base import BlobCount, Layer
from ._geometry import shape4
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
from ._registry import register_layer
from ._schema import Param, floats

_F32 = np.float32


def _std_max(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``std::max(x, y)``: ``x < y ? y : x`` (NaN handling as C++, not np.maximum)."""
    return np.where(x < y, y, x)


def _std_min(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``std::min(x, y)``: ``y < x ? y : x``."""
    return np.where(y < x, y, x)


def _remainder(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C ``remainderf``: ``x - n*y`` with ``n`` = x/y rounded half to even.

    Done in float64, where the quotient of two float32 values cannot land on a false tie.
    """
    x64 = x.astype(np.float64)
    y64 = y.astype(np.float64)
    return (x64 - np.rint(x64 / y64) * y64).astype(_F32)


def _logaddexp(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ncnn's ``max + log1p(exp(min - max))`` in float32."""
    mx = _std_max(x, y)
    mn = _std_min(x, y)
    return (mx + np.log1p(np.exp(mn - mx))).astype(_F32)


# op_type -> (function, swap operands); the "r" ops are the plain op with a and b swapped.
_OPS: dict[int, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], bool]] = {
    0: (np.add, False),
    1: (np.subtract, False),
    2: (np.multiply, False),
    3: (np.divide, False),
    4: (_std_max, False),
    5: (_std_min, False),
    6: (np.power, False),
    7: (np.subtract, True),
    8: (np.divide, True),
    9: (np.power, True),
    10: (np.arctan2, False),
    11: (np.arctan2, True),
    12: (np.fmod, False),
    13: (np.fmod, True),
    14: (_logaddexp, False),
    15: (lambda x, y: np.floor(x / y), False),
    16: (lambda x, y: np.floor(x / y), True),
    17: (_remainder, False),
    18: (_remainder, True),
}


def apply_binary(op_type: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``op(a, b)`` in float32 with numpy broadcasting; IEEE inf/nan, no warnings."""
    fn, swap = _OPS[op_type]
    if swap:
        a, b = b, a
    with np.errstate(all="ignore"):
        return np.asarray(fn(a, b), dtype=_F32)


def _expand_shape(shape: tuple[int, ...], other: tuple[int, ...], outdims: int) -> tuple[int, ...]:
    """The numpy shape ncnn's ``Mat::reshape`` gives a lower-rank operand (BinaryOp::forward)."""
    dims = len(shape)
    if dims >= outdims:
        return shape
    if dims == 1:
        (w,) = shape
        # compare with the other blob's h (2-D) or c (3-D/4-D): ncnn's first axis
        matches_outer = w == other[0]
        if outdims == 2:
            return (w, 1) if matches_outer else (1, w)
        if outdims == 3:
            return (w, 1, 1) if matches_outer else (1, 1, w)
        return (w, 1, 1, 1) if matches_outer else (1, 1, 1, w)
    if dims == 2:
        h, w = shape
        return (h, w, 1) if outdims == 3 else (h, w, 1, 1)
    # dims 3 -> 4: reshape(1, w, h, c)
    c, h, w = shape
    return (c, h, w, 1)


def binary_shapes(
    a: tuple[int, ...], b: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Expanded shapes of both operands and the output shape, or ValueError when they clash."""
    outdims = max(len(a), len(b))
    a2 = _expand_shape(a, b, outdims)
    b2 = _expand_shape(b, a, outdims)
    out = []
    for x, y in zip(a2, b2, strict=True):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"BinaryOp: shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return a2, b2, tuple(out)


#: where each numpy axis of a rank-1..4 blob sits in ncnn's (w, h, d, c)
_NCNN_AXES = {1: (0,), 2: (1, 0), 3: (3, 1, 0), 4: (3, 2, 1, 0)}


def broadcast_strides(
    shapes: tuple[Shape, Shape], out_shape: Shape
) -> tuple[tuple[int, int, int, int], ...] | None:
    """Element strides of both operands over the output's (w, h, d, c): each operand as
    ``forward`` reshapes it (``binary_shapes``), then numpy's broadcasting, which reads a size-1
    axis at step 0. None for outputs of 2^24 elements or more (they stay on the CPU).

    Worked out from the shapes: running the numpy reference on index arrays the output's size
    (as this did before) took 30 ms of efficientnet_b0's first plan, most of it in probes of
    1.2M-element maps. ``tests/test_binary_strides.py`` holds the two against each other."""
    if math.prod(out_shape) >= 1 << 24:
        return None
    a, b = shapes
    result = []
    for shape, other in ((a, b), (b, a)):
        expanded = _expand_shape(shape, other, len(out_shape))
        strides = [0, 0, 0, 0]
        step = 1
        for axis in range(len(expanded) - 1, -1, -1):
            if expanded[axis] != 1:
                strides[_NCNN_AXES[len(expanded)][axis]] = step
            step *= expanded[axis]
        result.append((strides[0], strides[1], strides[2], strides[3]))
    return tuple(result)


# Where same-shaped (or scalar) operands run ``binary_flat.comp``: the device's choices say
# (binary_flat: "cpu" devices). A GPU keeps ``binary.comp``, whose index divisions it hides.


def flat_offered(info: GpuInfo) -> bool:
    """Whether BinaryOp and Eltwise get ``binary_flat.comp`` on ``info``'s device."""
    return info.takes(info.choices.binary_flat)


def _walks_flat(strides: tuple[int, int, int, int], shape: Shape) -> bool:
    """Whether an operand with these strides over ``shape`` is read at the output's own index
    (a size-1 dim's stride is never used)."""
    dims = shape4(shape)
    return all(
        n == 1 or st == c for n, st, c in zip(dims, strides, _contiguous(shape), strict=True)
    )


def _contiguous(shape: Shape) -> tuple[int, int, int, int]:
    w, h, d, _c = shape4(shape)
    return (1, w, w * h, w * h * d)


@register_layer("BinaryOp")
class BinaryOp(Layer):
    """Two-blob (or blob-and-scalar) elementwise op; ops 0..18 as ncnn's BinaryOp:
    0 op_type, 1 with_scalar, 2 b (the scalar)."""

    op_type = Param(0, int, 0)
    with_scalar = Param(1, int, 0)
    b = Param(2, float, 0.0)

    one_blob_only = False
    gpu = True

    def validate(self) -> None:
        if self.op_type not in _OPS:
            raise ValueError(f"BinaryOp: param 0 op_type={self.op_type} unsupported")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        """Two operands, or one and the scalar param 2 (with_scalar)."""
        return ((1, 1) if self.with_scalar else (2, 2)), (1, 1)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a = np.asarray(inputs[0], dtype=_F32)
        if self.with_scalar:
            return [apply_binary(self.op_type, a, np.full_like(a, _F32(self.b)))]
        b = np.asarray(inputs[1], dtype=_F32)
        a2, b2, _ = binary_shapes(a.shape, b.shape)
        return [apply_binary(self.op_type, a.reshape(a2), b.reshape(b2))]

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        if self.with_scalar:
            return [tuple(input_shapes[0])]
        return [binary_shapes(tuple(input_shapes[0]), tuple(input_shapes[1]))[2]]

    # -- GPU -------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        spec = (self.op_type, self.with_scalar, float(self.b), 1.0, 1.0)
        local = local_size_1d(target.info)
        if not flat_offered(target.info):
            return {"binary": PipelineSpec("binary", spec, local)}
        specs = {"flat": PipelineSpec("binary_flat", spec, local)}
        if not self.with_scalar:  # two operands may broadcast: that needs binary.comp
            specs["binary"] = PipelineSpec("binary", spec, local)
        return specs

    def _strides(self, shapes: list[Shape]) -> tuple[tuple[int, int, int, int], ...] | None:
        out = tuple(self.output_shapes(shapes)[0])
        return broadcast_strides((tuple(shapes[0]), tuple(shapes[1])), out)

    def supports(self, input_shapes: list[Shape]) -> bool:
        return self.with_scalar == 1 or self._strides(list(input_shapes)) is not None

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        out = outputs[0]
        if self.with_scalar:
            strides: Sequence[tuple[int, int, int, int]] = [_contiguous(out.shape), (0, 0, 0, 0)]
            b = inputs[0]
        else:
            found = self._strides([i.shape for i in inputs])
            assert found is not None
            strides = found
            b = inputs[1]
        groups = groups_1d(out.size, local_size_1d(ctx.info), ctx.info)
        operands_flat = self.with_scalar or _walks_flat(strides[1], out.shape)
        if ctx.has_pipeline("flat") and _walks_flat(strides[0], out.shape) and operands_flat:
            ctx.dispatch("flat", [inputs[0], b, out], pack_push("i", out.size), groups)
            return
        push = pack_push("12i", *shape4(out.shape), *strides[0], *strides[1])
        ctx.dispatch("binary", [inputs[0], b, out], push, groups)


#: Eltwise op_type -> the binary.comp op that folds it pairwise: prod, sum, max.
_ELTWISE_GPU_OPS = {0: 2, 1: 0, 2: 4}


@register_layer("Eltwise")
class Eltwise(Layer):
    """N-input product (0), weighted sum (1) or max (2) of same-shaped blobs:
    0 op_type, 1 coeffs."""

    op_type = Param(0, int, 0)
    coeffs = Param(1, floats)

    one_blob_only = False
    gpu = True

    def validate(self) -> None:
        if self.op_type not in (0, 1, 2):
            raise ValueError(f"Eltwise: param 0 op_type={self.op_type} unsupported")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (2, None), (1, 1)

    def _check(self, shapes: list[tuple[int, ...]]) -> None:
        if len(shapes) < 2:
            raise ValueError("Eltwise needs at least two inputs")
        if any(s != shapes[0] for s in shapes):
            raise ValueError(f"Eltwise: input shapes differ: {shapes}")
        if self.op_type == 1 and self.coeffs and len(self.coeffs) < len(shapes):
            raise ValueError(f"Eltwise: param 1 coeffs has {len(self.coeffs)} values")

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        xs = [np.asarray(x, dtype=_F32) for x in inputs]
        self._check([x.shape for x in xs])
        if self.op_type == 0:
            out = xs[0] * xs[1]
            for x in xs[2:]:
                out = out * x
        elif self.op_type == 1 and not self.coeffs:
            out = xs[0] + xs[1]
            for x in xs[2:]:
                out = out + x
        elif self.op_type == 1:
            k = [_F32(c) for c in self.coeffs]
            out = xs[0] * k[0] + xs[1] * k[1]
            for i, x in enumerate(xs[2:], start=2):
                out = out + x * k[i]
        else:
            out = _std_max(xs[0], xs[1])
            for x in xs[2:]:
                out = _std_max(out, x)
        return [np.asarray(out, dtype=_F32)]

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        shapes = [tuple(s) for s in input_shapes]
        self._check(shapes)
        return [shapes[0]]

    # -- GPU: the inputs folded pairwise with binary.comp ----------------------------------

    def _coeff(self, i: int) -> float:
        weighted = self.op_type == 1 and self.coeffs
        return float(self.coeffs[i]) if weighted else 1.0

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        op, local = _ELTWISE_GPU_OPS[self.op_type], local_size_1d(target.info)
        shader = "binary_flat" if flat_offered(target.info) else "binary"
        spec = (op, 0, 0.0, self._coeff(0), self._coeff(1))
        specs = {"first": PipelineSpec(shader, spec, local)}
        for i in range(2, max(len(self.bottoms), 2)):
            specs[f"step{i}"] = PipelineSpec(shader, (op, 0, 0.0, 1.0, self._coeff(i)), local)
        return specs

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        out = outputs[0]
        flat = _contiguous(out.shape)
        if ctx.spec("first").shader == "binary_flat":  # same-shaped inputs: always flat
            push = pack_push("i", out.size)
        else:
            push = pack_push("12i", *shape4(out.shape), *flat, *flat)
        groups = groups_1d(out.size, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("first", [inputs[0], inputs[1], out], push, groups)
        for i in range(2, len(inputs)):
            ctx.barrier()
            ctx.dispatch(f"step{i}", [out, inputs[i], out], push, groups)
