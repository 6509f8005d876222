"""GroupMember: one device of a NetGroup, with a VulkanDevice, PipelineCache and Net of its
own, the load it carries (runs in flight, a moving mean of run times) and its release.

A member opens a logical device of its own rather than the process's shared one
(``get_gpu_device``): a device index given twice is then two members that fail apart, and a
member taken out can be released without touching what other code in the process runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass

from .._errors import DeviceError, GpuTimeoutError
from .._threads import run_sync
from ..cache._pipeline_cache import PipelineCache
from ..gpu._device import VulkanDevice
from ._net import Net
from ._option import Option

log = logging.getLogger("asyncvk.net")

#: How far one run moves a member's mean run time: a fifth of the way, so the mean follows a
#: device that slows down (throttling, another process on it) within a few runs, and one odd
#: run does not swing the choice.
MEAN_WEIGHT = 0.2


@dataclass(frozen=True)
class MemberStatistics:
    """One member of a :class:`NetGroup`: its device and the load it carries now.

    Example::

        for member in group.statistics():
            print(member.device, member.in_flight, member.runs_done, member.reason)
    """

    #: the member's place in the group (``devices[position]``)
    position: int
    #: the Vulkan device index (as ``get_gpu_info`` numbers them)
    device: int
    #: the device's name, "" until it is opened
    device_name: str
    #: runs sent to this member that have not ended
    in_flight: int
    #: runs this member answered
    runs_done: int
    #: a moving mean of its answered runs' times, in seconds (None before the first)
    mean_run_s: float | None
    #: whether a device failure took it out of the group: it is sent nothing more
    taken_out: bool
    #: why it was taken out (the error's type and message), None while it serves
    reason: str | None
    #: whether its Net, cache and device are released (a member taken out is, once the work
    #: submitted to its device has ended; every member is after ``aclose``, but one whose
    #: device still ran that work when the fence timeout ran out)
    released: bool


class GroupMember:
    """One device's Net and its bookkeeping; the group decides, the member counts."""

    def __init__(self, position: int, device_index: int) -> None:
        self.position = position
        self.device_index = device_index
        self.device: VulkanDevice | None = None
        self.cache: PipelineCache | None = None
        self.net: Net | None = None
        self.in_flight = 0
        self.runs_done = 0
        self.mean_run_s: float | None = None
        #: the device failure that took this member out, None while it serves
        self.failure: BaseException | None = None
        #: whether its Net, cache and device are released
        self.released = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._release_after_failure: asyncio.Task[None] | None = None

    # -- opening ---------------------------------------------------------------------------------

    async def open(self, opt: Option) -> None:
        """Open this member's device and cache on a thread (100-200 ms on a discrete GPU's
        driver), then make its Net."""
        device_index, threads = self.device_index, opt.num_compile_threads

        def open_sync() -> tuple[VulkanDevice, PipelineCache]:
            device = VulkanDevice(device_index)
            try:
                return device, PipelineCache(device, max_workers=threads)
            except BaseException:
                device.close()
                raise

        self.device, self.cache = await run_sync(open_sync)
        own = dataclasses.replace(opt, use_vulkan_compute=True, pipeline_cache=self.cache)
        self.net = Net(own)

    @property
    def serving(self) -> bool:
        """Whether runs may be sent here: opened, and not taken out."""
        return self.net is not None and self.failure is None

    @property
    def label(self) -> str:
        """How messages name this member: its device index, place and device name."""
        name = f", {self.device.info.device_name}" if self.device is not None else ""
        return f"device {self.device_index} (member {self.position}{name})"

    # -- load ------------------------------------------------------------------------------------

    def choice_key(self) -> tuple[int, float, int]:
        """Smaller is chosen first: fewest runs in flight, then the shortest mean run time (a
        member not yet measured counts as fastest, so it is measured), then its place."""
        return (self.in_flight, self.mean_run_s or 0.0, self.position)

    def run_begins(self) -> None:
        self.in_flight += 1
        self._idle.clear()

    def run_ends(self, seconds: float | None) -> None:
        """A run sent here ended; ``seconds`` is its time when it was answered, else None."""
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()
        if seconds is None:
            return
        self.runs_done += 1
        mean = self.mean_run_s
        self.mean_run_s = seconds if mean is None else mean + MEAN_WEIGHT * (seconds - mean)

    def statistics(self) -> MemberStatistics:
        failure = self.failure
        return MemberStatistics(
            position=self.position,
            device=self.device_index,
            device_name=self.device.info.device_name if self.device is not None else "",
            in_flight=self.in_flight,
            runs_done=self.runs_done,
            mean_run_s=self.mean_run_s,
            taken_out=failure is not None,
            reason=None if failure is None else f"{type(failure).__name__}: {failure}",
            released=self.released,
        )

    # -- failure and release ---------------------------------------------------------------------

    def take_out(self, error: BaseException) -> None:
        """Send nothing more here; release the Net once the runs in flight on it have ended.
        Only the first failure is kept: the runs in flight on a failed device fail too."""
        if self.failure is not None:
            return
        self.failure = error
        log.warning("NetGroup: %s taken out: %s: %s", self.label, type(error).__name__, error)
        if self.net is not None:
            model = self.net.gpu_model
            if model is not None:  # calls waiting for a plan here go elsewhere now, not later
                model.plans.refuse_waiters(
                    DeviceError(f"{self.label} was taken out: {type(error).__name__}: {error}")
                )
            if self._release_after_failure is None:
                self._release_after_failure = asyncio.create_task(self._release_logged())

    async def close(self) -> None:
        """Release this member: a serving one after flushing its cache folder, a failed one
        once its device has finished what was submitted to it (or is lost). One release runs
        at a time: a failure during ``close`` starts none of its own."""
        pending = self._release_after_failure
        if pending is None:
            pending = self._release_after_failure = asyncio.ensure_future(self._release())
        await pending
        if not self.released:  # its device still ran what it was given: one more wait
            self._release_after_failure = asyncio.ensure_future(self._release())
            await self._release_after_failure

    async def _release_logged(self) -> None:
        """``_release`` in the background: an error is logged, and ``close`` tries again."""
        try:
            await self._release()
        except Exception:
            log.exception("NetGroup: %s could not be released", self.label)

    async def _release(self) -> None:
        """Wait for the runs in flight here, then release the Net, the cache and the device.

        A failed device may still run what was submitted to it (a fence wait timed out, the
        GPU did not): freeing memory it reads is undefined behaviour, so its release waits for
        that work, within the device's fence timeout, and is left for ``close`` otherwise."""
        await self._idle.wait()
        net, cache, device = self.net, self.cache, self.device
        if self.released or net is None or cache is None or device is None:
            self.released = True
            return
        if self.failure is None:
            await net.aclose()
        else:
            try:
                await run_sync(device.wait_for_submitted)
            except GpuTimeoutError:
                log.warning("NetGroup: %s still runs submitted work: not released yet", self.label)
                return
            except DeviceError:
                pass  # lost: nothing it was given still runs
            net.close()  # on the loop, as its plans' pool and background tasks live there
        await cache.aclose()
        try:
            await run_sync(device.close)
        except DeviceError as exc:  # a lost device cannot wait for idle: its handles stay
            log.warning("NetGroup: %s did not close: %s", self.label, exc)
        self.released = True
