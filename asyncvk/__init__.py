"""asyncvk: an asyncio runtime for Vulkan compute with a fast, persistent pipeline cache."""

from ._errors import (
    AsyncVkError as AsyncVkError,
)
from ._errors import (
    CacheMissError as CacheMissError,
)
from ._errors import (
    DeviceLostError as DeviceLostError,
)
from ._errors import (
    ModelFormatError as ModelFormatError,
)
from ._errors import (
    NoDeviceError as NoDeviceError,
)
from ._errors import (
    OutOfDeviceMemoryError as OutOfDeviceMemoryError,
)
from ._errors import (
    PipelineError as PipelineError,
)
from ._errors import (
    ShaderCompileError as ShaderCompileError,
)
from ._errors import (
    SpirvError as SpirvError,
)
from ._errors import (
    VulkanError as VulkanError,
)
from ._version import __version__ as __version__

__all__ = (
    "AsyncVkError",
    "CacheMissError",
    "DeviceLostError",
    "ModelFormatError",
    "NoDeviceError",
    "OutOfDeviceMemoryError",
    "PipelineError",
    "ShaderCompileError",
    "SpirvError",
    "VulkanError",
    "__version__",
)
