"""RedisStore: the RemoteStore protocol on Redis, through redis-py's asyncio client.

No retries and short timeouts: a remote cache that does not answer at once is turned off by
the tier, and the model loads without it (redis-py would otherwise retry three times with
back-off). A set of keys is a sorted set scored by write time, so "the newest" is one command.
A bad value is replaced by a Lua script, the one way to compare and write in one atomic step.

A load's read is one pipeline on one connection: two commands in flight at once would open a
second connection, and each connection redis-py opens looked its own version up in the installed
packages' metadata (19 ms on a 2-core machine) unless it is given.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from ._remote_store import BadValue, RemoteSettings, RemoteStoreError, WriteOutcome, os_reason

#: SET (PX when ARGV[4] > 0) where KEYS[1] holds exactly the bad value (length ARGV[3], SHA-1
#: ARGV[2]) or nothing; a script runs alone on the server. The length first: another writer's
#: large value is not hashed. 2: replaced, 1: added, 0: kept.
_REPLACE_BAD = """
local held = redis.call('EXISTS', KEYS[1]) == 1
if held and (redis.call('STRLEN', KEYS[1]) ~= tonumber(ARGV[3])
             or redis.sha1hex(redis.call('GET', KEYS[1])) ~= ARGV[2]) then
  return 0
end
if tonumber(ARGV[4]) > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
if held then return 2 end
return 1
"""
_OUTCOMES: dict[int, WriteOutcome] = {2: "replaced", 1: "added", 0: "kept"}


class RedisStore:
    """One client (and its connection pool) on the event loop that first uses it."""

    def __init__(self, settings: RemoteSettings) -> None:
        self.settings = settings
        self._client = aioredis.Redis.from_url(
            settings.url,
            socket_timeout=settings.timeout,
            socket_connect_timeout=settings.connect_timeout,
            retry=Retry(NoBackoff(), 0),
            **_driver_info(),
        )
        # a name lookup or a stalled handshake is outside redis-py's socket timeouts
        self._deadline = settings.connect_timeout + settings.timeout
        # EVALSHA, and EVAL once when the server does not know the script yet
        self._replace_script = self._client.register_script(_REPLACE_BAD)

    @asynccontextmanager
    async def _guard(self, what: str) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(self._deadline):
                yield
        except (RedisError, OSError, TimeoutError) as exc:
            raise RemoteStoreError(f"{what} on {self.settings.display}: {_describe(exc)}") from exc

    async def get_many(self, keys: Sequence[str], limit: int) -> list[bytes | None]:
        if not keys:
            return []
        async with self._guard("GETRANGE"):  # one round trip; a huge value is never read whole
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.getrange(key, 0, limit)
            values = await pipe.execute()
        return _values(values)

    async def get_with_newest(
        self, keys: Sequence[str], limit: int, index: str, count: int
    ) -> tuple[list[bytes | None], list[str]]:
        async with self._guard("GETRANGE, ZREVRANGE"):
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.getrange(key, 0, limit)
            pipe.zrevrange(index, 0, count - 1)
            *values, members = await pipe.execute()
        return _values(values), _names(members)

    async def exists_many(self, keys: Sequence[str]) -> list[bool]:
        if not keys:
            return []
        async with self._guard("EXISTS"):
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.exists(key)
            found = await pipe.execute()
        return [bool(n) for n in found]

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        px = int(ttl * 1000) if ttl > 0 else None
        async with self._guard("SET NX"):
            written = await self._client.set(key, value, nx=True, px=px)
        return bool(written)

    async def replace_bad(self, key: str, value: bytes, ttl: float, bad: BadValue) -> WriteOutcome:
        px = int(ttl * 1000) if ttl > 0 else 0
        async with self._guard("EVALSHA (replace a bad value)"):
            done = await self._replace_script(keys=[key], args=[value, bad.sha1, bad.size, px])
        return _OUTCOMES[int(done)]

    async def newest_members(self, index: str, count: int) -> list[str]:
        async with self._guard("ZREVRANGE"):
            members = await self._client.zrevrange(index, 0, count - 1)
        return _names(members)

    async def add_member(
        self, index: str, member: str, ttl: float, *, drop: Sequence[str], keep: int
    ) -> None:
        async with self._guard("ZADD"):
            pipe = self._client.pipeline(transaction=True)  # MULTI/EXEC: one atomic step
            pipe.zadd(index, {member: time.time()})
            if drop:
                pipe.zrem(index, *drop)
            pipe.zremrangebyrank(index, 0, -(keep + 1))
            if ttl > 0:
                pipe.pexpire(index, int(ttl * 1000))
            await pipe.execute()

    async def scan(self, pattern: str) -> list[str]:
        async with self._guard("SCAN"):
            found = [k async for k in self._client.scan_iter(match=pattern, count=1000)]
        return sorted(k.decode("utf-8", "replace") if isinstance(k, bytes) else k for k in found)

    async def aclose(self) -> None:
        try:
            await self._client.aclose()
        except (RedisError, OSError):
            pass


def _driver_info() -> dict[str, Any]:
    """The client's name and version for CLIENT SETINFO, given, so that no connection looks the
    version up in the packages' metadata (redis-py 7.1 and later; older ones read it once, at
    import)."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:
        return {}
    return {"driver_info": DriverInfo(lib_version=redis.__version__)}


def _values(values: Sequence[Any]) -> list[bytes | None]:
    """GETRANGE's replies: b"" for a missing key, and no value is empty (each is a sealed file)."""
    return [bytes(v) if v else None for v in values]


def _names(members: Sequence[Any]) -> list[str]:
    return [m.decode("utf-8", "replace") if isinstance(m, bytes) else str(m) for m in members]


def _describe(exc: BaseException) -> str:
    """One line: the system's words for the cause first ("connection refused"), then redis's."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return "timed out"
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, OSError) and cause.errno:
        return f"{os_reason(cause)} ({type(exc).__name__}: {exc})"
    return f"{type(exc).__name__}: {exc}"
