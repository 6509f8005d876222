"""Normalize and MVN: ncnn's L2 and mean/variance normalization over channels, positions or
the whole blob (src/layer/normalize.cpp, mvn.cpp). pnnx emits Normalize for ``F.normalize``
(across channels, eps_mode 1, one shared scale of 1); Caffe models use both.

Both see the blob as ncnn's Mat: c channels of size = w * h * d values (a blob of dims 1 or 2
is one channel). On the GPU both run ``channel_norm.comp``: per-channel sums (a workgroup per
channel), each channel's center and multiplier from them (one workgroup, which also totals the
channels), then ``out = (x - center) * mul``; Normalize across channels at each position is a
pass of its own. The GPU adds the sums in another order than ncnn's one loop: the last bits
differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..gpu._memory import Buffer
from . import _line_shaders
from ._base import Layer, ModelBin, Shape
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    capped_groups,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._limits import MAX_CHANNELS
from ._registry import register_layer
from ._schema import Param

_F32 = np.float32
#: Workgroups the per-channel sums are dispatched with at most (each loops over channels).
_MAX_CHANNEL_GROUPS = 65535
# channel_norm.comp's stages, and the formulas of its finishing stage
_REDUCE, _FINISH, _APPLY, _POSITIONS = 0, 1, 2, 3
_NORMALIZE, _MEAN, _INV_STD = 0, 1, 2


def _channels_and_size(shape: Shape) -> tuple[int, int]:
    """ncnn's c and w * h * d for a blob of this shape."""
    c = shape[0] if len(shape) >= 3 else 1
    return c, math.prod(shape) // c


def _sums(v: np.ndarray, axis: int) -> np.ndarray:
    """float32 sums of the (c, size) ``v`` along ``axis``, kept 2-D."""
    return np.asarray(np.sum(v, axis=axis, dtype=_F32, keepdims=True))


def _spec(
    stage: int,
    local: tuple[int, int, int],
    *,
    square: int = 0,
    centered: int = 0,
    formula: int = 0,
    across: int = 0,
    eps_mode: int = 0,
    shared: int = 0,
    eps: float = 0.0,
) -> PipelineSpec:
    """One ``channel_norm.comp`` pipeline: its stage and the constants that stage reads."""
    consts = (stage, square, centered, formula, across, eps_mode, shared, float(_F32(eps)))
    return PipelineSpec("channel_norm", consts, local)


def _run_stages(
    ctx: RecordContext,
    keys: Sequence[str],
    x: GpuBlob,
    out: GpuBlob,
    scale: Buffer,
) -> None:
    """Dispatch the ``reduce*`` (a workgroup per channel), ``finish*`` (one workgroup) and
    ``apply`` pipelines ``keys`` in turn, a barrier between each, over one stats scratch."""
    c, size = _channels_and_size(x.shape)
    stats = ctx.scratch(4 * 3 * c)  # sums, centers, multipliers
    push = pack_push("2i", c, size)
    for n, key in enumerate(keys):
        if n:
            ctx.barrier()
        if key.startswith("reduce"):
            groups = capped_groups((min(c, _MAX_CHANNEL_GROUPS), 1, 1), ctx.info)
        elif key.startswith("finish"):
            groups = (1, 1, 1)
        else:
            groups = groups_1d(c * size, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch(key, [x, out, scale, stats], push, groups)


@register_layer("Normalize")
class Normalize(Layer):
    """0 across_spatial, 4 across_channel (1), 1 channel_shared, 2 eps (0.0001), 9 eps_mode,
    3 scale_data_size; weights: scale_data_size scales.

    ``x * a * scale``, ``a`` from the sum s of x^2 by eps_mode: 0 (caffe) 1 / sqrt(s + eps),
    1 (pytorch) 1 / max(sqrt(s), eps), 2 (tensorflow) 1 / sqrt(max(s, eps)). s is over each
    channel (across_spatial), the whole blob (both) or each position's channels
    (across_channel); with neither ncnn leaves the blob as it is. The scale is scale[0]
    (channel_shared) or scale[q] for channel q. Other eps_modes are refused.
    """

    across_spatial = Param(0, int, 0)
    channel_shared = Param(1, int, 0)
    eps = Param(2, float, 0.0001)
    scale_data_size = Param(3, int, 0, limit=MAX_CHANNELS)
    across_channel = Param(4, int, 1)
    eps_mode = Param(9, int, 0)

    gpu = True
    scale = np.ones(1, _F32)

    def validate(self) -> None:
        if self.scale_data_size < 1:
            raise ValueError(
                f"Normalize param 3 (scale_data_size) = {self.scale_data_size} must be >= 1: "
                "ncnn reads that many scale values and fails to load none"
            )
        if self.eps_mode not in (0, 1, 2):
            raise ValueError(
                f"Normalize param 9 (eps_mode) = {self.eps_mode}: 0 (caffe), 1 (pytorch) or 2 "
                "(tensorflow)"
            )

    def load_model(self, mb: ModelBin) -> None:
        self.scale = np.asarray(mb.load(self.scale_data_size, 1), _F32)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        c, _ = _channels_and_size(shape)
        scaled = self.across_spatial or self.across_channel
        if scaled and not self.channel_shared and self.scale_data_size < c:
            raise ValueError(
                f"Normalize has {self.scale_data_size} scales (param 3 scale_data_size) but "
                f"param 1 (channel_shared) = 0 takes one per channel, and a blob of shape "
                f"{shape} has {c}"
            )
        return [shape]

    def inverse_norm(self, s: np.ndarray) -> np.ndarray:
        """``a`` for the sums of squares ``s``, by eps_mode, in float32."""
        eps = _F32(self.eps)
        with np.errstate(all="ignore"):
            if self.eps_mode == 0:
                return _F32(1) / np.sqrt(s + eps)
            if self.eps_mode == 1:
                return _F32(1) / np.maximum(np.sqrt(s), eps)
            return _F32(1) / np.sqrt(np.maximum(s, eps))

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], _F32)
        (shape,) = self.output_shapes([x.shape])
        c, size = _channels_and_size(shape)
        v = x.reshape(c, size)
        if not (self.across_spatial or self.across_channel):
            return [x.reshape(shape).copy()]
        scale = self.scale[np.zeros(c, int) if self.channel_shared else np.arange(c)][:, None]
        with np.errstate(all="ignore"):
            if self.across_spatial:
                s = _sums(v * v, 1)
                if self.across_channel:
                    s = np.full_like(s, np.sum(s, dtype=_F32))
                out = v * (self.inverse_norm(s) * scale)
            else:
                a = self.inverse_norm(_sums(v * v, 0))
                out = v * (a * scale[0]) if self.channel_shared else v * a * scale
        return [out.astype(_F32).reshape(shape)]

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        shared, eps_mode, eps = int(bool(self.channel_shared)), self.eps_mode, self.eps
        local = local_size_1d(target.info)
        if self.across_spatial:
            line = _line_shaders.local_size(target.info)
            across = int(bool(self.across_channel))
            finish = _spec(
                _FINISH, line, formula=_NORMALIZE, across=across, eps_mode=eps_mode,
                shared=shared, eps=eps,
            )  # fmt: skip
            return {
                "reduce": _spec(_REDUCE, line, square=1),
                "finish": finish,
                "apply": _spec(_APPLY, local),
            }
        if self.across_channel:
            return {
                "positions": _spec(_POSITIONS, local, eps_mode=eps_mode, shared=shared, eps=eps)
            }
        return {}  # a copy

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        return {"scale": self.scale}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        x, out = inputs[0], outputs[0]
        scale = ctx.weight("scale")
        if self.across_spatial:
            _run_stages(ctx, ("reduce", "finish", "apply"), x, out, scale)
        elif self.across_channel:
            c, size = _channels_and_size(x.shape)
            groups = groups_1d(size, local_size_1d(ctx.info), ctx.info)
            bufs: list[Buffer | GpuBlob] = [x, out, scale, ctx.scratch(4)]  # no stats
            ctx.dispatch("positions", bufs, pack_push("2i", c, size), groups)
        else:
            ctx.copy(x, 0, out, 0, x.size)


@register_layer("MVN")
class MVN(Layer):
    """0 normalize_variance, 1 across_channels, 2 eps (0.0001): ``x - mean``, then with
    normalize_variance times ``1 / (sqrt(mean((x - mean)^2)) + eps)`` -- eps added to the
    standard deviation, not the variance. The means are per channel, or over the whole blob
    with across_channels. As ncnn, a blob of dims 1 or 2 comes out with dims 3: (1, 1, w) and
    (1, h, w).
    """

    normalize_variance = Param(0, int, 0)
    across_channels = Param(1, int, 0)
    eps = Param(2, float, 0.0001)

    gpu = True

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        return [(1,) * (3 - len(shape)) + shape]

    def _means(self, sums: np.ndarray, c: int, size: int) -> np.ndarray:
        """Per-channel means of the (c, 1) ``sums``, or the one over all channels."""
        if self.across_channels:
            return np.full_like(sums, np.sum(sums, dtype=_F32) / _F32(c * size))
        return sums / _F32(size)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], _F32)
        (shape,) = self.output_shapes([x.shape])
        c, size = _channels_and_size(shape)
        v = x.reshape(c, size)
        with np.errstate(all="ignore"):
            out = v - self._means(_sums(v, 1), c, size)
            if self.normalize_variance:
                sq = _sums(out * out, 1)
                norm_var = np.sqrt(self._means(sq, c, size)) + _F32(self.eps)
                out = out * (_F32(1) / norm_var)
        return [out.astype(_F32).reshape(shape)]

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        line = _line_shaders.local_size(target.info)
        across = int(bool(self.across_channels))
        specs = {
            "reduce": _spec(_REDUCE, line),
            "finish": _spec(_FINISH, line, formula=_MEAN, across=across),
            "apply": _spec(_APPLY, local_size_1d(target.info)),
        }
        if self.normalize_variance:
            specs["reduce_var"] = _spec(_REDUCE, line, square=1, centered=1)
            specs["finish_var"] = _spec(
                _FINISH, line, formula=_INV_STD, across=across, eps=self.eps
            )
        return specs

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        return {"scale": np.ones(1, _F32)}  # channel_norm.comp's binding; MVN has no scales

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        keys = ["reduce", "finish"]
        if self.normalize_variance:
            keys += ["reduce_var", "finish_var"]
        _run_stages(ctx, [*keys, "apply"], inputs[0], outputs[0], ctx.weight("scale"))
