"""A Net that loads again: it runs the new model, and gives back every byte the old one held."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import numpy as np
import pytest

from asyncvk import ModelFormatError
from asyncvk.gpu import VulkanDevice
from asyncvk.net._modelbin import ModelBinReader
from asyncvk.net._net import Net
from asyncvk.net._option import Option

MODELS = Path(__file__).parent / "models"
SQUEEZENET = MODELS / "squeezenet"
CUNET = MODELS / "cunet"
#: Handles the device keeps for itself after a Net is gone: allocator blocks and spare fences.
DEVICE_OWNED = {"memory", "fence"}


class _PerturbingBin:
    """Reads a .bin in layer order and writes the same layout with every value nudged."""

    def __init__(self, data: bytes) -> None:
        self.inner = ModelBinReader(data)
        self.out = bytearray()
        self.rng = np.random.default_rng(7767517)

    def load(self, w: int, type: int) -> np.ndarray:
        array = self.inner.load(w, type)
        nudged = array * (1 + 0.05 * self.rng.standard_normal(array.shape))
        if type == 0:
            self.out += struct.pack("<I", 0)  # tag 0: raw float32
        self.out += nudged.astype("<f4").tobytes()
        return array


async def _perturbed_bin(model: Path, tmp_path: Path) -> Path:
    """Weights B for ``model``: the same graph, every weight changed by about 5%."""
    net = Net()
    await net.load_param(model / "model.param")
    rewriter = _PerturbingBin((model / "model.bin").read_bytes())
    for node in net.nodes:
        node.layer.load_model(rewriter)
    rewriter.inner.check_end()
    await net.aclose()
    path = tmp_path / f"{model.name}-b.bin"
    path.write_bytes(bytes(rewriter.out))
    return path


async def _load(net: Net, param: Path, weights: Path) -> None:
    await net.load_param(param)
    await net.load_model(weights)


def _input(model: Path) -> np.ndarray:
    """The model's test input; squeezenet's cropped to 64x64 (it pools globally) for speed."""
    x = np.load(model / "input.npy")
    return x[..., :64, :64] if model == SQUEEZENET else x


async def _extract(net: Net, model: Path) -> np.ndarray:
    ex = net.create_extractor()
    ex.input("in0", _input(model))
    return await ex.extract("out0")


async def _fresh(param: Path, weights: Path, model: Path) -> np.ndarray:
    async with Net() as net:
        await _load(net, param, weights)
        return await _extract(net, model)


def _net_owned(device: VulkanDevice) -> dict[str, int]:
    """What Nets hold on the device: live buffers, their bytes, and Vulkan handles."""
    stats = device.allocator.stats()
    handles = {k: v for k, v in device.live_handles().items() if k not in DEVICE_OWNED}
    return {"buffers": stats["buffers"], "used_bytes": stats["used_bytes"], **handles}


async def test_reloaded_weights_are_the_ones_that_run(device: VulkanDevice, tmp_path: Path) -> None:
    param, weights_a = SQUEEZENET / "model.param", SQUEEZENET / "model.bin"
    weights_b = await _perturbed_bin(SQUEEZENET, tmp_path)
    expected_b = await _fresh(param, weights_b, SQUEEZENET)
    async with Net() as net:
        await _load(net, param, weights_a)
        y_a = await _extract(net, SQUEEZENET)
        assert not np.allclose(y_a, expected_b, rtol=1e-3, atol=1e-3)

        await _load(net, param, weights_b)  # load_param + load_model
        np.testing.assert_array_equal(await _extract(net, SQUEEZENET), expected_b)

        await net.load_model(weights_a)  # load_model alone, same graph
        np.testing.assert_array_equal(await _extract(net, SQUEEZENET), y_a)


async def test_another_model_on_the_same_net_runs(device: VulkanDevice) -> None:
    """cunet, squeezenet, then cunet's fp32 weights: the cunet plan of the first load is stale."""
    sequence = [
        (CUNET, "model"),
        (SQUEEZENET, "model"),
        (CUNET, "model_fp32"),
        (CUNET, "model"),
    ]
    async with Net() as net:
        for model, variant in sequence:
            param, weights = model / f"{variant}.param", model / f"{variant}.bin"
            await _load(net, param, weights)
            y = await _extract(net, model)
            np.testing.assert_array_equal(y, await _fresh(param, weights, model))


async def test_reloading_does_not_grow_device_memory(device: VulkanDevice) -> None:
    param, weights = SQUEEZENET / "model.param", SQUEEZENET / "model.bin"
    async with Net() as net:
        await _load(net, param, weights)
        await _extract(net, SQUEEZENET)
        # settled: its background pipelines (Winograd on CPU devices) start after an extraction
        await net.background_builds()
        after_one = _net_owned(device)
        for _ in range(2):
            await _load(net, param, weights)
            await _extract(net, SQUEEZENET)
            await net.load_model(weights)
            await _extract(net, SQUEEZENET)
            await net.background_builds()
        assert _net_owned(device) == after_one


async def test_aclose_gives_back_everything_after_reloads(device: VulkanDevice) -> None:
    before = _net_owned(device)
    net = Net()
    await _load(net, CUNET / "model.param", CUNET / "model.bin")
    await _extract(net, CUNET)
    await _load(net, SQUEEZENET / "model.param", SQUEEZENET / "model.bin")
    await _extract(net, SQUEEZENET)
    await net.load_model(SQUEEZENET / "model.bin")
    await _extract(net, SQUEEZENET)
    assert _net_owned(device)["buffers"] > before["buffers"]
    await net.aclose()
    assert _net_owned(device) == before


async def test_an_extractor_from_before_a_reload_is_refused(device: VulkanDevice) -> None:
    async with Net() as net:
        await _load(net, CUNET / "model.param", CUNET / "model.bin")
        old = net.create_extractor()
        old.input("in0", _input(CUNET))
        await net.load_model(CUNET / "model_fp32.bin")
        with pytest.raises(RuntimeError, match=r"before the Net loaded.*create_extractor"):
            await old.extract("out0")
        with pytest.raises(RuntimeError, match=r"before the Net loaded.*create_extractor"):
            old.input("in0", _input(CUNET))
        await _extract(net, CUNET)  # a new one runs
    with pytest.raises(RuntimeError, match="closed"):
        await old.extract("out0")


async def test_an_extraction_in_flight_finishes_on_the_model_it_started_with(
    device: VulkanDevice,
) -> None:
    fp16 = await _fresh(CUNET / "model.param", CUNET / "model.bin", CUNET)
    fp32 = await _fresh(CUNET / "model_fp32.param", CUNET / "model_fp32.bin", CUNET)
    async with Net() as net:
        await _load(net, CUNET / "model.param", CUNET / "model.bin")
        running = asyncio.create_task(_extract(net, CUNET))
        await asyncio.sleep(0)  # the extraction has started planning in a worker thread
        await net.load_model(CUNET / "model_fp32.bin")
        np.testing.assert_array_equal(await running, fp16)
        np.testing.assert_array_equal(await _extract(net, CUNET), fp32)


async def test_a_load_param_that_fails_keeps_the_loaded_model(device: VulkanDevice) -> None:
    async with Net() as net:
        await _load(net, CUNET / "model.param", CUNET / "model.bin")
        ex = net.create_extractor()
        ex.input("in0", _input(CUNET))
        expected = await ex.extract("out0")
        bad = (CUNET / "model.param").read_text().replace("Crop ", "Bogus ", 1)
        with pytest.raises(ModelFormatError, match=r"unsupported layer type: Bogus \(line"):
            await net.load_param(bad.encode())
        np.testing.assert_array_equal(await ex.extract("out0"), expected)


async def test_a_cpu_extraction_in_flight_keeps_the_weights_it_started_with(tmp_path: Path) -> None:
    """Without Vulkan a reload does not wait for extractions: the new weights are read into
    fresh layers (a Graph is read into once), never into the ones a running extraction uses."""
    weights_b = await _perturbed_bin(SQUEEZENET, tmp_path)
    async with Net(Option(use_vulkan_compute=False)) as net:
        await _load(net, SQUEEZENET / "model.param", SQUEEZENET / "model.bin")
        y_a = await _extract(net, SQUEEZENET)
        running = asyncio.create_task(_extract(net, SQUEEZENET))
        await asyncio.sleep(0)  # the extraction runs its layers in a worker thread
        await net.load_model(weights_b)
        y_b = await _extract(net, SQUEEZENET)
        np.testing.assert_array_equal(await running, y_a)
        assert not np.allclose(y_b, y_a, rtol=1e-3, atol=1e-3)
