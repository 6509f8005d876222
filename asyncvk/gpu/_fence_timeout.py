"""How long a VulkanDevice waits on one fence before GpuTimeoutError: the default, and the
``ASYNCVK_FENCE_TIMEOUT_S`` environment variable that overrides it, checked when a device opens.
"""

from __future__ import annotations

import os

#: How long one fence wait may take before GpuTimeoutError (ASYNCVK_FENCE_TIMEOUT_S overrides).
#: Generous: a large model on a busy software rasteriser can run one segment for minutes.
DEFAULT_FENCE_TIMEOUT_S = 600.0


def fence_timeout_from_env() -> float:
    """``ASYNCVK_FENCE_TIMEOUT_S`` in seconds (> 0), else :data:`DEFAULT_FENCE_TIMEOUT_S`."""
    text = os.environ.get("ASYNCVK_FENCE_TIMEOUT_S", "").strip()
    if not text:
        return DEFAULT_FENCE_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"ASYNCVK_FENCE_TIMEOUT_S={text!r}: expected a positive number of seconds")
    return value
