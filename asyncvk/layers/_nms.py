"""ncnn's score sort and greedy NMS, reproduced to the tie (YOLO and SSD post-processing).

ncnn sorts candidate boxes with its own ``qsort_descent_inplace``: a Hoare quicksort on the
middle element that is not stable, so boxes of equal score come out in an order no stable sort
gives. Equal scores are common (the same logits in two cells, saturated sigmoids), so
:func:`qsort_descent_order` replays ncnn's swaps exactly. :func:`nms_sorted` keeps a box when no
box kept before it overlaps it by more than the threshold, across all labels, in float32 with
the operand order of ncnn's ``nms_sorted_bboxes``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

#: How a layer compares overlap with the threshold: ``inter / union > t`` (YoloDetectionOutput,
#: DetectionOutput) or ``inter > t * union`` (Yolov3DetectionOutput); they differ in rounding.
IouRule = Literal["divide", "multiply"]


def qsort_descent_order(scores: np.ndarray, count: int | None = None) -> np.ndarray:
    """The first ``count`` (default all) of the permutation ncnn's ``qsort_descent_inplace``
    leaves ``scores`` in (descending; equal scores in ncnn's order, not input order).

    When no two of the first ``count`` scores (nor the last of them and the next) are equal,
    that prefix is unique and a plain sort gives it: 640k SSD candidates sort in a second
    rather than ten. Returns indexes into ``scores``.
    """
    s = [float(v) for v in np.asarray(scores, dtype=np.float32).ravel()]
    wanted = len(s) if count is None else max(0, min(count, len(s)))
    by_score = np.argsort(-np.asarray(s, dtype=np.float64), kind="stable")
    head = np.asarray(s, dtype=np.float64)[by_score[: wanted + 1]]
    if np.unique(head).size == head.size:
        return by_score[:wanted].astype(np.int64)
    order = list(range(len(s)))
    pending = [(0, len(s) - 1)] if s else []
    while pending:  # the two halves are disjoint, so their order of processing is free
        left, right = pending.pop()
        i, j = left, right
        pivot = s[(left + right) // 2]
        while i <= j:
            while s[i] > pivot:
                i += 1
            while s[j] < pivot:
                j -= 1
            if i <= j:
                s[i], s[j] = s[j], s[i]
                order[i], order[j] = order[j], order[i]
                i += 1
                j -= 1
        if left < j:
            pending.append((left, j))
        if i < right:
            pending.append((i, right))
    return np.asarray(order[:wanted], dtype=np.int64)


def nms_sorted(boxes: np.ndarray, areas: np.ndarray, threshold: float, rule: IouRule) -> np.ndarray:
    """Indexes of the boxes ncnn's ``nms_sorted_bboxes`` keeps, in order.

    ``boxes`` is (n, 4) float32 rows ``[xmin, ymin, xmax, ymax]`` sorted by score, ``areas`` the
    (n,) float32 area each layer defines for them. Class-agnostic, as ncnn's is.
    """
    boxes = np.asarray(boxes, dtype=np.float32)
    areas = np.asarray(areas, dtype=np.float32)
    t = np.float32(threshold)
    n = len(boxes)
    suppressed = np.zeros(n, dtype=bool)
    picked: list[int] = []
    with np.errstate(all="ignore"):
        for k in range(n):
            if suppressed[k]:
                continue
            picked.append(k)
            rest = boxes[k + 1 :]
            inter = _intersection_areas(rest, boxes[k])
            union = areas[k + 1 :] + areas[k] - inter  # ncnn: areas[i] + areas[picked[j]] - inter
            over = inter / union > t if rule == "divide" else inter > t * union
            suppressed[k + 1 :] |= over
    return np.asarray(picked, dtype=np.int64)


def _intersection_areas(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ncnn's ``intersection_area(a[i], b)`` for each row of ``a``: std::min/std::max as ncnn
    evaluates them, and 0 where the boxes are apart."""
    axmin, aymin, axmax, aymax = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
    bxmin, bymin, bxmax, bymax = b[0], b[1], b[2], b[3]
    apart = (axmin > bxmax) | (axmax < bxmin) | (aymin > bymax) | (aymax < bymin)
    # std::min(x, y) is (y < x) ? y : x; std::max(x, y) is (x < y) ? y : x
    width = np.where(bxmax < axmax, bxmax, axmax) - np.where(axmin < bxmin, bxmin, axmin)
    height = np.where(bymax < aymax, bymax, aymax) - np.where(aymin < bymin, bymin, aymin)
    inter = (width * height).astype(np.float32)
    return np.where(apart, np.float32(0), inter)
