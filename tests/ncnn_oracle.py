"""ncnn itself as the oracle: run one small model through the ``ncnn`` wheel (CPU, fp32) and
through asyncvk (GPU on lavapipe, or its CPU path), from the same .param and .bin files.

Tests build a model as param text plus its weights in file order::

    model = write_model(tmp_path, PARAM_TEXT, [tagged(weight), raw(bias)])
    ours, cpu_types = await asyncvk_forward(model, {"in0": x}, ["out0"])
    theirs = ncnn_forward(model, {"in0": x}, ["out0"])

``tagged`` writes a weight the way ncnn's ``ModelBin::load(w, 0)`` reads it (a 4-byte zero tag,
then raw float32); ``raw`` the way ``load(w, 1)`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncvk import Net, Option
from asyncvk.gpu._shader_choices import ShaderChoices
from asyncvk.net._plan import _CpuStep


@dataclass(frozen=True)
class Model:
    param: Path
    bin: Path


def tagged(values: np.ndarray) -> bytes:
    """A weight as ncnn's ``load(w, 0)`` reads it: tag 0 (float32), then the values."""
    return bytes(4) + np.ascontiguousarray(values, np.float32).tobytes()


def raw(values: np.ndarray) -> bytes:
    """A weight as ncnn's ``load(w, 1)`` reads it: raw float32."""
    return np.ascontiguousarray(values, np.float32).tobytes()


def write_model(
    folder: Path, param_text: str, weights: Sequence[bytes] = (), name: str = "m"
) -> Model:
    """Write ``name``.param (``param_text``, dedented lines) and ``name``.bin (``weights``)."""
    lines = [line.strip() for line in param_text.strip().splitlines()]
    param = folder / f"{name}.param"
    param.write_text("\n".join(lines) + "\n")
    model_bin = folder / f"{name}.bin"
    model_bin.write_bytes(b"".join(weights))
    return Model(param, model_bin)


def ncnn_forward(
    model: Model,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    **options: bool,
) -> dict[str, np.ndarray]:
    """ncnn's CPU fp32 outputs (fp16 and bf16 off, so only float32 rounding differs).

    ``options`` sets more of ncnn's Option, e.g. ``use_int8_inference=False`` (on by default:
    layers with int8 scales run int8) or ``use_packing_layout=False``."""
    ncnn = pytest.importorskip("ncnn")
    net = ncnn.Net()
    opt = net.opt
    opt.use_vulkan_compute = False
    opt.use_fp16_packed = False
    opt.use_fp16_storage = False
    opt.use_fp16_arithmetic = False
    opt.use_bf16_storage = False
    opt.num_threads = 1
    for name, value in options.items():
        setattr(opt, name, value)
    if net.load_param(str(model.param)) != 0:
        raise AssertionError(f"ncnn cannot load {model.param}")
    if net.load_model(str(model.bin)) != 0:
        raise AssertionError(f"ncnn cannot read {model.bin}")
    result = _extract(ncnn, net, inputs, outputs)
    net.clear()  # after every extractor and Mat is gone: ncnn aborts otherwise
    return result


def _extract(
    ncnn: Any, net: Any, inputs: dict[str, np.ndarray], outputs: list[str]
) -> dict[str, np.ndarray]:
    result = {}
    for name in outputs:
        ex = net.create_extractor()
        for in_name, array in inputs.items():
            # a Mat over numpy's memory has no refcount, and ncnn's light mode reads it
            # (a null pointer) before an in-place first layer: give ncnn its own copy
            ex.input(in_name, ncnn.Mat(np.ascontiguousarray(array, np.float32)).clone())
        status, mat = ex.extract(name)
        if status != 0:
            raise AssertionError(f"ncnn cannot extract {name!r} (status {status})")
        # an empty Mat (DetectionOutput with nothing detected) crashes the wheel's conversion
        empty = mat.empty()
        result[name] = np.zeros(0, np.float32) if empty else np.array(mat, np.float32, copy=True)
        del mat
        ex.clear()
        del ex
    return result


async def asyncvk_forward(
    model: Model,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    gpu: bool = True,
    choices: ShaderChoices | None = None,
) -> tuple[dict[str, np.ndarray], set[str]]:
    """asyncvk's outputs, and the types of the layers that ran on the CPU on the way (with
    ``choices``, the shaders those say)."""
    result: dict[str, np.ndarray] = {}
    async with Net(Option(use_vulkan_compute=gpu, shader_choices=choices)) as net:
        await net.load_param(model.param)
        await net.load_model(model.bin)
        for name in outputs:
            ex = net.create_extractor()
            for in_name, array in inputs.items():
                ex.input(in_name, array, batch_axis=False)  # ncnn blobs: no batch axis
            result[name] = await ex.extract(name)
        return result, cpu_layer_types(net) if gpu else set()


def cpu_layer_types(net: Net) -> set[str]:
    """The types of the layers that the plans made so far run on the CPU."""
    plans = [plan for pool in net._plans.values() for plan in pool]
    return {
        step.node.layer.type_name
        for plan in plans
        for step in plan.steps
        if isinstance(step, _CpuStep)
    }


def assert_close(ours: np.ndarray, theirs: np.ndarray, what: str, rtol: float = 1e-4) -> None:
    """Same shape (as numpy sees ncnn's Mat) and a relative L2 error under ``rtol``."""
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape}, ncnn {theirs.shape}"
    diff = float(np.linalg.norm(ours.astype(np.float64) - theirs))
    scale = float(np.linalg.norm(theirs.astype(np.float64)))
    assert np.isfinite(ours).all() == np.isfinite(theirs).all(), f"{what}: non-finite values"
    assert diff <= rtol * max(scale, 1e-30), f"{what}: rel L2 {diff / max(scale, 1e-30):.2e}"


async def assert_gpu_and_cpu_match_ncnn(
    model: Model,
    inputs: dict[str, np.ndarray],
    gpu_type: str,
    output: str = "out0",
    rtol: float = 1e-4,
    choices: ShaderChoices | None = None,
) -> None:
    """ncnn's output against asyncvk's GPU path (``gpu_type`` must not fall back to the CPU;
    ``choices``: the shaders it runs) and its CPU path."""
    theirs = ncnn_forward(model, inputs, [output])[output]
    gpu, cpu_types = await asyncvk_forward(model, inputs, [output], gpu=True, choices=choices)
    assert gpu_type not in cpu_types, f"{gpu_type} fell back to the CPU"
    assert_close(gpu[output], theirs, "gpu", rtol)
    cpu, _ = await asyncvk_forward(model, inputs, [output], gpu=False)
    assert_close(cpu[output], theirs, "cpu", rtol)


# -- tolerances: ncnn's last bit depends on the CPU ------------------------------------------------
#
# The wheel picks its kernels by CPU: the same layer runs a plain x86-64 build on one machine and
# an AVX2 or AVX-512 build on another, where the compiler fuses multiplies and adds into FMAs and
# vectorized loops handle their tail lanes apart. So ncnn's last bit differs from one machine to
# the next, and every comparison with the wheel allows a few float32 steps; where the result is
# discrete (detections after a threshold, a sort and NMS) it is compared so that a difference
# that small cannot flip it. Comparisons of asyncvk with its own numpy references stay exact.


def float_line(values: np.ndarray) -> np.ndarray:
    """float32 values as int64 points on a line where neighbouring floats are 1 apart (+0 and
    -0 both 0), so that a difference counts the float32 steps between two values."""
    bits = np.asarray(values, np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def float_steps(ours: np.ndarray, theirs: np.ndarray, scale: float = 0.0) -> np.ndarray:
    """Elementwise distance in float32 steps: steps between the two values, or ``|ours -
    theirs|`` in steps of ``scale`` (a float32 ulp there) where that is fewer. A result near 0
    computed from operands of about ``scale`` (a box corner ``center - w / 2``) carries their
    rounding, so its own ulps are the wrong unit. 0 where both are NaN or equal (infinities
    too), inf where one is NaN or infinite and the other is not that."""
    a = np.asarray(ours, np.float32)
    b = np.asarray(theirs, np.float32)
    a, b = np.broadcast_arrays(a, b)
    steps = np.abs(float_line(a) - float_line(b)).astype(np.float64)
    if scale:
        unit = float(np.spacing(np.float32(abs(scale))))
        with np.errstate(invalid="ignore", over="ignore"):
            absolute = np.abs(a.astype(np.float64) - b.astype(np.float64)) / unit
        steps = np.fmin(steps, absolute)
    odd = ~(np.isfinite(a) & np.isfinite(b))
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    return np.where(odd, np.where(same, 0.0, np.inf), steps)


def assert_close_to_ncnn(
    ours: np.ndarray,
    theirs: np.ndarray,
    *,
    ulps: float = 4,
    scale: float = 0.0,
    what: str = "output",
) -> None:
    """Same shape, NaN where ncnn has NaN, the same infinities, and every other value within
    ``ulps`` float32 steps of ncnn's (steps at ``scale`` where that is looser: see
    :func:`float_steps`). The message names the worst value: where, how far, both values."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape}, ncnn {theirs.shape}"
    if ours.size == 0:
        return
    steps = float_steps(ours, theirs, scale)
    worst = np.unravel_index(int(np.argmax(steps)), steps.shape)
    over = int((steps > ulps).sum())
    assert not over, (
        f"{what}: {over} of {steps.size} values over {ulps} float32 steps from ncnn"
        f"{f' (steps at {scale})' if scale else ''}; the worst, {steps[worst]:g} steps, at "
        f"{tuple(int(i) for i in worst)}: {ours[worst]!r}, ncnn {theirs[worst]!r}"
    )


def _pairs(allowed: np.ndarray) -> np.ndarray:
    """A maximum matching of rows to columns of the boolean ``allowed`` (augmenting paths,
    columns in order, each trying its nearest row first): for each column its row, or -1."""
    n, m = allowed.shape
    row_of = np.full(m, -1)
    col_of = np.full(n, -1)

    def augment(j: int, seen: np.ndarray) -> bool:
        rows = np.flatnonzero(allowed[:, j] & ~seen)
        for i in rows[np.argsort(np.abs(rows - j), kind="stable")]:
            seen[i] = True
            if col_of[i] < 0 or augment(int(col_of[i]), seen):
                row_of[j], col_of[i] = i, j
                return True
        return False

    for j in range(m):
        augment(j, np.zeros(n, bool))
    return row_of


def _iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection over union of ``box`` (x1, y1, x2, y2) with each row of ``boxes``, float64."""
    box, boxes = box.astype(np.float64), boxes.astype(np.float64)
    w = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    h = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = w * h
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    with np.errstate(invalid="ignore", divide="ignore"):
        return inter / (area + areas - inter)


def _as_rows(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, np.float32)
    return rows.reshape(0, 6) if rows.size == 0 else rows


def assert_same_detections(
    ours: np.ndarray,
    theirs: np.ndarray,
    *,
    what: str = "detections",
    ulps: float = 4,
    scale: float = 1.0,
    rtol: float = 0.0,
    atol: float = 0.0,
    score_threshold: float | None = None,
    nms_threshold: float | None = None,
    nms_per_class: bool = True,
    candidates: np.ndarray | None = None,
    iou_tol: float = 1e-5,
    ties_in_order: bool = False,
) -> None:
    """Detection rows (label, score, x1, y1, x2, y2) as ncnn gives them, to within what a last
    bit can change.

    A row of ours pairs with a row of ncnn's of the same label whose score and corners are near
    (``ulps`` float32 steps at ``scale``, or ``atol + rtol * |ncnn's|``). The rows come in ncnn's
    order, except that rows whose scores are near one another may come in any order (a one-ulp
    difference reorders a sort). With ``ties_in_order``, where the two score columns are equal to
    the bit, the rows must come in exactly ncnn's order: its quicksort is deterministic on the
    same values.

    A row without a pair is allowed only on an edge that a last bit can tip: a score near
    ``score_threshold``; an overlap within ``iou_tol`` of ``nms_threshold`` with a row of the
    other output scoring at least as high (one NMS kept it, the other did not), of the same
    label if ``nms_per_class``; two rows without a pair, one each side, of near scores that
    overlap past the threshold and are both among ``candidates`` (the rows before NMS: ncnn's
    output with NMS off): a near tie that the sorts broke apart. A row suppressed, or kept, only
    because of such a row is allowed too. Anything else (a box moved, a label changed, a row
    missing) fails, naming the rows."""
    ours, theirs = _as_rows(ours), _as_rows(theirs)
    for rows, whose in ((ours, "ours"), (theirs, "ncnn's")):
        assert rows.ndim == 2 and rows.shape[1] == 6, f"{what}: {whose} rows {rows.shape}"

    def near(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        loose = np.abs(a.astype(np.float64) - b) <= atol + rtol * np.abs(b.astype(np.float64))
        return (float_steps(a, b, scale) <= ulps) | loose

    def pairable(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        same_label = a[:, None, 0] == b[None, :, 0]
        return same_label & near(a[:, None, 1:], b[None, :, 1:]).all(axis=2)

    allowed = pairable(ours, theirs)
    row_of = _pairs(allowed)
    (js,) = np.nonzero(row_of >= 0)
    is_ = row_of[js]

    # order: ncnn's, up to rows of near scores
    if ties_in_order and len(ours) == len(theirs):
        if np.array_equal(ours[:, 1].view(np.uint32), theirs[:, 1].view(np.uint32)):
            off = np.flatnonzero(~np.diagonal(allowed))
            assert not off.size, (
                f"{what}: the scores are ncnn's to the bit, so the rows must come in its order; "
                f"row {off[0]}: ours {ours[off[0]].tolist()}, ncnn {theirs[off[0]].tolist()}"
            )
    inverted = (is_[:, None] > is_[None, :]) & (js[:, None] < js[None, :])
    scores = theirs[js, 1]
    bad = inverted & ~near(scores[:, None], scores[None, :])
    if bad.any():
        a, b = np.argwhere(bad)[0]
        raise AssertionError(
            f"{what}: ncnn's rows {js[a]} and {js[b]} (scores {scores[a]!r}, {scores[b]!r}, "
            f"not a near tie) come in the other order in ours, at {is_[a]} and {is_[b]}"
        )

    # rows without a pair: only on an edge a last bit can tip
    edges = _Edges(ours, theirs, row_of, near, iou_tol)
    if score_threshold is not None:
        edges.threshold(score_threshold)
    if nms_threshold is not None:
        edges.nms_knife_edges(nms_threshold, nms_per_class)
        if candidates is not None:
            edges.swaps(_as_rows(candidates), pairable, nms_threshold, nms_per_class)
        edges.cascades(nms_threshold, nms_per_class)
    unexplained = edges.unexplained()
    assert not unexplained, (
        f"{what}: {len(unexplained)} rows without a pair in the other output, on no edge a "
        f"last bit can tip ({len(ours)} rows ours, {len(theirs)} ncnn's): "
        + "; ".join(unexplained[:6])
    )


Near = Callable[[np.ndarray, np.ndarray], np.ndarray]


class _Edges:
    """The rows of each output (0: ours, 1: ncnn's) that found no pair in the other, and which
    of them an edge explains."""

    def __init__(
        self, ours: np.ndarray, theirs: np.ndarray, row_of: np.ndarray, near: Near, iou_tol: float
    ) -> None:
        self.rows = (ours, theirs)
        self.lone = (
            np.setdiff1d(np.arange(len(ours)), row_of[row_of >= 0]),
            np.flatnonzero(row_of < 0),
        )
        self.explained = (np.zeros(len(ours), bool), np.zeros(len(theirs), bool))
        self.near = near
        self.iou_tol = iou_tol

    def threshold(self, score_threshold: float) -> None:
        """A score near the threshold: in on one side, out on the other."""
        for side in (0, 1):
            lone = self.lone[side]
            scores = self.rows[side][lone, 1]
            self.explained[side][lone] |= self.near(scores, np.float32(score_threshold))

    def _overlap(self, row: np.ndarray, rows: np.ndarray, per_class: bool) -> np.ndarray:
        iou = _iou(row[2:], rows[:, 2:])
        return np.where(rows[:, 0] == row[0], iou, 0.0) if per_class else iou

    def _at_least(self, scores: np.ndarray, score: np.float32) -> np.ndarray:
        return (scores >= score) | self.near(scores, np.full_like(scores, score))

    def nms_knife_edges(self, nms: float, per_class: bool) -> None:
        """The other output's NMS weighed the row on a knife edge: a row there scoring at least
        as high overlaps it within ``iou_tol`` of the threshold."""
        for side in (0, 1):
            other = self.rows[1 - side]
            for i in self.lone[side]:
                row = self.rows[side][i]
                iou = self._overlap(row, other, per_class)
                edge = self._at_least(other[:, 1], row[1]) & (np.abs(iou - nms) <= self.iou_tol)
                self.explained[side][i] |= bool(edge.any())

    def swaps(self, candidates: np.ndarray, pairable: Near, nms: float, per_class: bool) -> None:
        """Two lone rows, one each side, both among the candidates, of near scores, overlapping
        past the threshold: each NMS kept the one its sort put first."""
        ours, theirs = self.rows
        ours_real = pairable(ours, candidates).any(axis=1)
        theirs_real = pairable(theirs, candidates).any(axis=1)
        for i in self.lone[0]:
            for j in self.lone[1]:
                if not (ours_real[i] and theirs_real[j]):
                    continue
                tie = self.near(ours[i, 1:2], theirs[j, 1:2])[0]
                overlap = self._overlap(ours[i], theirs[j : j + 1], per_class)[0]
                if tie and overlap > nms - self.iou_tol:
                    self.explained[0][i] = self.explained[1][j] = True

    def cascades(self, nms: float, per_class: bool) -> None:
        """A lone row whose fate follows from an explained lone row of the other output that
        scores at least as high and overlaps it past the threshold: kept there, it suppressed
        this row; gone here, it left this row standing (then on, row by row)."""
        changed = True
        while changed:
            changed = False
            for side in (0, 1):
                other_lone = self.lone[1 - side]
                causes = self.rows[1 - side][other_lone[self.explained[1 - side][other_lone]]]
                if not len(causes):
                    continue
                for i in self.lone[side]:
                    row = self.rows[side][i]
                    if self.explained[side][i]:
                        continue
                    iou = self._overlap(row, causes, per_class)
                    if (self._at_least(causes[:, 1], row[1]) & (iou > nms)).any():
                        self.explained[side][i] = changed = True

    def unexplained(self) -> list[str]:
        return [
            f"{whose} row {i} {self.rows[side][i].tolist()}"
            for side, whose in ((0, "our"), (1, "ncnn's"))
            for i in self.lone[side]
            if not self.explained[side][i]
        ]
