"""What the Open Inference Protocol says, whatever carries it (HTTP in ``_oip``, gRPC in
``_grpc``): the server's and a model's metadata, the model configuration, finding the model a
request names, and an input tensor as the array the batcher takes."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import InputError
from .._version import __version__
from ..net._input_limits import check_input_size
from ._repository import ServedModel

#: the protocol's datatypes that hold real numbers, as numpy reads their bytes (little-endian)
DATATYPES = {
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
    "INT8": "i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "UINT8": "u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
}
EXTENSIONS = ["binary_tensor_data", "model_configuration", "statistics", "model_repository"]
PLATFORM = "asyncvk_ncnn"


class NoSuchModel(LookupError):
    """The request names a model, or a version of one, that is not served."""


def model_named(models: dict[str, ServedModel], name: str, version: str | None) -> ServedModel:
    """The model a request names (``version`` None or empty: any)."""
    model = models.get(name)
    if model is None:
        raise NoSuchModel(f"unknown model {name!r} (models: {', '.join(models)})")
    if version and version not in model.versions:
        raise NoSuchModel(f"model {name!r} has no version {version!r} (versions: 1)")
    return model


def server_metadata_of() -> dict[str, Any]:
    return {"name": "asyncvk", "version": __version__, "extensions": EXTENSIONS}


def tensor_metadata(model: ServedModel, names: list[str]) -> list[dict[str, Any]]:
    """Each blob with its datatype and its shape as the ``.param`` declares it, batch axis
    first (-1 for a size not known before a request)."""
    shapes = declared_shapes(model)
    return [{"name": n, "datatype": "FP32", "shape": [-1, *(shapes.get(n) or [-1])]} for n in names]


def model_metadata_of(model: ServedModel) -> dict[str, Any]:
    return {
        "name": model.name,
        "versions": list(model.versions),
        "platform": PLATFORM,
        "inputs": tensor_metadata(model, model.net.input_names),
        "outputs": tensor_metadata(model, model.net.output_names),
    }


def config(model: ServedModel) -> dict[str, Any]:
    """The model's configuration in Triton's form (``config.pbtxt`` as JSON)."""
    settings = model.batcher.settings

    def entries(names: list[str]) -> list[dict[str, Any]]:
        return [
            {"name": t["name"], "data_type": "TYPE_FP32", "dims": t["shape"][1:]}
            for t in tensor_metadata(model, names)
        ]

    return {
        "name": model.name,
        "platform": PLATFORM,
        "backend": "asyncvk",
        "max_batch_size": settings.max_batch,
        "input": entries(model.net.input_names),
        "output": entries(model.net.output_names),
        "dynamic_batching": {
            "max_queue_delay_microseconds": round(settings.max_queue_delay * 1e6),
            "default_queue_policy": {"max_queue_size": settings.max_queue},
        },
        "instance_group": [{"count": settings.max_inflight, "kind": "KIND_GPU"}],
    }


def declared_shapes(model: ServedModel) -> dict[str, list[int]]:
    """Every blob's shape that the ``.param``'s declared input shapes determine."""
    graph = model.net.graph
    if graph is None:
        return {}
    shapes: dict[int, tuple[int, ...]] = {}
    for node in graph.nodes:
        if node.layer.type_name == "Input":
            declared = getattr(node.layer, "declared_shape", None)
            if declared is None:
                continue
            shapes[node.tops[0]] = declared
            continue
        if not all(b in shapes for b in node.bottoms):
            continue
        try:
            outs = node.layer.checked_output_shapes([shapes[b] for b in node.bottoms])
        except (ValueError, IndexError, KeyError, ArithmeticError):
            continue
        shapes.update(zip(node.tops, (tuple(map(int, s)) for s in outs), strict=True))
    return {graph.blob_names[b]: list(s) for b, s in shapes.items()}


def input_array(
    name: str,
    shape: Any,
    datatype: str,
    *,
    raw: memoryview | bytes | None = None,
    values: Any = None,
) -> np.ndarray:
    """Input ``name`` as float32 of ``shape``, from its ``raw`` bytes (little-endian, row-major)
    or its ``values`` (a flat or nested list); ValueError or InputError names what is wrong."""
    shape = list(shape)
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise ValueError(f"input {name!r}: shape {shape} must be a list of integers")
    dtype = DATATYPES.get(datatype)
    if dtype is None:
        raise InputError(
            f"input {name!r}: datatype {datatype} is not a real number type "
            f"({', '.join(DATATYPES)})"
        )
    check_input_size(f"input {name!r}", shape, np.dtype(dtype))
    count = int(np.prod(shape))
    if raw is not None:
        want = count * np.dtype(dtype).itemsize
        if len(raw) != want:
            raise ValueError(
                f"input {name!r}: {len(raw)} bytes of data for shape {shape} {datatype}, "
                f"which takes {want}"
            )
        return np.asarray(np.frombuffer(raw, dtype).reshape(shape), np.float32)
    try:
        array = np.asarray(values, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ValueError(f"input {name!r}: data is not {datatype} numbers: {exc}") from None
    if array.size != count:
        raise ValueError(f"input {name!r}: {array.size} values for shape {shape}")
    return array.reshape(shape).astype(np.float32)
