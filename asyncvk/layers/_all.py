"""Import every layer module so each registers itself."""

from . import (  # noqa: F401
    activation,
    binary,
    convolution,
    deconvolution,
    innerproduct,
    normalization,
    pooling,
    reduction,
)
from .cpu import _all as _cpu_all  # noqa: F401
from .vulkan import _all as _vk_all  # noqa: F401
