"""PipelineCache.request_many / get_many: one batch API that deduplicates inside the cache."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from asyncvk import Net, Option
from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.gpu import VulkanDevice
from asyncvk.layers._gpu_api import PipelineSpec as LayerPipelineSpec

MODELS = Path(__file__).resolve().parent / "models"


def test_equal_specs_are_one_entry_and_1_and_1_0_stay_apart() -> None:
    assert LayerPipelineSpec is PipelineSpec  # layers declare the cache's own type
    a = PipelineSpec("scale_add", (1.0, 0), (64, 1, 1))
    assert a == PipelineSpec("scale_add", [1.0, 0], [64, 1, 1])  # type: ignore[arg-type]
    assert hash(a) == hash(PipelineSpec("scale_add", (1.0, 0)))
    for other in ((1, 0), (1.0, False), (True, 0)):
        assert a != PipelineSpec("scale_add", other)
    assert PipelineSpec("s", (0.0,)) != PipelineSpec("s", (-0.0,))
    assert PipelineSpec("s", baked_push=b"\0") != PipelineSpec("s")


def test_request_many_builds_each_distinct_spec_once(device: VulkanDevice) -> None:
    one = PipelineSpec("scale_add", (2.0, 1))
    specs = [one, PipelineSpec("scale_add", (2.0, 1)), PipelineSpec("scale_add", (2, 1)), one]
    with PipelineCache(device) as cache:
        futures = cache.request_many(specs)
        assert list(futures) == [one, PipelineSpec("scale_add", (2, 1))]
        pipelines = {spec: f.result() for spec, f in futures.items()}
        assert pipelines[one] is not pipelines[specs[2]]
        stats = cache.statistics()
        assert (stats.requests, stats.pipelines_created, stats.inflight_joins) == (2, 2, 0)
        assert cache.request_many([one])[one].result() is pipelines[one]  # a live hit


def test_an_unknown_shader_fails_in_the_caller_before_any_build(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache:
        with pytest.raises(KeyError, match="no_such_shader"):
            cache.request_many(
                [PipelineSpec("scale_add", (1.0, 0)), PipelineSpec("no_such_shader")]
            )
        assert cache.statistics().requests == 0


async def test_get_many_awaits_every_spec_and_a_cancelled_waiter_leaves_the_build(
    device: VulkanDevice,
) -> None:
    specs = [PipelineSpec("scale_add", (float(i), 0)) for i in range(3)]
    with PipelineCache(device) as cache:
        waiter = asyncio.ensure_future(cache.get_many(specs))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        done = await cache.get_many(specs)
        assert set(done) == set(specs)
        assert cache.statistics().pipelines_created == 3


class _CountingCache(PipelineCache):
    """A real cache that counts request_many calls (the Net must batch, not dedupe itself)."""

    calls: list[int]

    def request_many(self, specs):  # type: ignore[no-untyped-def,override]
        batch = list(specs)
        self.calls.append(len(batch))
        return super().request_many(batch)


async def test_net_requests_all_its_pipelines_in_one_batch(device: VulkanDevice) -> None:
    """One batch for the load, and one after it for the background pipelines where a layer
    has some (squeezenet's wide 3x3 layers: the Winograd passes on CPU devices)."""
    with _CountingCache(device) as cache:
        cache.calls = []
        net = Net(Option(pipeline_cache=cache))
        try:
            await net.load_param(MODELS / "squeezenet" / "model.param")
            await net.load_model(MODELS / "squeezenet" / "model.bin")
        finally:
            await net.aclose()
        assert len(cache.calls) in (1, 2)
        assert sum(cache.calls) == net.load_stats.pipelines_requested > cache.statistics().requests
        assert cache.statistics().requests == cache.statistics().pipelines_created
