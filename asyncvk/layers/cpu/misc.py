"""Input and MemoryData: the layers that bring blobs into the graph."""

from __future__ import annotations

import numpy as np

from ...net._paramdict import ParamDict
from .._base import Layer, ModelBin
from .._registry import register_layer


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
        self.w = pd.get_int(0, 0)
        self.h = pd.get_int(1, 0)
        self.d = pd.get_int(11, 0)
        self.c = pd.get_int(2, 0)

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
        self.w = pd.get_int(0, 0)
        self.h = pd.get_int(1, 0)
        self.d = pd.get_int(11, 0)
        self.c = pd.get_int(2, 0)
        self.load_type = pd.get_int(21, 1)

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
