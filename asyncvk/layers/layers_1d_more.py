"""ConvolutionDepthWise1D, Deconvolution1D and DeconvolutionDepthWise1D, as ncnn's
convolutiondepthwise1d.cpp, deconvolution1d.cpp and deconvolutiondepthwise1d.cpp: as
``layers_1d``'s Convolution1D, a dims-2 blob (h = channels, w) is a (c = h, 1, w) blob to the
2-D layers, byte for byte, so these are ConvolutionDepthWise, Deconvolution and
DeconvolutionDepthWise (numpy and shaders) with a 1-row kernel, stride and dilation and no
vertical pads, on that view.

A dims-1 blob (w,) is one channel (ncnn reads its h as 1); dims 3 and 4 are refused.
"""

from __future__ import annotations

import numpy as np

from ._base import Layer, Shape
from ._geometry import SAME_LOWER, SAME_UPPER
from ._gpu_api import GpuBlob, RecordContext
from ._registry import register_layer
from ._schema import Param
from .convolution import ConvolutionDepthWise
from .deconvolution import Deconvolution, DeconvolutionDepthWise
from .layers_1d import Convolution1D, as_planes, rows_and_width

_SAME = (SAME_UPPER, SAME_LOWER)


def check_pads_1d(left: int, right: int) -> None:
    """ncnn's 1-D layers understand pads >= 0, or both -233 or both -234."""
    same = left == right and left in _SAME
    if not same and min(left, right) < 0:
        raise ValueError(
            f"params 4/15 pads ({left}, {right}): use values >= 0, or both -233 or both -234"
        )


@register_layer("ConvolutionDepthWise1D")
class ConvolutionDepthWise1D(Convolution1D, ConvolutionDepthWise):
    """ncnn ConvolutionDepthWise1D: Convolution1D plus 7 group and 19 dynamic_weight
    (rejected); weights (num_output, h / group, kernel_w) then bias."""

    dynamic_weight = Param(19, int, 0)


@register_layer("Deconvolution1D")
class Deconvolution1D(Deconvolution):
    """ncnn Deconvolution1D: 0 num_output, 1 kernel_w, 2 dilation_w, 3 stride_w, 4/15 pads
    cut (left/right; -233 / -234 with 20 output_w), 18 output_pad_right, 20 output_w,
    5 bias_term, 6 weight_data_size, 9/10 activation, 28 dynamic_weight (rejected); weights
    (num_output, h, kernel_w) then bias. Output (num_output, outw)."""

    # ncnn's Deconvolution1D reads none of these: they are the 1-row case of the 2-D layer
    kernel_h = 1
    dilation_h = 1
    stride_h = 1
    pad_top = 0
    pad_bottom = 0
    output_pad_bottom = 0
    #: the full output's one row: cut to itself
    output_h = 1

    def validate(self) -> None:
        check_pads_1d(self.pad_left, self.pad_right)
        if self.output_pad_right < 0:
            raise ValueError(f"param 18 output_pad_right={self.output_pad_right} must be >= 0")
        if self.output_w > 0 and max(self.pad_left, self.pad_right) <= 0:
            if self.pad_left not in _SAME:
                # ncnn's cut_padding leaves the top blob empty here: the layer fails
                raise ValueError("param 20 output_w needs pads -233 or -234 (params 4/15)")
        super().validate()

    @property
    def pads(self) -> tuple[int, int, int, int]:
        if self.pad_left in _SAME:
            return (self.pad_left,) * 4
        return self.pad_left, self.pad_right, 0, 0

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        h, w = rows_and_width(self.type_name, input_shapes[0])
        _, out_w = super().output_shapes([(h, 1, w)])[0][1:]
        return [(self.num_output, out_w)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        h, w = rows_and_width(self.type_name, x.shape)
        out = super().forward([x.reshape(h, 1, w)])[0]
        return [out.reshape(self.num_output, -1)]

    #: every blob output_shapes takes runs on the GPU (the 2-D layer's rule asks for dims 3)
    supports = Layer.supports

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        super().record(ctx, [as_planes(inputs[0])], [as_planes(outputs[0])])


@register_layer("DeconvolutionDepthWise1D")
class DeconvolutionDepthWise1D(Deconvolution1D, DeconvolutionDepthWise):
    """ncnn DeconvolutionDepthWise1D: Deconvolution1D plus 7 group; weights (num_output,
    h / group, kernel_w) then bias."""
