"""What the way to a first result imports, checked in fresh processes: the start-up budget
(issue 16) is spent on imports where it is not watched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODELS = Path(__file__).parent / "models"


def _fresh(script: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def test_the_device_opens_without_numpy() -> None:
    """The CLI opens the device on a thread while the main thread imports numpy; had opening
    it needed numpy, that thread would wait for the import (up to 33 ms seen on the H100)."""
    script = (
        "import sys\n"
        "from asyncvk.gpu._device import get_gpu_device\n"
        "get_gpu_device()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy')[:3])"
    )
    assert _fresh(script) == "[]"


def test_a_first_result_never_imports_anyio() -> None:
    """anyio's asyncio backend cost 20-50 ms of start-up; the path to a first output has none."""
    model = MODELS / "squeezenet"
    script = f"""
import asyncio, sys
import numpy as np
from asyncvk import Net

async def main():
    async with Net() as net:
        await net.load_param({str(model / "model.param")!r})
        await net.load_model({str(model / "model.bin")!r})
        ex = net.create_extractor()
        ex.input("in0", np.load({str(model / "input.npy")!r}))
        await ex.extract("out0")

asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] == "anyio"))
"""
    assert _fresh(script) == "[]"
