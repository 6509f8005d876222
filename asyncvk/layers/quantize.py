"""Quantize, Dequantize and Requantize: ncnn's stand-alone int8 conversions
(src/layer/quantize.cpp, dequantize.cpp, requantize.cpp), on the GPU through
``shaders/quantize_layers.comp``.

Integer blobs. asyncvk's blobs are float32, where ncnn's Quantize and Requantize give an int8
Mat and its Dequantize and Requantize read an int32 Mat. Here an integer blob is a float32 blob
that holds the integer values exactly: Quantize and Requantize give -127..127, the values ncnn's
extractor returns for an int8 blob (it converts one to float32), and Dequantize and Requantize
read each value as the integer it holds, exact to 2**24 (a larger int32 becomes float32 with the
same rounding as ncnn's conversion; to 2048 with fp16 storage). So an int32 blob ncnn is given
is a float32 blob of the same values here, and Quantize -> Dequantize computes
``q * scale + bias`` from the quantized values.

Where this differs from ncnn, on purpose or of necessity:

- ncnn's Dequantize and Requantize read their input's bytes as int32 whatever it is. After a
  Quantize (an int8 Mat) that reads past the blob: the wheel gives garbage. Here they read the
  values, so the chain means what it says. After a float layer ncnn reads the float's bits.
- an int8 Convolution or InnerProduct after a Quantize: ncnn takes the int8 values as they are;
  asyncvk's int8 layers quantize their input with their own bottom scale (``_int8``), which
  gives back the same values only for a bottom scale of 1.
- ncnn's x86 Requantize reads only the first of each 4 per-channel scales where it packs 4
  channels (a channel count divisible by 4 but not 8, on AVX machines); here every channel has
  its own, as in ncnn's reference ``requantize.cpp`` and with ``use_packing_layout`` off.

Rounding is ncnn's x86 ``float2int8`` (``_int8.float2int8``: half away from zero, saturated to
[-127, 127], NaN to -127). Scales and biases are per row of a 2-D blob and per channel of a 3-D
or 4-D one (1 value: shared); a 1-D blob uses the first, as ncnn does. ``x * scale + bias`` is
one rounding, as x86's fused multiply-add (on the CPU through float64, as ``_int8`` does).
"""

from __future__ import annotations

import numpy as np

from ..gpu._memory import Buffer
from ._base import Layer, ModelBin, Shape
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._int8 import float2int8
from ._limits import MAX_CHANNELS
from ._registry import register_layer
from ._schema import Param, floats
from .activation import _ACTIVATION_NPARAMS, fused_activation, gpu_activation

_QUANTIZE, _DEQUANTIZE, _REQUANTIZE = 0, 1, 2
#: ``quantize_layers.comp``'s unused scale and bias bindings get this.
_DUMMY = np.zeros(1, np.float32)
_WEIGHTS = ("scale_in", "bias", "scale_out")


def _per_channel(values: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``values`` (1 or one per channel) shaped to broadcast over ``x``: per row of a 2-D
    blob, per channel of a 3-D or 4-D one; a 1-D blob takes the first (ncnn's ``[0]``)."""
    if values.size == 1 or x.ndim == 1:
        return values[:1].reshape((1,) * x.ndim)
    return values.reshape((-1,) + (1,) * (x.ndim - 1))


def _fused(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """float32 ``x * scale + bias`` rounded once (x86's fused multiply-add), or the product."""
    if bias is None:
        return (x * scale).astype(np.float32)
    return (x.astype(np.float64) * scale + bias.astype(np.float64)).astype(np.float32)


class _IntegerConversion(Layer):
    """What the three share: per-channel data checked against the blob, one GPU dispatch."""

    gpu = True
    mode = _QUANTIZE

    def data_sizes(self) -> tuple[tuple[int, str, int], ...]:
        """(param id, name, size) of each per-channel array, in file order."""
        raise NotImplementedError

    def validate(self) -> None:
        for pid, name, size in self.data_sizes():
            least = 0 if name == "bias_data_size" else 1
            if not least <= size <= MAX_CHANNELS:
                raise ValueError(
                    f"{self.type_name} param {pid} ({name}) = {size}: must be "
                    f"{least}..{MAX_CHANNELS}"
                )

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        if len(shape) >= 2:
            for pid, name, size in self.data_sizes():
                if size > 1 and size != shape[0]:
                    unit = "rows" if len(shape) == 2 else "channels"
                    raise ValueError(
                        f"{self.type_name}: param {pid} {name}={size} fits neither 1 nor the "
                        f"{shape[0]} {unit} of {shape}"
                    )
        return [shape]

    # -- GPU ---------------------------------------------------------------------------------

    def activation(self) -> tuple[int, float, float]:
        return (0, 0.0, 0.0)

    def gpu_arrays(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """(scale in, bias, scale out): the weights ``quantize_layers.comp`` reads."""
        raise NotImplementedError

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        bias = self.gpu_arrays()[1]
        act, a, b = self.activation()
        consts = (self.mode, int(bias is not None), act, float(a), float(b))
        local = local_size_1d(target.info)
        return {"convert": PipelineSpec("quantize_layers", consts, local)}

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        arrays = zip(_WEIGHTS, self.gpu_arrays(), strict=True)
        return {name: _DUMMY if a is None else a for name, a in arrays}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        x, n = inputs[0], inputs[0].size
        plane = n if len(x.shape) == 1 else n // x.shape[0]
        steps = [int(a is not None and a.size > 1) for a in self.gpu_arrays()]
        push = pack_push("iiiii", n, plane, *steps)
        bufs: list[Buffer | GpuBlob] = [x, outputs[0]]
        bufs += [ctx.weight(name) for name in _WEIGHTS]
        ctx.dispatch("convert", bufs, push, groups_1d(n, local_size_1d(ctx.info), ctx.info))


@register_layer("Quantize")
class Quantize(_IntegerConversion):
    """0 scale_data_size(1): ``float2int8(x * scale)``, integer values -127..127 out."""

    scale_data_size = Param(0, int, 1)
    scale_data: np.ndarray = _DUMMY

    def data_sizes(self) -> tuple[tuple[int, str, int], ...]:
        return ((0, "scale_data_size", self.scale_data_size),)

    def load_model(self, mb: ModelBin) -> None:
        self.scale_data = mb.load(self.scale_data_size, 1)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            return [float2int8(x * _per_channel(self.scale_data, x))]

    def gpu_arrays(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        return self.scale_data, None, None


@register_layer("Dequantize")
class Dequantize(_IntegerConversion):
    """0 scale_data_size(1), 1 bias_data_size(0): ``x * scale + bias`` of an integer blob."""

    scale_data_size = Param(0, int, 1)
    bias_data_size = Param(1, int, 0)
    mode = _DEQUANTIZE
    scale_data: np.ndarray = _DUMMY
    bias_data: np.ndarray | None = None

    def data_sizes(self) -> tuple[tuple[int, str, int], ...]:
        return (
            (0, "scale_data_size", self.scale_data_size),
            (1, "bias_data_size", self.bias_data_size),
        )

    def load_model(self, mb: ModelBin) -> None:
        self.scale_data = mb.load(self.scale_data_size, 1)
        self.bias_data = mb.load(self.bias_data_size, 1) if self.bias_data_size else None

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        bias = None if self.bias_data is None else _per_channel(self.bias_data, x)
        with np.errstate(over="ignore", invalid="ignore"):
            return [_fused(x, _per_channel(self.scale_data, x), bias)]

    def gpu_arrays(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        return self.scale_data, self.bias_data, None


@register_layer("Requantize")
class Requantize(_IntegerConversion):
    """0 scale_in_data_size(1), 1 scale_out_data_size(1), 2 bias_data_size(0),
    3 activation_type(0), 4 activation_params: ``float2int8(act(x * scale_in + bias) *
    scale_out)`` of an integer blob, integer values -127..127 out."""

    scale_in_data_size = Param(0, int, 1)
    scale_out_data_size = Param(1, int, 1)
    bias_data_size = Param(2, int, 0)
    activation_type = Param(3, int, 0)
    activation_params = Param(4, floats)
    mode = _REQUANTIZE
    scale_in_data: np.ndarray = _DUMMY
    scale_out_data: np.ndarray = _DUMMY
    bias_data: np.ndarray | None = None

    def data_sizes(self) -> tuple[tuple[int, str, int], ...]:
        return (
            (0, "scale_in_data_size", self.scale_in_data_size),
            (1, "scale_out_data_size", self.scale_out_data_size),
            (2, "bias_data_size", self.bias_data_size),
        )

    def validate(self) -> None:
        super().validate()
        kind, values = self.activation_type, self.activation_params
        if kind not in _ACTIVATION_NPARAMS:
            raise ValueError(f"Requantize param 3 activation_type={kind} is not supported (0..6)")
        if len(values) < _ACTIVATION_NPARAMS[kind]:
            raise ValueError(
                f"Requantize param 4 activation_params needs {_ACTIVATION_NPARAMS[kind]} values "
                f"for activation_type {kind}, got {len(values)}"
            )

    def load_model(self, mb: ModelBin) -> None:
        self.scale_in_data = mb.load(self.scale_in_data_size, 1)
        self.scale_out_data = mb.load(self.scale_out_data_size, 1)
        self.bias_data = mb.load(self.bias_data_size, 1) if self.bias_data_size else None

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        bias = None if self.bias_data is None else _per_channel(self.bias_data, x)
        with np.errstate(over="ignore", invalid="ignore"):
            v = _fused(x, _per_channel(self.scale_in_data, x), bias)
            v = fused_activation(v, self.activation_type, self.activation_params)
            return [float2int8(v * _per_channel(self.scale_out_data, x))]

    def activation(self) -> tuple[int, float, float]:
        return gpu_activation(self.activation_type, self.activation_params)

    def gpu_arrays(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        return self.scale_in_data, self.bias_data, self.scale_out_data
