"""NetGroup: one model on several devices behind one ``run``.

lavapipe is the one device here, so each group takes device 0 twice: two members, each with a
logical device, cache and Net of its own. A member's device is made to fail for real: a command
buffer that waits on a host-set event (``HostGate``) holds its queue, so the Net's next fence
wait runs past the device's (shortened) fence timeout and raises GpuTimeoutError. No timing is
asserted: the gate never opens on its own, and the run-time tests use an injected clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import pytest
from test_gpu_submit import HostGate

import asyncvk
from asyncvk import DeviceError, GpuTimeoutError, InputError, NetGroup, NoDeviceError, Option
from asyncvk.gpu import VulkanDevice, get_gpu_count

pytestmark = pytest.mark.skipif(get_gpu_count() == 0, reason="no Vulkan device")

MODEL = Path(__file__).parent / "models" / "cunet"
IMAGE = np.load(MODEL / "input.npy")
#: plans idle this long would be released: never within a test (a timed-out run's plan is
#: still pending on its gated device and must outlive the gate)
OPTION = Option(plan_idle_seconds=600, max_plans_per_shape=4)
#: a guard against hanging, not a measurement
HANG_S = 30.0


async def loaded_group(
    devices: list[int] | None = None,
    opt: Option = OPTION,
    clock: Callable[[], float] | None = None,
) -> NetGroup:
    kwargs = {} if clock is None else {"clock": clock}
    group = NetGroup([0, 0] if devices is None else devices, opt, **kwargs)
    await group.load_param(MODEL / "model.param")
    with (MODEL / "model.bin").open("rb") as weights:  # a file object is read once for all
        await group.load_model(weights)
    return group


async def single_net_answer() -> np.ndarray:
    async with asyncvk.Net() as net:
        await net.load_param(MODEL / "model.param")
        await net.load_model(MODEL / "model.bin")
        return (await net.run({"in0": IMAGE}))["out0"]


def loads(group: NetGroup) -> list[tuple[int, int]]:
    """(in flight, runs done) of each member."""
    return [(s.in_flight, s.runs_done) for s in group.statistics()]


@asynccontextmanager
async def held(device: VulkanDevice, fence_timeout_s: float) -> AsyncIterator[None]:
    """The device's queue is held by a gated submission, and its fence waits give up after
    ``fence_timeout_s``: every run on it fails with GpuTimeoutError. On exit the gate opens
    and everything queued behind it runs."""
    gate = HostGate(device)
    recorder = gate.recorder()
    fence = device.submit(recorder)
    device.fence_timeout_s = fence_timeout_s
    try:
        yield
    finally:
        gate.open("the test")
        device.fence_timeout_s = HANG_S
        device.wait(fence)
        device.wait_for_submitted()
        recorder.release()
        gate.destroy()


async def release_attempts_ended(caplog: pytest.LogCaptureFixture, count: int) -> None:
    """Until ``count`` members taken out have tried their release while still gated."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_S
    while sum("not released yet" in r.getMessage() for r in caplog.records) < count:
        assert loop.time() < deadline, caplog.text
        await asyncio.sleep(0.01)


async def test_concurrent_runs_spread_over_members_and_match_a_single_net() -> None:
    expected = await single_net_answer()
    group = await loaded_group()
    try:
        first, second = group.nets
        assert first.device is not second.device and first.cache is not second.cache
        assert group.devices == (0, 0) and group.input_names == ["in0"]
        tasks = [asyncio.create_task(group.run({"in0": IMAGE}, iter(["out0"]))) for _ in range(8)]
        await asyncio.sleep(0)  # every call has chosen its member, none has ended
        assert loads(group) == [(4, 0), (4, 0)]
        assert repr(group) == "<NetGroup [devices 0, 0: 2 serving, 0 taken out | 8 runs in flight]>"
        answers = await asyncio.gather(*tasks)
        assert loads(group) == [(0, 4), (0, 4)]
        for answer in answers:
            assert list(answer) == ["out0"]
            np.testing.assert_allclose(answer["out0"], expected, rtol=1e-4, atol=1e-4)
    finally:
        await group.aclose()
    assert all(s.released for s in group.statistics()) and all(n.closed for n in group.nets)
    assert first.device.closed and second.device.closed
    assert repr(group) == "<NetGroup [devices 0, 0: 2 serving, 0 taken out | closed]>"


class StepClock:
    """Each run reads the clock at its start and its end: it lasts ``step`` seconds."""

    def __init__(self) -> None:
        self.now = 0.0
        self.step = 0.0
        self._started = False

    def __call__(self) -> float:
        if self._started:
            self.now += self.step
        self._started = not self._started
        return self.now


async def test_when_members_are_idle_the_faster_measured_one_gets_the_call() -> None:
    clock = StepClock()
    group = await loaded_group(clock=clock)
    try:

        async def run(seconds: float) -> None:
            clock.step = seconds
            await group.run({"in0": IMAGE})

        await run(1.0)  # both unmeasured: the first member
        await run(0.1)  # the second, not yet measured, counts as fastest
        assert [s.mean_run_s for s in group.statistics()] == pytest.approx([1.0, 0.1])
        for _ in range(5):
            await run(0.1)
        assert loads(group) == [(0, 1), (0, 6)]
        await run(5.0)  # the second slows down: its mean moves a fifth of the way, past 1 s
        assert group.statistics()[1].mean_run_s == pytest.approx(0.1 + 0.2 * 4.9)
        await run(1.0)
        assert loads(group) == [(0, 2), (0, 7)]
    finally:
        await group.aclose()


async def test_a_member_whose_device_fails_mid_run_is_taken_out_and_every_call_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    expected = await single_net_answer()
    group = await loaded_group()
    failing = group.nets[0].device
    assert failing is not None
    try:
        with caplog.at_level(logging.WARNING, logger="asyncvk.net"):
            async with held(failing, fence_timeout_s=0.5):
                calls = [group.run({"in0": IMAGE}) for _ in range(8)]
                answers = await asyncio.wait_for(asyncio.gather(*calls), HANG_S)
                for answer in answers:
                    np.testing.assert_allclose(answer["out0"], expected, rtol=1e-4, atol=1e-4)
                out, kept = group.statistics()
                assert out.taken_out and not kept.taken_out
                assert out.reason is not None and "GpuTimeoutError" in out.reason
                assert "vkWaitForFences" in out.reason
                assert (out.runs_done, kept.runs_done) == (0, 8)
                # its release waits for the work queued on its device, which the gate holds
                await release_attempts_ended(caplog, 1)
                assert not group.statistics()[0].released and not group.nets[0].closed
            name = group.statistics()[0].device_name
            assert f"device 0 (member 0, {name})" in caplog.text and "taken out" in caplog.text
            answer = await group.run({"in0": IMAGE})  # the other member still serves
            np.testing.assert_allclose(answer["out0"], expected, rtol=1e-4, atol=1e-4)
            assert loads(group) == [(0, 0), (0, 9)]
    finally:
        await group.aclose()
    assert all(s.released for s in group.statistics()) and failing.closed


async def test_with_every_member_taken_out_a_call_raises_naming_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    group = await loaded_group()
    first, second = (net.device for net in group.nets)
    assert first is not None and second is not None
    try:
        with caplog.at_level(logging.WARNING, logger="asyncvk.net"):
            async with held(first, 0.2), held(second, 0.2):
                with pytest.raises(DeviceError) as raised:
                    await asyncio.wait_for(group.run({"in0": IMAGE}), HANG_S)
                await release_attempts_ended(caplog, 2)
        message = str(raised.value)
        assert type(raised.value) is DeviceError
        assert isinstance(raised.value.__cause__, GpuTimeoutError)
        assert "no device of the NetGroup is left" in message
        name = group.statistics()[0].device_name
        for member in (f"device 0 (member 0, {name})", f"device 0 (member 1, {name})"):
            assert member in message
        assert message.count("GpuTimeoutError: vkWaitForFences") == 2
        assert all(s.taken_out for s in group.statistics())
        with pytest.raises(DeviceError, match="no device of the NetGroup is left"):
            await group.run({"in0": IMAGE})
    finally:
        await group.aclose()
    assert all(s.released for s in group.statistics())


async def test_a_bad_input_raises_at_once_and_keeps_the_member() -> None:
    group = await loaded_group()
    try:
        with pytest.raises(InputError, match="nope"):
            await group.run({"nope": IMAGE})
        with pytest.raises(InputError, match="cannot take inputs"):
            await group.run({"in0": np.zeros((7, 5, 5, 5, 5), np.float32)})
        with pytest.raises(InputError, match="nope"):
            await group.run({"in0": IMAGE}, ["nope"])
        assert not any(s.taken_out for s in group.statistics())
        assert loads(group) == [(0, 0), (0, 0)]
        assert "out0" in await group.run({"in0": IMAGE})
    finally:
        await group.aclose()


async def test_each_member_saves_its_device_file_in_the_cache_folder(tmp_path: Path) -> None:
    opt = Option(cache_dir=tmp_path, graph_key="cunet")
    group = await loaded_group(opt=opt)
    await group.aclose()
    saved = {net.cache_status["saved"] for net in group.nets if net.cache_status}
    assert len(saved) == 1  # one file for this device identity, both members merged into it
    again = await loaded_group(opt=opt)
    try:
        assert all(net.cache_status and net.cache_status["loaded"] for net in again.nets)
    finally:
        await again.aclose()


async def test_bad_arguments_are_refused_naming_what_is_wrong() -> None:
    count = get_gpu_count()
    assert NetGroup("all").devices == tuple(range(count))
    with pytest.raises(NoDeviceError, match=rf"devices\[1\] is {count}, past"):
        NetGroup([0, count])
    with pytest.raises(ValueError, match="devices is empty"):
        NetGroup([])
    with pytest.raises(ValueError, match='"all" or indices'):
        NetGroup("every")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"devices\[0\] must be an int"):
        NetGroup([True])
    with pytest.raises(TypeError, match="opt must be an Option"):
        NetGroup([0], {})  # type: ignore[arg-type]
    with asyncvk.PipelineCache() as cache:
        with pytest.raises(ValueError, match="pipeline_cache must be None"):
            NetGroup([0], Option(pipeline_cache=cache))
    with pytest.raises(ValueError, match="vulkan_device must be None"):
        NetGroup([0], Option(vulkan_device=0))
    with pytest.raises(ValueError, match="use_vulkan_compute=False"):
        NetGroup([0], Option(use_vulkan_compute=False))
    group = NetGroup([0])
    with pytest.raises(RuntimeError, match="load_model must finish"):
        await group.run({"in0": IMAGE})
    with pytest.raises(asyncvk.ModelFormatError, match="load_param must be called"):
        await group.load_model(MODEL / "model.bin")
    await group.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await group.load_param(MODEL / "model.param")


async def test_a_timed_out_run_s_plan_is_never_lent_again_and_waiters_go_elsewhere() -> None:
    """Each member may hold one plan: the failed member's timed-out plan is set aside (the GPU
    may still run it), and the calls that waited for a plan there are sent to the other member
    at once, not after a fence timeout each."""
    opt = Option(plan_idle_seconds=600, max_plans_per_shape=1)
    group = await loaded_group(opt=opt)
    expected = await single_net_answer()
    try:
        await group.run({"in0": IMAGE})  # a plan on member 0, idle, for the next call
        failing = group.nets[0]
        assert failing.device is not None and failing.gpu_model is not None
        pool = failing.gpu_model.plans
        ((first,),) = pool.plans.values()
        async with held(failing.device, 0.5):
            calls = [asyncio.ensure_future(group.run({"in0": IMAGE})) for _ in range(4)]
            answers = await asyncio.wait_for(asyncio.gather(*calls), HANG_S)
            for answer in answers:
                np.testing.assert_allclose(answer["out0"], expected, rtol=1e-4, atol=1e-4)
            assert pool.plans == {}  # set aside, not idle: nothing lends it again
            assert first in pool._abandoned
            out, kept = group.statistics()
            assert out.taken_out and (out.runs_done, kept.runs_done) == (1, 4)
    finally:
        await group.aclose()
    assert all(s.released for s in group.statistics())


async def test_taking_a_member_out_fails_the_calls_waiting_for_its_plans() -> None:
    from asyncvk.net._plan import PlanRequest

    group = await loaded_group(opt=Option(plan_idle_seconds=600, max_plans_per_shape=1))
    try:
        net = group.nets[0]
        assert net.gpu_model is not None
        pool = net.gpu_model.plans
        index = net.blob_index
        request = PlanRequest.of({index["in0"]: IMAGE.shape}, [index["out0"]])
        lent = await pool.acquire(request)  # the member's one plan
        waiter = asyncio.ensure_future(pool.acquire(request))
        await asyncio.sleep(0)
        assert pool.statistics().waiting == 1
        group._members[0].take_out(DeviceError("failed on purpose"))
        with pytest.raises(DeviceError, match=r"taken out: DeviceError: failed on purpose"):
            await asyncio.wait_for(waiter, HANG_S)  # at once: no fence timeout of its own
        await pool.give_back(lent)
    finally:
        await group.aclose()
