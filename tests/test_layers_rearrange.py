"""Reorg, Flip, Diag, CopyTo, DeepCopy, Unfold and Fold against ncnn itself (the wheel's CPU
fp32): the GPU path on lavapipe (which must not fall back to the CPU) and the CPU path, over the
params and dims each type takes, with odd sizes; bad params are a ModelFormatError naming the
file, line, layer and param, and a blob a layer cannot take is an InputError saying why.

The layers that only move values are compared with the wheel to the bit; Fold adds, in ncnn's
order, and is compared within a tolerance (ncnn's last bit depends on the CPU: ncnn_oracle)."""

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


def model_text(layer: str, inputs: int = 1) -> str:
    """``layer`` (``type params``) on ``inputs`` Input blobs, then a times-1 BinaryOp on the
    GPU: a layer sent to the CPU then shows in the plan. The layer is on line 3 + inputs."""
    kind, _, params = layer.partition(" ")
    bottoms = " ".join(f"in{i}" for i in range(inputs))
    lines = [f"Input in{i} 0 1 in{i}" for i in range(inputs)]
    lines.append(f"{kind} op0 {inputs} 1 {bottoms} t0 {params}")
    lines.append("BinaryOp keep 1 1 t0 out 0=2 1=1 2=1")
    return f"7767517\n{len(lines)} {inputs + 2}\n" + "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Case:
    """One layer line run on inputs of ``shapes`` (random values, seeded by the id)."""

    layer: str
    shapes: tuple[tuple[int, ...], ...]

    @property
    def id(self) -> str:
        dims = "+".join("x".join(map(str, s)) for s in self.shapes)
        return f"{self.layer} @ {dims}"

    def inputs(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        arrays = {}
        for i, shape in enumerate(self.shapes):
            x = rng.uniform(-3, 3, shape).astype(np.float32)
            arrays[f"in{i}"] = x
        return arrays


def case(layer: str, *shapes: tuple[int, ...]) -> Case:
    return Case(layer, shapes)


MOVES = [
    # Reorg: stride 1, both channel orders, rows and columns past a whole stride dropped,
    # 2-D (one channel) and 1-D (stride 1 only: a row is shorter than any larger stride)
    case("Reorg", (3, 5, 7)),
    case("Reorg 0=2", (3, 6, 8)),
    case("Reorg 0=2 1=1", (3, 6, 8)),
    case("Reorg 0=3", (2, 7, 11)),
    case("Reorg 0=3 1=1", (2, 7, 11)),
    case("Reorg 0=2 1=1", (5, 7)),
    case("Reorg 0=2", (9, 4)),
    case("Reorg 0=1 1=1", (9,)),
    # Flip: no axes, each axis of every dims, several, negative, one named twice
    case("Flip", (3, 4, 5)),
    case("Flip -23300=1,0", (7,)),
    case("Flip -23300=1,-1", (7,)),
    case("Flip -23300=1,0", (5, 7)),
    case("Flip -23300=1,1", (5, 7)),
    case("Flip -23300=2,-1,0", (5, 7)),
    case("Flip -23300=1,0", (3, 5, 7)),
    case("Flip -23300=1,1", (3, 5, 7)),
    case("Flip -23300=1,2", (3, 5, 7)),
    case("Flip -23300=2,0,-1", (3, 5, 7)),
    case("Flip -23300=3,0,1,2", (3, 5, 7)),
    case("Flip -23300=2,1,1", (3, 5, 7)),
    case("Flip -23300=1,0", (2, 3, 5, 7)),
    case("Flip -23300=1,1", (2, 3, 5, 7)),
    case("Flip -23300=1,2", (2, 3, 5, 7)),
    case("Flip -23300=1,3", (2, 3, 5, 7)),
    case("Flip -23300=2,-3,-1", (2, 3, 5, 7)),
    case("Flip -23300=4,0,1,2,3", (2, 3, 5, 7)),
    # Diag: a vector onto the main, an upper and a lower diagonal; a diagonal of wide and tall
    # matrices, every length case (min(h, w), h + k, w - k)
    case("Diag", (5,)),
    case("Diag 0=2", (5,)),
    case("Diag 0=-3", (4,)),
    case("Diag", (3, 5)),
    case("Diag 0=1", (3, 5)),
    case("Diag 0=2", (3, 5)),
    case("Diag 0=4", (3, 5)),
    case("Diag 0=-1", (3, 5)),
    case("Diag 0=-2", (3, 5)),
    case("Diag", (6, 4)),
    case("Diag 0=-2", (6, 4)),
    case("Diag 0=-5", (6, 4)),
    case("Diag 0=3", (6, 4)),
    # DeepCopy on every dims
    case("DeepCopy", (7,)),
    case("DeepCopy", (5, 7)),
    case("DeepCopy", (3, 5, 7)),
    case("DeepCopy", (2, 3, 5, 7)),
    # Unfold: kernel, dilation, stride (each w and h apart), pads on each side, a pad value (one
    # of the form k + 0.5, which the probe tells apart with a second run), SAME_UPPER and
    # SAME_LOWER (a stride past the kernel crops a side), 2-D and 1-D (only its ends pad)
    case("Unfold 1=3", (3, 7, 9)),
    case("Unfold 1=3 11=2", (3, 7, 9)),
    case("Unfold 1=2 2=2 12=3", (2, 9, 8)),
    case("Unfold 1=3 3=2 13=3", (2, 9, 11)),
    case("Unfold 1=3 4=1", (2, 5, 7)),
    case("Unfold 1=2 4=1 15=2 14=0 16=3 18=-1.75", (2, 5, 7)),
    case("Unfold 1=3 3=2 4=2 18=2.5", (3, 6, 5)),
    case("Unfold 1=3 2=2 3=2 4=-233", (2, 7, 9)),
    case("Unfold 1=2 3=3 4=-234 18=9.5", (2, 5, 7)),
    case("Unfold 1=1 11=3 3=3 4=-233", (2, 5, 8)),
    case("Unfold 1=1 11=3 3=3 4=-234 18=0.5", (2, 5, 8)),
    case("Unfold 1=3 11=2 3=2 4=1", (6, 7)),
    case("Unfold 1=3 11=1 3=2 4=1 18=4.0", (11,)),
    # CopyTo: offsets per dim, numpy-style starts (negative, -233) on all or given axes, a
    # source of fewer dims, a source of the same shape (the output, whatever the offsets)
    case("CopyTo 0=3", (9,), (4,)),
    case("CopyTo -23309=1,-5", (9,), (4,)),
    case("CopyTo -23309=1,-233", (9,), (4,)),
    case("CopyTo 0=2 1=3", (6, 7), (2, 3)),
    case("CopyTo -23309=2,1,-4", (6, 7), (2, 3)),
    case("CopyTo -23309=1,2 -23311=1,1", (6, 7), (6, 3)),
    case("CopyTo 0=1 1=2", (6, 7), (3,)),
    case("CopyTo 0=1 1=2 2=1", (4, 5, 6), (2, 3, 4)),
    case("CopyTo -23309=2,-2,1 -23311=2,0,2", (4, 5, 6), (2, 5, 4)),
    case("CopyTo -23309=3,1,-233,2", (4, 5, 6), (3, 5, 3)),
    case("CopyTo 0=2 1=1 2=3", (4, 5, 6), (3, 4)),
    case("CopyTo 0=1 1=1 13=2 2=1", (3, 4, 5, 6), (2, 2, 3, 4)),
    case("CopyTo -23309=4,1,-2,0,2", (3, 4, 5, 6), (2, 2, 3, 4)),
    case("CopyTo -23309=1,1 -23311=1,-4", (3, 4, 5, 6), (2, 4, 5, 6)),
    case("CopyTo -23309=1,1 -23311=1,-3", (3, 4, 5, 6), (3, 3, 5, 6)),
    case("CopyTo 0=1 1=1 13=2 2=1", (3, 4, 5, 6), (2, 3, 4)),
    case("CopyTo 0=1 1=1 2=1", (3, 4, 5), (3, 4, 5)),
]

# Fold: the columns of an Unfold of a (c, h, w) blob, back to it; kernel, dilation, stride
# (each w and h apart), pads on each side, output_h apart from output_w, 1-D columns
SUMS = [
    case("Fold 1=3 20=7 21=5", (18, 15)),
    case("Fold 1=3 11=2 20=6 21=5", (12, 16)),
    case("Fold 1=2 2=2 12=3 20=8 21=9", (8, 36)),
    case("Fold 1=3 3=2 13=3 20=11 21=10", (9, 15)),
    case("Fold 1=3 20=5 21=4 4=1", (27, 20)),
    case("Fold 1=2 20=7 21=5 4=1 15=2 14=0 16=3", (8, 63)),
    case("Fold 1=3 2=2 3=2 20=9 21=9 4=2", (18, 25)),
    case("Fold 1=1 20=7 21=1", (7,)),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("c", MOVES + SUMS, ids=[c.id for c in MOVES + SUMS])
async def test_matches_ncnn(tmp_path: Path, c: Case, gpu: bool) -> None:
    model = write_model(tmp_path, model_text(c.layer, len(c.shapes)))
    inputs = c.inputs()
    theirs = ncnn_forward(model, inputs, ["out"])["out"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out"], gpu=gpu)
    assert cpu_types == set(), f"fell back to the CPU: {cpu_types}"
    if c in SUMS:
        assert_close(ours["out"], theirs, c.id, rtol=1e-6)
    else:
        np.testing.assert_array_equal(ours["out"], theirs, err_msg=c.id, strict=True)


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_nan_and_infinities_move_as_they_are(tmp_path: Path, gpu: bool) -> None:
    """Specials are copied, not computed: NaN stays NaN, -0 stays -0, through every mover."""
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 1.5, -2.0] * 7, np.float32).reshape(2, 3, 7)
    for layer in ("Reorg 0=2", "Flip -23300=2,0,2", "Unfold 1=2 4=1 18=-0.0", "DeepCopy"):
        model = write_model(tmp_path, model_text(layer))
        theirs = ncnn_forward(model, {"in0": x}, ["out"])["out"]
        ours, _ = await asyncvk_forward(model, {"in0": x}, ["out"], gpu=gpu)
        assert np.array_equal(ours["out"].view(np.uint32), theirs.view(np.uint32)), layer


async def test_movers_past_the_probe_limit_stay_on_the_gpu(tmp_path: Path) -> None:
    """Reorg's and Flip's index maps move int32 indexes, not a float32 probe: 2^22+ inputs
    still run on the GPU."""
    x = np.random.default_rng(5).uniform(-3, 3, (1, 2049, 2048)).astype(np.float32)
    for layer, want in (
        ("Flip -23300=2,1,2", x[:, ::-1, ::-1]),
        ("Reorg 0=2 1=1", x[:, :2048].reshape(1024, 2, 1024, 2).transpose(1, 3, 0, 2)),
    ):
        model = write_model(tmp_path, model_text(layer))
        ours, cpu_types = await asyncvk_forward(model, {"in0": x}, ["out"])
        assert cpu_types == set(), layer
        np.testing.assert_array_equal(ours["out"], want.reshape(ours["out"].shape), layer)


async def test_unfold_then_fold_sums_each_pixel_by_its_windows(tmp_path: Path) -> None:
    """Fold(Unfold(x)) is x times how many windows cover each pixel, on the GPU."""
    text = (
        "7767517\n4 4\nInput in0 0 1 in0\n"
        "Unfold unfold 1 1 in0 cols 1=3 2=2 3=2 4=2\n"
        "Fold fold 1 1 cols t0 1=3 2=2 3=2 4=2 20=9 21=7\n"
        "BinaryOp keep 1 1 t0 out 0=2 1=1 2=1\n"
    )
    model = write_model(tmp_path, text)
    x = np.random.default_rng(3).uniform(-3, 3, (2, 7, 9)).astype(np.float32)
    ours, cpu_types = await asyncvk_forward(model, {"in0": x}, ["out"])
    assert cpu_types == set()
    coverage = np.zeros((11, 13), np.float32)
    for u in range(3):
        for v in range(3):
            coverage[2 * u : 2 * u + 7 : 2, 2 * v : 2 * v + 9 : 2] += 1  # 4 x 5 windows
    np.testing.assert_allclose(ours["out"], x * coverage[2:-2, 2:-2], rtol=1e-6)


BAD_PARAMS = [
    ("Reorg 0=0", "Reorg param 0 (stride) = 0: must be >= 1"),
    ("Reorg 0=2 1=2", "Reorg param 1 (mode) = 2: must be 0 or 1"),
    ("Flip -23300=5,0,1,2,3,0", "Flip param 0 (axes) = (0, 1, 2, 3, 0): at most 4 axes"),
    ("Flip -23300=1,4", "Flip param 0 (axes) = (4,): at most 4 axes, each -4..3"),
    ("Flip -23300=1,-5", "Flip param 0 (axes) = (-5,)"),
    ("Diag 0=-16777217", "Diag param 0 (diagonal) = -16777217 is below the limit -16777216"),
    ("Diag 0=16777217", "Diag param 0 (diagonal) = 16777217 exceeds the limit 16777216"),
    ("Unfold", "Unfold param 1 (kernel_w) = 0: must be >= 1"),
    ("Unfold 1=3 11=0", "Unfold param 11 (kernel_h) = 0: must be >= 1"),
    ("Unfold 1=3 2=0", "Unfold param 2 (dilation_w) = 0: must be >= 1"),
    ("Unfold 1=3 13=-1", "Unfold param 13 (stride_h) = -1: must be >= 1"),
    ("Unfold 1=3 4=-1", "Unfold params 4/15/14/16 (pads) = (-1, -1, -1, -1): use values >= 0"),
    ("Unfold 1=3 4=-233 15=1", "Unfold params 4/15/14/16 (pads) = (-233, 1, -233, -233)"),
    ("Unfold 1=5000", "Unfold param 1 (kernel_w) = 5000 exceeds the limit 4096"),
    ("Fold 20=5", "Fold param 1 (kernel_w) = 0: must be >= 1"),
    ("Fold 1=3", "Fold param 20 (output_w) = 0: must be >= 1"),
    ("Fold 1=3 20=5 21=-2", "Fold param 21 (output_h) = -2: must be >= 1"),
    ("Fold 1=3 20=5 4=-233", "Fold params 4/15/14/16 (pads) = (-233, -233, -233, -233): must"),
    ("Fold 1=3 3=0 20=5", "Fold param 3 (stride_w) = 0: must be >= 1"),
]
BAD_COPYTO = [
    ("CopyTo 0=-1", "CopyTo param 0 (woffset) = -1: must be >= 0"),
    ("CopyTo 13=-2", "CopyTo param 13 (doffset) = -2: must be >= 0"),
    ("CopyTo -23311=5,0,1,2,3,0 -23309=5,0,0,0,0,0", "CopyTo param 11 (axes) = (0, 1, 2, 3, 0)"),
    ("CopyTo -23309=1,0 -23311=2,0,1", "CopyTo param 9 (starts) = (0,): needs a start for each"),
]


@pytest.mark.parametrize(
    ("layer", "message"), BAD_PARAMS + BAD_COPYTO, ids=[b[0] for b in BAD_PARAMS + BAD_COPYTO]
)
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, layer: str, message: str
) -> None:
    inputs = 2 if layer.startswith("CopyTo") else 1
    model = write_model(tmp_path, model_text(layer, inputs))
    x = {f"in{i}": np.ones((4, 4, 4), np.float32) for i in range(inputs)}
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, x, ["out"])
    assert (caught.value.file, caught.value.line, caught.value.layer) == (
        str(model.param),
        3 + inputs,
        "op0",
    )


BAD_SHAPES = [
    ("Reorg 0=2", [(2, 3, 4, 6)], "Reorg: a 4-D blob (2, 3, 4, 6) is not supported"),
    ("Reorg 0=4", [(3, 3, 8)], "Reorg: blob (3, 3, 8) is smaller than the stride 4"),
    ("Reorg 0=2", [(9,)], "Reorg: blob (9,) is smaller than the stride 2"),
    ("Flip -23300=1,3", [(2, 3, 4)], "Flip: param 0 axes names axis 3, out of range for 3-D"),
    ("Flip -23300=1,-4", [(2, 3, 4)], "Flip: param 0 axes names axis -4, out of range for 3-D"),
    ("Flip -23300=1,1", [(5,)], "Flip: param 0 axes names axis 1, out of range for 1-D"),
    ("Diag 0=5", [(3, 5)], "Diag: diagonal 5 lies outside the 3 x 5 matrix"),
    ("Diag 0=-3", [(3, 5)], "Diag: diagonal -3 lies outside the 3 x 5 matrix"),
    ("Diag", [(2, 3, 4)], "Diag: takes a 1-D or 2-D blob, got (2, 3, 4)"),
    ("Unfold 1=2", [(2, 3, 4, 5)], "Unfold: a 4-D blob (2, 3, 4, 5) is not supported"),
    ("Unfold 1=5", [(3, 4, 6)], "Unfold: a kernel spanning 5 x 5 does not fit 4 x 6"),
    ("Unfold 1=3 2=2 4=1", [(3, 6, 2)], "Unfold: a kernel spanning 5 x 5 does not fit 8 x 4"),
    ("Unfold 1=1 11=2", [(6,)], "Unfold: a kernel spanning 2 x 1 does not fit 1 x 6"),
    ("Fold 1=3 20=7 21=5", [(18, 14)], "Fold: 14 columns, but 3 x 5 windows fit the padded"),
    ("Fold 1=3 20=7 21=5", [(17, 15)], "Fold: 17 rows are not whole kernels of 3 x 3"),
    ("Fold 1=3 20=2", [(9, 1)], "Fold: a kernel spanning 3 x 3 does not fit 2 x 2"),
    ("Fold 1=1 20=2", [(2, 2, 4)], "Fold: takes a 1-D or 2-D blob of columns, got (2, 2, 4)"),
    ("CopyTo 0=4", [(9,), (6,)], "CopyTo: source (6,) at offsets (4,) does not fit in (9,)"),
    ("CopyTo", [(9,), (2, 3)], "CopyTo: source (2, 3) has dims that the 1-D blob (9,) lacks"),
    ("CopyTo 2=3", [(4, 5, 6), (2, 5, 6)], "at offsets (3, 0, 0) does not fit in (4, 5, 6)"),
    ("CopyTo -23309=2,-8,0", [(6, 7), (2, 3)], "at offsets (-2, 0) does not fit in (6, 7)"),
    ("CopyTo -23309=1,1", [(6, 7), (2, 3)], "needs a start for each of the 2 dims"),
    ("CopyTo -23309=1,1 -23311=1,2", [(6, 7), (2, 3)], "names axis 2, out of range for 2-D"),
    ("CopyTo", [(3, 4, 5), (2, 2, 4, 5)], "(2, 2, 4, 5) has dims that the 3-D blob (3, 4, 5)"),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(
    ("layer", "shapes", "message"), BAD_SHAPES, ids=[f"{b[0]} @ {b[1]}" for b in BAD_SHAPES]
)
async def test_a_blob_the_layer_cannot_take_is_an_input_error(
    tmp_path: Path, layer: str, shapes: list[tuple[int, ...]], message: str, gpu: bool
) -> None:
    """ncnn would read or write past a blob, drop part of it, or give an empty one."""
    model = write_model(tmp_path, model_text(layer, len(shapes)))
    inputs = {f"in{i}": np.ones(s, np.float32) for i, s in enumerate(shapes)}
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, inputs, ["out"], gpu=gpu)
