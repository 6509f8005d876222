"""Net: loading, planning, recorded replay, CPU fallback, concurrency and cancellation."""

from __future__ import annotations

import asyncio
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import asyncvk
from asyncvk.gpu import VulkanDevice
from asyncvk.net import _plan
from asyncvk.net._net import Net
from asyncvk.net._option import Option

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
CONV_W = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)
CONV_B = RNG.standard_normal(8).astype(np.float32)
FC_W = RNG.standard_normal((5, 16)).astype(np.float32)
FC_B = RNG.standard_normal(5).astype(np.float32)
WEIGHTS = (
    struct.pack("<I", 0)
    + CONV_W.tobytes()
    + CONV_B.tobytes()
    + struct.pack("<I", 0)
    + FC_W.tobytes()
    + FC_B.tobytes()
)


def reference(x: np.ndarray) -> np.ndarray:
    """The graph above, computed with explicit loops (independent of the layer code)."""
    c, h, w = x.shape
    xp = np.zeros((c, h + 2, w + 2), np.float64)
    xp[:, 1:-1, 1:-1] = x
    conv = np.zeros((8, h, w))
    for o in range(8):
        for i in range(h):
            for j in range(w):
                conv[o, i, j] = (xp[:, i : i + 3, j : j + 3] * CONV_W[o]).sum() + CONV_B[o]
    conv = np.maximum(conv, 0)
    s = 1 / (1 + np.exp(-conv))
    r = np.where(conv > 0, conv, conv * 0.1)
    g = np.concatenate([s, r]).mean(axis=(1, 2))
    return (FC_W.astype(np.float64) @ g + FC_B).astype(np.float32)


async def _load(opt: Option | None = None) -> Net:
    net = Net(opt)
    await net.load_param(PARAM.encode())
    await net.load_model(WEIGHTS)
    return net


async def _run(net: Net, x: np.ndarray) -> np.ndarray:
    ex = net.create_extractor()
    ex.input("in0", x)
    return await ex.extract("out0")


@pytest.mark.parametrize("gpu", [True, False])
async def test_graph_with_split_concat_and_cpu_layer_matches_numpy(
    device: VulkanDevice, gpu: bool
) -> None:
    x = RNG.standard_normal((3, 6, 7)).astype(np.float32)
    async with await _load(Option(use_vulkan_compute=gpu)) as net:
        y = await _run(net, x)
        np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-5)
        if gpu:
            (plan,) = [p for ps in net._plans.values() for p in ps]
            info = plan.describe()
            assert info["cpu_layers"] == 1  # the ReLU marked no-vulkan (featmask bit 4)
            assert info["segments"] == 2
            assert info["gpu_layers"] >= 5


@pytest.mark.parametrize("inline_max_s", [_plan.INLINE_CPU_MAX_S, 0.0])
async def test_a_short_cpu_layer_runs_on_the_loop_after_its_first_run(
    device: VulkanDevice, monkeypatch: pytest.MonkeyPatch, inline_max_s: float
) -> None:
    """The ReLU marked no-vulkan runs on a worker the first time; once its run is known to be
    short it runs on the event loop's thread (no hop); a layer over the bound always hops."""
    threads: list[str] = []
    run_cpu_layer = _plan.run_cpu_layer

    def tracked(*args: Any) -> Any:
        threads.append(threading.current_thread().name)
        return run_cpu_layer(*args)

    monkeypatch.setattr(_plan, "run_cpu_layer", tracked)
    monkeypatch.setattr(_plan, "INLINE_CPU_MAX_S", inline_max_s)
    x = RNG.standard_normal((3, 6, 7)).astype(np.float32)
    async with await _load() as net:
        for _ in range(3):
            np.testing.assert_allclose(await _run(net, x), reference(x), rtol=1e-4, atol=1e-5)
    loop_thread = threading.current_thread().name
    assert threads[0] != loop_thread
    if inline_max_s:
        assert threads[1:] == [loop_thread, loop_thread]
    else:
        assert loop_thread not in threads


def test_a_cpu_layer_near_the_inline_bound_does_not_switch_each_run() -> None:
    """Inline from at most the bound, back on a worker only past twice it."""
    step = _plan._CpuStep(node=None)  # type: ignore[arg-type]  # the rule reads no node
    bound = _plan.INLINE_CPU_MAX_S
    assert not step.choose_inline()  # never run: unknown
    for last, inline in [(1.5, False), (0.9, True), (1.5, True), (1.9, True), (2.1, False)]:
        step.last_run_s = last * bound
        assert step.choose_inline() is inline, last
    step.last_run_s = 1.5 * bound
    assert not step.choose_inline()  # from a worker, 1.5x the bound stays there


async def test_plan_reuses_memory_and_replays_without_recording(device: VulkanDevice) -> None:
    async with await _load() as net:
        x = RNG.standard_normal((3, 16, 16)).astype(np.float32)
        await _run(net, x)
        recorded = net.commands_recorded
        (plan,) = [p for ps in net._plans.values() for p in ps]
        assert plan.peak_bytes < plan.sum_blob_bytes
        y2 = await _run(net, x * 2)
        assert net.commands_recorded == recorded, "a same-shape extraction recorded again"
        np.testing.assert_allclose(y2, reference(x * 2), rtol=1e-4, atol=1e-5)
        await _run(net, RNG.standard_normal((3, 9, 5)).astype(np.float32))
        assert net.commands_recorded > recorded
        assert len(net._plans) == 2


async def test_thirty_two_concurrent_extractions(device: VulkanDevice) -> None:
    async with await _load() as net:
        inputs = [RNG.standard_normal((3, 5 + i % 3, 6)).astype(np.float32) for i in range(32)]
        outputs = await asyncio.gather(*[_run(net, x) for x in inputs])
        for x, y in zip(inputs, outputs, strict=True):
            np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-5)


async def test_only_the_requested_outputs_ancestors_run(device: VulkanDevice) -> None:
    async with await _load() as net:
        ex = net.create_extractor()
        x = RNG.standard_normal((3, 4, 4)).astype(np.float32)
        ex.input("in0", x)
        s = await ex.extract("s")
        assert s.shape == (8, 4, 4)
        (plan,) = [p for ps in net._plans.values() for p in ps]
        ran = {
            node.layer.name
            for step in plan.steps
            for node in (step.nodes if hasattr(step, "nodes") else [step.node])
        }
        assert ran == {"conv", "split", "sig"}


async def test_bad_inputs_are_clear_errors(device: VulkanDevice) -> None:
    async with await _load() as net:
        ex = net.create_extractor()
        with pytest.raises(asyncvk.InputError, match="no blob named 'nope'"):
            ex.input("nope", np.zeros(3))
        with pytest.raises(asyncvk.InputError, match="dtype complex128"):
            ex.input("in0", np.zeros(3, dtype=complex))
        with pytest.raises(asyncvk.InputError, match="were not set"):
            await ex.extract("out0")
        with pytest.raises(asyncvk.InputError, match="no blob named 'nope'"):
            await ex.extract("nope")


async def test_one_error_tree_for_what_a_caller_gets_wrong(tmp_path: Path) -> None:
    """What a caller can get wrong lands in the tree asyncvk exports: a missing file is the
    OSError open() raises, a malformed model a ModelFormatError that is also a ValueError, a
    bad input an InputError that is also a ValueError, a device failure a DeviceError."""
    assert issubclass(asyncvk.ModelFormatError, ValueError)
    assert issubclass(asyncvk.InputError, ValueError)
    for device_error in (asyncvk.NoDeviceError, asyncvk.VulkanError, asyncvk.GpuTimeoutError):
        assert issubclass(device_error, asyncvk.DeviceError)
    async with Net() as net:
        with pytest.raises(FileNotFoundError, match=r"missing\.param"):
            await net.load_param(tmp_path / "missing.param")
        (tmp_path / "bad.param").write_text("7767517\n1 1\nInput in0 0 1\n")
        with pytest.raises(asyncvk.ModelFormatError) as bad:
            await net.load_param(tmp_path / "bad.param")
        assert "bad.param" in str(bad.value)


async def test_cancelled_load_model_leaks_nothing(device: VulkanDevice) -> None:
    from pathlib import Path

    root = Path(__file__).parent / "models" / "rrdb"
    before = device.live_handles()
    net = Net()
    await net.load_param(root / "model.param")
    seen: list[int] = []

    def progress(done: int, total: int) -> None:
        seen.append(done)
        if len(seen) == 2:  # some pipelines built, most not: cancel in the middle
            task.cancel()

    task = asyncio.create_task(net.load_model(root / "model.bin", progress=progress))
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen[-1] < len(net.nodes)
    assert not net.loaded
    with pytest.raises(RuntimeError):
        net.create_extractor()
    await net.aclose()
    assert device.live_handles() == before


async def test_malformed_model_files_raise_one_error_type(device: VulkanDevice) -> None:
    net = Net()
    await net.load_param(PARAM.encode())
    with pytest.raises(asyncvk.ModelFormatError, match="truncated weights"):
        await net.load_model(WEIGHTS[:-8])
    with pytest.raises(asyncvk.ModelFormatError, match="trailing weights"):
        await net.load_model(WEIGHTS + b"\0" * 8)
    with pytest.raises(asyncvk.ModelFormatError, match=r"unsupported layer type: Bogus \(line"):
        await Net().load_param(PARAM.replace("Sigmoid ", "Bogus ").encode())
    await net.aclose()


async def test_a_file_object_is_read_off_the_event_loop() -> None:
    """``load_param`` and ``load_model`` read a file object on a worker thread: its file may
    be on a slow disk, and the loop serves others meanwhile."""
    readers: list[threading.Thread] = []

    class Recorded:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def read(self) -> bytes:
            readers.append(threading.current_thread())
            return self.data

    async with Net(Option(use_vulkan_compute=False)) as net:
        await net.load_param(Recorded(PARAM.encode()))  # type: ignore[arg-type]
        await net.load_model(Recorded(WEIGHTS))  # type: ignore[arg-type]
        assert net.input_names
    assert len(readers) == 2
    assert all(t is not threading.main_thread() for t in readers), readers
