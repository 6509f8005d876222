"""CommandRecorder: one command buffer with its own pools, recorded once, submitted many times.

A recorder owns its VkCommandPool and VkDescriptorPools: Vulkan requires external
synchronisation of a pool while any of its command buffers records, so a private pool lets
plans record on any thread without a shared lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .. import _vk
from .._errors import PipelineError
from ._device_handles import DeviceHandles
from ._memory import Buffer

vk = _vk.vkapi
ffi = _vk.ffi

_SETS_PER_POOL = 128
_BARRIER_SRC_STAGES = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT
_BARRIER_DST_STAGES = _BARRIER_SRC_STAGES | vk.VK_PIPELINE_STAGE_HOST_BIT
_barrier: Any = None


def _full_barrier() -> Any:
    """One VkMemoryBarrier for every barrier (the driver only reads it): RRDB records 709."""
    global _barrier
    if _barrier is None:
        _barrier = ffi.new(
            "VkMemoryBarrier*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                "dstAccessMask": vk.VK_ACCESS_SHADER_READ_BIT
                | vk.VK_ACCESS_SHADER_WRITE_BIT
                | vk.VK_ACCESS_TRANSFER_READ_BIT
                | vk.VK_ACCESS_TRANSFER_WRITE_BIT
                | vk.VK_ACCESS_HOST_READ_BIT,
            },
        )
    return _barrier


_BINDINGS_PER_SET = 16


class DispatchablePipeline(Protocol):
    """What a recorder needs of a pipeline (the cache's artifacts satisfy it)."""

    handle: Any
    layout: Any
    set_layout: Any

    @property
    def binding_count(self) -> int: ...

    @property
    def push_constant_size(self) -> int: ...


#: (VkBuffer, first byte, end): what a command reads or writes
_Range = tuple[Any, int, int]


def _overlap(ranges: list[_Range], others: list[_Range]) -> bool:
    """Whether a byte range of ``ranges`` meets one of ``others`` in the same VkBuffer."""
    for buffer, start, end in ranges:
        for other, other_start, other_end in others:
            # the integers first: comparing two cffi handles costs more
            if start < other_end and other_start < end and buffer == other:
                return True
    return False


class CommandRecorder:
    """Records dispatches, barriers and copies into one primary command buffer."""

    def __init__(self, device: DeviceHandles, *, one_time: bool = False) -> None:
        self.device = device
        dev = device.handle
        self._pool = _vk.api.vkCreateCommandPool(
            dev,
            vk.VkCommandPoolCreateInfo(queueFamilyIndex=device.queue_family),
            None,
        )
        device.track("command_pool", +1)
        self._descriptor_pools: list[Any] = []
        self._sets_left = 0
        alloc = vk.VkCommandBufferAllocateInfo(
            commandPool=self._pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1
        )
        self.command_buffer = _vk.api.vkAllocateCommandBuffers(dev, alloc)[0]
        flags = vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT if one_time else 0
        _vk.api.vkBeginCommandBuffer(self.command_buffer, vk.VkCommandBufferBeginInfo(flags=flags))
        self.finished = False
        self.dispatch_count = 0
        self.barrier_count = 0
        #: Put a barrier before a dispatch or copy only where it touches memory an earlier one
        #: since the last barrier wrote, or writes memory one read or wrote (see
        #: :meth:`_order`); a plan turns it on and leaves out its barrier between layers, so
        #: independent branches (inception columns, fire modules, detection heads) overlap.
        self.barriers_on_hazards = False
        #: (VkBuffer, first byte, end) read and written since the last barrier
        self._reads: list[_Range] = []
        self._writes: list[_Range] = []
        #: Seconds from submit to the host seeing the fence, for this buffer's last two runs
        #: (oldest first): what ``VulkanDevice.run`` expects the next run to take.
        self.run_times: tuple[float, ...] = ()
        #: maxComputeWorkGroupCount: a dispatch over it is undefined behaviour, never recorded.
        self._max_groups = tuple(device.info.limits.max_compute_workgroup_count)
        self._released = False

    def note_run(self, seconds: float) -> None:
        """Keep a run's time (see :attr:`run_times`)."""
        self.run_times = (*self.run_times, seconds)[-2:]

    @property
    def expected_run_s(self) -> float | None:
        """The shorter of the last two runs, None before two: one slow run (a first dispatch,
        a busy GPU) does not make the next wait sleep past its end."""
        return min(self.run_times) if len(self.run_times) == 2 else None

    def _descriptor_set(self, set_layout: Any) -> Any:
        if self._sets_left == 0:
            sizes = vk.VkDescriptorPoolSize(
                type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                descriptorCount=_SETS_PER_POOL * _BINDINGS_PER_SET,
            )
            info = vk.VkDescriptorPoolCreateInfo(
                maxSets=_SETS_PER_POOL, poolSizeCount=1, pPoolSizes=[sizes]
            )
            pool = _vk.api.vkCreateDescriptorPool(self.device.handle, info, None)
            self.device.track("descriptor_pool", +1)
            self._descriptor_pools.append(pool)
            self._sets_left = _SETS_PER_POOL
        layouts = ffi.new("VkDescriptorSetLayout[1]", [set_layout])
        info = ffi.new(
            "VkDescriptorSetAllocateInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                "descriptorPool": self._descriptor_pools[-1],
                "descriptorSetCount": 1,
                "pSetLayouts": layouts,
            },
        )
        out = ffi.new("VkDescriptorSet*")
        _vk.checked.vkAllocateDescriptorSets(self.device.handle, info, out)
        self._sets_left -= 1
        return out  # a VkDescriptorSet[1]: what vkCmdBindDescriptorSets takes

    def dispatch(
        self,
        pipeline: DispatchablePipeline,
        buffers: Sequence[Buffer],
        push: bytes,
        groups: tuple[int, int, int],
    ) -> None:
        """Bind ``buffers`` to bindings 0..n-1, push ``push`` and dispatch ``groups``.

        Raises PipelineError for a group count over the device's maxComputeWorkGroupCount
        (Vulkan leaves such a dispatch undefined: in practice a silently wrong result)."""
        limit = self._max_groups
        if groups[0] > limit[0] or groups[1] > limit[1] or groups[2] > limit[2]:
            name = getattr(pipeline, "name", "pipeline")
            raise PipelineError(
                f"dispatch of {name!r} with workgroups {tuple(groups)} exceeds the device's "
                f"maxComputeWorkGroupCount {limit}: the layer must fold or cap its dispatch"
            )
        if len(buffers) != pipeline.binding_count:
            raise ValueError(
                f"pipeline has {pipeline.binding_count} bindings, got {len(buffers)} buffers"
            )
        if len(push) != pipeline.push_constant_size:
            raise ValueError(
                f"pipeline takes {pipeline.push_constant_size} push-constant bytes, got {len(push)}"
            )
        if self.barriers_on_hazards:
            read_only: frozenset[int] = getattr(pipeline, "read_only_bindings", frozenset())
            info = getattr(pipeline, "info", None)  # buffer i goes to the i-th binding declared
            numbers = [b.binding for b in info.bindings] if info else range(len(buffers))
            read: list[_Range] = []
            written: list[_Range] = []
            for number, b in zip(numbers, buffers, strict=False):
                (read if number in read_only else written).append(
                    (b.block.buffer, b.offset, b.offset + b.size)
                )
            self._order(read, written)
        cb = self.command_buffer
        if buffers:
            self._bind_buffers(pipeline, buffers)
        _vk.checked.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle)
        if push:
            data = ffi.from_buffer(push)
            _vk.checked.vkCmdPushConstants(
                cb, pipeline.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(push), data
            )
        _vk.checked.vkCmdDispatch(cb, max(1, groups[0]), max(1, groups[1]), max(1, groups[2]))
        self.dispatch_count += 1

    def _bind_buffers(self, pipeline: DispatchablePipeline, buffers: Sequence[Buffer]) -> None:
        """Write ``buffers`` to a fresh descriptor set as bindings 0..n-1 (through the
        pipeline's update template when it has one) and bind that set."""
        cb = self.command_buffer
        sets = self._descriptor_set(pipeline.set_layout)
        dset = sets[0]
        n = len(buffers)
        infos = ffi.new(
            "VkDescriptorBufferInfo[]", [(b.vk_buffer, b.offset, b.size) for b in buffers]
        )
        template = getattr(pipeline, "update_template", None)
        if template is not None:
            _vk.checked.vkUpdateDescriptorSetWithTemplate(self.device.handle, dset, template, infos)
        else:
            writes = ffi.new("VkWriteDescriptorSet[]", n)
            for i in range(n):
                w = writes[i]
                w.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
                w.dstSet = dset
                w.dstBinding = i
                w.descriptorCount = 1
                w.descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                w.pBufferInfo = infos + i
            _vk.checked.vkUpdateDescriptorSets(self.device.handle, n, writes, 0, ffi.NULL)
        _vk.checked.vkCmdBindDescriptorSets(
            cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout, 0, 1, sets, 0, ffi.NULL
        )

    def _order(self, read: list[_Range], written: list[_Range]) -> None:
        """Barrier first if the next command reads what a command since the last barrier
        wrote, or writes what one read or wrote (read-after-write, write-after-read,
        write-after-write, by byte range of each VkBuffer); then note its ranges. A binding
        not declared read-only counts as both read and written."""
        pending = self._writes
        if _overlap(read, pending) or _overlap(written, pending) or _overlap(written, self._reads):
            self.barrier()
        self._reads += read
        self._writes += written

    def barrier(self) -> None:
        """Make every earlier shader or transfer write visible to every later read."""
        self._reads.clear()
        self._writes.clear()
        self.barrier_count += 1
        _vk.checked.vkCmdPipelineBarrier(
            self.command_buffer,
            _BARRIER_SRC_STAGES,
            _BARRIER_DST_STAGES,
            0,
            1,
            _full_barrier(),
            0,
            ffi.NULL,
            0,
            ffi.NULL,
        )

    def copy(self, src: Buffer, dst: Buffer, size: int | None = None) -> None:
        n = min(src.size, dst.size) if size is None else size
        if self.barriers_on_hazards:
            self._order(
                [(src.block.buffer, src.offset, src.offset + n)],
                [(dst.block.buffer, dst.offset, dst.offset + n)],
            )
        region = ffi.new(
            "VkBufferCopy*", {"srcOffset": src.offset, "dstOffset": dst.offset, "size": n}
        )
        _vk.checked.vkCmdCopyBuffer(self.command_buffer, src.vk_buffer, dst.vk_buffer, 1, region)

    def finish(self) -> CommandRecorder:
        if not self.finished:
            _vk.checked.vkEndCommandBuffer(self.command_buffer)
            self.finished = True
        return self

    def release(self) -> None:
        """Destroy the pools (and with them the command buffer and descriptor sets)."""
        if self._released:
            return
        self._released = True
        dev = self.device.handle
        for pool in self._descriptor_pools:
            _vk.api.vkDestroyDescriptorPool(dev, pool, None)
            self.device.track("descriptor_pool", -1)
        self._descriptor_pools.clear()
        _vk.api.vkDestroyCommandPool(dev, self._pool, None)
        self.device.track("command_pool", -1)
