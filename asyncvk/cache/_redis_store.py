"""RedisStore: the RemoteStore protocol on Redis, through redis-py's asyncio client.

No retries and short timeouts: a remote cache that does not answer at once is turned off by
the tier, and the model loads without it (redis-py would otherwise retry three times with
back-off). A set of keys is a sorted set scored by write time, so "the newest" is one command.
A bad value is replaced or deleted by a Lua script, the one way to compare and write in one
atomic step.

A load's read is two pipelines on one connection: two commands in flight at once would open a
second connection, and each connection redis-py opens looked its own version up in the installed
packages' metadata (19 ms on a 2-core machine) unless it is given. The first asks each value's
length (STRLEN), the second reads those that fit in the load's budget (GETRANGE of exactly that
length): redis-py keeps every reply of a pipeline whole, so the budget must be kept before the
values are asked for. (The bounds hold against a real Redis; against a hostile peer they are
redis-py's parser's, which is why a load reads through ``_redis_reads`` where it can.) A reply
of a shape the command never gets (a hostile peer's nested arrays) is the store's error.
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
from redis.exceptions import RedisError, ResponseError

from ._remote_store import (
    BadValue,
    Read,
    ReadBudget,
    RemoteSettings,
    RemoteStoreError,
    Unread,
    WriteOutcome,
    os_reason,
)


class MalformedReply(ValueError):
    """A reply of a shape the command never gets (a hostile or broken peer)."""


#: What redis-py's parsers and callbacks raise for such a reply (a hostile peer's nested
#: arrays: a recursion in the pure-Python parser, unpacking in a callback), and our own.
_MALFORMED = (RecursionError, TypeError, ValueError, IndexError)

#: Where KEYS[1] still holds the bad value ARGV[1..4] names (kind, size, SHA-1, the type the
#: key should hold: ``BadValue``) or nothing: SET ARGV[6] (PX ARGV[5] when > 0), or without
#: ARGV[6] DEL it and take it off the set KEYS[2] (if given: a member whose value is gone is
#: taken off too; a writer lists a blob after writing it). A script runs alone on the server.
#: The length before the hash: another writer's large value is not hashed.
#: 3: deleted, 2: replaced, 1: added, 0: kept.
_FIX_BAD = """
local kind = ARGV[1]
local held = redis.call('TYPE', KEYS[1]).ok
if held ~= 'none' then
  if kind == 'type' then
    if held == ARGV[4] then return 0 end
  elseif held ~= 'string' then
    return 0
  elseif kind == 'over' then
    if redis.call('STRLEN', KEYS[1]) <= tonumber(ARGV[2]) then return 0 end
  elseif redis.call('STRLEN', KEYS[1]) ~= tonumber(ARGV[2])
         or redis.sha1hex(redis.call('GET', KEYS[1])) ~= ARGV[3] then
    return 0
  end
end
if ARGV[6] == nil then
  if KEYS[2] then redis.pcall('ZREM', KEYS[2], KEYS[1]) end
  if held == 'none' then return 0 end
  redis.call('DEL', KEYS[1])
  return 3
end
if tonumber(ARGV[5]) > 0 then
  redis.call('SET', KEYS[1], ARGV[6], 'PX', ARGV[5])
else
  redis.call('SET', KEYS[1], ARGV[6])
end
if held ~= 'none' then return 2 end
return 1
"""
_OUTCOMES: dict[int, WriteOutcome] = {3: "deleted", 2: "replaced", 1: "added", 0: "kept"}


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
        self._fix_script = self._client.register_script(_FIX_BAD)

    @asynccontextmanager
    async def _guard(self, what: str) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(self._deadline):
                yield
        except (RedisError, OSError, TimeoutError, *_MALFORMED) as exc:
            raise RemoteStoreError(f"{what} on {self.settings.display}: {_describe(exc)}") from exc

    async def get_many(self, keys: Sequence[str], limit: int, budget: ReadBudget) -> list[Read]:
        if not keys:
            return []
        async with self._guard("STRLEN, GETRANGE"):
            return await self._read(keys, limit, budget)

    async def get_with_newest(
        self, keys: Sequence[str], limit: int, budget: ReadBudget, index: str, count: int
    ) -> tuple[list[Read], list[str]]:
        async with self._guard("ZREVRANGE, STRLEN, GETRANGE"):
            return await self._read(keys, limit, budget), await self._members(index, count)

    async def _read(self, keys: Sequence[str], limit: int, budget: ReadBudget) -> list[Read]:
        """Each value's length, then the values that fit, each read to exactly that length (a
        value that grew since fails its checks: it is not the value measured)."""
        pipe = self._client.pipeline(transaction=False)
        for key in keys:
            pipe.strlen(key)
        sizes = await pipe.execute(raise_on_error=False)
        reads: list[Read] = []
        wanted: list[tuple[int, str, int]] = []
        for key, size in zip(keys, sizes, strict=True):
            read = _sized(size, limit, budget)
            if read is None and isinstance(size, int) and size > 0:
                wanted.append((len(reads), key, size))
            reads.append(read)
        if wanted:
            pipe = self._client.pipeline(transaction=False)
            for _, key, size in wanted:
                pipe.getrange(key, 0, size - 1)
            values = await pipe.execute(raise_on_error=False)
            for (at, _, size), value in zip(wanted, values, strict=True):
                reads[at] = _value(value, size)
        return reads

    async def _members(self, index: str, count: int) -> list[str]:
        try:
            members = await self._client.zrevrange(index, 0, count - 1)
        except ResponseError as exc:
            if _wrong_type(exc):  # not a set: lists nothing, and the push replaces it
                return []
            raise
        return _names(members, count)

    async def exists_many(self, keys: Sequence[str]) -> list[bool]:
        if not keys:
            return []
        async with self._guard("EXISTS"):
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.exists(key)
            found = await pipe.execute()
            if len(found) != len(keys) or not all(isinstance(n, int) for n in found):
                raise _malformed(found)
        return [bool(n) for n in found]

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        px = int(ttl * 1000) if ttl > 0 else None
        async with self._guard("SET NX"):
            written = await self._client.set(key, value, nx=True, px=px)
            if written not in (True, None):  # redis-py's word for a reply neither OK nor nil
                raise _malformed(written)
        return bool(written)

    async def replace_bad(self, key: str, value: bytes, ttl: float, bad: BadValue) -> WriteOutcome:
        px = int(ttl * 1000) if ttl > 0 else 0
        async with self._guard("EVALSHA (replace a bad value)"):
            done = await self._fix(bad, [key], px, value)
        return done

    async def delete_bad(self, key: str, bad: BadValue, index: str | None = None) -> bool:
        keys = [key] if index is None else [key, index]
        async with self._guard("EVALSHA (delete a bad value)"):
            done = await self._fix(bad, keys, 0)
        return done == "deleted"

    async def _fix(self, bad: BadValue, keys: list[str], px: int, *value: bytes) -> WriteOutcome:
        args = [bad.kind, bad.size, bad.sha1, bad.want, px, *value]
        done = await self._fix_script(keys=keys, args=args)
        if not isinstance(done, int) or done not in _OUTCOMES:
            raise _malformed(done)
        return _OUTCOMES[done]

    async def newest_members(self, index: str, count: int) -> list[str]:
        async with self._guard("ZREVRANGE"):
            return await self._members(index, count)

    async def add_member(
        self, index: str, member: str, ttl: float, *, drop: Sequence[str], keep: int
    ) -> None:
        async with self._guard("ZADD"):
            try:
                await self._add_member(index, member, ttl, drop, keep)
            except ResponseError as exc:
                if not _wrong_type(exc):
                    raise
                # another type at the set's key (its namespace is ours): deleted, then added
                await self._fix(BadValue.wrong_type("zset"), [index], 0)
                await self._add_member(index, member, ttl, drop, keep)

    async def _add_member(
        self, index: str, member: str, ttl: float, drop: Sequence[str], keep: int
    ) -> None:
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
            if not all(isinstance(k, (bytes, str)) for k in found):
                raise _malformed(found)
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


def _wrong_type(exc: object) -> bool:
    """Whether a reply is Redis's WRONGTYPE error (in a MULTI's, after the command's name)."""
    return isinstance(exc, ResponseError) and "WRONGTYPE" in str(exc)


def _malformed(what: object) -> MalformedReply:
    return MalformedReply(f"a reply of a shape the command never gets ({type(what).__name__})")


def _sized(size: Any, limit: int, budget: ReadBudget) -> Read:
    """What a STRLEN reply says of its value: None where it is to be read (or the key holds
    none: ``size`` 0), else why not."""
    if _wrong_type(size):
        return Unread.WRONG_TYPE
    if isinstance(size, BaseException):
        raise size
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise _malformed(size)
    if size > limit:
        return Unread.TOO_LARGE
    if size and not budget.take(size):
        return Unread.OVER_BUDGET
    return None


def _value(value: Any, size: int) -> Read:
    """A GETRANGE reply of at most ``size`` bytes: b"" where the key is gone (or empty) since."""
    if _wrong_type(value):
        return Unread.WRONG_TYPE
    if isinstance(value, BaseException):
        raise value
    if not isinstance(value, bytes) or len(value) > size:
        raise _malformed(value)
    return value or None


def _names(members: Any, count: int) -> list[str]:
    if not isinstance(members, list) or len(members) > count:
        raise _malformed(members)
    if not all(isinstance(m, (bytes, str)) for m in members):
        raise _malformed(members)
    return [m.decode("utf-8", "replace") if isinstance(m, bytes) else m for m in members]


def _describe(exc: BaseException) -> str:
    """One line: the system's words for the cause first ("connection refused"), then redis's."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return "timed out"
    if isinstance(exc, MalformedReply):
        return str(exc)
    if isinstance(exc, RecursionError):  # its message would name the parser's recursion
        return "a reply nested too deep"
    cause = exc.__cause__ or exc.__context__
    if isinstance(cause, OSError) and cause.errno:
        return f"{os_reason(cause)} ({type(exc).__name__}: {exc})"
    return f"{type(exc).__name__}: {exc}"
