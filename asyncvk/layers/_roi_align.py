"""ROIAlign's bilinear sampling in numpy, as ncnn's x86 build (``roialign_x86.cpp``, the wheel's)
computes it in float32: the sample coordinates, the two taps each sample reads per axis and
their weights, and each bin's sum in ncnn's order (sample rows, then columns).

The taps are separable: a sample at (y, x) reads rows ``y0``/``y1`` with weights ``wy0``/``wy1``
and columns ``x0``/``x1`` with ``wx0``/``wx1``, and adds
``wy0*wx0*v(y0,x0) + wy0*wx1*v(y0,x1) + wy1*wx0*v(y1,x0) + wy1*wx1*v(y1,x1)`` (each weight one
float32 product, as ncnn precomputes it). So each axis of each bin is computed once
(:class:`Taps`) and a bin is one gather over every channel. ``shaders/roialign.comp`` is the
same arithmetic per output value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

_F = np.float32


@dataclass(frozen=True)
class Taps:
    """The samples of one bin along one axis, in ncnn's order: the two pixel indexes each
    sample reads (int64) and their float32 weights."""

    low: np.ndarray
    high: np.ndarray
    w_low: np.ndarray
    w_high: np.ndarray


def _at(start: np.float32, bin_size: np.float32, grid: int, index: np.ndarray) -> np.ndarray:
    """ncnn's sample coordinates ``start + (s + 0.5f) * bin_size / grid`` (left to right)."""
    half = index.astype(_F) + _F(0.5)
    return (start + (half * bin_size) / _F(grid)).astype(_F)


def _clip(v: np.float32, size: int) -> np.float32:
    """``std::min(std::max(v, 0.f), (float)size)``."""
    v = _F(0) if v < 0 else v
    return _F(size) if _F(size) < v else v


def v0_axis(
    origin: np.float32, bin_size: np.float32, count: int, size: int, ratio: int
) -> list[Taps | None]:
    """Version 0 (ncnn's own): each bin clipped to [0, size], ``ratio`` samples (or the clipped
    extent rounded up) spread over the *unclipped* bin size from the clipped start, so they may
    land past the map: the taps are then indexes past the row that the caller reads as ncnn
    does. None for a bin empty along this axis."""
    bins: list[Taps | None] = []
    for p in range(count):
        start = _clip(_F(origin + _F(p) * bin_size), size)
        end = _clip(_F(origin + _F(p + 1) * bin_size), size)
        if end <= start:
            bins.append(None)
            continue
        grid = ratio if ratio > 0 else int(np.ceil(_F(end - start)))
        at = _at(start, bin_size, grid, np.arange(grid))
        low = at.astype(np.int64)  # at >= start >= 0: truncation is (int)
        high = low + 1
        w_low = high.astype(_F) - at
        w_high = at - low.astype(_F)
        edge = high >= size
        bins.append(
            Taps(
                low,
                np.where(edge, size - 1, high),
                np.where(edge, _F(1), w_low).astype(_F),
                np.where(edge, _F(0), w_high).astype(_F),
            )
        )
    return bins


def _first(base: np.float32, bin_size: np.float32, grid: int, test: Callable[[float], bool]) -> int:
    """The first sample index in [0, grid] whose coordinate passes ``test`` (a test that
    coordinates increasing in the index pass from some index on): a binary search."""
    lo, hi = 0, grid
    while lo < hi:
        mid = (lo + hi) // 2
        if test(float(_at(base, bin_size, grid, np.array([mid]))[0])):
            hi = mid
        else:
            lo = mid + 1
    return lo


def v1_axis(
    origin: np.float32, bin_size: np.float32, count: int, size: int, grid: int
) -> list[Taps]:
    """Version 1 (detectron2): ``grid`` samples a bin; a sample outside [-1, size] is skipped
    (ncnn's x86 build adds it with weight 0), one in [-1, 0] moves to 0, one in the last pixel
    reads it alone. Only samples that can fall inside are visited, found by binary search
    where the coordinates increase, so a huge ROI costs what its part on the map costs."""
    bins = []
    for p in range(count):
        base = _F(origin + _F(p) * bin_size)
        first, stop = 0, max(grid, 0)
        if bin_size > 0 and grid > 0:
            first = _first(base, bin_size, grid, lambda v: v >= -1)
            stop = _first(base, bin_size, grid, lambda v: v > size)
        at = _at(base, bin_size, max(grid, 1), np.arange(first, stop))
        at = at[~((at < -1) | (at > size))]
        at = np.where(at <= 0, _F(0), at).astype(_F)
        low = at.astype(np.int64)
        edge = low >= size - 1
        low = np.where(edge, size - 1, low)
        at = np.where(edge, low.astype(_F), at).astype(_F)
        w_high = (at - low.astype(_F)).astype(_F)
        bins.append(Taps(low, np.where(edge, low, low + 1), (_F(1) - w_high).astype(_F), w_high))
    return bins


def bin_sum(flat: np.ndarray, w: int, ty: Taps, tx: Taps) -> np.ndarray:
    """Every channel's sum over the bin's samples (rows ``ty`` by columns ``tx``), added one
    sample at a time from 0 as ncnn does. ``flat`` is (channels, values per channel); a tap
    ``y * w + x`` past a channel's values reads 0 (ncnn reads memory it never wrote there)."""
    channels, plane = flat.shape
    terms: np.ndarray | None = None
    for ys, wy in ((ty.low, ty.w_low), (ty.high, ty.w_high)):
        for xs, wx in ((tx.low, tx.w_low), (tx.high, tx.w_high)):
            index = ys[:, None] * w + xs[None, :]
            inside = index < plane
            values = flat[:, np.where(inside, index, 0)]
            term = (wy[:, None] * wx[None, :]) * np.where(inside, values, _F(0))
            terms = term if terms is None else terms + term
    assert terms is not None
    if not terms.size:
        return np.zeros(channels, _F)
    # cumsum adds in order; + 0 gives ncnn's +0 where its sum started at 0.f and stayed there
    return (np.cumsum(terms.reshape(channels, -1), axis=1, dtype=_F)[:, -1] + _F(0)).astype(_F)
