"""What a device's command recorders and memory read of the VulkanDevice that made them: its
handles, what it is, and its count of live objects. A protocol, so that they do not import the
device (the device makes them; they only name it)."""

from __future__ import annotations

from typing import Any, Protocol

from ._info import GpuInfo
from ._quirks import Quirks


class DeviceHandles(Protocol):
    """A VulkanDevice, as its recorders and memory see it."""

    #: the VkDevice
    handle: Any
    #: the queue family its queue (and command pools) belong to
    queue_family: int
    #: vkGetPhysicalDeviceMemoryProperties' answer
    memory_properties: Any
    info: GpuInfo
    quirks: Quirks

    def track(self, kind: str, delta: int) -> None:
        """Count ``delta`` more (or fewer) live Vulkan objects of ``kind``."""
