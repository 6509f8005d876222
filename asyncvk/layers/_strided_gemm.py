"""The GPU matrix product every transformer layer records: ``shaders/gemm.comp``.

One pipeline computes ``alpha * (beta * C + A @ B)`` over a two-level batch, each operand read
through element strides, so Gemm's transposes, MatMul's broadcast batch dims and
MultiHeadAttention's per-head slices of one buffer are all the same dispatch, without copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..gpu._memory import Buffer
from ._gpu_api import GpuBlob, PipelineSpec, RecordContext, capped_groups, pack_push

#: Invocations per workgroup along (columns, rows); each invocation computes 4x4 outputs.
_LOCAL = (8, 8, 1)
_BLOCK = 4


@dataclass(frozen=True)
class Operand:
    """One matrix of a batched product: where it lives and its element strides.

    ``row`` and ``col`` step (i, k) for A, (k, j) for B, (i, j) for C and the output; a zero
    stride broadcasts. ``batch1``/``batch2`` step the two batch levels.
    """

    buffer: Buffer | GpuBlob
    row: int
    col: int
    batch1: int = 0
    batch2: int = 0

    def strides(self) -> tuple[int, int, int, int]:
        return (self.batch1, self.batch2, self.row, self.col)


def gemm_spec(has_c: bool, c_last: bool = False) -> PipelineSpec:
    """The pipeline for products with (``has_c``) or without a C term; ``c_last`` adds
    ``beta * C`` after ``alpha`` (``alpha * A @ B + beta * C``) instead of before."""
    return PipelineSpec("gemm", (int(has_c), int(c_last)), _LOCAL)


def dispatch_gemm(
    ctx: RecordContext,
    pipeline: str,
    mnk: tuple[int, int, int],
    a: Operand,
    b: Operand,
    out: Operand,
    c: Operand | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    batch: tuple[int, int] = (1, 1),
) -> None:
    """Record ``out = alpha * (beta * c + a @ b)`` (or, with a ``c_last`` pipeline,
    ``alpha * a @ b + beta * c``) for M x N outputs over K, ``batch`` times.

    ``pipeline`` must be a key of a :func:`gemm_spec` with ``has_c`` matching ``c``.
    """
    m, n, k = mnk
    nb1, nb2 = batch
    c_op = c if c is not None else Operand(a.buffer, 0, 0)  # bound, never read
    push = pack_push(
        "4i16i2f",
        m,
        n,
        k,
        nb2,
        *a.strides(),
        *b.strides(),
        *c_op.strides(),
        *out.strides(),
        alpha,
        beta,
    )
    blocks = capped_groups(
        (-(-n // (_BLOCK * _LOCAL[0])), -(-m // (_BLOCK * _LOCAL[1])), 1), ctx.info
    )
    groups = (blocks[0], blocks[1], nb1 * nb2)  # gemm.comp loops over x and y, never the batch
    ctx.dispatch(pipeline, [a.buffer, b.buffer, c_op.buffer, out.buffer], push, groups)
