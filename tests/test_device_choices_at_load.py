"""A model's shader choices (``ShaderChoices``: the tiled and flat layouts, Winograd, the tiled
GEMM, concat by copies) are data of its load, on the ``GpuInfo`` its pipelines were chosen with
and its plans record with. Two models loaded with opposite choices run side by side in one
process, each with its own shaders and each right: no setting is shared between them, and a
choice made at load is the one recorded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ncnn_oracle import assert_close, tagged, write_model
from test_models import rel_l2

from asyncvk import Net, Option
from asyncvk.gpu import ShaderChoices, VulkanDevice
from asyncvk.gpu._shader_choices import Place
from asyncvk.net._dispatch_profile import ProfilingExtractor

MODELS = Path(__file__).parent / "models"


def _choices(place: Place) -> Option:
    """Every alternative shader on (``"always"``) or off (``"never"``)."""
    return Option(
        use_vulkan_compute=True,
        shader_choices=ShaderChoices(
            conv_tiled=place,
            conv_winograd=place,
            gemm_tiled=place,
            binary_flat=place,
            concat_copies=place,
            innerproduct_flat=place,
            pooling_flat=place,
        ),
    )


async def _shaders(net: Net, inputs: dict[str, np.ndarray]) -> set[str]:
    async with ProfilingExtractor(net) as ex:
        for name, array in inputs.items():
            ex.input(name, array)
        await ex.extract("out0")
        assert ex.profile is not None
        return {d.shader for d in ex.profile.dispatches}


# cunet: Deconvolution, InnerProduct, Pooling, BinaryOp; shufflenetv2: Concat, depthwise
# convolutions; resnet18: 3x3 layers of 64 channels and more (Winograd once it is built)
@pytest.mark.parametrize("model", ["cunet", "shufflenetv2", "resnet18"])
async def test_models_of_opposite_choices_side_by_side(device: VulkanDevice, model: str) -> None:
    d = MODELS / model
    ref = np.load(d / "output.npy")
    x = {"in0": np.load(d / "input.npy")}
    async with Net(_choices("always")) as on, Net(_choices("never")) as off:
        for net in (on, off):
            await net.load_param(d / "model.param")
            await net.load_model(d / "model.bin")
        for _ in range(2):  # the second after the background pipelines (Winograd's) are in
            for net in (on, off):
                ex = net.create_extractor()
                ex.input("in0", x["in0"])
                assert rel_l2(await ex.extract("out0"), ref) < 2e-3
                await net.background_builds()
        assert await _shaders(on, x) != await _shaders(off, x)


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


#: what each layer dispatches with every alternative on, and off
SHADERS = {"gemm": ({"gemm_tiled"}, {"gemm"}), "eltwise": ({"binary_flat"}, {"binary"})}


@pytest.mark.parametrize("layer", LAYERS)
async def test_a_layer_records_the_shader_its_model_chose(
    device: VulkanDevice, tmp_path: Path, layer: str
) -> None:
    lines, weights, inputs, expected = LAYERS[layer]
    text = f"7767517\n{lines.count(chr(10)) + 1} {len(inputs) + 1}\n{lines}\n"
    model = write_model(tmp_path, text, weights)
    async with Net(_choices("always")) as on, Net(_choices("never")) as off:
        for net in (on, off):
            await net.load_param(model.param)
            await net.load_model(model.bin)
        for net, want in zip((on, off), SHADERS[layer], strict=True):
            ex = net.create_extractor()
            for name, array in inputs.items():
                ex.input(name, array)
            assert_close(await ex.extract("out0"), expected, layer)
            assert await _shaders(net, inputs) == want
