"""A load's reads from Redis without redis-py: GETRANGE and ZREVRANGE pipelined on one asyncio
connection, the replies parsed here.

A second machine warm from Redis spent most of its extra start-up importing redis-py (about
90 ms of modules: client, cluster, sentinel, commands, ``importlib.metadata``), and an import
holds the GIL, so it could not hide beside the main thread's own imports. A load needs only
two pipelined reads; :class:`FastReadRedisStore` makes them here and leaves writes, scripts
and SCAN to redis-py (:mod:`._redis_store`), imported on a thread when a process first writes.

The replies are parsed by :func:`_reply`, not by hiredis (which these reads used before), since
a store is trusted with nothing, and a general parser sizes its buffers and objects by what the
peer declares: hiredis keeps a bulk string of any declared length in memory until it is whole,
and builds arrays nested 1024 deep. Here each reply must have the one shape its command gets
(a bulk string, an error, a status, or for ZREVRANGE one flat array of short bulk strings), and
every length is checked before a byte of the body is read: a value at ``limit + 1`` bytes (what
GETRANGE asks for), the values of one load together at the :class:`~._remote_store.ReadBudget`
(what does not fit is not read: the connection is dropped with the rest of the replies on it),
a line at 64 KiB. So a hostile or broken peer costs one failed read, never memory beyond those
bounds nor a recursion. An error reply is that command's: WRONGTYPE for one key is that key's
bad value, not the read's (another error, NOAUTH or LOADING, is the store's).

Only what redis-py would read the same way goes this way: ``redis://`` and ``unix://`` URLs
with a user, a password and a database at most. TLS or any other connection option keeps
redis-py for reads too (:func:`read_address` returns None).
"""

from __future__ import annotations

import asyncio
import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from .._threads import run_sync
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

#: The query parameters redis-py would read that this connection reads the same way.
_READ_PARAMETERS = frozenset({"db"})
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


#: The longest line of a reply (a status, an error, a length); the stream's buffer limit.
_MAX_LINE = 1 << 16
#: The longest member of a set read here (a key name).
_MAX_MEMBER = 4096
_LENGTH = re.compile(rb"-1|0|[1-9][0-9]{0,17}")
_TYPE_NAMES = {b"+": "a status", b"-": "an error", b":": "an integer", b"$": "a string"}


class _ProtocolError(Exception):
    """A reply Redis never sends for the command asked: the read fails, the connection goes."""


class _ServerError(Exception):
    """An error reply that is the store's (NOAUTH, LOADING, ...), not one key's."""


class _OverBudget(Exception):
    """The next value does not fit in the load's read budget: neither it nor the rest is read."""


@dataclass(frozen=True)
class _Expect:
    """The one shape a command's reply may have: a value (a bulk string of at most ``most``
    bytes), the members of a set (at most ``most`` short bulk strings), or a status."""

    kind: str
    most: int = 0


_STATUS = _Expect("status")


def _shape(head: bytes) -> str:
    return _TYPE_NAMES.get(head, "an array" if head == b"*" else f"type byte {head!r}")


def _length(text: bytes, most: int) -> int:
    if not _LENGTH.fullmatch(text):
        raise _ProtocolError(f"a length that is not a number: {text[:32]!r}")
    size = int(text)
    if size > most:
        raise _ProtocolError(f"a reply of length {size}, over the {most} asked for")
    return size


async def _line(reader: asyncio.StreamReader) -> bytes:
    try:
        line = await reader.readuntil(b"\r\n")
    except asyncio.LimitOverrunError:
        raise _ProtocolError(f"a reply line over {_MAX_LINE} bytes") from None
    return line[:-2]


async def _bulk_body(reader: asyncio.StreamReader, size: int) -> bytes:
    """``size`` bytes and CRLF. A large value in chunks: the stream's buffer stays small (its
    flow control pauses the socket), and the value is in memory twice at most, not the three
    times ``readexactly`` holds it (buffer, slice, bytes)."""
    if size <= _MAX_LINE:
        data = await reader.readexactly(size)
    else:
        parts: list[bytes] = []
        left = size
        while left:
            part = await reader.read(min(left, _MAX_LINE))
            if not part:
                raise asyncio.IncompleteReadError(b"".join(parts), size)
            parts.append(part)
            left -= len(part)
        data = b"".join(parts)
    if await reader.readexactly(2) != b"\r\n":
        raise _ProtocolError("a string reply not ended by CRLF")
    return data


async def _reply(reader: asyncio.StreamReader, expect: _Expect, budget: ReadBudget | None) -> Any:
    """One reply of the shape ``expect`` names: bytes, None, a list of names, or
    :attr:`Unread.WRONG_TYPE` for that error; each length checked before its body is read."""
    line = await _line(reader)
    head, rest = line[:1], line[1:]
    if head == b"-":
        message = rest.decode("utf-8", "replace")
        if message.startswith("WRONGTYPE") and expect.kind != "status":
            return Unread.WRONG_TYPE  # that key's value, not the read's
        raise _ServerError(f"server error: {message}")
    if expect.kind == "status":
        if head != b"+":
            raise _ProtocolError(f"expected a status reply, got {_shape(head)}")
        return rest
    if expect.kind == "value":
        if head != b"$":
            raise _ProtocolError(f"expected a string reply, got {_shape(head)}")
        size = _length(rest, expect.most)
        if size < 0:
            return None
        if budget is not None and not budget.take(size):
            raise _OverBudget
        return await _bulk_body(reader, size)
    if head != b"*":
        raise _ProtocolError(f"expected an array reply, got {_shape(head)}")
    members = []
    for _ in range(max(_length(rest, expect.most), 0)):
        item = await _line(reader)
        if item[:1] != b"$":  # nothing nested: a set's members are strings
            raise _ProtocolError(f"expected a string in the array, got {_shape(item[:1])}")
        size = _length(item[1:], _MAX_MEMBER)
        if size < 0:
            raise _ProtocolError("a null string in the array")
        members.append((await _bulk_body(reader, size)).decode("utf-8", "replace"))
    return members


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
