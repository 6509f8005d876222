"""A Net's cache folder keeps what is built after its load: saved in the background by an
AutoSaver (no explicit flush), and flushed by ``aclose()``.

The AutoSaver's interval ends when a test ticks it (``ManualTicks``): no count here depends on how
long a load or an extraction takes. Waits for a real timer wait for the save itself."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest
from manual_ticks import HANG_S, ManualTicks

from asyncvk import Net, Option, PipelineCache
from asyncvk.cache._directory import CacheDirectory
from asyncvk.gpu import VulkanDevice

MODELS = Path(__file__).parent / "models"


def _saved_entries(folder: Path, key: str, device: VulkanDevice) -> int:
    """SPIR-V entries in ``key``'s file for this device (0 when there is none yet)."""
    entries = CacheDirectory(folder).entries(key)
    if not entries:
        return 0
    with PipelineCache(device) as reader:
        loaded = reader.load_cache(folder / entries[0].file)
        assert loaded, loaded.reason
        return loaded.entries_used


async def _load(net: Net, model: str) -> None:
    await net.load_param(MODELS / model / "model.param")
    await net.load_model(MODELS / model / "model.bin")


async def test_what_is_built_after_load_is_saved_in_the_background(
    device: VulkanDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticks = ManualTicks(monkeypatch)
    folder = tmp_path / "cache"
    with PipelineCache(device) as shared:
        option = Option(
            use_vulkan_compute=True,
            pipeline_cache=shared,
            cache_dir=folder,
            graph_key="cunet",
        )
        async with Net(option) as served:
            await _load(served, "cunet")
            await served.flush_cache()  # the save after load, so that the count below is stable
            after_load = _saved_entries(folder, "cunet", device)
            assert after_load == shared.statistics().spirv_entries > 0
            # another Net on the same cache builds pipelines cunet does not have
            async with Net(Option(use_vulkan_compute=True, pipeline_cache=shared)) as other:
                await _load(other, "squeezenet")
            built = shared.statistics().spirv_entries
            assert built > after_load
            assert _saved_entries(folder, "cunet", device) == after_load  # not before a tick
            assert served.model_cache.autosaver is not None
            await ticks.tick(
                served.model_cache.autosaver
            )  # the interval ends: the new pipelines saved
            assert _saved_entries(folder, "cunet", device) == built


async def test_the_save_after_a_load_leaves_the_first_requests_alone(
    device: VulkanDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder's save after a load (hashing every weight, merging the folder's file) waits
    ``SAVE_AFTER_LOAD_S``, so the first inference does not share the machine with it; then it
    runs unasked, and ``flush_cache`` starts it at once. The AutoSaver never ticks here: on a
    busy machine its interval would end before the first output and save in its place."""
    from asyncvk.net import _model_cache

    ManualTicks(monkeypatch)
    for delay in (3600.0, 0.2):
        monkeypatch.setattr(_model_cache, "SAVE_AFTER_LOAD_S", delay)
        folder = tmp_path / f"cache-{delay}"
        with PipelineCache(device) as shared:
            option = Option(pipeline_cache=shared, cache_dir=folder, graph_key="cunet")
            async with Net(option) as net:
                await _load(net, "cunet")
                ex = net.create_extractor()
                ex.input("in0", np.load(MODELS / "cunet" / "input.npy"))
                await ex.extract("out0")
                if delay > 60:
                    assert _saved_entries(folder, "cunet", device) == 0
                    await net.flush_cache()
                    assert _saved_entries(folder, "cunet", device) > 0
                    continue
                pending = net.model_cache.pending_save
                assert pending is not None
                async with asyncio.timeout(HANG_S):  # a guard against a hang
                    await asyncio.shield(pending)  # its delay runs out: it saves, unasked
                assert _saved_entries(folder, "cunet", device) > 0


async def test_a_reload_saves_the_last_load_first(
    device: VulkanDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second load_model before the first load's save has run saves the first load's
    cache, before its own folder opens (no orphaned save to race the new one)."""
    from asyncvk.net import _model_cache

    ManualTicks(monkeypatch)  # no save on the AutoSaver's clock either
    monkeypatch.setattr(_model_cache, "SAVE_AFTER_LOAD_S", 3600.0)
    folder = tmp_path / "cache"
    with PipelineCache(device) as shared:
        option = Option(pipeline_cache=shared, cache_dir=folder, graph_key="cunet")
        async with Net(option) as net:
            await _load(net, "cunet")
            assert _saved_entries(folder, "cunet", device) == 0
            await net.load_model(MODELS / "cunet" / "model.bin")
            assert _saved_entries(folder, "cunet", device) > 0


async def test_a_bare_close_drops_the_save_still_waiting(
    device: VulkanDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``close()`` saves nothing more (``aclose()`` is the one that saves): the save after
    load, still waiting out its delay, is cancelled with the rest instead of left pending."""
    from asyncvk.net import _model_cache

    ManualTicks(monkeypatch)  # no save on the AutoSaver's clock either
    monkeypatch.setattr(_model_cache, "SAVE_AFTER_LOAD_S", 3600.0)
    folder = tmp_path / "cache"
    with PipelineCache(device) as shared:
        net = Net(Option(pipeline_cache=shared, cache_dir=folder, graph_key="cunet"))
        await _load(net, "cunet")
        pending = net.model_cache.pending_save
        assert pending is not None and not pending.done()
        net.close()
        await asyncio.sleep(0)
        assert pending.cancelled()
        assert _saved_entries(folder, "cunet", device) == 0


async def test_aclose_flushes_what_the_interval_has_not_saved_yet(
    device: VulkanDevice, tmp_path: Path
) -> None:
    folder = tmp_path / "cache"
    with PipelineCache(device) as shared:
        option = Option(
            use_vulkan_compute=True,
            pipeline_cache=shared,
            cache_dir=folder,
            graph_key="cunet",
            autosave_interval=3600,  # never by the clock: only aclose() can save it
        )
        served = Net(option)
        await _load(served, "cunet")
        await served.flush_cache()
        after_load = _saved_entries(folder, "cunet", device)
        async with Net(Option(use_vulkan_compute=True, pipeline_cache=shared)) as other:
            await _load(other, "squeezenet")
        assert _saved_entries(folder, "cunet", device) == after_load
        await served.aclose()
        assert _saved_entries(folder, "cunet", device) == shared.statistics().spirv_entries
        assert shared.statistics().spirv_entries > after_load


async def test_a_cache_file_autosave_keeps_what_a_net_builds(
    device: VulkanDevice, tmp_path: Path
) -> None:
    path = tmp_path / "model.vkcache"
    with PipelineCache(device) as cache:
        saver = cache.autosave(path, interval=0.1)
        async with Net(Option(use_vulkan_compute=True, pipeline_cache=cache)) as net:
            await _load(net, "cunet")
            built = cache.statistics().spirv_entries
            assert built > 0
            deadline = time.monotonic() + 60  # a guard against a hang, not a timing assertion
            while not path.exists() or _loaded_entries(path, device) < built:
                assert time.monotonic() < deadline, "the autosave never wrote the pipelines"
                await asyncio.sleep(0.05)
        await saver.aclose()


def _loaded_entries(path: Path, device: VulkanDevice) -> int:
    with PipelineCache(device) as reader:
        loaded = reader.load_cache(path)
        return loaded.entries_used if loaded else 0
