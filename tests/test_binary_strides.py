"""BinaryOp's operand strides on the GPU, worked out from the shapes, against the layer's own
numpy reference: an add over index arrays shows where each output element reads each operand.
No GPU."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from asyncvk.layers._geometry import shape4
from asyncvk.layers._paramdict import ParamDict
from asyncvk.layers.binary import BinaryOp, binary_shapes, broadcast_strides

Shape = tuple[int, ...]


def _probed(a: Shape, b: Shape) -> tuple[tuple[int, int, int, int], ...]:
    """Each operand's (w, h, d, c) steps, read off the reference's output for an index array
    in that operand (zeros in the other); asserts the map is affine from 0."""
    out = binary_shapes(a, b)[2]
    add = BinaryOp()
    add.load_param(ParamDict({0: 0}))
    found = []
    for k, shape in enumerate((a, b)):
        arrays = [np.zeros(a, np.float32), np.zeros(b, np.float32)]
        arrays[k] = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
        grid = add.forward(arrays)[0].astype(np.int64).reshape(shape4(out)[::-1])  # (c, d, h, w)
        steps = []
        for axis in (3, 2, 1, 0):  # w, h, d, c
            n = grid.shape[axis]
            steps.append(0 if n == 1 else int(np.take(grid, 1, axis=axis).flat[0]))
        c, d, h, w = np.indices(grid.shape)
        assert np.array_equal(grid, w * steps[0] + h * steps[1] + d * steps[2] + c * steps[3])
        found.append((steps[0], steps[1], steps[2], steps[3]))
    return tuple(found)


def _pairs() -> list[tuple[Shape, Shape]]:
    """Operand pairs of every rank 1-4 against every rank, broadcast on any axis or none."""
    full = {1: (5,), 2: (3, 5), 3: (4, 3, 5), 4: (2, 4, 3, 5)}
    pairs = []
    for ra, rb in itertools.product(full, full):
        a = full[ra]
        for mask in itertools.product((False, True), repeat=rb):
            b = tuple(1 if m else n for n, m in zip(full[rb], mask, strict=True))
            for x, y in ((a, b), (b, a)):
                try:
                    binary_shapes(x, y)
                except ValueError:
                    continue
                pairs.append((x, y))
    # a 1-D operand matched against the outer axis (ncnn's rule), and against the inner one
    pairs += [((4,), (4, 3, 5)), ((5,), (4, 3, 5)), ((3,), (3, 5)), ((2,), (2, 4, 3, 5))]
    return pairs


PAIRS = _pairs()


@pytest.mark.parametrize(("a", "b"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_strides_follow_the_reference(a: Shape, b: Shape) -> None:
    out = binary_shapes(a, b)[2]
    assert broadcast_strides((a, b), out) == _probed(a, b)


def test_outputs_of_2_24_elements_stay_on_the_cpu() -> None:
    big = (1 << 12, 1 << 12)
    assert broadcast_strides((big, (1,)), big) is None
    assert broadcast_strides(((4095, 4096), (1,)), (4095, 4096)) is not None
