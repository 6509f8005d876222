"""The plan pool on lavapipe: concurrent extractions of one shape share at most
``max_plans_per_shape`` plans, waiters are served in arrival order, a full wait queue refuses,
and what a burst took is released after it, device blocks included."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from asyncvk import Net, Option
from asyncvk.net._plan import PlanRequest
from asyncvk.net._plan_pool import PlanPool, PlanQueueFull

CUNET = Path(__file__).parent / "models" / "cunet"
#: long enough that no plan is released while a test runs, unless it says when
NEVER = 3600.0


async def _net(option: Option) -> Net:
    net = Net(option)
    await net.load_param(CUNET / "model.param")
    await net.load_model(CUNET / "model.bin")
    await net.background_builds()  # on a GPU, an adoption would renew the plans mid-test
    return net


def _pool(net: Net) -> PlanPool:
    assert net.gpu_model is not None
    return net.gpu_model.plans


async def _extract(net: Net, x: np.ndarray) -> np.ndarray:
    ex = net.create_extractor()
    ex.input("in0", x)
    return await ex.extract("out0")


async def _all_parked() -> None:
    """One turn of the loop: tasks just created run to their first wait. An extraction's way
    to its plan (a build on a worker thread, or a place in the queue) has no wait before it."""
    await asyncio.sleep(0)


async def test_a_burst_above_the_cap_makes_no_more_plans_than_the_cap() -> None:
    x0 = np.load(CUNET / "input.npy")
    inputs = [x0 * (1 + i / 100) for i in range(12)]
    async with await _net(Option(use_vulkan_compute=False)) as cpu:
        expected = [await _extract(cpu, x) for x in inputs]
    async with await _net(Option(max_plans_per_shape=3, plan_idle_seconds=NEVER)) as net:
        pool = _pool(net)
        tasks = [asyncio.create_task(_extract(net, x)) for x in inputs]
        await _all_parked()
        during = pool.statistics()
        assert (during.plans, during.waiting) == (3, 9), during
        got = await asyncio.gather(*tasks)
        for y, ref in zip(got, expected, strict=True):
            assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-3
        after = pool.statistics()
        assert (after.peak_plans, after.built, after.plans, after.idle) == (3, 3, 3, 3), after
        # the burst is over: once idle long enough, all but one plan per shape are released
        assert pool.trim_idle(asyncio.get_running_loop().time() + NEVER) == 2
        assert (pool.statistics().plans, pool.statistics().released) == (1, 2)
        np.testing.assert_array_equal(await _extract(net, inputs[0]), got[0])


async def test_waiters_get_plans_in_arrival_order_and_a_full_queue_refuses() -> None:
    x = np.load(CUNET / "input.npy")
    async with await _net(Option(max_plans_per_shape=1, max_waiting_per_shape=3)) as net:
        pool = _pool(net)
        index = net.blob_index
        request = PlanRequest.of({index["in0"]: x.shape}, [index["out0"]])
        held = await pool.acquire(request)
        order: list[str] = []

        async def use(name: str) -> np.ndarray:
            plan = await pool.acquire(request)
            order.append(name)
            try:
                return (await plan.run({index["in0"]: x[np.newaxis]}))[index["out0"]][0]
            finally:
                await pool.give_back(plan)

        tasks = [asyncio.create_task(use(name)) for name in ("a", "b", "c")]
        await _all_parked()
        assert pool.statistics().waiting == 3
        with pytest.raises(PlanQueueFull, match=r"1 plans for inputs .* 3 extractions already"):
            await pool.acquire(request)
        tasks[1].cancel()  # a waiter that leaves takes nothing with it
        await _all_parked()
        assert pool.statistics().waiting == 2
        await pool.give_back(held)
        late = asyncio.create_task(use("late"))  # arrives as a plan comes back: queues behind
        results = await asyncio.gather(tasks[0], tasks[2], late)
        assert order == ["a", "c", "late"]
        assert all(np.array_equal(r, results[0]) for r in results)
        stats = pool.statistics()
        assert (stats.plans, stats.lent, stats.waiting, stats.peak_plans) == (1, 0, 0, 1), stats


async def test_a_burst_s_device_memory_is_freed_after_it() -> None:
    """3x192x192 plans take about 20 MB each: the device memory three of them took is given
    back to the driver once two are released (on lavapipe, device memory is the process's
    own: kept, it would stay in its RSS)."""
    x = np.random.default_rng(0).standard_normal((3, 192, 192)).astype(np.float32)
    async with await _net(Option(max_plans_per_shape=3, plan_idle_seconds=NEVER)) as net:
        pool = _pool(net)
        assert net.gpu_model is not None
        allocator = net.gpu_model.device.allocator
        first = await _extract(net, x)
        one_plan = allocator.stats()["reserved_bytes"]
        got = await asyncio.gather(*[_extract(net, x) for _ in range(3)])
        assert all(np.array_equal(y, first) for y in got)
        burst = allocator.stats()["reserved_bytes"]
        assert pool.statistics().plans == 3 and burst > one_plan + 30_000_000
        assert pool.trim_idle(asyncio.get_running_loop().time() + NEVER) == 2
        assert allocator.stats()["reserved_bytes"] == one_plan
        assert np.array_equal(await _extract(net, x), first)


async def test_idle_seconds_zero_releases_down_to_the_floor_as_plans_come_back() -> None:
    x = np.load(CUNET / "input.npy")
    option = Option(max_plans_per_shape=3, idle_plans_per_shape=1, plan_idle_seconds=0)
    async with await _net(option) as net:
        await asyncio.gather(*[_extract(net, x) for _ in range(6)])
        stats = _pool(net).statistics()
        assert (stats.plans, stats.peak_plans, stats.released) == (1, 3, stats.built - 1)


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("max_plans_per_shape", 0, "max_plans_per_shape must be at least 1, got 0"),
        ("idle_plans_per_shape", 5, "idle_plans_per_shape must be from 0 to"),
        ("plan_idle_seconds", -1, "plan_idle_seconds must be 0 or more, got -1"),
        ("max_waiting_per_shape", -1, "max_waiting_per_shape must be 0 or more, got -1"),
    ],
)
async def test_bad_pool_settings_are_refused_at_load(field: str, value: int, needle: str) -> None:
    """Option refuses these when it is made (tests/test_option.py); one changed afterwards is
    refused by the pool at load."""
    option = Option()
    setattr(option, field, value)
    async with Net(option) as net:
        await net.load_param(CUNET / "model.param")
        with pytest.raises(ValueError, match=needle):
            await net.load_model(CUNET / "model.bin")


@pytest.mark.parametrize("kept", [0, 1])
async def test_a_burst_gives_its_batch_plans_back(kept: int) -> None:
    """One plan per batch size is what a burst of batches takes: idle, they are released
    (``idle_batch_plans`` keeps that many of each), while a plan of single items stays."""
    option = Option(plan_idle_seconds=0, idle_batch_plans=kept)
    async with Net(option) as net:
        await net.load_param(CUNET / "model.param")
        await net.load_model(CUNET / "model.bin")
        x = np.load(CUNET / "input.npy")
        await net.run({"in0": x})
        for n in (2, 4):
            await net.run({"in0": np.stack([x] * n)})
        batches = sorted(r.batch for r in net._plans)
    assert batches == ([1, 2, 4] if kept else [1])
