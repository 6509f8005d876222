"""The managed cache folder: keys to file names, the index, staleness, eviction, concurrency."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from conftest import IDENTITY, identity_source

from asyncvk.cache._directory import CacheDirectory, CacheDirectoryWarning, key_stem
from asyncvk.cache._file_format import CacheContents, encode_cache
from asyncvk.cache._keys import SpirvKey
from asyncvk.gpu import DeviceIdentity

GPU_B = dataclasses.replace(
    IDENTITY, driver_version=IDENTITY.driver_version + 1, pipeline_cache_uuid=b"b" * 16
)


def _data(identity: DeviceIdentity, tag: int = 0, size: int = 64) -> bytes:
    spirv = {SpirvKey("s", tag, 1, 2): (0x07230203).to_bytes(4, "little") + bytes(size)}
    return encode_cache(CacheContents(identity, spirv, b""))


def test_plain_keys_are_used_as_is_and_others_are_hashed() -> None:
    assert key_stem("resnet-18_v2") == "resnet-18_v2"
    for key in ("a/b", "with space", "x" * 300, "", "ünïcode"):
        stem = key_stem(key)
        assert stem.startswith("hash_") and "/" not in stem and len(stem) < 64
    assert key_stem("a/b") != key_stem("a b")


def test_store_then_lookup_then_model_change(tmp_path: Path) -> None:
    directory = CacheDirectory(tmp_path / "new" / "folder")
    first = directory.lookup("model", IDENTITY, "fp1")
    assert first.path is None and "no cache" in first.reason
    stored = directory.store("model", IDENTITY, "fp1", _data(IDENTITY))
    assert stored is not None and stored.name.startswith("model_") and stored.suffix == ".vkcache"
    found = directory.lookup("model", IDENTITY, "fp1")
    assert found.path == stored
    changed = directory.lookup("model", IDENTITY, "fp2")
    assert changed.path is None and changed.stale_removed == 1
    assert not stored.exists()
    index = json.loads((tmp_path / "new" / "folder" / "model.idx").read_text())
    assert index["entries"] == []


def test_two_devices_coexist_under_one_key(tmp_path: Path) -> None:
    directory = CacheDirectory(tmp_path)
    a = directory.store("m", IDENTITY, "fp", _data(IDENTITY))
    b = directory.store("m", GPU_B, "fp", _data(GPU_B))
    assert a is not None and b is not None and a != b
    assert directory.lookup("m", IDENTITY, "fp").path == a
    assert directory.lookup("m", GPU_B, "fp").path == b
    entries = directory.entries("m")
    assert {e.device["driver_version"] for e in entries} == {
        IDENTITY.driver_version,
        GPU_B.driver_version,
    }
    for e in entries:
        assert set(vars(e)) >= {
            "file",
            "graph_key",
            "device",
            "model_fingerprint",
            "asyncvk_version",
            "created",
            "last_used",
            "size",
        }
    # a newer save for device A replaces A's file only
    a2 = directory.store("m", IDENTITY, "fp", _data(IDENTITY, tag=1))
    assert a2 is not None and not a.exists() and b.exists()


def test_hashed_key_files(tmp_path: Path) -> None:
    directory = CacheDirectory(tmp_path)
    key = "models/my net " + "x" * 300
    path = directory.store(key, IDENTITY, "fp", _data(IDENTITY))
    assert path is not None and path.name.startswith("hash_")
    assert (tmp_path / f"{key_stem(key)}.idx").exists()
    assert directory.lookup(key, IDENTITY, "fp").path == path
    assert key in directory.keys()


def test_corrupt_index_is_rebuilt_from_the_files(tmp_path: Path) -> None:
    directory = CacheDirectory(tmp_path)
    path = directory.store("m", IDENTITY, "fp", _data(IDENTITY))
    assert path is not None
    (tmp_path / "m.idx").write_text('{"version": 1, "entries": [{"file": "../../etc/pas')
    found = directory.lookup("m", IDENTITY, "fp")
    assert found.path == path  # rebuilt: the file's own header names its device
    index = json.loads((tmp_path / "m.idx").read_text())
    assert [e["file"] for e in index["entries"]] == [path.name]


def test_orphans_are_removed_and_the_cap_evicts_lru(tmp_path: Path) -> None:
    directory = CacheDirectory(tmp_path, max_bytes=3000)
    orphan = tmp_path / "m_20260101T000000_000000001_1_0.vkcache"
    orphan.write_bytes(b"x")
    directory.store("m", IDENTITY, "fp", _data(IDENTITY, size=1200))
    assert not orphan.exists()
    directory.store("m", GPU_B, "fp", _data(GPU_B, size=1200))
    third = dataclasses.replace(IDENTITY, device_id=0x2331)
    newest = directory.store("m", third, "fp", _data(third, size=1200))
    entries = directory.entries("m")
    assert sum(e.size for e in entries) <= 3000
    assert newest is not None and newest.name in {e.file for e in entries}
    assert {p.name for p in tmp_path.glob("*.vkcache")} == {e.file for e in entries}


def test_unwritable_folder_warns_once_and_runs_uncached(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    directory = CacheDirectory(blocker / "cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert directory.lookup("m", IDENTITY, "fp").path is None
        assert directory.store("m", IDENTITY, "fp", _data(IDENTITY)) is None
        assert directory.lookup("m", IDENTITY, "fp").path is None
    messages = [w for w in caught if issubclass(w.category, CacheDirectoryWarning)]
    assert len(messages) == 1
    assert "running uncached" in str(messages[0].message)


STORE = """
import dataclasses, sys
from asyncvk.cache._directory import CacheDirectory
from asyncvk.cache._file_format import CacheContents, encode_cache
from asyncvk.cache._keys import SpirvKey
from asyncvk.gpu import DeviceIdentity
i = int(sys.argv[2])
ident = IDENTITY_SOURCE
ident = dataclasses.replace(ident, device_id=ident.device_id + i % 3)
d = CacheDirectory(sys.argv[1])
for n in range(5):
    spirv = {SpirvKey("s", n, 1, 2): (0x07230203).to_bytes(4, "little") + bytes(64)}
    d.lookup("shared-key", ident, "fp")
    assert d.store("shared-key", ident, "fp", encode_cache(CacheContents(ident, spirv, b"")))
""".replace("IDENTITY_SOURCE", identity_source())


def test_eight_processes_share_one_key(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen([sys.executable, "-c", STORE, str(tmp_path), str(i)]) for i in range(8)
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    index = json.loads((tmp_path / "shared-key.idx").read_text())
    files = {e["file"] for e in index["entries"]}
    assert files == {p.name for p in tmp_path.glob("*.vkcache")}
    assert len(files) == 3  # one per device identity
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_cli_ls_and_prune(tmp_path: Path) -> None:
    directory = CacheDirectory(tmp_path)
    directory.store("m", IDENTITY, "fp", _data(IDENTITY))
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-m", "asyncvk", "cache", "ls", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    rows = json.loads(out.stdout)["entries"]
    assert (
        rows[0]["graph_key"] == "m"
        and rows[0]["device"]["driver_version"] == IDENTITY.driver_version
    )
    (tmp_path / "m_20260101T000000_000000001_1_0.vkcache").write_bytes(b"orphan")
    pruned = subprocess.run(
        [sys.executable, "-m", "asyncvk", "cache", "prune", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert json.loads(pruned.stdout)["removed_files"] == 1


@pytest.mark.parametrize("key", ["ok-key"])
def test_timestamps_never_collide(tmp_path: Path, key: str) -> None:
    directory = CacheDirectory(tmp_path)
    names = set()
    for i in range(20):
        ident = dataclasses.replace(IDENTITY, device_id=i)
        path = directory.store(key, ident, "fp", _data(ident))
        assert path is not None
        names.add(path.name)
    assert len(names) == 20


def test_devices_that_differ_only_where_the_file_header_looks_coexist(tmp_path: Path) -> None:
    """One definition of "same device" (DeviceIdentity.same_device) for files and the index:
    a driver_id, api_version or driver name of its own is another device in both."""
    directory = CacheDirectory(tmp_path)
    others = [
        dataclasses.replace(IDENTITY, driver_id=IDENTITY.driver_id + 1),
        dataclasses.replace(IDENTITY, api_version=IDENTITY.api_version + 1),
        dataclasses.replace(IDENTITY, driver_name=IDENTITY.driver_name + " (fork)"),
    ]
    stored = {
        ident: directory.store("m", ident, "fp", _data(ident)) for ident in [IDENTITY, *others]
    }
    assert len(set(stored.values())) == 4 and None not in stored.values()
    for ident, path in stored.items():
        assert directory.lookup("m", ident, "fp").path == path


def test_an_index_of_the_previous_version_is_rebuilt_and_served(tmp_path: Path) -> None:
    directory = CacheDirectory(tmp_path)
    stored = directory.store("m", IDENTITY, "fp", _data(IDENTITY))
    assert stored is not None
    index = json.loads((tmp_path / "m.idx").read_text())
    index["asyncvk_cache_index"] = 2  # version 2 kept 5 device fields
    for entry in index["entries"]:
        entry["device"] = {
            k: entry["device"][k]
            for k in (
                "vendor_id",
                "device_id",
                "driver_version",
                "pipeline_cache_uuid",
                "device_name",
            )
        }
    (tmp_path / "m.idx").write_text(json.dumps(index))
    assert directory.lookup("m", IDENTITY, "fp").path == stored


def test_cache_ls_never_prints_a_files_control_characters(tmp_path: Path) -> None:
    """A tampered index names its device with an escape sequence: `cache ls` shows it escaped,
    never as a sequence the terminal would obey."""
    CacheDirectory(tmp_path).store("m", IDENTITY, "fp", _data(IDENTITY))
    index_path = tmp_path / "m.idx"
    index = json.loads(index_path.read_text())
    index["entries"][0]["device"]["device_name"] = "GPU\x1b]0;owned\x07\x1b[2J"
    index_path.write_text(json.dumps(index))
    out = subprocess.run(
        [sys.executable, "-m", "asyncvk", "cache", "ls", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "\\x1b]0;owned\\x07" in out.stdout, out.stdout
    assert not any(c in out.stdout + out.stderr for c in "\x1b\x07")
