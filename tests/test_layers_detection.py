"""PriorBox and DetectionOutput against ncnn itself (the wheel's CPU fp32), through asyncvk's GPU
plan on lavapipe and its CPU path: every param that changes the boxes, inputs where detections
survive (several classes, overlapping boxes, equal scores, top-k cuts) and where none do; bad
params are a ModelFormatError naming the file, line, layer and param.

The wheel's last bit depends on the CPU it runs on (ncnn_oracle), so boxes are compared within a
few float32 steps and detections row by row as ``assert_same_detections`` pairs them."""

from __future__ import annotations

import re
import zlib
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
from asyncvk.layers import detection

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

GPU_AND_CPU = pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])


def _model(tmp_path: Path, inputs: list[str], layer: str) -> Model:
    """Inputs named ``inputs``, then ``layer`` (``Type name bottoms... -> out0 params``)."""
    lines = [f"Input {name} 0 1 {name}" for name in inputs]
    text = f"7767517\n{len(inputs) + 1} {len(inputs) + 1}\n" + "\n".join([*lines, layer])
    return write_model(tmp_path, text)


async def _outputs(
    model: Model, inputs: dict[str, np.ndarray], gpu: bool
) -> tuple[np.ndarray, np.ndarray]:
    """asyncvk's output and ncnn's."""
    theirs = ncnn_forward(model, inputs, ["out0"])["out0"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out0"], gpu=gpu)
    assert "PriorBox" not in cpu_types, "PriorBox has a GPU path"
    return ours["out0"], theirs


def _thresholds(params: str) -> dict[str, float]:
    """DetectionOutput's score and NMS thresholds (params 4 and 1, ncnn's defaults 0.05)."""
    values = dict(p.split("=") for p in params.split())
    return {
        "score_threshold": float(values.get("4", 0.05)),
        "nms_threshold": float(values.get("1", 0.05)),
    }


def _assert_detections(ours: np.ndarray, theirs: np.ndarray, params: str, what: str) -> None:
    if theirs.size == 0:  # ncnn leaves an empty Mat when nothing is detected
        assert ours.shape == (0,), f"{what}: {ours.shape}, ncnn empty"
    else:
        assert_same_detections(ours, theirs, what=what, **_thresholds(params))


# -- PriorBox --------------------------------------------------------------------------------

PRIORBOX_CASES = [
    # (id, params, feature shape, image shape or None for one input)
    ("mobilenet-ssd", "-23300=1,60.0 -23302=1,2.0 9=-233 10=-233 13=0.5", (8, 5, 7), (3, 30, 29)),
    (
        "squeezenet-ssd",
        "-23300=1,45.0 -23301=1,99.0 -23302=2,2.0,3.0 9=-233 10=-233 11=16.0 12=16.0 13=0.5",
        (4, 9, 9),
        (3, 150, 150),
    ),
    (
        "two-sizes-no-flip-clip-variances",
        "-23300=2,21.0,30.0 -23301=2,45.0,60.0 -23302=2,2.0,0.5 3=0.3 4=0.4 5=0.5 6=0.6 "
        "7=0 8=1 9=-233 10=-233 11=6.0 12=8.0 13=0.3",
        (2, 4, 6),
        (3, 33, 41),
    ),
    ("fixed-image-one-input", "-23300=1,7.0 -23302=1,3.0 9=64 10=48 13=0.5", (1, 3, 5), None),
    ("fixed-image-beats-input", "-23300=1,7.0 9=64 10=-233", (2, 3, 5), (1, 20, 30)),
    (
        "mmdetection-steps-and-centers",
        "-23300=1,30.0 -23302=1,2.0 9=-233 10=-233 13=0.5 14=1 15=1",
        (1, 19, 13),
        (3, 300, 200),
    ),
    ("wide-map", "-23300=1,20.0 -23302=1,2.0 9=-233 10=-233 13=0.5", (1, 3, 37), (1, 3, 301)),
    ("odd-steps", "-23300=1,11.0 -23302=1,2.5 9=-233 10=-233 13=0.5", (1, 7, 13), (1, 97, 101)),
    ("2d-feature", "-23300=1,10.0 9=-233 10=-233 13=0.5", (5, 7), (3, 40, 40)),
    ("mxnet", "-23300=2,0.2,0.3 -23302=3,1.0,2.0,0.5 9=-233 10=-233 13=0.5", (6, 4, 5), None),
    (
        "mxnet-odd",
        "-23300=2,0.137,0.61 -23302=3,1.0,2.7,0.33 9=-233 10=-233 13=0.5",
        (1, 7, 13),
        None,
    ),
    (
        "mxnet-steps-clip",
        "-23300=1,0.6 -23302=2,1.0,3.0 8=1 9=-233 10=-233 11=0.3 12=0.25 13=0.5",
        (2, 3, 3),
        None,
    ),
]


@GPU_AND_CPU
@pytest.mark.parametrize(
    ("params", "feature", "image"),
    [c[1:] for c in PRIORBOX_CASES],
    ids=[c[0] for c in PRIORBOX_CASES],
)
async def test_priorbox_matches_ncnn(
    tmp_path: Path,
    params: str,
    feature: tuple[int, ...],
    image: tuple[int, ...] | None,
    gpu: bool,
) -> None:
    names = ["feat"] if image is None else ["feat", "img"]
    layer = f"PriorBox pb {len(names)} 1 {' '.join(names)} out0 {params}"
    model = _model(tmp_path, names, layer)
    rng = np.random.default_rng(1)
    inputs = {"feat": rng.normal(size=feature).astype(np.float32)}
    if image is not None:
        inputs["img"] = np.zeros(image, np.float32)
    ours, theirs = await _outputs(model, inputs, gpu)
    # the same float32 operations in the same order as ncnn's loop: equal to its plain build's
    # bit, a step of 1.0 from its FMA builds' (the drift of centers not summed step by step is
    # about as small: test_priorbox_centers_are_summed_step_by_step is the exact check)
    assert_close_to_ncnn(ours, theirs, ulps=4, scale=1.0, what=params)
    if gpu:  # the GPU copies the table the CPU path computes: the same bits
        cpu, _ = await asyncvk_forward(model, inputs, ["out0"], gpu=False)
        assert np.array_equal(ours.view(np.uint32), cpu["out0"].view(np.uint32))


@pytest.mark.parametrize(("start", "step", "count"), [(4.0676, 8.135135, 37), (0.5, 0.1, 300)])
def test_priorbox_centers_are_summed_step_by_step(start: float, step: float, count: int) -> None:
    """ncnn's loop, ``center_x += step_w`` in float32, to the bit: not ``start + j * step``,
    which drifts from it on wide maps."""
    center, wanted = np.float32(start), []
    for _ in range(count):
        wanted.append(center)
        center = np.float32(center + np.float32(step))
    got = detection._centers(np.float32(start), np.float32(step), count)
    assert np.array_equal(got.view(np.uint32), np.array(wanted, np.float32).view(np.uint32))
    direct = np.float32(start) + np.arange(count, dtype=np.float32) * np.float32(step)
    assert not np.array_equal(direct, got), "the case cannot tell the two apart"


# -- DetectionOutput -------------------------------------------------------------------------


def _ssd_inputs(
    seed: int, num_prior: int, num_class: int, mxnet: bool = False, two_d: bool = False
) -> dict[str, np.ndarray]:
    """Clustered priors (neighbours overlap, so NMS has work), offsets, and softmax scores with
    equal rows and equal classes (ties for the sorts)."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(0.2, 0.8, (num_prior, 2))
    sizes = rng.uniform(0.1, 0.4, (num_prior, 2))
    priors = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1)
    loc = rng.normal(0, 0.5, (num_prior, 4))
    logits = rng.normal(0, 2, (num_prior, num_class))
    logits[:, 0] -= 1.5  # background less sure, so classes pass the threshold
    if num_class >= 3:
        logits[5] = logits[3]  # equal scores, different boxes
        logits[9] = logits[3]
        logits[7, 2] = logits[7, 1]  # equal scores across classes
        logits[11, 1:] = logits[3, 1]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    scores = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    if mxnet:
        return {
            "loc": loc.astype(np.float32).reshape(-1),
            "conf": np.ascontiguousarray(scores.T),
            "pb": priors.astype(np.float32),
        }
    variances = rng.uniform(0.05, 0.3, (num_prior, 4))
    return {
        "loc": loc.astype(np.float32).reshape((num_prior, 4) if two_d else (-1,)),
        "conf": scores if two_d else scores.reshape(-1),
        "pb": np.stack([priors.reshape(-1), variances.reshape(-1)]).astype(np.float32),
    }


DETECTION_CASES = [
    # (id, params, num_prior, num_class, layout)
    ("ssd", "0=4 1=0.45 2=100 4=0.25", 60, 4, "caffe"),
    ("defaults", "0=5", 80, 5, "caffe"),
    ("nms-top-k-cut", "0=4 1=0.45 2=3 4=0.2", 60, 4, "caffe"),
    ("keep-top-k-cut", "0=4 1=0.45 3=5 4=0.2", 60, 4, "caffe"),
    ("no-nms", "0=3 1=1.0 4=0.3", 40, 3, "caffe"),
    ("any-overlap-suppresses", "0=3 1=0.0 4=0.1", 40, 3, "caffe"),
    ("two-d-blobs", "0=4 1=0.3 4=0.25", 30, 4, "caffe-2d"),
    ("mxnet", "0=-233 1=0.4 4=0.2 5=0.2 6=0.15 7=0.3 8=0.25", 50, 4, "mxnet"),
    ("nothing-passes", "0=4 1=0.45 4=0.999", 30, 4, "caffe"),
    ("keep-none", "0=4 1=0.45 3=0 4=0.2", 30, 4, "caffe"),
    ("background-only", "0=1 4=0.01", 10, 1, "caffe"),
]


@GPU_AND_CPU
@pytest.mark.parametrize(
    ("params", "num_prior", "num_class", "layout"),
    [c[1:] for c in DETECTION_CASES],
    ids=[c[0] for c in DETECTION_CASES],
)
async def test_detectionoutput_matches_ncnn(
    tmp_path: Path, params: str, num_prior: int, num_class: int, layout: str, gpu: bool
) -> None:
    layer = f"DetectionOutput det 3 1 loc conf pb out0 {params}"
    model = _model(tmp_path, ["loc", "conf", "pb"], layer)
    seed = zlib.crc32(params.encode())
    inputs = _ssd_inputs(seed, num_prior, num_class, layout == "mxnet", layout == "caffe-2d")
    ours, theirs = await _outputs(model, inputs, gpu)
    _assert_detections(ours, theirs, params, params)


@pytest.mark.parametrize("cuts", ["2=50 3=40", "2=7 3=5"], ids=["whole", "cut-inside-ties"])
async def test_detectionoutput_orders_equal_scores_as_ncnn(tmp_path: Path, cuts: str) -> None:
    """Many equal scores over distinct boxes: the order of the rows is ncnn's quicksort's, not
    the input order nor a stable sort's, also where a top-k cut falls inside the equal ones.

    DetectionOutput copies its scores from the input, so they are ncnn's to the bit on every
    CPU and its quicksort orders equal ones the same way: the rows must come in ncnn's order."""
    params = f"0=3 1=1.0 4=0.1 {cuts}"
    model = _model(
        tmp_path, ["loc", "conf", "pb"], f"DetectionOutput det 3 1 loc conf pb out0 {params}"
    )
    inputs = _ssd_inputs(7, 40, 3)
    scores = inputs["conf"].reshape(40, 3)
    scores[::2] = scores[0]  # 20 priors share one score row
    ours, theirs = await _outputs(model, inputs, False)
    if "2=50" in cuts:
        assert len(set(theirs[:, 1].tolist())) < len(theirs) // 2, "the case has few ties"
    assert np.isin(ours[:, 1], scores).all(), "asyncvk's scores are the input's, unrounded"
    assert_same_detections(ours, theirs, what="ties", ties_in_order=True, **_thresholds(params))


async def test_ssd_head_on_the_gpu_matches_ncnn(tmp_path: Path) -> None:
    """An SSD head as the benchmark models have it: GPU Permute/Flatten/Softmax feeding the CPU
    PriorBox and DetectionOutput, with their blobs crossing between device and host."""
    text = """7767517
    13 13
    Input data 0 1 data
    Input feat 0 1 feat
    Input loc 0 1 loc
    Input conf 0 1 conf
    Permute lp 1 1 loc locp 0=3
    Flatten lf 1 1 locp locf
    Permute cp 1 1 conf confp 0=3
    Flatten cf 1 1 confp conff
    Reshape cr 1 1 conff confr 0=3 1=-1
    Softmax cs 1 1 confr confs 0=1 1=1
    Flatten cf2 1 1 confs confflat
    PriorBox pb 2 1 feat data pbox -23300=1,20.0 -23301=1,40.0 -23302=1,2.0 9=-233 10=-233 13=0.5
    DetectionOutput det 3 1 locf confflat pbox out0 0=3 1=0.45 2=20 3=15 4=0.3
    """
    model = write_model(tmp_path, text)
    rng = np.random.default_rng(3)
    priors, h, w = 4, 5, 6
    inputs = {
        "data": np.zeros((3, 60, 50), np.float32),
        "feat": np.zeros((8, h, w), np.float32),
        "loc": rng.normal(0, 0.5, (4 * priors, h, w)).astype(np.float32),
        "conf": rng.normal(0, 2, (3 * priors, h, w)).astype(np.float32),
    }
    theirs = ncnn_forward(model, inputs, ["out0"])["out0"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out0"], gpu=True)
    assert len(theirs) >= 5, "the head detects too little to compare"
    # the GPU's softmax and ncnn's differ in their last bits: scores within float32 rounding
    limits = {"rtol": 1e-5, "atol": 1e-6, "score_threshold": 0.3, "nms_threshold": 0.45}
    assert_same_detections(ours["out0"], theirs, what="ssd head", **limits)
    assert cpu_types == {"DetectionOutput"}, cpu_types  # PriorBox on the GPU


BAD_PARAMS = [
    ("PriorBox pb 2 1 feat img out0 -23302=1,2.0", "PriorBox param 0 (min_sizes) is empty"),
    (
        "PriorBox pb 2 1 feat img out0 -23300=2,1.0,2.0 -23301=1,3.0",
        "PriorBox param 1 (max_sizes) has 1 values; it must be empty or have one per min size (2)",
    ),
    (
        "PriorBox pb 1 1 feat out0 -23300=1,1.0 -23301=1,3.0 9=-233 10=-233",
        "PriorBox takes 2 input blobs, got 1",
    ),
    (
        "PriorBox pb 1 1 feat out0 -23300=1,1.0 9=-233 10=-233",
        "PriorBox mxnet style (one input, image size -233, no max_sizes) needs param 2",
    ),
    (
        "DetectionOutput det 3 1 feat img img out0",
        "DetectionOutput param 0 (num_class) = 0 must be >= 1 (background included) or -233",
    ),
    ("DetectionOutput det 3 1 feat img img out0 0=-2", "param 0 (num_class) = -2 must be >= 1"),
    ("DetectionOutput det 3 1 feat img img out0 0=2 2=-1", "param 2 (nms_top_k) = -1 must be"),
    ("DetectionOutput det 3 1 feat img img out0 0=2 3=-5", "param 3 (keep_top_k) = -5 must be"),
    ("DetectionOutput det 2 1 feat img out0 0=2", "DetectionOutput takes 3 input blobs, got 2"),
]


@pytest.mark.parametrize(("layer", "message"), BAD_PARAMS, ids=[b[1][:40] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, layer: str, message: str
) -> None:
    model = _model(tmp_path, ["feat", "img"], layer)
    inputs = {"feat": np.ones((2, 3, 3), np.float32), "img": np.ones((3, 8, 8), np.float32)}
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, inputs, ["out0"])
    where = (caught.value.file, caught.value.line, caught.value.layer)
    assert where == (str(model.param), 5, layer.split()[1])


BAD_SHAPES = [
    # (params, loc, conf, pb shapes, message): ncnn would read past the blobs
    ("0=3", (40,), (29,), (2, 40), "scores (29,) hold fewer than 3 classes x 10 priors"),
    ("0=3", (36,), (30,), (2, 40), "box offsets (36,) hold fewer than 4 x 10"),
    ("0=3", (40,), (30,), (40,), "priors (40,) need 2 rows (boxes, variances)"),
    ("0=3", (40,), (3, 3, 10), (2, 40), "scores of shape (3, 3, 10) has channels ncnn pads"),
    ("0=-233", (40,), (3, 10), (10, 3), "priors (10, 3) need 4 values per row"),
]


@GPU_AND_CPU
@pytest.mark.parametrize(
    ("params", "loc", "conf", "pb", "message"), BAD_SHAPES, ids=[b[4][:30] for b in BAD_SHAPES]
)
async def test_blobs_too_small_for_the_priors_are_a_plan_error(
    tmp_path: Path,
    params: str,
    loc: tuple[int, ...],
    conf: tuple[int, ...],
    pb: tuple[int, ...],
    message: str,
    gpu: bool,
) -> None:
    model = _model(
        tmp_path, ["loc", "conf", "pb"], f"DetectionOutput det 3 1 loc conf pb out0 {params}"
    )
    inputs = {"loc": np.zeros(loc, np.float32), "conf": np.zeros(conf, np.float32)}
    inputs["pb"] = np.zeros(pb, np.float32)
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, inputs, ["out0"], gpu=gpu)
