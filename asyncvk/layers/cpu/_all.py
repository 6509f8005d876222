"""Import every CPU layer module so each registers itself."""

from . import binary, misc, resample, shape  # noqa: F401
