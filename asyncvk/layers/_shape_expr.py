"""ncnn's shape expressions: sizes computed from the input blobs' shapes when a plan is made.

pnnx writes them into ``Reshape`` (param 6), ``Crop`` (19-21) and ``Interp`` (9) where a
PyTorch model computes a shape from a tensor's size: ``-1,*(0h,2),+(1c,2)`` is three sizes,
the second blob 0's height times two, the third the sum of blob 1's channels and 2.

A term is a literal, a size (``Nw``, ``Nh``, ``Nd``, ``Nc`` or ``Nn``: blob N's width, height,
depth, channels or batch, N from 0 to 9) or ``op(term, ...)``. As in ncnn, arithmetic on two
integers stays integer (``//`` truncates toward zero, like C), anything else is float32, and a
result is truncated to an integer. The expression is parsed and checked when the layer is made,
so a malformed one is refused at load, naming the term.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ._geometry import shape4

Number = int | float
Shape = Sequence[int]

_SIZE = re.compile(r"([0-9])([whdcn])")
_INT_PREFIX = re.compile(r"[+-]?[0-9]+")


def _f32(x: float) -> float:
    """``x`` as ncnn's ``float`` holds it."""
    return float(np.float32(x))


def _c_div(a: int, b: int) -> int:
    if b == 0:
        raise ValueError("divides by zero")
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _c_round(x: float) -> int:
    """C's ``round``: halves away from zero."""
    return math.floor(abs(x) + 0.5) * (1 if x >= 0 else -1)


def _remainder(a: float, b: float) -> float:
    r = math.fmod(a, b)
    return r + b if a * b < 0 else r


def _logaddexp(a: float, b: float) -> float:
    return math.log(math.exp(a) + math.exp(b))


#: ops on two numbers: int op int stays int (C semantics), else float32
_MIXED_BINARY: dict[str, tuple[Callable[[int, int], int], Callable[[float, float], float]]] = {
    "+": (lambda a, b: a + b, lambda a, b: a + b),
    "-": (lambda a, b: a - b, lambda a, b: a - b),
    "*": (lambda a, b: a * b, lambda a, b: a * b),
    "//": (_c_div, lambda a, b: math.floor(a / b)),
    "max": (max, max),
    "min": (min, min),
}
_MIXED_UNARY: dict[str, tuple[Callable[[int], int], Callable[[float], float]]] = {
    "abs": (abs, abs),
    "neg": (lambda a: -a, lambda a: -a),
    "sign": (lambda a: (a > 0) - (a < 0), lambda a: float((a > 0) - (a < 0))),
    "square": (lambda a: a * a, lambda a: a * a),
}
_TO_INT: dict[str, Callable[[float], int]] = {
    "trunc": int,
    "ceil": math.ceil,
    "floor": math.floor,
    "round": _c_round,
}
_FLOAT_UNARY: dict[str, Callable[[float], float]] = {
    "acos": math.acos,
    "acosh": math.acosh,
    "asin": math.asin,
    "asinh": math.asinh,
    "atan": math.atan,
    "atanh": math.atanh,
    "cos": math.cos,
    "cosh": math.cosh,
    "erf": math.erf,
    "exp": math.exp,
    "log": math.log,
    "log10": math.log10,
    "reciprocal": lambda a: 1.0 / a,
    "rsqrt": lambda a: 1.0 / math.sqrt(a),
    "sin": math.sin,
    "sinh": math.sinh,
    "sqrt": math.sqrt,
    "tan": math.tan,
    "tanh": math.tanh,
}
_FLOAT_BINARY: dict[str, Callable[[float, float], float]] = {
    "/": lambda a, b: a / b,
    "atan2": math.atan2,
    "fmod": math.fmod,
    "pow": math.pow,
    "remainder": _remainder,
    "logaddexp": _logaddexp,
}
_INT_BINARY: dict[str, Callable[[int, int], int]] = {
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "lshift": lambda a, b: a << b,
    "rshift": lambda a, b: a >> b,
}
_ARITY = {
    **dict.fromkeys(_MIXED_BINARY, 2),
    **dict.fromkeys(_FLOAT_BINARY, 2),
    **dict.fromkeys(_INT_BINARY, 2),
    **dict.fromkeys(_MIXED_UNARY, 1),
    **dict.fromkeys(_TO_INT, 1),
    **dict.fromkeys(_FLOAT_UNARY, 1),
}


@dataclass(frozen=True)
class _Term:
    """A literal (``value``), a size (``blob``, ``axis``) or an op over ``args``."""

    text: str
    value: Number | None = None
    blob: int = -1
    axis: str = ""
    op: str = ""
    args: tuple[_Term, ...] = ()


def _apply(op: str, args: list[Number]) -> Number:
    if op in _MIXED_BINARY or op in _MIXED_UNARY:
        whole, real = _MIXED_BINARY[op] if op in _MIXED_BINARY else _MIXED_UNARY[op]
        if all(isinstance(a, int) for a in args):
            return whole(*args)  # type: ignore[arg-type]
        return _f32(real(*(float(a) for a in args)))
    if op in _TO_INT:
        (a,) = args
        return a if isinstance(a, int) else _TO_INT[op](a)
    if op in _FLOAT_UNARY:
        return _f32(_FLOAT_UNARY[op](float(args[0])))
    if op in _FLOAT_BINARY:
        return _f32(_FLOAT_BINARY[op](float(args[0]), float(args[1])))
    if not all(isinstance(a, int) for a in args):
        raise ValueError(f"{op} takes integers, got {args}")
    return _INT_BINARY[op](*args)  # type: ignore[arg-type]


class ShapeExpr:
    """One parsed expression: :meth:`evaluate` it on the input shapes of a plan.

    Raises:
        ValueError: the expression is malformed (the message quotes the term).
    """

    def __init__(self, text: str) -> None:
        self.text = text
        tokens = [t for t in re.split(r"([(),])", text.replace(" ", "")) if t]
        self._tokens = tokens
        self._at = 0
        terms = [self._term()]
        while self._at < len(tokens):
            self._expect(",")
            terms.append(self._term())
        self.terms = tuple(terms)
        #: how many input blobs it reads: one more than the highest N of its sizes
        self.blob_count = max((t.blob + 1 for t in self._walk()), default=0)

    def _expect(self, token: str) -> None:
        got = self._tokens[self._at] if self._at < len(self._tokens) else "the end"
        if got != token:
            raise ValueError(f"shape expression {self.text!r}: {token!r} expected, got {got!r}")
        self._at += 1

    def _term(self) -> _Term:
        if self._at >= len(self._tokens) or self._tokens[self._at] in "(),":
            self._expect("a term")
        token = self._tokens[self._at]
        self._at += 1
        if self._at < len(self._tokens) and self._tokens[self._at] == "(":
            return self._call(token)
        size = _SIZE.fullmatch(token)
        if size is not None:
            return _Term(token, blob=int(size[1]), axis=size[2])
        return _Term(token, value=self._literal(token))

    def _call(self, op: str) -> _Term:
        if op not in _ARITY:
            raise ValueError(f"shape expression {self.text!r}: unknown operator {op!r}")
        self._expect("(")
        args = [self._term()]
        while self._at < len(self._tokens) and self._tokens[self._at] == ",":
            self._at += 1
            args.append(self._term())
        self._expect(")")
        if len(args) != _ARITY[op]:
            raise ValueError(
                f"shape expression {self.text!r}: {op} takes {_ARITY[op]} terms, got {len(args)}"
            )
        return _Term(op, op=op, args=tuple(args))

    def _literal(self, token: str) -> Number:
        """An integer where ncnn reads one (``3``, ``3.0``), else a float (``2.5``, ``1e3``)."""
        try:
            value = _f32(float(token))
        except ValueError:
            raise ValueError(
                f"shape expression {self.text!r}: {token!r} is not a number, a size (0w, 1c, "
                "...) or an operator"
            ) from None
        whole = _INT_PREFIX.match(token)
        if whole is not None and float(int(whole[0])) == value:
            return int(whole[0])
        return value

    def _walk(self) -> list[_Term]:
        found, todo = [], list(self.terms)
        while todo:
            term = todo.pop()
            found.append(term)
            todo.extend(term.args)
        return found

    def evaluate(self, shapes: Sequence[Shape]) -> list[int]:
        """The integer of every term, given the input blobs' shapes (numpy order).

        Raises:
            ValueError: a size names a blob not given, or the arithmetic fails (a division
                by zero, a logarithm of 0).
        """
        try:
            return [self._int(self._value(t, shapes)) for t in self.terms]
        except (ArithmeticError, ValueError) as exc:
            raise ValueError(f"shape expression {self.text!r}: {exc}") from None

    @staticmethod
    def _int(value: Number) -> int:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"gives {value}")
        return int(value)  # floats truncate, as ncnn's to_int

    def _value(self, term: _Term, shapes: Sequence[Shape]) -> Number:
        if term.value is not None:
            return term.value
        if term.blob >= 0:
            if term.blob >= len(shapes):
                raise ValueError(
                    f"{term.text} names input {term.blob}, but there are {len(shapes)}"
                )
            if term.axis == "n":
                return 1  # a blob of asyncvk's has no batch axis: one item
            w, h, d, c = shape4(tuple(shapes[term.blob]))
            return {"w": w, "h": h, "d": d, "c": c}[term.axis]
        return _apply(term.op, [self._value(a, shapes) for a in term.args])
