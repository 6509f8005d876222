"""The inference server behind ``asyncvk serve``: an aiohttp app around one shared Net.

Why aiohttp: one well-maintained package gives both the asyncio server and the client the tests
use, with graceful SIGTERM handling (``run_app``) and streaming request bodies, and it adds no
ASGI layer between the event loop and the Net.

The app accepts connections at once and loads the model in a background task: ``/ready``
answers 503 until it is loaded (and, with ``warm_up`` shapes, has run once on zeros: the first
run of a shape pays for its plan and, on lavapipe, for compiling every shader, 0.5-0.9 s for the
test models, so the warm-up keeps that off the first request). Requests share the Net (each
makes its own extractor), the cache folder saves in the background after loading and is flushed
at shutdown, off the request path.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
from aiohttp import BodyPartReader, web

from ._errors import AsyncVkError
from .net._net import Net
from .net._option import Option

log = logging.getLogger("asyncvk.serve")

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
JSON_LIMIT = 1 << 20  # values in a JSON request
# json.loads holds the GIL even in a worker thread, so the JSON body size bounds the event loop's
# stall (about 20 ms per MiB); bigger inputs belong in .npy, which parses without that cost.
JSON_BODY_LIMIT = 4 << 20


class ServerState:
    """Load progress and Prometheus counters."""

    def __init__(self) -> None:
        self.loading: asyncio.Task[None] | None = None
        self.ready = False
        self.error: str | None = None
        self.load_seconds = 0.0
        self.warm_up_seconds = 0.0
        self.codes: Counter[int] = Counter()
        self.buckets = [0] * len(BUCKETS)
        self.latency_sum = 0.0
        self.latency_count = 0

    def observe(self, seconds: float) -> None:
        self.latency_sum += seconds
        self.latency_count += 1
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.buckets[i] += 1


NET_KEY: web.AppKey[Net] = web.AppKey("net", Net)
STATE_KEY: web.AppKey[ServerState] = web.AppKey("state", ServerState)


class RequestError(Exception):
    """A client error: answered as ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


async def _body(request: web.Request) -> bytes:
    """The whole body; over ``client_max_size`` is a 413 with a JSON message, not aiohttp's text."""
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise RequestError(
            413, f"request body over {request.client_max_size} bytes (server --max-body)"
        ) from None


def _npy(data: bytes) -> np.ndarray:
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"body is not a valid .npy file: {exc}") from None
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "fiu":
        raise ValueError(f"dtype {getattr(array, 'dtype', '?')} is not a real number type")
    return array


def _json_inputs(body: bytes) -> dict[str, np.ndarray]:
    """Parse and convert off the event loop (bounded by JSON_BODY_LIMIT: it holds the GIL)."""
    try:
        raw = json.loads(body)["inputs"]
        inputs = {str(k): np.asarray(v, dtype=np.float32) for k, v in raw.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f'expected JSON {{"inputs": {{"name": [...]}}}}: {exc}') from None
    if sum(a.size for a in inputs.values()) > JSON_LIMIT:
        raise ValueError(f"JSON inputs over {JSON_LIMIT} values: send .npy")
    return inputs


def _encode(result: np.ndarray, output: str, encoding: str) -> tuple[bytes, str]:
    """The reply body, off the event loop (a JSON reply still holds the GIL: use .npy for big)."""
    if encoding == "json":
        payload = {"outputs": {output: result.tolist()}, "shape": list(result.shape)}
        return json.dumps(payload).encode(), "application/json"
    buf = io.BytesIO()
    np.save(buf, result)
    return buf.getvalue(), "application/x-npy"


async def _inputs(request: web.Request, net: Net) -> tuple[dict[str, np.ndarray], str]:
    """The request's inputs by blob name, and the reply encoding ("npy" or "json")."""
    kind = request.content_type
    if kind == "application/x-npy":
        names = net.input_names
        if len(names) != 1:
            raise ValueError(f"the model has inputs {names}: send multipart/form-data")
        body = await _body(request)
        return {names[0]: await asyncio.to_thread(_npy, body)}, "npy"
    if kind == "multipart/form-data":
        inputs: dict[str, np.ndarray] = {}
        reader = await request.multipart()
        async for part in reader:
            if not isinstance(part, BodyPartReader) or part.name is None:
                raise ValueError("each multipart part must be one .npy file named after an input")
            try:
                data = await part.read()
            except web.HTTPRequestEntityTooLarge:
                raise RequestError(
                    413, f"a part over {request.client_max_size} bytes (server --max-body)"
                ) from None
            inputs[part.name] = await asyncio.to_thread(_npy, data)
        return inputs, "npy"
    if kind == "application/json":
        body = await _body(request)
        if len(body) > JSON_BODY_LIMIT:
            raise RequestError(413, f"JSON bodies over {JSON_BODY_LIMIT} bytes: send .npy")
        return await asyncio.to_thread(_json_inputs, body), "json"
    raise RequestError(
        415,
        f"unsupported content type {kind!r}; use application/x-npy, "
        "multipart/form-data or application/json",
    )


async def infer(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    start = time.perf_counter()
    try:
        response = await _infer(request, state)
    except Exception as exc:  # a server bug still answers JSON and shows up in the metrics
        log.exception("inference failed")
        response = _error(500, f"{type(exc).__name__}: {exc}")
    state.codes[response.status] += 1
    if response.status == 200:
        state.observe(time.perf_counter() - start)
    return response


async def _infer(request: web.Request, state: ServerState) -> web.Response:
    if not state.ready:
        return _error(503, state.error or "the model is still loading")
    net = request.app[NET_KEY]
    output = request.query.get("output") or net.output_names[-1]
    if output not in net.blob_index:
        return _error(400, f"unknown output {output!r} (outputs: {net.output_names})")
    try:
        inputs, encoding = await _inputs(request, net)
        if not inputs:
            return _error(400, "no inputs in the request")
        ex = net.create_extractor()
        for name, array in inputs.items():
            if name not in net.input_names:
                return _error(400, f"unknown input {name!r} (inputs: {net.input_names})")
            ex.input(name, np.asarray(array, dtype=np.float32))
        result = await ex.extract(output)
    except RequestError as exc:
        return _error(exc.status, str(exc))
    except web.HTTPClientError as exc:  # aiohttp's own body checks: same JSON shape
        return _error(exc.status, exc.text or exc.reason)
    except (AsyncVkError, ValueError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        return _error(400, str(message))
    body, kind = await asyncio.to_thread(_encode, result, output, encoding)
    return web.Response(body=body, content_type=kind)


async def ready(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    if state.ready:
        return web.json_response({"ready": True})
    if state.error:
        return web.json_response({"ready": False, "error": state.error}, status=500)
    return web.json_response({"ready": False}, status=503)


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    net = request.app[NET_KEY]
    lines = ["# TYPE asyncvk_requests_total counter"]
    for code, count in sorted(state.codes.items()):
        lines.append(f'asyncvk_requests_total{{code="{code}"}} {count}')
    lines.append("# TYPE asyncvk_request_duration_seconds histogram")
    for bound, count in zip(BUCKETS, state.buckets, strict=True):
        lines.append(f'asyncvk_request_duration_seconds_bucket{{le="{bound}"}} {count}')
    lines.append(f'asyncvk_request_duration_seconds_bucket{{le="+Inf"}} {state.latency_count}')
    lines.append(f"asyncvk_request_duration_seconds_sum {state.latency_sum:.6f}")
    lines.append(f"asyncvk_request_duration_seconds_count {state.latency_count}")
    if net.cache is not None:
        s = net.cache.statistics()
        for name, value in (
            ("pipeline_cache_live_hits", s.live_hits),
            ("spirv_compiles", s.spirv_compiles),
            ("spirv_cache_hits", s.spirv_hits),
            ("pipelines_created", s.pipelines_created),
        ):
            lines.append(f"# TYPE asyncvk_{name} counter")
            lines.append(f"asyncvk_{name} {value}")
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
        body=("\n".join(lines) + "\n").encode(),
        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
    )


async def _warm_up(net: Net, shapes: Mapping[str, tuple[int, ...]]) -> None:
    from ._runner import default_output

    ex = net.create_extractor()
    for name, shape in shapes.items():
        try:
            ex.input(name, np.zeros(shape, np.float32))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"warm-up input {name}={shape}: {exc}") from exc
    try:
        await ex.extract(default_output(net))
    except AsyncVkError as exc:
        raise ValueError(f"warm-up with {dict(shapes)}: {exc}") from exc


def create_app(
    param: str,
    model: str,
    *,
    option: Option | None = None,
    max_body: int = 64 << 20,
    warm_up: Mapping[str, tuple[int, ...]] | None = None,
) -> web.Application:
    """The app: loads the model in the background once it starts; mount it anywhere.

    ``warm_up`` maps input names to shapes: one inference on zeros runs before ``/ready``.
    """
    app = web.Application(client_max_size=max_body)
    net = Net(option)
    state = ServerState()
    app[NET_KEY] = net
    app[STATE_KEY] = state

    async def load() -> None:
        start = time.perf_counter()
        try:
            await net.load_param(param)
            await net.load_model(model)
            if warm_up:
                t0 = time.perf_counter()
                await _warm_up(net, warm_up)
                state.warm_up_seconds = time.perf_counter() - t0
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reported on /ready, the server stays up
            state.error = f"{type(exc).__name__}: {exc}"
            log.error("model failed to load: %s", state.error)
            return
        state.load_seconds = time.perf_counter() - start
        state.ready = True

    async def on_startup(app: web.Application) -> None:
        state.loading = asyncio.create_task(load())

    async def on_cleanup(app: web.Application) -> None:
        if state.loading is not None and not state.loading.done():
            state.loading.cancel()
            try:
                await state.loading
            except asyncio.CancelledError:
                pass
        await net.aclose()  # flushes the cache folder's save first

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/infer", infer)
    return app


def run_server(
    param: str,
    model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    cache_dir: str | None = None,
    graph_key: str | None = None,
    device: int | None = None,
    max_body: int = 64 << 20,
    warm_up: Mapping[str, tuple[int, ...]] | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; shutdown flushes the cache and releases the GPU."""
    option = Option(cache_dir=cache_dir, graph_key=graph_key, vulkan_device=device)
    app = create_app(param, model, option=option, max_body=max_body, warm_up=warm_up)

    def announce(*_: Any) -> None:
        print(f"serving on http://{host}:{port}", flush=True)

    web.run_app(app, host=host, port=port, print=announce, handle_signals=True)
