"""The Open Inference Protocol's infer request and reply over HTTP, as bytes: the JSON header
and the binary tensor data after it, read into arrays and written back. No web framework here:
the aiohttp server (``_oip``) and the Ray Serve deployment (``ray_serve``) both carry it."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .._errors import AsyncVkError, DeviceError, InputError, InputTooLargeError
from ..net._net import Net
from ._batcher import QueueFull, with_batch_axis
from ._protocol import input_array

#: the header that splits a binary request or reply into its JSON and its tensor bytes
HEADER_LENGTH = "Inference-Header-Content-Length"


def split_body(body: bytes, header_length: str | None) -> tuple[dict[str, Any], memoryview]:
    """The JSON header and the tensor bytes after it (none without the binary extension);
    ``header_length`` is the request's ``Inference-Header-Content-Length``, if it sent one."""
    length = len(body)
    if header_length is not None:
        if not header_length.isdigit() or int(header_length) > len(body):
            raise ValueError(
                f"{HEADER_LENGTH}: {header_length!r} must be the JSON's byte count, at most the "
                f"body's {len(body)}"
            )
        length = int(header_length)
    try:
        header = json.loads(bytes(body[:length]))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"the request's JSON does not parse: {exc}") from None
    if not isinstance(header, dict) or not isinstance(header.get("inputs"), list):
        raise ValueError('expected a JSON object with "inputs": [...]')
    return header, memoryview(body)[length:]


def parse_request(
    net: Net, header: dict[str, Any], tensors: memoryview
) -> tuple[dict[str, np.ndarray], bool, list[str] | None, dict[str, bool]]:
    """The inputs (batch axis first), whether the request had that axis, the outputs asked for
    (None: all) and, per output, whether it goes back as binary data."""
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for tensor in header["inputs"]:
        name, array, used = _input_tensor(tensor, tensors[offset:])
        offset += used
        if name not in net.input_names:
            raise InputError(f"unknown input {name!r} (inputs: {net.input_names})")
        if name in inputs:
            raise InputError(f"input {name!r} sent twice")
        inputs[name] = array
    if offset != len(tensors):
        raise ValueError(
            f"{len(tensors) - offset} bytes of binary data after the last input's "
            "(binary_data_size must add up to the body after the JSON)"
        )
    batched, items = with_batch_axis(net, inputs)
    everything_binary = bool((header.get("parameters") or {}).get("binary_data_output", False))
    binary: dict[str, bool] = {}
    wanted: list[str] | None = None
    if header.get("outputs"):
        wanted = []
        for output in header["outputs"]:
            if not isinstance(output, dict) or not isinstance(output.get("name"), str):
                raise ValueError('each of "outputs" must be {"name": ...}')
            wanted.append(output["name"])
            params = output.get("parameters") or {}
            binary[output["name"]] = bool(params.get("binary_data", everything_binary))
    for name in net.output_names if wanted is None else wanted:
        binary.setdefault(name, everything_binary)
    return items, batched, wanted, binary


def _input_tensor(tensor: Any, tensors: memoryview) -> tuple[str, np.ndarray, int]:
    """One input: its name, its array and the binary bytes it took."""
    if not isinstance(tensor, dict):
        raise ValueError('each of "inputs" must be {"name", "shape", "datatype", ...}')
    name, shape, datatype = tensor.get("name"), tensor.get("shape"), tensor.get("datatype")
    if not isinstance(name, str) or not isinstance(shape, list) or not isinstance(datatype, str):
        raise ValueError('each input needs "name", "shape" (a list) and "datatype"')
    size = (tensor.get("parameters") or {}).get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or size > len(tensors):
            raise ValueError(
                f"input {name!r}: binary_data_size {size} must be a byte count within the "
                f"{len(tensors)} bytes after the JSON"
            )
        return name, input_array(name, shape, datatype, raw=tensors[:size]), size
    data = tensor.get("data")
    if data is None:
        raise ValueError(f"input {name!r} has neither data nor binary_data_size")
    return name, input_array(name, shape, datatype, values=data), 0


def encode_reply(
    model_name: str, request_id: Any, results: dict[str, np.ndarray], binary: dict[str, bool]
) -> tuple[bytes, int | None]:
    """The reply's body, and its JSON's length when binary tensor data follows it (the value of
    ``Inference-Header-Content-Length``; None: the body is all JSON)."""
    outputs = []
    chunks = []
    for name, array in results.items():
        entry: dict[str, Any] = {"name": name, "datatype": "FP32", "shape": list(array.shape)}
        if binary.get(name):
            raw = np.ascontiguousarray(array, "<f4").tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            finite = np.isfinite(array)
            if finite.all():
                entry["data"] = array.reshape(-1).tolist()
            else:  # JSON has no NaN or Infinity
                cells = array.reshape(-1).astype(object)
                cells[~finite.reshape(-1)] = None
                entry["data"] = cells.tolist()
        outputs.append(entry)
    reply: dict[str, Any] = {"model_name": model_name, "model_version": "1", "outputs": outputs}
    if request_id is not None:
        reply["id"] = request_id
    text = json.dumps(reply, allow_nan=False).encode()
    if not chunks:
        return text, None
    return text + b"".join(chunks), len(text)


def failure_status(exc: Exception) -> tuple[int, str] | None:
    """The protocol's status and message for an inference that raised ``exc``, one table
    for every server that speaks it over HTTP (None: no request's fault nor the device's,
    a server bug to log)."""
    if isinstance(exc, QueueFull):
        return 503, f"busy: {exc}; try again"
    if isinstance(exc, InputTooLargeError):
        return 413, str(exc)
    if isinstance(exc, DeviceError):  # the GPU failed, not the request: another may answer
        return 503, f"device failed: {exc}"
    if isinstance(exc, (AsyncVkError, ValueError)):
        return 400, str(exc)
    return None
