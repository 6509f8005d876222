"""Exp, Log, Power and Threshold: ncnn's elementwise math layers (src/layer/exp.cpp, log.cpp,
power.cpp, threshold.cpp), which pnnx emits for ``torch.exp``/``log``/``pow`` and friends.

Exp, Log and Power compute ``shift + x * scale`` first, in float32, as ncnn does; on the GPU
each is one ``affine_math.comp`` dispatch, whose ``powf``/``logf`` keep C's edge cases
(negative bases, zero) that GLSL's builtins leave undefined. Threshold is ``unary.comp``'s op 32.
"""

from __future__ import annotations

import numpy as np

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
from .activation import _Elementwise

_E = -1.0  # ncnn's base for e


def _affine(x: np.ndarray, scale: float, shift: float) -> np.ndarray:
    """ncnn's ``shift + x * scale`` in float32."""
    return np.float32(shift) + x * np.float32(scale)


def _check_base(layer: str, base: float, also_refused: str = "") -> None:
    """A base ncnn would turn into NaN (or inf) for every input is refused at load."""
    if base == _E or (base > 0 and not (also_refused and base == 1.0)):
        return
    rule = "-1 (e) or > 0" + (f" and not {also_refused}" if also_refused else "")
    raise ValueError(f"{layer} param 0 (base) = {base}: must be {rule}")


class _AffineMath(_Elementwise):
    """f(shift + x * scale) on the GPU through affine_math.comp."""

    scale = Param(1, float, 1.0)
    shift = Param(2, float, 0.0)

    def gpu_math(self) -> tuple[int, float]:
        """(op, c): affine_math.comp's op and its fourth constant."""
        raise NotImplementedError

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        op, c = self.gpu_math()
        consts = (op, float(self.scale), float(self.shift), float(c))
        return {"affine_math": PipelineSpec("affine_math", consts, local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        n = inputs[0].size
        groups = groups_1d(n, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("affine_math", [inputs[0], outputs[0]], pack_push("i", n), groups)


@register_layer("Exp")
class Exp(_AffineMath):
    """0 base(-1 = e), 1 scale(1), 2 shift(0): base ^ (shift + x * scale)."""

    base = Param(0, float, _E)

    def validate(self) -> None:
        _check_base("Exp", self.base)

    def gpu_math(self) -> tuple[int, float]:
        return (0, 0.0) if self.base == _E else (1, self.base)

    def apply(self, x: np.ndarray) -> np.ndarray:
        v = _affine(x, self.scale, self.shift)
        if self.base == _E:
            return np.exp(v)
        return np.power(np.float32(self.base), v)


@register_layer("Log")
class Log(_AffineMath):
    """0 base(-1 = e), 1 scale(1), 2 shift(0): log(shift + x * scale), times 1 / log(base)."""

    base = Param(0, float, _E)

    def validate(self) -> None:
        _check_base("Log", self.base, also_refused="1")

    def _log_base_inv(self) -> np.float32:
        """ncnn's float32 ``1.f / logf(base)`` (1 for base e)."""
        if self.base == _E:
            return np.float32(1.0)
        return np.float32(1.0) / np.log(np.float32(self.base))

    def gpu_math(self) -> tuple[int, float]:
        return (2, float(self._log_base_inv()))

    def apply(self, x: np.ndarray) -> np.ndarray:
        logs = np.log(_affine(x, self.scale, self.shift))
        return logs if self.base == _E else logs * self._log_base_inv()


@register_layer("Power")
class Power(_AffineMath):
    """0 power(1), 1 scale(1), 2 shift(0): (shift + x * scale) ^ power, as C's powf."""

    power = Param(0, float, 1.0)

    def gpu_math(self) -> tuple[int, float]:
        return (3, self.power)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return np.power(_affine(x, self.scale, self.shift), np.float32(self.power))


@register_layer("Threshold")
class Threshold(_Elementwise):
    """0 threshold(0): 1 where x > threshold, else 0 (NaN included)."""

    threshold = Param(0, float, 0.0)

    def gpu_op(self) -> tuple[int, float, float]:
        return (32, self.threshold, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        return np.where(x > np.float32(self.threshold), np.float32(1), np.float32(0))
