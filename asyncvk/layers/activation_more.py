"""AbsVal, BNLL, CELU, SELU, Softplus, Shrink, Erf and GLU: ncnn's less common activations
(src/layer/absval.cpp ... glu.cpp), which pnnx emits for ``torch.abs``, ``F.softplus``,
``F.celu``, ``F.selu``, ``F.softshrink``/``hardshrink``, ``torch.erf`` and ``F.glu``.

The numpy forms follow ncnn's scalar C line by line in float32, overflow and NaN included
(Softplus is inf past x = 88.7, BNLL's ``log(1 + exp)`` rounds ``1 + exp`` first, Shrink turns
NaN into 0). The elementwise ones run on the GPU as ``unary.comp`` ops; GLU, which halves an
axis, has its own ``glu.comp``.
"""

from __future__ import annotations

import math

import numpy as np

from ._base import Layer, Shape
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._libm import expf
from ._registry import register_layer
from ._schema import Param
from .activation import _Elementwise

_ONE = np.float32(1)


def _logf(x: np.ndarray) -> np.ndarray:
    """``logf`` as the C library gives it: float64 log rounded once (numpy's float32 log is
    a step off at times)."""
    return np.log(x.astype(np.float64)).astype(np.float32)


@register_layer("AbsVal")
class AbsVal(_Elementwise):
    """No params: ``x < 0 ? -x : x`` (NaN stays; the GPU's abs() may give +0 for -0, as
    ncnn's own x86 build does)."""

    def gpu_op(self) -> tuple[int, float, float]:
        return (12, 0.0, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return np.where(x < 0, -x, x)


@register_layer("BNLL")
class BNLL(_Elementwise):
    """No params: ``log(1 + exp(x))`` through its stable branch for x > 0 (NaN stays NaN, as
    ncnn's scalar code; its x86 SIMD lanes give 88.38 for NaN)."""

    def gpu_op(self) -> tuple[int, float, float]:
        return (38, 0.0, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        positive = x + _logf(_ONE + expf(-x))
        return np.where(x > 0, positive, _logf(_ONE + expf(x)))


@register_layer("CELU")
class CELU(_Elementwise):
    """0 alpha(1): ``(exp(x / alpha) - 1) * alpha`` below 0. Any alpha is float math ncnn
    carries out (0 gives -0 for negatives), so none is refused."""

    alpha = Param(0, float, 1.0)

    def gpu_op(self) -> tuple[int, float, float]:
        return (36, self.alpha, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        a = np.float32(self.alpha)
        return np.where(x < 0, (expf(x / a) - _ONE) * a, x)


@register_layer("SELU")
class SELU(_Elementwise):
    """0 alpha(1.67326324), 1 lambda(1.050700987): ``(exp(x) - 1) * (alpha * lambda)`` below
    0, ``x * lambda`` otherwise (the product rounded to float32 once, as ncnn)."""

    alpha = Param(0, float, 1.67326324)
    lambda_ = Param(1, float, 1.050700987)

    def _alpha_lambda(self) -> np.float32:
        return np.float32(self.alpha) * np.float32(self.lambda_)

    def gpu_op(self) -> tuple[int, float, float]:
        return (37, float(self._alpha_lambda()), self.lambda_)

    def apply(self, x: np.ndarray) -> np.ndarray:
        negative = (expf(x) - _ONE) * self._alpha_lambda()
        return np.where(x < 0, negative, x * np.float32(self.lambda_))


@register_layer("Softplus")
class Softplus(_Elementwise):
    """No params: ``log(exp(x) + 1)`` as ncnn writes it, so inf past x = 88.7 (no threshold,
    unlike torch's)."""

    def gpu_op(self) -> tuple[int, float, float]:
        return (39, 0.0, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return _logf(expf(x) + _ONE)


@register_layer("Shrink")
class Shrink(_Elementwise):
    """0 bias(0), 1 lambd(0.5): ``x + bias`` below -lambd, ``x - bias`` above lambd, else 0
    (NaN too: both comparisons fail). Hardshrink is bias 0, softshrink bias = lambd."""

    bias = Param(0, float, 0.0)
    lambd = Param(1, float, 0.5)

    def gpu_op(self) -> tuple[int, float, float]:
        return (35, self.lambd, self.bias)

    def apply(self, x: np.ndarray) -> np.ndarray:
        lambd, bias = np.float32(self.lambd), np.float32(self.bias)
        return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, np.float32(0)))


_erf = np.frompyfunc(math.erf, 1, 1)


@register_layer("Erf")
class Erf(_Elementwise):
    """No params: libm's ``erff`` (here float64 erf rounded to float32); the GPU's is a fitted
    approximation within a few float32 ulps (``unary.comp``)."""

    def gpu_op(self) -> tuple[int, float, float]:
        return (40, 0.0, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(_erf(x.astype(np.float64)), dtype=np.float32)


@register_layer("GLU")
class GLU(Layer):
    """0 axis(0; negative from the end): the axis split in halves a, b; ``a * sigmoid(b)``
    with ncnn's unclamped ``1 / (1 + exp(-b))``: ``a * 0`` once exp overflows (b < -88.72),
    as the C reads; the ncnn wheel, built with -ffast-math, gives NaN there. A 1-D blob ignores
    the axis, as ncnn does. An odd length drops its last element, as ncnn's offsets do (b starts
    at n / 2). An axis outside -4..3 can only work on 1-D blobs, where it means nothing: it is
    refused at load."""

    axis = Param(0, int, 0)
    gpu = True

    def validate(self) -> None:
        if not -4 <= self.axis <= 3:
            raise ValueError(f"GLU param 0 axis={self.axis} is out of range (-4..3)")

    def _axis(self, shape: Shape) -> int:
        """The split axis of ``shape``; ValueError when it is out of range or cannot halve."""
        dims = len(shape)
        axis = 0 if dims == 1 else (self.axis + dims if self.axis < 0 else self.axis)
        if not 0 <= axis < dims:
            raise ValueError(f"GLU: param 0 axis {self.axis} out of range for {dims}-D {shape}")
        if shape[axis] < 2:
            raise ValueError(f"GLU: axis {axis} of {shape} has 1 element: nothing to halve")
        return axis

    def _split(self, shape: Shape) -> tuple[int, int, int]:
        """(outer, n, inner) around the split axis."""
        axis = self._axis(shape)
        return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        axis = self._axis(shape)
        return [(*shape[:axis], shape[axis] // 2, *shape[axis + 1 :])]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], dtype=np.float32)
        outer, n, inner = self._split(x.shape)
        (shape,) = self.output_shapes([x.shape])
        lines = x.reshape(outer, n, inner)
        half = n // 2
        a, b = lines[:, :half], lines[:, half : 2 * half]
        with np.errstate(over="ignore", invalid="ignore"):
            out = a * (_ONE / (_ONE + expf(-b)))
        return [out.astype(np.float32, copy=False).reshape(shape)]

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {"glu": PipelineSpec("glu", (), local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        outer, n, inner = self._split(inputs[0].shape)
        count = outer * (n // 2) * inner
        push = pack_push("iiii", count, n // 2, inner, n)
        groups = groups_1d(count, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("glu", [inputs[0], outputs[0]], push, groups)
