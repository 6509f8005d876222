"""DeformableConv2D, as ncnn's deformableconv2d.cpp: a convolution whose every kernel tap samples
the input at a learned fractional offset (bilinear, zero outside), optionally scaled by a mask
(modulated deformable convolution, v2). numpy here, ``deformableconv2d.comp`` on the GPU.

Inputs: the (c, h, w) blob, the offsets (2 x kernel_h x kernel_w, outh, outw) and optionally
the mask (kernel_h x kernel_w, outh, outw). Offset channel ``2 * (i * kernel_w + j)`` holds tap
(i, j)'s dy, the next channel its dx; mask channel ``i * kernel_w + j`` its scale. ncnn reads one
offset group only and never checks these shapes: asyncvk refuses any other shape at planning.
"""

from __future__ import annotations

import math

import numpy as np

from ..gpu._memory import Buffer
from ._base import BlobCount, Layer, Shape
from ._conv_params import ConvParams
from ._gpu_api import GpuBlob, GpuTarget, PipelineSpec, RecordContext, capped_groups, pack_push
from ._limits import check_shape
from ._registry import register_layer

_F32 = np.float32
_LOCAL = (8, 8, 1)


@register_layer("DeformableConv2D")
class DeformableConv2D(ConvParams):
    """ncnn DeformableConv2D: params 0-6 and 9-16 as Convolution's (no SAME padding, no
    groups, no int8); weights (num_output, c, kernel_h, kernel_w) then the bias."""

    one_blob_only = False

    def validate(self) -> None:
        try:
            super().validate()
            if min(self.pads) < 0:  # ncnn's DeformableConv2D has no SAME padding
                raise ValueError(f"params 4/15/14/16 pads {self.pads}: use values >= 0")
        except ValueError as exc:  # the family's checks, named for this type
            raise ValueError(f"DeformableConv2D {exc}") from exc

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (2, 3), (1, 1)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shapes = [tuple(s) for s in input_shapes]
        image = shapes[0]
        if len(image) != 3:
            raise ValueError(f"DeformableConv2D takes a dims 3 blob (c, h, w), got {image}")
        c, h, w = image
        self._inch_g(c)
        ext_h, ext_w = self.kernel_extent
        hb, wb = h + self.pad_top + self.pad_bottom, w + self.pad_left + self.pad_right
        if hb < ext_h or wb < ext_w:
            raise ValueError(f"input {h}x{w} (padded {hb}x{wb}) is smaller than the kernel")
        outh = (hb - ext_h) // self.stride_h + 1
        outw = (wb - ext_w) // self.stride_w + 1
        expected = [(2 * self.maxk, outh, outw), (self.maxk, outh, outw)]
        for shape, want, what in zip(shapes[1:], expected, ("offset", "mask"), strict=False):
            if shape != want:
                raise ValueError(
                    f"DeformableConv2D's {what} must be {want} for kernel "
                    f"{self.kernel_h}x{self.kernel_w} and output {outh}x{outw}, got {shape}"
                )
        return [(self.num_output, outh, outw)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, offset = (np.asarray(a, _F32) for a in inputs[:2])
        mask = np.asarray(inputs[2], _F32) if len(inputs) == 3 else None
        (out_shape,) = self.output_shapes([a.shape for a in inputs])
        _, outh, outw = out_shape
        c = x.shape[0]
        check_shape((c * self.maxk, outh * outw), "DeformableConv2D columns")
        cols = np.empty((c, self.maxk, outh, outw), _F32)
        rows = np.arange(outh, dtype=np.int64)[:, None] * self.stride_h - self.pad_top
        columns = np.arange(outw, dtype=np.int64)[None, :] * self.stride_w - self.pad_left
        for i in range(self.kernel_h):
            for j in range(self.kernel_w):
                tap = i * self.kernel_w + j
                y = (rows + i * self.dilation_h).astype(_F32) + offset[2 * tap]
                xs = (columns + j * self.dilation_w).astype(_F32) + offset[2 * tap + 1]
                val = bilinear(x, y, xs)
                cols[:, tap] = val if mask is None else val * mask[tap]
        weight = self.weight.reshape(self.num_output, c * self.maxk)
        out = (weight @ cols.reshape(c * self.maxk, outh * outw)).reshape(out_shape)
        return [self._finish(out)]

    # -- GPU -------------------------------------------------------------------------------

    #: every case runs on the GPU (ConvParams' rule is Convolution's, of one 3-D input)
    supports = Layer.supports

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        (kw, kh, dw, dh, sw, sh, _group, bias, act, a, b) = self.gpu_specs()
        has_mask = int(len(self.bottoms) == 3)
        constants = (kw, kh, dw, dh, sw, sh, bias, act, a, b, has_mask)
        return {"deform": PipelineSpec("deformableconv2d", constants, _LOCAL)}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, h, w = inputs[0].shape
        outc, outh, outw = outputs[0].shape
        mask = inputs[2] if len(inputs) == 3 else inputs[1]
        push = pack_push("8i", w, h, c, outw, outh, outc, self.pad_left, self.pad_top)
        groups = capped_groups((math.ceil(outw / 8), math.ceil(outh / 8), outc), ctx.info)
        buffers: list[Buffer | GpuBlob] = [inputs[0], inputs[1], mask, outputs[0]]
        buffers += [ctx.weight("weight"), ctx.weight("bias")]
        ctx.dispatch("deform", buffers, push, groups)


def bilinear(x: np.ndarray, y: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """ncnn's deformable sampling of every channel of ``x`` (c, h, w) at the float32 points
    (``y``, ``xs``): 0 for a point at or past -1 / h / w, and 0 for each corner outside."""
    _, h, w = x.shape
    inside = (y > -1) & (xs > -1) & (y < h) & (xs < w)
    y = np.where(inside, y, _F32(0))
    xs = np.where(inside, xs, _F32(0))
    y0f, x0f = np.floor(y), np.floor(xs)
    ly, lx = y - y0f, xs - x0f
    hy, hx = _F32(1) - ly, _F32(1) - lx
    y0, x0 = y0f.astype(np.int64), x0f.astype(np.int64)
    y1, x1 = y0 + 1, x0 + 1

    def corner(yi: np.ndarray, xi: np.ndarray, ok: np.ndarray) -> np.ndarray:
        values = x[:, np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)]
        return np.where(ok & inside, values, _F32(0))

    v1 = corner(y0, x0, (y0 >= 0) & (x0 >= 0))
    v2 = corner(y0, x1, (y0 >= 0) & (x1 <= w - 1))
    v3 = corner(y1, x0, (y1 <= h - 1) & (x0 >= 0))
    v4 = corner(y1, x1, (y1 <= h - 1) & (x1 <= w - 1))
    return (hy * hx * v1 + hy * lx * v2 + ly * hx * v3 + ly * lx * v4).astype(_F32)
