"""The C YOLO decode (layers/_detect_ext.yolo_decode) against the numpy decode it replaced.

The numpy decode below is the one checked against the ncnn wheel before the loops moved to C
(Yolov3DetectionOutput bit for bit), with layers/_libm.expf for the C library's expf, and
YoloDetectionOutput's softmax on the C decode's polynomial e^x (``exp_nonpositive``). The layer
tests compare whole layers with ncnn; this compares every candidate row bit for bit on maps the
layer tests do not reach: NaN and infinite logits, ties between classes, saturated sigmoids,
thresholds that keep every cell or none, a single class and a 1 x 1 map.
"""

from __future__ import annotations

import numpy as np
import pytest

from asyncvk.layers._detect_ext import yolo_decode
from asyncvk.layers._libm import expf

F32 = np.float32
ONE = F32(1)
HALF = F32(0.5)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return ONE / (ONE + expf(-x))


def best_class(scores: np.ndarray, floor: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """ncnn's scan as an argmax: the first largest over the floor, NaN never winning."""
    ranked = np.where(np.isnan(scores), F32(-np.inf), scores)
    label = ranked.argmax(axis=0).astype(np.int64)
    best = np.take_along_axis(ranked, label[None], axis=0)[0]
    nothing = ~(best > floor)
    label[nothing] = 0
    best[nothing] = floor
    return label, best


def exp_nonpositive(x: np.ndarray) -> np.ndarray:
    """The C decode's e^x for x <= 0 or NaN, operation for operation in float32."""
    lo = F32(-87.33654)
    t = np.where(x < lo, lo, x)
    n = (t * F32(1.44269504088896341) + F32(12582912.0)) - F32(12582912.0)
    r = (t - n * F32(0.693359375)) - n * F32(-2.12194440e-4)
    p = np.full_like(r, F32(1.9875691500e-4))
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + F32(c)
    p = (p * (r * r) + r) + ONE
    scale = ((np.where(n == n, n, F32(0)).astype(np.int32) + 127) << 23).view(F32)
    return np.where(x < lo, F32(0), p * scale)


def test_exp_nonpositive_is_within_two_ulps_of_expf() -> None:
    """Over every float32 in [logf(FLT_MIN), 0]'s range that matters to a softmax."""
    x = np.concatenate([-np.geomspace(1e-30, 87.33, 200_000, dtype=F32), [F32(0), F32(-0.0)]])
    np.testing.assert_array_max_ulp(exp_nonpositive(x), expf(x), maxulp=2)
    edge = np.array([-np.inf, -1e30, -87.34, np.nan], F32)
    np.testing.assert_array_equal(exp_nonpositive(edge), np.array([0, 0, 0, np.nan], F32))


def softmax_channels(x: np.ndarray) -> np.ndarray:
    e = exp_nonpositive(x - x.max(axis=0))
    total = e[0].copy()
    for q in range(1, e.shape[0]):  # ncnn adds the channels in order
        total += e[q]
    return e * (ONE / total)


def reference(
    blob: np.ndarray, num_box: int, num_class: int, anchors: np.ndarray, t: float, v3: bool
) -> np.ndarray:
    """Rows ``[score, xmin, ymin, xmax, ymax, area, label]``; ``blob`` softmaxed in place (v2)."""
    _, h, w = blob.shape
    per_box = 5 + num_class
    threshold = F32(t)
    parts = []
    for pp in range(num_box):
        x, y, bw, bh, objectness = blob[pp * per_box : pp * per_box + 5]
        scores = blob[pp * per_box + 5 : (pp + 1) * per_box]
        if v3:
            label, score = best_class(scores, -np.finfo(F32).max)
            confidence = ONE / (ONE + expf(-objectness) * (ONE + expf(-score)))
        else:
            scores[...] = softmax_channels(scores)
            label, score = best_class(scores, F32(0))
            confidence = sigmoid(objectness) * score
        keep = confidence >= threshold
        row, col = (i.astype(F32) for i in np.nonzero(keep))
        cx = (col + sigmoid(x[keep])) * (ONE / F32(w))
        cy = (row + sigmoid(y[keep])) * (ONE / F32(h))
        box_w = expf(bw[keep]) * anchors[pp, 0]
        box_h = expf(bh[keep]) * anchors[pp, 1]
        corners = [cx - box_w * HALF, cy - box_h * HALF, cx + box_w * HALF, cy + box_h * HALF]
        area = (corners[2] - corners[0]) * (corners[3] - corners[1]) if not v3 else box_w * box_h
        columns = (confidence[keep], *corners, area, label[keep].astype(F32))
        parts.append(np.stack(columns, axis=1).astype(F32))
    return np.concatenate(parts)


def assert_same_bits(got: np.ndarray, wanted: np.ndarray) -> None:
    """Equal to the bit, NaN where the reference has NaN (of any sign and payload)."""
    assert got.shape == wanted.shape
    nan = np.isnan(wanted)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), wanted[~nan].view(np.uint32))


def odd_map(rng: np.random.Generator, boxes: int, classes: int, h: int, w: int) -> np.ndarray:
    """Logits from a few levels (ties between classes, saturation, NaN, infinities) mixed with
    normal noise."""
    levels = np.array([0.0, -0.0, 2.0, 2.0, -90.0, 90.0, np.nan, np.inf, -np.inf], F32)
    x = rng.normal(0.0, 2.0, (boxes * (5 + classes), h, w)).astype(F32)
    odd = rng.random(x.shape) < 0.3
    x[odd] = rng.choice(levels, int(odd.sum()))
    return x


@pytest.mark.parametrize("v3", [False, True], ids=["v2", "v3"])
@pytest.mark.parametrize(
    ("boxes", "classes", "h", "w"), [(3, 4, 5, 7), (2, 1, 1, 1), (1, 80, 13, 13), (2, 3, 0, 4)]
)
@pytest.mark.parametrize("threshold", [-1.0, 0.3, 0.9, 2.0])
@pytest.mark.parametrize("softmax_all", [True, False], ids=["in-place", "hopeful-cells"])
def test_decode_is_the_numpy_decode_bit_for_bit(
    v3: bool, boxes: int, classes: int, h: int, w: int, threshold: float, softmax_all: bool
) -> None:
    """The rows, and with ``softmax_all`` v2's in-place softmax; without it v2 softmaxes only
    the cells whose objectness can reach the threshold, aside, and leaves the map alone."""
    rng = np.random.default_rng(boxes * 1000 + classes * 10 + h)
    blob = odd_map(rng, boxes, classes, h, w)
    anchors = rng.random((boxes, 2)).astype(F32)
    original = blob.copy()
    wanted_blob = blob.copy()
    with np.errstate(all="ignore"):
        wanted = reference(wanted_blob, boxes, classes, anchors, threshold, v3)
    got = yolo_decode(blob, boxes, classes, anchors, threshold, v3=v3, softmax_all=softmax_all)
    assert_same_bits(got, wanted)
    assert_same_bits(blob, wanted_blob if softmax_all and not v3 else original)
    if threshold < 0 and h:
        assert len(got) > 0


def test_cells_that_cannot_reach_the_threshold_are_not_softmaxed() -> None:
    """Of a map whose objectness logits are mostly hopeless, as a trained model's are, the
    decode keeps the same rows whether it softmaxes every cell or only the hopeful ones; the
    hopeful ones include every cell whose sigmoid(objectness) is the threshold exactly."""
    rng = np.random.default_rng(7)
    boxes, classes, h, w = 5, 20, 13, 13
    blob = rng.normal(0, 3, (boxes * (5 + classes), h, w)).astype(F32)
    blob[4 :: 5 + classes] = rng.normal(-6, 2, (boxes, h, w))  # objectness: mostly hopeless
    blob[4, 0, 0] = 0.0  # sigmoid 0.5 exactly, and its best class score 1: confidence 0.5
    blob[5:25, 0, 0] = -100.0
    blob[5, 0, 0] = 50.0
    anchors = rng.random((boxes, 2)).astype(F32)
    full = yolo_decode(blob.copy(), boxes, classes, anchors, 0.5, v3=False, softmax_all=True)
    hopeful = yolo_decode(blob, boxes, classes, anchors, 0.5, v3=False)
    assert_same_bits(hopeful, full)
    assert 0 < len(full) < boxes * h * w // 10
    assert full[0, 0] == np.float32(0.5)  # the cell on the threshold is a row


def test_decode_refuses_maps_too_small() -> None:
    blob = np.zeros((2 * 7 - 1, 3, 3), F32)  # one channel short of 2 boxes of 2 classes
    with pytest.raises(ValueError, match="too small"):
        yolo_decode(blob, 2, 2, np.ones((2, 2), F32), 0.5, v3=True)
    with pytest.raises(ValueError, match="too small"):
        yolo_decode(np.zeros((14, 3, 3), F32), 2, 2, np.ones(3, F32), 0.5, v3=False)
    with pytest.raises(ValueError, match="contiguous"):
        yolo_decode(np.zeros((14, 3, 6), F32)[:, :, ::2], 2, 2, np.ones(4, F32), 0.5, v3=False)


def test_decode_refuses_what_would_take_it_out_of_bounds() -> None:
    """No class (the softmax would read past the map), a negative count, and a read-only map
    for the v2 decode that writes its softmax into the map."""
    anchors = np.ones(4, F32)
    for boxes, classes in ((1, 0), (1, -5), (-1, 2)):
        with pytest.raises(ValueError, match="boxes of"):
            yolo_decode(np.zeros((5, 2, 2), F32), boxes, classes, anchors, 0.0, v3=False)
    frozen = np.zeros((7, 2, 2), F32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        yolo_decode(frozen, 1, 2, anchors, 0.0, v3=False, softmax_all=True)
    assert yolo_decode(frozen, 1, 2, anchors, 2.0, v3=True).shape == (0, 7)  # v3 only reads
    assert yolo_decode(frozen, 1, 2, anchors, 0.0, v3=False).shape == (4, 7)  # so does v2, aside
