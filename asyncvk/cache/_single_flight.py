"""SingleFlight: one producer per key, any number of waiters, failures not cached.

The decision (found, joined, or mine to produce) is taken under one lock with no blocking
work inside and no await between lookup and insert (STYLE.md rule 6); the producer then runs
outside the lock, and every waiter shares its ``concurrent.futures.Future``.
"""

from __future__ import annotations

import asyncio
import enum
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

_V = TypeVar("_V")


class Role(enum.Enum):
    """What :meth:`SingleFlight.join_or_start` made of a request."""

    FOUND = "found"  # ``lookup`` had it: the future is already done
    JOINED = "joined"  # another caller is producing it: the future is shared
    MINE = "mine"  # the caller must call :meth:`SingleFlight.produce`


class SingleFlight(Generic[_V]):
    """A map of keys to the futures of their running producers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._running: dict[Hashable, Future[_V]] = {}

    def __len__(self) -> int:
        with self.lock:
            return len(self._running)

    def join_or_start(
        self, key: Hashable, lookup: Callable[[], _V | None]
    ) -> tuple[Future[_V], Role]:
        """A done future if ``lookup`` finds it, the running one's, or a new one to produce."""
        with self.lock:
            found = lookup()
            if found is not None:
                done: Future[_V] = Future()
                done.set_result(found)
                return done, Role.FOUND
            running = self._running.get(key)
            if running is not None:
                return running, Role.JOINED
            future: Future[_V] = Future()
            self._running[key] = future
            return future, Role.MINE

    def produce(self, key: Hashable, future: Future[_V], build: Callable[[], _V]) -> None:
        """Run ``build`` and settle ``future``; the key is free again before waiters wake."""
        try:
            result = build()
        except BaseException as exc:
            with self.lock:
                self._running.pop(key, None)
            future.set_exception(exc)
        else:
            with self.lock:
                self._running.pop(key, None)
            future.set_result(result)


async def await_shared(future: Future[_V]) -> _V:
    """Await a shared build; cancelling this waiter leaves the build running for the others.

    The inner future's outcome is always retrieved, so a build that fails after its waiter was
    cancelled is not logged as "exception was never retrieved".
    """
    wrapped = asyncio.wrap_future(future)
    wrapped.add_done_callback(_retrieve)
    return await asyncio.shield(wrapped)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
