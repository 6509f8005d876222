"""Background saving: only when something new was built, bursts coalesced, flushed on close;
and the deployment modes (read-only, must-hit) around a pre-built cache."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from manual_ticks import HANG_S, ManualTicks
from pipeline_requests import build_one, get_one

from asyncvk import CacheMissError, PipelineCache
from asyncvk.cache import PipelineSpec
from asyncvk.cache._persist import SaveResult
from asyncvk.gpu import VulkanDevice


async def test_autosave_saves_new_work_once_per_burst(
    device: VulkanDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interval's ends are the test's own ticks (``ManualTicks``), so the counts are exact
    however long a build takes on a busy machine."""
    ticks = ManualTicks(monkeypatch)
    path = tmp_path / "auto.vkcache"
    with PipelineCache(device) as cache:
        saver = cache.autosave(path, interval=0.2)
        await ticks.tick(saver)
        assert saver.saves == 0 and not path.exists()  # nothing new: nothing written
        await asyncio.gather(
            *[
                get_one(cache, PipelineSpec("scale_add", specializations=(float(i), 0)))
                for i in range(10)
            ]
        )
        assert saver.saves == 0  # the interval has not ended: nothing written yet
        await ticks.tick(saver)
        assert saver.saves == 1 and path.exists()  # a burst of 10 builds, one save
        await ticks.tick(saver)
        assert saver.saves == 1  # nothing new since: nothing written
        await get_one(cache, PipelineSpec("unary", specializations=(3, 0.0, 0.0)))
        result = await saver.aclose()  # flushes the pending change at once
        assert result and saver.saves == 2
    with PipelineCache(device) as fresh:
        loaded = fresh.load_cache(path)
        assert loaded and loaded.entries_used == 2


async def test_autosave_saves_on_its_own_clock(
    device: VulkanDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real interval: new work is saved with no flush. The test waits for the save itself
    (``HANG_S`` is a guard against a hang, not a timing assertion)."""
    path = tmp_path / "auto.vkcache"
    with PipelineCache(device) as cache:
        saver = cache.autosave(path, interval=0.05)
        saved = asyncio.Event()
        save_now = saver.save_now

        async def save_and_tell() -> SaveResult | None:
            result = await save_now()
            saved.set()
            return result

        monkeypatch.setattr(saver, "save_now", save_and_tell)
        await get_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))
        async with asyncio.timeout(HANG_S):
            await saved.wait()
        assert saver.saves == 1 and path.exists()
        await saver.aclose()


async def test_autosave_failure_is_reported_not_raised(
    device: VulkanDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticks = ManualTicks(monkeypatch)
    blocked = tmp_path / "file"
    blocked.write_text("x")
    with PipelineCache(device) as cache:
        saver = cache.autosave(blocked / "sub" / "x.vkcache", interval=0.1)
        await get_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))
        await ticks.tick(saver)  # a failed save on the clock: logged, kept, never raised
        assert saver.saves == 0 and saver.last_result is not None and not saver.last_result
        result = await saver.aclose()  # and aclose tries again
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
