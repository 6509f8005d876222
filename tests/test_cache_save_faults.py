"""Saving under faults: killed writers, concurrent writers, read-only folders, a full disk."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asyncvk.cache import PipelineCache, _atomic_file
from asyncvk.cache._file_format import CacheContents, decode_cache, encode_cache
from asyncvk.cache._keys import SpirvKey
from asyncvk.gpu import DeviceIdentity, VulkanDevice

IDENTITY = DeviceIdentity(0x10005, 0, 4206822, 1, 13, "fake", "fake", b"u" * 16)
SPIRV_HEAD = (0x07230203).to_bytes(4, "little")

WRITER = """
import os, sys
from asyncvk.cache._atomic_file import write_atomic
from asyncvk.cache._file_format import CacheContents, encode_cache
from asyncvk.cache._keys import SpirvKey
from asyncvk.gpu import DeviceIdentity
ident = DeviceIdentity(0x10005, 0, 4206822, 1, 13, "fake", "fake", b"u" * 16)
path = sys.argv[1]
n = 0
print("ready", flush=True)
while True:
    n += 1
    body = (0x07230203).to_bytes(4, "little") + bytes([n % 251]) * (4 << 20)
    spirv = {SpirvKey(f"s{i}", 0, 1, 2): body for i in range(4)}
    write_atomic(path, encode_cache(CacheContents(ident, spirv, b"")))
"""


def _valid(path: Path) -> bool:
    result, _ = decode_cache(path.read_bytes(), expected=IDENTITY, source_hashes=None)
    return bool(result)


def test_sigkill_while_saving_leaves_old_or_new_file(tmp_path: Path) -> None:
    path = tmp_path / "cache.vkcache"
    old = {SpirvKey("old", 0, 1, 2): SPIRV_HEAD + bytes(64)}
    path.write_bytes(encode_cache(CacheContents(IDENTITY, old, b"")))
    for round_ in range(8):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.05 + 0.07 * round_)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        assert _valid(path), f"round {round_}: the file is torn"
    leftovers = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    # a killed writer may leave its temp file (never the target); it is never mistaken for it
    assert all(p.name.startswith(".cache.vkcache.") for p in leftovers)


CONCURRENT = """
import sys
from asyncvk.cache import PipelineCache
shader = sys.argv[2]
with PipelineCache() as cache:
    specs = {"scale_add": (1.0, 0), "unary": (1, 0.0, 0.0), "softmax": (), "padding": (0, 0.0),
             "gather": (), "scatter": (), "reduction": (0, 1.0), "binary": (0, 0, 0.0, 1.0, 1.0)}
    cache.get_pipeline_sync(shader, specializations=specs[shader])
    result = cache.save_cache(sys.argv[1])
    assert result, result.reason
"""


def test_eight_processes_saving_at_once_leave_the_union(
    tmp_path: Path, device: VulkanDevice
) -> None:
    path = tmp_path / "shared.vkcache"
    shaders = [
        "scale_add",
        "unary",
        "softmax",
        "padding",
        "gather",
        "scatter",
        "reduction",
        "binary",
    ]
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, str(path), s]) for s in shaders]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    with PipelineCache(device) as cache:
        result = cache.load_cache(path)
        assert result, result.reason
        assert {k.shader for k in cache.spirv_entries()} == set(shaders)


def test_full_disk_leaves_the_old_file_and_raises_nothing(
    tmp_path: Path, device: VulkanDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.vkcache"
    with PipelineCache(device) as cache:
        cache.get_pipeline_sync("scale_add", specializations=(1.0, 0))
        assert cache.save_cache(path)
        before = path.read_bytes()
        cache.get_pipeline_sync("unary", specializations=(3, 0.0, 0.0))

        def full(fd: int, data: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(_atomic_file.os, "write", full)
        result = cache.save_cache(path)
        monkeypatch.undo()
        assert not result and "No space left" in result.reason
    assert path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


READ_ONLY = """
import os, sys
import asyncvk.cache._persist
from asyncvk.cache import PipelineCache
with PipelineCache() as cache:
    cache.get_pipeline_sync("scale_add", specializations=(2.0, 0))
    os.setgid(65534); os.setuid(65534)  # after every import: nobody cannot read root's Python
    result = cache.save_cache(sys.argv[1])
    print("ok" if result else "failed: " + result.reason)
"""


def test_read_only_folder_leaves_the_old_file_and_raises_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "x.vkcache"
    path.write_bytes(b"old contents")
    os.chmod(folder, 0o555)
    os.chmod(path, 0o444)
    os.chmod(tmp_path, 0o755)
    try:
        if os.geteuid() == 0:
            code = READ_ONLY  # root ignores permissions: drop to nobody in the child
        else:
            code = READ_ONLY.replace("os.setgid(65534); os.setuid(65534)", "")
        proc = subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("failed:"), proc.stdout
        assert "Permission denied" in proc.stdout or "Read-only" in proc.stdout
    finally:
        os.chmod(folder, 0o755)
    assert path.read_bytes() == b"old contents"
    assert sorted(p.name for p in folder.iterdir()) == ["x.vkcache"]
