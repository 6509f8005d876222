"""Import every layer module so each registers itself."""

from . import (  # noqa: F401
    activation,
    binary,
    borders,
    convolution,
    data_movement,
    deconvolution,
    innerproduct,
    normalization,
    pooling,
    reduction,
    resample,
)
from .cpu import _all as _cpu_all  # noqa: F401
