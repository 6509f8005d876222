"""VulkanDevice: one logical device, its compute queue, memory, and awaitable submission.

Queue access is externally synchronised in Vulkan, so every submit takes ``_queue_lock`` (held
only for the vkQueueSubmit call). Completion is awaited by waiting on a fence in a worker thread,
so the event loop never blocks; the wait is not abandoned on cancellation, so memory a command
buffer uses is never released while the GPU still reads it.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _vk
from .._errors import GpuTimeoutError
from .._threads import outlive, run_sync
from ._command import CommandRecorder
from ._fence_timeout import DEFAULT_FENCE_TIMEOUT_S as DEFAULT_FENCE_TIMEOUT_S
from ._fence_timeout import fence_timeout_from_env
from ._host_copies import copy_bytes
from ._info import GpuInfo
from ._instance import get_default_gpu_index, get_gpu_info, instance
from ._logical_device import create_device, pick_queue_family
from ._memory import Allocator, Buffer, MemoryKind
from ._quirks import Quirks

if TYPE_CHECKING:  # numpy is imported where it is used: the device opens without it
    import numpy as np

vk = _vk.vkapi
ffi = _vk.ffi

#: How long before a run's expected end :meth:`VulkanDevice.run` starts polling its fence from
#: the event loop, and how long past it the poll goes on before a thread takes the wait over.
POLL_MAX_S = 0.002


class VulkanDevice:
    """A logical device with one compute queue. Shared per index: see ``get_gpu_device``.

    ``info`` is its :class:`GpuInfo`; ``close()`` destroys it (a device from
    ``get_gpu_device`` is closed at exit).
    """

    def __init__(self, index: int, *, quirks: Quirks | None = None) -> None:
        inst = instance()
        self.info: GpuInfo = get_gpu_info(index)
        #: The quirk flags in force; a test may pass its own to drive both paths of a quirk.
        self.quirks: Quirks = quirks or self.info.quirks
        self.index = index
        self.physical_device = inst.physical_devices[index]
        self._live: Counter[str] = Counter()
        self._live_lock = threading.Lock()
        self.queue_family = pick_queue_family(self.info)
        self.handle = create_device(self.physical_device, self.info, self.queue_family)
        self.queue = _vk.api.vkGetDeviceQueue(self.handle, self.queue_family, 0)
        self.memory_properties = _vk.api.vkGetPhysicalDeviceMemoryProperties(self.physical_device)
        self.allocator = Allocator(self)
        self._queue_lock = threading.Lock()
        #: Held around vkCreateComputePipelines on drivers flagged serialize_pipeline_creation.
        self.creation_lock = threading.Lock()
        #: Test hook: called with True before and False after each vkCreateComputePipelines.
        self.creation_probe: Callable[[bool], None] | None = None
        self._fence_lock = threading.Lock()
        self._free_fences: list[Any] = []
        #: Fences whose wait failed or timed out: maybe still pending, destroyed at close.
        self._abandoned_fences: list[Any] = []
        #: Seconds a fence wait may take before GpuTimeoutError.
        self.fence_timeout_s = fence_timeout_from_env()
        #: Whether :meth:`run` polls fences from the event loop. Not on a CPU device, whose
        #: "GPU" work runs on the same cores the poll would keep busy.
        self.poll_fences = not self.info.is_cpu
        self.submissions = 0
        self.closed = False

    # -- bookkeeping -----------------------------------------------------------------------

    def track(self, kind: str, delta: int) -> None:
        """Count live handles per kind, so tests can assert that nothing leaks."""
        with self._live_lock:
            self._live[kind] += delta

    def live_handles(self) -> dict[str, int]:
        """Vulkan handles alive now, by kind (none listed at zero): what a leak test reads."""
        with self._live_lock:
            return {k: v for k, v in self._live.items() if v}

    # -- memory ----------------------------------------------------------------------------

    def allocate(self, nbytes: int, kind: MemoryKind = MemoryKind.DEVICE) -> Buffer:
        """A buffer of ``nbytes`` from the device's allocator (released with ``release()``)."""
        return self.allocator.allocate(nbytes, kind)

    def upload_sync(self, array: np.ndarray) -> Buffer:
        """Copy ``array`` into a new device buffer (blocking; use :meth:`upload` from async)."""
        import numpy as np

        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        buf = self.allocate(max(data.nbytes, 4))
        # np.copyto, not a memoryview assignment: it lets go of the GIL for the copy (vgg16's
        # 553 MB, into mapped device memory), and it wrote 400 MB in 36-40 ms on the H100
        # against 44-78 ms
        if buf.host_visible:
            copy_bytes(np.frombuffer(buf.view(), np.uint8, data.nbytes), data)
            return buf
        staging = self.allocate(data.nbytes, MemoryKind.STAGING)
        try:
            copy_bytes(np.frombuffer(staging.view(), np.uint8, data.nbytes), data)
            rec = CommandRecorder(self, one_time=True)
            try:
                rec.copy(staging, buf, data.nbytes)
                self.run_sync(rec.finish())
            finally:
                rec.release()
        finally:
            staging.release()
        return buf

    async def upload(self, array: np.ndarray) -> Buffer:
        """:meth:`upload_sync` on a worker thread."""
        return await run_sync(self.upload_sync, array)

    def download_sync(
        self, buf: Buffer, shape: tuple[int, ...], dtype: Any = "float32"
    ) -> np.ndarray:
        """A new host array of ``shape`` and ``dtype`` read from the start of ``buf``
        (blocking; use :meth:`download` from async)."""
        import numpy as np

        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if buf.host_visible and self.allocator.device_is_host_cached:
            raw = np.frombuffer(buf.view()[:nbytes], dtype=np.uint8).copy()
            return raw.view(dtype).reshape(shape)
        readback = self.allocate(nbytes, MemoryKind.READBACK)
        try:
            rec = CommandRecorder(self, one_time=True)
            try:
                rec.copy(buf, readback, nbytes)
                self.run_sync(rec.finish())
            finally:
                rec.release()
            raw = np.frombuffer(readback.view()[:nbytes], dtype=np.uint8).copy()
        finally:
            readback.release()
        return raw.view(dtype).reshape(shape)

    async def download(
        self, buf: Buffer, shape: tuple[int, ...], dtype: Any = "float32"
    ) -> np.ndarray:
        """:meth:`download_sync` on a worker thread."""
        return await run_sync(self.download_sync, buf, shape, dtype)

    # -- submission ------------------------------------------------------------------------

    def _fence(self) -> Any:
        with self._fence_lock:
            if self._free_fences:
                return self._free_fences.pop()
        fence = _vk.api.vkCreateFence(self.handle, vk.VkFenceCreateInfo(), None)
        self.track("fence", +1)
        return fence

    def submit(self, recorder: CommandRecorder) -> Any:
        """Submit a finished recorder; returns the fence to pass to :meth:`wait`."""
        if not recorder.finished:
            raise ValueError("submit() needs a finished recorder")
        fence = self._fence()
        cbs = ffi.new("VkCommandBuffer[1]", [recorder.command_buffer])
        info = ffi.new(
            "VkSubmitInfo*",
            {
                "sType": vk.VK_STRUCTURE_TYPE_SUBMIT_INFO,
                "commandBufferCount": 1,
                "pCommandBuffers": cbs,
            },
        )
        try:
            with self._queue_lock:
                self.submissions += 1
                _vk.checked.vkQueueSubmit(self.queue, 1, info, fence)
        except BaseException:
            self._recycle(fence)  # never submitted: still unsignalled and reusable
            raise
        return fence

    def wait(self, fence: Any) -> None:
        """Block until ``fence`` signals, then recycle it.

        Raises GpuTimeoutError after ``fence_timeout_s`` (the device may still be busy: the
        fence is kept and destroyed at close, never reused while a submission may signal it).
        """
        fences = ffi.new("VkFence[1]", [fence])
        timeout_ns = int(self.fence_timeout_s * 1e9)
        signalled = False
        try:
            result = _vk.checked.vkWaitForFences(self.handle, 1, fences, 1, timeout_ns)
            if result == vk.VK_TIMEOUT:
                raise GpuTimeoutError("vkWaitForFences", self.fence_timeout_s)
            signalled = True
        finally:
            self._retire(fence, signalled)

    def _retire(self, fence: Any, signalled: bool) -> None:
        """Reset and recycle a signalled fence; keep any other until close (a submission may
        still signal it)."""
        if not signalled:
            self._abandon(fence)
            return
        try:
            _vk.checked.vkResetFences(self.handle, 1, ffi.new("VkFence[1]", [fence]))
        except BaseException:
            self._abandon(fence)
            raise
        self._recycle(fence)

    def _abandon(self, fence: Any) -> None:
        with self._fence_lock:
            self._abandoned_fences.append(fence)

    def _recycle(self, fence: Any) -> None:
        with self._fence_lock:
            self._free_fences.append(fence)

    def wait_for_submitted(self) -> None:
        """Block until everything submitted so far has run: a fence submitted with no batch
        signals once all earlier work on the queue has. Unlike vkDeviceWaitIdle this gives up
        after ``fence_timeout_s`` (GpuTimeoutError), so a hung GPU cannot block for ever."""
        fence = self._fence()
        try:
            with self._queue_lock:
                _vk.checked.vkQueueSubmit(self.queue, 0, ffi.NULL, fence)
        except BaseException:
            self._recycle(fence)
            raise
        self.wait(fence)

    def run_sync(self, recorder: CommandRecorder) -> None:
        """Submit ``recorder``'s command buffer and block until the GPU has run it."""
        self.wait(self.submit(recorder))

    async def run(self, recorder: CommandRecorder) -> None:
        """Submit and await completion without blocking the event loop.

        With :attr:`poll_fences`, a command buffer run twice before is expected to take as long
        as the shorter of those runs: the event loop sleeps until :data:`POLL_MAX_S` before
        that, then polls the fence (other tasks run between the checks) until :data:`POLL_MAX_S`
        after it; the first two runs, or one that outlasts the poll, are waited for on a
        fence-wait thread. On the H100
        the hop to that thread and back cost a sub-millisecond model 0.1-0.25 ms of its 0.6-1.1
        ms, and the process-to-process spread of its median (``results/fence_poll_h100.json``).
        """
        import asyncio

        start = time.perf_counter()
        expected = recorder.expected_run_s
        fence = self.submit(recorder)
        signalled = False
        if expected is not None and self.poll_fences:
            try:
                if expected > POLL_MAX_S:
                    await asyncio.sleep(expected - POLL_MAX_S)
                signalled = await self._poll(fence, start + expected + POLL_MAX_S)
            except asyncio.CancelledError:
                # never abandon a fence the GPU may still signal: its buffers are in use
                await outlive(run_sync(self.wait, fence, fence_wait=True))
                raise
        if not signalled:
            await run_sync(self.wait, fence, fence_wait=True)
        recorder.note_run(time.perf_counter() - start)

    async def _poll(self, fence: Any, deadline: float) -> bool:
        """Whether ``fence`` signalled before ``deadline`` (then it is recycled), checking it
        each time the event loop comes round. False leaves the fence to :meth:`wait`."""
        import asyncio

        status = _vk.checked.vkGetFenceStatus
        while True:
            try:
                signalled = status(self.handle, fence) == vk.VK_SUCCESS
            except BaseException:  # device lost: the fence is never reused
                self._retire(fence, False)
                raise
            if signalled:
                self._retire(fence, True)
                return True
            if time.perf_counter() >= deadline:
                return False
            await asyncio.sleep(0)

    # -- shutdown --------------------------------------------------------------------------

    def close(self) -> None:
        """Destroy everything this device owns, in order. Idempotent."""
        if self.closed:
            return
        self.closed = True
        _vk.checked.vkDeviceWaitIdle(self.handle)
        with self._fence_lock:
            for fence in self._free_fences + self._abandoned_fences:
                _vk.api.vkDestroyFence(self.handle, fence, None)
                self.track("fence", -1)
            self._free_fences.clear()
            self._abandoned_fences.clear()
        self.allocator.close()
        _vk.api.vkDestroyDevice(self.handle, None)

    def __repr__(self) -> str:
        return f"<VulkanDevice {self.index}: {self.info.device_name!r}>"


_devices: dict[int, VulkanDevice] = {}
_devices_lock = threading.Lock()


def get_gpu_device(index: int | None = None) -> VulkanDevice:
    """The shared VulkanDevice for ``index`` (default device when None), created once.

    Raises:
        NoDeviceError: there is no such device (or none at all: the message names the fix).
        DeviceError: the driver failed to create the device.

    Example::

        device = asyncvk.get_gpu_device(0)
        print(device.info.device_name)
    """
    i = get_default_gpu_index() if index is None else index
    with _devices_lock:
        device = _devices.get(i)
        if device is None or device.closed:
            device = VulkanDevice(i)
            _devices[i] = device
        return device


def destroy_gpu_devices() -> None:
    """Close every shared device (at exit, or in tests that check for leaks)."""
    with _devices_lock:
        for device in _devices.values():
            device.close()
        _devices.clear()


atexit.register(destroy_gpu_devices)
