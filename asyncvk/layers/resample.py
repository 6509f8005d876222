"""Interp: nearest, bilinear and bicubic resize with ncnn's exact coordinate math, and its GPU
path on ``interp.comp`` (3-D blobs, fixed target size).

The coefficient tables (``linear_coeffs``, ``cubic_coeffs``) and the nearest-neighbour
``ws``/``hs`` rule are reproduced step by step in float32 from src/layer/interp.cpp, since
resize results differ visibly between frameworks at the borders.
"""

from __future__ import annotations

import math

import numpy as np

from ._base import BlobCount, Layer
from ._geometry import shape4
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    Shape,
    capped_groups,
    pack_push,
)
from ._limits import MAX_EXTENT
from ._registry import register_layer
from ._schema import Param
from ._shape_expr import ShapeExpr

_F32 = np.float32


def _source_coords(w: int, outw: int, align_corner: int) -> np.ndarray:
    """float32 ``fx`` per output index, as ncnn computes it in double then rounds."""
    dx = np.arange(outw, dtype=np.float64)
    if align_corner:
        if outw == 1:
            # ncnn divides by zero here (0 * inf); take the first source pixel instead
            return np.zeros(1, dtype=_F32)
        scale = (w - 1) / (outw - 1)
        return (dx * scale).astype(_F32)
    scale = w / outw
    return ((dx + 0.5) * scale - 0.5).astype(_F32)


def linear_coeffs(w: int, outw: int, align_corner: int) -> tuple[np.ndarray, np.ndarray]:
    """``(xofs, alpha)``: left source index and the two float32 weights per output index."""
    fx = _source_coords(w, outw, align_corner)
    sx = np.floor(fx).astype(np.int64)
    fx = (fx - sx.astype(_F32)).astype(_F32)
    low = sx < 0
    sx[low] = 0
    fx[low] = 0
    high = sx >= w - 1
    sx[high] = w - 2
    fx[high] = 1
    alpha = np.stack([_F32(1) - fx, fx], axis=1).astype(_F32)
    return sx, alpha


def interpolate_cubic(fx: np.ndarray) -> np.ndarray:
    """ncnn's Keys kernel (A = -0.75) weights for taps -1, 0, 1, 2, in float32 order."""
    a = _F32(-0.75)
    fx0 = fx + _F32(1)
    fx1 = fx
    fx2 = _F32(1) - fx
    c0 = a * fx0 * fx0 * fx0 - _F32(5) * a * fx0 * fx0 + _F32(8) * a * fx0 - _F32(4) * a
    c1 = (a + _F32(2)) * fx1 * fx1 * fx1 - (a + _F32(3)) * fx1 * fx1 + _F32(1)
    c2 = (a + _F32(2)) * fx2 * fx2 * fx2 - (a + _F32(3)) * fx2 * fx2 + _F32(1)
    c3 = _F32(1) - c0 - c1 - c2
    return np.stack([c0, c1, c2, c3], axis=1).astype(_F32)


def cubic_coeffs(w: int, outw: int, align_corner: int) -> tuple[np.ndarray, np.ndarray]:
    """``(xofs, alpha)``: centre source index and four float32 weights, with ncnn's folding
    of out-of-range taps onto the edge pixels (the four ``if`` blocks run in order)."""
    fx = _source_coords(w, outw, align_corner)
    sx = np.floor(fx).astype(np.int64)
    fx = (fx - sx.astype(_F32)).astype(_F32)
    al = interpolate_cubic(fx)
    m = sx <= -1
    sx[m] = 1
    al[m, 0] = _F32(1) - al[m, 3]
    al[m, 1] = al[m, 3]
    al[m, 2] = 0
    al[m, 3] = 0
    m = sx == 0
    sx[m] = 1
    al[m, 0] = al[m, 0] + al[m, 1]
    al[m, 1] = al[m, 2]
    al[m, 2] = al[m, 3]
    al[m, 3] = 0
    m = sx == w - 2
    sx[m] = w - 3
    al[m, 3] = al[m, 2] + al[m, 3]
    al[m, 2] = al[m, 1]
    al[m, 1] = al[m, 0]
    al[m, 0] = 0
    m = sx >= w - 1
    sx[m] = w - 3
    al[m, 3] = _F32(1) - al[m, 0]
    al[m, 2] = al[m, 0]
    al[m, 1] = 0
    al[m, 0] = 0
    return sx, al


def _resize_last_axis(x: np.ndarray, ofs: np.ndarray, coeffs: np.ndarray, taps: int) -> np.ndarray:
    """Weighted taps along the last axis, summed left to right in float32 as ncnn does.

    Tap indices are clamped into the row; ncnn reads past a row only with a zero weight,
    except bicubic on rows shorter than 4 (see the module notes).
    """
    n = x.shape[-1]
    first = -1 if taps == 4 else 0
    out = None
    for t in range(taps):
        idx = np.clip(ofs + first + t, 0, n - 1)
        term = x[..., idx] * coeffs[:, t]
        out = term if out is None else out + term
    assert out is not None
    return out.astype(_F32)


def _resize_axis(
    x: np.ndarray, axis: int, size: int, out: int, resize_type: int, align_corner: int
) -> np.ndarray:
    """Bilinear (2) or bicubic (3) resampling of one axis of ``x`` from ``size`` to ``out``."""
    if resize_type == 2:
        ofs, coeffs = linear_coeffs(size, out, align_corner)
        taps = 2
    else:
        ofs, coeffs = cubic_coeffs(size, out, align_corner)
        taps = 4
    moved = np.moveaxis(x, axis, -1)
    return np.moveaxis(_resize_last_axis(moved, ofs, coeffs, taps), -1, axis)


def _scaled(size: int, scale: float) -> int:
    """ncnn's ``int(size * scale)`` in float32, refused when it is not a blob dimension."""
    with np.errstate(over="ignore"):
        value = float(_F32(size) * _F32(scale))
    if not math.isfinite(value) or value > MAX_EXTENT:
        raise ValueError(f"Interp: {size} x scale {scale} = {value} exceeds the limit {MAX_EXTENT}")
    return int(value)


@register_layer("Interp")
class Interp(Layer):
    """Resize: ``resize_type`` (0) 1 nearest, 2 bilinear, 3 bicubic; scales (1 h, 2 w) or
    sizes (3 h, 4 w); ``dynamic_target_size`` (5) takes the size from a second blob;
    ``align_corner`` (6); or the size computed from the inputs' shapes (``size_expr``, 9: ``w``
    or ``w,h``, as pnnx writes ``F.interpolate(x, size=y.shape[2:])``)."""

    resize_type = Param(0, int, 0)
    height_scale = Param(1, float, 1.0)
    width_scale = Param(2, float, 1.0)
    output_height = Param(3, int, 0, limit=MAX_EXTENT)
    output_width = Param(4, int, 0, limit=MAX_EXTENT)
    dynamic_target_size = Param(5, int, 0)
    align_corner = Param(6, int, 0)
    size_expr = Param(9, str)
    #: the parsed ``size_expr`` (None: the size comes from params 1-5)
    expr: ShapeExpr | None = None

    one_blob_only = False
    gpu = True

    def validate(self) -> None:
        if self.resize_type not in (1, 2, 3):
            raise ValueError(f"Interp: param 0 resize_type={self.resize_type} unsupported")
        if self.size_expr:
            self.expr = ShapeExpr(self.size_expr)
            if len(self.expr.terms) > 2:
                raise ValueError(f"Interp: param 9 {self.size_expr!r}: one or two sizes (w, h)")
        for p in (Interp.output_height, Interp.output_width):
            if getattr(self, p.name) < 0:
                raise ValueError(
                    f"Interp param {p.id} ({p.name}) = {getattr(self, p.name)} must be >= 0"
                )
        if not self.dynamic_target_size and (self.output_width == 0 or self.output_height == 0):
            for q in (Interp.height_scale, Interp.width_scale):
                scale = getattr(self, q.name)
                with np.errstate(over="ignore"):
                    as_read = float(_F32(scale))  # ncnn reads a float32: 1e39 is inf
                if not (math.isfinite(as_read) and as_read > 0):
                    raise ValueError(
                        f"Interp param {q.id} ({q.name}) = {scale} must be a finite number > 0"
                    )

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        """dynamic_target_size (param 5) takes the output size from a second input; a size
        expression reads the inputs it names."""
        n = 2 if self.dynamic_target_size else 1
        if self.expr is not None:
            n = max(n, self.expr.blob_count)
        return (n, n), (1, 1)

    @property
    def _width_given(self) -> bool:
        """Whether the output width is given (a param or an expression), not scaled."""
        return bool(self.output_width) or self.expr is not None

    @property
    def _height_given(self) -> bool:
        return bool(self.output_height) or self.expr is not None

    def _target(self, shape: Shape, ref: Shape | None, shapes: list[Shape]) -> tuple[int, int]:
        """``(outw, outh)`` as Interp::forward resolves them."""
        if self.expr is not None:
            sizes = self.expr.evaluate(shapes)
            return (sizes[0], shape4(shape)[1]) if len(sizes) == 1 else (sizes[0], sizes[1])
        if self.dynamic_target_size:
            if ref is None:
                raise ValueError("Interp: dynamic_target_size needs a reference blob")
            rw, rh, _, _ = shape4(ref)
            return rw, rh
        w, h, _, _ = shape4(shape)
        if len(shape) == 1:
            w = h = 1
        outw, outh = self.output_width, self.output_height
        if outw == 0 or outh == 0:
            outw = _scaled(w, self.width_scale)
            outh = _scaled(h, self.height_scale)
        return outw, outh

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        ref = tuple(input_shapes[1]) if len(input_shapes) > 1 else None
        outw, outh = self._target(shape, ref, [tuple(s) for s in input_shapes])
        if len(shape) == 4:
            raise ValueError("Interp: 4-D input unsupported")
        if len(shape) == 1:
            out: Shape = (shape[0], outh, outw)
        elif len(shape) == 2:
            out = (shape[0], outw)
        else:
            out = (shape[0], outh, outw)
        if min(out) <= 0:
            raise ValueError(f"Interp: empty output {out} for input {shape}")
        return [out]

    def _nearest_index(self, size: int, out: int, given: bool, scale: float) -> np.ndarray:
        """ncnn's nearest rule: ``min(int(x * s), size - 1)`` with ``s = size / out`` when the
        output size was a param, else ``1 / scale`` (also under dynamic_target_size)."""
        s = _F32(size) / _F32(out) if given else _F32(1) / _F32(scale)
        x = np.arange(out, dtype=_F32)
        return np.minimum((x * s).astype(np.int64), size - 1)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], dtype=_F32)
        shapes = [tuple(np.shape(i)) for i in inputs]
        ref = shapes[1] if len(shapes) > 1 else None
        self.output_shapes(shapes)
        outw, outh = self._target(x.shape, ref, shapes)
        if x.ndim == 1:
            return [np.broadcast_to(x[:, None, None], (x.shape[0], outh, outw)).copy()]
        if x.ndim == 2:
            h, w = x.shape
            if outw == w:
                return [x.copy()]
            if self.resize_type == 1:
                ix = self._nearest_index(w, outw, self._width_given, self.width_scale)
                return [x[:, ix].copy()]
            return [_resize_axis(x, 1, w, outw, self.resize_type, self.align_corner)]
        _, h, w = x.shape
        if outw == w and outh == h:
            return [x.copy()]
        if self.resize_type == 1:
            iy = self._nearest_index(h, outh, self._height_given, self.height_scale)
            ix = self._nearest_index(w, outw, self._width_given, self.width_scale)
            return [x[:, iy][:, :, ix].copy()]
        # ncnn resizes rows along w first, then blends rows along h
        y = _resize_axis(x, 2, w, outw, self.resize_type, self.align_corner)
        return [_resize_axis(y, 1, h, outh, self.resize_type, self.align_corner)]

    # -- GPU -------------------------------------------------------------------------------

    def supports(self, input_shapes: list[Shape]) -> bool:
        return (
            (len(input_shapes) == 1 or self.expr is not None)
            and len(input_shapes[0]) == 3
            and self.resize_type in (1, 2, 3)
            and (not self.dynamic_target_size or self.expr is not None)
        )

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        spec = (self.resize_type, self.align_corner)
        return {"interp": PipelineSpec("interp", spec, (8, 8, 1))}

    def _gpu_scales(self, w: int, h: int, ow: int, oh: int) -> tuple[float, float]:
        if self.resize_type == 1:
            sx = w / ow if self._width_given else 1.0 / self.width_scale
            sy = h / oh if self._height_given else 1.0 / self.height_scale
            return (sx, sy)
        if self.align_corner:
            return ((w - 1) / (ow - 1) if ow > 1 else 0.0, (h - 1) / (oh - 1) if oh > 1 else 0.0)
        return (w / ow, h / oh)

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, h, w = inputs[0].shape
        _, oh, ow = outputs[0].shape
        sx, sy = self._gpu_scales(w, h, ow, oh)
        push = pack_push("5i2f", w, h, c, ow, oh, sx, sy)
        groups = capped_groups((math.ceil(ow / 8), math.ceil(oh / 8), c), ctx.info)
        ctx.dispatch("interp", [inputs[0], outputs[0]], push, groups)
