"""DriverPipelineCache: the one owner of a VkPipelineCache, with an idempotent release."""

from __future__ import annotations

import pytest

from asyncvk.gpu import VulkanDevice
from asyncvk.gpu._driver_cache import DriverPipelineCache, blob_holds_pipelines


def test_create_read_merge_and_release_once(device: VulkanDevice) -> None:
    before = device.live_handles().get("pipeline_cache", 0)
    cache = DriverPipelineCache(device)
    assert device.live_handles()["pipeline_cache"] == before + 1
    blob = cache.data()
    assert len(blob) >= 32 and int.from_bytes(blob[:4], "little") <= len(blob)
    again = DriverPipelineCache(device, blob)  # from a blob this device wrote
    again.merge(blob)
    assert again.data()[:32] == blob[:32]
    assert device.live_handles()["pipeline_cache"] == before + 2  # merge's temporary is gone
    for owner in (cache, again):
        owner.release()
        owner.release()  # idempotent
        assert owner.released
        with pytest.raises(RuntimeError, match="after release"):
            owner.data()
    assert device.live_handles().get("pipeline_cache", 0) == before


def test_a_bare_header_holds_no_pipelines() -> None:
    header = (32).to_bytes(4, "little") + bytes(28)
    assert not blob_holds_pipelines(header)
    assert blob_holds_pipelines(header + b"x")
