"""ItemBatch: a batch handed to an extraction as its requests' own arrays, never joined.

A server's batch gathers requests of one or more items each. Joining them into one array
along the batch axis would copy every input once more than needed (the plan writes item by
item anyway) into an array allocated afresh each batch: 20 MB for 32 images of 3x224x224,
page faults included, host time that caps a batch's throughput on fast GPUs (about 3 of the
5 ms before a squeezenet batch's submission on an H200's host). An ItemBatch keeps the arrays:
item ``i`` is a view into the request that holds it, and the plan copies it straight into that
item's staging buffer (or device memory).

Items after the requests' are padding (the batch is rounded up to a size it has a plan for).
Nothing writes or reads them: a plan's items are independent, so the GPU computes a padding
item from whatever its input memory holds (any float32 values, as a client may send), and the
rows of the results that belong to padding items are left unset.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

import numpy as np


class ItemBatch:
    """Arrays with the batch axis first and items of one shape, taken as one batch of
    ``size`` items (None: as many as they hold); the items past theirs are padding.

    ``np.asarray`` of it is the joined batch, padding zeros: a copy, for a caller that needs
    one array (an extraction that hands an input back)."""

    __slots__ = ("_padding", "_starts", "items", "parts", "shape")

    def __init__(self, parts: Sequence[np.ndarray], size: int | None = None) -> None:
        if not parts:
            raise ValueError("an ItemBatch needs at least one array")
        item_shapes = {tuple(p.shape[1:]) for p in parts}
        if len(item_shapes) != 1 or any(p.ndim < 1 for p in parts):
            shapes = [p.shape for p in parts]
            raise ValueError(f"the arrays of a batch need items of one shape, got {shapes}")
        self.parts = tuple(parts)
        #: each part's first item
        self._starts: list[int] = []
        items = 0
        for part in self.parts:
            self._starts.append(items)
            items += len(part)
        #: the items the arrays hold (the batch's others are padding)
        self.items = items
        size = items if size is None else size
        if size < items:
            raise ValueError(f"a batch of {size} items cannot hold {items}")
        self.shape: tuple[int, ...] = (size, *item_shapes.pop())
        self._padding: np.ndarray | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.result_type(*self.parts)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, item: int) -> np.ndarray:
        """Item ``item``: a view into the array that holds it; a padding item is zeros (one
        read-only array, made on first use)."""
        if not 0 <= item < self.shape[0]:
            raise IndexError(f"item {item} of a batch of {self.shape[0]}")
        if item < self.items:
            part = bisect_right(self._starts, item) - 1
            return self.parts[part][item - self._starts[part]]
        if self._padding is None:
            self._padding = np.zeros(self.shape[1:], self.dtype)
            self._padding.flags.writeable = False
        return self._padding

    def float32(self) -> ItemBatch:
        """The same batch with each array float32 and C-contiguous (itself where they are)."""
        parts = [np.ascontiguousarray(p, np.float32) for p in self.parts]
        if all(a is b for a, b in zip(parts, self.parts, strict=True)):
            return self
        return ItemBatch(parts, self.shape[0])

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("an ItemBatch is one array only as a copy")
        joined = np.zeros(self.shape, dtype or self.dtype)
        np.concatenate(self.parts, out=joined[: self.items])
        return joined

    def __repr__(self) -> str:
        padding = self.shape[0] - self.items
        return f"<ItemBatch {self.shape} from {len(self.parts)} arrays, {padding} padding>"


def stacked(hosts: list[dict[int, np.ndarray]], blob: int, batch: int) -> np.ndarray:
    """``blob`` of every item in ``hosts`` as one float32 array of ``batch`` items (the rows
    past the hosts' are padding, left unset)."""
    arrays = [np.asarray(h[blob], dtype=np.float32) for h in hosts]
    if len(arrays) == batch:
        return np.stack(arrays)
    out = np.empty((batch, *arrays[0].shape), np.float32)
    np.stack(arrays, out=out[: len(arrays)])
    return out
