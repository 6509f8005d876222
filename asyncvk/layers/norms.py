"""Normalization over statistics computed from the blob itself: LRN, LayerNorm, GroupNorm,
InstanceNorm, RMSNorm (ncnn's reference semantics).

LRN runs one ``lrn.comp`` invocation per element. The other four all normalize the rows of
the blob viewed as (rows, len) -- a row is what ncnn computes one mean and variance over -- and
share ``norm_rows.comp``: one workgroup per row, gamma/beta index ``row * per_row + j / div``.
"""

from __future__ import annotations

import math

import numpy as np

from ._base import Layer, ModelBin, Shape
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    blobs_and_weights,
    capped_groups,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._limits import MAX_CHANNELS, MAX_EXTENT, MAX_KERNEL
from ._registry import register_layer
from ._schema import Param

_F32 = np.float32
#: Workgroups ``norm_rows.comp`` is dispatched with at most (each loops over its rows).
_MAX_ROW_GROUPS = 65535
#: ``norm_rows.comp`` sums through a shared array of this many floats.
_MAX_ROW_LOCAL = 64


def _refuse_negative(layer: Layer, param: Param[int]) -> None:
    value = getattr(layer, param.name)
    if value < 0:
        raise ValueError(
            f"{layer.type_name} param {param.id} ({param.name}) = {value} must be >= 0"
        )


def _refuse_no_weights(layer: Layer, count: Param[int], affine: Param[int]) -> None:
    """ncnn fails to load an affine layer whose weight count is 0 (an empty Mat)."""
    value = getattr(layer, count.name)
    if getattr(layer, affine.name) and value <= 0:
        raise ValueError(
            f"{layer.type_name} param {affine.id} ({affine.name}) = 1 needs param {count.id} "
            f"({count.name}) > 0, got {value}"
        )


@register_layer("LRN")
class LRN(Layer):
    """0 region_type (0 across channels, 1 within channel), 1 local_size (5), 2 alpha (1),
    3 beta (0.75), 4 bias (1): ``x * (bias + alpha / n * sum(x^2 over the window))^-beta``.

    As ncnn: across channels the window is the local_size channels from q - local_size/2 (the
    ones that exist) and n = local_size -- ncnn's older sources added channel q + local_size/2
    for an even local_size too; the ncnn wheel the tests check against (1.0.20261020) does
    not; within a channel the window is local_size^2 pixels, padded local_size/2 before and
    the rest after with zeros, and n = local_size^2. Blobs of dims 1 and 2 are one channel;
    dims 4 is refused (ncnn reads only its first depth slice).
    """

    region_type = Param(0, int, 0)
    local_size = Param(1, int, 5, limit=MAX_KERNEL)
    alpha = Param(2, float, 1.0)
    beta = Param(3, float, 0.75)
    bias = Param(4, float, 1.0)

    gpu = True

    def validate(self) -> None:
        if self.region_type not in (0, 1):
            raise ValueError(
                f"LRN param 0 (region_type) = {self.region_type}: 0 (across channels) or 1 "
                "(within channel)"
            )
        if self.local_size < 1:
            raise ValueError(f"LRN param 1 (local_size) = {self.local_size} must be >= 1")

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        if len(shape) == 4:
            raise ValueError(f"LRN takes blobs of 1 to 3 dims, got shape {shape}")
        return [shape]

    def alpha_div_size(self) -> np.float32:
        """alpha / n in float32, n the window's element count as ncnn divides."""
        n = self.local_size if self.region_type == 0 else self.local_size * self.local_size
        return _F32(_F32(self.alpha) / _F32(n))

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], _F32)
        (shape,) = self.output_shapes([x.shape])
        chw = x.reshape((1,) * (3 - x.ndim) + x.shape)
        square = chw * chw
        if self.region_type == 0:
            ss = _window_sum_channels(square, self.local_size)
        else:
            ss = _window_sum_plane(square, self.local_size)
        with np.errstate(all="ignore"):
            base = _F32(self.bias) + self.alpha_div_size() * ss
            out = chw * np.power(base, _F32(-self.beta), dtype=_F32)
        return [out.astype(_F32).reshape(shape)]

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        spec = (
            self.region_type,
            self.local_size,
            float(self.alpha_div_size()),
            float(_F32(self.beta)),
            float(_F32(self.bias)),
        )
        return {"lrn": PipelineSpec("lrn", spec, local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        shape = inputs[0].shape
        c, h, w = (1,) * (3 - len(shape)) + tuple(shape)
        push = pack_push("3i", w, h, c)
        pixels = groups_1d(w * h, local_size_1d(ctx.info), ctx.info)
        groups = capped_groups((pixels[0], pixels[1], c), ctx.info)
        ctx.dispatch("lrn", [inputs[0], outputs[0]], push, groups)


def _window_sum_channels(square: np.ndarray, size: int) -> np.ndarray:
    """Per channel q, the sum of the ``size`` channels from q - size/2 that exist, added in
    channel order."""
    channels = square.shape[0]
    ss = np.zeros_like(square)
    for offset in range(-(size // 2), size - size // 2):
        lo, hi = max(0, -offset), min(channels, channels - offset)
        if lo < hi:
            ss[lo:hi] += square[lo + offset : hi + offset]
    return ss


def _window_sum_plane(square: np.ndarray, size: int) -> np.ndarray:
    """Per pixel, the sum of its size x size window (zero padded), added row by row."""
    pad = size // 2
    _, h, w = square.shape
    padded = np.pad(square, ((0, 0), (pad, size - pad - 1), (pad, size - pad - 1)))
    ss = np.zeros_like(square)
    for ky in range(size):
        for kx in range(size):
            ss += padded[:, ky : ky + h, kx : kx + w]
    return ss


# -- mean/variance normalization of rows ---------------------------------------------------


class _RowNorm(Layer):
    """Normalize each row of the blob viewed as (rows, len): ``(x - mean) / sqrt(var + eps)``
    (``centered``; RMSNorm: ``x / sqrt(mean(x^2) + eps)``), then times gamma plus beta."""

    centered = True
    eps: float
    affine: int
    gamma = np.zeros(0, _F32)
    beta = np.zeros(0, _F32)

    gpu = True

    def rows_and_len(self, shape: Shape) -> tuple[int, int]:
        """How many rows the blob is, and each row's length; ValueError for too few weights."""
        raise NotImplementedError

    def affine_index(self, shape: Shape) -> tuple[int, int]:
        """(per_row, div): the weight of row r, element j is ``r * per_row + j // div``."""
        raise NotImplementedError

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        self.rows_and_len(shape)
        return [shape]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], _F32)
        rows, length = self.rows_and_len(x.shape)
        view = x.reshape(rows, length)
        a, b = _row_coefficients(view, _F32(self.eps), self.centered)
        out = view * a + b
        if self.affine:
            index = self._weight_index(x.shape, rows, length)
            out = out * self.gamma[index] + self.beta[index]
        return [out.astype(_F32).reshape(x.shape)]

    def _weight_index(self, shape: Shape, rows: int, length: int) -> np.ndarray:
        per_row, div = self.affine_index(shape)
        return np.arange(rows)[:, None] * per_row + np.arange(length)[None, :] // div

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        local = (min(_MAX_ROW_LOCAL, local_size_1d(target.info)[0]), 1, 1)
        spec = (int(self.centered), int(bool(self.affine)), float(_F32(self.eps)))
        return {"norm": PipelineSpec("norm_rows", spec, local)}

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        if not self.affine:
            return {"gamma": np.ones(1, _F32), "beta": np.zeros(1, _F32)}
        beta = self.beta if self.beta.size else np.zeros_like(self.gamma)
        return {"gamma": self.gamma, "beta": beta}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        shape = inputs[0].shape
        rows, length = self.rows_and_len(shape)
        per_row, div = self.affine_index(shape)
        push = pack_push("4i", rows, length, per_row, div)
        bufs = blobs_and_weights(ctx, inputs, outputs, ("gamma", "beta"))
        groups = capped_groups((min(rows, _MAX_ROW_GROUPS), 1, 1), ctx.info)
        ctx.dispatch("norm", bufs, push, groups)


def _row_coefficients(
    rows: np.ndarray, eps: np.float32, centered: bool
) -> tuple[np.ndarray, np.ndarray]:
    """ncnn's a = 1 / sqrt(var + eps), b = -mean * a per row, in float32."""
    n = _F32(rows.shape[1])
    if centered:
        mean = np.sum(rows, axis=1, dtype=_F32, keepdims=True) / n
        diff = rows - mean
        var = np.sum(diff * diff, axis=1, dtype=_F32, keepdims=True) / n
    else:
        mean = np.zeros((rows.shape[0], 1), _F32)
        var = np.sum(rows * rows, axis=1, dtype=_F32, keepdims=True) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        a = (_F32(1) / np.sqrt(var + eps)).astype(_F32)
    return a, (-mean * a).astype(_F32)


def _check_weights(layer: _RowNorm, have: int, need: int, what: str, shape: Shape) -> None:
    """ncnn reads ``need`` weights unchecked: refuse a blob that needs more than it has."""
    if layer.affine and have < need:
        raise ValueError(
            f"{layer.type_name} has {have} {what} but a blob of shape {shape} needs {need}"
        )


class _LastAxesNorm(_RowNorm):
    """LayerNorm and RMSNorm: dims 1 whole, dims 2 per row; dims 3 per row when affine_size
    is w, else per channel; dims 4 per row, per (h, w) slice when affine_size is w * h, else
    per channel. The weights follow the position in the row."""

    affine_size = Param(0, int, 0, limit=MAX_EXTENT)
    eps = Param(1, float, 0.001)
    affine = Param(2, int, 1)

    def validate(self) -> None:
        _refuse_negative(self, _LastAxesNorm.affine_size)
        _refuse_no_weights(self, _LastAxesNorm.affine_size, _LastAxesNorm.affine)

    def rows_and_len(self, shape: Shape) -> tuple[int, int]:
        w = shape[-1]
        if len(shape) <= 2 or self.affine_size == w:
            length = w
        elif len(shape) == 4 and self.affine_size == w * shape[-2]:
            length = w * shape[-2]
        else:
            length = math.prod(shape[1:])
        _check_weights(self, self.affine_size, length, "weights (param 0 affine_size)", shape)
        return math.prod(shape) // length, length

    def affine_index(self, shape: Shape) -> tuple[int, int]:
        return 0, 1


@register_layer("LayerNorm")
class LayerNorm(_LastAxesNorm):
    """0 affine_size, 1 eps (0.001), 2 affine (1); weights gamma, beta (affine_size each)."""

    def load_model(self, mb: ModelBin) -> None:
        if self.affine:
            self.gamma = np.asarray(mb.load(self.affine_size, 1), _F32)
            self.beta = np.asarray(mb.load(self.affine_size, 1), _F32)


@register_layer("RMSNorm")
class RMSNorm(_LastAxesNorm):
    """0 affine_size, 1 eps (0.001), 2 affine (1); weight gamma (affine_size): no mean, no beta."""

    centered = False

    def load_model(self, mb: ModelBin) -> None:
        if self.affine:
            self.gamma = np.asarray(mb.load(self.affine_size, 1), _F32)
            self.beta = np.zeros_like(self.gamma)


@register_layer("InstanceNorm")
class InstanceNorm(_RowNorm):
    """0 channels, 1 eps (0.001), 2 affine (1); weights gamma, beta (channels each).

    One mean and variance per Mat channel: a blob of dims 1 or 2 is one channel."""

    channels = Param(0, int, 0, limit=MAX_CHANNELS)
    eps = Param(1, float, 0.001)
    affine = Param(2, int, 1)

    def validate(self) -> None:
        _refuse_negative(self, InstanceNorm.channels)
        _refuse_no_weights(self, InstanceNorm.channels, InstanceNorm.affine)

    def rows_and_len(self, shape: Shape) -> tuple[int, int]:
        rows = shape[0] if len(shape) >= 3 else 1
        _check_weights(self, self.channels, rows, "channels (param 0)", shape)
        return rows, math.prod(shape) // rows

    def affine_index(self, shape: Shape) -> tuple[int, int]:
        return 1, math.prod(shape)  # j // div is 0: one weight per row

    def load_model(self, mb: ModelBin) -> None:
        if self.affine:
            self.gamma = np.asarray(mb.load(self.channels, 1), _F32)
            self.beta = np.asarray(mb.load(self.channels, 1), _F32)


@register_layer("GroupNorm")
class GroupNorm(_RowNorm):
    """0 group (1), 1 channels, 2 eps (0.001), 3 affine (1); weights gamma, beta (channels
    each). Axis 0 holds the channels (the elements of a 1-D blob, the rows of a 2-D one); each
    group of channels / group of them shares one mean and variance."""

    group = Param(0, int, 1, limit=MAX_CHANNELS)
    channels = Param(1, int, 0, limit=MAX_CHANNELS)
    eps = Param(2, float, 0.001)
    affine = Param(3, int, 1)

    def validate(self) -> None:
        _refuse_negative(self, GroupNorm.channels)
        _refuse_no_weights(self, GroupNorm.channels, GroupNorm.affine)
        if self.group < 1:
            raise ValueError(f"GroupNorm param 0 (group) = {self.group} must be >= 1")
        if self.channels % self.group:
            raise ValueError(
                f"GroupNorm param 1 (channels) = {self.channels} is not a multiple of param 0 "
                f"(group) = {self.group}"
            )

    def rows_and_len(self, shape: Shape) -> tuple[int, int]:
        if shape[0] != self.channels:
            raise ValueError(
                f"GroupNorm param 1 (channels) = {self.channels} but the blob of shape {shape} "
                f"has {shape[0]} channels on axis 0"
            )
        return self.group, math.prod(shape) // self.group

    def affine_index(self, shape: Shape) -> tuple[int, int]:
        return self.channels // self.group, math.prod(shape[1:])

    def load_model(self, mb: ModelBin) -> None:
        if self.affine:
            self.gamma = np.asarray(mb.load(self.channels, 1), _F32)
            self.beta = np.asarray(mb.load(self.channels, 1), _F32)
