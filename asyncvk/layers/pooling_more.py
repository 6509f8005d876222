"""StatisticsPooling: each channel's mean (and, with ``include_stddev``, its standard
deviation) as a 1-D blob, as ncnn's statisticspooling.cpp computes it; on the GPU
``shaders/statisticspooling.comp``, one invocation per output value.
"""

from __future__ import annotations

import numpy as np

from ._base import Layer, Shape
from ._geometry import shape4
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

_F = np.float32


def _channels(shape: Shape) -> tuple[int, int]:
    """(channels, values per channel): ncnn's c and w * h * d (dims 1 and 2: one channel)."""
    w, h, d, c = shape4(shape)
    return c, w * h * d


def _sum_in_order(rows: np.ndarray) -> np.ndarray:
    """Each row's sum added one value at a time from 0, as ncnn's loop (numpy's own sum pairs
    values up, which rounds otherwise)."""
    return (np.cumsum(rows, axis=1, dtype=_F)[:, -1] + _F(0)).astype(_F)


@register_layer("StatisticsPooling")
class StatisticsPooling(Layer):
    """(c,) means, or (2c,): the means, then each channel's population standard deviation
    ``sqrt(sum((x - mean)^2) / size)`` around its float32 mean."""

    include_stddev = Param(0, int, 0)
    gpu = True

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        c, _ = _channels(input_shapes[0])
        return [(2 * c if self.include_stddev else c,)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        c, size = _channels(tuple(inputs[0].shape))
        rows = np.asarray(inputs[0], _F).reshape(c, size)
        mean = (_sum_in_order(rows) / _F(size)).astype(_F)
        if not self.include_stddev:
            return [mean]
        deviation = rows - mean[:, None]
        std = np.sqrt(_sum_in_order(deviation * deviation) / _F(size)).astype(_F)
        return [np.concatenate([mean, std])]

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {"stats": PipelineSpec("statisticspooling", (), local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, size = _channels(inputs[0].shape)
        outc = outputs[0].size
        push = pack_push("3i", size, c, outc)
        groups = groups_1d(outc, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("stats", [inputs[0], outputs[0]], push, groups)
