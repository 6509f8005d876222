"""ROIAlign, ROIPooling and PSROIPooling against ncnn itself (the wheel's CPU fp32),
through asyncvk's GPU plan on lavapipe and its CPU path: every param that changes the math,
ROIs inside the map, across its borders, under a pixel, empty, reversed and far off it, maps of
1 to 4 dims; bad params are a ModelFormatError naming the param, blobs that do not fit an
InputError.

The wheel's last bit depends on the CPU (ncnn_oracle). ROIPooling's is worse: the wheel divides
by the pooled size with an approximate reciprocal, so a bin edge that falls exactly on a pixel
boundary (``k * roi / pooled`` a whole number) may take one pixel more in the wheel; asyncvk
divides exactly, as ncnn's source does. ROIPooling and PSROIPooling are compared bin by bin: each
value must be the bin's max or mean over one of the regions such edges allow (exactly one
region where no edge sits on a pixel boundary)."""

from __future__ import annotations

import itertools
import math
import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import (
    Model,
    assert_close_to_ncnn,
    asyncvk_forward,
    ncnn_forward,
    write_model,
)

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

_F = np.float32


def _model(tmp_path: Path, layer: str) -> Model:
    """Inputs feat and roi, then ``layer`` (``Type name bottoms... tops... params``)."""
    lines = [f"Input {name} 0 1 {name}" for name in ("feat", "roi")]
    tops = int(layer.split()[3])
    text = f"7767517\n3 {2 + tops}\n" + "\n".join([*lines, layer])
    return write_model(tmp_path, text)


async def _both(
    model: Model, inputs: dict[str, np.ndarray], kind: str
) -> tuple[np.ndarray, np.ndarray]:
    """The GPU output (``kind`` must not fall back to the CPU) and the CPU output."""
    gpu, cpu_types = await asyncvk_forward(model, inputs, ["out0"], gpu=True)
    assert kind not in cpu_types, f"{kind} fell back to the CPU"
    cpu, _ = await asyncvk_forward(model, inputs, ["out0"], gpu=False)
    return gpu["out0"], cpu["out0"]


async def _ours(model: Model, inputs: dict[str, np.ndarray], kind: str) -> np.ndarray:
    """The CPU output, with the GPU's within a few float32 steps of it: the same operations in
    the same order, but a GPU's compiler may fuse a multiply and an add (Vulkan allows it; the
    H200's driver does, lavapipe's does not)."""
    gpu, cpu = await _both(model, inputs, kind)
    assert_close_to_ncnn(gpu, cpu, ulps=16, scale=float(np.nanmax(np.abs(cpu), initial=1.0)))
    return cpu


def _map(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(_F)


# ROIs in the map's pixels (times spatial_scale 1): inside, across the top-left corner, under a
# pixel, a point, reversed, off the map on either side
ROIS_ANYWHERE = [
    (1.3, 0.7, 7.9, 6.2),
    (-3.2, -2.1, 4.4, 3.3),
    (2.2, 3.3, 2.5, 3.4),
    (4.0, 4.0, 4.0, 4.0),
    (6.1, 5.2, 2.3, 1.4),
    (20.0, 20.0, 30.0, 30.0),
    (-10.0, -10.0, -5.0, -5.0),
]
# across the right border of an inner row: ROIAlign version 0 reads on into the next row there,
# as ncnn does
ROIS_RIGHT = [(6.3, 1.2, 13.7, 5.6), (8.7, 2.2, 10.9, 4.8)]
# across the bottom-right corner: version 0 would read past the channel (memory ncnn never
# wrote), version 1 stays inside
ROIS_CORNER = [(5.5, 4.1, 14.2, 12.9), (-2.5, 6.5, 12.5, 11.5)]

ALIGN_CASES = [
    # (id, params, map shape, version-0-safe ROIs only)
    ("v0-adaptive", "0=3 1=2", (3, 9, 11)),
    ("v0-ratio2-scale", "0=4 1=3 2=0.5 3=2", (3, 9, 11)),
    ("v0-aligned", "0=2 1=5 4=1", (2, 9, 11)),
    ("v0-aligned-ratio3", "0=3 1=3 3=3 4=1", (2, 9, 11)),
    ("v0-2d-map", "0=3 1=3", (9, 11)),
    # adaptive 1x1 bins would take the ROI under a pixel: ncnn's x86 version 0 sizes its sample
    # table by the unclipped bin's samples (1) and writes 2 past it where rounding makes the
    # clipped 1-pixel bin 1.0000002 wide: a heap overflow that aborts the process
    ("v0-1x1-ratio2", "0=1 1=1 3=2", (3, 9, 11)),
    ("v0-5x2", "0=5 1=2", (3, 9, 11)),
    ("v1", "0=3 1=3 5=1", (3, 9, 11)),
    ("v1-aligned", "0=3 1=3 4=1 5=1", (3, 9, 11)),
    ("v1-aligned-ratio3", "0=2 1=5 3=3 4=1 5=1", (3, 9, 11)),
    ("v1-ratio1-scale", "0=7 1=7 2=0.5 3=1 5=1", (2, 9, 11)),
    ("v1-4d-map", "0=3 1=2 5=1", (2, 3, 9, 11)),
    ("v1-1d-map", "0=4 1=1 5=1", (11,)),
]


def _ncnn_v0_table_fits(params: str, roi: tuple[float, ...], h: int, w: int) -> bool:
    """Whether ncnn's x86 version 0 stays inside its sample table for this ROI: it sizes the
    table by the unclipped bins' sample counts and writes each clipped bin's, which float
    rounding can make larger (a heap overflow that aborts the test process)."""
    p = {int(k): float(v) for k, v in (kv.split("=") for kv in params.split())}
    pw, ph, ratio = int(p[0]), int(p[1]), int(p.get(3, 0))
    r = np.array(roi, _F) * _F(p.get(2, 1.0)) - _F(0.5 if p.get(4) else 0)
    sizes = [r[2] - r[0], r[3] - r[1]]
    if not p.get(4):
        sizes = [max(s, _F(1)) for s in sizes]
    bins = [_F(sizes[0] / _F(pw)), _F(sizes[1] / _F(ph))]
    table = 1
    for b in bins:
        table *= ratio if ratio > 0 else math.ceil(b)
    written = 0
    for i, j in itertools.product(range(ph), range(pw)):
        counts = []
        for start, b, k, size in ((r[1], bins[1], i, h), (r[0], bins[0], j, w)):
            lo, hi = (float(np.clip(_F(start + _F(n) * b), 0, size)) for n in (k, k + 1))
            counts.append(ratio if ratio > 0 else math.ceil(_F(_F(hi) - _F(lo))))
        written += counts[0] * counts[1] if min(counts) > 0 else 0
    return written <= table * ph * pw


@pytest.mark.parametrize(
    ("params", "shape"), [c[1:] for c in ALIGN_CASES], ids=[c[0] for c in ALIGN_CASES]
)
async def test_roialign_matches_ncnn(tmp_path: Path, params: str, shape: tuple[int, ...]) -> None:
    model = _model(tmp_path, f"ROIAlign ra 2 1 feat roi out0 {params}")
    feat = _map(shape, len(params))
    rois = ROIS_ANYWHERE + ROIS_RIGHT + (ROIS_CORNER if "5=1" in params else [])
    if len(shape) == 1:  # one row: the ROIs' y span must hold row 0
        rois = [(x1, -0.6, x2, 0.8) for x1, _, x2, _ in rois]
    for roi in rois:
        if "5=1" not in params:
            assert _ncnn_v0_table_fits(params, roi, *shape[-2:]), f"ncnn overflows for {roi}"
        inputs = {"feat": feat, "roi": np.array(roi, _F)}
        theirs = ncnn_forward(model, inputs, ["out0"])["out0"]
        ours = await _ours(model, inputs, "ROIAlign")
        assert_close_to_ncnn(ours, theirs, ulps=16, scale=1.0, what=f"{params} roi {roi}")


async def test_roialign_huge_roi_visits_only_samples_on_the_map(tmp_path: Path) -> None:
    """A version 1 ROI far larger than the map: thousands of samples a bin, nearly all off the
    map; asyncvk searches for those on it (ncnn visits them all)."""
    model = _model(tmp_path, "ROIAlign ra 2 1 feat roi out0 0=3 1=3 5=1")
    inputs = {"feat": _map((2, 9, 11), 5), "roi": np.array([-300, -200, 500, 400], _F)}
    theirs = ncnn_forward(model, inputs, ["out0"])["out0"]
    ours = await _ours(model, inputs, "ROIAlign")
    assert_close_to_ncnn(ours, theirs, ulps=16, scale=1.0)
    assert np.count_nonzero(ours) > 0, "the ROI covers the map: some bin has samples"


async def test_roialign_version0_reads_zero_past_the_channel(tmp_path: Path) -> None:
    """Version 0 places a bin's samples over the unclipped bin from its clipped start: at the
    bottom border they land past the channel, where ncnn reads memory it never wrote; asyncvk
    reads 0 there, on the GPU as on the CPU."""
    model = _model(tmp_path, "ROIAlign ra 2 1 feat roi out0 0=1 1=1 3=1")
    feat = np.ones((2, 4, 4), _F)
    # y: the bin [3.5, 12] clips to [3.5, 4]; its sample at 3.5 + 8.5 / 2 is row 7 of 4
    ours = await _ours(model, {"feat": feat, "roi": np.array([0, 3.5, 4, 12], _F)}, "ROIAlign")
    assert np.array_equal(ours, np.zeros((2, 1, 1), _F))
    inside = await _ours(model, {"feat": feat, "roi": np.array([0, 0, 4, 4], _F)}, "ROIAlign")
    assert np.array_equal(inside, np.ones((2, 1, 1), _F))


@pytest.mark.parametrize(
    "layer",
    [
        "ROIAlign ra 2 1 feat roi out0 0=2 1=2 5=1",
        "ROIPooling rp 2 1 feat roi out0 0=2 1=2",
        "PSROIPooling ps 2 1 feat roi out0 0=2 1=2 2=1.0 3=1",
    ],
)
async def test_nan_and_far_rois(tmp_path: Path, layer: str) -> None:
    """ncnn converts a NaN corner to int or loops on it; asyncvk gives NaN. Corners beyond
    +-2**24 are clamped there: the ROI covers the map, the work stays bounded."""
    model = _model(tmp_path, layer)
    kind = layer.split()[0]
    feat = _map((4, 5, 6), 3)
    nan = await _ours(model, {"feat": feat, "roi": np.array([1, np.nan, 3, 4], _F)}, kind)
    assert np.isnan(nan).all()
    far = await _ours(model, {"feat": feat, "roi": np.array([-1e30, -3e9, 1e12, 1e30], _F)}, kind)
    assert np.isfinite(far).all()


# -- ROIPooling and PSROIPooling: bins compared with the regions a bin edge allows ----------------


def _c_round(v: float) -> int:
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


def _edge_choices(value: Fraction, rounding: str) -> list[int]:
    """floor (start) or ceil (end) of an exact bin edge; on a whole number (within float32's
    rounding), also the pixel beyond it that an inexact division reaches."""
    whole = round(value)
    if abs(value - whole) <= Fraction(1, 10**4) * max(1, abs(whole)):
        return [whole - 1, whole] if rounding == "floor" else [whole, whole + 1]
    return [math.floor(value)] if rounding == "floor" else [math.ceil(value)]


def _bin_spans(
    layer: str, roi: np.ndarray, scale: float, pooled: tuple[int, int]
) -> list[list[list[tuple[int, int]]]]:
    """For each axis (y, x) and each bin, every (start, end) the source's math allows up to an
    inexact division, before clipping (an independent reading of roipooling.cpp and
    psroipooling.cpp, in exact fractions)."""
    spans = []
    for axis, count in ((1, pooled[0]), (0, pooled[1])):
        lo, hi = float(roi[axis]), float(roi[axis + 2])
        bins = []
        for k in range(count):
            if layer == "ROIPooling":
                start = _c_round(float(_F(lo) * _F(scale)))
                size = max(_c_round(float(_F(hi) * _F(scale))) - start + 1, 1)
                begin = [start + v for v in _edge_choices(Fraction(k * size, count), "floor")]
                end = [start + v for v in _edge_choices(Fraction((k + 1) * size, count), "ceil")]
            else:
                first = Fraction(float(_F(_c_round(lo)) * _F(scale)))
                last = Fraction(float(_F(_c_round(float(_F(hi) + 1))) * _F(scale)))
                size = max(last - first, Fraction(float(_F(0.1))))
                begin = _edge_choices(first + k * size / count, "floor")
                end = _edge_choices(first + (k + 1) * size / count, "ceil")
            bins.append(list(itertools.product(begin, end)))
        spans.append(bins)
    return spans


def _allowed(
    plane: np.ndarray, ys: list[tuple[int, int]], xs: list[tuple[int, int]], mean: bool
) -> list[float]:
    h, w = plane.shape
    values = []
    for (y0, y1), (x0, x1) in itertools.product(ys, xs):
        y0, y1 = min(max(y0, 0), h), min(max(y1, 0), h)
        x0, x1 = min(max(x0, 0), w), min(max(x1, 0), w)
        region = plane[y0:y1, x0:x1]
        values.append(0.0 if not region.size else float(region.mean() if mean else region.max()))
    return values


def _assert_bins(
    out: np.ndarray, feat: np.ndarray, layer: str, roi: np.ndarray, scale: float, what: str
) -> None:
    dims, ph, pw = out.shape
    planes = feat.reshape(-1, *feat.shape[-2:]) if feat.ndim >= 2 else feat.reshape(1, 1, -1)
    ys, xs = _bin_spans(layer, roi, scale, (ph, pw))
    for q, i, j in itertools.product(range(dims), range(ph), range(pw)):
        channel = q if layer == "ROIPooling" else (q * ph + i) * pw + j
        allowed = _allowed(planes[channel], ys[i], xs[j], layer == "PSROIPooling")
        value = float(out[q, i, j])
        near = np.isclose(value, allowed, rtol=1e-5, atol=1e-6)
        assert near.any(), f"{what}: bin {(q, i, j)} = {value}, allowed {allowed}"


POOLING_CASES = [
    # (id, params, map shape, scale)
    ("3x2", "0=3 1=2", (3, 9, 11), 1.0),
    ("4x5-half", "0=4 1=5 2=0.5", (2, 9, 11), 0.5),
    ("7x7-sixteenth", "0=7 1=7 2=0.0625", (2, 9, 11), 0.0625),
    ("1x1", "0=1 1=1", (3, 9, 11), 1.0),
    ("2d-map", "0=2 1=3", (9, 11), 1.0),
    ("4d-map", "0=3 1=2", (2, 3, 9, 11), 1.0),
]
ROIS_POOLING = ROIS_ANYWHERE + ROIS_RIGHT + ROIS_CORNER


@pytest.mark.parametrize(
    ("params", "shape", "scale"), [c[1:] for c in POOLING_CASES], ids=[c[0] for c in POOLING_CASES]
)
async def test_roipooling_matches_ncnn(
    tmp_path: Path, params: str, shape: tuple[int, ...], scale: float
) -> None:
    model = _model(tmp_path, f"ROIPooling rp 2 1 feat roi out0 {params}")
    feat = _map(shape, len(params))
    planes = feat if len(shape) != 4 else feat[:, 0]  # ncnn pools depth slice 0 of a 4-D map
    for roi in ROIS_POOLING:
        rois = np.array(roi, _F) / _F(scale)
        inputs = {"feat": feat, "roi": rois}
        theirs = ncnn_forward(model, inputs, ["out0"])["out0"]
        # bins checked on both paths: a GPU's division may be a step off (Vulkan allows 2.5
        # ulps), which moves an edge that falls exactly on a pixel, as in ncnn's own build
        for path, ours in zip(
            ("gpu", "cpu"), await _both(model, inputs, "ROIPooling"), strict=True
        ):
            assert ours.shape == theirs.shape
            _assert_bins(ours, planes, "ROIPooling", rois, scale, f"{path} {params} {roi}")
        _assert_bins(theirs, planes, "ROIPooling", rois, scale, f"ncnn {params} {roi}")


async def test_roipooling_divides_exactly(tmp_path: Path) -> None:
    """A 4-row ROI in 2 bins: rows [0, 2) and [2, 4), as ncnn's source divides (its wheel may
    start the second bin a row early)."""
    model = _model(tmp_path, "ROIPooling rp 2 1 feat roi out0 0=1 1=2")
    rows = np.arange(9, dtype=_F)[:, None].repeat(3, axis=1)
    feat = np.stack([rows, -rows])  # max: the last row of a bin; max of -rows: minus its first
    ours = await _ours(model, {"feat": feat, "roi": np.array([0, 0, 2, 3], _F)}, "ROIPooling")
    assert ours[0, :, 0].tolist() == [1, 3] and (-ours[1, :, 0]).tolist() == [0, 2]


PS_CASES = [
    # (id, params, map shape, scale)
    ("2x3-dim2", "0=2 1=3 2=1.0 3=2", (12, 9, 11), 1.0),
    ("3x3-dim1-half", "0=3 1=3 2=0.5 3=1", (9, 9, 11), 0.5),
    ("defaults-7x7", "3=1", (49, 9, 11), 0.0625),
    ("1x1-dim3", "0=1 1=1 2=1.0 3=3", (3, 9, 11), 1.0),
    ("4d-map", "0=2 1=2 2=1.0 3=1", (4, 2, 9, 11), 1.0),
]


@pytest.mark.parametrize(
    ("params", "shape", "scale"), [c[1:] for c in PS_CASES], ids=[c[0] for c in PS_CASES]
)
async def test_psroipooling_matches_ncnn(
    tmp_path: Path, params: str, shape: tuple[int, ...], scale: float
) -> None:
    model = _model(tmp_path, f"PSROIPooling ps 2 1 feat roi out0 {params}")
    feat = _map(shape, len(params))
    planes = feat if len(shape) != 4 else feat[:, 0]
    for roi in ROIS_POOLING:
        rois = np.array(roi, _F) / _F(scale)
        inputs = {"feat": feat, "roi": rois}
        theirs = ncnn_forward(model, inputs, ["out0"])["out0"]
        for path, ours in zip(
            ("gpu", "cpu"), await _both(model, inputs, "PSROIPooling"), strict=True
        ):
            assert ours.shape == theirs.shape
            _assert_bins(ours, planes, "PSROIPooling", rois, scale, f"{path} {params} {roi}")
        _assert_bins(theirs, planes, "PSROIPooling", rois, scale, f"ncnn {params} {roi}")


@pytest.mark.parametrize("roi_shape", [(4,), (3, 4), (1, 1, 4), (2, 1, 4), (1, 2, 2)])
async def test_the_roi_is_the_first_four_values(tmp_path: Path, roi_shape: tuple[int, ...]) -> None:
    """ncnn reads the ROI from the blob's first values (its first channel when 3-D): one ROI
    per forward, the rest of a list of them unread, as after Proposal."""
    model = _model(tmp_path, "ROIAlign ra 2 1 feat roi out0 0=2 1=2 5=1")
    rois = np.array([1.3, 0.7, 7.9, 6.2, 2, 2, 5, 5, 0, 0, 1, 1], _F)[: math.prod(roi_shape)]
    inputs = {"feat": _map((3, 9, 11), 2), "roi": rois.reshape(roi_shape)}
    theirs = ncnn_forward(model, inputs, ["out0"])["out0"]
    assert_close_to_ncnn(await _ours(model, inputs, "ROIAlign"), theirs, ulps=16, scale=1.0)


# -- what asyncvk refuses --------------------------------------------------------------------------

BAD_PARAMS = [
    ("ROIAlign ra 2 1 feat roi out0 0=0 1=2", "ROIAlign param 0 (pooled_width) = 0 must be >= 1"),
    (
        "ROIAlign ra 2 1 feat roi out0 0=2 1=2 5=2",
        "ROIAlign param 5 (version) = 2 must be 0 (ncnn)",
    ),
    (
        "ROIAlign ra 2 1 feat roi out0 0=2 1=2 3=5000",
        "param 3 (sampling_ratio) = 5000 exceeds the limit 256",
    ),
    ("ROIAlign ra 1 1 feat out0 0=2 1=2", "ROIAlign takes 2 input blobs, got 1"),
    ("ROIPooling rp 2 1 feat roi out0 0=2", "ROIPooling param 1 (pooled_height) = 0 must be >= 1"),
    ("PSROIPooling ps 2 1 feat roi out0", "PSROIPooling param 3 (output_dim) = 0 must be >= 1"),
]


@pytest.mark.parametrize(("layer", "message"), BAD_PARAMS, ids=[b[1][:40] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, layer: str, message: str
) -> None:
    model = _model(tmp_path, layer)
    inputs = {"feat": np.ones((4, 3, 3), np.float32), "roi": np.ones(4, np.float32)}
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, inputs, ["out0"])
    where = (caught.value.file, caught.value.line, caught.value.layer)
    assert where == (str(model.param), 5, layer.split()[1])


BAD_SHAPES = [
    # (layer, feature shape, roi shape, message): ncnn would read past a blob or fail
    ("ROIAlign ra 2 1 feat roi out0 0=2 1=2", (2, 5, 5), (3,), "hold fewer than 4 values"),
    ("ROIPooling rp 2 1 feat roi out0 0=2 1=2", (2, 5, 5), (4, 1, 1), "in their first channel"),
    (
        "PSROIPooling ps 2 1 feat roi out0 0=2 1=2 3=1",
        (5, 5, 5),
        (4,),
        "the map has 5 channels; output_dim 1 x 2 x 2 bins needs 4",
    ),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(
    ("layer", "feat", "roi", "message"), BAD_SHAPES, ids=[b[3][:30] for b in BAD_SHAPES]
)
async def test_blobs_that_do_not_fit_are_an_input_error(
    tmp_path: Path, layer: str, feat: tuple[int, ...], roi: tuple[int, ...], message: str, gpu: bool
) -> None:
    model = _model(tmp_path, layer)
    inputs = {"feat": np.ones(feat, np.float32), "roi": np.ones(roi, np.float32)}
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, inputs, ["out0"], gpu=gpu)
