"""TimestampQueries: GPU timestamps written into one command buffer, read after it completes.

For profiling only (``asyncvk.net._dispatch_profile``): nothing else creates one, so a command
buffer recorded without it carries no query at all. Queries come in pools of ``POOL_QUERIES``;
each pool's reset is recorded just before its first write, and query commands on one queue run
in submission order, so every replay of the buffer resets a pool before writing it again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _vk
from .._errors import ProfilingUnsupportedError
from ._command import CommandRecorder

if TYPE_CHECKING:
    from ._device import VulkanDevice

vk = _vk.vkapi
ffi = _vk.ffi

#: Queries per VkQueryPool: two per dispatch, so a pool covers 256 dispatches.
POOL_QUERIES = 512
#: Written once everything recorded before has finished: a dispatch's begin stamp waits for the
#: work before it and its end stamp for the dispatch, so the intervals never overlap.
STAGE = vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT


def check_timestamp_support(
    valid_bits: int, period_ns: float, *, device: str, queue_family: int
) -> None:
    """Refuse a queue that cannot write timestamps (``timestampValidBits`` 0) or a device
    that gives no tick length, naming both."""
    if valid_bits <= 0:
        raise ProfilingUnsupportedError(
            f"{device}: queue family {queue_family} has timestampValidBits 0, so it cannot "
            "write GPU timestamps; dispatch profiling is not possible on this device"
        )
    if not period_ns > 0:
        raise ProfilingUnsupportedError(
            f"{device}: timestampPeriod is {period_ns}, so GPU timestamps cannot be turned "
            "into time; dispatch profiling is not possible on this device"
        )


class TimestampQueries:
    """The timestamp queries one command buffer writes; :meth:`read` them after it completed."""

    def __init__(self, device: VulkanDevice) -> None:
        self.device = device
        families = _vk.api.vkGetPhysicalDeviceQueueFamilyProperties(device.physical_device)
        valid_bits = int(families[device.queue_family].timestampValidBits)
        props = _vk.api.vkGetPhysicalDeviceProperties(device.physical_device)
        #: Nanoseconds per timestamp tick (``VkPhysicalDeviceLimits::timestampPeriod``).
        self.period_ns = float(props.limits.timestampPeriod)
        check_timestamp_support(
            valid_bits,
            self.period_ns,
            device=device.info.device_name,
            queue_family=device.queue_family,
        )
        #: The bits of a timestamp that count; a difference is taken modulo 2**valid_bits.
        self.mask = (1 << min(valid_bits, 64)) - 1
        self._pools: list[Any] = []
        self.count = 0

    def write(self, recorder: CommandRecorder) -> int:
        """Record one timestamp into ``recorder``'s command buffer; returns its query number."""
        slot = self.count % POOL_QUERIES
        if slot == 0:
            pool = _vk.api.vkCreateQueryPool(
                self.device.handle,
                vk.VkQueryPoolCreateInfo(
                    queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=POOL_QUERIES
                ),
                None,
            )
            self.device.track("query_pool", +1)
            self._pools.append(pool)
            _vk.checked.vkCmdResetQueryPool(recorder.command_buffer, pool, 0, POOL_QUERIES)
        _vk.checked.vkCmdWriteTimestamp(recorder.command_buffer, STAGE, self._pools[-1], slot)
        self.count += 1
        return self.count - 1

    def read(self) -> list[int]:
        """Every timestamp written, in ticks (call after the command buffer's fence signalled)."""
        ticks: list[int] = []
        for i, pool in enumerate(self._pools):
            n = min(POOL_QUERIES, self.count - i * POOL_QUERIES)
            data = ffi.new("uint64_t[]", n)  # bound: cffi frees it when this name dies
            flags = vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT
            _vk.checked.vkGetQueryPoolResults(self.device.handle, pool, 0, n, n * 8, data, 8, flags)
            ticks += [int(t) & self.mask for t in data]
        return ticks

    def nanoseconds(self, begin: int, end: int) -> float:
        """The time from tick ``begin`` to tick ``end`` (wrapping at the valid bits)."""
        return ((end - begin) & self.mask) * self.period_ns

    def release(self) -> None:
        """Destroy the query pools. Idempotent."""
        pools, self._pools = self._pools, []
        for pool in pools:
            _vk.api.vkDestroyQueryPool(self.device.handle, pool, None)
            self.device.track("query_pool", -1)
