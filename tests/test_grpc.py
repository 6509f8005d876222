"""The Open Inference Protocol over gRPC, spoken by Triton's own client (``tritonclient.grpc``)
against the server's gRPC port beside its HTTP one: health, metadata, inference with raw and
typed tensors and every output by default, the protocol's status codes, a full queue, and the
same models answering over both at once."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from test_net_run import OUTPUTS
from test_oip import CUNET, _batch, _expected, start_two_models

from asyncvk.serve._batcher import BatchSettings
from asyncvk.serve._oip import MODELS_KEY
from asyncvk.serve._state import STATE_KEY

grpc = pytest.importorskip("grpc")
grpcclient = pytest.importorskip("tritonclient.grpc.aio")
from tritonclient.grpc import InferInput, InferRequestedOutput  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402


async def _start(tmp_path: Path, **settings: object) -> TestServer:
    """test_oip's two models, with gRPC on a free port too."""
    return await start_two_models(tmp_path, grpc_address="127.0.0.1:0", **settings)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[TestServer]:
    """``three`` and ``cunet`` over HTTP and gRPC."""
    server = await _start(tmp_path)
    try:
        yield server
    finally:
        await server.close()


def _client(server: TestServer) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(f"127.0.0.1:{server.app[STATE_KEY].grpc_port}")


def _input(x: np.ndarray, name: str = "data") -> InferInput:
    tensor = InferInput(name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return tensor


async def test_health_and_metadata(server: TestServer) -> None:
    client = _client(server)
    try:
        assert await client.is_server_live() and await client.is_server_ready()
        assert await client.is_model_ready("three") and await client.is_model_ready("cunet")
        meta = await client.get_server_metadata()
        assert meta.name == "asyncvk" and "binary_tensor_data" in meta.extensions
        model = await client.get_model_metadata("three", as_json=True)
        assert model["inputs"] == [
            {"name": "data", "datatype": "FP32", "shape": ["-1", "3", "10", "12"]}
        ]
        assert [o["name"] for o in model["outputs"]] == OUTPUTS
        with pytest.raises(InferenceServerException, match="unknown model 'nope'") as caught:
            await client.get_model_metadata("nope")
        assert caught.value.status() == "StatusCode.NOT_FOUND"
        with pytest.raises(InferenceServerException, match="has no version '2'"):
            await client.is_model_ready("three", model_version="2")
    finally:
        await client.close()


async def test_inference_every_output_and_the_batch_axis(server: TestServer) -> None:
    x = _batch(3)
    expected = await _expected(x)
    client = _client(server)
    try:
        wanted = [InferRequestedOutput("logits"), InferRequestedOutput("boxes")]
        result = await client.infer("three", [_input(x)], outputs=wanted, request_id="r1")
        assert result.get_response().id == "r1"
        assert [o.name for o in result.get_response().outputs] == ["logits", "boxes"]
        for name in ("logits", "boxes"):
            got = result.as_numpy(name)
            assert got is not None and got.shape == expected[name].shape
            np.testing.assert_allclose(got, expected[name], rtol=1e-4, atol=1e-5)
        everything = await client.infer("three", [_input(x)])  # none named: all of them
        assert [o.name for o in everything.get_response().outputs] == OUTPUTS
        one = await client.infer("three", [_input(x[0])])  # no batch axis: none back
        logits = one.as_numpy("logits")
        assert logits is not None and logits.shape == (5,)
        np.testing.assert_allclose(logits, expected["logits"][0], rtol=1e-4, atol=1e-5)
        y = np.load(CUNET / "input.npy")
        out = (await client.infer("cunet", [_input(y, "in0")])).as_numpy("out0")
        reference = np.load(CUNET / "output.npy")
        assert out is not None
        assert np.linalg.norm(out - reference) < 1e-3 * np.linalg.norm(reference)
    finally:
        await client.close()


async def test_typed_contents_are_read_like_raw_ones(server: TestServer) -> None:
    """A request with the values in ``contents.fp32_contents`` (no raw bytes)."""
    from asyncvk.serve._grpc_messages import MESSAGES

    x = _batch(2, seed=3)
    request = MESSAGES["ModelInferRequest"](model_name="three")
    tensor = request.inputs.add(name="data", datatype="FP32", shape=x.shape)
    tensor.contents.fp32_contents.extend(x.reshape(-1).tolist())
    request.outputs.add(name="logits")
    reply = await _call(server, "ModelInfer", request)
    assert [o.name for o in reply.outputs] == ["logits"] and list(reply.outputs[0].shape) == [2, 5]
    got = np.frombuffer(reply.raw_output_contents[0], "<f4").reshape(2, 5)
    np.testing.assert_allclose(got, (await _expected(x))["logits"], rtol=1e-4, atol=1e-5)
    short = MESSAGES["ModelInferRequest"](model_name="three", raw_input_contents=[x.tobytes()[:-4]])
    short.inputs.add(name="data", datatype="FP32", shape=x.shape)
    with pytest.raises(grpc.aio.AioRpcError, match="2876 bytes of data for shape") as caught:
        await _call(server, "ModelInfer", short)  # one value short of its shape
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    request.raw_input_contents.extend([b"", b""])  # two raw contents for one input
    with pytest.raises(grpc.aio.AioRpcError, match="2 raw_input_contents for 1 inputs") as caught:
        await _call(server, "ModelInfer", request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def _call(server: TestServer, method: str, request: object) -> object:
    from asyncvk.serve._grpc_messages import MESSAGES, METHODS, SERVICE

    response_type = MESSAGES[METHODS[method][1]]
    address = f"127.0.0.1:{server.app[STATE_KEY].grpc_port}"
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(
            f"/{SERVICE}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        return await call(request)


async def test_bad_requests_get_the_protocols_codes(server: TestServer) -> None:
    client = _client(server)
    try:
        flags = InferInput("data", [1, 3, 10, 12], "BOOL")
        flags.set_data_from_numpy(np.zeros((1, 3, 10, 12), bool))
        with pytest.raises(InferenceServerException, match="BOOL is not a real number") as bad:
            await client.infer("three", [flags])
        assert bad.value.status() == "StatusCode.INVALID_ARGUMENT"
        with pytest.raises(InferenceServerException, match="unknown input 'nope'"):
            await client.infer("three", [_input(_batch(1), "nope")])
        with pytest.raises(InferenceServerException, match="no blob named 'nope'"):
            await client.infer("three", [_input(_batch(1))], outputs=[InferRequestedOutput("nope")])
        with pytest.raises(InferenceServerException, match="unknown model") as missing:
            await client.infer("nope", [_input(_batch(1))])
        assert missing.value.status() == "StatusCode.NOT_FOUND"
    finally:
        await client.close()


async def test_a_full_queue_is_unavailable_and_http_and_grpc_share_the_batcher(
    tmp_path: Path,
) -> None:
    """With room for one waiting request and one batch on the GPU, a burst over gRPC gets
    UNAVAILABLE for some calls and answers for the rest; a request over HTTP then joins the
    same model's batcher."""
    server = await _start(
        tmp_path, batching=BatchSettings(max_batch=1, max_inflight=1), max_queue=1
    )
    client = _client(server)
    try:
        x = _batch(1, seed=5)
        expected = (await _expected(x))["logits"]
        results = await asyncio.gather(
            *(client.infer("three", [_input(x)]) for _ in range(8)), return_exceptions=True
        )
        refused = [r for r in results if isinstance(r, InferenceServerException)]
        answered = [r for r in results if not isinstance(r, BaseException)]
        assert refused and answered and len(refused) + len(answered) == 8, results
        assert all(r.status() == "StatusCode.UNAVAILABLE" for r in refused)
        assert all("busy" in r.message() for r in refused)
        for r in answered:
            np.testing.assert_allclose(r.as_numpy("logits"), expected, rtol=1e-4, atol=1e-5)
        import tritonclient.http.aio as httpclient

        http = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
        try:
            data = httpclient.InferInput("data", list(x.shape), "FP32")
            data.set_data_from_numpy(x)
            await http.infer("three", [data])
        finally:
            await http.close()
        stats = server.app[MODELS_KEY]["three"].batcher.statistics
        assert stats.refused == len(refused) and stats.succeeded == len(answered) + 1
    finally:
        await client.close()
        await server.close()


WITHOUT_GRPCIO = """
import sys
sys.modules["grpc"] = None  # as if grpcio were not installed: importing it raises ImportError
from asyncvk.cli import console_main
sys.argv = ["asyncvk", *sys.argv[1:]]
console_main()
"""


def test_grpc_port_without_grpcio_names_the_extra_to_install() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_GRPCIO,
            "serve",
            str(CUNET / "model.param"),
            str(CUNET / "model.bin"),
            "--grpc-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "--grpc-port needs grpcio and protobuf" in proc.stderr, proc.stderr
    assert "pip install asyncvk-runtime[grpc]" in proc.stderr
