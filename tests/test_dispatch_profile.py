"""Dispatch profiling: one GPU time per dispatch, labelled by the plan's layers, on lavapipe;
the Net's own plans carry no query; a queue without timestamps is refused; the benchmark script
reports a model in a real child process."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from asyncvk import Net, Option, ProfilingUnsupportedError
from asyncvk.gpu import VulkanDevice
from asyncvk.gpu._timestamps import POOL_QUERIES, check_timestamp_support
from asyncvk.net._dispatch_profile import (
    ProfiledPlan,
    ProfilingExtractor,
    median_profile,
    profile_summary,
)
from asyncvk.net._plan import _Segment

ROOT = Path(__file__).resolve().parent.parent

#: Two command buffers (the ReLU is marked CPU-only, featmask bit 4), a Split that records
#: nothing, and layers of five types that dispatch.
PARAM = """7767517
8 9
Input        in0   0 1 in0
Convolution  conv  1 1 in0 c 0=8 1=3 11=3 4=1 5=1 6=216 9=1
Split        split 1 2 c c1 c2
Sigmoid      sig   1 1 c1 s
ReLU         relu  1 1 c2 r 0=0.1 31=16
Concat       cat   2 1 s r cat 0=0
Pooling      gap   1 1 cat g 0=1 4=1
InnerProduct fc    1 1 g out0 0=5 1=1 2=80
"""
RNG = np.random.default_rng(7767517)
WEIGHTS = b"".join(
    [
        struct.pack("<I", 0),
        RNG.standard_normal(216 + 8).astype(np.float32).tobytes(),
        struct.pack("<I", 0),
        RNG.standard_normal(80 + 5).astype(np.float32).tobytes(),
    ]
)
X = RNG.standard_normal((3, 12, 10)).astype(np.float32)


async def _net(opt: Option | None = None) -> Net:
    net = Net(opt)
    await net.load_param(PARAM.encode())
    await net.load_model(WEIGHTS)
    return net


async def test_one_timing_per_dispatch_named_by_the_plans_layers(device: VulkanDevice) -> None:
    async with await _net() as net:
        ex = net.create_extractor()
        ex.input("in0", X)
        expected = await ex.extract("out0")
        async with ProfilingExtractor(net) as prof:
            prof.input("in0", X)
            for _ in range(2):  # the second run replays the recorded plan
                start = time.perf_counter()
                y = await prof.extract("out0")
                wall_ms = (time.perf_counter() - start) * 1000
                np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
                profile = prof.profile
                assert profile is not None
                (plan,) = prof._plans.values()
                segments = [s for s in plan.steps if isinstance(s, _Segment)]
                assert profile.segments == len(segments) == 2
                for i, seg in enumerate(segments):
                    assert seg.recorder is not None
                    timed = [d for d in profile.dispatches if d.segment == i]
                    dispatches = [d for d in timed if d.shader != "vkCmdCopyBuffer"]
                    assert len(dispatches) == seg.recorder.dispatch_count > 0
                assert profile.barriers == sum(
                    s.recorder.barrier_count for s in segments if s.recorder
                )
                # the layers that dispatch, in recording order, with their types
                gpu_layers = [
                    (n.layer.name, n.layer.type_name)
                    for s in segments
                    for n in s.nodes
                    if not net.gpu_model.bound[n.index].alias  # type: ignore[union-attr]
                ]
                timed_layers = [(d.layer, d.layer_type) for d in profile.dispatches]
                assert list(dict.fromkeys(timed_layers)) == gpu_layers
                assert {d.layer for d in profile.dispatches} == {
                    "conv",
                    "sig",
                    "cat",
                    "gap",
                    "fc",
                }
                assert all(d.shader and d.pipeline for d in profile.dispatches)
                assert all(d.gpu_ms >= 0 for d in profile.dispatches)
                assert profile.dispatch_ms > 0
                assert profile.dispatch_ms <= profile.command_buffer_ms <= wall_ms
        assert "query_pool" not in device.live_handles()


async def test_the_nets_own_plans_write_no_timestamps(device: VulkanDevice) -> None:
    """Profiling costs nothing when off: a plain extraction records no query pool, and a
    profiling extractor's pools (one per command buffer here) go with it."""
    async with await _net() as net:
        ex = net.create_extractor()
        ex.input("in0", X)
        await ex.extract("out0")
        (plans,) = net._plans.values()
        assert not any(isinstance(p, ProfiledPlan) for p in plans)
        assert "query_pool" not in device.live_handles()
        async with ProfilingExtractor(net) as prof:
            prof.input("in0", X)
            await prof.extract("out0")
            assert device.live_handles()["query_pool"] == 2
        assert "query_pool" not in device.live_handles()


async def test_a_cpu_net_has_nothing_to_profile(device: VulkanDevice) -> None:
    async with await _net(Option(use_vulkan_compute=False)) as net:
        prof = ProfilingExtractor(net)
        prof.input("in0", X)
        with pytest.raises(ProfilingUnsupportedError, match="runs on the CPU"):
            await prof.extract("out0")


def test_a_queue_without_timestamps_is_refused() -> None:
    with pytest.raises(
        ProfilingUnsupportedError, match="GPU X: queue family 2 has timestampValidBits 0"
    ):
        check_timestamp_support(0, 1.0, device="GPU X", queue_family=2)
    with pytest.raises(ProfilingUnsupportedError, match=r"timestampPeriod is 0\.0"):
        check_timestamp_support(64, 0.0, device="GPU X", queue_family=0)
    check_timestamp_support(36, 0.5, device="GPU X", queue_family=0)


async def test_a_plan_of_more_dispatches_than_one_pool_holds(device: VulkanDevice) -> None:
    """Queries beyond the first pool land in a second one, reset in the same command buffer."""
    n = POOL_QUERIES // 2 + 8  # Sigmoid chain: one dispatch each, two queries each
    lines = ["Input in0 0 1 b0"] + [f"Sigmoid s{i} 1 1 b{i} b{i + 1}" for i in range(n)]
    param = f"7767517\n{n + 1} {n + 1}\n" + "\n".join(lines) + "\n"
    async with Net() as net:
        await net.load_param(param.encode())
        await net.load_model(b"")
        async with ProfilingExtractor(net) as prof:
            prof.input("b0", X)
            await prof.extract(f"b{n}")
            assert prof.profile is not None
            assert len(prof.profile.dispatches) == n
            assert [d.layer for d in prof.profile.dispatches] == [f"s{i}" for i in range(n)]
            assert device.live_handles()["query_pool"] == 2


async def test_median_profile_and_summary(device: VulkanDevice) -> None:
    async with await _net() as net, ProfilingExtractor(net) as prof:
        prof.input("in0", X)
        profiles = []
        for _ in range(3):
            await prof.extract("out0")
            assert prof.profile is not None
            profiles.append(prof.profile)
    med = median_profile(profiles)
    for i, d in enumerate(med.dispatches):
        assert d.gpu_ms == sorted(p.dispatches[i].gpu_ms for p in profiles)[1]
    summary = profile_summary(med, top=2)
    assert summary["dispatches"] == len(med.dispatches)
    assert len(summary["top"]) == 2
    assert summary["top"][0]["gpu_ms"] >= summary["top"][1]["gpu_ms"]
    assert set(summary["by_layer_type"]) == {d.layer_type for d in med.dispatches}
    assert sum(t["percent"] for t in summary["by_layer_type"].values()) == pytest.approx(100, 0.01)


def test_the_benchmark_reports_a_model_folder(device: VulkanDevice, tmp_path: Path) -> None:
    folder = tmp_path / "models" / "tiny"
    folder.mkdir(parents=True)
    (folder / "model.param").write_text(PARAM)
    (folder / "model.bin").write_bytes(WEIGHTS)
    np.save(folder / "input.npy", X)
    (folder / "meta.json").write_text(json.dumps({"input": "in0", "output": "out0"}))
    out = tmp_path / "profile.json"
    argv = [sys.executable, str(ROOT / "benchmarks" / "dispatch_profile.py")]
    argv += ["--models-dir", str(tmp_path / "models"), "--models", "tiny", "--loops", "2"]
    proc = subprocess.run([*argv, "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(out.read_text())["models"]
    assert row["model"] == "tiny" and "error" not in row, row
    assert row["dispatches"] > 0 and row["segments"] == 2
    assert set(row["by_layer_type"]) == {
        "Convolution",
        "Sigmoid",
        "Concat",
        "Pooling",
        "InnerProduct",
    }
    assert 0 < row["dispatch_gpu_ms"] <= row["command_buffer_gpu_ms"] <= row["wall_ms_profiled"]
    assert {"layer", "type", "pipeline", "shader", "groups", "gpu_ms"} <= set(row["top"][0])
