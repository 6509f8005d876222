"""ModelCache: what a Net's loads do with the pipeline cache beyond building from it.

The cache folder's file for the model is opened at load, saved in the background once the
first requests had the machine to themselves, and saved again after new builds; the remote
tier is read before the builds and pushed to after them; both report their state. A Net holds
one ModelCache for its lifetime and runs the model; this object owns the cache's lifecycle.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from ..cache._autosave import AutoSaver
from ..cache._persist import SaveResult
from ..cache._pipeline_cache import PipelineCache
from ._cache_folder import ModelCacheFolder
from ._gpu_model import GpuModel, Prefetch
from ._model_source import ModelSource
from ._option import Option

if TYPE_CHECKING:  # imported only with a remote cache: start-up without one is unchanged
    from ..cache._remote_tier import RemoteTier

#: Seconds after a load before the cache folder's save starts (a flush starts it at once): the
#: first requests after a load do not share the machine with it.
SAVE_AFTER_LOAD_S = 0.5


class ModelCache:
    """One Net's cache folder, autosave and remote tier, across its loads."""

    def __init__(self, opt: Option) -> None:
        self.opt = opt
        #: What the managed cache folder did at the last load ({"loaded": bool, ...}).
        self.status: dict[str, Any] | None = None
        #: The folder's file for this model, when it may be written.
        self.folder: ModelCacheFolder | None = None
        #: Saves the folder after load and whenever something new is built since.
        self.autosaver: AutoSaver | None = None
        #: The save after the last load, until it ran.
        self.pending_save: asyncio.Future[SaveResult | None] | None = None
        self._save_due = asyncio.Event()
        self._cache: PipelineCache | None = None
        #: The remote cache tier (``Option.remote_cache``), made at the first load.
        self.remote: RemoteTier | None = None
        self._remote_resolved = False
        #: The push after the last load, until it ran.
        self.pending_push: asyncio.Future[None] | None = None

    async def before_load(self) -> None:
        """The previous load's save (now) and push finish before a new load starts."""
        if self.pending_save is not None:
            self._save_due.set()
            pending_save, self.pending_save = self.pending_save, None
            await pending_save
        if self.pending_push is not None:
            pending, self.pending_push = self.pending_push, None
            await pending

    async def open_folder(
        self, cache: PipelineCache, param_source: ModelSource | None, model_source: ModelSource
    ) -> None:
        """With ``cache_dir`` and ``graph_key`` set, load this key's file for this device."""
        opt = self.opt
        self.folder = None
        if not (opt.cache_dir and opt.graph_key) or param_source is None:
            return
        folder = await ModelCacheFolder.open(
            opt.cache_dir, opt.graph_key, cache, param_source, model_source
        )
        self.status = folder.status
        if folder.writable:  # a read-only folder or cache served; nothing is saved
            self.folder = folder

    def remote_tier(self) -> RemoteTier | None:
        """The remote tier ``Option.remote_cache`` names (ValueError for a malformed URL)."""
        if not self._remote_resolved:
            from ..cache._remote_url import configured_remote_url  # os only: no client

            if configured_remote_url(self.opt.remote_cache)[0]:
                from ..cache._remote_tier import remote_tier_for

                self.remote = remote_tier_for(self.opt.remote_cache, self.opt.remote_cache_key)
            self._remote_resolved = True
        return self.remote

    def prefetch(self, cache: PipelineCache) -> Prefetch | None:
        """What fills ``cache`` from the remote tier before the pipelines are requested."""
        remote = self.remote_tier()
        return None if remote is None else lambda specs: remote.fetch(cache, specs)

    def after_load(self, cache: PipelineCache, gpu_model: GpuModel) -> None:
        """Save the folder (in the background, soon) and push to the remote tier once the
        background builds are done."""
        self._start_autosave(cache)
        remote = self.remote
        if remote is not None:  # after load (and its background builds), beside requests
            self.pending_push = asyncio.ensure_future(_push_when_built(remote, cache, gpu_model))

    def _start_autosave(self, cache: PipelineCache) -> None:
        if self.folder is None:
            return
        self._cache = cache
        saver = self.autosaver
        if saver is None or saver.cache is not cache or saver.loop.is_closed():
            if saver is not None:
                saver.cancel()
            saver = self.autosaver = AutoSaver(
                cache, save=self._save_to_folder, interval=self.opt.autosave_interval
            )
        saver.mark_dirty()  # this model's file, even if nothing was built
        self._save_due = asyncio.Event()
        self.pending_save = asyncio.ensure_future(_save_after_load(saver, self._save_due))

    async def _save_to_folder(self) -> SaveResult:
        folder, cache = self.folder, self._cache
        if folder is None or cache is None or not self.opt.graph_key:
            return SaveResult(False, "no writable cache folder")
        return await folder.save(cache)

    async def flush(self, cache: PipelineCache | None, gpu_model: GpuModel | None) -> None:
        """Wait for the background save (and save anything newer), then for the push: the
        local save never depends on the push."""
        try:
            if self.pending_save is not None:
                self._save_due.set()
                await self.pending_save
                self.pending_save = None
            if self.autosaver is not None and cache is not None and not cache.closed:
                await self.autosaver.save_now()
        finally:
            if self.pending_push is not None:
                if gpu_model is not None:  # the push waits for them: now
                    gpu_model.build_background_now()
                pending, self.pending_push = self.pending_push, None
                await pending

    async def aclose(self) -> None:
        """After a flush: the autosaver's last save, then the remote tier's connections."""
        if self.autosaver is not None:
            with contextlib.suppress(Exception):  # a cache save never fails the caller
                await self.autosaver.aclose()
        if self.remote is not None:
            await self.remote.aclose()

    def cancel(self) -> None:
        """Stop what is pending without saving more (``aclose`` flushed it first)."""
        if self.autosaver is not None:
            self.autosaver.cancel()
        if self.pending_push is not None:
            self.pending_push.cancel()
        if self.pending_save is not None:
            self.pending_save.cancel()

    def remote_report(self) -> dict[str, Any] | None:
        """The remote cache's counters and state (shared by the process), None without one."""
        return None if self.remote is None else self.remote.report()


async def _push_when_built(remote: RemoteTier, cache: PipelineCache, gpu_model: GpuModel) -> None:
    await gpu_model.settled(now=False)  # in their own time (CPU devices: after a first output)
    await remote.push(cache)


async def _save_after_load(saver: AutoSaver, due: asyncio.Event) -> SaveResult | None:
    """The folder's save after a load, once the first requests had the machine to themselves:
    ``SAVE_AFTER_LOAD_S`` later, or at once when a flush asks. It hashes every weight (the
    model's fingerprint) and merges the folder's file: on the H100 it ran beside the first
    inference of a warm start from a remote cache."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(due.wait(), SAVE_AFTER_LOAD_S)
    return await saver.save_now()
