"""Opening the store a remote cache URL names: a probe with the standard library before the
client's imports, the client imported on a thread while the device opens, and the store a load
gets (``_redis_reads``' fast reads where the URL allows, redis-py otherwise).

It imports both Redis modules, which import the store's types from ``_remote_store``: the
store's face stays a leaf they share.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import sys
import threading
from urllib.parse import urlsplit

from .._threads import run_sync
from ._remote_store import RemoteSettings, RemoteStore, RemoteStoreError, os_reason


def _missing_package(settings: RemoteSettings, cause: ImportError | None = None) -> ValueError:
    """The set-up error for a store whose client package is not installed."""
    why = "" if cause is None else f": {cause}"
    return ValueError(
        f"the remote cache {settings.display} needs the 'redis' package "
        f"(pip install 'asyncvk-runtime[remote]'){why}"
    )


def _check_store_module(settings: RemoteSettings) -> None:
    """ValueError naming the package a scheme needs when it is missing (found without importing
    it: a configured remote cache that cannot be used is a set-up error, not a miss)."""
    if importlib.util.find_spec("redis") is None:
        raise _missing_package(settings)


async def probe_store(settings: RemoteSettings) -> None:
    """Connect to the store's host and port with the standard library and hang up, so that a
    server that is down costs neither the Redis client's imports (~0.2 s, which slowed every
    load beside them) nor its connection set-up; RemoteStoreError when it does not answer.
    A unix socket is not probed."""
    _check_store_module(settings)
    parts = urlsplit(settings.url)
    if settings.scheme == "unix" or parts.hostname is None:
        return
    port = parts.port or 6379
    try:
        async with asyncio.timeout(settings.connect_timeout):
            _, writer = await asyncio.open_connection(parts.hostname, port)
    except TimeoutError:
        raise RemoteStoreError(f"connect to {settings.display}: timed out") from None
    except OSError as exc:
        raise RemoteStoreError(f"connect to {settings.display}: {os_reason(exc)}") from exc
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass


#: Set when a thread starts importing the client (:func:`start_client_import`, after a probe).
_import_started = threading.Event()


def client_import_started() -> bool:
    """Whether the client is imported, or on its way: a probe before opening the store would
    save nothing then (redis-py's own connection finds a server that is down)."""
    return _import_started.is_set() or f"{__package__}._redis_store" in sys.modules


def _import_client() -> None:
    try:
        importlib.import_module(f"{__package__}._redis_store")
    except ImportError:  # open_store raises it, with the package named, where it is needed
        pass


async def start_client_import(settings: RemoteSettings) -> bool:
    """For a process that will read the store (its local cache is empty): import the client
    its reads need now, while the main thread waits for the device, so that the load finds it
    imported. With fast reads that is one module of this package. Otherwise it is redis-py
    (~0.1-0.2 s of imports), on a thread, once a probe finds the store answering: a store that
    does not answer costs nothing, the load's own probe reports it. Whether the import was
    started."""
    if _reads_fast(settings):
        return True
    try:
        await probe_store(settings)
    except (RemoteStoreError, ValueError):
        return False
    _import_started.set()
    threading.Thread(target=_import_client, name="asyncvk-import-redis", daemon=True).start()
    return True


def open_store(settings: RemoteSettings) -> RemoteStore:
    """The store a URL names, made with redis-py for everything; a ValueError names the package
    a scheme needs when it is missing (a configured remote cache that cannot be used is a
    set-up error, not a miss)."""
    if settings.scheme in ("redis", "rediss", "unix"):
        try:
            from ._redis_store import RedisStore
        except ImportError as exc:
            raise _missing_package(settings, exc) from exc
        return RedisStore(settings)
    raise ValueError(f"no store for {settings.display}")


def _reads_fast(settings: RemoteSettings) -> bool:
    """Whether a load reads this store without redis-py: the URL is one ``_redis_reads``
    reads the same way."""
    try:
        from ._redis_reads import read_address
    except ImportError:
        return False
    return read_address(settings.url) is not None


async def connect_store(settings: RemoteSettings) -> RemoteStore:
    """The store for a load: with fast reads, made at once (its first read is the probe);
    otherwise after a probe finds the server answering (unless the client is on its way
    already), and made on a thread, since that imports the client."""
    _check_store_module(settings)  # writes need redis-py: a missing package is a set-up error
    if _reads_fast(settings):
        from ._redis_reads import FastReadRedisStore, read_address

        address = read_address(settings.url)
        assert address is not None
        return FastReadRedisStore(settings, address)
    if not client_import_started():
        await probe_store(settings)
    return await run_sync(open_store, settings)
