"""The user's clock: ``run``/``bench`` time from the kernel's start of the process, and the
command line's fast paths (lazy imports, the device opened on a thread, no teardown at exit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cli_runner import cli, run_args

M = Path(__file__).parent / "models" / "cunet"
RUN = run_args(M)


def test_the_clock_starts_with_the_process_not_with_an_import(tmp_path: Path) -> None:
    """A process that sleeps before importing asyncvk: the sleep is on the user's clock."""
    code = (
        "import sys, time; time.sleep(0.5); sys.argv = ['asyncvk', *sys.argv[1:]]; "
        "from asyncvk.cli import console_main; console_main()"
    )
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code, *RUN, "--json"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )
    outside = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    clock = report["clock"]
    first, end = clock["process_start_to_first_output_s"], clock["process_start_to_exit_s"]
    assert clock["process_start_to_main_s"] >= 0.5
    # the kernel counts a start in clock ticks and truncates: the figures read up to a tick long
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert 0.5 + report["load_and_infer_s"] <= first <= end <= outside + tick
    # the same moment on the system-wide clock, for a parent that times from the spawn
    assert start + 0.5 <= clock["first_output_monotonic_s"] <= start + outside


def test_bench_reports_the_clock_too() -> None:
    proc = cli("bench", *RUN[1:3], "--shape", "in0=3,44,44", "--loops", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    clock = json.loads(proc.stdout)["clock"]
    assert 0 < clock["process_start_to_first_output_s"] <= clock["process_start_to_exit_s"]


def test_the_device_opens_on_a_thread_and_the_cache_file_is_whole_at_exit(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "m.vkcache"
    cold = cli(*RUN, "--cache", str(cache), "--json")
    assert cold.returncode == 0, cold.stderr
    report = json.loads(cold.stdout)
    assert report["clock"]["process_start_to_device_opened_s"] is not None
    assert report["cache_saved"] is True
    # the process left without teardown; the file it saved first is whole
    warm = cli(*RUN, "--cache", str(cache), "--json")
    assert warm.returncode == 0, warm.stderr
    warm_report = json.loads(warm.stdout)
    assert warm_report["cache_loaded"] is True and warm_report["spirv_compiled"] == 0


def test_import_asyncvk_loads_neither_numpy_nor_vulkan() -> None:
    code = (
        "import sys, asyncvk, asyncvk.cli; "
        "print(sorted(m for m in ('numpy', 'vulkan', 'asyncio', 'aiohttp') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
    # and the public names still resolve, on first use
    code = "import asyncvk; print(asyncvk.Net.__name__, asyncvk.PipelineCache.__name__)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["Net", "PipelineCache"]
