"""Shape hints (ncnn param id 30): reading and writing them, and the dry record that turns them
into shape-baked pipelines.

Id 30 holds 4 ints per top blob, ``dims, w, h, c`` (dims 1: ``1,w,0,0``; dims 2: ``2,w,h,0``;
dims 3: ``3,w,h,c``). With ``Option.use_shape_hints``, ``load_model`` records each GPU layer
once against placeholder blobs of the hinted shapes, capturing every ``(pipeline key, push
bytes)`` it dispatches, and builds a ``<shader>@shapes`` pipeline with those bytes baked in as
specialization constants. A plan uses such a pipeline only when a dispatch pushes exactly the
baked bytes, so a wrong or stale hint costs a pipeline, never a wrong result.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cache._spec import PipelineSpec
from ..gpu._info import GpuInfo
from ..layers._gpu_api import GpuBlob
from ..layers._paramdict import ParamValue
from ..layers._registry import layer_class
from ..shader._options import ShaderOptions
from ._bound_node import BoundNode
from ._graph import Graph
from ._param_parser import SHAPE_HINTS_ID, ParamFile, parse_param_text

Shape = tuple[int, ...]
#: ncnn writes arrays in the old syntax: ``-23330=<count>,...`` is id 30.
_HINT_KEY = "-23330"
_WS = " \t\r\f\v"
_TOKEN = re.compile(f"[^{_WS}]+")


# -- the id-30 array -----------------------------------------------------------------------------


def encode_hint(shape: Shape) -> tuple[int, int, int, int]:
    """``dims, w, h, c`` of a CPU-layout shape (1 to 3 dims)."""
    if len(shape) == 1:
        return (1, shape[0], 0, 0)
    if len(shape) == 2:
        return (2, shape[1], shape[0], 0)
    if len(shape) == 3:
        return (3, shape[2], shape[1], shape[0])
    raise ValueError(f"shape hints hold 1 to 3 dims, got {shape}")


def decode_hints(value: ParamValue, count: int) -> list[Shape | None]:
    """The top shapes an id-30 array gives for ``count`` tops (None where it gives none)."""
    out: list[Shape | None] = [None] * count
    if not isinstance(value, tuple) or len(value) != 4 * count:
        return out
    for i in range(count):
        dims, w, h, c = (int(v) for v in value[4 * i : 4 * i + 4])
        shape = {1: (w,), 2: (h, w), 3: (c, h, w)}.get(dims)
        if shape is not None and all(d > 0 for d in shape):
            out[i] = shape
    return out


# -- shape inference without weights or a GPU -----------------------------------------------------


def infer_shapes(
    param: ParamFile, inputs: Mapping[str, Shape], why: dict[str, str] | None = None
) -> dict[str, Shape]:
    """Blob shapes from ``inputs`` (input blob name -> shape) by the CPU layers' shape rules.

    Input blobs not in ``inputs`` take their Input layer's own shape params, if any. A layer
    whose input shapes are unknown, or whose shape rule refuses them, leaves its tops unknown;
    ``why``, when given, gets the reason by layer name for each layer that refused.
    """
    why = {} if why is None else why
    unknown = sorted(set(inputs) - set(param.input_names))
    if unknown:
        raise ValueError(
            f"no input named {unknown[0]!r} (inputs: {', '.join(param.input_names) or 'none'})"
        )
    shapes: dict[str, Shape] = {}
    for decl in param.layers:
        if decl.type == "Input" and all(t in inputs for t in decl.tops):
            shapes.update((t, tuple(inputs[t])) for t in decl.tops)
            continue
        if not all(b in shapes for b in decl.bottoms):
            continue
        cls = layer_class(decl.type)
        if cls is None:
            why[decl.name] = f"asyncvk has no layer type {decl.type!r}"
            continue
        layer = cls()
        layer.name = decl.name
        layer.bottoms, layer.tops = list(decl.bottoms), list(decl.tops)
        in_shapes = [shapes[b] for b in decl.bottoms]
        try:
            layer.load_param(decl.params)
            found = layer.output_shapes(in_shapes)
        except Exception as exc:  # no shape rule for these inputs: tops stay unknown
            why[decl.name] = f"cannot take inputs of shape {in_shapes}: {exc}"
            continue
        for t, s in zip(decl.tops, found, strict=False):
            shapes[t] = tuple(int(x) for x in s)
    return shapes


def write_hints(text: str, shapes: Mapping[str, Shape], source: str = "<text>") -> tuple[str, int]:
    """``text`` with an id-30 array on every layer whose top shapes are all known (1 to 3 dims).

    Every other line and parameter stays as written; an existing id 30 is replaced. Returns the
    new text and the number of layers hinted.
    """
    param = parse_param_text(text, source)
    by_line = {decl.line: decl for decl in param.layers}
    lines = text.split("\n")
    hinted = 0
    for number, decl in by_line.items():
        tops = [shapes.get(t) for t in decl.tops]
        if not tops or any(s is None or not 1 <= len(s) <= 3 for s in tops):
            continue
        values = [v for s in tops if s is not None for v in encode_hint(s)]
        line = lines[number - 1]
        end = len(line.rstrip("\r"))
        body, tail = line[:end], line[end:]
        body = _drop_hint(body, 4 + len(decl.bottoms) + len(decl.tops))
        joined = ",".join(str(v) for v in values)
        lines[number - 1] = f"{body} {_HINT_KEY}={len(values)},{joined}{tail}"
        hinted += 1
    return "\n".join(lines), hinted


def _drop_hint(line: str, skip: int) -> str:
    """``line`` without its ``30=`` / ``-23330=`` token (the first ``skip`` tokens are kept)."""
    for i, match in enumerate(_TOKEN.finditer(line)):
        key = match.group().partition("=")[0]
        if i >= skip and key in (str(SHAPE_HINTS_ID), _HINT_KEY):
            start = match.start()
            while start > 0 and line[start - 1] in _WS:
                start -= 1
            return line[:start] + line[match.end() :]
    return line.rstrip(_WS)


# -- the dry record ------------------------------------------------------------------------------


class _NotCapturable(Exception):
    """The layer asked for something a dry record cannot give (scratch, plan constants)."""


class _Placeholder:
    """Stands in for a device buffer while nothing is recorded."""

    offset = 0
    size = 0


@dataclass
class _CaptureContext:
    """A RecordContext that only collects ``(pipeline key, push bytes)`` of each dispatch."""

    info: GpuInfo
    specs: Mapping[str, PipelineSpec]
    #: pipelines a load does not wait for: never baked (the load would wait for them)
    background: frozenset[str]

    def __post_init__(self) -> None:
        self.dispatches: list[tuple[str, bytes]] = []

    def dispatch(
        self, pipeline: str, buffers: Sequence[Any], push: bytes, groups: tuple[int, int, int]
    ) -> None:
        request = (pipeline, bytes(push))
        if request not in self.dispatches:
            self.dispatches.append(request)

    def weight(self, name: str) -> Any:
        return _Placeholder()

    def has_pipeline(self, key: str) -> bool:
        return key in self.specs and key not in self.background

    def spec(self, key: str) -> PipelineSpec:
        return self.specs[key]

    def scratch(self, nbytes: int) -> Any:
        raise _NotCapturable("scratch")

    def constant(self, array: np.ndarray) -> Any:
        raise _NotCapturable("constant")

    def barrier(self) -> None:
        pass

    def copy(self, src: Any, src_start: int, dst: Any, dst_start: int, count: int) -> None:
        pass  # a copy has no pipeline to bake


def capture_dispatches(
    layer: BoundNode, info: GpuInfo, inputs: Sequence[Shape], outputs: Sequence[Shape]
) -> list[tuple[str, bytes]]:
    """What ``layer`` dispatches for these shapes, or [] when it cannot be captured."""
    if layer.alias:
        return []
    try:
        if not layer.supports(list(inputs)):
            return []
        ctx = _CaptureContext(info, layer.specs, layer.background)
        blobs_in = [GpuBlob(_Placeholder(), tuple(s)) for s in inputs]  # type: ignore[arg-type]
        blobs_out = [GpuBlob(_Placeholder(), tuple(s)) for s in outputs]  # type: ignore[arg-type]
        layer.record(ctx, blobs_in, blobs_out)
    except Exception:  # hints are an optimisation: a layer that cannot dry-record has none
        return []
    return ctx.dispatches


# -- shape-baked pipelines of a loaded graph -----------------------------------------------------

#: (node index, (pipeline key, push bytes), the ``@shapes`` spec that bakes those bytes in)
BakedRequest = tuple[int, tuple[str, bytes], PipelineSpec]


def hinted_shapes(graph: Graph) -> dict[int, Shape]:
    """Blob shapes the param file hints: id 30 on any layer, or an Input's own params."""
    shapes: dict[int, Shape] = {}
    for node in graph.nodes:
        tops: list[Shape | None] = [None] * len(node.tops)
        if SHAPE_HINTS_ID in node.params:
            tops = decode_hints(node.params[SHAPE_HINTS_ID], len(node.tops))
        if node.layer.type_name == "Input" and tops == [None] and not node.bottoms:
            try:
                tops = [tuple(node.layer.output_shapes([])[0])]
            except ValueError:
                pass
        for t, shape in zip(node.tops, tops, strict=True):
            if shape is not None:
                shapes[t] = shape
    return shapes


def shape_baked_specs(
    graph: Graph,
    gpu_layers: Mapping[int, BoundNode],
    info: GpuInfo,
    shape_variant: Callable[[str], str | None],
    options: ShaderOptions,
) -> list[BakedRequest]:
    """A ``@shapes`` pipeline spec for each dispatch a hinted GPU layer would record.

    ``gpu_layers`` maps node index to its layer bound to the device; ``shape_variant`` names a
    shader's shape-baked variant (None when it has none)."""
    shapes = hinted_shapes(graph)
    requests: list[BakedRequest] = []
    for node in graph.nodes:
        layer = gpu_layers.get(node.index)
        if layer is None or not all(b in shapes for b in node.bottoms + node.tops):
            continue
        specs = layer.specs
        dispatches = capture_dispatches(
            layer, info, [shapes[b] for b in node.bottoms], [shapes[t] for t in node.tops]
        )
        for key, push in dispatches:
            spec = specs.get(key)
            variant = shape_variant(spec.shader) if spec is not None else None
            if spec is None or variant is None:
                continue
            baked = dataclasses.replace(spec, shader=variant, options=options, baked_push=push)
            requests.append((node.index, (key, push), baked))
    return requests
