from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
from pipeline_requests import build_one, get_one, request_one, run_scale_add

from asyncvk import CacheMissError, PipelineError
from asyncvk.cache import PipelineCache, PipelineSpec, builtin_digest
from asyncvk.gpu import PipelineArtifact, VulkanDevice, resolve_quirks
from asyncvk.shader import ShaderOptions, compile_glsl

RAW = """#version 450
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;
layout(constant_id = 0) const float k = 1.0;
layout(binding = 0) buffer A { float a[]; };
void main() { a[gl_GlobalInvocationID.x] *= k; }
"""


class TestDigest:
    def test_equal_requests_equal_digests(self) -> None:
        a = builtin_digest("relu", 3, (64, 1, 1), 32, (1, 2.0))
        assert a == builtin_digest("relu", 3, (64, 1, 1), 32, (1, 2.0))

    @pytest.mark.parametrize(
        "change",
        [
            dict(shader="relu6"),
            dict(bits=2),
            dict(local=(32, 1, 1)),
            dict(local=(64, 2, 1)),
            dict(local=(64, 1, 2)),
            dict(subgroup=16),
            dict(specs=(1, 2.5)),
            dict(specs=(1,)),
            dict(specs=(1.0, 2.0)),
        ],
    )
    def test_any_field_change_changes_the_digest(self, change: dict[str, object]) -> None:
        base = dict(shader="relu", bits=3, local=(64, 1, 1), subgroup=32, specs=(1, 2.0))
        new = {**base, **change}
        assert builtin_digest(
            base["shader"],
            base["bits"],
            base["local"],
            base["subgroup"],  # type: ignore[arg-type]
            base["specs"],
        ) != builtin_digest(  # type: ignore[arg-type]
            new["shader"],
            new["bits"],
            new["local"],
            new["subgroup"],
            new["specs"],  # type: ignore[arg-type]
        )


async def test_thousand_requests_over_fifty_keys(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache:
        pipelines = await asyncio.gather(
            *[
                get_one(
                    cache,
                    PipelineSpec(
                        "scale_add", specializations=(float(i % 50), 0), local_size=(32, 1, 1)
                    ),
                )
                for i in range(1000)
            ]
        )
        stats = cache.statistics()
        assert stats.pipelines_created == 50
        assert stats.spirv_compiles == 1
        assert stats.requests == 1000
        assert len({id(p) for p in pipelines}) == 50
        x = np.arange(100, dtype=np.float32)
        for i in (0, 7, 49, 999):
            np.testing.assert_allclose(
                run_scale_add(device, pipelines[i], x, 1.0), x * (i % 50) + 1.0
            )
        # Later requests are live hits; an fp16 variant is a second SPIR-V compile.
        await get_one(
            cache, PipelineSpec("scale_add", specializations=(3.0, 0), local_size=(32, 1, 1))
        )
        assert cache.statistics().live_hits >= 1
        await get_one(
            cache,
            PipelineSpec(
                "scale_add",
                specializations=(3.0, 0),
                local_size=(32, 1, 1),
                options=ShaderOptions(use_fp16_storage=True),
            ),
        )
        expected = 2 if device.info.support_fp16_storage else 1
        assert cache.statistics().spirv_compiles == expected
        # Another local size reuses the SPIR-V.
        await get_one(
            cache, PipelineSpec("scale_add", specializations=(3.0, 0), local_size=(64, 1, 1))
        )
        assert cache.statistics().spirv_compiles == expected


async def test_failure_reaches_every_waiter_and_is_not_cached(device: VulkanDevice) -> None:
    calls = 0
    gate = threading.Event()

    def fail_once(entering: bool) -> None:
        nonlocal calls
        if entering:
            calls += 1
            if calls == 1:
                gate.wait(10)  # hold the build until every waiter has joined it
                raise RuntimeError("injected driver failure")

    device.creation_probe = fail_once
    try:
        with PipelineCache(device) as cache:
            futures = [
                request_one(cache, PipelineSpec("scale_add", specializations=(9.0, 1)))
                for _ in range(20)
            ]
            assert len({id(f) for f in futures}) == 1  # one shared build
            gate.set()
            results = await asyncio.gather(
                *[asyncio.wrap_future(f) for f in futures], return_exceptions=True
            )
            assert all(isinstance(r, RuntimeError) for r in results)
            assert cache.statistics().entries == 0
            assert cache.statistics().inflight_joins == 19
            retry = await get_one(cache, PipelineSpec("scale_add", specializations=(9.0, 1)))
            x = np.ones(64, np.float32)
            np.testing.assert_allclose(run_scale_add(device, retry, x, 0.0), x * 9 + 1)
    finally:
        device.creation_probe = None


async def test_cancelling_one_waiter_leaves_the_others_served(device: VulkanDevice) -> None:
    gate, entered = threading.Event(), threading.Event()

    def probe(entering: bool) -> None:
        if entering:
            entered.set()
            gate.wait(60)

    device.creation_probe = probe
    try:
        with PipelineCache(device) as cache:
            waiters = [
                asyncio.create_task(
                    get_one(cache, PipelineSpec("scale_add", specializations=(5.0, 0)))
                )
                for _ in range(3)
            ]
            # the build is in the driver, held, and all three wait for it: the event itself,
            # not a guess at how long that takes (60 s: a guard against a hang)
            assert await asyncio.to_thread(entered.wait, 60)
            assert cache.statistics().inflight_joins == 2
            waiters[0].cancel()
            gate.set()
            with pytest.raises(asyncio.CancelledError):
                await waiters[0]
            served = await asyncio.gather(*waiters[1:])
            assert served[0] is served[1]
            assert cache.statistics().pipelines_created == 1
    finally:
        device.creation_probe = None


def test_serialise_quirk_means_no_overlapping_creation() -> None:
    forced = VulkanDevice(0, quirks=resolve_quirks(_identity(), "serialize_pipeline_creation"))
    inside = 0
    peak = 0
    lock = threading.Lock()

    def probe(entering: bool) -> None:
        nonlocal inside, peak
        with lock:
            inside += 1 if entering else -1
            peak = max(peak, inside)

    forced.creation_probe = probe
    try:
        with PipelineCache(forced, max_workers=8) as cache:

            async def build() -> None:
                await asyncio.gather(
                    *[
                        get_one(cache, PipelineSpec("scale_add", specializations=(float(i), i)))
                        for i in range(40)
                    ]
                )

            asyncio.run(build())
            assert cache.statistics().pipelines_created == 40
        assert peak == 1
    finally:
        forced.close()


def test_without_the_quirk_creation_overlaps(device: VulkanDevice) -> None:
    """The control for the test above: the probe does see overlap when nothing serialises."""
    inside = 0
    peak = 0
    lock = threading.Lock()
    barrier = threading.Barrier(2, timeout=5)

    def probe(entering: bool) -> None:
        nonlocal inside, peak
        with lock:
            inside += 1 if entering else -1
            peak = max(peak, inside)
        if entering:
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                pass

    device.creation_probe = probe
    try:
        with PipelineCache(device, max_workers=4) as cache:
            futures = [
                request_one(cache, PipelineSpec("scale_add", specializations=(float(i), 77)))
                for i in range(2)
            ]
            for f in futures:
                f.result(timeout=30)
        assert peak == 2
    finally:
        device.creation_probe = None


def _identity():  # type: ignore[no-untyped-def]
    from asyncvk.gpu import get_gpu_info

    return get_gpu_info(0).identity


def test_broken_cache_quirk_skips_reuse_and_the_vk_cache() -> None:
    forced = VulkanDevice(0, quirks=resolve_quirks(_identity(), "broken_pipeline_cache"))
    try:
        with PipelineCache(forced) as cache:
            assert cache.vk_cache is None
            a = build_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))
            b = build_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))
            assert a is not b
            assert cache.statistics().pipelines_created == 2
            assert cache.driver_blob() == b""
        assert forced.live_handles().get("pipeline", 0) == 0
    finally:
        forced.close()


def test_sync_calls_from_plain_threads(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache:
        results: list[PipelineArtifact] = []
        lock = threading.Lock()

        def worker(i: int) -> None:
            p = build_one(cache, PipelineSpec("scale_add", specializations=(float(i % 3), 0)))
            with lock:
                results.append(p)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len({id(p) for p in results}) == 3


def test_specialization_count_mismatch_is_an_error(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache:
        with pytest.raises(PipelineError, match="declares 2 specialization constants"):
            build_one(cache, PipelineSpec("scale_add", specializations=(1.0,)))
        assert cache.statistics().entries == 0


def test_unknown_shader_name_fails_in_the_caller(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache, pytest.raises(KeyError, match="no_such_shader"):
        request_one(cache, PipelineSpec("no_such_shader"))


async def test_raw_spirv_pipelines(device: VulkanDevice) -> None:
    spirv = compile_glsl(RAW)
    with PipelineCache(device) as cache:
        a, b = await asyncio.gather(
            get_one(
                cache,
                PipelineSpec("spirv", specializations=(2.0,), local_size=(16, 1, 1), spirv=spirv),
            ),
            get_one(
                cache,
                PipelineSpec("spirv", specializations=(2.0,), local_size=(16, 1, 1), spirv=spirv),
            ),
        )
        assert a is b
        assert cache.statistics().spirv_compiles == 0
        assert cache.spirv_entries() == {}


def test_clear_and_close_leave_no_live_handle(device: VulkanDevice) -> None:
    before = device.live_handles().get("pipeline", 0)
    cache = PipelineCache(device)
    for i in range(5):
        build_one(cache, PipelineSpec("scale_add", specializations=(float(i), 0)))
    assert device.live_handles()["pipeline"] == before + 5
    cache.clear()
    assert device.live_handles().get("pipeline", 0) == before
    build_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))
    cache.close()
    cache.close()
    assert device.live_handles().get("pipeline", 0) == before
    assert device.live_handles().get("pipeline_cache", 0) == 0


def test_must_hit_refuses_a_cold_compile(device: VulkanDevice) -> None:
    with PipelineCache(device, must_hit=True) as cache:
        with pytest.raises(CacheMissError, match="scale_add"):
            build_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))


def test_repr_and_statistics(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache:
        build_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))
        build_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))
        assert repr(cache) == (
            "<PipelineCache [entries: 1, in-flight: 0 | hits: 1, created: 1, spirv compiled: 1]>"
        )


async def test_build_log_records_each_build_once_in_order(device: VulkanDevice) -> None:
    spirv = compile_glsl(RAW)
    with PipelineCache(device) as cache:
        await asyncio.gather(
            get_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0))),
            get_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0))),
            get_one(cache, PipelineSpec("scale_add", specializations=(2.0, 0))),
        )
        await get_one(cache, PipelineSpec("spirv", specializations=(2.0,), spirv=spirv))
        log = cache.build_log()
    assert [r.name for r in log] == ["scale_add", "scale_add", "spirv"]
    for r in log:
        assert r.requested <= r.started <= r.finished
        assert 0 < r.create_seconds <= r.finished - r.started
    # One of the two scale_add builds compiled the GLSL; the raw SPIR-V compiled nothing.
    assert max(r.spirv_seconds for r in log[:2]) > 0
    assert log[2].spirv_seconds == 0
