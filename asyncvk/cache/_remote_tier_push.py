"""The remote tier's push after load: what the store lacks, written without losing another's.

Never on the request path: this load's new SPIR-V entries are written only where absent, the
driver blob under its content hash and into the identity's set, and each value this process
refused is written over with its good value, or deleted where this process has none, while the
store still holds exactly what was refused.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .._threads import run_sync
from ..gpu._driver_cache import DriverPipelineCache, blob_holds_pipelines
from ..gpu._identity import DeviceIdentity
from ._keys import SpirvKey
from ._remote_checks import install_digests
from ._remote_store import BadValue, RemoteStore, RemoteStoreError
from ._remote_tier_link import TierLink
from ._remote_values import (
    blob_index_key,
    blob_value_key,
    encode_blob_value,
    encode_spirv_value,
    is_blob_key,
)

if TYPE_CHECKING:
    from ._pipeline_cache import PipelineCache

log = logging.getLogger("asyncvk.cache.remote")
#: An empty value: what the push finds at a key read as holding nothing, if anything.
_EMPTY = BadValue.of(b"")


def _blob_and_key(
    vk_cache: DriverPipelineCache, identity: DeviceIdentity, space: str
) -> tuple[bytes, str]:
    """A driver cache's blob and the key it is stored under ("" for an empty blob)."""
    blob = vk_cache.data()
    return blob, blob_value_key(identity, blob, space) if blob else ""


def _pushable(
    cache: PipelineCache, keys: list[SpirvKey], entries: dict[SpirvKey, bytes], signed: bool
) -> list[SpirvKey]:
    """Of ``keys``, those a reader would use: a builtin shader's only as the install compiled
    it (a reader refuses any other body), and without a key only those."""
    from ..shader._packaged import body_digest

    digests = install_digests(cache.registry, keys)
    return [
        k
        for k in keys
        if (k in digests and body_digest(entries[k]) == digests[k]) or (signed and k not in digests)
    ]


class TierPush:
    """The tier's writes: a push after load (or ``asyncvk cache push``), and its deletes."""

    def __init__(self, link: TierLink) -> None:
        self.link = link

    # -- after load ----------------------------------------------------------------------------

    async def publish(self, cache: PipelineCache) -> None:
        """Write every SPIR-V entry of ``cache`` and its driver blob that the store lacks
        (``asyncvk cache push``)."""
        self.link.wanted |= set(cache.spirv_entries())
        self.link.local_had.clear()
        await self.push(cache, new_blob=True)

    async def push(self, cache: PipelineCache, *, new_blob: bool = False) -> None:
        """Write what the store lacks: this load's new SPIR-V entries (neither found locally nor
        in the store), and the driver blob when it holds something new (``new_blob``: it does);
        write the good value over each value this load refused, or delete it where this process
        has none. Nothing to do: the store is not opened. Never raises for the store."""
        if not self.link.on or cache.closed:
            return
        entries = cache.spirv_entries()
        compiled = cache.compiled_keys()  # new even where a local copy was expected
        candidates = sorted(
            (
                k
                for k in self.link.wanted - self.link.remote_has
                if k in entries and (k not in self.link.local_had or k in compiled)
            ),
            key=self.link.name,
        )
        if candidates:
            signed, offered = self.link.secret is not None, len(candidates)
            candidates = await run_sync(_pushable, cache, candidates, entries, signed)
            if not signed and len(candidates) < offered:
                self.link.note_unsigned()
        built_new = new_blob or cache.statistics().driver_cache_misses > 0
        # the blob pushed is this one's, what was merged into it; none without a key
        vk_cache = cache.vk_cache if self.link.secret is not None else None
        identity = cache.device.info.identity
        blob, blob_key = b"", ""
        if vk_cache is not None and (built_new or candidates or self.link.bad or self.link.empty):
            blob, blob_key = await run_sync(_blob_and_key, vk_cache, identity, self.link.space)
        if blob_key in self.link.empty:  # this very blob's value is empty: written over
            self.link.bad[blob_key] = _EMPTY
        new = built_new and blob_holds_pipelines(blob)
        if not candidates and not self.link.bad and not self._blob_empties(identity) and not new:
            return
        try:
            store = await self.link.open()
            # a bad value read is known to be there: only a replace may write over it
            unknown = [k for k in candidates if self.link.name(k) not in self.link.bad]
            present = await store.exists_many([self.link.name(k) for k in unknown])
            there = set()
            for key, found in zip(unknown, present, strict=True):
                name = self.link.name(key)
                if found and name in self.link.empty:  # empty when read, or another writer's since
                    self.link.bad[name] = _EMPTY
                elif found:
                    there.add(key)
            self.link.remote_has |= there
            absent = [k for k in candidates if k not in there]
            values = await run_sync(self._seal_entries, cache, absent, entries)
            for key, value in values:
                await self._write(store, self.link.name(key), value)
                self.link.remote_has.add(key)
            if vk_cache is not None and blob:
                await self._push_blob(cache, store, vk_cache, blob, blob_key, built_new)
            await self.discard_bad(store, identity)
        except RemoteStoreError as exc:
            self.link.turn_off(str(exc))
        except Exception as exc:  # fail-open: a push never fails the caller, nor the save
            self.link.turn_off(f"push: {type(exc).__name__}: {exc}")

    def _blob_empties(self, identity: DeviceIdentity) -> list[str]:
        return [n for n in self.link.empty if is_blob_key(n, identity, self.link.space)]

    async def discard_bad(self, store: RemoteStore, identity: DeviceIdentity) -> None:
        """Delete each value this process refused and has not written over (it has no good
        value of that key: a blob another machine built, an entry not compiled here), while
        the store still holds exactly what was refused; a blob also leaves the set. So a bad
        value costs one process a miss, not every process until it expires."""
        index = blob_index_key(identity, self.link.space)
        bad = [*self.link.bad.items(), *((n, _EMPTY) for n in self._blob_empties(identity))]
        self.link.bad.clear()
        self.link.empty -= {name for name, _ in bad}
        for name, value in bad:
            blob = is_blob_key(name, identity, self.link.space)
            if await store.delete_bad(name, value, index if blob else None):
                self.link.state.add(deleted=1)
                if self.link.members is not None and name in self.link.members:
                    self.link.members.remove(name)
                log.info("remote pipeline cache: deleted the value refused at %s", name)

    def _seal_entries(
        self, cache: PipelineCache, keys: list[SpirvKey], entries: dict[SpirvKey, bytes]
    ) -> list[tuple[SpirvKey, bytes]]:
        identity = cache.device.info.identity
        sealed = []
        for key in keys:
            try:
                value = encode_spirv_value(key, entries[key], identity, self.link.secret)
            except ValueError as exc:  # not SPIR-V: the encoder refuses what a reader would
                log.warning("not pushing SPIR-V of %r: %s", key.shader, exc)
                continue
            if len(value) > self.link.settings.max_value:
                self.link.state.add(too_large=1)
                continue
            sealed.append((key, value))
        return sealed

    async def _write(self, store: RemoteStore, key: str, value: bytes) -> None:
        """One value, where the store holds none, or over the bad value this process read
        there while it is still exactly that (another writer's value since is kept)."""
        ttl = self.link.settings.ttl
        bad = self.link.bad.pop(key, None)
        self.link.empty.discard(key)
        if bad is None:
            written = await store.add(key, value, ttl)
        else:
            outcome = await store.replace_bad(key, value, ttl, bad)
            written = outcome in ("replaced", "added")
            if outcome == "replaced":
                self.link.state.add(replaced=1)
                if bad == _EMPTY:  # read as absent: a miss then, a rejection now
                    self.link.state.add(rejected=1)
                    self.link.state.rejections.append(f"{key}: an empty value")
                log.info("remote pipeline cache: replaced the value refused at %s", key)
        if written:
            self.link.state.add(pushed=1, bytes_written=len(value))

    async def _push_blob(
        self,
        cache: PipelineCache,
        store: RemoteStore,
        vk_cache: DriverPipelineCache,
        blob: bytes,
        key: str,
        built_new: bool,
    ) -> None:
        """``vk_cache``'s blob, when it holds pipelines the store's blobs may lack or is the
        content of a bad value read; then its entry in the identity's set."""
        identity = cache.device.info.identity
        index = blob_index_key(identity, self.link.space)
        if self.link.members is None:
            self.link.members = await store.newest_members(index, self.link.settings.max_blobs)
        nothing_new = key in self.link.members or (bool(self.link.members) and not built_new)
        if nothing_new and key not in self.link.bad:
            return
        try:
            key, value = await run_sync(encode_blob_value, blob, identity, self.link.secret)
        except ValueError as exc:  # a blob the reader would refuse is not written
            log.warning("not pushing the driver blob: %s", exc)
            return
        if len(value) > self.link.settings.max_value:
            self.link.state.add(too_large=1)
            return
        await self._write(store, key, value)
        # the blobs merged into this driver cache are in its blob: their entries can go. Not
        # those merged into a cache a reset replaced, nor refused ones: others still need them
        held = [m for m, into in self.link.merged.items() if into is vk_cache and m != key]
        ttl = self.link.settings.ttl
        await store.add_member(index, key, ttl, drop=held, keep=self.link.settings.max_blobs)
        self.link.members = [key]
        self.link.merged = {key: vk_cache}
