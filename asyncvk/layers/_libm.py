"""``expf`` bit for bit as the C library computes it, for CPU layers that must rank like ncnn.

glibc's ``expf`` is within 0.502 ulp of the exact value, so it returns the correctly rounded
float except where the exact value lies within 0.002 ulp of the midpoint between two floats
(about 0.07% of arguments). ncnn's CPU layers call it, and a one-ulp difference in a score can
reorder equal-looking boxes. :func:`expf` rounds numpy's float64 ``exp`` (an error of ~1e-9 ulp)
and asks the C library only for the arguments near a midpoint; where no C library is found it
gives the correctly rounded value.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

import numpy as np

#: How close to a midpoint (in ulps of the result) an argument must be to ask the C library.
_NEAR = 0.02


def _load_expf() -> Callable[[float], float] | None:
    name = ctypes.util.find_library("m") or "libm.so.6"
    try:
        function = ctypes.CDLL(name).expf
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_float
    function.argtypes = [ctypes.c_float]
    return function


_C_EXPF = _load_expf()


def expf(x: np.ndarray) -> np.ndarray:
    """float32 ``exp(x)`` as the C library's ``expf`` gives it, elementwise."""
    x = np.asarray(x, dtype=np.float32)
    wide = np.exp(x.astype(np.float64))
    out = wide.astype(np.float32)
    if _C_EXPF is None:
        return out
    # where the float result is normal, the 29 low mantissa bits of the double are the
    # distance below the next float: a midpoint is 2^28 of them, a float32 ulp 2^29
    low = (wide.view(np.uint64) & np.uint64(_LOW_BITS)).view(np.int64)
    near = np.abs(low - _MIDPOINT) < _NEAR * 2 * _MIDPOINT
    normal = (wide >= _FLT_TINY) & (wide <= _FLT_MAX)
    near &= normal
    other = ~normal & np.isfinite(wide)  # subnormal floats, overflow: ulps by nextafter
    if other.any():
        near[other] = _near_midpoint(wide[other], out[other])
    if near.any():
        function = _C_EXPF
        flat = out.reshape(-1)  # a view: ``out`` is new and contiguous
        flat[near.reshape(-1)] = list(map(function, x[near].tolist()))
    return out


_LOW_BITS = (1 << 29) - 1
_MIDPOINT = 1 << 28
_FLT_TINY = float(np.finfo(np.float32).tiny)
_FLT_MAX = float(np.finfo(np.float32).max)


def _near_midpoint(wide: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Whether each ``wide`` lies within ``_NEAR`` ulps of ``out``'s midpoint with one of its
    neighbours, the ulps taken by ``nextafter`` (right for any float, normal or not)."""
    with np.errstate(all="ignore"):
        value = out.astype(np.float64)
        below = np.nextafter(out, np.float32(-np.inf)).astype(np.float64)
        above = np.nextafter(out, np.float32(np.inf)).astype(np.float64)
        return ((wide - (value + below) / 2) < _NEAR * (value - below)) | (
            ((value + above) / 2 - wide) < _NEAR * (above - value)
        )
