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
_NO_BATCH = 233


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
    #: the input's and output's batch axis (233: none), as pnnx writes them around a tensor of
    #: batch 1; asyncvk's blobs hold one item, so the batch dim is 1 on both sides
    batch_axis_in = Param(12, int, _NO_BATCH)
    batch_axis_out = Param(13, int, _NO_BATCH)

    @property
    def batched(self) -> bool:
        return self.batch_axis_in != _NO_BATCH or self.batch_axis_out != _NO_BATCH

    def validate(self) -> None:
        self.expr = ShapeExpr(self.shape_expr) if self.shape_expr else None
        if self.expr is not None:
            if len(self.expr.terms) > (5 if self.batched else 4):
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
        if self.batched:
            return [self._batched_shape(input_shapes)]
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

    def _batched_shape(self, input_shapes: list[Shape]) -> Shape:
        """ncnn's reshape with batch axes (its resolve_batch_shape) for a batch of one: the
        input's logical shape has a 1 at ``batch_axis_in``; the output's sizes (numpy order)
        resolve 0 and -1 against it; the output's dim at ``batch_axis_out`` must be 1 and
        goes. The data keeps its order, as a batch of one moves nothing."""
        shape = tuple(input_shapes[0])
        logical = list(shape)
        if self.batch_axis_in != _NO_BATCH:
            axis = self.batch_axis_in + (len(shape) + 1 if self.batch_axis_in < 0 else 0)
            if not 0 <= axis <= len(shape):
                raise ValueError(f"Reshape: param 12 batch axis {self.batch_axis_in} for {shape}")
            logical.insert(axis, 1)
        if self.expr is not None:
            out = self.expr.evaluate(input_shapes)[::-1]
        else:
            w, h, d, c = self._whdc()
            out = {1: [w], 2: [h, w], 3: [c, h, w], 4: [c, d, h, w]}[self.ndim]
        out_axis = self.batch_axis_out
        if out_axis != _NO_BATCH:
            out_axis += len(out) if out_axis < 0 else 0
            if not 0 <= out_axis < len(out):
                raise ValueError(f"Reshape: param 13 batch axis {self.batch_axis_out} for {out}")
        for i, size in enumerate(out):
            if size == 0:
                if i >= len(logical):
                    raise ValueError(f"Reshape: size 0 (keep) at {i} beyond the input {shape}")
                out[i] = logical[i]
        total = math.prod(logical)
        if out.count(-1) == 1:
            known = math.prod(n for n in out if n != -1)
            out[out.index(-1)] = total // known if known > 0 else -1
        if min(out) <= 0 or math.prod(out) != total:
            raise ValueError(f"Reshape: cannot reshape {shape} to {tuple(out)}")
        if out_axis != _NO_BATCH and out[out_axis] != 1:
            raise ValueError(f"Reshape: a batch of {out[out_axis]} from a blob of one item")
        physical = tuple(n for i, n in enumerate(out) if i != out_axis)
        if not 1 <= len(physical) <= 4:
            raise ValueError(f"Reshape: {len(physical)} dims from {shape}")
        return physical

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
