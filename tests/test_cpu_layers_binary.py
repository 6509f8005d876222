"""BinaryOp, Eltwise, Reduction and Softmax against direct loops written from ncnn's C++."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from layer_checks import forward_checked

from asyncvk.layers import (
    Layer,
    binary,  # noqa: F401  (registers the layers)
    layer_class,
    reduction,  # noqa: F401
)
from asyncvk.layers._paramdict import ParamDict

RNG = np.random.default_rng(7767517)


def make(type_name: str, **params: object) -> Layer:
    cls = layer_class(type_name)
    assert cls is not None
    layer = cls()
    layer.load_param(ParamDict({int(k[1:]): v for k, v in params.items()}))  # type: ignore[arg-type]
    return layer


def run(layer: Layer, *inputs: np.ndarray) -> list[np.ndarray]:
    return forward_checked(layer, *inputs)


def rand(*shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape).astype(np.float32)


# ---------------------------------------------------------------- BinaryOp


def c_remainder(x: float, y: float) -> float:
    return math.remainder(x, y)


SCALAR_OPS = {
    0: lambda x, y: x + y,
    1: lambda x, y: x - y,
    2: lambda x, y: x * y,
    3: lambda x, y: x / y,
    4: max,
    5: min,
    6: lambda x, y: x**y,
    7: lambda x, y: y - x,
    8: lambda x, y: y / x,
    9: lambda x, y: y**x,
    10: math.atan2,
    11: lambda x, y: math.atan2(y, x),
    12: math.fmod,
    13: lambda x, y: math.fmod(y, x),
    14: lambda x, y: max(x, y) + math.log1p(math.exp(min(x, y) - max(x, y))),
    15: lambda x, y: math.floor(x / y),
    16: lambda x, y: math.floor(y / x),
    17: c_remainder,
    18: lambda x, y: c_remainder(y, x),
}


def operands(op: int, shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> tuple:
    """Positive, well-away-from-zero values keep pow/div/fmod defined for every op."""
    if op in (6, 9):
        return rand(*shape_a, low=0.5, high=2.0), rand(*shape_b, low=0.5, high=2.0)
    a = rand(*shape_a, low=0.5, high=3.0) * np.where(RNG.random(shape_a) < 0.5, -1, 1)
    b = rand(*shape_b, low=0.5, high=3.0) * np.where(RNG.random(shape_b) < 0.5, -1, 1)
    return a.astype(np.float32), b.astype(np.float32)


def ncnn_whdc(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    if len(shape) == 1:
        return shape[0], 1, 1, 1
    if len(shape) == 2:
        return shape[1], shape[0], 1, 1
    if len(shape) == 3:
        return shape[2], shape[1], 1, shape[0]
    return shape[3], shape[2], shape[1], shape[0]


def ncnn_expand(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, int, int, int]:
    """A's (w, h, d, c) after BinaryOp::forward's reshape, written from the C++ branches."""
    aw, ah, ad, ac = ncnn_whdc(a)
    _, bh, _, bc = ncnn_whdc(b)
    adims, outdims = len(a), max(len(a), len(b))
    if adims == outdims:
        return aw, ah, ad, ac
    if outdims == 2:
        return (1, aw, 1, 1) if aw == bh else (aw, 1, 1, 1)
    if outdims == 3 and adims == 1:
        return (1, 1, 1, aw) if aw == bc else (aw, 1, 1, 1)
    if outdims == 3 and adims == 2:
        return (1, aw, 1, ah)
    if outdims == 4 and adims == 1:
        return (1, 1, 1, aw) if aw == bc else (aw, 1, 1, 1)
    if outdims == 4 and adims == 2:
        return (1, 1, aw, ah)
    return (1, aw, ah, ac)


def loop_binary(op: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """binary_op_broadcast's loop: clamp each index to the operand's size."""
    aw, ah, ad, ac = ncnn_expand(a.shape, b.shape)
    bw, bh, bd, bc = ncnn_expand(b.shape, a.shape)
    ow, oh, od, oc = max(aw, bw), max(ah, bh), max(ad, bd), max(ac, bc)
    a4 = a.reshape(ac, ad, ah, aw)
    b4 = b.reshape(bc, bd, bh, bw)
    out = np.zeros((oc, od, oh, ow), dtype=np.float64)
    f = SCALAR_OPS[op]
    for q, z, y, x in itertools.product(range(oc), range(od), range(oh), range(ow)):
        va = a4[min(q, ac - 1), min(z, ad - 1), min(y, ah - 1), x if aw > 1 else 0]
        vb = b4[min(q, bc - 1), min(z, bd - 1), min(y, bh - 1), x if bw > 1 else 0]
        out[q, z, y, x] = f(float(va), float(vb))
    dims = max(a.ndim, b.ndim)
    shape = {1: (ow,), 2: (oh, ow), 3: (oc, oh, ow), 4: (oc, od, oh, ow)}[dims]
    return out.reshape(shape)


FULL = {1: (5,), 2: (4, 5), 3: (3, 4, 5), 4: (2, 3, 4, 5)}


def broadcast_cases() -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    cases: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for big in (2, 3, 4):
        full = FULL[big]
        # 1-D against the outer axis (h for 2-D, c otherwise), against w, and a scalar-like 1
        cases += [((full[0],), full), ((full[-1],), full), ((1,), full)]
    cases += [((3, 4), FULL[3]), ((1, 4), FULL[3]), ((3, 1), FULL[3])]
    cases += [((2, 3), FULL[4]), ((2, 1), FULL[4])]
    cases += [((2, 3, 4), FULL[4]), ((1, 3, 1), FULL[4])]
    # a 1-D blob whose length equals both c and w follows the c rule
    cases += [((4,), (4, 2, 4))]
    for dims in (1, 2, 3, 4):
        full = FULL[dims]
        for mask in itertools.product((0, 1), repeat=dims):
            cases.append((tuple(1 if m else n for m, n in zip(mask, full, strict=True)), full))
    return cases + [(b, a) for a, b in cases]


@pytest.mark.parametrize("op", range(19))
def test_binaryop_every_op(op: int) -> None:
    a, b = operands(op, (2, 3, 4), (2, 3, 4))
    (out,) = run(make("BinaryOp", p0=op), a, b)
    np.testing.assert_allclose(out, loop_binary(op, a, b), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize(("shape_a", "shape_b"), broadcast_cases())
def test_binaryop_broadcast(shape_a: tuple[int, ...], shape_b: tuple[int, ...]) -> None:
    for op in (1, 3, 8):  # asymmetric ops expose swapped operands
        a, b = operands(op, shape_a, shape_b)
        (out,) = run(make("BinaryOp", p0=op), a, b)
        np.testing.assert_allclose(out, loop_binary(op, a, b), rtol=1e-6, atol=1e-6)


def test_binaryop_broadcast_hand_values() -> None:
    a = np.array([10.0, 20.0, 30.0], dtype=np.float32)  # length == c: one value per channel
    b = np.zeros((3, 2, 2), dtype=np.float32)
    (out,) = run(make("BinaryOp", p0=0), a, b)
    np.testing.assert_array_equal(out[:, 0, 0], a)
    np.testing.assert_array_equal(out[1], np.full((2, 2), 20.0))
    m = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)  # (h=2,w=2) -> (c=2,h=2,w=1)
    (out,) = run(make("BinaryOp", p0=0), np.zeros((2, 2, 3), dtype=np.float32), m)
    np.testing.assert_array_equal(out[1, 0], [3.0, 3.0, 3.0])


def test_binaryop_rejects_mismatch() -> None:
    with pytest.raises(ValueError):
        make("BinaryOp", p0=0).forward([rand(3, 4), rand(3, 5)])
    with pytest.raises(ValueError, match="param 0"):
        make("BinaryOp", p0=19)


@pytest.mark.parametrize("op", range(19))
def test_binaryop_scalar(op: int) -> None:
    a, _ = operands(op, (2, 3, 4), (1,))
    scalar = 1.5 if op not in (6, 9) else 0.75
    (out,) = run(make("BinaryOp", p0=op, p1=1, p2=scalar), a)
    f = SCALAR_OPS[op]
    want = np.vectorize(lambda v: f(float(v), scalar))(a)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)


# ---------------------------------------------------------------- Eltwise


def test_eltwise() -> None:
    xs = [rand(2, 3, 4) for _ in range(3)]
    (out,) = run(make("Eltwise", p0=0), *xs)
    np.testing.assert_allclose(out, xs[0] * xs[1] * xs[2], rtol=1e-6)
    (out,) = run(make("Eltwise", p0=1), *xs)
    np.testing.assert_allclose(out, xs[0] + xs[1] + xs[2], rtol=1e-6, atol=1e-6)
    (out,) = run(make("Eltwise", p0=1, p1=(0.5, -2.0, 3.0)), *xs)
    want = np.zeros(xs[0].shape)
    for idx in np.ndindex(*want.shape):
        want[idx] = 0.5 * xs[0][idx] - 2.0 * xs[1][idx] + 3.0 * xs[2][idx]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    (out,) = run(make("Eltwise", p0=2), *xs)
    np.testing.assert_array_equal(out, np.max(np.stack(xs), axis=0))
    with pytest.raises(ValueError):
        make("Eltwise", p0=1).forward([xs[0], rand(2, 3, 5)])


# ---------------------------------------------------------------- Reduction


def loop_reduce(op: int, x: np.ndarray, axes: tuple[int, ...], coeff: float) -> np.ndarray:
    """Gather each output cell's values by explicit index loops, then apply op in float64."""
    keep = [i for i in range(x.ndim) if i not in axes]
    out_shape = tuple(x.shape[i] for i in keep)
    out = np.zeros(out_shape if out_shape else (1,))
    groups: dict[tuple[int, ...], list[float]] = {}
    for idx in np.ndindex(*x.shape):
        groups.setdefault(tuple(idx[i] for i in keep), []).append(float(x[idx]))
    for key, vals in groups.items():
        v = np.array(vals)
        funcs = {
            0: lambda v: v.sum(),
            1: lambda v: np.abs(v).sum(),
            2: lambda v: (v * v).sum(),
            3: lambda v: v.mean(),
            4: lambda v: v.max(),
            5: lambda v: v.min(),
            6: lambda v: v.prod(),
            7: lambda v: np.abs(v).sum(),
            8: lambda v: math.sqrt((v * v).sum()),
            9: lambda v: math.log(v.sum()),
            10: lambda v: math.log(np.exp(v).sum()),
        }
        r = funcs[op](v)
        out[key if key else (0,)] = r * coeff
    return out


REDUCE_CASES = [
    ((5,), ()),
    ((3, 4), (0,)),
    ((3, 4), (1,)),
    ((3, 4), (0, 1)),
    ((2, 3, 4), (0,)),
    ((2, 3, 4), (1,)),
    ((2, 3, 4), (-1,)),
    ((2, 3, 4), (0, 1)),
    ((2, 3, 4), (0, 2)),
    ((2, 3, 4), (1, 2)),
    ((2, 3, 4), (0, 1, 2)),
    ((2, 3, 2, 4), (1,)),
    ((2, 3, 2, 4), (0, 3)),
    ((2, 3, 2, 4), (1, 2)),
    ((2, 3, 2, 4), (0, 1, 2)),
    ((2, 3, 2, 4), (-3, -2, -1)),
]


@pytest.mark.parametrize("op", range(11))
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduction(op: int, keepdims: int) -> None:
    for shape, axes in REDUCE_CASES:
        x = rand(*shape, low=0.5, high=1.5) if op == 9 else rand(*shape, low=-1.0, high=1.0)
        coeff = 1.0 if op == 3 else 0.5
        layer = make("Reduction", p0=op, p1=0, p2=coeff, p3=axes, p4=keepdims, p5=1)
        (out,) = run(layer, x)
        pos = tuple(sorted({a % len(shape) for a in axes})) if len(shape) > 1 else (0,)
        want = loop_reduce(op, x, pos, coeff)
        if keepdims:
            want = want.reshape(tuple(1 if i in pos else n for i, n in enumerate(shape)))
        assert out.shape == want.shape, (shape, axes)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_reduction_reduce_all() -> None:
    x = rand(2, 3, 4)
    (out,) = run(make("Reduction", p0=0, p1=1), x)
    assert out.shape == (1,)
    np.testing.assert_allclose(out[0], x.astype(np.float64).sum(), rtol=1e-5)
    (out,) = run(make("Reduction", p0=3, p1=1, p4=1), x)
    assert out.shape == (1, 1, 1)
    np.testing.assert_allclose(out.ravel()[0], x.astype(np.float64).mean(), rtol=1e-5)
    with pytest.raises(ValueError, match="param 5"):
        make("Reduction", p0=0, p1=0, p3=(0,))


# ---------------------------------------------------------------- Softmax


@pytest.mark.parametrize(
    ("shape", "axis"),
    [((5,), 0), ((3, 4), 0), ((3, 4), 1), ((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), 2)]
    + [((2, 3, 2, 4), a) for a in (0, 1, 2, 3, -1)],
)
def test_softmax(shape: tuple[int, ...], axis: int) -> None:
    x = rand(*shape, low=-3.0, high=3.0)
    (out,) = run(make("Softmax", p0=axis, p1=1), x)
    ax = axis % len(shape)
    want = np.zeros(shape)
    for idx in np.ndindex(*shape):
        line = [float(x[(*idx[:ax], k, *idx[ax + 1 :])]) for k in range(shape[ax])]
        m = max(line)
        want[idx] = math.exp(float(x[idx]) - m) / sum(math.exp(v - m) for v in line)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-7)


def test_softmax_old_param() -> None:
    with pytest.raises(ValueError, match="param 1"):
        make("Softmax", p0=1)
