"""The Open Inference Protocol (KServe v2) over HTTP, spoken by Triton's own client
(``tritonclient``) against a server of two models on one device: metadata, readiness, the
model configuration, JSON and binary tensors, batches, every output by default, statistics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from test_net_run import OUTPUTS, PARAM

from asyncvk import Net, Option
from asyncvk.net._random_weights import random_weights
from asyncvk.serve import create_models_app
from asyncvk.serve._oip import MODELS_KEY
from asyncvk.serve._repository import ModelFiles
from asyncvk.serve._state import STATE_KEY

triton = pytest.importorskip("tritonclient.http.aio")
from tritonclient.http import InferInput, InferRequestedOutput  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

CUNET = Path(__file__).parent / "models" / "cunet"


async def start_two_models(tmp_path: Path, **settings: Any) -> TestServer:
    """``three`` (three outputs, declared input 3x10x12) and ``cunet``, served together and
    loaded (``settings`` go to ``create_models_app``)."""
    (tmp_path / "three").mkdir()
    param = tmp_path / "three" / "model.param"
    param.write_text(PARAM.format(mask=0))
    (tmp_path / "three" / "model.bin").write_bytes(random_weights(param))
    models = [
        ModelFiles("three", str(param), str(tmp_path / "three" / "model.bin")),
        ModelFiles("cunet", str(CUNET / "model.param"), str(CUNET / "model.bin")),
    ]
    server = TestServer(create_models_app(models, **settings), host="127.0.0.1")
    await server.start_server()
    try:
        state = server.app[STATE_KEY]
        assert state.loading is not None
        await state.loading
        assert state.ready, state.error
    except BaseException:
        await server.close()
        raise
    return server


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[TestServer]:
    """``three`` and ``cunet``, served together."""
    server = await start_two_models(tmp_path)
    try:
        yield server
    finally:
        await server.close()


async def _expected(x: np.ndarray) -> dict[str, np.ndarray]:
    """The three-output model's outputs for ``x``, in-process on the CPU."""
    param = PARAM.format(mask=0).encode()
    async with Net(Option(use_vulkan_compute=False)) as net:
        await net.load_param(param)
        await net.load_model(random_weights(param))
        return await net.run({"data": x})


def _batch(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, 3, 10, 12)).astype(np.float32)


async def test_health_metadata_and_configuration(server: TestServer) -> None:
    client = triton.InferenceServerClient(f"127.0.0.1:{server.port}")
    try:
        assert await client.is_server_live() and await client.is_server_ready()
        assert await client.is_model_ready("three") and await client.is_model_ready("cunet")
        assert not await client.is_model_ready("nope")
        meta = await client.get_server_metadata()
        assert meta["name"] == "asyncvk" and "binary_tensor_data" in meta["extensions"]
        model = await client.get_model_metadata("three")
        assert model["inputs"] == [{"name": "data", "datatype": "FP32", "shape": [-1, 3, 10, 12]}]
        assert [o["name"] for o in model["outputs"]] == OUTPUTS
        assert model["outputs"][2]["shape"] == [-1, 5]  # fc0's 5 logits, from the declared input
        config = await client.get_model_config("three")
        assert config["max_batch_size"] == 32
        assert config["input"] == [{"name": "data", "data_type": "TYPE_FP32", "dims": [3, 10, 12]}]
        cunet = await client.get_model_metadata("cunet", model_version="1")
        assert cunet["inputs"][0]["shape"] == [-1, -1]  # its Input declares no shape
        with pytest.raises(InferenceServerException, match="unknown model 'nope'"):
            await client.get_model_metadata("nope")
        with pytest.raises(InferenceServerException, match="has no version '2'"):
            await client.get_model_metadata("three", model_version="2")
        index = await client.get_model_repository_index()
        assert [(m["name"], m["state"]) for m in index] == [("three", "READY"), ("cunet", "READY")]
    finally:
        await client.close()


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
async def test_inference_in_binary_and_json_tensors(server: TestServer, binary: bool) -> None:
    x = _batch(3)
    expected = await _expected(x)
    client = triton.InferenceServerClient(f"127.0.0.1:{server.port}")
    try:
        data = InferInput("data", list(x.shape), "FP32")
        data.set_data_from_numpy(x, binary_data=binary)
        wanted = [
            InferRequestedOutput("logits", binary_data=binary),
            InferRequestedOutput("boxes", binary_data=not binary),
        ]
        result = await client.infer("three", [data], outputs=wanted, request_id="r1")
        assert result.get_response()["id"] == "r1"
        for name in ("logits", "boxes"):
            got = result.as_numpy(name)
            assert got is not None and got.shape == expected[name].shape
            np.testing.assert_allclose(got, expected[name], rtol=1e-4, atol=1e-5)
        everything = await client.infer("three", [data])  # no outputs named: all of them
        assert [o["name"] for o in everything.get_response()["outputs"]] == OUTPUTS
    finally:
        await client.close()


async def test_an_item_without_its_batch_axis_and_the_second_model(server: TestServer) -> None:
    client = triton.InferenceServerClient(f"127.0.0.1:{server.port}")
    try:
        x = _batch(1, seed=2)[0]
        data = InferInput("data", list(x.shape), "FP32")
        data.set_data_from_numpy(x)
        result = await client.infer("three", [data])
        logits = result.as_numpy("logits")
        assert logits is not None and logits.shape == (5,)
        np.testing.assert_allclose(logits, (await _expected(x))["logits"], rtol=1e-4, atol=1e-5)
        y = np.load(CUNET / "input.npy")
        data = InferInput("in0", list(y.shape), "FP32")
        data.set_data_from_numpy(y)
        out = (await client.infer("cunet", [data])).as_numpy("out0")
        reference = np.load(CUNET / "output.npy")
        assert out is not None
        assert np.linalg.norm(out - reference) < 1e-3 * np.linalg.norm(reference)
        stats = await client.get_inference_statistics("three")
        entry = stats["model_stats"][0]
        assert entry["name"] == "three" and entry["inference_count"] == 1
        assert entry["inference_stats"]["success"]["count"] == 1
    finally:
        await client.close()


async def test_bad_requests_are_answered_in_words(server: TestServer) -> None:
    client = triton.InferenceServerClient(f"127.0.0.1:{server.port}")
    try:
        flags = InferInput("data", [1, 3, 10, 12], "BOOL")
        flags.set_data_from_numpy(np.zeros((1, 3, 10, 12), bool))
        with pytest.raises(InferenceServerException, match="BOOL is not a real number type"):
            await client.infer("three", [flags])
        other = InferInput("nope", [1, 3, 10, 12], "FP32")
        other.set_data_from_numpy(_batch(1))
        with pytest.raises(InferenceServerException, match="unknown input 'nope'"):
            await client.infer("three", [other])
        wrong = InferInput("data", [1, 3, 10, 12], "FP32")
        wrong.set_data_from_numpy(_batch(1))
        with pytest.raises(InferenceServerException, match="no blob named 'nope'"):
            await client.infer("three", [wrong], outputs=[InferRequestedOutput("nope")])
    finally:
        await client.close()
    assert server.app[MODELS_KEY]["three"].batcher.statistics.failed == 1


async def test_a_body_in_chunks_and_a_body_cut_short(server: TestServer) -> None:
    """A binary request streamed without a Content-Length is read as it comes; one whose
    client hangs up before its declared length leaves the server answering the next."""
    import asyncio
    import json

    import aiohttp

    x = _batch(1, seed=4)
    raw = x.tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "data",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": "logits"}],
        }
    ).encode()
    body = header + raw

    async def stream() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 100):
            yield body[i : i + 100]

    url = server.make_url("/v2/models/three/infer")
    headers = {"Inference-Header-Content-Length": str(len(header))}
    async with aiohttp.ClientSession() as http, http.post(url, data=stream(), headers=headers) as r:
        assert r.status == 200, await r.text()
        logits = np.array((await r.json())["outputs"][0]["data"], np.float32)
    np.testing.assert_allclose(logits, (await _expected(x))["logits"][0], rtol=1e-4, atol=1e-5)
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        b"POST /v2/models/three/infer HTTP/1.1\r\nHost: x\r\n"
        + f"Content-Length: {len(body)}\r\n".encode()
        + f"Inference-Header-Content-Length: {len(header)}\r\n\r\n".encode()
        + body[:50]
    )
    await writer.drain()
    writer.close()  # gone before the rest
    await writer.wait_closed()
    async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=headers) as r:
        assert r.status == 200
