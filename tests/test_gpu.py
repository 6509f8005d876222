from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import struct
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from pipeline_requests import get_one

from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.gpu import (
    CommandRecorder,
    DeviceIdentity,
    VulkanDevice,
    get_gpu_info,
    resolve_quirks,
)

IDENTITY_FIELDS = {
    "vendor_id",
    "device_id",
    "device_name",
    "device_type",
    "api_version",
    "driver_version",
    "driver_id",
    "driver_name",
    "driver_info",
    "pipeline_cache_uuid",
}
CAPABILITY_FIELDS = {
    "subgroup_size",
    "support_fp16_storage",
    "support_fp16_arithmetic",
    "support_int8_storage",
    "support_int8_arithmetic",
    "support_int16_storage",
    "limits",
    "queue_families",
    "quirks",
}


def test_info_json_prints_identity_capabilities_and_quirks() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "asyncvk", "info", "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(out)
    assert data["devices"], "no device listed"
    device = data["devices"][data["default_device"]]
    assert IDENTITY_FIELDS | CAPABILITY_FIELDS <= set(device)
    assert len(bytes.fromhex(device["pipeline_cache_uuid"])) == 16
    assert set(device["quirks"]) >= {"broken_pipeline_cache", "serialize_pipeline_creation"}


def test_quirk_environment_override_switches_flags() -> None:
    env = dict(os.environ, ASYNCVK_QUIRKS="serialize_pipeline_creation,broken_pipeline_cache")
    out = subprocess.run(
        [sys.executable, "-m", "asyncvk", "info", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    quirks = json.loads(out)["devices"][0]["quirks"]
    assert quirks["serialize_pipeline_creation"] is True
    assert quirks["broken_pipeline_cache"] is True
    assert "ASYNCVK_QUIRKS" in quirks["reasons"]["broken_pipeline_cache"]


def test_unknown_quirk_name_is_a_clear_error() -> None:
    env = dict(os.environ, ASYNCVK_QUIRKS="no_such_quirk")
    proc = subprocess.run(
        [sys.executable, "-m", "asyncvk", "info"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 1
    assert "unknown quirk 'no_such_quirk'" in proc.stderr
    assert "Traceback" not in proc.stderr


def _identity(vendor: int, api: tuple[int, int, int]) -> DeviceIdentity:
    major, minor, patch = api
    return DeviceIdentity(
        vendor, 0x6030001, (major << 22) | (minor << 12) | patch, 1, 0, "Adreno", "qcom", bytes(16)
    )


def test_quirk_table_matches_old_adreno_only() -> None:
    old = resolve_quirks(_identity(0x5143, (1, 0, 49)), override="")
    assert old.broken_pipeline_cache and old.serialize_pipeline_creation
    assert "Adreno" in old.reasons["broken_pipeline_cache"]
    assert not resolve_quirks(_identity(0x5143, (1, 1, 0)), override="").broken_pipeline_cache
    assert not resolve_quirks(_identity(0x10DE, (1, 0, 49)), override="").broken_pipeline_cache
    forced_off = resolve_quirks(_identity(0x5143, (1, 0, 49)), override="!broken_pipeline_cache")
    assert not forced_off.broken_pipeline_cache


def test_default_device_env_selects_by_type() -> None:
    env = dict(os.environ, ASYNCVK_DEVICE="cpu")
    code = "from asyncvk.gpu import get_gpu_info; print(get_gpu_info().type_name)"
    info = get_gpu_info()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if info.type_name == "cpu":
        assert out.stdout.strip() == "cpu"
    env["ASYNCVK_DEVICE"] = "99"
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "ASYNCVK_DEVICE=99" in bad.stderr


def test_upload_download_round_trip(device: VulkanDevice) -> None:
    data = np.random.default_rng(1).standard_normal((3, 17, 5)).astype(np.float32)
    buf = device.upload_sync(data)
    try:
        np.testing.assert_array_equal(device.download_sync(buf, data.shape), data)
    finally:
        buf.release()
    buf.release()  # idempotent


@pytest.mark.parametrize("staged", [False, True])
def test_a_large_upload_is_split_over_threads_and_round_trips(
    device: VulkanDevice, staged: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copies past PARALLEL_COPY_BYTES go in page-aligned parts on COPY_THREADS threads; a size
    that does not divide leaves a short last part, and every byte lands where it belongs."""
    from asyncvk.gpu import _host_copies, get_gpu_info, resolve_quirks

    monkeypatch.setattr(_host_copies, "PARALLEL_COPY_BYTES", 4096)
    monkeypatch.setattr(_host_copies, "COPY_THREADS", 3)
    parts: list[int] = []
    _record_copy_parts(monkeypatch, parts)
    data = np.random.default_rng(2).standard_normal(25_001).astype(np.float32)  # 3 parts
    target = device
    if staged:
        quirks = resolve_quirks(get_gpu_info(0).identity, "upload_through_staging")
        target = VulkanDevice(0, quirks=quirks)
    try:
        buf = target.upload_sync(data)
        try:
            assert parts[:3] == [36_864, 36_864, 26_276]  # 100_004 bytes, 4 KiB-aligned thirds
            np.testing.assert_array_equal(target.download_sync(buf, data.shape), data)
        finally:
            buf.release()
    finally:
        if staged:
            target.close()


def _record_copy_parts(monkeypatch: pytest.MonkeyPatch, parts: list[int]) -> None:
    """The real copy pool, noting the bytes of each part given to one of its threads."""
    from asyncvk.gpu import _host_copies

    real_pool = _host_copies.thread_pool

    class RecordingPool:
        def __init__(self, pool: concurrent.futures.ThreadPoolExecutor) -> None:
            self.pool = pool

        def submit(self, fn: Any, share: list[tuple[np.ndarray, np.ndarray]]) -> Any:
            parts.append(sum(dst.nbytes for dst, _ in share))
            return self.pool.submit(fn, share)

    monkeypatch.setattr(_host_copies, "thread_pool", lambda *a: RecordingPool(real_pool(*a)))


def test_many_copies_are_spread_over_threads_in_shares_of_similar_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch's items (``copy_all``): past PARALLEL_COPIES_BYTES in all, the copies go to
    COPY_THREADS threads, the largest first to the least loaded; below it, on the caller's
    thread. Every byte lands where it belongs."""
    from asyncvk.gpu import _host_copies

    monkeypatch.setattr(_host_copies, "PARALLEL_COPIES_BYTES", 10_000)
    monkeypatch.setattr(_host_copies, "COPY_THREADS", 3)
    parts: list[int] = []
    _record_copy_parts(monkeypatch, parts)
    rng = np.random.default_rng(4)
    sizes = [4000, 3000, 3000, 2000, 1000, 1000]  # 14,000 bytes: shares of 5,000, 5,000, 4,000
    srcs = [rng.integers(0, 255, n, dtype=np.uint8) for n in sizes]
    dsts = [np.zeros(n, np.uint8) for n in sizes]
    _host_copies.copy_all(list(zip(dsts, srcs, strict=True)))
    assert sorted(parts) == [4000, 5000, 5000]
    for dst, src in zip(dsts, srcs, strict=True):
        np.testing.assert_array_equal(dst, src)
    parts.clear()
    small = [(np.zeros(10, np.uint8), np.ones(10, np.uint8)) for _ in range(3)]
    _host_copies.copy_all(small)
    assert parts == [] and all(d.all() for d, _ in small)


async def _scale_add(
    cache: PipelineCache, x: np.ndarray, alpha: float, offset: int, bias: float
) -> np.ndarray:
    device = cache.device
    pipeline = await get_one(
        cache, PipelineSpec("scale_add", specializations=(alpha, offset), local_size=(32, 1, 1))
    )
    src = await device.upload(x)
    dst = device.allocate(x.nbytes)
    rec = CommandRecorder(device, one_time=True)
    try:
        rec.dispatch(
            pipeline, [src, dst], struct.pack("<if", x.size, bias), (-(-x.size // 32), 1, 1)
        )
        await device.run(rec.finish())
        return await device.download(dst, x.shape)
    finally:
        rec.release()
        src.release()
        dst.release()


async def test_shader_with_specialization_and_push_constants_matches_numpy(
    device: VulkanDevice,
) -> None:
    x = np.random.default_rng(2).standard_normal(1001).astype(np.float32)
    with PipelineCache(device) as cache:
        y = await _scale_add(cache, x, 1.5, 3, -0.25)
    np.testing.assert_allclose(y, x * 1.5 + 3 - 0.25, rtol=1e-6)


async def test_fifty_concurrent_coroutines_get_their_own_results(device: VulkanDevice) -> None:
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(rng.integers(1, 5000)).astype(np.float32) for _ in range(50)]
    with PipelineCache(device) as cache:
        outputs = await asyncio.gather(
            *[_scale_add(cache, x, float(i), i % 7, 0.5) for i, x in enumerate(inputs)]
        )
    for i, (x, y) in enumerate(zip(inputs, outputs, strict=True)):
        np.testing.assert_allclose(y, x * i + (i % 7) + 0.5, rtol=1e-6, atol=1e-6)


def test_memory_stats_return_to_zero(device: VulkanDevice) -> None:
    before = device.allocator.stats()["used_bytes"]
    bufs = [device.allocate(1000 + i) for i in range(100)]
    assert device.allocator.stats()["used_bytes"] > before
    for b in bufs:
        b.release()
    assert device.allocator.stats()["used_bytes"] == before
