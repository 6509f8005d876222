"""The blocking core of pipeline creation: SPIR-V in, a PipelineArtifact of live handles out.

Every nested cffi struct and buffer is bound to a local name until the Vulkan call returns:
cffi frees memory when its owning object dies, and a stage info built inline inside a create
info can be gone before the driver reads it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _vk
from .._errors import PipelineError
from ..shader._reflect import ShaderInfo
from ..shader._registry import BAKED_PUSH_BASE_ID
from ._pipeline_structs import (
    DESCRIPTOR_TYPES,
    SpecValue,
    create_layout,
    create_module,
    create_set_layout,
    pack_specialization,
    pipeline_create_info,
    specialization_info,
)

if TYPE_CHECKING:
    from ._device import VulkanDevice
    from ._driver_cache import DriverPipelineCache

vk = _vk.vkapi
ffi = _vk.ffi


__all__ = ("PipelineArtifact", "SpecValue", "create_pipeline", "pack_specialization")

_CACHE_HIT_BIT = 0x2  # VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT
_FEEDBACK_VALID_BIT = 0x1


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
    #: Bindings the shader never writes (its source declares them ``readonly``); a recorder
    #: orders dispatches by them (``CommandRecorder.barriers_on_hazards``).
    read_only_bindings: frozenset[int] = frozenset()
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
    read_only_bindings: frozenset[int] = frozenset(),
) -> PipelineArtifact:
    """Create the shader module, layouts and compute pipeline; destroy all on failure.

    With ``baked_push``, user specialization ids >= 100 take the 4 bytes at push offset
    ``4 * (id - 100)`` (a shape variant's push constants); the others stay positional.
    """
    user_ids, baked_ids = _constant_ids(info, specializations, local_size, name, baked_push)
    dev = device.handle
    made: list[tuple[Any, Any]] = []
    try:
        module = create_module(dev, spirv, made)
        set_layout = create_set_layout(dev, info, name, made)
        layout = create_layout(dev, info, set_layout, made)
        spec_info, spec_alive = specialization_info(
            info, user_ids, baked_ids, specializations, local_size, baked_push
        )
        pipeline_info, feedback, stage_alive = pipeline_create_info(
            device, module, layout, spec_info, subgroup_size
        )
        pipeline_out = ffi.new("VkPipeline*")
        start = time.perf_counter()
        if pipeline_cache is None:
            _create_compute_pipeline(device, ffi.NULL, pipeline_info, pipeline_out)
        else:
            with pipeline_cache.lock.shared():  # a merge into the cache waits meanwhile
                _create_compute_pipeline(device, pipeline_cache.handle, pipeline_info, pipeline_out)
        seconds = time.perf_counter() - start
        del spec_alive, stage_alive  # what the create info pointed at lived until here
        handle = pipeline_out[0]
        made.append((_vk.checked.vkDestroyPipeline, handle))
        template = _update_template(device, info, set_layout)
        hit: bool | None = None
        if pipeline_info.pNext != ffi.NULL and feedback.flags & _FEEDBACK_VALID_BIT:
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
        read_only_bindings=read_only_bindings,
    )


def _constant_ids(
    info: ShaderInfo,
    specializations: Sequence[SpecValue],
    local_size: tuple[int, int, int],
    name: str,
    baked_push: bytes | None,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The positional and the baked (push-byte) specialization ids; checks the counts first."""
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
    return user_ids, baked_ids


def _update_template(device: VulkanDevice, info: ShaderInfo, set_layout: Any) -> Any:
    """A descriptor update template for the shader's buffer bindings (None before Vulkan 1.1)."""
    if device.info.api_version < vk.VK_MAKE_VERSION(1, 1, 0) or not info.bindings:
        return None
    stride = ffi.sizeof("VkDescriptorBufferInfo")
    entries = ffi.new("VkDescriptorUpdateTemplateEntry[]", len(info.bindings))
    for i, b in enumerate(info.bindings):
        entries[i].dstBinding = b.binding
        entries[i].descriptorCount = 1
        entries[i].descriptorType = DESCRIPTOR_TYPES[b.descriptor_type]
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
    """The one vkCreateComputePipelines call, one at a time on drivers flagged
    ``serialize_pipeline_creation``; instrumented through ``device.creation_probe``."""
    if device.quirks.serialize_pipeline_creation:
        with device.creation_lock:
            _create_compute_pipeline_now(device, cache, info, out)
    else:
        _create_compute_pipeline_now(device, cache, info, out)


def _create_compute_pipeline_now(device: VulkanDevice, cache: Any, info: Any, out: Any) -> None:
    probe = device.creation_probe
    if probe is not None:
        probe(True)
    try:
        _vk.checked.vkCreateComputePipelines(device.handle, cache, 1, info, ffi.NULL, out)
    finally:
        if probe is not None:
            probe(False)
