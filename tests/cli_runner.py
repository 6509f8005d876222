"""Run the ``asyncvk`` command line as users do: a fresh interpreter, ``python -m asyncvk``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def cli(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m asyncvk ARGS`` in this environment, with ``env``'s variables set on top."""
    return subprocess.run(
        [sys.executable, "-m", "asyncvk", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, **(env or {})),
        timeout=timeout,
    )


def run_args(model: Path) -> list[str]:
    """``run`` on a test model folder with its reference input: the arguments after
    ``asyncvk``, ready for more options."""
    return [
        "run",
        str(model / "model.param"),
        str(model / "model.bin"),
        "--input",
        f"in0={model / 'input.npy'}",
    ]
