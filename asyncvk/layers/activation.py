"""Activation layers and ncnn's fused activation (fused_activation.h), vectorised in numpy, and
their GPU path: one ``unary.comp`` dispatch, the op picked by specialization constants.

Everything runs in float32 with ncnn's comparison order, so NaN and clamping edge cases match
the scalar C code (e.g. ReLU keeps NaN, the fused ReLU's ``fmaxf`` turns it into 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ._base import BlobCount, Layer, ShareInputOnGpu
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._registry import register_layer
from ._schema import Param

FLT_MAX = float(np.finfo(np.float32).max)
#: C's FLT_MAX literal, the clip bounds' default in GPU specializations (the same float32).
_GPU_FLT_MAX = 3.402823466e38
_SIGMOID_CLAMP = np.float32(88.3762626647949)
#: activation_type -> how many activation_params it reads (ncnn indexes them unchecked).
_ACTIVATION_NPARAMS = {0: 0, 1: 0, 2: 1, 3: 2, 4: 0, 5: 0, 6: 2}


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _hard_bounds(alpha: float, beta: float) -> tuple[np.float32, np.float32]:
    """ncnn's float32 ``lower = -beta / alpha`` and ``upper = 1 / alpha + lower``."""
    a, b = np.float32(alpha), np.float32(beta)
    lower = np.float32(-b / a)
    return lower, np.float32(np.float32(1.0) / a + lower)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """ncnn's sigmoid: clamp to +-88.376 first so expf never overflows."""
    v = np.clip(_f32(x), -_SIGMOID_CLAMP, _SIGMOID_CLAMP)
    return (np.float32(1.0) / (np.float32(1.0) + np.exp(-v))).astype(np.float32)


def hardswish(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    """x * (x * alpha + beta) between lower and upper, 0 below, x above (ncnn's branch order)."""
    x = _f32(x)
    lower, upper = _hard_bounds(alpha, beta)
    mid = x * (x * np.float32(alpha) + np.float32(beta))
    return np.where(x < lower, np.float32(0), np.where(x > upper, x, mid)).astype(np.float32)


def validate_activation(activation_type: int, params: Sequence[float]) -> None:
    """Reject what ncnn would silently ignore (unknown type) or read out of bounds (params)."""
    if activation_type not in _ACTIVATION_NPARAMS:
        raise ValueError(f"param 9 activation_type={activation_type} is not supported (0..6)")
    need = _ACTIVATION_NPARAMS[activation_type]
    if len(params) < need:
        raise ValueError(
            f"param 10 activation_params needs {need} values for activation_type "
            f"{activation_type}, got {len(params)}"
        )


def gpu_activation(kind: int, values: tuple[float, ...]) -> tuple[int, float, float]:
    """ncnn activation_type 9 and its params 10 as (type, a, b) for ``activation.h``."""
    if kind == 2:
        return (2, values[0] if values else 0.0, 0.0)
    if kind == 3:
        lo = values[0] if len(values) > 0 else -_GPU_FLT_MAX
        hi = values[1] if len(values) > 1 else _GPU_FLT_MAX
        return (3, lo, hi)
    if kind == 6:
        return (6, values[0] if values else 0.2, values[1] if len(values) > 1 else 0.5)
    if kind not in (0, 1, 4, 5):
        raise ValueError(f"activation_type {kind} is not supported")
    return (kind, 0.0, 0.0)


def fused_activation(x: np.ndarray, type: int, params: Sequence[float]) -> np.ndarray:
    """ncnn's ``activation_ss`` for activation_type 0..6, applied elementwise."""
    x = _f32(x)
    with np.errstate(over="ignore", invalid="ignore"):
        if type == 0:
            return x
        if type == 1:
            return np.fmax(x, np.float32(0))
        if type == 2:
            return np.where(x > 0, x, x * np.float32(params[0])).astype(np.float32)
        if type == 3:
            lo, hi = np.float32(params[0]), np.float32(params[1])
            x = np.where(x < lo, lo, x)
            return np.where(x > hi, hi, x).astype(np.float32)
        if type == 4:
            return sigmoid(x)
        if type == 5:
            return (x * np.tanh(np.log(np.exp(x) + np.float32(1)))).astype(np.float32)
        if type == 6:
            return hardswish(x, params[0], params[1])
    raise ValueError(f"activation_type {type} is not supported (0..6)")


class _Elementwise(Layer):
    """One input, one output of the same shape."""

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        return [tuple(input_shapes[0])]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return [self.apply(_f32(inputs[0])).astype(np.float32, copy=False)]

    def apply(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # -- GPU -------------------------------------------------------------------------------

    gpu = True

    def gpu_op(self) -> tuple[int, float, float]:
        """(op, a, b): unary.comp's specialization constants for this layer."""
        raise NotImplementedError

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        op, a, b = self.gpu_op()
        local = local_size_1d(target.info)
        return {"unary": PipelineSpec("unary", (op, float(a), float(b)), local)}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        n = inputs[0].size
        groups = groups_1d(n, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("unary", [inputs[0], outputs[0]], pack_push("i", n), groups)


@register_layer("ReLU")
class ReLU(_Elementwise):
    """0 slope(0.f); leaky when slope != 0. Negative values only: NaN stays NaN."""

    slope = Param(0, float, 0.0)

    def gpu_op(self) -> tuple[int, float, float]:
        return (1, self.slope, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        if self.slope == 0.0:
            return np.where(x < 0, np.float32(0), x)
        return np.where(x < 0, x * np.float32(self.slope), x)


@register_layer("Clip")
class Clip(_Elementwise):
    """0 min(-FLT_MAX), 1 max(FLT_MAX); min applied first, then max (ncnn's order)."""

    min = Param(0, float, -FLT_MAX)
    max = Param(1, float, FLT_MAX)

    def gpu_op(self) -> tuple[int, float, float]:
        return (2, self.min, self.max)

    def apply(self, x: np.ndarray) -> np.ndarray:
        lo, hi = np.float32(self.min), np.float32(self.max)
        x = np.where(x < lo, lo, x)
        return np.where(x > hi, hi, x)


@register_layer("Sigmoid")
class Sigmoid(_Elementwise):
    """No params."""

    def gpu_op(self) -> tuple[int, float, float]:
        return (3, 0.0, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return sigmoid(x)


@register_layer("TanH")
class TanH(_Elementwise):
    """No params."""

    def gpu_op(self) -> tuple[int, float, float]:
        return (4, 0.0, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return np.tanh(x)


@register_layer("Swish")
class Swish(_Elementwise):
    """x / (1 + exp(-x)), no clamping (unlike Sigmoid)."""

    def gpu_op(self) -> tuple[int, float, float]:
        return (5, 0.0, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return x / (np.float32(1) + np.exp(-x))


@register_layer("HardSigmoid")
class HardSigmoid(_Elementwise):
    """0 alpha(0.2), 1 beta(0.5): 0 below lower, 1 above upper, else x * alpha + beta."""

    alpha = Param(0, float, 0.2)
    beta = Param(1, float, 0.5)

    def gpu_op(self) -> tuple[int, float, float]:
        return (6, self.alpha, self.beta)

    def apply(self, x: np.ndarray) -> np.ndarray:
        lower, upper = _hard_bounds(self.alpha, self.beta)
        mid = x * np.float32(self.alpha) + np.float32(self.beta)
        return np.where(x < lower, np.float32(0), np.where(x > upper, np.float32(1), mid))


@register_layer("HardSwish")
class HardSwish(HardSigmoid):
    """0 alpha(0.2), 1 beta(0.5) (pytorch's is 1/6, 0.5: set in the .param)."""

    def gpu_op(self) -> tuple[int, float, float]:
        return (7, self.alpha, self.beta)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return hardswish(x, self.alpha, self.beta)


@register_layer("Mish")
class Mish(_Elementwise):
    """x * tanh(softplus(x)) with ncnn's +-20 thresholds on softplus."""

    def gpu_op(self) -> tuple[int, float, float]:
        return (8, 0.0, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        t = np.float32(20)
        soft = np.where(x > t, x, np.where(x < -t, np.exp(x), np.log(np.exp(x) + np.float32(1))))
        return x * np.tanh(soft)


@register_layer("ELU")
class ELU(_Elementwise):
    """0 alpha(0.1): alpha * (exp(x) - 1) for x < 0."""

    alpha = Param(0, float, 0.1)

    def gpu_op(self) -> tuple[int, float, float]:
        return (9, self.alpha, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return np.where(x < 0, np.float32(self.alpha) * (np.exp(x) - np.float32(1)), x)


_erfc = np.frompyfunc(math.erfc, 1, 1)


@register_layer("GELU")
class GELU(_Elementwise):
    """0 fast_gelu(0): the tanh approximation when set, else the exact erfc form."""

    fast_gelu = Param(0, int, 0)

    def gpu_op(self) -> tuple[int, float, float]:
        return (11 if self.fast_gelu else 10, 0.0, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        half = np.float32(0.5)
        if self.fast_gelu:
            inner = np.float32(0.79788452) * (x + np.float32(0.044715) * x * x * x)
            return half * x * (np.float32(1) + np.tanh(inner))
        arg = (np.float32(-0.70710678) * x).astype(np.float64)
        return half * x * np.asarray(_erfc(arg), dtype=np.float32)


def _sign(x: np.ndarray) -> np.ndarray:
    """ncnn's sign: 0 for NaN too."""
    return np.where(x > 0, np.float32(1), np.where(x < 0, np.float32(-1), np.float32(0)))


#: ncnn's UnaryOp operation ids (unaryop.h) and their float32 numpy forms.
UNARY_OPS: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    0: np.abs,
    1: np.negative,
    2: np.floor,
    3: np.ceil,
    4: np.square,
    5: np.sqrt,
    6: lambda x: np.float32(1) / np.sqrt(x),
    7: np.exp,
    8: np.log,
    9: np.sin,
    10: np.cos,
    11: np.tan,
    12: np.arcsin,
    13: np.arccos,
    14: np.arctan,
    15: lambda x: np.float32(1) / x,
    16: np.tanh,
    17: np.log10,
    18: np.rint,  # nearbyintf under FE_TONEAREST: round half to even
    19: np.trunc,
    20: _sign,
    21: np.expm1,
    22: np.sinh,
    23: np.arcsinh,
    24: np.cosh,
    25: np.arccosh,
    26: np.arctanh,
    27: np.log1p,
}


#: ncnn UnaryOp ids -> unary.comp ops (the GPU has 0..19; the others fail at load on a GPU).
_GPU_UNARY_OPS = {**{k: 12 + k for k in range(16)}, 16: 4, 17: 28, 18: 29, 19: 30}


@register_layer("UnaryOp")
class UnaryOp(_Elementwise):
    """0 op_type(0): ids 0 abs .. 27 log1p as unaryop.h."""

    op_type = Param(0, int, 0)

    def validate(self) -> None:
        if self.op_type not in UNARY_OPS:
            raise ValueError(f"param 0 op_type={self.op_type} is not supported (0..27)")

    def gpu_op(self) -> tuple[int, float, float]:
        if self.op_type not in _GPU_UNARY_OPS:
            raise ValueError(f"UnaryOp type {self.op_type} is not supported")
        return (_GPU_UNARY_OPS[self.op_type], 0.0, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return UNARY_OPS[self.op_type](x)


@register_layer("Dropout")
class Dropout(_Elementwise):
    """0 scale(1.f): inference-time dropout is a multiply, or nothing at scale 1."""

    scale = Param(0, float, 1.0)

    def validate(self) -> None:
        self.alias = self.scale == 1.0  # nothing to compute: the output is the input

    def gpu_op(self) -> tuple[int, float, float]:
        return (31, self.scale, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        if self.scale == 1.0:
            return x
        return x * np.float32(self.scale)


@register_layer("Noop")
class Noop(ShareInputOnGpu):
    """Passes input i to output i unchanged, as ncnn's in-place Noop does; it may have fewer
    outputs than inputs (yolo-fastestv2 ends with ``Noop output 2 1 794 796 output``), the
    extra inputs being dropped, but not more (ncnn would read past its inputs)."""

    one_blob_only = False

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (0, None), (0, None)

    def check_blob_counts(self, bottoms: int, tops: int) -> None:
        if tops > bottoms:
            s = "" if bottoms == 1 else "s"
            raise ValueError(
                f"Noop gives at most {bottoms} output blob{s} (one per input), got {tops}"
            )

    def _count(self, inputs: int) -> int:
        return len(self.tops) if self.tops else inputs

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        return [tuple(s) for s in input_shapes[: self._count(len(input_shapes))]]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return list(inputs[: self._count(len(inputs))])
