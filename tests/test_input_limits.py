"""Sizes are checked before anything is allocated: a .npy header against the file's length, an
input against the cap and the host's memory, a plan's arena against where its blobs would live.
Each refusal is one line that names the input, the size and the limit."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_runner import cli
from numpy.lib import format as npy_format

from asyncvk import InputError, InputTooLargeError, Net, Option
from asyncvk.net import _input_limits
from asyncvk.net._input_limits import (
    MAX_INPUT_BYTES_ENV,
    check_input_size,
    check_plan_fits,
    format_bytes,
    load_npy_file,
)
from asyncvk.net._plan import Plan, PlanRequest

M = Path(__file__).parent / "models" / "cunet"
MODEL = (str(M / "model.param"), str(M / "model.bin"))
ONE_PIB = (1 << 20, 1 << 20, 1 << 8)  # float32: 1 PiB, more than any host has


def _npy_claiming(path: Path, shape: tuple[int, ...], size: int = 4096) -> Path:
    """A .npy file of ``size`` bytes whose header declares a float32 array of ``shape``."""
    with path.open("wb") as f:
        npy_format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": shape}
        )
        f.write(bytes(size - f.tell()))
    return path


def _one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 1, proc.stdout
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("asyncvk: error: ")
    return lines[0].removeprefix("asyncvk: error: ")


def test_run_refuses_a_npy_whose_header_claims_more_than_the_file_holds(tmp_path: Path) -> None:
    huge = _npy_claiming(tmp_path / "huge.npy", (3, 100000, 100000))
    proc = cli("run", *MODEL, "--input", f"in0={huge}")
    assert _one_line_error(proc) == (
        f"in0={huge}: header declares shape (3, 100000, 100000) float32 = 112 GiB "
        "but the file holds 4,096 bytes"
    )


@pytest.mark.parametrize(
    "command",
    [
        ["bench", *MODEL, "--shape", "in0=3,100000,100000"],
        ["cache", "warm", *MODEL, "--cache", "CACHE", "--shape", "in0=3,100000,100000"],
        ["serve", *MODEL, "--warm-up", "in0=3,100000,100000"],
    ],
    ids=["bench", "cache-warm", "serve-warm-up"],
)
def test_a_shape_over_the_cap_is_refused_before_allocating(
    tmp_path: Path, command: list[str]
) -> None:
    command = [str(tmp_path / "x.vkcache") if a == "CACHE" else a for a in command]
    proc = cli(*command)
    assert _one_line_error(proc) == (
        "in0=3,100000,100000: shape (3, 100000, 100000) float32 needs 112 GiB, "
        f"over the 4 GiB input limit ({MAX_INPUT_BYTES_ENV})"
    )
    assert "serving on" not in proc.stdout


def test_the_cap_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_INPUT_BYTES_ENV, "20000")
    proc = cli("run", *MODEL, "--input", f"in0={M / 'input.npy'}")
    assert _one_line_error(proc) == (
        f"in0={M / 'input.npy'}: shape (3, 44, 44) float32 needs 22.7 KiB, "
        f"over the 19.5 KiB input limit ({MAX_INPUT_BYTES_ENV})"
    )


def test_a_shape_over_the_hosts_memory_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_INPUT_BYTES_ENV, str(1 << 62))
    with pytest.raises(InputTooLargeError, match=r"needs 1 PiB, over the .* of memory this host"):
        check_input_size("in0", ONE_PIB)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("in0=3,-1,4", "in0=3,-1,4: shape (3, -1, 4) must have positive dims"),
        ("in0=3,0,4", "in0=3,0,4: shape (3, 0, 4) must have positive dims"),
    ],
)
def test_a_shape_with_dims_that_are_not_positive_is_refused(spec: str, message: str) -> None:
    assert _one_line_error(cli("bench", *MODEL, "--shape", spec)) == message


def test_npy_files_that_are_not_inputs_are_refused(tmp_path: Path) -> None:
    text = tmp_path / "text.npy"
    text.write_text("not a .npy file")
    with pytest.raises(InputError, match=r"not a valid \.npy file"):
        load_npy_file("in0", text)
    strings = tmp_path / "strings.npy"
    np.save(strings, np.array(["a", "b"]))
    with pytest.raises(InputError, match="dtype <U1 is not a real number type"):
        load_npy_file("in0", strings)
    negative = tmp_path / "negative.npy"
    with negative.open("wb") as f:
        npy_format.write_array_header_1_0(
            f, {"descr": "<f4", "fortran_order": False, "shape": (3, -4, 4)}
        )
    with pytest.raises(InputError, match=r"shape \(3, -4, 4\): dims must be positive"):
        load_npy_file("in0", negative)


def test_a_valid_npy_loads_as_before(tmp_path: Path) -> None:
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    np.save(tmp_path / "x.npy", x)
    np.testing.assert_array_equal(load_npy_file("in0", tmp_path / "x.npy"), x)


def test_run_json_reports_memory_peaks() -> None:
    proc = cli("run", *MODEL, "--input", f"in0={M / 'input.npy'}", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["peak_host_rss_bytes"] > 10 << 20  # numpy and the driver alone are more
    assert report["device_memory_reserved_bytes"] > 0


def test_a_plan_larger_than_the_host_has_is_refused_before_allocating(
    device: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lavapipe's device memory is host memory: its arena is checked against what the host has
    available. No blob shape makes an arena over this host's memory without also tripping the
    per-blob limit, so the host here has 64 MiB (cunet at 3x800x800 needs about 192 MiB)."""
    monkeypatch.setattr(_input_limits, "host_available_bytes", lambda: 64 << 20)

    async def plan_for(shape: tuple[int, ...]) -> None:
        async with Net(Option(use_vulkan_compute=True)) as net:
            await net.load_param(MODEL[0])
            await net.load_model(MODEL[1])
            if not net.device.info.unified_memory:
                pytest.skip("the device has memory of its own: its heap is the limit")
            before = net.device.allocator.stats()
            with pytest.raises(InputTooLargeError) as caught:
                request = PlanRequest.of({net.blob_index["in0"]: shape}, [net.blob_index["out0"]])
                Plan(net.graph, net.gpu_model, request)
            assert net.device.allocator.stats() == before  # nothing was allocated
            assert re.fullmatch(
                r"inputs \{'in0': \(3, 800, 800\)\} need 19\d MiB of blobs at once, over the "
                r"64 MiB of memory this host has available \(the device's memory is host memory\)",
                str(caught.value),
            ), caught.value

    asyncio.run(plan_for((3, 800, 800)))


def test_plan_limits_follow_where_the_blobs_live() -> None:
    gib = 1 << 30
    with pytest.raises(InputTooLargeError, match="over the device's 16 GiB memory heap"):
        check_plan_fits(17 * gib, device_heap=16 * gib, unified_memory=False, inputs="x")
    check_plan_fits(15 * gib, device_heap=16 * gib, unified_memory=False, inputs="x")
    with pytest.raises(InputTooLargeError, match="this host has available"):
        check_plan_fits(1 << 50, device_heap=16 * gib, unified_memory=True, inputs="x")


def test_format_bytes() -> None:
    assert format_bytes(3 * 100000 * 100000 * 4) == "112 GiB"
    assert format_bytes(48 << 20) == "48 MiB"
    assert format_bytes(1000) == "1000 bytes"
