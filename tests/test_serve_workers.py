"""``serve --workers N``: N server processes on one port, every request answered, SIGTERM
reaching them all, and a worker's failed load the whole server's exit status."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
from cli_runner import cli
from test_serve import _free_port
from test_serve_models import _infer

CUNET = Path(__file__).parent / "models" / "cunet"
TIMEOUT = aiohttp.ClientTimeout(total=120)


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _running(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


async def _ready(url: str) -> bool:
    """Whether the worker a fresh connection reaches is ready."""
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        try:
            async with http.get(f"{url}/v2/health/ready") as r:
                return r.status == 200
        except aiohttp.ClientConnectionError:
            return False


def _start(port: int, *extra: str) -> subprocess.Popen[str]:
    model = (str(CUNET / "model.param"), str(CUNET / "model.bin"))
    return subprocess.Popen(
        [sys.executable, "-m", "asyncvk", "serve", *model, "--port", str(port), "--workers", "2",
         "--no-access-log", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )  # fmt: skip


async def test_two_workers_on_one_port(tmp_path: Path) -> None:
    port, grpc_port = _free_port(), _free_port()
    grpc_ready = importlib.util.find_spec("grpc") is not None
    proc = _start(port, *(["--grpc-port", str(grpc_port)] if grpc_ready else []))
    url = f"http://127.0.0.1:{port}"
    x = np.load(CUNET / "input.npy")
    want = np.load(CUNET / "output.npy").reshape(-1)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # both workers: 8 fresh connections all say ready
            await asyncio.sleep(0.1)
            assert proc.poll() is None, proc.communicate()[1]
            if all([await _ready(url) for _ in range(8)]):
                break
        assert len(_children(proc.pid)) == 2
        for _ in range(12):
            async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
                got = await _infer(http, url, "cunet", x)
            assert np.linalg.norm(got - want) < 1e-3 * np.linalg.norm(want)
        if grpc_ready:  # every worker serves gRPC on its one port too
            import tritonclient.grpc.aio as grpcclient

            client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
            try:
                for _ in range(6):
                    data = grpcclient.InferInput("in0", list(x.shape), "FP32")
                    data.set_data_from_numpy(x)
                    out = (await client.infer("cunet", [data])).as_numpy("out0")
                    assert out is not None
                    assert np.linalg.norm(out.reshape(-1) - want) < 1e-3 * np.linalg.norm(want)
            finally:
                await client.close()
    finally:
        workers = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert err.count("serving on") == 0  # announced on stdout, once per worker
    assert not any(_running(pid) for pid in workers)


def test_a_worker_that_cannot_load_ends_the_server(tmp_path: Path) -> None:
    (tmp_path / "bad.param").write_text("not a param file\n")
    (tmp_path / "bad.bin").write_bytes(b"")
    proc = cli("serve", str(tmp_path / "bad.param"), str(tmp_path / "bad.bin"),
               "--port", str(_free_port()), "--workers", "2", timeout=120)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "failed to load" in proc.stderr
    zero = cli("serve", str(CUNET / "model.param"), str(CUNET / "model.bin"), "--port", "0",
               "--workers", "2")  # fmt: skip
    assert zero.returncode == 1 and "--workers shares one port" in zero.stderr
