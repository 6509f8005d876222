"""Awaiting the GPU: the event loop runs on while a submission waits, and a fence wait that does
not end in VK_SUCCESS raises.

A submission that cannot finish on its own makes both deterministic: its command buffer waits on
a VkEvent that only the host sets (``vkCmdWaitEvents`` with ``VK_PIPELINE_STAGE_HOST_BIT``), so
the GPU is busy exactly until the test says so. No timings are asserted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
import vulkan as vk

from asyncvk import AsyncVkError
from asyncvk.gpu import CommandRecorder, VulkanDevice

ffi, lib = vk.ffi, vk.lib
#: How long a broken wait may hold the loop before a thread opens the gate for it (a guard
#: against hanging, not a measurement: the assertions count who opened it).
RESCUE_S = 20.0


def _short_fence_timeout(device: VulkanDevice) -> None:
    """Private hook: make the device's fence waits give up at once."""
    device.fence_timeout_s = 0.0


class HostGate:
    """A VkEvent set from the host; a recorder that waits on it holds the queue until opened."""

    def __init__(self, device: VulkanDevice) -> None:
        self.device = device
        info = ffi.new("VkEventCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_EVENT_CREATE_INFO})
        out = ffi.new("VkEvent*")
        assert lib.vkCreateEvent(device.handle, info, ffi.NULL, out) == vk.VK_SUCCESS
        self.event = out[0]
        self.opened_by: list[str] = []
        self._lock = threading.Lock()

    def recorder(self) -> CommandRecorder:
        """A finished one-time recorder whose only command waits for this gate."""
        rec = CommandRecorder(self.device, one_time=True)
        events = ffi.new("VkEvent[1]", [self.event])
        lib.vkCmdWaitEvents(
            rec.command_buffer,
            1,
            events,
            vk.VK_PIPELINE_STAGE_HOST_BIT,
            vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            0,
            ffi.NULL,
            0,
            ffi.NULL,
            0,
            ffi.NULL,
        )
        return rec.finish()

    def open(self, by: str) -> None:
        with self._lock:
            self.opened_by.append(by)
            if len(self.opened_by) == 1:
                assert lib.vkSetEvent(self.device.handle, self.event) == vk.VK_SUCCESS

    def destroy(self) -> None:
        """After the queue is idle (the event may not be destroyed while a wait uses it)."""
        lib.vkDestroyEvent(self.device.handle, self.event, ffi.NULL)


@pytest.fixture
def gate(device: VulkanDevice) -> Iterator[HostGate]:
    gate = HostGate(device)
    yield gate
    gate.open("teardown")
    lib.vkDeviceWaitIdle(device.handle)
    gate.destroy()


async def test_the_event_loop_runs_while_a_submission_waits(
    device: VulkanDevice, gate: HostGate
) -> None:
    """Another coroutine ticks while ``device.run`` awaits the fence, and it is that coroutine
    which lets the GPU finish: a wait that held the loop would need the rescue thread."""
    rec = gate.recorder()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        for _ in range(5):
            await asyncio.sleep(0)
            ticks += 1
        gate.open("the loop")

    rescue = threading.Timer(RESCUE_S, gate.open, args=("the rescue thread",))
    rescue.start()
    try:
        task = asyncio.create_task(ticker())
        await device.run(rec)
        ticks_when_done = ticks
        await task
    finally:
        rescue.cancel()
        rec.release()
    assert gate.opened_by[0] == "the loop", gate.opened_by
    assert ticks_when_done == 5


def test_a_fence_wait_that_times_out_raises() -> None:
    """vkWaitForFences returning VK_TIMEOUT (not an error code) must not pass for success."""
    device = VulkanDevice(0)
    gate = HostGate(device)
    rec = gate.recorder()
    try:
        fence = device.submit(rec)
        _short_fence_timeout(device)
        with pytest.raises(AsyncVkError, match="vkWaitForFences"):
            device.wait(fence)
    finally:
        gate.open("the test")
        lib.vkDeviceWaitIdle(device.handle)
        rec.release()
        gate.destroy()
        device.close()
