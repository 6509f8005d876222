"""``asyncvk serve``'s process: the app run until SIGTERM or SIGINT on uvloop where it is
installed, its console, and how it hands freed memory back."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from ..net._option import Option
from ._app import create_models_app
from ._batcher import BatchSettings
from ._body import BODY_TIMEOUT
from ._repository import ModelFiles
from ._state import MAX_QUEUE, STATE_KEY

log = logging.getLogger("asyncvk.serve")


class _MalformedHttpIsOneLine(logging.Filter):
    """aiohttp answers a request it cannot parse (bad framing, a header over 8 KiB) with a 400,
    then logs it at ERROR with a traceback; this makes it one debug line, as a client's fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            detail = " ".join(str(exc).split())
            record.msg = f"{record.getMessage()}: {type(exc).__name__}: {detail}"
            record.args = ()
            record.exc_info = None
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def run_server(
    models: list[ModelFiles],
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    cache_dir: str | None = None,
    graph_key: str | None = None,
    remote_cache: str | None = None,
    device: int | None = None,
    devices: Sequence[int] | Literal["all"] | None = None,
    max_body: int = 64 << 20,
    warm_up: Mapping[str, tuple[int, ...]] | None = None,
    body_timeout: float = BODY_TIMEOUT,
    stay_up_on_load_error: bool = False,
    access_log: bool = False,
    max_plans_per_shape: int = Option.max_plans_per_shape,
    idle_plans_per_shape: int = Option.idle_plans_per_shape,
    plan_idle_seconds: float = Option.plan_idle_seconds,
    max_queue: int = MAX_QUEUE,
    batching: BatchSettings | None = None,
    folder: str | None = None,
    poll_seconds: float = 0.0,
    reuse_port: bool = False,
    warm_up_batches: bool = False,
    grpc_port: int | None = None,
) -> int:
    """Serve ``models`` until SIGTERM/SIGINT; shutdown flushes the cache and releases the GPU.

    ``max_plans_per_shape``, ``idle_plans_per_shape``, ``plan_idle_seconds`` and ``max_queue``
    bound the working memory and the requests waiting for it (see :func:`create_app`).

    Logs to stderr: loading, ready (with the load time and whether the cache was warm), the
    cache save, shutdown and, with ``access_log``, one line per request (aiohttp's format).
    ``grpc_port``: the protocol over gRPC on that port of ``host`` too. ``devices``: every model
    on each of these devices (``"all"``: every one), batches spread over them (:class:`NetGroup`).
    Returns the exit status: 1 when the model failed to load (unless ``stay_up_on_load_error``).
    """
    _log_to_console()
    _map_large_buffers()
    option = Option(
        cache_dir=cache_dir,
        graph_key=graph_key,
        vulkan_device=device,
        remote_cache=remote_cache,
        max_plans_per_shape=max_plans_per_shape,
        idle_plans_per_shape=idle_plans_per_shape,
        plan_idle_seconds=plan_idle_seconds,
    )
    app = create_models_app(
        models,
        option=option,
        max_body=max_body,
        warm_up=warm_up,
        body_timeout=body_timeout,
        exit_on_load_error=not stay_up_on_load_error,
        max_queue=max_queue,
        batching=batching,
        folder=folder,
        poll_seconds=poll_seconds,
        warm_up_batches=warm_up_batches,
        devices=devices,
        grpc_address=None if grpc_port is None else f"{host}:{grpc_port}",
        reuse_port=reuse_port,
    )

    def announce(*_: Any) -> None:
        print(f"serving on http://{host}:{port}", flush=True)
        grpc_bound = app[STATE_KEY].grpc_port
        if grpc_bound is not None:
            print(f"serving gRPC on {host}:{grpc_bound}", flush=True)

    logging.getLogger("aiohttp.server").addFilter(_MalformedHttpIsOneLine())
    try:
        web.run_app(
            app,
            host=host,
            port=port,
            print=announce,
            handle_signals=True,
            access_log=logging.getLogger("aiohttp.access") if access_log else None,
            loop=_event_loop(),
            reuse_port=reuse_port or None,
        )
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:  # the address, said as the user typed it
            raise OSError(exc.errno, exc.strerror, f"{host}:{port}") from exc
        raise
    return app[STATE_KEY].exit_code


def _event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (its sockets and callbacks cost less host time
    a request), unless ``ASYNCVK_EVENT_LOOP=asyncio``; else asyncio's own."""
    if os.environ.get("ASYNCVK_EVENT_LOOP", "").strip().lower() != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            log.info("event loop: uvloop %s", uvloop.__version__)
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


#: glibc's mallopt parameter for the size from which malloc maps memory of its own
_M_MMAP_THRESHOLD = -3
#: request bodies and arrays from this size up are mapped, and unmapped when freed
MMAP_THRESHOLD = 128 << 10


def _map_large_buffers() -> None:
    """Fix glibc's mmap threshold (unless ``MALLOC_MMAP_THRESHOLD_`` sets it), so a burst's
    request bodies and arrays go back to the OS when freed. Left to itself, glibc raises the
    threshold to the largest block freed, and from then on keeps such buffers in its heap,
    fragmented: on lavapipe, after bursts of 10 to 200 requests of 768 KiB, a server's RSS
    settled up to 210 MB above where its first request had left it, instead of up to 35 MB,
    and the bursts took no longer (``benchmarks/server_memory.py``)."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc
        return
    mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def _log_to_console() -> None:
    """INFO lines on stderr for asyncvk and aiohttp's access log, unless logging is set up."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    for name in ("asyncvk", "aiohttp.access"):
        logging.getLogger(name).setLevel(logging.INFO)
