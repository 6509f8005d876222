"""Graph: a parsed model, device-free and immutable: its layers in file order and its blob table.

``build_graph`` creates each layer from its ``.param`` line (params parsed once, blob counts
checked); ``load_weights`` makes a new Graph whose layers hold a ``.bin``'s weights. A Graph
holds no GPU state: what one load creates on a device is a
:class:`~asyncvk.net._gpu_model.GpuModel`.

Reading weights is the one change a layer sees after it is made, and it is made to a copy: the
Graph a ``.param`` gave stays without weights (a failed load leaves nothing behind in it), a
loaded Graph is never read into again (loading weights again builds fresh layers from the same
lines), and a CPU extraction still running on the previous graph keeps the weights it started
with.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .._errors import ModelFormatError
from ..layers._base import Layer
from ..layers._paramdict import ParamDict
from ..layers._registry import layer_class
from ._modelbin import ModelBinReader
from ._param_parser import FEATMASK_ID, ParamFile, model_error


@dataclass(frozen=True, eq=False)
class GraphNode:
    """One layer line: the layer object and its blobs as indices into the blob table."""

    index: int
    layer: Layer
    bottoms: tuple[int, ...]
    tops: tuple[int, ...]
    #: 1-based line in the ``.param``, for errors raised after parsing.
    line: int
    params: ParamDict


@dataclass(frozen=True, eq=False)
class Graph:
    """The layers of one ``.param`` and which blob each reads and writes."""

    param: ParamFile
    nodes: tuple[GraphNode, ...]
    blob_index: Mapping[str, int]
    #: blob index -> index of the node whose top it is
    producer: Mapping[int, int]
    #: Whether ``load_weights`` has read a ``.bin`` into these layers.
    weights_loaded: bool = False
    #: What :func:`~asyncvk.net._forward.plan_forward` worked out, by given and wanted blobs.
    forwards: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)

    @property
    def source(self) -> str:
        return self.param.source

    @property
    def blob_names(self) -> tuple[str, ...]:
        return self.param.blob_names

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.param.input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.param.output_names

    def layer_error(self, node: GraphNode, exc: BaseException) -> ModelFormatError:
        """``exc`` raised by ``node``'s layer, as the error that names file, line and layer."""
        return model_error(exc, file=self.source, line=node.line, layer=node.layer.name)


def build_graph(param: ParamFile) -> Graph:
    """A Graph with a fresh layer per line of ``param`` (params read, no weights)."""
    blob_index = {name: i for i, name in enumerate(param.blob_names)}
    producer: dict[int, int] = {}
    nodes: list[GraphNode] = []
    for i, decl in enumerate(param.layers):
        cls = layer_class(decl.type)
        if cls is None:  # the parser checks too; this keeps the invariant local
            raise ModelFormatError(
                f"unknown layer type {decl.type!r}",
                file=param.source,
                line=decl.line,
                layer=decl.name,
            )
        layer = cls()
        layer.name = decl.name
        layer.bottoms = list(decl.bottoms)
        layer.tops = list(decl.tops)
        try:
            layer.featmask = (
                decl.params.get_int(FEATMASK_ID, 0) if FEATMASK_ID in decl.params else 0
            )
            layer.load_param(decl.params)
            layer.check_blob_counts(len(decl.bottoms), len(decl.tops))
        except ModelFormatError:
            raise
        except Exception as exc:  # whatever a layer raises, the user is told where
            raise model_error(exc, file=param.source, line=decl.line, layer=decl.name) from exc
        tops = tuple(blob_index[t] for t in decl.tops)
        bottoms = tuple(blob_index[b] for b in decl.bottoms)
        nodes.append(GraphNode(i, layer, bottoms, tops, decl.line, decl.params))
        producer.update((t, i) for t in tops)
    return Graph(param, tuple(nodes), MappingProxyType(blob_index), MappingProxyType(producer))


#: layers whose output holds integers (int8 in ncnn), held as exact float32 values here
_INTEGER_OUTPUTS = frozenset({"Quantize", "Requantize"})


def _integer_input_refusal(
    layer: Layer, bottoms: tuple[int, ...], producer: Mapping[int, int], nodes: list[GraphNode]
) -> str | None:
    """An int8 layer (param 8 int8_scale_term) quantizes its float input with its bottom
    scale; ncnn takes an int8 blob from Quantize or Requantize as it is. The two agree only
    when that scale is 1 (the integers quantize to themselves), so any other scale on such a
    chain is refused rather than answered differently. Checked once the scales are read."""
    scales = getattr(layer, "int8", None) if getattr(layer, "int8_scale_term", 0) else None
    if scales is None or scales.bottom == 1:
        return None
    for node in (nodes[producer[b]] for b in bottoms):
        if node.layer.type_name in _INTEGER_OUTPUTS:
            return (
                f"{layer.type_name} with param 8 int8_scale_term and a bottom scale of "
                f"{float(scales.bottom):g} reads the int8 output of {node.layer.type_name} "
                f"{node.layer.name!r} (line {node.line}): supported only with a bottom scale of 1"
            )
    return None


def load_weights(graph: Graph, reader: ModelBinReader) -> Graph:
    """A new Graph: ``graph``'s layers, copied (built afresh when ``graph`` holds weights), with
    the weights of ``reader`` read into them; the whole ``.bin`` must be used. ``graph`` is not
    changed."""
    if graph.weights_loaded:
        graph = build_graph(graph.param)
    nodes: list[GraphNode] = []
    for node in graph.nodes:
        layer = copy.copy(node.layer)  # a layer's params are set once; weights go to the copy
        reader.current_layer = layer.name
        try:
            layer.load_model(reader)
        except ModelFormatError:
            raise
        except Exception as exc:
            raise model_error(exc, file=reader.source, line=node.line, layer=layer.name) from exc
        refusal = _integer_input_refusal(layer, node.bottoms, graph.producer, nodes)
        if refusal is not None:
            raise ModelFormatError(refusal, file=graph.source, line=node.line, layer=layer.name)
        nodes.append(dataclasses.replace(node, layer=layer))
    reader.current_layer = None
    reader.check_end()
    return dataclasses.replace(graph, nodes=tuple(nodes), weights_loaded=True)
