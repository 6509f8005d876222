"""The exception tree of asyncvk, in one place.

::

    AsyncVkError
    ├── DeviceError                   the Vulkan device or driver failed us
    │   ├── NoDeviceError             no Vulkan device, or a bad device index
    │   ├── VulkanError               a VkResult other than VK_SUCCESS (attributes: result, call)
    │   │   ├── OutOfDeviceMemoryError    (also a MemoryError)
    │   │   └── DeviceLostError
    │   └── GpuTimeoutError           a fence wait over its limit (also a TimeoutError)
    ├── ShaderCompileError            GLSL that shaderc rejected (attributes: shader, log)
    ├── SpirvError                    SPIR-V words that cannot be reflected (attribute: offset)
    ├── PipelineError                 a pipeline request that cannot be served (bad spec count)
    ├── CacheMissError                must-hit mode saw a pipeline that had to be compiled
    ├── ProfilingUnsupportedError     the device's queue cannot write GPU timestamps
    ├── ModelFormatError              a malformed .param/.bin (also a ValueError; attributes:
    │                                 file, line, layer)
    └── InputError                    an input that cannot be used as given: a name the model
        │                             has no blob for, a shape or dtype it cannot take (also a
        │                             ValueError)
        └── InputTooLargeError        its bytes, or its plan's, are over a limit (nbytes, limit)

A missing model file is a ``FileNotFoundError`` (an ``OSError``) naming the path. A bad cache
*file* is never an exception: it is a cache miss with a reason.
"""

from __future__ import annotations


class AsyncVkError(Exception):
    """Base of every error asyncvk raises on purpose.

    Example::

        try:
            outputs = await net.run({"in0": image})
        except asyncvk.InputError as exc:  # the caller's input: name, expected and given shapes
            reply(400, str(exc))
        except asyncvk.AsyncVkError:  # the model, the device or the cache
            raise
    """


class DeviceError(AsyncVkError):
    """The Vulkan device or driver failed: none to use, a call that returned an error, a lost
    device, a GPU that did not finish in time."""


class NoDeviceError(DeviceError):
    """No Vulkan device can be used (no driver, or the index is out of range)."""


class VulkanError(DeviceError):
    """A Vulkan call returned an error code."""

    def __init__(self, call: str, result: int, name: str) -> None:
        super().__init__(f"{call} failed with {name} ({result})")
        self.call = call
        self.result = result
        self.name = name


class OutOfDeviceMemoryError(VulkanError, MemoryError):
    """VK_ERROR_OUT_OF_DEVICE_MEMORY or VK_ERROR_OUT_OF_HOST_MEMORY."""


class DeviceLostError(VulkanError):
    """VK_ERROR_DEVICE_LOST: the device must be recreated."""


class GpuTimeoutError(DeviceError, TimeoutError):
    """The GPU did not finish within ``seconds`` (a fence wait; not a lost device).

    The limit is ``VulkanDevice.fence_timeout_s``, from ``ASYNCVK_FENCE_TIMEOUT_S``.
    """

    def __init__(self, call: str, seconds: float) -> None:
        super().__init__(
            f"{call}: the GPU did not finish within {seconds:g} s "
            "(raise ASYNCVK_FENCE_TIMEOUT_S for longer work)"
        )
        self.call = call
        self.seconds = seconds


class ShaderCompileError(AsyncVkError):
    """GLSL that failed to compile; ``log`` holds the compiler's message with line numbers."""

    def __init__(self, shader: str, log: str) -> None:
        super().__init__(f"shader {shader!r} failed to compile:\n{log}")
        self.shader = shader
        self.log = log


class SpirvError(AsyncVkError):
    """SPIR-V that cannot be parsed; ``offset`` is the word index where parsing stopped."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        where = f" at word {offset}" if offset is not None else ""
        super().__init__(f"malformed SPIR-V{where}: {message}")
        self.offset = offset


class PipelineError(AsyncVkError):
    """A pipeline request that cannot be served as asked."""


class CacheMissError(AsyncVkError):
    """Raised in must-hit mode when a pipeline or shader had to be built cold."""


class ProfilingUnsupportedError(AsyncVkError):
    """Dispatch profiling asked of a device whose compute queue writes no timestamps."""


class ModelFormatError(AsyncVkError, ValueError):
    """A malformed ncnn model file; names the file, the line and the layer where known."""

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        layer: str | None = None,
    ) -> None:
        where = []
        if file is not None:
            where.append(str(file) if line is None else f"{file}:{line}")
        elif line is not None:
            where.append(f"line {line}")
        if layer is not None:
            where.append(f"layer {layer!r}")
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.file = file
        self.line = line
        self.layer = layer
        self.detail = message


class InputError(AsyncVkError, ValueError):
    """An input that cannot be used as given: a blob name the model does not have, a shape or
    dtype it cannot take, a .npy whose header and length disagree. A ValueError too, so code
    that caught ValueError for bad inputs still does."""


class InputTooLargeError(InputError):
    """An input (or the plan its shape needs) over a size limit, refused before allocating."""

    def __init__(self, message: str, *, nbytes: int, limit: int) -> None:
        super().__init__(message)
        self.nbytes = nbytes
        self.limit = limit
