"""ncnn's score sort and greedy NMS, reproduced to the tie (YOLO and SSD post-processing).

ncnn sorts candidate boxes with its own ``qsort_descent_inplace``: a Hoare quicksort on the
middle element that is not stable, so boxes of equal score come out in an order no stable sort
gives. Equal scores are common (the same logits in two cells, saturated sigmoids), so
:func:`qsort_descent_order` runs ncnn's quicksort itself, in C. :func:`nms_sorted` keeps a box
when no box kept before it overlaps it by more than the threshold, across all labels, in float32
with the operand order of ncnn's ``nms_sorted_bboxes``: ncnn's loop, in C too (``_detect.c``).
:func:`ncnn_qsort_order` and :func:`nms_sorted_reference` are the same in Python and numpy, the
references the C loops are tested against.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from . import _detect_ext

#: How a layer compares overlap with the threshold: ``inter / union > t`` (YoloDetectionOutput,
#: DetectionOutput) or ``inter > t * union`` (Yolov3DetectionOutput); they differ in rounding.
IouRule = Literal["divide", "multiply"]


def qsort_descent_order(scores: np.ndarray, count: int | None = None) -> np.ndarray:
    """The first ``count`` (default all) of the permutation ncnn's ``qsort_descent_inplace``
    leaves ``scores`` in (descending; equal scores in ncnn's order, not input order), as int64
    indexes into ``scores``."""
    order = _detect_ext.qsort_order(scores)
    return order if count is None else order[: max(0, count)]


def ncnn_qsort_order(scores: np.ndarray) -> np.ndarray:
    """The permutation ncnn's ``qsort_descent_inplace`` leaves ``scores`` in, by replaying its
    swaps one by one in Python (the reference the C sort is tested against)."""
    s = [float(v) for v in np.asarray(scores, dtype=np.float32).ravel()]
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
    return np.asarray(order, dtype=np.int64)


def nms_sorted(boxes: np.ndarray, areas: np.ndarray, threshold: float, rule: IouRule) -> np.ndarray:
    """Indexes of the boxes ncnn's ``nms_sorted_bboxes`` keeps, in order.

    ``boxes`` is (n, 4) float32 rows ``[xmin, ymin, xmax, ymax]`` sorted by score, ``areas`` the
    (n,) float32 area each layer defines for them. Class-agnostic, as ncnn's is: box i is kept
    when no kept box before it overlaps it.
    """
    return _detect_ext.nms(boxes, areas, threshold, multiply=rule == "multiply")


def nms_sorted_reference(
    boxes: np.ndarray, areas: np.ndarray, threshold: float, rule: IouRule
) -> np.ndarray:
    """:func:`nms_sorted` in numpy, the other way round (each kept box against every later
    one): the reference the C loop is tested against."""
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
            apart = (
                (rest[:, 0] > boxes[k, 2])
                | (rest[:, 2] < boxes[k, 0])
                | (rest[:, 1] > boxes[k, 3])
                | (rest[:, 3] < boxes[k, 1])
            )
            inter = np.where(apart, np.float32(0), _intersection(rest.T, boxes[k]))
            union = areas[k + 1 :] + areas[k] - inter  # ncnn: areas[i] + areas[picked[j]] - inter
            suppressed[k + 1 :] |= _suppresses(inter, union, t, rule)
    return np.asarray(picked, dtype=np.int64)


def _suppresses(inter: np.ndarray, union: np.ndarray, t: np.float32, rule: IouRule) -> np.ndarray:
    return inter / union > t if rule == "divide" else inter > t * union


def _intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ncnn's ``intersection_area(a, b)`` of boxes that are not apart (xmin, ymin, xmax, ymax
    along axis 0, the rest broadcast): std::min(x, y) is (y < x) ? y : x; std::max(x, y) is
    (x < y) ? y : x."""
    axmin, aymin, axmax, aymax = a[0], a[1], a[2], a[3]
    bxmin, bymin, bxmax, bymax = b[0], b[1], b[2], b[3]
    width = np.where(bxmax < axmax, bxmax, axmax) - np.where(axmin < bxmin, bxmin, axmin)
    height = np.where(bymax < aymax, bymax, aymax) - np.where(aymin < bymin, bymin, aymin)
    return (width * height).astype(np.float32)
