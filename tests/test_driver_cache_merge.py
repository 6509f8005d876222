"""A merge into the live VkPipelineCache never runs while a pipeline is being created with it
(Vulkan requires the merge's destination to be externally synchronised), and a save leaves
the live cache as it was: it merges the file's blob in a scratch cache."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from conftest import needs_vulkan

from asyncvk import PipelineCache
from asyncvk.cache import PipelineSpec
from asyncvk.gpu import VulkanDevice

#: how long a creation waits, in the probe, for a merge started while it runs
OVERLAP_WAIT_S = 0.5


def _create_with(device: VulkanDevice, cache: PipelineCache, during: Callable[[], None]) -> None:
    """Create one pipeline with ``cache``, calling ``during`` while it is being created."""

    def probe(starting: bool) -> None:
        if starting:
            during()

    device.creation_probe = probe
    try:
        spec = PipelineSpec("scale_add", specializations=(3.0, 0))
        cache.request_many([spec])[spec].result()
    finally:
        device.creation_probe = None


@needs_vulkan
def test_a_merge_waits_for_a_creation_to_end(device: VulkanDevice) -> None:
    cache = PipelineCache(device)
    assert cache.vk_cache is not None
    blob = cache.driver_blob()
    merged = threading.Event()
    seen: list[bool] = []
    merges: list[threading.Thread] = []

    def merge_now() -> None:
        def merge() -> None:
            assert cache.vk_cache is not None
            cache.vk_cache.merge(blob)
            merged.set()

        merges.append(threading.Thread(target=merge))
        merges[-1].start()
        seen.append(merged.wait(OVERLAP_WAIT_S))  # did it end while the creation ran?

    try:
        _create_with(device, cache, merge_now)
        for thread in merges:
            thread.join()
        assert seen == [False] and merged.is_set()
    finally:
        cache.close()


@needs_vulkan
def test_a_creation_waits_for_a_merge_to_end(device: VulkanDevice) -> None:
    cache = PipelineCache(device)
    assert cache.vk_cache is not None
    lock = cache.vk_cache.lock
    started = threading.Event()
    creation = threading.Thread(target=_create_with, args=(device, cache, started.set), daemon=True)
    try:
        with lock.exclusive():  # as a merge holds it
            creation.start()
            assert not started.wait(OVERLAP_WAIT_S)
        assert started.wait(60)
        creation.join(60)
    finally:
        cache.close()


@needs_vulkan
def test_a_save_does_not_change_the_live_cache(device: VulkanDevice, tmp_path: Path) -> None:
    """What another process saved joins the file, not this process's live cache."""
    path = tmp_path / "pipelines.cache"
    other = PipelineCache(device)
    spec = PipelineSpec("scale_add", specializations=(5.0, 0))
    other.request_many([spec])[spec].result()
    theirs = set(other.spirv_entries())
    assert theirs and other.save_cache(path)
    other.close()
    cache = PipelineCache(device)
    try:
        assert cache.save_cache(path)
        assert not cache.spirv_entries()  # nothing adopted from the file
        reread = PipelineCache(device)
        try:
            assert reread.load_cache(path)
            assert set(reread.spirv_entries()) == theirs  # and the file kept theirs
        finally:
            reread.close()
    finally:
        cache.close()
