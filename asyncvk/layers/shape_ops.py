"""Squeeze, ExpandDims, Tile and Cast: the shape and type layers pnnx emits for modern models
(ncnn's src/layer/squeeze.cpp, expanddims.cpp, tile.cpp, cast.cpp).

Squeeze and ExpandDims only rename dims, so on the GPU their output shares the input's bytes;
Tile is one ``gather.comp`` dispatch over an index map built per plan; Cast is one
``unary.comp`` dispatch. asyncvk's blobs hold float32 values: a Cast to fp16 or bf16 gives the
float32 values those types hold, rounded to nearest even as ncnn does, and a Cast back to fp32
keeps them. One difference: ncnn's x86 fp16 cast rounds with F16C in runs of 4 (or 8, 16) and
its scalar loop takes the rest of each channel, flushing fp16 subnormals (below 2^-14) to 0
there; asyncvk keeps them everywhere, as the F16C runs do. int8 blobs have no float32 form
here, so casts from or to int8 are refused at load.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ._base import Layer, ShareInputOnGpu
from ._gpu_api import Shape
from ._registry import register_layer
from ._schema import Param, ints
from .activation import _Elementwise
from .data_movement import GatherOnGpu

#: The numpy axes of a dims-D blob by ncnn's letters (numpy order: c, d, h, w).
_AXES = {1: "w", 2: "hw", 3: "chw", 4: "cdhw"}


def _numpy_axis(axis: int, dims: int, layer: str) -> int:
    """An axes entry as a numpy axis of a ``dims``-D blob (negative counts from the end)."""
    pos = axis + dims if axis < 0 else axis
    if not 0 <= pos < dims:
        raise ValueError(f"{layer}: param 3 axes names axis {axis}, out of range for {dims}-D")
    return pos


@register_layer("Squeeze")
class Squeeze(ShareInputOnGpu):
    """Drop dims of size 1: those named by ``axes`` (3), else those flagged by squeeze_w (0),
    squeeze_h (1), squeeze_d (11), squeeze_c (2). A named dim larger than 1 stays (as ncnn);
    dropping every dim leaves shape (1,)."""

    squeeze_w = Param(0, int, 0)
    squeeze_h = Param(1, int, 0)
    squeeze_d = Param(11, int, 0)
    squeeze_c = Param(2, int, 0)
    axes = Param(3, ints)

    def _named(self, dims: int) -> set[int]:
        if self.axes:
            return {_numpy_axis(a, dims, "Squeeze") for a in self.axes}
        flags = {"w": self.squeeze_w, "h": self.squeeze_h, "d": self.squeeze_d}
        flags["c"] = self.squeeze_c
        return {i for i, letter in enumerate(_AXES[dims]) if flags[letter]}

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        named = self._named(len(shape))
        kept = tuple(n for i, n in enumerate(shape) if not (i in named and n == 1))
        return [kept or (1,)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], dtype=np.float32)
        return [x.reshape(self.output_shapes([x.shape])[0]).copy()]


@register_layer("ExpandDims")
class ExpandDims(ShareInputOnGpu):
    """Insert dims of size 1 at ``axes`` (3) of the output (negative counts from the output's
    end); the input's dims fill the other places in order. Up to 4 dims out."""

    axes = Param(3, ints)

    def validate(self) -> None:
        if len(self.axes) > 3:
            raise ValueError(f"ExpandDims param 3 (axes) has {len(self.axes)} values: at most 3")

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        outdims = len(shape) + len(self.axes)
        if outdims > 4:
            raise ValueError(f"ExpandDims: {shape} with {len(self.axes)} new axes exceeds 4-D")
        new = {_numpy_axis(a, outdims, "ExpandDims") for a in self.axes}
        if len(new) != len(self.axes):
            raise ValueError(f"ExpandDims: param 3 axes {self.axes} name one axis twice")
        rest = iter(shape)
        return [tuple(1 if i in new else next(rest) for i in range(outdims))]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], dtype=np.float32)
        return [x.reshape(self.output_shapes([x.shape])[0]).copy()]


@register_layer("Tile")
class Tile(GatherOnGpu):
    """Repeat the blob: ``tiles`` (1) times along ``axis`` (0), or numpy-style by ``repeats``
    (2: up to 4 counts, the last for w), which may add leading dims."""

    axis = Param(0, int, 0)
    tiles = Param(1, int, 1)
    repeats = Param(2, ints)

    def validate(self) -> None:
        if not 0 <= self.axis <= 3:
            raise ValueError(f"Tile param 0 (axis) = {self.axis}: must be 0..3")
        if self.tiles < 1:
            raise ValueError(f"Tile param 1 (tiles) = {self.tiles}: must be >= 1")
        if len(self.repeats) > 4 or any(r < 1 for r in self.repeats):
            raise ValueError(f"Tile param 2 (repeats) = {self.repeats}: 1 to 4 counts, each >= 1")

    def _repeats(self, dims: int) -> tuple[int, ...]:
        """(c, d, h, w) repeat counts, as tile.cpp picks them."""
        if not self.repeats:
            if dims == 1:
                return (1, 1, 1, self.tiles)
            if self.axis >= dims:
                raise ValueError(f"Tile: param 0 axis {self.axis} out of range for {dims}-D")
            letter = _AXES[dims][self.axis]
            return tuple(self.tiles if x == letter else 1 for x in "cdhw")
        r = self.repeats
        if len(r) == 3 and dims < 4:
            return (r[0], 1, r[1], r[2])
        return (1,) * (4 - len(r)) + r

    def _plan(self, shape: Shape) -> tuple[tuple[int, ...], tuple[int, ...], Shape]:
        """(the input as 4-D c, d, h, w; the repeats; the output shape)."""
        dims = len(shape)
        letters = _AXES[dims]
        given = dict(zip(letters, shape, strict=True))
        four = tuple(given.get(x, 1) for x in "cdhw")
        reps = self._repeats(dims)
        c, d, h, w = (n * k for n, k in zip(four, reps, strict=True))
        outdims = max(dims, len(self.repeats))
        out = {1: (w,), 2: (h, w), 3: (c, h, w), 4: (c, d, h, w)}[outdims]
        return four, reps, out

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        return [self._plan(tuple(input_shapes[0]))[2]]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], dtype=np.float32)
        four, reps, out = self._plan(x.shape)
        return [np.tile(x.reshape(four), reps).reshape(out)]

    # the index map is built directly, not probed in float32: every size runs on the GPU
    supports = Layer.supports

    def index_maps(self, shape: Shape, others: Sequence[Shape] = ()) -> list[np.ndarray]:
        four, reps, _ = self._plan(shape)
        index = np.arange(math.prod(four), dtype=np.int32).reshape(four)
        return [np.tile(index, reps).reshape(-1)]


#: ncnn's Cast type ids.
_AUTO, _FP32, _FP16, _INT8, _BF16 = 0, 1, 2, 3, 4
_TYPE_NAMES = {_AUTO: "auto", _FP32: "fp32", _FP16: "fp16", _INT8: "int8", _BF16: "bf16"}
#: (type_from, type_to) -> unary.comp op; None: the values stay as they are.
_CASTS: dict[tuple[int, int], int | None] = {
    (_FP32, _FP16): 33,
    (_FP32, _BF16): 34,
    (_FP16, _FP32): None,
    (_BF16, _FP32): None,
}


def round_fp16(x: np.ndarray) -> np.ndarray:
    """The fp16 values nearest to ``x`` (ties to even; inf past 65504), as float32."""
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """The bf16 values nearest to ``x`` (ties to even), as ncnn's ``float32_to_bfloat16``;
    NaN stays NaN."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return np.where(np.isnan(x), x, rounded.view(np.float32))


@register_layer("Cast")
class Cast(_Elementwise):
    """0 type_from(0), 1 type_to(0): 1 fp32, 2 fp16, 3 int8, 4 bf16 (0 auto). On float32
    blobs: fp32 -> fp16 or bf16 rounds, back to fp32 keeps the values, equal types pass
    through; int8 and fp16 <-> bf16 are refused."""

    type_from = Param(0, int, 0)
    type_to = Param(1, int, 0)

    def validate(self) -> None:
        for p in (Cast.type_from, Cast.type_to):
            value = getattr(self, p.name)
            if value not in _TYPE_NAMES:
                raise ValueError(f"Cast param {p.id} ({p.name}) = {value}: must be 0..4")
        pair = (self.type_from, self.type_to)
        if self.type_from != self.type_to and pair not in _CASTS:
            names = " -> ".join(_TYPE_NAMES[t] for t in pair)
            why = (
                "int8 blobs have no float32 form in asyncvk"
                if _INT8 in pair
                else ("ncnn leaves the output unwritten")
            )
            raise ValueError(f"Cast params 0/1 (type_from/type_to): {names} unsupported: {why}")
        self.alias = self.type_from == self.type_to or _CASTS[pair] is None

    def gpu_op(self) -> tuple[int, float, float]:
        op = _CASTS.get((self.type_from, self.type_to))
        return (0 if op is None else op, 0.0, 0.0)

    def apply(self, x: np.ndarray) -> np.ndarray:
        op = _CASTS.get((self.type_from, self.type_to))
        if op == 33:
            return round_fp16(x)
        if op == 34:
            return round_bf16(x)
        return x.copy()
