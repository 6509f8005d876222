"""Input and MemoryData: the layers that bring blobs into the graph."""

from __future__ import annotations

import math

import numpy as np

from .._base import BlobCount, Layer, ModelBin
from .._limits import MAX_EXTENT, check_elements, check_params
from .._paramdict import ParamDict
from .._registry import register_layer


def _read_dims(layer: Layer, pd: ParamDict) -> tuple[int, int, int, int]:
    """Params 0 w, 1 h, 11 d, 2 c: each >= 0 (0 = absent) and within MAX_EXTENT."""
    dims = [(0, "w", pd.get_int(0, 0)), (1, "h", pd.get_int(1, 0))]
    dims += [(11, "d", pd.get_int(11, 0)), (2, "c", pd.get_int(2, 0))]
    check_params(layer.type_name, MAX_EXTENT, *dims)
    for key, name, value in dims:
        if value < 0:
            raise ValueError(f"{layer.type_name} param {key} ({name}) = {value} must be >= 0")
    return dims[0][2], dims[1][2], dims[2][2], dims[3][2]


def _shape_from(w: int, h: int, d: int, c: int) -> tuple[int, ...]:
    """The numpy shape of an ncnn Mat created as ``(w[, h[, d]], c)``: zeros mean absent."""
    if d != 0:
        return (c, d, h, w)
    if c != 0:
        return (c, h, w)
    if h != 0:
        return (h, w)
    return (w,)


@register_layer("Input")
class Input(Layer):
    """0 w, 1 h, 11 d, 2 c: a shape hint only; the blob fed by the caller passes through."""

    def __init__(self) -> None:
        super().__init__()
        self.w = self.h = self.d = self.c = 0

    def load_param(self, pd: ParamDict) -> None:
        self.w, self.h, self.d, self.c = _read_dims(self, pd)

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (0, 0), (1, 1)

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        if input_shapes:
            return [tuple(input_shapes[0])]
        if self.w <= 0:
            raise ValueError(f"Input {self.name!r} has no shape (params 0/1/11/2 unset)")
        return [_shape_from(self.w, self.h, self.d, self.c)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(inputs[0], np.float32)]


@register_layer("MemoryData")
class MemoryData(Layer):
    """0 w, 1 h, 11 d, 2 c, 21 load_type(1): a constant blob stored in the weights."""

    one_blob_only = False

    def __init__(self) -> None:
        super().__init__()
        self.w = self.h = self.d = self.c = 0
        self.load_type = 1
        self.data = np.zeros(1, np.float32)

    def load_param(self, pd: ParamDict) -> None:
        self.w, self.h, self.d, self.c = _read_dims(self, pd)
        self.load_type = pd.get_int(21, 1)
        if self.load_type not in (0, 1):
            raise ValueError(f"MemoryData: param 21 load_type={self.load_type} must be 0 or 1")
        check_elements(math.prod(self.shape), "MemoryData's blob")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (0, 0), (1, 1)

    @property
    def shape(self) -> tuple[int, ...]:
        if self.w == self.h == self.d == self.c == 0:
            return (1,)  # ncnn creates an (uninitialised) 1-element Mat; we give 0
        return _shape_from(self.w, self.h, self.d, self.c)

    def load_model(self, mb: ModelBin) -> None:
        shape = self.shape
        if self.w == self.h == self.d == self.c == 0:
            self.data = np.zeros(1, np.float32)
            return
        n = int(np.prod(shape))
        self.data = np.asarray(mb.load(n, self.load_type), np.float32).reshape(shape)

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        return [self.shape]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [self.data.copy()]
