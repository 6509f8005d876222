"""The one warning a process gets when a Net left to choose finds no Vulkan device."""

from __future__ import annotations

import logging


def warn_cpu_fallback() -> None:
    """Once a process: a Net left to choose runs on the CPU when there is no Vulkan device."""
    if _cpu_fallback_warned:
        return
    _cpu_fallback_warned.append(True)
    from ..gpu._instance import NO_DRIVER_FIX

    logging.getLogger("asyncvk").warning(
        "no Vulkan device: running on the CPU (numpy), much slower; %s", NO_DRIVER_FIX
    )


_cpu_fallback_warned: list[bool] = []
