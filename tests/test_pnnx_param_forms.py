"""What pnnx writes into a ``.param`` that ncnn reads, against ncnn itself: shape expressions
(``Reshape`` param 6), the sizes each computes from the inputs' shapes, on the GPU path and the
CPU path (a malformed expression is a ModelFormatError at load naming the layer and the term);
and layer names that repeat."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import Model, assert_close, asyncvk_forward, ncnn_forward, write_model

from asyncvk import Net
from asyncvk._errors import ModelFormatError
from asyncvk.layers._shape_expr import ShapeExpr

pytest.importorskip("ncnn")


def _reshape_model(tmp_path: Path, expr: str, shapes: list[tuple[int, ...]]) -> Path:
    """Inputs in0..inN of ``shapes``, a Reshape of in0 by ``expr`` reading them all, then a
    ReLU so that the reshaped blob is computed on the device."""
    n = len(shapes)
    ins = " ".join(f"in{i}" for i in range(n))
    lines = [f"7767517\n{n + 2} {n + 2}"]
    lines += [f"Input i{i} 0 1 in{i}" for i in range(n)]
    lines.append(f'Reshape r0 {n} 1 {ins} mid 6="{expr}"')
    lines.append("ReLU relu0 1 1 mid out0")
    return write_model(tmp_path, "\n".join(lines)).param


CASES = [
    # (input shapes, expression): what pnnx writes around nn.Linear and attention heads
    ([(4, 6, 8)], "0w,0h,0c"),
    ([(4, 6, 8)], "*(0w,0h),0c"),
    ([(4, 6, 8)], "-1,0c"),
    ([(4, 6, 8)], "2,-1,*(0c,3)"),
    ([(4, 6, 8)], "//(0w,2),*(0h,2),0c"),
    ([(4, 6, 8)], "0w,0h,2,//(0c,2)"),
    ([(6, 8)], "0w,0h,1"),
    ([(6, 8), (3, 5, 7)], "0w,//(0h,1c),1c"),
    ([(2, 3, 4, 5)], "*(0w,0h),0d,0c"),
    ([(4, 6, 8)], "trunc(/(*(0h,0w),4)),4,0c"),
    ([(4, 6, 8)], "max(0w,3),-1"),
    ([(48,)], "floor(sqrt(0w)),-1"),
]


@needs_vulkan
@pytest.mark.parametrize(("shapes", "expr"), CASES, ids=[c[1] for c in CASES])
async def test_reshape_by_expression_matches_ncnn(
    tmp_path: Path, shapes: list[tuple[int, ...]], expr: str
) -> None:
    param = _reshape_model(tmp_path, expr, shapes)
    m = Model(param, param.with_suffix(".bin"))
    rng = np.random.default_rng(7)
    inputs = {f"in{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    theirs = ncnn_forward(m, inputs, ["out0"])["out0"]
    for gpu in (True, False):
        ours, _ = await asyncvk_forward(m, inputs, ["out0"], gpu=gpu)
        assert_close(ours["out0"], theirs, f"{expr} ({'gpu' if gpu else 'cpu'})")


BATCHED = [
    # (input shape, params): pnnx's reshapes of a batch-1 tensor with ncnn's batch axes
    ((64, 1, 1), '12=0 13=0 6="1,1,//(64,0n),0n"'),
    ((4, 6, 8), '12=0 13=0 6="-1,0c,0n"'),
    ((4, 6, 8), '12=0 13=0 6="0w,*(0h,0c),1"'),
    ((4, 6, 8), '12=0 13=-1 6="1,0w,*(0h,0c)"'),
    ((4, 6, 8), "12=0 13=0 0=-1 1=4 2=1"),
    ((6, 8), '12=-1 13=0 6="8,6,1"'),
]


@needs_vulkan
@pytest.mark.parametrize(("shape", "params"), BATCHED, ids=[b[1] for b in BATCHED])
async def test_reshape_with_batch_axes_matches_ncnn(
    tmp_path: Path, shape: tuple[int, ...], params: str
) -> None:
    text = f"7767517\n3 3\nInput i0 0 1 in0\nReshape r0 1 1 in0 mid {params}\n"
    m = write_model(tmp_path, text + "ReLU relu0 1 1 mid out0")
    x = np.random.default_rng(11).standard_normal(shape).astype(np.float32)
    theirs = ncnn_forward(m, {"in0": x}, ["out0"])["out0"]
    for gpu in (True, False):
        ours, _ = await asyncvk_forward(m, {"in0": x}, ["out0"], gpu=gpu)
        assert_close(ours["out0"], theirs, f"{params} ({'gpu' if gpu else 'cpu'})")


CROPS = [
    # (input shapes, starts, ends, axes): pnnx's slices by a size (x[:, :, : x.size(2) // 2])
    ([(4, 6, 8)], "0", "//(0w,2)", "2"),
    ([(4, 6, 8)], "1,0", "-1,-(0w,3)", "0,2"),
    ([(4, 6, 8)], "0,1", "//(0c,2),0h", "0,-2"),
    ([(6, 8)], "//(0h,3)", "0h", "0"),
    ([(10,)], "2", "-(0w,2)", "0"),
    ([(4, 6, 8), (2, 3)], "0,1", "1h,+(1w,1)", "1,2"),
]


@needs_vulkan
@pytest.mark.parametrize(
    ("shapes", "starts", "ends", "axes"), CROPS, ids=[f"{c[1]}:{c[2]}@{c[3]}" for c in CROPS]
)
async def test_crop_by_expression_matches_ncnn(
    tmp_path: Path, shapes: list[tuple[int, ...]], starts: str, ends: str, axes: str
) -> None:
    n = len(shapes)
    ins = " ".join(f"in{i}" for i in range(n))
    lines = [f"7767517\n{n + 2} {n + 2}"]
    lines += [f"Input i{i} 0 1 in{i}" for i in range(n)]
    lines.append(f'Crop c0 {n} 1 {ins} mid 19="{starts}" 20="{ends}" 21="{axes}"')
    lines.append("ReLU relu0 1 1 mid out0")
    m = write_model(tmp_path, "\n".join(lines))
    rng = np.random.default_rng(5)
    inputs = {f"in{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    theirs = ncnn_forward(m, inputs, ["out0"])["out0"]
    for gpu in (True, False):
        ours, cpu_types = await asyncvk_forward(m, inputs, ["out0"], gpu=gpu)
        assert "Crop" not in cpu_types
        assert_close(ours["out0"], theirs, f"crop ({'gpu' if gpu else 'cpu'})")


INTERPS = [
    # (input shapes, resize type, size expression): F.interpolate(x, size=...) as pnnx writes it
    ([(3, 5, 7)], 2, "*(0w,2),*(0h,2)"),
    ([(3, 5, 7)], 1, "*(0w,2),*(0h,3)"),
    ([(3, 5, 7)], 3, "+(0w,3)"),
    ([(3, 5, 7), (2, 9, 4)], 2, "1w,1h"),
    ([(3, 5, 7), (2, 9, 4)], 1, "1w,1h"),
    ([(3, 5, 7), (2, 9, 4)], 2, "1w,1h 5=1"),  # pnnx's resize to another blob's size
]


@needs_vulkan
@pytest.mark.parametrize(
    ("shapes", "resize", "expr"), INTERPS, ids=[f"{c[1]}:{c[2]}" for c in INTERPS]
)
async def test_interp_to_a_size_expression_matches_ncnn(
    tmp_path: Path, shapes: list[tuple[int, ...]], resize: int, expr: str
) -> None:
    n = len(shapes)
    ins = " ".join(f"in{i}" for i in range(n))
    lines = [f"7767517\n{n + 2} {n + 2}"]
    lines += [f"Input i{i} 0 1 in{i}" for i in range(n)]
    expr, _, more = expr.partition(" ")
    lines.append(f'Interp up0 {n} 1 {ins} mid 0={resize} 9="{expr}" {more}')
    lines.append("ReLU relu0 1 1 mid out0")
    m = write_model(tmp_path, "\n".join(lines))
    rng = np.random.default_rng(9)
    inputs = {f"in{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    theirs = ncnn_forward(m, inputs, ["out0"])["out0"]
    for gpu in (True, False):
        ours, cpu_types = await asyncvk_forward(m, inputs, ["out0"], gpu=gpu)
        assert "Interp" not in cpu_types
        assert_close(ours["out0"], theirs, f"interp ({'gpu' if gpu else 'cpu'})")


@pytest.mark.parametrize(
    ("text", "shapes", "sizes"),
    [
        ("0w,0h,0c", [(2, 3, 4)], [4, 3, 2]),
        ("-(0w,1),+(0c,1h)", [(2, 3, 4), (5, 6)], [3, 7]),
        ("//(-7,2),/(7,2),//(7.0,2)", [], [-3, 3, 3]),  # C division; float division truncated
        ("round(2.5),round(-2.5),ceil(/(1,3)),floor(-0.5)", [], [3, -3, 1, -1]),
        ("3.0,2.7,1e1", [], [3, 2, 10]),
        ("and(6,3),lshift(1,4),remainder(-7,3)", [], [2, 16, 2]),
        ("0n,0d", [(2, 3, 4, 5)], [1, 3]),
    ],
)
def test_expression_arithmetic_is_ncnns(
    text: str, shapes: list[tuple[int, ...]], sizes: list[int]
) -> None:
    assert ShapeExpr(text).evaluate(shapes) == sizes


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0w,", "'a term' expected"),
        ("+(0w)", "+ takes 2 terms, got 1"),
        ("hypot(0w,2)", "unknown operator 'hypot'"),
        ("0x", "'0x' is not a number"),
        ("+(0w,2", "')' expected"),
    ],
)
def test_a_malformed_expression_is_refused_naming_the_term(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        ShapeExpr(text)


async def test_a_malformed_expression_in_a_model_is_a_load_error(tmp_path: Path) -> None:
    param = _reshape_model(tmp_path, "0w,+(0h)", [(4, 6, 8)])
    with pytest.raises(ModelFormatError, match=r"m.param:4, layer 'r0'.*\+ takes 2 terms"):
        async with Net() as net:
            await net.load_param(param)


async def test_an_expression_reading_a_blob_it_is_not_given_fails_when_planned(
    tmp_path: Path,
) -> None:
    expr = ShapeExpr("0w,1h")
    assert expr.blob_count == 2
    with pytest.raises(ValueError, match="1h names input 1, but there are 1"):
        expr.evaluate([(2, 3)])


@needs_vulkan
async def test_a_repeated_layer_name_loads_and_runs_as_in_ncnn(tmp_path: Path) -> None:
    """pnnx names the Split of a constant blob ``splitncnn_0`` again: both layers run."""
    text = """7767517
    5 7
    Input in0 0 1 in0
    Split splitncnn_0 1 2 in0 a b
    ReLU relu0 1 1 a a1
    Split splitncnn_0 1 2 a1 c d
    Eltwise add0 3 1 b c d out0 0=1
    """
    m: Model = write_model(tmp_path, text)
    x = np.random.default_rng(3).standard_normal((3, 5, 7)).astype(np.float32)
    theirs = ncnn_forward(m, {"in0": x}, ["out0"])["out0"]
    for gpu in (True, False):
        ours, _ = await asyncvk_forward(m, {"in0": x}, ["out0"], gpu=gpu)
        assert_close(ours["out0"], theirs, "gpu" if gpu else "cpu")
