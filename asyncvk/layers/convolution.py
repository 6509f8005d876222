"""Convolution and ConvolutionDepthWise: numpy im2col plus one batched matmul over the groups;
on the GPU ``convolution.comp``, the tiled variant on CPU devices, and
``convolutiondepthwise.comp``. The family's shared params are ``_conv_params``' ConvParams (the
Deconvolution types build on it too); which shader a layer runs is ``_conv_shader_choice``'s.

Weights keep ncnn's order: (num_output, num_input / group, kernel_h, kernel_w), flattened.
"""

from __future__ import annotations

import math

import numpy as np

from ..gpu._info import GpuInfo
from ..gpu._memory import Buffer
from . import _conv_shaders, _int8
from ._base import ModelBin
from ._conv_params import ConvParams as ConvParams  # deconvolution's base, imported from here
from ._conv_shader_choice import _GEMM_KEYS, _WINOGRAD_KEYS, ConvShaderChoice
from ._geometry import (
    SAME_LOWER,
    SAME_UPPER,
    as_chw,
    border,
    chw_shape,
    im2col,
    same_pad_lead,
    same_pads,
)
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    blobs_and_weights,
    capped_groups,
    pack_push,
)
from ._limits import MAX_CHANNELS
from ._registry import register_layer
from ._schema import Param
from .activation import gpu_activation

#: im2col columns made at once (elements): a large input is convolved in bands of rows.
IM2COL_BUDGET = 1 << 24
_LOCAL_2D = (8, 8, 1)


@register_layer("Convolution")
class Convolution(ConvShaderChoice):
    """ncnn Convolution: params 0-6, 8-16, 18, 19; weights (out, in, kh, kw) then bias.

    On CPU devices convolutions run ``convolution_tiled.comp`` (8 channels of a group x 8
    columns per invocation, weights repacked for it; the device must offer subgroupShuffle)
    unless a group has fewer than 4 output channels; otherwise ``convolution.comp``, one output
    per invocation."""

    pad_value = Param(18, float, 0.0)
    int8_scale_term = Param(8, int, 0)
    dynamic_weight = Param(19, int, 0)

    def validate(self) -> None:
        super().validate()
        if self.dynamic_weight != 0:
            raise ValueError("param 19 dynamic_weight: weights as inputs are not supported")

    @property
    def int8_requested(self) -> bool:
        return self.int8_scale_term != 0

    def load_model(self, mb: ModelBin) -> None:
        if not self.int8_requested:
            return super().load_model(mb)
        weight = mb.load_int8_or_float(self.weight_data_size)
        self.bias = np.asarray(mb.load(self.num_output, 1), np.float32) if self.bias_term else None
        self.int8 = self.read_int8_scales(mb)
        self.weight = _int8.quantize_weight(weight, self.int8)

    def read_int8_scales(self, mb: ModelBin) -> _int8.Int8Scales:
        """ncnn's order: num_output weight scales, the bottom scale, the top one past 100."""
        return _int8.read_scales(mb, self.num_output, 1, self.int8_scale_term > 100)

    def padding(self, h: int, w: int) -> tuple[int, int, int, int]:
        """(top, bottom, left, right) as ncnn's Convolution::make_padding."""
        ext_h, ext_w = self.kernel_extent
        if self.pad_left == SAME_UPPER or self.pad_left == SAME_LOWER:
            wpad = ext_w + (w - 1) // self.stride_w * self.stride_w - w
            hpad = ext_h + (h - 1) // self.stride_h * self.stride_h - h
            if wpad <= 0 and hpad <= 0:
                return 0, 0, 0, 0
            return same_pads(hpad, wpad, self.pad_left == SAME_UPPER)
        return self.pad_top, self.pad_bottom, self.pad_left, self.pad_right

    def _is_innerproduct(self, shape: tuple[int, ...]) -> bool:
        """ncnn's deprecated path: a 1-D blob through a 1x1 Convolution is an InnerProduct."""
        return (
            len(shape) == 1
            and self.kernel_w == 1
            and self.kernel_h == 1
            and shape[0] == self.weight_data_size // self.num_output
        )

    def _out_hw(self, h: int, w: int) -> tuple[int, int, tuple[int, int, int, int]]:
        top, bottom, left, right = self.padding(h, w)
        ext_h, ext_w = self.kernel_extent
        hb, wb = h + top + bottom, w + left + right
        if hb < ext_h or wb < ext_w:
            raise ValueError(f"input {h}x{w} (padded {hb}x{wb}) is smaller than the kernel")
        outh = (hb - ext_h) // self.stride_h + 1
        outw = (wb - ext_w) // self.stride_w + 1
        return outh, outw, (top, bottom, left, right)

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        shape = tuple(input_shapes[0])
        if self._is_innerproduct(shape) and not self.int8_requested:
            return [(self.num_output,)]
        c, h, w = chw_shape(shape)
        self._inch_g(c)
        outh, outw, _ = self._out_hw(h, w)
        return [(self.num_output, outh, outw)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x0 = np.asarray(inputs[0], np.float32)
        if self.int8 is not None:
            self.output_shapes([x0.shape])
            # exact integer sums in float64, as ncnn's int32
            q = _int8.quantize(as_chw(x0), self.int8.bottom).astype(np.float64)
            pad = _int8.pad_value(self.pad_value)
            sums = self._convolve(q, self.weight.astype(np.float64), pad)
            act = (self.activation_type, self.activation_params)
            return [_int8.dequantize(sums, self.int8, self.bias, act)]
        if self._is_innerproduct(x0.shape):
            wmat = self.weight.reshape(self.num_output, -1)
            return [self._finish(wmat @ x0)]
        return [self._finish(self._convolve(as_chw(x0), self.weight, self.pad_value))]

    def _convolve(self, x: np.ndarray, weight: np.ndarray, pad_value: float) -> np.ndarray:
        """The sums of products (no bias, no activation), in ``x``'s dtype."""
        c, h, w = x.shape
        inch_g = self._inch_g(c)
        outh, outw, (top, bottom, left, right) = self._out_hw(h, w)
        x = border(x, top, bottom, left, right, pad_value)
        g = self.group
        wgroups = weight.reshape(g, self.num_output // g, inch_g * self.maxk)
        out = np.empty((self.num_output, outh, outw), x.dtype)
        # im2col copies every input pixel maxk times: bands of output rows bound that copy
        rows = max(1, IM2COL_BUDGET // max(1, c * self.maxk * outw))
        ext_h = self.kernel_extent[0]
        for y0 in range(0, outh, rows):
            band = min(rows, outh - y0)
            first = y0 * self.stride_h
            source = x[:, first : first + (band - 1) * self.stride_h + ext_h]
            cols = im2col(
                source, self.kernel_h, self.kernel_w, self.dilation_h, self.dilation_w,
                self.stride_h, self.stride_w, band, outw,
            )  # fmt: skip
            grouped = cols.reshape(g, inch_g * self.maxk, band * outw)
            out[:, y0 : y0 + band] = np.matmul(wgroups, grouped).reshape(-1, band, outw)
        return out

    # -- GPU -------------------------------------------------------------------------------

    def _gpu_pads(self, w: int, h: int) -> tuple[int, int]:
        """(left, top): ncnn's SAME split of the total padding (negative totals count as 0)."""
        left, top = self.pad_left, self.pad_top
        if left in (SAME_UPPER, SAME_LOWER):
            left = same_pad_lead(w, self.kernel_w, self.dilation_w, self.stride_w, left)
        if top in (SAME_UPPER, SAME_LOWER):
            top = same_pad_lead(h, self.kernel_h, self.dilation_h, self.stride_h, top)
        elif self.pad_left in (SAME_UPPER, SAME_LOWER):
            top = same_pad_lead(h, self.kernel_h, self.dilation_h, self.stride_h, self.pad_left)
        return left, top

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        shader, columns, _ = self.shader(target.info)
        pad = _int8.pad_value(self.pad_value) if self.int8_requested else self.pad_value
        specs = (*self.gpu_specs(), pad)
        ungrouped = specs[:6] + specs[7:]  # the shaders without the group constant (id 6)
        if shader == "convolutiondepthwise":  # its flat_columns constant (id 12)
            flat = self._flat_columns(target.info)
            local = _conv_shaders.TILED_LOCAL if flat else _LOCAL_2D
            pipelines = {"conv": PipelineSpec(shader, (*ungrouped, columns if flat else 0), local)}
        else:
            local = _conv_shaders.TILED_LOCAL if shader == "convolution_tiled" else _LOCAL_2D
            grouped = shader in ("convolution", "convolution_tiled")
            constants = specs if grouped else ungrouped
            if shader == "convolution_tiled":  # its shared_weights constant (id 13)
                constants = (*constants, int(_conv_shaders.shared_weights(target.info)))
            pipelines = {"conv": PipelineSpec(shader, constants, local)}
        if self._splitk(target.info):  # beside convolution.comp, its group constant last
            pipelines["conv_splitk"] = PipelineSpec(
                "convolution_splitk", (*ungrouped, self.group), _conv_shaders.LOCAL
            )
        if self._gemm(target.info):
            coopmat = _conv_shaders.gemm_coopmat(target.options, target.info)
            pipelines["conv_gemm"] = PipelineSpec(
                "convolution_gemm_coopmat" if coopmat else "convolution_gemm",
                ungrouped,
                _conv_shaders.GEMM_LOCAL,
            )
            epilogue = specs[7:11]  # bias_term and the activation
            pipelines["conv_gemm_sum"] = PipelineSpec(
                "convolution_gemm_sum", epilogue, _conv_shaders.SUM_LOCAL
            )
        if self._winograd(target.info):
            local = _conv_shaders.WINOGRAD_LOCAL
            pipelines["wino_in"] = PipelineSpec("convolution_winograd_input", (pad,), local)
            pipelines["wino_gemm"] = PipelineSpec("convolution_winograd_gemm", (), local)
            pipelines["wino_out"] = PipelineSpec("convolution_winograd_output", specs[7:11], local)
        if self.int8_requested:
            act = gpu_activation(self.activation_type, self.activation_params)
            requantize = self.int8_scale_term > 100
            pipelines |= _int8.pipeline_specs(target, requantize, bool(self.bias_term), act)
        return pipelines

    def background_pipelines(self, target: GpuTarget) -> frozenset[str]:
        """The GEMM pair: a faster alternative whose driver compile (up to 0.1 s more per cold
        load on the H100) no load waits for; plans adopt it once built. The Winograd passes
        likewise: llvmpipe compiles each at its first dispatch (0.1-0.15 s), which would put
        0.3-0.6 s on a cold first inference for a gain of tens of ms (alexnet's one layer) if
        the first output waited for them; it runs the direct shader instead."""
        keys = _GEMM_KEYS if self._gemm(target.info) else frozenset()
        return keys | (_WINOGRAD_KEYS if self._winograd(target.info) else frozenset())

    def background_weights(
        self, target: GpuTarget, pipelines: frozenset[str]
    ) -> dict[str, np.ndarray]:
        """The Winograd passes' transformed weights (4x the direct shader's, which stay: both
        may run), made with the passes in the background: resnet50's took 0.2 s of a load."""
        if not _WINOGRAD_KEYS <= pipelines:
            return {}
        in_c = self.taps // self.maxk
        return {"weight_winograd": _conv_shaders.pack_winograd(self.weight, self.num_output, in_c)}

    def arrange(self, weight: np.ndarray, info: GpuInfo) -> np.ndarray:
        if not self._tiled(info):
            return weight
        return _conv_shaders.pack_tiled(weight, self.num_output, self.maxk, self.group)

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        def convolve(source: GpuBlob) -> None:
            self._record_conv(ctx, source, outputs[0])

        if self.int8 is None:
            convolve(inputs[0])
        else:
            _int8.record(ctx, self.int8, inputs[0], outputs[0], self.num_output, convolve)

    def _record_conv(self, ctx: RecordContext, source: GpuBlob, output: GpuBlob) -> None:
        """The choices made at load, read back from the pipelines built: which alternatives
        exist (``_path``), which shader "conv" is and its layout constants (``ctx.spec``)."""
        path = self._path(ctx.info, output.shape, ctx.has_pipeline)
        if path == "winograd":
            self._record_winograd(ctx, source, output)
            return
        c, h, w = source.shape
        oc, oh, ow = output.shape
        left, top = self._gpu_pads(w, h)
        push = pack_push("8i", w, h, c, ow, oh, oc, left, top)
        buffers = blobs_and_weights(ctx, [source], [output])
        if path == "gemm":
            self._record_gemm(ctx, buffers, push, output)
            return
        if path == "splitk":
            groups = capped_groups((_conv_shaders.groups(ctx.info, output.shape), 1, 1), ctx.info)
            ctx.dispatch("conv_splitk", buffers, push, groups)
            return
        spec = ctx.spec("conv")
        if spec.shader == "convolution_tiled":
            wanted = _conv_shaders.tiled_groups(output.shape, self.group)
        elif spec.shader == "convolutiondepthwise" and spec.specializations[-1]:  # flat columns
            blocks = math.ceil(ow / int(spec.specializations[-1])) * oh
            wanted = (math.ceil(blocks / _conv_shaders.TILED_LOCAL[0]), 1, oc)
        else:
            depthwise = spec.shader == "convolutiondepthwise"
            cols = _conv_shaders.DEPTHWISE_COLUMNS if depthwise else 1
            wanted = (math.ceil(ow / (cols * 8)), math.ceil(oh / 8), oc)
        ctx.dispatch("conv", buffers, push, capped_groups(wanted, ctx.info))

    def _record_winograd(self, ctx: RecordContext, source: GpuBlob, output: GpuBlob) -> None:
        """The three Winograd passes: input tiles transformed, 36 products of the transformed
        weights and tiles, outputs transformed back (with bias and activation)."""
        c, h, w = source.shape
        oc, oh, ow = output.shape
        left, top = self._gpu_pads(w, h)
        tiles_w, tiles, padded = _conv_shaders.winograd_tiles(oh, ow)
        positions = _conv_shaders.WINOGRAD_POSITIONS
        transformed = ctx.scratch(4 * positions * c * padded)
        products = ctx.scratch(4 * positions * oc * padded)
        lanes = _conv_shaders.WINOGRAD_LOCAL[0]
        push = pack_push("8i", w, h, c, tiles_w, tiles, padded, left, top)
        groups = capped_groups((math.ceil(padded / lanes), 1, c), ctx.info)
        ctx.dispatch("wino_in", [source, transformed], push, groups)
        ctx.barrier()
        tile_blocks, blocks = padded // 8, math.ceil(oc / _conv_shaders.TILE_OC)
        spread = tile_blocks < lanes  # see the shader: lanes over positions too
        push = pack_push("4i", c, oc, padded, int(spread))
        if spread:
            wanted = (math.ceil(positions * tile_blocks / lanes), 1, blocks)
        else:
            wanted = (math.ceil(tile_blocks / lanes), 1, positions * blocks)
        groups = capped_groups(wanted, ctx.info)
        weight = ctx.weight("weight_winograd")
        ctx.dispatch("wino_gemm", [transformed, products, weight], push, groups)
        ctx.barrier()
        push = pack_push("6i", ow, oh, oc, tiles_w, tiles, padded)
        groups = capped_groups((math.ceil(tiles / lanes), 1, oc), ctx.info)
        ctx.dispatch("wino_out", [products, output, ctx.weight("bias")], push, groups)

    def _record_gemm(
        self, ctx: RecordContext, buffers: list[Buffer | GpuBlob], push: bytes, output: GpuBlob
    ) -> None:
        """convolution_gemm.comp, its taps split over workgroups (then summed by
        convolution_gemm_sum.comp) when the output's tiles alone would leave the GPU idle."""
        split_taps = _conv_shaders.gemm_split_taps(ctx.info, output.shape, self.taps)
        splits = math.ceil(self.taps / split_taps)
        gemm_push = push + pack_push("i", split_taps)
        groups = capped_groups(_conv_shaders.gemm_groups(output.shape, splits), ctx.info)
        if splits == 1:  # the partial binding is unused: the output stands in for it
            ctx.dispatch("conv_gemm", [*buffers, output], gemm_push, groups)
            return
        partial = ctx.scratch(4 * splits * output.size)
        ctx.dispatch("conv_gemm", [*buffers, partial], gemm_push, groups)
        ctx.barrier()
        oc, oh, ow = output.shape
        sum_push = pack_push("3i", oc, oh * ow, splits)
        sum_groups = (math.ceil(output.size / _conv_shaders.SUM_LOCAL[0]), 1, 1)
        sum_buffers: list[Buffer | GpuBlob] = [partial, output, ctx.weight("bias")]
        ctx.dispatch("conv_gemm_sum", sum_buffers, sum_push, capped_groups(sum_groups, ctx.info))


@register_layer("ConvolutionDepthWise")
class ConvolutionDepthWise(Convolution):
    """ncnn ConvolutionDepthWise: Convolution plus 7 group (any group dividing both sides).

    Pure depthwise layers (group == in_c == out_c) run ``convolutiondepthwise.comp``, which has
    no group constant, so every channel count shares one pipeline; other groupings run
    ``convolution.comp`` (or the tiled shader, as Convolution's choice says)."""

    group = Param(7, int, 1, limit=MAX_CHANNELS)

    def validate(self) -> None:
        super().validate()
        if self.int8_scale_term not in (0, 1, 2, 101, 102):
            raise ValueError(
                f"param 8 int8_scale_term={self.int8_scale_term} must be 0, 1 or 101 (a weight "
                "scale per group), or 2 or 102 (one weight scale)"
            )

    def read_int8_scales(self, mb: ModelBin) -> _int8.Int8Scales:
        """ncnn's order: weight scales (one per group, or one), bottom, top past 100."""
        per_group = self.int8_scale_term in (1, 101)
        count = self.group if per_group else 1
        repeat = self.num_output // count
        return _int8.read_scales(mb, count, repeat, self.int8_scale_term > 100)

    def shader(self, info: GpuInfo) -> tuple[str, int, int]:
        one_input_per_group = self.weight_data_size == self.num_output * self.maxk
        if self.group > 1 and self.num_output == self.group and one_input_per_group:
            flat = self._flat_columns(info)
            columns = (
                info.choices.depthwise_flat_columns if flat else _conv_shaders.DEPTHWISE_COLUMNS
            )
            return ("convolutiondepthwise", columns, 1)
        return super().shader(info)
