"""GpuModel: one load on one device, built from a Graph without a Net and released as one unit."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from asyncvk.cache import PipelineCache
from asyncvk.gpu import VulkanDevice
from asyncvk.net._gpu_model import GpuModel
from asyncvk.net._graph import build_graph, load_weights
from asyncvk.net._modelbin import ModelBinReader
from asyncvk.net._net import Net
from asyncvk.net._option import Option
from asyncvk.net._param_parser import parse_param
from asyncvk.net._plan import PlanRequest

CUNET = Path(__file__).parent / "models" / "cunet"
#: Handles the device keeps for itself after a model is gone: allocator blocks and spare fences.
DEVICE_OWNED = {"memory", "fence"}


def _owned(device: VulkanDevice) -> dict[str, int]:
    stats = device.allocator.stats()
    handles = {k: v for k, v in device.live_handles().items() if k not in DEVICE_OWNED}
    return {"buffers": stats["buffers"], "used_bytes": stats["used_bytes"], **handles}


async def _load(cache: PipelineCache) -> GpuModel:
    graph = build_graph(parse_param(CUNET / "model.param"))
    graph = load_weights(graph, ModelBinReader.open(CUNET / "model.bin"))
    return await GpuModel.load(graph, cache, Option())


async def _run(model: GpuModel, x: np.ndarray) -> np.ndarray:
    index = model.graph.blob_index
    plan = await model.plans.acquire(PlanRequest.of({index["in0"]: x.shape}, [index["out0"]]))
    try:
        return (await plan.run({index["in0"]: x[np.newaxis]}))[index["out0"]][0]
    finally:
        await model.plans.give_back(plan)


async def test_a_graph_and_a_cache_are_all_a_gpu_model_needs(device: VulkanDevice) -> None:
    x = np.load(CUNET / "input.npy")
    async with Net() as net:
        await net.load_param(CUNET / "model.param")
        await net.load_model(CUNET / "model.bin")
        ex = net.create_extractor()
        ex.input("in0", x)
        expected = await ex.extract("out0")
    with PipelineCache(device) as cache:
        model = await _load(cache)
        try:
            np.testing.assert_array_equal(await _run(model, x), expected)
            assert model.commands_recorded > 0
        finally:
            model.release()


async def test_release_gives_back_everything_and_is_idempotent(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache:
        before = _owned(device)
        model = await _load(cache)
        await _run(model, np.load(CUNET / "input.npy"))
        assert _owned(device)["buffers"] > before["buffers"]
        model.release()
        model.release()
        cache.clear()  # the pipelines are the cache's: they go now that no model holds them
        assert _owned(device) == before


async def test_retire_waits_until_no_extraction_uses_the_model(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache:
        before = _owned(device)
        model = await _load(cache)
        with model.in_use():  # an extraction is running on it
            retiring = asyncio.create_task(model.retire())
            for _ in range(5):
                await asyncio.sleep(0)
            assert not retiring.done()
            assert any(bound.weights for bound in model.bound.values()), "freed under its user"
        await retiring
        cache.clear()
        assert _owned(device) == before
