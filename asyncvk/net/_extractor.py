"""Extractor: one inference's inputs, and the blobs its forwards computed.

``await extract(name)`` runs what that blob needs and keeps what the forward computed that a
later extraction could want (see ``_forward``), so extracting a model's outputs one by one
costs one forward, as in ncnn. An input with one more leading axis than the model's blob is a
batch: the items run in one plan, one submission (see ``_plan``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._errors import InputError
from .._threads import run_sync
from ._forward import Forward, plan_forward
from ._graph import Graph
from ._item_batch import ItemBatch, stacked
from ._loaded import LoadedModel
from ._plan import PlanRequest, run_cpu_layer

#: The most dims an item may have (ncnn's Mat: w, h, d, c).
MAX_ITEM_DIMS = 4


class Extractor:
    """One inference's inputs; ``await extract(name)`` runs what that output needs.

    The blobs a forward computes are kept: extracting a second output that the first forward
    already produced runs nothing, and one that shares layers with it runs only the layers it
    does not share. Arrays returned are the extractor's own: copy one before changing it if
    you extract more from the same extractor. Setting an input again forgets what was computed.

    An extractor belongs to the model that was loaded when it was made. Once the Net loads
    another (``load_param``/``load_model``) or closes, its ``input`` and ``extract`` raise
    RuntimeError rather than mix the two models' blobs: make a new one with
    ``net.create_extractor()``. An ``extract`` already running when the reload starts
    finishes on the old model.
    """

    def __init__(self, net: LoadedModel) -> None:
        #: the Net that made this extractor (``net.create_extractor()``)
        self.net = net
        self._generation = net.generation
        #: blob -> array with a leading item axis (of 1 when the inputs have no batch axis), or
        #: an ItemBatch: a server's batch as its requests' own arrays
        self._inputs: dict[int, np.ndarray | ItemBatch] = {}
        #: blob -> whether the caller gave it a batch axis
        self._batched: dict[int, bool] = {}
        #: what forwards computed, the same way
        self._kept: dict[int, np.ndarray] = {}
        #: device bytes one item's blobs took at their peak in the last forward's plan (a
        #: batch of N takes N times that); None before a forward ran on the GPU
        self.plan_item_bytes: int | None = None

    def __repr__(self) -> str:
        graph = self.net.graph
        names = [graph.blob_names[i] for i in self._inputs] if graph is not None else []
        stale = "" if self._generation == self.net.generation else ", stale"
        batch = f", batch of {self.batch}" if self.batched else ""
        return (
            f"<Extractor [inputs set: {', '.join(names) or 'none'}{batch}, "
            f"{len(self._kept)} blobs computed{stale}]>"
        )

    @property
    def batched(self) -> bool:
        """Whether the inputs have a batch axis (outputs then have it too)."""
        return any(self._batched.values())

    @property
    def batch(self) -> int:
        """Items per input: the batch axis's length, or 1 without one."""
        return next(iter(self._inputs.values())).shape[0] if self._inputs else 1

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

    def input(self, name: str, array: ArrayLike, *, batch_axis: bool | None = None) -> None:
        """Set an input blob (any blob may be set, as in ncnn).

        Arguments:
            name (str): the blob, usually one of ``net.input_names``.
            array: real numbers (converted to float32) in ncnn's layout: CHW for images, no
                batch axis. One more leading axis than the model's blob makes it a batch of
                that many items (NCHW for a CHW input): every output then has that axis too,
                and all inputs must have the same number of items.
            batch_axis (bool | None): whether the first axis is the batch axis; None (the
                default) decides by the blob's shape in the ``.param`` (its ``Input`` layer),
                and where the ``.param`` gives none, takes 4 and 5 dims as a batch of 3- and
                4-dim items.

        Raises:
            InputError: no blob is called ``name``, the dtype is not a real number type, the
                item has more than 4 dims, or the batch differs from the other inputs'.
        """
        graph = self._graph()
        index = graph.blob_index.get(name)
        if index is None:
            raise InputError(f"no blob named {name!r} (inputs: {list(graph.input_names)})")
        data: np.ndarray | ItemBatch
        if isinstance(array, ItemBatch):  # kept as the arrays, each item written once
            for part in array.parts:
                _check_real(name, part.dtype)
            data = array.float32()
            if batch_axis is False:
                raise InputError(f"input {name!r}: an ItemBatch has its batch axis first")
            batch_axis = True
        else:
            _check_real(name, np.asarray(array).dtype)
            data = np.asarray(array, dtype=np.float32)
        batched = has_batch_axis(graph, index, data.ndim) if batch_axis is None else batch_axis
        item_dims = data.ndim - batched
        if not 1 <= item_dims <= MAX_ITEM_DIMS:
            what = "items of a batch" if batched else "inputs"
            raise InputError(
                f"input {name!r}: {what} must have 1 to {MAX_ITEM_DIMS} dims, got shape "
                f"{data.shape}{' (batch axis first)' if batched else ''}"
            )
        if batched and data.shape[0] == 0:
            raise InputError(f"input {name!r}: a batch of 0 items (shape {data.shape})")
        self._check_same_batch(graph, index, name, batched, data.shape)
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data if batched else data[np.newaxis])
        self._inputs[index] = data
        self._batched[index] = batched
        self._kept.clear()

    def _check_same_batch(
        self, graph: Graph, index: int, name: str, batched: bool, shape: tuple[int, ...]
    ) -> None:
        """InputError when another input's batch (or its lack of one) differs."""
        items = shape[0] if batched else 1
        for other, array in self._inputs.items():
            if other == index:
                continue
            if self._batched[other] != batched or array.shape[0] != items:

                def say(b: bool, shape: tuple[int, ...]) -> str:
                    return f"a batch of {shape[0]}" if b else "no batch axis"

                raise InputError(
                    f"input {name!r} has {say(batched, shape)} (shape {shape}) but "
                    f"input {graph.blob_names[other]!r} has "
                    f"{say(self._batched[other], array.shape)}: every input needs the same"
                )

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
            The blob as a float32 numpy array in ncnn's layout (CHW), with the batch axis first
            when the inputs have one.

        Raises:
            InputError: no blob is called ``name``, an input was not set, or the inputs' shapes
                are ones the model cannot take.
            RuntimeError: the Net loaded another model or closed since this Extractor was made.

        Example::

            ex = net.create_extractor()
            ex.input("in0", np.load("input.npy"))
            scores = await ex.extract("out0")
        """
        return (await self.extract_many([name]))[name]

    async def extract_many(self, names: Iterable[str]) -> dict[str, np.ndarray]:
        """Every blob of ``names`` from one forward (the ones an earlier forward of this
        extractor computed, from none); raises as :meth:`extract` does.

        Example::

            outputs = await ex.extract_many(net.output_names)
        """
        wanted = {name: self._output_index(name) for name in names}
        missing = [t for t in wanted.values() if t not in self._kept and t not in self._inputs]
        if missing:
            self._kept.update(await self._run(missing))
        held = {**self._inputs, **self._kept}
        return {name: self._unbatched(held[t]) for name, t in wanted.items()}

    def _unbatched(self, array: np.ndarray | ItemBatch) -> np.ndarray:
        if isinstance(array, ItemBatch):
            array = np.asarray(array)  # an input handed back: joined, the one copy
        return array if self.batched else array[0]

    def _written(self) -> int:
        """The items a forward writes, runs on the host and reads back: all but an
        ItemBatch's padding."""
        padded = [a.items for a in self._inputs.values() if isinstance(a, ItemBatch)]
        return min(padded, default=self.batch)

    async def _run(self, wanted: list[int]) -> dict[int, np.ndarray]:
        """One forward for ``wanted`` from the inputs and what was kept: the blobs it hands
        back (see ``_forward``), each with the item axis."""
        graph = self._graph()
        held = {**self._inputs, **self._kept}
        forward = plan_forward(graph, held.keys(), wanted)
        reads = {b: held[b] for b in forward.reads}
        items = self.batch
        written = self._written()
        gpu_model = self.net.gpu_model
        if gpu_model is None:
            return await _run_on_cpu(forward, reads, items, written)
        shapes = {b: a.shape[1:] for b, a in reads.items()}
        request = PlanRequest.of(shapes, forward.kept, items)
        async with gpu_model.lent_plan(request) as plan:  # a reload waits for it to end
            self.plan_item_bytes = plan.peak_bytes
            return await plan.run(reads, written=written)


def has_batch_axis(graph: Graph, blob: int, ndim: int) -> bool:
    """Whether an array of ``ndim`` dims for ``blob`` has a batch axis: one dim more than the
    ``Input`` layer declares, or, where none declares a shape, 4 or 5 dims."""
    producer = graph.producer.get(blob)
    declared = None
    if producer is not None:
        declared = getattr(graph.nodes[producer].layer, "declared_shape", None)
    if declared is not None:
        return ndim == len(declared) + 1
    return ndim > MAX_ITEM_DIMS - 1


def _check_real(name: str, dtype: np.dtype[Any]) -> None:
    if dtype.kind not in "fiu":  # real numbers become float32; bool, complex, text do not
        raise InputError(f"input {name!r}: dtype {dtype} is not a real number type")


async def _run_on_cpu(
    forward: Forward, reads: dict[int, np.ndarray | ItemBatch], items: int, written: int
) -> dict[int, np.ndarray]:
    """The forward's layers by their numpy forward, item by item, on a worker thread (the
    first ``written`` items; a padding item's rows are left unset)."""

    def run() -> dict[int, np.ndarray]:
        hosts = [{b: a[i] for b, a in reads.items()} for i in range(written)]
        for node in forward.nodes:
            for host in hosts:
                outs = run_cpu_layer(node, [host[b] for b in node.bottoms])
                for t, value in zip(node.tops, outs, strict=True):
                    host[t] = value
        return {t: stacked(hosts, t, items) for t in forward.kept}

    return await run_sync(run)
