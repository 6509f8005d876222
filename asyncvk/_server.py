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
(:mod:`asyncvk._server_body`, :mod:`asyncvk._input_limits`: 400 when they disagree, 413 when it
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
from collections import Counter
from collections.abc import Mapping
from typing import Any

from aiohttp import HttpVersion11, web
from aiohttp.http_exceptions import HttpProcessingError

from ._errors import AsyncVkError, InputTooLargeError
from ._server_body import (
    BODY_TIMEOUT,
    BODY_TIMEOUT_KEY,
    ClientGone,
    RequestError,
    encode_reply,
    max_body_message,
    read_inputs,
)
from .cache._remote_state import metric_lines as remote_metric_lines
from .net._net import Net
from .net._option import Option
from .net._plan_pool import check_settings
from .serve._batcher import BatchSettings, QueueFull, with_batch_axis
from .serve._oip import MODELS_KEY, REPOSITORY_KEY, add_routes
from .serve._repository import ModelFiles, Repository, ServedModel, name_for

log = logging.getLogger("asyncvk.serve")

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: requests that may wait, per model (serve --max-queue): beyond it, 503
MAX_QUEUE = 256
#: seconds a client told 503 (a full queue) is asked to wait before trying again
RETRY_AFTER = 1


#: seconds calls in flight over gRPC may take to finish at shutdown
GRPC_GRACE = 5.0


class ServerState:
    """Load progress and Prometheus counters."""

    def __init__(self) -> None:
        self.loading: asyncio.Task[None] | None = None
        self.polling: asyncio.Task[None] | None = None
        #: the gRPC server (``grpc_address``) and the port it listens on
        self.grpc: Any = None
        self.grpc_port: int | None = None
        self.ready = False
        self.error: str | None = None
        self.load_seconds = 0.0
        self.warm_up_seconds = 0.0
        self.codes: Counter[int] = Counter()
        self.buckets = [0] * len(BUCKETS)
        self.latency_sum = 0.0
        self.latency_count = 0
        self.disconnects = 0
        #: The process's exit status when loading failed and the server shut itself down.
        self.exit_code = 0

    def observe(self, seconds: float) -> None:
        self.latency_sum += seconds
        self.latency_count += 1
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.buckets[i] += 1


NET_KEY: web.AppKey[Net] = web.AppKey("net", Net)
STATE_KEY: web.AppKey[ServerState] = web.AppKey("state", ServerState)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def infer(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    start = time.perf_counter()
    try:
        response = await _infer(request, state)
    except ClientGone as exc:  # nobody to answer; not a server error
        log.debug("client %s went away before its request body arrived: %s", request.remote, exc)
        state.disconnects += 1
        return _error(400, "client went away")
    except Exception as exc:  # a server bug still answers JSON and shows up in the metrics
        log.exception("inference failed")
        response = _error(500, f"{type(exc).__name__}: {exc}")
    state.codes[response.status] += 1
    if response.status == 413:  # the client is told not to send on this connection
        response.force_close()
    if response.status == 408:  # the rest of the body may never come: answer, then hang up
        response.force_close()
        await response.prepare(request)
        await response.write_eof()
        request.protocol.force_close()  # else aiohttp lingers 10 s reading what is left
    if response.status == 200:
        state.observe(time.perf_counter() - start)
    return response


async def _infer(request: web.Request, state: ServerState) -> web.Response:
    models = request.app[MODELS_KEY]
    name = request.query.get("model")
    if name is None and len(models) > 1:
        return _error(400, f"name the model: /infer?model=NAME (models: {', '.join(models)})")
    model = models.get(name) if name is not None else next(iter(models.values()))
    if model is None:
        return _error(400, f"unknown model {name!r} (models: {', '.join(models)})")
    if not model.ready:
        return _error(503, model.error or state.error or "the model is still loading")
    net = model.net
    outputs = request.query.getall("output", []) or net.output_names
    for output in outputs:
        if output not in net.blob_index:
            return _error(400, f"unknown output {output!r} (outputs: {net.output_names})")
    try:
        inputs, encoding = await read_inputs(request, net)
        if not inputs:
            return _error(400, "no inputs in the request")
        for input_name in inputs:
            if input_name not in net.input_names:
                return _error(400, f"unknown input {input_name!r} (inputs: {net.input_names})")
        batched, items = with_batch_axis(net, inputs)
        results = await model.batcher.infer(items, outputs)
    except QueueFull as exc:
        log.info("request refused, busy: %s", exc)
        response = _error(503, f"busy: {exc} (server --max-queue); try again")
        response.headers["Retry-After"] = str(RETRY_AFTER)
        return response
    except RequestError as exc:
        return _error(exc.status, str(exc))
    except web.HTTPClientError as exc:  # aiohttp's own body checks: same JSON shape
        return _error(exc.status, exc.text or exc.reason)
    except InputTooLargeError as exc:
        return _error(413, str(exc))
    except MemoryError as exc:  # a size no check foresaw: still the client's, and one line
        log.warning("request refused, out of memory: %s", exc)
        return _error(413, f"out of memory: {exc}")
    except (AsyncVkError, ValueError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        return _error(400, str(message))
    if not batched:
        results = {n: a[0] for n, a in results.items()}
    body, kind = await asyncio.to_thread(encode_reply, results, encoding)
    return web.Response(body=body, content_type=kind)


async def expect_continue(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue``: a ``Content-Length`` over ``max_body`` is answered 413 at once,
    so the client never sends the body; else ``100 Continue`` (aiohttp's own handler's rule)."""
    length = request.content_length
    if length is not None and length > request.client_max_size:
        request.app[STATE_KEY].codes[413] += 1
        response = _error(413, f"{max_body_message(request)} (Content-Length: {length:,})")
        response.force_close()
        await response.prepare(request)
        await response.write_eof()
        request.protocol.force_close()  # no body is coming: else aiohttp waits 10 s for one
        return response
    expect = request.headers.get("Expect", "")
    if request.version != HttpVersion11:
        return None
    if expect.lower() != "100-continue":
        return _error(417, f"unknown Expect: {expect}")
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # the reply's size, as the access log counts it, starts here
    return None


async def ready(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    if state.ready:
        return web.json_response({"ready": True})
    if state.error:
        return web.json_response({"ready": False, "error": state.error}, status=500)
    return web.json_response({"ready": False}, status=503)


#: what each metric means, for its ``# HELP`` line
HELP = {
    "asyncvk_requests_total": "HTTP inference requests answered, by status code",
    "asyncvk_request_duration_seconds": "time from a request's arrival to its answer",
    "asyncvk_client_disconnects_total": "clients gone before their request body arrived",
    "asyncvk_model_requests_total": "requests that reached the model's batcher",
    "asyncvk_model_inferences_total": "items inferred (a request of N items counts N)",
    "asyncvk_model_failures_total": "requests whose batch failed",
    "asyncvk_model_refused_total": "requests refused: the model's queue was full (503)",
    "asyncvk_model_dropped_total": "requests dropped before the GPU: their client went away",
    "asyncvk_model_batches_total": "batches run: one GPU submission per segment each",
    "asyncvk_model_queue_seconds_total": "time requests waited before their batch started",
    "asyncvk_model_compute_seconds_total": "time batches took, from start to outputs",
    "asyncvk_model_batch_size": "batches by their number of items",
    "asyncvk_model_queue_waiting": "requests waiting in the model's queue now",
    "asyncvk_model_batches_running": "batches of the model on the GPU now",
    "asyncvk_model_ready": "1 once the model is loaded",
    "asyncvk_model_load_seconds": "time the model took to load (and warm up)",
    "asyncvk_model_warm_up_seconds": "time the model's warm-up inference took",
    "asyncvk_model_load_warm": "1 when the model's cache folder was warm",
    "asyncvk_plans": "plans (working memory) made and not released",
    "asyncvk_plans_lent": "plans in use by an inference",
    "asyncvk_plans_waiting": "inferences waiting for a plan",
    "asyncvk_plans_peak": "the most plans one request kind has held at once",
    "asyncvk_plans_built_total": "plans made",
    "asyncvk_plans_released_total": "plans released",
    "asyncvk_device_memory_reserved_bytes": "device memory the allocator holds",
    "asyncvk_device_memory_used_bytes": "device memory in use",
    "asyncvk_pipeline_cache_live_hits": "pipelines found live in the cache",
    "asyncvk_spirv_compiles": "shaders compiled from GLSL",
    "asyncvk_spirv_packaged": "shaders taken from the install's SPIR-V",
    "asyncvk_spirv_cache_hits": "shaders taken from a cache file",
    "asyncvk_pipelines_created": "Vulkan pipelines created",
    "asyncvk_ready": "1 once every model is loaded",
}


def with_help(lines: list[str]) -> list[str]:
    """``lines`` with a ``# HELP`` line before each ``# TYPE`` line."""
    out = []
    for line in lines:
        if line.startswith("# TYPE "):
            name = line.split()[2]
            text = HELP.get(name, name.removeprefix("asyncvk_").replace("_", " "))
            out.append(f"# HELP {name} {text}")
        out.append(line)
    return out


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    models = request.app[MODELS_KEY]
    lines = ["# TYPE asyncvk_requests_total counter"]
    for code, count in sorted(state.codes.items()):
        lines.append(f'asyncvk_requests_total{{code="{code}"}} {count}')
    lines.append("# TYPE asyncvk_request_duration_seconds histogram")
    for bound, count in zip(BUCKETS, state.buckets, strict=True):
        lines.append(f'asyncvk_request_duration_seconds_bucket{{le="{bound}"}} {count}')
    lines.append(f'asyncvk_request_duration_seconds_bucket{{le="+Inf"}} {state.latency_count}')
    lines.append(f"asyncvk_request_duration_seconds_sum {state.latency_sum:.6f}")
    lines.append(f"asyncvk_request_duration_seconds_count {state.latency_count}")
    lines.append("# TYPE asyncvk_client_disconnects_total counter")
    lines.append(f"asyncvk_client_disconnects_total {state.disconnects}")
    lines += _model_lines(list(models.values()))
    net = next(iter(models.values())).net if models else request.app[NET_KEY]
    lines += _plan_lines(net)
    cache = request.app[REPOSITORY_KEY].cache or net.cache
    if cache is not None:
        s = cache.statistics()
        for name, value in (
            ("pipeline_cache_live_hits", s.live_hits),
            ("spirv_compiles", s.spirv_compiles),
            ("spirv_packaged", s.spirv_packaged),
            ("spirv_cache_hits", s.spirv_hits),
            ("pipelines_created", s.pipelines_created),
        ):
            lines.append(f"# TYPE asyncvk_{name} counter")
            lines.append(f"asyncvk_{name} {value}")
    lines += remote_metric_lines(net.remote_status)
    warm = 1 if net.cache_status and net.cache_status.get("loaded") else 0
    lines += [
        "# TYPE asyncvk_model_load_seconds gauge",
        f"asyncvk_model_load_seconds {state.load_seconds:.6f}",
        "# TYPE asyncvk_model_warm_up_seconds gauge",
        f"asyncvk_model_warm_up_seconds {state.warm_up_seconds:.6f}",
        "# TYPE asyncvk_model_load_warm gauge",
        f"asyncvk_model_load_warm {warm}",
        "# TYPE asyncvk_ready gauge",
        f"asyncvk_ready {int(state.ready)}",
    ]
    return web.Response(
        body=("\n".join(with_help(lines)) + "\n").encode(),
        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
    )


def _model_lines(models: list[ServedModel]) -> list[str]:
    """Each model's batcher: requests, queue time, batch sizes and compute time, by label."""
    lines: list[str] = []

    def family(name: str, kind: str, value: Any) -> None:
        lines.append(f"# TYPE {name} {kind}")
        for m in models:
            lines.append(f'{name}{{model="{m.name}"}} {value(m)}')

    def stats(m: ServedModel) -> Any:
        return m.batcher.statistics

    family("asyncvk_model_requests_total", "counter", lambda m: stats(m).requests)
    family("asyncvk_model_inferences_total", "counter", lambda m: stats(m).items)
    family("asyncvk_model_failures_total", "counter", lambda m: stats(m).failed)
    family("asyncvk_model_refused_total", "counter", lambda m: stats(m).refused)
    family("asyncvk_model_dropped_total", "counter", lambda m: stats(m).dropped)
    family("asyncvk_model_batches_total", "counter", lambda m: stats(m).batches)
    family(
        "asyncvk_model_queue_seconds_total", "counter", lambda m: f"{stats(m).queue_seconds:.6f}"
    )
    family(
        "asyncvk_model_compute_seconds_total",
        "counter",
        lambda m: f"{stats(m).compute_seconds:.6f}",
    )
    family("asyncvk_model_queue_waiting", "gauge", lambda m: m.batcher.waiting())
    family("asyncvk_model_batches_running", "gauge", lambda m: m.batcher.inflight())
    family("asyncvk_model_ready", "gauge", lambda m: int(m.ready))
    lines.append("# TYPE asyncvk_model_batch_size histogram")
    for m in models:
        sizes = stats(m).batch_sizes
        count = 0
        for bound in BATCH_BUCKETS:
            count = sum(n for size, n in sizes.items() if size <= bound)
            lines.append(
                f'asyncvk_model_batch_size_bucket{{model="{m.name}",le="{bound}"}} {count}'
            )
        total = sum(sizes.values())
        lines.append(f'asyncvk_model_batch_size_bucket{{model="{m.name}",le="+Inf"}} {total}')
        lines.append(f'asyncvk_model_batch_size_sum{{model="{m.name}"}} {stats(m).items}')
        lines.append(f'asyncvk_model_batch_size_count{{model="{m.name}"}} {total}')
    return lines


#: the batch size histogram's bounds
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


def _plan_lines(net: Net) -> list[str]:
    """The plan pool (working memory by input shape) and the device memory it lives in."""
    model = net.gpu_model
    if model is None:
        return []
    stats = model.plans.statistics()
    memory = model.device.allocator.stats()
    lines = []
    for name, kind, value in (
        ("plans", "gauge", stats.plans),
        ("plans_lent", "gauge", stats.lent),
        ("plans_waiting", "gauge", stats.waiting),
        ("plans_peak", "gauge", stats.peak_plans),
        ("plans_built_total", "counter", stats.built),
        ("plans_released_total", "counter", stats.released),
        ("device_memory_reserved_bytes", "gauge", memory["reserved_bytes"]),
        ("device_memory_used_bytes", "gauge", memory["used_bytes"]),
    ):
        lines += [f"# TYPE asyncvk_{name} {kind}", f"asyncvk_{name} {value}"]
    return lines


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
    (``reuse_port``: beside other processes on that port).
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
    )
    state = ServerState()
    app[REPOSITORY_KEY] = repository
    app[MODELS_KEY] = repository.models
    app[NET_KEY] = next(iter(repository.models.values())).net
    app[STATE_KEY] = state
    app[BODY_TIMEOUT_KEY] = float(body_timeout)

    async def on_startup(app: web.Application) -> None:
        if grpc_address is not None:
            from .serve._grpc import create_grpc_server

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
    ``grpc_port``: the protocol over gRPC on that port of ``host`` too.
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
