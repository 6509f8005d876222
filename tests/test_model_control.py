"""Models come and go while the server runs: a reload swaps the new model in once it is
loaded (no request fails meanwhile, to it or to the others), an unload takes the name away,
a load brings in a new folder, and a poll follows the folder's files."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from aiohttp.test_utils import TestServer
from test_net_run import PARAM

from asyncvk import Net, Option
from asyncvk.net._random_weights import random_weights
from asyncvk.serve import create_models_app
from asyncvk.serve._oip import MODELS_KEY, REPOSITORY_KEY
from asyncvk.serve._repository import find_models
from asyncvk.serve._state import STATE_KEY

triton = pytest.importorskip("tritonclient.http.aio")
from tritonclient.http import InferInput  # noqa: E402
from tritonclient.utils import InferenceServerException  # noqa: E402

MODELS = Path(__file__).parent / "models"


def _write_three(folder: Path, seed: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.param").write_text(PARAM.format(mask=0))
    (folder / "model.bin").write_bytes(random_weights(folder / "model.param", seed=seed))


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[TestServer, Path]]:
    root = tmp_path / "models"
    _write_three(root / "three", seed=1)
    (root / "cunet").mkdir()
    for file in ("model.param", "model.bin"):
        shutil.copy(MODELS / "cunet" / file, root / "cunet" / file)
    server = TestServer(create_models_app(find_models(str(root)), folder=str(root)))
    await server.start_server()
    try:
        state = server.app[STATE_KEY]
        assert state.loading is not None
        await state.loading
        assert state.ready, state.error
        yield server, root
    finally:
        await server.close()


async def _logits(seed: int, x: np.ndarray) -> np.ndarray:
    param = PARAM.format(mask=0).encode()
    async with Net(Option(use_vulkan_compute=False)) as net:
        await net.load_param(param)
        await net.load_model(random_weights(param, seed=seed))
        return (await net.run({"data": x}, ["logits"]))["logits"]


def _data(x: np.ndarray) -> InferInput:
    data = InferInput("data", list(x.shape), "FP32")
    data.set_data_from_numpy(x)
    return data


async def test_a_reload_under_load_drops_nothing(served: tuple[TestServer, Path]) -> None:
    server, root = served
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 10, 12)).astype(np.float32)
    old, new = await _logits(1, x), await _logits(2, x)
    client = triton.InferenceServerClient(f"127.0.0.1:{server.port}")
    answers: list[tuple[bool, np.ndarray]] = []  # (sent once the load had returned, logits)
    stop, loaded = asyncio.Event(), asyncio.Event()

    async def keep_asking() -> None:
        while not stop.is_set():
            after = loaded.is_set()
            result = await client.infer("three", [_data(x)])  # raises on any failure
            logits = result.as_numpy("logits")
            assert logits is not None
            answers.append((after, logits))

    try:
        askers = [asyncio.ensure_future(keep_asking()) for _ in range(4)]
        while len(answers) < 8:  # noqa: ASYNC110 (the answers are the event)
            await asyncio.sleep(0.01)
        _write_three(root / "three", seed=2)
        await client.load_model("three")  # returns once the new model serves
        loaded.set()
        seen = len(answers)
        while len(answers) < seen + 8:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.gather(*askers)
        cunet = await client.is_model_ready("cunet")
    finally:
        await client.close()
    assert cunet

    def which(logits: np.ndarray) -> str:
        if np.allclose(logits, old, rtol=1e-4, atol=1e-5):
            return "old"
        return "new" if np.allclose(logits, new, rtol=1e-4, atol=1e-5) else "neither"

    before = {which(a) for after, a in answers if not after}
    assert before == {"old", "new"} or before == {"old"}  # the swap came while they ran
    assert {which(a) for after, a in answers if after} == {"new"}


async def test_unload_load_and_poll(served: tuple[TestServer, Path]) -> None:
    server, root = served
    client = triton.InferenceServerClient(f"127.0.0.1:{server.port}")
    repository = server.app[REPOSITORY_KEY]
    try:
        await client.unload_model("cunet")
        assert not await client.is_model_ready("cunet")
        with pytest.raises(InferenceServerException, match="unknown model 'cunet'"):
            await client.get_model_metadata("cunet")
        with pytest.raises(InferenceServerException, match=r"no nope/model\.param"):
            await client.load_model("nope")
        await client.load_model("cunet")  # back from its folder
        assert await client.is_model_ready("cunet")
        assert not repository._busy  # no lock kept for a name once its load or unload ended
        # the folder changes: a model added, one rewritten, one removed
        shutil.copytree(root / "three", root / "copy")
        _write_three(root / "three", seed=5)
        before = server.app[MODELS_KEY]["three"]
        shutil.rmtree(root / "cunet")
        await repository.poll()
        assert sorted(server.app[MODELS_KEY]) == ["copy", "three"]
        assert server.app[MODELS_KEY]["three"] is not before  # reloaded
        x = np.random.default_rng(3).uniform(-1, 1, (1, 3, 10, 12)).astype(np.float32)
        logits = (await client.infer("three", [_data(x)])).as_numpy("logits")
        assert logits is not None
        np.testing.assert_allclose(logits, await _logits(5, x), rtol=1e-4, atol=1e-5)
        unchanged = server.app[MODELS_KEY]["three"]
        await repository.poll()  # nothing changed: nothing reloaded
        assert server.app[MODELS_KEY]["three"] is unchanged
    finally:
        await client.close()
