"""The Vulkan create infos of a compute pipeline: module, set layout, pipeline layout,
specialization and stage, each with the cffi objects it points at.

Every nested cffi struct and buffer is returned (or appended to ``made``) with its owner: cffi
frees memory when its owning object dies, and the driver must still find it when it reads.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import _vk
from .._errors import PipelineError
from ..shader._reflect import STORAGE_BUFFER, UNIFORM_BUFFER, ShaderInfo
from ..shader._registry import BAKED_PUSH_BASE_ID

if TYPE_CHECKING:
    from ._device import VulkanDevice

vk = _vk.vkapi
ffi = _vk.ffi

SpecValue = int | float | bool
_REQUIRED_SUBGROUP_SIZE_STYPE = (
    vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO
)
DESCRIPTOR_TYPES = {
    STORAGE_BUFFER: vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
    UNIFORM_BUFFER: vk.VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER,
}


def pack_specialization(value: SpecValue) -> bytes:
    """4 bytes per constant, as ncnn's ``vk_specialization_type`` union."""
    if isinstance(value, bool):
        return struct.pack("<I", int(value))
    if isinstance(value, int):
        return struct.pack("<I" if value >= 1 << 31 else "<i", value)
    return struct.pack("<f", float(value))


def create_module(dev: Any, spirv: bytes, made: list[tuple[Any, Any]]) -> Any:
    code = ffi.from_buffer(spirv)
    module_info = ffi.new(
        "VkShaderModuleCreateInfo*",
        {
            "sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
            "codeSize": len(spirv),
            "pCode": ffi.cast("uint32_t*", code),
        },
    )
    module_out = ffi.new("VkShaderModule*")
    _vk.checked.vkCreateShaderModule(dev, module_info, ffi.NULL, module_out)
    made.append((_vk.checked.vkDestroyShaderModule, module_out[0]))
    return module_out[0]


def create_set_layout(dev: Any, info: ShaderInfo, name: str, made: list[tuple[Any, Any]]) -> Any:
    nb = len(info.bindings)
    bindings = ffi.new("VkDescriptorSetLayoutBinding[]", max(nb, 1))
    for i, b in enumerate(info.bindings):
        if b.set != 0:
            raise PipelineError(f"shader {name!r}: descriptor set {b.set} (only set 0 is used)")
        if b.descriptor_type not in DESCRIPTOR_TYPES:
            raise PipelineError(f"shader {name!r}: {b.descriptor_type} bindings are not supported")
        bindings[i].binding = b.binding
        bindings[i].descriptorType = DESCRIPTOR_TYPES[b.descriptor_type]
        bindings[i].descriptorCount = 1
        bindings[i].stageFlags = vk.VK_SHADER_STAGE_COMPUTE_BIT
    set_info = ffi.new(
        "VkDescriptorSetLayoutCreateInfo*",
        {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
            "bindingCount": nb,
            "pBindings": bindings,
        },
    )
    set_out = ffi.new("VkDescriptorSetLayout*")
    _vk.checked.vkCreateDescriptorSetLayout(dev, set_info, ffi.NULL, set_out)
    made.append((_vk.checked.vkDestroyDescriptorSetLayout, set_out[0]))
    return set_out[0]


def create_layout(dev: Any, info: ShaderInfo, set_layout: Any, made: list[tuple[Any, Any]]) -> Any:
    set_layouts = ffi.new("VkDescriptorSetLayout[1]", [set_layout])
    push_range = ffi.new(
        "VkPushConstantRange*",
        {
            "stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT,
            "offset": 0,
            "size": info.push_constant_size,
        },
    )
    layout_info = ffi.new(
        "VkPipelineLayoutCreateInfo*",
        {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
            "setLayoutCount": 1,
            "pSetLayouts": set_layouts,
            "pushConstantRangeCount": 1 if info.push_constant_size else 0,
            "pPushConstantRanges": push_range if info.push_constant_size else ffi.NULL,
        },
    )
    layout_out = ffi.new("VkPipelineLayout*")
    _vk.checked.vkCreatePipelineLayout(dev, layout_info, ffi.NULL, layout_out)
    made.append((_vk.checked.vkDestroyPipelineLayout, layout_out[0]))
    return layout_out[0]


def specialization_info(
    info: ShaderInfo,
    user_ids: tuple[int, ...],
    baked_ids: tuple[int, ...],
    specializations: Sequence[SpecValue],
    local_size: tuple[int, int, int],
    baked_push: bytes | None,
) -> tuple[Any, list[Any]]:
    """The VkSpecializationInfo, and the cffi objects it points at (keep them alive)."""
    ids = list(user_ids)
    values = [pack_specialization(v) for v in specializations]
    for i in baked_ids:
        assert baked_push is not None
        ids.append(i)
        offset = 4 * (i - BAKED_PUSH_BASE_ID)
        values.append(baked_push[offset : offset + 4])
    if info.local_size_ids is not None:
        ids += list(info.local_size_ids)
        values += [pack_specialization(int(x)) for x in local_size]
    data = b"".join(values)
    spec_data = ffi.new("char[]", max(len(data), 1))
    ffi.memmove(spec_data, data, len(data))
    entries = ffi.new("VkSpecializationMapEntry[]", max(len(ids), 1))
    for i, constant_id in enumerate(ids):
        entries[i].constantID = constant_id
        entries[i].offset = 4 * i
        entries[i].size = 4
    spec_info = ffi.new(
        "VkSpecializationInfo*",
        {
            "mapEntryCount": len(ids),
            "pMapEntries": entries,
            "dataSize": len(data),
            "pData": spec_data,
        },
    )
    return spec_info, [spec_data, entries]


def pipeline_create_info(
    device: VulkanDevice, module: Any, layout: Any, spec_info: Any, subgroup_size: int
) -> tuple[Any, Any, list[Any]]:
    """The compute pipeline's create info, its creation feedback struct (read after creation),
    and the cffi objects the create info points at (keep them alive)."""
    entry_name = ffi.new("char[]", b"main")
    subgroup_info = ffi.NULL
    if subgroup_size and device.info.support_subgroup_size_control:
        subgroup_info = ffi.new(
            "VkPipelineShaderStageRequiredSubgroupSizeCreateInfo*",
            {
                "sType": _REQUIRED_SUBGROUP_SIZE_STYPE,
                "requiredSubgroupSize": subgroup_size,
            },
        )
    feedback = ffi.new("VkPipelineCreationFeedback*")
    stage_feedback = ffi.new("VkPipelineCreationFeedback*")
    feedback_info = ffi.NULL
    if device.info.support_pipeline_creation_feedback:
        feedback_info = ffi.new(
            "VkPipelineCreationFeedbackCreateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO,
                "pPipelineCreationFeedback": feedback,
                "pipelineStageCreationFeedbackCount": 1,
                "pPipelineStageCreationFeedbacks": stage_feedback,
            },
        )
    pipeline_info = ffi.new("VkComputePipelineCreateInfo*")
    pipeline_info.sType = vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO
    pipeline_info.pNext = feedback_info
    stage = pipeline_info.stage
    stage.sType = vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO
    stage.pNext = subgroup_info
    stage.stage = vk.VK_SHADER_STAGE_COMPUTE_BIT
    stage.module = module
    stage.pName = entry_name
    stage.pSpecializationInfo = spec_info
    pipeline_info.layout = layout
    alive = [entry_name, subgroup_info, stage_feedback, feedback_info, spec_info]
    return pipeline_info, feedback, alive
