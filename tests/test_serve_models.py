"""``asyncvk serve --models DIR`` serves every ``DIR/NAME/model.param`` under NAME, in one
process, one device and one pipeline cache; ``--name`` names a lone model; bad folders and
mixed arguments are one line and exit status 1."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp
import numpy as np
from cli_runner import cli
from served_process import wait_until_ready
from test_serve import _free_port

MODELS = Path(__file__).parent / "models"
TIMEOUT = aiohttp.ClientTimeout(total=120)


def _folder(tmp_path: Path) -> Path:
    """A models folder of cunet and squeezenet, and a stray folder with no model."""
    root = tmp_path / "models"
    for name in ("cunet", "squeezenet"):
        (root / name).mkdir(parents=True)
        for file in ("model.param", "model.bin"):
            shutil.copy(MODELS / name / file, root / name / file)
    (root / "notes").mkdir()
    return root


async def _infer(http: aiohttp.ClientSession, url: str, model: str, x: np.ndarray) -> np.ndarray:
    raw = np.ascontiguousarray(x[np.newaxis], "<f4").tobytes()
    header = (
        f'{{"inputs": [{{"name": "in0", "shape": {list((1, *x.shape))}, "datatype": "FP32", '
        f'"parameters": {{"binary_data_size": {len(raw)}}}}}], '
        '"parameters": {"binary_data_output": true}}'
    ).encode()
    headers = {"Inference-Header-Content-Length": str(len(header))}
    async with http.post(f"{url}/v2/models/{model}/infer", data=header + raw, headers=headers) as r:
        body = await r.read()
        assert r.status == 200, body
        split = int(r.headers["Inference-Header-Content-Length"])
    return np.frombuffer(body[split:], "<f4")


async def test_a_folder_of_models_in_one_server(tmp_path: Path) -> None:
    port = _free_port()
    proc = _start("--models", str(_folder(tmp_path)), "--port", str(port), "--no-access-log")
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_until_ready(proc, f"{url}/v2/health/ready")
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
            async with http.post(f"{url}/v2/repository/index") as r:
                assert [m["name"] for m in await r.json()] == ["cunet", "squeezenet"]
            for name in ("cunet", "squeezenet"):
                got = await _infer(http, url, name, np.load(MODELS / name / "input.npy"))
                want = np.load(MODELS / name / "output.npy").reshape(-1)
                assert np.linalg.norm(got - want) < 1e-3 * np.linalg.norm(want), name
            async with http.get(f"{url}/metrics") as r:
                text = await r.text()
        for name in ("cunet", "squeezenet"):
            assert f'asyncvk_model_requests_total{{model="{name}"}} 1' in text
        assert "# HELP asyncvk_model_batches_total " in text
        types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
        helps = [line.split()[2] for line in text.splitlines() if line.startswith("# HELP ")]
        assert types == helps  # every metric says what it is
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "cunet ready in" in err and "squeezenet ready in" in err


def _start(*args: str) -> subprocess.Popen[str]:
    """``asyncvk serve ARGS`` in a fresh process."""
    return subprocess.Popen(
        [sys.executable, "-m", "asyncvk", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def test_models_folders_that_cannot_be_served(tmp_path: Path) -> None:
    missing = cli("serve", "--models", str(tmp_path / "nope"))
    assert missing.returncode == 1
    assert f"--models {tmp_path / 'nope'}: no such folder" in missing.stderr
    empty = cli("serve", "--models", str(tmp_path))
    assert empty.returncode == 1 and "no NAME/model.param in it" in empty.stderr
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "model.param").write_text("7767517\n0 0\n")
    half = cli("serve", "--models", str(tmp_path))
    assert half.returncode == 1 and "has no model.bin beside it" in half.stderr
    both = cli("serve", str(MODELS / "cunet" / "model.param"), "--models", str(tmp_path))
    assert both.returncode == 1 and "give no PARAM, BIN or --name with it" in both.stderr
    neither = cli("serve")
    assert (
        neither.returncode == 1 and "serve needs PARAM and BIN, or --models DIR" in neither.stderr
    )
    bad = cli("serve", *(str(MODELS / "cunet" / f) for f in ("model.param", "model.bin")),
              "--name", "a/b")  # fmt: skip
    assert bad.returncode == 1 and "the name 'a/b' must be letters, digits" in bad.stderr
