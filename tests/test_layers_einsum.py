"""Einsum against ncnn itself (the wheel's CPU fp32): the GPU path on lavapipe and the CPU path,
over the equations ncnn runs as they read (matmuls, batched and chained, contractions over
several letters, diagonals, transposes, outer products, reductions, the trace, 1 to 5 operands
of 1 to 4 dims with odd sizes); equations ncnn would refuse, or run as something else than
they say, are a ModelFormatError naming the equation.

ncnn sums in float32 letter by letter; asyncvk's GPU path sums in the same order, its CPU path
in float64 (np.einsum): both are compared with a relative tolerance."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import assert_close, asyncvk_forward, ncnn_forward, write_model

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan


def equation_param(equation: str) -> str:
    """ncnn's param 0: the equation's character codes as an int array."""
    return f"-23300={len(equation)}," + ",".join(str(ord(c)) for c in equation)


def model_text(equation: str, operands: int) -> str:
    names = [f"in{b}" for b in range(operands)]
    lines = [f"Input {n} 0 1 {n}" for n in names]
    lines.append(f"Einsum op0 {operands} 1 {' '.join(names)} out {equation_param(equation)}")
    return f"7767517\n{operands + 1} {operands + 1}\n" + "\n".join(lines) + "\n"


def inputs_for(equation: str, shapes: list[tuple[int, ...]]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(f"{equation}{shapes}".encode()))
    return {f"in{b}": rng.uniform(-1, 1, s).astype(np.float32) for b, s in enumerate(shapes)}


#: (equation, operand shapes)
CASES = [
    ("ik,kj->ij", [(5, 7), (7, 3)]),
    ("ik,kj->ij", [(33, 65), (65, 17)]),
    ("ik,jk->ij", [(6, 9), (4, 9)]),
    ("ijl,ilk->ijk", [(3, 5, 6), (3, 6, 7)]),
    ("ijkm,ijlm->ijkl", [(2, 3, 5, 8), (2, 3, 4, 8)]),
    ("ijm,ijmk->ijk", [(2, 3, 5), (2, 3, 5, 4)]),
    ("ik,kl,lj->ij", [(4, 5), (5, 6), (6, 3)]),
    ("ikl,jkl->ij", [(3, 4, 5), (6, 4, 5)]),
    ("ij->i", [(7, 9)]),
    ("ijk->ij", [(3, 4, 11)]),
    ("ijkl->i", [(3, 2, 4, 5)]),
    ("ji->ij", [(4, 7)]),
    ("kji->ijk", [(2, 3, 4)]),
    ("i,j->ij", [(5,), (7,)]),
    ("i,i->i", [(13,), (13,)]),
    ("i,i,i->i", [(9,), (9,), (9,)]),
    ("ij,ij,ij,ij->i", [(3, 5)] * 4),
    ("ii->i", [(6, 6)]),
    ("iij->ij", [(4, 4, 3)]),
    ("ijkk->ij", [(2, 3, 5, 5)]),
    ("ik,k->i", [(6, 10), (10,)]),
    ("k,kij->ij", [(3,), (3, 4, 5)]),
    ("ii", [(7, 7)]),
    ("ii", [(1, 1)]),
    ("ijmn,mnkl->ijkl", [(2, 2, 3, 4), (3, 4, 2, 3)]),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(("equation", "shapes"), CASES, ids=[f"{e}-{s}" for e, s in CASES])
async def test_matches_ncnn(
    tmp_path: Path, equation: str, shapes: list[tuple[int, ...]], gpu: bool
) -> None:
    model = write_model(tmp_path, model_text(equation, len(shapes)))
    inputs = inputs_for(equation, shapes)
    theirs = ncnn_forward(model, inputs, ["out"])["out"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out"], gpu=gpu)
    assert "Einsum" not in cpu_types, "fell back to the CPU"
    assert_close(ours["out"], theirs, equation, rtol=1e-5)


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_five_operands_run_on_the_cpu(tmp_path: Path, gpu: bool) -> None:
    """The shader binds 4 operands; a fifth sends the layer to its numpy reference."""
    shapes = [(6,)] * 5
    equation = "i,i,i,i,i->i"
    model = write_model(tmp_path, model_text(equation, 5))
    inputs = inputs_for(equation, shapes)
    theirs = ncnn_forward(model, inputs, ["out"])["out"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out"], gpu=gpu)
    assert cpu_types == ({"Einsum"} if gpu else set())
    assert_close(ours["out"], theirs, equation, rtol=1e-6)


#: operands whose float32 sums depend on the order: one summed letter, then two (ncnn sums the
#: inner one first: 1e8 + 1 and -1e8 + 1 round away their 1s; a flat sum keeps one of them)
ORDER_CASES = [
    (
        "ik,kj->ij",
        [
            np.array([[1e8, 1.0, -1e8, 1.0], [3.0, 1e-8, 2.5, -3.0]], np.float32),
            np.ones((4, 1), np.float32),
        ],
    ),
    ("ikl->i", [np.array([[[1e8, 1.0], [-1e8, 1.0]], [[1.0, 1e8], [1.0, -1e8]]], np.float32)]),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(("equation", "operands"), ORDER_CASES, ids=[c[0] for c in ORDER_CASES])
async def test_the_gpu_sums_in_ncnns_order(
    tmp_path: Path, equation: str, operands: list[np.ndarray], gpu: bool
) -> None:
    """The GPU gives ncnn's float32 sums to the bit (the innermost letter summed first, each
    partial sum added into the next), the CPU the exact sum rounded once."""
    model = write_model(tmp_path, model_text(equation, len(operands)))
    inputs = {f"in{b}": x for b, x in enumerate(operands)}
    theirs = ncnn_forward(model, inputs, ["out"])["out"]
    ours, _ = await asyncvk_forward(model, inputs, ["out"], gpu=gpu)
    exact = np.einsum(equation, *(x.astype(np.float64) for x in operands)).astype(np.float32)
    np.testing.assert_array_equal(ours["out"], theirs if gpu else exact)
    assert not np.array_equal(theirs, exact), "the case should depend on the order"


OUTPUT_ORDER = "ncnn takes an output of i, ij, ijk or ijkl only"
SUBSCRIPTS = "each operand needs 1 to 4 subscripts in the letters i..x, comma-separated"
BAD_EQUATIONS = [
    ("ij,jk->ik", f"'ij,jk->ik': {OUTPUT_ORDER}"),
    ("ij->ji", f"'ij->ji': {OUTPUT_ORDER}"),
    ("ij->jk", f"'ij->jk': {OUTPUT_ORDER}"),
    ("j->j", f"'j->j': {OUTPUT_ORDER}"),
    ("ij->i->i", f"'ij->i->i': {OUTPUT_ORDER}"),
    ("ijklm->ijkl", f"'ijklm->ijkl': {SUBSCRIPTS}"),
    ("ab,bc->ac", f"'ab,bc->ac': {SUBSCRIPTS}"),
    ("iy->i", f"'iy->i': {SUBSCRIPTS}"),
    ("ij,,jk->ij", f"'ij,,jk->ij': {SUBSCRIPTS}"),
    ("ij,->ij", f"'ij,->ij': {SUBSCRIPTS}"),
    ("->i", f"'->i': {SUBSCRIPTS}"),
    ("ij->", "'ij->': an empty output"),
    ("ij", "'ij': no '->' (only the trace 'ii' may omit it)"),
    ("iii", "'iii': no '->' (only the trace 'ii' may omit it)"),
    ("i->ij", "'i->ij': output letter 'j' is in no operand"),
    ("jk->i", "'jk->i': output letter 'i' is in no operand"),
    ("k->ijk", "'k->ijk': output letter 'i' is in no operand"),
]


def operand_count(equation: str) -> int:
    return max(1, equation.split("->")[0].count(",") + 1)


@pytest.mark.parametrize(("equation", "message"), BAD_EQUATIONS, ids=[b[0] for b in BAD_EQUATIONS])
def test_ncnn_refuses_them_too(tmp_path: Path, equation: str, message: str) -> None:
    ncnn = pytest.importorskip("ncnn")
    model = write_model(tmp_path, model_text(equation, operand_count(equation)))
    net = ncnn.Net()
    assert net.load_param(str(model.param)) != 0
    net.clear()


@pytest.mark.parametrize(("equation", "message"), BAD_EQUATIONS, ids=[b[0] for b in BAD_EQUATIONS])
async def test_bad_equations_name_file_line_layer_and_equation(
    tmp_path: Path, equation: str, message: str
) -> None:
    operands = operand_count(equation)
    model = write_model(tmp_path, model_text(equation, operands))
    inputs = {f"in{b}": np.ones((2, 2), np.float32) for b in range(operands)}
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, inputs, ["out"])
    assert "Einsum param 0 (equation)" in str(caught.value)
    assert (caught.value.file, caught.value.line, caught.value.layer) == (
        str(model.param),
        3 + operands,
        "op0",
    )


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("", "Einsum param 0 (equation) is missing"),
        ("-23300=4,105,0,106,106", "not printable ASCII codes"),
        ("-23300=3,105,32,105", "not printable ASCII codes"),
    ],
)
async def test_a_missing_or_unreadable_equation_is_refused(
    tmp_path: Path, param: str, message: str
) -> None:
    text = model_text("ii", 1).replace(equation_param("ii"), param)
    model = write_model(tmp_path, text)
    with pytest.raises(ModelFormatError, match=re.escape(message)):
        await asyncvk_forward(model, {"in0": np.ones((2, 2), np.float32)}, ["out"])


async def test_the_operand_count_must_match_the_equation(tmp_path: Path) -> None:
    text = model_text("ik,kj->ij", 2).replace("op0 2 1 in0 in1 out", "op0 1 1 in0 out")
    model = write_model(tmp_path, text)
    with pytest.raises(ModelFormatError, match="Einsum takes 2 input blobs, got 1"):
        await asyncvk_forward(model, {"in0": np.ones((2, 2), np.float32)}, ["out"])


BAD_SHAPES = [
    ("ik,kj->ij", [(3, 4), (5, 2)], "Einsum: letter 'k' is 4 and 5 in [(3, 4), (5, 2)]"),
    ("ik,kj->ij", [(3, 4, 1), (4, 2)], "Einsum: operand 0 (3, 4, 1) has 3 dims; its subscripts"),
    ("ii", [(3, 4)], "Einsum: letter 'i' is 3 and 4 in [(3, 4)]"),
    ("ii->i", [(2, 3)], "Einsum: letter 'i' is 2 and 3 in [(2, 3)]"),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(
    ("equation", "shapes", "message"), BAD_SHAPES, ids=[b[2][8:30] for b in BAD_SHAPES]
)
async def test_operands_that_do_not_fit_the_equation_are_an_input_error(
    tmp_path: Path, equation: str, shapes: list[tuple[int, ...]], message: str, gpu: bool
) -> None:
    """ncnn reads past a blob there: asyncvk names the operand or the letter."""
    model = write_model(tmp_path, model_text(equation, len(shapes)))
    inputs = {f"in{b}": np.ones(s, np.float32) for b, s in enumerate(shapes)}
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, inputs, ["out"], gpu=gpu)
