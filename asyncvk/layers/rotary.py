"""RotaryEmbed: ncnn's rotary position embedding (src/layer/rotaryembed.cpp), which pnnx fuses
from a model's rotate-half or interleaved pattern; on the GPU through
``shaders/rotaryembed.comp``.

Inputs: ``x`` of (heads, seqlen, embed_dim), or (seqlen, embed_dim) for one head, or
(embed_dim,) for one position; then the cos and the sin caches, each read as ncnn reads them:
row ``i`` of the cache for position ``i``, its first ``embed_dim / 2`` values. A cache is
(seqlen, embed_dim / 2), or larger (ncnn reads the first rows and columns of a longer or wider
table), or 1-D for one position. Each pair ``(x0, x1)`` of a row (adjacent with param 0
interleaved = 1, the two halves' j-th values with 0) becomes ``(x0 cos - x1 sin,
x0 sin + x1 cos)``.

Refused, because ncnn would leave output values unwritten or read past a cache: an odd
embed_dim, a 4-D x, a cache with fewer rows or columns than that, a cache of 3 or 4 dims.
"""

from __future__ import annotations

import numpy as np

from ._base import BlobCount, Layer, Shape
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._registry import register_layer
from ._schema import Param


def _rows(shape: Shape) -> tuple[int, int]:
    """(rows, row width) of a blob ncnn reads by ``row(i)``: 1-D is one row."""
    return (1, shape[0]) if len(shape) == 1 else (shape[0], shape[1])


@register_layer("RotaryEmbed")
class RotaryEmbed(Layer):
    """0 interleaved(0): rotate adjacent pairs (1) or the two halves of each row (0)."""

    interleaved = Param(0, int, 0)
    one_blob_only = False
    gpu = True

    def validate(self) -> None:
        if self.interleaved not in (0, 1):
            raise ValueError(f"RotaryEmbed param 0 interleaved={self.interleaved} must be 0 or 1")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (3, 3), (1, 1)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        x, cos, sin = (tuple(s) for s in input_shapes)
        if len(x) > 3:
            raise ValueError(f"RotaryEmbed: x {x} has {len(x)} dims; it takes 1 to 3")
        embed = x[-1]
        if embed % 2:
            raise ValueError(f"RotaryEmbed: x {x} has an odd embed_dim {embed}")
        seqlen = x[-2] if len(x) >= 2 else 1
        for name, cache in (("cos", cos), ("sin", sin)):
            if len(cache) > 2:
                raise ValueError(f"RotaryEmbed: the {name} cache {cache} must be 1-D or 2-D")
            rows, width = _rows(cache)
            if rows < seqlen or width < embed // 2:
                raise ValueError(
                    f"RotaryEmbed: the {name} cache {cache} is smaller than x {x} needs: "
                    f"({seqlen}, {embed // 2})"
                )
        return [x]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        embed = x.shape[-1]
        half = embed // 2
        seqlen = x.shape[-2] if x.ndim >= 2 else 1
        heads = x.reshape(-1, seqlen, embed)
        cos, sin = (
            np.asarray(c, np.float32).reshape(_rows(c.shape))[:seqlen, :half] for c in inputs[1:]
        )
        if self.interleaved:
            x0, x1 = heads[..., 0::2], heads[..., 1::2]
        else:
            x0, x1 = heads[..., :half], heads[..., half:]
        first = x0 * cos - x1 * sin
        second = x0 * sin + x1 * cos
        out = np.empty_like(heads)
        if self.interleaved:
            out[..., 0::2], out[..., 1::2] = first, second
        else:
            out[..., :half], out[..., half:] = first, second
        return [out.reshape(x.shape)]

    # -- GPU ---------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        spec = PipelineSpec("rotaryembed", (self.interleaved,), local_size_1d(target.info))
        return {"rotaryembed": spec}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        x, cos, sin = inputs
        embed = x.shape[-1]
        seqlen = x.shape[-2] if len(x.shape) >= 2 else 1
        n = x.size
        push = pack_push("iiiii", n, embed, seqlen, _rows(cos.shape)[1], _rows(sin.shape)[1])
        groups = groups_1d(n, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("rotaryembed", [x, cos, sin, outputs[0]], push, groups)
