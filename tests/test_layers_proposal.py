"""Proposal against ncnn itself (the wheel's CPU fp32), on asyncvk's CPU path (a sort and NMS on
the host, in a GPU plan as in a CPU one): every param (stride, anchor base size, the two top-n
cuts, the NMS threshold, min_size and the image scale), equal scores, one and two outputs, the
boxes feeding a GPU ROIAlign; blobs that do not fit are an InputError, bad params a
ModelFormatError.

Box corners come from expf and float32 sums whose last bits differ by ncnn build (ncnn_oracle),
so the proposals are compared row by row as ``assert_same_detections`` pairs detections."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import (
    Model,
    assert_close_to_ncnn,
    assert_same_detections,
    asyncvk_forward,
    ncnn_forward,
    write_model,
)

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

_F = np.float32
NAMES = ("score", "bbox", "info")


def _model(tmp_path: Path, layer: str, name: str = "m") -> Model:
    """The three RPN inputs, then ``layer`` (``Type name bottoms... tops... params``)."""
    lines = [f"Input {n} 0 1 {n}" for n in NAMES]
    tops = int(layer.split()[3])
    text = f"7767517\n4 {3 + tops}\n" + "\n".join([*lines, layer])
    return write_model(tmp_path, text, name=name)


# -- proposals ----------------------------------------------------------------------------------


def _rpn(seed: int, h: int, w: int, im: tuple[float, float, float]) -> dict[str, np.ndarray]:
    """RPN outputs: scores with repeated values (ties for the sort), small box deltas."""
    rng = np.random.default_rng(seed)
    score = rng.random((18, h, w)).astype(_F)
    score[9:, ::2, ::2] = score[9, 0, 0]  # a block of equal foreground scores
    bbox = rng.normal(0, 0.3, (36, h, w)).astype(_F)
    return {"score": score, "bbox": bbox, "info": np.array(im, _F)}


def _rows(boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Proposals as detection rows (label 0, score, x1, y1, x2, y2)."""
    n = len(boxes)
    return np.concatenate([np.zeros((n, 1), _F), scores.reshape(n, 1), boxes.reshape(n, 4)], 1)


PROPOSAL_CASES = [
    # (id, params, map h, map w, image info)
    ("rpn", "0=16 1=16 2=100 3=20 4=0.7 5=2", 5, 6, (80, 96, 1.0)),
    ("pre-cut-strict-nms", "1=4 2=30 3=10 4=0.3 5=4", 6, 8, (96, 128, 1.0)),
    ("no-pre-cut-stride8", "0=8 1=8 2=-1 3=50 4=0.5 5=1", 7, 3, (60, 30, 1.0)),
    ("scale-filters", "3=40 4=0.6", 6, 6, (96, 96, 2.0)),
    ("no-nms", "2=40 3=25 4=1.0 5=1", 4, 5, (70, 90, 1.0)),
    ("defaults", "", 6, 7, (100, 120, 0.5)),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(
    ("params", "h", "w", "im"),
    [c[1:] for c in PROPOSAL_CASES],
    ids=[c[0] for c in PROPOSAL_CASES],
)
async def test_proposal_matches_ncnn(
    tmp_path: Path, params: str, h: int, w: int, im: tuple[float, float, float], gpu: bool
) -> None:
    model = _model(tmp_path, f"Proposal p 3 2 score bbox info out0 out1 {params}")
    inputs = _rpn(len(params), h, w, im)
    theirs = ncnn_forward(model, inputs, ["out0", "out1"])
    ours, _ = await asyncvk_forward(model, inputs, ["out0", "out1"], gpu=gpu)
    assert ours["out0"].shape[1:] == (1, 4) and ours["out1"].shape[1:] == (1, 1)
    assert len(theirs["out0"]) >= 5, "the case proposes too little to compare"
    nms = float(dict(p.split("=") for p in params.split()).get("4", 0.7))
    no_nms = _model(
        tmp_path, f"Proposal p 3 2 score bbox info out0 out1 {params} 4=1.0 3=9999", "all"
    )
    before = ncnn_forward(no_nms, inputs, ["out0", "out1"])
    # box corners come from expf and sums of anchors: ncnn's last bits differ by build
    assert_same_detections(
        _rows(ours["out0"], ours["out1"]),
        _rows(theirs["out0"], theirs["out1"]),
        rtol=1e-5,
        atol=1e-4,
        nms_threshold=nms,
        candidates=_rows(before["out0"], before["out1"]),
    )


async def test_proposal_one_output_and_ties_in_ncnn_order(tmp_path: Path) -> None:
    """One top: the boxes only. Equal scores come in the order of ncnn's quicksort (the
    scores are copied from the input, so they are ncnn's to the bit)."""
    model = _model(tmp_path, "Proposal p 3 1 score bbox info out0 2=60 3=40 4=1.0 5=1")
    inputs = _rpn(3, 5, 6, (80, 96, 1.0))
    inputs["score"][9:] = np.round(inputs["score"][9:] * 4) / 4  # few distinct scores
    theirs = ncnn_forward(model, inputs, ["out0"])["out0"]
    ours, _ = await asyncvk_forward(model, inputs, ["out0"], gpu=False)
    assert np.allclose(ours["out0"], theirs, rtol=1e-5, atol=1e-4), "not in ncnn's order"


async def test_proposal_feeds_roialign_on_the_gpu(tmp_path: Path) -> None:
    """Faster R-CNN's head: the CPU Proposal's top box pooled by the GPU ROIAlign."""
    text = """7767517
    6 7
    Input score 0 1 score
    Input bbox 0 1 bbox
    Input info 0 1 info
    Input feat 0 1 feat
    Proposal p 3 1 score bbox info rois 2=50 3=10 4=0.7 5=2
    ROIAlign ra 2 1 feat rois out0 0=3 1=3 2=0.0625 5=1
    """
    model = write_model(tmp_path, text)
    inputs = {
        **_rpn(4, 5, 6, (80, 96, 1.0)),
        "feat": np.random.default_rng(9).normal(size=(4, 5, 6)).astype(_F),
    }
    theirs = ncnn_forward(model, inputs, ["out0"])["out0"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out0"], gpu=True)
    assert cpu_types == {"Proposal"}, cpu_types
    assert_close_to_ncnn(ours["out0"], theirs, ulps=64, scale=1.0)


async def test_proposal_with_nothing_left_fails_as_ncnn_does(tmp_path: Path) -> None:
    model = _model(tmp_path, "Proposal p 3 1 score bbox info out0 5=200")
    inputs = _rpn(1, 4, 4, (60, 60, 1.0))
    with pytest.raises(AssertionError, match=r"status -100"):
        ncnn_forward(model, inputs, ["out0"])
    with pytest.raises(
        InputError, match=re.escape("no box is at least min_size x scale = 200.0 pixels")
    ):
        await asyncvk_forward(model, inputs, ["out0"])


BAD_PARAMS = [
    (
        "Proposal p 3 1 score bbox info out0 3=0",
        "Proposal param 3 (after_nms_topN) = 0 must be >= 1",
    ),
    ("Proposal p 2 1 score bbox out0", "Proposal takes 3 input blobs, got 2"),
    ("Proposal p 3 3 score bbox info a b c", "Proposal gives 1 to 2 output blobs, got 3"),
]


@pytest.mark.parametrize(("layer", "message"), BAD_PARAMS, ids=[b[1][:40] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, layer: str, message: str
) -> None:
    model = _model(tmp_path, layer)
    inputs = _rpn(1, 4, 4, (60, 60, 1.0))
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, inputs, ["out0"])
    where = (caught.value.file, caught.value.line, caught.value.layer)
    assert where == (str(model.param), 6, "p")


PROPOSAL_SHAPES = [
    ((17, 4, 4), (36, 4, 4), (3,), "scores (17, 4, 4) must be (c, h, w) with c >= 18"),
    ((18, 4, 4), (36, 4, 5), (3,), "box deltas (36, 4, 5) must be (c, 4, 4)"),
    ((18, 4, 4), (35, 4, 4), (3,), "with c >= 36"),
    ((18, 4, 4), (36, 4, 4), (2,), "image info (2,) holds fewer than 3 values"),
]


@pytest.mark.parametrize(
    ("score", "bbox", "info", "message"), PROPOSAL_SHAPES, ids=[s[3][:30] for s in PROPOSAL_SHAPES]
)
async def test_proposal_blobs_that_do_not_fit(
    tmp_path: Path,
    score: tuple[int, ...],
    bbox: tuple[int, ...],
    info: tuple[int, ...],
    message: str,
) -> None:
    model = _model(tmp_path, "Proposal p 3 1 score bbox info out0")
    inputs = {"score": np.ones(score, _F), "bbox": np.zeros(bbox, _F), "info": np.ones(info, _F)}
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, inputs, ["out0"])
