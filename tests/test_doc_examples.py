"""The Python examples of the README and the getting-started page run as printed, on a real
model in a folder that holds what they name (``model.param``, ``model.bin``, ``input.npy``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CUNET = ROOT / "tests" / "models" / "cunet"


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_first_python_example_runs(page: str, tmp_path: Path) -> None:
    example = _python_blocks(ROOT / page)[0]
    assert "net.run(" in example, f"{page} shows net.run"
    for name in ("model.param", "model.bin", "input.npy"):
        shutil.copy(CUNET / name, tmp_path / name)
    proc = subprocess.run(
        [sys.executable, "-c", example], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "{'out0': (3, 26, 26)}" in proc.stdout, proc.stdout


def test_the_readme_shows_a_batch() -> None:
    example = _python_blocks(ROOT / "README.md")[0]
    assert re.search(r"net\.run\(\{\"in0\": np\.stack\(", example)
