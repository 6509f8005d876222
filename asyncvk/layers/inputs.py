"""Input and MemoryData: the layers that bring blobs into the graph."""

from __future__ import annotations

import math

import numpy as np

from ._base import BlobCount, Layer, ModelBin
from ._limits import MAX_EXTENT, check_elements
from ._registry import register_layer
from ._schema import Param


def _shape_from(w: int, h: int, d: int, c: int) -> tuple[int, ...]:
    """The numpy shape of an ncnn Mat created as ``(w[, h[, d]], c)``: zeros mean absent."""
    if d != 0:
        return (c, d, h, w)
    if c != 0:
        return (c, h, w)
    if h != 0:
        return (h, w)
    return (w,)


class _Sized(Layer):
    """Params 0 w, 1 h, 11 d, 2 c: each >= 0 (0 = absent) and within MAX_EXTENT."""

    w = Param(0, int, 0, limit=MAX_EXTENT)
    h = Param(1, int, 0, limit=MAX_EXTENT)
    d = Param(11, int, 0, limit=MAX_EXTENT)
    c = Param(2, int, 0, limit=MAX_EXTENT)

    def validate(self) -> None:
        for p in (_Sized.w, _Sized.h, _Sized.d, _Sized.c):
            value = getattr(self, p.name)
            if value < 0:
                raise ValueError(f"{self.type_name} param {p.id} ({p.name}) = {value} must be >= 0")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (0, 0), (1, 1)


@register_layer("Input")
class Input(_Sized):
    """0 w, 1 h, 11 d, 2 c: a shape hint only; the blob fed by the caller passes through."""

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        if input_shapes:
            return [tuple(input_shapes[0])]
        if self.w <= 0:
            raise ValueError(f"Input {self.name!r} has no shape (params 0/1/11/2 unset)")
        return [_shape_from(self.w, self.h, self.d, self.c)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(inputs[0], np.float32)]

    @property
    def declared_shape(self) -> tuple[int, ...] | None:
        """The blob's shape as the ``.param`` declares it (None: it declares none)."""
        return _shape_from(self.w, self.h, self.d, self.c) if self.w > 0 else None


@register_layer("MemoryData")
class MemoryData(_Sized):
    """0 w, 1 h, 11 d, 2 c, 21 load_type(1): a constant blob stored in the weights."""

    load_type = Param(21, int, 1)

    one_blob_only = False

    def __init__(self) -> None:
        super().__init__()
        self.data = np.zeros(1, np.float32)

    def validate(self) -> None:
        super().validate()
        if self.load_type not in (0, 1):
            raise ValueError(f"MemoryData: param 21 load_type={self.load_type} must be 0 or 1")
        check_elements(math.prod(self.shape), "MemoryData's blob")

    @property
    def _empty(self) -> bool:
        return self.w == self.h == self.d == self.c == 0

    @property
    def shape(self) -> tuple[int, ...]:
        if self._empty:
            return (1,)  # ncnn creates an (uninitialised) 1-element Mat; we give 0
        return _shape_from(self.w, self.h, self.d, self.c)

    def load_model(self, mb: ModelBin) -> None:
        if self._empty:
            self.data = np.zeros(1, np.float32)
            return
        shape = self.shape
        self.data = np.asarray(mb.load(math.prod(shape), self.load_type), np.float32).reshape(shape)

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        return [self.shape]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [self.data.copy()]
