"""Convolution3D, ConvolutionDepthWise3D, Deconvolution3D and DeconvolutionDepthWise3D, as
ncnn's convolution3d.cpp and its siblings, on dims-4 blobs (c, d, h, w): numpy as im2col plus a
batched matmul over the groups (convolution) or a matmul plus a scatter-add per kernel tap
(deconvolution); on the GPU ``convolution3d.comp`` and ``deconvolution3d.comp``, one output per
invocation (the depthwise types are their group constant).

Weights keep ncnn's order: (num_output, num_input / group, kernel_d, kernel_h, kernel_w).
"""

from __future__ import annotations

import numpy as np

from ._base import Layer, Shape
from ._conv_params import ConvParams
from ._geometry import SAME_LOWER, SAME_UPPER
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
from ._limits import MAX_CHANNELS, MAX_EXTENT, MAX_KERNEL, MAX_PAD, MAX_STRIDE, check_elements
from ._registry import register_layer
from ._schema import Param
from ._volume import (
    NO_PADS,
    Dims3,
    Pads3,
    border_3d,
    check_same_pads,
    dims4,
    out_size,
    same_pads,
    same_totals,
    windows_3d,
)
from .activation import gpu_activation, validate_activation

#: im2col columns made at once (elements): a large input is convolved in slabs of depth.
IM2COL_BUDGET = 1 << 24
_SAME = (SAME_UPPER, SAME_LOWER)


class Conv3DParams(ConvParams):
    """The params the 3-D types add to the 2-D family's: 21 kernel_d, 22 dilation_d,
    23 stride_d, 24 pad_front, 17 pad_behind (each defaulting to its w counterpart)."""

    kernel_d = Param(21, int, ConvParams.kernel_w, limit=MAX_KERNEL)
    dilation_d = Param(22, int, ConvParams.dilation_w, limit=MAX_STRIDE)
    stride_d = Param(23, int, ConvParams.stride_w, limit=MAX_STRIDE)
    pad_front = Param(24, int, ConvParams.pad_left, limit=MAX_PAD)
    pad_behind = Param(17, int, pad_front, limit=MAX_PAD)

    def validate(self) -> None:
        validate_activation(self.activation_type, self.activation_params)
        if self.num_output <= 0:
            raise ValueError(f"param 0 num_output={self.num_output} must be > 0")
        if min(self.kernel) <= 0:
            raise ValueError(f"params 1/11/21 kernel (w, h, d) {self.kernel[::-1]} must be > 0")
        if min(*self.dilation, *self.stride) <= 0:
            raise ValueError("params 2/12/22 dilation and 3/13/23 stride must be > 0")
        if self.group <= 0 or self.num_output % self.group:
            raise ValueError(f"param 7 group={self.group} must divide num_output")
        pads = self.pads6
        if not (min(pads) >= 0 or (all(p == pads[0] for p in pads) and pads[0] in _SAME)):
            raise ValueError(
                f"params 4/15/14/16/24/17 pads {pads}: use values >= 0, or all -233 or all -234"
            )
        per_channel = self.num_output * self.maxk
        if self.weight_data_size <= 0 or self.weight_data_size % per_channel:
            raise ValueError(
                f"param 6 weight_data_size={self.weight_data_size} is not a positive multiple "
                f"of num_output x kernel_w x kernel_h x kernel_d = {per_channel}"
            )

    @property
    def pads6(self) -> tuple[int, ...]:
        """(left, right, top, bottom, front, behind), as ncnn tests them."""
        return (
            self.pad_left,
            self.pad_right,
            self.pad_top,
            self.pad_bottom,
            self.pad_front,
            self.pad_behind,
        )

    @property
    def kernel(self) -> Dims3:
        return self.kernel_d, self.kernel_h, self.kernel_w

    @property
    def dilation(self) -> Dims3:
        return self.dilation_d, self.dilation_h, self.dilation_w

    @property
    def stride(self) -> Dims3:
        return self.stride_d, self.stride_h, self.stride_w

    @property
    def extent(self) -> Dims3:
        """The span of the dilated kernel per axis (d, h, w)."""
        d, h, w = (dl * (k - 1) + 1 for k, dl in zip(self.kernel, self.dilation, strict=True))
        return d, h, w

    @property
    def maxk(self) -> int:
        return self.kernel_w * self.kernel_h * self.kernel_d

    def gpu_specs(self) -> tuple[int | float, ...]:
        """The specialization constants convolution3d.comp and deconvolution3d.comp share."""
        act = gpu_activation(self.activation_type, self.activation_params)
        return (
            *self.kernel[::-1],
            *self.dilation[::-1],
            *self.stride[::-1],
            self.group,
            self.bias_term,
            act[0],
            float(act[1]),
            float(act[2]),
        )

    #: every blob output_shapes takes runs on the GPU (the 2-D family's rule asks for dims 3)
    supports = Layer.supports


@register_layer("Convolution3D")
class Convolution3D(Conv3DParams):
    """ncnn Convolution3D: params 0-6, 9-18, 21-24 (18 pad_value); weights then bias."""

    pad_value = Param(18, float, 0.0)

    def padding(self, size: Dims3) -> Pads3:
        """Pads per axis as ncnn's Convolution3D::make_padding."""
        if max(self.pads6) > 0:
            return (
                (self.pad_front, self.pad_behind),
                (self.pad_top, self.pad_bottom),
                (self.pad_left, self.pad_right),
            )
        if self.pad_left in _SAME:
            pads = same_pads(
                same_totals(size, self.extent, self.stride), self.pad_left == SAME_UPPER
            )
            check_same_pads(self.type_name, pads)
            return pads
        return NO_PADS

    def _out(self, size: Dims3) -> tuple[Dims3, Pads3]:
        pads = self.padding(size)
        padded = [n + a + b for n, (a, b) in zip(size, pads, strict=True)]
        if any(p < e for p, e in zip(padded, self.extent, strict=True)):
            raise ValueError(
                f"input (d, h, w) {size} (padded {tuple(padded)}) is smaller than the kernel"
            )
        d, h, w = (
            out_size(p, e, s) for p, e, s in zip(padded, self.extent, self.stride, strict=True)
        )
        return (d, h, w), pads

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        c, d, h, w = dims4(self.type_name, input_shapes[0])
        self._inch_g(c)
        return [(self.num_output, *self._out((d, h, w))[0])]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        c, d, h, w = dims4(self.type_name, x.shape)
        inch_g = self._inch_g(c)
        (od, oh, ow), pads = self._out((d, h, w))
        padded = border_3d(x, pads, self.pad_value)
        windows = windows_3d(padded, self.kernel, self.dilation, self.stride, (od, oh, ow))
        g, outch_g = self.group, self.num_output // self.group
        wgroups = self.weight.reshape(g, outch_g, inch_g * self.maxk)
        out = np.empty((self.num_output, od, oh, ow), np.float32)
        depth = max(1, IM2COL_BUDGET // max(1, c * self.maxk * oh * ow))
        for z0 in range(0, od, depth):
            slab = windows[:, z0 : z0 + depth]
            n = slab.shape[1]
            # (g, q, z, y, x, kd, kh, kw) -> columns (g, z * y * x, q * kd * kh * kw)
            cols = slab.reshape(g, inch_g, n, oh, ow, *self.kernel).transpose(
                0, 2, 3, 4, 1, 5, 6, 7
            )
            cols = cols.reshape(g, n * oh * ow, inch_g * self.maxk)
            sums = np.matmul(wgroups, cols.transpose(0, 2, 1))
            out[:, z0 : z0 + n] = sums.reshape(self.num_output, n, oh, ow)
        return [self._finish(out)]

    # -- GPU -------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        specs = (*self.gpu_specs(), self.pad_value)
        return {"conv": PipelineSpec("convolution3d", specs, local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, d, h, w = inputs[0].shape
        oc, od, oh, ow = outputs[0].shape
        (front, _), (top, _), (left, _) = self.padding((d, h, w))
        push = pack_push("11i", w, h, d, c, ow, oh, od, oc, left, top, front)
        groups = groups_1d(outputs[0].size, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("conv", blobs_and_weights(ctx, inputs, outputs), push, groups)


@register_layer("ConvolutionDepthWise3D")
class ConvolutionDepthWise3D(Convolution3D):
    """ncnn ConvolutionDepthWise3D: Convolution3D plus 7 group."""

    group = Param(7, int, 1, limit=MAX_CHANNELS)


@register_layer("Deconvolution3D")
class Deconvolution3D(Conv3DParams):
    """ncnn Deconvolution3D: scatter input * weight[out][in][k] (no kernel flip), then cut pads.

    Params beyond Convolution3D's: 18/19/20 output_pad (right, bottom, behind), 25/26/27
    output_w/h/d (cut to that size with pads -233 / -234)."""

    output_pad_right = Param(18, int, 0, limit=MAX_PAD)
    output_pad_bottom = Param(19, int, output_pad_right, limit=MAX_PAD)
    output_pad_behind = Param(20, int, output_pad_right, limit=MAX_PAD)
    output_w = Param(25, int, 0, limit=MAX_EXTENT)
    output_h = Param(26, int, output_w, limit=MAX_EXTENT)
    output_d = Param(27, int, output_w, limit=MAX_EXTENT)

    def validate(self) -> None:
        super().validate()
        if min(self.output_pad_right, self.output_pad_bottom, self.output_pad_behind) < 0:
            raise ValueError("params 18/19/20 output_pad must be >= 0")
        if self._sized and max(self.pads6) <= 0 and self.pad_left not in _SAME:
            # ncnn's cut_padding leaves the top blob empty here: the layer fails
            raise ValueError(
                "params 25/26/27 output_w/h/d need pads -233 or -234 (params 4/15/14/16/24/17)"
            )

    @property
    def _sized(self) -> bool:
        return self.output_w > 0 and self.output_h > 0 and self.output_d > 0

    def _full(self, size: Dims3) -> Dims3:
        output_pads = (self.output_pad_behind, self.output_pad_bottom, self.output_pad_right)
        d, h, w = (
            (n - 1) * s + e + p
            for n, s, e, p in zip(size, self.stride, self.extent, output_pads, strict=True)
        )
        return d, h, w

    def cut(self, full: Dims3) -> Pads3:
        """What to cut per axis, as ncnn's Deconvolution3D::cut_padding."""
        if max(self.pads6) > 0:
            return (
                (self.pad_front, self.pad_behind),
                (self.pad_top, self.pad_bottom),
                (self.pad_left, self.pad_right),
            )
        if not self._sized:
            return NO_PADS
        wanted = (self.output_d, self.output_h, self.output_w)
        cd, ch, cw = (n - o for n, o in zip(full, wanted, strict=True))
        if min(cd, ch, cw) < 0:
            raise ValueError(
                f"output_w/h/d {wanted[::-1]} exceed the full deconvolution output {full[::-1]}"
            )
        if self.pad_left == SAME_UPPER:
            return (cd // 2, cd - cd // 2), (ch // 2, ch - ch // 2), (cw // 2, cw - cw // 2)
        return (cd - cd // 2, cd // 2), (ch - ch // 2, ch // 2), (cw - cw // 2, cw // 2)

    def _out(self, size: Dims3) -> tuple[Dims3, Dims3, Pads3]:
        full = self._full(size)
        cuts = self.cut(full)
        d, h, w = (n - a - b for n, (a, b) in zip(full, cuts, strict=True))
        if min(d, h, w) <= 0:
            raise ValueError(f"pads cut the whole {full[::-1]} (w, h, d) deconvolution output")
        return full, (d, h, w), cuts

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        c, d, h, w = dims4(self.type_name, input_shapes[0])
        self._inch_g(c)
        return [(self.num_output, *self._out((d, h, w))[1])]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        c, d, h, w = dims4(self.type_name, x.shape)
        inch_g = self._inch_g(c)
        full, (od, oh, ow), ((front, _), (top, _), (left, _)) = self._out((d, h, w))
        g, outch_g, maxk = self.group, self.num_output // self.group, self.maxk
        check_elements(self.num_output * maxk * d * h * w, "the deconvolution's tap products")
        check_elements(self.num_output * full[0] * full[1] * full[2], "the uncut output")
        # weight[g][p][q][k]: contribution[g, p, k, voxel] = sum_q weight * x[g, q, voxel]
        wmat = self.weight.reshape(g, outch_g, inch_g, maxk).transpose(0, 1, 3, 2)
        contrib = np.matmul(wmat.reshape(g, outch_g * maxk, inch_g), x.reshape(g, inch_g, -1))
        contrib = contrib.reshape(self.num_output, *self.kernel, d, h, w)
        out = np.zeros((self.num_output, *full), np.float32)
        (sd, sh, sw), (dd, dh, dw) = self.stride, self.dilation
        spans = [(n - 1) * s + 1 for n, s in zip((d, h, w), self.stride, strict=True)]
        for a, b, e in np.ndindex(*self.kernel):  # one scatter-add per kernel tap
            z0, y0, x0 = a * dd, b * dh, e * dw
            out[:, z0 : z0 + spans[0] : sd, y0 : y0 + spans[1] : sh, x0 : x0 + spans[2] : sw] += (
                contrib[:, a, b, e]
            )
        out = self._finish(out)[:, front : front + od, top : top + oh, left : left + ow]
        return [np.ascontiguousarray(out)]

    # -- GPU -------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        spec = PipelineSpec("deconvolution3d", self.gpu_specs(), local_size_1d(target.info))
        return {"deconv": spec}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, d, h, w = inputs[0].shape
        oc, od, oh, ow = outputs[0].shape
        _, _, ((front, _), (top, _), (left, _)) = self._out((d, h, w))
        push = pack_push("11i", w, h, d, c, ow, oh, od, oc, left, top, front)
        groups = groups_1d(outputs[0].size, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("deconv", blobs_and_weights(ctx, inputs, outputs), push, groups)


@register_layer("DeconvolutionDepthWise3D")
class DeconvolutionDepthWise3D(Deconvolution3D):
    """ncnn DeconvolutionDepthWise3D: Deconvolution3D plus 7 group."""

    group = Param(7, int, 1, limit=MAX_CHANNELS)
