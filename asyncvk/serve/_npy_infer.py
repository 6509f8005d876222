"""asyncvk's own endpoints beside the protocol's: ``POST /infer`` (.npy, multipart or JSON
in, every output or those ``?output=`` names out) and ``GET /ready``."""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import HttpVersion11, web

from .._errors import AsyncVkError, DeviceError, InputTooLargeError
from ._batcher import QueueFull, with_batch_axis
from ._body import ClientGone, RequestError, encode_reply, max_body_message, read_inputs
from ._oip import MODELS_KEY
from ._state import RETRY_AFTER, STATE_KEY, ServerState

log = logging.getLogger("asyncvk.serve")


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
    except DeviceError as exc:  # the GPU failed, not the request: another server may answer
        return _error(503, f"device failed: {exc}")
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
