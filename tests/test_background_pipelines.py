"""Background pipelines: ``load_model`` returns without waiting for a layer's faster
alternative (the implicit-GEMM convolution), plans use what is built, and a plan recorded
before the alternative was adopted is recorded again afterwards, off the request path."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from test_layers_gpu import CASES, Case, build

from asyncvk.gpu._shader_choices import ShaderChoices
from asyncvk.net._dispatch_profile import ProfilingExtractor
from asyncvk.net._net import Net
from asyncvk.net._option import Option
from asyncvk.shader import _compiler

RNG = np.random.default_rng(5)
#: GPU-like shader choices on lavapipe: the GEMM convolution, none of lavapipe's own
GPU_LIKE = Option(
    shader_choices=ShaderChoices(conv_gemm="always", conv_tiled="never", conv_winograd="never")
)
CASE: Case = next(c for c in CASES if c.params.startswith("0=70 "))  # splits its taps too


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The GEMM builds held until the gate opens (nets made with GPU_LIKE choices)."""
    opened = threading.Event()
    compile_glsl = _compiler.compile_glsl  # imported by the cache where it compiles

    def held_back(text: str, name: str, **kwargs: Any) -> bytes:
        if name.startswith("convolution_gemm"):  # the background builds wait for the test
            assert opened.wait(120)
        return compile_glsl(text, name, **kwargs)

    monkeypatch.setattr(_compiler, "compile_glsl", held_back)
    yield opened
    opened.set()


def _await_chain(task: asyncio.Future[Any]) -> list[str]:
    """The coroutines a pending task is suspended in, outermost first: where it waits, read
    from the task itself rather than guessed from how long it has had."""
    names, coro = [], getattr(task, "get_coro", lambda: None)()
    while coro is not None and hasattr(coro, "cr_code"):
        names.append(coro.cr_code.co_name)
        coro = coro.cr_await
    return names


async def _loop_turns(count: int = 20) -> None:
    """Let every task that can run take ``count`` steps (no wall-clock wait)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def _extract(net: Net, x: np.ndarray) -> np.ndarray:
    ex = net.create_extractor()
    ex.input("in0", x)
    return await ex.extract("out0")


async def _cpu_reference(param: bytes, weights: bytes, x: np.ndarray) -> np.ndarray:
    cpu = Net()
    cpu.opt.use_vulkan_compute = False
    await cpu.load_param(param)
    await cpu.load_model(weights)
    expected = await _extract(cpu, x)
    await cpu.aclose()
    return expected


async def test_load_does_not_wait_and_plans_adopt_the_gemm_once_built(
    gate: threading.Event,
) -> None:
    param, weights = build(CASE)
    x = RNG.standard_normal(CASE.inputs[0]).astype(np.float32)
    expected = await _cpu_reference(param, weights, x)
    async with Net(GPU_LIKE) as net:
        try:  # opened before the Net closes: closing waits for the held builds
            await net.load_param(param)
            await asyncio.wait_for(net.load_model(weights), 120)  # returns with the gate shut
            assert net.gpu_model is not None and net.gpu_model.pipelines_version == 0
            first = await _extract(net, x)
            ((before,),) = net.gpu_model.plans.plans.values()
            gate.set()
            await net.background_builds()
            # conv_gemm and conv_gemm_sum, as each is built (together if built together, and
            # where the driver compiles at the first dispatch: dispatched once, then handed over)
            adopted = (1,) if net.gpu_model.device.info.is_cpu else (1, 2)
            assert net.gpu_model.pipelines_version in adopted
            ((after,),) = net.gpu_model.plans.plans.values()
            assert after is not before  # recorded again, now with the GEMM pipelines
            built = net.gpu_model.plans.statistics().built
            second = await _extract(net, x)
            stats = net.gpu_model.plans.statistics()
            assert stats.renewed >= 1 and stats.built == built  # none on the request path
            assert net.gpu_model.plans.plans[after.request] == [after]
            async with ProfilingExtractor(net) as ex:
                ex.input("in0", x)
                await ex.extract("out0")
                assert ex.profile is not None
                shaders = {d.shader for d in ex.profile.dispatches}
            assert shaders == {"convolution_gemm", "convolution_gemm_sum"}
        finally:
            gate.set()
    for got in (first, second):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-5)


async def test_closing_waits_for_the_background_builds(gate: threading.Event) -> None:
    """A cache saved after ``async with Net(...)`` holds the background pipelines."""
    param, weights = build(CASE)
    net = Net(GPU_LIKE)
    try:
        await net.load_param(param)
        await asyncio.wait_for(net.load_model(weights), 120)
        closing = asyncio.ensure_future(net.aclose())
        await _loop_turns()
        assert not closing.done()
        # aclose waits for the held builds, and for nothing else yet
        assert _await_chain(closing)[:3] == ["aclose", "background_builds", "settled"]
        assert net.gpu_model is not None and net.gpu_model.pipelines_version == 0
        gate.set()
        await asyncio.wait_for(closing, 120)
    finally:
        gate.set()
        await net.aclose()


async def test_cpu_devices_dispatch_the_winograd_passes_after_the_first_output() -> None:
    """Where the driver compiles a pipeline at its first dispatch (llvmpipe), a wide 3x3
    layer's first extraction runs the direct shader: the Winograd passes are built in the
    background, dispatched once after that extraction, then adopted; the next extraction runs
    them, with the same output."""
    from asyncvk.gpu import get_gpu_info

    if not get_gpu_info().is_cpu:
        pytest.skip("the deferred hand-over is for CPU devices")
    case = Case("Convolution", "0=64 1=3 4=1 5=1 6=36864 9=1", [(64, 10, 12)])
    case.weights = [(36864, 0), (64, 1)]
    param, weights = build(case)
    x = RNG.standard_normal(case.inputs[0]).astype(np.float32)
    expected = await _cpu_reference(param, weights, x)
    async with Net() as net:
        await net.load_param(param)
        await net.load_model(weights)
        assert net.gpu_model is not None and net.gpu_model.background is not None
        await _loop_turns()
        # held back until a first output: the builds wait for the queue, not for time
        assert _await_chain(net.gpu_model.background)[-2:] == ["_adopt", "wait"]
        assert net.gpu_model.pipelines_version == 0
        first = await _extract(net, x)
        ((plan,),) = net.gpu_model.plans.plans.values()
        assert plan.pipelines_version == 0  # recorded with the direct shader alone
        await net.background_builds()
        assert net.gpu_model.pipelines_version == 1
        async with ProfilingExtractor(net) as ex:
            ex.input("in0", x)
            second = await ex.extract("out0")
            assert ex.profile is not None
            shaders = {d.shader for d in ex.profile.dispatches}
    assert shaders == {f"convolution_winograd_{p}" for p in ("input", "gemm", "output")}
    outputs = [first, second]
    for got in outputs:
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=3e-6 * np.abs(expected).max())
