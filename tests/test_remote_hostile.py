"""The remote tier against stores that lie: values crafted, forged, emptied, of the wrong type or
too large, a fleet with another signing key, and a peer that answers what Redis never sends.

The promise: such a store costs misses, never a crash nor a wrong result, and no cached body
reaches the driver that this user or a configured key did not write. A real redis-server holds
the values; the peer that answers nested arrays or absurd lengths is a socket server here
(:class:`HostilePeer`), since a real Redis never sends those.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_runner import run_args
from pipeline_requests import build_one
from redis_server import RedisServer
from test_cache_content_trust import X
from test_cache_crafted import VICTIM, _cold_run, _constants_changed, _key
from test_cache_file_format import driver_blob
from test_packaged_spirv import _shader_folder
from test_remote_cache import (
    CUNET,
    KEY,
    SPACE,
    SQUEEZENET,
    UNSIGNED,
    _filled,
    _fresh_load,
    _getrange_calls,
    _spirv_keys,
)

from asyncvk import Net, Option
from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.cache._file_format import CacheContents
from asyncvk.cache._keys import SpirvKey
from asyncvk.cache._remote_connect import connect_store
from asyncvk.cache._remote_store import (
    BadValue,
    ReadBudget,
    RemoteStoreError,
    parse_remote_url,
)
from asyncvk.cache._remote_tier import UNSIGNED_NOTICE, model_spirv_keys, remote_tier_for
from asyncvk.cache._remote_values import (
    blob_index_key,
    decode_spirv_value,
    encode_blob_value,
    encode_spirv_value,
    key_space,
    seal,
    spirv_value_key,
)
from asyncvk.gpu import VulkanDevice
from asyncvk.shader import ShaderRegistry, _packaged
from asyncvk.shader._options import ShaderOptions

#: redis-py reads a URL with a connection option only it knows (``_redis_reads`` does not)
REDIS_PY = "health_check_interval=30"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    srv = RedisServer(tmp_path)
    yield srv
    srv.stop()


async def _squeezenet(url: str, **option: Any) -> tuple[np.ndarray, Net]:
    """squeezenet's output on ``X`` from a fresh Net (own in-memory cache) with a remote cache."""
    net = Net(Option(remote_cache=url, **option))
    await net.load_param(SQUEEZENET / "model.param")
    await net.load_model(SQUEEZENET / "model.bin")
    ex = net.create_extractor()
    ex.input("in0", X)
    y = await ex.extract("out0")
    await net.flush_cache()
    return y, net


@pytest.fixture(scope="module")
def cold(device: VulkanDevice) -> tuple[np.ndarray, CacheContents]:
    """squeezenet's uncached output on ``X``, and what that run compiled."""
    return _cold_run(device, SQUEEZENET)


def _body(value: bytes, key: SpirvKey, secret: bytes | None = None) -> bytes:
    body = decode_spirv_value(value, key, secret, {key.shader: key.source_hash})
    assert isinstance(body, bytes), body
    return body


# -- without a signing key, nothing unverifiable reaches the driver ----------------------------


@pytest.mark.parametrize("install", ["with the install's SPIR-V", "without"])
async def test_an_unsigned_store_cannot_change_a_result(
    device: VulkanDevice,
    cold: tuple[np.ndarray, CacheContents],
    server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    install: str,
) -> None:
    """squeezenet's convolution with its float constants changed, sealed as a well-made
    unsigned value (anyone who can write the store can). The output is the uncached one: with
    the install's SPIR-V the body is checked against it, refused, and the push writes the
    install's body over it; without it (an install without the folder, a shader edited since)
    nothing can check it, and it is not even read."""
    y_cold, contents = cold
    key = _key(contents, VICTIM)
    name = spirv_value_key(key, UNSIGNED)
    crafted = encode_spirv_value(
        key, _constants_changed(contents.spirv[key]), device.info.identity, None
    )
    if install == "without":
        monkeypatch.setattr(_packaged, "PACKAGED_DIR", tmp_path / "no-install-spirv")
    with server.client() as c:
        c.set(name, crafted)
    asked = _getrange_calls(server)
    y, net = await _squeezenet(server.url)
    status = net.remote_status
    await net.aclose()
    np.testing.assert_array_equal(y, y_cold)
    assert status is not None and status["on"]
    with server.client() as c:
        stored = c.get(name) or b""
    if install == "without":
        assert _getrange_calls(server) == asked and status["rejected"] == 0
        assert status["notice"] == UNSIGNED_NOTICE and stored == crafted
        assert _spirv_keys(server) == [name.encode()]  # nothing unverifiable pushed either
    else:
        assert status["rejected"] == 1 and status["replaced"] == 1, status
        assert "not the SPIR-V the install compiled" in status["rejections"][-1]
        assert _packaged.body_digest(_body(stored, key)) == _packaged.packaged_digest(
            key.shader,
            ShaderOptions.from_bits(key.option_bits),
            ShaderRegistry().get(key.shader).source,
        )


async def test_an_unsigned_store_s_driver_blobs_are_neither_read_nor_written(
    device: VulkanDevice, server: RedisServer
) -> None:
    """A well-made driver blob of this device, listed in the unsigned namespace: nothing can
    verify it, so a process without a key never reads the list, merges nothing, and pushes no
    blob of its own; its status says so, with the fix. With a key, its own namespace's blobs
    are merged."""
    identity = device.info.identity
    planted, value = encode_blob_value(driver_blob(identity, tail=b"planted!" * 8), identity, None)
    index = blob_index_key(identity, UNSIGNED)
    with server.client() as c:
        c.set(planted, value)
        c.zadd(index, {planted: 1.0})
        listed = int(c.info("commandstats").get("cmdstat_zrevrange", {}).get("calls", 0))
    net, _, compiles = await _fresh_load(server.url)
    assert net.cache is not None and not net.cache.driver.merged_digests() and compiles > 0
    status = net.remote_status
    assert status is not None and status["notice"] == UNSIGNED_NOTICE, status
    assert "ASYNCVK_REMOTE_CACHE_KEY" in status["notice"] and status["pushed"] > 0
    await net.aclose()
    with server.client() as c:
        assert int(c.info("commandstats").get("cmdstat_zrevrange", {}).get("calls", 0)) == listed
        assert {k for k in c.keys("*") if b":blob" in k} == {planted.encode(), index.encode()}
    await _filled(server.url, remote_cache_key=KEY)  # a fleet with a key
    signed, _, _ = await _fresh_load(server.url, remote_cache_key=KEY)
    assert signed.cache is not None and len(signed.cache.driver.merged_digests()) == 1
    assert planted not in signed.cache.driver.merged_digests()
    await signed.aclose()


def _edited_registry(tmp_path: Path) -> ShaderRegistry:
    """The builtin scale_add with a comment added: a shader the install built no body for."""
    shaders = _shader_folder(tmp_path, "scale_add")
    source = shaders / "scale_add.comp"
    source.write_text(source.read_text() + "\n// edited after the install\n")
    return ShaderRegistry(shaders)


async def test_an_unsigned_store_s_spirv_of_other_shaders_is_not_used(
    device: VulkanDevice, server: RedisServer, tmp_path: Path
) -> None:
    """SPIR-V of a shader the install built no body for (edited since: so are custom shaders
    and device-macro ones) cannot be checked without a key: an unsigned process neither reads
    it, even well made, nor pushes its own compile. With a key the fleet shares it."""
    registry = _edited_registry(tmp_path)
    spec = PipelineSpec("scale_add", specializations=(2.0, 0), local_size=(32, 1, 1))

    async def load(secret: str | None) -> tuple[dict[str, Any], int, SpirvKey, bytes]:
        tier = remote_tier_for(server.url, secret)
        assert tier is not None
        with PipelineCache(device, registry=registry) as cache:
            await tier.fetch(cache, [spec])
            build_one(cache, spec)
            compiles = cache.statistics().spirv_compiles
            (key,) = model_spirv_keys(cache, [spec])
            body = cache.spirv_entries()[key]
            await tier.push(cache)
        await tier.aclose()
        return tier.report(), compiles, key, body

    asked = _getrange_calls(server)
    report, compiles, key, body = await load(None)
    assert compiles == 1 and report["notice"] == UNSIGNED_NOTICE
    assert _getrange_calls(server) == asked and _spirv_keys(server) == []
    with server.client() as c:
        c.set(
            spirv_value_key(key, UNSIGNED),
            encode_spirv_value(key, body, device.info.identity, None),
        )
    report, compiles, _, _ = await load(None)
    assert compiles == 1 and _getrange_calls(server) == asked
    report, compiles, _, _ = await load(KEY)  # with a key: pushed, then read by the next one
    assert compiles == 1 and report["pushed"] >= 1
    report, compiles, _, _ = await load(KEY)
    assert compiles == 0 and report["hits"] >= 1


# -- a bad value is its own key's, and is mended or deleted ---------------------------------------


async def test_a_flipped_tag_and_an_emptied_value_are_mended(
    device: VulkanDevice, server: RedisServer
) -> None:
    """Unsigned values carry a tag of zeros: one with a byte of it flipped was altered, and one
    marked signed cannot be checked here; both are refused. An emptied value reads like an
    absent one (a range read cannot tell them apart), and the push found it there and kept it
    (SET NX): every process compiled that shader for as long as it lived. All three are mended
    by the next push; the process after hits everything."""
    await _filled(server.url)
    keys = _spirv_keys(server)
    with server.client() as c:
        good = [c.get(k) or b"" for k in keys[:3]]
        flipped = bytearray(good[0])
        flipped[-7] ^= 0x20
        c.set(keys[0], bytes(flipped), keepttl=True)
        c.set(keys[1], b"", keepttl=True)
        payload = good[2][8 + 2 + 1 + 1 + 4 + len(keys[2]) : -32]
        c.set(keys[2], seal(1, keys[2].decode(), payload, b"a key"), keepttl=True)
    net, delta, compiles = await _fresh_load(server.url)
    assert (compiles, delta["rejected"], delta["replaced"]) == (3, 3, 3), delta
    status = net.remote_status
    assert status is not None and status["on"]
    reasons = "\n".join(status["rejections"][-3:])
    assert "tag is not zeros" in reasons and "an empty value" in reasons, reasons
    assert "signed, and this process has no key to check it" in reasons, reasons
    await net.aclose()
    with server.client() as c:
        assert [c.get(k) for k in keys[:3]] == good
    again, delta, compiles = await _fresh_load(server.url)
    assert (compiles, delta["rejected"], delta["replaced"]) == (0, 0, 0)
    await again.aclose()


async def test_an_emptied_driver_blob_is_mended(device: VulkanDevice, server: RedisServer) -> None:
    """The same for a driver blob (lavapipe's is the same bare header in every process, so
    every process holds the blob of that key)."""
    await _filled(server.url, remote_cache_key=KEY)
    index = blob_index_key(device.info.identity, SPACE)
    with server.client() as c:
        [member] = c.zrange(index, 0, -1)
        good = c.get(member)
        c.set(member, b"", keepttl=True)
    net, delta, _ = await _fresh_load(server.url, remote_cache_key=KEY)
    assert (
        delta["replaced"] == 1 and net.cache is not None and not net.cache.driver.merged_digests()
    )
    await net.aclose()
    with server.client() as c:
        assert c.get(member) == good and c.zrange(index, 0, -1) == [member]


async def test_a_listed_blob_whose_value_is_gone_leaves_the_set(
    device: VulkanDevice, server: RedisServer
) -> None:
    """A blob listed whose value expired or was deleted (a writer lists a blob only after
    writing it) is a miss for every reader while it stays listed: the first reader's push takes
    it off the set."""
    await _filled(server.url, remote_cache_key=KEY)
    index = blob_index_key(device.info.identity, SPACE)
    identity = device.info.identity
    gone, _ = encode_blob_value(driver_blob(identity, tail=b"expired!" * 8), identity, b"k")
    gone = gone.replace(key_space(b"k"), SPACE)  # a blob key of this namespace, with no value
    with server.client() as c:
        [member] = c.zrange(index, 0, -1)
        c.zadd(index, {gone: 0.5})
    net, delta, _ = await _fresh_load(server.url, remote_cache_key=KEY)
    assert delta["misses"] >= 1
    await net.aclose()
    with server.client() as c:
        assert c.zrange(index, 0, -1) == [member]


async def test_a_key_of_another_type_fails_only_itself(
    device: VulkanDevice, server: RedisServer
) -> None:
    """A SPIR-V key holding a list and the blob set's key holding a string: the read goes on
    for every other key (it used to fail whole, and turn the tier off), the list is replaced by
    the good value, and the set made again."""
    await _filled(server.url, remote_cache_key=KEY)
    keys = _spirv_keys(server)
    index = blob_index_key(device.info.identity, SPACE)
    with server.client() as c:
        good = c.get(keys[0])
        [member] = c.zrange(index, 0, -1)
        c.delete(keys[0], index)
        c.rpush(keys[0], b"not a value")
        c.set(index, b"not a set")
    net, delta, compiles = await _fresh_load(server.url, remote_cache_key=KEY)
    status = net.remote_status
    assert status is not None and status["on"] and status["errors"] == 0, status
    assert (compiles, delta["rejected"], delta["replaced"]) == (1, 1, 1)
    assert delta["hits"] == len(keys) - 1 and "another type" in status["rejections"][-1]
    await net.aclose()
    with server.client() as c:
        assert c.get(keys[0]) == good and c.zrange(index, 0, -1) == [member]


async def test_a_bad_value_nobody_here_can_mend_is_deleted(
    device: VulkanDevice, server: RedisServer
) -> None:
    """A pull writes nothing: the values it refused are deleted (while they are still the bytes
    refused), so the next reader compiles and pushes them instead of refusing them again."""
    await _filled(server.url)
    keys = _spirv_keys(server)
    with server.client() as c:
        c.set(keys[0], b"garbage", keepttl=True)
        c.set(keys[1], b"", keepttl=True)  # read as absent: not deleted, nor counted
    tier = remote_tier_for(server.url)
    assert tier is not None
    with PipelineCache(device) as cache:
        await tier.pull(cache)
    await tier.aclose()
    report = tier.report()
    assert (report["rejected"], report["deleted"]) == (1, 1), report
    with server.client() as c:
        assert not c.exists(keys[0]) and c.get(keys[1]) == b""


# -- a fleet with another key ---------------------------------------------------------------------


async def test_a_process_with_another_key_never_touches_the_fleet_s_values(
    device: VulkanDevice, server: RedisServer
) -> None:
    """A process with a wrong signing key refused every value of the fleet and wrote its own
    over all of them. Values live in their key's namespace: it reads none of the fleet's, writes
    its own beside them, and the fleet still hits everything."""
    await _filled(server.url, remote_cache_key=KEY)
    with server.client() as c:
        fleet = {k: c.get(k) for k in c.keys("*") if c.type(k) == b"string"}
    wrong, delta, compiles = await _fresh_load(server.url, remote_cache_key="another secret")
    assert compiles > 0 and delta["rejected"] == 0 and delta["replaced"] == 0
    await wrong.aclose()
    other = key_space(b"another secret")
    with server.client() as c:
        assert {k: c.get(k) for k in fleet} == fleet
        theirs = [k for k in c.keys("*") if k not in fleet and c.type(k) == b"string"]
    assert theirs and all(f":{other}:".encode() in k for k in theirs)
    again, delta, compiles = await _fresh_load(server.url, remote_cache_key=KEY)
    assert (compiles, delta["rejected"]) == (0, 0)
    await again.aclose()


# -- bounds before memory -------------------------------------------------------------------------


def _plant_garbage(server: RedisServer, device: VulkanDevice, size: int) -> list[str]:
    """Values of ``size`` bytes at the keys of four shaders under all four option bits, each
    well within ``max_value``: what a pull reads."""
    registry = ShaderRegistry()
    macro = _macro_hash(device)
    names = []
    with server.client() as c:
        for shader in ("affine_math", "binary", "concat", "convolution"):
            source_hash = registry.get(shader).source_hash
            for bits in range(4):
                name = spirv_value_key(SpirvKey(shader, bits, source_hash, macro), UNSIGNED)
                c.set(name, bytes([bits + 1]) * size)
                names.append(name)
    return names


def _macro_hash(device: VulkanDevice) -> int:
    with PipelineCache(device) as cache:
        return cache.device_macro_hash


@pytest.mark.parametrize("reads", ["own reads", "redis-py"])
async def test_one_load_reads_at_most_max_read(
    device: VulkanDevice, server: RedisServer, reads: str
) -> None:
    """Sixteen values of 1 MiB (the attack: ten of 60 MiB grew a reader by 588 MB). With
    ``max_read`` at 3 MiB the reader holds at most that much: three values are read (refused,
    and deleted), the rest are misses, not read. (What the server had written into the socket
    beyond them goes with the connection; through redis-py it is not even asked for.)"""
    mib = 1 << 20
    names = _plant_garbage(server, device, mib)
    query = f"max_value={2 * mib}&max_read={3 * mib}"
    url = f"{server.url}?{query}" + (f"&{REDIS_PY}" if reads == "redis-py" else "")
    tier = remote_tier_for(url)
    assert tier is not None
    with server.client() as c:
        sent = c.info("stats")["total_net_output_bytes"]
    with PipelineCache(device) as cache:
        tracemalloc.start()
        try:
            await tier.pull(cache)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    await tier.aclose()
    with server.client() as c:
        sent = c.info("stats")["total_net_output_bytes"] - sent
        left = [n for n in names if c.exists(n)]
    report = tier.report()
    assert peak < 3 * mib + 2 * mib, peak  # max_read, and a copy of one value (max_value)
    if reads == "redis-py":  # asked for no more (own reads drop the connection on the rest)
        assert sent < 3 * mib + 64 * 1024, sent
    assert (report["rejected"], report["deleted"], len(left)) == (3, 3, 13), report
    assert report["misses"] == 16 and any("max_read" in r for r in report["rejections"])


# -- a peer that answers what Redis never sends ---------------------------------------------------


def _read_command(f: Any) -> list[bytes] | None:
    """One RESP command (an array of bulk strings) from a client, None at its end."""
    line = f.readline()
    if not line:
        return None
    args = []
    for _ in range(int(line[1:])):
        size = int(f.readline()[1:])
        args.append(f.read(size + 2)[:-2])
    return args


class HostilePeer:
    """A server on 127.0.0.1 that reads each command as Redis would and answers it with
    ``answer(command)``, whatever that is."""

    def __init__(self, answer: Callable[[list[bytes]], bytes]) -> None:
        self.answer = answer
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._talk, args=(conn,), daemon=True).start()

    def _talk(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as f:
            try:
                while (command := _read_command(f)) is not None:
                    conn.sendall(self.answer(command))
            except (OSError, ValueError):
                return

    def __enter__(self) -> HostilePeer:
        return self

    def __exit__(self, *_: object) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()


def _nested(depth: int) -> Callable[[list[bytes]], bytes]:
    return lambda _command: b"*1\r\n" * depth + b":1\r\n"


def _every_operation(store: Any) -> dict[str, Callable[[], Any]]:
    budget, bad = ReadBudget(1 << 20), BadValue.of(b"x")
    return {
        "get_many": lambda: store.get_many(["a", "b"], 10, budget),
        "get_with_newest": lambda: store.get_with_newest(["a"], 10, budget, "set", 8),
        "newest_members": lambda: store.newest_members("set", 8),
        "exists_many": lambda: store.exists_many(["a"]),
        "add": lambda: store.add("a", b"value", 0),
        "replace_bad": lambda: store.replace_bad("a", b"value", 0, bad),
        "delete_bad": lambda: store.delete_bad("a", bad, "set"),
        "add_member": lambda: store.add_member("set", "a", 0, drop=[], keep=8),
        "scan": lambda: store.scan("asyncvk:*"),
    }


@pytest.mark.parametrize("depth", [900, 100_000])
@pytest.mark.parametrize("reads", ["own reads", "redis-py"])
async def test_a_peer_answering_nested_arrays_is_a_clean_error(depth: int, reads: str) -> None:
    """Arrays nested 900 deep (under hiredis's limit, over Python's recursion limit for
    whoever walks them) and 100000 deep, for every command: each operation of either client is
    a RemoteStoreError (the tier turns off), never a RecursionError, TypeError or ValueError
    with a traceback."""
    with HostilePeer(_nested(depth)) as peer:
        url = peer.url + (f"?{REDIS_PY}" if reads == "redis-py" else "")
        store = await connect_store(parse_remote_url(url))
        try:
            for name, operation in _every_operation(store).items():
                with pytest.raises(RemoteStoreError) as caught:
                    await operation()
                assert "Recursion" not in str(caught.value), (name, caught.value)
        finally:
            await store.aclose()


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (b"$1000000000\r\n", "a reply of length 1000000000, over the 1025 asked for"),
        (b"*1000000000\r\n", "a reply of length 1000000000, over the 8 asked for"),
        (b"-ERR " + b"x" * 100_000 + b"\r\n", "a reply line over 65536 bytes"),
        (b"$-5\r\n", "a length that is not a number"),
        (b":7\r\n", "expected a string reply, got an integer"),
    ],
)
async def test_a_peer_declaring_absurd_lengths_costs_no_memory(reply: bytes, reason: str) -> None:
    """A length is checked before anything is read for it: a string said to be 1 GB, an array
    of a billion items, an endless line. Each is a clean error at once, with no memory taken."""
    with HostilePeer(lambda _command: reply) as peer:
        store = await connect_store(parse_remote_url(peer.url))
        tracemalloc.start()
        try:
            with pytest.raises(RemoteStoreError) as caught:
                if reply.startswith(b"*"):
                    await store.get_with_newest([], 1024, ReadBudget(1 << 30), "set", 8)
                else:
                    await store.get_many(["a"], 1024, ReadBudget(1 << 30))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
            await store.aclose()
    assert reason in str(caught.value)
    assert peak < 1 << 20, peak


async def test_a_load_from_a_hostile_peer_is_a_clean_miss(device: VulkanDevice) -> None:
    """A whole load against such a peer: one warning, the tier off, the model loaded and right."""
    with HostilePeer(_nested(100_000)) as peer:
        net = Net(Option(remote_cache=peer.url))
        await net.load_param(CUNET / "model.param")
        await net.load_model(CUNET / "model.bin")
        ex = net.create_extractor()
        ex.input("in0", np.load(CUNET / "input.npy"))
        y = await ex.extract("out0")
        await net.flush_cache()
        status = net.remote_status
        await net.aclose()
    assert status is not None and not status["on"] and status["errors"] == 1
    ref = np.load(CUNET / "output.npy")
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 2e-3


def test_the_cli_against_a_hostile_peer_through_redis_py_s_own_parser() -> None:
    """``asyncvk run`` reading through redis-py's pure-Python parser (no hiredis installed, a
    URL only redis-py reads), which recurses once per level of nesting: exit 0, one line,
    no traceback."""
    with HostilePeer(_nested(100_000)) as peer:
        args = [*run_args(CUNET), "--remote-cache", f"{peer.url}?{REDIS_PY}"]
        script = (
            "import sys; sys.modules['hiredis'] = None\n"
            "from asyncvk.cli import main\n"
            f"sys.exit(main({args!r}))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
        )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "RecursionError" not in proc.stderr, proc.stderr
    assert proc.stderr.count("remote pipeline cache turned off") == 1, proc.stderr
