"""``asyncvk serve`` end to end: a real server process on 127.0.0.1 and a real HTTP client."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from asyncvk import Net, Option, PipelineCache
from asyncvk.cache._directory import CacheDirectory

MODEL = Path(__file__).parent / "models" / "cunet"
MAX_BODY = 2_000_000
# every client call has a deadline, so a hung server fails the test instead of stalling the run
TIMEOUT = aiohttp.ClientTimeout(total=30)
# 200 requests at once queue behind each other: on a loaded 2-core CI machine the last one can
# wait well past 30 s, so the burst gets a looser deadline (still a guard against a hung server)
BURST_TIMEOUT = aiohttp.ClientTimeout(total=300)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, cache_dir: Path, *extra: str, model: Path = MODEL) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stdout = ""
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "asyncvk",
                "serve",
                str(model / "model.param"),
                str(model / "model.bin"),
                "--port",
                str(self.port),
                "--cache-dir",
                str(cache_dir),
                "--graph-key",
                model.name,
                "--max-body",
                str(MAX_BODY),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )

    async def first_answer(self) -> tuple[int, float]:
        """The status of the first /ready that answers, and how long after start it came."""
        start = time.monotonic()
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
            while time.monotonic() - start < 30:
                try:
                    async with http.get(f"{self.url}/ready") as r:
                        return r.status, time.monotonic() - start
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.02)
        raise AssertionError("the server never answered")

    async def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
            while time.monotonic() < deadline:
                try:
                    async with http.get(f"{self.url}/ready") as r:
                        if r.status == 200:
                            return
                        assert r.status == 503, await r.text()
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)
        raise AssertionError("not ready in time")

    async def metrics(self) -> dict[str, float]:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as http,
            http.get(f"{self.url}/metrics") as r,
        ):
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = await r.text()
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=60)
        self.stdout = out
        return self.proc.returncode, err


def _cache_files(folder: Path) -> dict[str, int]:
    """Each cache file in ``folder`` with its mtime: a rewrite or a new file changes it."""
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.vkcache")}


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


async def _reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
    async with Net(Option(use_vulkan_compute=False)) as net:
        await net.load_param(MODEL / "model.param")
        await net.load_model(MODEL / "model.bin")
        outs = []
        for x in inputs:
            ex = net.create_extractor()
            ex.input("in0", x)
            outs.append(await ex.extract("out0"))
    return outs


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "cache"


async def test_serve_end_to_end(cache_dir: Path) -> None:
    server = Server(cache_dir)
    try:
        status, after = await server.first_answer()
        assert status in (200, 503) and after < 20  # listening before (or as) the model loads
        await server.wait_ready()
        x0 = np.load(MODEL / "input.npy")
        inputs = [x0 * (1 + i / 1000) for i in range(200)]
        expected = await _reference(inputs)

        async with aiohttp.ClientSession(timeout=BURST_TIMEOUT) as http:

            async def one(x: np.ndarray) -> np.ndarray:
                async with http.post(
                    f"{server.url}/infer",
                    data=_npy(x),
                    headers={"Content-Type": "application/x-npy"},
                ) as r:
                    assert r.status == 200, await r.text()
                    return np.load(io.BytesIO(await r.read()))

            got = await asyncio.gather(*[one(x) for x in inputs])
            for y, ref in zip(got, expected, strict=True):
                assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-3

            payload = {"inputs": {"in0": x0.tolist()}}
            async with http.post(f"{server.url}/infer?output=out0", json=payload) as r:
                assert r.status == 200
                body = await r.json()
            y = np.asarray(body["outputs"]["out0"], np.float32)
            assert body["shape"] == list(expected[0].shape)
            assert np.linalg.norm(y - expected[0]) / np.linalg.norm(expected[0]) < 1e-3

            form = aiohttp.FormData()
            form.add_field("in0", _npy(x0), filename="in0.npy", content_type="application/x-npy")
            async with http.post(f"{server.url}/infer", data=form) as r:
                assert r.status == 200
                y = np.load(io.BytesIO(await r.read()))
            assert np.linalg.norm(y - expected[0]) / np.linalg.norm(expected[0]) < 1e-3

            bad = [
                (b"not an npy file", "application/x-npy", "", 400, "valid .npy"),
                (_npy(x0), "text/plain", "", 415, "unsupported content type"),
                (_npy(x0[0]), "application/x-npy", "", 400, "cannot take inputs"),
                (_npy(np.zeros((2, 2), "U3")), "application/x-npy", "", 400, "dtype"),
                (_npy(x0), "application/x-npy", "?output=nope", 400, "unknown output"),
                (b"{", "application/json", "", 400, "expected JSON"),
                (_npy(np.ones((3, 44, 44), bool)), "application/x-npy", "", 400, "dtype"),
                (io.BytesIO(bytes(MAX_BODY + 10)), "application/x-npy", "", 413, "max-body"),
            ]
            for data, kind, query, code, needle in bad:
                async with http.post(
                    f"{server.url}/infer{query}", data=data, headers={"Content-Type": kind}
                ) as r:
                    assert r.status == code, (kind, query, await r.text())
                    assert needle in (await r.json())["error"]
            async with http.post(
                f"{server.url}/infer", data=_npy(x0), headers={"Content-Type": "application/x-npy"}
            ) as r:
                assert r.status == 200  # still serving after the bad requests

        first = await server.metrics()
        assert first['asyncvk_requests_total{code="200"}'] >= 203
        assert first["asyncvk_spirv_compiles"] > 0 and first["asyncvk_model_load_warm"] == 0

        # SIGTERM while requests are in flight: a clean exit and a valid cache folder
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:

            async def fire() -> None:
                try:
                    async with http.post(
                        f"{server.url}/infer",
                        data=_npy(x0),
                        headers={"Content-Type": "application/x-npy"},
                    ) as r:
                        await r.read()
                except aiohttp.ClientError:
                    pass

            traffic = [asyncio.create_task(fire()) for _ in range(20)]
            await asyncio.sleep(0.05)
            code, err = await asyncio.to_thread(server.stop)
            await asyncio.gather(*traffic)
        assert code == 0, err
        assert "Traceback" not in err
        assert f"serving on http://127.0.0.1:{server.port}" in server.stdout
    finally:
        if server.proc.poll() is None:
            server.proc.kill()

    entries = CacheDirectory(cache_dir).entries("cunet")
    assert len(entries) == 1
    with PipelineCache() as cache:
        assert cache.load_cache(cache_dir / entries[0].file)

    saved = _cache_files(cache_dir)
    second = Server(cache_dir)
    try:
        await second.wait_ready()
        warm = await second.metrics()
        assert warm["asyncvk_spirv_compiles"] == 0 and warm["asyncvk_model_load_warm"] == 1
    finally:
        code, err = second.stop()
    assert code == 0, err
    # a warm start that built nothing new writes no cache file, and removes none
    assert _cache_files(cache_dir) == saved


async def test_sigterm_during_load_exits_cleanly(cache_dir: Path) -> None:
    server = Server(cache_dir)
    status, _ = await server.first_answer()  # answering at once, usually still loading (503)
    assert status in (200, 503)
    code, err = server.stop()
    assert code == 0, err
    assert "Traceback" not in err
    index = cache_dir / "cunet.idx"
    if index.exists():
        json.loads(index.read_text())  # whatever was written is whole


async def _ready_status(server: Server) -> tuple[int, dict[str, object]]:
    """The first /ready answer that is not 'still loading' (503)."""
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(f"{server.url}/ready") as r:
                    if r.status != 503:
                        return r.status, await r.json()
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("still loading after 60 s")


async def test_warm_up_runs_before_ready(cache_dir: Path) -> None:
    server = Server(cache_dir, "--warm-up", "in0=3,44,44")
    try:
        assert await _ready_status(server) == (200, {"ready": True})
        metrics = await server.metrics()
        assert metrics["asyncvk_model_warm_up_seconds"] > 0
        x0 = np.load(MODEL / "input.npy")
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as http,
            http.post(
                f"{server.url}/infer", data=_npy(x0), headers={"Content-Type": "application/x-npy"}
            ) as r,
        ):
            assert r.status == 200
            y = np.load(io.BytesIO(await r.read()))
        (expected,) = await _reference([x0])
        assert np.linalg.norm(y - expected) / np.linalg.norm(expected) < 1e-3
    finally:
        code, err = server.stop()
    assert code == 0, err


async def test_warm_up_leaves_no_background_build_after_ready(cache_dir: Path) -> None:
    """squeezenet's wide 3x3 layers have background pipelines (the Winograd passes on CPU
    devices, which wait for a first inference): the warm-up waits for them too, so nothing is
    built once /ready says 200."""
    server = Server(cache_dir, "--warm-up", "in0=3,224,224", model=MODEL.parent / "squeezenet")
    try:
        assert await _ready_status(server) == (200, {"ready": True})
        created = (await server.metrics())["asyncvk_pipelines_created"]
        await asyncio.sleep(1.0)
        assert (await server.metrics())["asyncvk_pipelines_created"] == created
    finally:
        code, err = server.stop()
    assert code == 0, err


@pytest.mark.parametrize(
    ("spec", "needle"),
    [("nope=3,44,44", "warm-up input nope"), ("in0=3,2,2", "warm-up with")],
)
async def test_a_bad_warm_up_is_reported_on_ready(cache_dir: Path, spec: str, needle: str) -> None:
    # --stay-up-on-load-error: /ready reports the failure (without it the process exits 1,
    # tests/test_serve_console.py)
    server = Server(cache_dir, "--warm-up", spec, "--stay-up-on-load-error")
    try:
        status, body = await _ready_status(server)
        assert status == 500
        assert needle in str(body["error"])
    finally:
        code, err = server.stop()
    assert code == 0, err
