"""Where a plan's layers run and where its blobs live: shape inference over the layers a request
needs, each placed on the GPU or on its CPU reference, then the blobs kept on the device and the
aliasing tops (Split, Noop) that share a blob's storage. A layer that cannot take its inputs is
an InputError that names it, at planning and when a CPU layer runs."""

from __future__ import annotations

from collections.abc import Mapping

from .._errors import InputError
from ._bound_node import BoundNode
from ._graph import GraphNode

Shape = tuple[int, ...]

#: What a layer's shape rule or numpy forward raises for inputs it cannot take.
_SHAPE_ERRORS = (ValueError, IndexError, KeyError, ArithmeticError)


def _cannot_take(node: GraphNode, in_shapes: list[Shape], exc: Exception) -> InputError:
    layer = f"layer {node.layer.name!r} ({node.layer.type_name})"
    return InputError(f"{layer} cannot take inputs {in_shapes}: {exc}")


def place_layers(
    nodes: list[GraphNode], input_shapes: Mapping[int, Shape], bound: Mapping[int, BoundNode]
) -> tuple[dict[int, Shape], dict[int, bool]]:
    """Every blob's shape, inferred; for each layer that runs, whether on the GPU (an Input
    already fed does not run)."""
    shapes: dict[int, Shape] = dict(input_shapes)
    on_gpu: dict[int, bool] = {}
    for node in nodes:
        if node.layer.type_name == "Input" and all(t in shapes for t in node.tops):
            continue
        in_shapes = [shapes[b] for b in node.bottoms]
        try:
            out_shapes = node.layer.checked_output_shapes(in_shapes)
        except _SHAPE_ERRORS as exc:
            raise _cannot_take(node, in_shapes, exc) from exc
        for t, s in zip(node.tops, out_shapes, strict=True):
            shapes[t] = tuple(map(int, s))
        gpu = bound.get(node.index)
        on_gpu[node.index] = gpu is not None and gpu.supports(in_shapes)
    return shapes, on_gpu


def share_storage(
    run: list[GraphNode], on_gpu: dict[int, bool], bound: Mapping[int, BoundNode]
) -> tuple[dict[int, int], set[int]]:
    """The root of each aliasing top (Split, Noop): the blob whose storage it shares; and the
    blobs that live on the device."""
    root: dict[int, int] = {}
    device_blobs: set[int] = set()
    for node in run:
        if not on_gpu[node.index]:
            continue
        alias = bound[node.index].alias
        for b in node.bottoms:
            device_blobs.add(root.get(b, b))
        for i, t in enumerate(node.tops):
            if alias:  # Split: every top is bottom 0; Noop: top i is bottom i
                b = node.bottoms[min(i, len(node.bottoms) - 1)]
                root[t] = root.get(b, b)
            else:
                root[t] = t
            device_blobs.add(root[t])
    return root, device_blobs
