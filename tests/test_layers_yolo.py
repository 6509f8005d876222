"""YoloDetectionOutput and Yolov3DetectionOutput against ncnn itself (the wheel's CPU fp32).

Hand-made feature maps where boxes survive (several classes, two scales), overlap (NMS across
classes), tie (ncnn's unstable sort order) or all fall below the threshold; the GPU path (a
GPU layer before, the detection layer on the CPU between segments) and the CPU path. Bad params
are refused at load, where ncnn refuses them too.

The wheel's last bit depends on the CPU it runs on (ncnn_oracle): rows are compared as
``assert_same_detections`` pairs them, where a one-ulp difference in a score may reorder near
ties or tip a box over a threshold, never move a box or change a label. Class logits keep a
margin between the best two (``feature_map``), so no label is a near tie.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import Model, assert_same_detections, asyncvk_forward, ncnn_forward, write_model

from asyncvk import InputError, Net, Option
from asyncvk._errors import ModelFormatError
from asyncvk.layers import yolo
from asyncvk.layers._nms import qsort_descent_order

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

BIASES_V3 = "-23304=8,10.0,14.0,23.0,27.0,37.0,58.0,81.0,82.0"
MASK_BITS = "-23305=4,1077936128,1073741824,1065353216,0"  # 3.0, 2.0, 1.0, 0.0 as converters write
V3 = f"Yolov3DetectionOutput 0=3 1=2 2=0.3 3=0.45 {BIASES_V3} {MASK_BITS} -23306=2,32.0,16.0"
V2 = "YoloDetectionOutput 0=3 1=2 2=0.25 3=0.45 -23304=4,1.08,1.19,3.42,4.41"


def model(tmp_path: Path, layer: str, inputs: int) -> Model:
    """``inputs`` Inputs, each times 1 on the GPU, into ``layer`` (``type params``)."""
    kind, _, params = layer.partition(" ")
    lines = [f"Input in{i} 0 1 in{i}" for i in range(inputs)]
    lines += [f"BinaryOp gpu{i} 1 1 in{i} x{i} 0=2 1=1 2=1" for i in range(inputs)]
    xs = " ".join(f"x{i}" for i in range(inputs))
    lines.append(f"{kind} det {inputs} 1 {xs} out0 {params}")
    return write_model(tmp_path, f"7767517\n{len(lines)} {2 * inputs + 1}\n" + "\n".join(lines))


def feature_map(
    rng: np.random.Generator, boxes: int, classes: int, h: int, w: int, size: float = 0.0
) -> np.ndarray:
    """Logits: objectness spread around 0, one or two strong classes per cell, box sizes
    around e^size anchors (a larger ``size`` makes neighbours overlap); the best class of a cell
    at least 0.01 above the next."""
    x = rng.normal(0.0, 1.0, (boxes, 5 + classes, h, w)).astype(np.float32)
    x[:, 2:4] += size
    x[:, 4] = rng.normal(0.5, 1.5, (boxes, h, w))
    x[:, 5:] += 3.0 * (rng.random((boxes, classes, h, w)) < 0.3)
    if classes > 1:  # no near tie for the best class: a last bit could pick either
        logits = x[:, 5:]
        order = np.argsort(logits, axis=1)
        best = np.take_along_axis(logits, order[:, -1:], axis=1)
        second = np.take_along_axis(logits, order[:, -2:-1], axis=1)
        lifted = np.where(best - second < 0.01, second + np.float32(0.01), best)
        np.put_along_axis(logits, order[:, -1:], lifted, axis=1)
    return x.reshape(boxes * (5 + classes), h, w)


def ncnn_rows(tmp_path: Path, layer: str, inputs: list[np.ndarray]) -> np.ndarray:
    """ncnn's output alone."""
    m = model(tmp_path, layer, len(inputs))
    return ncnn_forward(m, {f"in{i}": x for i, x in enumerate(inputs)}, ["out0"])["out0"]


async def both_paths(
    tmp_path: Path, layer: str, inputs: list[np.ndarray]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """ncnn's output and asyncvk's on the GPU path and the CPU path."""
    m = model(tmp_path, layer, len(inputs))
    feed = {f"in{i}": x for i, x in enumerate(inputs)}
    theirs = ncnn_forward(m, feed, ["out0"])["out0"]
    on_gpu, cpu_types = await asyncvk_forward(m, feed, ["out0"], gpu=True)
    assert cpu_types == {layer.split()[0]}  # the BinaryOps ran on the GPU
    on_cpu, _ = await asyncvk_forward(m, feed, ["out0"], gpu=False)
    return theirs, [on_gpu["out0"], on_cpu["out0"]]


def layer_params(layer: str) -> dict[int, float]:
    """The scalar params of a layer line (``type k=v ...``)."""
    pairs = (p.split("=") for p in layer.split()[1:] if not p.startswith("-"))
    return {int(k): float(v) for k, v in pairs}


def assert_same_rows(
    ours: np.ndarray,
    theirs: np.ndarray,
    layer: str,
    candidates: np.ndarray | None = None,
    ties_in_order: bool = False,
) -> None:
    """ncnn's rows, to within its last bits: scores and box corners within a few float32
    steps of 1.0, or (YoloDetectionOutput, whose softmax ncnn approximates) within float32
    rounding; labels equal; near ties in any order, or in ncnn's (``ties_in_order``) where the
    scores are its to the bit; a row missing only on the edge of the layer's score threshold
    (param 2) or of its NMS (param 3, across labels), ``candidates`` being ncnn's rows with no
    NMS.

    Not bit for bit: the wheel runs its AVX-512 build of the layer on CPUs that have it, where
    the compiler fuses the score and box arithmetic into FMAs and its vectorized loops leave
    the tail lanes to scalar code (1-2 ulps apart); its plain x86-64 build matches asyncvk bit
    for bit."""
    p = layer_params(layer)
    v2 = layer.startswith("YoloDetectionOutput")
    assert_same_detections(
        ours,
        theirs,
        what=layer.split()[0],
        rtol=1e-5 if v2 else 0.0,
        atol=1e-6 if v2 else 0.0,
        score_threshold=p.get(2, 0.01),
        nms_threshold=p.get(3, 0.45),
        nms_per_class=False,  # ncnn's NMS ignores labels
        candidates=candidates,
        ties_in_order=ties_in_order,
    )


@pytest.mark.parametrize("nms", ["0.45", "2.0"])  # 2.0: nothing suppressed
async def test_v3_two_scales_several_classes(tmp_path: Path, nms: str) -> None:
    rng = np.random.default_rng(11)
    maps = [feature_map(rng, 2, 3, 5, 7, 0.5), feature_map(rng, 2, 3, 10, 14, 0.5)]
    layer = V3.replace("3=0.45", f"3={nms}")
    theirs, ours = await both_paths(tmp_path, layer, maps)
    assert len(theirs) > 20 and set(theirs[:, 0]) == {1.0, 2.0, 3.0}
    every = ncnn_rows(tmp_path, V3.replace("3=0.45", "3=2.0"), maps)
    for out in ours:
        assert_same_rows(out, theirs, layer, candidates=every)


async def test_v3_nms_suppresses_across_classes(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    maps = [feature_map(rng, 2, 3, 5, 7, 1.5), feature_map(rng, 2, 3, 10, 14, 1.5)]
    kept, _ = await both_paths(tmp_path, V3, maps)
    no_nms = V3.replace("3=0.45", "3=2.0")
    every, ours = await both_paths(tmp_path, no_nms, maps)
    assert 0 < len(kept) < 0.7 * len(every)  # big boxes: NMS removes many of them
    for out in ours:
        assert_same_rows(out, every, no_nms)
    _, ours = await both_paths(tmp_path, V3, maps)
    for out in ours:
        assert_same_rows(out, kept, V3, candidates=every)


async def test_v3_two_overlapping_boxes_of_different_classes(tmp_path: Path) -> None:
    """One map of two cells, both boxes covering the image: the second is suppressed although
    its class differs (ncnn's NMS ignores labels)."""
    x = np.zeros((1, 7, 1, 2), np.float32)
    x[0, 2:4] = 3.0  # e^3 x anchor: far larger than the image
    x[0, 4] = [2.0, 1.0]  # objectness: cell 0 first
    x[0, 5:7, 0, 0] = [4.0, 0.0]  # class 0 in cell 0
    x[0, 5:7, 0, 1] = [0.0, 4.0]  # class 1 in cell 1
    layer = "Yolov3DetectionOutput 0=2 1=1 2=0.3 3=0.45 -23304=2,10.0,12.0 -23305=1,0 -23306=1,8.0"
    theirs, ours = await both_paths(tmp_path, layer, [x.reshape(7, 1, 2)])
    assert theirs.shape == (1, 6) and theirs[0, 0] == 1.0
    for out in ours:
        assert_same_rows(out, theirs, layer)


def tied_map(boxes: int, classes: int, h: int, w: int, levels: int) -> np.ndarray:
    """Small boxes in every cell with only ``levels`` distinct scores: long runs of ties."""
    x = np.zeros((boxes, 5 + classes, h, w), np.float32)
    x[:, 2:4] = -4.0  # boxes of a few percent of a cell: no overlap
    cell = np.arange(boxes * h * w).reshape(boxes, h, w)
    x[:, 4] = 1.0 + (cell * 7 % levels)
    x[:, 5 + (cell[0] % classes)] = 2.0  # a class per cell, the rest 0
    return x.reshape(boxes * (5 + classes), h, w)


@pytest.mark.parametrize("levels", [1, 3])
async def test_v3_ties_in_ncnn_order(
    tmp_path: Path, levels: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    maps = [tied_map(2, 3, 5, 7, levels), tied_map(2, 3, 3, 4, levels)]
    layer = V3.replace("2=0.3", "2=0.1")
    theirs, ours = await both_paths(tmp_path, layer, maps)
    assert len(theirs) == 2 * (35 + 12)  # every cell, nothing suppressed
    for out in ours:
        assert_same_rows(out, theirs, layer, ties_in_order=True)
    # with a stable sort the rows come out in another order: the ties decide the order, which
    # is checked against ncnn's wherever its scores are ours to the bit (its plain build's are)
    monkeypatch.setattr(yolo, "qsort_descent_order", lambda s: np.argsort(-s, kind="stable"))
    feed = {f"in{i}": x for i, x in enumerate(maps)}
    stable, _ = await asyncvk_forward(model(tmp_path, layer, 2), feed, ["out0"], gpu=False)
    assert not np.array_equal(stable["out0"], ours[1])


def test_qsort_order_is_ncnns_not_stable() -> None:
    """ncnn's quicksort on [1, 2, 2, 1, 2] (traced by hand): descending, ties reordered (a
    stable sort gives [1, 2, 4, 0, 3])."""
    order = qsort_descent_order(np.array([1, 2, 2, 1, 2], np.float32))
    assert order.tolist() == [2, 4, 1, 0, 3]


async def test_v3_nothing_passes_is_ncnns_empty_mat(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    maps = [feature_map(rng, 2, 3, 5, 7), feature_map(rng, 2, 3, 10, 14)]
    theirs, ours = await both_paths(tmp_path, V3.replace("2=0.3", "2=1.5"), maps)
    assert theirs.size == 0  # ncnn's extract gives an empty Mat (dims 0)
    for out in ours:
        assert out.shape == (0,) and out.dtype == np.float32


async def test_v2_two_inputs_softmax_and_nms(tmp_path: Path) -> None:
    rng = np.random.default_rng(14)
    maps = [feature_map(rng, 2, 3, 6, 5, 0.8), feature_map(rng, 2, 3, 9, 11, 0.8)]
    theirs, ours = await both_paths(tmp_path, V2, maps)
    every, _ = await both_paths(tmp_path, V2.replace("3=0.45", "3=2.0"), maps)
    assert 10 < len(theirs) < len(every)
    for out in ours:
        assert_same_rows(out, theirs, V2, candidates=every)


async def test_v2_ties_in_ncnn_order(tmp_path: Path) -> None:
    maps = [tied_map(2, 3, 5, 7, 3)]
    layer = V2.replace("2=0.25", "2=0.1")
    theirs, ours = await both_paths(tmp_path, layer, maps)
    assert len(theirs) == 70
    for out in ours:
        assert_same_rows(out, theirs, layer, ties_in_order=True)


async def test_v2_nothing_passes_gives_the_input_softmaxed(tmp_path: Path) -> None:
    """ncnn's YoloDetectionOutput works in place: with no box, its output is input 0 with the
    class logits of each box replaced by their softmax."""
    rng = np.random.default_rng(15)
    maps = [feature_map(rng, 2, 3, 6, 5), feature_map(rng, 2, 3, 9, 11)]
    theirs, ours = await both_paths(tmp_path, V2.replace("2=0.25", "2=1.5"), maps)
    assert theirs.shape == maps[0].shape
    assert not np.allclose(theirs, maps[0])
    for out in ours:
        np.testing.assert_allclose(out, theirs, rtol=1e-6, atol=1e-7)


async def test_data_dependent_rows_on_one_plan(tmp_path: Path) -> None:
    """One Net, one input shape, one plan: the rows follow the data on every run."""
    rng = np.random.default_rng(16)
    maps = [feature_map(rng, 2, 3, 5, 7), feature_map(rng, 2, 3, 10, 14)]
    m = model(tmp_path, V3, 2)
    quiet = [np.full_like(x, -20.0) for x in maps]  # no objectness anywhere
    async with Net(Option(use_vulkan_compute=True)) as net:
        await net.load_param(m.param)
        await net.load_model(m.bin)
        for feed in (maps, quiet, maps):
            ex = net.create_extractor()
            for i, x in enumerate(feed):
                ex.input(f"in{i}", x)
            ours = await ex.extract("out0")
            named = {f"in{i}": x for i, x in enumerate(feed)}
            theirs = ncnn_forward(m, named, ["out0"])["out0"]
            if theirs.size == 0:
                assert ours.shape == (0,)
            else:
                assert_same_rows(ours, theirs, V3)


BAD_PARAMS = [
    # (layer, inputs, what the message names); ncnn refuses each at load too
    ("Yolov3DetectionOutput 0=3 1=0 2=0.3 -23304=2,1.0,1.0 -23305=1,0 -23306=1,8.0", 1, "num_box"),
    ("Yolov3DetectionOutput 0=0 1=1 -23304=2,1.0,1.0 -23305=1,0 -23306=1,8.0", 1, "num_class"),
    ("Yolov3DetectionOutput 0=3 1=1 -23304=3,1.0,1.0,2.0 -23305=1,0 -23306=1,8.0", 1, "pairs"),
    ("Yolov3DetectionOutput 0=3 1=2 -23304=2,1.0,1.0 -23305=3,0,0,0 -23306=1,8.0", 1, "groups"),
    ("Yolov3DetectionOutput 0=3 1=1 -23304=2,1.0,1.0 -23305=1,1.0 -23306=1,8.0", 1, "index"),
    ("Yolov3DetectionOutput 0=3 1=1 -23304=4,1,1,2,2 -23305=1,1 -23306=1,8.0", 1, "index"),
    ("Yolov3DetectionOutput 0=3 1=1 -23304=2,1.0,1.0 -23305=1,0.5 -23306=1,8.0", 1, "index"),
    ("Yolov3DetectionOutput 0=3 1=1 -23304=2,1.0,1.0 -23306=1,8.0", 1, "param 5"),
    ("Yolov3DetectionOutput 0=3 1=1 -23304=2,1.0,1.0 -23305=1,0 -23306=1,0.0", 1, "> 0"),
    ("Yolov3DetectionOutput 0=3 1=1 -23304=2,1.0,1.0 -23305=2,0,0 -23306=1,8.0", 1, "param 6"),
    ("YoloDetectionOutput 0=3 1=2 -23304=3,1.0,1.0,1.0", 1, "biases"),
    ("YoloDetectionOutput 0=3 1=1", 1, "biases"),
    ("YoloDetectionOutput 0=3 1=0 -23304=2,1.0,1.0", 1, "num_box"),
]


@pytest.mark.parametrize(("layer", "inputs", "named"), BAD_PARAMS)
async def test_bad_params_refused_at_load(
    tmp_path: Path, layer: str, inputs: int, named: str
) -> None:
    m = model(tmp_path, layer, inputs)
    with pytest.raises(AssertionError, match="cannot load"):
        ncnn_forward(m, {"in0": np.zeros((8, 1, 1), np.float32)}, ["out0"])
    with pytest.raises(ModelFormatError, match=named) as info:
        await asyncvk_forward(m, {"in0": np.zeros((8, 1, 1), np.float32)}, ["out0"])
    message = str(info.value)
    assert "m.param" in message and "'det'" in message, message


async def test_a_mask_group_for_each_input(tmp_path: Path) -> None:
    """ncnn reads past mask and anchors_scale for a third input; asyncvk refuses at load."""
    m = model(tmp_path, V3, 3)
    with pytest.raises(ModelFormatError, match=r"param 5 \(mask\) has 2 groups .* 3 inputs"):
        await asyncvk_forward(m, {}, ["out0"])


async def test_channels_must_fit_num_box_and_num_class(tmp_path: Path) -> None:
    """ncnn's forward returns -1; asyncvk's plan names the layer and the count it needs."""
    rng = np.random.default_rng(17)
    maps = [feature_map(rng, 2, 3, 5, 7)[:-1], feature_map(rng, 2, 3, 10, 14)]
    m = model(tmp_path, V3, 2)
    with pytest.raises(InputError, match=r"input 0 has 15 channels.*= 16"):
        await asyncvk_forward(m, {f"in{i}": x for i, x in enumerate(maps)}, ["out0"])
