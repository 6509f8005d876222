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
    with np.errstate(all="ignore"):
        value = out.astype(np.float64)
        below = np.nextafter(out, np.float32(-np.inf)).astype(np.float64)
        above = np.nextafter(out, np.float32(np.inf)).astype(np.float64)
        near = ((wide - (value + below) / 2) < _NEAR * (value - below)) | (
            ((value + above) / 2 - wide) < _NEAR * (above - value)
        )
        near &= np.isfinite(wide)
    if near.any():
        function = _C_EXPF
        flat = out.reshape(-1)  # a view: ``out`` is new and contiguous
        flat[near.reshape(-1)] = [function(float(v)) for v in x[near]]
    return out
