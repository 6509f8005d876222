"""DriverPipelineCache: the one owner of a VkPipelineCache (create, read, merge, destroy).

The pipeline cache package decides *what* goes in (a blob its file code validated) and when;
this class is the only code that drives the Vulkan object, so ``asyncvk.cache`` never calls
Vulkan itself.

Vulkan lets many threads create pipelines with one VkPipelineCache at once (the driver
synchronises that), but ``vkMergePipelineCaches`` needs its destination to itself
(externally synchronised): creations and reads share the cache, a merge waits for them and
holds it alone (:class:`SharedLock`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .. import _vk

if TYPE_CHECKING:
    from ._device import VulkanDevice

vk = _vk.vkapi
ffi = _vk.ffi


class SharedLock:
    """Held by many at once (``shared``) or by one alone (``exclusive``); one waiting for it
    alone goes before later shared holders, so a merge is not starved by a load's creations.
    Not reentrant."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._exclusive_waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._changed:
            while self._exclusive or self._exclusive_waiting:
                self._changed.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._changed:
                self._shared -= 1
                if not self._shared:
                    self._changed.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._changed:
            self._exclusive_waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._changed.wait()
            finally:
                self._exclusive_waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._changed:
                self._exclusive = False
                self._changed.notify_all()


def blob_holds_pipelines(blob: bytes) -> bool:
    """Whether a driver blob is more than its header (lavapipe's is a bare 32-byte header)."""
    return len(blob) > int.from_bytes(blob[:4], "little")


class DriverPipelineCache:
    """A VkPipelineCache of ``device``, created empty or from ``blob`` (validated by the caller).

    Arguments:
        device: the VulkanDevice that owns the handle's lifetime (it counts it).
        blob: initial data, as ``vkGetPipelineCacheData`` wrote it on this device.
    """

    def __init__(self, device: VulkanDevice, blob: bytes = b"") -> None:
        self.device = device
        data = ffi.from_buffer(blob) if blob else ffi.NULL
        info = ffi.new(
            "VkPipelineCacheCreateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                "initialDataSize": len(blob),
                "pInitialData": data,
            },
        )
        out = ffi.new("VkPipelineCache*")
        _vk.checked.vkCreatePipelineCache(device.handle, info, ffi.NULL, out)
        self._handle: Any = out[0]
        #: creations and reads share the handle; a merge holds it alone
        self.lock = SharedLock()
        device.track("pipeline_cache", +1)

    @property
    def handle(self) -> Any:
        """The VkPipelineCache (to pass to vkCreateComputePipelines, under ``lock.shared()``);
        raises once released."""
        if self._handle is None:
            raise RuntimeError("DriverPipelineCache used after release()")
        return self._handle

    @property
    def released(self) -> bool:
        return self._handle is None

    def data(self) -> bytes:
        """``vkGetPipelineCacheData``: size query, then data."""
        size = ffi.new("size_t*")
        dev = self.device.handle
        with self.lock.shared():
            _vk.checked.vkGetPipelineCacheData(dev, self.handle, size, ffi.NULL)
            if size[0] == 0:
                return b""
            data = ffi.new("char[]", size[0])
            _vk.checked.vkGetPipelineCacheData(dev, self.handle, size, data)
        return bytes(ffi.buffer(data, size[0]))

    def merge(self, blob: bytes) -> None:
        """Merge a validated blob in (through a temporary cache, released before returning),
        with no creation or read of this cache running meanwhile."""
        source = DriverPipelineCache(self.device, blob)
        try:
            sources = ffi.new("VkPipelineCache[1]", [source.handle])
            with self.lock.exclusive():
                _vk.checked.vkMergePipelineCaches(self.device.handle, self.handle, 1, sources)
        finally:
            source.release()

    def release(self) -> None:
        """Destroy the VkPipelineCache. Idempotent; pipelines created with it stay valid."""
        handle, self._handle = self._handle, None
        if handle is not None:
            _vk.api.vkDestroyPipelineCache(self.device.handle, handle, None)
            self.device.track("pipeline_cache", -1)
