"""GridSample, as ncnn's gridsample.cpp (its 2023 form, with permute_fusion): sample a (c, h, w)
blob at the grid's normalized (x, y) points; numpy here, ``gridsample.comp`` on the GPU.

The grid is (outh, outw, 2) as pnnx writes it, or (2, outh, outw) with permute_fusion 1. ncnn's
arithmetic is followed in float32: padding folds each coordinate once (reflection reflects
once, not periodically); bilinear and nearest fold the sample point, bicubic folds each of its 16
integer taps; taps that stay outside read 0. (With reflection and align_corner 1 a point more
than one image span outside stays outside: ncnn's x86 path then reads outside the image, here it
reads 0.)
"""

from __future__ import annotations

import math

import numpy as np

from ._base import BlobCount, Layer, Shape
from ._gpu_api import GpuBlob, GpuTarget, PipelineSpec, RecordContext, capped_groups, pack_push
from ._registry import register_layer
from ._schema import Param

BILINEAR, NEAREST, BICUBIC = 1, 2, 3
ZEROS, BORDER, REFLECTION = 1, 2, 3
_F32 = np.float32


def unnormalize(coord: np.ndarray, size: int, align_corner: int) -> np.ndarray:
    """[-1, 1] to pixels: corner centres with align_corner, else corner edges."""
    if align_corner:
        return (coord + _F32(1)) / _F32(2) * _F32(size - 1)
    return ((coord + _F32(1)) * _F32(size) - _F32(1)) / _F32(2)


def fold(coord: np.ndarray, size: int, padding_mode: int, align_corner: int) -> np.ndarray:
    """ncnn's compute_coord: clamp (border) or reflect once (reflection); zeros leaves it."""
    if padding_mode == BORDER:
        return np.clip(coord, _F32(0), _F32(size - 1))
    if padding_mode != REFLECTION:
        return coord
    if align_corner:
        high = _F32(size - 1)
        return high - np.abs(np.abs(coord) - high)
    high = _F32(size)
    reflected = high - np.abs(np.abs(coord + _F32(0.5)) - high) - _F32(0.5)
    return np.clip(reflected, _F32(0), _F32(size - 1))


def cubic_coeffs(t: np.ndarray) -> list[np.ndarray]:
    """ncnn's interpolate_cubic (A = -0.75), the fourth weight 1 minus the other three."""
    a = _F32(-0.75)
    t0, t1, t2 = t + _F32(1), t, _F32(1) - t
    c0 = a * t0 * t0 * t0 - _F32(5) * a * t0 * t0 + _F32(8) * a * t0 - _F32(4) * a
    c1 = (a + _F32(2)) * t1 * t1 * t1 - (a + _F32(3)) * t1 * t1 + _F32(1)
    c2 = (a + _F32(2)) * t2 * t2 * t2 - (a + _F32(3)) * t2 * t2 + _F32(1)
    return [c0, c1, c2, _F32(1) - c0 - c1 - c2]


@register_layer("GridSample")
class GridSample(Layer):
    """0 sample_type (1 bilinear, 2 nearest, 3 bicubic), 1 padding_mode (1 zeros, 2 border,
    3 reflection), 2 align_corner, 3 permute_fusion. Inputs: the (c, h, w) blob and the grid;
    output (c, outh, outw)."""

    sample_type = Param(0, int, BILINEAR)
    padding_mode = Param(1, int, ZEROS)
    align_corner = Param(2, int, 0)
    permute_fusion = Param(3, int, 0)

    one_blob_only = False
    gpu = True

    def validate(self) -> None:
        if self.sample_type not in (BILINEAR, NEAREST, BICUBIC):
            raise ValueError(
                f"param 0 sample_type={self.sample_type} must be 1 (bilinear), 2 (nearest) "
                "or 3 (bicubic)"
            )
        if self.padding_mode not in (ZEROS, BORDER, REFLECTION):
            raise ValueError(
                f"param 1 padding_mode={self.padding_mode} must be 1 (zeros), 2 (border) "
                "or 3 (reflection)"
            )
        if self.align_corner not in (0, 1):
            raise ValueError(f"param 2 align_corner={self.align_corner} must be 0 or 1")
        if self.permute_fusion not in (0, 1):
            raise ValueError(f"param 3 permute_fusion={self.permute_fusion} must be 0 or 1")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (2, 2), (1, 1)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        image, grid = (tuple(s) for s in input_shapes)
        if len(image) != 3:
            raise ValueError(f"GridSample samples a dims 3 blob (c, h, w), got shape {image}")
        if len(grid) != 3:
            raise ValueError(f"GridSample takes a dims 3 grid, got shape {grid}")
        if self.permute_fusion:
            if grid[0] != 2:
                raise ValueError(f"GridSample's grid with permute_fusion is (2, h, w), got {grid}")
            return [(image[0], grid[1], grid[2])]
        if grid[2] != 2:
            raise ValueError(f"GridSample's grid is (h, w, 2), got shape {grid}")
        return [(image[0], grid[0], grid[1])]

    def _points(self, grid: np.ndarray, w: int, h: int) -> tuple[np.ndarray, np.ndarray]:
        """The sample points in pixels, (outh, outw) each."""
        gx, gy = (grid[0], grid[1]) if self.permute_fusion else (grid[..., 0], grid[..., 1])
        return unnormalize(gx, w, self.align_corner), unnormalize(gy, h, self.align_corner)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        image = np.asarray(inputs[0], _F32)
        grid = np.asarray(inputs[1], _F32)
        self.output_shapes([image.shape, grid.shape])
        h, w = image.shape[1:]
        sx, sy = self._points(grid, w, h)
        if self.sample_type == BICUBIC:
            return [self._bicubic(image, sx, sy)]
        sx = fold(sx, w, self.padding_mode, self.align_corner)
        sy = fold(sy, h, self.padding_mode, self.align_corner)
        if self.sample_type == NEAREST:
            x0 = np.floor(sx + _F32(0.5)).astype(np.int64)
            y0 = np.floor(sy + _F32(0.5)).astype(np.int64)
            return [_taps(image, x0, y0)]
        x0f, y0f = np.floor(sx), np.floor(sy)
        alpha, beta = sx - x0f, sy - y0f
        x0, y0 = x0f.astype(np.int64), y0f.astype(np.int64)
        top = _taps(image, x0, y0) * (_F32(1) - alpha) + _taps(image, x0 + 1, y0) * alpha
        bottom = _taps(image, x0, y0 + 1) * (_F32(1) - alpha) + _taps(image, x0 + 1, y0 + 1) * alpha
        return [(top * (_F32(1) - beta) + bottom * beta).astype(_F32)]

    def _bicubic(self, image: np.ndarray, sx: np.ndarray, sy: np.ndarray) -> np.ndarray:
        h, w = image.shape[1:]
        x1f, y1f = np.floor(sx), np.floor(sy)
        cx, cy = cubic_coeffs(sx - x1f), cubic_coeffs(sy - y1f)
        mode, align = self.padding_mode, self.align_corner
        # each integer tap folded, then truncated to int as ncnn's int parameters do
        xs = [fold(x1f + _F32(i - 1), w, mode, align).astype(np.int64) for i in range(4)]
        ys = [fold(y1f + _F32(j - 1), h, mode, align).astype(np.int64) for j in range(4)]
        out = np.zeros((image.shape[0], *sx.shape), _F32)
        for j in range(4):
            row = sum((_taps(image, xs[i], ys[j]) * cx[i] for i in range(4)), np.zeros_like(out))
            out = out + row * cy[j]
        return out.astype(_F32)

    # -- GPU -------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        spec = (self.sample_type, self.padding_mode, self.align_corner, self.permute_fusion)
        return {"gridsample": PipelineSpec("gridsample", spec, (8, 8, 1))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, h, w = inputs[0].shape
        _, oh, ow = outputs[0].shape
        push = pack_push("5i", w, h, c, ow, oh)
        groups = capped_groups((math.ceil(ow / 8), math.ceil(oh / 8), c), ctx.info)
        ctx.dispatch("gridsample", [inputs[0], inputs[1], outputs[0]], push, groups)


def _taps(image: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """image[:, y, x] per point, 0 where (x, y) lies outside: (c, outh, outw)."""
    h, w = image.shape[1:]
    inside = (x >= 0) & (x < w) & (y >= 0) & (y < h)
    values = image[:, np.clip(y, 0, h - 1), np.clip(x, 0, w - 1)]
    return np.where(inside, values, _F32(0)).astype(_F32)
