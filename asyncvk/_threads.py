"""Blocking calls awaited from asyncio on worker threads.

This is what ``anyio.to_thread.run_sync`` did here, with the same rule on cancellation, but
without importing anyio's asyncio backend on the way to a first result: that import (sockets,
streams, task groups) cost 20-25 ms of every process's start on the H100 and about 50 ms on a
2-core lavapipe machine (``-X importtime``, 2026-11-23), where nothing else here needs it.

The rule: a thread cannot be interrupted, so a cancelled caller still waits for its call to end
before the cancellation goes on; nothing the call uses (a buffer, a fence, a file) is freed under
it.

asyncio is imported in the coroutines, which only run once it is loaded: the CLI's device
thread imports this module (through ``gpu._device``) and must not wait for asyncio's 50 ms of
imports (ssl among them, on the H100), which the main thread makes beside it.
"""

from __future__ import annotations

import contextvars
import functools
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

#: Threads for file reads, weight uploads, plan builds, CPU layers and saves: enough that a
#: server's concurrent requests do not queue behind each other (anyio's default was 40 too).
WORKER_THREADS = 40
#: Threads that only wait on GPU fences, apart from the workers, so that many requests in
#: flight never starve a load or a save of threads.
FENCE_WAIT_THREADS = 64

_lock = threading.Lock()
_pools: dict[str, ThreadPoolExecutor] = {}


def thread_pool(name: str, size: int) -> ThreadPoolExecutor:
    """The process-wide pool ``name`` of ``size`` threads (for work split over threads that
    lets go of the GIL, such as large copies)."""
    return _pool(name, size)


def _pool(name: str, size: int) -> ThreadPoolExecutor:
    """The process-wide pool ``name``, created on first use (threads start only when needed)."""
    with _lock:
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = ThreadPoolExecutor(size, thread_name_prefix=f"asyncvk-{name}")
        return pool


async def run_sync(func: Callable[..., T], *args: Any, fence_wait: bool = False) -> T:
    """``func(*args)`` on a worker thread (a fence-wait thread with ``fence_wait``), awaited.

    The caller's context variables are seen by ``func``. If the caller is cancelled, it waits
    for ``func`` to return and then raises ``CancelledError``; ``func``'s own outcome is dropped.
    """
    import asyncio

    pool = _pool("fence", FENCE_WAIT_THREADS) if fence_wait else _pool("worker", WORKER_THREADS)
    context = contextvars.copy_context()
    call = functools.partial(context.run, func, *args)
    future = asyncio.get_running_loop().run_in_executor(pool, call)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await outlive(future)
        raise


async def outlive(awaitable: Awaitable[Any]) -> None:
    """Wait until ``awaitable`` (a future or task) has finished, however often the caller is
    cancelled meanwhile; its outcome is dropped. A cancellation that came during the wait is
    raised once it has finished."""
    import asyncio

    future = asyncio.ensure_future(awaitable)
    cancelled = False
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            cancelled = cancelled or not future.done()  # ours, not its own end
        except Exception:  # its own failure: dropped, the caller is told of another
            continue
    if not future.cancelled():
        future.exception()  # mark it retrieved: the outcome is deliberately dropped
    if cancelled:
        raise asyncio.CancelledError
