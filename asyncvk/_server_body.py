"""Request and reply bodies for the inference server: a request's inputs read within the size
limits and the body deadline (.npy, multipart of .npy parts, or JSON), and the reply encoded.

JSON has no NaN or Infinity: a JSON request holding them is a 400, and non-finite outputs are
written as ``null``, counted in the reply's ``non_finite`` field.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

import numpy as np
from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError, PayloadEncodingError

from ._input_limits import load_npy_bytes
from .net._net import Net

T = TypeVar("T")

JSON_LIMIT = 1 << 20  # values in a JSON request
# json.loads holds the GIL even in a worker thread, so the JSON body size bounds the event loop's
# stall (about 20 ms per MiB); bigger inputs belong in .npy, which parses without that cost.
JSON_BODY_LIMIT = 4 << 20
BODY_TIMEOUT = 30.0  # seconds for a whole request body (serve --body-timeout)
BODY_TIMEOUT_KEY: web.AppKey[float] = web.AppKey("body_timeout", float)


class RequestError(Exception):
    """A client error: answered as ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ClientGone(Exception):
    """The client closed the connection before its body arrived: nobody to answer."""


async def read_by(
    request: web.Request, read: Callable[[], Awaitable[T]], what: str, deadline: float
) -> T:
    """``await read()`` for a body or a part, by ``deadline`` (the loop's clock); a body over
    ``client_max_size`` is a 413 with a JSON message, not aiohttp's text."""
    try:
        async with asyncio.timeout_at(deadline):
            return await read()
    except web.HTTPRequestEntityTooLarge:
        raise RequestError(
            413, f"{what} over {request.client_max_size} bytes (server --max-body)"
        ) from None
    except TimeoutError:
        timeout = request.app[BODY_TIMEOUT_KEY]
        raise RequestError(
            408, f"request body not received within {timeout:g} s (server --body-timeout)"
        ) from None
    except (ConnectionError, PayloadEncodingError) as exc:  # reset, or EOF before the end
        raise ClientGone(f"{type(exc).__name__}: {exc}") from None
    except HttpProcessingError as exc:  # a multipart part's malformed headers
        raise RequestError(400, f"{what}: {' '.join(str(exc).split())}") from None


class _NonFiniteJson(ValueError):
    """NaN, Infinity or -Infinity: Python's json reads them, but they are not JSON."""


def _no_constants(name: str) -> float:
    raise _NonFiniteJson(f"JSON input holds {name}: JSON has no non-finite numbers (send .npy)")


def json_inputs(body: bytes) -> dict[str, np.ndarray]:
    """Parse and convert off the event loop (bounded by JSON_BODY_LIMIT: it holds the GIL)."""
    try:
        raw = json.loads(body, parse_constant=_no_constants)["inputs"]
        with np.errstate(over="ignore"):  # 1e39 becomes inf, refused below
            inputs = {str(k): np.asarray(v, dtype=np.float32) for k, v in raw.items()}
    except _NonFiniteJson:
        raise
    except RecursionError:
        raise ValueError("JSON nested too deeply: expected arrays of up to 4 dims") from None
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        raise ValueError(f'expected JSON {{"inputs": {{"name": [...]}}}}: {exc}') from None
    if sum(a.size for a in inputs.values()) > JSON_LIMIT:
        raise ValueError(f"JSON inputs over {JSON_LIMIT} values: send .npy")
    for name, array in inputs.items():
        if not np.isfinite(array).all():
            raise ValueError(f"JSON input {name!r} holds a number beyond float32's range")
    return inputs


def encode_reply(result: np.ndarray, output: str, encoding: str) -> tuple[bytes, str]:
    """The reply body, off the event loop (a JSON reply still holds the GIL: use .npy for big).

    JSON has no NaN or Infinity: non-finite outputs are written as ``null`` and counted in
    ``non_finite``, so the reply always parses.
    """
    if encoding == "json":
        finite = np.isfinite(result)
        non_finite = int(finite.size - np.count_nonzero(finite))
        values = result.tolist()
        if non_finite:
            cells = result.astype(object)
            cells[~finite] = None
            values = cells.tolist()
        payload = {
            "outputs": {output: values},
            "shape": list(result.shape),
            "non_finite": non_finite,
        }
        return json.dumps(payload, allow_nan=False).encode(), "application/json"
    buf = io.BytesIO()
    np.save(buf, result)
    return buf.getvalue(), "application/x-npy"


async def read_inputs(request: web.Request, net: Net) -> tuple[dict[str, np.ndarray], str]:
    """The request's inputs by blob name, and the reply encoding ("npy" or "json")."""
    kind = request.content_type
    deadline = asyncio.get_running_loop().time() + request.app[BODY_TIMEOUT_KEY]
    if kind == "application/x-npy":
        names = net.input_names
        if len(names) != 1:
            raise ValueError(f"the model has inputs {names}: send multipart/form-data")
        body = await read_by(request, request.read, "request body", deadline)
        return {names[0]: await asyncio.to_thread(load_npy_bytes, names[0], body, "body")}, "npy"
    if kind == "multipart/form-data":
        inputs: dict[str, np.ndarray] = {}
        reader = await request.multipart()
        while True:
            part = await read_by(request, reader.next, "a part", deadline)
            if part is None:
                break
            if not isinstance(part, BodyPartReader) or part.name is None:
                raise ValueError("each multipart part must be one .npy file named after an input")
            data = await read_by(request, part.read, "a part", deadline)
            inputs[part.name] = await asyncio.to_thread(load_npy_bytes, part.name, data, "part")
        return inputs, "npy"
    if kind == "application/json":
        body = await read_by(request, request.read, "request body", deadline)
        if len(body) > JSON_BODY_LIMIT:
            raise RequestError(413, f"JSON bodies over {JSON_BODY_LIMIT} bytes: send .npy")
        return await asyncio.to_thread(json_inputs, body), "json"
    raise RequestError(
        415,
        f"unsupported content type {kind!r}; use application/x-npy, "
        "multipart/form-data or application/json",
    )
