"""The size limits every model file is held to: one place, one number per kind of size.

A ``.param`` is untrusted input, and one number in it can ask for terabytes: a Convolution pad of
65536, a Pooling kernel of 2147483647 or an Interp scale of 1e7 makes a blob no machine holds.
ncnn allocates whatever it is asked for; asyncvk checks every size before allocating it:

* at load (``load_param``), each size a layer reads from its params against the limit of its
  kind, so a bad file is a :class:`~asyncvk.ModelFormatError` naming the file, line, layer and
  param, e.g. ``model.param:7, layer 'conv3': Convolution param 14 (pad_top) = 65536 exceeds the
  limit 4096``;
* at planning (and before each layer on the CPU path), every blob shape the layers work out for
  the inputs given, and the temporaries the CPU layers make (a padded copy, im2col columns),
  against :data:`MAX_EXTENT` and :data:`MAX_BLOB_ELEMENTS`, so an input that makes a blob too
  large is an InputError naming the layer before anything is allocated.

The limits sit far above what networks use (kernels and strides of 1-11, pads of a few pixels,
at most tens of thousands of channels) and below what breaks the runtime: shaders index blobs
with 32-bit ints, so no blob may reach 2**31 elements.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

#: Kernel width or height (Convolution, Deconvolution, Pooling).
MAX_KERNEL = 4096
#: Stride or dilation along one axis.
MAX_STRIDE = 4096
#: One side of padding (Convolution, Deconvolution output pads, Pooling, Padding).
MAX_PAD = 4096
#: Channels a param sets: num_output, group, per-channel data sizes (BatchNorm, Scale, ...).
MAX_CHANNELS = 1 << 20
#: One dimension of a blob, or a size param that becomes one (Reshape, Crop, Interp, Input, ...).
MAX_EXTENT = 1 << 24
#: Elements in one blob, weight array or temporary: 4 GiB of float32, and 32-bit shader indexes.
MAX_BLOB_ELEMENTS = 1 << 30


def check_param(type_name: str, param_id: int, name: str, value: int, limit: int) -> int:
    """Return ``value``, or raise ValueError when it is above ``limit``."""
    if value > limit:
        raise ValueError(
            f"{type_name} param {param_id} ({name}) = {value} exceeds the limit {limit}"
        )
    return value


def check_params(type_name: str, limit: int, *params: tuple[int, str, int]) -> None:
    """``check_param`` for each ``(param id, name, value)``, in order."""
    for param_id, name, value in params:
        check_param(type_name, param_id, name, value, limit)


def check_shape(shape: Iterable[int], what: str) -> tuple[int, ...]:
    """Return ``shape`` as a tuple, or raise ValueError when a dimension or the element count
    is out of bounds (``what`` names the blob or temporary)."""
    dims = tuple(int(n) for n in shape)
    for n in dims:
        if n <= 0:
            raise ValueError(f"{what} would have shape {dims}: every dimension must be > 0")
        if n > MAX_EXTENT:
            raise ValueError(
                f"{what} would have shape {dims}: dimension {n} exceeds the limit {MAX_EXTENT}"
            )
    check_elements(math.prod(dims), what, dims)
    return dims


def check_elements(count: int, what: str, shape: tuple[int, ...] | None = None) -> None:
    """Raise ValueError when ``count`` elements are more than :data:`MAX_BLOB_ELEMENTS`."""
    if count > MAX_BLOB_ELEMENTS:
        shaped = f" (shape {shape})" if shape is not None else ""
        raise ValueError(
            f"{what} would have {count} elements{shaped}, which exceeds the limit "
            f"{MAX_BLOB_ELEMENTS}"
        )


__all__ = (
    "MAX_BLOB_ELEMENTS",
    "MAX_CHANNELS",
    "MAX_EXTENT",
    "MAX_KERNEL",
    "MAX_PAD",
    "MAX_STRIDE",
    "check_elements",
    "check_param",
    "check_params",
    "check_shape",
)
