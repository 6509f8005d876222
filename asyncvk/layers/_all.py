"""Import every layer module so each registers itself."""

from . import (  # noqa: F401
    activation,
    binary,
    borders,
    convolution,
    data_movement,
    deconvolution,
    innerproduct,
    inputs,
    normalization,
    pooling,
    reduction,
    resample,
    reshape,
)
