"""The remote cache tier against a real redis-server: fresh processes warm from it, a server that
is absent or dies mid-load, damaged, foreign, unsigned and expired values, racing writers.
(Values crafted on purpose, hostile stores and the read bounds: ``test_remote_hostile``.)"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_runner import cli, run_args
from conftest import OTHER_IDENTITY
from pipeline_requests import build_one
from redis_server import RedisServer, free_port
from test_cache_file_format import driver_blob
from test_packaged_spirv import _damage, _rewrite_manifest, _shader_folder

from asyncvk import Net, Option
from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.cache._redis_store import RedisStore
from asyncvk.cache._remote_state import remote_state
from asyncvk.cache._remote_store import ReadBudget, parse_remote_url
from asyncvk.cache._remote_tier import remote_tier_for
from asyncvk.cache._remote_values import (
    blob_index_key,
    blob_value_key,
    decode_spirv_value,
    encode_blob_value,
    encode_spirv_value,
    key_space,
    parse_spirv_value_key,
    seal,
    spirv_value_key,
)
from asyncvk.gpu import VulkanDevice
from asyncvk.shader import ShaderRegistry, _packaged
from asyncvk.shader._packaged_build import build_packaged

MODELS = Path(__file__).parent / "models"
CUNET = MODELS / "cunet"
SQUEEZENET = MODELS / "squeezenet"
#: A fleet's signing key: driver blobs are shared only with one
KEY = "fleet secret"
SPACE = key_space(KEY.encode())
UNSIGNED = key_space(None)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path)
    yield srv
    srv.stop()


def _run(model: Path, cache_dir: Path, url: str, *extra: str) -> tuple[dict[str, Any], str]:
    """``asyncvk run`` in a fresh process with an own local cache folder and a remote cache."""
    out = cache_dir.parent / f"{cache_dir.name}-out.npy"
    proc = cli(
        *run_args(model),
        "--output",
        f"out0={out}",
        "--cache-dir",
        str(cache_dir),
        "--graph-key",
        model.name,
        "--remote-cache",
        url,
        *extra,
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    report["output"] = np.load(out)
    return report, proc.stderr


def _spirv_keys(srv: RedisServer) -> list[bytes]:
    with srv.client() as c:
        return sorted(k for k in c.keys("*") if b":spirv:" in k)


async def _load(url: str, model: Path = CUNET, **option: Any) -> Net:
    net = Net(Option(remote_cache=url, **option))
    await net.load_param(model / "model.param")
    await net.load_model(model / "model.bin")
    return net


async def _infer(net: Net) -> np.ndarray:
    ex = net.create_extractor()
    ex.input("in0", np.load(CUNET / "input.npy"))
    return await ex.extract("out0")


# -- fresh processes ------------------------------------------------------------------------------


def test_a_second_machine_starts_warm_from_redis(server: RedisServer, tmp_path: Path) -> None:
    first, _ = _run(CUNET, tmp_path / "machine1", server.url)
    assert first["spirv_compiled"] > 0
    assert first["remote_cache"]["pushed"] > 0 and first["remote_cache"]["on"]
    # a second machine: a fresh process and an empty local folder. It asks once whether the
    # store answers (to leave glslang's set-up to a first compile) and reads it on one connection
    with server.client() as c:
        connections = c.info("stats")["total_connections_received"]
        second, _ = _run(CUNET, tmp_path / "machine2", server.url)
        assert c.info("stats")["total_connections_received"] - connections == 2
    assert second["spirv_compiled"] == 0, second["remote_cache"]
    remote = second["remote_cache"]
    assert remote["hits"] >= first["spirv_compiled"] and remote["rejected"] == 0
    assert remote["pushed"] == 0 and remote["bytes_read"] > 0
    assert np.array_equal(first["output"], second["output"])
    # the remote hits were written into machine 2's local folder: warm with Redis gone
    server.stop()
    third, _ = _run(CUNET, tmp_path / "machine2", server.url)
    assert third["cache_loaded"] and third["spirv_compiled"] == 0


def _getrange_calls(srv: RedisServer) -> int:
    """How many values the server has been asked for (the tier reads each with GETRANGE)."""
    with srv.client() as c:
        return int(c.info("commandstats").get("cmdstat_getrange", {}).get("calls", 0))


def test_the_install_s_spirv_is_neither_read_from_nor_pushed_to_the_store(
    server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine with the install's SPIR-V folder (every shader cunet needs) asks the store
    only for its driver blobs, never for a SPIR-V value, and pushes none of the folder's."""
    first, _ = _run(CUNET, tmp_path / "machine1", server.url)  # the suite's default: folder off
    stored = _spirv_keys(server)
    assert first["spirv_compiled"] > 0 and len(stored) == first["spirv_compiled"]
    with server.client() as c:
        blobs = [k for k in c.keys("*") if b":spirv:" not in k and c.type(k) == b"string"]
    monkeypatch.setenv(_packaged.ENV_SWITCH, "1")
    asked = _getrange_calls(server)
    second, _ = _run(CUNET, tmp_path / "machine2", server.url)
    assert second["spirv_compiled"] == 0 and second["spirv_packaged"] == len(stored)
    assert _getrange_calls(server) - asked <= len(blobs)  # the blobs at most, no SPIR-V
    assert second["remote_cache"]["misses"] == 0 and second["remote_cache"]["rejected"] == 0
    assert np.array_equal(first["output"], second["output"])
    with server.client() as c:
        c.flushdb()
    third, _ = _run(CUNET, tmp_path / "machine3", server.url)
    assert third["spirv_packaged"] == len(stored) and _spirv_keys(server) == []


def test_a_server_absent_at_start_costs_one_warning(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    report, stderr = _run(CUNET, tmp_path / "local", url)
    remote = report["remote_cache"]
    assert not remote["on"] and remote["errors"] == 1 and "refused" in remote["off_reason"]
    assert stderr.count("remote pipeline cache turned off") == 1, stderr
    expected = np.load(CUNET / "output.npy")
    assert np.linalg.norm(report["output"] - expected) / np.linalg.norm(expected) < 2e-3


def test_a_server_that_stops_answering_times_out_and_the_model_still_runs(
    server: RedisServer, tmp_path: Path
) -> None:
    """A store that accepts connections (the kernel does, for a stopped process) but never
    answers: the probe connects, the first read times out after ``timeout``, the tier turns
    off with one warning, and the model loads and runs without it."""
    import signal

    assert server.process is not None
    server.process.send_signal(signal.SIGSTOP)
    try:
        url = f"{server.url}?timeout=0.3&connect_timeout=0.3"
        report, stderr = _run(CUNET, tmp_path / "local", url)
    finally:
        server.process.send_signal(signal.SIGCONT)
    remote = report["remote_cache"]
    assert not remote["on"] and remote["errors"] == 1, remote
    reason = remote["off_reason"].lower()
    assert "timed out" in reason or "timeout" in reason, remote
    assert stderr.count("remote pipeline cache turned off") == 1, stderr
    expected = np.load(CUNET / "output.npy")
    assert np.linalg.norm(report["output"] - expected) / np.linalg.norm(expected) < 2e-3


def _run_counting_imports(*args: str, module: str = "redis") -> tuple[dict[str, Any], str, bool]:
    """``asyncvk`` in a fresh process: its --json report, its stderr, and whether ``module``
    (the Redis client) was imported."""
    script = (
        "import sys\n"
        "from asyncvk.cli import main\n"
        f"code = main({[*args, '--json']!r})\n"
        f"print('redis imported:', {module!r} in sys.modules, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    imported = proc.stderr.splitlines()[-1]
    assert imported.startswith("redis imported:"), proc.stderr
    return json.loads(proc.stdout), proc.stderr, imported.endswith("True")


def test_a_warm_local_cache_never_touches_the_store(server: RedisServer, tmp_path: Path) -> None:
    """Everything the load needs is in the local folder: the store is not connected to and its
    client (~0.2 s of imports) not imported, before or after the load."""
    local = ["--cache-dir", str(tmp_path / "local"), "--graph-key", "cunet"]
    first, _, imported = _run_counting_imports(
        *run_args(CUNET), *local, "--remote-cache", server.url
    )
    assert first["spirv_compiled"] > 0 and first["remote_cache"]["pushed"] > 0 and imported
    with server.client() as c:
        connections = c.info("stats")["total_connections_received"]
        warm, _, imported = _run_counting_imports(
            *run_args(CUNET), *local, "--remote-cache", server.url
        )
        assert c.info("stats")["total_connections_received"] == connections
    assert warm["cache_loaded"] and warm["spirv_compiled"] == 0
    assert not imported
    remote = warm["remote_cache"]
    assert remote["on"] and remote["hits"] == remote["misses"] == remote["pushed"] == 0


def test_a_server_down_at_start_is_found_without_the_redis_client(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    report, stderr, imported = _run_counting_imports(
        *run_args(CUNET), "--cache", str(tmp_path / "local.vkcache"), "--remote-cache", url
    )
    remote = report["remote_cache"]
    assert not remote["on"] and remote["errors"] == 1 and "refused" in remote["off_reason"]
    assert stderr.count("remote pipeline cache turned off") == 1, stderr
    assert not imported


def test_the_environment_names_the_remote_cache(server: RedisServer, tmp_path: Path) -> None:
    env = {**os.environ, "ASYNCVK_REMOTE_CACHE": server.url}
    proc = subprocess.run(
        [sys.executable, "-m", "asyncvk", *run_args(CUNET), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["remote_cache"]["pushed"] > 0
    assert _spirv_keys(server)


def test_two_writers_racing_lose_nothing(server: RedisServer, tmp_path: Path) -> None:
    """Four cold processes, two models, pushing at once: every value whole, nothing lost."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "asyncvk", *run_args(model), "--remote-cache", server.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for model in (CUNET, SQUEEZENET, CUNET, SQUEEZENET)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err for _, err in results]
    for model in (CUNET, SQUEEZENET):  # a fresh process each, no local cache: all from Redis
        proc = cli(*run_args(model), "--remote-cache", server.url, "--must-hit", "--json")
        assert proc.returncode == 0, (model.name, proc.stderr)
        remote = json.loads(proc.stdout)["remote_cache"]
        assert remote["rejected"] == 0 and remote["misses"] == 0, (model.name, remote)


# -- one process: a server that dies, values that must not be used ---------------------------------


async def test_a_server_killed_mid_load_turns_the_tier_off(
    device: VulkanDevice, server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The store is read before the builds start; killed then, the push after load fails:
    one warning, the tier off for the process, the model loaded and correct."""
    killed = []

    def progress(done: int, total: int) -> None:
        if not killed:
            server.stop()
            killed.append(done)

    net = Net(Option(remote_cache=server.url))
    await net.load_param(CUNET / "model.param")
    await net.load_model(CUNET / "model.bin", progress=progress)
    y = await _infer(net)
    await net.flush_cache()
    status = net.remote_status
    assert status is not None and killed
    assert not status["on"] and status["errors"] == 1 and status["misses"] > 0
    ref = np.load(CUNET / "output.npy")
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 2e-3
    again = await _load(server.url)  # the rest of the process: not even tried
    assert again.remote_status == status
    await net.aclose()
    await again.aclose()
    warnings = [r for r in caplog.records if "turned off" in r.getMessage()]
    assert len(warnings) == 1


@pytest.mark.parametrize("damage", ["checksum", "interface"])
async def test_a_packaged_body_that_fails_is_compiled_and_pushed(
    device: VulkanDevice,
    server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    damage: str,
) -> None:
    """The folder's bodies stand in for the store's, but only good ones: a body whose checksum
    fails is asked of the store, compiled, and that compile pushed like any other (the
    folder's good bodies never are); one that passes it and fails a later check (a manifest
    rewritten to name it) is compiled, and not pushed: it is not the body the manifest names."""
    shaders = _shader_folder(tmp_path, "scale_add", "copy_f32")
    folder = tmp_path / "packaged_spirv"
    build_packaged(folder, ShaderRegistry(shaders))
    monkeypatch.setattr(_packaged, "PACKAGED_DIR", folder)
    monkeypatch.setenv(_packaged.ENV_SWITCH, "1")
    _damage(folder, "another shader's body")
    if damage == "interface":
        _rewrite_manifest(folder)
    scale_add = PipelineSpec("scale_add", specializations=(2.0, 0), local_size=(32, 1, 1))
    copy = PipelineSpec("copy_f32", local_size=(64, 1, 1))
    tier = remote_tier_for(server.url)
    assert tier is not None
    with PipelineCache(device) as cache:
        await tier.fetch(cache, [scale_add, copy])
        asked = tier.report()["misses"]
        for spec in (scale_add, copy):
            build_one(cache, spec)
        stats = cache.statistics()
        await tier.push(cache)
    await tier.aclose()
    assert asked == (1 if damage == "checksum" else 0)  # copy_f32's good body: never asked
    assert (stats.spirv_packaged, stats.spirv_compiles) == (1, 1)
    stored = [parse_spirv_value_key(k.decode(), UNSIGNED) for k in _spirv_keys(server)]
    # a body the manifest does not name is not pushed: a reader of this install refuses it
    expected = ["scale_add"] if damage == "checksum" else []
    assert [k.shader for k in stored if k is not None] == expected


async def test_two_tasks_opening_the_store_share_one_connection(server: RedisServer) -> None:
    """Two loads of one tier reaching the store at once open one client, not one each (the
    other's connection would leak)."""
    tier = remote_tier_for(server.url)
    assert tier is not None
    first, second = await asyncio.gather(tier.open(), tier.open())
    await first.get_many(["absent"], 1024, ReadBudget(1024))
    await second.get_many(["absent"], 1024, ReadBudget(1024))
    with server.client() as c:
        assert len(c.client_list()) == 2  # this test's client and the tier's one
    await tier.aclose()


async def test_redis_py_reads_entries_and_the_blob_list_without_metadata(
    server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through redis-py, the values and the newest members of a set come back on one
    connection made without looking redis-py's version up in the installed packages' metadata
    (19 ms per connection on a 2-core machine)."""
    import importlib.metadata

    with server.client() as c:
        c.set("a", b"value a")
        c.zadd("set", {"old": 1.0, "new": 2.0})
    looked_up: list[str] = []
    version = importlib.metadata.version

    def counting_version(name: str) -> str:
        looked_up.append(name)
        return version(name)

    monkeypatch.setattr(importlib.metadata, "version", counting_version)
    store = RedisStore(parse_remote_url(server.url))
    try:
        got = await store.get_with_newest(["a", "absent"], 1024, ReadBudget(1024), "set", 1)
    finally:
        await store.aclose()
    assert got == ([b"value a", None], ["new"])
    assert looked_up == []


async def test_a_push_that_fails_unexpectedly_loses_neither_the_save_nor_the_load(
    device: VulkanDevice, server: RedisServer, tmp_path: Path
) -> None:
    """A push failing with something other than the store's error (a bug, a malformed reply)
    turns the tier off like a store error; the cache folder is still saved."""
    net = await _load(server.url, cache_dir=tmp_path / "cache", graph_key="cunet")
    assert (
        net.model_cache.remote is not None and net.model_cache.remote.link.store is not None
    )  # read at load

    async def malformed(keys: object) -> list[bool]:
        raise ValueError("a reply that is not a list")

    net.model_cache.remote.link.store.exists_many = malformed  # type: ignore[method-assign]
    await net.flush_cache()  # the push runs: it must not raise
    status = net.remote_status
    assert status is not None and not status["on"] and status["errors"] == 1
    assert "ValueError: a reply that is not a list" in status["off_reason"]
    assert net.cache_status is not None
    await net.aclose()
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    again = await _load(server.url, cache_dir=tmp_path / "cache", graph_key="cunet")
    assert again.cache_status is not None and again.cache_status["loaded"], again.cache_status
    await again.aclose()


def test_a_tier_turned_off_counts_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """However many operations fail after the first, the tier is off once: one error."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    monkeypatch.setenv("ASYNCVK_REMOTE_CACHE", url)
    tier = remote_tier_for(None)  # the variable names it
    assert tier is not None and tier.settings.display == url
    tier.link.turn_off("connection refused")
    tier.link.turn_off("connection refused again")
    report = tier.report()
    assert (report["on"], report["errors"], report["off_reason"]) == (
        False,
        1,
        "connection refused",
    )


async def _filled(url: str, **option: Any) -> dict[str, Any]:
    """Load once so the store holds the model; the counters of that load."""
    net = await _load(url, **option)
    await net.aclose()
    status = net.remote_status
    assert status is not None and status["pushed"] > 0
    return status


async def _fresh_load(url: str, **option: Any) -> tuple[Net, dict[str, int], int]:
    """A fresh Net (own in-memory cache): its compiles, and the URL's counters it added."""
    before = remote_state(parse_remote_url(url).display).report()
    net = await _load(url, **option)
    await net.flush_cache()
    after = net.remote_status
    assert after is not None
    delta = {k: after[k] - before[k] for k in ("hits", "misses", "rejected", "pushed", "replaced")}
    assert net.cache is not None
    return net, delta, net.cache.statistics().spirv_compiles


async def test_a_corrupted_value_is_a_miss_with_a_reason(
    device: VulkanDevice, server: RedisServer
) -> None:
    await _filled(server.url)
    keys = _spirv_keys(server)
    with server.client() as c:
        damaged = bytearray(c.get(keys[0]) or b"")
        damaged[-40] ^= 0x01  # a bit of the SPIR-V body, before the 32-byte tag
        c.set(keys[0], bytes(damaged))
        c.set(keys[1], c.get(keys[2]) or b"")  # another key's value, copied over
    net, delta, compiles = await _fresh_load(server.url)
    assert (delta["rejected"], compiles) == (2, 2)
    assert delta["hits"] == len(keys) - 2  # the rest of the store still served
    status = net.remote_status
    assert status is not None
    reasons = "\n".join(status["rejections"][-2:])
    assert "SPIR-V checksum mismatch" in reasons and "written under another key" in reasons
    ref = np.load(CUNET / "output.npy")
    y = await _infer(net)
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 2e-3
    await net.aclose()


async def test_a_value_over_max_value_is_never_read_whole(
    device: VulkanDevice, server: RedisServer
) -> None:
    """A value over ``max_value`` is a miss with a reason, and the store sends at most
    ``max_value + 1`` bytes of it, not the value (a store filled with huge values costs no
    memory). No writer of the fleet writes one (``max_value`` caps writes too): it is a bad
    value, and the push replaces it, also one of exactly ``max_value + 1`` bytes (read whole).
    A value of exactly ``max_value`` bytes is read (here: not an envelope, so bad too)."""
    await _filled(server.url)
    keys = _spirv_keys(server)
    huge, limit = 4 << 20, 200000
    with server.client() as c:
        good = [c.get(k) for k in keys[:3]]
        c.set(keys[0], b"x" * huge)
        c.set(keys[1], b"y" * (limit + 1))
        c.set(keys[2], b"z" * limit)
        sent_before = c.info("stats")["total_net_output_bytes"]
    net, delta, compiles = await _fresh_load(f"{server.url}?max_value={limit}")
    status = net.remote_status
    assert status is not None
    reasons = "\n".join(status["rejections"][-3:])
    assert reasons.count(f"over max_value {limit}") == 2 and "bad magic" in reasons, reasons
    assert (delta["rejected"], compiles, delta["replaced"]) == (3, 3, 3)
    with server.client() as c:
        sent = c.info("stats")["total_net_output_bytes"] - sent_before
        assert [c.get(k) for k in keys[:3]] == good
    assert sent < huge // 4, sent
    await net.aclose()


async def test_a_value_that_fails_its_checks_is_replaced_by_the_next_push(
    device: VulkanDevice, server: RedisServer
) -> None:
    """SPIR-V entries are written only where absent, so a refused value used to stay until it
    expired, a miss for every process. The process that refused it builds that entry anyway:
    its push writes the good value over it, and the next process hits everything."""
    await _filled(server.url)
    keys = _spirv_keys(server)
    with server.client() as c:
        good = {k: c.get(k) or b"" for k in keys}
        damaged = bytearray(good[keys[0]])
        damaged[-40] ^= 0x01  # a bit of the SPIR-V body
        c.set(keys[0], bytes(damaged), keepttl=True)
        c.set(keys[1], good[keys[1]][:-100], keepttl=True)  # torn
        c.set(keys[2], b"not an asyncvk value", keepttl=True)  # unreadable envelope
        c.set(keys[3], good[keys[4]], keepttl=True)  # another key's value
    net, delta, compiles = await _fresh_load(server.url)
    assert (delta["rejected"], compiles, delta["replaced"]) == (4, 4, 4)
    assert net.remote_status is not None and net.remote_status["replaced"] >= 4
    with server.client() as c:
        assert [c.get(k) for k in keys] == [good[k] for k in keys]
        assert all(0 < c.pttl(k) for k in keys[:4])  # written with the URL's ttl
    await net.aclose()
    again, delta, compiles = await _fresh_load(server.url)
    assert (delta["rejected"], delta["replaced"], compiles) == (0, 0, 0)
    await again.aclose()


async def test_a_push_replaces_only_the_bytes_it_refused(
    device: VulkanDevice, server: RedisServer
) -> None:
    """Between this process's read and its push, other writers put their own values under two
    keys it refused: a good one (signed by another key: other bytes than this process writes,
    which a reader without a key uses) and another bad one. The push writes over neither."""
    await _filled(server.url)
    keys = _spirv_keys(server)
    with server.client() as c:
        good = c.get(keys[0]) or b""
        for key in keys[:3]:
            c.set(key, b"damaged", keepttl=True)
    payload = good[8 + 2 + 1 + 1 + 4 + len(keys[0]) : -32]
    fixed = seal(1, keys[0].decode(), payload, b"another writer's key")
    done = []

    def progress(_done: int, _total: int) -> None:  # after the read, before the push
        if not done:
            with server.client() as c:
                c.set(keys[0], fixed, keepttl=True)
                c.set(keys[1], b"damaged otherwise", keepttl=True)
            done.append(True)

    before = remote_state(parse_remote_url(server.url).display).report()
    net = Net(Option(remote_cache=server.url))
    await net.load_param(CUNET / "model.param")
    await net.load_model(CUNET / "model.bin", progress=progress)
    await net.flush_cache()
    status = net.remote_status
    assert status is not None and done
    assert status["rejected"] - before["rejected"] == 3
    assert status["replaced"] - before["replaced"] == 1  # keys[2], still the bytes it read
    with server.client() as c:
        assert c.get(keys[0]) == fixed and c.get(keys[1]) == b"damaged otherwise"
        assert c.get(keys[2]) != b"damaged"
    await net.aclose()


async def test_a_damaged_driver_blob_is_replaced_by_a_process_holding_that_blob(
    device: VulkanDevice, server: RedisServer
) -> None:
    """A driver blob lives under its content hash, so only a process holding that very blob
    can mend a damaged value of it: such a process used to find its key listed and push
    nothing (nor would SET NX have written). lavapipe's blob is the same bare header in every
    process, so every process is one."""
    await _filled(server.url, remote_cache_key=KEY)
    index = blob_index_key(device.info.identity, SPACE)
    with server.client() as c:
        [member] = c.zrange(index, 0, -1)
        good = c.get(member) or b""
        damaged = bytearray(good)
        damaged[len(damaged) // 2] ^= 0x01
        c.set(member, bytes(damaged), keepttl=True)
    net, delta, compiles = await _fresh_load(server.url, remote_cache_key=KEY)
    assert (delta["rejected"], delta["replaced"], compiles) == (1, 1, 0)
    with server.client() as c:
        assert c.get(member) == good and c.zrange(index, 0, -1) == [member]
    await net.aclose()
    again, delta, _ = await _fresh_load(server.url, remote_cache_key=KEY)
    assert again.cache is not None and again.cache.driver.merged_digests()
    assert delta["rejected"] == 0
    await again.aclose()


async def _list_other_writers_blobs(url: str, device: VulkanDevice) -> list[str]:
    """Two driver blobs pushed as two other machines' writers push theirs: the value, then its
    entry in the identity's set. Each is this device's header followed by pipelines of its own
    (lavapipe keeps none, and ignores what follows a header)."""
    identity = device.info.identity
    settings = parse_remote_url(url)
    store = RedisStore(settings)
    keys = []
    for writer in (b"machine one", b"machine two"):
        blob = driver_blob(identity, tail=writer * 8)
        key, value = encode_blob_value(blob, identity, KEY.encode())
        assert await store.add(key, value, settings.ttl)
        await store.add_member(blob_index_key(identity, SPACE), key, settings.ttl, drop=[], keep=8)
        keys.append(key)
    await store.aclose()
    return keys


def _listed_blobs(server: RedisServer, device: VulkanDevice) -> set[str]:
    with server.client() as c:
        return {m.decode() for m in c.zrange(blob_index_key(device.info.identity, SPACE), 0, -1)}


async def _load_with_a_reset(url: str) -> Net:
    """A cold load whose driver cache is reset as its builds start, as when a pipeline fails
    with a merged blob and works without: the cache is emptied and those blobs are refused."""
    reset = []

    def progress(_done: int, _total: int) -> None:
        if not reset and net.cache is not None:
            net.cache.driver.reset("a merged blob broke a pipeline (test)")
            reset.append(True)

    net = Net(Option(remote_cache=url, remote_cache_key=KEY))
    await net.load_param(CUNET / "model.param")
    await net.load_model(CUNET / "model.bin", progress=progress)
    await net.flush_cache()
    assert net.cache is not None and net.cache.statistics().driver_cache_resets == 1
    return net


async def test_a_driver_cache_reset_keeps_the_blobs_others_listed(
    device: VulkanDevice, server: RedisServer
) -> None:
    """A process merges the blobs two other writers listed, then its driver cache is reset:
    the blob it pushes after holds none of them, so their entries must stay in the set. (They
    were dropped as "merged into this one": the next process lost both writers' pipelines.)"""
    others = await _list_other_writers_blobs(server.url, device)
    net = await _load_with_a_reset(server.url)
    status = net.remote_status
    assert status is not None and status["pushed"] > 0
    listed = _listed_blobs(server, device)
    assert set(others) < listed and len(listed) == 3  # theirs, and the one built after the reset
    await net.aclose()
    reader, delta, _ = await _fresh_load(server.url, remote_cache_key=KEY)  # still merges theirs
    assert reader.cache is not None and len(reader.cache.driver.merged_digests()) == 3
    assert delta["rejected"] == 0
    await reader.aclose()


async def test_blobs_refused_after_a_reset_are_not_taken_off_the_set(
    device: VulkanDevice, server: RedisServer
) -> None:
    """After the reset, the same process loads another model and reads the set again: the
    blobs it refused are not merged (the cache will not take them back), so its next push,
    which holds none of them, must not take them off the set; nor its own blob, listed again
    in the same step (it was added and removed at once)."""
    others = await _list_other_writers_blobs(server.url, device)
    net = await _load_with_a_reset(server.url)
    own = _listed_blobs(server, device) - set(others)
    with server.client() as c:  # its own blob's entry gone (trimmed or expired): pushed again
        c.zrem(blob_index_key(device.info.identity, SPACE), *own)
    await net.load_param(SQUEEZENET / "model.param")
    await net.load_model(SQUEEZENET / "model.bin")
    await net.flush_cache()
    assert _listed_blobs(server, device) == set(others) | own
    await net.aclose()


async def test_a_driver_blob_of_another_device_never_reaches_the_driver(
    device: VulkanDevice, server: RedisServer
) -> None:
    """Values signed with the fleet's key (a key holder's mistake): another device's blob
    sealed under this device's key, listed under its own key, and copied under a key of ours.
    Each is refused; those in this device's namespace are deleted (and taken off the set), the
    other device's value is never read nor touched."""
    identity, secret = device.info.identity, KEY.encode()
    index = blob_index_key(identity, SPACE)
    blob = driver_blob(OTHER_IDENTITY, tail=bytes(32))
    foreign_key, foreign = encode_blob_value(blob, OTHER_IDENTITY, secret)
    # the foreign file, sealed as a well-made value under this device's key for that content
    ours = blob_value_key(identity, blob, SPACE)
    payload = foreign[8 + 2 + 1 + 1 + 4 + len(foreign_key) : -32]
    with server.client() as c:
        c.set(ours, seal(2, ours, payload, secret))
        c.set(foreign_key, foreign)  # listed for this device, under its own key
        copied = ours[:-32] + "0" * 32  # and copied under a key of ours
        c.set(copied, foreign)
        c.zadd(index, {ours: 3.0, foreign_key: 2.0, copied: 1.0})
    net, delta, _ = await _fresh_load(server.url, remote_cache_key=KEY)
    assert delta["rejected"] == 3 and delta["hits"] == 0
    assert net.cache is not None and not net.cache.driver.merged_digests()  # nothing was merged
    status = net.remote_status
    assert status is not None
    reasons = "\n".join(status["rejections"][-3:])
    assert "written for another GPU or driver" in reasons
    assert "not a driver blob key of this device" in reasons
    assert "written under another key" in reasons
    with server.client() as c:
        assert not c.exists(ours) and not c.exists(copied) and c.get(foreign_key) == foreign
        assert ours.encode() not in c.zrange(index, 0, -1)
    await net.aclose()


async def test_signed_values_only_with_a_key(device: VulkanDevice, server: RedisServer) -> None:
    """A fleet with a key: a value re-sealed without it, sealed with another key, or with one
    byte of its tag flipped is refused, and the push writes the fleet's value over it."""
    await _filled(server.url, remote_cache_key=KEY)
    keys = _spirv_keys(server)
    assert keys and all(f":{SPACE}:spirv:" in k.decode() for k in keys)
    with server.client() as c:
        good = {k: c.get(k) or b"" for k in keys[:3]}
        payload = good[keys[0]][8 + 2 + 1 + 1 + 4 + len(keys[0]) : -32]
        # an attacker without the key re-seals a value as unsigned, and as signed by another key
        c.set(keys[0], seal(1, keys[0].decode(), payload, None), keepttl=True)
        c.set(keys[1], seal(1, keys[1].decode(), payload, b"another key"), keepttl=True)
        flipped = bytearray(good[keys[2]])
        flipped[-1] ^= 0x01  # the tag's last byte
        c.set(keys[2], bytes(flipped), keepttl=True)
    net, delta, compiles = await _fresh_load(server.url, remote_cache_key=KEY)
    assert (delta["rejected"], compiles, delta["replaced"]) == (3, 3, 3)
    status = net.remote_status
    assert status is not None and status["signed"] and "notice" not in status
    reasons = "\n".join(status["rejections"][-3:])
    assert "not signed" in reasons and reasons.count("signature mismatch") == 2
    with server.client() as c:
        assert [c.get(k) for k in keys[:3]] == list(good.values())
    await net.aclose()


async def test_a_pull_adopts_this_build_s_entries_and_leaves_others(
    device: VulkanDevice, server: RedisServer
) -> None:
    """A store holds entries of older builds too (their keys name the source hash): a pull
    adopts this build's, and neither reads nor deletes the others (another build's reader
    uses them)."""
    await _filled(server.url, remote_cache_key=KEY)
    name = _spirv_keys(server)[0].decode()
    key = parse_spirv_value_key(name, SPACE)
    assert key is not None
    secret = KEY.encode()
    with server.client() as c:
        spirv = decode_spirv_value(c.get(name) or b"", key, secret, {key.shader: key.source_hash})
        assert isinstance(spirv, bytes)
        old = dataclasses.replace(key, source_hash=key.source_hash ^ 1)
        old_value = encode_spirv_value(old, spirv, device.info.identity, secret)
        c.set(spirv_value_key(old, SPACE), old_value)
    asked = _getrange_calls(server)
    cache = PipelineCache(device)
    tier = remote_tier_for(server.url, KEY)
    assert tier is not None
    try:
        await tier.pull(cache)
        entries = cache.spirv_entries()
        assert key in entries and old not in entries
        report = tier.report()
        assert report["rejected"] == report["deleted"] == 0
    finally:
        await tier.aclose()
        await cache.aclose()
    with server.client() as c:
        assert c.get(spirv_value_key(old, SPACE)) == old_value
        blobs = c.zcard(blob_index_key(device.info.identity, SPACE))
    assert _getrange_calls(server) - asked == len(_spirv_keys(server)) - 1 + blobs  # not the old


def _wait_until_expired(server: RedisServer) -> None:
    """Every key was written with a TTL of at most 1 s; wait until Redis has dropped them all."""
    with server.client() as c:
        keys = c.keys("*")
        assert keys and all(0 < c.pttl(k) <= 1000 for k in keys)
        deadline = time.monotonic() + 10
        while c.dbsize() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert c.dbsize() == 0


async def test_values_expire(device: VulkanDevice, server: RedisServer) -> None:
    url = server.url + "?ttl=1"
    await _filled(url)
    _wait_until_expired(server)
    net, delta, compiles = await _fresh_load(url)
    assert delta["hits"] == 0 and compiles > 0
    await net.aclose()


# -- configuration and the CLI ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://127.0.0.1:6379", "unsupported scheme 'http'"),
        ("redis://", "no host"),
        ("redis://h:notaport", "not a URL"),
        ("redis://h:1/0?timeout=soon", "timeout='soon' is not a number"),
        ("redis://h:1/0?ttl=-1", "ttl='-1' must be at least 0"),
    ],
)
def test_a_bad_url_is_one_line_naming_the_option(url: str, needle: str) -> None:
    proc = cli(*run_args(CUNET), "--remote-cache", url)
    assert proc.returncode == 1
    assert proc.stderr.startswith("asyncvk: error: --remote-cache") and needle in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.parametrize(
    "url", ["redis://me:s3cret@h:notaport/0", "http://me:s3cret@h:1/0", "redis://:s3cret@/0"]
)
def test_a_bad_url_error_never_shows_the_password(url: str) -> None:
    with pytest.raises(ValueError) as error:
        parse_remote_url(url, where="--remote-cache")
    assert "s3cret" not in str(error.value) and ":***@" in str(error.value)


def test_reprs_never_show_the_secrets() -> None:
    assert "s3cret" not in repr(Option(remote_cache_key="s3cret"))
    assert "s3cret" not in repr(Option(remote_cache="redis://me:s3cret@h:1/0"))
    settings = parse_remote_url("redis://me:s3cret@h:1/0")
    assert "s3cret" not in repr(settings) and "s3cret" not in settings.display


def test_without_the_redis_package_the_error_names_it(tmp_path: Path) -> None:
    script = (
        "import sys; sys.modules['redis'] = None\n"
        "from asyncvk.cli import main\n"
        f"sys.exit(main({[*run_args(CUNET), '--remote-cache', 'redis://127.0.0.1:1/0']!r}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "needs the 'redis' package" in proc.stderr and "asyncvk-runtime[remote]" in proc.stderr


def test_cache_push_and_pull(server: RedisServer, tmp_path: Path) -> None:
    built = tmp_path / "ci.vkcache"
    warm = cli(
        "cache", "warm", str(CUNET / "model.param"), str(CUNET / "model.bin"), "--cache", str(built)
    )
    assert warm.returncode == 0, warm.stderr
    signed = {"ASYNCVK_REMOTE_CACHE_KEY": KEY}
    push = cli("cache", "push", str(built), "--remote", server.url, "--json", env=signed)
    assert push.returncode == 0, push.stderr
    pushed = json.loads(push.stdout)
    assert pushed["remote_cache"]["pushed"] == pushed["spirv_entries"] + 1  # and the blob
    names = [k.decode() for k in _spirv_keys(server)]
    assert all(parse_spirv_value_key(n, SPACE) is not None for n in names)
    pulled = tmp_path / "fleet.vkcache"
    pull = cli("cache", "pull", str(pulled), "--remote", server.url, "--json", env=signed)
    assert pull.returncode == 0, pull.stderr
    assert json.loads(pull.stdout)["spirv_entries"] == pushed["spirv_entries"]
    hit = cli(*run_args(CUNET), "--cache", str(pulled), "--must-hit", "--json")
    assert hit.returncode == 0, hit.stderr
    server.stop()
    down = cli("cache", "pull", str(pulled), "--remote", server.url)
    assert down.returncode == 1 and "refused" in down.stderr.splitlines()[-1]


async def test_serve_reports_the_remote_cache_in_metrics(
    server: RedisServer, tmp_path: Path
) -> None:
    from test_serve import Server

    first = Server(tmp_path / "one", "--remote-cache", server.url)
    try:
        await first.wait_ready()
        metrics = await first.metrics()
        deadline = time.monotonic() + 60
        while not metrics.get("asyncvk_remote_cache_pushed_total") and time.monotonic() < deadline:
            metrics = await first.metrics()  # the push runs in the background after load
        assert metrics["asyncvk_remote_cache_up"] == 1 and metrics["asyncvk_spirv_compiles"] > 0
        assert metrics["asyncvk_remote_cache_pushed_total"] > 0
        assert metrics["asyncvk_remote_cache_written_bytes_total"] > 0
        assert metrics["asyncvk_remote_cache_too_large_total"] == 0
        assert metrics["asyncvk_remote_cache_replaced_total"] == 0
    finally:
        first.stop()
    second = Server(tmp_path / "two", "--remote-cache", server.url)
    try:
        await second.wait_ready()
        metrics = await second.metrics()
        assert metrics["asyncvk_spirv_compiles"] == 0
        assert metrics["asyncvk_remote_cache_hits_total"] > 0
        assert metrics["asyncvk_remote_cache_read_bytes_total"] > 0
        assert metrics["asyncvk_remote_cache_rejected_total"] == 0
        assert metrics["asyncvk_remote_cache_errors_total"] == 0
    finally:
        second.stop()


async def test_an_empty_local_cache_imports_the_client_early(
    server: RedisServer, tmp_path: Path
) -> None:
    """A run that names a store and has no local cache will read the store: the client its
    reads need is imported beside load_param; a run with a local cache does not import it.
    The plain reader's module is imported at once and nothing connects (the load's first read
    is the probe); redis-py's, for a URL only it reads, only once a probe finds the store
    answering."""
    from asyncvk.cli._runner import RunConfig, _remote_client_import

    def started(url: str = server.url, **where: str) -> asyncio.Task[bool] | None:
        return _remote_client_import(RunConfig("p", "b", remote_cache=url, **where))

    (tmp_path / "file.vkcache").write_bytes(b"x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "entry").write_bytes(b"x")
    (tmp_path / "empty").mkdir()
    assert started(cache_file=str(tmp_path / "file.vkcache")) is None
    assert started(cache_dir=str(tmp_path / "full")) is None
    down = f"redis://127.0.0.1:{free_port()}/0"
    with server.client() as c:
        connections = c.info("stats")["total_connections_received"]
        for where in (
            {"cache_file": str(tmp_path / "absent.vkcache")},
            {"cache_dir": str(tmp_path / "empty")},
            {"cache_dir": str(tmp_path / "absent")},
            {},
        ):
            task = started(**where)
            assert task is not None and await task, where
        assert c.info("stats")["total_connections_received"] == connections  # no probe
        task = started(down)
        assert task is not None and await task  # nothing to import but ours: no probe
        redis_py_only = "?health_check_interval=30"  # a connection option only redis-py reads
        task = started(server.url + redis_py_only)
        assert task is not None and await task
        assert c.info("stats")["total_connections_received"] == connections + 1  # the probe
    task = started(down + redis_py_only)
    assert task is not None and not await task  # refused: nothing imported for it
