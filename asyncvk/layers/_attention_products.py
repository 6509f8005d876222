"""What MultiHeadAttention and SDPA share: ncnn's softmax of the scores in numpy, and on the
GPU the per-head products ``softmax(alpha * q @ k.T + mask) @ v`` as two ``gemm.comp``
products around ``softmax.comp``, each operand read through its strides so that both
layers' layouts (heads in one buffer, grouped keys, transposed caches) need no copies."""

from __future__ import annotations

import numpy as np

from ._gpu_api import (
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._strided_gemm import Operand, dispatch_gemm, gemm_spec

_F32 = np.float32


def softmax_rows(x: np.ndarray) -> np.ndarray:
    """ncnn's softmax along the last axis: max folded from -FLT_MAX, exp, sum, divide."""
    m = np.fmax(np.fmax.reduce(x, axis=-1, keepdims=True), _F32(-np.finfo(_F32).max))
    with np.errstate(all="ignore"):
        e = np.exp(x - m)
        return np.asarray(e / np.sum(e, axis=-1, keepdims=True, dtype=_F32), _F32)


def attention_specs(target: GpuTarget) -> dict[str, PipelineSpec]:
    """The pipelines :func:`record_attention` dispatches, by the keys it uses."""
    return {
        "gemm_noc": gemm_spec(target.info, False),
        "gemm_mask": gemm_spec(target.info, True, c_last=True),
        "softmax": PipelineSpec("softmax", (), local_size_1d(target.info)),
    }


def record_attention(
    ctx: RecordContext,
    sizes: tuple[int, int, int, int],
    batch: tuple[int, int],
    operands: tuple[Operand, Operand, Operand, Operand],
    mask: Operand | None,
    alpha: float,
) -> None:
    """``out = softmax(alpha * q @ k.T + mask) @ v`` for each of ``batch`` (two levels, as
    :func:`dispatch_gemm` takes them) heads. ``sizes``: (src, dst, dim, out_dim);
    ``operands``: q (src x dim: A of the first product), k (B: dim x dst), v (B of the second:
    dst x out_dim) and out (src x out_dim). The inputs must be visible (a barrier before)."""
    src, dst, dim, out_dim = sizes
    q, k, v, out = operands
    each = src * dst
    rows = batch[0] * batch[1] * src
    scores = ctx.scratch(4 * rows * dst)
    dispatch_gemm(
        ctx, "gemm_mask" if mask else "gemm_noc", (src, dst, dim), q, k,
        Operand(scores, dst, 1, batch[1] * each, each), mask,
        alpha=alpha, batch=batch, c_last=True,
    )  # fmt: skip
    ctx.barrier()
    probs = ctx.scratch(4 * rows * dst)
    ctx.dispatch(
        "softmax", [scores, probs], pack_push("3i", rows, dst, 1),
        groups_1d(rows, local_size_1d(ctx.info), ctx.info),
    )  # fmt: skip
    ctx.barrier()
    dispatch_gemm(
        ctx, "gemm_noc", (src, out_dim, dst),
        Operand(probs, dst, 1, batch[1] * each, each), v, out, batch=batch,
    )  # fmt: skip
