"""Convolution1D and Pooling1D, as ncnn's convolution1d.cpp and pooling1d.cpp: a dims-2 blob
(h = channels, w) is a (c = h, 1, w) blob to the 2-D layers, byte for byte, so both reuse
Convolution and Pooling (numpy and shaders) with kernel_h, stride_h and dilation_h 1 and no
vertical pads, on that view: no copy, no shader of their own.

A dims-1 blob (w,) is one channel (ncnn reads its h as 1); dims 3 and 4 are refused (ncnn would
read only their first channel).
"""

from __future__ import annotations

import numpy as np

from ._base import Layer, Shape
from ._geometry import SAME_LOWER, SAME_UPPER
from ._gpu_api import GpuBlob, RecordContext
from ._registry import register_layer
from .convolution import Convolution
from .pooling import POOL_MAX, Pooling, ncnn_max


def rows_and_width(type_name: str, shape: Shape) -> tuple[int, int]:
    """(h, w) of a dims-1 or dims-2 blob, the only dims the 1-D layers take."""
    if len(shape) == 1:
        return 1, shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    raise ValueError(f"{type_name} takes a dims 1 or 2 blob (h, w), got shape {tuple(shape)}")


def as_planes(blob: GpuBlob) -> GpuBlob:
    """The same buffer seen as (h, 1, w): what the 2-D shaders index."""
    h, w = rows_and_width("a 1-D layer", blob.shape)
    return GpuBlob(blob.buffer, (h, 1, w))


@register_layer("Convolution1D")
class Convolution1D(Convolution):
    """ncnn Convolution1D: 0 num_output, 1 kernel_w, 2 dilation_w, 3 stride_w, 4/15 pad
    left/right (-233 / -234 SAME upper / lower), 18 pad_value, 5 bias_term, 6 weight_data_size,
    9/10 activation; weights (num_output, h, kernel_w) then bias. Output (num_output, outw)."""

    # ncnn's Convolution1D reads none of these: they are the 1-row case of the 2-D layer
    kernel_h = 1
    dilation_h = 1
    stride_h = 1
    pad_top = 0
    pad_bottom = 0
    int8_scale_term = 0
    dynamic_weight = 0

    def validate(self) -> None:
        left, right = self.pad_left, self.pad_right
        same = left == right and left in (SAME_UPPER, SAME_LOWER)
        if not same and min(left, right) < 0:
            raise ValueError(
                f"params 4/15 pads ({left}, {right}): use values >= 0, or both -233 or both -234"
            )
        super().validate()

    @property
    def pads(self) -> tuple[int, int, int, int]:
        if self.pad_left in (SAME_UPPER, SAME_LOWER):
            return (self.pad_left,) * 4
        return self.pad_left, self.pad_right, 0, 0

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        h, w = rows_and_width(self.type_name, input_shapes[0])
        self._inch_g(h)
        outw = self._out_hw(1, w)[1]
        return [(self.num_output, outw)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        h, w = rows_and_width(self.type_name, x.shape)
        out = self._convolve(x.reshape(h, 1, w), self.weight, self.pad_value)
        return [self._finish(out.reshape(self.num_output, -1))]

    #: every blob output_shapes takes runs on the GPU (the 2-D layer's rule asks for dims 3)
    supports = Layer.supports

    def _record_conv(self, ctx: RecordContext, source: GpuBlob, output: GpuBlob) -> None:
        super()._record_conv(ctx, as_planes(source), as_planes(output))


@register_layer("Pooling1D")
class Pooling1D(Pooling):
    """ncnn Pooling1D: 0 type, 1 kernel_w, 2 stride_w, 3/14 pad left/right, 4 global, 5 pad_mode,
    6 avgpool_count_include_pad, 7 adaptive, 8 out_w. Each row of (h, w) pools alone: output
    (h, outw), or (h,) when global."""

    kernel_h = 1
    stride_h = 1
    pad_top = 0
    pad_bottom = 0
    out_h = 1

    def validate(self) -> None:
        super().validate()
        if self.adaptive_pooling and not self.global_pooling and self.out_w <= 0:
            raise ValueError(f"param 8 out_w={self.out_w} must be > 0 for adaptive pooling")

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        h, w = rows_and_width(self.type_name, input_shapes[0])
        if self.global_pooling:
            return [(h,)]
        if self.adaptive_pooling:
            return [(h, self.out_w)]
        return [(h, self._padded_out(1, w)[1])]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        h, w = rows_and_width(self.type_name, x.shape)
        shape = self.output_shapes([x.shape])[0]
        planes = x.reshape(h, 1, w)
        if self.global_pooling:
            first = x.reshape(h, w)[:, 0]
            if self.pooling_type == POOL_MAX:
                return [ncnn_max(x.reshape(h, w), first, axis=1)]
            return [(x.reshape(h, w).sum(axis=1, dtype=np.float32) / np.float32(w))]
        if self.adaptive_pooling:
            return [self._adaptive(planes, 1, self.out_w).reshape(shape)]
        return [self._pool(planes).reshape(shape)]

    supports = Layer.supports

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        out = outputs[0] if self.global_pooling else as_planes(outputs[0])
        super().record(ctx, [as_planes(inputs[0])], [out])
