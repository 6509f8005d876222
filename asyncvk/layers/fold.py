"""Unfold (im2col) and Fold (col2im), as ncnn's unfold.cpp and fold.cpp: the sliding windows of
a (c, h, w) blob as the columns of a (c * kernel_h * kernel_w, windows) matrix, and back, with
the values of overlapping windows summed.

Unfold only copies: on the GPU it gathers through the index map its numpy reference makes of a
float32 probe (:class:`GatherOnGpu`; inputs of 2^22 values or more run that reference), the
padding being the gather's fill value. Fold adds: ``fold.comp``
gives each output value the sum of the columns that cover it, in ncnn's order.
"""

from __future__ import annotations

import numpy as np

from ._base import Layer
from ._gather import GatherOnGpu
from ._geometry import SAME_LOWER, SAME_UPPER, border, im2col, same_pads, shape4
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    Shape,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._limits import MAX_EXTENT, MAX_KERNEL, MAX_PAD, MAX_STRIDE
from ._registry import register_layer
from ._schema import Param

_F32 = np.float32


class _Window(Layer):
    """The sliding window both share: kernel (1/11), dilation (2/12), stride (3/13) and pads
    (left 4, right 15, top 14, bottom 16), each h value defaulting to its w value."""

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

    def validate(self) -> None:
        for p in (
            _Window.kernel_w,
            _Window.kernel_h,
            _Window.dilation_w,
            _Window.dilation_h,
            _Window.stride_w,
            _Window.stride_h,
        ):
            value = getattr(self, p.name)
            if value < 1:
                raise ValueError(
                    f"{self.type_name} param {p.id} ({p.name}) = {value}: must be >= 1"
                )

    @property
    def pads(self) -> tuple[int, int, int, int]:
        return (self.pad_left, self.pad_right, self.pad_top, self.pad_bottom)

    def extents(self) -> tuple[int, int]:
        """The kernel's (h, w) span in input pixels, dilation included."""
        return (
            self.dilation_h * (self.kernel_h - 1) + 1,
            self.dilation_w * (self.kernel_w - 1) + 1,
        )

    def windows(self, h: int, w: int) -> tuple[int, int]:
        """How many windows fit an (h, w) plane (padding included), per axis."""
        eh, ew = self.extents()
        if h < eh or w < ew:
            raise ValueError(
                f"{self.type_name}: a kernel spanning {eh} x {ew} does not fit {h} x {w}"
            )
        return (h - eh) // self.stride_h + 1, (w - ew) // self.stride_w + 1


@register_layer("Unfold")
class Unfold(_Window, GatherOnGpu):
    """im2col: row (q, u, v) of the output holds, for each window in row-major order, channel
    q's pixel at kernel tap (u, v). Pads are >= 0, or all -233 (SAME_UPPER) or all -234
    (SAME_LOWER); padding holds ``pad_value`` (18). A 1-D blob is one row (ncnn pads only its
    ends), a 2-D one a channel."""

    pad_value = Param(18, float, 0.0)

    def validate(self) -> None:
        super().validate()
        pads = self.pads
        same = len(set(pads)) == 1 and pads[0] in (SAME_UPPER, SAME_LOWER)
        if min(pads) < 0 and not same:
            raise ValueError(
                f"Unfold params 4/15/14/16 (pads) = {pads}: use values >= 0, or all -233 or "
                "all -234"
            )

    def _borders(self, shape: Shape) -> tuple[int, int, int, int]:
        """(top, bottom, left, right) as make_padding picks them (negative crops)."""
        w, h, _, _ = shape4(shape)
        if self.pad_left >= 0:
            top, bottom, left, right = self.pad_top, self.pad_bottom, self.pad_left, self.pad_right
        else:
            eh, ew = self.extents()
            hpad = eh + (h - 1) // self.stride_h * self.stride_h - h
            wpad = ew + (w - 1) // self.stride_w * self.stride_w - w
            upper = self.pad_left == SAME_UPPER
            top, bottom, left, right = (
                same_pads(hpad, wpad, upper) if hpad > 0 or wpad > 0 else (0, 0, 0, 0)
            )
        if len(shape) == 1:  # ncnn's copy_make_border pads a 1-D blob at its ends only
            top = bottom = 0
        return top, bottom, left, right

    def _plan(self, shape: Shape) -> tuple[tuple[int, int, int, int], int, int, int]:
        """(the borders, the channels, the windows down and across)."""
        if len(shape) == 4:  # ncnn reads the first depth of each channel and drops the rest
            raise ValueError(f"Unfold: a 4-D blob {shape} is not supported (1-D to 3-D)")
        w, h, _, c = shape4(shape)
        top, bottom, left, right = self._borders(shape)
        outh, outw = self.windows(h + top + bottom, w + left + right)
        return (top, bottom, left, right), c, outh, outw

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        _, c, outh, outw = self._plan(tuple(input_shapes[0]))
        return [(c * self.kernel_h * self.kernel_w, outh * outw)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], _F32)
        borders, c, outh, outw = self._plan(x.shape)
        w, h, _, _ = shape4(x.shape)
        padded = border(x.reshape(c, h, w), *borders, self.pad_value)
        cols = im2col(
            padded,
            self.kernel_h,
            self.kernel_w,
            self.dilation_h,
            self.dilation_w,
            self.stride_h,
            self.stride_w,
            outh,
            outw,
        )
        return [cols.reshape(c * self.kernel_h * self.kernel_w, outh * outw)]

    def fill(self) -> float:
        return self.pad_value


@register_layer("Fold")
class Fold(_Window):
    """col2im: the (c * kernel_h * kernel_w, windows) columns of Unfold summed back into a
    (c, output_h, output_w) blob (20/21, h defaulting to w); the pads (>= 0) are cut off after.
    The input's rows must be whole kernels and its columns exactly the windows (ncnn reads past
    the blob otherwise)."""

    output_w = Param(20, int, 0, limit=MAX_EXTENT)
    output_h = Param(21, int, output_w, limit=MAX_EXTENT)

    gpu = True

    def validate(self) -> None:
        super().validate()
        if min(self.pads) < 0:
            raise ValueError(f"Fold params 4/15/14/16 (pads) = {self.pads}: must be >= 0")
        for p in (Fold.output_w, Fold.output_h):
            value = getattr(self, p.name)
            if value < 1:
                raise ValueError(f"Fold param {p.id} ({p.name}) = {value}: must be >= 1")

    def _plan(self, shape: Shape) -> tuple[int, int, int]:
        """(the channels, the windows down and across)."""
        if len(shape) > 2:
            raise ValueError(f"Fold: takes a 1-D or 2-D blob of columns, got {shape}")
        size, rows, _, _ = shape4(shape)
        maxk = self.kernel_h * self.kernel_w
        if rows % maxk:
            raise ValueError(
                f"Fold: {rows} rows are not whole kernels of {self.kernel_h} x {self.kernel_w}"
            )
        outh = self.output_h + self.pad_top + self.pad_bottom
        outw = self.output_w + self.pad_left + self.pad_right
        inh, inw = self.windows(outh, outw)
        if inh * inw != size:
            raise ValueError(
                f"Fold: {size} columns, but {inh} x {inw} windows fit the padded "
                f"{outh} x {outw} output"
            )
        return rows // maxk, inh, inw

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        c, _, _ = self._plan(tuple(input_shapes[0]))
        return [(c, self.output_h, self.output_w)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], _F32)
        c, inh, inw = self._plan(x.shape)
        kh, kw = self.kernel_h, self.kernel_w
        cols = x.reshape(c, kh, kw, inh, inw)
        top, left = self.pad_top, self.pad_left
        outh = self.output_h + top + self.pad_bottom
        outw = self.output_w + left + self.pad_right
        out = np.zeros((c, outh, outw), _F32)
        sh, sw = self.stride_h, self.stride_w
        for u in range(kh):  # ncnn's order: every output value adds its taps u-major, from 0
            down = slice(u * self.dilation_h, u * self.dilation_h + (inh - 1) * sh + 1, sh)
            for v in range(kw):
                across = slice(v * self.dilation_w, v * self.dilation_w + (inw - 1) * sw + 1, sw)
                out[:, down, across] += cols[:, u, v]
        return [out[:, top : top + self.output_h, left : left + self.output_w].copy()]

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {"fold": PipelineSpec("fold", (), local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        _, inh, inw = self._plan(inputs[0].shape)
        out = outputs[0]
        push = pack_push(
            "13i",
            out.size,
            self.output_w,
            self.output_h,
            inw,
            inh,
            self.kernel_w,
            self.kernel_h,
            self.dilation_w,
            self.dilation_h,
            self.stride_w,
            self.stride_h,
            self.pad_left,
            self.pad_top,
        )
        groups = groups_1d(out.size, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("fold", [inputs[0], out], push, groups)
