"""``POST /infer`` answers every output of the model unless ``?output=`` names fewer: one as a
``.npy``, several as an ``.npz`` by name, or all of them in one JSON reply."""

from __future__ import annotations

import io
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from test_net_run import OUTPUTS, PARAM
from test_serve_limits import _npy, _serve

from asyncvk import Net, Option
from asyncvk.net._random_weights import random_weights

TIMEOUT = aiohttp.ClientTimeout(total=60)


@pytest.fixture
async def three(tmp_path: Path) -> AsyncIterator[tuple[TestServer, dict[str, np.ndarray]]]:
    """A server of the three-output model, and its outputs for ``_x()`` in-process."""
    param = tmp_path / "three.param"
    param.write_text(PARAM.format(mask=0))
    weights = tmp_path / "three.bin"
    weights.write_bytes(random_weights(param))
    async with Net(Option(use_vulkan_compute=False)) as net:
        await net.load_param(param)
        await net.load_model(weights)
        expected = await net.run({"data": _x()})
    async for server in _serve(param, weights):
        yield server, expected


def _x() -> np.ndarray:
    return np.random.default_rng(7).uniform(-1, 1, (3, 10, 12)).astype(np.float32)


async def _post(server: TestServer, query: str = "", **kwargs: object) -> aiohttp.ClientResponse:
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        if "json" not in kwargs:
            kwargs = {"data": _npy(_x()), "headers": {"Content-Type": "application/x-npy"}}
        r = await http.post(server.make_url(f"/infer{query}"), **kwargs)  # type: ignore[arg-type]
        await r.read()
        return r


async def test_every_output_unless_fewer_are_named(
    three: tuple[TestServer, dict[str, np.ndarray]],
) -> None:
    server, expected = three
    r = await _post(server)
    assert r.status == 200 and r.content_type == "application/x-npz"
    with zipfile.ZipFile(io.BytesIO(await r.read())) as archive:
        assert archive.namelist() == [f"{name}.npy" for name in OUTPUTS]
        for name in OUTPUTS:
            got = np.load(io.BytesIO(archive.read(f"{name}.npy")))
            np.testing.assert_allclose(got, expected[name], rtol=1e-4, atol=1e-5)
    r = await _post(server, "?output=logits")
    assert r.status == 200 and r.content_type == "application/x-npy"
    got = np.load(io.BytesIO(await r.read()))
    np.testing.assert_allclose(got, expected["logits"], rtol=1e-4, atol=1e-5)
    r = await _post(server, "?output=scores&output=boxes")
    with zipfile.ZipFile(io.BytesIO(await r.read())) as archive:
        assert archive.namelist() == ["scores.npy", "boxes.npy"]
    r = await _post(server, "?output=logits&output=nope")
    assert r.status == 400 and "unknown output 'nope'" in (await r.json())["error"]


async def test_a_json_reply_holds_every_output(
    three: tuple[TestServer, dict[str, np.ndarray]],
) -> None:
    server, expected = three
    r = await _post(server, json={"inputs": {"data": _x().tolist()}})
    assert r.status == 200, await r.text()
    body = await r.json()
    assert list(body["outputs"]) == OUTPUTS and body["non_finite"] == 0
    for name in OUTPUTS:
        assert body["shapes"][name] == list(expected[name].shape)
        np.testing.assert_allclose(
            np.array(body["outputs"][name], np.float32), expected[name], rtol=1e-4, atol=1e-5
        )
    assert "shape" not in body  # only a reply of one output has it
