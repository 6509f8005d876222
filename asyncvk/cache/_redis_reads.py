"""A load's reads from Redis without redis-py: GETRANGE and ZREVRANGE pipelined on one asyncio
connection, the replies parsed by hiredis (the C parser redis-py itself uses when installed).

A second machine warm from Redis spent most of its extra start-up importing redis-py (about
90 ms of modules: client, cluster, sentinel, commands, ``importlib.metadata``), and an import
holds the GIL, so it could not hide beside the main thread's own imports. A load needs only
two pipelined reads; :class:`FastReadRedisStore` makes them here and leaves writes, scripts
and SCAN to redis-py (:mod:`._redis_store`), imported on a thread when a process first writes.

Only what redis-py would read the same way goes this way: ``redis://`` and ``unix://`` URLs
with a user, a password and a database at most. TLS or any other connection option keeps
redis-py for reads too (:func:`read_address` returns None).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import hiredis

from .._threads import run_sync
from ._remote_store import (
    BadValue,
    RemoteSettings,
    RemoteStore,
    RemoteStoreError,
    WriteOutcome,
    os_reason,
)

#: The query parameters redis-py would read that this connection reads the same way.
_READ_PARAMETERS = frozenset({"db"})
_CHUNK = 1 << 16
T = TypeVar("T")


@dataclass(frozen=True)
class RedisAddress:
    """Where a URL's server is and how to log in, as redis-py's ``from_url`` reads it."""

    host: str = ""
    port: int = 6379
    #: a unix socket's path ("" for TCP)
    path: str = ""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    db: int = 0


def read_address(url: str) -> RedisAddress | None:
    """The address of a ``redis://`` or ``unix://`` URL, or None when reading it needs redis-py
    (``rediss://``, a connection option other than ``db``, a database that is not a number, a
    user without a password)."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "unix"):
        return None
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if set(query) - _READ_PARAMETERS:
        return None
    db_text = query.get("db")
    if db_text is None and parts.scheme == "redis":  # redis-py: the query's db wins
        db_text = unquote(parts.path).replace("/", "") or None
    try:
        db = int(db_text) if db_text is not None else 0
    except ValueError:
        return None
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    if username is not None and password is None:
        return None  # redis-py logs in as that user with an empty password: its way, then
    if parts.scheme == "unix":
        if not parts.path:
            return None
        return RedisAddress(path=unquote(parts.path), username=username, password=password, db=db)
    if not parts.hostname:
        return None
    return RedisAddress(
        host=unquote(parts.hostname),
        port=parts.port or 6379,
        username=username,
        password=password,
        db=db,
    )


def _command(*args: str | bytes | int) -> bytes:
    """One command in RESP: an array of bulk strings (a str key as UTF-8, as redis-py sends it)."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out += [b"$%d\r\n" % len(data), data, b"\r\n"]
    return b"".join(out)


class RedisReads:
    """One connection for reads, opened at the first request; requests take turns on it."""

    def __init__(self, settings: RemoteSettings, address: RedisAddress) -> None:
        self.settings = settings
        self.address = address
        self._deadline = settings.connect_timeout + settings.timeout
        self._lock = asyncio.Lock()
        self._stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._parser = hiredis.Reader()

    async def request(
        self, what: str, commands: Sequence[bytes], parse: Callable[[list[Any]], T]
    ) -> T:
        """``parse`` of the replies to ``commands``, sent in one write; RemoteStoreError names
        ``what`` and the cause (refused, timed out, closed, the server's error, a reply of the
        wrong type). After an error the connection is dropped: what is left on it is unknown."""
        async with self._lock:
            try:
                async with asyncio.timeout(self._deadline):
                    return parse(await self._exchange(commands))
            except (OSError, TimeoutError, hiredis.ProtocolError, _ServerError) as exc:
                await self._drop()
                raise RemoteStoreError(
                    f"{what} on {self.settings.display}: {_describe(exc)}"
                ) from exc
            except BaseException:  # cancelled mid-read: the replies still coming are not ours
                self._abandon()
                raise

    async def _exchange(self, commands: Sequence[bytes]) -> list[Any]:
        if self._stream is None:
            self._stream = await self._connect()
        reader, writer = self._stream
        writer.write(b"".join(commands))
        return await self._replies(reader, len(commands))

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        address = self.address
        async with asyncio.timeout(self.settings.connect_timeout):
            if address.path:
                reader, writer = await asyncio.open_unix_connection(address.path)
            else:
                reader, writer = await asyncio.open_connection(address.host, address.port)
        self._parser = hiredis.Reader()
        login = []
        if address.password is not None:
            user = () if address.username is None else (address.username,)
            login.append(_command("AUTH", *user, address.password))
        if address.db:
            login.append(_command("SELECT", address.db))
        if login:
            writer.write(b"".join(login))
            try:
                await self._replies(reader, len(login))
            except BaseException:
                writer.close()
                raise
        return reader, writer

    async def _replies(self, reader: asyncio.StreamReader, count: int) -> list[Any]:
        replies: list[Any] = []
        while len(replies) < count:
            reply = self._parser.gets()
            if reply is False:
                data = await reader.read(_CHUNK)
                if not data:
                    raise ConnectionResetError("the server closed the connection")
                self._parser.feed(data)
                continue
            if isinstance(reply, hiredis.ReplyError):
                raise _ServerError(f"server error: {reply}")
            replies.append(reply)
        return replies

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


class _ServerError(Exception):
    """An error reply (WRONGTYPE, NOAUTH, ...), or a reply of a type the command never sends."""


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError) and not str(exc):
        return "timed out"
    if isinstance(exc, OSError) and (exc.errno or exc.strerror):
        return os_reason(exc)
    if isinstance(exc, _ServerError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _bulk(reply: Any) -> bytes:
    if not isinstance(reply, bytes):
        raise _ServerError(f"expected a string reply, got {type(reply).__name__}")
    return reply


def _values(replies: Sequence[Any]) -> list[bytes | None]:
    """GETRANGE's replies: b"" for a missing key, and no value is empty (each is a sealed file)."""
    return [_bulk(r) or None for r in replies]


def _values_and_names(replies: list[Any]) -> tuple[list[bytes | None], list[str]]:
    """GETRANGEs' replies, then ZREVRANGE's: an array of members."""
    *values, members = replies
    if not isinstance(members, list):
        raise _ServerError(f"expected an array reply, got {type(members).__name__}")
    return _values(values), [_bulk(m).decode("utf-8", "replace") for m in members]


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

    async def get_many(self, keys: Sequence[str], limit: int) -> list[bytes | None]:
        if not keys:
            return []
        commands = [_command("GETRANGE", key, 0, limit) for key in keys]
        return await self._reads.request("GETRANGE", commands, _values)

    async def get_with_newest(
        self, keys: Sequence[str], limit: int, index: str, count: int
    ) -> tuple[list[bytes | None], list[str]]:
        commands = [_command("GETRANGE", key, 0, limit) for key in keys]
        commands.append(_command("ZREVRANGE", index, 0, count - 1))
        return await self._reads.request("GETRANGE, ZREVRANGE", commands, _values_and_names)

    async def exists_many(self, keys: Sequence[str]) -> list[bool]:
        return await (await self._store()).exists_many(keys)

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        return await (await self._store()).add(key, value, ttl)

    async def replace_bad(self, key: str, value: bytes, ttl: float, bad: BadValue) -> WriteOutcome:
        return await (await self._store()).replace_bad(key, value, ttl, bad)

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
