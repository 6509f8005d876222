"""Progress bars: shown on a terminal (a real pseudo-terminal here), never on a pipe, off with
--quiet, and never mixed into stdout."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_runner import cli

M = Path(__file__).parent / "models" / "cunet"
BENCH = [
    "bench",
    str(M / "model.param"),
    str(M / "model.bin"),
    "--shape",
    "in0=3,20,20",
    "--loops",
    "2",
    "--warmup",
    "1",
    "--json",
]


def _run_with_terminal_stderr(*args: str) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal; returns (status, stdout, terminal text)."""
    main, child = pty.openpty()
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="100")
    proc = subprocess.Popen(
        [sys.executable, "-m", "asyncvk", *args], stdout=subprocess.PIPE, stderr=child, env=env
    )
    os.close(child)
    seen = bytearray()

    def drain() -> None:
        while True:
            try:
                data = os.read(main, 4096)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not data:
                return
            seen.extend(data)

    reader = threading.Thread(target=drain)
    reader.start()
    stdout, _ = proc.communicate(timeout=300)
    reader.join(timeout=30)
    os.close(main)
    return proc.returncode, stdout.decode(), seen.decode(errors="replace")


@pytest.mark.slow
def test_bench_shows_each_phase_on_a_terminal_and_keeps_stdout_clean() -> None:
    status, stdout, terminal = _run_with_terminal_stderr(*BENCH)
    assert status == 0, terminal
    for phase in ("first inference", "warm-up runs", "timed runs"):
        assert phase in terminal
    assert json.loads(stdout)["latency_ms"]["loops"] == 2  # the bars went to the terminal only


@pytest.mark.slow
def test_quiet_turns_the_bars_off_on_a_terminal() -> None:
    status, stdout, terminal = _run_with_terminal_stderr(*BENCH, "--quiet")
    assert status == 0, terminal
    assert "inference" not in terminal and "runs" not in terminal
    json.loads(stdout)


def test_a_pipe_gets_no_bars() -> None:
    proc = cli(*BENCH)
    assert proc.returncode == 0, proc.stderr
    assert "inference" not in proc.stderr and "runs" not in proc.stderr
