"""The blocking core of pipeline creation: SPIR-V in, a PipelineArtifact of live handles out.

Every nested cffi struct and buffer is bound to a local name until the Vulkan call returns:
cffi frees memory when its owning object dies, and a stage info built inline inside a create
info can be gone before the driver reads it.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _vk
from .._errors import PipelineError
from ..shader._reflect import STORAGE_BUFFER, UNIFORM_BUFFER, ShaderInfo
from ..shader._registry import BAKED_PUSH_BASE_ID

if TYPE_CHECKING:
    from ._device import VulkanDevice
    from ._driver_cache import DriverPipelineCache

vk = _vk.vkapi
ffi = _vk.ffi

SpecValue = int | float | bool
_CACHE_HIT_BIT = 0x2  # VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT
_FEEDBACK_VALID_BIT = 0x1
_REQUIRED_SUBGROUP_SIZE_STYPE = (
    vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO
)
_DESCRIPTOR_TYPES = {
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


#: Guards every artifact's user count (rarely contended: loads and releases only).
_USERS_LOCK = threading.Lock()


@dataclass(eq=False)
class PipelineArtifact:
    """Live handles for one digest. The cache owns it; a model that records plans with it
    holds it too (:meth:`acquire`), so the cache dropping it never destroys it under a plan.
    """

    device: VulkanDevice
    shader_module: Any
    set_layout: Any
    layout: Any
    handle: Any
    info: ShaderInfo
    local_size: tuple[int, int, int]
    create_seconds: float
    driver_cache_hit: bool | None
    name: str = "shader"
    #: VkDescriptorUpdateTemplate writing binding i from VkDescriptorBufferInfo[i] (Vulkan 1.1+).
    update_template: Any = None
    destroyed: bool = False
    #: The owner (the cache) plus every :meth:`acquire` not yet released.
    users: int = 1
    _owner_released: bool = False

    @property
    def binding_count(self) -> int:
        return self.info.binding_count

    @property
    def push_constant_size(self) -> int:
        return self.info.push_constant_size

    def acquire(self) -> PipelineArtifact:
        """One more user (a loaded model); pair with :meth:`release`. Raises once destroyed."""
        with _USERS_LOCK:
            if self.destroyed:
                raise RuntimeError(f"pipeline {self.name!r} was already destroyed")
            self.users += 1
        return self

    def release(self) -> None:
        """Drop one :meth:`acquire`; the handles go with the last user."""
        with _USERS_LOCK:
            self.users -= 1
            last = self.users == 0
        if last:
            self._destroy_handles()

    def destroy(self) -> None:
        """The owner's release: idempotent; the handles go now unless a user still holds them."""
        with _USERS_LOCK:
            if self._owner_released:
                return
            self._owner_released = True
        self.release()

    def _destroy_handles(self) -> None:
        """Destroy the handles once, pipeline first."""
        if self.destroyed:
            return
        self.destroyed = True
        dev = self.device.handle
        if self.update_template is not None:
            _vk.checked.vkDestroyDescriptorUpdateTemplate(dev, self.update_template, ffi.NULL)
        _vk.api.vkDestroyPipeline(dev, self.handle, None)
        _vk.api.vkDestroyPipelineLayout(dev, self.layout, None)
        _vk.api.vkDestroyDescriptorSetLayout(dev, self.set_layout, None)
        _vk.api.vkDestroyShaderModule(dev, self.shader_module, None)
        self.device.track("pipeline", -1)


def create_pipeline(
    device: VulkanDevice,
    spirv: bytes,
    info: ShaderInfo,
    specializations: Sequence[SpecValue],
    local_size: tuple[int, int, int],
    *,
    subgroup_size: int = 0,
    pipeline_cache: DriverPipelineCache | None = None,
    name: str = "shader",
    baked_push: bytes | None = None,
) -> PipelineArtifact:
    """Create the shader module, layouts and compute pipeline; destroy all on failure.

    With ``baked_push``, user specialization ids >= 100 take the 4 bytes at push offset
    ``4 * (id - 100)`` (a shape variant's push constants); the others stay positional.
    """
    user_ids = info.user_specialization_ids
    baked_ids: tuple[int, ...] = ()
    if baked_push is not None:
        baked_ids = tuple(i for i in user_ids if i >= BAKED_PUSH_BASE_ID)
        user_ids = tuple(i for i in user_ids if i < BAKED_PUSH_BASE_ID)
        for i in baked_ids:
            if 4 * (i - BAKED_PUSH_BASE_ID) + 4 > len(baked_push):
                raise PipelineError(
                    f"shader {name!r}: constant {i} needs push bytes "
                    f"{4 * (i - BAKED_PUSH_BASE_ID)}..+4, got {len(baked_push)} bytes"
                )
    if len(specializations) != len(user_ids):
        raise PipelineError(
            f"shader {name!r} declares {len(user_ids)} specialization constants "
            f"{list(user_ids)}, got {len(specializations)}"
        )
    if info.local_size_ids is None and tuple(local_size) != info.local_size:
        raise PipelineError(
            f"shader {name!r} fixes its local size to {info.local_size}; "
            f"asked for {tuple(local_size)}"
        )
    dev = device.handle
    made: list[tuple[Any, Any]] = []
    try:
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
        module = module_out[0]
        made.append((_vk.checked.vkDestroyShaderModule, module))

        nb = len(info.bindings)
        bindings = ffi.new("VkDescriptorSetLayoutBinding[]", max(nb, 1))
        for i, b in enumerate(info.bindings):
            if b.set != 0:
                raise PipelineError(f"shader {name!r}: descriptor set {b.set} (only set 0 is used)")
            if b.descriptor_type not in _DESCRIPTOR_TYPES:
                raise PipelineError(
                    f"shader {name!r}: {b.descriptor_type} bindings are not supported"
                )
            bindings[i].binding = b.binding
            bindings[i].descriptorType = _DESCRIPTOR_TYPES[b.descriptor_type]
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
        set_layout = set_out[0]
        made.append((_vk.checked.vkDestroyDescriptorSetLayout, set_layout))

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
        layout = layout_out[0]
        made.append((_vk.checked.vkDestroyPipelineLayout, layout))

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
        pipeline_out = ffi.new("VkPipeline*")
        cache = pipeline_cache.handle if pipeline_cache is not None else ffi.NULL
        start = time.perf_counter()
        if device.quirks.serialize_pipeline_creation:
            with device.creation_lock:
                _create_compute_pipeline(device, cache, pipeline_info, pipeline_out)
        else:
            _create_compute_pipeline(device, cache, pipeline_info, pipeline_out)
        seconds = time.perf_counter() - start
        handle = pipeline_out[0]
        made.append((_vk.checked.vkDestroyPipeline, handle))
        template = _update_template(device, info, set_layout)
        hit: bool | None = None
        if feedback_info != ffi.NULL and feedback.flags & _FEEDBACK_VALID_BIT:
            hit = bool(feedback.flags & _CACHE_HIT_BIT)
    except BaseException:
        for destroy, h in reversed(made):
            destroy(dev, h, ffi.NULL)
        raise
    device.track("pipeline", +1)
    return PipelineArtifact(
        device=device,
        shader_module=module,
        set_layout=set_layout,
        layout=layout,
        handle=handle,
        info=info,
        local_size=(int(local_size[0]), int(local_size[1]), int(local_size[2])),
        create_seconds=seconds,
        driver_cache_hit=hit,
        name=name,
        update_template=template,
    )


def _update_template(device: VulkanDevice, info: ShaderInfo, set_layout: Any) -> Any:
    """A descriptor update template for the shader's buffer bindings (None before Vulkan 1.1)."""
    if device.info.api_version < vk.VK_MAKE_VERSION(1, 1, 0) or not info.bindings:
        return None
    stride = ffi.sizeof("VkDescriptorBufferInfo")
    entries = ffi.new("VkDescriptorUpdateTemplateEntry[]", len(info.bindings))
    for i, b in enumerate(info.bindings):
        entries[i].dstBinding = b.binding
        entries[i].descriptorCount = 1
        entries[i].descriptorType = _DESCRIPTOR_TYPES[b.descriptor_type]
        entries[i].offset = i * stride
        entries[i].stride = stride
    create = ffi.new(
        "VkDescriptorUpdateTemplateCreateInfo*",
        {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_UPDATE_TEMPLATE_CREATE_INFO,
            "descriptorUpdateEntryCount": len(info.bindings),
            "pDescriptorUpdateEntries": entries,
            "templateType": vk.VK_DESCRIPTOR_UPDATE_TEMPLATE_TYPE_DESCRIPTOR_SET,
            "descriptorSetLayout": set_layout,
        },
    )
    out = ffi.new("VkDescriptorUpdateTemplate*")
    _vk.checked.vkCreateDescriptorUpdateTemplate(device.handle, create, ffi.NULL, out)
    return out[0]


def _create_compute_pipeline(device: VulkanDevice, cache: Any, info: Any, out: Any) -> None:
    """The one vkCreateComputePipelines call; instrumented through ``device.creation_probe``."""
    probe = device.creation_probe
    if probe is not None:
        probe(True)
    try:
        _vk.checked.vkCreateComputePipelines(device.handle, cache, 1, info, ffi.NULL, out)
    finally:
        if probe is not None:
            probe(False)
