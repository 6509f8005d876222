"""The staging path: uploads and readbacks through copy commands, as on a GPU whose compute
memory is not host-visible. lavapipe's memory is all host-visible (so is the H100's, through
resizable BAR); the ``upload_through_staging`` quirk drives this path on a real driver."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from asyncvk import Net, Option, PipelineCache
from asyncvk.gpu import VulkanDevice

MODEL = Path(__file__).parent / "models" / "cunet"


def test_buffers_are_unmapped_and_round_trip(staged: VulkanDevice) -> None:
    assert not staged.allocator.device_is_host_visible
    x = np.arange(1000, dtype=np.float32) * 0.5
    buf = staged.upload_sync(x)
    try:
        assert not buf.host_visible
        with pytest.raises(ValueError, match="not host visible"):
            buf.view()
        np.testing.assert_array_equal(staged.download_sync(buf, x.shape), x)
    finally:
        buf.release()


async def _run(param: Path, option: Option) -> tuple[np.ndarray, list[dict[str, int]]]:
    """The output, and per plan segment how many blobs went up and came back via staging."""
    async with Net(option) as net:
        await net.load_param(param)
        await net.load_model(MODEL / "model.bin")
        ex = net.create_extractor()
        ex.input("in0", np.load(MODEL / "input.npy"))
        y = await ex.extract("out0")
        staging = [
            {
                "staged_uploads": sum(map(len, plan.io.staging)),
                "readbacks": sum(map(len, plan.io.readback)),
            }
            for plans in net._plans.values()
            for plan in plans
        ]
        return y, staging


@pytest.mark.parametrize("cpu_in_the_middle", [False, True])
async def test_a_model_runs_through_staging(
    staged: VulkanDevice, tmp_path: Path, cpu_in_the_middle: bool
) -> None:
    param = MODEL / "model.param"
    if cpu_in_the_middle:
        # featmask 16 keeps one convolution on the CPU: two GPU segments, each with an upload
        # and a readback through staging buffers
        text = param.read_text().replace(
            "convrelu_3               1 1 5 6 0=32", "convrelu_3               1 1 5 6 31=16 0=32"
        )
        assert "31=16" in text
        param = tmp_path / "split.param"
        param.write_text(text)
    with PipelineCache(staged) as cache:
        y, plans = await _run(param, Option(pipeline_cache=cache))
    reference, _ = await _run(param, Option(use_vulkan_compute=False))
    assert np.linalg.norm(y - reference) / np.linalg.norm(reference) < 1e-4
    segments = 2 if cpu_in_the_middle else 1
    assert plans == [{"staged_uploads": segments, "readbacks": segments}]


@pytest.mark.parametrize("cached", [True, False])
async def test_results_come_back_through_a_copy_where_mapped_memory_is_uncached(
    tmp_path: Path, cached: bool
) -> None:
    """A discrete GPU maps its memory through resizable BAR, uncached: the host reading an
    output there crosses PCIe for every cache line (6 ms for a 164 KB output on the H100).
    Results then come back through one copy into host-cached memory; inputs are still written
    in place. lavapipe's memory is cached, so the copy path is forced here."""
    device = VulkanDevice(0)
    try:
        assert device.allocator.device_is_host_cached  # lavapipe: one cached memory type
        device.allocator.device_is_host_cached = cached
        with PipelineCache(device) as cache:
            y, plans = await _run(MODEL / "model.param", Option(pipeline_cache=cache))
        buf = device.upload_sync(np.arange(10, dtype=np.float32))
        try:
            back = device.download_sync(buf, (10,))
        finally:
            buf.release()
    finally:
        device.close()
    reference, _ = await _run(MODEL / "model.param", Option(use_vulkan_compute=False))
    assert np.linalg.norm(y - reference) / np.linalg.norm(reference) < 1e-4
    assert plans == [{"staged_uploads": 0, "readbacks": 0 if cached else 1}]
    np.testing.assert_array_equal(back, np.arange(10, dtype=np.float32))
