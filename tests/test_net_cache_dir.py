"""The managed cache folder through the Net and the CLI, across real processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from asyncvk import Net, Option
from asyncvk.cache._directory import CacheDirectory, CacheDirectoryWarning
from asyncvk.gpu import VulkanDevice

MODEL = Path(__file__).parent / "models" / "cunet"


def _run(model_dir: Path, cache_dir: Path, key: str = "cunet") -> dict[str, object]:
    out = model_dir / "out.npy"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "asyncvk",
            "run",
            str(model_dir / "model.param"),
            str(model_dir / "model.bin"),
            "--input",
            f"in0={MODEL / 'input.npy'}",
            "--output",
            f"out0={out}",
            "--cache-dir",
            str(cache_dir),
            "--graph-key",
            key,
            "--json",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    report["output"] = np.load(out)
    return report


@pytest.fixture
def model_copy(tmp_path: Path) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    for name in ("model.param", "model.bin"):
        shutil.copy(MODEL / name, d / name)
    return d


def test_cold_then_warm_then_changed_weights(model_copy: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    cold = _run(model_copy, cache_dir)
    assert not cold["cache_loaded"] and cold["spirv_compiled"] > 0  # type: ignore[operator]
    warm = _run(model_copy, cache_dir)
    assert warm["cache_loaded"] and warm["spirv_compiled"] == 0, warm["cache_reason"]
    assert np.array_equal(cold["output"], warm["output"])  # type: ignore[arg-type]
    # same key, new weights: detected, built cold, the stale entry replaced
    data = bytearray((model_copy / "model.bin").read_bytes())
    data[-4:] = np.float32(3.0).tobytes()  # the last bias of the last conv
    (model_copy / "model.bin").write_bytes(bytes(data))
    changed = _run(model_copy, cache_dir)
    assert not changed["cache_loaded"] and "model changed" in str(changed["cache_reason"])
    assert not np.array_equal(changed["output"], cold["output"])  # type: ignore[arg-type]
    entries = CacheDirectory(cache_dir).entries("cunet")
    assert len(entries) == 1
    assert {p.name for p in cache_dir.glob("*.vkcache")} == {entries[0].file}
    again = _run(model_copy, cache_dir)
    assert again["cache_loaded"] and again["spirv_compiled"] == 0


def test_eight_processes_load_and_save_one_key(model_copy: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    cmd = [
        sys.executable,
        "-m",
        "asyncvk",
        "run",
        str(model_copy / "model.param"),
        str(model_copy / "model.bin"),
        "--input",
        f"in0={MODEL / 'input.npy'}",
        "--cache-dir",
        str(cache_dir),
        "--graph-key",
        "shared",
        "--json",
    ]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(8)
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, errors
    index = json.loads((cache_dir / "shared.idx").read_text())
    files = {e["file"] for e in index["entries"]}
    assert files == {p.name for p in cache_dir.glob("*.vkcache")} and len(files) == 1


async def test_corrupt_index_and_read_only_folder(device: VulkanDevice, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"

    async def load(opt: Option) -> Net:
        net = Net(opt)
        await net.load_param(MODEL / "model.param")
        await net.load_model(MODEL / "model.bin")
        return net

    net = await load(Option(cache_dir=cache_dir, graph_key="k"))
    await net.aclose()
    (cache_dir / "k.idx").write_text("{ torn")
    net = await load(Option(cache_dir=cache_dir, graph_key="k"))
    assert net.cache_status is not None and net.cache_status["loaded"]
    await net.aclose()
    assert json.loads((cache_dir / "k.idx").read_text())["entries"]

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = await load(Option(cache_dir=blocked / "cache", graph_key="k"))
        ex = net.create_extractor()
        ex.input("in0", np.load(MODEL / "input.npy"))
        y = await ex.extract("out0")
        await net.aclose()
    assert sum(issubclass(w.category, CacheDirectoryWarning) for w in caught) == 1
    ref = np.load(MODEL / "output.npy")
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 2e-3
