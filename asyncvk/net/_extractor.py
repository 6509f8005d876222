"""Extractor: one inference's inputs; ``await extract(name)`` runs what that output needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._errors import InputError
from .._threads import run_sync
from ._graph import Graph
from ._plan import needed_nodes, run_cpu_layer

if TYPE_CHECKING:  # a Net makes extractors
    from ._net import Net


class Extractor:
    """One inference's inputs; ``await extract(name)`` runs what that output needs.

    An extractor belongs to the model that was loaded when it was made. Once the Net loads
    another (``load_param``/``load_model``) or closes, its ``input`` and ``extract`` raise
    RuntimeError rather than mix the two models' blobs: make a new one with
    ``net.create_extractor()``. An ``extract`` already running when the reload starts
    finishes on the old model.
    """

    def __init__(self, net: Net) -> None:
        self.net = net
        self._generation = net.generation
        self._inputs: dict[int, np.ndarray] = {}

    def __repr__(self) -> str:
        graph = self.net.graph
        names = [graph.blob_names[i] for i in self._inputs] if graph is not None else []
        stale = "" if self._generation == self.net.generation else ", stale"
        return f"<Extractor [inputs set: {', '.join(names) or 'none'}{stale}]>"

    def _graph(self) -> Graph:
        """The graph this extractor was made for; raises once the Net moved on."""
        net = self.net
        if net.closed:
            raise RuntimeError("this Extractor's Net was closed")
        if self._generation != net.generation or net.graph is None:
            raise RuntimeError(
                "this Extractor was made before the Net loaded another model "
                "(load_param/load_model); make a new one with net.create_extractor()"
            )
        return net.graph

    def input(self, name: str, array: np.ndarray) -> None:
        """Set an input blob: CHW (or any ncnn layout), or NCHW with N == 1."""
        graph = self._graph()
        index = graph.blob_index.get(name)
        if index is None:
            raise InputError(f"no blob named {name!r} (inputs: {list(graph.input_names)})")
        kind = np.asarray(array).dtype.kind
        if kind not in "fiu":  # real numbers become float32; bool, complex, text do not
            raise InputError(
                f"input {name!r}: dtype {np.asarray(array).dtype} is not a real number type"
            )
        data = np.asarray(array, dtype=np.float32)
        if data.ndim == 4 and data.shape[0] == 1:
            data = data[0]
        if data.ndim not in (1, 2, 3, 4):
            raise InputError(f"input {name!r} must have 1 to 4 dims, got shape {data.shape}")
        self._inputs[index] = np.ascontiguousarray(data)

    def _output_index(self, name: str) -> int:
        """The blob ``name`` names, as an output to extract (InputError naming the outputs)."""
        graph = self._graph()
        target = graph.blob_index.get(name)
        if target is None:
            raise InputError(f"no blob named {name!r} (outputs: {list(graph.output_names)})")
        return target

    async def extract(self, name: str) -> np.ndarray:
        """Run what blob ``name`` needs and return it; the GPU is awaited off the event loop,
        so many extractions of one Net run concurrently.

        Arguments:
            name (str): a blob of the model, usually one of ``net.output_names``.

        Returns:
            The blob as a float32 numpy array in ncnn's layout (CHW; no batch axis).

        Raises:
            InputError: no blob is called ``name``, an input was not set, or the inputs' shapes
                are ones the model cannot take.
            RuntimeError: the Net loaded another model or closed since this Extractor was made.

        Example::

            ex = net.create_extractor()
            ex.input("in0", np.load("input.npy"))
            scores = await ex.extract("out0")
        """
        graph = self._graph()
        target = self._output_index(name)
        gpu_model = self.net.gpu_model
        if gpu_model is None:
            return await _run_on_cpu(graph, self._inputs, target)
        gpu_model.enter()  # a reload waits for this extraction before freeing the model
        try:
            shapes = {b: tuple(a.shape) for b, a in self._inputs.items()}
            plan = await gpu_model.plans.acquire(shapes, target)
            try:
                return await plan.run(self._inputs)
            finally:
                await gpu_model.plans.give_back(plan)
        finally:
            gpu_model.leave()


async def _run_on_cpu(graph: Graph, inputs: dict[int, np.ndarray], target: int) -> np.ndarray:
    """Every layer ``target`` needs, by its numpy forward, on a worker thread."""

    def run() -> np.ndarray:
        host = dict(inputs)
        for node in needed_nodes(graph, set(host), target):
            outs = run_cpu_layer(node, [host[b] for b in node.bottoms])
            for t, value in zip(node.tops, outs, strict=True):
                host[t] = value
        return np.asarray(host[target], dtype=np.float32)

    return await run_sync(run)
