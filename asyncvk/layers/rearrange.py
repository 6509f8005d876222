"""Layers that rearrange a blob's values without arithmetic, as ncnn's reorg.cpp, flip.cpp,
diag.cpp, copyto.cpp and deepcopy.cpp: Reorg (space-to-depth), Flip, Diag, CopyTo, DeepCopy.

On the GPU, Reorg, Flip and Diag gather (:class:`GatherOnGpu`) through an index map that their
own numpy rearrangement makes of the element indexes (int32: no float32 probe, so no size
limit); DeepCopy's output shares its input's bytes (blobs are never written in place); CopyTo
copies its first input with a transfer command and scatters the second into it.
Where ncnn would read or write outside a blob (a CopyTo source that does not fit, an axis out of
range, a 4-D Reorg that reads one depth), asyncvk refuses the blob and says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..gpu._memory import Buffer
from ._base import BlobCount, Layer, ShareInputOnGpu
from ._gather import GatherOnGpu
from ._geometry import shape4
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
from ._limits import MAX_EXTENT, MAX_STRIDE
from ._registry import register_layer
from ._schema import Param, ints

_F32 = np.float32
#: The numpy axes of a dims-D blob by ncnn's letters (numpy order: c, d, h, w).
_AXES = {1: "w", 2: "hw", 3: "chw", 4: "cdhw"}


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=_F32)


def _axis(axis: int, dims: int, what: str) -> int:
    """``axis`` (negative counts from the end) as a numpy axis of a ``dims``-D blob."""
    pos = axis + dims if axis < 0 else axis
    if not 0 <= pos < dims:
        raise ValueError(f"{what} names axis {axis}, out of range for {dims}-D")
    return pos


class _Rearrange(GatherOnGpu):
    """A one-input mover whose ``move`` works on any dtype: the forward pass moves the values,
    the GPU's index map is the same move of the element indexes."""

    supports = Layer.supports

    def move(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [self.move(_f32(inputs[0]))]

    def index_maps(self, shape: Shape, others: Sequence[Shape] = ()) -> list[np.ndarray]:
        index = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
        return [np.ascontiguousarray(self.move(index)).reshape(-1)]


@register_layer("Reorg")
class Reorg(_Rearrange):
    """Space-to-depth by ``stride`` (0): output channel (q, sh, sw) holds input channel q's
    pixels (i * stride + sh, j * stride + sw). ``mode`` (1) 0 orders the output channels
    (c, sh, sw), as PyTorch's pixel_unshuffle; 1 orders them (sh, sw, c). A 1-D or 2-D blob is
    one channel; rows and columns past the last whole stride are dropped, as ncnn does."""

    stride = Param(0, int, 1, limit=MAX_STRIDE)
    mode = Param(1, int, 0)

    def validate(self) -> None:
        if self.stride < 1:
            raise ValueError(f"Reorg param 0 (stride) = {self.stride}: must be >= 1")
        if self.mode not in (0, 1):
            raise ValueError(f"Reorg param 1 (mode) = {self.mode}: must be 0 or 1")

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        if len(shape) == 4:  # ncnn reads the first depth of each channel and drops the rest
            raise ValueError(f"Reorg: a 4-D blob {shape} is not supported (1-D to 3-D)")
        w, h, _, c = shape4(shape)
        s = self.stride
        if h < s or w < s:
            raise ValueError(f"Reorg: blob {shape} is smaller than the stride {s}")
        return [(c * s * s, h // s, w // s)]

    def move(self, x: np.ndarray) -> np.ndarray:
        ((outc, outh, outw),) = self.output_shapes([x.shape])
        w, h, _, c = shape4(x.shape)
        s = self.stride
        # y[q, i, sh, j, sw] = x[q, i * s + sh, j * s + sw]
        y = x.reshape(c, h, w)[:, : outh * s, : outw * s].reshape(c, outh, s, outw, s)
        order = (0, 2, 4, 1, 3) if self.mode == 0 else (2, 4, 0, 1, 3)
        return np.ascontiguousarray(y.transpose(order)).reshape(outc, outh, outw)


@register_layer("Flip")
class Flip(_Rearrange):
    """Reverse the blob along each of ``axes`` (0: numpy axes, negative from the end; an axis
    named twice flips once). No axes: the blob passes through (its bytes, on the GPU)."""

    axes = Param(0, ints)

    def validate(self) -> None:
        if len(self.axes) > 4 or any(not -4 <= a <= 3 for a in self.axes):
            raise ValueError(f"Flip param 0 (axes) = {self.axes}: at most 4 axes, each -4..3")
        self.alias = not self.axes

    def _flipped(self, dims: int) -> tuple[int, ...]:
        """The numpy axes to reverse. ncnn ignores (or, below -dims, misreads) an axis the blob
        lacks, and flips a 1-D blob whatever the axis: asyncvk refuses such an axis."""
        return tuple(sorted({_axis(a, dims, "Flip: param 0 axes") for a in self.axes}))

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        self._flipped(len(shape))
        return [shape]

    def move(self, x: np.ndarray) -> np.ndarray:
        axes = self._flipped(x.ndim)
        return np.flip(x, axes).copy() if axes else x.copy()


@register_layer("Diag")
class Diag(_Rearrange):
    """1-D: the square matrix with the blob on diagonal ``diagonal`` (0; above the main one when
    > 0, below when < 0) and zeros elsewhere. 2-D: that diagonal of the matrix, as a 1-D blob.
    A diagonal outside the matrix (ncnn's empty blob) is refused."""

    diagonal = Param(0, int, 0, limit=MAX_EXTENT)

    def validate(self) -> None:
        if self.diagonal < -MAX_EXTENT:
            raise ValueError(
                f"Diag param 0 (diagonal) = {self.diagonal} is below the limit {-MAX_EXTENT}"
            )

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        k = self.diagonal
        if len(shape) == 1:
            n = shape[0] + abs(k)
            return [(n, n)]
        if len(shape) == 2:
            h, w = shape
            n = min(h, w - k) if k >= 0 else min(h + k, w)
            if n <= 0:
                raise ValueError(f"Diag: diagonal {k} lies outside the {h} x {w} matrix")
            return [(n,)]
        raise ValueError(f"Diag: takes a 1-D or 2-D blob, got {shape}")

    def move(self, x: np.ndarray) -> np.ndarray:
        ((n, *_),) = self.output_shapes([x.shape])
        if x.ndim == 2:
            return np.diagonal(x, self.diagonal).copy()
        # off the diagonal: 0, or in an index map the gather's fill (-1)
        out = np.full((n, n), -1 if x.dtype.kind == "i" else 0, x.dtype)
        k = self.diagonal
        i = np.arange(x.shape[0])
        out[i + max(-k, 0), i + max(k, 0)] = x
        return out


@register_layer("CopyTo")
class CopyTo(Layer):
    """A copy of input 0 with input 1 written into it at offsets: per dim (w 0, h 1, d 13,
    c 2), or numpy-style ``starts`` (9; negative from the end, -233 for 0) on ``axes`` (11; all
    when empty). An input 1 of input 0's shape is the output whatever the offsets. ncnn copies
    without bounds checks; asyncvk refuses a source that does not fit.

    On the GPU: a buffer copy of input 0 (or input 1, of the same shape), then ``scatter.comp``
    places input 1's values over an index map made directly from the box (no probe: any size).
    """

    woffset = Param(0, int, 0, limit=MAX_EXTENT)
    hoffset = Param(1, int, 0, limit=MAX_EXTENT)
    coffset = Param(2, int, 0, limit=MAX_EXTENT)
    starts = Param(9, ints)
    axes = Param(11, ints)
    doffset = Param(13, int, 0, limit=MAX_EXTENT)

    one_blob_only = False
    gpu = True

    def validate(self) -> None:
        for p in (CopyTo.woffset, CopyTo.hoffset, CopyTo.coffset, CopyTo.doffset):
            value = getattr(self, p.name)
            if value < 0:
                raise ValueError(f"CopyTo param {p.id} ({p.name}) = {value}: must be >= 0")
        if len(self.axes) > 4:
            raise ValueError(f"CopyTo param 11 (axes) = {self.axes}: at most 4 axes")
        if self.axes and len(self.starts) < len(self.axes):
            raise ValueError(
                f"CopyTo param 9 (starts) = {self.starts}: needs a start for each of the "
                f"{len(self.axes)} axes of param 11"
            )

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (2, 2), (1, 1)

    def _offsets(self, shape: Shape) -> list[int]:
        """Where input 1 goes, per numpy axis of input 0 (resolve_copyto_offset)."""
        dims = len(shape)
        if not self.starts:
            given = {"w": self.woffset, "h": self.hoffset, "d": self.doffset, "c": self.coffset}
            return [given[letter] for letter in _AXES[dims]]
        axes = self.axes or tuple(range(dims))
        if len(self.starts) < len(axes):
            raise ValueError(
                f"CopyTo: param 9 starts {self.starts} needs a start for each of the {dims} dims"
            )
        offsets = [0] * dims
        for axis, start in zip(axes, self.starts, strict=False):
            pos = _axis(axis, dims, "CopyTo: param 11 axes")
            start = 0 if start == -233 else start
            offsets[pos] = start if start >= 0 else shape[pos] + start
        return offsets

    def _box(self, shape: Shape, src: Shape) -> tuple[slice, ...] | None:
        """The box of input 0 that input 1 fills; None when input 1 is the output."""
        if shape == src:
            return None
        dims = len(shape)
        slots = {1: (0,), 2: (1, 0), 3: (3, 1, 0), 4: (3, 2, 1, 0)}[dims]  # into (w, h, d, c)
        src4 = shape4(src)
        if any(src4[i] != 1 for i in range(4) if i not in slots):
            raise ValueError(f"CopyTo: source {src} has dims that the {dims}-D blob {shape} lacks")
        extents = [src4[i] for i in slots]
        offsets = self._offsets(shape)
        for o, n, size in zip(offsets, extents, shape, strict=True):
            if o < 0 or o + n > size:
                raise ValueError(
                    f"CopyTo: source {src} at offsets {tuple(offsets)} does not fit in {shape}"
                )
        return tuple(slice(o, o + n) for o, n in zip(offsets, extents, strict=True))

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        self._box(shape, tuple(input_shapes[1]))
        return [shape]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x, src = _f32(inputs[0]), _f32(inputs[1])
        box = self._box(x.shape, src.shape)
        if box is None:
            return [src.copy()]
        out = x.copy()
        out[box] = src.reshape(tuple(s.stop - s.start for s in box))
        return [out]

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {"scatter": PipelineSpec("scatter", (), local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        x, src = inputs
        out = outputs[0]
        box = self._box(x.shape, src.shape)
        if box is None:
            ctx.copy(src, 0, out, 0, out.size)
            return
        ctx.copy(x, 0, out, 0, out.size)
        ctx.barrier()
        index = np.arange(out.size, dtype=np.int32).reshape(out.shape)[box].reshape(-1)
        bufs: list[Buffer | GpuBlob] = [src, out, ctx.constant(index)]
        groups = groups_1d(src.size, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("scatter", bufs, pack_push("i", src.size), groups)


@register_layer("DeepCopy")
class DeepCopy(ShareInputOnGpu):
    """A copy of the blob (ncnn clones it). Nothing writes a blob in place here, so on the GPU
    the output shares the input's bytes."""

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        return [tuple(input_shapes[0])]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [_f32(inputs[0]).copy()]
