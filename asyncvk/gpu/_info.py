"""GpuInfo: what one physical device is (its cache identity) and what it can do."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .._vk import version_string
from ._identity import DeviceIdentity
from ._quirks import Quirks
from ._shader_choices import Place, ShaderChoices

DEVICE_TYPE_NAMES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
#: Preference when choosing the default device: discrete > integrated > virtual > cpu > other.
DEVICE_TYPE_RANK = {2: 0, 1: 1, 3: 2, 4: 3, 0: 4}


@dataclass(frozen=True)
class QueueFamily:
    index: int
    flags: int
    count: int

    @property
    def compute(self) -> bool:
        return bool(self.flags & 0x2)

    @property
    def graphics(self) -> bool:
        return bool(self.flags & 0x1)


@dataclass(frozen=True)
class GpuLimits:
    max_compute_workgroup_size: tuple[int, int, int]
    max_compute_workgroup_invocations: int
    max_compute_workgroup_count: tuple[int, int, int]
    max_compute_shared_memory_size: int
    max_storage_buffer_range: int
    min_storage_buffer_offset_alignment: int
    max_push_constants_size: int
    max_memory_allocation_count: int
    non_coherent_atom_size: int


@dataclass(frozen=True)
class GpuInfo:
    """One physical device: identity for caches, capabilities for layers, quirks for us."""

    index: int
    identity: DeviceIdentity
    device_type: int
    driver_info: str
    subgroup_size: int
    min_subgroup_size: int
    max_subgroup_size: int
    subgroup_operations: int
    support_subgroup_size_control: bool
    support_fp16_storage: bool
    support_fp16_arithmetic: bool
    support_int8_storage: bool
    support_int8_arithmetic: bool
    support_int16_storage: bool
    support_pipeline_creation_feedback: bool
    #: 16 x 16 fp16 blocks multiplied into fp32 on the matrix units (VK_NV_cooperative_matrix)
    support_cooperative_matrix: bool
    limits: GpuLimits
    queue_families: tuple[QueueFamily, ...]
    device_local_heap_bytes: int
    unified_memory: bool
    extensions: frozenset[str]
    quirks: Quirks
    #: which shaders layers record with here (a load may give its own: ``Option.shader_choices``)
    choices: ShaderChoices = field(default_factory=ShaderChoices)

    def takes(self, place: Place) -> bool:
        """Whether a shader choice set to ``place`` (one of ``self.choices``' fields) is taken
        on this device, before the layer's own bounds: "gpu" leaves those to the layer."""
        cpu = self.is_cpu
        return place == "always" or (place == "cpu" and cpu) or (place == "gpu" and not cpu)

    @property
    def device_name(self) -> str:
        """The driver's name for the device (``VkPhysicalDeviceProperties.deviceName``)."""
        return self.identity.device_name

    @property
    def driver_name(self) -> str:
        """The driver's own name (``VkPhysicalDeviceDriverProperties.driverName``)."""
        return self.identity.driver_name

    @property
    def vendor_id(self) -> int:
        """PCI vendor id (0x10de NVIDIA, 0x1002 AMD, 0x8086 Intel, 0x10005 Mesa)."""
        return self.identity.vendor_id

    @property
    def device_id(self) -> int:
        """The vendor's id of the device model."""
        return self.identity.device_id

    @property
    def api_version(self) -> int:
        """The Vulkan version the driver implements, packed as ``VK_MAKE_API_VERSION``."""
        return self.identity.api_version

    @property
    def driver_version(self) -> int:
        """The driver's version, packed in the vendor's own way."""
        return self.identity.driver_version

    @property
    def pipeline_cache_uuid(self) -> bytes:
        """The 16 bytes a driver's pipeline cache data is valid for: a cache file from another
        driver build is not used."""
        return self.identity.pipeline_cache_uuid

    @property
    def type_name(self) -> str:
        """``discrete``, ``integrated``, ``virtual``, ``cpu`` or ``other``."""
        return DEVICE_TYPE_NAMES.get(self.device_type, "other")

    @property
    def is_cpu(self) -> bool:
        """Whether the device is a CPU (lavapipe, SwiftShader): its memory is host memory."""
        return self.device_type == 4

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view, as ``asyncvk info --json`` prints it."""
        ident = self.identity
        return {
            "index": self.index,
            "device_name": ident.device_name,
            "device_type": self.type_name,
            "vendor_id": ident.vendor_id,
            "device_id": ident.device_id,
            "api_version": version_string(ident.api_version),
            "api_version_raw": ident.api_version,
            "driver_version": ident.driver_version,
            "driver_id": ident.driver_id,
            "driver_name": ident.driver_name,
            "driver_info": self.driver_info,
            "pipeline_cache_uuid": ident.pipeline_cache_uuid.hex(),
            "subgroup_size": self.subgroup_size,
            "min_subgroup_size": self.min_subgroup_size,
            "max_subgroup_size": self.max_subgroup_size,
            "subgroup_operations": self.subgroup_operations,
            "support_subgroup_size_control": self.support_subgroup_size_control,
            "support_fp16_storage": self.support_fp16_storage,
            "support_fp16_arithmetic": self.support_fp16_arithmetic,
            "support_int8_storage": self.support_int8_storage,
            "support_int8_arithmetic": self.support_int8_arithmetic,
            "support_int16_storage": self.support_int16_storage,
            "support_pipeline_creation_feedback": self.support_pipeline_creation_feedback,
            "support_cooperative_matrix": self.support_cooperative_matrix,
            "limits": asdict(self.limits),
            "queue_families": [
                {"index": q.index, "flags": q.flags, "count": q.count, "compute": q.compute}
                for q in self.queue_families
            ],
            "device_local_heap_bytes": self.device_local_heap_bytes,
            "unified_memory": self.unified_memory,
            "quirks": self.quirks.as_dict(),
        }
