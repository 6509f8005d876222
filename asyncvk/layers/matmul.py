"""Matrix products: Gemm and MatMul (ncnn's reference semantics), in numpy and through
``shaders/gemm.comp`` (see ``_strided_gemm``)."""

from __future__ import annotations

from typing import TypeVar

import numpy as np

from ._base import BlobCount, Layer, ModelBin, Shape
from ._gpu_api import GpuBlob, GpuTarget, PipelineSpec, RecordContext
from ._limits import MAX_EXTENT
from ._registry import register_layer
from ._schema import Param
from ._strided_gemm import Operand, dispatch_gemm, gemm_spec

_F32 = np.float32
T = TypeVar("T")


def row_view(x: np.ndarray) -> np.ndarray:
    """The matrix ncnn's Gemm reads from a blob: a 1-D blob is one row, a 2-D blob its rows,
    a 3-D blob one row per channel (the first row of each: ncnn steps rows by cstep) and a
    4-D blob the rows of its first depth slice of its first channel (ncnn reads its h rows)."""
    if x.ndim == 1:
        return x[None, :]
    if x.ndim == 3:
        return x[:, 0, :]
    return x[0, 0] if x.ndim == 4 else x


def _rows_cols(shape: Shape) -> tuple[int, int]:
    """(rows, width) of ``row_view`` for a blob of ``shape``."""
    if len(shape) == 1:
        return 1, shape[0]
    return (shape[2] if len(shape) == 4 else shape[0]), shape[-1]


def _row_stride(shape: Shape) -> int:
    """Elements between rows of ``row_view`` in a contiguous blob of ``shape``."""
    if len(shape) == 1:
        return 0
    return shape[1] * shape[2] if len(shape) == 3 else shape[-1]


@register_layer("Gemm")
class Gemm(Layer):
    """``alpha * (beta * C + op(A) @ op(B))``: 0 alpha, 1 beta, 2 transA, 3 transB,
    4/5/6 constantA/B/C (weights instead of input blobs), 7/8/9 constantM/N/K (the sizes of
    constant operands), 10 constant_broadcast_type_C (-1 none, 0 scalar, 1 M, 2 Mx1, 3 MxN,
    4 1xN), 11 output_N1M (a (M, 1, N) blob), 14 output_transpose.

    12 output_elempack and 13 output_elemtype only choose ncnn's storage (fp32 here, the same
    values); 20-22 (tile sizes) only its blocking. 18 quantize_term (int8 and weight
    quantization) is refused. The C blob's broadcast comes from its shape, in ncnn's order of
    checks, and a C that fits none of them is read as a scalar (its first value), as in ncnn.
    """

    alpha = Param(0, float, 1.0)
    beta = Param(1, float, 1.0)
    transA = Param(2, int, 0)
    transB = Param(3, int, 0)
    constantA = Param(4, int, 0)
    constantB = Param(5, int, 0)
    constantC = Param(6, int, 0)
    constantM = Param(7, int, 0, limit=MAX_EXTENT)
    constantN = Param(8, int, 0, limit=MAX_EXTENT)
    constantK = Param(9, int, 0, limit=MAX_EXTENT)
    constant_broadcast_type_C = Param(10, int, 0)
    output_N1M = Param(11, int, 0)
    output_elempack = Param(12, int, 0)
    output_elemtype = Param(13, int, 0)
    output_transpose = Param(14, int, 0)
    quantize_term = Param(18, int, 0)

    one_blob_only = False
    gpu = True
    A_data: np.ndarray | None = None
    B_data: np.ndarray | None = None
    C_data: np.ndarray | None = None

    def validate(self) -> None:
        if self.quantize_term != 0:
            raise ValueError(
                f"Gemm: param 18 quantize_term={self.quantize_term}: quantized Gemm is not "
                "supported"
            )
        for pid, name in (
            (2, "transA"),
            (3, "transB"),
            (4, "constantA"),
            (5, "constantB"),
            (6, "constantC"),
            (11, "output_N1M"),
            (14, "output_transpose"),
        ):
            value = getattr(self, name)
            if value not in (0, 1):
                raise ValueError(f"Gemm: param {pid} {name}={value} must be 0 or 1")
        for pid, name in ((7, "constantM"), (8, "constantN"), (9, "constantK")):
            if getattr(self, name) < 0:
                raise ValueError(f"Gemm: param {pid} {name}={getattr(self, name)} is negative")
        if self.constantA and (self.constantM == 0 or self.constantK == 0):
            raise ValueError("Gemm: params 7 constantM and 9 constantK must be > 0 with constantA")
        if self.constantB and (self.constantN == 0 or self.constantK == 0):
            raise ValueError("Gemm: params 8 constantN and 9 constantK must be > 0 with constantB")
        if self.constantC and not -1 <= self.constant_broadcast_type_C <= 4:
            raise ValueError(
                f"Gemm: param 10 constant_broadcast_type_C={self.constant_broadcast_type_C} "
                "must be -1..4 with constantC"
            )
        needs = {1: "constantM", 2: "constantM", 3: "constantM", 4: "constantN"}
        kind = self.constant_broadcast_type_C
        if self.constantC and kind in needs and getattr(self, needs[kind]) <= 0:
            raise ValueError(
                f"Gemm: constant_broadcast_type_C={kind} needs param {needs[kind]} > 0"
            )
        if self.constantC and kind == 3 and self.constantN <= 0:
            raise ValueError("Gemm: constant_broadcast_type_C=3 needs param constantN > 0")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        operands = (1 - self.constantA) + (1 - self.constantB)
        return (operands, operands + (1 - self.constantC)), (1, 1)

    def load_model(self, mb: ModelBin) -> None:
        m, n, k = self.constantM, self.constantN, self.constantK
        if self.constantA:
            shape = (k, m) if self.transA else (m, k)
            self.A_data = _load(mb, shape)
        if self.constantB:
            shape = (n, k) if self.transB else (k, n)
            self.B_data = _load(mb, shape)
        kind = self.constant_broadcast_type_C
        if self.constantC and kind != -1:
            c_shapes: dict[int, tuple[int, ...]] = {0: (1,), 1: (m,), 2: (m, 1), 3: (m, n)}
            self.C_data = _load(mb, c_shapes.get(kind, (1, n)))

    # -- operands and shapes ---------------------------------------------------------------

    def _pick(
        self, items: list[T], weights: tuple[T | None, T | None, T | None]
    ) -> tuple[T, T, T | None]:
        """A, B and C (None: no C term) as ncnn picks them from the weights and the inputs
        (``items`` and ``weights`` may be arrays, GPU blobs or shapes)."""
        a = weights[0] if self.constantA else items[0]
        b = weights[1] if self.constantB else items[1 - self.constantA]
        c: T | None = None
        if self.constantC:
            c = weights[2]
        elif self.constantA and self.constantB and len(items) == 1:
            c = items[0]
        elif (self.constantA or self.constantB) and len(items) == 2:
            c = items[1]
        elif len(items) == 3:
            c = items[2]
        assert a is not None and b is not None, "load_model reads the constant operands"
        return a, b, c

    def _weight_shapes(self) -> tuple[Shape | None, Shape | None, Shape | None]:
        return tuple(
            None if w is None else w.shape for w in (self.A_data, self.B_data, self.C_data)
        )  # type: ignore[return-value]

    def _mnk(self, a: Shape, b: Shape) -> tuple[int, int, int]:
        a_rows, a_w = _rows_cols(a)
        b_rows, b_w = _rows_cols(b)
        m, ka = (a_w, a_rows) if self.transA else (a_rows, a_w)
        n, kb = (b_rows, b_w) if self.transB else (b_w, b_rows)
        if ka != kb:
            raise ValueError(f"Gemm: A {a} and B {b} disagree on K ({ka} != {kb})")
        return m, n, ka

    def broadcast_type(self, c: Shape, m: int, n: int) -> int:
        """How C broadcasts over M x N: the constant type, or ncnn's checks on C's shape in
        its order (a later match wins; no match leaves 0, a scalar)."""
        if self.constantC:
            return self.constant_broadcast_type_C
        kind = 0
        if len(c) == 1 and c[0] == 1:
            kind = 0
        if len(c) == 1 and c[0] == m:
            kind = 1
        if len(c) == 1 and c[0] == n:
            kind = 4
        if len(c) == 2 and c == (m, 1):
            kind = 2
        if len(c) == 2 and c == (m, n):
            kind = 3
        if len(c) == 2 and c == (1, n):
            kind = 4
        return kind

    def _out_shape(self, m: int, n: int) -> Shape:
        rows, cols = (n, m) if self.output_transpose else (m, n)
        return (rows, 1, cols) if self.output_N1M else (rows, cols)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        a, b, c = self._pick(list(input_shapes), self._weight_shapes())
        m, n, _ = self._mnk(a, b)
        if self.constantC and c is not None:
            kind = self.constant_broadcast_type_C
            if kind in (1, 2, 3) and self.constantM != m:
                raise ValueError(f"Gemm: param 7 constantM={self.constantM} but A gives M={m}")
            if kind in (3, 4) and self.constantN != n:
                raise ValueError(f"Gemm: param 8 constantN={self.constantN} but B gives N={n}")
        return [self._out_shape(m, n)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        items = [np.asarray(x, _F32) for x in inputs]
        self.output_shapes([x.shape for x in items])
        a, b, c = self._pick(items, (self.A_data, self.B_data, self.C_data))
        amat = row_view(a).T if self.transA else row_view(a)
        bmat = row_view(b).T if self.transB else row_view(b)
        m, n = amat.shape[0], bmat.shape[1]
        out = amat @ bmat
        if c is not None:
            out = (
                _c_term(c.reshape(-1), self.broadcast_type(c.shape, m, n), m, n) * _F32(self.beta)
                + out
            )
        out = out * _F32(self.alpha)
        if self.output_transpose:
            out = out.T
        return [np.ascontiguousarray(out, _F32).reshape(self._out_shape(m, n))]

    # -- GPU -------------------------------------------------------------------------------

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        none = np.zeros(1, _F32)
        return {
            "A": none if self.A_data is None else self.A_data,
            "B": none if self.B_data is None else self.B_data,
            "C": none if self.C_data is None else self.C_data,
        }

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {"gemm": gemm_spec(target.info, True), "gemm_noc": gemm_spec(target.info, False)}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        shapes = self._weight_shapes()
        weights = tuple(
            None if shape is None else GpuBlob(ctx.weight(name), shape)
            for name, shape in zip("ABC", shapes, strict=True)
        )
        a, b, c = self._pick(list(inputs), weights)  # type: ignore[arg-type]
        m, n, k = self._mnk(a.shape, b.shape)
        ra, rb = _row_stride(a.shape), _row_stride(b.shape)
        a_op = Operand(a, 1, ra) if self.transA else Operand(a, ra, 1)
        b_op = Operand(b, 1, rb) if self.transB else Operand(b, rb, 1)
        out_op = Operand(outputs[0], 1, m) if self.output_transpose else Operand(outputs[0], n, 1)
        c_op = None
        if c is not None:
            kind = self.broadcast_type(c.shape, m, n)
            row, col = {0: (0, 0), 1: (1, 0), 2: (1, 0), 3: (n, 1)}.get(kind, (0, 1))
            c_op = Operand(c, row, col)
        dispatch_gemm(
            ctx,
            "gemm" if c_op else "gemm_noc",
            (m, n, k),
            a_op,
            b_op,
            out_op,
            c_op,
            self.alpha,
            self.beta,
        )


def _load(mb: ModelBin, shape: tuple[int, ...]) -> np.ndarray:
    """A tagged weight of ``shape`` (ncnn's ``load(w, h, 0)`` gives h rows of w)."""
    return np.asarray(mb.load(int(np.prod(shape)), 0), _F32).reshape(shape)


def _c_term(c: np.ndarray, kind: int, m: int, n: int) -> np.ndarray:
    """The M x N matrix ncnn reads from C's values for broadcast ``kind``."""
    if kind == 0:
        return np.full((m, n), c[0], _F32)
    if kind in (1, 2):
        return np.repeat(c[:m, None], n, axis=1)
    if kind == 3:
        return c[: m * n].reshape(m, n)
    return np.repeat(c[None, :n], m, axis=0)


def _batched(shape: Shape, vector_is_column: bool) -> tuple[int, int, int, int]:
    """A MatMul operand as (c, d, rows, cols): batch dims padded in front with 1s, a 1-D
    operand one row (A) or one column (B)."""
    if len(shape) == 1:
        return (1, 1, shape[0], 1) if vector_is_column else (1, 1, 1, shape[0])
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    return padded[0], padded[1], padded[2], padded[3]


def _batch_strides(dims: tuple[int, int, int, int]) -> tuple[int, int]:
    """Element strides of the two batch levels of a contiguous (c, d, h, w) blob; 0 where the
    level is 1 (it broadcasts)."""
    c, d, h, w = dims
    return (d * h * w if c > 1 else 0), (h * w if d > 1 else 0)


@register_layer("MatMul")
class MatMul(Layer):
    """pnnx's torch.matmul: ``A @ B`` (0 transB: B's last two axes swapped), batch dims
    broadcast numpy-style, 1-D operands a row (A) or a column (B; transB does not apply),
    and 1-D times 1-D a (1,) dot product, as ncnn shapes them."""

    transB = Param(0, int, 0)

    one_blob_only = False
    gpu = True

    def validate(self) -> None:
        if self.transB not in (0, 1):
            raise ValueError(f"MatMul: param 0 transB={self.transB} must be 0 or 1")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (2, 2), (1, 1)

    def _plan(self, a: Shape, b: Shape) -> tuple[Shape, tuple[int, int], tuple[int, int, int]]:
        """(output shape, batch (c, d), (M, N, K)) for operands of these shapes."""
        if len(a) > 4 or len(b) > 4:
            raise ValueError(f"MatMul: operands {a} and {b}: at most 4-D")
        ca, da, m, ka = _batched(a, False)
        cb, db, kb, n = _batched(b, True)
        if self.transB and len(b) > 1:
            kb, n = n, kb
        if ka != kb:
            raise ValueError(f"MatMul: A {a} and B {b} disagree on K ({ka} != {kb})")
        batch = []
        for x, y in ((ca, cb), (da, db)):
            if x != y and 1 not in (x, y):
                raise ValueError(f"MatMul: batch dims of A {a} and B {b} do not broadcast")
            batch.append(max(x, y))
        if len(a) == 1 and len(b) == 1:
            return (1,), (1, 1), (m, n, ka)
        dims = max(len(a), len(b))
        out = batch[4 - dims :] if dims > 2 else []
        out += ([m] if len(a) > 1 else []) + ([n] if len(b) > 1 else [])
        return tuple(out), (batch[0], batch[1]), (m, n, ka)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        return [self._plan(tuple(input_shapes[0]), tuple(input_shapes[1]))[0]]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        a, b = (np.asarray(x, _F32) for x in inputs)
        shape = self._plan(a.shape, b.shape)[0]
        if self.transB and b.ndim > 1:
            b = np.swapaxes(b, -1, -2)
        return [np.ascontiguousarray(np.matmul(a, b), _F32).reshape(shape)]

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {"gemm": gemm_spec(target.info, False)}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        a, b = inputs
        _, batch, (m, n, k) = self._plan(a.shape, b.shape)
        a4, b4 = _batched(a.shape, False), _batched(b.shape, True)
        a1, a2 = _batch_strides(a4)
        b1, b2 = _batch_strides(b4)
        a_op = Operand(a, a4[3], 1, a1, a2)
        if self.transB and len(b.shape) > 1:
            b_op = Operand(b, 1, b4[3], b1, b2)
        else:
            b_op = Operand(b, b4[3], 1, b1, b2)
        out_op = Operand(outputs[0], n, 1, batch[1] * m * n, m * n)
        dispatch_gemm(ctx, "gemm", (m, n, k), a_op, b_op, out_op, batch=batch)
