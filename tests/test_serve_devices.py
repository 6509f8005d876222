"""``asyncvk serve --devices``: every model on each device given (here lavapipe twice, two
members that fail apart), each batch sent to the member that will finish it first, the answers
those of one device, and ``/metrics`` giving each device's load."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import numpy as np
from cli_runner import cli
from served_process import wait_until_ready
from test_serve import _free_port
from test_serve_models import TIMEOUT, _folder, _infer, _start

MODELS = Path(__file__).parent / "models"


async def test_batches_are_spread_over_the_devices(tmp_path: Path) -> None:
    port = _free_port()
    proc = _start(
        "--models", str(_folder(tmp_path)), "--port", str(port), "--no-access-log",
        "--devices", "0,0", "--max-batch", "2", "--max-inflight", "1",
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_until_ready(proc, f"{url}/v2/health/ready")
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
            x = np.load(MODELS / "cunet" / "input.npy")
            inputs = [x * (1 + i / 50) for i in range(12)]
            got = await asyncio.gather(*(_infer(http, url, "cunet", xi) for xi in inputs))
            squeezenet = await _infer(
                http, url, "squeezenet", np.load(MODELS / "squeezenet" / "input.npy")
            )
            async with http.get(f"{url}/metrics") as r:
                text = await r.text()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    want = np.load(MODELS / "cunet" / "output.npy").reshape(-1)
    assert np.linalg.norm(got[0] - want) < 1e-3 * np.linalg.norm(want)
    for xi, yi in zip(inputs[1:], got[1:], strict=True):  # cunet is not linear: same shape
        assert yi.shape == want.shape and np.all(np.isfinite(yi)), xi.shape
    want_sq = np.load(MODELS / "squeezenet" / "output.npy").reshape(-1)
    assert np.linalg.norm(squeezenet - want_sq) < 1e-3 * np.linalg.norm(want_sq)
    done = {
        member: int(n)
        for member, n in re.findall(
            r'asyncvk_device_batches_total\{model="cunet",device="0",member="(\d)"\} (\d+)', text
        )
    }
    # 11 requests after the first (alone: it tells the batcher what an item takes), in
    # batches of at most 2, one at a time per device: both devices took some
    assert set(done) == {"0", "1"} and all(n > 0 for n in done.values()), done
    assert 'asyncvk_device_taken_out{model="cunet",device="0",member="1"} 0' in text
    assert "# HELP asyncvk_device_batches_total " in text


def test_devices_arguments_that_cannot_be_served() -> None:
    bad = cli("serve", "x.param", "x.bin", "--devices", "0,gpu")
    assert bad.returncode == 2 and "'gpu' in '0,gpu' is not a device index" in bad.stderr
    both = cli("serve", "x.param", "x.bin", "--devices", "0", "--device", "0")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


async def test_a_group_s_batcher_runs_max_inflight_batches_on_each_device() -> None:
    from asyncvk import NetGroup
    from asyncvk.serve._batcher import Batcher, BatchSettings

    x = np.load(MODELS / "cunet" / "input.npy")[np.newaxis]
    async with NetGroup([0, 0]) as group:
        await group.load_param(MODELS / "cunet" / "model.param")
        await group.load_model(MODELS / "cunet" / "model.bin")
        batcher = Batcher(group, BatchSettings(max_batch=1, max_inflight=1))
        first = await batcher.infer({"in0": x})  # alone: it tells what an item takes
        tasks = [asyncio.ensure_future(batcher.infer({"in0": x})) for _ in range(6)]
        for _ in range(3):  # the requests queue, then the dispatcher forms what it may
            await asyncio.sleep(0)
        assert batcher.inflight() == 2  # one batch on each device, none waits for the other
        for got in await asyncio.gather(*tasks):
            np.testing.assert_array_equal(got["out0"], first["out0"])
        assert [s.runs_done for s in group.statistics()] != [7, 0]


async def test_a_model_on_devices_is_described_by_a_serving_member_and_a_dead_group_is_503(
    tmp_path: Path,
) -> None:
    """Members taken out are not what describes the model; with none left, a request is
    answered 503 (the device failed, not the request: another server may answer it)."""
    from aiohttp.test_utils import TestServer

    from asyncvk import DeviceError, NetGroup
    from asyncvk.serve import create_models_app
    from asyncvk.serve._oip import MODELS_KEY
    from asyncvk.serve._repository import ModelFiles
    from asyncvk.serve._state import STATE_KEY

    files = ModelFiles(
        "cunet", str(MODELS / "cunet" / "model.param"), str(MODELS / "cunet" / "model.bin")
    )
    server = TestServer(create_models_app([files], devices=[0, 0]), host="127.0.0.1")
    await server.start_server()
    try:
        state = server.app[STATE_KEY]
        assert state.loading is not None
        await state.loading
        model = server.app[MODELS_KEY]["cunet"]
        group = model.runner
        assert isinstance(group, NetGroup)
        _, second = group.nets
        group._members[0].take_out(DeviceError("failed on purpose"))
        assert model.net is second and model.nets == (second,)
        group._members[1].take_out(DeviceError("failed on purpose too"))
        x = np.load(MODELS / "cunet" / "input.npy")
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
            raw = np.ascontiguousarray(x[np.newaxis], "<f4").tobytes()
            header = (
                f'{{"inputs": [{{"name": "in0", "shape": {list((1, *x.shape))}, '
                f'"datatype": "FP32", "parameters": {{"binary_data_size": {len(raw)}}}}}]}}'
            ).encode()
            url = f"http://127.0.0.1:{server.port}/v2/models/cunet/infer"
            headers = {"Inference-Header-Content-Length": str(len(header))}
            async with http.post(url, data=header + raw, headers=headers) as r:
                assert r.status == 503, await r.text()
                assert "no device of the NetGroup is left" in (await r.json())["error"]
    finally:
        await server.close()
