"""Import every layer module so each registers itself."""

from . import (  # noqa: F401
    activation,
    attention,
    binary,
    borders,
    convolution,
    data_movement,
    deconvolution,
    detection,
    gridsample,
    innerproduct,
    inputs,
    layers_1d,
    matmul,
    normalization,
    norms,
    pooling,
    reduction,
    resample,
    reshape,
    yolo,
)
