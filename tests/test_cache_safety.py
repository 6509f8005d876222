"""Nothing a user owns is overwritten or lost: --cache targets, killed saves, merges, modes."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_runner import cli, run_args
from conftest import IDENTITY, identity_source

from asyncvk import Net, Option, PipelineCache
from asyncvk._errors import CacheMissError
from asyncvk.cache._directory import CacheDirectory
from asyncvk.cache._file_entries import decode_cache
from asyncvk.cache._file_format import CacheContents, encode_cache
from asyncvk.cache._keys import SpirvKey
from asyncvk.gpu import DeviceIdentity, VulkanDevice

MODELS = Path(__file__).parent / "models"
CUNET = MODELS / "cunet"


def _data(identity: DeviceIdentity, tags: range | list[int]) -> bytes:
    body = (0x07230203).to_bytes(4, "little") + bytes(60)
    spirv = {SpirvKey("s", t, 1, 2): body for t in tags}
    return encode_cache(CacheContents(identity, spirv, b""))


def _found(folder: Path, key: str = "m") -> bytes | None:
    """The bytes a fresh lookup serves for IDENTITY, or None on a miss."""
    found = CacheDirectory(folder).lookup(key, IDENTITY, "fp")
    return found.path.read_bytes() if found.path is not None else None


def _tags(data: bytes) -> set[int]:
    ok, contents = decode_cache(data, expected=None, source_hashes=None)
    assert ok and contents is not None, ok.reason
    return {k.option_bits for k in contents.spirv}


# -- --cache never replaces what is not a cache file ---------------------------------------------


def _run_with_cache(target: Path) -> subprocess.CompletedProcess[str]:
    return cli(
        *run_args(CUNET),
        "--cache",
        str(target),
    )


def _ran_without_the_cache(proc: subprocess.CompletedProcess[str]) -> None:
    """The run itself succeeded, cold, and said in one line why it had no cache."""
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "running without the cache" in line]
    assert len(lines) == 1, proc.stderr


def test_cache_pointed_at_the_weights_is_refused_and_leaves_them(tmp_path: Path) -> None:
    weights = tmp_path / "model.bin"
    weights.write_bytes((CUNET / "model.bin").read_bytes())
    before = weights.read_bytes()
    proc = _run_with_cache(weights)
    _ran_without_the_cache(proc)
    assert "not an asyncvk cache file" in proc.stderr and str(weights) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert weights.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]  # no model.bin.lock


def test_cache_pointed_at_a_device_node_is_refused(tmp_path: Path) -> None:
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")
    proc = _run_with_cache(node)
    _ran_without_the_cache(proc)
    assert "device node" in proc.stderr
    assert stat.S_ISCHR(node.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_cache_pointed_at_a_directory_creates_nothing_beside_it(tmp_path: Path) -> None:
    folder = tmp_path / "dir"
    folder.mkdir()
    proc = _run_with_cache(folder)
    _ran_without_the_cache(proc)
    assert "a directory" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]  # no dir.lock
    assert list(folder.iterdir()) == []


def test_save_cache_refuses_a_file_that_is_not_a_cache(
    device: VulkanDevice, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    link = tmp_path / "link.vkcache"
    link.symlink_to(tmp_path / "elsewhere.vkcache")
    with PipelineCache(device) as cache:
        result = cache.save_cache(notes)
        assert not result and "not an asyncvk cache file" in result.reason
        assert not cache.save_cache(link)
        assert cache.save_cache(tmp_path / "empty.vkcache")  # absent: fine
        (tmp_path / "zero.vkcache").write_bytes(b"")
        assert cache.save_cache(tmp_path / "zero.vkcache")  # empty: fine
        assert cache.save_cache(tmp_path / "zero.vkcache")  # a cache file: replaced
    assert notes.read_text() == "mine" and link.is_symlink()
    assert not (tmp_path / "elsewhere.vkcache").exists()
    assert not (tmp_path / "notes.txt.lock").exists()


# -- a save killed at any instant loses nothing that was saved ------------------------------------

KILL_AT = """
import os, signal, sys
from asyncvk.cache._directory import CacheDirectory
from asyncvk.cache._file_format import CacheContents, encode_cache
from asyncvk.cache._keys import SpirvKey
from asyncvk.gpu import DeviceIdentity

ident = IDENTITY_SOURCE
body = (0x07230203).to_bytes(4, "little") + bytes(60)
data = encode_cache(CacheContents(ident, {SpirvKey("s", t, 1, 2): body for t in (7, 8)}, b""))
directory = CacheDirectory(sys.argv[1])
kill_at, calls = int(sys.argv[2]), [0]

def armed(function):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return function(*args, **kwargs)
    return call

for name in ("open", "write", "fsync", "close", "replace", "rename", "unlink"):
    setattr(os, name, armed(getattr(os, name)))
assert directory.store("m", ident, "fp", data) is not None
""".replace("IDENTITY_SOURCE", identity_source())


def test_a_save_killed_at_every_step_keeps_the_previous_entry(tmp_path: Path) -> None:
    """SIGKILL before each file operation of a save, one after another, until none is left."""
    completed = False
    for kill_at in range(1, 200):
        folder = tmp_path / f"k{kill_at}"
        CacheDirectory(folder).store("m", IDENTITY, "fp", _data(IDENTITY, [1, 2]))
        proc = subprocess.run(
            [sys.executable, "-c", KILL_AT, str(folder), str(kill_at)], capture_output=True
        )
        found = _found(folder)
        assert found is not None, f"killed at step {kill_at}: the saved entry is lost"
        assert _tags(found) in ({1, 2}, {1, 2, 7, 8}), f"killed at step {kill_at}"
        index = json.loads((folder / "m.idx").read_text())
        assert all((folder / e["file"]).is_file() for e in index["entries"])
        if proc.returncode == 0:
            assert _tags(found) == {1, 2, 7, 8}
            completed = True
            break
        assert proc.returncode == -9, proc.stderr
    assert completed and kill_at > 5  # the save has several steps, and each was hit


# -- concurrent saves of different work for one key merge ------------------------------------------

STORE = """
import sys
from asyncvk.cache._directory import CacheDirectory
from asyncvk.cache._file_format import CacheContents, encode_cache
from asyncvk.cache._keys import SpirvKey
from asyncvk.gpu import DeviceIdentity
ident = IDENTITY_SOURCE
body = (0x07230203).to_bytes(4, "little") + bytes(60)
i = int(sys.argv[2])
d = CacheDirectory(sys.argv[1])
for n in range(4):
    spirv = {SpirvKey("s", 100 * i + n, 1, 2): body}
    assert d.store("k", ident, "fp", encode_cache(CacheContents(ident, spirv, b"")))
""".replace("IDENTITY_SOURCE", identity_source())


def test_processes_saving_different_work_for_one_key_keep_all_of_it(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", STORE, str(tmp_path), str(i)]) for i in range(6)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 6
    found = _found(tmp_path, "k")
    assert found is not None
    assert _tags(found) == {100 * i + n for i in range(6) for n in range(4)}
    assert len(list(tmp_path.glob("*.vkcache"))) == 1


async def _load(opt: Option) -> Net:
    net = Net(opt)
    await net.load_param(CUNET / "model.param")
    await net.load_model(CUNET / "model.bin")
    return net


async def _infer(net: Net) -> np.ndarray:
    ex = net.create_extractor()
    ex.input("in0", np.load(CUNET / "input.npy"))
    return await ex.extract("out0")


async def test_fp32_and_fp16_nets_saving_one_key_keep_both(
    device: VulkanDevice, tmp_path: Path
) -> None:
    if not device.info.support_fp16_storage:
        pytest.skip("fp16 storage not supported here")
    folder = tmp_path / "cache"
    fp32, fp16 = await asyncio.gather(  # both find the folder empty, then both save
        _load(Option(cache_dir=folder, graph_key="k")),
        _load(Option(cache_dir=folder, graph_key="k", use_fp16_storage=True)),
    )
    assert fp32.model_cache.folder is not None
    fingerprint = fp32.model_cache.folder.fingerprint()
    await fp32.aclose()
    await fp16.aclose()
    found = CacheDirectory(folder).lookup("k", device.info.identity, fingerprint)
    assert found.path is not None
    ok, contents = decode_cache(found.path.read_bytes(), expected=None, source_hashes=None)
    assert ok and contents is not None
    assert len({k.option_bits for k in contents.spirv}) >= 2  # fp32 and fp16 variants


# -- modes: read-only, must-hit, ~ ------------------------------------------------------------


async def test_read_only_cache_with_a_cache_dir_writes_nothing(
    device: VulkanDevice, tmp_path: Path
) -> None:
    folder = tmp_path / "cache"
    cache = PipelineCache(device, read_only=True)
    net = await _load(Option(pipeline_cache=cache, cache_dir=folder, graph_key="k"))
    await _infer(net)
    await net.aclose()
    cache.close()
    assert not folder.exists() or list(folder.iterdir()) == []


async def test_read_only_cache_dir_still_serves(device: VulkanDevice, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    net = await _load(Option(cache_dir=folder, graph_key="k"))
    expected = await _infer(net)
    await net.aclose()
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    cache = PipelineCache(device, read_only=True)
    warm = await _load(Option(pipeline_cache=cache, cache_dir=folder, graph_key="k"))
    assert warm.cache_status is not None and warm.cache_status["loaded"]
    assert cache.statistics().spirv_compiles == 0
    assert np.array_equal(await _infer(warm), expected)
    await warm.aclose()
    cache.close()
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


async def test_must_hit_fails_every_time_it_would_compile(
    device: VulkanDevice, tmp_path: Path
) -> None:
    for opt in (
        Option(pipeline_cache=PipelineCache(device, must_hit=True)),
        Option(
            pipeline_cache=PipelineCache(device, must_hit=True),
            cache_dir=tmp_path / "empty",
            graph_key="k",
        ),
    ):
        net = Net(opt)
        await net.load_param(CUNET / "model.param")
        for _ in range(2):  # a retry is refused too, never served cold
            with pytest.raises(CacheMissError):
                await net.load_model(CUNET / "model.bin")
        await net.aclose()
        assert opt.pipeline_cache is not None
        opt.pipeline_cache.close()


async def test_must_hit_passes_from_a_full_cache_file(device: VulkanDevice, tmp_path: Path) -> None:
    path = tmp_path / "c.vkcache"
    with PipelineCache(device) as cache:
        net = await _load(Option(pipeline_cache=cache))
        expected = await _infer(net)
        await net.aclose()
        assert cache.save_cache(path)
    with PipelineCache(device, must_hit=True) as strict:
        assert strict.load_cache(path)
        for _ in range(2):
            net = await _load(Option(pipeline_cache=strict))
            assert np.array_equal(await _infer(net), expected)
            await net.aclose()


async def test_tilde_is_expanded(
    device: VulkanDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    net = await _load(Option(cache_dir="~/.cache/asyncvk", graph_key="k"))
    await net.aclose()
    assert list((tmp_path / ".cache" / "asyncvk").glob("k_*.vkcache"))
    assert not (tmp_path / "~").exists()
    with PipelineCache(device) as cache:
        assert cache.save_cache("~/one.vkcache")
        assert cache.load_cache("~/one.vkcache")
    assert (tmp_path / "one.vkcache").is_file()
    for name in ("model.param", "model.bin"):
        (tmp_path / name).write_bytes((CUNET / name).read_bytes())
    net = Net()
    await net.load_param("~/model.param")
    await net.load_model("~/model.bin")
    await net.aclose()


def test_a_warm_run_that_built_nothing_new_writes_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    args = [
        *run_args(CUNET),
        "--cache-dir",
        str(folder),
        "--graph-key",
        "k",
        "--json",
    ]
    assert cli(*args).returncode == 0
    files = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.vkcache")}
    warm = cli(*args)
    assert warm.returncode == 0 and json.loads(warm.stdout)["cache_loaded"], warm.stderr
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.vkcache")} == files
