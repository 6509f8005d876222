"""Reduction and Softmax, with ncnn's output shapes and its float32 formulas; on the GPU the
blob is viewed as (outer, len, inner) around the reduced axes, which must be contiguous (other
axis sets run the numpy reference).

Reduction keeps ncnn's quirks on purpose: LogSumExp is ``log(sum(exp(x)))`` without the max
shift (so it overflows where ncnn does), MEAN multiplies by ``coeff / count``, L2 flushes a
subnormal sum to zero before the square root. MAX and MIN fold ``std::max(acc, v)`` from
-FLT_MAX (``std::min`` from FLT_MAX), which never takes a NaN: they ignore NaN, and an all-NaN
run gives -FLT_MAX (FLT_MAX). Softmax's max is the same fold, so a NaN reaches the output only
through ``exp`` and the sum, which makes its whole run NaN.
"""

from __future__ import annotations

import math

import numpy as np

from . import _line_shaders
from ._base import Layer
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    fold_groups,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._registry import register_layer
from ._schema import Param, ints

_F32 = np.float32
_FLT_MIN = np.finfo(np.float32).tiny
Shape = tuple[int, ...]


@register_layer("Reduction")
class Reduction(Layer):
    """Reduce over ``axes`` (3) or everything (``reduce_all`` 1): ops 0 sum, 1 asum, 2 sumsq,
    3 mean, 4 max, 5 min, 6 prod, 7 L1, 8 L2, 9 log-sum, 10 log-sum-exp; times ``coeff`` (2);
    ``keepdims`` (4)."""

    operation = Param(0, int, 0)
    reduce_all = Param(1, int, 1)
    coeff = Param(2, float, 1.0)
    axes = Param(3, ints)
    keepdims = Param(4, int, 0)
    fixbug0 = Param(5, int, 0)

    gpu = True

    def validate(self) -> None:
        if not 0 <= self.operation <= 10:
            raise ValueError(f"Reduction: param 0 operation={self.operation} unsupported")
        if self.fixbug0 == 0 and self.axes:
            raise ValueError("Reduction: param 5 fixbug0=0 with axes: param too old, regenerate")

    def _reduced_axes(self, shape: Shape) -> tuple[int, ...]:
        """numpy axes ncnn reduces (a 1-D blob is always reduced whole)."""
        dims = len(shape)
        if self.reduce_all or dims == 1:
            return tuple(range(dims))
        axes = set()
        for a in self.axes:
            pos = a + dims if a < 0 else a
            if not 0 <= pos < dims:
                raise ValueError(f"Reduction: param 3 axis {a} out of range for {shape}")
            axes.add(pos)
        if not axes:
            raise ValueError("Reduction: param 3 axes reduces nothing")
        return tuple(sorted(axes))

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        axes = self._reduced_axes(shape)
        if self.keepdims:
            return [tuple(1 if i in axes else n for i, n in enumerate(shape))]
        out = tuple(n for i, n in enumerate(shape) if i not in axes)
        return [out if out else (1,)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], dtype=_F32)
        axes = self._reduced_axes(x.shape)
        (out_shape,) = self.output_shapes([x.shape])
        op = self.operation
        with np.errstate(all="ignore"):
            if op in (0, 3, 9):
                r = np.sum(x, axis=axes, dtype=_F32)
            elif op in (1, 7):
                r = np.sum(np.abs(x), axis=axes, dtype=_F32)
            elif op in (2, 8):
                r = np.sum(x * x, axis=axes, dtype=_F32)
            elif op == 4:
                r = np.fmax(np.fmax.reduce(x, axis=axes), _F32(-np.finfo(_F32).max))
            elif op == 5:
                r = np.fmin(np.fmin.reduce(x, axis=axes), _F32(np.finfo(_F32).max))
            elif op == 6:
                r = np.prod(x, axis=axes, dtype=_F32)
            else:
                r = np.sum(np.exp(x), axis=axes, dtype=_F32)
            r = np.asarray(r, dtype=_F32)
            if op in (9, 10):
                r = np.log(r)
            if op == 8:
                r = np.sqrt(np.where(r < _FLT_MIN, _F32(0), r))
            coeff = _F32(self.coeff)
            if op == 3:
                count = int(np.prod([x.shape[a] for a in axes]))
                coeff = _F32(coeff / _F32(count))
            if coeff != _F32(1):
                r = r * coeff
        return [np.asarray(r, dtype=_F32).reshape(out_shape)]

    # -- GPU -------------------------------------------------------------------------------

    def _gpu_range(self, shape: Shape) -> tuple[int, int] | None:
        """The first and last reduced axis, or None when they are not contiguous."""
        dims = len(shape)
        if self.reduce_all or not self.axes:
            return (0, dims - 1)
        axes = sorted({a % dims for a in self.axes})
        if axes != list(range(axes[0], axes[-1] + 1)):
            return None
        return (axes[0], axes[-1])

    def supports(self, input_shapes: list[Shape]) -> bool:
        return 0 <= self.operation <= 10 and self._gpu_range(input_shapes[0]) is not None

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        spec = (self.operation, float(self.coeff))
        return {"reduce": PipelineSpec("reduction", spec, local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        span = self._gpu_range(inputs[0].shape)
        assert span is not None
        _dispatch_split(ctx, "reduce", inputs[0], outputs[0], *span)


def _around(shape: tuple[int, ...], first: int, last: int) -> tuple[int, int, int]:
    """A blob as (outer, len, inner) around axes first..last (inclusive), as the shaders see it."""
    return (
        math.prod(shape[:first]),
        math.prod(shape[first : last + 1]),
        math.prod(shape[last + 1 :]),
    )


def _dispatch_split(
    ctx: RecordContext, key: str, x: GpuBlob, out: GpuBlob, first: int, last: int
) -> None:
    """One invocation per (outer, inner) pair around axes first..last (inclusive)."""
    outer, n, inner = _around(x.shape, first, last)
    push = pack_push("3i", outer, n, inner)
    groups = groups_1d(outer * inner, local_size_1d(ctx.info), ctx.info)
    ctx.dispatch(key, [x, out], push, groups)


@register_layer("Softmax")
class Softmax(Layer):
    """``exp(x - max) / sum`` along ``axis`` (0); ``fixbug0`` (1) must be 1 when axis != 0."""

    axis = Param(0, int, 0)
    fixbug0 = Param(1, int, 0)

    gpu = True

    def validate(self) -> None:
        if self.fixbug0 == 0 and self.axis != 0:
            raise ValueError("Softmax: param 1 fixbug0=0 with axis != 0: param too old")

    def _axis(self, dims: int) -> int:
        if dims == 1:
            return 0  # ncnn softmaxes a 1-D blob whole, whatever the axis
        pos = self.axis + dims if self.axis < 0 else self.axis
        if not 0 <= pos < dims:
            raise ValueError(f"Softmax: param 0 axis {self.axis} out of range for {dims}-D")
        return pos

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        self._axis(len(input_shapes[0]))
        return [tuple(input_shapes[0])]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], dtype=_F32)
        axis = self._axis(x.ndim)
        m = np.fmax(np.fmax.reduce(x, axis=axis, keepdims=True), _F32(-np.finfo(_F32).max))
        with np.errstate(all="ignore"):
            e = np.exp(x - m)
            s = np.sum(e, axis=axis, keepdims=True, dtype=_F32)
            return [np.asarray(e / s, dtype=_F32)]

    # -- GPU -------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        specs = {"softmax": PipelineSpec("softmax", (), local_size_1d(target.info))}
        if _line_shaders.offered(target.info):
            local = _line_shaders.local_size(target.info)
            specs["softmax_lines"] = PipelineSpec("softmax_lines", (), local)
        return specs

    def background_pipelines(self, target: GpuTarget) -> frozenset[str]:
        """A workgroup per line: faster on long lines, not worth a cold load's wait."""
        return _SOFTMAX_LINES if _line_shaders.offered(target.info) else frozenset()

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        axis = self.axis % len(inputs[0].shape)
        outer, length, inner = _around(inputs[0].shape, axis, axis)
        lines = _line_shaders.chosen(ctx.info, outer * inner, length)
        if lines and ctx.has_pipeline("softmax_lines"):
            groups = fold_groups(outer * inner, ctx.info)
            push = pack_push("3i", outer, length, inner)
            ctx.dispatch("softmax_lines", [inputs[0], outputs[0]], push, groups)
            return
        _dispatch_split(ctx, "softmax", inputs[0], outputs[0], axis, axis)


_SOFTMAX_LINES = frozenset({"softmax_lines"})
