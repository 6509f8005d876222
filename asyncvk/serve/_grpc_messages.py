"""The Open Inference Protocol's gRPC messages (KServe v2's ``grpc_predict_v2.proto``, package
``inference``), built at import from the table below with protobuf's runtime: no generated
code, no ``protoc`` at build time.

The field numbers are the protocol's, so Triton's clients (whose own ``inference`` package is a
superset of these messages) read and write them unchanged. The descriptors live in a pool of
their own: a process that also imports ``tritonclient.grpc`` keeps both.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "inference"
SERVICE = f"{PACKAGE}.GRPCInferenceService"

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _F.TYPE_STRING,
    "bool": _F.TYPE_BOOL,
    "bytes": _F.TYPE_BYTES,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
    "float": _F.TYPE_FLOAT,
    "double": _F.TYPE_DOUBLE,
}

#: message -> fields as (name, number, type, how): how is "" (one), "repeated", "map" (of
#: string to the type) or "oneof" (in the message's one oneof). A dotted type is nested.
_MESSAGES: dict[str, list[tuple[str, int, str, str]]] = {
    "InferParameter": [
        ("bool_param", 1, "bool", "oneof"),
        ("int64_param", 2, "int64", "oneof"),
        ("string_param", 3, "string", "oneof"),
        ("double_param", 4, "double", "oneof"),
        ("uint64_param", 5, "uint64", "oneof"),
    ],
    "InferTensorContents": [
        ("bool_contents", 1, "bool", "repeated"),
        ("int_contents", 2, "int32", "repeated"),
        ("int64_contents", 3, "int64", "repeated"),
        ("uint_contents", 4, "uint32", "repeated"),
        ("uint64_contents", 5, "uint64", "repeated"),
        ("fp32_contents", 6, "float", "repeated"),
        ("fp64_contents", 7, "double", "repeated"),
        ("bytes_contents", 8, "bytes", "repeated"),
    ],
    "ServerLiveRequest": [],
    "ServerLiveResponse": [("live", 1, "bool", "")],
    "ServerReadyRequest": [],
    "ServerReadyResponse": [("ready", 1, "bool", "")],
    "ModelReadyRequest": [("name", 1, "string", ""), ("version", 2, "string", "")],
    "ModelReadyResponse": [("ready", 1, "bool", "")],
    "ServerMetadataRequest": [],
    "ServerMetadataResponse": [
        ("name", 1, "string", ""),
        ("version", 2, "string", ""),
        ("extensions", 3, "string", "repeated"),
    ],
    "ModelMetadataRequest": [("name", 1, "string", ""), ("version", 2, "string", "")],
    "ModelMetadataResponse.TensorMetadata": [
        ("name", 1, "string", ""),
        ("datatype", 2, "string", ""),
        ("shape", 3, "int64", "repeated"),
    ],
    "ModelMetadataResponse": [
        ("name", 1, "string", ""),
        ("versions", 2, "string", "repeated"),
        ("platform", 3, "string", ""),
        ("inputs", 4, "ModelMetadataResponse.TensorMetadata", "repeated"),
        ("outputs", 5, "ModelMetadataResponse.TensorMetadata", "repeated"),
    ],
    "ModelInferRequest.InferInputTensor": [
        ("name", 1, "string", ""),
        ("datatype", 2, "string", ""),
        ("shape", 3, "int64", "repeated"),
        ("parameters", 4, "InferParameter", "map"),
        ("contents", 5, "InferTensorContents", ""),
    ],
    "ModelInferRequest.InferRequestedOutputTensor": [
        ("name", 1, "string", ""),
        ("parameters", 2, "InferParameter", "map"),
    ],
    "ModelInferRequest": [
        ("model_name", 1, "string", ""),
        ("model_version", 2, "string", ""),
        ("id", 3, "string", ""),
        ("parameters", 4, "InferParameter", "map"),
        ("inputs", 5, "ModelInferRequest.InferInputTensor", "repeated"),
        ("outputs", 6, "ModelInferRequest.InferRequestedOutputTensor", "repeated"),
        ("raw_input_contents", 7, "bytes", "repeated"),
    ],
    "ModelInferResponse.InferOutputTensor": [
        ("name", 1, "string", ""),
        ("datatype", 2, "string", ""),
        ("shape", 3, "int64", "repeated"),
        ("parameters", 4, "InferParameter", "map"),
        ("contents", 5, "InferTensorContents", ""),
    ],
    "ModelInferResponse": [
        ("model_name", 1, "string", ""),
        ("model_version", 2, "string", ""),
        ("id", 3, "string", ""),
        ("parameters", 4, "InferParameter", "map"),
        ("outputs", 5, "ModelInferResponse.InferOutputTensor", "repeated"),
        ("raw_output_contents", 6, "bytes", "repeated"),
    ],
}

#: method -> (request, response), every one unary
METHODS = {
    "ServerLive": ("ServerLiveRequest", "ServerLiveResponse"),
    "ServerReady": ("ServerReadyRequest", "ServerReadyResponse"),
    "ModelReady": ("ModelReadyRequest", "ModelReadyResponse"),
    "ServerMetadata": ("ServerMetadataRequest", "ServerMetadataResponse"),
    "ModelMetadata": ("ModelMetadataRequest", "ModelMetadataResponse"),
    "ModelInfer": ("ModelInferRequest", "ModelInferResponse"),
}


def _field(
    message: descriptor_pb2.DescriptorProto,
    dotted: str,
    field_spec: tuple[str, int, str, str],
) -> None:
    """Add one field to ``message`` (named ``dotted`` in the package)."""
    name, number, kind, how = field_spec
    field = message.field.add(name=name, number=number, json_name=_camel(name))
    field.label = _F.LABEL_REPEATED if how in ("repeated", "map") else _F.LABEL_OPTIONAL
    if how == "map":
        entry = message.nested_type.add(name=f"{_camel(name, upper=True)}Entry")
        entry.options.map_entry = True
        _field(entry, f"{dotted}.{entry.name}", ("key", 1, "string", ""))
        _field(entry, f"{dotted}.{entry.name}", ("value", 2, kind, ""))
        field.type = _F.TYPE_MESSAGE
        field.type_name = f".{PACKAGE}.{dotted}.{entry.name}"
    elif kind in _SCALARS:
        field.type = _SCALARS[kind]
    else:
        field.type = _F.TYPE_MESSAGE
        field.type_name = f".{PACKAGE}.{kind}"
    if how == "oneof":
        if not message.oneof_decl:
            message.oneof_decl.add(name="parameter_choice")
        field.oneof_index = 0


def _camel(name: str, upper: bool = False) -> str:
    words = name.split("_")
    first = words[0].capitalize() if upper else words[0]
    return first + "".join(w.capitalize() for w in words[1:])


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="asyncvk/grpc_predict_v2.proto", package=PACKAGE, syntax="proto3"
    )
    made: dict[str, descriptor_pb2.DescriptorProto] = {}
    for dotted, fields in _MESSAGES.items():
        outer, _, inner = dotted.partition(".")
        if inner:  # nested: made before its outer message's own fields
            parent = made.get(outer) or file.message_type.add(name=outer)
            made[outer] = parent
            message = parent.nested_type.add(name=inner)
        else:
            message = made.get(outer) or file.message_type.add(name=outer)
            made[outer] = message
        for spec in fields:
            _field(message, dotted, spec)
    service = file.service.add(name=SERVICE.rpartition(".")[2])
    for method, (request, response) in METHODS.items():
        service.method.add(
            name=method, input_type=f".{PACKAGE}.{request}", output_type=f".{PACKAGE}.{response}"
        )
    return file


def _classes() -> dict[str, Any]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return {
        dotted: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{dotted}"))
        for dotted in _MESSAGES
    }


#: message name (dotted for nested ones) -> its class
MESSAGES = _classes()
