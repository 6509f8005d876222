"""The Open Inference Protocol (KServe v2) over HTTP, as Triton's clients speak it.

Health, server and model metadata, model readiness, the model configuration extension
(Triton's ``config.pbtxt`` as JSON, which ``tritonclient`` reads), the statistics extension,
the repository index, and inference with tensors as JSON or, with the binary tensor data
extension, as raw bytes after the JSON header (``Inference-Header-Content-Length``).

Tensors carry the batch axis first (the configuration says ``max_batch_size``): a request of N
items joins the model's batcher as N items, and its outputs come back with N. An input whose
dims are those of the model's blob (no batch axis) runs as one item and is answered without one.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aiohttp import web

from .._errors import AsyncVkError
from ._batcher import QueueFull
from ._body import ClientGone, RequestError, read_body
from ._oip_infer_body import (
    HEADER_LENGTH,
    encode_reply,
    failure_status,
    parse_request,
    split_body,
)
from ._protocol import NoSuchModel, config, model_metadata_of, model_named, server_metadata_of
from ._repository import Repository, ServedModel, UnknownModel

log = logging.getLogger("asyncvk.serve")

MODELS_KEY: web.AppKey[dict[str, ServedModel]] = web.AppKey("models", dict)
REPOSITORY_KEY: web.AppKey[Repository] = web.AppKey("repository", Repository)
RETRY_AFTER = 1


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def add_routes(app: web.Application) -> None:
    """The protocol's endpoints on ``app`` (its models under ``MODELS_KEY``)."""
    r = app.router
    r.add_get("/v2", server_metadata)
    r.add_get("/v2/health/live", live)
    r.add_get("/v2/health/ready", server_ready)
    r.add_post("/v2/repository/index", repository_index)
    r.add_post("/v2/repository/models/{name}/load", load_model)
    r.add_post("/v2/repository/models/{name}/unload", unload_model)
    r.add_get("/v2/models/stats", all_statistics)
    for base in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        r.add_get(base, model_metadata)
        r.add_get(f"{base}/ready", model_ready)
        r.add_get(f"{base}/config", model_config)
        r.add_get(f"{base}/stats", model_statistics)
        r.add_post(f"{base}/infer", infer)


def _model(request: web.Request) -> ServedModel:
    """The model the URL names (404 for another name or version)."""
    try:
        return model_named(
            request.app[MODELS_KEY], request.match_info["name"], request.match_info.get("version")
        )
    except NoSuchModel as exc:
        raise RequestError(404, str(exc)) from None


def _answers(handler: Any) -> Any:
    """A handler whose RequestError becomes the protocol's ``{"error": ...}`` reply."""

    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except RequestError as exc:
            return _error(exc.status, str(exc))
        except ClientGone:  # nobody to answer; not a server error
            return _error(400, "client went away")
        except Exception as exc:  # a server bug still answers the protocol's JSON, logged
            log.exception("%s failed", handler.__name__)
            return _error(500, f"{type(exc).__name__}: {exc}")

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


@_answers
async def server_metadata(request: web.Request) -> web.Response:
    return web.json_response(server_metadata_of())


async def live(request: web.Request) -> web.Response:
    return web.json_response({"live": True})


async def server_ready(request: web.Request) -> web.Response:
    """200 once every model is loaded (503 before: a load balancer sends nothing yet)."""
    ready = all(m.ready for m in request.app[MODELS_KEY].values())
    return web.json_response({"ready": ready}, status=200 if ready else 503)


@_answers
async def model_ready(request: web.Request) -> web.Response:
    model = _model(request)
    return web.json_response(
        {"name": model.name, "ready": model.ready}, status=200 if model.ready else 503
    )


@_answers
async def repository_index(request: web.Request) -> web.Response:
    return web.json_response(
        [
            {"name": m.name, "version": "1", "state": "READY" if m.ready else "UNAVAILABLE"}
            | ({"reason": m.error} if m.error else {})
            for m in request.app[MODELS_KEY].values()
        ]
    )


@_answers
async def load_model(request: web.Request) -> web.Response:
    """The repository extension's load: the model (again), from its folder or its files; the
    one serving now answers until the new one is ready. 200 once it is."""
    name = request.match_info["name"]
    try:
        await request.app[REPOSITORY_KEY].load(name)
    except UnknownModel as exc:
        return _error(404, str(exc.args[0]))
    except (AsyncVkError, OSError, ValueError) as exc:
        return _error(400, f"{name} did not load: {exc}")
    return web.json_response({})


@_answers
async def unload_model(request: web.Request) -> web.Response:
    """The repository extension's unload: the name goes now, its queued requests are answered."""
    try:
        await request.app[REPOSITORY_KEY].unload(request.match_info["name"])
    except UnknownModel as exc:
        return _error(404, str(exc.args[0]))
    return web.json_response({})


@_answers
async def model_metadata(request: web.Request) -> web.Response:
    return web.json_response(model_metadata_of(_model(request)))


@_answers
async def model_config(request: web.Request) -> web.Response:
    """The model's configuration in Triton's form (``config.pbtxt`` as JSON)."""
    return web.json_response(config(_model(request)))


def _duration(count: int, seconds: float) -> dict[str, int]:
    return {"count": count, "ns": round(seconds * 1e9)}


def _statistics(model: ServedModel) -> dict[str, Any]:
    """The statistics extension's entry for ``model`` (Triton's field names)."""
    s = model.batcher.statistics
    return {
        "name": model.name,
        "version": "1",
        "last_inference": model.last_inference_ms,
        "inference_count": s.items,
        "execution_count": s.batches,
        "inference_stats": {
            "success": _duration(s.succeeded, s.queue_seconds + s.compute_seconds),
            "fail": _duration(s.failed + s.refused, 0.0),
            "queue": _duration(s.succeeded + s.failed, s.queue_seconds),
            "compute_input": _duration(s.batches, 0.0),
            "compute_infer": _duration(s.batches, s.compute_seconds),
            "compute_output": _duration(s.batches, 0.0),
        },
        "batch_stats": [
            {"batch_size": size, "compute_infer": _duration(count, 0.0)}
            for size, count in sorted(s.batch_sizes.items())
        ],
    }


@_answers
async def model_statistics(request: web.Request) -> web.Response:
    return web.json_response({"model_stats": [_statistics(_model(request))]})


async def all_statistics(request: web.Request) -> web.Response:
    models = request.app[MODELS_KEY].values()
    return web.json_response({"model_stats": [_statistics(m) for m in models]})


# -- inference -----------------------------------------------------------------------------------


@_answers
async def infer(request: web.Request) -> web.Response:
    model = _model(request)
    if not model.ready:
        return _error(503, model.error or f"model {model.name!r} is still loading")
    body = await read_body(request)
    try:
        header, tensors = split_body(body, request.headers.get(HEADER_LENGTH))
        inputs, batched, wanted, binary = parse_request(model.net, header, tensors)
        results = await model.batcher.infer(inputs, wanted)
    except Exception as exc:
        answer = failure_status(exc)
        if answer is None:
            raise
        response = _error(*answer)
        if isinstance(exc, QueueFull):
            response.headers["Retry-After"] = str(RETRY_AFTER)
        return response
    model.last_inference_ms = int(time.time() * 1000)
    if not batched:
        results = {n: a[0] for n, a in results.items()}
    reply, json_length = encode_reply(model.name, header.get("id"), results, binary)
    if json_length is None:
        return web.Response(body=reply, content_type="application/json")
    response = web.Response(body=reply, content_type="application/octet-stream")
    response.headers[HEADER_LENGTH] = str(json_length)
    return response
