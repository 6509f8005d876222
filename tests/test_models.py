"""Every test model (converted from PyTorch by pnnx) against PyTorch's own output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from asyncvk.gpu import VulkanDevice
from asyncvk.net._net import Net
from asyncvk.net._option import Option

MODELS = Path(__file__).parent / "models"
CASES = [
    (d.name, variant)
    for d in sorted(p for p in MODELS.iterdir() if p.is_dir())
    for variant in json.loads((d / "meta.json").read_text())["variants"]
]


def rel_l2(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref))


async def _infer(model: str, variant: str, opt: Option) -> tuple[np.ndarray, np.ndarray]:
    d = MODELS / model
    async with Net(opt) as net:
        await net.load_param(d / f"{variant}.param")
        await net.load_model(d / f"{variant}.bin")
        ex = net.create_extractor()
        ex.input("in0", np.load(d / "input.npy"))
        y = await ex.extract("out0")
    return y, np.load(d / "output.npy")


# pnnx's default fp16 weights: PyTorch ran the fp32 weights, so the weights' own rounding
# bounds the agreement; fp32 weights must agree to float32 accuracy.
TOLERANCE = {"model": 2e-3, "model_fp32": 1e-4}


@pytest.mark.parametrize(("model", "variant"), CASES)
async def test_gpu_matches_pytorch(device: VulkanDevice, model: str, variant: str) -> None:
    y, ref = await _infer(model, variant, Option(use_vulkan_compute=True))
    assert y.shape == ref.shape
    assert rel_l2(y, ref) < TOLERANCE[variant]


@pytest.mark.parametrize(("model", "variant"), CASES)
async def test_gpu_fp16_storage_matches_pytorch(
    device: VulkanDevice, model: str, variant: str
) -> None:
    if not device.info.support_fp16_storage:
        pytest.skip("the device has no 16-bit storage")
    y, ref = await _infer(model, variant, Option(use_vulkan_compute=True, use_fp16_storage=True))
    assert rel_l2(y, ref) < 1e-2


@pytest.mark.parametrize(("model", "variant"), CASES)
async def test_cpu_path_matches_pytorch(model: str, variant: str) -> None:
    y, ref = await _infer(model, variant, Option(use_vulkan_compute=False))
    assert y.shape == ref.shape
    assert rel_l2(y, ref) < TOLERANCE[variant]
