"""Packing against ncnn itself (the wheel's CPU fp32): a layout conversion that asyncvk's
unpacked float32 blobs make the identity (an alias on the GPU, never a CPU step), over every
dims, packed sizes that divide and that do not, with and without padding. What asyncvk refuses:
padding that would add values ncnn never writes (the wheel shows them: garbage), and the cast
types that ncnn's CPU ignores and its GPU applies."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import asyncvk_forward, ncnn_forward, write_model

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

CASES = [
    # (params, shape): the packed count (w, h or c) divides out_elempack, or not without padding
    ("0=4", (8, 5, 7)),
    ("0=4", (3, 5, 7)),
    ("0=8 1=1", (16, 3, 5)),
    ("0=4 1=1", (8, 9)),
    ("0=4", (6, 9)),
    ("0=16 1=1", (32,)),
    ("0=4", (17,)),
    ("0=4 1=1", (4, 3, 4, 5)),
    ("0=8", (12, 2, 3, 4)),
    ("0=1", (5, 6, 7)),
    ("0=4 2=1 3=1", (8, 5, 7)),
    ("0=3", (6, 5)),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(("params", "shape"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
async def test_packing_is_the_identity_as_in_ncnn(
    tmp_path: Path, params: str, shape: tuple[int, ...], gpu: bool
) -> None:
    # times 2 on the GPU after it: Packing sends nothing to the CPU and aliases its input
    text = f"""7767517
    3 3
    Input in0 0 1 in0
    Packing pk 1 1 in0 t0 {params}
    BinaryOp twice 1 1 t0 out0 0=2 1=1 2=2.0
    """
    model = write_model(tmp_path, text)
    x = np.random.default_rng(len(shape)).normal(size=shape).astype(np.float32)
    theirs = ncnn_forward(model, {"in0": x}, ["out0"])["out0"]
    ours, cpu_types = await asyncvk_forward(model, {"in0": x}, ["out0"], gpu=gpu)
    assert not cpu_types, cpu_types
    assert np.array_equal(theirs, x * 2) and np.array_equal(ours["out0"], x * 2)


@pytest.mark.parametrize(
    ("params", "shape", "what"),
    [("0=4 1=1", (3, 5, 7), "c = 3"), ("0=8 1=1", (5, 9), "h = 5"), ("0=4 1=1", (17,), "w = 17")],
)
async def test_padding_that_ncnn_leaves_unwritten_is_refused(
    tmp_path: Path, params: str, shape: tuple[int, ...], what: str
) -> None:
    model = write_model(
        tmp_path, f"7767517\n2 2\nInput in0 0 1 in0\nPacking pk 1 1 in0 out0 {params}\n"
    )
    x = np.ones(shape, np.float32)
    theirs = ncnn_forward(model, {"in0": x}, ["out0"])["out0"]
    assert theirs.shape != shape, "ncnn grows the blob by the padded lanes"
    with pytest.raises(InputError, match=re.escape(f"pads {what} of {shape} to a multiple of")):
        await asyncvk_forward(model, {"in0": x}, ["out0"])


async def test_ncnn_cpu_ignores_the_cast_types(tmp_path: Path) -> None:
    """Why the casts are refused: the wheel's CPU keeps fp32 values under an fp16 cast (its
    Vulkan Packing would round them)."""
    model = write_model(
        tmp_path, "7767517\n2 2\nInput in0 0 1 in0\nPacking pk 1 1 in0 out0 0=4 3=2\n"
    )
    x = np.full((4, 2, 3), 1 / 3, np.float32)
    assert np.array_equal(ncnn_forward(model, {"in0": x}, ["out0"])["out0"], x)


BAD_PARAMS = [
    ("0=0", "Packing param 0 (out_elempack) = 0 must be >= 1"),
    ("0=4 2=2", "Packing param 2 (cast_type_from) = 2 (fp16) is not supported"),
    ("0=4 3=4", "Packing param 3 (cast_type_to) = 4 (int8) is not supported"),
    ("0=4 3=5", "Packing param 3 (cast_type_to) = 5 (bf16) is not supported"),
    ("0=4 2=9", "Packing param 2 (cast_type_from) = 9 (unknown) is not supported"),
]


@pytest.mark.parametrize(("params", "message"), BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, params: str, message: str
) -> None:
    model = write_model(
        tmp_path, f"7767517\n2 2\nInput in0 0 1 in0\nPacking pk 1 1 in0 out0 {params}\n"
    )
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, {"in0": np.ones((4, 2, 2), np.float32)}, ["out0"])
    where = (caught.value.file, caught.value.line, caught.value.layer)
    assert where == (str(model.param), 4, "pk")
