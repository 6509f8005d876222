"""Plans recorded again off the request path: once the model adopts a pipeline, extractions go
on with the old plans (still correct) while new ones are recorded on a worker thread; an old
plan is released once a newer one of its shape serves, and no waiter is left without a plan.

The model's pipelines version is raised by hand here, as an adopted background pipeline raises
it (tests/test_background_pipelines.py runs real adoptions); each renewal's recording waits for
the test's gate, so what the pool does meanwhile is seen, not raced.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import numpy as np
import pytest

from asyncvk import Net, Option
from asyncvk.net._gpu_model import GpuModel
from asyncvk.net._plan import Plan, PlanRequest
from asyncvk.net._plan_pool import PlanPool

CUNET = Path(__file__).parent / "models" / "cunet"
NEVER = 3600.0  # no plan is released for idling while a test runs


class RecordingGate:
    """Holds each recording of the pool's plans until the test lets it through."""

    def __init__(self, pool: PlanPool, *, open: bool = False) -> None:
        self._tokens = threading.Semaphore(1_000 if open else 0)
        self.calls = 0
        self.fail = False
        build: Callable[[PlanRequest], Plan] = pool._build

        def gated(request: PlanRequest) -> Plan:
            self.calls += 1
            assert self._tokens.acquire(timeout=120)
            if self.fail:
                raise RuntimeError("recording failed on purpose")
            return build(request)

        pool._build = gated

    def let_through(self, count: int = 1_000) -> None:
        self._tokens.release(count)

    async def entered(self, count: int) -> None:
        """Wait until ``count`` recordings have reached the gate (worker threads)."""
        for _ in range(12_000):
            if self.calls >= count:
                return
            await asyncio.sleep(0.005)
        raise AssertionError(f"{self.calls} recordings reached the gate, not {count}")


@pytest.fixture
async def net() -> AsyncIterator[Net]:
    net = Net(Option(max_plans_per_shape=2, plan_idle_seconds=NEVER))
    await net.load_param(CUNET / "model.param")
    await net.load_model(CUNET / "model.bin")
    await net.background_builds()  # on a GPU, real adoptions would add renewals of their own
    try:
        yield net
    finally:
        await net.aclose()


def _model(net: Net) -> GpuModel:
    assert net.gpu_model is not None
    return net.gpu_model


def _adopt(model: GpuModel) -> None:
    """What ``GpuModel._adopt`` does once a background pipeline is attached."""
    model.pipelines_version += 1
    model.plans.renew()


def _request(net: Net) -> PlanRequest:
    """The plan request an extraction of cunet's input makes."""
    index = net.blob_index
    return PlanRequest.of({index["in0"]: np.load(CUNET / "input.npy").shape}, [index["out0"]])


async def _extract(net: Net) -> np.ndarray:
    ex = net.create_extractor()
    ex.input("in0", np.load(CUNET / "input.npy"))
    return await ex.extract("out0")


async def _turns(count: int = 20) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_extractions_go_on_with_the_old_plan_until_the_new_one_lands(net: Net) -> None:
    model = _model(net)
    expected = await _extract(net)
    ((old,),) = model.plans.plans.values()
    gate = RecordingGate(model.plans)
    _adopt(model)
    await gate.entered(1)  # recording, off the request path
    # the recording is held: an extraction that waited for it would never end
    got = await asyncio.wait_for(_extract(net), 60)
    np.testing.assert_array_equal(got, expected)
    assert list(model.plans.plans.values()) == [[old]]
    gate.let_through()
    await model.plans.renewed()
    ((new,),) = model.plans.plans.values()  # the old one, idle, released as the new landed
    assert new is not old and new.pipelines_version == model.pipelines_version
    built = model.plans.statistics().built
    np.testing.assert_array_equal(await _extract(net), expected)
    stats = model.plans.statistics()
    assert (stats.built, stats.renewed, stats.released) == (built, 1, 1), stats
    assert gate.calls == 1


async def test_waiters_take_old_plans_until_enough_new_ones_have_landed(net: Net) -> None:
    model = _model(net)
    pool = model.plans
    request = _request(net)
    a, b = await pool.acquire(request), await pool.acquire(request)  # the cap: 2
    gate = RecordingGate(pool)
    _adopt(model)
    waiter = asyncio.ensure_future(pool.acquire(request))
    await _turns()
    assert not waiter.done()
    await pool.give_back(a)  # no newer plan yet: the old one goes to the waiter
    assert await waiter is a
    gate.let_through()
    await pool.renewed()
    # one new plan for each old one in use, no more: the cap's worth
    assert (gate.calls, pool.statistics().renewed) == (2, 2)
    assert pool.statistics().idle == 2
    for old in (a, b):
        await pool.give_back(old)  # newer plans serve now: the old ones are released
    (plans,) = pool.plans.values()
    assert len(plans) == 2 and all(p.pipelines_version == model.pipelines_version for p in plans)
    assert pool.statistics().released == 2


async def test_one_plan_in_use_is_replaced_by_one(net: Net) -> None:
    model = _model(net)
    pool = model.plans
    request = _request(net)
    lent = await pool.acquire(request)
    _adopt(model)
    await pool.renewed()
    assert pool.statistics().renewed == 1
    await pool.give_back(lent)
    ((new,),) = pool.plans.values()
    assert new is not lent and new.pipelines_version == model.pipelines_version


async def test_an_old_plan_goes_to_a_waiter_while_new_ones_are_too_few(net: Net) -> None:
    model = _model(net)
    pool = model.plans
    request = _request(net)
    a, b = await pool.acquire(request), await pool.acquire(request)
    gate = RecordingGate(pool)
    _adopt(model)
    gate.let_through(1)
    await gate.entered(2)  # the first new plan has landed; the second is held
    n1 = await pool.acquire(request)
    assert n1.pipelines_version == model.pipelines_version
    waiter = asyncio.ensure_future(pool.acquire(request))
    await _turns()
    await pool.give_back(a)  # one new plan of the cap's two: the old one serves the waiter
    assert await waiter is a
    gate.let_through()
    await pool.renewed()
    for plan in (a, b, n1):
        await pool.give_back(plan)
    assert len(pool.plans[request]) == 2 and pool.statistics().renewed == 2


async def test_an_old_plan_coming_back_to_waiters_is_released_once_the_new_ones_suffice(
    net: Net,
) -> None:
    model = _model(net)
    pool = model.plans
    request = _request(net)
    a, b = await pool.acquire(request), await pool.acquire(request)
    _adopt(model)
    await pool.renewed()  # two new plans, idle; a and b still lent
    n1, n2 = await pool.acquire(request), await pool.acquire(request)
    assert {n1.pipelines_version, n2.pipelines_version} == {model.pipelines_version}
    waiter = asyncio.ensure_future(pool.acquire(request))
    await _turns()
    await pool.give_back(a)  # two new plans exist: the waiter waits for one of them
    assert not waiter.done() and a not in pool.plans[request]
    await pool.give_back(n1)
    assert await waiter is n1
    for plan in (b, n1, n2):
        await pool.give_back(plan)
    assert pool.plans[request] == [n1, n2] or pool.plans[request] == [n2, n1]


async def test_a_failed_renewal_leaves_the_old_plan_serving_and_is_not_retried(net: Net) -> None:
    model = _model(net)
    expected = await _extract(net)
    ((old,),) = model.plans.plans.values()
    gate = RecordingGate(model.plans, open=True)
    gate.fail = True
    _adopt(model)
    await model.plans.renewed()
    for _ in range(3):
        np.testing.assert_array_equal(await _extract(net), expected)
    assert list(model.plans.plans.values()) == [[old]]
    assert gate.calls == 1  # once at this pipelines version
    gate.fail = False
    _adopt(model)  # a later pipeline: tried again
    await model.plans.renewed()
    assert gate.calls == 2 and model.plans.statistics().renewed == 1


async def test_a_model_released_while_a_plan_is_renewed_keeps_nothing_of_it(
    net: Net, caplog: pytest.LogCaptureFixture
) -> None:
    """The recording let through after the release reads no freed weights: it is refused."""
    caplog.set_level(logging.INFO, logger="asyncvk.net")
    model = _model(net)
    await _extract(net)
    gate = RecordingGate(model.plans)
    _adopt(model)
    await gate.entered(1)
    net.close()  # released with the recording held
    gate.let_through()
    await model.plans.renewed()
    assert model.plans.plans == {} and model.plans.statistics().renewed == 0
    assert "the model was released while a plan was to be recorded" in caplog.text


async def test_background_builds_wait_for_the_renewals(net: Net) -> None:
    model = _model(net)
    await _extract(net)
    gate = RecordingGate(model.plans)
    _adopt(model)
    settled = asyncio.ensure_future(net.background_builds())
    await _turns()
    assert not settled.done()
    gate.let_through()
    await asyncio.wait_for(settled, 60)
    assert model.plans.statistics().renewed == 1


async def test_with_idle_seconds_zero_a_renewed_plan_waits_for_the_old_one() -> None:
    """Released as soon as idle, the renewed plan would be recorded again and again while the
    old one is lent: it stays until the old one comes back."""
    async with Net(Option(max_plans_per_shape=2, plan_idle_seconds=0)) as net:
        await net.load_param(CUNET / "model.param")
        await net.load_model(CUNET / "model.bin")
        await net.background_builds()
        model = _model(net)
        pool = model.plans
        request = _request(net)
        old = await pool.acquire(request)
        _adopt(model)
        await asyncio.wait_for(pool.renewed(), 60)
        assert pool.statistics().renewed == 1
        await pool.give_back(old)
        ((new,),) = pool.plans.values()
        assert new.pipelines_version == model.pipelines_version


async def test_a_renewal_lets_go_of_the_gil_after_each_layer(
    net: Net, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inference beside a renewal waits a layer's recording for the GIL, not the
    interpreter's switch interval: the renewal's thread sleeps 0 s after each layer; a plan
    recorded on the request path does not."""
    import time

    sleeps: list[str] = []
    sleep = time.sleep

    def counted(seconds: float) -> None:
        if seconds == 0:
            sleeps.append(threading.current_thread().name)
        sleep(seconds)

    monkeypatch.setattr(time, "sleep", counted)
    model = _model(net)
    await _extract(net)  # recorded for the request
    assert sleeps == []
    _adopt(model)
    await model.plans.renewed()
    layers = sum(1 for node in net.graph.nodes if node.index in model.bound) if net.graph else 0
    assert model.plans.statistics().renewed == 1
    assert len(sleeps) >= layers - sum(1 for b in model.bound.values() if b.alias)
    assert threading.main_thread().name not in sleeps
