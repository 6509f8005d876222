"""Request and reply bodies for the inference server: a request's inputs read within the size
limits and the body deadline (.npy, multipart of .npy parts, or JSON), and the reply encoded.

``--max-body`` bounds the whole request, not each part: every byte read is counted, after
aiohttp has decoded a gzip or deflate ``Content-Encoding`` and across all multipart parts, and
the read stops with a 413 as soon as the count passes it (a small compressed body can decode to
gigabytes; eight parts under the limit can add up past it). A ``Content-Length`` over it is a
413 before anything is read, and before ``100 Continue`` for a client that asks.

A .npy body or part must be exactly one array: its header is checked against the size limits
before the array is allocated, and bytes after the array are a 400 naming the part.

JSON has no NaN or Infinity: a JSON request holding them is a 400, and non-finite outputs are
written as ``null``, counted in the reply's ``non_finite`` field.
"""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import numpy as np
from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError, PayloadEncodingError

from .._errors import InputError
from ..net._input_limits import load_npy_bytes, read_npy_header
from ..net._net import Net

T = TypeVar("T")

JSON_LIMIT = 1 << 20  # values in a JSON request
# json.loads holds the GIL even in a worker thread, so the JSON body size bounds the event loop's
# stall (about 20 ms per MiB); bigger inputs belong in .npy, which parses without that cost.
JSON_BODY_LIMIT = 4 << 20
BODY_TIMEOUT = 30.0  # seconds for a whole request body (serve --body-timeout)
BODY_TIMEOUT_KEY: web.AppKey[float] = web.AppKey("body_timeout", float)
#: bytes asked of the stream per read: the budget is checked after each
READ_CHUNK = 1 << 16


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
    """``await read()`` for a piece of a body or a part, by ``deadline`` (the loop's clock)."""
    try:
        async with asyncio.timeout_at(deadline):
            return await read()
    except TimeoutError:
        timeout = request.app[BODY_TIMEOUT_KEY]
        raise RequestError(
            408, f"request body not received within {timeout:g} s (server --body-timeout)"
        ) from None
    except (ConnectionError, PayloadEncodingError, asyncio.IncompleteReadError) as exc:
        # reset, or EOF before the end
        raise ClientGone(f"{type(exc).__name__}: {exc}") from None
    except HttpProcessingError as exc:  # a multipart part's malformed headers, a bad encoding
        raise RequestError(400, f"{what}: {' '.join(str(exc).split())}") from None


def max_body_message(request: web.Request) -> str:
    """What a 413 for a request past ``--max-body`` says, less where it was seen."""
    encoding = request.headers.get("Content-Encoding", "identity").lower()
    decoded = "" if encoding == "identity" else f" decoded from {encoding}"
    return f"request body over {request.client_max_size:,} bytes{decoded} (server --max-body)"


def check_content_length(request: web.Request, limit: int, over: str) -> None:
    """A 413 before any of the body is read when its declared length is over ``limit``."""
    length = request.content_length
    if length is not None and length > limit:
        raise RequestError(413, f"{over} (Content-Length: {length:,})")


class _Budget:
    """The bytes a request may still send (``--max-body``), spent by every decoded byte read,
    over all its parts."""

    def __init__(self, request: web.Request, deadline: float, limit: int, over: str) -> None:
        self.request = request
        self.deadline = deadline
        self.left = limit
        #: the 413's message, less where it was seen
        self.over = over

    async def read(self, read_chunk: Callable[[], Awaitable[bytes]], what: str) -> bytes:
        """Everything ``read_chunk`` gives until it gives ``b""``, by the deadline (one timer
        for the whole read); a 413 as soon as the request has sent more than the limit,
        before the rest is read."""
        return await read_by(
            self.request, partial(self._chunks, read_chunk, what), what, self.deadline
        )

    async def _chunks(self, read_chunk: Callable[[], Awaitable[bytes]], what: str) -> bytes:
        chunks = []
        while chunk := await read_chunk():
            self.left -= len(chunk)
            if self.left < 0:
                raise RequestError(413, f"{self.over} while reading {what}")
            chunks.append(chunk)
        return b"".join(chunks)


async def read_body(request: web.Request, limit: int | None = None) -> bytes:
    """The whole body, within ``--max-body`` (or ``limit``, if lower) and ``--body-timeout``
    (413 and 408 as :func:`read_inputs` answers them)."""
    over = max_body_message(request)
    cap = request.client_max_size if limit is None else min(limit, request.client_max_size)
    check_content_length(request, cap, over)
    content = request.content
    if content.is_eof():  # all of it came with the headers: no deadline to keep
        body = content.read_nowait(-1)
        if len(body) > cap:
            raise RequestError(413, f"{over} while reading the body")
        return body
    deadline = asyncio.get_running_loop().time() + request.app[BODY_TIMEOUT_KEY]
    budget = _Budget(request, deadline, cap, over)
    return await budget.read(lambda: request.content.read(READ_CHUNK), "the body")


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


def encode_reply(results: dict[str, np.ndarray], encoding: str) -> tuple[bytes, str]:
    """The reply body, off the event loop (a JSON reply still holds the GIL: use .npy for big):
    one output as a ``.npy``, several as an ``.npz`` of them by name, or JSON.

    JSON has no NaN or Infinity: non-finite outputs are written as ``null`` and counted in
    ``non_finite``, so the reply always parses.
    """
    if encoding == "json":
        values: dict[str, Any] = {}
        non_finite = 0
        for name, result in results.items():
            finite = np.isfinite(result)
            bad = int(finite.size - np.count_nonzero(finite))
            if bad:
                cells = result.astype(object)
                cells[~finite] = None
                values[name] = cells.tolist()
            else:
                values[name] = result.tolist()
            non_finite += bad
        payload: dict[str, Any] = {
            "outputs": values,
            "shapes": {name: list(r.shape) for name, r in results.items()},
            "non_finite": non_finite,
        }
        if len(results) == 1:
            payload["shape"] = list(next(iter(results.values())).shape)
        return json.dumps(payload, allow_nan=False).encode(), "application/json"
    buf = io.BytesIO()
    if len(results) == 1:
        np.save(buf, next(iter(results.values())))
        return buf.getvalue(), "application/x-npy"
    with zipfile.ZipFile(buf, "w") as archive:  # np.savez's own argument names could clash
        for name, result in results.items():
            member = io.BytesIO()
            np.save(member, result)
            archive.writestr(f"{name}.npy", member.getvalue())
    return buf.getvalue(), "application/x-npz"


def load_npy_exact(name: str, data: bytes, holder: str) -> np.ndarray:
    """One .npy array that fills ``data``, checked before allocation (see
    :func:`load_npy_bytes`); trailing bytes are refused: they are no part of the input, and
    a sender that adds them has likely sent something else than it thinks."""
    header = read_npy_header(io.BytesIO(data), name)
    end = header.offset + header.nbytes
    if len(data) > end:
        raise InputError(
            f"{name}: the {holder} holds {len(data) - end:,} bytes after the array (its header "
            f"declares shape {header.shape} {header.dtype}, {end:,} bytes with the header; "
            f"the {holder} is {len(data):,})"
        )
    return load_npy_bytes(name, data, holder)


async def read_inputs(request: web.Request, net: Net) -> tuple[dict[str, np.ndarray], str]:
    """The request's inputs by blob name, and the reply encoding ("npy" or "json")."""
    kind = request.content_type
    if kind not in ("application/x-npy", "multipart/form-data", "application/json"):
        raise RequestError(
            415,
            f"unsupported content type {kind!r}; use application/x-npy, "
            "multipart/form-data or application/json",
        )
    limit, over = request.client_max_size, max_body_message(request)
    if kind == "application/json" and JSON_BODY_LIMIT < limit:  # json.loads holds the GIL
        limit, over = JSON_BODY_LIMIT, f"JSON bodies over {JSON_BODY_LIMIT} bytes: send .npy"
    check_content_length(request, limit, over)
    deadline = asyncio.get_running_loop().time() + request.app[BODY_TIMEOUT_KEY]
    budget = _Budget(request, deadline, limit, over)
    content = request.content
    if kind == "application/x-npy":
        names = net.input_names
        if len(names) != 1:
            raise ValueError(f"the model has inputs {names}: send multipart/form-data")
        body = await budget.read(lambda: content.read(READ_CHUNK), "the body")
        return {names[0]: await asyncio.to_thread(load_npy_exact, names[0], body, "body")}, "npy"
    if kind == "multipart/form-data":
        inputs: dict[str, np.ndarray] = {}
        reader = await request.multipart()
        while True:
            part = await read_by(request, reader.next, "a part", deadline)
            if part is None:
                break
            if not isinstance(part, BodyPartReader) or part.name is None:
                raise ValueError("each multipart part must be one .npy file named after an input")
            name = part.name
            if name not in net.input_names:  # refused before its bytes are read
                raise ValueError(f"unknown input {name!r} (inputs: {net.input_names})")
            if name in inputs:
                raise ValueError(f"input {name!r} sent twice (one part per input)")
            encoding = part.headers.get("Content-Encoding", "identity").lower()
            if encoding != "identity":
                raise ValueError(
                    f"part {name!r}: Content-Encoding {encoding} is not taken in a part "
                    "(compress the whole request instead)"
                )
            data = await budget.read(partial(part.read_chunk, READ_CHUNK), f"part {name!r}")
            inputs[name] = await asyncio.to_thread(load_npy_exact, name, data, "part")
        return inputs, "npy"
    body = await budget.read(lambda: content.read(READ_CHUNK), "the body")
    return await asyncio.to_thread(json_inputs, body), "json"
