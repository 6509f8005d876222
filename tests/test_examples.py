"""Every file in examples/ runs, as users would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_example_runs(example: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    src = Path(__file__).parent / "models" / "cunet"
    model.mkdir()
    for name in ("model.param", "model.bin", "input.npy", "output.npy"):
        (model / name).write_bytes((src / name).read_bytes())
    proc = subprocess.run(
        [sys.executable, str(example), str(model)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
