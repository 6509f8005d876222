"""The remote tier's reads at load: what the store holds that the local cache lacks, adopted.

Before any build, :meth:`TierReads.fetch` reads the SPIR-V entries a model needs that the
local cache is missing, and this device's driver blobs, in two round trips; every value is
judged as a cache file is (:mod:`._remote_checks`), and what passes is adopted into the
pipeline cache. What a read found (present, refused, empty) is noted for the push after load.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

from .._errors import AsyncVkError
from .._threads import run_sync
from ._keys import SpirvKey
from ._remote_checks import ReadVerdict, install_digests, judge_values, spirv_label
from ._remote_store import ReadBudget, RemoteStoreError
from ._remote_tier_link import TierLink
from ._remote_values import blob_index_key, is_blob_key
from ._spec import PipelineSpec

if TYPE_CHECKING:
    from ._pipeline_cache import PipelineCache

log = logging.getLogger("asyncvk.cache.remote")


def model_spirv_keys(cache: PipelineCache, specs: Iterable[PipelineSpec]) -> set[SpirvKey]:
    """The SPIR-V keys building ``specs`` needs (as ``request_many`` will compute them)."""
    info = cache.device.info
    return {
        cache.spirv_key(spec.shader, spec.options.supported_on(info))
        for spec in specs
        if spec.spirv is None
    }


def _source_hashes(cache: PipelineCache, keys: Iterable[SpirvKey]) -> dict[str, int]:
    """The current source hash of each shader ``keys`` name, one this build has: not every
    shader's, whose shape variants alone took 8 ms of a warm load on lavapipe's machine."""
    registry = cache.registry
    return {k.shader: registry.get(k.shader).source_hash for k in keys if k.shader in registry}


class TierReads:
    """The tier's reads: a load's fetch of what it needs, checked and adopted."""

    def __init__(self, link: TierLink) -> None:
        self.link = link

    # -- load --------------------------------------------------------------------------------

    async def fetch(self, cache: PipelineCache, specs: Iterable[PipelineSpec]) -> None:
        """Adopt what the store holds that building ``specs`` needs and the local cache lacks.

        Never raises for the store or its contents; returns before any build starts.
        """
        keys = model_spirv_keys(cache, specs)
        self.link.wanted |= keys
        if not self.link.on:
            return
        have = cache.spirv_entries()
        self.link.local_had |= {k for k in keys if k in have}
        missing = sorted((k for k in keys if k not in have), key=self.link.name)
        if not missing:
            # the local cache has every entry: the store is not even opened. Its driver blob
            # may hold no pipelines (lavapipe's is a bare header), which alone is no reason
            return
        # What the install's SPIR-V folder holds (a file whose checksum passes) is local too:
        # not read from the store, nor pushed to it unless a build compiled it after all (a
        # body that failed its later checks). The driver blobs are still read: a cold machine
        # with the folder wants them.
        packaged = {k for k in missing if cache.packaged_holds(k)}
        self.link.local_had |= packaged
        unread = [k for k in missing if k not in packaged]
        want_blob = cache.vk_cache is not None
        if unread or want_blob:
            await self.read(cache, unread, want_blob)

    async def read(self, cache: PipelineCache, keys: list[SpirvKey], want_blob: bool) -> None:
        """Read ``keys`` (and the identity's driver blobs), check them, adopt what passes.

        Without a signing key only the keys whose body the install names are read (the rest
        could not be verified), and no driver blob. All values together are read up to
        ``max_read`` bytes, each up to ``max_value``: the store checks both before it reads."""
        identity = cache.device.info.identity
        digests = await run_sync(install_digests, cache.registry, keys) if keys else {}
        if self.link.secret is None:
            if want_blob or len(digests) < len(keys):
                self.link.note_unsigned()
            keys, want_blob = [k for k in keys if k in digests], False
        if not keys and not want_blob:
            return
        names, limit = [self.link.name(k) for k in keys], self.link.settings.max_value
        budget = ReadBudget(self.link.settings.max_read)
        try:
            store = await self.link.open()
            if want_blob:  # one round trip for the entries and the blobs' list, one for the blobs
                index = blob_index_key(identity, self.link.space)
                values, listed = await store.get_with_newest(
                    names, limit, budget, index, self.link.settings.max_blobs
                )
                self.link.members = listed
                members = [m for m in listed if is_blob_key(m, identity, self.link.space)]
                blob_values = await store.get_many(members, limit, budget)
            else:
                listed, members, blob_values = [], [], []
                values = await store.get_many(names, limit, budget)
        except RemoteStoreError as exc:
            self.link.turn_off(str(exc))
            return
        for name in listed:  # never read: whoever can write the set could list any key
            if name not in members:
                self.link.reject(f"driver blob {name!r}", "not a driver blob key of this device")
        verdict = await run_sync(
            partial(
                judge_values,
                keys,
                values,
                members,
                blob_values,
                identity=identity,
                secret=self.link.secret,
                source_hashes=_source_hashes(cache, keys),
                digests=digests,
                limit=limit,
            )
        )
        refused = cache.add_spirv_entries(verdict.spirv)
        if refused:
            self._refused_by_cache(verdict, refused)
        self._apply(verdict)
        for member, blob in verdict.blobs:
            into = cache.vk_cache  # before merging: a reset meanwhile only keeps more listed
            try:
                merged = cache.merge_driver_blob(blob)
            except AsyncVkError as exc:
                self.link.reject(f"driver blob {member}", f"the driver refused it: {exc}")
                continue
            if not merged or into is None:  # it broke a pipeline in this process: not merged
                self.link.state.add(misses=1)
                continue
            self.link.merged[member] = into
            self.link.state.add(hits=1)

    def _refused_by_cache(self, verdict: ReadVerdict, refused: list[str]) -> None:
        """Entries the cache refused to adopt (its line names each): bad values like any."""
        for key in list(verdict.spirv):
            label = spirv_label(key)
            line = next((r for r in refused if r.startswith(f"{label}:")), None)
            if line is None:
                continue
            del verdict.spirv[key]
            verdict.present.discard(key)
            name = self.link.name(key)
            verdict.good.discard(name)
            verdict.bad[name] = verdict.adopted[key]
            verdict.rejected.append((label, line[len(label) + 2 :]))

    def _apply(self, verdict: ReadVerdict) -> None:
        """Count what a read found, and note what the push must not write, or may replace."""
        misses = verdict.absent + verdict.unread
        self.link.state.add(hits=len(verdict.spirv), misses=misses, bytes_read=verdict.bytes_read)
        for what, why in verdict.rejected:
            self.link.reject(what, why)
        if verdict.unread:
            line = (
                f"{verdict.unread} values not read: this load's max_read "
                f"({self.link.settings.max_read} bytes) was spent"
            )
            self.link.state.rejections.append(line)
            log.warning("remote pipeline cache: %s", line)
        self.link.remote_has |= verdict.present
        for key in verdict.good | verdict.empty:
            self.link.bad.pop(key, None)
        self.link.empty = (self.link.empty - verdict.good - set(verdict.bad)) | verdict.empty
        self.link.bad.update(verdict.bad)
