"""ncnn's score sort and greedy NMS, reproduced to the tie (YOLO and SSD post-processing).

ncnn sorts candidate boxes with its own ``qsort_descent_inplace``: a Hoare quicksort on the
middle element that is not stable, so boxes of equal score come out in an order no stable sort
gives. Equal scores are common (the same logits in two cells, saturated sigmoids), so
:func:`qsort_descent_order` replays ncnn's swaps exactly (:func:`ncnn_qsort_order`) when ties
decide the order, and is a numpy sort otherwise. :func:`nms_sorted` keeps a box when no box kept
before it overlaps it by more than the threshold, across all labels, in float32 with the operand
order of ncnn's ``nms_sorted_bboxes``. It compares blocks of boxes at once (a pair's overlap is
the same float32 arithmetic whichever way it is batched), so only the greedy choice within a
block is a Python loop; :func:`nms_sorted_reference` is ncnn's loop as it is.
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
    rather than ten. Otherwise :func:`ncnn_qsort_order` replays the whole sort (which tie lands
    where depends on every swap before it). Returns indexes into ``scores``.
    """
    values = np.asarray(scores, dtype=np.float32).ravel()
    wanted = values.size if count is None else max(0, min(count, values.size))
    by_score = np.argsort(-values, kind="stable")
    head = values[by_score[: wanted + 1]]
    tied = np.any(head[1:] == head[:-1])  # sorted, so equal scores are neighbours
    if not tied and not np.isnan(values).any():  # a NaN unsorts ncnn's quicksort
        return by_score[:wanted].astype(np.int64)
    return ncnn_qsort_order(values)[:wanted]


def ncnn_qsort_order(scores: np.ndarray) -> np.ndarray:
    """The permutation ncnn's ``qsort_descent_inplace`` leaves ``scores`` in, by replaying its
    swaps one by one (the reference :func:`qsort_descent_order` shortens)."""
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


#: Boxes decided per step of :func:`nms_sorted`: each step compares them with the boxes kept
#: so far (one array operation) and with each other (a block x block matrix).
_BLOCK = 128


def nms_sorted(boxes: np.ndarray, areas: np.ndarray, threshold: float, rule: IouRule) -> np.ndarray:
    """Indexes of the boxes ncnn's ``nms_sorted_bboxes`` keeps, in order.

    ``boxes`` is (n, 4) float32 rows ``[xmin, ymin, xmax, ymax]`` sorted by score, ``areas`` the
    (n,) float32 area each layer defines for them. Class-agnostic, as ncnn's is: box i is kept
    when no kept box before it overlaps it.
    """
    boxes = np.asarray(boxes, dtype=np.float32)
    areas = np.asarray(areas, dtype=np.float32)
    t = np.float32(threshold)
    n = len(boxes)
    columns = np.ascontiguousarray(boxes.T)  # xmin, ymin, xmax, ymax rows: contiguous outers
    # boxes apart have inter 0, which suppresses nothing unless the threshold is negative or,
    # for inter > t * union, a negative area makes the union negative
    sparse = bool(t >= 0 and (rule == "divide" or not (areas < 0).any()))
    kept = np.zeros(n, dtype=bool)
    with np.errstate(all="ignore"):
        for start in range(0, n, _BLOCK):
            block = np.arange(start, min(n, start + _BLOCK))
            earlier = np.flatnonzero(kept[:start])
            rows = block
            if earlier.size:
                hit = _overlaps(columns, areas, block, earlier, t, rule, sparse)
                rows = block[~hit.any(axis=1)]
            # within the block: over[i, j] when box rows[j] (earlier) suppresses rows[i]
            over = np.tril(_overlaps(columns, areas, rows, rows, t, rule, sparse), -1)
            suppressed = np.zeros(len(rows), dtype=bool)
            for j in np.flatnonzero(over.any(axis=0)).tolist():  # boxes that suppress some
                if not suppressed[j]:  # box j is kept: every suppressor before it was decided
                    suppressed |= over[:, j]
            kept[rows[~suppressed]] = True
    return np.flatnonzero(kept).astype(np.int64)


def _overlaps(
    columns: np.ndarray,
    areas: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    t: np.float32,
    rule: IouRule,
    sparse: bool,
) -> np.ndarray:
    """(len(a), len(b)) booleans: whether kept box ``b[j]`` suppresses box ``a[i]`` (indexes
    into ``columns``, the boxes as four rows), as ncnn computes it: ``inter =
    intersection_area(a, b)``, ``union = areas[a] + areas[b] - inter``. ``sparse``: apart pairs
    suppress nothing, so only the pairs that touch are computed (most pairs of detections are
    apart)."""
    ca, cb = columns[:, a], columns[:, b]
    apart = np.greater.outer(ca[0], cb[2])
    scratch = np.empty_like(apart)
    apart |= np.less.outer(ca[2], cb[0], out=scratch)
    apart |= np.greater.outer(ca[1], cb[3], out=scratch)
    apart |= np.less.outer(ca[3], cb[1], out=scratch)
    if not sparse:
        inter = np.where(apart, np.float32(0), _intersection(ca[:, :, None], cb[:, None, :]))
        union = areas[a][:, None] + areas[b][None, :] - inter
        return _suppresses(inter, union, t, rule)
    i, j = np.nonzero(~apart)
    inter = _intersection(ca[:, i], cb[:, j])
    union = areas[a[i]] + areas[b[j]] - inter
    hit = np.zeros(apart.shape, dtype=bool)
    hit[i, j] = _suppresses(inter, union, t, rule)
    return hit


def nms_sorted_reference(
    boxes: np.ndarray, areas: np.ndarray, threshold: float, rule: IouRule
) -> np.ndarray:
    """:func:`nms_sorted` as ncnn's loop does it: each kept box against every later one."""
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
