"""The remote tier: a shared store behind the local pipeline cache, so a fleet pays one cold build.

At load, after the local cache (file or folder) is in, the SPIR-V entries a model needs that
are still missing, and the driver blobs of this device identity, are read from the store in two
round trips on one connection (nothing missing: the store is not opened, its client not
imported), checked as a cache file is (``_remote_values``), and adopted; the local cache's next
save writes them to disk. After load, what the store lacks is pushed in the background (never
on the request path).

Fail-open: the first connection error, timeout or server error turns the tier off for the rest
of the process (one warning) and the model loads without it; a value that fails a check is a
miss with a reason, never used. Counters are kept per URL for the whole process, for
``/metrics`` and ``--json``.

Two writers never lose each other's work: SPIR-V entries are written only where absent (one
key holds one content), and each driver blob is its own value under its content hash, added to
a per-identity set; a writer removes from that set only the blobs its pushed blob holds (merged
into the driver cache whose blob it is: not those a driver-cache reset dropped). A value this
process refused is replaced by its push, and only while it still holds the bytes refused.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from .._errors import AsyncVkError
from .._threads import run_sync
from ..gpu._driver_cache import DriverPipelineCache, blob_holds_pipelines
from ..gpu._identity import DeviceIdentity
from ._keys import SpirvKey
from ._remote_checks import ReadVerdict, judge_values
from ._remote_state import remote_state
from ._remote_store import (
    BadValue,
    RemoteSettings,
    RemoteStore,
    RemoteStoreError,
    configured_remote_url,
    connect_store,
    parse_remote_url,
)
from ._remote_values import (
    blob_index_key,
    blob_value_key,
    encode_blob_value,
    encode_spirv_value,
    parse_spirv_value_key,
    spirv_pattern,
    spirv_value_key,
)
from ._spec import PipelineSpec

if TYPE_CHECKING:
    from ._pipeline_cache import PipelineCache

log = logging.getLogger("asyncvk.cache.remote")

KEY_VARIABLE = "ASYNCVK_REMOTE_CACHE_KEY"


def resolve_secret(secret: str | bytes | None) -> bytes | None:
    """The signing key: the one given, else ``ASYNCVK_REMOTE_CACHE_KEY``; None when neither."""
    if secret is None:
        secret = os.environ.get(KEY_VARIABLE) or None
    if isinstance(secret, str):
        secret = secret.encode()
    return secret or None


def remote_tier_for(url: str | None, secret: str | bytes | None = None) -> RemoteTier | None:
    """The tier ``url`` names (None: ``ASYNCVK_REMOTE_CACHE``; empty: no remote tier).

    Raises ValueError for a malformed URL, naming where it came from.
    """
    url, where = configured_remote_url(url)
    if not url:
        return None
    return RemoteTier(parse_remote_url(url, where=where), resolve_secret(secret))


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


def _blob_and_key(vk_cache: DriverPipelineCache, identity: DeviceIdentity) -> tuple[bytes, str]:
    """A driver cache's blob and the key it is stored under ("" for an empty blob)."""
    blob = vk_cache.data()
    return blob, blob_value_key(identity, blob) if blob else ""


class RemoteTier:
    """One Net's use of a remote cache: its store connection (opened on first need, on the
    running event loop) and what this load found there. The switch and counters are the
    process's (:func:`remote_state`)."""

    def __init__(self, settings: RemoteSettings, secret: bytes | None = None) -> None:
        self.settings = settings
        self.secret = secret
        self.state = remote_state(settings.display)
        self._store: RemoteStore | None = None
        #: made on the running loop at the first open: two tasks opening at once share a store
        self._open_lock: asyncio.Lock | None = None
        #: SPIR-V keys the loaded models need, and those the store is known to hold
        self._wanted: set[SpirvKey] = set()
        self._remote_has: set[SpirvKey] = set()
        #: of those, the keys the local cache already held at load: not pushed after load
        self._local_had: set[SpirvKey] = set()
        #: blob keys read from the identity's set (None: not read yet)
        self._members: list[str] | None = None
        #: blob key -> the driver cache it was merged into (a reset replaces that cache)
        self._merged: dict[str, DriverPipelineCache] = {}
        #: store key -> the value read there that failed a check, for the push to replace
        self._bad: dict[str, BadValue] = {}

    @property
    def on(self) -> bool:
        return self.state.off_reason is None

    def report(self) -> dict[str, Any]:
        return {**self.state.report(), "signed": self.secret is not None}

    async def _open(self) -> RemoteStore:
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:  # a second opener waits, or it would leak a connection
            if self._store is None:
                self._store = await connect_store(self.settings)
            return self._store

    def _turn_off(self, reason: str) -> None:
        state = self.state
        if state.off_reason is None:  # one error per URL and process: the tier is off after it
            state.add(errors=1)
            state.off_reason = reason
            log.warning(
                "remote pipeline cache turned off for this process, loading goes on without it: %s",
                reason,
            )

    def _reject(self, what: str, reason: str) -> None:
        self.state.add(misses=1, rejected=1)
        self.state.rejections.append(f"{what}: {reason}")
        log.warning("remote pipeline cache: %s not used: %s", what, reason)

    # -- load --------------------------------------------------------------------------------

    async def fetch(self, cache: PipelineCache, specs: Iterable[PipelineSpec]) -> None:
        """Adopt what the store holds that building ``specs`` needs and the local cache lacks.

        Never raises for the store or its contents; returns before any build starts.
        """
        keys = model_spirv_keys(cache, specs)
        self._wanted |= keys
        if not self.on:
            return
        have = cache.spirv_entries()
        self._local_had |= {k for k in keys if k in have}
        missing = sorted((k for k in keys if k not in have), key=spirv_value_key)
        if not missing:
            # the local cache has every entry: the store is not even opened. Its driver blob
            # may hold no pipelines (lavapipe's is a bare header), which alone is no reason
            return
        # What the install's SPIR-V folder holds (a file whose checksum passes) is local too:
        # not read from the store, nor pushed to it unless a build compiled it after all (a
        # body that failed its later checks). The driver blobs are still read: a cold machine
        # with the folder wants them.
        packaged = {k for k in missing if cache.packaged_holds(k)}
        self._local_had |= packaged
        unread = [k for k in missing if k not in packaged]
        want_blob = cache.vk_cache is not None
        if unread or want_blob:
            await self._read(cache, unread, want_blob)

    async def _read(self, cache: PipelineCache, keys: list[SpirvKey], want_blob: bool) -> None:
        """Read ``keys`` (and the identity's driver blobs), check them, adopt what passes."""
        identity = cache.device.info.identity
        try:
            store = await self._open()
            names, limit = [spirv_value_key(k) for k in keys], self.settings.max_value
            if want_blob:  # one round trip for the entries and the blobs' list, one for the blobs
                index = blob_index_key(identity)
                values, members = await store.get_with_newest(
                    names, limit, index, self.settings.max_blobs
                )
                self._members = members
                blob_values = await store.get_many(members, limit)
            else:
                values, members, blob_values = await store.get_many(names, limit), [], []
        except RemoteStoreError as exc:
            self._turn_off(str(exc))
            return
        verdict = await run_sync(
            partial(
                judge_values,
                keys,
                values,
                members,
                blob_values,
                identity=identity,
                secret=self.secret,
                source_hashes=_source_hashes(cache, keys),
                limit=self.settings.max_value,
            )
        )
        self._apply(verdict)
        cache.add_spirv_entries(verdict.spirv)
        for member, blob in verdict.blobs:
            into = cache.vk_cache  # before merging: a reset meanwhile only keeps more listed
            try:
                merged = cache.merge_driver_blob(blob)
            except AsyncVkError as exc:
                self._reject(f"driver blob {member}", f"the driver refused it: {exc}")
                continue
            if not merged or into is None:  # it broke a pipeline in this process: not merged
                self.state.add(misses=1)
                continue
            self._merged[member] = into
            self.state.add(hits=1)

    def _apply(self, verdict: ReadVerdict) -> None:
        """Count what a read found, and note what the push must not write, or may replace."""
        self.state.add(
            hits=len(verdict.spirv), misses=verdict.absent, bytes_read=verdict.bytes_read
        )
        for what, why in verdict.rejected:
            self._reject(what, why)
        self._remote_has |= verdict.present
        for key in verdict.good:
            self._bad.pop(key, None)
        self._bad.update(verdict.bad)

    async def pull(self, cache: PipelineCache) -> None:
        """Adopt every SPIR-V entry the store holds for this device's macros, and its driver
        blobs (``asyncvk cache pull``)."""
        if not self.on:
            return
        try:
            names = await (await self._open()).scan(spirv_pattern(cache.device_macro_hash))
        except RemoteStoreError as exc:
            self._turn_off(str(exc))
            return
        keys = [k for k in map(parse_spirv_value_key, names) if k is not None]
        await self._read(cache, keys, cache.vk_cache is not None)

    # -- after load ----------------------------------------------------------------------------

    async def publish(self, cache: PipelineCache) -> None:
        """Write every SPIR-V entry of ``cache`` and its driver blob that the store lacks
        (``asyncvk cache push``)."""
        self._wanted |= set(cache.spirv_entries())
        self._local_had.clear()
        await self.push(cache, new_blob=True)

    async def push(self, cache: PipelineCache, *, new_blob: bool = False) -> None:
        """Write what the store lacks: this load's new SPIR-V entries (neither found locally nor
        in the store), and the driver blob when it holds something new (``new_blob``: it does).
        Nothing new: the store is not opened. Never raises for the store."""
        if not self.on or cache.closed:
            return
        entries = cache.spirv_entries()
        compiled = cache.compiled_keys()  # new even where a local copy was expected
        candidates = sorted(
            (
                k
                for k in self._wanted - self._remote_has
                if k in entries and (k not in self._local_had or k in compiled)
            ),
            key=spirv_value_key,
        )
        built_new = new_blob or cache.statistics().driver_cache_misses > 0
        vk_cache = cache.vk_cache  # the blob pushed is this one's: what was merged into it
        blob, blob_key = b"", ""
        if vk_cache is not None and (built_new or candidates or self._bad):
            blob, blob_key = await run_sync(_blob_and_key, vk_cache, cache.device.info.identity)
        repair = blob_key in self._bad  # a bad value of this very content: replaced
        if not candidates and not repair and not (built_new and blob_holds_pipelines(blob)):
            return
        try:
            store = await self._open()
            # a bad value read is known to be there: only a replace may write over it
            unknown = [k for k in candidates if spirv_value_key(k) not in self._bad]
            present = await store.exists_many([spirv_value_key(k) for k in unknown])
            there = {k for k, found in zip(unknown, present, strict=True) if found}
            self._remote_has |= there
            absent = [k for k in candidates if k not in there]
            values = await run_sync(self._seal_entries, cache, absent, entries)
            for key, value in values:
                await self._write(store, spirv_value_key(key), value)
                self._remote_has.add(key)
            if vk_cache is not None and blob:
                await self._push_blob(cache, store, vk_cache, blob, blob_key, built_new)
        except RemoteStoreError as exc:
            self._turn_off(str(exc))
        except Exception as exc:  # fail-open: a push never fails the caller, nor the save
            self._turn_off(f"push: {type(exc).__name__}: {exc}")

    def _seal_entries(
        self, cache: PipelineCache, keys: list[SpirvKey], entries: dict[SpirvKey, bytes]
    ) -> list[tuple[SpirvKey, bytes]]:
        identity = cache.device.info.identity
        sealed = []
        for key in keys:
            try:
                value = encode_spirv_value(key, entries[key], identity, self.secret)
            except ValueError as exc:  # not SPIR-V: the encoder refuses what a reader would
                log.warning("not pushing SPIR-V of %r: %s", key.shader, exc)
                continue
            if len(value) > self.settings.max_value:
                self.state.add(too_large=1)
                continue
            sealed.append((key, value))
        return sealed

    async def _write(self, store: RemoteStore, key: str, value: bytes) -> None:
        """One value, where the store holds none, or over the bad value this process read
        there while it is still exactly that (another writer's value since is kept)."""
        ttl = self.settings.ttl
        bad = self._bad.pop(key, None)
        if bad is None:
            written = await store.add(key, value, ttl)
        else:
            outcome = await store.replace_bad(key, value, ttl, bad)
            written = outcome != "kept"
            if outcome == "replaced":
                self.state.add(replaced=1)
                log.info("remote pipeline cache: replaced the value refused at %s", key)
        if written:
            self.state.add(pushed=1, bytes_written=len(value))

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
        index = blob_index_key(identity)
        if self._members is None:
            self._members = await store.newest_members(index, self.settings.max_blobs)
        nothing_new = key in self._members or (bool(self._members) and not built_new)
        if nothing_new and key not in self._bad:
            return
        try:
            key, value = await run_sync(encode_blob_value, blob, identity, self.secret)
        except ValueError as exc:  # a blob the reader would refuse is not written
            log.warning("not pushing the driver blob: %s", exc)
            return
        if len(value) > self.settings.max_value:
            self.state.add(too_large=1)
            return
        await self._write(store, key, value)
        # the blobs merged into this driver cache are in its blob: their entries can go. Not
        # those merged into a cache a reset replaced, nor refused ones: others still need them
        held = [m for m, into in self._merged.items() if into is vk_cache and m != key]
        ttl = self.settings.ttl
        await store.add_member(index, key, ttl, drop=held, keep=self.settings.max_blobs)
        self._members = [key]
        self._merged = {key: vk_cache}

    async def aclose(self) -> None:
        store, self._store = self._store, None
        if store is not None:
            await store.aclose()
