"""Reshape and Flatten.

Each mirrors the ncnn layer of the same name (src/layer/*.cpp), including its parameter
defaults and its quirks (e.g. Crop's ``end == 0`` meaning "to the end"), because the GPU
shaders are checked against these.
"""

from __future__ import annotations

import numpy as np

from .._base import ShareInputOnGpu
from .._limits import MAX_EXTENT, check_params
from .._paramdict import ParamDict
from .._registry import register_layer

_F32 = np.float32
Shape = tuple[int, ...]


def mat_whdc(shape: Shape) -> tuple[int, int, int, int]:
    """ncnn's ``(w, h, d, c)`` of a numpy blob shape; missing dims are 1, as in ncnn::Mat."""
    dims = len(shape)
    if dims == 1:
        return shape[0], 1, 1, 1
    if dims == 2:
        return shape[1], shape[0], 1, 1
    if dims == 3:
        return shape[2], shape[1], 1, shape[0]
    if dims == 4:
        return shape[3], shape[2], shape[1], shape[0]
    raise ValueError(f"blob shape {shape} is not 1..4-D")


def _positive_axis(axis: int, dims: int, what: str) -> int:
    """Resolve a negative axis as ncnn does and check it is in range."""
    pos = axis + dims if axis < 0 else axis
    if not 0 <= pos < dims:
        raise ValueError(f"{what}: axis {axis} out of range for a {dims}-D blob")
    return pos


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=_F32)


@register_layer("Reshape")
class Reshape(ShareInputOnGpu):
    """Reinterpret the data with a new shape: w (0), h (1), d (11), c (2); 0 copies the input
    dim, -1 infers it, -233 drops it (and every dim after it in c, d, h order)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = self.h = self.d = self.c = -233
        self.ndim = 0

    def load_param(self, pd: ParamDict) -> None:
        self.w = pd.get_int(0, -233)
        self.h = pd.get_int(1, -233)
        self.d = pd.get_int(11, -233)
        self.c = pd.get_int(2, -233)
        if pd.get_str(6, ""):
            raise ValueError("Reshape: param 6 shape_expr unsupported")
        if pd.get_int(12, 233) != 233 or pd.get_int(13, 233) != 233:
            raise ValueError("Reshape: params 12/13 (batch axis) unsupported")
        self.ndim = 4
        if self.d == -233:
            self.ndim = 3
        if self.c == -233:
            self.ndim = 2
        if self.h == -233:
            self.ndim = 1
        if self.w == -233:
            raise ValueError("Reshape: param 0 w must be given")
        dims = [(0, "w", self.w), (1, "h", self.h), (11, "d", self.d), (2, "c", self.c)]
        check_params(self.type_name, MAX_EXTENT, *dims)
        for key, name, value in dims:
            if value < -1 and value != -233:
                raise ValueError(
                    f"Reshape: param {key} ({name}) = {value}: a size is > 0, 0 (keep), "
                    "-1 (infer) or -233 (absent)"
                )
        if sum(1 for _, _, value in dims if value == -1) > 1:
            raise ValueError("Reshape: params 0/1/11/2: only one size can be -1 (inferred)")

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        bw, bh, bd, bc = mat_whdc(shape)
        total = bw * bh * bd * bc
        w, h, d, c = self.w, self.h, self.d, self.c
        w = bw if w == 0 else w
        h = bh if h == 0 else h
        d = bd if d == 0 else d
        c = bc if c == 0 else c
        if self.ndim == 1:
            w = total if w == -1 else w
            out: Shape = (w,)
        elif self.ndim == 2:
            if w == -1:
                w = total // h
            if h == -1:
                h = total // w
            out = (h, w)
        elif self.ndim == 3:
            if w == -1:
                w = total // c // h
            if h == -1:
                h = total // c // w
            if c == -1:
                c = total // h // w
            out = (c, h, w)
        else:
            if w == -1:
                w = total // c // d // h
            if h == -1:
                h = total // c // d // w
            if d == -1:
                d = total // c // h // w
            if c == -1:
                c = total // d // h // w
            out = (c, d, h, w)
        if min(out) <= 0 or int(np.prod(out)) != total:
            raise ValueError(f"Reshape: cannot reshape {shape} to {out}")
        return [out]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = _f32(inputs[0])
        (out,) = self.output_shapes([x.shape])
        return [x.reshape(out).copy()]


@register_layer("Flatten")
class Flatten(ShareInputOnGpu):
    """All data as one 1-D blob, in c, d, h, w order."""

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        return [(int(np.prod(input_shapes[0])),)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [_f32(inputs[0]).reshape(-1).copy()]
