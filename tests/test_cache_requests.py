"""What a pipeline request builds: raw and builtin keys never meet, equal requests build once,
and the driver-cache counters say what the driver's creation feedback said."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pipeline_requests import build_one, get_one, request_one

from asyncvk import Net, Option
from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.gpu import CommandRecorder, PipelineArtifact, VulkanDevice
from asyncvk.shader import ShaderRegistry

MODELS = Path(__file__).resolve().parent / "models"
VK_DRIVER_ID_MESA_LLVMPIPE = 13


# -- the request API, in one place (it is being unified) ----------------------------------------


def _builtin(
    cache: PipelineCache, shader: str, specs: Sequence[float | int] = ()
) -> PipelineArtifact:
    return build_one(cache, PipelineSpec(shader, specializations=specs, local_size=(64, 1, 1)))


def _raw(cache: PipelineCache, spirv: bytes) -> PipelineArtifact:
    return request_one(cache, PipelineSpec("spirv", local_size=(64, 1, 1), spirv=spirv)).result()


async def _concurrently(
    cache: PipelineCache, shader: str, specs: tuple[float, int], n: int
) -> list[PipelineArtifact]:
    return await asyncio.gather(
        *[
            get_one(cache, PipelineSpec(shader, specializations=specs, local_size=(64, 1, 1)))
            for _ in range(n)
        ]
    )


def _times(device: VulkanDevice, pipeline: PipelineArtifact, x: np.ndarray) -> np.ndarray:
    """Run a one-binding shader that scales ``x`` in place."""
    buf = device.upload_sync(x)
    rec = CommandRecorder(device, one_time=True)
    try:
        rec.dispatch(pipeline, [buf], b"", (x.size // 64, 1, 1))
        device.run_sync(rec.finish())
        return device.download_sync(buf, x.shape)
    finally:
        rec.release()
        buf.release()


# -- raw and builtin key spaces ------------------------------------------------------------------

#: A shader that triples ``v[]`` (glslang, unoptimised, so that an OpName string can be varied):
#: its block is named ``tag_0s1_000000000000``, found by search so that the BLAKE2b-256 of the
#: module is valid UTF-8. A builtin shader can then be named by exactly the bytes that identify
#: this module as raw SPIR-V: only the key-space separation tells the two requests apart.
TRIPLE_SPIRV = zlib.decompress(
    base64.b64decode(
        "eNpdUltKw1AQnSY2VWta66NWbevrUyj1iSCKQiUWCv1wASG2oQRiKjYWXIAbczfqBvwRnJmcaHDKdHLmzOvOvaaxVyAz"
        "R0WyaYsSqZBBObZFstQ6vbteaxIPW8cnbeFLZGqccGWOybOdYX3wgkj8i6qW+iqIS9Xkn8H2LSc581zbdfp9p3fjDh4f"
        "3Un8EvpuGES+Owye/EEcTH2Jm83EBdEgfB5mA/Icke2f1wyijhd7gi1gkanys9yZKPZGbnty4LYzQuDlDKPQdcLxvRd2"
        "o+l44MXBOOp2ZB9cr6B1k3PfakYie7AOn1N8BuKl3+4vl+CdDF7UfRPVgTexr3fgOvAHcAP4E7iJ/HXWZe5qaH1Tb0q+"
        "q/wl826zNvg7nb+JOQvKzdAc2wVW8Z0Dz8O3yriIGtJ7H3gB5xDeBi+yxrjE1tZ7T+qXkVtC/TLeS1rPxpshxC+Bs8Fb"
        "2kfk6kr4KvqL/xD56e5SXP+H090dcVZJd5Dk1MGd8n0auFvC7F/skXd+zf9LuuNkbpn1AnVX4L/mulU9/9/uVhAnc9bA"
        "vXItC3dWw7nS3I1/uZc8xQZiv3n6M9Yf1vhDfA=="
    )
)

DOUBLE_GLSL = """#version 450
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;
layout(binding = 0) buffer Data { float v[]; } data;
void main() { data.v[gl_GlobalInvocationID.x] *= 2.0; }
"""


def test_a_builtin_named_like_a_raw_module_gets_its_own_pipeline(
    device: VulkanDevice, tmp_path: Path
) -> None:
    """Equal name bytes, option bits, local size, subgroup size and specializations: a raw
    module and a builtin shader still have separate keys, so neither is served the other."""
    name = hashlib.blake2b(TRIPLE_SPIRV, digest_size=32).digest().decode()
    (tmp_path / f"{name}.comp").write_text(DOUBLE_GLSL)
    x = np.arange(256, dtype=np.float32)
    for raw_first in (False, True):
        with PipelineCache(device, registry=ShaderRegistry(tmp_path)) as cache:
            if raw_first:
                raw, builtin = _raw(cache, TRIPLE_SPIRV), _builtin(cache, name)
            else:
                builtin, raw = _builtin(cache, name), _raw(cache, TRIPLE_SPIRV)
            assert raw is not builtin
            assert cache.statistics().pipelines_created == 2
            np.testing.assert_array_equal(_times(device, builtin, x), x * 2)
            np.testing.assert_array_equal(_times(device, raw, x), x * 3)


# -- equal requests build once -------------------------------------------------------------------


async def test_concurrent_equal_requests_build_one_pipeline(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache:
        pipelines = await _concurrently(cache, "scale_add", (2.0, 1), 40)
        stats = cache.statistics()
        assert len({id(p) for p in pipelines}) == 1
        assert stats.pipelines_created == 1 and stats.spirv_compiles == 1
        assert len(cache.build_log()) == 1


async def test_a_model_with_repeated_layers_requests_each_pipeline_once(
    device: VulkanDevice,
) -> None:
    """squeezenet's fire modules repeat one convolution spec many times: each distinct pipeline
    is asked for once, not once per layer (each extra ask is a shared-future wake-up)."""
    with PipelineCache(device) as cache:
        net = Net(Option(pipeline_cache=cache))
        try:
            await net.load_param(MODELS / "squeezenet" / "model.param")
            await net.load_model(MODELS / "squeezenet" / "model.bin")
        finally:
            await net.aclose()
        stats = cache.statistics()
        assert stats.pipelines_created == len(cache.build_log()) > 0
        assert (stats.inflight_joins, stats.live_hits) == (0, 0), stats


# -- creation feedback ---------------------------------------------------------------------------


def test_driver_cache_counters_follow_the_creation_feedback(device: VulkanDevice) -> None:
    """Every creation is counted as the feedback says. lavapipe (Mesa's own shader cache off, as
    conftest sets) marks its feedback valid and never reports a pipeline-cache hit."""
    with PipelineCache(device) as cache:
        for i in range(3):
            _builtin(cache, "scale_add", (float(i), 0))
        cache.clear()  # the same pipelines again, through the same VkPipelineCache
        for i in range(3):
            _builtin(cache, "scale_add", (float(i), 0))
        stats, log = cache.statistics(), cache.build_log()
    assert stats.pipelines_created == len(log) == 6
    assert stats.driver_cache_hits == sum(r.driver_cache_hit is True for r in log)
    assert stats.driver_cache_misses == sum(r.driver_cache_hit is False for r in log)
    if device.info.support_pipeline_creation_feedback:
        assert all(r.driver_cache_hit is not None for r in log), log
    if device.info.identity.driver_id == VK_DRIVER_ID_MESA_LLVMPIPE:
        assert (stats.driver_cache_hits, stats.driver_cache_misses) == (0, 6)
