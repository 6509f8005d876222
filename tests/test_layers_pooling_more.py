"""StatisticsPooling against ncnn itself (the wheel's CPU fp32), through asyncvk's GPU plan on
lavapipe and its CPU path: maps of 1 to 4 dims, odd sizes, with and without the standard
deviations. The wheel's sums may be added in another order (its last bits depend on the
build: ncnn_oracle), so values are compared within a few float32 steps; asyncvk's GPU and CPU
add in the same order and agree to the bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import assert_close_to_ncnn, asyncvk_forward, ncnn_forward, write_model

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

SHAPES = [(17,), (5, 9), (3, 7, 9), (1, 1, 1), (2, 3, 4, 5), (6, 1, 13)]


@pytest.mark.parametrize("stddev", [0, 1], ids=["means", "means-stddevs"])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
async def test_statisticspooling_matches_ncnn(
    tmp_path: Path, shape: tuple[int, ...], stddev: int
) -> None:
    text = f"7767517\n2 2\nInput in0 0 1 in0\nStatisticsPooling sp 1 1 in0 out0 0={stddev}\n"
    model = write_model(tmp_path, text)
    x = np.random.default_rng(len(shape)).normal(1.5, 2.0, size=shape).astype(np.float32)
    theirs = ncnn_forward(model, {"in0": x}, ["out0"])["out0"]
    gpu, cpu_types = await asyncvk_forward(model, {"in0": x}, ["out0"], gpu=True)
    assert "StatisticsPooling" not in cpu_types, "StatisticsPooling fell back to the CPU"
    cpu, _ = await asyncvk_forward(model, {"in0": x}, ["out0"], gpu=False)
    # the same sums in the same order; a GPU's compiler may fuse multiplies and adds
    assert_close_to_ncnn(gpu["out0"], cpu["out0"], ulps=8, scale=1.0, what="GPU against CPU")
    channels = shape[0] if len(shape) >= 3 else 1
    assert theirs.shape == ((2 if stddev else 1) * channels,)
    assert_close_to_ncnn(gpu["out0"], theirs, ulps=8, scale=1.0)
    rows = x.reshape(channels, -1).astype(np.float64)  # the definition, independently
    wanted = [rows.mean(1), rows.std(1)] if stddev else [rows.mean(1)]
    assert np.allclose(cpu["out0"], np.concatenate(wanted), rtol=1e-5, atol=1e-5)


async def test_statisticspooling_constant_channel_has_zero_deviation(tmp_path: Path) -> None:
    text = "7767517\n2 2\nInput in0 0 1 in0\nStatisticsPooling sp 1 1 in0 out0 0=1\n"
    model = write_model(tmp_path, text)
    x = np.full((2, 3, 5), 0.75, np.float32)
    cpu, _ = await asyncvk_forward(model, {"in0": x}, ["out0"], gpu=False)
    assert cpu["out0"].tolist() == [0.75, 0.75, 0.0, 0.0]
    gpu, _ = await asyncvk_forward(model, {"in0": x}, ["out0"], gpu=True)
    assert np.allclose(gpu["out0"], [0.75, 0.75, 0.0, 0.0], rtol=0, atol=1e-6)
