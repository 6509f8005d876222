"""Convolution1D, Pooling1D and GridSample against ncnn itself (the wheel's CPU fp32): the GPU
path on lavapipe and the CPU path, over every param that changes the result and the dims each
type takes; bad params are a ModelFormatError naming the file, line, layer and param."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import Model, assert_close, asyncvk_forward, ncnn_forward, raw, tagged, write_model

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan


@dataclass(frozen=True)
class Case:
    """One layer line (``type params``), its weights, and the shapes of its inputs."""

    id: str
    layer: str
    shapes: tuple[tuple[int, ...], ...]
    weights: tuple[int, ...] = ()  # weight (tagged) then bias (raw), as ncnn reads them
    #: grids (the second input of GridSample) hold values in [-grid, grid]
    grid: float = 1.2

    def model_text(self) -> str:
        kind, _, params = self.layer.partition(" ")
        names = [f"in{i}" for i in range(len(self.shapes))]
        inputs = "".join(f"Input {n} 0 1 {n}\n" for n in names)
        count = len(names) + 2
        # times 1 on the GPU after it: a layer sent to the CPU then shows in the plan
        return (
            f"7767517\n{count} {count}\n{inputs}"
            f"{kind} op0 {len(names)} 1 {' '.join(names)} out0 {params}\n"
            "BinaryOp keep 1 1 out0 out1 0=2 1=1 2=1\n"
        )

    def inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        arrays = {"in0": rng.normal(0.5, 1.5, self.shapes[0]).astype(np.float32)}
        for i, shape in enumerate(self.shapes[1:], 1):
            arrays[f"in{i}"] = rng.uniform(-self.grid, self.grid, shape).astype(np.float32)
        return arrays


def _weights(case: Case, rng: np.random.Generator) -> list[bytes]:
    return [
        (tagged if i == 0 else raw)(rng.normal(0, 0.5, n).astype(np.float32))
        for i, n in enumerate(case.weights)
    ]


def conv(id: str, params: str, h: int, w: int, out: int, k: int, bias: bool = True) -> Case:
    """A Convolution1D case: ``h`` input rows (channels), ``out`` outputs, kernel ``k``."""
    size = out * h * k
    line = f"Convolution1D 0={out} 1={k} 5={int(bias)} 6={size} {params}"
    return Case(id, line.strip(), ((h, w),), (size, out) if bias else (size,))


CONV_CASES = [
    conv("conv1d-plain", "", 5, 17, 7, 3),
    conv("conv1d-no-bias", "", 3, 9, 4, 2, bias=False),
    conv("conv1d-stride-dilation", "2=2 3=3", 4, 23, 6, 3),
    conv("conv1d-pads", "4=2 15=1", 3, 10, 5, 4),
    conv("conv1d-pad-left-only-default-right", "4=3", 2, 7, 3, 5),
    conv("conv1d-pad-value", "4=2 15=3 18=-1.5", 3, 8, 4, 3),
    conv("conv1d-same-upper", "3=2 4=-233 15=-233 18=0.7", 3, 11, 4, 4),
    conv("conv1d-same-lower", "3=2 4=-234 15=-234 18=0.7", 3, 11, 4, 4),
    conv("conv1d-same-dilated", "2=2 4=-233 15=-233", 2, 9, 3, 3),
    conv("conv1d-relu", "9=1", 6, 13, 9, 3),
    conv("conv1d-leaky", "9=2 -23310=1,0.1", 4, 12, 5, 1),
    conv("conv1d-clip", "9=3 -23310=2,-0.5,0.5", 4, 12, 5, 3),
    conv("conv1d-sigmoid", "9=4", 3, 6, 3, 2),
    conv("conv1d-mish", "9=5", 3, 15, 2, 3),
    conv("conv1d-one-row", "", 1, 31, 8, 7),
    Case("conv1d-dims1", "Convolution1D 0=4 1=3 5=1 6=12", ((19,),), (12, 4)),
]

POOL_CASES = [
    Case("pool1d-max", "Pooling1D 0=0 1=3 2=2", ((5, 12),)),
    Case("pool1d-max-pads", "Pooling1D 0=0 1=3 2=1 3=1 14=2", ((4, 9),)),
    Case("pool1d-avg-full-tail", "Pooling1D 0=1 1=3 2=2 3=1", ((3, 10),)),
    Case("pool1d-avg-include-pad", "Pooling1D 0=1 1=3 2=2 3=1 6=1", ((3, 10),)),
    Case("pool1d-avg-valid", "Pooling1D 0=1 1=4 2=3 3=2 14=1 5=1", ((6, 13),)),
    Case("pool1d-max-valid", "Pooling1D 0=0 1=2 2=2 5=1", ((3, 11),)),
    Case("pool1d-avg-same-upper", "Pooling1D 0=1 1=4 2=2 5=2", ((2, 11),)),
    Case("pool1d-max-same-lower", "Pooling1D 0=0 1=4 2=3 5=3", ((2, 13),)),
    Case("pool1d-global-max", "Pooling1D 0=0 4=1", ((7, 9),)),
    Case("pool1d-global-avg", "Pooling1D 0=1 4=1", ((7, 9),)),
    Case("pool1d-adaptive-avg", "Pooling1D 0=1 7=1 8=4", ((5, 11),)),
    Case("pool1d-adaptive-max-up", "Pooling1D 0=0 7=1 8=7", ((3, 5),)),
    Case("pool1d-dims1", "Pooling1D 0=0 1=2 2=2", ((9,),)),
]


def grid(
    id: str, params: str, image: tuple[int, int, int], out: tuple[int, int], span: float = 1.2
) -> Case:
    """A GridSample case: ``image`` (c, h, w) sampled at an (outh, outw) grid of points in
    [-span, span] (past 1 they fall outside the image)."""
    fused = "3=1" in params
    shape = (2, *out) if fused else (*out, 2)
    return Case(id, f"GridSample {params}".strip(), (image, shape), grid=span)


GRID_CASES = [
    grid("grid-default", "", (3, 7, 9), (5, 6)),
    grid("grid-bilinear-zeros", "0=1 1=1", (2, 6, 5), (4, 7)),
    grid("grid-bilinear-border", "0=1 1=2", (2, 6, 5), (4, 7)),
    grid("grid-bilinear-reflection", "0=1 1=3", (2, 6, 5), (4, 7)),
    grid("grid-bilinear-align", "0=1 1=1 2=1", (3, 5, 8), (6, 3)),
    grid("grid-bilinear-reflection-align", "0=1 1=3 2=1", (3, 5, 8), (6, 3)),
    grid("grid-nearest-zeros", "0=2 1=1", (4, 9, 7), (5, 5)),
    grid("grid-nearest-border-align", "0=2 1=2 2=1", (4, 9, 7), (5, 5)),
    grid("grid-nearest-reflection", "0=2 1=3", (4, 9, 7), (5, 5)),
    grid("grid-bicubic-zeros", "0=3 1=1", (2, 8, 6), (7, 4)),
    grid("grid-bicubic-border", "0=3 1=2", (2, 8, 6), (7, 4)),
    grid("grid-bicubic-reflection", "0=3 1=3", (2, 8, 6), (7, 4)),
    grid("grid-bicubic-reflection-align", "0=3 1=3 2=1", (2, 8, 6), (7, 4)),
    grid("grid-permute-fusion", "0=1 1=2 3=1", (3, 6, 7), (4, 9)),
    grid("grid-bicubic-permute-fusion", "0=3 1=1 2=1 3=1", (2, 5, 5), (3, 8)),
    grid("grid-one-pixel-wide", "0=1 1=3", (2, 7, 1), (3, 3)),
    # far outside: reflection reflects once, then (align_corner 0) clamps
    grid("grid-bilinear-reflection-far", "0=1 1=3", (2, 6, 5), (6, 7), span=3.5),
    grid("grid-nearest-reflection-far", "0=2 1=3", (2, 6, 5), (6, 7), span=3.5),
    grid("grid-bicubic-reflection-far", "0=3 1=3", (2, 6, 5), (6, 7), span=3.5),
    grid("grid-bicubic-border-far", "0=3 1=2 2=1", (2, 6, 5), (6, 7), span=3.5),
]

CASES = CONV_CASES + POOL_CASES + GRID_CASES


def _run_case(tmp_path: Path, case: Case) -> tuple[Model, dict[str, np.ndarray]]:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    model = write_model(tmp_path, case.model_text(), _weights(case, rng))
    return model, case.inputs(rng)


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_matches_ncnn(tmp_path: Path, case: Case, gpu: bool) -> None:
    model, inputs = _run_case(tmp_path, case)
    theirs = ncnn_forward(model, inputs, ["out1"])["out1"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out1"], gpu=gpu)
    assert_close(ours["out1"], theirs, case.id)
    assert cpu_types == set(), f"fell back to the CPU: {cpu_types}"


BAD_PARAMS = [
    (
        "Convolution1D 0=4 1=3 6=12 4=-233 15=2",
        "params 4/15 pads (-233, 2): use values >= 0, or both -233 or both -234",
    ),
    ("Convolution1D 0=0 1=3 6=12", "param 0 num_output=0 must be > 0"),
    ("Convolution1D 0=4 1=3 6=13", "param 6 weight_data_size=13 is not a positive multiple"),
    ("Convolution1D 0=4 1=3 6=12 9=7", "activation_type"),
    ("Pooling1D 0=2 1=2", "param 0 pooling_type=2 must be 0 (max) or 1 (avg)"),
    ("Pooling1D 1=0", "kernel"),
    ("Pooling1D 1=2 5=4", "param 5 pad_mode=4 must be 0..3"),
    ("Pooling1D 7=1 8=0", "param 8 out_w=0 must be > 0 for adaptive pooling"),
    ("GridSample 0=0", "param 0 sample_type=0 must be 1 (bilinear), 2 (nearest) or 3 (bicubic)"),
    ("GridSample 1=4", "param 1 padding_mode=4 must be 1 (zeros), 2 (border) or 3 (reflection)"),
    ("GridSample 2=2", "param 2 align_corner=2 must be 0 or 1"),
    ("GridSample 3=5", "param 3 permute_fusion=5 must be 0 or 1"),
]


@pytest.mark.parametrize(("layer", "message"), BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, layer: str, message: str
) -> None:
    shapes = ((3, 8), (2, 2, 2)) if layer.startswith("GridSample") else ((3, 8),)
    case = Case("bad", layer, shapes)
    model = write_model(tmp_path, case.model_text(), [tagged(np.ones(12, np.float32))])
    inputs = {f"in{i}": np.ones(s, np.float32) for i, s in enumerate(shapes)}
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, inputs, ["out0"])
    # the magic, the counts, one Input line per input, then the layer
    where = (caught.value.file, caught.value.line, caught.value.layer)
    assert where == (str(model.param), 3 + len(shapes), "op0")


BAD_SHAPES = [
    (
        "Convolution1D 0=4 1=3 6=12",
        (3, 2, 8),
        "Convolution1D takes a dims 1 or 2 blob (h, w), got shape (3, 2, 8)",
    ),
    ("Convolution1D 0=4 1=3 6=12", (2, 8), "expects 1 input channels, got 2"),
    ("Convolution1D 0=4 1=3 6=12", (1, 2), "is smaller than the kernel"),
    ("Pooling1D 1=2", (2, 3, 4), "Pooling1D takes a dims 1 or 2 blob (h, w), got shape (2, 3, 4)"),
    (
        "GridSample",
        ((2, 3, 4, 5), (1, 1, 1, 3)),
        "GridSample samples a dims 3 blob (c, h, w), got shape (2, 3, 4, 5)",
    ),
    ("GridSample", ((2, 3, 4), (5, 2)), "GridSample takes a dims 3 grid, got shape (5, 2)"),
    ("GridSample", ((2, 3, 4), (5, 6, 3)), "GridSample's grid is (h, w, 2), got shape (5, 6, 3)"),
    (
        "GridSample 3=1",
        ((2, 3, 4), (5, 6, 2)),
        "GridSample's grid with permute_fusion is (2, h, w), got (5, 6, 2)",
    ),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(("layer", "shape", "message"), BAD_SHAPES, ids=[b[0] for b in BAD_SHAPES])
async def test_a_blob_the_layer_cannot_take_is_a_plan_error(
    tmp_path: Path, layer: str, shape: tuple[int, ...], message: str, gpu: bool
) -> None:
    shapes: tuple[tuple[int, ...], ...] = shape if isinstance(shape[0], tuple) else (shape,)
    case = Case("bad-shape", layer, shapes)
    weights = [tagged(np.ones(12, np.float32))] if layer.startswith("Conv") else []
    model = write_model(tmp_path, case.model_text(), weights)
    inputs = {f"in{i}": np.ones(s, np.float32) for i, s in enumerate(shapes)}
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, inputs, ["out0"], gpu=gpu)
