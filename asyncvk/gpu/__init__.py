"""Vulkan devices: the instance, GpuInfo, quirks, VulkanDevice, memory and commands."""

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
