"""A shared cache folder written by someone hostile never hurts a process or its files.

The attacker plants files as an unprivileged user where setpriv can drop root (as CI runs),
and as the same user otherwise; the victim is this process or a fresh ``asyncvk`` process.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from cli_runner import cli, run_args
from conftest import IDENTITY

from asyncvk import Net, Option
from asyncvk.cache._directory import CacheDirectory, CacheDirectoryWarning
from asyncvk.cache._file_format import CacheContents, encode_cache
from asyncvk.cache._keys import SpirvKey
from asyncvk.gpu import VulkanDevice

CUNET = Path(__file__).parent / "models" / "cunet"
NOBODY = 65534


def _data() -> bytes:
    spirv = {SpirvKey("s", 1, 1, 2): (0x07230203).to_bytes(4, "little") + bytes(60)}
    return encode_cache(CacheContents(IDENTITY, spirv, b""))


def _as_attacker(*command: str) -> None:
    """Run a shell command as an unprivileged user when we are root, else as ourselves."""
    prefix: list[str] = []
    if os.geteuid() == 0 and shutil.which("setpriv"):
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    proc = subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-500:]


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside pytest's private tmp (0700), so the unprivileged attacker can reach it."""
    root = Path(tempfile.mkdtemp(prefix="asyncvk-hostile-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def shared(outside: Path) -> Path:
    """A world-writable sticky folder, like /tmp, that the victim uses as its cache folder."""
    folder = outside / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


@pytest.fixture
def victim_file(outside: Path) -> Path:
    path = outside / "precious.txt"
    path.write_text("the victim's own data")
    return path


def _plant_links(folder: Path, names: list[str], target: Path) -> None:
    script = "".join(f"ln -s '{target}' '{folder / n}' || exit 1\n" for n in names)
    _as_attacker("sh", "-c", script)


# -- symlinks planted where asyncvk writes -------------------------------------------------------


def test_symlinks_at_predictable_names_are_never_followed(shared: Path, victim_file: Path) -> None:
    start = os.getpid()
    names = [f".probe.{pid}.0" for pid in range(start, start + 400)]
    names += [".probe.0", "m.idx.tmp", "m.vkcache"]
    _plant_links(shared, names, victim_file)
    directory = CacheDirectory(shared)
    assert directory.lookup("m", IDENTITY, "fp").path is None
    assert directory.store("m", IDENTITY, "fp", _data()) is not None
    assert directory.lookup("m", IDENTITY, "fp").data == _data()
    assert victim_file.read_text() == "the victim's own data"


def test_a_symlinked_lock_is_a_miss_and_creates_nothing(shared: Path, outside: Path) -> None:
    target = outside / "created-by-asyncvk"
    _plant_links(shared, ["m.lock"], target)
    directory = CacheDirectory(shared)
    found = directory.lookup("m", IDENTITY, "fp")
    assert found.path is None and "symbolic link" in found.reason
    with pytest.warns(CacheDirectoryWarning, match="symbolic link"):
        assert directory.store("m", IDENTITY, "fp", _data()) is None
    assert not target.exists()


def test_a_symlinked_lock_beside_a_cache_file_creates_nothing(
    device: VulkanDevice, shared: Path, outside: Path
) -> None:
    from asyncvk import PipelineCache

    target = outside / "created-by-asyncvk"
    _plant_links(shared, ["c.vkcache.lock"], target)
    with PipelineCache(device) as cache:
        result = cache.save_cache(shared / "c.vkcache")
    assert not result and "symbolic link" in result.reason
    assert not target.exists() and not (shared / "c.vkcache").exists()


def test_a_planted_cache_file_symlink_is_not_read(shared: Path, outside: Path) -> None:
    real = outside / "real.vkcache"
    CacheDirectory(shared).store("m", IDENTITY, "fp", _data())
    name = next(shared.glob("m_*.vkcache")).name
    os.replace(shared / name, real)
    _plant_links(shared, [name], real)
    found = CacheDirectory(shared).lookup("m", IDENTITY, "fp")
    assert found.data is None


def test_a_folder_asyncvk_creates_is_private(tmp_path: Path) -> None:
    CacheDirectory(tmp_path / "new").store("m", IDENTITY, "fp", _data())
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700


# -- prune removes only what asyncvk's scheme accounts for ----------------------------------------


def test_prune_leaves_files_that_are_not_asyncvks(shared: Path) -> None:
    directory = CacheDirectory(shared)
    directory.store("m", IDENTITY, "fp", _data())
    old = time.time() - 7200
    foreign = [".notes.tmp", ".m.idx.tmp", "m_notes.vkcache", "readme.txt"]
    for name in foreign:
        (shared / name).write_text("not asyncvk's")
        os.utime(shared / name, (old, old))
    orphan = shared / f".m.idx.{2**22 + 12345}.{'a' * 32}.tmp"  # a dead writer's temp file
    orphan.write_bytes(b"x")
    os.utime(orphan, (old, old))
    proc = cli("cache", "prune", str(shared), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert all((shared / n).exists() for n in foreign)
    assert not orphan.exists() and orphan.name in report["removed"]
    assert set(foreign) <= set(report["left"])


# -- a tampered index is a miss with a reason, never a traceback ---------------------------------

TAMPERED = {
    "device is a list": lambda e: {**e, "device": [1, 2]},
    "device is a string": lambda e: {**e, "device": "gpu"},
    "last_used is a string": lambda e: {**e, "last_used": "yesterday"},
    "size is negative": lambda e: {**e, "size": -1},
    "file escapes the folder": lambda e: {**e, "file": "../../etc/passwd"},
}


def _tamper(folder: Path, how: str) -> None:
    index = folder / "m.idx"
    if how == "top level is a list":
        index.write_text("[]")
    elif how == "1 MB of [":
        index.write_text("[" * (1 << 20))
    elif how == "deeply nested":
        index.write_text('{"entries": ' + "[" * 100_000 + "]" * 100_000 + "}")
    else:
        raw = json.loads(index.read_text())
        raw["entries"] = [TAMPERED[how](e) for e in raw["entries"]]
        index.write_text(json.dumps(raw))


CASES = [*TAMPERED, "top level is a list", "1 MB of [", "deeply nested"]


@pytest.mark.parametrize("how", CASES)
def test_a_tampered_index_is_a_miss_or_a_rebuild(tmp_path: Path, how: str) -> None:
    directory = CacheDirectory(tmp_path)
    directory.store("m", IDENTITY, "fp", _data())
    _tamper(tmp_path, how)
    found = CacheDirectory(tmp_path).lookup("m", IDENTITY, "fp")
    assert found.data in (None, _data())  # the file's own header rebuilds the entry
    assert CacheDirectory(tmp_path).store("m", IDENTITY, "fp", _data()) is not None
    assert CacheDirectory(tmp_path).lookup("m", IDENTITY, "fp").data == _data()
    assert (Path("/etc/passwd")).exists()


@pytest.mark.parametrize("how", ["device is a list", "last_used is a string", "1 MB of ["])
def test_cache_ls_and_prune_report_a_tampered_index(tmp_path: Path, how: str) -> None:
    CacheDirectory(tmp_path).store("m", IDENTITY, "fp", _data())
    _tamper(tmp_path, how)
    for command in ("ls", "prune"):
        proc = cli("cache", command, str(tmp_path))
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "invalid" in proc.stdout + proc.stderr


async def test_a_run_over_a_tampered_index_loads_and_is_right(
    device: VulkanDevice, tmp_path: Path
) -> None:
    async def run() -> np.ndarray:
        net = Net(Option(cache_dir=tmp_path, graph_key="m"))
        await net.load_param(CUNET / "model.param")
        await net.load_model(CUNET / "model.bin")
        ex = net.create_extractor()
        ex.input("in0", np.load(CUNET / "input.npy"))
        out = await ex.extract("out0")
        await net.aclose()
        return out

    expected = await run()
    _tamper(tmp_path, "device is a list")
    assert np.array_equal(await run(), expected)
    _tamper(tmp_path, "1 MB of [")
    assert np.array_equal(await run(), expected)


# -- arguments ----------------------------------------------------------------------------------


def test_a_graph_key_that_starts_with_a_dash(tmp_path: Path) -> None:
    common = [
        *run_args(CUNET),
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    refused = cli(*common, "--graph-key", "-rf")
    assert refused.returncode == 2 and "--graph-key=-VALUE" in refused.stderr
    accepted = cli(*common, "--graph-key=-rf", "--json")
    assert accepted.returncode == 0, accepted.stderr
    assert list((tmp_path / "c").glob("-rf_*.vkcache"))


# -- a cache folder that can be read but not written still serves ----------------------------------


def _run_cunet(cache_dir: Path, prefix: list[str]) -> subprocess.CompletedProcess[str]:
    command = [
        *prefix,
        sys.executable,
        "-m",
        "asyncvk",
        *run_args(CUNET),
        "--cache-dir",
        str(cache_dir),
        "--graph-key",
        "k",
        "--json",
    ]
    env = {**os.environ, "MESA_SHADER_CACHE_DISABLE": "true", "HOME": str(cache_dir.parent)}
    # one deployment key for every user: another user can verify what this one wrote
    env["ASYNCVK_CACHE_KEY"] = DEPLOYMENT_KEY
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


DEPLOYMENT_KEY = "5e" * 32


def _read_only_ways(folder: Path) -> list[tuple[str, list[str]]]:
    """Prefixes that run a command where ``folder`` can be read but not written."""
    ways = []
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c", f"mount --bind -o ro '{folder}' '{folder}'"],
        capture_output=True,
    )
    if probe.returncode == 0:
        script = f"mount --bind -o ro '{folder}' '{folder}' && exec \"$@\""
        ways.append(("read-only mount", ["unshare", "--mount", "sh", "-c", script, "sh"]))
    if os.geteuid() == 0 and shutil.which("setpriv"):
        nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        reach = subprocess.run(
            [*nobody, sys.executable, "-c", "import asyncvk"], capture_output=True
        )
        if reach.returncode == 0:
            ways.append(("another user's 0755 folder", nobody))
    return ways


def test_a_folder_that_cannot_be_written_still_serves(outside: Path) -> None:
    folder = outside / "baked"
    cold = _run_cunet(folder, [])
    assert cold.returncode == 0, cold.stderr
    folder.chmod(0o755)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    ways = _read_only_ways(folder)
    if not ways:
        pytest.skip("no way to make a folder unwritable here (no mount namespace, not root)")
    for how, prefix in ways:
        warm = _run_cunet(folder, prefix)
        assert warm.returncode == 0, (how, warm.stderr)
        report = json.loads(warm.stdout)
        assert report["cache_loaded"] and report["spirv_compiled"] == 0, (how, report)
        assert "not saving" in warm.stderr and "Traceback" not in warm.stderr, how
        assert {p.name: p.read_bytes() for p in folder.iterdir()} == before, how


async def test_serve_becomes_ready_over_a_tampered_index(tmp_path: Path) -> None:
    from test_serve import Server

    CacheDirectory(tmp_path).store("cunet", IDENTITY, "fp", _data())
    (tmp_path / "cunet.idx").write_text("[" * (1 << 20))
    server = Server(tmp_path)
    try:
        await server.wait_ready()
    finally:
        code, err = server.stop()
    assert code == 0 and "Traceback" not in err, err


def test_cache_ls_and_prune_refuse_what_is_not_a_folder(tmp_path: Path) -> None:
    a_file = tmp_path / "some.vkcache"
    a_file.write_bytes(b"")
    for command in ("ls", "prune"):
        for target in (tmp_path / "nothere", a_file):
            proc = cli("cache", command, str(target))
            assert proc.returncode == 1 and "is not a cache folder" in proc.stderr, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["some.vkcache"]


def test_cache_ls_creates_nothing(tmp_path: Path) -> None:
    CacheDirectory(tmp_path).store("m", IDENTITY, "fp", _data())
    (tmp_path / "m.lock").unlink()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli("cache", "ls", str(tmp_path)).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_version() -> None:
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("asyncvk ")


def test_a_huge_file_planted_as_a_cache_entry_is_not_read(tmp_path: Path) -> None:
    CacheDirectory(tmp_path).store("m", IDENTITY, "fp", _data())
    entry = next(tmp_path.glob("m_*.vkcache"))
    with open(entry, "r+b") as f:
        f.truncate(300 << 20)  # sparse, over the 256 MiB limit of every cache read
    found = CacheDirectory(tmp_path).lookup("m", IDENTITY, "fp")
    assert found.data is None and "size limit" in found.reason
