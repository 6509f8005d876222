"""A machine without a Vulkan driver: asyncvk says so, names the fix, and still runs a model on
the CPU when the caller left the choice to it. The Vulkan loader is pointed at a driver file
that does not exist, in fresh processes (the loader reads its variables once)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from cli_runner import cli, run_args

CUNET = Path(__file__).parent / "models" / "cunet"
NO_DRIVER = {"VK_ICD_FILENAMES": "/nonexistent.json", "VK_DRIVER_FILES": "/nonexistent.json"}
FIX = "mesa-vulkan-drivers"

SCRIPT = """
import asyncio, sys
import numpy as np
import asyncvk

async def main(explicit):
    print("count", asyncvk.get_gpu_count())
    opt = asyncvk.Option(use_vulkan_compute=True) if explicit else asyncvk.Option()
    try:
        async with asyncvk.Net(opt) as net:
            await net.load_param(sys.argv[1] + "/model.param")
            await net.load_model(sys.argv[1] + "/model.bin")
            ex = net.create_extractor()
            ex.input("in0", np.load(sys.argv[1] + "/input.npy"))
            np.save(sys.argv[3], await ex.extract("out0"))
            print("ran on", "gpu" if net.use_vulkan else "cpu")
    except asyncvk.DeviceError as exc:
        print("DeviceError:", exc)

asyncio.run(main(sys.argv[2] == "explicit"))
"""


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **NO_DRIVER}
    command = [sys.executable, "-c", SCRIPT, *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_a_net_left_to_choose_runs_on_the_cpu_and_says_why(tmp_path: Path) -> None:
    out = tmp_path / "out0.npy"
    proc = _python(str(CUNET), "default", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "count 0" in proc.stdout and "ran on cpu" in proc.stdout, proc.stdout
    warnings = [line for line in proc.stderr.splitlines() if "no Vulkan device" in line]
    assert len(warnings) == 1 and FIX in warnings[0], proc.stderr
    reference = np.load(CUNET / "output.npy")
    y = np.load(out)
    assert np.linalg.norm(y - reference) / np.linalg.norm(reference) < 2e-3


def test_asking_for_vulkan_without_a_driver_is_a_device_error_with_the_fix(
    tmp_path: Path,
) -> None:
    proc = _python(str(CUNET), "explicit", str(tmp_path / "out0.npy"))
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("DeviceError:")]
    assert len(lines) == 1 and FIX in lines[0], proc.stdout
    assert "Traceback" not in proc.stderr


def test_info_and_run_without_a_driver() -> None:
    info = cli("info", env=NO_DRIVER)
    assert info.returncode == 1  # nothing to list: a script can tell
    assert "no Vulkan device found" in info.stdout and FIX in info.stdout
    run = cli(*run_args(CUNET), env=NO_DRIVER)
    assert run.returncode == 0, run.stderr
    assert FIX in run.stderr
