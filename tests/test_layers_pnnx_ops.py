"""Exp, Log, Power, Threshold, Squeeze, ExpandDims, Tile and Cast against ncnn itself (the
wheel's CPU fp32): the GPU path on lavapipe and the CPU path, over the params and dims each type
takes; bad params are a ModelFormatError naming the file, line, layer and param.

Values are compared with the wheel within a tolerance: its last bit depends on the CPU it runs
on (ncnn_oracle). Cast rounds exactly as IEEE says, checked against numpy to the bit."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import assert_close, asyncvk_forward, ncnn_forward, write_model

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan


@dataclass(frozen=True)
class Case:
    """Layer lines (``type params``, chained) run on an input of ``shape`` drawn from
    ``low``..``high``."""

    id: str
    layers: tuple[str, ...]
    shape: tuple[int, ...]
    low: float = -3.0
    high: float = 3.0

    def model_text(self) -> str:
        lines = []
        blob = "in0"
        for i, layer in enumerate(self.layers):
            kind, _, params = layer.partition(" ")
            lines.append(f"{kind} op{i} 1 1 {blob} t{i} {params}")
            blob = f"t{i}"
        # times 1 on the GPU after it: a layer sent to the CPU then shows in the plan
        lines.append(f"BinaryOp keep 1 1 {blob} out 0=2 1=1 2=1")
        head = f"7767517\n{len(lines) + 1} {len(lines) + 1}\nInput in0 0 1 in0\n"
        return head + "\n".join(lines) + "\n"


def case(id: str, layer: str, shape: tuple[int, ...], low: float = -3, high: float = 3) -> Case:
    return Case(id, (layer,), shape, low, high)


CASES = [
    # Exp: base e, scale and shift, another base, every dims
    case("exp-default", "Exp", (3, 5, 7)),
    case("exp-scale-shift", "Exp 1=0.5 2=-1.25", (2, 3, 4, 5)),
    case("exp-base2", "Exp 0=2.0 1=1.5 2=0.5", (6, 7)),
    case("exp-base-fraction-1d", "Exp 0=0.3 2=1.0", (37,)),
    # Log: base e on positive values, scale and shift, base 10, base 2 on 4-D
    case("log-default", "Log", (3, 5, 7), 0.01, 10),
    case("log-scale-shift", "Log 1=2.5 2=3.5", (5, 9), -1, 4),
    case("log-base10", "Log 0=10.0", (41,), 0.001, 1000),
    case("log-base2-4d", "Log 0=2.0 1=0.5 2=0.25", (2, 3, 4, 5), 0, 8),
    # Power: squares of negatives, fractional powers, negative powers, scale and shift
    case("power-default", "Power", (3, 4, 5)),
    case("power-square", "Power 0=2.0", (3, 4, 5)),
    case("power-cube-neg", "Power 0=3.0 1=-1.5 2=0.5", (7, 6)),
    case("power-sqrt", "Power 0=0.5 1=2.0 2=0.25", (2, 3, 4, 5), 0, 5),
    case("power-inverse-1d", "Power 0=-1.0 2=4.0", (23,)),
    case("power-zero", "Power 0=0.0", (3, 5, 7)),
    # Threshold
    case("threshold-default", "Threshold", (3, 5, 7)),
    case("threshold-positive-2d", "Threshold 0=1.25", (6, 9)),
    case("threshold-negative-1d", "Threshold 0=-0.5", (29,)),
    case("threshold-4d", "Threshold 0=0.75", (2, 3, 4, 5)),
    # Squeeze by flags (only dims of size 1 go) and by axes (negative too); every dims
    case("squeeze-none", "Squeeze", (1, 5, 1)),
    case("squeeze-w", "Squeeze 0=1", (3, 5, 1)),
    case("squeeze-h-c", "Squeeze 1=1 2=1", (1, 1, 6)),
    case("squeeze-all-3d", "Squeeze 0=1 1=1 2=1", (1, 1, 1)),
    case("squeeze-flag-on-big-dim", "Squeeze 0=1 1=1", (3, 4, 5)),
    case("squeeze-2d-h", "Squeeze 1=1", (1, 8)),
    case("squeeze-1d", "Squeeze 0=1", (1,)),
    case("squeeze-4d-d", "Squeeze 11=1", (3, 1, 4, 5)),
    case("squeeze-4d-d-c", "Squeeze 11=1 2=1", (1, 1, 4, 5)),
    case("squeeze-4d-w-h", "Squeeze 0=1 1=1", (3, 2, 1, 1)),
    case("squeeze-axes", "Squeeze -23303=2,0,2", (1, 4, 1)),
    case("squeeze-axes-negative", "Squeeze -23303=1,-1", (3, 4, 1)),
    case("squeeze-axes-4d", "Squeeze -23303=2,1,3", (2, 1, 3, 1)),
    case("squeeze-axes-2d-w", "Squeeze -23303=1,1", (7, 1)),
    case("squeeze-axes-big-dim-stays", "Squeeze -23303=1,1", (3, 4, 5)),
    # ExpandDims: every output dims from every input dims, negative axes
    case("expand-1d-front", "ExpandDims -23303=1,0", (9,)),
    case("expand-1d-back", "ExpandDims -23303=1,1", (9,)),
    case("expand-1d-to-3d", "ExpandDims -23303=2,0,2", (9,)),
    case("expand-1d-to-4d", "ExpandDims -23303=3,0,1,3", (9,)),
    case("expand-2d-middle", "ExpandDims -23303=1,1", (4, 6)),
    case("expand-2d-back-negative", "ExpandDims -23303=1,-1", (4, 6)),
    case("expand-2d-to-4d", "ExpandDims -23303=2,1,3", (4, 6)),
    case("expand-3d-front", "ExpandDims -23303=1,0", (3, 4, 5)),
    case("expand-3d-depth", "ExpandDims -23303=1,1", (3, 4, 5)),
    case("expand-3d-back", "ExpandDims -23303=1,3", (3, 4, 5)),
    case("expand-none", "ExpandDims", (3, 4, 5)),
    # Tile: by axis and tiles on every dims, numpy-style repeats (adding dims too)
    case("tile-default", "Tile", (3, 4, 5)),
    case("tile-1d", "Tile 1=3", (7,)),
    case("tile-2d-h", "Tile 0=0 1=2", (3, 5)),
    case("tile-2d-w", "Tile 0=1 1=3", (3, 5)),
    case("tile-3d-c", "Tile 0=0 1=2", (3, 4, 5)),
    case("tile-3d-h", "Tile 0=1 1=3", (3, 4, 5)),
    case("tile-3d-w", "Tile 0=2 1=2", (3, 4, 5)),
    case("tile-4d-c", "Tile 0=0 1=2", (2, 3, 4, 5)),
    case("tile-4d-d", "Tile 0=1 1=3", (2, 3, 4, 5)),
    case("tile-4d-h", "Tile 0=2 1=2", (2, 3, 4, 5)),
    case("tile-4d-w", "Tile 0=3 1=2", (2, 3, 4, 5)),
    case("tile-repeats-1", "Tile -23302=1,3", (3, 4, 5)),
    case("tile-repeats-2", "Tile -23302=2,2,3", (3, 4, 5)),
    case("tile-repeats-3", "Tile -23302=3,2,1,3", (3, 4, 5)),
    case("tile-repeats-3-on-4d", "Tile -23302=3,2,3,1", (2, 3, 4, 5)),
    case("tile-repeats-4", "Tile -23302=4,2,2,1,2", (2, 3, 4, 5)),
    case("tile-repeats-add-dims", "Tile -23302=3,2,1,2", (4, 5)),
    case("tile-repeats-1d-to-4d", "Tile -23302=4,2,3,1,2", (5,)),
    case("tile-repeats-ones-add-dim", "Tile -23302=3,1,1,1", (4, 8)),
    # Cast: fp32 -> fp16 -> fp32 and fp32 -> bf16 -> fp32 round (overflow to inf kept out)
    Case("cast-fp16", ("Cast 0=1 1=2", "Cast 0=2 1=1"), (3, 4, 8), -100, 100),
    Case("cast-fp16-tiny", ("Cast 0=1 1=2", "Cast 0=2 1=1"), (4, 8), -1e-3, 1e-3),
    Case("cast-fp16-1d", ("Cast 0=1 1=2", "Cast 0=2 1=1"), (64,), -3e4, 3e4),
    Case("cast-bf16", ("Cast 0=1 1=4", "Cast 0=4 1=1"), (2, 3, 4, 8), -100, 100),
    case("cast-same", "Cast 0=1 1=1", (3, 4, 5)),
]


def _inputs(case: Case) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    return {"in0": rng.uniform(case.low, case.high, case.shape).astype(np.float32)}


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_matches_ncnn(tmp_path: Path, case: Case, gpu: bool) -> None:
    model = write_model(tmp_path, case.model_text())
    inputs = _inputs(case)
    theirs = ncnn_forward(model, inputs, ["out"])["out"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out"], gpu=gpu)
    assert_close(ours["out"], theirs, case.id)
    assert cpu_types == set(), f"fell back to the CPU: {cpu_types}"


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_casts_round_as_ncnn(tmp_path: Path, gpu: bool) -> None:
    """Ties go to even, fp16 past 65504 to inf, fp16 subnormals stay (16 values a channel:
    ncnn's F16C runs take them all), NaN stays NaN: IEEE's rounding to nearest even, to the
    bit; the wheel within one step of the narrow type of it."""
    ties = [1 + 2**-11, 1 + 3 * 2**-11, 2049.0, 2051.0, 65519.0, 65520.0, -7e4, 3e-6, -2.5e-7]
    ties += [1 + 2**-9, 1 + 3 * 2**-9, 1 + 2**-8 + 2**-12, 70000.0, 3.0e38, np.nan, 2.0**-130]
    rest = [0.1, -0.3, 1e-8, 0.0, -0.0, 123.456, -1e30, 5.9604645e-08]
    x = np.array(ties + rest + [-5.0] * 8, np.float32).reshape(2, 16)
    for layers, narrow in (
        (("Cast 0=1 1=2", "Cast 0=2 1=1"), "fp16"),
        (("Cast 0=1 1=4", "Cast 0=4 1=1"), "bf16"),
    ):
        model = write_model(tmp_path, Case("bits", layers, x.shape).model_text())
        wanted = _round_trip(x, narrow)
        ours, _ = await asyncvk_forward(model, {"in0": x}, ["out"], gpu=gpu)
        nan = np.isnan(wanted)
        assert np.array_equal(np.isnan(ours["out"]), nan), f"{narrow}: NaN where"
        got, want = ours["out"][~nan].view(np.uint32), wanted[~nan].view(np.uint32)
        assert np.array_equal(got, want), f"{narrow}: {ours['out']} {wanted}"
        theirs = ncnn_forward(model, {"in0": x}, ["out"])["out"]
        if narrow == "bf16":
            theirs = _unflushed(x, theirs)
        steps = _narrow_steps(theirs, wanted, narrow)
        assert steps.max() <= 1, f"{narrow}: ncnn {theirs[steps > 1]}, IEEE {wanted[steps > 1]}"


def _round_trip(x: np.ndarray, narrow: str) -> np.ndarray:
    """float32 to fp16 (numpy's conversion: IEEE, to nearest even) or bf16 (the upper 16 bits,
    rounded to nearest even) and back; NaN stays NaN."""
    if narrow == "fp16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, rounded)


def _narrow_steps(a: np.ndarray, b: np.ndarray, narrow: str) -> np.ndarray:
    """How many values of the narrow type lie between ``a`` and ``b`` (values of it held in
    float32; the largest finite one is a step from infinity), 0 where both are NaN."""
    if narrow == "fp16":
        with np.errstate(over="ignore"):
            bits = [v.astype(np.float16).view(np.int16).astype(np.int64) for v in (a, b)]
    else:
        bits = [(v.view(np.int32) >> 16).astype(np.int64) for v in (a, b)]
    line = [np.where(v < 0, -(v & 0x7FFF), v) for v in bits]
    steps = np.abs(line[0] - line[1])
    nan = np.isnan(a) | np.isnan(b)
    return np.where(nan, np.where(np.isnan(a) & np.isnan(b), 0, 2**16), steps)


def _unflushed(x: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """ncnn's bf16 round trip as its plain x86-64 build gives it. On CPUs with AVX512-BF16 the
    wheel converts with vcvtneps2bf16, which reads a float32 subnormal as zero (seen on an AMD
    EPYC, 2026-11-26); the plain build keeps its upper 16 bits. The inputs' subnormal (2^-130)
    is exact in bf16, so the plain build returns it unchanged."""
    subnormal = (x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)
    flushed = subnormal & (theirs == 0)
    return np.where(flushed, x, theirs)


async def test_nan_and_edge_values_match_ncnn(tmp_path: Path) -> None:
    """powf's and logf's edge cases, which GLSL's pow() and log() leave undefined."""
    x = np.array([np.nan, 0.0, -0.0, -1.0, -2.0, 2.0, 0.5, -0.5, 1.0, 4.0, -8.0], np.float32)
    layers = ["Power 0=2.0", "Power 0=3.0", "Power 0=0.5", "Power 0=-1.0", "Power 0=0.0"]
    layers += ["Log", "Log 0=2.0", "Threshold", "Exp 0=2.0", "Exp"]
    for layer in layers:
        model = write_model(tmp_path, case("edge", layer, x.shape).model_text())
        theirs = ncnn_forward(model, {"in0": x}, ["out"])["out"]
        for gpu in (True, False):
            ours, _ = await asyncvk_forward(model, {"in0": x}, ["out"], gpu=gpu)
            np.testing.assert_allclose(ours["out"], theirs, rtol=1e-5, err_msg=f"{layer} {gpu}")


async def test_tile_past_the_probe_limit_stays_on_the_gpu(tmp_path: Path) -> None:
    """Tile's index map is built directly, not by probing: 2^22+ outputs still run on the GPU."""
    c = case("tile-big", "Tile 0=0 1=2", (1, 2049, 2048))  # 2^22 + 2048 inputs
    model = write_model(tmp_path, c.model_text())
    inputs = _inputs(c)
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out"])
    assert cpu_types == set()
    np.testing.assert_array_equal(ours["out"], np.tile(inputs["in0"], (2, 1, 1)))


BAD_PARAMS = [
    ("Exp 0=-2.0", "Exp param 0 (base) = -2.0: must be -1 (e) or > 0"),
    ("Exp 0=0.0", "Exp param 0 (base) = 0.0: must be -1 (e) or > 0"),
    ("Log 0=1.0", "Log param 0 (base) = 1.0: must be -1 (e) or > 0 and not 1"),
    ("Log 0=-3.0", "Log param 0 (base) = -3.0"),
    ("Tile 0=4", "Tile param 0 (axis) = 4: must be 0..3"),
    ("Tile 1=0", "Tile param 1 (tiles) = 0: must be >= 1"),
    ("Tile -23302=2,0,2", "Tile param 2 (repeats) = (0, 2): 1 to 4 counts, each >= 1"),
    ("Tile -23302=5,1,1,1,1,2", "Tile param 2 (repeats) = (1, 1, 1, 1, 2)"),
    ("ExpandDims -23303=4,0,1,2,3", "ExpandDims param 3 (axes) has 4 values: at most 3"),
    ("Cast 0=1 1=3", "Cast params 0/1 (type_from/type_to): fp32 -> int8 unsupported: int8"),
    ("Cast 0=3 1=1", "int8 -> fp32 unsupported: int8 blobs have no float32 form"),
    ("Cast 0=2 1=4", "fp16 -> bf16 unsupported: ncnn leaves the output unwritten"),
    ("Cast 0=1 1=0", "fp32 -> auto unsupported"),
    ("Cast 0=5 1=1", "Cast param 0 (type_from) = 5: must be 0..4"),
    ("Cast 0=1 1=9", "Cast param 1 (type_to) = 9: must be 0..4"),
]


@pytest.mark.parametrize(("layer", "message"), BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, layer: str, message: str
) -> None:
    model = write_model(tmp_path, case("bad", layer, (4, 4, 4)).model_text())
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, {"in0": np.ones((4, 4, 4), np.float32)}, ["out"])
    assert (caught.value.file, caught.value.line, caught.value.layer) == (
        str(model.param),
        4,
        "op0",
    )


BAD_SHAPES = [
    ("Squeeze -23303=1,3", (2, 1, 3), "Squeeze: param 3 axes names axis 3, out of range for 3-D"),
    ("ExpandDims -23303=2,0,0", (4,), "ExpandDims: param 3 axes (0, 0) name one axis twice"),
    ("ExpandDims -23303=2,0,1", (2, 3, 4), "ExpandDims: (2, 3, 4) with 2 new axes exceeds 4-D"),
    ("ExpandDims -23303=1,-5", (2, 3), "ExpandDims: param 3 axes names axis -5"),
    ("Tile 0=2 1=2", (3, 4), "Tile: param 0 axis 2 out of range for 2-D"),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(("layer", "shape", "message"), BAD_SHAPES, ids=[b[0] for b in BAD_SHAPES])
async def test_a_blob_the_layer_cannot_take_is_a_plan_error(
    tmp_path: Path, layer: str, shape: tuple[int, ...], message: str, gpu: bool
) -> None:
    """ncnn would silently ignore the axis (or mis-shape the blob): asyncvk names why."""
    model = write_model(tmp_path, case("bad-shape", layer, shape).model_text())
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, {"in0": np.ones(shape, np.float32)}, ["out"], gpu=gpu)
