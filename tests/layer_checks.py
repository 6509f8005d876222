"""Helpers shared by the CPU layer tests: a fake ModelBin and a checked forward pass."""

from __future__ import annotations

from typing import Any

import numpy as np


class FakeModelBin:
    """Hands out successive slices of one array, recording the requested (w, type)."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = np.asarray(data, np.float32).reshape(-1)
        self.offset = 0
        self.calls: list[tuple[int, int]] = []

    def load(self, w: int, type: int) -> np.ndarray:
        self.calls.append((w, type))
        out = self.data[self.offset : self.offset + w]
        assert out.size == w, "fake model bin ran out of data"
        self.offset += w
        return out.copy()


def forward_checked(layer: Any, *inputs: np.ndarray) -> list[np.ndarray]:
    """Forward, checking shape inference, float32 outputs and that inputs stay untouched."""
    copies = [x.copy() for x in inputs]
    outs = layer.forward(list(inputs))
    for x, c in zip(inputs, copies, strict=True):
        np.testing.assert_array_equal(x, c)
    assert layer.output_shapes([x.shape for x in inputs]) == [o.shape for o in outs]
    assert all(o.dtype == np.float32 for o in outs)
    return list(outs)
