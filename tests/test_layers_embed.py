"""Embed against ncnn itself (the wheel's CPU fp32): the GPU path on lavapipe and the CPU path,
with and without bias, fp32 and int8 tables, ids in and out of range; bad params are a
ModelFormatError naming the file, line, layer and param.

ncnn reads its input Mat's int32 bits as the ids; asyncvk reads the values. So ncnn is fed the
ids as int32 bits (viewed as float32, which ``ncnn_forward`` passes on unchanged) and asyncvk
the same ids as numbers."""

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
from asyncvk.layers._int8 import float2int8

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

TAG_INT8 = (0x000D4B38).to_bytes(4, "little")


def int8_tagged(values: np.ndarray) -> bytes:
    """A weight stored int8, as ncnn2int8 writes it: the tag, the bytes, padding to 4."""
    data = np.asarray(values, np.int8).tobytes()
    return TAG_INT8 + data + bytes(-len(data) % 4)


def ncnn_ids(ids: np.ndarray) -> np.ndarray:
    """ids as ncnn reads them: int32 bits in a float32 array (a Mat of the same bytes)."""
    return np.ascontiguousarray(ids, np.int32).view(np.float32)


@dataclass(frozen=True)
class Case:
    """An Embed line: num_output, input_dim, bias, int8 (param 18), extra table values (a
    weight_data_size past the table), and the input's shape (one row of ids)."""

    id: str
    num_output: int
    input_dim: int
    shape: tuple[int, ...]
    bias: bool = False
    int8: int = 0
    extra: int = 0

    def model_text(self) -> str:
        size = self.num_output * self.input_dim + self.extra
        params = f"0={self.num_output} 1={self.input_dim} 2={int(self.bias)} 3={size}"
        if self.int8:
            params += f" 18={self.int8}"
        # times 1 on the GPU after it: an Embed sent to the CPU then shows in the plan
        return (
            f"7767517\n3 3\nInput in0 0 1 in0\nEmbed embed0 1 1 in0 out0 {params}\n"
            "BinaryOp keep 1 1 out0 out1 0=2 1=1 2=1\n"
        )

    def weights(self, rng: np.random.Generator) -> list[bytes]:
        size = self.num_output * self.input_dim + self.extra
        table = (
            int8_tagged(rng.integers(-127, 128, size))
            if self.int8
            else tagged(rng.normal(0, 1, size))
        )
        out = [table]
        if self.bias:
            out.append(raw(rng.normal(0, 1, self.num_output)))
        if self.int8:
            out.append(raw(np.array([rng.uniform(20, 90)])))
        return out

    def ids(self, rng: np.random.Generator) -> np.ndarray:
        """Ids in range, and out of it both ways (ncnn clamps them to the first and last)."""
        n = int(np.prod(self.shape))
        ids = rng.integers(-3, self.input_dim + 3, n)
        ids[:4] = [-(2**31), -1, self.input_dim, 2**31 - 1][:n]
        return ids.reshape(self.shape).astype(np.int32)


CASES = [
    Case("plain", 7, 11, (13,)),
    Case("bias", 5, 9, (17,), bias=True),
    Case("one-id", 4, 6, (1,), bias=True),
    Case("one-row-2d", 6, 10, (1, 9)),
    Case("one-row-3d", 3, 8, (1, 1, 7), bias=True),
    Case("one-row-4d", 5, 7, (1, 1, 1, 6)),
    Case("one-entry-table", 9, 1, (5,), bias=True),
    Case("longer-weight-data", 4, 5, (11,), extra=13),
    Case("wide", 300, 40, (50,), bias=True),
    Case("int8", 8, 12, (15,), int8=2),
    Case("int8-bias", 6, 9, (10,), bias=True, int8=1),
]


def _run_case(tmp_path: Path, case: Case) -> tuple[Model, np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    model = write_model(tmp_path, case.model_text(), case.weights(rng))
    return model, case.ids(rng)


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_matches_ncnn(tmp_path: Path, case: Case, gpu: bool) -> None:
    model, ids = _run_case(tmp_path, case)
    theirs = ncnn_forward(model, {"in0": ncnn_ids(ids)}, ["out1"])["out1"]
    assert theirs.shape == (ids.shape[-1], case.num_output)
    ours, cpu_types = await asyncvk_forward(model, {"in0": ids}, ["out1"], gpu=gpu)
    assert_close(ours["out1"], theirs, case.id, rtol=1e-6)
    assert cpu_types == set(), f"fell back to the CPU: {cpu_types}"


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_a_value_is_truncated_and_clamped_to_a_row(tmp_path: Path, gpu: bool) -> None:
    """asyncvk's ids are values: truncated toward zero, clamped to the table, NaN row 0."""
    table = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    model = write_model(
        tmp_path, Case("values", 3, 5, (1,)).model_text(), [tagged(table.reshape(-1))]
    )
    values = [2.7, -0.5, 0.99, 3.999, 1e9, -1e9, np.inf, -np.inf, np.nan, 4.0, 4.5, 1.0]
    rows = [2, 0, 0, 3, 4, 0, 4, 0, 0, 4, 4, 1]
    ours, cpu_types = await asyncvk_forward(
        model, {"in0": np.array(values, np.float32)}, ["out1"], gpu=gpu
    )
    np.testing.assert_array_equal(ours["out1"], table[rows])
    assert cpu_types == set()


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_fp32_weights_with_int8_scale_are_quantized_as_ncnn2int8_would(
    tmp_path: Path, gpu: bool
) -> None:
    """ncnn would read fp32 bytes as int8; asyncvk quantizes them with the scale instead."""
    rng = np.random.default_rng(7)
    table = rng.normal(0, 1, (6, 4)).astype(np.float32)
    scale = np.float32(127 / np.abs(table).max())
    model = write_model(
        tmp_path,
        Case("fp32-int8", 4, 6, (1,), int8=2).model_text(),
        [tagged(table.reshape(-1)), raw(np.array([scale]))],
    )
    ids = np.array([5, 0, 3, 3, 1], np.int32)
    ours, _ = await asyncvk_forward(model, {"in0": ids}, ["out1"], gpu=gpu)
    expected = float2int8(table * scale) * (np.float32(1) / scale)
    np.testing.assert_allclose(ours["out1"], expected[ids], rtol=1e-6)


BAD_PARAMS = [
    ("0=0 1=5 3=0", "Embed param 0 (num_output) = 0 must be >= 1"),
    ("0=4 1=0 3=4", "Embed param 1 (input_dim) = 0 must be >= 1"),
    ("0=4 1=-2 3=4", "Embed param 1 (input_dim) = -2 must be >= 1"),
    ("0=4 1=5 3=19", "Embed param 3 (weight_data_size) = 19 is less than param 0 (num_output)"),
    ("0=4 1=5", "Embed param 3 (weight_data_size) = 0 is less than"),
    ("0=20000000 1=1 3=20000000", "Embed param 0 (num_output) = 20000000 exceeds the limit"),
]


@pytest.mark.parametrize(("params", "message"), BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, params: str, message: str
) -> None:
    text = f"7767517\n2 2\nInput in0 0 1 in0\nEmbed embed0 1 1 in0 out0 {params}\n"
    model = write_model(tmp_path, text, [tagged(np.ones(64, np.float32))])
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, {"in0": np.ones(4, np.float32)}, ["out0"])
    assert (caught.value.file, caught.value.line, caught.value.layer) == (
        str(model.param),
        4,
        "embed0",
    )


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_more_than_one_row_of_ids_is_a_plan_error(tmp_path: Path, gpu: bool) -> None:
    """ncnn would embed the first row and drop the rest: asyncvk refuses, saying so."""
    case = Case("rows", 3, 5, (2, 4))
    model, _ = _run_case(tmp_path, case)
    message = "Embed takes one row of token ids, shape (w,) or (1, w), got shape (2, 4)"
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, {"in0": np.ones((2, 4), np.float32)}, ["out0"], gpu=gpu)
