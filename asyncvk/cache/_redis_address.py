"""Where a ``redis://`` or ``unix://`` URL's server is, read as redis-py reads it.

Only what redis-py would read the same way goes through :mod:`._redis_reads`' own connection:
``redis://`` and ``unix://`` URLs with a user, a password and a database at most. TLS or any
other connection option keeps redis-py for reads too (:func:`read_address` returns None).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

#: The query parameters redis-py would read that the reads' own connection reads the same way.
_READ_PARAMETERS = frozenset({"db"})


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
