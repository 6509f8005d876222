"""PlanRequest: what a plan is made for (one item's input shapes, the targets, the batch) and
the key its pool keeps it under; a value that pools, extractors and servers pass around, in a
module of its own, apart from how a plan is built."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Shape = tuple[int, ...]


@dataclass(frozen=True)
class PlanRequest:
    """What a plan is made for, and the key its pool keeps it under: one item's shape of each
    blob the host writes, the blobs the host reads back, and how many items run at once."""

    inputs: tuple[tuple[int, Shape], ...]
    targets: tuple[int, ...]
    batch: int = 1

    @classmethod
    def of(cls, shapes: Mapping[int, Shape], targets: Iterable[int], batch: int = 1) -> PlanRequest:
        """The request for ``shapes`` (blob -> one item's shape) and ``targets``."""
        inputs = tuple(sorted((b, tuple(map(int, s))) for b, s in shapes.items()))
        return cls(inputs, tuple(sorted(set(targets))), batch)

    @property
    def input_shapes(self) -> dict[int, Shape]:
        return dict(self.inputs)
