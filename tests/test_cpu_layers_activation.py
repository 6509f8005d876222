"""The numpy activation, UnaryOp, per-channel affine and data layers against scalar math."""

from __future__ import annotations

import math

import numpy as np
import pytest
from layer_checks import FakeModelBin, forward_checked

from asyncvk.layers import layer_class
from asyncvk.layers._paramdict import ParamDict
from asyncvk.layers.activation import fused_activation
from asyncvk.layers.inputs import Input, MemoryData
from asyncvk.layers.normalization import BatchNorm

RNG = np.random.default_rng(7767517)
FLT_MAX = float(np.finfo(np.float32).max)


def make(type_name: str, params: dict, data: np.ndarray | None = None):
    cls = layer_class(type_name)
    assert cls is not None, type_name
    layer = cls()
    layer.load_param(ParamDict(params))
    if data is not None:
        layer.load_model(FakeModelBin(data))
    return layer


def run(layer, *xs: np.ndarray) -> np.ndarray:
    return forward_checked(layer, *xs)[0]


def sample(shape=(3, 5, 7), scale: float = 3.0) -> np.ndarray:
    x = (RNG.standard_normal(shape) * scale).astype(np.float32)
    edges = [0.0, -0.0, 25.0, -25.0, 100.0, -100.0][: x.size]
    x.reshape(-1)[: len(edges)] = edges
    return x


def elementwise(fn, x: np.ndarray) -> np.ndarray:
    return np.array([fn(float(v)) for v in x.reshape(-1)]).reshape(x.shape)


def sigmoid(v: float) -> float:
    v = min(max(v, -88.3762626647949), 88.3762626647949)
    return 1.0 / (1.0 + math.exp(-v))


def hardswish(v: float, a: float, b: float) -> float:
    lower = -b / a
    upper = 1.0 / a + lower
    return 0.0 if v < lower else v if v > upper else v * (v * a + b)


def softplus(v: float) -> float:
    return v + math.log1p(math.exp(-v)) if v > 0 else math.log1p(math.exp(v))


FUSED = [
    (0, (), lambda v: v),
    (1, (), lambda v: max(v, 0.0)),
    (2, (0.1,), lambda v: v if v > 0 else 0.1 * v),
    (3, (-1.5, 2.0), lambda v: min(max(v, -1.5), 2.0)),
    (4, (), sigmoid),
    (5, (), lambda v: v * math.tanh(softplus(v))),
    (6, (1 / 6, 0.5), lambda v: hardswish(v, 1 / 6, 0.5)),
]


@pytest.mark.parametrize(("t", "params", "fn"), FUSED)
def test_fused_activation(t, params, fn) -> None:
    x = sample()
    np.testing.assert_allclose(fused_activation(x, t, params), elementwise(fn, x), 1e-5, 1e-6)


def test_fused_activation_edge_cases() -> None:
    nan = np.array([np.nan], np.float32)
    assert fused_activation(nan, 1, ())[0] == 0.0  # fmaxf drops NaN
    # Clip with min > max: min first, then max wins, as ncnn's two ifs
    assert fused_activation(np.array([0.0], np.float32), 3, (5.0, 1.0))[0] == 1.0
    with pytest.raises(ValueError):
        fused_activation(nan, 7, ())


LAYERS = [
    ("ReLU", {}, lambda v: max(v, 0.0)),
    ("ReLU", {0: 0.2}, lambda v: v if v >= 0 else 0.2 * v),
    ("Clip", {0: -1.0, 1: 2.5}, lambda v: min(max(v, -1.0), 2.5)),
    ("Clip", {}, lambda v: v),
    ("Sigmoid", {}, sigmoid),
    ("TanH", {}, math.tanh),
    ("Swish", {}, lambda v: v * sigmoid(v)),
    ("HardSigmoid", {}, lambda v: min(max(0.2 * v + 0.5, 0.0), 1.0)),
    ("HardSigmoid", {0: 1 / 6, 1: 0.5}, lambda v: min(max(v / 6 + 0.5, 0.0), 1.0)),
    ("HardSwish", {}, lambda v: hardswish(v, 0.2, 0.5)),
    ("HardSwish", {0: 1 / 6, 1: 0.5}, lambda v: v * min(max(v / 6 + 0.5, 0.0), 1.0)),
    ("Mish", {}, lambda v: v * math.tanh(softplus(v))),
    ("ELU", {}, lambda v: v if v >= 0 else 0.1 * math.expm1(v)),
    ("ELU", {0: 1.0}, lambda v: v if v >= 0 else math.expm1(v)),
    ("GELU", {}, lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))),
    (
        "GELU",
        {0: 1},
        lambda v: 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))),
    ),
    ("Dropout", {}, lambda v: v),
    ("Dropout", {0: 0.75}, lambda v: 0.75 * v),
]


@pytest.mark.parametrize(("name", "params", "fn"), LAYERS)
@pytest.mark.parametrize("shape", [(7,), (3, 5), (3, 5, 7), (2, 3, 4, 5)])
def test_activation_layers(name, params, fn, shape) -> None:
    x = sample(shape)
    out = run(make(name, params), x)
    np.testing.assert_allclose(out, elementwise(fn, x), rtol=1e-5, atol=1e-6)


def test_relu_and_clip_keep_nan() -> None:
    nan = np.array([np.nan, -1.0], np.float32)
    assert np.isnan(run(make("ReLU", {}), nan)[0])
    assert np.isnan(run(make("Clip", {0: 0.0, 1: 1.0}), nan)[0])


def _sign(v: float) -> float:
    return 1.0 if v > 0 else -1.0 if v < 0 else 0.0


UNARY = {
    0: abs,
    1: lambda v: -v,
    2: math.floor,
    3: math.ceil,
    4: lambda v: v * v,
    5: math.sqrt,
    6: lambda v: 1 / math.sqrt(v),
    7: math.exp,
    8: math.log,
    9: math.sin,
    10: math.cos,
    11: math.tan,
    12: math.asin,
    13: math.acos,
    14: math.atan,
    15: lambda v: 1 / v,
    16: math.tanh,
    17: math.log10,
    18: round,  # Python's round is half to even, like nearbyintf
    19: math.trunc,
    20: _sign,
    21: math.expm1,
    22: math.sinh,
    23: math.asinh,
    24: math.cosh,
    25: math.acosh,
    26: math.atanh,
    27: math.log1p,
}
#: inputs inside each op's domain
DOMAIN = {5: (0.1, 9.0), 6: (0.1, 9.0), 8: (0.1, 9.0), 17: (0.1, 9.0), 12: (-0.95, 0.95),
          13: (-0.95, 0.95), 26: (-0.95, 0.95), 25: (1.05, 9.0), 27: (-0.9, 9.0),
          15: (0.2, 9.0)}  # fmt: skip


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unaryop(op) -> None:
    lo, hi = DOMAIN.get(op, (-4.0, 4.0))
    x = RNG.uniform(lo, hi, (3, 4, 5)).astype(np.float32)
    if op in (2, 3, 18, 19, 20):
        x.reshape(-1)[:6] = [2.5, -2.5, 3.5, -0.5, 0.0, 1.0]
    out = run(make("UnaryOp", {0: op}), x)
    np.testing.assert_allclose(out, elementwise(UNARY[op], x), rtol=2e-6, atol=1e-6)


def test_unaryop_rejects_unknown() -> None:
    with pytest.raises(ValueError, match="param 0"):
        make("UnaryOp", {0: 28})


def test_noop_passes_everything() -> None:
    a, b = sample((3,)), sample((2, 2))
    layer = make("Noop", {})
    out = layer.forward([a, b])
    assert [o.tolist() for o in out] == [a.tolist(), b.tolist()]
    assert layer.output_shapes([a.shape, b.shape]) == [(3,), (2, 2)]


# -- BatchNorm, Scale, Bias, PReLU ---------------------------------------------------------


@pytest.mark.parametrize("shape", [(5,), (5, 3), (5, 3, 4), (5, 2, 3, 4)])
def test_batchnorm(shape) -> None:
    n = shape[0]
    slope, mean, bias = (RNG.standard_normal(n).astype(np.float32) for _ in range(3))
    var = RNG.uniform(0.1, 2.0, n).astype(np.float32)
    var[0] = 0.0  # eps 0 and var 0: ncnn's sqrt_var 0 -> 0.0001
    mb = FakeModelBin(np.concatenate([slope, mean, var, bias]))
    layer = BatchNorm()
    layer.load_param(ParamDict({0: n, 1: 0.0}))
    layer.load_model(mb)
    assert mb.calls == [(n, 1)] * 4
    x = sample(shape)
    out = run(layer, x)
    for q in range(n):
        sv = math.sqrt(float(var[q])) or 0.0001
        expect = (x[q].astype(np.float64) - mean[q]) / sv * slope[q] + bias[q]
        np.testing.assert_allclose(out[q], expect, rtol=1e-4, atol=1e-3)
    layer_eps = make("BatchNorm", {0: n, 1: 1e-3}, np.concatenate([slope, mean, var, bias]))
    q = 1
    expect = (x[q] - mean[q]) / math.sqrt(float(var[q]) + 1e-3) * slope[q] + bias[q]
    np.testing.assert_allclose(run(layer_eps, x)[q], expect, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(4,), (4, 3), (4, 3, 5), (4, 2, 3, 2)])
def test_scale(shape) -> None:
    s, b = RNG.standard_normal(4).astype(np.float32), RNG.standard_normal(4).astype(np.float32)
    x = sample(shape)
    out = run(make("Scale", {0: 4, 1: 1}, np.concatenate([s, b])), x)
    for q in range(4):
        np.testing.assert_allclose(out[q], x[q] * s[q] + b[q], rtol=1e-6, atol=1e-6)
    out2 = run(make("Scale", {0: 4}, s), x)
    for q in range(4):
        np.testing.assert_allclose(out2[q], x[q] * s[q], rtol=1e-6)
    two = make("Scale", {0: -233})
    assert not two.one_blob_only
    out3 = run(two, x, s)
    np.testing.assert_allclose(out3, out2)
    with pytest.raises(ValueError, match="param 1"):
        make("Scale", {0: -233, 1: 1})


def test_bias() -> None:
    b = np.array([1.0, -2.0, 3.0], np.float32)
    x = sample((3, 2, 4))
    out = run(make("Bias", {0: 3}, b), x)
    for q in range(3):
        np.testing.assert_allclose(out[q], x[q] + b[q])
    # dims 1 and 2 are one ncnn channel: bias[0] everywhere
    y = sample((3, 2))
    np.testing.assert_allclose(run(make("Bias", {0: 3}, b), y), y + 1.0)


@pytest.mark.parametrize("shape", [(4,), (4, 3), (4, 3, 5), (4, 2, 3, 2)])
def test_prelu(shape) -> None:
    slopes = np.array([0.1, -0.5, 2.0, 0.0], np.float32)
    x = sample(shape)
    out = run(make("PReLU", {0: 4}, slopes), x)
    for q in range(4):
        np.testing.assert_allclose(out[q], np.where(x[q] < 0, x[q] * slopes[q], x[q]))
    one = run(make("PReLU", {0: 1}, slopes[:1]), x)
    np.testing.assert_allclose(one, np.where(x < 0, 0.1 * x, x).astype(np.float32))


# -- Input, MemoryData ---------------------------------------------------------------------


def test_input() -> None:
    layer = Input()
    layer.load_param(ParamDict({0: 7, 1: 5, 2: 3}))
    assert layer.output_shapes([]) == [(3, 5, 7)]
    x = sample((3, 5, 7))
    np.testing.assert_array_equal(run(layer, x), x)


@pytest.mark.parametrize(
    ("params", "shape"),
    [({0: 5}, (5,)), ({0: 5, 1: 3}, (3, 5)), ({0: 4, 1: 3, 2: 2}, (2, 3, 4)),
     ({0: 4, 1: 3, 11: 2, 2: 2}, (2, 2, 3, 4))],
)  # fmt: skip
def test_memorydata(params, shape) -> None:
    data = RNG.standard_normal(int(np.prod(shape))).astype(np.float32)
    mb = FakeModelBin(data)
    layer = MemoryData()
    layer.load_param(ParamDict(params))
    layer.load_model(mb)
    assert mb.calls == [(data.size, 1)]
    out = layer.forward([])
    assert layer.output_shapes([]) == [shape] == [out[0].shape]
    np.testing.assert_array_equal(out[0].reshape(-1), data)
    out[0][...] = 0  # the layer hands out a copy
    np.testing.assert_array_equal(layer.forward([])[0].reshape(-1), data)
    typed = MemoryData()
    typed.load_param(ParamDict(params | {21: 0}))
    mb0 = FakeModelBin(data)
    typed.load_model(mb0)
    assert mb0.calls == [(data.size, 0)]
