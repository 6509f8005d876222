"""The C best-class scan (layers/_detect_ext.best_class) against ncnn's scan over the classes,
replayed as ncnn runs it.

The layer tests compare whole layers with the ncnn wheel; this reaches the cases their maps
do not: ties between classes, scores equal to the scan's starting floor, NaN, -inf, signed
zeros.
"""

from __future__ import annotations

import numpy as np
import pytest

from asyncvk.layers._detect_ext import best_class

F32_MAX = np.finfo(np.float32).max


def ncnn_scan(scores: np.ndarray, floor: np.float32) -> tuple[list[int], list[float]]:
    """ncnn: ``if (score > class_score) { class_index = q; class_score = score; }`` per cell."""
    labels, bests = [], []
    for cell in scores.reshape(scores.shape[0], -1).T.tolist():
        label, best = 0, float(floor)
        for q, score in enumerate(cell):
            if score > best:
                label, best = q, score
        labels.append(label)
        bests.append(best)
    return labels, bests


@pytest.mark.parametrize("floor", [np.float32(0), -np.float32(F32_MAX)])
def test_best_class_is_ncnns_scan(floor: np.float32) -> None:
    rng = np.random.default_rng(5)
    levels = np.array([0.0, -0.0, 0.5, 1.0, -1.0, np.nan, -np.inf, -F32_MAX], np.float32)
    scores = rng.choice(levels, size=(6, 40, 50)).astype(np.float32)
    scores[:, 0, :] = levels[rng.integers(0, 2, (6, 50))]  # only signed zeros
    scores[:, 1, :] = -F32_MAX  # only the floor of Yolov3DetectionOutput
    scores[:, 2, :] = np.nan
    label, best = best_class(scores, floor)
    wanted_labels, wanted_bests = ncnn_scan(scores, floor)
    assert label.dtype == np.int64 and best.dtype == np.float32
    assert label.reshape(-1).tolist() == wanted_labels
    wanted = np.array(wanted_bests, np.float32)
    assert np.array_equal(best.reshape(-1).view(np.uint32), wanted.view(np.uint32))
