"""Every argument is checked by the parser: a bad one is one usage line and exit status 2, before
anything is loaded, never a traceback from deep inside."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import cli, run_args

CUNET = Path(__file__).parent / "models" / "cunet"
MODEL = [str(CUNET / "model.param"), str(CUNET / "model.bin")]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["serve", *MODEL, "--port", "99999"], "a port is 0 to 65535, got 99999"),
        (["serve", *MODEL, "--port", "http"], "'http' is not a port number"),
        (["serve", *MODEL, "--host", "999.1.1.1"], "cannot listen on '999.1.1.1'"),
        (["serve", *MODEL, "--max-body", "0"], "must be at least 1"),
        (["serve", *MODEL, "--device", "-1"], "must be at least 0"),
        (["run", *MODEL, "--compile-threads", "-3"], "must be at least 1"),
        (["run", *MODEL, "--compile-threads", "0"], "must be at least 1"),
        (["run", *MODEL, "--device", "gpu9"], "neither a device index nor 'cpu'"),
        (["run", *MODEL, "--device", "-2"], "a device index is 0 or more"),
        (["cache", "prune", ".", "--max-bytes", "-5"], "must be at least 0"),
        (["cache", "verify", "x.vkcache", "--device", "-1"], "must be at least 0"),
    ],
)
def test_a_bad_argument_is_one_usage_line(args: list[str], says: str) -> None:
    proc = cli(*args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr


def test_device_cpu_runs_on_the_cpu_path() -> None:
    proc = cli(*run_args(CUNET), "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["device"]["type"] == "cpu"


@pytest.mark.parametrize("where", ["first", "after the command", "last"])
def test_debug_is_taken_anywhere_on_the_line(where: str) -> None:
    words = ["info", "--json"]
    at = {"first": 0, "after the command": 1, "last": len(words)}[where]
    proc = cli(*words[:at], "--debug", *words[at:], timeout=60)
    assert proc.returncode in (0, 1), proc.stderr  # 1: no device; never a usage error
    assert "unrecognized arguments" not in proc.stderr


def test_output_writes_exactly_the_path_given(tmp_path: Path) -> None:
    folder = tmp_path / "outs"
    folder.mkdir()
    exact = tmp_path / "y.txt"
    proc = cli(*run_args(CUNET), "--output", f"out0={exact}")
    assert proc.returncode == 0, proc.stderr
    assert exact.is_file() and not (tmp_path / "y.txt.npy").exists()
    assert f"written to {exact}" in proc.stdout
    proc = cli(*run_args(CUNET), "--output", f"out0={folder}")
    assert proc.returncode == 0 and (folder / "out0.npy").is_file(), proc.stderr
    assert f"written to {folder / 'out0.npy'}" in proc.stdout
    proc = cli(*run_args(CUNET), "--output", "out0")
    assert proc.returncode == 0 and "not written" in proc.stdout, proc.stderr


def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    proc = cli(*run_args(CUNET), "--output", f"out0={tmp_path / 'missing' / 'y.npy'}")
    assert proc.returncode == 1 and "does not exist" in proc.stderr, proc.stderr
    assert "first output" not in proc.stdout  # nothing ran
