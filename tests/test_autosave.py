"""Background saving: only when something new was built, bursts coalesced, flushed on close;
and the deployment modes (read-only, must-hit) around a pre-built cache."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pipeline_requests import build_one, get_one

from asyncvk import CacheMissError, PipelineCache
from asyncvk.cache import PipelineSpec
from asyncvk.gpu import VulkanDevice


async def test_autosave_saves_new_work_once_per_burst(device: VulkanDevice, tmp_path: Path) -> None:
    path = tmp_path / "auto.vkcache"
    with PipelineCache(device) as cache:
        saver = cache.autosave(path, interval=0.2)
        await asyncio.sleep(0.5)
        assert saver.saves == 0 and not path.exists()  # nothing new: nothing written
        await asyncio.gather(
            *[
                get_one(cache, PipelineSpec("scale_add", specializations=(float(i), 0)))
                for i in range(10)
            ]
        )
        await asyncio.sleep(0.7)
        # a burst of 10 builds coalesces into one save (two if a tick lands mid-burst)
        burst_saves = saver.saves
        assert 1 <= burst_saves <= 2 and path.exists()
        await asyncio.sleep(0.5)
        assert saver.saves == burst_saves  # nothing new since: nothing written
        await get_one(cache, PipelineSpec("unary", specializations=(3, 0.0, 0.0)))
        result = await saver.aclose()  # flushes the pending change at once
        # its compile and its creation each count as new work: a tick may land between them
        # when the build outlasts the interval (a loaded 2-core CI machine), then aclose saves
        assert result and burst_saves + 1 <= saver.saves <= burst_saves + 2
    with PipelineCache(device) as fresh:
        loaded = fresh.load_cache(path)
        assert loaded and loaded.entries_used == 2


async def test_autosave_failure_is_reported_not_raised(
    device: VulkanDevice, tmp_path: Path
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("x")
    with PipelineCache(device) as cache:
        saver = cache.autosave(blocked / "sub" / "x.vkcache", interval=0.1)
        await get_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))
        result = await saver.aclose()
        assert result is not None and not result and "cannot write" in result.reason


def test_read_only_and_must_hit_with_a_prebuilt_cache(device: VulkanDevice, tmp_path: Path) -> None:
    path = tmp_path / "prebuilt.vkcache"
    with PipelineCache(device) as builder:
        build_one(builder, PipelineSpec("scale_add", specializations=(1.0, 0)))
        assert builder.save_cache(path)
    before = path.read_bytes()
    with PipelineCache(device, read_only=True, must_hit=True) as deployed:
        assert deployed.load_cache(path)
        served = PipelineSpec("scale_add", specializations=(7.0, 3))
        build_one(deployed, served)  # served, no compile
        with pytest.raises(CacheMissError, match="unary"):
            build_one(deployed, PipelineSpec("unary", specializations=(1, 0.0, 0.0)))
        result = deployed.save_cache(path)
        assert not result and "read-only" in result.reason
    assert path.read_bytes() == before
