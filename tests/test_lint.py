"""The tree stays ruff clean (lint and format) and the package type-checks, as CI enforces."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]])
def test_ruff(args: list[str]) -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    proc = subprocess.run([ruff, *args, str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_on_the_package() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", str(ROOT / "asyncvk")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
