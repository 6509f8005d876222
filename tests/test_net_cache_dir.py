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


async def test_an_empty_folder_loads_without_hashing_the_weights(
    device: VulkanDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's fingerprint (a hash of every weight) is checked against a file of this
    device; an empty folder (a machine warm from a remote cache) has none, so the load does not
    wait for it: the save after the load computes it, once."""
    from asyncvk.cache import _directory
    from asyncvk.cache._pipeline_cache import PipelineCache
    from asyncvk.net._cache_folder import ModelCacheFolder

    hashed: list[tuple[object, ...]] = []
    real = _directory.model_fingerprint

    def counted(*sources: object) -> str:
        hashed.append(sources)
        return real(*sources)

    monkeypatch.setattr(_directory, "model_fingerprint", counted)
    sources = (str(MODEL / "model.param"), str(MODEL / "model.bin"))
    cache = PipelineCache(device)
    try:
        folder = await ModelCacheFolder.open(tmp_path / "c", "k", cache, *sources)
        assert folder.status["reason"] == "no cache for this device and driver yet"
        assert hashed == []
        assert (await folder.save(cache)).ok and len(hashed) == 1
        again = await ModelCacheFolder.open(tmp_path / "c", "k", cache, *sources)
        assert again.status["loaded"] and len(hashed) == 2  # checked against the file's
        assert again.fingerprint() == folder.fingerprint() and len(hashed) == 2
    finally:
        cache.close()


async def test_a_model_file_gone_before_the_save_is_no_save_and_no_error(
    device: VulkanDevice, tmp_path: Path
) -> None:
    """The fingerprint is read at the first save, after the load: a model file moved or
    deleted by then means nothing is saved, not an exception out of the saver."""
    from asyncvk.cache._pipeline_cache import PipelineCache
    from asyncvk.net._cache_folder import ModelCacheFolder

    model = tmp_path / "model"
    model.mkdir()
    for name in ("model.param", "model.bin"):
        shutil.copy(MODEL / name, model / name)
    sources = (str(model / "model.param"), str(model / "model.bin"))
    cache = PipelineCache(device)
    try:
        folder = await ModelCacheFolder.open(tmp_path / "c", "k", cache, *sources)
        (model / "model.bin").unlink()
        result = await folder.save(cache)
        assert not result.ok and "not saved" in result.reason
        assert any("model fingerprint" in p for p in folder.directory.problems)
    finally:
        cache.close()


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
