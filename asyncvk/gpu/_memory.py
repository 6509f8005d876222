"""Device memory: a block allocator handing out sub-ranges of a few large VkBuffers.

Drivers cap the number of VkDeviceMemory allocations (often 4096) and each one is slow, so a
1000-layer model must not allocate per weight. Blocks of ``BLOCK_SIZE`` bytes, each with one
VkBuffer over the whole block, are split first-fit and coalesced on release. Host-visible blocks
stay mapped for their whole life.

The allocator counts what is live (``stats()``): blocks (one VkDeviceMemory each) and the
sub-allocated buffers with their bytes, so a test can check that an owner gave back all it took.

Memory that comes and goes with load (a plan's blobs, made for a burst of requests and released
after it) is allocated inside :func:`dedicated_blocks`: each buffer of ``DEDICATED_MIN`` bytes or
more gets a block of its own, freed as soon as the buffer is released. Sub-allocated, it would
leave holes in shared blocks that the blocks' other users keep alive, and where device memory is
host memory (lavapipe, integrated GPUs) the process's RSS would never fall back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .. import _vk
from .._errors import OutOfDeviceMemoryError
from ._device_handles import DeviceHandles

vk = _vk.vkapi
ffi = _vk.ffi

BLOCK_SIZE = 64 << 20
#: Blocks for staging and readback: host memory the driver pins, where 64 MB for a 4 KB output
#: cost a first inference on the H100 15-25 ms. A larger request gets a block of the next power
#: of two (kept, so growing requests take few blocks, until close or free_empty_blocks).
TRANSFER_BLOCK_SIZE = 1 << 20
#: Inside :func:`dedicated_blocks`, buffers of this size or more get a block of their own.
DEDICATED_MIN = 1 << 20

_dedicated: ContextVar[bool] = ContextVar("asyncvk_dedicated_blocks", default=False)


@contextmanager
def dedicated_blocks() -> Iterator[None]:
    """Allocations made inside (on this thread or context) of ``DEDICATED_MIN`` bytes or more
    get blocks of their own, given back to the driver when they are released."""
    token = _dedicated.set(True)
    try:
        yield
    finally:
        _dedicated.reset(token)


class MemoryKind(Enum):
    """Where a buffer lives: ``DEVICE`` for compute, ``STAGING``/``READBACK`` for transfers."""

    DEVICE = "device"
    STAGING = "staging"
    READBACK = "readback"


_DEVICE_LOCAL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
_HOST_VISIBLE = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
_HOST_COHERENT = vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
_HOST_CACHED = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT

# (required flags, preferred flags) per kind
_WANTS = {
    MemoryKind.DEVICE: (_DEVICE_LOCAL, _DEVICE_LOCAL | _HOST_VISIBLE | _HOST_COHERENT),
    MemoryKind.STAGING: (_HOST_VISIBLE | _HOST_COHERENT, _HOST_VISIBLE | _HOST_COHERENT),
    MemoryKind.READBACK: (_HOST_VISIBLE | _HOST_COHERENT, _HOST_CACHED),
}
_USAGE = (
    vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
    | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
)


@dataclass(eq=False)
class _Block:
    memory: Any
    buffer: Any
    size: int
    host_visible: bool
    mapped: Any  # cffi void* or None
    free: list[tuple[int, int]] = field(default_factory=list)  # (offset, size), sorted
    used: int = 0
    #: holds one buffer and is freed with it (see dedicated_blocks)
    dedicated: bool = False


class Buffer:
    """A sub-range of a device block. ``release()`` returns it; it is idempotent."""

    __slots__ = ("_allocator", "block", "offset", "size")

    def __init__(self, allocator: Allocator, block: _Block, offset: int, size: int) -> None:
        self._allocator: Allocator | None = allocator
        self.block = block
        self.offset = offset
        self.size = size

    @property
    def vk_buffer(self) -> Any:
        return self.block.buffer

    @property
    def host_visible(self) -> bool:
        return self.block.host_visible

    def view(self) -> memoryview:
        """The mapped bytes of this buffer (host-visible memory only)."""
        if self.block.mapped is None:
            raise ValueError("buffer is not host visible")
        return memoryview(ffi.buffer(self.block.mapped + self.offset, self.size)).cast("B")

    def sub(self, offset: int, size: int) -> Buffer:
        """A non-owning view of ``size`` bytes at ``offset`` inside this buffer."""
        if offset < 0 or offset + size > self.size:
            raise ValueError(f"view [{offset}, {offset + size}) outside a {self.size}-byte buffer")
        view = Buffer.__new__(Buffer)
        view._allocator = None
        view.block = self.block
        view.offset = self.offset + offset
        view.size = size
        return view

    def release(self) -> None:
        allocator, self._allocator = self._allocator, None
        if allocator is not None:
            allocator.free(self)

    @property
    def released(self) -> bool:
        return self._allocator is None

    def __repr__(self) -> str:
        return f"<Buffer {self.size} bytes at {self.offset}>"


class Allocator:
    """First-fit sub-allocation over large blocks, one pool per MemoryKind."""

    def __init__(self, device: DeviceHandles, block_size: int = BLOCK_SIZE) -> None:
        self._device = device
        self._lock = threading.Lock()
        self._blocks: dict[MemoryKind, list[_Block]] = {k: [] for k in MemoryKind}
        self._live_buffers = 0
        self._types = {k: self._memory_type(k) for k in MemoryKind}
        props = device.memory_properties
        device_flags = props.memoryTypes[self._types[MemoryKind.DEVICE]].propertyFlags
        self.device_is_host_visible = (
            bool(device_flags & _HOST_VISIBLE) and not device.quirks.upload_through_staging
        )
        #: Whether the host reads mapped compute memory through its caches: true of a CPU
        #: device's, false of a discrete GPU's memory mapped through resizable BAR, where each
        #: uncached read crosses PCIe (an H100 spent about 6 ms reading a 164 KB output so).
        #: Where false, results come back through a copy into host-cached memory.
        self.device_is_host_cached = self.device_is_host_visible and bool(
            device_flags & _HOST_CACHED
        )
        limit = device.info.limits.max_storage_buffer_range
        self.block_size = min(block_size, max(limit, 1 << 20))
        self.alignment = max(256, device.info.limits.min_storage_buffer_offset_alignment)

    def _memory_type(self, kind: MemoryKind) -> int:
        required, preferred = _WANTS[kind]
        props = self._device.memory_properties
        best, best_score = -1, -1
        for i in range(props.memoryTypeCount):
            flags = props.memoryTypes[i].propertyFlags
            if flags & required != required:
                continue
            score = bin(flags & preferred).count("1")
            if score > best_score:
                best, best_score = i, score
        if best < 0 and kind is MemoryKind.DEVICE:
            return self._memory_type(MemoryKind.STAGING)
        if best < 0:
            raise OutOfDeviceMemoryError("vkAllocateMemory", -2, "no suitable memory type")
        return best

    def allocate(self, size: int, kind: MemoryKind = MemoryKind.DEVICE) -> Buffer:
        size = max(self.alignment, -(-size // self.alignment) * self.alignment)
        dedicated = size >= DEDICATED_MIN and _dedicated.get()
        with self._lock:
            if dedicated:
                block = self._new_block(kind, size)
                block.dedicated = True
                self._blocks[kind].append(block)
                buf = self._take(block, size)
                assert buf is not None
                return buf
            for block in self._blocks[kind]:
                buf = None if block.dedicated else self._take(block, size)
                if buf is not None:
                    return buf
            if kind is MemoryKind.DEVICE:
                block_size = max(size, self.block_size)
            else:
                block_size = max(TRANSFER_BLOCK_SIZE, 1 << (size - 1).bit_length())
            block = self._new_block(kind, block_size)
            self._blocks[kind].append(block)
            buf = self._take(block, size)
            assert buf is not None
            return buf

    def _take(self, block: _Block, size: int) -> Buffer | None:
        for i, (offset, free) in enumerate(block.free):
            if free >= size:
                if free == size:
                    del block.free[i]
                else:
                    block.free[i] = (offset + size, free - size)
                block.used += size
                self._live_buffers += 1
                return Buffer(self, block, offset, size)
        return None

    def free(self, buf: Buffer) -> None:
        with self._lock:
            block = buf.block
            block.used -= buf.size
            self._live_buffers -= 1
            if block.dedicated:
                for blocks in self._blocks.values():
                    if block in blocks:
                        blocks.remove(block)
                        self._destroy(self._device.handle, block)
                return
            block.free.append((buf.offset, buf.size))
            block.free.sort()
            merged: list[tuple[int, int]] = []
            for offset, size in block.free:
                if merged and merged[-1][0] + merged[-1][1] == offset:
                    merged[-1] = (merged[-1][0], merged[-1][1] + size)
                else:
                    merged.append((offset, size))
            block.free = merged

    def _new_block(self, kind: MemoryKind, size: int) -> _Block:
        dev = self._device.handle
        buffer = _vk.api.vkCreateBuffer(
            dev,
            vk.VkBufferCreateInfo(
                size=size, usage=_USAGE, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE
            ),
            None,
        )
        reqs = _vk.api.vkGetBufferMemoryRequirements(dev, buffer)
        type_index = self._types[kind]
        if not reqs.memoryTypeBits & (1 << type_index):
            _vk.api.vkDestroyBuffer(dev, buffer, None)
            raise OutOfDeviceMemoryError("vkAllocateMemory", -2, "memory type not allowed")
        try:
            memory = _vk.api.vkAllocateMemory(
                dev,
                vk.VkMemoryAllocateInfo(allocationSize=reqs.size, memoryTypeIndex=type_index),
                None,
            )
        except BaseException:
            _vk.api.vkDestroyBuffer(dev, buffer, None)
            raise
        _vk.api.vkBindBufferMemory(dev, buffer, memory, 0)
        flags = self._device.memory_properties.memoryTypes[type_index].propertyFlags
        host_visible = bool(flags & _HOST_VISIBLE)
        if kind is MemoryKind.DEVICE and self._device.quirks.upload_through_staging:
            host_visible = False
        mapped = None
        if host_visible:
            pointer = ffi.new("void**")
            _vk.checked.vkMapMemory(dev, memory, 0, size, 0, pointer)
            mapped = ffi.cast("char*", pointer[0])
        self._device.track("memory", +1)
        return _Block(memory, buffer, size, host_visible, mapped, free=[(0, size)])

    def free_empty_blocks(self) -> int:
        """Free the blocks nothing is allocated from (a burst's plans, released): kept, they
        hold their memory until close, and where device memory is host memory (lavapipe,
        integrated GPUs) the process's RSS with it. Returns the bytes freed."""
        dev = self._device.handle
        freed = 0
        with self._lock:
            for blocks in self._blocks.values():
                for block in [b for b in blocks if b.used == 0]:
                    blocks.remove(block)
                    self._destroy(dev, block)
                    freed += block.size
        return freed

    def _destroy(self, dev: Any, block: _Block) -> None:
        if block.mapped is not None:
            _vk.api.vkUnmapMemory(dev, block.memory)
        _vk.api.vkDestroyBuffer(dev, block.buffer, None)
        _vk.api.vkFreeMemory(dev, block.memory, None)
        self._device.track("memory", -1)

    def stats(self) -> dict[str, int]:
        """Live counts: ``blocks`` and ``reserved_bytes`` (VkDeviceMemory, kept until close or
        :meth:`free_empty_blocks`), ``buffers`` and ``used_bytes`` (sub-allocations not
        released yet, aligned sizes)."""
        with self._lock:
            blocks = [b for bs in self._blocks.values() for b in bs]
            return {
                "blocks": len(blocks),
                "reserved_bytes": sum(b.size for b in blocks),
                "used_bytes": sum(b.used for b in blocks),
                "buffers": self._live_buffers,
            }

    def close(self) -> None:
        dev = self._device.handle
        with self._lock:
            for blocks in self._blocks.values():
                for block in blocks:
                    self._destroy(dev, block)
                blocks.clear()
