"""Worker threads awaited from asyncio (asyncvk._threads): real threads, real cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from asyncvk._threads import outlive, run_sync


async def loop_turns(count: int = 20) -> None:
    """Let the event loop run ``count`` times: a cancellation that nothing holds back ends its
    task within two or three, whatever the machine's speed (no wall-clock wait)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def test_result_exception_and_context_cross_the_thread() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller's")
    assert await run_sync(lambda a, b: (a + b, var.get()), 2, 3) == (5, "caller's")
    with pytest.raises(ZeroDivisionError):
        await run_sync(lambda: 1 / 0)


async def test_fence_waits_have_their_own_threads() -> None:
    def name() -> str:
        return threading.current_thread().name

    assert (await run_sync(name)).startswith("asyncvk-worker")
    assert (await run_sync(name, fence_wait=True)).startswith("asyncvk-fence")


async def test_a_cancelled_caller_waits_for_its_thread_to_end() -> None:
    """Whatever the call uses must not be freed while it runs: the cancellation waits."""
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    def blocking() -> None:
        started.set()
        release.wait(10)
        ended.set()

    task = asyncio.ensure_future(run_sync(blocking))
    await asyncio.to_thread(started.wait, 10)
    task.cancel()
    await loop_turns()
    assert not task.done(), "the cancellation went on while the thread still ran"
    task.cancel()  # a second cancellation does not cut the wait short either
    await loop_turns()
    assert not task.done()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended.is_set()


async def test_outlive_waits_through_cancellations_and_drops_the_outcome() -> None:
    release = threading.Event()

    def fails() -> None:
        release.wait(10)
        raise RuntimeError("dropped")

    work = asyncio.ensure_future(run_sync(fails))
    waiter = asyncio.ensure_future(outlive(work))
    await loop_turns()
    waiter.cancel()
    await loop_turns()
    assert not waiter.done(), "outlive returned before the work ended"
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert work.done()
