"""The only importer of the raw ``vulkan`` binding: result checking and cffi helpers.

Every Vulkan call whose result matters goes through :func:`check` or :func:`call`, so a
failure raises an asyncvk exception at the calling line (wgpu-py's ``SafeLibCalls``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import vulkan as vk

from ._errors import DeviceLostError, OutOfDeviceMemoryError, VulkanError

ffi: Any = vk.ffi
lib: Any = vk.lib
vkapi: Any = vk

_T = TypeVar("_T")

_RESULT_NAMES: dict[int, str] = {
    value: name
    for name, value in vars(vk).items()
    if (
        name.startswith("VK_ERROR_")
        or name
        in {
            "VK_SUCCESS",
            "VK_INCOMPLETE",
            "VK_TIMEOUT",
            "VK_NOT_READY",
            "VK_PIPELINE_COMPILE_REQUIRED",
        }
    )
    and isinstance(value, int)
    and not name.endswith(("_BEGIN_RANGE", "_END_RANGE", "_RANGE_SIZE", "_MAX_ENUM"))
}
_OUT_OF_MEMORY = {vk.VK_ERROR_OUT_OF_DEVICE_MEMORY, vk.VK_ERROR_OUT_OF_HOST_MEMORY}


def result_name(result: int) -> str:
    """The VkResult enumerant name, e.g. ``VK_ERROR_DEVICE_LOST``."""
    return _RESULT_NAMES.get(result, f"VkResult({result})")


def error_for(call_name: str, result: int) -> VulkanError:
    """The asyncvk exception for a failed VkResult."""
    name = result_name(result)
    if result in _OUT_OF_MEMORY:
        return OutOfDeviceMemoryError(call_name, result, name)
    if result == vk.VK_ERROR_DEVICE_LOST:
        return DeviceLostError(call_name, result, name)
    return VulkanError(call_name, result, name)


def check(result: int, call_name: str) -> int:
    """Raise unless ``result`` is VK_SUCCESS or a non-error status (>= 0)."""
    if result < 0:
        raise error_for(call_name, result)
    return result


_CODE_BY_EXCEPTION: dict[type[BaseException], int] = {
    exc_type: code for code, exc_type in vk.exception_codes.items()
}


def call(fn: Callable[..., _T], *args: Any) -> _T:
    """Call a wrapper of the ``vulkan`` package, translating its exceptions to ours."""
    try:
        return fn(*args)
    except (vk.VkError, vk.VkException) as exc:
        code = _CODE_BY_EXCEPTION.get(type(exc), -1)
        raise error_for(getattr(fn, "__name__", "vulkan call"), code) from exc


def instance_proc(instance: Any, name: str) -> Any:
    """An extension function of ``instance`` (``vkGetInstanceProcAddr``), or None if absent."""
    try:
        return vk.vkGetInstanceProcAddr(instance, name)
    except vk.ProcedureNotFoundError:
        return None


def version_string(version: int) -> str:
    """``major.minor.patch`` of a Vulkan-packed API version."""
    return f"{version >> 22}.{(version >> 12) & 0x3FF}.{version & 0xFFF}"
