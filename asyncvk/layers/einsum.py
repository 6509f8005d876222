"""Einsum: ncnn's einsum (src/layer/einsum.cpp), which pnnx emits for ``torch.einsum`` that it
cannot turn into Permute or Reduction; on the GPU through ``shaders/einsum.comp``.

Param 0 is the equation as an int array of character codes (``-23300=n,c1,...,cn`` in the
``.param``). ncnn takes ``ii`` (the trace of a square 2-D blob, a 1-value blob out) and
``lhs->rhs`` with the operands' subscripts, comma-separated, in the letters
``i``..``x``, and the output's in ``i``..``l``. Each operand's subscripts name its axes in
numpy order ((c, h, w), ...); a letter repeated within one (``ii->i``) walks a diagonal.

ncnn's output axes are the letters ``i``, ``j``, ``k``, ``l`` in that order, and every later
letter is summed: ``ik,kj->ij`` is a matmul. Its source (einsum.cpp as of 2026-07) takes any
right side in ``i``..``l`` and still indexes the output that way, so it would run ``ij,jk->ik``
as ``out[i, j] = sum_k A[i, j] * B[j, k]``; the wheel (1.0.20261020) refuses such equations at
load, and an output letter that no operand has. asyncvk refuses both, naming the equation: the
right side is ``i``, ``ij``, ``ijk`` or ``ijkl``, each of its letters some operand's. Also
refused, as by the wheel: an empty right side, empty operands, more than 4 subscripts, other
characters; and, when the inputs come, an operand whose dims differ from its subscripts or a
letter whose sizes disagree (ncnn reads past a blob then).

The CPU path is ``np.einsum`` in float64; ncnn sums in float32 letter by letter (the innermost
summed letter first, each partial sum then added into the next), which the GPU path copies: one
invocation per output value, a running sum per summed letter: no tiling, which suits the small
contractions pnnx leaves to Einsum (a large matmul is pnnx's MatMul). The GPU path takes up to
4 operands (one binding each); more go to the CPU.
"""

from __future__ import annotations

import numpy as np

from ..gpu._memory import Buffer
from ._base import BlobCount, Layer, Shape
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._registry import register_layer
from ._schema import Param, ints

#: ncnn's letters: operands use i..x (16), the output i..l.
_LETTERS = "ijklmnopqrstuvwx"
_TRACE = "ii"
#: Operands the GPU shader binds.
GPU_OPERANDS = 4


def parse_equation(codes: tuple[int, ...]) -> tuple[tuple[str, ...], str]:
    """(operand subscripts, output subscripts) of ncnn's equation param; the trace ``ii`` is
    (("ii",), ""). ValueError names what ncnn would not run or would run as something else."""
    if not codes:
        raise ValueError("Einsum param 0 (equation) is missing")
    if any(not 32 < c < 127 for c in codes):
        raise ValueError(f"Einsum param 0 (equation) {codes}: not printable ASCII codes")
    equation = "".join(map(chr, codes))
    if equation == _TRACE:
        return (_TRACE,), ""
    lhs, arrow, rhs = equation.partition("->")
    what = f"Einsum param 0 (equation) {equation!r}"
    if not arrow:
        raise ValueError(f"{what}: no '->' (only the trace 'ii' may omit it)")
    tokens = tuple(lhs.split(","))
    if any(not t or len(t) > 4 or set(t) - set(_LETTERS) for t in tokens):
        raise ValueError(
            f"{what}: each operand needs 1 to 4 subscripts in the letters i..x, comma-separated"
        )
    if not rhs:
        raise ValueError(f"{what}: an empty output")
    if rhs != _LETTERS[: len(rhs)] or len(rhs) > 4:
        raise ValueError(
            f"{what}: ncnn takes an output of i, ij, ijk or ijkl only (its axes are those "
            "letters in that order, whatever the right side spells): rename the letters"
        )
    missing = set(rhs) - set("".join(tokens))
    if missing:
        raise ValueError(f"{what}: output letter {min(missing)!r} is in no operand")
    return tokens, rhs


@register_layer("Einsum")
class Einsum(Layer):
    """0 equation (character codes): see the module docstring for what ncnn takes."""

    equation = Param(0, ints)
    one_blob_only = False
    gpu = True
    tokens: tuple[str, ...] = ()
    rhs = ""

    def validate(self) -> None:
        self.tokens, self.rhs = parse_equation(self.equation)

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        n = len(self.tokens)
        return (n, n), (1, 1)

    def letter_sizes(self, shapes: list[Shape]) -> dict[str, int]:
        """Each letter's size from the operands' shapes; ValueError where they disagree."""
        sizes: dict[str, int] = {}
        for b, (token, shape) in enumerate(zip(self.tokens, shapes, strict=True)):
            if len(shape) != len(token):
                raise ValueError(
                    f"Einsum: operand {b} {tuple(shape)} has {len(shape)} dims; its subscripts "
                    f"{token!r} need {len(token)}"
                )
            for letter, size in zip(token, shape, strict=True):
                if sizes.setdefault(letter, size) != size:
                    raise ValueError(
                        f"Einsum: letter {letter!r} is {sizes[letter]} and {size} in "
                        f"{[tuple(s) for s in shapes]}"
                    )
        return sizes

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        sizes = self.letter_sizes(list(input_shapes))
        if not self.rhs:
            return [(1,)]
        return [tuple(sizes[letter] for letter in self.rhs)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        operands = [np.asarray(x, np.float64) for x in inputs]
        if not self.rhs:
            return [np.array([np.trace(operands[0])], np.float32)]
        with np.errstate(all="ignore"):
            out = np.einsum(f"{','.join(self.tokens)}->{self.rhs}", *operands, optimize=True)
        return [np.asarray(out, np.float32)]

    # -- GPU ---------------------------------------------------------------------------------

    def supports(self, input_shapes: list[Shape]) -> bool:
        return len(input_shapes) <= GPU_OPERANDS

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        consts = (len(self.tokens),)
        return {"einsum": PipelineSpec("einsum", consts, local_size_1d(target.info))}

    def letter_table(self, shapes: list[Shape]) -> tuple[np.ndarray, int]:
        """``einsum.comp``'s table and its letter count: the sizes of the letters in ncnn's
        loop order (the output's, then every later one), then each operand's element stride
        per letter (a repeated letter's strides added; 0 where it has none)."""
        sizes = self.letter_sizes(shapes)
        letters = self.rhs or ""
        letters += "".join(sorted(set(sizes) - set(letters)))
        table = np.zeros((1 + GPU_OPERANDS, len(letters)), np.int32)
        table[0] = [sizes[letter] for letter in letters]
        for b, (token, shape) in enumerate(zip(self.tokens, shapes, strict=True)):
            strides = np.cumprod((1, *shape[:0:-1]))[::-1]
            for letter, stride in zip(token, strides, strict=True):
                table[1 + b, letters.index(letter)] += stride
        return table.reshape(-1), len(letters)

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        table, letters = self.letter_table([x.shape for x in inputs])
        n = outputs[0].size
        operands = [inputs[min(b, len(inputs) - 1)] for b in range(GPU_OPERANDS)]
        bufs: list[Buffer | GpuBlob] = [outputs[0], *operands, ctx.constant(table)]
        push = pack_push("iii", n, len(self.rhs), letters)
        ctx.dispatch("einsum", bufs, push, groups_1d(n, local_size_1d(ctx.info), ctx.info))
