"""Import every GPU layer module so each registers itself."""

from . import convolution, data_movement, elementwise, normalization, pooling, reduce  # noqa: F401
