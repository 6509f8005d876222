"""On GPUs a load asks for its background pipelines in its own request; adopting them later
waits on those very builds rather than asking again. Asking again would build a pipeline twice
where the driver cannot share pipelines (one of each pair never used, kept until the cache
closes), and build again one whose build already failed (failures are not cached)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from test_background_pipelines import CASE, GPU_LIKE
from test_layers_gpu import build

from asyncvk import Net, Option, PipelineCache
from asyncvk.gpu import VulkanDevice, get_gpu_info, resolve_quirks
from asyncvk.shader import _compiler

#: a guard against hanging, not a measurement
GUARD_S = 60.0
GEMM = ("convolution_gemm", "convolution_gemm_sum")


def _discrete(quirks: str = "") -> VulkanDevice:
    """A device of its own that says it is a discrete GPU, as far as the load asks."""
    device = VulkanDevice(0, quirks=resolve_quirks(get_gpu_info(0).identity, quirks))
    device.info = dataclasses.replace(device.info, device_type=2)
    return device


async def _load(cache: PipelineCache) -> None:
    param, weights = build(CASE)
    option = Option(pipeline_cache=cache, shader_choices=GPU_LIKE.shader_choices)
    async with Net(option) as net:
        await net.load_param(param)
        await net.load_model(weights)
        await net.background_builds()


@pytest.fixture
def unshared() -> Iterator[VulkanDevice]:
    device = _discrete("broken_pipeline_cache")
    try:
        yield device
    finally:
        device.close()


async def test_a_driver_that_shares_no_pipelines_builds_each_background_one_once(
    unshared: VulkanDevice,
) -> None:
    with PipelineCache(unshared, packaged_spirv=False) as cache:
        await _load(cache)
        names = [b.name for b in cache.counters.build_log()]
    assert sorted(n for n in names if n in GEMM) == sorted(GEMM)


@pytest.fixture
def failing_gemm(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The GEMM shaders fail to compile (their names listed as they are tried); the load's own
    compiles wait for a first failure, so it has failed before the load ends."""
    tried: list[str] = []
    failed = threading.Event()
    compile_glsl = _compiler.compile_glsl

    def gemm_fails(text: str, name: str, **kwargs: Any) -> bytes:
        if name.startswith("convolution_gemm"):
            tried.append(name)
            failed.set()
            raise RuntimeError(f"{name}: refused by the test")
        assert failed.wait(GUARD_S)
        return compile_glsl(text, name, **kwargs)

    monkeypatch.setattr(_compiler, "compile_glsl", gemm_fails)
    yield tried
    failed.set()


async def test_a_background_build_that_failed_is_not_built_again(
    failing_gemm: list[str],
) -> None:
    device = _discrete()
    try:  # threads enough that the GEMM compiles start beside the load's own
        with PipelineCache(device, packaged_spirv=False, max_workers=32) as cache:
            await _load(cache)
            failures = cache.statistics().failures
    finally:
        device.close()
    assert sorted(failing_gemm) == sorted(f"{n}.comp" for n in GEMM)
    assert failures == len(GEMM)


async def test_on_gpus_the_background_pipelines_are_asked_for_with_the_load_s_own() -> None:
    """Where the driver compiles at creation, the GEMM pair is asked for in the load's own
    request, queued behind its pipelines (the pool takes requests in order), not once they are
    built: a cold GEMM compile takes about 150 ms on the H200, which the first inferences
    after a load otherwise run on the stand-in."""
    device = _discrete()
    try:
        with PipelineCache(device, packaged_spirv=False) as cache:
            await _load(cache)
            log = cache.counters.build_log()
    finally:
        device.close()
    background = [b for b in log if b.name in GEMM]
    own = [b for b in log if b.name not in GEMM]
    assert background and own, [b.name for b in log]
    assert min(b.requested for b in background) < max(b.finished for b in own)
