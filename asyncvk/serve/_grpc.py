"""The Open Inference Protocol over gRPC (``inference.GRPCInferenceService``), beside HTTP in
the same process and event loop, on the same models and batchers.

Health, server and model metadata, model readiness and inference, with tensors as raw bytes
(``raw_input_contents``, as Triton's clients send them) or as typed contents; outputs always
come back raw (``raw_output_contents``). Errors carry the protocol's status codes: NOT_FOUND for
a model not served, INVALID_ARGUMENT for a bad request, UNAVAILABLE for a model still loading or
a full queue (try again), INTERNAL for a server bug (logged).

Needs ``grpcio`` (``pip install asyncvk-runtime[grpc]``); nothing imports this module otherwise.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np

from .._errors import AsyncVkError, DeviceError, InputTooLargeError
from ._batcher import QueueFull, with_batch_axis
from ._grpc_messages import MESSAGES, METHODS, SERVICE
from ._protocol import (
    NoSuchModel,
    input_array,
    model_metadata_of,
    model_named,
    server_metadata_of,
)
from ._repository import ServedModel

log = logging.getLogger("asyncvk.serve")

#: messages up to this size in either direction (gRPC's default of 4 MiB is one 3x640x640 image)
MAX_MESSAGE = 64 << 20
#: InferTensorContents' field for each datatype that holds real numbers
_CONTENTS = {
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
}


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class InferenceService:
    """The service's methods over ``models`` (name -> ServedModel, changing as models load)."""

    def __init__(self, models: dict[str, ServedModel]) -> None:
        self.models = models

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return MESSAGES["ServerLiveResponse"](live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        ready = all(m.ready for m in self.models.values())
        return MESSAGES["ServerReadyResponse"](ready=ready)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        return MESSAGES["ModelReadyResponse"](ready=self._model(request).ready)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return MESSAGES["ServerMetadataResponse"](**server_metadata_of())

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        return MESSAGES["ModelMetadataResponse"](**model_metadata_of(self._model(request)))

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        model = model_named_or_abort(self.models, request.model_name, request.model_version)
        if not model.ready:
            raise _Abort(
                grpc.StatusCode.UNAVAILABLE,
                model.error or f"model {model.name!r} is still loading",
            )
        try:
            inputs = _inputs(model, request)
            batched, items = with_batch_axis(model.net, inputs)
            wanted = [o.name for o in request.outputs] or None
            results = await model.batcher.infer(items, wanted)
        except QueueFull as exc:
            raise _Abort(grpc.StatusCode.UNAVAILABLE, f"busy: {exc}; try again") from None
        except InputTooLargeError as exc:
            raise _Abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)) from None
        except DeviceError as exc:  # the GPU failed, not the request
            raise _Abort(grpc.StatusCode.UNAVAILABLE, f"device failed: {exc}") from None
        except (AsyncVkError, ValueError) as exc:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)) from None
        model.last_inference_ms = int(time.time() * 1000)
        reply = MESSAGES["ModelInferResponse"](
            model_name=model.name, model_version="1", id=request.id
        )
        for name, array in results.items():
            if not batched:
                array = array[0]
            reply.outputs.add(name=name, datatype="FP32", shape=array.shape)
            reply.raw_output_contents.append(np.ascontiguousarray(array, "<f4").tobytes())
        return reply

    def _model(self, request: Any) -> ServedModel:
        return model_named_or_abort(self.models, request.name, request.version)


def model_named_or_abort(models: dict[str, ServedModel], name: str, version: str) -> ServedModel:
    try:
        return model_named(models, name, version)
    except NoSuchModel as exc:
        raise _Abort(grpc.StatusCode.NOT_FOUND, str(exc)) from None


def _inputs(model: ServedModel, request: Any) -> dict[str, np.ndarray]:
    """The request's inputs by name, from its raw contents (one per input, in order) or from
    each tensor's typed contents."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise ValueError(
            f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs (one each, in order)"
        )
    inputs: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(request.inputs):
        name = tensor.name
        if name not in model.net.input_names:
            raise ValueError(f"unknown input {name!r} (inputs: {model.net.input_names})")
        if name in inputs:
            raise ValueError(f"input {name!r} sent twice")
        if raw:
            inputs[name] = input_array(name, tensor.shape, tensor.datatype, raw=raw[i])
            continue
        field = _CONTENTS.get(tensor.datatype)
        values = getattr(tensor.contents, field) if field else []
        inputs[name] = input_array(name, tensor.shape, tensor.datatype, values=list(values))
    if not inputs:
        raise ValueError("no inputs")
    return inputs


def _unary(method: Callable[[Any, Any], Any], name: str) -> Any:
    """``method`` as a gRPC handler whose _Abort, or any bug, ends the call with its status."""

    async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(request, context)
        except _Abort as exc:
            await context.abort(exc.code, str(exc))
        except Exception as exc:
            log.exception("gRPC %s failed", name)
            await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

    request_type, response_type = METHODS[name]
    return grpc.unary_unary_rpc_method_handler(
        handle,
        request_deserializer=MESSAGES[request_type].FromString,
        response_serializer=MESSAGES[response_type].SerializeToString,
    )


def create_grpc_server(
    models: dict[str, ServedModel], address: str, *, reuse_port: bool = False
) -> tuple[grpc.aio.Server, int]:
    """A gRPC server of the protocol for ``models`` on ``address`` ("host:port", port 0: any
    free one), not yet started (``await server.start()``), and the port it listens on
    (``reuse_port``: shared with other processes, as ``--workers`` shares it)."""
    service = InferenceService(models)
    handlers = {name: _unary(getattr(service, name), name) for name in METHODS}
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE),
            ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.so_reuseport", int(reuse_port)),
        ]
    )
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
    port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"gRPC could not listen on {address}")
    return server, port
