"""A layer's device choices (the module settings of ``layers/_device_choice``: the tiled and flat
layouts, Winograd, the tiled GEMM, concat by copies) are made once, when its pipelines and
weights are chosen at load. Recording reads them from the pipelines built, so a setting changed
afterwards (a benchmark switching it, a test forcing it) never pairs one choice's dispatch with
another choice's pipeline or weight layout."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from ncnn_oracle import assert_close, tagged, write_model
from test_models import rel_l2

from asyncvk import Net, Option
from asyncvk.gpu import VulkanDevice
from asyncvk.layers import (
    _conv_shaders,
    _strided_gemm,
    binary,
    data_movement,
    innerproduct,
    pooling,
)

MODELS = Path(__file__).parent / "models"

#: Every device-choice setting a layer reads both when it picks its pipelines and at record.
SETTINGS: list[tuple[ModuleType, str]] = [
    (_conv_shaders, "TILED_SHADER"),
    (_conv_shaders, "WINOGRAD_SHADER"),
    (_strided_gemm, "TILED_GEMM"),
    (binary, "FLAT_SHADER"),
    (data_movement, "CONCAT_COPIES"),
    (innerproduct, "FLAT_OUTPUTS"),
    (pooling, "FLAT_OUTPUTS"),
]
FLIPS = [("never", "always"), ("always", "never")]


def _choose(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    for module, name in SETTINGS:
        monkeypatch.setattr(module, name, value)


# cunet: Deconvolution, InnerProduct, Pooling, BinaryOp; shufflenetv2: Concat, depthwise
# convolutions; resnet18: 3x3 layers of 64 channels and more (Winograd once it is built)
@pytest.mark.parametrize("model", ["cunet", "shufflenetv2", "resnet18"])
@pytest.mark.parametrize(("at_load", "at_record"), FLIPS)
async def test_a_model_records_what_it_loaded(
    device: VulkanDevice,
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    at_load: str,
    at_record: str,
) -> None:
    d = MODELS / model
    ref = np.load(d / "output.npy")
    _choose(monkeypatch, at_load)
    async with Net(Option(use_vulkan_compute=True)) as net:
        await net.load_param(d / "model.param")
        await net.load_model(d / "model.bin")
        _choose(monkeypatch, at_record)
        for _ in range(2):  # the second after the background pipelines (Winograd's) are in
            ex = net.create_extractor()
            ex.input("in0", np.load(d / "input.npy"))
            y = await ex.extract("out0")
            assert rel_l2(y, ref) < 2e-3
            await net.background_builds()


_RNG = np.random.default_rng(3)
_A, _B = _RNG.standard_normal((35, 12), np.float32), _RNG.standard_normal((12, 66), np.float32)
_X, _Z = _RNG.standard_normal((2, 3, 4, 5), np.float32)
#: One-layer models whose two shaders take different push constants and workgroups:
#: gemm_tiled.comp and gemm.comp; binary_flat.comp (the element count) and binary.comp (the
#: shapes and strides). Each: its layers after the header, weights, inputs, expected out0.
LAYERS = {
    "gemm": (
        "Input in0 0 1 in0\nGemm gemm 1 1 in0 out0 5=1 8=66 9=12",
        [tagged(_B)],
        {"in0": _A},
        _A @ _B,
    ),
    "eltwise": (
        "Input in0 0 1 in0\nInput in1 0 1 in1\nEltwise sum 2 1 in0 in1 out0 0=1",
        [],
        {"in0": _X, "in1": _Z},
        _X + _Z,
    ),
}


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize(("at_load", "at_record"), FLIPS)
async def test_a_layer_records_the_shader_it_loaded(
    device: VulkanDevice,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    layer: str,
    at_load: str,
    at_record: str,
) -> None:
    lines, weights, inputs, expected = LAYERS[layer]
    text = f"7767517\n{lines.count(chr(10)) + 1} {len(inputs) + 1}\n{lines}\n"
    model = write_model(tmp_path, text, weights)
    _choose(monkeypatch, at_load)
    async with Net(Option(use_vulkan_compute=True)) as net:
        await net.load_param(model.param)
        await net.load_model(model.bin)
        _choose(monkeypatch, at_record)
        ex = net.create_extractor()
        for name, array in inputs.items():
            ex.input(name, array)
        assert_close(await ex.extract("out0"), expected, layer)
