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

import numpy as np
import pytest

from asyncvk import Net
from asyncvk.gpu import get_gpu_count

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
