"""The kv cache of MultiHeadAttention and SDPA (param 7 ``kv_cache``): where the past key and
value blobs sit among a layer's inputs, their shapes, and the concatenation of past and
current along the sequence axis, in numpy and on the GPU.

With the cache the layer takes the past key and value as its last two inputs and gives the
new caches (past, then current, along the sequence) as its second and third outputs. Each
layer keeps its cache in ncnn's reference layout (``src/layer/sdpa.cpp`` and
``multiheadattention.cpp``, ``docs/developer-guide/kvcache.md``): SDPA's like its key and
value, (groups, seq, dim); MultiHeadAttention's after the projections and transposed,
(embed_dim, seq). Caches only travel from one step to the next, so other runtimes may lay
them out otherwise (ncnn's x86 build of 2026-10 keeps MultiHeadAttention's per head).

A first step has no past. ncnn passes an empty Mat; asyncvk takes a past blob with no
elements (e.g. shape (groups, 0, dim), or (embed_dim, 0)) for it, key and value alike. The
outputs are then the current key and value (SDPA: with the current key's shape).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..gpu._memory import Buffer
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    Shape,
    groups_1d,
    local_size_1d,
    pack_push,
)
from .data_movement import copies_chosen

_CONCAT_BINDINGS = 8  # input bindings of concat.comp


@dataclass(frozen=True)
class MhaRoles:
    """Input indexes of a MultiHeadAttention's blobs as ncnn resolves them by count
    (``resolve_bottom_blob_index``): q, k, v, the mask and the past key and value (None:
    absent)."""

    q: int
    k: int
    v: int
    mask: int | None
    past: tuple[int, int] | None

    @property
    def self_attention(self) -> bool:
        """One input for q, k and v: the cache grows (past + current). Otherwise a cached
        past replaces k and v (cross-attention: the encoder's keys, computed once)."""
        return self.k == self.q


def mha_roles(count: int, attn_mask: int, kv_cache: int) -> MhaRoles:
    qkv = count - attn_mask - 2 * kv_cache
    k = 0 if qkv == 1 else 1
    v = 2 if qkv == 3 else k
    past = (count - 2, count - 1) if kv_cache else None
    return MhaRoles(0, k, v, qkv if attn_mask else None, past)


def past_length(shape: Shape, axis: int) -> int:
    """The sequence length of a past blob: 0 for one with no elements (ncnn's empty Mat)."""
    return 0 if math.prod(shape) == 0 else shape[axis]


def check_pasts(what: str, key: Shape, value: Shape) -> None:
    """Both past blobs empty (a first step) or neither."""
    if (math.prod(key) == 0) != (math.prod(value) == 0):
        raise ValueError(
            f"{what}: past key {key} and past value {value} must both be empty (a first step, "
            "no past) or both hold a past"
        )


def check_mha_past(embed_dim: int, key: Shape, value: Shape) -> int:
    """MultiHeadAttention's past length: key and value (embed_dim, past) or both empty."""
    check_pasts("MultiHeadAttention", key, value)
    if math.prod(key) == 0:
        return 0
    for name, shape in (("key", key), ("value", value)):
        if len(shape) != 2 or shape[0] != embed_dim:
            raise ValueError(
                f"MultiHeadAttention: past {name} must be (embed_dim={embed_dim}, past_seqlen) "
                f"as the layer's cache outputs are, got {shape}"
            )
    if key[1] != value[1]:
        raise ValueError(f"MultiHeadAttention: past key {key} and value {value} differ in length")
    return key[1]


def check_sdpa_past(key: Shape, value: Shape, groups: int, dim: int, out_dim: int) -> int:
    """SDPA's past length: key (groups, past, dim) and value (groups, past, out_dim), 2-D
    (past, width) for one group, or both empty."""
    check_pasts("SDPA", key, value)
    if math.prod(key) == 0:
        return 0
    got = []
    for name, shape, width in (("key", key, dim), ("value", value, out_dim)):
        full = (1, *shape) if len(shape) == 2 else shape
        if len(full) != 3 or full[0] != groups or full[2] != width:
            raise ValueError(
                f"SDPA: past {name} must be ({groups}, past_seqlen, {width}) like the current "
                f"one, got {shape}"
            )
        got.append(full[1])
    if got[0] != got[1]:
        raise ValueError(f"SDPA: past key {key} and value {value} differ in length")
    return got[0]


def concat_seq(past: np.ndarray, cur: np.ndarray, rows: int) -> np.ndarray:
    """``past`` and ``cur`` viewed as ``rows`` rows each, each row of ``past`` followed by the
    same row of ``cur`` (the sequence axis inside a row)."""
    return np.concatenate([past.reshape(rows, -1), cur.reshape(rows, -1)], axis=1)


# -- GPU --------------------------------------------------------------------------------------


def concat_spec(target: GpuTarget) -> PipelineSpec:
    """``shaders/concat.comp``, as Concat declares it."""
    return PipelineSpec("concat", (), local_size_1d(target.info))


def record_concat(
    ctx: RecordContext,
    past: GpuBlob,
    cur: Buffer | GpuBlob,
    out: GpuBlob,
    rows: int,
    cols: tuple[int, int],
) -> None:
    """``out``'s ``rows`` rows: the row's ``cols[0]`` values of ``past``, then its ``cols[1]``
    of ``cur`` (both contiguous, rows after rows). Buffer copies where the device takes them
    (lavapipe: a memcpy each), else one ``concat.comp`` dispatch (pipeline key ``concat``).
    An empty ``past`` (``cols[0]`` 0) is never read: ``out`` is ``cur``, one copy."""
    past_cols, cur_cols = cols
    row_len = past_cols + cur_cols
    source = cur if isinstance(cur, GpuBlob) else GpuBlob(cur, (rows * cur_cols,))
    if past_cols == 0:
        ctx.copy(source, 0, out, 0, rows * cur_cols)
        return
    if copies_chosen(ctx.info, 2 * rows):
        for row in range(rows):
            ctx.copy(past, row * past_cols, out, row * row_len, past_cols)
            ctx.copy(source, row * cur_cols, out, row * row_len + past_cols, cur_cols)
        return
    edges = [0, past_cols, row_len] + [row_len] * (_CONCAT_BINDINGS - 2)
    bindings: list[Buffer | GpuBlob] = [past, cur] + [past] * (_CONCAT_BINDINGS - 2) + [out]
    push = pack_push("12i", rows, row_len, 2, *edges)
    groups = groups_1d(rows * row_len, local_size_1d(ctx.info), ctx.info)
    ctx.dispatch("concat", bindings, push, groups)
