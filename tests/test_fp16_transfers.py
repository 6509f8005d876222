"""fp16 storage converts a plan's inputs and outputs on the GPU: the host writes and reads
float32 (numpy's float16 conversion cost more than the GPU's work on small models), through
blobs of odd sizes, several outputs and a layer the CPU runs between two GPU segments."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from asyncvk import Net, Option, get_gpu_info

CUNET = Path(__file__).parent / "models" / "cunet"
RNG = np.random.default_rng(11)

#: a GPU convolution, ReLU on the CPU (featmask 16), a GPU convolution, and both as outputs
PARAM = """7767517
5 6
Input in0 0 1 in0 0=5 1=7 2=3
Convolution c1 1 1 in0 a 0=4 1=3 4=1 5=1 6=108
Split s 1 2 a a0 a1
ReLU r 1 1 a0 b 31=16
Convolution c2 1 1 b out0 0=3 1=1 5=1 6=12
"""

pytestmark = pytest.mark.skipif(
    not get_gpu_info().support_fp16_storage, reason="the device has no fp16 storage"
)


def _weights() -> bytes:
    parts = []
    for count, bias in ((108, 4), (12, 3)):
        parts.append(struct.pack("<I", 0))  # raw float32
        parts.append(RNG.standard_normal(count).astype("<f4").tobytes())
        parts.append(RNG.standard_normal(bias).astype("<f4").tobytes())
    return b"".join(parts)


async def _outputs(option: Option, weights: bytes, x: np.ndarray) -> dict[str, np.ndarray]:
    async with Net(option) as net:
        await net.load_param(PARAM.encode())
        await net.load_model(weights)
        return await net.run({"in0": x}, ["out0", "a1"])


async def test_fp16_storage_moves_float32_and_the_gpu_converts() -> None:
    x = RNG.standard_normal((3, 7, 5)).astype(np.float32)  # 105 values: odd
    async with Net(Option(use_fp16_storage=True)) as net:
        await net.load_param(CUNET / "model.param")
        await net.load_model(CUNET / "model.bin")
        out = (await net.run({"in0": np.load(CUNET / "input.npy")}))["out0"]
        assert net.gpu_model is not None
        assert set(net.gpu_model.io_casts) == {"to_storage", "to_f32"}
        ((plan,),) = net.gpu_model.plans.plans.values()
        assert plan.dtype == np.float16 and plan.io.host == np.float32
        (staging,) = plan.io.staging[0].values()
        assert staging.size >= 4 * np.load(CUNET / "input.npy").size  # float32 on the host
    want = np.load(CUNET / "output.npy")
    assert out.dtype == np.float32
    assert np.linalg.norm(out - want) < 2e-3 * np.linalg.norm(want)
    weights = _weights()
    fp16 = await _outputs(Option(use_fp16_storage=True), weights, x)
    cpu = await _outputs(Option(use_vulkan_compute=False), weights, x)
    for name in ("out0", "a1"):
        assert fp16[name].dtype == np.float32 and fp16[name].shape == cpu[name].shape
        np.testing.assert_allclose(fp16[name], cpu[name], rtol=1e-2, atol=2e-2)


async def test_fp32_storage_copies_without_converting() -> None:
    async with Net(Option(use_fp16_storage=False)) as net:
        await net.load_param(CUNET / "model.param")
        await net.load_model(CUNET / "model.bin")
        await net.run({"in0": np.load(CUNET / "input.npy")})
        assert net.gpu_model is not None and net.gpu_model.io_casts == {}
        ((plan,),) = net.gpu_model.plans.plans.values()
        assert plan.io.casts == {} and plan.io.host == np.float32
