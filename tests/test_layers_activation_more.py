"""AbsVal, BNLL, CELU, SELU, Softplus, Shrink, Erf and GLU against ncnn itself (the wheel's CPU
fp32): the GPU path on lavapipe and the CPU path, over their params, 1-D to 4-D blobs with odd
sizes, and the values where the layers' branches, overflow and NaN handling differ.

Values are compared in float32 steps (ncnn_oracle.assert_close_to_ncnn): the wheel's last bits
depend on the CPU, and a GPU's exp and log are looser than libm's (Vulkan allows 3 + 2|x| ulps
for exp). Where ncnn's own result comes from a cancellation against 1 (``exp(x) - 1`` near 0,
``log(1 + exp(x))`` for negative x) the steps are counted at that scale."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import assert_close_to_ncnn, asyncvk_forward, ncnn_forward, write_model

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

#: type -> (GPU steps, CPU steps, the scale steps are counted at where that is looser)
TOLERANCE = {
    "AbsVal": (0, 0, 0.0),
    "Shrink": (0, 0, 0.0),
    "BNLL": (8, 4, 1.0),
    "Softplus": (8, 4, 1.0),
    "CELU": (8, 4, 1.0),  # scale: times |alpha|
    "SELU": (8, 4, 1.76),  # scale: alpha * lambda at the defaults
    "Erf": (4, 4, 0.0),
    "GLU": (16, 8, 0.0),
}


@dataclass(frozen=True)
class Case:
    """One layer line (``type params``) on an input of ``shape`` drawn from ``low``..``high``."""

    id: str
    layer: str
    shape: tuple[int, ...]
    low: float = -3.0
    high: float = 3.0
    #: GPU steps where exp's argument reaches far (Vulkan allows it 3 + 2|x| ulps)
    gpu_ulps: int | None = None

    @property
    def type(self) -> str:
        return self.layer.split()[0]

    def model_text(self) -> str:
        kind, _, params = self.layer.partition(" ")
        # times 1 on the GPU after it: a layer sent to the CPU then shows in the plan
        return (
            "7767517\n3 3\nInput in0 0 1 in0\n"
            f"{kind} op0 1 1 in0 t0 {params}\n"
            "BinaryOp keep 1 1 t0 out 0=2 1=1 2=1\n"
        )

    def scale(self) -> float:
        scale = TOLERANCE[self.type][2]
        alpha = re.search(r"\b0=(-?[\d.]+)", self.layer)
        if self.type == "CELU" and alpha:
            scale *= abs(float(alpha.group(1)))
        return scale


SHAPES = [(37,), (5, 13), (3, 7, 9), (2, 3, 5, 7)]


def every_dims(id: str, layer: str, low: float = -3, high: float = 3) -> list[Case]:
    return [Case(f"{id}-{len(s)}d", layer, s, low, high) for s in SHAPES]


CASES = [
    *every_dims("absval", "AbsVal"),
    *every_dims("bnll", "BNLL", -30, 30),
    Case("bnll-huge", "BNLL", (4, 50), -100, 100),
    Case("bnll-small", "BNLL", (3, 40), -1, 1),
    *every_dims("celu", "CELU"),
    Case("celu-alpha-half", "CELU 0=0.5", (6, 7, 8), -30, 30),
    Case("celu-alpha-big", "CELU 0=2.5", (3, 4, 5, 6), -100, 100),
    Case("celu-alpha-negative", "CELU 0=-2.0", (41,)),
    *every_dims("selu", "SELU", -30, 30),
    Case("selu-params", "SELU 0=1.5 1=2.0", (4, 9, 11), -100, 100),
    Case("selu-alpha-only", "SELU 0=0.75", (3, 17)),
    *every_dims("softplus", "Softplus"),
    Case("softplus-overflow", "Softplus", (5, 6, 40), -100, 100),
    Case("softplus-30", "Softplus", (3, 50), -30, 30),
    *every_dims("shrink", "Shrink"),
    Case("shrink-soft", "Shrink 0=0.5 1=0.5", (3, 8, 9)),
    Case("shrink-hard", "Shrink 1=1.5", (2, 3, 4, 5), -100, 100),
    Case("shrink-bias-only", "Shrink 0=-0.25", (6, 11)),
    Case("shrink-negative-lambd", "Shrink 0=0.75 1=-0.5", (45,)),
    *every_dims("erf", "Erf"),
    Case("erf-near-zero", "Erf", (4, 64), -1e-3, 1e-3),
    Case("erf-unit", "Erf", (4, 64), -1.2, 1.2),
    Case("erf-tail", "Erf", (2, 3, 64), -5, 5),
    Case("erf-huge", "Erf", (3, 40), -100, 100),
]

GLU_CASES = [
    Case("glu-1d", "GLU", (38,), -6, 6),
    Case("glu-1d-odd", "GLU", (37,), -6, 6),
    Case("glu-1d-ignores-axis", "GLU 0=2", (12,), -6, 6),
    Case("glu-2d-h", "GLU 0=0", (6, 9), -6, 6),
    Case("glu-2d-w", "GLU 0=1", (5, 14), -6, 6),
    Case("glu-2d-w-negative", "GLU 0=-1", (7, 10), -6, 6),
    Case("glu-2d-h-negative-odd", "GLU 0=-2", (7, 3), -6, 6),
    Case("glu-2d-w-odd", "GLU 0=1", (4, 9), -6, 6),
    Case("glu-3d-c", "GLU 0=0", (4, 5, 7), -6, 6),
    Case("glu-3d-h", "GLU 0=1", (3, 6, 7), -6, 6),
    Case("glu-3d-w", "GLU 0=2", (3, 5, 8), -6, 6),
    Case("glu-3d-c-odd-negative", "GLU 0=-3", (5, 4, 3), -6, 6),
    Case("glu-3d-h-odd-negative", "GLU 0=-2", (3, 7, 5), -6, 6),
    Case("glu-3d-w-negative", "GLU 0=-1", (2, 3, 11), -6, 6),
    Case("glu-4d-c", "GLU 0=0", (4, 3, 5, 7), -6, 6),
    Case("glu-4d-d", "GLU 0=1", (2, 6, 5, 3), -6, 6),
    Case("glu-4d-h", "GLU 0=2", (3, 2, 9, 5), -6, 6),
    Case("glu-4d-w", "GLU 0=3", (2, 3, 4, 10), -6, 6),
    Case("glu-4d-c-odd-negative", "GLU 0=-4", (3, 2, 4, 5), -6, 6),
    Case("glu-4d-d-negative", "GLU 0=-3", (2, 4, 3, 5), -6, 6),
    Case("glu-4d-h-negative", "GLU 0=-2", (2, 3, 6, 5), -6, 6),
    Case("glu-4d-w-odd-negative", "GLU 0=-1", (2, 3, 4, 7), -6, 6),
    Case("glu-huge", "GLU 0=1", (3, 8, 10), -88, 88, gpu_ulps=128),
    Case("glu-big", "GLU 0=1", (3, 66, 65, 7), -6, 6),
]


def _inputs(case: Case) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    return {"in0": rng.uniform(case.low, case.high, case.shape).astype(np.float32)}


async def _check(tmp_path: Path, case: Case, x: np.ndarray, gpu: bool) -> None:
    model = write_model(tmp_path, case.model_text())
    theirs = ncnn_forward(model, {"in0": x}, ["out"])["out"]
    ours, cpu_types = await asyncvk_forward(model, {"in0": x}, ["out"], gpu=gpu)
    assert cpu_types == set(), f"fell back to the CPU: {cpu_types}"
    gpu_steps, cpu_steps, _ = TOLERANCE[case.type]
    ulps = (case.gpu_ulps or gpu_steps) if gpu else cpu_steps
    got = ours["out"]
    if gpu:  # a GPU may flush denormals to zero (Vulkan allows it; the H200's driver does)
        theirs, got = _flush_denormals(theirs), _flush_denormals(got)
    assert_close_to_ncnn(got, theirs, ulps=ulps, scale=case.scale(), what=case.id)


def _flush_denormals(x: np.ndarray) -> np.ndarray:
    tiny = np.finfo(np.float32).tiny
    return np.where(np.abs(x) < tiny, np.float32(0), x).astype(np.float32)


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("case", CASES + GLU_CASES, ids=[c.id for c in CASES + GLU_CASES])
async def test_matches_ncnn(tmp_path: Path, case: Case, gpu: bool) -> None:
    await _check(tmp_path, case, _inputs(case)["in0"], gpu)


#: NaN, infinities, signed zeros, tiny values, the Shrink thresholds, the edges of the small
#: and large erf forms, where exp overflows (88.72) and far beyond; twice over, so that the
#: wheel's SIMD lanes and its scalar tail both see each.
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-6, -1e-6, 0.5, -0.5]
SPECIAL += [0.9999999, 1.0, 1.0000001, -1.0, 1.5, -1.5, 3.9, -4.1, 10.0, -10.0, 20.0, -20.0]
SPECIAL += [30.0, -30.0, 88.0, 88.5, 89.0, -88.8, 100.0, -100.0, 1e30, -1e30]

SPECIAL_LAYERS = [
    "AbsVal",
    "BNLL",
    "CELU",
    "CELU 0=0.5",
    "SELU",
    "SELU 0=1.5 1=2.0",
    "Softplus",
    "Shrink",
    "Shrink 0=0.5 1=0.5",
    "Shrink 1=1.5",
    "Erf",
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("layer", SPECIAL_LAYERS)
async def test_edge_values_match_ncnn(tmp_path: Path, layer: str, gpu: bool) -> None:
    """Infinities where ncnn overflows (Softplus past 88.72), 0 where ``1 + exp`` rounds to 1,
    NaN where ncnn keeps it (0 for Shrink). BNLL's NaN is checked on its own below: the wheel's
    SIMD lanes turn it into 88.38, ncnn's scalar code (and asyncvk) keeps it."""
    x = np.array(SPECIAL * 2, np.float32)
    if layer == "BNLL":
        x = x[~np.isnan(x)]
    await _check(tmp_path, Case("edge", layer, x.shape), x, gpu)


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_nan_stays_nan_and_shrink_makes_it_zero(tmp_path: Path, gpu: bool) -> None:
    x = np.array([np.nan, 1.0, -np.nan, -2.0] * 5, np.float32)
    nan = np.isnan(x)
    for layer in ["AbsVal", "BNLL", "CELU", "SELU", "Softplus", "Erf", "Shrink"]:
        model = write_model(tmp_path, Case("nan", layer, x.shape).model_text())
        ours, _ = await asyncvk_forward(model, {"in0": x}, ["out"], gpu=gpu)
        got = np.isnan(ours["out"])
        want = np.zeros_like(nan) if layer == "Shrink" else nan
        assert np.array_equal(got, want), f"{layer}: NaN at {got}"
        if layer == "Shrink":
            assert np.all(ours["out"][nan] == 0), ours["out"]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_glu_edge_values_match_ncnn(tmp_path: Path, gpu: bool) -> None:
    """Every special value as a (first half) and as b (second half): sigmoid(NaN) is NaN,
    inf * sigmoid(-30) is inf. Where exp(-b) overflows (b below -88.72) ncnn's C gives
    a * 1 / inf = a * 0; the wheel, built with -ffast-math, divides by a reciprocal estimate
    that makes NaN of it. asyncvk keeps the C semantics, checked on their own."""
    special = np.array(SPECIAL, np.float32)
    a = np.repeat(special, special.size)
    b = np.tile(special, special.size)
    overflow = b < -88.72
    x = np.stack([a[~overflow], b[~overflow]]).reshape(2, 1, -1)
    await _check(tmp_path, Case("glu-edge", "GLU 0=0", x.shape, gpu_ulps=128), x, gpu)

    x = np.stack([a[overflow], b[overflow]]).reshape(2, -1)
    model = write_model(tmp_path, Case("glu-overflow", "GLU", x.shape).model_text())
    ours, _ = await asyncvk_forward(model, {"in0": x}, ["out"], gpu=gpu)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(ours["out"], x[:1] * np.float32(0))


BAD_PARAMS = [
    ("GLU 0=4", "GLU param 0 axis=4 is out of range (-4..3)"),
    ("GLU 0=-5", "GLU param 0 axis=-5 is out of range (-4..3)"),
]


@pytest.mark.parametrize(("layer", "message"), BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, layer: str, message: str
) -> None:
    model = write_model(tmp_path, Case("bad", layer, (4, 4, 4)).model_text())
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, {"in0": np.ones((4, 4, 4), np.float32)}, ["out"])
    assert (caught.value.file, caught.value.line, caught.value.layer) == (
        str(model.param),
        4,
        "op0",
    )


BAD_SHAPES = [
    ("GLU 0=2", (4, 6), "GLU: param 0 axis 2 out of range for 2-D (4, 6)"),
    ("GLU 0=-3", (4, 6), "GLU: param 0 axis -3 out of range for 2-D (4, 6)"),
    ("GLU 0=3", (2, 4, 6), "GLU: param 0 axis 3 out of range for 3-D (2, 4, 6)"),
    ("GLU 0=0", (1, 6), "GLU: axis 0 of (1, 6) has 1 element: nothing to halve"),
    ("GLU", (1,), "GLU: axis 0 of (1,) has 1 element: nothing to halve"),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(("layer", "shape", "message"), BAD_SHAPES, ids=[b[0] for b in BAD_SHAPES])
async def test_a_blob_glu_cannot_split_is_a_plan_error(
    tmp_path: Path, layer: str, shape: tuple[int, ...], message: str, gpu: bool
) -> None:
    """ncnn fails (-100) for an axis past the blob's dims and makes an empty blob for a single
    element: asyncvk names why."""
    model = write_model(tmp_path, Case("bad-shape", layer, shape).model_text())
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, {"in0": np.ones(shape, np.float32)}, ["out"], gpu=gpu)
