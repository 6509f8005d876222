"""Batcher: concurrent requests for one model join one GPU submission (Triton's dynamic batcher).

Requests wait in one queue per model, in arrival order. A batch starts when fewer than
``max_inflight`` batches of the model are on the GPU: it takes the request at the head and
every later one with the same input shapes and outputs, up to ``max_batch`` items, so while
one batch runs the next one gathers what arrives meanwhile and the GPU is never idle for want
of a submission. With ``max_queue_delay`` the head also waits up to that long for others to
join, unless the batch is full before.

A batch is one extraction over the requests' inputs along their batch axis: one plan, recorded
once per batch size and replayed (see ``net._plan``), one submission and one fence per segment
for every request in it. The requests' arrays are not joined: each item is copied once, from
the request into the plan (``net._item_batch``). A batch's size is rounded up to a power of two
(the rest is padding, neither written nor read), so a model has a handful of batch plans
rather than one per size.

A batch's blobs take device memory in proportion to its items (the plan's arena holds one
set per item), so ``max_batch_bytes`` bounds a batch by memory too: a key's first batch is its
head request alone, whose plan says what an item takes (the key's next batch waits for it),
and the key's later batches hold at most the power of two of items that fits (a single
request larger than that runs alone).

A request that finds ``max_queue`` waiting is refused (:class:`QueueFull`); one whose caller
went away (its task cancelled) is dropped before its batch forms, and never reaches the GPU.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import AsyncVkError, InputError
from ..net._extractor import has_batch_axis
from ..net._item_batch import ItemBatch
from ..net._net import Net
from ..net._net_group import NetGroup


class QueueFull(AsyncVkError):
    """``max_queue`` requests already wait for the model: try again later."""


@dataclass(frozen=True)
class BatchSettings:
    """How one model's requests are batched (see the module's docstring)."""

    #: items in one batch (a single request with more runs alone)
    max_batch: int = 32
    #: seconds the head of the queue may wait for others to join its batch
    max_queue_delay: float = 0.0
    #: requests that may wait; beyond it, :class:`QueueFull`
    max_queue: int = 256
    #: batches of the model on the GPU at once
    max_inflight: int = 2
    #: device bytes a batch's blobs may take: a batch of larger items holds fewer of them
    max_batch_bytes: int = 256 << 20

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_queue", "max_inflight", "max_batch_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.max_queue_delay >= 0:
            raise ValueError(f"max_queue_delay must be 0 or more, got {self.max_queue_delay}")


@dataclass
class BatchStatistics:
    """Counters since the batcher was made (times in seconds, summed over requests)."""

    requests: int = 0
    items: int = 0
    succeeded: int = 0
    failed: int = 0
    refused: int = 0  #: QueueFull
    dropped: int = 0  #: callers gone before their batch formed
    batches: int = 0
    #: batches by size in items (before rounding up)
    batch_sizes: Counter[int] = field(default_factory=Counter)
    queue_seconds: float = 0.0  #: arrival to the start of the request's batch
    compute_seconds: float = 0.0  #: a batch's extraction, counted once per batch
    waiting: int = 0
    inflight: int = 0


#: the outputs and each input's item shape: what requests must share to join one batch
_Key = tuple[tuple[str, ...], tuple[tuple[str, tuple[int, ...]], ...]]


@dataclass(eq=False)
class _Request:
    inputs: dict[str, np.ndarray]
    outputs: tuple[str, ...]
    items: int
    key: _Key
    arrived: float
    future: asyncio.Future[dict[str, np.ndarray]]


class Batcher:
    """The dynamic batcher of one Net, or of a NetGroup (one model on several GPUs: each batch
    goes to the member that should finish it first, ``max_inflight`` batches per member);
    ``await infer(inputs)`` from any number of tasks."""

    def __init__(
        self,
        net: Net | NetGroup,
        settings: BatchSettings | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.net = net
        self.settings = settings or BatchSettings()
        self._clock = clock
        self._queue: deque[_Request] = deque()
        self._wake = asyncio.Event()
        self._dispatcher: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        #: per key, the device bytes one item's blobs take (learned from its first batch)
        self._item_bytes: dict[_Key, int] = {}
        #: keys whose first batch runs now: their next waits to learn from it
        self._learning: set[_Key] = set()
        self.statistics = BatchStatistics()

    async def infer(
        self, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Run ``inputs`` (name -> float32 array with a leading batch axis, the same number of
        items in each) in the next batch that can take them; returns ``outputs`` (None: every
        output of the model) with the same leading axis.

        Raises:
            QueueFull: ``max_queue`` requests already wait.
            InputError: the inputs' batch axes differ, or the model cannot take them.
        """
        stats = self.statistics
        stats.requests += 1
        if len(self._queue) >= self.settings.max_queue:
            stats.refused += 1
            raise QueueFull(
                f"{len(self._queue)} requests already wait for this model (the queue's bound)"
            )
        items = request_items(inputs)
        arrays = {n: np.asarray(a, np.float32) for n, a in inputs.items()}
        names, key = self._key({n: a.shape[1:] for n, a in arrays.items()}, outputs)
        future: asyncio.Future[dict[str, np.ndarray]] = asyncio.get_running_loop().create_future()
        self._queue.append(_Request(arrays, names, items, key, self._clock(), future))
        self._start()
        try:
            return await future
        except asyncio.CancelledError:
            future.cancel()  # still queued: its batch will leave it out
            raise

    def _start(self) -> None:
        self._wake.set()
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = asyncio.ensure_future(self._dispatch())

    async def _dispatch(self) -> None:
        """Form batches while requests wait (one task per batcher, gone when the queue is)."""
        settings = self.settings
        while True:
            self._drop_gone()
            if not self._queue:
                return
            self._wake.clear()
            if len(self._running) >= settings.max_inflight * self._members():
                await self._wake.wait()  # a batch ended (or a request came)
                continue
            head = self._queue[0]
            if head.key in self._learning:
                await self._wake.wait()  # its first batch ended (or a request came)
                continue
            if settings.max_queue_delay > 0 and self._joinable(head) < self._most_items(head):
                left = head.arrived + settings.max_queue_delay - self._clock()
                if left > 0:
                    try:
                        await asyncio.wait_for(self._wake.wait(), left)
                    except TimeoutError:
                        pass
                    if self._clock() < head.arrived + settings.max_queue_delay:
                        continue  # woken early: look again
            if head.key not in self._item_bytes:
                self._learning.add(head.key)
            task = asyncio.ensure_future(self._run(self._take(head)))
            self._running.add(task)
            task.add_done_callback(self._batch_ended)

    def _members(self) -> int:
        """Devices the batches run on: a group's members still serving (at least one, so
        that a group with none left still forms the batches that will fail)."""
        net = self.net
        return max(net.serving_members, 1) if isinstance(net, NetGroup) else 1

    def _key(
        self, item_shapes: Mapping[str, tuple[int, ...]], outputs: Sequence[str] | None
    ) -> tuple[tuple[str, ...], _Key]:
        """The outputs asked for, and the key of requests that may share a batch."""
        names = tuple(self.net.output_names if outputs is None else outputs)
        return names, (names, tuple(sorted(item_shapes.items())))

    def item_bytes(
        self, item_shapes: Mapping[str, tuple[int, ...]], outputs: Sequence[str] | None = None
    ) -> int | None:
        """What one item of these shapes takes in a batch's plan, once a batch of them ran
        (0 on the CPU; None before)."""
        return self._item_bytes.get(self._key(item_shapes, outputs)[1])

    def _batch_ended(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if self._queue:
            self._start()

    def _drop_gone(self) -> None:
        """Leave out the requests whose callers went away."""
        if any(r.future.done() for r in self._queue):
            kept = deque(r for r in self._queue if not r.future.done())
            self.statistics.dropped += len(self._queue) - len(kept)
            self._queue = kept

    def _joinable(self, head: _Request) -> int:
        return sum(r.items for r in self._queue if r.key == head.key)

    def _most_items(self, head: _Request) -> int:
        """The items a batch of the head's key may hold: ``max_batch``, or the power of two
        of items whose memory fits ``max_batch_bytes`` where that is fewer; the head alone
        while what an item takes is not known."""
        item_bytes = self._item_bytes.get(head.key)
        if item_bytes is None:
            return head.items
        if not item_bytes:
            return self.settings.max_batch
        fits = self.settings.max_batch_bytes // max(item_bytes, 1)
        if fits >= self.settings.max_batch:
            return self.settings.max_batch
        return 1 << max(fits, 1).bit_length() - 1  # a power of two: its padded size

    def _take(self, head: _Request) -> list[_Request]:
        """The head and the later requests of its key, up to :meth:`_most_items`, in order."""
        most = self._most_items(head)
        batch: list[_Request] = []
        rest: deque[_Request] = deque()
        items = 0
        for r in self._queue:
            if r.key == head.key and (not batch or items + r.items <= most):
                batch.append(r)
                items += r.items
            else:
                rest.append(r)
        self._queue = rest
        return batch

    async def _run(self, batch: list[_Request]) -> None:
        stats = self.statistics
        start = self._clock()
        items = sum(r.items for r in batch)
        stats.batches += 1
        stats.items += items
        stats.batch_sizes[items] += 1
        stats.queue_seconds += sum(start - r.arrived for r in batch)
        try:
            inputs = batch_inputs([r.inputs for r in batch], items, self._most_items(batch[0]))

            async def extract(net: Net) -> tuple[dict[str, np.ndarray], int]:
                ex = net.create_extractor()
                for name, array in inputs.items():
                    ex.input(name, array, batch_axis=True)
                results = await ex.extract_many(batch[0].outputs)
                return results, ex.plan_item_bytes or 0  # 0: none on the CPU

            net = self.net
            results, item_bytes = await (
                net.call(extract) if isinstance(net, NetGroup) else extract(net)
            )
            self._item_bytes[batch[0].key] = item_bytes
        except Exception as exc:
            stats.failed += len(batch)
            for r in batch:
                if not r.future.done():
                    r.future.set_exception(exc)
            return
        finally:
            stats.compute_seconds += self._clock() - start
            self._learning.discard(batch[0].key)
        offset = 0
        for r in batch:
            if not r.future.done():
                r.future.set_result({n: a[offset : offset + r.items] for n, a in results.items()})
                stats.succeeded += 1
            offset += r.items

    async def drain(self) -> None:
        """Return once every request taken so far has its answer (or was dropped)."""
        while self._queue or self._running:
            pending: list[asyncio.Future[Any]] = [r.future for r in self._queue]
            pending += self._running
            await asyncio.wait(pending)

    def waiting(self) -> int:
        """Requests in the queue now."""
        return len(self._queue)

    def inflight(self) -> int:
        """Batches on the GPU now."""
        return len(self._running)


def with_batch_axis(
    net: Net, inputs: Mapping[str, np.ndarray]
) -> tuple[bool, dict[str, np.ndarray]]:
    """Whether a request's inputs came with a batch axis, and each input with one, as
    :meth:`Batcher.infer` takes them: ``Extractor.input``'s rule, one for all inputs (the
    names must be the model's inputs)."""
    graph = net.graph
    assert graph is not None
    if not inputs:
        raise InputError("no inputs")
    found = {
        name: has_batch_axis(graph, graph.blob_index[name], np.ndim(array))
        for name, array in inputs.items()
    }
    if len(set(found.values())) > 1:
        raise InputError(f"every input needs the batch axis, or none does: {found}")
    batched = next(iter(found.values()))
    arrays = {n: np.asarray(a, np.float32) for n, a in inputs.items()}
    return batched, arrays if batched else {n: a[np.newaxis] for n, a in arrays.items()}


def request_items(inputs: Mapping[str, np.ndarray]) -> int:
    """The items every input holds along its batch axis (InputError when they differ)."""
    if not inputs:
        raise InputError("no inputs")
    counts = {name: (np.shape(a)[0] if np.ndim(a) else 0) for name, a in inputs.items()}
    items = set(counts.values())
    if len(items) != 1 or 0 in items:
        raise InputError(f"every input needs the same number of items (batch axis): {counts}")
    return items.pop()


def padded_size(items: int, max_batch: int) -> int:
    """The batch size a plan is made for: the next power of two, at most ``max_batch`` (a
    larger request keeps its own size)."""
    if items >= max_batch:
        return items
    return min(1 << (items - 1).bit_length(), max_batch)


def batch_inputs(
    inputs: list[dict[str, np.ndarray]], items: int, max_batch: int
) -> dict[str, np.ndarray | ItemBatch]:
    """Each input of the requests as one batch, padded to its plan's size: the requests' own
    arrays, never joined (see ``net._item_batch``); one request of that size as it came."""
    size = padded_size(items, max_batch)
    if len(inputs) == 1 and size == items:
        return dict(inputs[0])
    return {name: ItemBatch([request[name] for request in inputs], size) for name in inputs[0]}
