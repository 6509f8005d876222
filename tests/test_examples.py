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


def test_cold_warm_names_what_a_model_folder_lacks(tmp_path: Path) -> None:
    (tmp_path / "model.param").write_text("7767517\n0 0\n")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES[0].parent / "cold_warm.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=60,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert f"{tmp_path} lacks model.bin, input.npy, output.npy" in line
