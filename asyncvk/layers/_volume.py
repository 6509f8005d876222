"""Geometry of the 3-D layers (Convolution3D family, Pooling3D) on ncnn's dims-4 blobs (c, d, h,
w): the SAME split of each axis, copy_make_border_3d, and every (dilated, strided) window as a
numpy view.

Pads are ((front, behind), (top, bottom), (left, right)), numpy's axis order after c.
"""

from __future__ import annotations

import numpy as np

from ._base import Shape
from ._limits import check_elements

Pads3 = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
Dims3 = tuple[int, int, int]
NO_PADS: Pads3 = ((0, 0), (0, 0), (0, 0))


def dims4(type_name: str, shape: Shape) -> tuple[int, int, int, int]:
    """(c, d, h, w) of a dims-4 blob, the only dims the 3-D layers take (ncnn would read a
    dims-3 blob as d = 1 and give a dims-4 blob back)."""
    if len(shape) != 4:
        raise ValueError(f"{type_name} takes a dims 4 blob (c, d, h, w), got shape {tuple(shape)}")
    return shape[0], shape[1], shape[2], shape[3]


def c_half(n: int) -> int:
    """C's ``n / 2``: truncates toward zero, unlike ``//``."""
    return n // 2 if n >= 0 else -(-n // 2)


def same_totals(size: Dims3, extent: Dims3, stride: Dims3) -> Dims3:
    """ncnn's ``kernel_extent + (n - 1) / stride * stride - n`` per axis (d, h, w)."""
    d, h, w = (e + (n - 1) // s * s - n for n, e, s in zip(size, extent, stride, strict=True))
    return d, h, w


def same_pads(totals: Dims3, upper: bool) -> Pads3:
    """ncnn's SAME split of the totals: SAME_UPPER (-233) puts ``total / 2`` first, SAME_LOWER
    (-234) last, except on the depth axis, which ncnn's make_padding of Convolution3D and
    Pooling3D splits as SAME_UPPER in both modes. No axis padded: no pads at all (ncnn skips
    the border then, crops included)."""
    if max(totals) <= 0:
        return NO_PADS
    td, th, tw = totals
    depth = (c_half(td), td - c_half(td))
    if upper:
        return depth, (c_half(th), th - c_half(th)), (c_half(tw), tw - c_half(tw))
    return depth, (th - c_half(th), c_half(th)), (tw - c_half(tw), c_half(tw))


def check_same_pads(type_name: str, pads: Pads3) -> None:
    """A negative pad crops; ncnn's copy_make_border crops the end of an axis, but mis-handles
    a negative leading pad (rows are not skipped; wide rows write before their start), so a
    SAME padding with a stride past the kernel extent on one axis that gives one is refused."""
    for (lead, _), axis in zip(pads, "dhw", strict=True):
        if lead < 0:
            raise ValueError(
                f"{type_name}: SAME padding gives a negative leading pad ({lead}) on axis "
                f"{axis} (a stride past the kernel extent), which ncnn's copy_make_border_3d "
                "does not crop consistently"
            )


def border_3d(x: np.ndarray, pads: Pads3, value: float) -> np.ndarray:
    """ncnn's copy_make_border_3d (BORDER_CONSTANT) on (c, d, h, w): positive pads add
    ``value``, negative trailing pads crop the end."""
    if pads == NO_PADS:
        return x
    ends = [n + min(after, 0) for n, (_, after) in zip(x.shape[1:], pads, strict=True)]
    x = x[:, : ends[0], : ends[1], : ends[2]]
    padded = [
        n + max(before, 0) + max(after, 0)
        for n, (before, after) in zip(x.shape[1:], pads, strict=True)
    ]
    check_elements(x.shape[0] * int(np.prod(padded)), "the padded blob")
    widths = [(0, 0)] + [(max(before, 0), max(after, 0)) for before, after in pads]
    return np.pad(x, widths, constant_values=np.float32(value)).astype(np.float32, copy=False)


def out_size(padded: int, extent: int, stride: int) -> int:
    """Outputs along one axis: ``(padded - extent) / stride + 1``."""
    return (padded - extent) // stride + 1


def windows_3d(
    x: np.ndarray, kernel: Dims3, dilation: Dims3, stride: Dims3, out: Dims3
) -> np.ndarray:
    """A read-only (c, od, oh, ow, kd, kh, kw) view of every window of the padded ``x``."""
    extent = tuple(dl * (k - 1) + 1 for k, dl in zip(kernel, dilation, strict=True))
    view = np.lib.stride_tricks.sliding_window_view(x, extent, axis=(1, 2, 3))
    (sd, sh, sw), (dd, dh, dw) = stride, dilation
    view = view[:, ::sd, ::sh, ::sw, ::dd, ::dh, ::dw]
    return view[:, : out[0], : out[1], : out[2]]


def taps_inside(n_out: int, stride: int, k: int, lo: int, hi: int) -> np.ndarray:
    """Per output along one axis: how many of its window's taps fall in [lo, hi)."""
    start = np.arange(n_out) * stride
    return np.clip(np.minimum(start + k, hi) - np.maximum(start, lo), 0, None)


def bins(n: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Adaptive pooling's bins along one axis: [floor(i n / out), ceil((i + 1) n / out))."""
    i = np.arange(n_out)
    return i * n // n_out, ((i + 1) * n + n_out - 1) // n_out
