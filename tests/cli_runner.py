"""Run the ``asyncvk`` command line as users do: a fresh interpreter, ``python -m asyncvk``."""

from __future__ import annotations

import os
import subprocess
import sys


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "asyncvk", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=timeout,
    )
