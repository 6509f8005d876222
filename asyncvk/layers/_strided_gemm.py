"""The GPU matrix product every transformer layer records: ``shaders/gemm_tiled.comp``, or
``shaders/gemm.comp`` on devices whose subgroups it cannot use.

One pipeline computes ``alpha * (beta * C + A @ B)`` over a two-level batch, each operand read
through element strides, so Gemm's transposes, MatMul's broadcast batch dims and
MultiHeadAttention's per-head slices of one buffer are all the same dispatch, without copies.
Both shaders take the same operands. The tiled one shares loads across a subgroup (about
twice as fast on lavapipe, where each load is a loop over lanes) and sums k in order;
``gemm.comp`` sums up to four ranges of k in order and then adds the ranges (so its last bits
depend on how many ranges the device's workgroup size and shared memory allow).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..gpu._info import GpuInfo
from ..gpu._memory import Buffer
from ._device_choice import has_subgroup_shuffles
from ._gpu_api import GpuBlob, PipelineSpec, RecordContext, capped_groups, pack_push

#: gemm.comp: invocations per workgroup along (columns, rows); each computes 4x4 outputs.
_LOCAL = (8, 8)
_BLOCK = 4
#: shared memory gemm.comp takes per range of k: its partial sums (64 pairs x 4 vec4) and its
#: staged steps of A (16 x 9 vec4) and B (16 x 8 vec4)
_SHARED_PER_SPLIT = (64 * 4 + 16 * 9 + 16 * 8) * 16
#: gemm_tiled.comp: one workgroup of subgroups; each lane computes _TILED_ROWS x _TILED_COLS.
_TILED_LOCAL = (64, 1, 1)
_TILED_ROWS = 16
_TILED_COLS = 2
# The device's ShaderChoices (``info.choices``) say where gemm_tiled.comp runs, its subgroups
# permitting (gemm_tiled: "cpu" devices; measured 2026-11-23: about twice as fast as gemm.comp
# on lavapipe; on the H100 its 8 x 256 tiles leave the GPU idle, vision_transformer 30.6 ms
# against 14.2 ms with gemm.comp), whether it loads four k at once where both operands run
# along k in memory (gemm_vec4_loads; measured 2026-11-27 on lavapipe, paired runs in one
# process: vision_transformer 0.62x), and gemm.comp's most ranges of k (gemm_most_splits).


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


def tiled_gemm_fits(info: GpuInfo) -> bool:
    """Whether ``gemm_tiled.comp`` runs on ``info``'s device: its choices ask for it there,
    subgroupShuffle, and every subgroup size it may pick between 8 (the A chunk) and 64
    (dividing the workgroup)."""
    smallest = info.min_subgroup_size or info.subgroup_size
    largest = max(info.max_subgroup_size, info.subgroup_size)
    wanted = info.takes(info.choices.gemm_tiled)
    return wanted and has_subgroup_shuffles(info) and 8 <= smallest <= largest <= 64


def gemm_spec(info: GpuInfo, has_c: bool, c_last: bool = False) -> PipelineSpec:
    """The pipeline for products with (``has_c``) or without a C term on ``info``'s device;
    ``c_last`` adds ``beta * C`` after ``alpha`` (``alpha * A @ B + beta * C``) instead of
    before."""
    if tiled_gemm_fits(info):
        # one pipeline for every product: has_c and c_last go in its push constants
        return PipelineSpec("gemm_tiled", (int(info.choices.gemm_vec4_loads),), _TILED_LOCAL)
    return PipelineSpec("gemm", (int(has_c), int(c_last)), _local(info))


def _local(info: GpuInfo) -> tuple[int, int, int]:
    """gemm.comp's workgroup: 8 x 8 blocks, each with as many ranges of k (up to 4) as the
    device's workgroup size and shared memory allow."""
    pairs = _LOCAL[0] * _LOCAL[1]
    limits = info.limits
    splits = max(
        1,
        min(
            info.choices.gemm_most_splits,
            limits.max_compute_workgroup_invocations // pairs,
            limits.max_compute_shared_memory_size // _SHARED_PER_SPLIT,
        ),
    )
    return (*_LOCAL, splits)


def _tiled_groups(info: GpuInfo, m: int, n: int, batch: int) -> tuple[int, int, int]:
    """Workgroups for gemm_tiled.comp: one per tile (the shader's layout for the device's usual
    subgroup size), capped at the device's limits (the shader loops over what is left)."""
    size = info.subgroup_size
    subgroups = _TILED_LOCAL[0] // size
    side = min(subgroups, 4)
    tile_m, tile_n = subgroups // side * _TILED_ROWS, side * size * _TILED_COLS
    tiles = -(-m // tile_m) * -(-n // tile_n)
    limit = info.limits.max_compute_workgroup_count
    return (max(1, min(tiles, limit[0])), 1, max(1, min(batch, limit[2])))


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
    c_last: bool = False,
) -> None:
    """Record ``out = alpha * (beta * c + a @ b)`` (or, ``c_last``, ``alpha * a @ b + beta *
    c``) for M x N outputs over K, ``batch`` times.

    ``pipeline`` must be a key of a :func:`gemm_spec` with ``has_c`` matching ``c`` and the
    same ``c_last`` (gemm.comp specializes on both; gemm_tiled.comp reads them from its push
    constants).
    """
    m, n, k = mnk
    nb1, nb2 = batch
    c_op = c if c is not None else Operand(a.buffer, 0, 0)  # bound, never read
    strides = (*a.strides(), *b.strides(), *c_op.strides(), *out.strides())
    if ctx.spec(pipeline).shader == "gemm_tiled":  # as chosen at load (gemm_spec)
        flags = (int(c is not None), int(c_last and c is not None))  # no C: nothing after
        push = pack_push("4i16i2f3i", m, n, k, nb2, *strides, alpha, beta, nb1 * nb2, *flags)
        groups = _tiled_groups(ctx.info, m, n, nb1 * nb2)
    else:
        push = pack_push("4i16i2f", m, n, k, nb2, *strides, alpha, beta)
        blocks = capped_groups(
            (-(-n // (_BLOCK * _LOCAL[0])), -(-m // (_BLOCK * _LOCAL[1])), 1), ctx.info
        )
        groups = (blocks[0], blocks[1], nb1 * nb2)  # gemm.comp loops over x and y, not the batch
    ctx.dispatch(pipeline, [a.buffer, b.buffer, c_op.buffer, out.buffer], push, groups)
