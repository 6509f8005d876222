"""Every cffi type and function of the binding that asyncvk uses, realized on one thread first.

cffi 2.x builds a type's C description the first time it is used. On a GIL build of Python two
threads doing that for the same type at once can abort the process (``realize_c_type.c``
assertions, python-cffi/cffi#271): here 2 of 45 runs loaded from a warm store under load, where
the pipeline threads all start at once. :func:`realize_all` runs on the thread that creates the
instance, so before any device or worker thread can use the binding (1.5-3.5 ms);
``tests/test_realized_types.py`` checks that the lists below name everything the package uses.
"""

from __future__ import annotations

import threading
from typing import Any

from .. import _vk

#: C types given to ``ffi.new`` or built by the ``vulkan`` package's struct constructors
TYPES = (
    "VkApplicationInfo",
    "VkBufferCopy",
    "VkBufferCreateInfo",
    "VkCommandBuffer",
    "VkCommandBufferAllocateInfo",
    "VkCommandBufferBeginInfo",
    "VkCommandPoolCreateInfo",
    "VkComputePipelineCreateInfo",
    "VkCooperativeMatrixPropertiesNV",
    "VkDebugUtilsMessengerCreateInfoEXT",
    "VkDescriptorBufferInfo",
    "VkDescriptorPoolCreateInfo",
    "VkDescriptorPoolSize",
    "VkDescriptorSet",
    "VkDescriptorSetAllocateInfo",
    "VkDescriptorSetLayout",
    "VkDescriptorSetLayoutBinding",
    "VkDescriptorSetLayoutCreateInfo",
    "VkDescriptorUpdateTemplate",
    "VkDescriptorUpdateTemplateCreateInfo",
    "VkDescriptorUpdateTemplateEntry",
    "VkDevice",
    "VkDeviceCreateInfo",
    "VkDeviceQueueCreateInfo",
    "VkFence",
    "VkFenceCreateInfo",
    "VkInstanceCreateInfo",
    "VkMemoryAllocateInfo",
    "VkMemoryBarrier",
    "VkPhysicalDeviceCooperativeMatrixFeaturesNV",
    "VkPhysicalDeviceDriverProperties",
    "VkPhysicalDeviceFeatures2",
    "VkPhysicalDeviceProperties2",
    "VkPhysicalDeviceSubgroupProperties",
    "VkPhysicalDeviceSubgroupSizeControlProperties",
    "VkPhysicalDeviceVulkan11Features",
    "VkPhysicalDeviceVulkan12Features",
    "VkPhysicalDeviceVulkan13Features",
    "VkPipeline",
    "VkPipelineCache",
    "VkPipelineCacheCreateInfo",
    "VkPipelineCreationFeedback",
    "VkPipelineCreationFeedbackCreateInfo",
    "VkPipelineLayout",
    "VkPipelineLayoutCreateInfo",
    "VkPipelineShaderStageCreateInfo",
    "VkPipelineShaderStageRequiredSubgroupSizeCreateInfo",
    "VkPushConstantRange",
    "VkQueryPoolCreateInfo",
    "VkShaderModule",
    "VkShaderModuleCreateInfo",
    "VkSpecializationInfo",
    "VkSpecializationMapEntry",
    "VkSubmitInfo",
    "VkWriteDescriptorSet",
)

#: C types of plain values, spelled as the package spells them (on a GIL build cffi realizes
#: even its primitive types lazily)
VALUE_TYPES = (
    "PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV",
    "char*",
    "char*[]",
    "char[]",
    "float[]",
    "size_t*",
    "uint32_t*",
    "uint64_t[]",
    "void**",
)

#: the binding's functions that asyncvk calls (through ``_vk.checked`` or ``_vk.api``)
FUNCTIONS = (
    "vkAllocateCommandBuffers",
    "vkAllocateDescriptorSets",
    "vkAllocateMemory",
    "vkBeginCommandBuffer",
    "vkBindBufferMemory",
    "vkCmdBindDescriptorSets",
    "vkCmdBindPipeline",
    "vkCmdCopyBuffer",
    "vkCmdDispatch",
    "vkCmdPipelineBarrier",
    "vkCmdPushConstants",
    "vkCmdResetQueryPool",
    "vkCmdWriteTimestamp",
    "vkCreateBuffer",
    "vkCreateCommandPool",
    "vkCreateComputePipelines",
    "vkCreateDescriptorPool",
    "vkCreateDescriptorSetLayout",
    "vkCreateDescriptorUpdateTemplate",
    "vkCreateDevice",
    "vkCreateFence",
    "vkCreateInstance",
    "vkCreatePipelineCache",
    "vkCreatePipelineLayout",
    "vkCreateQueryPool",
    "vkCreateShaderModule",
    "vkDestroyBuffer",
    "vkDestroyCommandPool",
    "vkDestroyDescriptorPool",
    "vkDestroyDescriptorSetLayout",
    "vkDestroyDescriptorUpdateTemplate",
    "vkDestroyDevice",
    "vkDestroyFence",
    "vkDestroyPipeline",
    "vkDestroyPipelineCache",
    "vkDestroyPipelineLayout",
    "vkDestroyQueryPool",
    "vkDestroyShaderModule",
    "vkDeviceWaitIdle",
    "vkEndCommandBuffer",
    "vkEnumerateDeviceExtensionProperties",
    "vkEnumerateInstanceExtensionProperties",
    "vkEnumerateInstanceLayerProperties",
    "vkEnumerateInstanceVersion",
    "vkEnumeratePhysicalDevices",
    "vkFreeMemory",
    "vkGetBufferMemoryRequirements",
    "vkGetDeviceQueue",
    "vkGetInstanceProcAddr",
    "vkGetPhysicalDeviceFeatures2",
    "vkGetPhysicalDeviceMemoryProperties",
    "vkGetPhysicalDeviceProperties",
    "vkGetPhysicalDeviceProperties2",
    "vkGetPhysicalDeviceQueueFamilyProperties",
    "vkGetFenceStatus",
    "vkGetPipelineCacheData",
    "vkGetQueryPoolResults",
    "vkMapMemory",
    "vkMergePipelineCaches",
    "vkQueueSubmit",
    "vkResetFences",
    "vkUnmapMemory",
    "vkUpdateDescriptorSetWithTemplate",
    "vkUpdateDescriptorSets",
    "vkWaitForFences",
)

_lock = threading.Lock()
_done = False


def realize_all() -> None:
    """Realize :data:`TYPES` (their pointers, arrays and every struct reachable through their
    fields) and the binding's functions that asyncvk calls; once per process."""
    global _done
    with _lock:
        if _done:
            return
        ffi = _vk.ffi
        seen: set[Any] = set()
        for name in TYPES:
            for spelling in (name, f"{name}*", f"{name}[]"):
                _complete(ffi, ffi.typeof(spelling), seen)
        for spelling in VALUE_TYPES:
            ffi.typeof(spelling)
        for name in FUNCTIONS:
            try:
                getattr(_vk.checked, name)  # the raw function: its C type is realized
            except AttributeError:  # not exported by this loader: looked up per instance
                continue
        _done = True


def _complete(ffi: Any, ctype: Any, seen: set[Any]) -> None:
    """Lay out ``ctype``'s struct and, through pointers and arrays, every struct it reaches."""
    while ctype.kind in ("pointer", "array"):
        ctype = ctype.item
    if ctype in seen or ctype.kind not in ("struct", "union"):
        return
    seen.add(ctype)
    try:
        ffi.sizeof(ctype)  # the struct's layout: what the lazy realization finishes
    except ffi.error:  # an opaque handle's struct: nothing to lay out
        return
    for _, field in ctype.fields or ():
        _complete(ffi, field.type, seen)
