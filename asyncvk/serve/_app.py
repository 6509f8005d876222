"""The inference server behind ``asyncvk serve``: an aiohttp app around one or more models.

Why aiohttp: one well-maintained package gives both the asyncio server and the client the tests
use, with graceful SIGTERM handling (``run_app``) and streaming request bodies, and it adds no
ASGI layer between the event loop and the Net.

It speaks the Open Inference Protocol (``/v2/...``, :mod:`asyncvk.serve._oip`) and its own
``POST /infer``. Each model has its Net and its dynamic batcher (:mod:`asyncvk.serve._batcher`):
concurrent requests of one shape join one GPU submission. All models share one device and,
on the GPU, one pipeline cache.

The app accepts connections at once and loads the models concurrently in a background task:
``/ready`` answers 503 until every one is loaded (and, with ``warm_up`` shapes, has run once on
zeros: the first run of a shape pays for its plan and, on lavapipe, for compiling every shader,
0.5-0.9 s for the test models, so the warm-up keeps that off the first request). The cache
folder saves in the background after loading and is flushed at shutdown, off the request path.

A malformed or hostile request gets a 4xx with a one-line JSON message and leaves no traceback:
a .npy body is checked against its header and the size limits before it is allocated
(:mod:`asyncvk.serve._body`, :mod:`asyncvk.net._input_limits`: 400 when they disagree, 413 when it
is too large), the whole request's decoded bytes are bounded by ``max_body`` (413 as soon as they
pass it; before ``100 Continue`` when ``Content-Length`` already does), a body that does not
arrive whole within ``body_timeout`` is a 408, and a client that goes away mid-body is one debug
line and a count in ``asyncvk_client_disconnects_total``, not an error. JSON has no NaN or
Infinity: a JSON request holding them is a 400, and non-finite outputs are written as ``null``,
with their count in the reply's ``non_finite`` field.

Memory follows the load, not the clients: requests wait in their model's queue in arrival
order, ``max_queue`` bounds how many wait, beyond which the answer is a 503 with
``Retry-After``; each batch needs a plan (its blob memory), at most
``Option.max_plans_per_shape`` per batch size. Plans idle for ``Option.plan_idle_seconds`` are
released (down to ``Option.idle_plans_per_shape``), so what a burst took is given back after it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from aiohttp import web

from ..net._option import Option
from ..net._plan_settings import check_settings
from ._batcher import BatchSettings
from ._body import BODY_TIMEOUT, BODY_TIMEOUT_KEY
from ._metrics import metrics
from ._npy_infer import expect_continue, infer, ready
from ._oip import MODELS_KEY, REPOSITORY_KEY, add_routes
from ._repository import ModelFiles, Repository, name_for
from ._state import GRPC_GRACE, MAX_QUEUE, NET_KEY, STATE_KEY, ServerState

log = logging.getLogger("asyncvk.serve")


def create_app(
    param: str,
    model: str,
    *,
    name: str | None = None,
    **settings: Any,
) -> web.Application:
    """The app for one model (named ``name``, by default after its files; see
    :func:`create_models_app` for the settings)."""
    return create_models_app([ModelFiles(name or name_for(param), param, model)], **settings)


def create_models_app(
    models: list[ModelFiles],
    *,
    option: Option | None = None,
    max_body: int = 64 << 20,
    warm_up: Mapping[str, tuple[int, ...]] | None = None,
    body_timeout: float = BODY_TIMEOUT,
    exit_on_load_error: bool = False,
    max_queue: int = MAX_QUEUE,
    batching: BatchSettings | None = None,
    folder: str | None = None,
    poll_seconds: float = 0.0,
    warm_up_batches: bool = False,
    grpc_address: str | None = None,
    reuse_port: bool = False,
    devices: Sequence[int] | Literal["all"] | None = None,
) -> web.Application:
    """The app: loads the models in the background once it starts; mount it anywhere.

    ``max_body`` bounds a request's bytes, decoded and over all its parts (else 413).
    ``warm_up`` maps input names to shapes: one inference on zeros runs before ``/ready`` (with
    several models, each takes the shapes of its own inputs).
    ``body_timeout`` is the seconds a request's whole body may take to arrive (else 408).
    ``exit_on_load_error``: a model that fails to load shuts the process down (SIGTERM to
    itself, exit status 1) so that a supervisor restarts it; else ``/ready`` reports the error.
    ``max_queue``: requests that may wait per model (beyond it, 503); it takes the place of
    ``batching.max_queue``. ``option``'s ``max_plans_per_shape``, ``idle_plans_per_shape``
    and ``plan_idle_seconds`` say how many plans, so how much working memory, a burst may take
    and how soon it is given back; its ``graph_key`` names the cache folder's entry of a lone
    model (each model's name otherwise). ``folder``: the models came from it (``--models``), and
    a load through the protocol's repository extension may name any model in it;
    ``poll_seconds`` (with a folder) brings the models in line with it that often.
    ``warm_up_batches``: the warm-up also records the plan of every batch size the batcher
    makes. ``grpc_address`` ("host:port"): the protocol over gRPC there too, from startup
    (``reuse_port``: beside other processes on that port). ``devices``: each model on every
    one of these devices (``"all"``: each Vulkan device), its batches sent to the one that will
    finish first, a device that fails taken out (``asyncvk.NetGroup``).
    """
    if not body_timeout > 0:
        raise ValueError(f"body_timeout must be positive, got {body_timeout}")
    if max_body < 1:
        raise ValueError(f"max_body must be at least 1 byte, got {max_body}")
    if not models:
        raise ValueError("no model to serve")
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise ValueError(f"two models have one name: {sorted(names)}")
    option = option or Option()
    check_settings(  # refused now, not once the model has loaded
        option.max_plans_per_shape,
        option.idle_plans_per_shape,
        option.plan_idle_seconds,
        option.max_waiting_per_shape,
    )
    batching = dataclasses.replace(batching or BatchSettings(), max_queue=max(max_queue, 1))
    app = web.Application(client_max_size=max_body)
    repository = Repository(
        models,
        option=option,
        batching=batching,
        warm_up=warm_up,
        folder=folder,
        warm_up_batches=warm_up_batches,
        devices=devices,
    )
    state = ServerState()
    app[REPOSITORY_KEY] = repository
    app[MODELS_KEY] = repository.models
    app[NET_KEY] = next(iter(repository.models.values())).net
    app[STATE_KEY] = state
    app[BODY_TIMEOUT_KEY] = float(body_timeout)

    async def on_startup(app: web.Application) -> None:
        if grpc_address is not None:
            from ._grpc import create_grpc_server

            state.grpc, state.grpc_port = create_grpc_server(
                repository.models, grpc_address, reuse_port=reuse_port
            )
            await state.grpc.start()
        state.loading = asyncio.create_task(_load_all(repository, state, exit_on_load_error))
        if folder is not None and poll_seconds > 0:
            state.polling = asyncio.create_task(_poll(repository, state, poll_seconds))

    app.on_startup.append(on_startup)
    app.on_cleanup.append(_on_cleanup)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/infer", infer, expect_handler=expect_continue)
    add_routes(app)
    return app


async def _load_all(repository: Repository, state: ServerState, exit_on_load_error: bool) -> None:
    """Every model at once; the server is ready when all are (a failure goes to ``/ready`` and,
    with ``exit_on_load_error``, shuts it down)."""
    start = time.perf_counter()
    try:
        await repository.open()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        state.error = f"{type(exc).__name__}: {exc}"
        log.error("a model failed to load: %s", state.error)
        if exit_on_load_error:
            state.exit_code = 1
            log.error("shutting down (--stay-up-on-load-error keeps the server up instead)")
            os.kill(os.getpid(), signal.SIGTERM)
        return
    state.load_seconds = time.perf_counter() - start
    state.warm_up_seconds = max((m.warm_up_seconds for m in repository.models.values()), default=0)
    state.ready = True
    log.info("ready in %.2f s", state.load_seconds)


async def _poll(repository: Repository, state: ServerState, seconds: float) -> None:
    """``--poll-models``: the models follow their folder, once the first load is done."""
    if state.loading is not None:
        await asyncio.wait([state.loading])
    while True:
        await asyncio.sleep(seconds)
        await repository.poll()


async def _on_cleanup(app: web.Application) -> None:
    """Shutdown: stop a load still running, then retire every model (its queued requests
    answered, its cache folder saved), then the pipeline cache they shared."""
    state = app[STATE_KEY]
    log.info("shutting down")
    if state.grpc is not None:
        await state.grpc.stop(GRPC_GRACE)
    for task in (state.polling, state.loading):
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
    await app[REPOSITORY_KEY].close()
