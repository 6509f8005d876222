"""A load's reads from Redis without redis-py (``_redis_reads``), against a real redis-server:
the same address redis-py reads from a URL, the same replies as redis-py's store, log-in,
databases and unix sockets, the server's errors (one key's, or the store's), and a second
machine that never imports redis-py."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.connection
from cli_runner import run_args
from redis_server import RedisServer
from test_remote_cache import CUNET, _run_counting_imports

from asyncvk.cache._redis_reads import FastReadRedisStore, RedisAddress, read_address
from asyncvk.cache._redis_store import RedisStore
from asyncvk.cache._remote_store import (
    ReadBudget,
    RemoteStore,
    RemoteStoreError,
    Unread,
    parse_remote_url,
)
from asyncvk.cache._remote_tier import remote_tier_for

PASSWORD = "s3cret:/@pw"
QUOTED = "s3cret%3A%2F%40pw"  # as a URL carries it


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[RedisServer]:
    """A server with a password and a unix socket beside its port."""
    srv = RedisServer(
        tmp_path, "--unixsocket", str(tmp_path / "redis.sock"), "--unixsocketperm", "700",
        password=PASSWORD,
    )  # fmt: skip
    yield srv
    srv.stop()


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6380/0",
        "redis://cache",
        "redis://cache/5",
        "redis://cache:7000/5?db=2",  # the query's db wins, as in redis-py
        "redis://user:p%40ss@cache:7000/1",
        "redis://:only-a-password@cache",
        "unix:///run/redis.sock",
        "unix://:pw@/run/redis%20x.sock?db=4",
    ],
)
def test_an_address_is_read_as_redis_py_reads_it(url: str) -> None:
    address = read_address(url)
    assert address is not None
    theirs = redis.connection.parse_url(url)
    assert address.db == theirs.get("db", 0)
    assert address.username == theirs.get("username")
    assert address.password == theirs.get("password")
    if url.startswith("unix"):
        assert address.path == theirs["path"]
    else:
        assert (address.host, address.port) == (theirs["host"], theirs.get("port", 6379))


@pytest.mark.parametrize(
    "url",
    [
        "rediss://cache:6379/0",  # TLS
        "redis://cache:6379/0?health_check_interval=30",  # an option only redis-py reads
        "redis://cache:6379/zero",
        "unix://",
        "redis://user@cache:6379/0",  # redis-py logs in as user with an empty password
    ],
)
def test_a_url_only_redis_py_reads_keeps_redis_py(url: str) -> None:
    assert read_address(url) is None


def _stores(url: str) -> list[RemoteStore]:
    settings = parse_remote_url(url)
    address = read_address(settings.url)
    assert address is not None
    return [FastReadRedisStore(settings, address), RedisStore(settings)]


async def _read_both(url: str) -> list[object]:
    """What each store (fast reads, redis-py) reads of the same keys, and what is left of each
    read's budget."""
    got = []
    for store in _stores(url):
        budgets = [ReadBudget(1 << 30), ReadBudget(1 << 30), ReadBudget(200000)]
        try:
            got.append(
                (
                    await store.get_with_newest(
                        ["a", "big", "list", "absent"], 1 << 20, budgets[0], "set", 2
                    ),
                    await store.get_many(["big", "a", "list"], 9, budgets[1]),
                    await store.get_many([], 9, budgets[1]),
                    await store.get_many(["a", "big", "a"], 1 << 20, budgets[2]),
                    await store.newest_members("set", 5),
                    await store.newest_members("a", 5),  # a string: no set
                )
            )
        finally:
            await store.aclose()
    return got


async def test_reads_log_in_select_a_database_and_match_redis_py(locked: RedisServer) -> None:
    """Over TCP and the unix socket, with a password, in database 3: the fast reads give what
    redis-py's store gives, a value longer than a read chunk included, one over the limit, a
    key of another type, and a budget spent midway (what follows is not read)."""
    with locked.client(db=3) as c:
        c.set("a", b"value a")
        c.set("big", bytes(range(256)) * 1024)  # 256 KiB: several reads of the socket
        c.rpush("list", b"x")
        c.zadd("set", {"old": 1.0, "mid": 2.0, "new": 3.0})
    for url in (
        f"redis://:{QUOTED}@127.0.0.1:{locked.port}/3",
        f"redis://default:{QUOTED}@127.0.0.1:{locked.port}/3",
        f"unix://:{QUOTED}@{locked.folder / 'redis.sock'}?db=3",
    ):
        fast, theirs = await _read_both(url)
        assert fast == theirs, url
        (values, members), small, _, spent, listed, not_a_set = fast  # type: ignore[misc]
        big = bytes(range(256)) * 1024
        assert values == [b"value a", big, Unread.WRONG_TYPE, None] and members == ["new", "mid"]
        assert small == [Unread.TOO_LARGE, b"value a", Unread.WRONG_TYPE]
        assert spent == [b"value a", Unread.OVER_BUDGET, Unread.OVER_BUDGET]
        assert listed == ["new", "mid", "old"] and not_a_set == []


async def test_a_wrong_password_is_an_error_naming_the_store_not_the_password(
    locked: RedisServer,
) -> None:
    settings = parse_remote_url(f"redis://:wrong@127.0.0.1:{locked.port}/0")
    store = FastReadRedisStore(settings, read_address(settings.url) or RedisAddress())
    with pytest.raises(RemoteStoreError) as caught:
        await store.get_many(["a"], 10, ReadBudget(100))
    await store.aclose()
    message = str(caught.value)
    assert message.startswith(f"GETRANGE on redis://***@127.0.0.1:{locked.port}/0: server error")
    assert "WRONGPASS" in message and "wrong" not in message.replace("WRONGPASS", "")


async def test_a_key_of_another_type_is_that_key_s_and_the_connection_stays(
    locked: RedisServer,
) -> None:
    """A key holding a list among the values read: that key's value is bad, the others are
    read, and the connection goes on serving (the pipeline's replies were all read)."""
    with locked.client() as c:
        c.rpush("list", b"x")
        c.set("a", b"value a")
        before = c.info("stats")["total_connections_received"]
    store, redis_py = _stores(f"redis://:{QUOTED}@127.0.0.1:{locked.port}/0")
    await redis_py.aclose()
    try:
        got = await store.get_many(["list", "a"], 10, ReadBudget(100))
        assert got == [Unread.WRONG_TYPE, b"value a"]
        assert await store.get_many(["a"], 10, ReadBudget(100)) == [b"value a"]
    finally:
        await store.aclose()
    with locked.client() as c:
        assert c.info("stats")["total_connections_received"] - before == 2  # 1 + this client


async def test_a_store_error_drops_the_connection_and_the_next_read_reconnects(
    locked: RedisServer,
) -> None:
    """An error that is the store's (a user not allowed GETRANGE), named; the connection (with
    the rest of the pipeline's replies on it) is not reused."""
    with locked.client() as c:
        c.set("a", b"value a")
        c.acl_setuser(
            "reader", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-getrange"]
        )
        before = c.info("stats")["total_connections_received"]
    settings = parse_remote_url(f"redis://reader:pw@127.0.0.1:{locked.port}/0")
    store = FastReadRedisStore(settings, read_address(settings.url) or RedisAddress())
    try:
        with pytest.raises(RemoteStoreError, match=r"GETRANGE on .*: server error: NOPERM"):
            await store.get_many(["a", "a"], 10, ReadBudget(100))
        with locked.client() as c:
            c.acl_setuser("reader", enabled=True, commands=["+getrange"])
        assert await store.get_many(["a"], 10, ReadBudget(100)) == [b"value a"]
    finally:
        await store.aclose()
    with locked.client() as c:
        assert c.info("stats")["total_connections_received"] - before == 4  # 2 + 2 of the test's


def test_a_second_machine_warm_from_redis_never_imports_redis_py(tmp_path: Path) -> None:
    """A fresh process with an empty local folder loads every entry from the store and
    compiles nothing, without importing redis-py (~90 ms of imports on the critical path), nor
    the GLSL compiler's binding: the store answered, so glslang was not set up."""
    srv = RedisServer(tmp_path)

    def machine(name: str) -> list[str]:
        folder = ["--cache-dir", str(tmp_path / name), "--graph-key", "c"]
        return [*run_args(CUNET), *folder, "--remote-cache", srv.url]

    try:
        first, _, _ = _run_counting_imports(*machine("one"))
        assert first["remote_cache"]["pushed"] > 0
        second, _, imported = _run_counting_imports(*machine("two"))
        third, _, compiler = _run_counting_imports(
            *machine("three"), module="asyncvk.shader._compiler"
        )
    finally:
        srv.stop()
    for warm in (second, third):
        assert warm["spirv_compiled"] == 0 and warm["remote_cache"]["hits"] > 0
        assert warm["remote_cache"]["on"] and warm["remote_cache"]["pushed"] == 0
    assert not imported and not compiler


async def test_a_push_imports_redis_py_and_writes_through_it(tmp_path: Path) -> None:
    """The store a tier opens reads fast and writes with redis-py, both on the same server."""
    srv = RedisServer(tmp_path)
    tier = remote_tier_for(srv.url)
    assert tier is not None
    try:
        store = await tier.open()
        assert isinstance(store, FastReadRedisStore)
        assert await store.add("k", b"v", 0) and not await store.add("k", b"w", 0)
        assert await store.get_many(["k"], 10, ReadBudget(10)) == [b"v"]
        assert await store.exists_many(["k", "absent"]) == [True, False]
    finally:
        await tier.aclose()
        srv.stop()


async def test_a_read_cancelled_midway_leaves_no_reply_for_the_next(
    locked: RedisServer,
) -> None:
    """A load cancelled while its replies arrive: the connection goes with them, so the next
    read gets its own values, not the rest of the cancelled one's."""
    with locked.client() as c:
        c.set("big", b"x" * (1 << 20))
        c.set("a", b"value a")
    store, redis_py = _stores(f"redis://:{QUOTED}@127.0.0.1:{locked.port}/0")
    await redis_py.aclose()
    budget = ReadBudget(1 << 30)
    try:
        assert await store.get_many(["a"], 10, budget) == [b"value a"]  # connected
        reads = store._reads  # type: ignore[attr-defined]
        reader = reads._stream[0]
        real_readexactly = reader.readexactly
        calls = 0

        async def cancelled_after_one_value(n: int) -> bytes:
            nonlocal calls
            calls += 1
            if calls > 1:
                raise asyncio.CancelledError
            return await real_readexactly(n)

        reader.readexactly = cancelled_after_one_value
        with pytest.raises(asyncio.CancelledError):
            await store.get_many(["big", "big", "big"], 1 << 21, budget)
        assert calls == 2
        assert await store.get_many(["a", "absent"], 10, budget) == [b"value a", None]
    finally:
        await store.aclose()


async def test_a_name_that_does_not_resolve_is_named_so() -> None:
    settings = parse_remote_url("redis://no-such-host.invalid:6379/0?connect_timeout=2")
    store = FastReadRedisStore(settings, read_address(settings.url) or RedisAddress())
    with pytest.raises(RemoteStoreError) as caught:
        await store.get_many(["a"], 10, ReadBudget(10))
    await store.aclose()
    assert "unknown error" not in str(caught.value), caught.value
