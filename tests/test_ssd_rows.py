"""DetectionOutput's per-class work in C (layers/_detect_ext.ssd_rows) against it in numpy.

The reference is the numpy loop the C function replaced, built on the Python replays of ncnn's
quicksort and NMS (layers/_nms.py). Scores with ties (a few levels), NaN and infinities, boxes
with NaN corners and negative areas, both layouts (caffe-ssd and mxnet-ssd), and cuts to
``top_k`` that fall inside a run of equal scores or keep nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

from asyncvk.layers._detect_ext import ssd_rows
from asyncvk.layers._nms import ncnn_qsort_order, nms_sorted_reference

F32 = np.float32


def reference(
    scores: np.ndarray, boxes: np.ndarray, threshold: float, top_k: int, nms: float
) -> np.ndarray:
    """``scores`` as (num_prior, num_class)."""
    rows = [np.zeros((0, 6), F32)]
    for label in range(1, scores.shape[1]):
        column = scores[:, label]
        (passed,) = np.nonzero(column > F32(threshold))
        picked = passed[ncnn_qsort_order(column[passed])[:top_k]]
        b = boxes[picked]
        areas = ((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])).astype(F32)
        kept = picked[nms_sorted_reference(b, areas, nms, "divide")]
        part = np.empty((kept.size, 6), F32)
        part[:, 0] = label
        part[:, 1] = column[kept]
        part[:, 2:] = boxes[kept]
        rows.append(part)
    return np.concatenate(rows)


@pytest.mark.parametrize("mxnet", [False, True], ids=["caffe", "mxnet"])
@pytest.mark.parametrize("seed", range(10))
def test_ssd_rows_are_the_numpy_loop(mxnet: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    num_prior, num_class = int(rng.integers(1, 400)), int(rng.integers(1, 8))
    levels = np.array([0.2, 0.5, 0.5, 0.9, np.nan, np.inf, -np.inf], F32)
    scores = rng.random((num_prior, num_class)).astype(F32)
    tied = rng.random(scores.shape) < 0.5
    scores[tied] = rng.choice(levels, int(tied.sum()))
    center = rng.random((num_prior, 2)).astype(F32)
    size = (rng.random((num_prior, 2)) ** 2 * 0.5).astype(F32)
    boxes = np.concatenate([center - size, center + size], axis=1)
    boxes[rng.random(num_prior) < 0.05, 0] = np.nan
    flip = rng.random(num_prior) < 0.05
    boxes[flip] = boxes[flip][:, [2, 3, 0, 1]]  # negative width and height
    threshold = float(rng.choice([-1.0, 0.2, 0.5, 2.0]))  # 0.2, 0.5: scores equal to it
    top_k = int(rng.choice([0, 1, 5, num_prior, 10 * num_prior]))
    nms = float(rng.choice([0.0, 0.45, 1.0]))
    with np.errstate(all="ignore"):
        wanted = reference(scores, boxes, threshold, top_k, nms)
    conf = np.ascontiguousarray(scores.T) if mxnet else scores
    got = ssd_rows(conf, mxnet, boxes, threshold, top_k, nms)
    nan = np.isnan(wanted)
    assert got.shape == wanted.shape
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), wanted[~nan].view(np.uint32))


def test_ssd_rows_refuses_boxes_of_another_count() -> None:
    with pytest.raises(ValueError, match="priors"):
        ssd_rows(np.zeros((5, 3), F32), False, np.zeros((4, 4), F32), 0.5, 10, 0.45)
