"""Saving cache files: the atomic replace (data fsynced before the rename, the folder after), the
lock and the merge, and faults: writers SIGKILLed mid-save, eight concurrent savers, a read-only
folder, a full disk. Real files and real processes; the only fake is the ENOSPC."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import IDENTITY, identity_source
from conftest import OTHER_IDENTITY as OTHER
from pipeline_requests import build_one

from asyncvk.cache import PipelineCache, PipelineSpec, _atomic_file
from asyncvk.cache._atomic_file import (
    merge_contents,
    save_merged,
    write_atomic,
)
from asyncvk.cache._file_entries import decode_cache
from asyncvk.cache._file_format import SPIRV_MAGIC, CacheContents, SpirvKey, encode_cache
from asyncvk.gpu import DeviceIdentity, VulkanDevice


def spirv(*words: int) -> bytes:
    return struct.pack(f"<{len(words) + 1}I", SPIRV_MAGIC, *words)


def blob(identity: DeviceIdentity, tail: bytes) -> bytes:
    head = struct.pack("<IIII", 32, 1, identity.vendor_id, identity.device_id)
    return head + identity.pipeline_cache_uuid + tail


OLD = CacheContents(IDENTITY, {SpirvKey("old", 0, 1, 2): spirv(1, 2, 3)}, b"")
OLD_BYTES = encode_cache(OLD)


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _temps(folder: Path) -> list[str]:
    return [name for name in _listing(folder) if name.endswith(".tmp")]


def _decoded(path: Path) -> CacheContents:
    result, contents = decode_cache(path.read_bytes(), expected=IDENTITY, source_hashes=None)
    assert result and contents is not None, f"{path.name} is torn: {result.reason}"
    return contents


# -- child processes -------------------------------------------------------------------------

PRELUDE = f"""
import json, os, struct, sys, time
from asyncvk.cache._atomic_file import merge_contents, save_merged, write_atomic
from asyncvk.cache._file_format import CacheContents, SpirvKey, encode_cache
from asyncvk.cache._file_entries import decode_cache
from asyncvk.gpu._identity import DeviceIdentity
IDENTITY = {identity_source(IDENTITY)}
"""


def _spawn(code: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE + code, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", line + (proc.stderr.read() if proc.stderr else "")


def _go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


@pytest.fixture
def reaper() -> Iterator[list[subprocess.Popen[str]]]:
    """Children a failing test leaves running are killed, so none outlives it."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


# -- what makes a replace crash-safe ----------------------------------------------------------

FSYNC_ORDER = """
import stat
calls = []
real_fsync, real_replace = os.fsync, os.replace

def fsync(fd):
    kind = "folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
    calls.append(["fsync", kind, os.readlink(f"/proc/self/fd/{fd}")])
    return real_fsync(fd)

def replace(src, dst, **kwargs):
    calls.append(["replace", os.path.realpath(src), os.path.realpath(dst)])
    return real_replace(src, dst, **kwargs)

os.fsync, os.replace = fsync, replace
path = sys.argv[1]
out = {}
for how, save in (
    ("write_atomic", lambda: write_atomic(path, b"AVKPCACH one")),
    ("save_merged", lambda: save_merged(path, lambda old: b"AVKPCACH three")),
):
    calls.clear()
    save()
    out[how] = list(calls)
print(json.dumps(out))
"""


def test_the_data_is_fsynced_before_the_rename_and_the_folder_after(tmp_path: Path) -> None:
    """Without the first fsync a crash can leave the new name on empty or partial data; without
    the second the rename itself can be lost. os.fsync and os.replace are wrapped in a child
    process, which records each call: the order is the property under test."""
    path = tmp_path / "x.vkcache"
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + FSYNC_ORDER, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    folder, target = os.path.realpath(tmp_path), os.path.realpath(path)
    for how, calls in json.loads(proc.stdout).items():
        replaces = [i for i, call in enumerate(calls) if call[0] == "replace"]
        assert len(replaces) == 1, (how, calls)
        at = replaces[0]
        _, temp, replaced = calls[at]
        assert replaced == target and os.path.dirname(temp) == folder, (how, calls)
        assert ["fsync", "file", temp] in calls[:at], f"{how}: data not fsynced before: {calls}"
        assert ["fsync", "folder", folder] in calls[at + 1 :], f"{how}: no folder fsync: {calls}"
    assert path.read_bytes() == b"AVKPCACH three"


# -- SIGKILL while saving --------------------------------------------------------------------

BIG = 1 << 20
KILLED_SAVER = f"""
path, rnd = sys.argv[1], int(sys.argv[2])

def payload(n):
    fill = bytes([(rnd * 31 + n) % 251]) * {BIG}
    head = struct.pack("<III", 0x07230203, rnd, n)
    spirv = {{SpirvKey(f"big{{i}}", i, 1, 2): head + fill for i in range(4)}}
    return encode_cache(CacheContents(IDENTITY, spirv, b""))

def build(existing):
    if existing is not None:
        if not decode_cache(existing, expected=IDENTITY, source_hashes=None)[0]:
            os._exit(3)  # the previous writer left a torn file
    return payload(n)

print("ready", flush=True)
sys.stdin.readline()
n = 0
while True:
    n += 1
    save_merged(path, build)
"""


def _generation(contents: CacheContents) -> tuple[int, int] | None:
    """(round, n) of a complete save by a killed writer, or None for the old file."""
    if contents == OLD:
        return None
    bodies = [contents.spirv[SpirvKey(f"big{i}", i, 1, 2)] for i in range(4)]
    assert len(contents.spirv) == 4
    _magic, rnd, n = struct.unpack_from("<III", bodies[0])
    expected = struct.pack("<III", SPIRV_MAGIC, rnd, n) + bytes([(rnd * 31 + n) % 251]) * BIG
    assert all(b == expected for b in bodies), "entries from different saves in one file"
    return rnd, n


def test_sigkill_while_saving_leaves_the_old_or_a_new_file_never_a_torn_one(
    tmp_path: Path, reaper: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model.vkcache"
    path.write_bytes(OLD_BYTES)
    rng = random.Random(20260722)
    rounds = 10
    reaper.append(_spawn(KILLED_SAVER, path, 0))
    seen: list[tuple[int, int] | None] = []
    killed_mid_write = 0
    for rnd in range(rounds):
        proc = reaper[rnd]
        if rnd + 1 < rounds:  # the next writer starts up while this one runs
            reaper.append(_spawn(KILLED_SAVER, path, rnd + 1))
        _ready(proc)
        _go(proc)
        time.sleep(rng.uniform(0.02, 0.3))
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL, "the writer saw a torn file (exit 3) or died"
        killed_mid_write += any(str(proc.pid) in name for name in _temps(tmp_path))
        seen.append(_generation(_decoded(path)))
    print(f"generations seen: {seen}; killed with a temp file open: {killed_mid_write}")
    assert any(g is not None for g in seen), "no save completed before a kill"
    rounds_seen = [g[0] for g in seen if g is not None]
    assert rounds_seen == sorted(rounds_seen), "an older save replaced a newer one"
    # a killed writer's temp file is never the target, and a later save clears it away
    pids = {str(p.pid) for p in reaper}
    pattern = re.compile(r"\.model\.vkcache\.(\d+)\.[0-9a-f]{32}\.tmp")
    for name in _temps(tmp_path):
        match = pattern.fullmatch(name)
        assert match is not None and match.group(1) in pids, name
    monkeypatch.setattr(_atomic_file, "STALE_TEMP_S", -1.0)
    save_merged(path, lambda existing: OLD_BYTES)
    assert _temps(tmp_path) == [] and _decoded(path) == OLD


# -- eight savers at once --------------------------------------------------------------------

MERGER = """
path, me = sys.argv[1], int(sys.argv[2])

def build_for(r):
    def build(existing):
        old = None
        if existing is not None:
            result, old = decode_cache(existing, expected=IDENTITY, source_hashes=None)
            if not result:
                os._exit(3)
        mine = {SpirvKey(f"p{me}_r{r}", me, r, 0): struct.pack("<III", 0x07230203, me, r)}
        time.sleep(0.01)  # widen the read-modify-write window that a race would need
        return encode_cache(merge_contents(CacheContents(IDENTITY, mine, b""), old))
    return build

print("ready", flush=True)
sys.stdin.readline()
for r in range(3):
    save_merged(path, build_for(r))
"""


def test_eight_processes_saving_at_once_leave_the_union(
    tmp_path: Path, reaper: list[subprocess.Popen[str]]
) -> None:
    path = tmp_path / "shared.vkcache"
    reaper.extend(_spawn(MERGER, path, i) for i in range(8))
    for proc in reaper:
        _ready(proc)
    for proc in reaper:
        _go(proc)
    for proc in reaper:
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    contents = _decoded(path)
    expected = {SpirvKey(f"p{i}_r{r}", i, r, 0) for i in range(8) for r in range(3)}
    assert set(contents.spirv) == expected
    assert all(body == spirv(k.option_bits, k.source_hash) for k, body in contents.spirv.items())
    assert _temps(tmp_path) == []


# -- a folder that cannot be written ---------------------------------------------------------

READ_ONLY = """
with_lock, without_lock, drop = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if drop:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
out = {"uid": os.geteuid()}
try:
    with open(os.path.join(with_lock, "x.vkcache"), "rb") as f:
        out["old"] = f.read().hex()
except OSError as exc:
    out["old"] = str(exc)
for name, folder in (("with_lock", with_lock), ("without_lock", without_lock)):
    target = os.path.join(folder, "x.vkcache")
    for how, save in (
        ("write_atomic", lambda: write_atomic(target, b"new")),
        ("save_merged", lambda: save_merged(target, lambda old: b"new")),
    ):
        try:
            save()
            out[f"{name}/{how}"] = "no error"
        except OSError as exc:
            out[f"{name}/{how}"] = os.strerror(exc.errno or 0)
print(json.dumps(out))
"""


def test_a_read_only_folder_raises_and_leaves_the_old_file(tmp_path: Path) -> None:
    # /tmp itself, not pytest's root-only tmp_path: the unprivileged child must reach the file,
    # so that only the folder's own mode can stop the write
    base = Path(tempfile.mkdtemp(prefix="asyncvk-ro-"))
    folders = [base / "with_lock", base / "without_lock"]
    try:
        for folder in folders:
            folder.mkdir()
            (folder / "x.vkcache").write_bytes(OLD_BYTES)
            folder.chmod(0o555)
        (folders[0] / "x.vkcache.lock").touch()
        os.chmod(base, 0o755)
        drop = os.geteuid() == 0  # root ignores modes: save as nobody
        proc = subprocess.run(
            [sys.executable, "-c", PRELUDE + READ_ONLY, *map(str, folders), str(int(drop))],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if drop and "Operation not permitted" in proc.stderr:
            pytest.skip("cannot drop privileges here (setuid refused)")
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        if out["old"] != OLD_BYTES.hex():
            pytest.skip(f"the unprivileged child cannot read the folder: {out['old']}")
        denied = os.strerror(errno.EACCES)
        assert {k: v for k, v in out.items() if "/" in k} == {
            "with_lock/write_atomic": denied,
            "with_lock/save_merged": denied,  # the lock is had read-only; the temp file fails
            "without_lock/write_atomic": denied,
            "without_lock/save_merged": denied,  # no lock file can be made
        }
        for folder in folders:
            assert (folder / "x.vkcache").read_bytes() == OLD_BYTES
            assert _temps(folder) == []
    finally:
        for folder in folders:
            if folder.exists():
                folder.chmod(0o755)
        shutil.rmtree(base)


# -- a full disk -----------------------------------------------------------------------------


def test_a_full_disk_raises_enospc_and_leaves_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.vkcache"
    path.write_bytes(OLD_BYTES)
    real_write = os.write
    temp_names: list[str] = []

    def full_disk(fd: int, data: bytes | memoryview) -> int:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if not name.endswith(".tmp"):
            return real_write(fd, data)
        temp_names.append(name)
        if len(temp_names) % 2:
            return real_write(fd, data[:4096])  # a filling disk takes part of a write first
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full_disk)
    big = encode_cache(CacheContents(IDENTITY, {SpirvKey("s", 0, 1, 2): spirv(*range(9000))}, b""))
    saves: list[Callable[[], None]] = [
        lambda: write_atomic(path, big),
        lambda: save_merged(path, lambda old: big),
    ]
    for save in saves:
        with pytest.raises(OSError) as caught:
            save()
        assert caught.value.errno == errno.ENOSPC
        assert path.read_bytes() == OLD_BYTES
        assert _temps(tmp_path) == []
    monkeypatch.undo()
    pattern = rf"{re.escape(str(tmp_path))}/\.x\.vkcache\.{os.getpid()}\.[0-9a-f]{{32}}\.tmp"
    assert temp_names and all(re.fullmatch(pattern, n) for n in temp_names), temp_names


FILE_SIZE_LIMIT = """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # report EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
path = sys.argv[1]
out = {}
for how, save in (
    ("sync", lambda: write_atomic(path, bytes(4 << 20))),
):
    try:
        save()
        out[how] = "no error"
    except OSError as exc:
        out[how] = exc.errno
print(json.dumps(out))
"""


def test_a_real_write_failure_leaves_the_old_file(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the kernel refuse the write (EFBIG), as a full disk refuses it."""
    path = tmp_path / "x.vkcache"
    path.write_bytes(OLD_BYTES)
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + FILE_SIZE_LIMIT, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"sync": errno.EFBIG}
    assert path.read_bytes() == OLD_BYTES
    assert _temps(tmp_path) == []


# -- the building blocks ---------------------------------------------------------------------


class TestWriteAtomic:
    def test_creates_and_replaces(self, tmp_path: Path) -> None:
        path = tmp_path / "x.vkcache"
        write_atomic(path, b"first")
        write_atomic(str(path), b"second")
        assert path.read_bytes() == b"second"
        assert _listing(tmp_path) == ["x.vkcache"]

    def test_a_directory_in_place_of_the_target(self, tmp_path: Path) -> None:
        (tmp_path / "x.vkcache").mkdir()
        with pytest.raises(OSError):
            write_atomic(tmp_path / "x.vkcache", b"data")
        assert _temps(tmp_path) == []


class TestSaveMerged:
    def test_build_sees_the_current_bytes_or_none(self, tmp_path: Path) -> None:
        path = tmp_path / "x.vkcache"
        seen: list[bytes | None] = []

        def build(existing: bytes | None) -> bytes:
            seen.append(existing)
            return b"AVKPCACH v%d" % len(seen)  # the cache magic: a file save_merged may replace

        save_merged(path, build)
        save_merged(path, build)
        assert seen == [None, b"AVKPCACH v1"] and path.read_bytes() == b"AVKPCACH v2"

    def test_an_oversized_or_unreadable_current_file_reads_as_none(self, tmp_path: Path) -> None:
        path = tmp_path / "x.vkcache"
        with open(path, "wb") as f:
            f.write(b"AVKPCACH")  # a cache file by its magic, 2 GiB long
            f.truncate(2 << 30)
        seen: list[bytes | None] = []

        def build(existing: bytes | None) -> bytes:
            seen.append(existing)
            return OLD_BYTES

        started = time.perf_counter()
        save_merged(path, build)
        assert seen == [None] and time.perf_counter() - started < 1.0
        assert path.read_bytes() == OLD_BYTES

    def test_unchanged_contents_are_not_rewritten(self, tmp_path: Path) -> None:
        path = tmp_path / "x.vkcache"
        path.write_bytes(OLD_BYTES)
        inode = path.stat().st_ino
        save_merged(path, lambda existing: existing or b"")
        assert path.stat().st_ino == inode

    def test_a_held_lock_times_out_as_an_oserror(self, tmp_path: Path) -> None:
        path = tmp_path / "x.vkcache"
        path.write_bytes(OLD_BYTES)
        command = [sys.executable, "-c", HOLD_LOCK, f"{path}.lock"]
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as holder:
            try:  # another process: a POSIX lock excludes it
                assert holder.stdout is not None and holder.stdout.readline() == "held\n"
                with pytest.raises(OSError, match="lock held") as caught:
                    save_merged(path, lambda existing: b"new", lock_timeout=0.2)
                assert isinstance(caught.value, TimeoutError)
            finally:
                holder.kill()
        assert path.read_bytes() == OLD_BYTES

    def test_a_reader_cannot_hold_the_lock(self, tmp_path: Path) -> None:
        """A user who can only read the lock file cannot take the lock that saves wait for."""
        path = tmp_path / "x.vkcache"
        path.write_bytes(OLD_BYTES)
        save_merged(path, lambda existing: OLD_BYTES)  # the lock file exists, as after a save
        lock = Path(f"{path}.lock")
        assert lock.stat().st_mode & 0o777 == 0o600  # nobody else can even open it
        with open(lock, "rb") as reader:
            with pytest.raises(OSError):
                fcntl.lockf(reader, fcntl.LOCK_EX | fcntl.LOCK_NB)  # needs write access
            fcntl.flock(reader, fcntl.LOCK_EX)  # what a reader could hold: not the save's lock
            save_merged(path, lambda existing: b"saved while a reader held flock")
        assert path.read_bytes() == b"saved while a reader held flock"

    def test_build_errors_propagate_and_write_nothing(self, tmp_path: Path) -> None:
        path = tmp_path / "x.vkcache"
        path.write_bytes(OLD_BYTES)

        def build(existing: bytes | None) -> bytes:
            raise ValueError("cannot merge")

        with pytest.raises(ValueError, match="cannot merge"):
            save_merged(path, build)
        assert path.read_bytes() == OLD_BYTES and _temps(tmp_path) == []
        save_merged(path, lambda existing: b"lock released")  # the lock was released

    def test_stale_temps_of_dead_writers_are_removed(self, tmp_path: Path) -> None:
        dead = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        )
        dead_pid = int(dead.stdout)
        stale = tmp_path / f".x.vkcache.{dead_pid}.{'a' * 32}.tmp"
        fresh = tmp_path / f".x.vkcache.{dead_pid}.{'b' * 32}.tmp"
        alive = tmp_path / f".x.vkcache.{os.getpid()}.{'c' * 32}.tmp"
        other = tmp_path / f".y.vkcache.{dead_pid}.{'d' * 32}.tmp"
        for p in (stale, fresh, alive, other):
            p.write_bytes(b"partial")
        old = time.time() - 3600
        for p in (stale, alive, other):
            os.utime(p, (old, old))
        save_merged(tmp_path / "x.vkcache", lambda existing: OLD_BYTES)
        assert _temps(tmp_path) == sorted(p.name for p in (fresh, alive, other))


class TestMergeContents:
    def test_union_with_new_winning_on_the_same_key(self) -> None:
        a, b, c = SpirvKey("a", 0, 1, 2), SpirvKey("b", 0, 1, 2), SpirvKey("c", 0, 1, 2)
        old = CacheContents(IDENTITY, {a: spirv(1), b: spirv(2)}, blob(IDENTITY, b"old"))
        new = CacheContents(IDENTITY, {b: spirv(20), c: spirv(3)}, blob(IDENTITY, b"new"))
        merged = merge_contents(new, old)
        assert merged.spirv == {a: spirv(1), b: spirv(20), c: spirv(3)}
        assert merged.driver_blob == blob(IDENTITY, b"new")
        assert decode_cache(encode_cache(merged), expected=IDENTITY, source_hashes=None)[0]

    def test_an_empty_new_blob_keeps_the_old_one(self) -> None:
        old = CacheContents(IDENTITY, {}, blob(IDENTITY, b"old"))
        assert merge_contents(CacheContents(IDENTITY, {}, b""), old).driver_blob == old.driver_blob

    def test_another_identity_or_nothing_old_gives_the_new(self) -> None:
        new = CacheContents(IDENTITY, {SpirvKey("n", 0, 1, 2): spirv(1)}, b"")
        old = CacheContents(OTHER, {SpirvKey("o", 0, 1, 2): spirv(2)}, blob(OTHER, b"x"))
        assert merge_contents(new, old) == new
        assert merge_contents(new, None) == new


# -- PipelineCache.save_cache: the same faults, reported in its result -------------------------

CONCURRENT = """
import sys
from asyncvk.cache import PipelineCache, PipelineSpec
shader = sys.argv[2]
with PipelineCache() as cache:
    specs = {"scale_add": (1.0, 0), "unary": (1, 0.0, 0.0), "softmax": (), "padding": (0, 0.0),
             "gather": (), "scatter": (), "reduction": (0, 1.0), "binary": (0, 0, 0.0, 1.0, 1.0)}
    spec = PipelineSpec(shader, specializations=specs[shader])
    cache.request_many([spec])[spec].result()
    result = cache.save_cache(sys.argv[1])
    assert result, result.reason
"""


def test_eight_pipeline_caches_saving_at_once_leave_the_union(
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


def test_save_cache_on_a_full_disk_keeps_the_old_file_and_raises_nothing(
    tmp_path: Path, device: VulkanDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "x.vkcache"
    with PipelineCache(device) as cache:
        build_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))
        assert cache.save_cache(path)
        before = path.read_bytes()
        build_one(cache, PipelineSpec("unary", specializations=(3, 0.0, 0.0)))

        def full(fd: int, data: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(_atomic_file.os, "write", full)
        result = cache.save_cache(path)
        monkeypatch.undo()
        assert not result and "No space left" in result.reason
    assert path.read_bytes() == before
    assert _temps(tmp_path) == []


HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(300)
"""

SAVE_AS_NOBODY = """
import os, sys
import asyncvk.cache._persist
from asyncvk.cache import PipelineCache, PipelineSpec
with PipelineCache() as cache:
    spec = PipelineSpec("scale_add", specializations=(2.0, 0))
    cache.request_many([spec])[spec].result()
    os.setgid(65534); os.setuid(65534)  # after every import: nobody cannot read root's Python
    result = cache.save_cache(sys.argv[1])
    print("ok" if result else "failed: " + result.reason)
"""


def test_save_cache_into_a_read_only_folder_keeps_the_old_file_and_raises_nothing(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "x.vkcache"
    path.write_bytes(b"old contents")
    os.chmod(folder, 0o555)
    os.chmod(path, 0o444)
    os.chmod(tmp_path, 0o755)
    try:
        if os.geteuid() == 0:
            code = SAVE_AS_NOBODY  # root ignores permissions: drop to nobody in the child
        else:
            code = SAVE_AS_NOBODY.replace("os.setgid(65534); os.setuid(65534)", "")
        proc = subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("failed:"), proc.stdout
        assert "Permission denied" in proc.stdout or "Read-only" in proc.stdout
    finally:
        os.chmod(folder, 0o755)
    assert path.read_bytes() == b"old contents"
    assert _listing(folder) == ["x.vkcache"]


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644])
def test_a_save_keeps_the_files_mode(device: VulkanDevice, tmp_path: Path, mode: int) -> None:
    """A merge save replaces the file with a new one: the new one keeps the old one's mode, so
    a cache its owner made private stays private."""
    path = tmp_path / "x.vkcache"
    with PipelineCache(device) as cache:
        build_one(cache, PipelineSpec("scale_add", specializations=(2.0, 0)))
        assert cache.save_cache(path)
        path.chmod(mode)
        build_one(cache, PipelineSpec("unary", specializations=(3, 0.0, 0.0)))  # something new
        inode = path.stat().st_ino
        assert cache.save_cache(path)
    assert path.stat().st_ino != inode  # replaced, not rewritten in place
    assert path.stat().st_mode & 0o7777 == mode
