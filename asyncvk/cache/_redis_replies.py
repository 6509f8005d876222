"""RESP replies parsed for a load's reads, every length checked before its body is read.

The replies to :mod:`._redis_reads`' commands are parsed here, not by hiredis (which these reads
used before), since a store is trusted with nothing, and a general parser sizes its buffers and
objects by what the peer declares: hiredis keeps a bulk string of any declared length in memory
until it is whole, and builds arrays nested 1024 deep. Here each reply must have the one shape
its command gets (a bulk string, an error, a status, or for ZREVRANGE one flat array of short
bulk strings), and every length is checked before a byte of the body is read: a value at
``limit + 1`` bytes (what GETRANGE asks for), the values of one load together at the
:class:`~._remote_store.ReadBudget` (what does not fit is not read: the connection is dropped
with the rest of the replies on it), a line at 64 KiB. So a hostile or broken peer costs one
failed read, never memory beyond those bounds nor a recursion. An error reply is that
command's: WRONGTYPE for one key is that key's bad value, not the read's (another error,
NOAUTH or LOADING, is the store's).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from ._remote_store import ReadBudget, Unread


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
