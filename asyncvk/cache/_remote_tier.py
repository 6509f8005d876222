"""The remote tier: a shared store behind the local pipeline cache, so a fleet pays one cold build.

At load, after the local cache (file or folder) is in, the SPIR-V entries a model needs that
are still missing, and the driver blobs of this device identity, are read from the store in two
round trips on one connection (nothing missing: the store is not opened, its client not
imported), checked as a cache file is (``_remote_values``), and adopted; the local cache's next
save writes them to disk. After load, what the store lacks is pushed in the background (never
on the request path).

What reaches the driver is what this process can verify. With a signing key, every value by
its tag (values live in the key's own namespace). Without one nothing can be verified but a
builtin shader's SPIR-V, which must be the body the install compiled: only those are read and
written, never a driver blob nor other SPIR-V (said once, in the status and the log, with the
fix).

Fail-open: the first connection error, timeout or server error turns the tier off for the rest
of the process (one warning) and the model loads without it; a value that fails a check is a
miss with a reason, never used, and a bad value of its own key only: the push writes the good
value over it where this process has one, and deletes it where not. Counters are kept per URL
for the whole process, for ``/metrics`` and ``--json``.

Two writers never lose each other's work: SPIR-V entries are written only where absent (one
key holds one content), and each driver blob is its own value under its content hash, added to
a per-identity set; a writer removes from that set only the blobs its pushed blob holds (merged
into the driver cache whose blob it is: not those a driver-cache reset dropped). A value this
process refused is replaced or deleted by it only while the store still holds the bytes
refused, in the namespace of its own key.
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
from ._remote_checks import ReadVerdict, install_digests, judge_values, spirv_label
from ._remote_connect import connect_store
from ._remote_state import remote_state
from ._remote_store import (
    BadValue,
    ReadBudget,
    RemoteSettings,
    RemoteStore,
    RemoteStoreError,
    configured_remote_url,
    parse_remote_url,
)
from ._remote_values import (
    blob_index_key,
    blob_value_key,
    encode_blob_value,
    encode_spirv_value,
    is_blob_key,
    key_space,
    parse_spirv_value_key,
    spirv_pattern,
    spirv_value_key,
)
from ._spec import PipelineSpec

if TYPE_CHECKING:
    from ._pipeline_cache import PipelineCache

log = logging.getLogger("asyncvk.cache.remote")

KEY_VARIABLE = "ASYNCVK_REMOTE_CACHE_KEY"
#: Said once per URL and process by a tier without a signing key.
UNSIGNED_NOTICE = (
    "no signing key: driver blobs, and SPIR-V other than a builtin shader's as the install "
    "compiled it, are neither read from the store nor written to it (nothing could verify "
    f"them); set {KEY_VARIABLE} (or Option(remote_cache_key=...)) to the same secret on every "
    "machine to share them"
)
#: An empty value: what the push finds at a key read as holding nothing, if anything.
_EMPTY = BadValue.of(b"")


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


class RemoteTier:
    """One Net's use of a remote cache: its store connection (opened on first need, on the
    running event loop) and what this load found there. The switch and counters are the
    process's (:func:`remote_state`)."""

    def __init__(self, settings: RemoteSettings, secret: bytes | None = None) -> None:
        self.settings = settings
        self.secret = secret
        #: the namespace of this key's values (``unsigned`` without one)
        self.space = key_space(secret)
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
        #: store keys read as holding nothing: absent, or an empty value the push replaces
        self._empty: set[str] = set()

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

    def _note_unsigned(self) -> None:
        if self.state.note(UNSIGNED_NOTICE):
            log.warning("remote pipeline cache %s: %s", self.settings.display, UNSIGNED_NOTICE)

    def _name(self, key: SpirvKey) -> str:
        return spirv_value_key(key, self.space)

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
        missing = sorted((k for k in keys if k not in have), key=self._name)
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
        """Read ``keys`` (and the identity's driver blobs), check them, adopt what passes.

        Without a signing key only the keys whose body the install names are read (the rest
        could not be verified), and no driver blob. All values together are read up to
        ``max_read`` bytes, each up to ``max_value``: the store checks both before it reads."""
        identity = cache.device.info.identity
        digests = await run_sync(install_digests, cache.registry, keys) if keys else {}
        if self.secret is None:
            if want_blob or len(digests) < len(keys):
                self._note_unsigned()
            keys, want_blob = [k for k in keys if k in digests], False
        if not keys and not want_blob:
            return
        names, limit = [self._name(k) for k in keys], self.settings.max_value
        budget = ReadBudget(self.settings.max_read)
        try:
            store = await self._open()
            if want_blob:  # one round trip for the entries and the blobs' list, one for the blobs
                index = blob_index_key(identity, self.space)
                values, listed = await store.get_with_newest(
                    names, limit, budget, index, self.settings.max_blobs
                )
                self._members = listed
                members = [m for m in listed if is_blob_key(m, identity, self.space)]
                blob_values = await store.get_many(members, limit, budget)
            else:
                listed, members, blob_values = [], [], []
                values = await store.get_many(names, limit, budget)
        except RemoteStoreError as exc:
            self._turn_off(str(exc))
            return
        for name in listed:  # never read: whoever can write the set could list any key
            if name not in members:
                self._reject(f"driver blob {name!r}", "not a driver blob key of this device")
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
                self._reject(f"driver blob {member}", f"the driver refused it: {exc}")
                continue
            if not merged or into is None:  # it broke a pipeline in this process: not merged
                self.state.add(misses=1)
                continue
            self._merged[member] = into
            self.state.add(hits=1)

    def _refused_by_cache(self, verdict: ReadVerdict, refused: list[str]) -> None:
        """Entries the cache refused to adopt (its line names each): bad values like any."""
        for key in list(verdict.spirv):
            label = spirv_label(key)
            line = next((r for r in refused if r.startswith(f"{label}:")), None)
            if line is None:
                continue
            del verdict.spirv[key]
            verdict.present.discard(key)
            name = self._name(key)
            verdict.good.discard(name)
            verdict.bad[name] = verdict.adopted[key]
            verdict.rejected.append((label, line[len(label) + 2 :]))

    def _apply(self, verdict: ReadVerdict) -> None:
        """Count what a read found, and note what the push must not write, or may replace."""
        misses = verdict.absent + verdict.unread
        self.state.add(hits=len(verdict.spirv), misses=misses, bytes_read=verdict.bytes_read)
        for what, why in verdict.rejected:
            self._reject(what, why)
        if verdict.unread:
            line = (
                f"{verdict.unread} values not read: this load's max_read "
                f"({self.settings.max_read} bytes) was spent"
            )
            self.state.rejections.append(line)
            log.warning("remote pipeline cache: %s", line)
        self._remote_has |= verdict.present
        for key in verdict.good | verdict.empty:
            self._bad.pop(key, None)
        self._empty = (self._empty - verdict.good - set(verdict.bad)) | verdict.empty
        self._bad.update(verdict.bad)

    async def pull(self, cache: PipelineCache) -> None:
        """Adopt every SPIR-V entry the store holds for this device's macros, and its driver
        blobs (``asyncvk cache pull``)."""
        if not self.on:
            return
        pattern = spirv_pattern(cache.device_macro_hash, self.space)
        try:
            names = await (await self._open()).scan(pattern)
        except RemoteStoreError as exc:
            self._turn_off(str(exc))
            return
        keys = [k for k in (parse_spirv_value_key(n, self.space) for n in names) if k]
        # another build's entries (another source of a shader) are not this one's to judge
        current = _source_hashes(cache, keys)
        keys = [k for k in keys if current.get(k.shader) == k.source_hash]
        await self._read(cache, keys, cache.vk_cache is not None)
        if self._store is not None and (self._bad or self._empty):
            try:
                await self._discard_bad(self._store, cache.device.info.identity)
            except RemoteStoreError as exc:
                self._turn_off(str(exc))

    # -- after load ----------------------------------------------------------------------------

    async def publish(self, cache: PipelineCache) -> None:
        """Write every SPIR-V entry of ``cache`` and its driver blob that the store lacks
        (``asyncvk cache push``)."""
        self._wanted |= set(cache.spirv_entries())
        self._local_had.clear()
        await self.push(cache, new_blob=True)

    async def push(self, cache: PipelineCache, *, new_blob: bool = False) -> None:
        """Write what the store lacks: this load's new SPIR-V entries (neither found locally nor
        in the store), and the driver blob when it holds something new (``new_blob``: it does);
        write the good value over each value this load refused, or delete it where this process
        has none. Nothing to do: the store is not opened. Never raises for the store."""
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
            key=self._name,
        )
        if candidates:
            signed, offered = self.secret is not None, len(candidates)
            candidates = await run_sync(_pushable, cache, candidates, entries, signed)
            if not signed and len(candidates) < offered:
                self._note_unsigned()
        built_new = new_blob or cache.statistics().driver_cache_misses > 0
        # the blob pushed is this one's, what was merged into it; none without a key
        vk_cache = cache.vk_cache if self.secret is not None else None
        identity = cache.device.info.identity
        blob, blob_key = b"", ""
        if vk_cache is not None and (built_new or candidates or self._bad or self._empty):
            blob, blob_key = await run_sync(_blob_and_key, vk_cache, identity, self.space)
        if blob_key in self._empty:  # this very blob's value is empty: written over
            self._bad[blob_key] = _EMPTY
        new = built_new and blob_holds_pipelines(blob)
        if not candidates and not self._bad and not self._blob_empties(identity) and not new:
            return
        try:
            store = await self._open()
            # a bad value read is known to be there: only a replace may write over it
            unknown = [k for k in candidates if self._name(k) not in self._bad]
            present = await store.exists_many([self._name(k) for k in unknown])
            there = set()
            for key, found in zip(unknown, present, strict=True):
                name = self._name(key)
                if found and name in self._empty:  # empty when read, or another writer's since
                    self._bad[name] = _EMPTY
                elif found:
                    there.add(key)
            self._remote_has |= there
            absent = [k for k in candidates if k not in there]
            values = await run_sync(self._seal_entries, cache, absent, entries)
            for key, value in values:
                await self._write(store, self._name(key), value)
                self._remote_has.add(key)
            if vk_cache is not None and blob:
                await self._push_blob(cache, store, vk_cache, blob, blob_key, built_new)
            await self._discard_bad(store, identity)
        except RemoteStoreError as exc:
            self._turn_off(str(exc))
        except Exception as exc:  # fail-open: a push never fails the caller, nor the save
            self._turn_off(f"push: {type(exc).__name__}: {exc}")

    def _blob_empties(self, identity: DeviceIdentity) -> list[str]:
        return [n for n in self._empty if is_blob_key(n, identity, self.space)]

    async def _discard_bad(self, store: RemoteStore, identity: DeviceIdentity) -> None:
        """Delete each value this process refused and has not written over (it has no good
        value of that key: a blob another machine built, an entry not compiled here), while
        the store still holds exactly what was refused; a blob also leaves the set. So a bad
        value costs one process a miss, not every process until it expires."""
        index = blob_index_key(identity, self.space)
        bad = [*self._bad.items(), *((n, _EMPTY) for n in self._blob_empties(identity))]
        self._bad.clear()
        self._empty -= {name for name, _ in bad}
        for name, value in bad:
            blob = is_blob_key(name, identity, self.space)
            if await store.delete_bad(name, value, index if blob else None):
                self.state.add(deleted=1)
                if self._members is not None and name in self._members:
                    self._members.remove(name)
                log.info("remote pipeline cache: deleted the value refused at %s", name)

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
        self._empty.discard(key)
        if bad is None:
            written = await store.add(key, value, ttl)
        else:
            outcome = await store.replace_bad(key, value, ttl, bad)
            written = outcome in ("replaced", "added")
            if outcome == "replaced":
                self.state.add(replaced=1)
                if bad == _EMPTY:  # read as absent: a miss then, a rejection now
                    self.state.add(rejected=1)
                    self.state.rejections.append(f"{key}: an empty value")
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
        index = blob_index_key(identity, self.space)
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
