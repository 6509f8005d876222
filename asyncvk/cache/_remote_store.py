"""RemoteStore: the few operations the remote cache tier needs from a key-value store, and the
URL that names one (``redis://host:port/db?timeout=1&ttl=604800``).

The tier (``_remote_tier``) sees only this protocol, so another store needs one class and
one line in ``_remote_connect.open_store``. A store raises :class:`RemoteStoreError` for
anything that is the store's fault (refused connection, timeout, a server error); the tier
then turns itself off.
A load reads Redis without redis-py where it can (``_redis_reads``); redis-py is imported
only to write, or when the URL needs it and a probe found the server answering
(``_remote_connect``):
without a remote cache, with a server that is down, or with a local cache that holds
everything, a load imports nothing more.

Reads are bounded before the bytes are in memory: each value at ``max_value`` (the store reads
``max_value + 1`` bytes at most, enough to tell it is over), all values of one load together at
``max_read`` (:class:`ReadBudget`: what does not fit is not read), and a reply's shape at the
one the command gets (a store answering nested arrays or another type is an error for that
read, never a recursion). A value of the wrong type is that key's problem only
(:attr:`Unread.WRONG_TYPE`), never the read's.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ._remote_url import URL_VARIABLE as URL_VARIABLE
from ._remote_url import configured_remote_url as configured_remote_url

#: Scheme -> what ``open_store`` opens it with (documented in docs/cache-format.md).
SCHEMES = ("redis", "rediss", "unix")
#: Seven days: long enough for a fleet's restarts, short enough that old drivers' blobs go.
DEFAULT_TTL = 7 * 24 * 3600.0
DEFAULT_TIMEOUT = 1.0
DEFAULT_CONNECT_TIMEOUT = 0.5
DEFAULT_MAX_VALUE = 64 << 20
#: All values one load reads together: two values at the cap, or many SPIR-V entries and the
#: newest driver blobs of real GPUs (a few MiB each), and never a store's worth of garbage.
DEFAULT_MAX_READ = 128 << 20
#: The newest driver blobs a load merges for one device identity (each writer adds its own).
DEFAULT_MAX_BLOBS = 8


class RemoteStoreError(Exception):
    """The store failed (connection, timeout, server error): the tier turns itself off."""


class Unread(Enum):
    """Why a key's value was not read: the value is not a string (a bad value of that key
    alone), it is over ``max_value``, or this load's ``max_read`` was spent before it."""

    WRONG_TYPE = "holds another type than a string"
    TOO_LARGE = "over max_value"
    OVER_BUDGET = "not read: this load's max_read was spent"


#: One key's read: its value (at most ``max_value`` bytes), None when it holds none (absent,
#: or an empty string: the store's range read cannot tell them apart), or why it was not read.
Read = bytes | None | Unread


@dataclass
class ReadBudget:
    """The bytes of values one load may still read (``max_read``): a store takes a value's
    size from it before reading it, and reads no value that does not fit."""

    left: int

    def take(self, size: int) -> bool:
        if size > self.left:
            self.left = 0  # what comes after is not read either: values keep their order
            return False
        self.left -= size
        return True


@dataclass(frozen=True)
class BadValue:
    """What a key held that failed a check, as a replace or a delete must still find it there
    (the store compares in one atomic step, so another writer's value since is kept):
    exactly these bytes (``bytes``: length and SHA-1), any string longer than ``size``
    (``over``), or a value of another type than ``want`` (``type``)."""

    kind: Literal["bytes", "over", "type"]
    size: int = 0
    sha1: str = ""
    #: the type the key should hold (Redis's name for it)
    want: str = "string"

    @classmethod
    def of(cls, value: bytes) -> BadValue:
        return cls("bytes", len(value), hashlib.sha1(value, usedforsecurity=False).hexdigest())

    @classmethod
    def over(cls, limit: int) -> BadValue:
        return cls("over", limit)

    @classmethod
    def wrong_type(cls, want: str = "string") -> BadValue:
        return cls("type", want=want)


#: What a conditional write did: wrote over the bad value, wrote where none was, left the
#: value another writer put there, or (a delete) removed the bad value.
WriteOutcome = Literal["replaced", "added", "kept", "deleted"]


@dataclass(frozen=True)
class RemoteSettings:
    """A remote cache URL, split into the store's address and asyncvk's own settings.

    ``timeout``: seconds for one operation; ``connect_timeout``: for the connection;
    ``ttl``: seconds a written value lives (0: no expiry); ``max_value``: the largest value
    written or accepted, in bytes; ``max_read``: the bytes of values one load reads at most;
    ``max_blobs``: driver blobs merged per device identity.
    """

    #: may hold a password: not in the repr (``display`` is the URL without it)
    url: str = field(repr=False)
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    ttl: float = DEFAULT_TTL
    max_value: int = DEFAULT_MAX_VALUE
    max_read: int = DEFAULT_MAX_READ
    max_blobs: int = DEFAULT_MAX_BLOBS

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme

    @property
    def display(self) -> str:
        """The URL without a password, for logs and reports."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        if parts.username:
            host = f"{parts.username}@{host}"
        elif parts.password:
            host = f"***@{host}"
        return urlunsplit((parts.scheme, host, parts.path, "", ""))


#: asyncvk's query parameters: name -> (converter, lowest allowed value).
_KNOBS = {
    "timeout": (float, 0.001),
    "connect_timeout": (float, 0.001),
    "ttl": (float, 0.0),
    "max_value": (int, 1),
    "max_read": (int, 1),
    "max_blobs": (int, 1),
}


def without_password(url: str) -> str:
    """``url`` with the password of its user part replaced by ``***``; works on a URL that
    does not parse (a bad port), as the error message for it needs it."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = min([i for i in map(rest.find, "/?#") if i >= 0], default=len(rest))
    user_part, at, host = rest[:end].rpartition("@")
    if not at or ":" not in user_part:
        return url
    user = user_part.partition(":")[0]
    return f"{scheme}://{user}:***@{host}{rest[end:]}"


def parse_remote_url(url: str, *, where: str = "remote cache") -> RemoteSettings:
    """Check ``url`` and take asyncvk's parameters out of its query; ValueError names the fault.

    ``where`` says who gave the URL (``--remote-cache``, ``ASYNCVK_REMOTE_CACHE``).
    """
    shown = without_password(url)  # an error message never shows the password
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError as exc:
        raise ValueError(f"{where} {shown!r}: not a URL ({exc})") from None
    if parts.scheme not in SCHEMES:
        raise ValueError(
            f"{where} {shown!r}: unsupported scheme {parts.scheme!r} "
            f"(expected {', '.join(s + '://' for s in SCHEMES)})"
        )
    if parts.scheme != "unix" and not parts.hostname:
        raise ValueError(f"{where} {shown!r}: no host (expected redis://HOST:PORT/DB)")
    knobs: dict[str, float | int] = {}
    rest = []
    for name, text in parse_qsl(parts.query, keep_blank_values=True):
        if name not in _KNOBS:
            rest.append((name, text))  # the store's own (redis: db=, ...)
            continue
        convert, least = _KNOBS[name]
        try:
            value = convert(text)
        except ValueError:
            raise ValueError(f"{where}: {name}={text!r} is not a number") from None
        if not math.isfinite(value) or value < least:
            raise ValueError(f"{where}: {name}={text!r} must be at least {least}")
        knobs[name] = value
    store_url = urlunsplit(parts._replace(query=urlencode(rest)))
    return RemoteSettings(store_url, **knobs)  # type: ignore[arg-type]


class RemoteStore(Protocol):
    """What the remote tier asks of a store. Every method may raise RemoteStoreError."""

    async def get_many(self, keys: Sequence[str], limit: int, budget: ReadBudget) -> list[Read]:
        """Each key's :data:`Read`: its value, with no value longer than ``limit`` bytes read
        whole, and none read that does not fit in ``budget`` (what is read is taken from it)."""
        ...

    async def get_with_newest(
        self, keys: Sequence[str], limit: int, budget: ReadBudget, index: str, count: int
    ) -> tuple[list[Read], list[str]]:
        """``get_many(keys, limit, budget)`` and ``newest_members(index, count)`` at once."""
        ...

    async def exists_many(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key holds a value."""
        ...

    async def add(self, key: str, value: bytes, ttl: float) -> bool:
        """Write ``value`` unless the key holds one (atomic); False when it did."""
        ...

    async def replace_bad(self, key: str, value: bytes, ttl: float, bad: BadValue) -> WriteOutcome:
        """Write ``value`` where the key still holds ``bad`` or nothing, in one atomic step;
        any other value (another writer's, good or bad) is kept."""
        ...

    async def delete_bad(self, key: str, bad: BadValue, index: str | None = None) -> bool:
        """Delete the key where it still holds ``bad``, in one atomic step (and take it off the
        set ``index``); whether it did."""
        ...

    async def newest_members(self, index: str, count: int) -> list[str]:
        """The newest ``count`` members of a set of keys, newest first (none where the key
        holds something other than a set: :meth:`add_member` replaces that)."""
        ...

    async def add_member(
        self, index: str, member: str, ttl: float, *, drop: Sequence[str], keep: int
    ) -> None:
        """Add ``member`` as the newest, remove ``drop``, keep only the ``keep`` newest; a
        value of another type at ``index`` is deleted first."""
        ...

    async def scan(self, pattern: str) -> list[str]:
        """Every key matching a glob ``pattern`` (for ``asyncvk cache pull``)."""
        ...

    async def aclose(self) -> None: ...


def os_reason(exc: OSError) -> str:
    """The system's words for an OSError ("connection refused"); a name lookup's errno is
    negative, and os.strerror would call it "unknown error -2"."""
    errno = exc.errno or 0
    return os.strerror(errno).lower() if errno > 0 else (exc.strerror or str(exc))
