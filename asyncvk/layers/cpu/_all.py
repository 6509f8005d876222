"""Import every CPU layer module so each registers itself."""

from . import misc, resample, shape  # noqa: F401
