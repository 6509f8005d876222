"""The C score sort and NMS of layers/_nms.py against ncnn's loops replayed in Python and numpy.

The layer tests compare whole layers with the ncnn wheel; these compare the C loops with the
reference replays on inputs built to reach every branch: scores with and without ties (in the
kept prefix or only after it), NaN scores, many boxes, and the inputs where boxes that are apart
can still suppress (a negative threshold, a negative area).
"""

from __future__ import annotations

import numpy as np
import pytest

from asyncvk.layers._nms import (
    IouRule,
    ncnn_qsort_order,
    nms_sorted,
    nms_sorted_reference,
    qsort_descent_order,
)


def scores(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    if kind == "distinct":
        return rng.permutation(np.linspace(0.01, 1, n)).astype(np.float32)
    if kind == "few_levels":  # many ties everywhere
        return rng.integers(0, 5, n).astype(np.float32)
    # distinct scores on top, one tied level below them
    top = np.linspace(2, 3, n // 2, dtype=np.float32)
    return rng.permutation(np.concatenate([top, np.full(n - n // 2, 0.5, np.float32)]))


@pytest.mark.parametrize("kind", ["distinct", "few_levels", "tied_tail"])
@pytest.mark.parametrize("n", [0, 1, 2, 7, 300])
def test_sort_is_ncnns_quicksort(kind: str, n: int) -> None:
    rng = np.random.default_rng(n)
    s = scores(rng, kind, n)
    full = ncnn_qsort_order(s)
    for count in (None, 0, 1, 5, n // 2, n // 2 + 1, n, n + 3):
        got = qsort_descent_order(s, count)
        wanted = full if count is None else full[: max(0, min(count, n))]
        assert got.dtype == np.int64
        assert got.tolist() == wanted.tolist(), (kind, n, count)


@pytest.mark.parametrize("seed", range(6))
def test_sort_with_nan_and_signed_zeros_is_ncnns_quicksort(seed: int) -> None:
    """NaN stops both of the quicksort's scans (a NaN pivot too), -0 ties +0; sizes up to
    several thousand, so the C sort's range stack is deep."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5000))
    levels = np.array([0.0, -0.0, 0.5, 1.0, np.nan, -np.inf, np.inf, 0.25], np.float32)
    s = rng.choice(levels, n).astype(np.float32)
    s = np.where(rng.random(n) < 0.5, rng.random(n).astype(np.float32), s)  # half distinct
    assert qsort_descent_order(s).tolist() == ncnn_qsort_order(s).tolist()


def test_sort_ties_are_not_a_stable_sort() -> None:
    """Where ties decide the order, the replay's order is not a stable sort's (so a shortcut
    that sorted stably through ties would fail the test above)."""
    s = scores(np.random.default_rng(1), "few_levels", 300)
    assert ncnn_qsort_order(s).tolist() != np.argsort(-s, kind="stable").tolist()


def random_boxes(rng: np.random.Generator, n: int, spread: float) -> np.ndarray:
    center = rng.random((n, 2)) * spread
    size = rng.random((n, 2)) ** 3
    return np.concatenate([center - size / 2, center + size / 2], axis=1).astype(np.float32)


def areas_of(boxes: np.ndarray) -> np.ndarray:
    return ((boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])).astype(np.float32)


@pytest.mark.parametrize("rule", ["divide", "multiply"])
@pytest.mark.parametrize("threshold", [0.0, 0.3, 0.7, -0.01])
@pytest.mark.parametrize("spread", [1.0, 4.0])
def test_nms_keeps_what_ncnns_loop_keeps(rule: IouRule, threshold: float, spread: float) -> None:
    rng = np.random.default_rng(int(spread * 10))
    n = 401
    boxes = random_boxes(rng, n, spread)
    boxes[5:9] = boxes[4]  # identical boxes: the first of them suppresses the others
    areas = areas_of(boxes)
    wanted = nms_sorted_reference(boxes, areas, threshold, rule)
    assert wanted.size < n and (threshold < 0 or wanted.size > 1)  # < 0: apart boxes suppress
    got = nms_sorted(boxes, areas, threshold, rule)
    assert got.dtype == np.int64
    assert got.tolist() == wanted.tolist()


@pytest.mark.parametrize("rule", ["divide", "multiply"])
def test_nms_odd_boxes_as_ncnns_loop(rule: IouRule) -> None:
    """NaN corners, zero and negative areas (xmin > xmax), and an empty input."""
    rng = np.random.default_rng(7)
    boxes = random_boxes(rng, 256, 1.5)
    boxes[::11, 2] = boxes[::11, 0]  # zero width
    boxes[3::13, [0, 2]] = boxes[3::13, [2, 0]]  # inverted: negative area
    boxes[5::17, 1] = np.nan
    areas = areas_of(boxes)
    for threshold in (0.0, 0.45):
        wanted = nms_sorted_reference(boxes, areas, threshold, rule)
        assert nms_sorted(boxes, areas, threshold, rule).tolist() == wanted.tolist()
    empty = np.zeros((0, 4), np.float32)
    assert nms_sorted(empty, np.zeros(0, np.float32), 0.45, rule).tolist() == []


@pytest.mark.parametrize("rule", ["divide", "multiply"])
@pytest.mark.parametrize("seed", range(8))
def test_nms_random_odd_boxes_as_ncnns_loop(rule: IouRule, seed: int) -> None:
    """Random sizes and thresholds; corners from a few levels (identical boxes, infinities,
    NaN) mixed with random ones, so every comparison of the pair test meets each case."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 700))
    boxes = random_boxes(rng, n, float(rng.choice([0.5, 2.0, 8.0])))
    levels = np.array([0.0, -0.0, 0.5, 1.0, np.inf, -np.inf, np.nan], np.float32)
    odd = rng.random(boxes.shape) < 0.05
    boxes[odd] = rng.choice(levels, int(odd.sum()))
    boxes[rng.random(n) < 0.1] = boxes[0]
    with np.errstate(all="ignore"):
        areas = areas_of(boxes)
        areas[rng.random(n) < 0.02] = np.nan
        threshold = float(rng.choice([-0.5, 0.0, float(rng.random()), 1.0, 2.0]))
        wanted = nms_sorted_reference(boxes, areas, threshold, rule)
    assert nms_sorted(boxes, areas, threshold, rule).tolist() == wanted.tolist()


def test_nms_refuses_mismatched_areas() -> None:
    with pytest.raises(ValueError, match="must be"):
        nms_sorted(np.zeros((3, 4), np.float32), np.zeros(2, np.float32), 0.5, "divide")
    with pytest.raises(ValueError, match="must be"):
        nms_sorted(np.zeros((3, 3), np.float32), np.zeros(3, np.float32), 0.5, "divide")
