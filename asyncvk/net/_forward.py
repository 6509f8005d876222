"""Forward: which layers one extraction runs, what it reads, and which blobs it hands back.

An extraction asks for some blobs, given the blobs it already holds (the inputs, and what an
earlier forward of the same extractor handed back). It runs the layers those blobs need and no
other, and hands back, beside what was asked for, every blob it computed that a later
extraction of the same inputs could want: the model's outputs it produced on the way (a layer
with several tops) and the blobs that layers it did not run read. So, as in ncnn, extracting a
second output after a first reruns none of the layers the two share.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from .._errors import InputError
from ._graph import Graph, GraphNode


@dataclass(frozen=True)
class Forward:
    """The layers one extraction runs (file order), the given blobs they read and the blobs
    handed back to the host."""

    nodes: tuple[GraphNode, ...]
    reads: tuple[int, ...]
    kept: tuple[int, ...]


def plan_forward(graph: Graph, given: Collection[int], wanted: Iterable[int]) -> Forward:
    """The :class:`Forward` for ``wanted`` blobs from ``given`` ones; remembered per graph.

    Raises InputError naming the inputs a wanted blob needs that were not given."""
    key = (frozenset(given), tuple(sorted(set(wanted))))
    forward = graph.forwards.get(key)
    if forward is None:
        forward = _forward(graph, key[0], key[1])
        if len(graph.forwards) >= _REMEMBERED:
            graph.forwards.pop(next(iter(graph.forwards)))
        graph.forwards[key] = forward
    return forward


#: Forwards remembered per graph: one per pattern of given and wanted blobs a caller uses.
_REMEMBERED = 64


def _forward(graph: Graph, given: frozenset[int], wanted: tuple[int, ...]) -> Forward:
    nodes = needed_nodes(graph, given, wanted)
    run = {n.index for n in nodes}
    produced = {t for n in nodes for t in n.tops}
    read_inside = {b for n in nodes for b in n.bottoms}
    read_outside = {b for n in graph.nodes if n.index not in run for b in n.bottoms}
    kept = set(wanted) | {t for t in produced if t in read_outside or t not in read_inside}
    reads = (read_inside | set(wanted)) & given
    return Forward(tuple(nodes), tuple(sorted(reads)), tuple(sorted(kept)))


def needed_nodes(graph: Graph, given: Collection[int], targets: Iterable[int]) -> list[GraphNode]:
    """The layers ``targets`` depend on, in file order, stopping at ``given`` blobs; every
    Input layer they reach must have been given."""
    wanted = set(targets)
    needed: set[int] = set()
    missing: list[str] = []
    for node in reversed(graph.nodes):
        if not any(t in wanted and t not in given for t in node.tops):
            continue
        if node.layer.type_name == "Input":
            missing += [graph.blob_names[t] for t in node.tops if t in wanted and t not in given]
            continue
        needed.add(node.index)
        wanted.update(node.bottoms)
    if missing:
        raise InputError(f"input blob(s) {sorted(missing)} were not set")
    return [n for n in graph.nodes if n.index in needed]
