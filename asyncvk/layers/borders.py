"""Crop and Padding: cut a box out of a blob, or add borders around it, as ncnn's crop.cpp and
padding.cpp (including Crop's quirks, e.g. ``end == 0`` meaning "to the end", and a full-size
dim copied whole whatever its offset). On the GPU both gather through an index map
(:class:`~.data_movement.GatherOnGpu`); Crop with a reference blob and Padding with
per-channel values run the numpy reference.
"""

from __future__ import annotations

import numpy as np

from ._base import BlobCount, ModelBin
from ._geometry import shape4
from ._gpu_api import Shape
from ._limits import MAX_CHANNELS, MAX_EXTENT, MAX_PAD
from ._registry import register_layer
from ._schema import Param, ints
from ._shape_expr import ShapeExpr
from .data_movement import GatherOnGpu

_F32 = np.float32


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=_F32)


@register_layer("Crop")
class Crop(GatherOnGpu):
    """Cut a box: offsets + sizes (0/1/13/2, 3/4/14/5), offsets from both ends (6/7/15/8),
    numpy-style starts/ends/axes (9/10/11) or the same as shape expressions of the inputs
    (19/20/21, as pnnx writes them), or the size of a second (reference) input."""

    woffset = Param(0, int, 0, limit=MAX_EXTENT)
    hoffset = Param(1, int, 0, limit=MAX_EXTENT)
    doffset = Param(13, int, 0, limit=MAX_EXTENT)
    coffset = Param(2, int, 0, limit=MAX_EXTENT)
    outw = Param(3, int, 0, limit=MAX_EXTENT)
    outh = Param(4, int, 0, limit=MAX_EXTENT)
    outd = Param(14, int, 0, limit=MAX_EXTENT)
    outc = Param(5, int, 0, limit=MAX_EXTENT)
    woffset2 = Param(6, int, 0, limit=MAX_EXTENT)
    hoffset2 = Param(7, int, 0, limit=MAX_EXTENT)
    doffset2 = Param(15, int, 0, limit=MAX_EXTENT)
    coffset2 = Param(8, int, 0, limit=MAX_EXTENT)
    starts = Param(9, ints)
    ends = Param(10, ints)
    axes = Param(11, ints)
    starts_expr = Param(19, str)
    ends_expr = Param(20, str)
    axes_expr = Param(21, str)

    one_blob_only = False

    #: starts, ends and axes (None: every axis) as shape expressions, when 19 and 20 are given
    exprs: tuple[ShapeExpr, ShapeExpr, ShapeExpr | None] | None = None

    def validate(self) -> None:
        if bool(self.starts_expr) != bool(self.ends_expr) or (
            self.axes_expr and not self.starts_expr
        ):
            raise ValueError("Crop: params 19 and 20 (starts and ends expressions) go together")
        if self.starts_expr:
            axes = ShapeExpr(self.axes_expr) if self.axes_expr else None
            self.exprs = (ShapeExpr(self.starts_expr), ShapeExpr(self.ends_expr), axes)

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        """A second input is the reference, read exactly when no size param is given; with
        expressions, the inputs they read (the first is cut)."""
        if self.exprs is not None:
            n = max(1, *(e.blob_count for e in self.exprs if e is not None))
            return (n, n), (1, 1)
        return ((2, 2) if self.uses_reference else (1, 1)), (1, 1)

    @property
    def _numpy_style(self) -> bool:
        return (bool(self.starts) and bool(self.ends)) or self.exprs is not None

    @property
    def uses_reference(self) -> bool:
        """True when ncnn takes the crop size from a second input blob."""
        sizes = (self.outw, self.outh, self.outd, self.outc)
        offsets2 = (self.woffset2, self.hoffset2, self.doffset2, self.coffset2)
        return not any(sizes) and not any(offsets2) and not self._numpy_style

    def supports(self, input_shapes: list[Shape]) -> bool:
        """Expressions read the later inputs' shapes alone: the first is gathered."""
        if self.exprs is not None:
            return super().supports(input_shapes[:1])
        return super().supports(input_shapes)

    def _slices(self, shapes: list[Shape]) -> tuple[list[int], list[int], list[int]]:
        """The numpy-style starts, ends and axes: the params, or the expressions' values."""
        if self.exprs is None:
            return list(self.starts), list(self.ends), list(self.axes)
        starts, ends, axes = self.exprs
        return (
            starts.evaluate(shapes),
            ends.evaluate(shapes),
            [] if axes is None else axes.evaluate(shapes),
        )

    def _roi_self(self, shapes: list[Shape]) -> tuple[list[int], list[int]]:
        """resolve_crop_roi(bottom): offsets and sizes as ``[w, h, d, c]`` lists."""
        shape = shapes[0]
        w, h, d, c = shape4(shape)
        dims = len(shape)
        off = [0, 0, 0, 0]
        size = [w, h, d, c]
        full = [w, h, d, c]
        if self._numpy_style:
            # ncnn's axis numbering per dims -> index into [w, h, d, c]
            slot = {1: [0], 2: [1, 0], 3: [3, 1, 0], 4: [3, 2, 1, 0]}[dims]
            starts, ends, given_axes = self._slices(shapes)
            if given_axes:
                axes = [a + dims if a < 0 else a for a in given_axes]
            else:
                axes = list(range(dims))
            if len(starts) < len(axes) or len(ends) < len(axes):
                raise ValueError("Crop: params 9/10 need a start and an end per axis")
            for i, axis in enumerate(axes):
                if not 0 <= axis < dims:
                    raise ValueError(f"Crop: param 11 axis {given_axes[i]} out of range")
                k = slot[0] if dims == 1 else slot[axis]
                n = full[k]
                start, end = starts[i], ends[i]
                if start == -233:
                    start = 0
                if end == -233:
                    end = n
                off[k] = start if start >= 0 else n + start
                size[k] = min(n, end if end > 0 else n + end) - off[k]
            return off, size
        off = [self.woffset, self.hoffset, self.doffset, self.coffset]
        outs = [self.outw, self.outh, self.outd, self.outc]
        off2 = [self.woffset2, self.hoffset2, self.doffset2, self.coffset2]
        active = {1: [0], 2: [0, 1], 3: [0, 1, 3], 4: [0, 1, 2, 3]}[dims]
        for k in active:
            size[k] = full[k] - off[k] - off2[k]
            if outs[k] != -233:
                size[k] = min(outs[k], size[k])
        return off, size

    def _roi_ref(self, shape: Shape, ref: Shape) -> tuple[list[int], list[int]]:
        """resolve_crop_roi(bottom, reference): take the reference blob's sizes."""
        w, h, d, c = shape4(shape)
        rw, rh, rd, rc = shape4(ref)
        dims = len(shape)
        off = [self.woffset, self.hoffset, self.doffset, self.coffset]
        size = [w, h, d, c]
        size[0] = rw
        if dims >= 2:
            size[1] = rh
        if dims == 3:
            size[3] = rc if len(ref) == 3 else c
        if dims == 4:
            size[2] = rd
            size[3] = rc if len(ref) == 4 else c
        return off, size

    @staticmethod
    def _roi_data(shape: Shape, data: np.ndarray) -> tuple[list[int], list[int]]:
        """resolve_crop_roi(bottom, int*): offsets and sizes packed in the reference blob."""
        p = np.ascontiguousarray(data, dtype=_F32).reshape(-1).view(np.int32)
        w, h, d, c = shape4(shape)
        off = [0, 0, 0, 0]
        size = [w, h, d, c]
        dims = len(shape)
        if dims == 1:
            off[0], size[0] = int(p[0]), int(p[3])
        elif dims == 2:
            off[0], off[1], size[0], size[1] = (int(v) for v in (p[0], p[1], p[3], p[4]))
        elif dims == 3:
            off[0], off[1], off[3] = int(p[0]), int(p[1]), int(p[2])
            size[0], size[1], size[3] = int(p[3]), int(p[4]), int(p[5])
        else:
            off = [int(p[0]), int(p[1]), int(p[2]), int(p[3])]
            size = [int(p[4]), int(p[5]), int(p[6]), int(p[7])]
        return off, size

    def _roi(self, shapes: list[Shape], ref_data: np.ndarray | None) -> tuple[list[int], list[int]]:
        shape = shapes[0]
        ref = shapes[1] if len(shapes) > 1 else None
        if ref is not None and self.uses_reference:
            if self.woffset == -233:
                if ref_data is None:
                    raise ValueError("Crop: woffset -233 takes the crop box from blob data")
                off, size = self._roi_data(shape, ref_data)
            else:
                off, size = self._roi_ref(shape, ref)
        else:
            off, size = self._roi_self(shapes)
        full = shape4(shape)
        for k in range(4):
            if size[k] == full[k]:
                off[k] = 0  # ncnn copies a full-size dim whole, whatever its offset
            if off[k] < 0 or size[k] <= 0 or off[k] + size[k] > full[k]:
                raise ValueError(f"Crop: box offset {off} size {size} does not fit {shape}")
        return off, size

    @staticmethod
    def _numpy_box(dims: int, off: list[int], size: list[int]) -> tuple[slice, ...]:
        order = {1: [0], 2: [1, 0], 3: [3, 1, 0], 4: [3, 2, 1, 0]}[dims]
        return tuple(slice(off[k], off[k] + size[k]) for k in order)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shapes = [tuple(s) for s in input_shapes]
        off, size = self._roi(shapes, None)
        box = self._numpy_box(len(shapes[0]), off, size)
        return [tuple(s.stop - s.start for s in box)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = _f32(inputs[0])
        ref = inputs[1] if len(inputs) > 1 and self.uses_reference else None
        off, size = self._roi([tuple(np.shape(i)) for i in inputs], ref)
        return [x[self._numpy_box(x.ndim, off, size)].copy()]


@register_layer("Padding")
class Padding(GatherOnGpu):
    """Pad the borders: constant (per-channel values optional), replicate or reflect."""

    top = Param(0, int, 0, limit=MAX_PAD)
    bottom = Param(1, int, 0, limit=MAX_PAD)
    left = Param(2, int, 0, limit=MAX_PAD)
    right = Param(3, int, 0, limit=MAX_PAD)
    front = Param(7, int, 0, limit=MAX_PAD)
    behind = Param(8, int, 0, limit=MAX_PAD)
    per_channel_pad_data_size = Param(6, int, 0, limit=MAX_CHANNELS)
    type = Param(4, int, 0)
    value = Param(5, float, 0.0)

    def __init__(self) -> None:
        super().__init__()
        self.per_channel_pad_data = np.zeros(0, dtype=_F32)

    def validate(self) -> None:
        if self.type not in (0, 1, 2):
            raise ValueError(f"Padding: param 4 type={self.type} unsupported")
        pads = (self.top, self.bottom, self.left, self.right, self.front, self.behind)
        if min(pads) < 0:
            raise ValueError(f"Padding: negative pads {pads} unsupported")

    def load_model(self, mb: ModelBin) -> None:
        if self.per_channel_pad_data_size:
            data = mb.load(self.per_channel_pad_data_size, 1)
            self.per_channel_pad_data = np.asarray(data, dtype=_F32).reshape(-1)

    def _pads(self, dims: int) -> list[tuple[int, int]]:
        """(before, after) per numpy axis; front/behind pad c for 3-D and d for 4-D."""
        hw = [(self.top, self.bottom), (self.left, self.right)]
        fb = (self.front, self.behind)
        if dims == 1:
            return [(self.left, self.right)]
        if dims == 2:
            return hw
        if dims == 3:
            return [fb, *hw]
        return [(0, 0), fb, *hw]

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        if len(shape) > 4:
            raise ValueError(f"Padding: blob shape {shape} is not 1..4-D")
        pads = self._pads(len(shape))
        if self.type == 2:
            for n, (a, b) in zip(shape, pads, strict=True):
                if max(a, b) > n - 1:
                    raise ValueError(f"Padding: reflect pad {(a, b)} exceeds size {n} - 1")
        out = tuple(n + a + b for n, (a, b) in zip(shape, pads, strict=True))
        if self.type == 0 and self.per_channel_pad_data_size and len(shape) >= 3:
            if self.per_channel_pad_data_size < out[0]:
                raise ValueError(
                    f"Padding: param 6 per_channel_pad_data_size={self.per_channel_pad_data_size}"
                    f" is less than the {out[0]} padded channels"
                )
        return [out]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = _f32(inputs[0])
        self.output_shapes([x.shape])
        pads = self._pads(x.ndim)
        if self.type == 1:
            return [np.pad(x, pads, mode="edge")]
        if self.type == 2:
            return [np.pad(x, pads, mode="reflect")]
        if not self.per_channel_pad_data_size or x.ndim < 3:
            return [np.pad(x, pads, mode="constant", constant_values=_F32(self.value))]
        # per-channel constant: indexed by the output channel (3-D) or the channel (4-D)
        out = np.pad(x, pads, mode="constant")
        nq = out.shape[0]
        if self.per_channel_pad_data.size < nq:
            raise ValueError(f"Padding: {self.per_channel_pad_data.size} pad values < {nq}")
        mask = np.ones(out.shape, dtype=bool)
        mask[tuple(slice(a, a + n) for n, (a, _) in zip(x.shape, pads, strict=True))] = False
        fill = self.per_channel_pad_data[:nq].reshape((nq,) + (1,) * (x.ndim - 1))
        out = np.where(mask, np.broadcast_to(fill, out.shape), out).astype(_F32)
        return [out]

    # -- GPU: the gather of GatherOnGpu, the constant as its fill value ---------------------

    def fill(self) -> float:
        return self.value

    def supports(self, input_shapes: list[Shape]) -> bool:
        return self.per_channel_pad_data_size == 0 and super().supports(input_shapes)
