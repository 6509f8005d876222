"""The server's bounds on what clients can make it hold, with the app served on 127.0.0.1 in this
process (aiohttp's TestServer, real HTTP through aiohttp's client), so that a test can hold the
model's plans itself and see the queue it makes: the plans per input shape, the requests that
wait for one (503 past ``max_queue``), and ``max_body`` over all the parts of a request."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from asyncvk import Option
from asyncvk.net._plan import PlanRequest
from asyncvk.serve import create_app
from asyncvk.serve._batcher import BatchSettings
from asyncvk.serve._oip import MODELS_KEY
from asyncvk.serve._state import NET_KEY, STATE_KEY

CUNET = Path(__file__).parent / "models" / "cunet"
TIMEOUT = aiohttp.ClientTimeout(total=60)
#: two inputs, one layer: out0 = in0 + in1
TWO_INPUTS = (
    "7767517\n3 3\nInput in0 0 1 in0\nInput in1 0 1 in1\nBinaryOp add 2 1 in0 in1 out0 0=0\n"
)


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


async def _serve(param: Path, model: Path, **kwargs: Any) -> AsyncIterator[TestServer]:
    server = TestServer(create_app(str(param), str(model), **kwargs), host="127.0.0.1")
    await server.start_server()
    try:
        state = server.app[STATE_KEY]
        assert state.loading is not None
        await state.loading
        assert state.ready, state.error
        yield server
    finally:
        await server.close()


@pytest.fixture
async def one_plan() -> AsyncIterator[TestServer]:
    """cunet with one plan per shape, one batch at a time, and room for two requests to wait."""
    option = Option(max_plans_per_shape=1, plan_idle_seconds=0)
    batching = BatchSettings(max_inflight=1)
    async for server in _serve(
        CUNET / "model.param", CUNET / "model.bin", option=option, max_queue=2, batching=batching
    ):
        yield server


async def _metrics(http: aiohttp.ClientSession, server: TestServer) -> dict[str, float]:
    async with http.get(server.make_url("/metrics")) as r:
        text = await r.text()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


async def test_requests_past_the_queue_are_503_and_the_rest_wait_their_turn(
    one_plan: TestServer,
) -> None:
    net = one_plan.app[NET_KEY]
    assert net.gpu_model is not None
    pool = net.gpu_model.plans
    x = np.load(CUNET / "input.npy")
    index = net.blob_index
    held = await pool.acquire(PlanRequest.of({index["in0"]: x.shape}, [index["out0"]]))  # taken

    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:

        async def post() -> tuple[int, bytes, dict[str, str]]:
            headers = {"Content-Type": "application/x-npy"}
            async with http.post(one_plan.make_url("/infer"), data=_npy(x), headers=headers) as r:
                return r.status, await r.read(), dict(r.headers)

        # the first request's batch waits for the held plan; two more wait in the queue
        batcher = one_plan.app[MODELS_KEY]["cunet"].batcher
        waiting = []
        for queued in (0, 1, 2):
            waiting.append(asyncio.create_task(post()))
            while pool.statistics().waiting < 1 or batcher.waiting() < queued:  # noqa: ASYNC110
                await asyncio.sleep(0.01)  # (HTTP has no event to wait on)
        status, body, headers = await post()
        assert status == 503, body
        assert headers["Retry-After"] == "1"
        assert b"(server --max-queue); try again" in body
        stats = pool.statistics()
        assert (stats.plans, stats.lent, stats.waiting) == (1, 1, 1), stats

        await pool.give_back(held)
        answers = await asyncio.gather(*waiting)
        assert [a[0] for a in answers] == [200, 200, 200]
        y0, y1, y2 = (np.load(io.BytesIO(a[1])) for a in answers)
        np.testing.assert_array_equal(y0, y1)
        np.testing.assert_array_equal(y0, y2)
        assert np.linalg.norm(y0 - np.load(CUNET / "output.npy")) < 1e-3 * np.linalg.norm(y0)

        metrics = await _metrics(http, one_plan)
    assert metrics['asyncvk_requests_total{code="503"}'] == 1
    assert metrics['asyncvk_model_refused_total{model="cunet"}'] == 1
    # the first request alone, then the two that waited as one batch
    assert metrics['asyncvk_model_batches_total{model="cunet"}'] == 2
    assert metrics['asyncvk_model_batch_size_bucket{model="cunet",le="1"}'] == 1
    assert metrics['asyncvk_model_batch_size_bucket{model="cunet",le="2"}'] == 2
    assert metrics["asyncvk_plans_peak"] == 1 and metrics["asyncvk_plans_waiting"] == 0


@pytest.fixture
async def two_inputs(tmp_path: Path) -> AsyncIterator[TestServer]:
    """A two-input model with ``max_body`` at 100,000 bytes."""
    (tmp_path / "model.param").write_text(TWO_INPUTS)
    (tmp_path / "model.bin").write_bytes(b"")
    async for server in _serve(tmp_path / "model.param", tmp_path / "model.bin", max_body=100_000):
        yield server


async def _post_parts(
    server: TestServer, parts: dict[str, np.ndarray], *, chunked: bool
) -> tuple[int, bytes]:
    """A multipart request of one .npy part per input; ``chunked``: sent without a
    Content-Length, so the server learns its size only as it reads."""
    body = b""
    for name, array in parts.items():
        body += (
            (
                f'--b0undary\r\nContent-Disposition: form-data; name="{name}"; '
                f'filename="{name}.npy"\r\n\r\n'
            ).encode()
            + _npy(array)
            + b"\r\n"
        )
    body += b"--b0undary--\r\n"

    async def stream() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 16384):
            yield body[i : i + 16384]

    headers = {"Content-Type": "multipart/form-data; boundary=b0undary"}
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as http,
        http.post(
            server.make_url("/infer"), data=stream() if chunked else body, headers=headers
        ) as r,
    ):
        return r.status, await r.read()


async def test_multipart_parts_add_up_against_max_body(two_inputs: TestServer) -> None:
    """Two 58,928-byte arrays, each under the 100,000-byte limit: the request is over it,
    refused when its Content-Length says so, or as the second part is read."""
    a = np.full((3, 70, 70), 1.0, np.float32)
    status, body = await _post_parts(two_inputs, {"in0": a, "in1": a}, chunked=True)
    assert status == 413, body
    assert body == (
        b'{"error": "request body over 100,000 bytes (server --max-body) '
        b"while reading part 'in1'\"}"
    )
    status, body = await _post_parts(two_inputs, {"in0": a, "in1": a}, chunked=False)
    assert status == 413, body
    assert b"(server --max-body) (Content-Length: 118," in body
    small = np.full((3, 40, 40), 1.0, np.float32)
    status, body = await _post_parts(two_inputs, {"in0": small, "in1": small * 2}, chunked=True)
    assert status == 200, body
    np.testing.assert_array_equal(np.load(io.BytesIO(body)), small * 3)


async def test_warm_up_batches_records_every_batch_size_before_ready() -> None:
    batching = BatchSettings(max_batch=4)
    shapes = {"in0": (3, 32, 32)}
    async for server in _serve(
        CUNET / "model.param",
        CUNET / "model.bin",
        warm_up=shapes,
        warm_up_batches=True,
        batching=batching,
    ):
        net = server.app[MODELS_KEY]["cunet"].net
        assert sorted({r.batch for r in net._plans}) == [1, 2, 4]
        recorded = net.commands_recorded
        batcher = server.app[MODELS_KEY]["cunet"].batcher
        x = np.zeros((3, 3, 32, 32), np.float32)  # 3 items: a batch of 4
        await batcher.infer({"in0": x})
        assert net.commands_recorded == recorded  # replayed, none recorded
