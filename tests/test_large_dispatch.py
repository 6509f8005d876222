"""Blobs too large for one dispatch axis: Vulkan allows 65535 workgroups per axis on most
devices (maxComputeWorkGroupCount), so a 1-D dispatch of 64-wide groups covers at most
65535 * 64 ~ 4.2M elements and a 3-D one of 8x8 groups at most 524280 columns. Past that the
layers fold (1-D) or cap and loop (3-D); a dispatch still over the limit is refused by the
recorder rather than recorded (undefined behaviour: a silently wrong result)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import assert_close, asyncvk_forward, ncnn_forward, raw, tagged, write_model
from pipeline_requests import build_one

from asyncvk._errors import PipelineError
from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.gpu import CommandRecorder, VulkanDevice, get_gpu_device
from asyncvk.layers._gpu_api import capped_groups, fold_groups, groups_1d
from asyncvk.shader._registry import ShaderRegistry

pytestmark = needs_vulkan

#: A blob just past 65535 * 64 = 4194240 elements (4 * 1025 * 1025 = 4202500).
_BIG = (4, 1025, 1025)


def _spy_on_dispatches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """The group counts of every dispatch recorded from now on (the real recorder runs)."""
    seen: list[tuple[int, int, int]] = []
    record = CommandRecorder.dispatch

    def dispatch(self: CommandRecorder, pipeline: Any, buffers: Any, push: bytes, groups: Any):
        seen.append(tuple(groups))
        record(self, pipeline, buffers, push, groups)

    monkeypatch.setattr(CommandRecorder, "dispatch", dispatch)
    return seen


def _assert_within_limits(groups: list[tuple[int, int, int]]) -> None:
    limit = get_gpu_device().info.limits.max_compute_workgroup_count
    over = [g for g in groups if any(n > m for n, m in zip(g, limit, strict=True))]
    assert not over, f"dispatches over maxComputeWorkGroupCount {limit}: {over}"


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


async def test_blobs_over_a_1d_dispatch_limit_match_the_cpu_path_and_ncnn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4.2M- and 8.4M-element blobs through Convolution, BinaryOp (with a scalar and with a
    blob), ReLU, BatchNorm, Concat and Softmax: every dispatch within the device's limits (the
    1-D ones folded into rows), every element right, the last ones included."""
    c = _BIG[0]
    rng = _rng(1)
    conv_w = rng.normal(0, 0.3, c * c).astype(np.float32)
    conv_b = rng.normal(0, 0.1, c).astype(np.float32)
    # ncnn's BatchNorm order: slope, mean, var, bias
    bn = [rng.uniform(0.5, 1.5, c), rng.normal(0, 0.2, c)]
    bn += [rng.uniform(0.5, 1.5, c), rng.normal(0, 0.5, c)]
    model = write_model(
        tmp_path,
        f"""
        7767517
        10 12
        Input in0 0 1 in0
        Convolution conv 1 1 in0 conv 0={c} 1=1 5=1 6={c * c}
        BinaryOp half 1 1 conv half 0=2 1=1 2=0.5
        ReLU relu 1 1 half relu
        Split split 1 2 relu r0 r1
        BatchNorm bn 1 1 r0 bn 0={c}
        Concat cat 2 1 bn r1 cat 0=0
        Split split2 1 2 cat c0 c1
        Softmax soft 1 1 c0 soft 0=0 1=1
        BinaryOp out 2 1 soft c1 out 0=0
        """,
        [tagged(conv_w), raw(conv_b), *(raw(a) for a in bn)],
    )
    x = rng.normal(0, 1, _BIG).astype(np.float32)
    outputs = ["relu", "out"]
    groups = _spy_on_dispatches(monkeypatch)
    gpu, cpu_types = await asyncvk_forward(model, {"in0": x}, outputs, gpu=True)
    assert cpu_types == set(), f"fell back to the CPU: {cpu_types}"
    _assert_within_limits(groups)
    assert any(g[1] > 1 for g in groups), f"no 1-D dispatch was folded: {groups}"
    cpu, _ = await asyncvk_forward(model, {"in0": x}, outputs, gpu=False)
    theirs = ncnn_forward(model, {"in0": x}, outputs)
    for name in outputs:
        assert gpu[name].size > 65535 * 64, (name, gpu[name].shape)
        assert_close(gpu[name], cpu[name], f"{name}: GPU vs CPU path")
        assert_close(gpu[name], theirs[name], f"{name}: GPU vs ncnn")
        # the tail past the first 65535 * 64 elements on its own: a relative L2 over the
        # whole blob could hide a few wrong elements
        tail = slice(65535 * 64 - 64, None)
        np.testing.assert_allclose(
            gpu[name].reshape(-1)[tail], cpu[name].reshape(-1)[tail], rtol=1e-4, atol=1e-5
        )


async def test_a_row_wider_than_a_3d_dispatch_axis_matches_the_cpu_path_and_ncnn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A (c, 1, 530000) blob: Convolution, ConvolutionDepthWise, Pooling, Interp, LRN and
    Deconvolution want ceil(w / 8) > 65535 groups in x; capped, their shaders loop."""
    rng = _rng(2)
    w = 530_000
    conv_w = rng.normal(0, 0.5, 3 * 2 * 3).astype(np.float32)
    dw_w = rng.normal(0, 0.5, 3 * 3).astype(np.float32)
    de_w = rng.normal(0, 0.5, 3 * 2 * 2).astype(np.float32)
    model = write_model(
        tmp_path,
        """
        7767517
        7 7
        Input in0 0 1 in0
        Convolution conv 1 1 in0 conv 0=3 1=3 11=1 4=1 14=0 5=0 6=18
        ConvolutionDepthWise dw 1 1 conv dw 0=3 1=3 11=1 4=1 14=0 5=0 6=9 7=3
        Pooling pool 1 1 dw pool 0=0 1=3 11=1 2=1 12=1 3=1 13=0 5=1
        Interp up 1 1 pool up 0=2 1=2.0 2=1.0
        LRN lrn 1 1 up lrn 0=0 1=3 2=0.5 3=0.75
        Deconvolution de 1 1 lrn de 0=2 1=2 11=1 2=1 3=1 5=0 6=12
        """,
        [tagged(conv_w), tagged(dw_w), tagged(de_w)],
    )
    x = rng.normal(0, 1, (2, 1, w)).astype(np.float32)
    outputs = ["pool", "lrn", "de"]
    groups = _spy_on_dispatches(monkeypatch)
    gpu, cpu_types = await asyncvk_forward(model, {"in0": x}, outputs, gpu=True)
    assert cpu_types == set(), f"fell back to the CPU: {cpu_types}"
    _assert_within_limits(groups)
    cpu, _ = await asyncvk_forward(model, {"in0": x}, outputs, gpu=False)
    theirs = ncnn_forward(model, {"in0": x}, outputs)
    for name in outputs:
        assert gpu[name].shape[-1] > 65535 * 8, (name, gpu[name].shape)
        assert_close(gpu[name], cpu[name], f"{name}: GPU vs CPU path")
        assert_close(gpu[name], theirs[name], f"{name}: GPU vs ncnn")
        np.testing.assert_allclose(
            gpu[name][..., -1000:], cpu[name][..., -1000:], rtol=1e-4, atol=1e-5
        )


async def test_more_innerproduct_outputs_than_workgroups_per_axis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """InnerProduct runs one workgroup per output: 70000 outputs fold into two rows."""
    rng = _rng(3)
    n_out, n_in = 70_000, 8
    weight = rng.normal(0, 0.5, n_out * n_in).astype(np.float32)
    bias = rng.normal(0, 0.1, n_out).astype(np.float32)
    model = write_model(
        tmp_path,
        f"""
        7767517
        2 2
        Input in0 0 1 in0
        InnerProduct ip 1 1 in0 ip 0={n_out} 1=1 2={n_out * n_in}
        """,
        [tagged(weight), raw(bias)],
    )
    x = rng.normal(0, 1, (n_in,)).astype(np.float32)
    groups = _spy_on_dispatches(monkeypatch)
    gpu, cpu_types = await asyncvk_forward(model, {"in0": x}, ["ip"], gpu=True)
    assert cpu_types == set(), f"fell back to the CPU: {cpu_types}"
    _assert_within_limits(groups)
    theirs = ncnn_forward(model, {"in0": x}, ["ip"])["ip"]
    assert_close(gpu["ip"], theirs, "ip: GPU vs ncnn")
    np.testing.assert_allclose(gpu["ip"][-5000:], theirs[-5000:], rtol=1e-4, atol=1e-5)


def test_groups_fold_and_cap_at_the_device_limits(device: VulkanDevice) -> None:
    info = device.info
    max_x, max_y, max_z = info.limits.max_compute_workgroup_count
    assert groups_1d(64 * 10, (64, 1, 1), info) == (10, 1, 1)
    assert groups_1d(1, (64, 1, 1), info) == (1, 1, 1)
    assert fold_groups(max_x, info) == (max_x, 1, 1)
    assert fold_groups(max_x + 1, info) == (max_x, 2, 1)
    x, y, z = groups_1d(1 << 30, (64, 1, 1), info)
    assert x * y * 64 >= 1 << 30 and x <= max_x and y <= max_y and z == 1
    assert capped_groups((max_x + 5, 3, max_z * 2), info) == (max_x, 3, max_z)
    assert capped_groups((0, 0, 0), info) == (1, 1, 1)


def test_the_recorder_refuses_a_dispatch_over_the_device_limits(device: VulkanDevice) -> None:
    """A dispatch over maxComputeWorkGroupCount is a PipelineError naming the pipeline and both
    counts, raised before anything is recorded; one at the limit records."""
    limit = device.info.limits.max_compute_workgroup_count
    push = struct.pack("<if", 64, 0.0)
    with PipelineCache(device) as cache:
        pipeline = build_one(cache, PipelineSpec("scale_add", (1.0, 0), (64, 1, 1)))
        src, dst = device.allocate(256), device.allocate(256)
        rec = CommandRecorder(device, one_time=True)
        try:
            for axis in range(3):
                groups = [1, 1, 1]
                groups[axis] = limit[axis] + 1
                with pytest.raises(PipelineError) as caught:
                    rec.dispatch(pipeline, [src, dst], push, (groups[0], groups[1], groups[2]))
                message = str(caught.value)
                assert "'scale_add'" in message, message
                assert str(tuple(groups)) in message and str(tuple(limit)) in message, message
            assert rec.dispatch_count == 0
            rec.dispatch(pipeline, [src, dst], push, (limit[0], 1, 1))
            assert rec.dispatch_count == 1
        finally:
            rec.release()
            src.release()
            dst.release()


def test_an_included_header_is_part_of_the_shader_source_hash(tmp_path: Path) -> None:
    """The SPIR-V cache key holds the source hash: editing a header a shader includes must
    change it, or a cache would hand back SPIR-V built from the old header."""
    (tmp_path / "a.comp").write_text('#version 450\n#include "h.h"\nvoid main() {}\n')
    (tmp_path / "h.h").write_text("int f() { return 1; }\n")
    before = ShaderRegistry(tmp_path).get("a").source_hash
    (tmp_path / "h.h").write_text("int f() { return 2; }\n")
    assert ShaderRegistry(tmp_path).get("a").source_hash != before


async def test_a_failed_recording_leaks_no_command_or_descriptor_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A layer that raises while its plan records (a refused dispatch, say): the error reaches
    the caller and the half-recorded command buffer's pools are destroyed, not leaked."""
    from asyncvk import Net, Option
    from asyncvk.layers.activation import ReLU

    def refuse(*args: Any) -> None:
        raise PipelineError("dispatch refused while recording")

    model = write_model(
        tmp_path,
        """7767517
        3 3
        Input a 0 1 a
        ReLU r1 1 1 a b
        ReLU r2 1 1 b out0
        """,
    )
    device = get_gpu_device()
    pools = ("command_pool", "descriptor_pool")
    async with Net(Option(use_vulkan_compute=True)) as net:
        await net.load_param(model.param)
        await net.load_model(model.bin)
        before = device.live_handles()
        monkeypatch.setattr(ReLU, "record", refuse)
        ex = net.create_extractor()
        ex.input("a", np.ones((2, 3, 4), np.float32))
        with pytest.raises(PipelineError, match="refused while recording"):
            await ex.extract("out0")
        after = device.live_handles()
    assert {k: after.get(k, 0) for k in pools} == {k: before.get(k, 0) for k in pools}
