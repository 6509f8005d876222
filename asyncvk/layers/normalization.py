"""Per-channel affine layers: BatchNorm, Scale, Bias, PReLU (ncnn's reference semantics), on
the GPU one ``channel_affine.comp`` dispatch (BatchNorm folded on the host into scale and bias).

"Channel" is axis 0 of the blob for every dims, as ncnn's loops index w (dims 1), rows
(dims 2) or channels (dims 3/4) -- except Bias, which ncnn applies per Mat channel only.
"""

from __future__ import annotations

import math

import numpy as np

from ._base import BlobCount, Layer, ModelBin
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    blobs_and_weights,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._limits import MAX_CHANNELS
from ._registry import register_layer
from ._schema import Param


def _per_axis0(values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Broadcast one value per index of axis 0 over the rest of ``x``."""
    n = x.shape[0]
    _check_count(values.size, "per-channel values", tuple(x.shape))
    return values[:n].reshape((n,) + (1,) * (x.ndim - 1))


def _check_count(have: int, what: str, shape: tuple[int, ...], need: int | None = None) -> None:
    """ncnn reads one value per index of axis 0, unchecked: refuse too few."""
    need = shape[0] if need is None else need
    if have < need:
        raise ValueError(f"{have} {what} for a blob of shape {shape} (needs {need})")


def _check_count_param(layer: Layer, param: Param[int], allowed: int | None = None) -> None:
    """A per-channel count param must be >= 0 (``allowed`` names one negative it may take)."""
    value = getattr(layer, param.name)
    if value < 0 and value != allowed:
        raise ValueError(
            f"{layer.type_name} param {param.id} ({param.name}) = {value} must be >= 0"
        )


class _SameShape(Layer):
    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        shape = tuple(input_shapes[0])
        self.check_channels(shape)
        return [shape]

    def check_channels(self, shape: tuple[int, ...]) -> None:
        """Refuse a blob with more channels than the layer has values for."""

    # -- GPU: out = x * scale[c] + bias[c] (mode 0) or PReLU's x < 0 ? x * scale[c] : x (1) ---

    gpu = True
    affine_mode = 0
    affine_bias = 1

    def per_channel(self) -> int:
        """1: one scale per channel, 0: one shared scale."""
        return 1

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        spec = (self.affine_mode, self.affine_bias, self.per_channel())
        return {"affine": PipelineSpec("channel_affine", spec, local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        shape = inputs[0].shape
        n = inputs[0].size
        if len(shape) == 1:
            plane, channels = 1, shape[0]
        else:
            plane, channels = math.prod(shape[1:]), shape[0]
        push = pack_push("3i", n, plane, channels)
        bufs = blobs_and_weights(ctx, inputs, outputs, ("scale", "bias"))
        ctx.dispatch("affine", bufs, push, groups_1d(n, local_size_1d(ctx.info), ctx.info))


@register_layer("BatchNorm")
class BatchNorm(_SameShape):
    """0 channels, 1 eps(0.f); weights slope, mean, var, bias (raw fp32 each).

    Folded at load into b * x + a exactly as ncnn (float32, sqrt_var 0 -> 0.0001).
    """

    channels = Param(0, int, 0, limit=MAX_CHANNELS)
    eps = Param(1, float, 0.0)
    a = b = np.zeros(0, np.float32)
    #: slope, mean, var and bias as the file gave them (the GPU folds them in float64)
    raw: tuple[np.ndarray, ...] = ()

    def validate(self) -> None:
        _check_count_param(self, BatchNorm.channels)

    def check_channels(self, shape: tuple[int, ...]) -> None:
        _check_count(self.channels, "BatchNorm channels (param 0)", shape)

    def load_model(self, mb: ModelBin) -> None:
        n = self.channels
        self.raw = tuple(np.asarray(mb.load(n, 1), np.float32) for _ in range(4))
        slope, mean, var, bias = self.raw
        with np.errstate(invalid="ignore"):  # a negative variance is NaN, as in ncnn
            sqrt_var = np.sqrt(var + np.float32(self.eps)).astype(np.float32)
        sqrt_var = np.where(sqrt_var == 0, np.float32(0.0001), sqrt_var)
        self.a = (bias - slope * mean / sqrt_var).astype(np.float32)
        self.b = (slope / sqrt_var).astype(np.float32)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        return [(_per_axis0(self.b, x) * x + _per_axis0(self.a, x)).astype(np.float32)]

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        slope, mean, var, bias = (np.asarray(a, np.float64) for a in self.raw)
        sqrt_var = np.sqrt(var + self.eps)
        return {
            "scale": (slope / sqrt_var).astype(np.float32),
            "bias": (bias - slope * mean / sqrt_var).astype(np.float32),
        }


@register_layer("Scale")
class Scale(_SameShape):
    """0 scale_data_size, 1 bias_term; -233 takes the scale from a second input blob."""

    scale_data_size = Param(0, int, 0, limit=MAX_CHANNELS)
    bias_term = Param(1, int, 0)
    scale: np.ndarray | None = None
    bias: np.ndarray | None = None

    def validate(self) -> None:
        _check_count_param(self, Scale.scale_data_size, allowed=-233)
        self.affine_bias = self.bias_term
        if self.scale_data_size == -233:
            self.one_blob_only = False  # type: ignore[misc]
            if self.bias_term:
                # ncnn loads no bias in this mode and would read an empty Mat
                raise ValueError("param 1 bias_term needs a fixed param 0 scale_data_size")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        """scale_data_size -233 takes the scale from a second input."""
        return ((2, 2) if self.scale_data_size == -233 else (1, 1)), (1, 1)

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        shape = tuple(input_shapes[0])
        if self.scale_data_size == -233:
            _check_count(math.prod(input_shapes[1]), "scale values (second input)", shape)
        else:
            _check_count(self.scale_data_size, "Scale values (param 0)", shape)
        return [shape]

    def load_model(self, mb: ModelBin) -> None:
        if self.scale_data_size == -233:
            return
        self.scale = np.asarray(mb.load(self.scale_data_size, 1), np.float32)
        if self.bias_term:
            self.bias = np.asarray(mb.load(self.scale_data_size, 1), np.float32)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        if self.scale_data_size == -233:
            scale = np.asarray(inputs[1], np.float32).reshape(-1)
        else:
            assert self.scale is not None
            scale = self.scale
        out = x * _per_axis0(scale, x)
        if self.bias is not None:
            out = out + _per_axis0(self.bias, x)
        return [out.astype(np.float32)]

    def supports(self, input_shapes: list[tuple[int, ...]]) -> bool:
        return self.scale_data_size != -233 and len(input_shapes) == 1

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        assert self.scale is not None
        bias = self.bias if self.bias is not None else np.zeros(1, np.float32)
        return {"scale": self.scale, "bias": bias}


@register_layer("Bias")
class Bias(_SameShape):
    """0 bias_data_size; adds bias[q] per Mat channel (dims 1/2 are one channel: bias[0])."""

    bias_data_size = Param(0, int, 0, limit=MAX_CHANNELS)
    bias = np.zeros(0, np.float32)

    def validate(self) -> None:
        _check_count_param(self, Bias.bias_data_size)

    def check_channels(self, shape: tuple[int, ...]) -> None:
        need = 1 if len(shape) <= 2 else shape[0]
        _check_count(self.bias_data_size, "Bias values (param 0)", shape, need)

    def load_model(self, mb: ModelBin) -> None:
        self.bias = np.asarray(mb.load(self.bias_data_size, 1), np.float32)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        if x.ndim <= 2:
            return [(x + self.bias[0]).astype(np.float32)]
        return [(x + _per_axis0(self.bias, x)).astype(np.float32)]

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        return {"scale": np.ones_like(self.bias), "bias": self.bias}


@register_layer("PReLU")
class PReLU(_SameShape):
    """0 num_slope; one slope per axis-0 index, or one shared slope when num_slope is 1."""

    num_slope = Param(0, int, 0, limit=MAX_CHANNELS)
    slope = np.zeros(0, np.float32)
    affine_mode = 1
    affine_bias = 0

    def validate(self) -> None:
        _check_count_param(self, PReLU.num_slope)
        if self.num_slope == 0:
            raise ValueError("PReLU param 0 (num_slope) = 0: needs at least one slope")

    def per_channel(self) -> int:
        return 1 if self.num_slope > 1 else 0

    def check_channels(self, shape: tuple[int, ...]) -> None:
        if self.num_slope > 1:
            _check_count(self.num_slope, "PReLU slopes (param 0)", shape)

    def load_model(self, mb: ModelBin) -> None:
        self.slope = np.asarray(mb.load(self.num_slope, 1), np.float32)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        slope = _per_axis0(self.slope, x) if self.num_slope > 1 else self.slope[0]
        return [np.where(x < 0, x * slope, x).astype(np.float32)]

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        return {"scale": self.slope, "bias": np.zeros(1, np.float32)}
