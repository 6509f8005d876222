"""The tolerances the comparisons with the ncnn wheel use (``ncnn_oracle``): loose enough for
the last bit that depends on the CPU, tight enough that a real difference still fails."""

from __future__ import annotations

import numpy as np
import pytest
from ncnn_oracle import assert_close_to_ncnn, assert_same_detections, float_steps

F32 = np.float32


def _up(value: float, steps: int) -> np.float32:
    """``value`` moved ``steps`` float32 steps up."""
    out = F32(value)
    for _ in range(steps):
        out = np.nextafter(out, F32(np.inf))
    return out


def test_float_steps_count_the_floats_between() -> None:
    assert float_steps(F32(1), _up(1, 3)) == 3
    assert float_steps(F32(0.0), F32(-0.0)) == 0
    tiny = np.nextafter(F32(0), F32(1))
    assert float_steps(-tiny, tiny) == 2  # across zero
    assert float_steps(F32(np.nan), F32(np.nan)) == 0
    assert float_steps(F32(np.inf), F32(np.inf)) == 0
    assert float_steps(np.finfo(F32).max, F32(np.inf)) == np.inf
    assert float_steps(F32(np.nan), F32(1)) == np.inf
    # near 0, one step of 1.0 is many of the value's own (a PriorBox corner near 0.009: 128)
    small = F32(0.0091555985)
    near = F32(small - np.spacing(F32(1)))
    assert float_steps(near, small) == 128
    assert float_steps(near, small, scale=1.0) == 1


def test_close_to_ncnn_allows_the_steps_asked_and_names_the_worst() -> None:
    theirs = np.linspace(0.5, 2, 12, dtype=F32).reshape(3, 4)
    ours = theirs.copy()
    ours[1, 2] = _up(ours[1, 2], 4)
    assert_close_to_ncnn(ours, theirs, ulps=4)
    ours[2, 1] = _up(ours[2, 1], 5)
    with pytest.raises(AssertionError, match=r"1 of 12 values over 4 .* 5 steps, at \(2, 1\)"):
        assert_close_to_ncnn(ours, theirs, ulps=4)
    with pytest.raises(AssertionError, match="shape"):
        assert_close_to_ncnn(ours[:2], theirs)
    nan = theirs.copy()
    nan[0, 0] = np.nan
    with pytest.raises(AssertionError, match=r"at \(0, 0\)"):
        assert_close_to_ncnn(theirs, nan)


def _rows(*rows: tuple[float, ...]) -> np.ndarray:
    return np.array(rows, F32).reshape(-1, 6)


# label, score, x1, y1, x2, y2: A and B overlap (IoU 0.6), C stands apart
A = (1, 0.9, 0.1, 0.1, 0.5, 0.5)
B = (1, 0.9, 0.1, 0.15, 0.5, 0.55)
C = (2, 0.7, 0.6, 0.6, 0.9, 0.9)
D = (1, 0.5, 0.6, 0.1, 0.9, 0.4)


def test_detections_pair_rows_within_a_last_bit() -> None:
    theirs = _rows(A, C, D)
    ours = theirs.copy()
    ours[0, 1] = _up(ours[0, 1], 2)
    ours[1, 3] = _up(ours[1, 3], 3)
    assert_same_detections(ours, theirs)
    assert_same_detections(np.zeros(0, F32), np.zeros(0, F32))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.__setitem__((1, 2), r[1, 2] + 1e-4), "without a pair"),  # a box moved
        (lambda r: r.__setitem__((2, 0), 3), "without a pair"),  # a label changed
        (lambda r: r.__setitem__((0, 1), _up(r[0, 1], 9)), "without a pair"),  # a score off
        (lambda r: r.__setitem__(slice(0, 2), r[[1, 0]]), "other order"),  # not a near tie
    ],
    ids=["box-moved", "label-changed", "score-off", "order"],
)
def test_detections_fail_on_a_real_difference(change: object, message: str) -> None:
    theirs = _rows(A, C, D)
    ours = theirs.copy()
    change(ours)  # type: ignore[operator]
    with pytest.raises(AssertionError, match=message):
        assert_same_detections(ours, theirs, score_threshold=0.3, nms_threshold=0.45)


def test_detections_fail_on_a_missing_row() -> None:
    with pytest.raises(AssertionError, match=r"ncnn's row 2 \[1.0, 0.5"):
        assert_same_detections(_rows(A, C), _rows(A, C, D), score_threshold=0.3)


def test_near_ties_come_in_either_order_unless_the_scores_are_equal_to_the_bit() -> None:
    tied = _rows(A, (2, 0.9, 0.6, 0.6, 0.9, 0.9))
    swapped = tied[::-1].copy()
    assert_same_detections(swapped, tied)
    with pytest.raises(AssertionError, match="must come in its order"):
        assert_same_detections(swapped, tied, ties_in_order=True)
    swapped[0, 1] = _up(swapped[0, 1], 1)  # a last bit apart: either order again
    assert_same_detections(swapped, tied, ties_in_order=True)


def test_a_row_on_the_score_threshold_may_be_in_one_output_only() -> None:
    edge = (2, 0.3, 0.6, 0.6, 0.9, 0.9)
    assert_same_detections(_rows(A, edge), _rows(A), score_threshold=0.3)
    with pytest.raises(AssertionError, match="without a pair"):
        assert_same_detections(_rows(A, edge), _rows(A), score_threshold=0.2)


def test_a_row_on_the_nms_knife_edge_may_be_in_one_output_only() -> None:
    keeper = (1, 0.9, 0.0, 0.0, 1.0, 1.0)
    inside = (1, 0.8, 0.0, 0.0, 1.0, 0.45)  # IoU 0.45 with the keeper
    assert_same_detections(_rows(keeper, inside), _rows(keeper), nms_threshold=0.45)
    with pytest.raises(AssertionError, match="without a pair"):
        assert_same_detections(_rows(keeper, inside), _rows(keeper), nms_threshold=0.3)
    other_class = (2, *inside[1:])
    with pytest.raises(AssertionError, match="without a pair"):
        assert_same_detections(_rows(keeper, other_class), _rows(keeper), nms_threshold=0.45)
    assert_same_detections(
        _rows(keeper, other_class), _rows(keeper), nms_threshold=0.45, nms_per_class=False
    )


def test_a_near_tie_under_nms_may_keep_either_box_if_both_are_candidates() -> None:
    a_first = _rows(A, C)
    b = np.array(B, F32)
    b[1] = _up(b[1], 1)  # a last bit above A: ncnn's sort put B first, so its NMS kept B
    b_first = _rows(tuple(b), C)
    with pytest.raises(AssertionError, match="without a pair"):
        assert_same_detections(a_first, b_first, nms_threshold=0.45)
    candidates = _rows(tuple(b), A, C)
    assert_same_detections(a_first, b_first, nms_threshold=0.45, candidates=candidates)
    # a box of ours that is not a candidate (moved) is no swap
    moved = a_first.copy()
    moved[0, 2] += 0.01
    with pytest.raises(AssertionError, match="without a pair"):
        assert_same_detections(moved, b_first, nms_threshold=0.45, candidates=candidates)


def test_what_a_box_on_an_edge_suppressed_may_differ_too() -> None:
    """ncnn keeps E (over the score threshold by a last bit), which suppresses F; asyncvk drops
    E, so F stands."""
    e = (1, 0.3, 0.0, 0.0, 0.5, 0.5)
    f = (1, 0.2, 0.0, 0.05, 0.5, 0.55)
    common = (2, 0.9, 0.6, 0.6, 0.9, 0.9)
    assert_same_detections(
        _rows(common, f), _rows(common, e), score_threshold=0.3, nms_threshold=0.45
    )
    with pytest.raises(AssertionError, match="without a pair"):
        assert_same_detections(
            _rows(common, f), _rows(common, e), score_threshold=0.25, nms_threshold=0.45
        )
