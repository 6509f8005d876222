"""Vulkan devices: the instance, GpuInfo, quirks, VulkanDevice, memory and commands.

Names are imported on first use (PEP 562): the command line's device thread imports
``gpu._instance`` (Vulkan only) and creates the instance while the main thread is still
importing numpy, which ``gpu._device`` and ``gpu._memory`` users need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._lazy import lazy_attributes as _lazy_attributes

if _TYPE_CHECKING:
    from ._command import CommandRecorder as CommandRecorder
    from ._device import VulkanDevice as VulkanDevice
    from ._device import destroy_gpu_devices as destroy_gpu_devices
    from ._device import get_gpu_device as get_gpu_device
    from ._identity import DeviceIdentity as DeviceIdentity
    from ._info import GpuInfo as GpuInfo
    from ._instance import get_default_gpu_index as get_default_gpu_index
    from ._instance import get_gpu_count as get_gpu_count
    from ._instance import get_gpu_info as get_gpu_info
    from ._instance import validation_messages as validation_messages
    from ._memory import Buffer as Buffer
    from ._memory import MemoryKind as MemoryKind
    from ._pipeline import PipelineArtifact as PipelineArtifact
    from ._quirks import QUIRK_FLAGS as QUIRK_FLAGS
    from ._quirks import QUIRK_TABLE as QUIRK_TABLE
    from ._quirks import Quirks as Quirks
    from ._quirks import resolve_quirks as resolve_quirks
    from ._shader_choices import ShaderChoices as ShaderChoices

#: public name -> the module that defines it, imported when the name is first read
_LAZY: dict[str, str] = {
    "CommandRecorder": "._command",
    "VulkanDevice": "._device",
    "destroy_gpu_devices": "._device",
    "get_gpu_device": "._device",
    "DeviceIdentity": "._identity",
    "GpuInfo": "._info",
    "get_default_gpu_index": "._instance",
    "get_gpu_count": "._instance",
    "get_gpu_info": "._instance",
    "validation_messages": "._instance",
    "Buffer": "._memory",
    "MemoryKind": "._memory",
    "PipelineArtifact": "._pipeline",
    "QUIRK_FLAGS": "._quirks",
    "QUIRK_TABLE": "._quirks",
    "Quirks": "._quirks",
    "resolve_quirks": "._quirks",
    "ShaderChoices": "._shader_choices",
}


__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())


__all__ = (
    "QUIRK_FLAGS",
    "QUIRK_TABLE",
    "Buffer",
    "CommandRecorder",
    "DeviceIdentity",
    "GpuInfo",
    "MemoryKind",
    "PipelineArtifact",
    "Quirks",
    "VulkanDevice",
    "destroy_gpu_devices",
    "get_default_gpu_index",
    "get_gpu_count",
    "get_gpu_device",
    "get_gpu_info",
    "resolve_quirks",
    "validation_messages",
)
