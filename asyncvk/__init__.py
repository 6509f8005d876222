"""asyncvk: an asyncio runtime for Vulkan compute with a fast, persistent pipeline cache.

The public names are imported on first use (PEP 562), so ``import asyncvk`` and the command
line's first lines cost no numpy, Vulkan or cache imports: the CLI opens the device on a thread
while the rest is imported (see ``asyncvk.cli``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ._errors import AsyncVkError as AsyncVkError
from ._errors import CacheMissError as CacheMissError
from ._errors import DeviceError as DeviceError
from ._errors import DeviceLostError as DeviceLostError
from ._errors import GpuTimeoutError as GpuTimeoutError
from ._errors import InputError as InputError
from ._errors import InputTooLargeError as InputTooLargeError
from ._errors import ModelFormatError as ModelFormatError
from ._errors import NoDeviceError as NoDeviceError
from ._errors import OutOfDeviceMemoryError as OutOfDeviceMemoryError
from ._errors import PipelineError as PipelineError
from ._errors import ProfilingUnsupportedError as ProfilingUnsupportedError
from ._errors import ShaderCompileError as ShaderCompileError
from ._errors import SpirvError as SpirvError
from ._errors import VulkanError as VulkanError
from ._lazy import lazy_attributes as _lazy_attributes
from ._version import __version__ as __version__

if _TYPE_CHECKING:
    from .cache import BuildRecord as BuildRecord
    from .cache import CacheStatistics as CacheStatistics
    from .cache import PipelineCache as PipelineCache
    from .cache._file_format import CacheLoadResult as CacheLoadResult
    from .cache._persist import SaveResult as SaveResult
    from .gpu import GpuInfo as GpuInfo
    from .gpu import VulkanDevice as VulkanDevice
    from .gpu import get_gpu_count as get_gpu_count
    from .gpu import get_gpu_device as get_gpu_device
    from .gpu import get_gpu_info as get_gpu_info
    from .net._group_member import MemberStatistics as MemberStatistics
    from .net._net import Extractor as Extractor
    from .net._net import Net as Net
    from .net._net_group import NetGroup as NetGroup
    from .net._option import Option as Option
    from .shader import ShaderOptions as ShaderOptions

#: public name -> the module that defines it, imported when the name is first read
_LAZY: dict[str, str] = {
    "BuildRecord": ".cache",
    "CacheStatistics": ".cache",
    "PipelineCache": ".cache",
    "CacheLoadResult": ".cache._file_format",
    "SaveResult": ".cache._persist",
    "GpuInfo": ".gpu",
    "VulkanDevice": ".gpu",
    "get_gpu_count": ".gpu",
    "get_gpu_device": ".gpu",
    "get_gpu_info": ".gpu",
    "Extractor": ".net._net",
    "MemberStatistics": ".net._group_member",
    "Net": ".net._net",
    "NetGroup": ".net._net_group",
    "Option": ".net._option",
    "ShaderOptions": ".shader",
}


__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())


__all__ = (
    "AsyncVkError",
    "BuildRecord",
    "CacheLoadResult",
    "CacheStatistics",
    "Extractor",
    "GpuInfo",
    "MemberStatistics",
    "Net",
    "NetGroup",
    "Option",
    "PipelineCache",
    "SaveResult",
    "ShaderOptions",
    "VulkanDevice",
    "get_gpu_count",
    "get_gpu_device",
    "get_gpu_info",
    "CacheMissError",
    "DeviceError",
    "DeviceLostError",
    "GpuTimeoutError",
    "InputError",
    "InputTooLargeError",
    "ModelFormatError",
    "NoDeviceError",
    "OutOfDeviceMemoryError",
    "PipelineError",
    "ProfilingUnsupportedError",
    "ShaderCompileError",
    "SpirvError",
    "VulkanError",
    "__version__",
)
