"""ncnn's int8 inference (``opt.use_int8_inference``, on by default in ncnn) for Convolution,
ConvolutionDepthWise and InnerProduct with param 8 ``int8_scale_term``, as fake quantization in
float: every quantized value is an integer-valued float.

What ncnn does (``src/layer/convolution.cpp`` ``forward_int8``, the x86 paths the wheel runs,
``src/mat.cpp``): the input is quantized with the layer's one bottom scale,
``q = float2int8(x * s)``; the int8 weights (stored int8, or stored fp32 and quantized at load
per output channel with the weight scales) and ``q`` are summed in int32; the sum is
dequantized, ``v = float(sum) * scale_in[p] + bias[p]`` with ``scale_in[p] = 1 / (s * ws[p])``
(0 where ``ws[p]`` is 0), then the fused activation. With ``int8_scale_term > 100``
(Convolution, ConvolutionDepthWise) the result is requantized, ``float2int8(v * top_scale)``,
and stays an int8 blob that the next int8 layer reads as it is.

Here a requantized output is kept dequantized, ``q / top_scale``, so every layer can read it;
an int8 layer quantizing it again with the same scale gets ``q`` back exactly, which is what
ncnn2int8 writes (a layer's top scale is its consumer's bottom scale). Where the two scales
differ, ncnn would read ``q`` unscaled and the results differ; so does the value a user
extracts from such a blob (ncnn returns ``q``).

The sums are exact on the CPU (float64); on the GPU (float32, the existing conv shaders) they
are exact while every partial sum stays under 2**24 in magnitude: always when the reduction
length (in_c / group * kernel_h * kernel_w, or num_input) is under 1040 (127 * 127 * 1040 is
about 2**24), and in practice far beyond that; a longer reduction of saturated inputs whose
weights all share a sign can round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..gpu._memory import Buffer
from ._base import ModelBin
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from .activation import fused_activation

INT8_MAX = 127
#: x86's float -> int32 conversion gives INT_MIN from here on (and for NaN): ncnn then
#: saturates to -127, not +127.
_INT32_LIMIT = np.float32(2.0**31)


def float2int8(v: np.ndarray) -> np.ndarray:
    """ncnn's x86 ``float2int8_sse``: round half away from zero as ``v + copysign(0.5, v)``
    in float32 then truncation, saturated to [-127, 127]; NaN, infinities and magnitudes of
    2**31 or more give -127, as the x86 conversion does. Integer-valued float32 out."""
    v = np.asarray(v, np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        rounded = np.trunc(v + np.copysign(np.float32(0.5), v))
        q = np.clip(rounded, -INT8_MAX, INT8_MAX).astype(np.float32)
        q[~(np.abs(v) < _INT32_LIMIT)] = -INT8_MAX
    return q


def quantize(x: np.ndarray, scale: np.float32) -> np.ndarray:
    """ncnn's Quantize with one scale: ``float2int8(x * scale)``, the product in float32."""
    with np.errstate(invalid="ignore", over="ignore"):
        return float2int8(np.asarray(x, np.float32) * np.float32(scale))


@dataclass(frozen=True)
class Int8Scales:
    """One int8 layer's scales: per output channel for the weights, one for the input, and
    the requantize scale where ``int8_scale_term > 100``."""

    weight: np.ndarray
    bottom: np.float32
    top: np.float32 | None

    @property
    def scale_in(self) -> np.ndarray:
        """``1 / (bottom * weight[p])`` in float32, 0 where the weight scale is 0 (ncnn)."""
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            inverse = np.float32(1.0) / (self.bottom * self.weight)
        return np.where(self.weight == 0, np.float32(0), inverse).astype(np.float32)


def read_scales(mb: ModelBin, weight_scales: int, per_channel: int, top: bool) -> Int8Scales:
    """Read ``weight_scales`` weight scales (each repeated ``per_channel`` times, for groups),
    the bottom scale, and the top scale when ``top``, in ncnn's order."""
    weight = np.asarray(mb.load(weight_scales, 1), np.float32)
    bottom = np.float32(np.asarray(mb.load(1, 1), np.float32)[0])
    top_scale = np.float32(np.asarray(mb.load(1, 1), np.float32)[0]) if top else None
    return Int8Scales(np.repeat(weight, per_channel), bottom, top_scale)


def quantize_weight(weight: np.ndarray, scales: Int8Scales) -> np.ndarray:
    """int8 weights as integer-valued float32: as stored, or fp32 quantized per output
    channel (row) with its weight scale, as ncnn's ``load_model`` does."""
    if weight.dtype == np.int8:
        return weight.astype(np.float32)
    rows = weight.reshape(scales.weight.size, -1)
    with np.errstate(invalid="ignore", over="ignore"):
        return float2int8(rows * scales.weight[:, None]).reshape(-1)


def dequantize(
    sums: np.ndarray,
    scales: Int8Scales,
    bias: np.ndarray | None,
    activation: tuple[int, Sequence[float]],
    channel_axis: int = 0,
) -> np.ndarray:
    """ncnn's int32 epilogue on exact integer ``sums``: ``float(sum) * scale_in + bias`` (one
    rounding, as x86's fused multiply-add), the activation, and with a top scale the
    requantize, kept dequantized (``q / top``; 0 where the top scale is 0)."""
    shape = [1] * sums.ndim
    shape[channel_axis] = -1
    scale_in = scales.scale_in.astype(np.float64).reshape(shape)
    with np.errstate(invalid="ignore", over="ignore"):
        v = sums.astype(np.float32).astype(np.float64) * scale_in
        if bias is not None:
            v = v + bias.astype(np.float64).reshape(shape)
        out = fused_activation(v.astype(np.float32), activation[0], activation[1])
        if scales.top is None:
            return out
        if scales.top == 0:
            return np.zeros_like(out)
        return (quantize(out, scales.top) / scales.top).astype(np.float32)


# -- GPU: a quantize pass before the float shader, the epilogue after it ------------------------


def pad_value(value: float) -> float:
    """A pad value as ncnn borders an int8 blob with it: ``static_cast<signed char>``."""
    return float(np.clip(np.trunc(value), -128, 127)) if np.isfinite(value) else 0.0


def pipeline_specs(
    target: GpuTarget, requantize: bool, bias: bool, act: tuple[int, float, float]
) -> dict[str, PipelineSpec]:
    """The two passes around the layer's own shader (run with no bias and no activation)."""
    local = local_size_1d(target.info)
    epilogue = (int(bias), act[0], float(act[1]), float(act[2]), int(requantize))
    return {
        "int8_quantize": PipelineSpec("int8_quantize", (), local),
        "int8_dequantize": PipelineSpec("int8_dequantize", epilogue, local),
    }


def gpu_weights(scales: Int8Scales, bias: np.ndarray | None) -> dict[str, np.ndarray]:
    """The epilogue's per-channel scale_in and bias (a dummy when there is none)."""
    return {
        "int8_scale_in": scales.scale_in,
        "int8_bias": bias if bias is not None else np.zeros(1, np.float32),
    }


def record(
    ctx: RecordContext,
    scales: Int8Scales,
    source: GpuBlob,
    output: GpuBlob,
    channels: int,
    run_float: Callable[[GpuBlob], None],
) -> None:
    """Quantize ``source`` into a scratch blob, let ``run_float`` compute the integer sums
    from it into ``output``, then dequantize (and requantize) ``output`` in place."""
    local = local_size_1d(ctx.info)
    quantized = GpuBlob(ctx.scratch(4 * source.size), source.shape)
    push = pack_push("if", source.size, float(scales.bottom))
    groups = groups_1d(source.size, local, ctx.info)
    ctx.dispatch("int8_quantize", [source, quantized], push, groups)
    ctx.barrier()
    run_float(quantized)
    ctx.barrier()
    top = float(scales.top) if scales.top is not None else 0.0
    push = pack_push("iif", output.size, output.size // channels, top)
    bindings: list[Buffer | GpuBlob] = [
        output,
        ctx.weight("int8_scale_in"),
        ctx.weight("int8_bias"),
    ]
    ctx.dispatch("int8_dequantize", bindings, push, groups_1d(output.size, local, ctx.info))
