"""Reshape and Flatten: the same data under another shape, as ncnn's reshape.cpp and
flatten.cpp. On the GPU they are free: blobs are contiguous, so the output shares the input's
bytes (:class:`~._base.ShareInputOnGpu`).
"""

from __future__ import annotations

import math

import numpy as np

from ._base import ShareInputOnGpu
from ._geometry import shape4
from ._gpu_api import Shape
from ._limits import MAX_EXTENT
from ._registry import register_layer
from ._schema import Param
from ._shape_expr import ShapeExpr

_ABSENT = -233


@register_layer("Reshape")
class Reshape(ShareInputOnGpu):
    """Reinterpret the data with a new shape: w (0), h (1), d (11), c (2); 0 copies the input
    dim, -1 infers it, -233 drops it (and every dim after it in c, d, h order). Or the sizes
    ``shape_expr`` (6) computes from the inputs' shapes (pnnx writes it: ``0w,0h,*(0c,2)``),
    the later inputs read for their shapes alone."""

    w = Param(0, int, _ABSENT, limit=MAX_EXTENT)
    h = Param(1, int, _ABSENT, limit=MAX_EXTENT)
    d = Param(11, int, _ABSENT, limit=MAX_EXTENT)
    c = Param(2, int, _ABSENT, limit=MAX_EXTENT)
    shape_expr = Param(6, str)
    #: the parsed ``shape_expr`` (None: the sizes are params 0, 1, 11 and 2)
    expr: ShapeExpr | None = None
    #: the batch axis params: refused unless left at ncnn's 233
    batch_axis_in = Param(12, int, 233)
    batch_axis_out = Param(13, int, 233)

    def validate(self) -> None:
        if self.batch_axis_in != 233 or self.batch_axis_out != 233:
            raise ValueError("Reshape: params 12/13 (batch axis) unsupported")
        self.expr = ShapeExpr(self.shape_expr) if self.shape_expr else None
        if self.expr is not None:
            if len(self.expr.terms) > 4:
                raise ValueError(
                    f"Reshape: param 6 {self.shape_expr!r} gives {len(self.expr.terms)} sizes, "
                    "at most 4"
                )
            return
        if self.w == _ABSENT:
            raise ValueError("Reshape: param 0 w must be given")
        sizes = (Reshape.w, Reshape.h, Reshape.d, Reshape.c)
        for p in sizes:
            value = getattr(self, p.name)
            if value < -1 and value != _ABSENT:
                raise ValueError(
                    f"Reshape: param {p.id} ({p.name}) = {value}: a size is > 0, 0 (keep), "
                    "-1 (infer) or -233 (absent)"
                )
        if sum(1 for p in sizes if getattr(self, p.name) == -1) > 1:
            raise ValueError("Reshape: params 0/1/11/2: only one size can be -1 (inferred)")

    def blob_counts(self) -> tuple[tuple[int, int | None], tuple[int, int | None]]:
        """One input, or as many as the expression reads (at least one: the data)."""
        inputs = max(1, self.expr.blob_count) if self.expr is not None else 1
        return (inputs, inputs), (1, 1)

    @property
    def ndim(self) -> int:
        """The output's dims: the first absent size of h, c, d ends it."""
        if self.expr is not None:
            return len(self.expr.terms)
        if self.h == _ABSENT:
            return 1
        if self.c == _ABSENT:
            return 2
        return 3 if self.d == _ABSENT else 4

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        given = shape4(shape)  # (w, h, d, c)
        total = math.prod(given)
        sizes = self._whdc() if self.expr is None else self._evaluated(input_shapes)
        wanted = [g if v == 0 else v for v, g in zip(sizes, given, strict=True)]
        # numpy order, the absent dims dropped: (w,), (h, w), (c, h, w), (c, d, h, w)
        w, h, d, c = wanted
        dims = {1: [w], 2: [h, w], 3: [c, h, w], 4: [c, d, h, w]}[self.ndim]
        if -1 in dims:
            known = math.prod(n for n in dims if n != -1)
            dims[dims.index(-1)] = total // known
        out = tuple(dims)
        if min(out) <= 0 or math.prod(out) != total:
            raise ValueError(f"Reshape: cannot reshape {shape} to {out}")
        return [out]

    def _whdc(self) -> tuple[int, int, int, int]:
        return (self.w, self.h, self.d, self.c)

    def _evaluated(self, input_shapes: list[Shape]) -> tuple[int, int, int, int]:
        """The expression's sizes as (w, h, d, c): in ncnn's order w; w, h; w, h, c; or
        w, h, d, c."""
        assert self.expr is not None
        sizes = self.expr.evaluate(input_shapes)
        if any(v < -1 for v in sizes):
            raise ValueError(f"Reshape: {self.shape_expr!r} gives sizes {sizes}")
        w, h, d, c = {
            1: lambda: (sizes[0], 1, 1, 1),
            2: lambda: (sizes[0], sizes[1], 1, 1),
            3: lambda: (sizes[0], sizes[1], 1, sizes[2]),
            4: lambda: (sizes[0], sizes[1], sizes[2], sizes[3]),
        }[len(sizes)]()
        return (w, h, d, c)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], dtype=np.float32)
        (out,) = self.output_shapes([x.shape, *(np.shape(i) for i in inputs[1:])])
        return [x.reshape(out).copy()]


@register_layer("Flatten")
class Flatten(ShareInputOnGpu):
    """All data as one 1-D blob, in c, d, h, w order."""

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        return [(math.prod(input_shapes[0]),)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(inputs[0], dtype=np.float32).reshape(-1).copy()]
