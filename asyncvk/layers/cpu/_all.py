"""Import every CPU layer module so each registers itself."""

from . import misc, shape  # noqa: F401
