"""The AutoSaver's clock in a test's hands: an interval ends when the test says so, and the test
knows when the save that followed is done; no test waits on wall-clock time for a save."""

from __future__ import annotations

import asyncio

import pytest

from asyncvk.cache._autosave import AutoSaver

#: A guard against a hang (a saver that never waits again), not a timing assumption.
HANG_S = 120.0


class ManualTicks:
    """Every AutoSaver made while this patch holds waits for :meth:`tick` instead of its
    ``interval``; being stopped (``aclose``, a Net closing) still ends the wait at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._waiting: dict[AutoSaver, asyncio.Future[None]] = {}
        self._arrived = asyncio.Event()
        self.ticks = 0
        parked = self._waiting
        arrived = self._arrived

        async def tick_wait(saver: AutoSaver) -> None:
            future = asyncio.get_running_loop().create_future()
            parked[saver] = future
            arrived.set()
            stopped = asyncio.ensure_future(saver._stop.wait())
            try:
                await asyncio.wait([future, stopped], return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
                if parked.get(saver) is future:
                    del parked[saver]

        monkeypatch.setattr(AutoSaver, "_tick", tick_wait)

    async def _until_waiting(self, saver: AutoSaver) -> None:
        async with asyncio.timeout(HANG_S):
            while saver not in self._waiting:
                self._arrived.clear()
                await self._arrived.wait()

    async def tick(self, saver: AutoSaver) -> None:
        """End ``saver``'s interval; return once it waits for the next one, so whatever save
        the tick made (none when nothing was new) is done."""
        await self._until_waiting(saver)
        self._waiting.pop(saver).set_result(None)
        self.ticks += 1
        await self._until_waiting(saver)
