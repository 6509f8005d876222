"""Blob geometry: ncnn's (w, h, d, c) of any blob (``shape4``) and, for the 2-D layers
(Convolution family, Pooling), ncnn's (c, h, w) view of a blob, its SAME padding split,
copy_make_border and im2col, in numpy."""

from __future__ import annotations

import numpy as np

from ._limits import check_elements

SAME_UPPER = -233
SAME_LOWER = -234


def as_chw(x: np.ndarray) -> np.ndarray:
    """A dims-2 blob is one channel to ncnn's 2-D layers; dims 3 is used as is."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 2:
        return x[None]
    if x.ndim != 3:
        raise ValueError(f"expected a dims 2 or 3 blob, got shape {x.shape}")
    return x


def chw_shape(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    if len(shape) != 3:
        raise ValueError(f"expected a dims 2 or 3 blob, got shape {shape}")
    return shape[0], shape[1], shape[2]


def check_pads(pads: tuple[int, int, int, int]) -> None:
    """ncnn only understands pads >= 0, or all four -233 / -234."""
    if all(p >= 0 for p in pads) or all(p == SAME_UPPER for p in pads):
        return
    if all(p == SAME_LOWER for p in pads):
        return
    raise ValueError(f"params 4/15/14/16 pads {pads}: use values >= 0, or all -233 or all -234")


def _half(n: int) -> int:
    """C's ``n / 2`` (truncates toward zero, unlike ``//``)."""
    return n // 2 if n >= 0 else -(-n // 2)


def same_pads(hpad: int, wpad: int, upper: bool) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) for SAME_UPPER (extra at the end) or SAME_LOWER.

    One side may be negative (a stride larger than the kernel): copy_make_border then crops.
    """
    if upper:
        return _half(hpad), hpad - _half(hpad), _half(wpad), wpad - _half(wpad)
    return hpad - _half(hpad), _half(hpad), wpad - _half(wpad), _half(wpad)


def same_pad_lead(size: int, kernel: int, dilation: int, stride: int, mode: int) -> int:
    """The leading pad of ncnn's SAME_UPPER (-233) / SAME_LOWER (-234) split."""
    extent = dilation * (kernel - 1) + 1
    # ncnn: wpad = kernel_extent_w + (w - 1) / stride_w * stride_w - w
    total = max(extent + (size - 1) // stride * stride - size, 0)
    return total // 2 if mode == SAME_UPPER else total - total // 2


def border(x: np.ndarray, top: int, bottom: int, left: int, right: int, value: float) -> np.ndarray:
    """ncnn's copy_make_border(BORDER_CONSTANT) on (c, h, w); negative sides crop."""
    if top == bottom == left == right == 0:
        return x
    c, h, w = x.shape
    hb, wb = h + top + bottom, w + left + right
    check_elements(c * hb * wb, "the padded blob", (c, hb, wb))
    out = np.full((c, hb, wb), np.float32(value), np.float32)
    src_y0, dst_y0 = max(-top, 0), max(top, 0)
    src_x0, dst_x0 = max(-left, 0), max(left, 0)
    ny = min(h - src_y0, hb - dst_y0)
    nx = min(w - src_x0, wb - dst_x0)
    if ny > 0 and nx > 0:
        out[:, dst_y0 : dst_y0 + ny, dst_x0 : dst_x0 + nx] = x[
            :, src_y0 : src_y0 + ny, src_x0 : src_x0 + nx
        ]
    return out


def im2col(
    x: np.ndarray,
    kh: int,
    kw: int,
    dh: int,
    dw: int,
    sh: int,
    sw: int,
    outh: int,
    outw: int,
) -> np.ndarray:
    """(c, kh, kw, outh, outw) copy of every kernel tap's input, for one matmul."""
    x = np.ascontiguousarray(x)
    c = x.shape[0]
    s_c, s_h, s_w = x.strides
    view = np.lib.stride_tricks.as_strided(
        x,
        shape=(c, kh, kw, outh, outw),
        strides=(s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw),
        writeable=False,
    )
    return np.ascontiguousarray(view)


def shape4(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """ncnn's ``(w, h, d, c)`` of a CPU-layout shape, with 1 for missing dims (as ncnn::Mat)."""
    if len(shape) == 1:
        return (shape[0], 1, 1, 1)
    if len(shape) == 2:
        return (shape[1], shape[0], 1, 1)
    if len(shape) == 3:
        return (shape[2], shape[1], 1, shape[0])
    if len(shape) == 4:
        return (shape[3], shape[2], shape[1], shape[0])
    raise ValueError(f"blobs have 1 to 4 dims, got {shape}")
