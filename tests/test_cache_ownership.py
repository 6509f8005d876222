"""Whose cache it is: a cache file or folder another user owns or can write is not read or
written (as ssh's StrictModes), unless ``ASYNCVK_TRUST_CACHE_OWNER`` says so; and a path that
holds something other than a cache costs the run its cache, never the run. Real runs of the
CLI on cunet, real files with real owners (root chowns them to nobody)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_runner import cli, run_args

from asyncvk.cache._safe_fs import TRUST_OWNER_ENV, ownership_refusal

CUNET = Path(__file__).parent / "models" / "cunet"
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def _run(*cache_args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cli(*run_args(CUNET), *cache_args, "--json", env=env)


def _report(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr
    report: dict[str, object] = json.loads(proc.stdout)
    return report


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A cache file cunet's run saved, as this user."""
    path = tmp_path_factory.mktemp("saved") / "cunet.vkcache"
    _report(_run("--cache", str(path)))
    return path.read_bytes()


@pytest.fixture
def sticky(tmp_path: Path) -> Path:
    """A folder like /tmp: everyone may create files, nobody may replace another's."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


@as_root
def test_a_file_another_user_made_in_a_sticky_folder_is_not_read(
    saved: bytes, sticky: Path
) -> None:
    planted = sticky / "cunet.vkcache"
    planted.write_bytes(saved)  # valid in every way but its owner
    os.chown(planted, NOBODY, NOBODY)
    proc = _run("--cache", str(planted))
    report = _report(proc)
    assert not report.get("cache_loaded")
    assert "belongs to uid 65534" in proc.stderr and "running without the cache" in proc.stderr
    assert TRUST_OWNER_ENV in proc.stderr  # the refusal names the fix
    assert planted.read_bytes() == saved and planted.stat().st_uid == NOBODY
    trusted = _report(_run("--cache", str(planted), env={TRUST_OWNER_ENV: "1"}))
    assert trusted["cache_loaded"], trusted


@as_root
def test_a_cache_folder_another_user_owns_is_not_used(tmp_path: Path) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    os.chown(folder, NOBODY, NOBODY)
    proc = _run("--cache-dir", str(folder), "--graph-key", "cunet")
    report = _report(proc)
    assert not report.get("cache_loaded")
    assert "not trusted" in proc.stderr and "belongs to uid 65534" in proc.stderr
    assert list(folder.iterdir()) == []  # nothing read, nothing written


def test_a_folder_others_can_write_is_not_trusted(saved: bytes, tmp_path: Path) -> None:
    folder = tmp_path / "open"
    folder.mkdir()
    path = folder / "cunet.vkcache"
    path.write_bytes(saved)
    folder.chmod(0o777)  # anyone can replace the file, though it is this user's
    proc = _run("--cache", str(path))
    assert not _report(proc).get("cache_loaded")
    assert "others can write (mode 0777)" in proc.stderr, proc.stderr
    assert path.read_bytes() == saved
    folder.chmod(0o755)
    assert _report(_run("--cache", str(path)))["cache_loaded"]


def test_a_file_others_can_write_is_not_trusted(saved: bytes, tmp_path: Path) -> None:
    path = tmp_path / "cunet.vkcache"
    path.write_bytes(saved)
    path.chmod(0o666)
    why = ownership_refusal(path)
    assert why is not None and "mode 0666" in why and str(path) in why
    path.chmod(0o644)
    assert ownership_refusal(path) is None
    assert ownership_refusal(tmp_path / "absent.vkcache") is None


@pytest.mark.parametrize("content", ["zeros", "random bytes", "sparse"])
def test_a_damaged_file_at_the_cache_path_costs_the_cache_not_the_run(
    saved: bytes, tmp_path: Path, content: str
) -> None:
    path = tmp_path / "cunet.vkcache"
    if content == "zeros":
        path.write_bytes(bytes(len(saved)))
    elif content == "random bytes":
        path.write_bytes(os.urandom(len(saved)))
    else:
        with path.open("wb") as f:
            f.truncate(len(saved))
    before = path.read_bytes()
    proc = _run("--cache", str(path))
    report = _report(proc)
    assert not report.get("cache_loaded") and not report.get("cache_saved")
    lines = [line for line in proc.stderr.splitlines() if "running without the cache" in line]
    assert len(lines) == 1 and str(path) in lines[0], proc.stderr
    assert path.read_bytes() == before  # not a cache asyncvk may replace: left as it was
