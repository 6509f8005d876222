"""PlanRenewals: plans recorded again off the request path once the model adopts pipelines.

A background pipeline (the GEMM convolution, Winograd's passes) is adopted while plans recorded
with its stand-in are in use. Those plans stay correct (the stand-ins stay held), only slower,
so they are lent on while a plan with the new pipelines is recorded on a worker thread; the pool
swaps it in when it lands. Recording a 1,000-layer model's plan takes tens of milliseconds,
which an inference on the request path would otherwise wait for each time a pipeline came.

One renewal runs per shape at a time, recording at the model's newest pipelines each pass, and
goes on while the pool says one is needed (pipelines adopted meanwhile, or more plans of the
shape still old). One that fails is logged and not tried again for that pipelines version: the
old plans go on serving.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from .._threads import outlive, run_sync

log = logging.getLogger("asyncvk.net")

#: set on a worker thread while it records a renewal (see :func:`yields_to_requests`)
_renewing = threading.local()


def yields_to_requests() -> bool:
    """Whether this thread records a plan off the request path: it then lets go of the GIL
    after each layer (``time.sleep(0)``), so that the event loop's inferences meanwhile wait
    a layer's recording for it, not CPython's 5 ms switch interval (on the H200 an RRDB
    inference beside a renewal took 23-32 ms against 7)."""
    return getattr(_renewing, "active", False)


Key = TypeVar("Key", bound=Hashable)
Made = TypeVar("Made")


class PlanRenewals(Generic[Key, Made]):
    """Renewal tasks by key: ``build`` records (on a worker thread), ``needed`` says whether a
    key wants another pass, ``land`` hands a recorded plan to the pool (which then owns it),
    ``discard`` releases one the pool can no longer take."""

    def __init__(
        self,
        *,
        build: Callable[[Key], Made],
        needed: Callable[[Key], bool],
        land: Callable[[Key, Made], bool],
        discard: Callable[[Made], None],
        version: Callable[[], int],
    ) -> None:
        self._build = build
        self._needed = needed
        self._land = land
        self._discard = discard
        self._version = version
        self._tasks: dict[Key, asyncio.Task[None]] = {}
        self._failed: dict[Key, int] = {}  # key -> the pipelines version a renewal failed at
        self.renewed = 0  #: plans recorded by renewals and landed

    @property
    def running(self) -> int:
        """Renewals under way."""
        return len(self._tasks)

    def start(self, key: Key) -> None:
        """Renew ``key``'s plans unless a renewal of it runs (it checks again when done) or
        one failed at this pipelines version."""
        if key in self._tasks or self._failed.get(key) == self._version():
            return
        if self._needed(key):
            self._tasks[key] = asyncio.ensure_future(self._renew(key))

    async def _renew(self, key: Key) -> None:
        try:
            while self._needed(key):
                version = self._version()
                started = time.perf_counter()
                build = asyncio.ensure_future(run_sync(self._build_yielding, key))
                try:
                    await outlive(build)  # a thread cannot be stopped: its plan is not lost
                except asyncio.CancelledError:
                    if build.exception() is None:
                        self._discard(build.result())
                    raise
                try:
                    made = build.result()
                except Exception as exc:
                    self._failed[key] = version
                    log.info("plan for %s not recorded again (the old one serves on): %s", key, exc)
                    return
                if not self._land(key, made):
                    self._discard(made)
                    return
                self.renewed += 1
                log.debug(
                    "plan for %s recorded again at version %d in %.1f ms",
                    key,
                    version,
                    (time.perf_counter() - started) * 1000,
                )
        finally:
            del self._tasks[key]

    def _build_yielding(self, key: Key) -> Made:
        _renewing.active = True
        try:
            return self._build(key)
        finally:
            _renewing.active = False

    async def wait(self) -> None:
        """Return once no renewal runs (those that one's landing starts included)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))
