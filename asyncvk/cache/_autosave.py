"""AutoSaver: save a PipelineCache in the background only when something new was built.

Bursts coalesce: after a change the saver waits ``interval`` seconds, then writes once. Saving
runs in a worker thread, so it never delays inference on the event loop; a failed save is logged
and reported in ``last_result``, never raised. ``aclose()`` flushes a pending change.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

import anyio

from ._persist import SaveResult, save_cache
from ._safe_fs import expand_path

if TYPE_CHECKING:
    from ._pipeline_cache import PipelineCache

log = logging.getLogger("asyncvk.cache")


class AutoSaver:
    def __init__(
        self, cache: PipelineCache, path: str | os.PathLike[str], *, interval: float = 2.0
    ) -> None:
        self.cache = cache
        self.path = expand_path(path)
        self.interval = interval
        self.saves = 0
        self.last_result: SaveResult | None = None
        self._stop = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    @property
    def dirty(self) -> bool:
        return self.cache.generation != self.cache.saved_generation

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=self.interval)
            except TimeoutError:
                pass
            if self.dirty:
                await self.save_now()

    async def save_now(self) -> SaveResult:
        result = await anyio.to_thread.run_sync(save_cache, self.cache, self.path)
        self.last_result = result
        if result:
            self.saves += 1
        return result

    async def aclose(self) -> SaveResult | None:
        """Stop the loop and write any pending change."""
        self._stop.set()
        await self._task
        if self.dirty and not self.cache.closed:
            return await self.save_now()
        return self.last_result
