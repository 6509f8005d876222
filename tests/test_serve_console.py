"""What ``asyncvk serve`` says on its console, and how it ends when the model cannot load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_serve import MODEL, Server, _free_port


async def test_the_console_tells_loading_ready_saved_and_shutdown(tmp_path: Path) -> None:
    server = Server(tmp_path, "--access-log")
    try:
        await server.wait_ready()
        await server.metrics()  # one request, for the access log
    finally:
        code, err = server.stop()
    assert code == 0, err
    for line in ("loading ", "ready in ", "pipeline cache cold", "shutting down", "GET /metrics"):
        assert line in err, (line, err)
    assert "Traceback" not in err
    warm = Server(tmp_path)  # no access log by default
    try:
        await warm.wait_ready()
        await warm.metrics()
    finally:
        code, err = warm.stop()
    assert code == 0 and "pipeline cache warm" in err and "GET /metrics" not in err, err


def _serve(param: Path, *extra: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "asyncvk", "serve", str(param), str(MODEL / "model.bin")]
    command += ["--port", str(_free_port()), *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_model_that_cannot_load_exits_non_zero(tmp_path: Path) -> None:
    proc = _serve(tmp_path / "missing.param")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, (out, err)
    assert "model failed to load" in err and "missing.param" in err
    assert "Traceback" not in err


def test_stay_up_on_load_error_keeps_serving(tmp_path: Path) -> None:
    proc = _serve(tmp_path / "missing.param", "--stay-up-on-load-error")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=8)  # still up well after the load failed
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "model failed to load" in err, err
