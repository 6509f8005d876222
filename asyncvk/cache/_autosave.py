"""AutoSaver: save a PipelineCache in the background only when something new was built.

Bursts coalesce: after a change the saver waits ``interval`` seconds, then writes once. Saving
runs in a worker thread, so it never delays inference on the event loop; a failed save is logged
and reported in ``last_result``, never raised. ``aclose()`` flushes a pending change.

The destination is a cache file (``PipelineCache.autosave(path)``) or any ``save`` coroutine
function, such as a Net's cache folder. Saves run one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Protocol

from .._threads import run_sync
from ._persist import SaveResult
from ._safe_fs import expand_path

log = logging.getLogger("asyncvk.cache")

SaveFunction = Callable[[], Awaitable[SaveResult]]


class SavedCache(Protocol):
    """What an AutoSaver watches and saves (a PipelineCache)."""

    saved_generation: int

    @property
    def generation(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    def save_to(self, path: str | os.PathLike[str]) -> SaveResult: ...


class AutoSaver:
    def __init__(
        self,
        cache: SavedCache,
        path: str | os.PathLike[str] | None = None,
        *,
        interval: float = 2.0,
        save: SaveFunction | None = None,
    ) -> None:
        if (path is None) == (save is None):
            raise TypeError("AutoSaver takes a path or a save function, not both or neither")
        self.cache = cache
        self.path = expand_path(path) if path is not None else None
        self.interval = interval
        self.saves = 0
        self.last_result: SaveResult | None = None
        self._save = save
        #: The cache generation the destination holds (a cache file: whatever the cache saved).
        self.saved_generation = cache.saved_generation if save is None else -1
        self._saving = asyncio.Lock()
        self._stop = asyncio.Event()
        self.loop = asyncio.get_running_loop()
        self._task = self.loop.create_task(self._run())

    @property
    def dirty(self) -> bool:
        return self.cache.generation != self.saved_generation

    def mark_dirty(self) -> None:
        """Save at the next tick even if nothing was built (a new model for the same cache)."""
        self.saved_generation = -1

    async def _run(self) -> None:
        while not self._stop.is_set():
            await self._tick()
            if self.dirty and not self.cache.closed:
                await self.save_now()

    async def _tick(self) -> None:
        """Wait ``interval`` seconds, or until stopped (tests put ticks of their own here)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), timeout=self.interval)

    async def save_now(self) -> SaveResult | None:
        """Save at once if anything is unsaved; None when there was nothing to save."""
        async with self._saving:
            if not self.dirty:
                return None
            generation = self.cache.generation
            if self._save is not None:
                result = await self._save()
            else:
                assert self.path is not None
                result = await run_sync(self.cache.save_to, self.path)
            self.last_result = result
            if result:
                self.saves += 1
                self.saved_generation = generation
            return result

    async def aclose(self) -> SaveResult | None:
        """Stop the loop and write any pending change."""
        self._stop.set()
        await self._task
        if self.dirty and not self.cache.closed:
            await self.save_now()
        return self.last_result

    def cancel(self) -> None:
        """Stop the loop without saving (a synchronous close, from any thread)."""
        if self._task.done() or self.loop.is_closed():
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is self.loop:
            self._task.cancel()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self.loop.call_soon_threadsafe(self._task.cancel)
