"""The process-wide Vulkan instance, created lazily and once, and device enumeration.

``ASYNCVK_VALIDATION=1`` enables ``VK_LAYER_KHRONOS_validation`` with a messenger that records
every error and warning message (tests assert that list stays empty).
``ASYNCVK_DEVICE`` picks the default device: an index, or a type (``discrete``, ``integrated``,
``virtual``, ``cpu``).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from typing import Any

from .. import _vk
from .._errors import NoDeviceError, VulkanError
from . import _driver_load, _realized_types
from ._identity import DeviceIdentity
from ._info import DEVICE_TYPE_NAMES, DEVICE_TYPE_RANK, GpuInfo, GpuLimits, QueueFamily
from ._quirks import resolve_quirks

log = logging.getLogger("asyncvk.gpu")

#: What to do when there is no Vulkan driver, said wherever its absence is found.
NO_DRIVER_FIX = (
    "install a Vulkan driver: your GPU's, or Mesa's lavapipe to run on the CPU through Vulkan "
    "(apt install mesa-vulkan-drivers); or run without Vulkan on the CPU "
    "(--cpu, Option(use_vulkan_compute=False))"
)
vk = _vk.vkapi
ffi = _vk.ffi

_lock = threading.Lock()
_instance: _Instance | None = None


class _Instance:
    """Owns the VkInstance, its physical devices and, when enabled, the debug messenger."""

    def __init__(self) -> None:
        self.validation = os.environ.get("ASYNCVK_VALIDATION", "") not in ("", "0")
        self.validation_messages: list[str] = []
        self._keep: list[Any] = []
        self.api_version = self._instance_version()
        layers = self._validation_layers() if self.validation else []
        extensions = ["VK_EXT_debug_utils"] if layers else []
        available = {e.extensionName for e in _vk.api.vkEnumerateInstanceExtensionProperties(None)}
        if "VK_KHR_portability_enumeration" in available:
            extensions.append("VK_KHR_portability_enumeration")
        app_info = vk.VkApplicationInfo(
            pApplicationName="asyncvk",
            applicationVersion=1,
            pEngineName="asyncvk",
            engineVersion=1,
            apiVersion=self.api_version,
        )
        flags = 0x1 if "VK_KHR_portability_enumeration" in extensions else 0
        create_info = vk.VkInstanceCreateInfo(
            flags=flags,
            pApplicationInfo=app_info,
            ppEnabledLayerNames=layers,
            ppEnabledExtensionNames=extensions,
        )
        try:
            self.handle = _vk.api.vkCreateInstance(create_info, None)
        except (vk.VkError, vk.VkException, VulkanError) as exc:
            raise NoDeviceError(
                f"no Vulkan driver could create an instance ({exc}): {NO_DRIVER_FIX}"
            ) from exc
        self.messenger = self._create_messenger() if layers else None
        self.physical_devices: list[Any] = list(_vk.api.vkEnumeratePhysicalDevices(self.handle))
        self.infos: list[GpuInfo] = [
            _query_info(i, pd, self.api_version, self.handle)
            for i, pd in enumerate(self.physical_devices)
        ]

    @staticmethod
    def _instance_version() -> int:
        try:
            version = int(_vk.api.vkEnumerateInstanceVersion())
        except Exception:  # a Vulkan 1.0 loader has no vkEnumerateInstanceVersion
            version = vk.VK_MAKE_VERSION(1, 0, 0)
        return min(version, vk.VK_MAKE_VERSION(1, 3, 0))

    @staticmethod
    def _validation_layers() -> list[str]:
        names = {p.layerName for p in _vk.api.vkEnumerateInstanceLayerProperties()}
        if "VK_LAYER_KHRONOS_validation" in names:
            return ["VK_LAYER_KHRONOS_validation"]
        log.warning("ASYNCVK_VALIDATION is set but VK_LAYER_KHRONOS_validation is not installed")
        return []

    def _create_messenger(self) -> Any:
        def callback(severity: int, types: int, data: Any, user: Any) -> int:
            message = ffi.string(data.pMessage).decode("utf-8", "replace")
            if severity >= vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT:
                self.validation_messages.append(message)
                log.warning("validation: %s", message)
            return 0

        self._keep.append(callback)
        create = _vk.instance_proc(self.handle, "vkCreateDebugUtilsMessengerEXT")
        info = vk.VkDebugUtilsMessengerCreateInfoEXT(
            messageSeverity=vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
            | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
            messageType=vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
            | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
            | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
            pfnUserCallback=callback,
        )
        return create(self.handle, info, None)


def _chain(*structs: Any) -> None:
    """Link cffi struct pointers through pNext, in order (the caller keeps them alive)."""
    for a, b in itertools.pairwise(structs):
        a.pNext = b


def _query_info(index: int, pd: Any, instance_api: int, instance: Any) -> GpuInfo:
    props = _vk.api.vkGetPhysicalDeviceProperties(pd)
    api = min(int(props.apiVersion), instance_api)
    has_12 = api >= vk.VK_MAKE_VERSION(1, 2, 0)
    has_13 = api >= vk.VK_MAKE_VERSION(1, 3, 0)
    extensions = frozenset(
        e.extensionName for e in _vk.api.vkEnumerateDeviceExtensionProperties(pd, None)
    )
    props2, subgroup, driver, sg_control = _properties2(pd, has_12, has_13, extensions)
    has_coopmat = has_12 and COOPMAT_EXTENSION in extensions
    feats2, f11, f12, f13, f_coopmat = features2(pd, has_12, has_13, has_coopmat)
    coopmat = (
        has_coopmat
        and bool(f_coopmat.cooperativeMatrix)
        and bool(f12.shaderFloat16)
        and bool(f12.vulkanMemoryModel)
        and _coopmat_fp16_block(instance, pd)
    )
    device_local, unified = _memory_summary(pd)
    queues = tuple(
        QueueFamily(i, int(q.queueFlags), int(q.queueCount))
        for i, q in enumerate(_vk.api.vkGetPhysicalDeviceQueueFamilyProperties(pd))
    )
    has_driver_props = driver.driverID != 0
    identity = _identity(props, props2, driver, has_driver_props)
    subgroup_size = int(subgroup.subgroupSize) or 32
    return GpuInfo(
        index=index,
        identity=identity,
        device_type=int(props.deviceType),
        driver_info=(
            ffi.string(driver.driverInfo).decode("utf-8", "replace") if has_driver_props else ""
        ),
        subgroup_size=subgroup_size,
        min_subgroup_size=int(sg_control.minSubgroupSize) or subgroup_size,
        max_subgroup_size=int(sg_control.maxSubgroupSize) or subgroup_size,
        subgroup_operations=int(subgroup.supportedOperations),
        support_subgroup_size_control=has_13 and bool(f13.subgroupSizeControl),
        support_fp16_storage=has_12 and bool(f11.storageBuffer16BitAccess),
        support_fp16_arithmetic=has_12 and bool(f12.shaderFloat16),
        support_int8_storage=has_12 and bool(f12.storageBuffer8BitAccess),
        support_int8_arithmetic=has_12 and bool(f12.shaderInt8),
        support_int16_storage=has_12
        and bool(f11.storageBuffer16BitAccess)
        and bool(feats2.features.shaderInt16),
        support_pipeline_creation_feedback=has_13
        or "VK_EXT_pipeline_creation_feedback" in extensions,
        support_cooperative_matrix=coopmat,
        limits=_limits(props.limits),
        queue_families=queues,
        device_local_heap_bytes=device_local,
        unified_memory=unified,
        extensions=extensions,
        quirks=resolve_quirks(identity),
    )


def _properties2(
    pd: Any, has_12: bool, has_13: bool, extensions: frozenset[str]
) -> tuple[Any, Any, Any, Any]:
    """Properties2 with subgroup, driver and subgroup-size-control properties chained."""
    props2 = ffi.new("VkPhysicalDeviceProperties2*")
    props2.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2
    subgroup = ffi.new("VkPhysicalDeviceSubgroupProperties*")
    subgroup.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES
    driver = ffi.new("VkPhysicalDeviceDriverProperties*")
    driver.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES
    sg_control = ffi.new("VkPhysicalDeviceSubgroupSizeControlProperties*")
    sg_control.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES
    chain = [props2, subgroup]
    if has_12 or "VK_KHR_driver_properties" in extensions:
        chain.append(driver)
    if has_13 or "VK_EXT_subgroup_size_control" in extensions:
        chain.append(sg_control)
    _chain(*chain)
    _vk.checked.vkGetPhysicalDeviceProperties2(pd, props2)
    return props2, subgroup, driver, sg_control


def features2(
    pd: Any, has_12: bool, has_13: bool, has_coopmat: bool
) -> tuple[Any, Any, Any, Any, Any]:
    """Features2 with the Vulkan 1.1, 1.2 and 1.3 feature structs the device's API has, and the
    cooperative-matrix features where the device has the extension (all zero otherwise)."""
    feats2 = ffi.new("VkPhysicalDeviceFeatures2*")
    feats2.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2
    f11 = ffi.new("VkPhysicalDeviceVulkan11Features*")
    f11.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES
    f12 = ffi.new("VkPhysicalDeviceVulkan12Features*")
    f12.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES
    f13 = ffi.new("VkPhysicalDeviceVulkan13Features*")
    f13.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES
    coopmat = ffi.new("VkPhysicalDeviceCooperativeMatrixFeaturesNV*")
    coopmat.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV
    fchain = [feats2]
    if has_12:
        fchain += [f11, f12]
    if has_13:
        fchain.append(f13)
    if has_coopmat:
        fchain.append(coopmat)
    _chain(*fchain)
    _vk.checked.vkGetPhysicalDeviceFeatures2(pd, feats2)
    return feats2, f11, f12, f13, coopmat


#: The matrix-unit extension glslang 12 (Debian bookworm's) compiles: GL_NV_cooperative_matrix.
#: Its successor VK_KHR_cooperative_matrix needs a newer glslang than the install has.
COOPMAT_EXTENSION = "VK_NV_cooperative_matrix"
_FLOAT16 = 0  # VK_COMPONENT_TYPE_FLOAT16_NV
_FLOAT32 = 1  # VK_COMPONENT_TYPE_FLOAT32_NV
_SCOPE_SUBGROUP = 3  # VK_SCOPE_SUBGROUP_NV


def _coopmat_fp16_block(instance: Any, pd: Any) -> bool:
    """Whether the device multiplies 16 x 16 fp16 blocks (k 16) into fp32 ones at subgroup
    scope: the one shape ``convolution_gemm_coopmat.comp`` is written for."""
    # the raw function, so each element's sType is set as the spec asks (the binding's
    # wrapper leaves it zero)
    list_shapes = _vk.instance_proc_raw(
        instance,
        "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV",
        "PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV",
    )
    if list_shapes is None:
        return False
    count = ffi.new("uint32_t*")
    try:
        list_shapes(pd, count, ffi.NULL)
        props = ffi.new("VkCooperativeMatrixPropertiesNV[]", count[0])
        for i in range(count[0]):
            props[i].sType = vk.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV
        list_shapes(pd, count, props)
    except VulkanError as exc:  # a device that cannot list them does not get the shader
        log.warning("cooperative matrix shapes not listed: %s", exc)
        return False
    return any(
        (p.MSize, p.NSize, p.KSize) == (16, 16, 16)
        and (p.AType, p.BType) == (_FLOAT16, _FLOAT16)
        and (p.CType, p.DType) == (_FLOAT32, _FLOAT32)
        and p.scope == _SCOPE_SUBGROUP
        for p in props[0 : count[0]]
    )


def _memory_summary(pd: Any) -> tuple[int, bool]:
    """Bytes of device-local heaps, and whether every device-local type is host-visible."""
    memory = _vk.api.vkGetPhysicalDeviceMemoryProperties(pd)
    device_local = 0
    unified = True
    for h in range(memory.memoryHeapCount):
        heap = memory.memoryHeaps[h]
        if heap.flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT:
            device_local += int(heap.size)
    for t in range(memory.memoryTypeCount):
        flags = memory.memoryTypes[t].propertyFlags
        if flags & vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT and not (
            flags & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
        ):
            unified = False
    return device_local, unified


def _identity(props: Any, props2: Any, driver: Any, has_driver_props: bool) -> DeviceIdentity:
    return DeviceIdentity(
        vendor_id=int(props.vendorID),
        device_id=int(props.deviceID),
        api_version=int(props.apiVersion),
        driver_version=int(props.driverVersion),
        driver_id=int(driver.driverID) if has_driver_props else 0,
        device_name=ffi.string(props2.properties.deviceName).decode("utf-8", "replace"),
        driver_name=(
            ffi.string(driver.driverName).decode("utf-8", "replace") if has_driver_props else ""
        ),
        pipeline_cache_uuid=bytes(ffi.buffer(props2.properties.pipelineCacheUUID, 16)),
    )


def _limits(limits: Any) -> GpuLimits:
    return GpuLimits(
        max_compute_workgroup_size=tuple(int(x) for x in limits.maxComputeWorkGroupSize),  # type: ignore[arg-type]
        max_compute_workgroup_invocations=int(limits.maxComputeWorkGroupInvocations),
        max_compute_workgroup_count=tuple(int(x) for x in limits.maxComputeWorkGroupCount),  # type: ignore[arg-type]
        max_compute_shared_memory_size=int(limits.maxComputeSharedMemorySize),
        max_storage_buffer_range=int(limits.maxStorageBufferRange),
        min_storage_buffer_offset_alignment=int(limits.minStorageBufferOffsetAlignment),
        max_push_constants_size=int(limits.maxPushConstantsSize),
        max_memory_allocation_count=int(limits.maxMemoryAllocationCount),
        non_coherent_atom_size=int(limits.nonCoherentAtomSize),
    )


def instance() -> _Instance:
    """The process-wide instance, created on first use (thread-safe)."""
    global _instance
    if _instance is None:
        with _lock:
            if _instance is None:
                _driver_load.wait()  # the loader's first call, if the CLI started it early
                _realized_types.realize_all()  # before any worker thread can use the binding
                _instance = _Instance()
    return _instance


def get_gpu_count() -> int:
    """How many Vulkan devices this process can use (0 when there is no driver; never raises).

    Example::

        if asyncvk.get_gpu_count() == 0:
            print("no Vulkan device: the CPU path will run")
    """
    try:
        return len(instance().infos)
    except NoDeviceError:
        return 0


def get_gpu_info(index: int | None = None) -> GpuInfo:
    """Identity and capabilities of device ``index`` (None: the default device).

    Raises:
        NoDeviceError: there is no such device (or none at all: the message names the fix).

    Example::

        info = asyncvk.get_gpu_info()
        print(info.device_name, info.driver_name, info.type_name)
    """
    infos = instance().infos
    i = get_default_gpu_index() if index is None else index
    if not 0 <= i < len(infos):
        raise NoDeviceError(f"no Vulkan device {i}: {len(infos)} device(s) present")
    return infos[i]


def get_default_gpu_index() -> int:
    """discrete > integrated > virtual > cpu, unless ``ASYNCVK_DEVICE`` says otherwise."""
    infos = instance().infos
    if not infos:
        raise NoDeviceError(f"no Vulkan device found: {NO_DRIVER_FIX}")
    choice = os.environ.get("ASYNCVK_DEVICE", "").strip().lower()
    if choice.isdigit():
        i = int(choice)
        if i >= len(infos):
            raise NoDeviceError(f"ASYNCVK_DEVICE={i}: only {len(infos)} device(s) present")
        return i
    if choice:
        wanted = [k for k, v in DEVICE_TYPE_NAMES.items() if v == choice]
        if not wanted:
            raise NoDeviceError(f"ASYNCVK_DEVICE={choice!r}: not an index or a device type")
        for info in infos:
            if info.device_type == wanted[0]:
                return info.index
        raise NoDeviceError(f"ASYNCVK_DEVICE={choice!r}: no device of that type")
    return min(infos, key=lambda i: (DEVICE_TYPE_RANK.get(i.device_type, 9), i.index)).index


def validation_messages() -> list[str]:
    """Messages the validation layer reported so far (empty unless ASYNCVK_VALIDATION=1)."""
    return list(instance().validation_messages) if _instance is not None else []
