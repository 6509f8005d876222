"""Proposal: Faster R-CNN's region proposals, as ncnn's proposal.cpp makes them, on the CPU (a
sort and a greedy NMS are host loops, as DetectionOutput's are).

ncnn's anchors are fixed (ratios 0.5, 1, 2 by scales 8, 16, 32 of ``base_size``: 9 per
position; its params do not set them). Each anchor, moved by ``feat_stride`` per position (a
float32 sum step by step, as ncnn's loop), is shifted and scaled by its box deltas, clipped to
the image (input 2: height, width, scale), dropped when narrower or lower than ``min_size *
scale``, then all are sorted by their foreground score (ncnn's quicksort, ties in its order),
cut to ``pre_nms_topN`` (when > 0), suppressed by NMS over ``nms_thresh`` (two boxes of zero
area, clipped onto the image's edge, overlap by 0 / 0 = NaN, which the wheel's -ffast-math
build counts as over any threshold: of those only the first is kept) and cut to
``after_nms_topN``. Outputs: the boxes as (n, 1, 4) (x1, y1, x2, y2), and with a second top
their scores as (n, 1, 1); n depends on the data (the planned shapes are the most it can be).
When no box is left ncnn's forward fails (it cannot make an empty blob): here too.
"""

from __future__ import annotations

import math

import numpy as np

from ._base import BlobCount, Layer, Shape
from ._limits import MAX_EXTENT
from ._nms import nms_sorted, qsort_descent_order
from ._registry import register_layer
from ._schema import Param

_F = np.float32
_RATIOS = (0.5, 1.0, 2.0)
_SCALES = (8.0, 16.0, 32.0)
ANCHORS = len(_RATIOS) * len(_SCALES)


def _c_round(v: np.float32) -> int:
    """C's ``round``: half away from zero (exact in float64 for a float32 value)."""
    return int(math.copysign(math.floor(abs(float(v)) + 0.5), float(v)))


def anchors(base_size: int) -> np.ndarray:
    """ncnn's ``generate_anchors``: (9, 4) float32 boxes centred on ``base_size / 2``."""
    center = _F(base_size) * _F(0.5)
    half = _F(0.5)
    rows = []
    for ratio in (_F(r) for r in _RATIOS):
        r_w = _c_round(_F(_F(base_size) / np.sqrt(ratio)))
        r_h = _c_round(_F(_F(r_w) * ratio))
        for scale in (_F(s) for s in _SCALES):
            rs_w, rs_h = _F(r_w) * scale, _F(r_h) * scale
            rows.append(
                [
                    center - rs_w * half,
                    center - rs_h * half,
                    center + rs_w * half,
                    center + rs_h * half,
                ]
            )
    return np.array(rows, _F)


def _steps(starts: np.ndarray, step: np.float32, count: int) -> np.ndarray:
    """(len(starts), count): each start, then ``+= step`` in float32 one step at a time."""
    table = np.full((len(starts), count), step, _F)
    table[:, 0] = starts
    return np.cumsum(table, axis=1, dtype=_F)


def _first_values(x: np.ndarray, count: int) -> np.ndarray:
    return np.asarray(x, _F).reshape(-1)[:count]


@register_layer("Proposal")
class Proposal(Layer):
    """Region proposals from RPN scores (input 0: (2 x 9, h, w), background then foreground),
    box deltas (input 1: (4 x 9, h, w)) and the image info (input 2: height, width, scale)."""

    feat_stride = Param(0, int, 16)
    base_size = Param(1, int, 16, limit=MAX_EXTENT)
    pre_nms_topN = Param(2, int, 6000)
    after_nms_topN = Param(3, int, 300)
    nms_thresh = Param(4, float, 0.7)
    min_size = Param(5, int, 16)

    one_blob_only = False

    def validate(self) -> None:
        if self.after_nms_topN < 1:
            raise ValueError(
                f"Proposal param 3 (after_nms_topN) = {self.after_nms_topN} must be >= 1 "
                "(ncnn cannot make an empty output)"
            )

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (3, 3), (1, 2)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        score, bbox, info = input_shapes
        if len(score) != 3 or score[0] < 2 * ANCHORS:
            raise ValueError(
                f"Proposal: scores {score} must be (c, h, w) with c >= {2 * ANCHORS} "
                f"(background and foreground of {ANCHORS} anchors)"
            )
        if len(bbox) != 3 or bbox[0] < 4 * ANCHORS or bbox[1:] != score[1:]:
            raise ValueError(
                f"Proposal: box deltas {bbox} must be (c, {score[1]}, {score[2]}) with c >= "
                f"{4 * ANCHORS}, as the scores"
            )
        if (math.prod(info[1:]) if len(info) >= 3 else math.prod(info)) < 3:
            raise ValueError(f"Proposal: image info {info} holds fewer than 3 values")
        most = ANCHORS * score[1] * score[2]
        if self.pre_nms_topN > 0:
            most = min(most, self.pre_nms_topN)
        most = min(most, self.after_nms_topN)
        shapes: list[Shape] = [(most, 1, 4), (most, 1, 1)]
        return shapes[: max(1, len(self.tops))]

    def _boxes(self, deltas: np.ndarray, h: int, w: int, info: np.ndarray) -> np.ndarray:
        """Every anchor at every position, shifted by its deltas and clipped: (9, h * w, 4)."""
        base = anchors(self.base_size)
        stride = _F(self.feat_stride)
        half = _F(0.5)
        anchor_w, anchor_h = base[:, 2] - base[:, 0], base[:, 3] - base[:, 1]
        cx = _steps(base[:, 0], stride, w) + (anchor_w * half)[:, None]  # (9, w)
        cy = _steps(base[:, 1], stride, h) + (anchor_h * half)[:, None]  # (9, h)
        d = np.asarray(deltas, _F)[: 4 * ANCHORS].reshape(ANCHORS, 4, h, w)
        aw, ah = anchor_w[:, None, None], anchor_h[:, None, None]
        pb_cx = cx[:, None, :] + aw * d[:, 0]
        pb_cy = cy[:, :, None] + ah * d[:, 1]
        # expf rounded once: float64 exp then float32 is what a correctly rounded expf gives
        pb_w = aw * np.exp(d[:, 2].astype(np.float64)).astype(_F)
        pb_h = ah * np.exp(d[:, 3].astype(np.float64)).astype(_F)
        corners = [
            pb_cx - pb_w * half,
            pb_cy - pb_h * half,
            pb_cx + pb_w * half,
            pb_cy + pb_h * half,
        ]
        im_h, im_w = info[0], info[1]
        clipped = []
        for k, v in enumerate(corners):
            top = _F(im_w - _F(1)) if k % 2 == 0 else _F(im_h - _F(1))
            v = np.where(top < v, top, v)  # std::min(v, top), then std::max(., 0.f)
            clipped.append(np.where(v < 0, _F(0), v))
        return np.stack(clipped, axis=-1).astype(_F).reshape(ANCHORS, h * w, 4)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        score, deltas, info_blob = inputs
        _, h, w = score.shape
        info = _first_values(info_blob, 3)
        boxes = self._boxes(deltas, h, w, info).reshape(-1, 4)
        scores = np.asarray(score, _F)[ANCHORS : 2 * ANCHORS].reshape(-1)
        least = _F(_F(self.min_size) * info[2])
        box_w = (boxes[:, 2] - boxes[:, 0]) + _F(1)
        box_h = (boxes[:, 3] - boxes[:, 1]) + _F(1)
        keep = (box_w >= least) & (box_h >= least)
        boxes, scores = boxes[keep], scores[keep]
        order = qsort_descent_order(scores)
        if 0 < self.pre_nms_topN < len(order):
            order = order[: self.pre_nms_topN]
        boxes, scores = boxes[order], scores[order]
        areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        picked = nms_sorted(boxes, areas, self.nms_thresh, "divide")
        # two boxes of zero area overlap by 0 / 0: ncnn (built with -ffast-math) suppresses
        # the later one, so of the zero-area boxes the first kept is the last
        flat = np.flatnonzero(areas[picked] == 0)
        picked = np.delete(picked, flat[1:])[: self.after_nms_topN]
        if not len(picked):
            raise ValueError(
                f"Proposal: no box is at least min_size x scale = {least} pixels a side "
                "(ncnn's forward fails here too)"
            )
        outs = [boxes[picked].reshape(-1, 1, 4), scores[picked].reshape(-1, 1, 1)]
        return [np.ascontiguousarray(o, _F) for o in outs[: max(1, len(self.tops))]]
