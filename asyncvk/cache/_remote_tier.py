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

The tier is composed of parts in modules of their own: the link every part shares (its store
connection, switch and what a load found: :mod:`._remote_tier_link`), the reads at load
(:mod:`._remote_tier_reads`) and the push after it (:mod:`._remote_tier_push`); here is the
tier they make together, with ``asyncvk cache pull``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._remote_store import RemoteStoreError, configured_remote_url, parse_remote_url
from ._remote_tier_link import KEY_VARIABLE as KEY_VARIABLE
from ._remote_tier_link import UNSIGNED_NOTICE as UNSIGNED_NOTICE
from ._remote_tier_link import TierLink
from ._remote_tier_link import resolve_secret as resolve_secret
from ._remote_tier_push import TierPush
from ._remote_tier_reads import TierReads, _source_hashes
from ._remote_tier_reads import model_spirv_keys as model_spirv_keys
from ._remote_values import parse_spirv_value_key, spirv_pattern

if TYPE_CHECKING:
    from ._pipeline_cache import PipelineCache
    from ._remote_store import RemoteSettings, RemoteStore
    from ._spec import PipelineSpec


def remote_tier_for(url: str | None, secret: str | bytes | None = None) -> RemoteTier | None:
    """The tier ``url`` names (None: ``ASYNCVK_REMOTE_CACHE``; empty: no remote tier).

    Raises ValueError for a malformed URL, naming where it came from.
    """
    url, where = configured_remote_url(url)
    if not url:
        return None
    return RemoteTier(parse_remote_url(url, where=where), resolve_secret(secret))


class RemoteTier:
    """One Net's use of a remote cache: its link to the store (opened on first need, on the
    running event loop) and what this load found there, read at load (:class:`TierReads`) and
    pushed after it (:class:`TierPush`). The switch and counters are the process's
    (:func:`remote_state`)."""

    def __init__(self, settings: RemoteSettings, secret: bytes | None = None) -> None:
        self.link = TierLink(settings, secret)
        self.reads = TierReads(self.link)
        self.pushes = TierPush(self.link)

    @property
    def settings(self) -> RemoteSettings:
        return self.link.settings

    @property
    def on(self) -> bool:
        """False once the tier turned itself off for this process (its first error)."""
        return self.link.on

    def report(self) -> dict[str, Any]:
        """The process's counters for this URL, and whether values are signed."""
        return self.link.report()

    async def fetch(self, cache: PipelineCache, specs: Iterable[PipelineSpec]) -> None:
        """Read what a load of ``specs`` lacks from the store into ``cache``, before any build."""
        await self.reads.fetch(cache, specs)

    async def publish(self, cache: PipelineCache) -> None:
        """Push what the store lacks, the driver blob included, after a load."""
        await self.pushes.publish(cache)

    async def push(self, cache: PipelineCache, *, new_blob: bool = False) -> None:
        """Push what the store lacks (``new_blob``: the driver blob too)."""
        await self.pushes.push(cache, new_blob=new_blob)

    async def open(self) -> RemoteStore:
        """The store's connection, opened on first need."""
        return await self.link.open()

    async def aclose(self) -> None:
        await self.link.aclose()

    async def pull(self, cache: PipelineCache) -> None:
        """Adopt every SPIR-V entry the store holds for this device's macros, and its driver
        blobs (``asyncvk cache pull``)."""
        link = self.link
        if not link.on:
            return
        pattern = spirv_pattern(cache.device_macro_hash, link.space)
        try:
            names = await (await link.open()).scan(pattern)
        except RemoteStoreError as exc:
            link.turn_off(str(exc))
            return
        keys = [k for k in (parse_spirv_value_key(n, link.space) for n in names) if k]
        # another build's entries (another source of a shader) are not this one's to judge
        current = _source_hashes(cache, keys)
        keys = [k for k in keys if current.get(k.shader) == k.source_hash]
        await self.reads.read(cache, keys, cache.vk_cache is not None)
        if link.store is not None and (link.bad or link.empty):
            try:
                await self.pushes.discard_bad(link.store, cache.device.info.identity)
            except RemoteStoreError as exc:
                link.turn_off(str(exc))
