"""A load's reads from Redis without redis-py: GETRANGE and ZREVRANGE pipelined on one asyncio
connection, the replies parsed by :mod:`._redis_replies`.

A second machine warm from Redis spent most of its extra start-up importing redis-py (about
90 ms of modules: client, cluster, sentinel, commands, ``importlib.metadata``), and an import
holds the GIL, so it could not hide beside the main thread's own imports. A load needs only
two pipelined reads; :class:`FastReadRedisStore` makes them here and leaves writes, scripts
and SCAN to redis-py (:mod:`._redis_store`), imported on a thread when a process first writes.

Each reply is bounded before its bytes are in memory (:mod:`._redis_replies` says how), so a
hostile or broken peer costs one failed read. Only what redis-py would read the same way goes
this way (:func:`read_address`, in :mod:`._redis_address`, returns None for the rest).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from .._threads import run_sync
from ._redis_address import RedisAddress as RedisAddress
from ._redis_address import read_address as read_address
from ._redis_replies import (
    _MAX_LINE,
    _STATUS,
    _command,
    _Expect,
    _OverBudget,
    _ProtocolError,
    _reply,
    _ServerError,
)
from ._remote_store import (
    BadValue,
    Read,
    ReadBudget,
    RemoteSettings,
    RemoteStore,
    RemoteStoreError,
    Unread,
    WriteOutcome,
    os_reason,
)

T = TypeVar("T")


class RedisReads:
    """One connection for reads, opened at the first request; requests take turns on it."""

    def __init__(self, settings: RemoteSettings, address: RedisAddress) -> None:
        self.settings = settings
        self.address = address
        self._deadline = settings.connect_timeout + settings.timeout
        self._lock = asyncio.Lock()
        self._stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def request(
        self,
        what: str,
        commands: Sequence[tuple[bytes, _Expect]],
        parse: Callable[[list[Any]], T],
        budget: ReadBudget | None = None,
    ) -> T:
        """``parse`` of the replies to ``commands``, sent in one write; RemoteStoreError names
        ``what`` and the cause (refused, timed out, closed, the server's error, a reply of a
        shape the command never gets). After an error the connection is dropped: what is left
        on it is unknown; so it is after a value that ``budget`` has no room for."""
        async with self._lock:
            try:
                async with asyncio.timeout(self._deadline):
                    replies, spent = await self._exchange(commands, budget)
                    if spent:  # the replies not read are still coming on this connection
                        await self._drop()
                    return parse(replies)
            except (OSError, EOFError, TimeoutError, _ProtocolError, _ServerError) as exc:
                await self._drop()
                raise RemoteStoreError(
                    f"{what} on {self.settings.display}: {_describe(exc)}"
                ) from exc
            except BaseException:  # cancelled mid-read: the replies still coming are not ours
                self._abandon()
                raise

    async def _exchange(
        self, commands: Sequence[tuple[bytes, _Expect]], budget: ReadBudget | None
    ) -> tuple[list[Any], bool]:
        if self._stream is None:
            self._stream = await self._connect()
        reader, writer = self._stream
        writer.write(b"".join(command for command, _ in commands))
        replies: list[Any] = []
        for _, expect in commands:
            try:
                replies.append(await _reply(reader, expect, budget))
            except _OverBudget:
                replies += [Unread.OVER_BUDGET] * (len(commands) - len(replies))
                return replies, True
        return replies, False

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        address = self.address
        async with asyncio.timeout(self.settings.connect_timeout):
            if address.path:
                reader, writer = await asyncio.open_unix_connection(address.path, limit=_MAX_LINE)
            else:
                reader, writer = await asyncio.open_connection(
                    address.host, address.port, limit=_MAX_LINE
                )
        login = []
        if address.password is not None:
            user = () if address.username is None else (address.username,)
            login.append(_command("AUTH", *user, address.password))
        if address.db:
            login.append(_command("SELECT", address.db))
        if login:
            writer.write(b"".join(login))
            try:
                for _ in login:
                    await _reply(reader, _STATUS, None)
            except BaseException:
                writer.close()
                raise
        return reader, writer

    def _abandon(self) -> None:
        """Close the connection now, without waiting (a cancelled request cannot wait)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream[1].close()

    async def _drop(self) -> None:
        stream, self._stream = self._stream, None
        if stream is None:
            return
        stream[1].close()
        try:
            await stream[1].wait_closed()
        except OSError:
            pass

    async def aclose(self) -> None:
        async with self._lock:
            await self._drop()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError) and not str(exc):
        return "timed out"
    if isinstance(exc, OSError) and (exc.errno or exc.strerror):
        return os_reason(exc)
    if isinstance(exc, EOFError):
        return "the server closed the connection"
    if isinstance(exc, (_ServerError, _ProtocolError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _value(reply: Any, limit: int) -> Read:
    """A GETRANGE reply as a :data:`Read`: b"" is a missing key (or an empty string)."""
    if isinstance(reply, bytes):
        if len(reply) > limit:
            return Unread.TOO_LARGE
        return reply or None
    return reply  # None or an Unread


def _values(replies: Sequence[Any], limit: int) -> list[Read]:
    return [_value(r, limit) for r in replies]


def _names_and_values(replies: list[Any], limit: int) -> tuple[list[Read], list[str]]:
    """ZREVRANGE's reply (first: a value that overruns the budget cannot cut it off), then the
    GETRANGEs'. A set of another type lists nothing (the push replaces it)."""
    members, *values = replies
    names = members if isinstance(members, list) else []
    return _values(values, limit), names


def _getrange(key: str, limit: int) -> tuple[bytes, _Expect]:
    return _command("GETRANGE", key, 0, limit), _Expect("value", limit + 1)


class FastReadRedisStore:
    """The RemoteStore on Redis: a load's reads through :class:`RedisReads`, everything else
    through redis-py's :class:`~._redis_store.RedisStore`, made (and imported) at first use."""

    def __init__(self, settings: RemoteSettings, address: RedisAddress) -> None:
        self.settings = settings
        self._reads = RedisReads(settings, address)
        self._full: RemoteStore | None = None
        self._full_lock = asyncio.Lock()

    async def _store(self) -> RemoteStore:
        async with self._full_lock:
            if self._full is None:
                self._full = await run_sync(_redis_py_store, self.settings)
            return self._full

    async def get_many(self, keys: Sequence[str], limit: int, budget: ReadBudget) -> list[Read]:
        if not keys:
            return []
        commands = [_getrange(key, limit) for key in keys]
        return await self._reads.request(
            "GETRANGE", commands, partial(_values, limit=limit), budget
        )

    async def get_with_newest(
        self, keys: Sequence[str], limit: int, budget: ReadBudget, index: str, count: int
    ) -> tuple[list[Read], list[str]]:
        commands = [(_command("ZREVRANGE", index, 0, count - 1), _Expect("members", count))]
        commands += [_getrange(key, limit) for key in keys]
        return await self._reads.request(
            "ZREVRANGE, GETRANGE", commands, partial(_names_and_values, limit=limit), budget
        )

    async def exists_many(self, keys: Sequence[str]) -> list[bool]:
        return await (await self._store()).exists_many(keys)

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        return await (await self._store()).add(key, value, ttl)

    async def replace_bad(self, key: str, value: bytes, ttl: float, bad: BadValue) -> WriteOutcome:
        return await (await self._store()).replace_bad(key, value, ttl, bad)

    async def delete_bad(self, key: str, bad: BadValue, index: str | None = None) -> bool:
        return await (await self._store()).delete_bad(key, bad, index)

    async def newest_members(self, index: str, count: int) -> list[str]:
        return await (await self._store()).newest_members(index, count)

    async def add_member(
        self, index: str, member: str, ttl: float, *, drop: Sequence[str], keep: int
    ) -> None:
        await (await self._store()).add_member(index, member, ttl, drop=drop, keep=keep)

    async def scan(self, pattern: str) -> list[str]:
        return await (await self._store()).scan(pattern)

    async def aclose(self) -> None:
        await self._reads.aclose()
        full, self._full = self._full, None
        if full is not None:
            await full.aclose()


def _redis_py_store(settings: RemoteSettings) -> RemoteStore:
    """redis-py's store (its import: on a thread, not the event loop)."""
    module = importlib.import_module(f"{__package__}._redis_store")
    store: RemoteStore = module.RedisStore(settings)
    return store
