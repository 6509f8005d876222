"""Import every GPU layer module so each registers itself."""

from . import data_movement  # noqa: F401
