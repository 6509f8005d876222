"""InnerProduct: a matrix-vector product (or a gemm over rows) in numpy, and
``innerproduct.comp`` on the GPU for inputs it flattens."""

from __future__ import annotations

import math

import numpy as np

from ..gpu._info import GpuInfo
from . import _int8
from ._base import Layer, ModelBin, Shape
from ._conv_shaders import pack_tiled
from ._device_choice import FLAT_LOCAL
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    blobs_and_weights,
    capped_groups,
    fold_groups,
    pack_push,
)
from ._limits import MAX_BLOB_ELEMENTS, MAX_CHANNELS
from ._registry import register_layer
from ._schema import Param, floats
from .activation import fused_activation, gpu_activation, validate_activation

# Where the device's choices say (innerproduct_flat: "cpu" devices; elsewhere a workgroup per
# output, reduced in shared memory), float layers run innerproduct_blocked.comp (8 outputs per
# invocation, weights repacked for it), int8 layers innerproduct.comp with one output per
# invocation.
#: outputs per invocation of innerproduct_blocked.comp
BLOCK = 8


@register_layer("InnerProduct")
class InnerProduct(Layer):
    """0 num_output, 1 bias_term, 2 weight_data_size, 8 int8_scale_term, 9/10 activation.

    A dims-2 blob whose width is num_input is a batch of rows (gemm); anything else is
    flattened whole and gives a 1-D blob. With param 8 set the layer runs int8 (``_int8``):
    ncnn's InnerProduct never requantizes, so values over 100 act as 1.
    """

    num_output = Param(0, int, 0, limit=MAX_CHANNELS)
    bias_term = Param(1, int, 0)
    weight_data_size = Param(2, int, 0, limit=MAX_BLOB_ELEMENTS)
    int8_scale_term = Param(8, int, 0)
    activation_type = Param(9, int, 0)
    activation_params = Param(10, floats)

    gpu = True
    weight = np.zeros((0, 0), np.float32)
    bias: np.ndarray | None = None
    int8: _int8.Int8Scales | None = None

    def validate(self) -> None:
        validate_activation(self.activation_type, self.activation_params)
        if self.weight_data_size <= 0:
            raise ValueError(f"param 2 weight_data_size={self.weight_data_size} must be > 0")
        if self.num_output <= 0 or self.weight_data_size % self.num_output:
            raise ValueError(
                f"param 0 num_output={self.num_output} must be > 0 and divide "
                f"param 2 weight_data_size={self.weight_data_size}"
            )

    @property
    def num_input(self) -> int:
        return self.weight_data_size // self.num_output

    def load_model(self, mb: ModelBin) -> None:
        if self.int8_scale_term:
            w = mb.load_int8_or_float(self.weight_data_size)
        else:
            w = np.asarray(mb.load(self.weight_data_size, 0), np.float32)
        self.bias = np.asarray(mb.load(self.num_output, 1), np.float32) if self.bias_term else None
        if self.int8_scale_term:
            self.int8 = _int8.read_scales(mb, self.num_output, 1, top=False)
            w = _int8.quantize_weight(w, self.int8)
        self.weight = w.reshape(self.num_output, self.num_input)

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        shape = tuple(input_shapes[0])
        if len(shape) == 2 and shape[1] == self.num_input:
            return [(shape[0], self.num_output)]
        if int(np.prod(shape)) != self.num_input:
            raise ValueError(f"input {shape} does not flatten to num_input {self.num_input}")
        return [(self.num_output,)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        self.output_shapes([x.shape])
        if self.int8 is not None:
            return [self._forward_int8(x, self.int8)]
        if x.ndim == 2 and x.shape[1] == self.num_input:
            out = x @ self.weight.T
            if self.bias is not None:
                out = out + self.bias
        else:
            out = self.weight @ x.reshape(-1)
            if self.bias is not None:
                out = out + self.bias
        return [fused_activation(out, self.activation_type, self.activation_params)]

    def _forward_int8(self, x: np.ndarray, scales: _int8.Int8Scales) -> np.ndarray:
        """Exact integer sums in float64 (ncnn's int32), then the int8 epilogue."""
        q = _int8.quantize(x, scales.bottom).astype(np.float64)
        weight = self.weight.astype(np.float64)
        act = (self.activation_type, self.activation_params)
        if x.ndim == 2 and x.shape[1] == self.num_input:
            return _int8.dequantize(q @ weight.T, scales, self.bias, act, channel_axis=1)
        return _int8.dequantize(weight @ q.reshape(-1), scales, self.bias, act)

    # -- GPU -------------------------------------------------------------------------------

    def supports(self, input_shapes: list[Shape]) -> bool:
        # ncnn applies InnerProduct per row for 2-D input; the GPU path flattens only.
        return len(input_shapes) == 1 and len(input_shapes[0]) != 2

    def _blocked(self, info: GpuInfo) -> bool:
        """Whether this layer runs innerproduct_blocked.comp (float layers, CPU devices)."""
        return not self.int8_scale_term and info.takes(info.choices.innerproduct_flat)

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        bias = self.bias if self.bias is not None else np.zeros(1, np.float32)
        if self._blocked(target.info):  # [n_out / 8][n_in][8]: the tiled convolution's 1x1 layout
            return {"weight": pack_tiled(self.weight, self.num_output, 1), "bias": bias}
        if self.int8 is None:
            return {"weight": self.weight, "bias": bias}
        dummy = np.zeros(1, np.float32)
        return {"weight": self.weight, "bias": dummy, **_int8.gpu_weights(self.int8, self.bias)}

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        act = gpu_activation(self.activation_type, self.activation_params)
        flat = target.info.takes(target.info.choices.innerproduct_flat)
        local = FLAT_LOCAL if flat else (64, 1, 1)
        float_spec = (self.bias_term, act[0], float(act[1]), float(act[2]))
        if self._blocked(target.info):
            return {"ip": PipelineSpec("innerproduct_blocked", float_spec, FLAT_LOCAL)}
        if not self.int8_scale_term:
            return {"ip": PipelineSpec("innerproduct", (*float_spec, int(flat)), local)}
        # the float pass gives the integer sums; the int8 epilogue adds bias and activation
        epilogue = _int8.pipeline_specs(target, False, bool(self.bias_term), act)
        return {"ip": PipelineSpec("innerproduct", (0, 0, 0.0, 0.0, int(flat)), local), **epilogue}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        def multiply(source: GpuBlob) -> None:
            push = pack_push("2i", source.size, self.num_output)
            bindings = blobs_and_weights(ctx, [source], outputs)
            spec = ctx.spec("ip")  # as chosen at load: blocked, or flat (its last constant)
            blocked = spec.shader == "innerproduct_blocked"
            if blocked or spec.specializations[-1]:
                per_invocation = BLOCK if blocked else 1
                invocations = math.ceil(self.num_output / per_invocation)
                wanted = (math.ceil(invocations / FLAT_LOCAL[0]), 1, 1)
                ctx.dispatch("ip", bindings, push, capped_groups(wanted, ctx.info))
            else:
                ctx.dispatch("ip", bindings, push, fold_groups(self.num_output, ctx.info))

        if self.int8 is None:
            multiply(inputs[0])
        else:
            _int8.record(ctx, self.int8, inputs[0], outputs[0], self.num_output, multiply)
