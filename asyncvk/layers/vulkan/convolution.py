"""Convolution-family GPU layers: Convolution, ConvolutionDepthWise, Deconvolution,
DeconvolutionDepthWise (``convolution.comp`` / ``deconvolution.comp``) and InnerProduct."""

from __future__ import annotations

import math

import numpy as np

from .._vulkan import GpuBlob, PipelineSpec, RecordContext, VulkanLayer, pack_push
from .._vulkan import vulkan_layer as register

_LOCAL_2D = (8, 8, 1)
_TILE_OC = 8  # output channels per invocation in convolution_tiled.comp
_TILE_OX = 4  # output columns per invocation in convolution_tiled.comp
#: Where ungrouped convolutions use convolution_tiled.comp: "cpu" devices only (measured:
#: 4-8x faster on lavapipe, where every per-lane load is a scalar loop; 1.5-9x slower on an
#: H100, which wants one invocation per output for occupancy), "always" or "never" (benchmarks).
TILED_SHADER = "cpu"
_FLT_MAX = 3.402823466e38


def _activation(params: object) -> tuple[int, float, float]:
    """ncnn activation_type 9 and its params 10 as (type, a, b) for ``activation.h``."""
    pd = params
    kind = pd.get_int(9, 0)  # type: ignore[attr-defined]
    values = pd.get_floats(10, ())  # type: ignore[attr-defined]
    if kind == 2:
        return (2, values[0] if values else 0.0, 0.0)
    if kind == 3:
        lo = values[0] if len(values) > 0 else -_FLT_MAX
        hi = values[1] if len(values) > 1 else _FLT_MAX
        return (3, lo, hi)
    if kind == 6:
        return (6, values[0] if values else 0.2, values[1] if len(values) > 1 else 0.5)
    if kind not in (0, 1, 4, 5):
        raise ValueError(f"activation_type {kind} is not supported")
    return (kind, 0.0, 0.0)


def _same_pad(size: int, kernel: int, dilation: int, stride: int, mode: int) -> tuple[int, int]:
    """ncnn's SAME_UPPER (-233) / SAME_LOWER (-234) split of the total padding."""
    extent = dilation * (kernel - 1) + 1
    # ncnn: wpad = kernel_extent_w + (w - 1) / stride_w * stride_w - w
    total = max(extent + (size - 1) // stride * stride - size, 0)
    if mode == -233:
        return (total // 2, total - total // 2)
    return (total - total // 2, total // 2)


class _ConvBase(VulkanLayer):
    depthwise = False

    def setup(self) -> None:
        pd = self.params
        self.num_output = pd.get_int(0, 0)
        self.kernel_w = pd.get_int(1, 0)
        self.kernel_h = pd.get_int(11, self.kernel_w)
        self.dilation_w = pd.get_int(2, 1)
        self.dilation_h = pd.get_int(12, self.dilation_w)
        self.stride_w = pd.get_int(3, 1)
        self.stride_h = pd.get_int(13, self.stride_w)
        self.pad_left = pd.get_int(4, 0)
        self.pad_right = pd.get_int(15, self.pad_left)
        self.pad_top = pd.get_int(14, self.pad_left)
        self.pad_bottom = pd.get_int(16, self.pad_top)
        self.pad_value = pd.get_float(18, 0.0)
        self.bias_term = pd.get_int(5, 0)
        self.group = pd.get_int(7, 1) if self.depthwise else 1
        self.act = _activation(pd)
        if pd.get_int(8, 0):
            raise ValueError("int8 quantized convolution is not supported")

    def _pads(self, w: int, h: int) -> tuple[int, int]:
        left, top = self.pad_left, self.pad_top
        if left in (-233, -234):
            left = _same_pad(w, self.kernel_w, self.dilation_w, self.stride_w, left)[0]
        if top in (-233, -234):
            top = _same_pad(h, self.kernel_h, self.dilation_h, self.stride_h, top)[0]
        elif self.pad_left in (-233, -234):
            top = _same_pad(h, self.kernel_h, self.dilation_h, self.stride_h, self.pad_left)[0]
        return left, top

    def _specs(self) -> tuple[int | float, ...]:
        return (
            self.kernel_w,
            self.kernel_h,
            self.dilation_w,
            self.dilation_h,
            self.stride_w,
            self.stride_h,
            self.group,
            self.bias_term,
            self.act[0],
            float(self.act[1]),
            float(self.act[2]),
        )

    def supports(self, input_shapes: list[tuple[int, ...]]) -> bool:  # type: ignore[override]
        return len(input_shapes) == 1 and len(input_shapes[0]) == 3

    def weights(self) -> dict[str, np.ndarray]:
        weight = self.weight_data[0]
        bias = self.weight_data[1] if self.bias_term else np.zeros(1, np.float32)
        return {"weight": self._arrange(weight), "bias": bias}

    def _arrange(self, weight: np.ndarray) -> np.ndarray:
        return weight


@register("Convolution")
class Convolution(_ConvBase):
    """On CPU devices ungrouped convolutions run ``convolution_tiled.comp`` (8 channels x 4
    columns per invocation, weights repacked for it); otherwise ``convolution.comp``, one output
    per invocation."""

    def _tiled(self) -> bool:
        if self.group != 1 or TILED_SHADER == "never":
            return False
        return TILED_SHADER == "always" or self.info.is_cpu

    def _shader(self) -> tuple[str, int, int]:
        """The shader, and the output columns and channels one invocation computes."""
        if self._tiled():
            return ("convolution_tiled", _TILE_OX, _TILE_OC)
        return ("convolution", 1, 1)

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        shader = self._shader()[0]
        specs = (*self._specs(), self.pad_value)
        if shader != "convolution":
            specs = specs[:6] + specs[7:]  # only convolution.comp has the group constant (id 6)
        return {"conv": PipelineSpec(shader, specs, _LOCAL_2D)}

    def _arrange(self, weight: np.ndarray) -> np.ndarray:
        if not self._tiled():
            return weight
        maxk = self.kernel_w * self.kernel_h
        out_c = self.num_output
        in_c = weight.size // (out_c * maxk)
        padded = -(-out_c // _TILE_OC) * _TILE_OC
        packed = np.zeros((padded, in_c, maxk), np.float32)
        packed[:out_c] = weight.reshape(out_c, in_c, maxk)
        # [out_c / 8][in_c][maxk][8]: the 8 channels of one tap are two consecutive vec4
        blocks = packed.reshape(padded // _TILE_OC, _TILE_OC, in_c, maxk).transpose(0, 2, 3, 1)
        return np.ascontiguousarray(blocks).reshape(-1)

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, h, w = inputs[0].shape
        oc, oh, ow = outputs[0].shape
        left, top = self._pads(w, h)
        push = pack_push("8i", w, h, c, ow, oh, oc, left, top)
        _, cols, chans = self._shader()
        groups = (math.ceil(ow / (cols * 8)), math.ceil(oh / 8), math.ceil(oc / chans))
        ctx.dispatch(
            "conv", [inputs[0], outputs[0], ctx.weight("weight"), ctx.weight("bias")], push, groups
        )


@register("ConvolutionDepthWise")
class ConvolutionDepthWise(Convolution):
    """Pure depthwise layers (group == in_c == out_c) run ``convolutiondepthwise.comp``, which
    has no group constant, so every channel count shares one pipeline; other groupings run
    ``convolution.comp`` (or the tiled shader when group == 1)."""

    depthwise = True

    def _shader(self) -> tuple[str, int, int]:
        maxk = self.kernel_w * self.kernel_h
        one_input_per_group = self.params.get_int(6, 0) == self.num_output * maxk
        if self.group > 1 and self.num_output == self.group and one_input_per_group:
            return ("convolutiondepthwise", 4, 1)
        return super()._shader()


@register("Deconvolution")
class Deconvolution(_ConvBase):
    def setup(self) -> None:
        super().setup()
        pd = self.params
        self.output_pad_right = pd.get_int(18, 0)
        self.output_pad_bottom = pd.get_int(19, self.output_pad_right)
        self.output_w = pd.get_int(20, 0)
        self.output_h = pd.get_int(21, self.output_w)

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        return {"deconv": PipelineSpec("deconvolution", self._specs(), _LOCAL_2D)}

    def _crop(self, w: int, h: int, ow: int, oh: int) -> tuple[int, int]:
        full_w = (w - 1) * self.stride_w + self.dilation_w * (self.kernel_w - 1) + 1
        full_h = (h - 1) * self.stride_h + self.dilation_h * (self.kernel_h - 1) + 1
        full_w += self.output_pad_right
        full_h += self.output_pad_bottom
        if max(self.pad_left, self.pad_right, self.pad_top, self.pad_bottom) > 0:
            return (self.pad_left, self.pad_top)
        if self.output_w > 0 or self.pad_left in (-233, -234):
            total_w, total_h = full_w - ow, full_h - oh
            if self.pad_left == -234:
                return (total_w - total_w // 2, total_h - total_h // 2)
            return (total_w // 2, total_h // 2)
        return (0, 0)

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, h, w = inputs[0].shape
        oc, oh, ow = outputs[0].shape
        left, top = self._crop(w, h, ow, oh)
        push = pack_push("8i", w, h, c, ow, oh, oc, left, top)
        groups = (math.ceil(ow / 8), math.ceil(oh / 8), oc)
        ctx.dispatch(
            "deconv",
            [inputs[0], outputs[0], ctx.weight("weight"), ctx.weight("bias")],
            push,
            groups,
        )


@register("DeconvolutionDepthWise")
class DeconvolutionDepthWise(Deconvolution):
    depthwise = True


@register("InnerProduct")
class InnerProduct(VulkanLayer):
    def setup(self) -> None:
        pd = self.params
        self.num_output = pd.get_int(0, 0)
        self.bias_term = pd.get_int(1, 0)
        self.act = _activation(pd)
        if pd.get_int(8, 0):
            raise ValueError("int8 quantized InnerProduct is not supported")

    def supports(self, input_shapes: list[tuple[int, ...]]) -> bool:  # type: ignore[override]
        # ncnn applies InnerProduct per row for 2-D input; the GPU path flattens only.
        return len(input_shapes) == 1 and len(input_shapes[0]) != 2

    def weights(self) -> dict[str, np.ndarray]:
        bias = self.weight_data[1] if self.bias_term else np.zeros(1, np.float32)
        return {"weight": self.weight_data[0], "bias": bias}

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        spec = (self.bias_term, self.act[0], float(self.act[1]), float(self.act[2]))
        return {"ip": PipelineSpec("innerproduct", spec, (64, 1, 1))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        n_in = inputs[0].size
        push = pack_push("2i", n_in, self.num_output)
        ctx.dispatch(
            "ip",
            [inputs[0], outputs[0], ctx.weight("weight"), ctx.weight("bias")],
            push,
            (self.num_output, 1, 1),
        )
