"""Deconvolution and DeconvolutionDepthWise: numpy as one matmul plus a scatter-add per kernel
tap, then ncnn's cut_padding; on the GPU ``deconvolution.comp``, or on CPU devices
``deconvolution_tiled.comp`` for ungrouped, undilated layers."""

from __future__ import annotations

import math

import numpy as np

from ..gpu._info import GpuInfo
from . import _conv_shaders
from ._geometry import SAME_LOWER, SAME_UPPER, as_chw, chw_shape, same_pads
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    blobs_and_weights,
    capped_groups,
    pack_push,
)
from ._limits import MAX_CHANNELS, MAX_EXTENT, MAX_PAD, check_elements
from ._registry import register_layer
from ._schema import Param
from .convolution import ConvParams


@register_layer("Deconvolution")
class Deconvolution(ConvParams):
    """ncnn Deconvolution: scatter input * weight[out][in][k] (no kernel flip), then cut pads.

    Params beyond the family's: 18/19 output_pad, 20/21 output_w/h, 28 dynamic_weight
    (rejected)."""

    output_pad_right = Param(18, int, 0, limit=MAX_PAD)
    output_pad_bottom = Param(19, int, output_pad_right, limit=MAX_PAD)
    output_w = Param(20, int, 0, limit=MAX_EXTENT)
    output_h = Param(21, int, output_w, limit=MAX_EXTENT)
    dynamic_weight = Param(28, int, 0)

    def validate(self) -> None:
        super().validate()
        if self.dynamic_weight != 0:
            raise ValueError("param 28 dynamic_weight: weights as inputs are not supported")
        if self.output_pad_right < 0 or self.output_pad_bottom < 0:
            raise ValueError("params 18/19 output_pad must be >= 0")
        if (
            self.output_w > 0
            and self.output_h > 0
            and max(self.pads) <= 0
            and self.pad_left not in (SAME_UPPER, SAME_LOWER)
        ):
            # ncnn's cut_padding leaves the top blob empty here: the layer fails
            raise ValueError("params 20/21 output_w/output_h need pads -233 or -234 (params 4..16)")

    def _full_hw(self, h: int, w: int) -> tuple[int, int]:
        ext_h, ext_w = self.kernel_extent
        return (
            (h - 1) * self.stride_h + ext_h + self.output_pad_bottom,
            (w - 1) * self.stride_w + ext_w + self.output_pad_right,
        )

    def cut(self, hf: int, wf: int) -> tuple[int, int, int, int]:
        """(top, bottom, left, right) to cut, as ncnn's Deconvolution::cut_padding."""
        if max(self.pads) > 0:
            return self.pad_top, self.pad_bottom, self.pad_left, self.pad_right
        if self.output_w > 0 and self.output_h > 0:
            wcut, hcut = wf - self.output_w, hf - self.output_h
            if wcut < 0 or hcut < 0:
                raise ValueError(
                    f"output_w/output_h {self.output_w}x{self.output_h} exceed the full "
                    f"deconvolution output {wf}x{hf}"
                )
            return same_pads(hcut, wcut, self.pad_left == SAME_UPPER)
        return 0, 0, 0, 0

    def _out_hw(self, h: int, w: int) -> tuple[int, int, int, int, tuple[int, int, int, int]]:
        hf, wf = self._full_hw(h, w)
        top, bottom, left, right = self.cut(hf, wf)
        outh, outw = hf - top - bottom, wf - left - right
        if outh <= 0 or outw <= 0:
            raise ValueError(f"pads cut the whole {hf}x{wf} deconvolution output")
        return hf, wf, outh, outw, (top, bottom, left, right)

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        c, h, w = chw_shape(tuple(input_shapes[0]))
        self._inch_g(c)
        _, _, outh, outw, _ = self._out_hw(h, w)
        return [(self.num_output, outh, outw)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = as_chw(inputs[0])
        c, h, w = x.shape
        inch_g = self._inch_g(c)
        hf, wf, outh, outw, (top, _, left, _) = self._out_hw(h, w)
        g, outch_g = self.group, self.num_output // self.group
        kh, kw = self.kernel_h, self.kernel_w
        check_elements(self.num_output * kh * kw * h * w, "the deconvolution's tap products")
        check_elements(self.num_output * hf * wf, "the uncut deconvolution output")
        # weight[g][p][q][k]: contribution[g, p, k, pixel] = sum_q weight * x[g, q, pixel]
        wmat = self.weight.reshape(g, outch_g, inch_g, kh * kw).transpose(0, 1, 3, 2)
        xg = x.reshape(g, inch_g, h * w)
        contrib = np.matmul(wmat.reshape(g, outch_g * kh * kw, inch_g), xg)
        contrib = contrib.reshape(self.num_output, kh, kw, h, w)
        full = np.zeros((self.num_output, hf, wf), np.float32)
        span_h, span_w = (h - 1) * self.stride_h + 1, (w - 1) * self.stride_w + 1
        for i in range(kh):
            y0 = i * self.dilation_h
            for j in range(kw):
                x0 = j * self.dilation_w
                full[:, y0 : y0 + span_h : self.stride_h, x0 : x0 + span_w : self.stride_w] += (
                    contrib[:, i, j]
                )
        out = self._finish(full)
        return [np.ascontiguousarray(out[:, top : top + outh, left : left + outw])]

    # -- GPU -------------------------------------------------------------------------------

    def _tiled(self, info: GpuInfo) -> bool:
        """Whether this layer runs deconvolution_tiled.comp (where convolutions run theirs)."""
        undilated = self.dilation_w == self.dilation_h == 1
        return self.group == 1 and undilated and _conv_shaders.tiled(info)

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        specs = self.gpu_specs()
        if self._tiled(target.info):  # no dilation (ids 2, 3) or group (id 6) constants
            tiled = specs[:2] + specs[4:6] + specs[7:]
            return {"deconv": PipelineSpec("deconvolution_tiled", tiled, _conv_shaders.TILED_LOCAL)}
        return {"deconv": PipelineSpec("deconvolution", specs, (8, 8, 1))}

    def arrange(self, weight: np.ndarray, info: GpuInfo) -> np.ndarray:
        if not self._tiled(info):
            return weight
        return _conv_shaders.pack_tiled(weight, self.num_output, self.maxk)

    def _crop(self, w: int, h: int, ow: int, oh: int) -> tuple[int, int]:
        """(left, top) of the output inside the full deconvolution."""
        full_w = (w - 1) * self.stride_w + self.dilation_w * (self.kernel_w - 1) + 1
        full_h = (h - 1) * self.stride_h + self.dilation_h * (self.kernel_h - 1) + 1
        full_w += self.output_pad_right
        full_h += self.output_pad_bottom
        if max(self.pad_left, self.pad_right, self.pad_top, self.pad_bottom) > 0:
            return (self.pad_left, self.pad_top)
        if self.output_w > 0 or self.pad_left in (SAME_UPPER, SAME_LOWER):
            total_w, total_h = full_w - ow, full_h - oh
            if self.pad_left == SAME_LOWER:
                return (total_w - total_w // 2, total_h - total_h // 2)
            return (total_w // 2, total_h // 2)
        return (0, 0)

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, h, w = inputs[0].shape
        oc, oh, ow = outputs[0].shape
        left, top = self._crop(w, h, ow, oh)
        push = pack_push("8i", w, h, c, ow, oh, oc, left, top)
        if ctx.spec("deconv").shader == "deconvolution_tiled":  # as chosen at load
            strides = (self.stride_h, self.stride_w)
            wanted = _conv_shaders.deconv_tiled_groups(outputs[0].shape, strides)
        else:
            wanted = (math.ceil(ow / 8), math.ceil(oh / 8), oc)
        groups = capped_groups(wanted, ctx.info)
        ctx.dispatch("deconv", blobs_and_weights(ctx, inputs, outputs), push, groups)


@register_layer("DeconvolutionDepthWise")
class DeconvolutionDepthWise(Deconvolution):
    """ncnn DeconvolutionDepthWise: Deconvolution plus 7 group."""

    group = Param(7, int, 1, limit=MAX_CHANNELS)
