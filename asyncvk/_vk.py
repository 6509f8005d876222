"""The only importer of the raw ``vulkan`` binding: checked calls and cffi helpers.

Every Vulkan call goes through one of two :class:`SafeLibCalls` namespaces, so a failure raises
an asyncvk exception naming the function and its VkResult at the calling line (wgpu-py's
``SafeLibCalls``), and no other module compares result codes:

* ``checked.vkX(...)``: the raw cffi function; a negative VkResult raises, a status (>= 0, such
  as ``VK_TIMEOUT``) is returned. Functions returning void are handed out unwrapped.
* ``api.vkX(...)``: the ``vulkan`` package's Python wrapper (returns handles and lists), with
  its exceptions translated to ours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import vulkan as vk

from ._errors import (
    DeviceLostError,
    OutOfDeviceMemoryError,
    VulkanError,
)

ffi: Any = vk.ffi
#: Constants and struct constructors (``vkapi.VK_SUCCESS``); call functions through
#: :data:`checked` or :data:`api`, never through this module's attributes.
vkapi: Any = vk
_raw_lib: Any = vk.lib

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


_CODE_BY_EXCEPTION: dict[type[BaseException], int] = {
    exc_type: code for code, exc_type in vk.exception_codes.items()
}


def _checked_raw(fn: Any, name: str) -> Callable[..., int]:
    def call_checked(*args: Any) -> int:
        result = int(fn(*args))
        if result < 0:
            raise error_for(name, result)
        return result

    call_checked.__name__ = name
    return call_checked


def _translated(fn: Callable[..., _T], name: str) -> Callable[..., _T]:
    def call_translated(*args: Any, **kwargs: Any) -> _T:
        try:
            return fn(*args, **kwargs)
        except (vk.VkError, vk.VkException) as exc:
            raise error_for(name, _CODE_BY_EXCEPTION.get(type(exc), -1)) from exc
        except KeyError as exc:  # the wrapper's ``exception_codes[result]`` for a code it lacks
            raise VulkanError(name, -1, f"unknown VkResult {exc}") from exc

    call_translated.__name__ = name
    return call_translated


class SafeLibCalls:
    """Vulkan functions by name, each wrapped once so its failure raises an asyncvk error.

    Arguments:
        source: the raw cffi library (results checked) or the ``vulkan`` module (its Python
            wrappers, exceptions translated).
    """

    def __init__(self, source: Any, *, raw: bool) -> None:
        self._source = source
        self._raw = raw

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if not name.startswith("vk"):
            raise AttributeError(name)
        fn = getattr(self._source, name)
        if not self._raw:
            wrapped: Callable[..., Any] = _translated(fn, name)
        elif ffi.typeof(fn).result.cname == "enum VkResult":
            wrapped = _checked_raw(fn, name)
        else:
            wrapped = fn  # returns void or a value: nothing to check
        setattr(self, name, wrapped)  # resolved once; later lookups skip __getattr__
        return wrapped


#: Raw cffi functions; a negative VkResult raises (see the module docstring).
checked: Any = SafeLibCalls(_raw_lib, raw=True)
#: The ``vulkan`` package's Python wrappers, exceptions translated.
api: Any = SafeLibCalls(vk, raw=False)


def instance_proc(instance: Any, name: str) -> Any:
    """An extension function of ``instance`` (``vkGetInstanceProcAddr``), or None if absent."""
    try:
        return api.vkGetInstanceProcAddr(instance, name)
    except vk.ProcedureNotFoundError:
        return None


def instance_proc_raw(instance: Any, name: str, pfn_type: str) -> Callable[..., int] | None:
    """An extension function of ``instance`` as the raw C function (cast to ``pfn_type``),
    its VkResult checked like :data:`checked`'s; None if the loader does not know it. For
    functions whose ``vulkan`` wrapper gets the call wrong (array elements' sType left 0)."""
    address = _raw_lib.vkGetInstanceProcAddr(instance, name.encode())
    if address == ffi.NULL:
        return None
    return _checked_raw(ffi.cast(pfn_type, address), name)


def version_string(version: int) -> str:
    """``major.minor.patch`` of a Vulkan-packed API version."""
    return f"{version >> 22}.{(version >> 12) & 0x3FF}.{version & 0xFFF}"
