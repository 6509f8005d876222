"""Awaiting the GPU: the event loop runs on while a submission waits, and a fence wait that does
not end in VK_SUCCESS raises.

A submission that cannot finish on its own makes both deterministic: its command buffer waits on
a VkEvent that only the host sets (``vkCmdWaitEvents`` with ``VK_PIPELINE_STAGE_HOST_BIT``), so
the GPU is busy exactly until the test says so. No timings are asserted.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
import vulkan as vk

from asyncvk import AsyncVkError
from asyncvk.gpu import CommandRecorder, VulkanDevice, _device

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


class _CountedWaits:
    """Counts the device's blocking fence waits (the thread path of ``device.run``) and keeps
    the fences its submissions took."""

    def __init__(self, device: VulkanDevice, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.fences: list[object] = []
        wait, submit = device.wait, device.submit

        def counted(fence: object) -> None:
            self.calls += 1
            wait(fence)

        def kept(rec: CommandRecorder) -> object:
            fence = submit(rec)
            self.fences.append(fence)
            return fence

        monkeypatch.setattr(device, "wait", counted)
        monkeypatch.setattr(device, "submit", kept)


class _Sleeps:
    """The durations ``device.run`` asks the event loop to sleep (turns of 0 left out): how long
    it waits before polling is read from what it asks, not from a wall clock."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.asked: list[float] = []
        sleep = asyncio.sleep

        async def recorded(delay: float, result: object = None) -> object:
            if delay > 0:
                self.asked.append(delay)
            return await sleep(delay, result)

        monkeypatch.setattr(asyncio, "sleep", recorded)


async def _open_after_ticks(gate: HostGate, ticks: int) -> None:
    for _ in range(ticks):
        await asyncio.sleep(0)
    gate.open("the loop")


def _gated_run(device: VulkanDevice, *run_times: float) -> tuple[HostGate, CommandRecorder]:
    """A gate and a recorder that waits on it, as if its earlier runs took ``run_times``."""
    gate = HostGate(device)
    rec = gate.recorder()
    for seconds in run_times:
        rec.note_run(seconds)
    return gate, rec


async def _run_opened_by_the_loop(
    device: VulkanDevice, gate: HostGate, rec: CommandRecorder
) -> None:
    """``device.run(rec)`` while a coroutine opens the gate after a few loop turns (a rescue
    thread opens it if the loop is held); the gate and recorder are freed after."""
    rescue = threading.Timer(RESCUE_S, gate.open, args=("the rescue thread",))
    rescue.start()
    try:
        opener = asyncio.create_task(_open_after_ticks(gate, 5))
        await device.run(rec)
        await opener
    finally:
        rescue.cancel()
        lib.vkDeviceWaitIdle(device.handle)
        rec.release()
        gate.destroy()
    assert gate.opened_by[0] == "the loop", gate.opened_by


async def test_a_run_is_polled_from_the_loop(
    device: VulkanDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A buffer run twice before is polled from the event loop, not waited for on a thread,
    whether its runs were short (polled at once) or long (the loop sleeps first, as long as the
    shorter run less POLL_MAX_S): the loop keeps running, no blocking wait happens, the fence
    is recycled and the run's time is kept."""
    monkeypatch.setattr(device, "poll_fences", True)
    monkeypatch.setattr(_device, "POLL_MAX_S", RESCUE_S)  # a poll that cannot run out
    waits = _CountedWaits(device, monkeypatch)
    sleeps = _Sleeps(monkeypatch)
    # short: polled at once; long: 40 ms asleep before the poll (the shorter run less
    # POLL_MAX_S; the longer would be 5 s)
    for earlier, asleep in (((1e-6, 1e-6), []), ((RESCUE_S + 5.0, RESCUE_S + 0.04), [0.04])):
        gate, rec = _gated_run(device, *earlier)
        sleeps.asked.clear()
        start = time.perf_counter()
        await _run_opened_by_the_loop(device, gate, rec)
        took = time.perf_counter() - start
        assert waits.calls == 0
        assert waits.fences[-1] in device._free_fences  # reset, back for the next submit
        assert rec.run_times[0] == earlier[1] and rec.run_times[1] <= took
        assert sleeps.asked == pytest.approx(asleep)


async def test_a_run_waits_on_a_thread_when_not_polled(
    device: VulkanDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run, a second (one slow first run, as a first dispatch can be, must not make it
    sleep), a poll that runs out, and a device that does not poll (a CPU device's default):
    the wait goes to a thread, once each, and the loop still runs."""
    waits = _CountedWaits(device, monkeypatch)
    assert device.poll_fences is not device.info.is_cpu
    monkeypatch.setattr(device, "poll_fences", True)
    sleeps = _Sleeps(monkeypatch)
    await _run_opened_by_the_loop(device, *_gated_run(device))
    await _run_opened_by_the_loop(device, *_gated_run(device, RESCUE_S))
    assert sleeps.asked == []  # no sleep on one sample
    monkeypatch.setattr(_device, "POLL_MAX_S", 0.0)
    await _run_opened_by_the_loop(device, *_gated_run(device, 1e-9, 1e-9))  # out at once
    monkeypatch.setattr(device, "poll_fences", False)
    await _run_opened_by_the_loop(device, *_gated_run(device, 1e-6, 1e-6))
    assert waits.calls == 4


async def test_a_run_cancelled_while_polling_waits_for_the_gpu(
    device: VulkanDevice, gate: HostGate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelling a polled run does not abandon a fence the GPU may still signal: the
    cancellation is raised only once the submission is done, and the fence is recycled."""
    monkeypatch.setattr(device, "poll_fences", True)
    monkeypatch.setattr(_device, "POLL_MAX_S", RESCUE_S)
    rec = gate.recorder()
    rec.note_run(1e-6)
    rec.note_run(1e-6)
    waits = _CountedWaits(device, monkeypatch)
    rescue = threading.Timer(RESCUE_S, gate.open, args=("the rescue thread",))
    rescue.start()
    try:
        run = asyncio.create_task(device.run(rec))
        await asyncio.sleep(0)
        await asyncio.sleep(0)  # the run is polling now
        run.cancel()
        for _ in range(5):
            await asyncio.sleep(0)
        assert not run.done()  # still waiting for the GPU
        gate.open("the loop")
        with pytest.raises(asyncio.CancelledError):
            await run
    finally:
        rescue.cancel()
        rec.release()
    assert gate.opened_by[0] == "the loop", gate.opened_by
    assert waits.calls == 1  # handed to a thread, which waited for the GPU
    assert waits.fences[0] in device._free_fences
