"""ROIAlign, ROIPooling and PSROIPooling: one ROI (input 1) pooled from a feature map (input 0)
into a (channels, pooled_height, pooled_width) blob, as ncnn's roialign.cpp (its x86 build, the
wheel's), roipooling.cpp and psroipooling.cpp compute it in float32; on the GPU one invocation
per output value (``shaders/roialign.comp``, ``shaders/roipooling.comp``).

ncnn reads the ROI as the first 4 floats of input 1 (x1, y1, x2, y2 in image pixels, times
``spatial_scale``); a 3-D or 4-D ROI blob must hold them in its first channel. The map's planes
are its (h, w) channels (dims 1 and 2: one channel; dims 4: depth slice 0, except where ncnn's
version 0 reads past a row). Where ncnn's answer is not defined, asyncvk decides, the same on
the GPU and the CPU:

- a NaN ROI corner (after scaling) gives NaN outputs (ncnn converts NaN to int, or loops on it);
- a scaled corner beyond +-2**24 is clamped there (ncnn's int conversions and sample counts
  overflow long before; nothing changes for ROIs within 16M pixels of the map);
- ROIAlign version 0 spreads a bin's samples over the unclipped bin from its clipped start, so
  at the right and bottom borders they land past the map: ncnn reads ``row * w + col`` in the
  channel anyway, the next row's pixels, and so does asyncvk; past the channel's end ncnn reads
  memory it never wrote, where asyncvk reads 0. Version 1 (detectron2) stays inside.

Divisions are IEEE float32, as the source writes them. The x86 wheel divides ROIPooling's ROI
size by the pooled size with an approximate reciprocal, so where a bin edge falls exactly on a
pixel boundary it may take one pixel more (tests/test_layers_roi.py allows that edge).
"""

from __future__ import annotations

import math

import numpy as np

from . import _roi_align as align
from ._base import BlobCount, Layer, Shape
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
from ._limits import MAX_EXTENT
from ._registry import register_layer
from ._schema import Param

_F = np.float32
#: Scaled ROI corners are clamped to +-2**24 (see the module notes).
_LIMIT = _F(1 << 24)
#: ROIAlign's samples a bin side: every output value takes up to its square (networks use 0-4).
MAX_SAMPLING_RATIO = 256


def _geometry(shape: Shape) -> tuple[int, int, int, int]:
    """(channels, h, w, values per channel) of a feature map as ncnn's Mat sees it."""
    w, h, d, c = shape4(shape)
    return c, h, w, d * h * w


def _check_rois(type_name: str, shape: Shape) -> None:
    first = math.prod(shape[1:]) if len(shape) >= 3 else math.prod(shape)
    if first < 4:
        raise ValueError(
            f"{type_name}: rois of shape {shape} hold fewer than 4 values in their first "
            "channel (ncnn reads x1, y1, x2, y2 there)"
        )


def _roi(rois: np.ndarray) -> np.ndarray:
    """The 4 floats ncnn reads: the first 4 of the blob (of its first channel when 3-D/4-D)."""
    return np.asarray(rois, _F).reshape(-1)[:4].astype(_F)


def _clamp(v: np.ndarray) -> np.ndarray:
    """Scaled corners clamped to +-2**24 (NaN stays NaN)."""
    return np.clip(v.astype(_F), -_LIMIT, _LIMIT).astype(_F)


def _round(v: np.ndarray) -> np.ndarray:
    """C's ``roundf``, half away from zero, in float32 (inf and NaN stay)."""
    v = np.asarray(v, _F)
    with np.errstate(invalid="ignore"):
        whole = np.trunc(v)
        return np.where(np.abs(v - whole) >= _F(0.5), whole + np.sign(v), whole).astype(_F)


class _OneRoi(Layer):
    """What the three share: a feature map and an ROI blob in, one pooled blob out, a GPU path
    of one dispatch over the outputs."""

    one_blob_only = False
    gpu = True
    pooled_width: int
    pooled_height: int
    spatial_scale: float
    _shader = ""

    def validate(self) -> None:
        for pid, name, value in (
            (0, "pooled_width", self.pooled_width),
            (1, "pooled_height", self.pooled_height),
        ):
            if value < 1:
                raise ValueError(f"{self.type_name} param {pid} ({name}) = {value} must be >= 1")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (2, 2), (1, 1)

    def _channels(self, feature: Shape) -> int:
        return _geometry(feature)[0]

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        _check_rois(self.type_name, input_shapes[1])
        return [(self._channels(input_shapes[0]), self.pooled_height, self.pooled_width)]

    def _specializations(self) -> tuple[int, ...]:
        return ()

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        spec = PipelineSpec(self._shader, self._specializations(), local_size_1d(target.info))
        return {"pool": spec}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        _, h, w, plane = _geometry(inputs[0].shape)
        sizes = (w, h, plane, outputs[0].shape[0], self.pooled_width, self.pooled_height)
        push = pack_push("6if", *sizes, self.spatial_scale)
        groups = groups_1d(outputs[0].size, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("pool", [inputs[0], inputs[1], outputs[0]], push, groups)


@register_layer("ROIAlign")
class ROIAlign(_OneRoi):
    """Average of bilinear samples over each bin. Version 0 is ncnn's own (bins clipped to the
    map, ``sampling_ratio`` or the clipped extent's samples a side), version 1 detectron2's
    (``sampling_ratio`` or the bin size's, samples off the map skipped, divided by their full
    count). ``aligned`` moves the ROI by half a pixel and lets it be under a pixel wide."""

    pooled_width = Param(0, int, 0, limit=MAX_EXTENT)
    pooled_height = Param(1, int, 0, limit=MAX_EXTENT)
    spatial_scale = Param(2, float, 1.0)
    sampling_ratio = Param(3, int, 0, limit=MAX_SAMPLING_RATIO)
    aligned = Param(4, int, 0)
    version = Param(5, int, 0)
    _shader = "roialign"

    def validate(self) -> None:
        super().validate()
        if self.version not in (0, 1):
            raise ValueError(
                f"ROIAlign param 5 (version) = {self.version} must be 0 (ncnn) or 1 (detectron2)"
            )

    def _specializations(self) -> tuple[int, ...]:
        return (self.version, int(bool(self.aligned)), max(self.sampling_ratio, 0))

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        feature, rois = inputs
        c, h, w, plane = _geometry(tuple(feature.shape))
        flat = np.asarray(feature, _F).reshape(c, plane)
        ph_n, pw_n = self.pooled_height, self.pooled_width
        r = _clamp(_roi(rois) * _F(self.spatial_scale))
        if np.isnan(r).any():
            return [np.full((c, ph_n, pw_n), np.nan, _F)]
        if self.aligned:
            r = (r - _F(0.5)).astype(_F)
        x1, y1, x2, y2 = r
        roi_w, roi_h = _F(x2 - x1), _F(y2 - y1)
        if not self.aligned:
            roi_w = _F(1) if roi_w < 1 else roi_w
            roi_h = _F(1) if roi_h < 1 else roi_h
        bin_w, bin_h = _F(roi_w / _F(pw_n)), _F(roi_h / _F(ph_n))
        ratio = max(self.sampling_ratio, 0)
        out = np.zeros((c, ph_n, pw_n), _F)
        if self.version == 0:
            rows = align.v0_axis(y1, bin_h, ph_n, h, ratio)
            cols = align.v0_axis(x1, bin_w, pw_n, w, ratio)
            for i, ty in enumerate(rows):
                for j, tx in enumerate(cols):
                    if ty is not None and tx is not None:
                        area = _F(len(ty.low) * len(tx.low))
                        out[:, i, j] = align.bin_sum(flat, w, ty, tx) / area
            return [out]
        grid_h = ratio or int(np.ceil(bin_h))
        grid_w = ratio or int(np.ceil(bin_w))
        count = _F(grid_h) * _F(grid_w) if grid_h > 0 and grid_w > 0 else _F(1)
        rows1 = align.v1_axis(y1, bin_h, ph_n, h, grid_h)
        cols1 = align.v1_axis(x1, bin_w, pw_n, w, grid_w)
        for i, ty1 in enumerate(rows1):
            for j, tx1 in enumerate(cols1):
                out[:, i, j] = align.bin_sum(flat, w, ty1, tx1) / count
        return [out]


def _bins(
    origin: np.float32, bin_size: np.float32, count: int, size: int, rounding: str
) -> list[tuple[int, int]]:
    """Each bin's [start, end) along one axis, clipped to [0, size]: ROIPooling's integer
    origin plus floor/ceil of the bin offsets, or PSROIPooling's floor/ceil of the sums."""
    spans = []
    for p in range(count):
        lo, hi = _F(p) * bin_size, _F(p + 1) * bin_size
        if rounding == "offsets":
            start, end = _F(origin + np.floor(lo)), _F(origin + np.ceil(hi))
        else:
            start, end = np.floor(_F(origin + lo)), np.ceil(_F(origin + hi))
        spans.append((min(max(int(start), 0), size), min(max(int(end), 0), size)))
    return spans


def _sum_in_order(region: np.ndarray) -> np.ndarray:
    """Each row's sum added one value at a time from 0 (ncnn's loop), as float32."""
    rows = region.reshape(region.shape[0], -1)
    return (np.cumsum(rows, axis=1, dtype=_F)[:, -1] + _F(0)).astype(_F)


@register_layer("ROIPooling")
class ROIPooling(_OneRoi):
    """Max over each bin of the ROI rounded to whole pixels (corners rounded half away from
    zero, at least one pixel a side); an empty bin gives 0. A NaN is kept only where it is a
    bin's first value, as ncnn's ``std::max`` from the first value keeps it."""

    pooled_width = Param(0, int, 0, limit=MAX_EXTENT)
    pooled_height = Param(1, int, 0, limit=MAX_EXTENT)
    spatial_scale = Param(2, float, 1.0)
    _shader = "roipooling"

    def _specializations(self) -> tuple[int, ...]:
        return (0,)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        feature, rois = inputs
        c, h, w, plane = _geometry(tuple(feature.shape))
        maps = np.asarray(feature, _F).reshape(c, plane)[:, : h * w].reshape(c, h, w)
        out = np.zeros((c, self.pooled_height, self.pooled_width), _F)
        r = _clamp(_roi(rois) * _F(self.spatial_scale))
        if np.isnan(r).any():
            return [np.full_like(out, np.nan)]
        x1, y1, x2, y2 = (int(v) for v in _round(r))
        bin_w = _F(_F(max(x2 - x1 + 1, 1)) / _F(self.pooled_width))
        bin_h = _F(_F(max(y2 - y1 + 1, 1)) / _F(self.pooled_height))
        rows = _bins(_F(y1), bin_h, self.pooled_height, h, "offsets")
        cols = _bins(_F(x1), bin_w, self.pooled_width, w, "offsets")
        for i, (hs, he) in enumerate(rows):
            for j, (ws, we) in enumerate(cols):
                if he > hs and we > ws:
                    region = maps[:, hs:he, ws:we].reshape(c, -1)
                    first = region[:, 0]
                    out[:, i, j] = np.where(np.isnan(first), first, np.fmax.reduce(region, axis=1))
        return [out]


@register_layer("PSROIPooling")
class PSROIPooling(_OneRoi):
    """Position-sensitive average pooling (R-FCN): bin (ph, pw) of output channel q averages
    input channel ``(q * pooled_height + ph) * pooled_width + pw``, so the map must have
    exactly ``output_dim * pooled_width * pooled_height`` channels (ncnn fails otherwise). The
    ROI's corners are rounded before scaling, the far ones one pixel further out."""

    pooled_width = Param(0, int, 7, limit=MAX_EXTENT)
    pooled_height = Param(1, int, 7, limit=MAX_EXTENT)
    spatial_scale = Param(2, float, 0.0625)
    output_dim = Param(3, int, 0, limit=MAX_EXTENT)
    _shader = "roipooling"

    def validate(self) -> None:
        super().validate()
        if self.output_dim < 1:
            raise ValueError(f"PSROIPooling param 3 (output_dim) = {self.output_dim} must be >= 1")

    def _channels(self, feature: Shape) -> int:
        c = _geometry(feature)[0]
        bins = self.pooled_width * self.pooled_height
        if c != self.output_dim * bins:
            raise ValueError(
                f"PSROIPooling: the map has {c} channels; output_dim {self.output_dim} x "
                f"{self.pooled_height} x {self.pooled_width} bins needs {self.output_dim * bins}"
            )
        return self.output_dim

    def _specializations(self) -> tuple[int, ...]:
        return (1,)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        feature, rois = inputs
        c, h, w, plane = _geometry(tuple(feature.shape))
        ph_n, pw_n, dim = self.pooled_height, self.pooled_width, self._channels(feature.shape)
        maps = np.asarray(feature, _F).reshape(c, plane)[:, : h * w]
        maps = maps.reshape(dim, ph_n, pw_n, h, w)
        out = np.zeros((dim, ph_n, pw_n), _F)
        v = _roi(rois)
        ends = np.array([v[0], v[1], v[2] + _F(1), v[3] + _F(1)], _F)  # the far ones a pixel out
        r = _clamp(_round(ends) * _F(self.spatial_scale))
        if np.isnan(r).any():
            return [np.full_like(out, np.nan)]
        x1, y1, x2, y2 = r
        roi_w, roi_h = _F(x2 - x1), _F(y2 - y1)
        roi_w = _F(0.1) if roi_w < _F(0.1) else roi_w
        roi_h = _F(0.1) if roi_h < _F(0.1) else roi_h
        rows = _bins(y1, _F(roi_h / _F(ph_n)), ph_n, h, "sums")
        cols = _bins(x1, _F(roi_w / _F(pw_n)), pw_n, w, "sums")
        for i, (hs, he) in enumerate(rows):
            for j, (ws, we) in enumerate(cols):
                if he > hs and we > ws:
                    area = _F((he - hs) * (we - ws))
                    out[:, i, j] = _sum_in_order(maps[:, i, j, hs:he, ws:we]) / area
        return [out]
