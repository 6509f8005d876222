"""What a load does side by side: the device opens while the weights are read.

The weights come through a named pipe whose writer waits to see the Net's device opened before
it writes: a load that opened the device only after reading would leave the writer waiting
(until its guard gives up, and the test fails). No timing is asserted.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncvk import Net
from asyncvk.gpu import _device, get_gpu_count

pytestmark = [
    pytest.mark.skipif(get_gpu_count() == 0, reason="no Vulkan device"),
    pytest.mark.skipif(sys.platform == "win32", reason="named pipes are POSIX here"),
]

MODEL = Path(__file__).parent / "models" / "cunet"
#: a guard against hanging, not a measurement
GUARD_S = 30.0


async def test_the_device_opens_while_the_weights_are_read(tmp_path: Path) -> None:
    pipe = tmp_path / "model.bin"
    os.mkfifo(pipe)
    weights = (MODEL / "model.bin").read_bytes()
    seen: dict[str, bool] = {}
    async with Net() as net:
        await net.load_param(MODEL / "model.param")

        def write_once_the_device_is_open() -> None:
            deadline = time.monotonic() + GUARD_S
            while net.cache is None and time.monotonic() < deadline:
                time.sleep(0.001)
            seen["device open before the weights came"] = net.cache is not None
            with pipe.open("wb") as f:
                f.write(weights)

        writer = threading.Thread(target=write_once_the_device_is_open)
        writer.start()
        try:
            await net.load_model(pipe)
        finally:
            await asyncio.to_thread(writer.join)
        out = await net.run({"in0": np.load(MODEL / "input.npy")})
    assert seen == {"device open before the weights came": True}
    assert np.isfinite(out["out0"]).all()


async def test_weights_that_fail_to_read_raise_their_error_after_the_device_opened(
    tmp_path: Path,
) -> None:
    """The read's error, not the device's, and the Net closes cleanly after it."""
    async with Net() as net:
        await net.load_param(MODEL / "model.param")
        with pytest.raises(FileNotFoundError, match=r"missing\.bin"):
            await net.load_model(tmp_path / "missing.bin")
        assert net.cache is not None  # the device's setup ended before the error was raised


def _await_chain(task: asyncio.Future[Any]) -> list[str]:
    """The coroutines a pending task is suspended in, outermost first."""
    names, coro = [], getattr(task, "get_coro", lambda: None)()
    while coro is not None and hasattr(coro, "cr_code"):
        names.append(coro.cr_code.co_name)
        coro = coro.cr_await
    return names


async def test_a_load_cancelled_after_its_read_failed_ends_after_the_device_thread(
    tmp_path: Path,
) -> None:
    """Cancelled while it waits for the device to open, a load still ends after that thread
    (as ``run_sync`` does): a Net closed after it returned holds no cache made later."""
    net = Net()
    await net.load_param(MODEL / "model.param")
    with _device._devices_lock:  # the device thread waits for the test
        load = asyncio.ensure_future(net.load_model(tmp_path / "missing.bin"))
        deadline = time.monotonic() + GUARD_S
        while _await_chain(load)[1:2] not in (["wait"], ["outlive"]):  # the read has failed
            assert time.monotonic() < deadline, _await_chain(load)
            await asyncio.sleep(0.001)
        load.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not load.done()
    with pytest.raises(asyncio.CancelledError):
        await load
    assert net.cache is not None
    net.close()
    assert net.cache is None


async def test_a_net_closed_during_its_load_raises_and_keeps_nothing(tmp_path: Path) -> None:
    """Closed while its weights are read (after its device thread opened a cache): the load
    raises, and the cache that thread made is closed, not left to the closed Net."""
    pipe = tmp_path / "model.bin"
    os.mkfifo(pipe)
    weights = (MODEL / "model.bin").read_bytes()
    net = Net()
    await net.load_param(MODEL / "model.param")
    opened = threading.Event()
    closed = threading.Event()
    made: list[Any] = []

    def write_once_closed() -> None:
        deadline = time.monotonic() + GUARD_S
        while net.cache is None and time.monotonic() < deadline:
            time.sleep(0.001)
        made.append(net.cache)
        opened.set()
        closed.wait(GUARD_S)
        with pipe.open("wb") as f:
            f.write(weights)

    writer = threading.Thread(target=write_once_closed)
    writer.start()
    load = asyncio.ensure_future(net.load_model(pipe))
    try:
        assert await asyncio.to_thread(opened.wait, GUARD_S)
        net.close()
        closed.set()
        with pytest.raises(RuntimeError, match="this Net is closed"):
            await load
    finally:
        closed.set()
        await asyncio.to_thread(writer.join)
    assert made[0] is not None and made[0].closed
    assert net.cache is None and net.gpu_model is None and not net.loaded
    with pytest.raises(RuntimeError, match="this Net is closed"):
        await net.load_param(MODEL / "model.param")
