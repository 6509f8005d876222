"""Pipelines a loaded model records with outlive the cache dropping them (clear() and close())."""

from __future__ import annotations

import numpy as np
import pytest
from pipeline_requests import build_one
from test_net import PARAM, WEIGHTS, reference

from asyncvk import Net, Option, PipelineCache
from asyncvk.cache import PipelineSpec
from asyncvk.gpu import VulkanDevice


def _pipelines(device: VulkanDevice) -> int:
    return device.live_handles().get("pipeline", 0)


def test_a_held_pipeline_survives_the_cache_and_goes_with_its_last_user(
    device: VulkanDevice,
) -> None:
    before = _pipelines(device)
    with PipelineCache(device) as cache:
        pipeline = build_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))
        assert pipeline.acquire() is pipeline
        cache.clear()
        assert not pipeline.destroyed and _pipelines(device) == before + 1
        pipeline.destroy()  # the owner already let go: a second owner release does nothing
        assert not pipeline.destroyed
        pipeline.release()
        assert pipeline.destroyed and _pipelines(device) == before
        with pytest.raises(RuntimeError, match="destroyed"):
            pipeline.acquire()
        unheld = build_one(cache, PipelineSpec("scale_add", specializations=(2.0, 0)))
        cache.clear()
        assert unheld.destroyed  # nobody else held it: as before, clear() destroys it
    assert _pipelines(device) == before


@pytest.mark.parametrize("drop", ["clear", "close"])
async def test_a_net_keeps_running_after_its_cache_drops_its_pipelines(
    device: VulkanDevice, drop: str
) -> None:
    x = np.random.default_rng(1).standard_normal((3, 6, 5)).astype(np.float32)
    before = _pipelines(device)
    cache = PipelineCache(device)
    net = Net(Option(pipeline_cache=cache))
    try:
        await net.load_param(PARAM.encode())
        await net.load_model(WEIGHTS)
        first = await _extract(net, x)
        getattr(cache, drop)()
        assert _pipelines(device) > before  # the model still holds what its plans record
        np.testing.assert_array_equal(await _extract(net, x), first)  # a recorded plan
        y = x[:, :4, :3]  # a new shape: a plan recorded after the drop
        np.testing.assert_allclose(await _extract(net, y), reference(y), rtol=1e-4, atol=1e-4)
    finally:
        await net.aclose()
        cache.close()
    assert _pipelines(device) == before


async def _extract(net: Net, x: np.ndarray) -> np.ndarray:
    ex = net.create_extractor()
    ex.input("in0", x)
    return await ex.extract("out0")
