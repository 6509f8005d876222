"""The driver-blob store: the only owner of a cache's live VkPipelineCache.

Blobs from files and stores are merged into it once each; a save merges a file's blob into a
scratch copy, never into the live one. When a loaded blob breaks pipeline creation, the live
cache is replaced by an empty one and the blobs merged so far are never merged again: a cache
file can cost time, never a run. Merging against creation is serialised by
:class:`~asyncvk.gpu._driver_cache.DriverPipelineCache` itself.
"""

from __future__ import annotations

import hashlib
import logging
import threading

from ..gpu._device import VulkanDevice
from ..gpu._driver_cache import DriverPipelineCache, blob_holds_pipelines
from ._counters import CacheCounters

log = logging.getLogger("asyncvk.cache")


def blob_digest(blob: bytes) -> bytes:
    return hashlib.blake2b(blob, digest_size=16).digest()


class DriverBlobStore:
    """A device's live VkPipelineCache, what was merged into it, and what broke it.

    Arguments:
        device: the device the VkPipelineCache belongs to.
        counters: where resets are counted.
        broken: the driver cannot share pipelines through a VkPipelineCache: hold none.
    """

    def __init__(self, device: VulkanDevice, counters: CacheCounters, *, broken: bool) -> None:
        self.device = device
        self._counters = counters
        self._lock = threading.Lock()
        self._vk_cache = None if broken else DriverPipelineCache(device)
        self._retired: list[DriverPipelineCache] = []  # replaced, released on close
        self._merged: set[bytes] = set()  # blob_digest of each blob merged
        self._refused: set[bytes] = set()  # blobs that broke pipeline creation
        self._loaded = False

    @property
    def vk_cache(self) -> DriverPipelineCache | None:
        """The live VkPipelineCache that pipelines are created with (None on broken drivers
        and once released)."""
        with self._lock:
            return self._vk_cache

    @property
    def loaded(self) -> bool:
        """Whether a merged blob held pipelines (so a cold creation means it did not help)."""
        with self._lock:
            return self._loaded

    def merged_digests(self) -> frozenset[bytes]:
        """The blob_digest of every blob merged into the live cache."""
        with self._lock:
            return frozenset(self._merged)

    def data(self) -> bytes:
        """The live driver cache's data (empty when there is none)."""
        vk_cache = self.vk_cache
        return b"" if vk_cache is None else vk_cache.data()

    def merge(self, blob: bytes) -> bool:
        """Merge a validated blob into the live driver cache; whether it was merged.

        A blob that already broke pipeline creation in this process is not merged again (the
        remote tier must then not count it as part of the blob it pushes).
        """
        digest = blob_digest(blob)
        with self._lock:
            vk_cache = self._vk_cache
            if vk_cache is None or not blob:
                return False
            if digest in self._refused:
                log.info("not merging a driver blob that broke pipeline creation in this process")
                return False
            if digest in self._merged:
                return True  # merged before: the live cache holds it
            self._merged.add(digest)
        vk_cache.merge(blob)
        if blob_holds_pipelines(blob):
            with self._lock:
                self._loaded = True
        return True

    def data_with(self, other: bytes) -> bytes:
        """The live driver cache's data merged with ``other`` (validated by the caller) in a
        scratch cache: what a save writes. The live cache is not touched."""
        live = self.data()
        with self._lock:
            skip = (
                self._vk_cache is None
                or not other
                or blob_digest(other) in self._refused | self._merged
            )
        if skip:
            return live
        scratch = DriverPipelineCache(self.device, live)
        try:
            scratch.merge(other)
            return scratch.data()
        finally:
            scratch.release()

    def reset(self, reason: str) -> None:
        """Replace the live VkPipelineCache by an empty one and never merge its blobs again.

        The old cache may still be in use by another build, so it is released only on close.
        """
        fresh = DriverPipelineCache(self.device)
        with self._lock:
            old, self._vk_cache = self._vk_cache, fresh
            if old is not None:
                self._retired.append(old)
            self._refused |= self._merged
            self._loaded = False
        # a save now writes the driver's new blob over the bad one
        self._counters.add("driver_cache_resets", changed=True)
        log.warning("dropped the loaded driver pipeline cache: %s", reason)

    def release(self) -> None:
        """Release the live and every replaced VkPipelineCache (no build may be running)."""
        with self._lock:
            caches = [*self._retired, *([self._vk_cache] if self._vk_cache else [])]
            self._retired, self._vk_cache = [], None
        for vk_cache in caches:
            vk_cache.release()
