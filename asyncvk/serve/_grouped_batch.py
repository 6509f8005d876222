"""Running a batch that another batcher gathered (Ray Serve's ``@serve.batch``): its requests
are grouped by input shapes and outputs, and each group runs as one extraction over the
requests' own arrays, padded to a power of two of items as asyncvk's own batcher pads (one plan
per padded size)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..net._net import Net
from ._batcher import batch_inputs, request_items


@dataclass(eq=False)
class BatchItem:
    """One request: its inputs (batch axis first, the same items in each) and its outputs.

    Raises:
        InputError: its inputs hold different numbers of items (its answers would be another
            request's rows), or none.
    """

    inputs: dict[str, np.ndarray]
    outputs: tuple[str, ...]
    items: int = field(init=False)

    def __post_init__(self) -> None:
        self.items = request_items(self.inputs)

    @property
    def key(self) -> tuple[Any, ...]:
        """What requests share to run in one extraction."""
        shapes = tuple(sorted((n, a.shape[1:]) for n, a in self.inputs.items()))
        return self.outputs, shapes


def item_count(batch: list[BatchItem]) -> int:
    """The items of a batch (what ``max_batch`` bounds), not its requests."""
    return sum(item.items for item in batch)


async def run_grouped(
    net: Net, batch: list[BatchItem], max_batch: int
) -> list[dict[str, np.ndarray] | Exception]:
    """Each request's outputs, in order; a group that fails answers its error to each of its
    requests, and the other groups still run."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, item in enumerate(batch):
        groups.setdefault(item.key, []).append(i)
    answers: list[dict[str, np.ndarray] | Exception] = [{} for _ in batch]
    for indices in groups.values():
        group = [batch[i] for i in indices]
        try:
            inputs = batch_inputs([item.inputs for item in group], item_count(group), max_batch)
            ex = net.create_extractor()
            for name, array in inputs.items():
                ex.input(name, array, batch_axis=True)
            results = await ex.extract_many(group[0].outputs)
        except Exception as exc:
            for i in indices:
                answers[i] = exc
            continue
        offset = 0
        for i, item in zip(indices, group, strict=True):
            answers[i] = {n: a[offset : offset + item.items] for n, a in results.items()}
            offset += item.items
    return answers
