"""ConvParams: what the Convolution family shares (ncnn's convolution.cpp param ids, the
weights, the GPU specialization constants of ``convolution.comp`` and ``deconvolution.comp``),
apart from the Convolution types so that Deconvolution builds on it too.

Weights keep ncnn's order: (num_output, num_input / group, kernel_h, kernel_w), flattened.
"""

from __future__ import annotations

import numpy as np

from ..gpu._info import GpuInfo
from . import _int8
from ._base import Layer, ModelBin, Shape
from ._geometry import check_pads
from ._gpu_api import GpuTarget
from ._limits import MAX_BLOB_ELEMENTS, MAX_CHANNELS, MAX_KERNEL, MAX_PAD, MAX_STRIDE
from ._schema import Param, floats
from .activation import fused_activation, gpu_activation, validate_activation


class ConvParams(Layer):
    """The param ids shared by the Convolution family (ncnn's convolution.cpp), its weights,
    and the GPU side common to ``convolution.comp`` and ``deconvolution.comp``."""

    num_output = Param(0, int, 0, limit=MAX_CHANNELS)
    kernel_w = Param(1, int, 0, limit=MAX_KERNEL)
    kernel_h = Param(11, int, kernel_w, limit=MAX_KERNEL)
    dilation_w = Param(2, int, 1, limit=MAX_STRIDE)
    dilation_h = Param(12, int, dilation_w, limit=MAX_STRIDE)
    stride_w = Param(3, int, 1, limit=MAX_STRIDE)
    stride_h = Param(13, int, stride_w, limit=MAX_STRIDE)
    pad_left = Param(4, int, 0, limit=MAX_PAD)
    pad_right = Param(15, int, pad_left, limit=MAX_PAD)
    pad_top = Param(14, int, pad_left, limit=MAX_PAD)
    pad_bottom = Param(16, int, pad_top, limit=MAX_PAD)
    bias_term = Param(5, int, 0)
    weight_data_size = Param(6, int, 0, limit=MAX_BLOB_ELEMENTS)
    activation_type = Param(9, int, 0)
    activation_params = Param(10, floats)
    #: ncnn's plain types read no group (param 7); the DepthWise types declare it.
    group = 1

    gpu = True
    weight = np.zeros(0, np.float32)
    bias: np.ndarray | None = None
    #: The scales of an int8 layer (its weight then holds integer values); see ``_int8``.
    int8: _int8.Int8Scales | None = None

    def validate(self) -> None:
        validate_activation(self.activation_type, self.activation_params)
        if self.num_output <= 0:
            raise ValueError(f"param 0 num_output={self.num_output} must be > 0")
        if self.kernel_w <= 0 or self.kernel_h <= 0:
            raise ValueError(f"params 1/11 kernel {self.kernel_w}x{self.kernel_h} must be > 0")
        if min(self.dilation_w, self.dilation_h, self.stride_w, self.stride_h) <= 0:
            raise ValueError("params 2/12 dilation and 3/13 stride must be > 0")
        if self.group <= 0 or self.num_output % self.group:
            raise ValueError(f"param 7 group={self.group} must divide num_output")
        check_pads(self.pads)
        # every layout of the family holds num_output x (some channels) x kernel_h x kernel_w
        per_channel = self.num_output * self.maxk
        if self.weight_data_size <= 0 or self.weight_data_size % per_channel:
            raise ValueError(
                f"param 6 weight_data_size={self.weight_data_size} is not a positive multiple "
                f"of num_output x kernel_w x kernel_h = {per_channel}"
            )

    @property
    def pads(self) -> tuple[int, int, int, int]:
        return self.pad_left, self.pad_right, self.pad_top, self.pad_bottom

    @property
    def maxk(self) -> int:
        return self.kernel_w * self.kernel_h

    @property
    def taps(self) -> int:
        """Multiply-adds per output: input channels per group x kernel area."""
        return self.weight_data_size // max(1, self.num_output)

    @property
    def kernel_extent(self) -> tuple[int, int]:
        """(extent_h, extent_w): the span a dilated kernel covers."""
        return (
            self.dilation_h * (self.kernel_h - 1) + 1,
            self.dilation_w * (self.kernel_w - 1) + 1,
        )

    def load_model(self, mb: ModelBin) -> None:
        self.weight = np.asarray(mb.load(self.weight_data_size, 0), np.float32)
        self.bias = np.asarray(mb.load(self.num_output, 1), np.float32) if self.bias_term else None

    def _inch_g(self, channels: int) -> int:
        """Input channels per group, checked against the weight size."""
        if channels % self.group:
            raise ValueError(f"{channels} input channels do not split into {self.group} groups")
        inch_g = channels // self.group
        if self.num_output * inch_g * self.maxk != self.weight_data_size:
            expected = self.weight_data_size // max(1, self.num_output * self.maxk) * self.group
            raise ValueError(
                f"expects {expected} input channels, got {channels} (weight_data_size "
                f"{self.weight_data_size}, num_output {self.num_output}, group {self.group}, "
                f"kernel {self.kernel_h}x{self.kernel_w})"
            )
        return inch_g

    def _finish(self, out: np.ndarray) -> np.ndarray:
        """Bias per output channel (axis 0), then the fused activation."""
        if self.bias is not None:
            out = out + self.bias.reshape((-1,) + (1,) * (out.ndim - 1))
        return fused_activation(out, self.activation_type, self.activation_params)

    # -- GPU -------------------------------------------------------------------------------

    def gpu_specs(self) -> tuple[int | float, ...]:
        """The specialization constants convolution.comp and deconvolution.comp share (an
        int8 layer's float pass has no bias and no activation: its epilogue applies them)."""
        act = gpu_activation(self.activation_type, self.activation_params)
        bias_term = self.bias_term
        if self.int8_requested:
            act, bias_term = (0, 0.0, 0.0), 0
        return (
            self.kernel_w,
            self.kernel_h,
            self.dilation_w,
            self.dilation_h,
            self.stride_w,
            self.stride_h,
            self.group,
            bias_term,
            act[0],
            float(act[1]),
            float(act[2]),
        )

    def supports(self, input_shapes: list[Shape]) -> bool:
        return len(input_shapes) == 1 and len(input_shapes[0]) == 3

    @property
    def int8_requested(self) -> bool:
        """Whether params make this an int8 layer (only Convolution types read param 8)."""
        return False

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        bias = self.bias if self.bias is not None else np.zeros(1, np.float32)
        weights = {"weight": self.arrange(self.weight, target.info), "bias": bias}
        if self.int8 is not None:
            weights["bias"] = np.zeros(1, np.float32)
            weights.update(_int8.gpu_weights(self.int8, self.bias))
        return weights

    def arrange(self, weight: np.ndarray, info: GpuInfo) -> np.ndarray:
        """The weights in the layout the shader reads."""
        return weight
