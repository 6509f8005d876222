"""The VkDevice under a VulkanDevice: the compute queue family it uses (a dedicated one where
the device has one) and the logical device created on it, with every feature the physical
device offers enabled. Vulkan struct plumbing, apart from the device's memory and submission.
"""

from __future__ import annotations

from typing import Any

from .. import _vk
from ._info import GpuInfo
from ._instance import COOPMAT_EXTENSION, features2

vk = _vk.vkapi
ffi = _vk.ffi


def pick_queue_family(info: GpuInfo) -> int:
    """The index of the queue family to compute on: a compute-only one first."""
    families = [q for q in info.queue_families if q.compute and q.count > 0]
    if not families:
        raise RuntimeError(f"{info.device_name} has no compute queue")
    dedicated = [q for q in families if not q.graphics]
    return (dedicated or families)[0].index


def create_device(physical_device: Any, info: GpuInfo, queue_family: int) -> Any:
    """A VkDevice on ``physical_device`` with one queue of ``queue_family``."""
    api = info.api_version
    # every feature the device has, enabled: the same query that described it
    features = features2(
        physical_device,
        api >= vk.VK_MAKE_VERSION(1, 2, 0),
        api >= vk.VK_MAKE_VERSION(1, 3, 0),
        info.support_cooperative_matrix,
    )
    feats2 = features[0]
    extensions = [n for n in ("VK_KHR_portability_subset",) if n in info.extensions]
    if info.support_cooperative_matrix:
        extensions.append(COOPMAT_EXTENSION)
    # Bounds checks cost speed and our shaders guard their own indices.
    feats2.features.robustBufferAccess = 0
    priority = ffi.new("float[1]", [1.0])
    queue_info = ffi.new(
        "VkDeviceQueueCreateInfo*",
        {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
            "queueFamilyIndex": queue_family,
            "queueCount": 1,
            "pQueuePriorities": priority,
        },
    )
    ext_names = [ffi.new("char[]", name.encode()) for name in extensions]
    ext_array = ffi.new("char*[]", ext_names) if ext_names else ffi.NULL
    create = ffi.new(
        "VkDeviceCreateInfo*",
        {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
            "pNext": feats2,
            "queueCreateInfoCount": 1,
            "pQueueCreateInfos": queue_info,
            "enabledExtensionCount": len(ext_names),
            "ppEnabledExtensionNames": ext_array,
        },
    )
    out = ffi.new("VkDevice*")
    _vk.checked.vkCreateDevice(physical_device, create, ffi.NULL, out)
    del features  # the feature chain, alive through vkCreateDevice
    return out[0]
